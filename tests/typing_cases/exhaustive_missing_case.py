"""The reducer-style ``match`` of ``exhaustive_complete.py`` without the
``AnnotationsEntryRemovedAction`` case: mypy must reject the ``assert_never``
call, as it would for a new action added to the model without a reducer case.
"""

from __future__ import annotations

from typing import Final, get_args

from typing_extensions import TypeIs, assert_never

from agenthost_protocol.types import (
    AnnotationsAction,
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
        case UnknownAction():
            return state
        case _:
            assert_never(action)
