"""The reducer of the root channel ``ahp-root://`` (``RootState``).

Spec: four ``root/*`` actions.  ``root/agentsChanged`` and
``root/terminalsChanged`` replace their lists wholesale,
``root/activeSessionsChanged`` sets the count and ``root/configChanged``
merges into (or, with ``replace``, replaces) ``config.values``; it is a no-op
when the host has no ``config``.  Root actions carry no timestamp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, get_args

from typing_extensions import TypeIs, assert_never

from .._json import json_equal
from ..types import (
    RootAction,
    RootActiveSessionsChangedAction,
    RootAgentsChangedAction,
    RootConfigChangedAction,
    RootState,
    RootTerminalsChangedAction,
    StateAction,
    UnknownAction,
)
from ._clock import Clock
from ._copy import evolve

__all__ = ["root_reducer"]

# Exact classes, as the chat reducer routes: a set lookup, not an ``isinstance`` per class.
_ROOT_ACTIONS: Final[frozenset[type]] = frozenset(get_args(RootAction))


def _is_root_action(action: StateAction) -> TypeIs[RootAction]:
    return type(action) in _ROOT_ACTIONS


def root_reducer(
    state: RootState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: Callable[[UnknownAction], None] | None = None,
) -> RootState:
    """Apply one action to the root state and return the new state.

    Pure: ``state`` is never modified.  Actions of other channels and
    :class:`~agenthost_protocol.types.UnknownAction` (after calling
    ``on_unknown``) return ``state`` itself, as does every action that changes
    nothing.  ``now`` is accepted for a uniform signature; root actions carry
    no timestamp.
    """
    if not _is_root_action(action):
        return state
    match action:
        case RootAgentsChangedAction(agents=agents):
            if state.agents == agents:
                return state
            return evolve(state, agents=agents)
        case RootActiveSessionsChangedAction(active_sessions=count):
            if state.active_sessions == count:
                return state
            return evolve(state, active_sessions=count)
        case RootTerminalsChangedAction(terminals=terminals):
            if state.terminals == terminals:
                return state
            return evolve(state, terminals=terminals)
        case RootConfigChangedAction(config=values, replace=replace):
            config = state.config
            if config is None:
                return state
            merged = dict(values) if replace else {**config.values, **values}
            if json_equal(merged, config.values):  # JSON equality: ``true`` is not ``1``
                return state
            return evolve(state, config=evolve(config, values=merged))
        case UnknownAction():
            if on_unknown is not None:
                on_unknown(action)
            return state
        case _:
            assert_never(action)
