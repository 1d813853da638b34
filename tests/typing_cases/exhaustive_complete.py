"""A reducer-style ``match`` with a case for every annotations action: type-checks.

Same shape as the real reducers: foreign-channel actions are routed away by
a ``TypeIs`` guard, so the ``match`` is typed over ``AnnotationsAction``
only, and ``assert_never`` proves every case is handled.
"""

from __future__ import annotations

from typing import Final, get_args

from typing_extensions import TypeIs, assert_never

from agenthost_protocol.types import (
    AnnotationsAction,
    AnnotationsEntryRemovedAction,
    AnnotationsEntrySetAction,
    AnnotationsRemovedAction,
    AnnotationsSetAction,
    AnnotationsState,
    AnnotationsUpdatedAction,
    StateAction,
    UnknownAction,
)

_ANNOTATIONS_ACTIONS: Final = tuple(get_args(AnnotationsAction))


def _is_annotations_action(action: StateAction) -> TypeIs[AnnotationsAction]:
    return isinstance(action, _ANNOTATIONS_ACTIONS)


def reducer(state: AnnotationsState, action: StateAction) -> AnnotationsState:
    if not _is_annotations_action(action):
        return state
    match action:
        case AnnotationsSetAction():
            return state
        case AnnotationsUpdatedAction():
            return state
        case AnnotationsRemovedAction():
            return state
        case AnnotationsEntrySetAction():
            return state
        case AnnotationsEntryRemovedAction():
            return state
        case UnknownAction():
            return state
        case _:
            assert_never(action)
