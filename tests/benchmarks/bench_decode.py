"""Decoding ``action`` lines: ``parse_message`` against ``json.loads`` and the TypeScript reference.

The stream of ``bench_stream`` (227 actions a turn) as ``action`` notification
lines, one JSON text each, as in ``bench_wire``.  Timed per line, CPU time of
this process (``--wall`` for the wall clock), the median of ``--repeat`` runs,
every variant run in turn within each round:

* ``json.loads(line)`` and, with the ``fast`` extra installed, ``orjson.loads(line)``;
* ``wire.parse_message(line)`` with each JSON backend (the standard library's,
  and orjson when installed);
* ``parse_message`` + ``chat_reducer`` per action, with each backend;
* one line of each action type of the stream on its own (20,000 times):
  ``json.loads`` against ``parse_message``.

Goals: ``parse_message`` of a line at most 2 times ``json.loads`` of it with
the standard library alone; with orjson, decode + reduce at most 2.0 times
the TypeScript reference's ``JSON.parse`` + ``chatReducer`` (it was
2.5).

``--baseline DIR`` also times an older copy of the package (``DIR`` holds its
``agenthost_protocol`` folder, e.g. from ``git archive REV agenthost_protocol``),
loaded side by side under another name: before and after in one run.
``--node-reducer FILE`` runs the TypeScript reference on the same lines with
``node --expose-gc tests/benchmarks/ts_reference/decode_reduce.mjs`` (``FILE``
is the bundled official reducer; see docs/performance.md), in every round
after the Python loops, so that each round gives a ratio measured under the
same load; the median of the rounds' ratios is printed.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_decode [--turns 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from agenthost_protocol import wire
from agenthost_protocol.reducers.chat import chat_reducer

from ._stream import CHANNEL, add_timer_option, check_final, clock, initial_state, stream, timer
from .bench_wire import encode

Loop = Callable[[list[bytes]], None]
HERE = Path(__file__).parent
NODE_RUNS = 3
"""Runs of each loop in each round's node process; the best is kept (the first warms up)."""


