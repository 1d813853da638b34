"""The reducer of a changeset channel (``ChangesetState``).

Spec: eight ``changeset/*`` actions, all server-only except
``changeset/filesReviewChanged`` (0.6.0), the review toggle a client applies
optimistically.  ``error`` fields are
kept only while the matching status is ``error``: a transition to any other
status removes them.  Files are keyed by ``ChangesetFile.id`` and operations
by ``ChangesetOperation.id``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, get_args

from typing_extensions import TypeIs, assert_never

from ..types import (
    ChangesetAction,
    ChangesetClearedAction,
    ChangesetContentChangedAction,
    ChangesetFileRemovedAction,
    ChangesetFileSetAction,
    ChangesetFilesReviewChangedAction,
    ChangesetOperationsChangedAction,
    ChangesetOperationStatus,
    ChangesetOperationStatusChangedAction,
    ChangesetState,
    ChangesetStatus,
    ChangesetStatusChangedAction,
    StateAction,
    UnknownAction,
)
from ._clock import Clock
from ._copy import evolve

__all__ = ["changeset_reducer"]

# Exact classes, as the chat reducer routes: a set lookup, not an ``isinstance`` per class.
_CHANGESET_ACTIONS: Final[frozenset[type]] = frozenset(get_args(ChangesetAction))


def _is_changeset_action(action: StateAction) -> TypeIs[ChangesetAction]:
    return type(action) in _CHANGESET_ACTIONS


def changeset_reducer(
    state: ChangesetState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: Callable[[UnknownAction], None] | None = None,
) -> ChangesetState:
    """Apply one action to a changeset state and return the new state.

    Pure: ``state`` is never modified.  Actions of other channels and
    :class:`~agenthost_protocol.types.UnknownAction` (after calling
    ``on_unknown``) return ``state`` itself, as does every action that changes
    nothing.  ``now`` is accepted for a uniform signature; changeset actions
    carry no timestamp.
    """
    if not _is_changeset_action(action):
        return state
    match action:
        case ChangesetStatusChangedAction(status=status, error=error):
            kept_error = error if status == ChangesetStatus.ERROR else None
            if state.status == status and state.error == kept_error:
                return state
            return evolve(state, status=status, error=kept_error)
        case ChangesetFileSetAction(file=file):
            files = state.files
            for index, existing in enumerate(files):
                if existing.id == file.id:
                    if existing == file:
                        return state
                    return evolve(state, files=(*files[:index], file, *files[index + 1 :]))
            return evolve(state, files=(*files, file))
        case ChangesetFileRemovedAction(file_id=file_id):
            kept = tuple(file for file in state.files if file.id != file_id)
            if len(kept) == len(state.files):
                return state
            return evolve(state, files=kept)
        case ChangesetFilesReviewChangedAction(files=file_ids, reviewed=reviewed):
            # An absent ``reviewed`` counts as different, so ``false`` is written out.
            wanted = set(file_ids)
            reviewed_files = tuple(
                evolve(file, reviewed=reviewed)
                if file.id in wanted and file.reviewed is not reviewed
                else file
                for file in state.files
            )
            if all(new is old for new, old in zip(reviewed_files, state.files, strict=True)):
                return state
            return evolve(state, files=reviewed_files)
        case ChangesetContentChangedAction(files=files, operations=operations, error=error):
            new_operations = state.operations if operations is None else operations
            if state.files == files and state.operations == new_operations and state.error == error:
                return state
            return evolve(state, files=files, operations=new_operations, error=error)
        case ChangesetOperationsChangedAction(operations=operations):
            if state.operations == operations:
                return state
            return evolve(state, operations=operations)
        case ChangesetOperationStatusChangedAction(
            operation_id=operation_id, status=status, error=error
        ):
            operations = state.operations
            if not operations:
                return state
            kept_error = error if status == ChangesetOperationStatus.ERROR else None
            for index, operation in enumerate(operations):
                if operation.id == operation_id:
                    if operation.status == status and operation.error == kept_error:
                        return state
                    updated = evolve(operation, status=status, error=kept_error)
                    return evolve(
                        state,
                        operations=(*operations[:index], updated, *operations[index + 1 :]),
                    )
            return state
        case ChangesetClearedAction():
            if not state.files:
                return state
            return evolve(state, files=())
        case UnknownAction():
            if on_unknown is not None:
                on_unknown(action)
            return state
        case _:
            assert_never(action)
