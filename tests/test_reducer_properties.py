"""Reducers are total, deterministic and pure on generated states and actions.

States and actions come from ``agenthost_protocol.testing.strategies``, so they
include unknown variants, unknown enum values and status bits, and actions in
any order (most of them out of lifecycle).  ``tests/test_chat_reducer.py`` and
``tests/test_reducers.py`` add sequences built from the corpus' own ids, which
reach deeper into the lifecycles.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.channels import ACTION_UNIONS, ChannelKind
from agenthost_protocol.reducers import REDUCERS, STATE_TYPES
from agenthost_protocol.testing import strategies as ahst

KINDS = sorted(STATE_TYPES, key=lambda k: k.value)
SETTINGS = settings(
    max_examples=max(10, settings().max_examples // 2),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    deadline=None,
)


def _clock() -> int:
    return 1_767_225_600_000


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
@SETTINGS
@given(data=st.data())
def test_generated_sequences_never_raise_and_replay_identically(
    kind: ChannelKind, data: st.DataObject
) -> None:
    reducer = REDUCERS[kind]
    initial = data.draw(ahst.states(STATE_TYPES[kind], max_depth=2), label="initial")
    # Mostly this channel's actions, some of other channels (which must be no-ops).
    actions = data.draw(
        st.lists(
            st.one_of(ahst.actions(kind, max_depth=2), ahst.actions(max_depth=2)),
            max_size=12,
        ),
        label="actions",
    )
    before = wire.unstructure(initial)
    unknown: list[Any] = []

    def run() -> Any:
        state = initial
        for action in actions:
            new = reducer(state, action, now=_clock, on_unknown=unknown.append)
            if not isinstance(action, tuple(_own_actions(kind))):
                assert new is state, f"{action.type} is not a {kind.value} action"
            state = new
        return state

    first = run()
    assert run() == first
    assert wire.unstructure(initial) == before, "a reducer modified its input"
    assert isinstance(first, STATE_TYPES[kind])
    assert wire.structure(wire.unstructure(first), STATE_TYPES[kind]) == first


def _own_actions(kind: ChannelKind) -> tuple[type, ...]:
    return tuple(c for c in get_args(ACTION_UNIONS[kind]) if c is not t.UnknownAction)
