"""The conformance runner: checks this library against an AHP test corpus.

A corpus has the upstream layout: ``PATH/reducers/*.json`` (reducer cases:
``{description, reducer, initial, actions, expected}``) and
``PATH/round-trips/*.json`` (``{name, group, type, input, acceptableOutputs}``);
either folder may be absent.  Cases of your own in the same format run too.

* A round-trip case decodes ``input`` as ``type`` and re-encodes it; the result
  must equal ``acceptableOutputs[0]`` exactly, key presence included (``null``
  is not absent).  Group B cases (unknown keys on a known struct) are held to
  the same canonical form: typed decoding drops the unknown keys.
* A reducer case decodes ``initial`` as the reducer's state and each action,
  applies them with the clock fixed at 9999 ms, and compares the re-encoded
  result with ``expected``, ``null``-valued keys dropped on both sides (a
  fixture ``null`` means absent).

The bundled copy of the official corpus (AHP 0.7.0) is used when no path is
given: :func:`bundled_corpus`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from attrs import frozen

from . import reducers, wire
from . import types as t
from ._json import json_equal
from .channels import STATE_TYPES as CHANNEL_STATE_TYPES
from .channels import ChannelKind
from .errors import ProtocolError

__all__ = [
    "FIXTURE_NOW_MS",
    "corpus_problem",
    "STATE_TYPES",
    "CaseResult",
    "bundled_corpus",
    "json_equal",
    "resolve_type",
    "run_corpus",
    "run_reducer_case",
    "run_round_trip_case",
    "strip_nulls",
]

FIXTURE_NOW_MS = 9999
"""The clock of the reducer corpus, in epoch milliseconds."""

STATE_TYPES: Mapping[str, type] = {kind.value: cls for kind, cls in CHANNEL_STATE_TYPES.items()}
"""Reducer name (as used by the corpus and ``agenthost-protocol reduce``) -> state type."""

# Names the SDKs use for types the TypeScript sources leave unnamed.
_SDK_TYPE_NAMES: Mapping[str, Any] = {
    "JsonRpcMessage": t.JsonRpcMessage,
    "PartialSessionSummary": t.PartialSessionSummary,
    "StateAction": t.StateAction,
}


@frozen
class CaseResult:
    """The outcome of one case."""

    name: str
    """The file name (or ``name`` field) of the case."""
    kind: str
    """``"reducer"`` or ``"round-trip"``."""
    passed: bool
    message: str = ""
    """Why it failed."""


def bundled_corpus() -> Path:
    """The folder of the official corpus bundled with the library."""
    return Path(str(resources.files("agenthost_protocol") / "_corpus"))


def resolve_type(name: str) -> Any:
    """The model type called ``name``: a spec type, union or alias, or an SDK name."""
    if name in _SDK_TYPE_NAMES:
        return _SDK_TYPE_NAMES[name]
    if name in t.__all__:
        return getattr(t, name)
    raise KeyError(name)


def strip_nulls(value: Any) -> Any:
    """Drop ``null``-valued keys, recursively (fixture ``null`` means absent)."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def _first_difference(a: Any, b: Any, path: str = "$") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(a.keys() | b.keys()):
            if k not in a:
                return f"{path}.{k}: missing, expected {json.dumps(b[k])[:120]}"
            if k not in b:
                return f"{path}.{k}: unexpected {json.dumps(a[k])[:120]}"
            if not json_equal(a[k], b[k]):
                return _first_difference(a[k], b[k], f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items, expected {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if not json_equal(x, y):
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: got {json.dumps(a)[:120]}, expected {json.dumps(b)[:120]}"


_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, RecursionError)
"""What a malformed case file (``"actions": 5``, a 100,000-deep value) raises."""


_Runner = Callable[[str, Mapping[str, Any]], CaseResult]


def _guarded(kind: str) -> Callable[[_Runner], _Runner]:
    """A malformed case is reported as that case's failure, never raised."""

    def decorate(run: _Runner) -> _Runner:
        @functools.wraps(run)
        def guarded(name: str, case: Mapping[str, Any]) -> CaseResult:
            try:
                return run(name, case)
            except _MALFORMED as e:
                message = f"malformed case: {type(e).__name__}: {e}"
                return CaseResult(name, kind, False, message)

        return guarded

    return decorate


@_guarded("round-trip")
def run_round_trip_case(name: str, case: Mapping[str, Any]) -> CaseResult:
    """Decode ``input`` as ``type``, re-encode, compare with ``acceptableOutputs[0]``."""
    try:
        outputs = case["acceptableOutputs"]
        tp = resolve_type(case["type"])
        encoded = wire.unstructure(wire.structure(case["input"], tp))
    except KeyError as e:
        return CaseResult(name, "round-trip", False, f"malformed case or unknown type: {e}")
    except ProtocolError as e:
        return CaseResult(name, "round-trip", False, f"decoding failed: {e}")
    if not isinstance(outputs, list) or len(outputs) != 1:
        return CaseResult(
            name, "round-trip", False, "acceptableOutputs must hold exactly one entry"
        )
    if json_equal(encoded, outputs[0]):
        return CaseResult(name, "round-trip", True)
    return CaseResult(name, "round-trip", False, _first_difference(encoded, outputs[0]))


@_guarded("reducer")
def run_reducer_case(name: str, case: Mapping[str, Any]) -> CaseResult:
    """Apply ``actions`` to ``initial`` with the named reducer; compare with ``expected``."""
    try:
        kind = ChannelKind(case["reducer"])
        state_type = STATE_TYPES[kind.value]
        reducer = reducers.REDUCERS[kind]
        state: t.SnapshotState = wire.structure(case["initial"], state_type, path=("initial",))
        actions = [
            wire.structure(a, t.StateAction, path=("actions", i))
            for i, a in enumerate(case["actions"])
        ]
        expected = case["expected"]
    except (KeyError, ValueError) as e:
        return CaseResult(name, "reducer", False, f"malformed case: {e!r}")
    except ProtocolError as e:
        return CaseResult(name, "reducer", False, f"decoding failed: {e}")
    for action in actions:
        state = reducer(state, action, now=lambda: FIXTURE_NOW_MS)
    got = strip_nulls(wire.unstructure(state))
    want = strip_nulls(expected)
    if json_equal(got, want):
        return CaseResult(name, "reducer", True)
    return CaseResult(name, "reducer", False, _first_difference(got, want))


def _cases(folder: Path) -> Iterator[tuple[str, Any]]:
    for file in sorted(folder.glob("*.json")):
        try:
            yield file.name, wire.parse_json(file.read_bytes())
        except OSError as e:
            yield file.name, e
        except ProtocolError as e:
            yield file.name, ValueError(str(e))


def corpus_problem(path: Path | str) -> str | None:
    """Why ``path`` is not a corpus (missing, or no case in either folder), or ``None``."""
    root = Path(path)
    if not root.is_dir():
        return f"{root} is not a folder"
    if not any(next((root / sub).glob("*.json"), None) for sub in ("reducers", "round-trips")):
        return f"{root} holds no corpus: no reducers/*.json nor round-trips/*.json"
    return None


def run_corpus(path: Path | str | None = None) -> list[CaseResult]:
    """Run every case under ``path`` (default: the bundled corpus)."""
    root = Path(path) if path is not None else bundled_corpus()
    results: list[CaseResult] = []
    for sub, kind, runner in (
        ("reducers", "reducer", run_reducer_case),
        ("round-trips", "round-trip", run_round_trip_case),
    ):
        for name, case in _cases(root / sub):
            if isinstance(case, Exception) or not isinstance(case, dict):
                results.append(CaseResult(name, kind, False, f"unreadable case: {case!r}"))
                continue
            results.append(runner(name, case))
    return results


def summary_line(results: Iterable[CaseResult]) -> str:
    """``N passed, M failed``."""
    results = list(results)
    passed = sum(r.passed for r in results)
    return f"{passed} passed, {len(results) - passed} failed"
