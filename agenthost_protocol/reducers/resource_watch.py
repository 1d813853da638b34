"""The reducer of a resource-watch channel ``ahp-resource-watch:/<id>``.

``ResourceWatchState`` is an immutable descriptor of what is watched; the one
action, ``resourceWatch/changed``, delivers change events that subscribers
consume straight off the action stream.  The reducer therefore never changes
state: it exists so every stateful channel has one, and so a new
``resourceWatch/*`` action without a case is a type error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, get_args

from typing_extensions import TypeIs, assert_never

from ..types import (
    ResourceWatchAction,
    ResourceWatchChangedAction,
    ResourceWatchState,
    StateAction,
    UnknownAction,
)
from ._clock import Clock

__all__ = ["resource_watch_reducer"]

# Exact classes, as the chat reducer routes: a set lookup, not an ``isinstance`` per class.
_RESOURCE_WATCH_ACTIONS: Final[frozenset[type]] = frozenset(get_args(ResourceWatchAction))


def _is_resource_watch_action(action: StateAction) -> TypeIs[ResourceWatchAction]:
    return type(action) in _RESOURCE_WATCH_ACTIONS


def resource_watch_reducer(
    state: ResourceWatchState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: Callable[[UnknownAction], None] | None = None,
) -> ResourceWatchState:
    """Return ``state`` itself: resource-watch actions never change the state.

    :class:`~agenthost_protocol.types.UnknownAction` still reaches
    ``on_unknown``.  ``now`` is accepted for a uniform signature.
    """
    if not _is_resource_watch_action(action):
        return state
    match action:
        case ResourceWatchChangedAction():
            return state
        case UnknownAction():
            if on_unknown is not None:
                on_unknown(action)
            return state
        case _:
            assert_never(action)
