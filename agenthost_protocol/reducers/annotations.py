"""The reducer of a session's annotations channel ``ahp-session:/<id>/annotations``.

Spec: five ``annotations/*`` actions, all client-dispatchable.  Annotations
are keyed by ``Annotation.id`` and entries by ``AnnotationEntry.id`` within
their annotation.  ``annotations/updated`` patches only ``turnId``,
``resource``, ``range`` and ``resolved`` (it cannot clear ``range``); the
"at least one entry" rule is the producers' job, not the reducer's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, get_args

from typing_extensions import TypeIs, assert_never

from ..types import (
    Annotation,
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
from ._clock import Clock
from ._copy import evolve

__all__ = ["annotations_reducer"]

# Exact classes, as the chat reducer routes: a set lookup, not an ``isinstance`` per class.
_ANNOTATIONS_ACTIONS: Final[frozenset[type]] = frozenset(get_args(AnnotationsAction))


def _is_annotations_action(action: StateAction) -> TypeIs[AnnotationsAction]:
    return type(action) in _ANNOTATIONS_ACTIONS


def annotations_reducer(
    state: AnnotationsState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: Callable[[UnknownAction], None] | None = None,
) -> AnnotationsState:
    """Apply one action to an annotations state and return the new state.

    Pure: ``state`` is never modified.  Actions of other channels and
    :class:`~agenthost_protocol.types.UnknownAction` (after calling
    ``on_unknown``) return ``state`` itself, as does every action that changes
    nothing.  ``now`` is accepted for a uniform signature; annotation actions
    carry no timestamp.
    """
    if not _is_annotations_action(action):
        return state
    match action:
        case AnnotationsSetAction(annotation=annotation):
            annotations = state.annotations
            for index, existing in enumerate(annotations):
                if existing.id == annotation.id:
                    if existing == annotation:
                        return state
                    return _with_annotation_at(state, index, annotation)
            return evolve(state, annotations=(*annotations, annotation))
        case AnnotationsUpdatedAction(
            annotation_id=annotation_id,
            turn_id=turn_id,
            resource=resource,
            range=text_range,
            resolved=resolved,
        ):
            index, found = _find(state, annotation_id)
            if found is None:
                return state
            patched = evolve(
                found,
                turn_id=found.turn_id if turn_id is None else turn_id,
                resource=found.resource if resource is None else resource,
                range=found.range if text_range is None else text_range,
                resolved=found.resolved if resolved is None else resolved,
            )
            if patched == found:
                return state
            return _with_annotation_at(state, index, patched)
        case AnnotationsRemovedAction(annotation_id=annotation_id):
            kept = tuple(a for a in state.annotations if a.id != annotation_id)
            if len(kept) == len(state.annotations):
                return state
            return evolve(state, annotations=kept)
        case AnnotationsEntrySetAction(annotation_id=annotation_id, entry=entry):
            index, found = _find(state, annotation_id)
            if found is None:
                return state
            entries = found.entries
            for entry_index, old_entry in enumerate(entries):
                if old_entry.id == entry.id:
                    if old_entry == entry:
                        return state
                    new_entries = (*entries[:entry_index], entry, *entries[entry_index + 1 :])
                    break
            else:
                new_entries = (*entries, entry)
            return _with_annotation_at(state, index, evolve(found, entries=new_entries))
        case AnnotationsEntryRemovedAction(annotation_id=annotation_id, entry_id=entry_id):
            index, found = _find(state, annotation_id)
            if found is None:
                return state
            kept_entries = tuple(e for e in found.entries if e.id != entry_id)
            if len(kept_entries) == len(found.entries):
                return state
            return _with_annotation_at(state, index, evolve(found, entries=kept_entries))
        case UnknownAction():
            if on_unknown is not None:
                on_unknown(action)
            return state
        case _:
            assert_never(action)


def _find(state: AnnotationsState, annotation_id: str) -> tuple[int, Annotation | None]:
    for index, annotation in enumerate(state.annotations):
        if annotation.id == annotation_id:
            return index, annotation
    return -1, None


def _with_annotation_at(
    state: AnnotationsState, index: int, annotation: Annotation
) -> AnnotationsState:
    annotations = state.annotations
    return evolve(state, annotations=(*annotations[:index], annotation, *annotations[index + 1 :]))
