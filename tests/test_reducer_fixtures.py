"""The official reducer fixtures (bundled copy in ``agenthost_protocol/_corpus/reducers``).

Each file is ``{description, reducer, initial, actions, expected}``.  The
actions are applied in order by the named reducer with the clock fixed at
9999 ms (the TypeScript runner's ``Date.now``), and the result is compared
with ``expected``.  ``null`` in a fixture stands for an absent value, so null
keys are dropped on both sides before comparing (as the Go and Rust runners
do).  Every ``initial`` and ``expected`` must also survive a decode/encode
round trip, which checks that the typed model loses nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import wire
from agenthost_protocol.channels import ChannelKind
from agenthost_protocol.conformance import bundled_corpus, strip_nulls
from agenthost_protocol.reducers import REDUCERS, STATE_TYPES
from agenthost_protocol.types import UnknownAction

CORPUS = bundled_corpus() / "reducers"
FIXTURES = sorted(CORPUS.glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return fixture


def test_corpus_is_complete() -> None:
    assert len(FIXTURES) == 247
    kinds = Counter(_load(path)["reducer"] for path in FIXTURES)
    assert kinds == {  # inventory §9.1
        "chat": 123, "session": 70, "terminal": 19, "changeset": 16, "annotations": 10,
        "root": 7, "resourceWatch": 2,
    }
    assert set(kinds) == {kind.value for kind in REDUCERS}


@pytest.mark.parametrize("path", FIXTURES, ids=[path.stem for path in FIXTURES])
def test_reducer_fixture(path: Path) -> None:
    fixture = _load(path)
    kind = ChannelKind(fixture["reducer"])
    reducer, state_type = REDUCERS[kind], STATE_TYPES[kind]
    unknown: list[UnknownAction] = []

    state = wire.structure(fixture["initial"], state_type)
    actions = [wire.parse_action(raw) for raw in fixture["actions"]]
    for action in actions:
        state = reducer(state, action, now=lambda: 9999, on_unknown=unknown.append)

    assert isinstance(state, state_type)
    assert strip_nulls(wire.dump(state)) == strip_nulls(fixture["expected"])
    assert unknown == [action for action in actions if isinstance(action, UnknownAction)]


@pytest.mark.parametrize("path", FIXTURES, ids=[path.stem for path in FIXTURES])
def test_fixture_states_round_trip(path: Path) -> None:
    fixture = _load(path)
    state_type = STATE_TYPES[ChannelKind(fixture["reducer"])]
    for key in ("initial", "expected"):
        decoded = wire.structure(fixture[key], state_type)
        assert strip_nulls(wire.dump(decoded)) == strip_nulls(fixture[key]), key