def load_baseline(directory: str) -> ModuleType:
    """An older ``agenthost_protocol`` package from ``directory``, imported as another package."""
    init = Path(directory) / "agenthost_protocol" / "__init__.py"
    name = "agenthost_protocol_baseline"
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[str(init.parent)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return package


def decode_loop(parse: Callable[[bytes], Any]) -> Loop:
    def run(lines: list[bytes]) -> None:
        for line in lines:
            parse(line)

    return run


def decode_reduce_loop(
    parse: Callable[[bytes], Any], reducer: Callable[..., Any], start: Callable[[], Any],
    check: Callable[[Any], None],
) -> Loop:
    def run(lines: list[bytes]) -> None:
        state = start()
        for line in lines:
            state = reducer(state, parse(line).params.action, now=clock)
        check(state)

    return run


def with_backend(backend: Any, loop: Loop) -> Loop:
    """``loop`` with ``wire``'s JSON backend set to ``backend`` (restored after)."""

    def run(lines: list[bytes]) -> None:
        saved = wire._JSON
        vars(wire)["_JSON"] = backend
        try:
            loop(lines)
        finally:
            vars(wire)["_JSON"] = saved

    return run


def measure(
    loops: dict[str, tuple[Loop, list[bytes]]], repeat: int, now: Callable[[], float]
) -> dict[str, list[float]]:
    """Seconds per line of each loop, each round running every loop once, in turn."""
    times: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(repeat):
        for name, (loop, lines) in loops.items():
            gc.collect()
            start = now()
            loop(lines)
            times[name].append((now() - start) / len(lines))
    return times


def node_reference(reducer: str, lines: list[bytes], repeat: int, turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lines.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        out = subprocess.run(
            ["node", "--expose-gc", str(HERE / "ts_reference" / "decode_reduce.mjs"),
             str(Path(reducer).resolve()), str(path), str(repeat), str(turns)],
            check=True, capture_output=True, text=True,
        ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100, help="turns of 227 actions")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the median is reported")
    parser.add_argument("--baseline", metavar="DIR", help="also time the package copy in DIR")
    parser.add_argument("--node-reducer", metavar="FILE",
                        help="also run the TypeScript reference (bundled reducer FILE)")
    parser.add_argument("--write-lines", metavar="FILE", help="write the lines to FILE and exit")
    add_timer_option(parser)
    args = parser.parse_args()
    now = timer(args)
    lines = encode(stream(args.turns))
    if args.write_lines:
        Path(args.write_lines).write_bytes(b"\n".join(lines) + b"\n")
        return
    count, size = len(lines), sum(map(len, lines))
    by_type: dict[str, bytes] = {}
    for line in lines:  # the last line of each action type (the longest ids and numbers)
        by_type[json.loads(line)["params"]["action"]["type"]] = line
    stdlib: Any = wire._StdlibJson()
    backends: dict[str, Any] = {"json": stdlib}
    orjson: Any
    try:
        orjson = importlib.import_module("orjson")  # the ``fast`` extra
    except ImportError:
        orjson = None
    else:
        backends["orjson"] = wire._OrjsonJson(orjson)

    def check(state: Any) -> None:
        check_final(state, args.turns)

    loops: dict[str, tuple[Loop, list[bytes]]] = {
        "json.loads": (decode_loop(json.loads), lines),
    }
    if orjson is not None:
        loops["orjson.loads"] = (decode_loop(orjson.loads), lines)
    for name, backend in backends.items():
        loops[f"parse_message [{name}]"] = (
            with_backend(backend, decode_loop(wire.parse_message)), lines
        )
        loops[f"parse_message + chat_reducer [{name}]"] = (
            with_backend(backend, decode_reduce_loop(
                wire.parse_message, chat_reducer, initial_state, check
            )),
            lines,
        )
    for kind, line in by_type.items():
        loops[f"{kind}: json.loads"] = (decode_loop(json.loads), [line] * 20_000)
        loops[f"{kind}: parse_message [json]"] = (
            with_backend(stdlib, decode_loop(wire.parse_message)), [line] * 20_000
        )
    if args.baseline:
        base = load_baseline(args.baseline)
        base_wire = importlib.import_module(f"{base.__name__}.wire")
        base_chat = importlib.import_module(f"{base.__name__}.reducers.chat")
        base_types = importlib.import_module(f"{base.__name__}.types")

        def base_state() -> Any:
            return base_types.ChatState(
                resource=CHANNEL, title="Benchmark chat", status=base_types.SessionStatus.IDLE,
                modified_at="2025-06-15T12:00:00.000Z", turns=(),
            )

        def base_check(state: Any) -> None:
            assert state.active_turn is None and len(state.turns) == args.turns

        loops["baseline parse_message"] = (decode_loop(base_wire.parse_message), lines)
        loops["baseline parse_message + chat_reducer"] = (
            decode_reduce_loop(base_wire.parse_message, base_chat.chat_reducer, base_state,
                               base_check),
            lines,
        )
    measure(loops, 1, now)  # warm-up round: every hook built, every path taken
    # Round after round: every loop here, then the reference in node, so that
    # both sides of a ratio are timed under the same load.
    times: dict[str, list[float]] = {name: [] for name in loops}
    refs: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        for name, ts in measure(loops, 1, now).items():
            times[name] += ts
        if args.node_reducer:
            refs.append(node_reference(args.node_reducer, lines, NODE_RUNS, args.turns))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"{count:,} lines, {size / count:.0f} bytes/line on average; "
          f"{'wall-clock' if args.wall else 'CPU'} time, median of "
          f"{args.repeat} rounds (best in brackets)")
    for name, ts in times.items():
        print(f"  {name:<42} {med[name] * 1e9:>8,.0f} ns/line  ({min(ts) * 1e9:,.0f})")
    print("ratios (medians):")
    print(f"  parse_message [json] / json.loads, stream:   "
          f"{med['parse_message [json]'] / med['json.loads']:.2f}  (goal: at most 2)")
    for kind, line in by_type.items():
        ratio = med[f"{kind}: parse_message [json]"] / med[f"{kind}: json.loads"]
        print(f"  parse_message [json] / json.loads, one {kind} line ({len(line)} bytes): "
              f"{ratio:.2f}")
    if args.baseline:
        print(f"  baseline parse_message / json.loads, stream: "
              f"{med['baseline parse_message'] / med['json.loads']:.2f}")
        print(f"  baseline / now, parse_message + chat_reducer: "
              f"{med['baseline parse_message + chat_reducer'] / med[f'parse_message + chat_reducer [{next(reversed(backends))}]']:.2f}")  # noqa: E501
    if refs:
        key = "wall_best" if args.wall else "cpu_best"
        both = [ref["JSON.parse + chatReducer"][key] for ref in refs]
        print(f"TypeScript reference (node {refs[0]['node']}), median of {args.repeat} rounds "
              f"(each the best of {NODE_RUNS} runs); ratios: median of the rounds' (range)")
        for name in ("JSON.parse + chatReducer", "JSON.parse", "chatReducer"):
            ns = statistics.median(ref[name][key] for ref in refs) * 1e9
            print(f"  {name:<42} {ns:>8,.0f} ns/line")
        ours_names = [f"parse_message + chat_reducer [{name}]" for name in backends]
        if args.baseline:
            ours_names.append("baseline parse_message + chat_reducer")
        for name in ours_names:
            ratios = [a / b for a, b in zip(times[name], both, strict=True)]
            goal = "  (goal: at most 2.0)" if name.endswith("[orjson]") else ""
            print(f"  {name} / reference: {statistics.median(ratios):.2f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f}){goal}")


if __name__ == "__main__":
    main()
