"""The chat status recompute: the activity bits of a ``SessionStatus``.

A chat's ``status`` (and a session summary's) is a bitset: bits 0-4 hold one
activity value (``IDLE``, ``ERROR``, ``IN_PROGRESS``, ``INPUT_NEEDED``) and
bits 5 and up are independent flags (``IS_READ``, ``IS_ARCHIVED`` and any
unknown bits of a newer peer).  Recomputing keeps every flag bit and replaces
the activity bits with, in this order of precedence:

1. ``ERROR`` when the turn ended in error (``chat/error``);
2. ``INPUT_NEEDED`` when an input request is open, or a tool call of the
   active turn waits for the user (``pending-confirmation`` or
   ``pending-result-confirmation``), even with no active turn for the former;
3. ``IN_PROGRESS`` when a turn is active;
4. ``IDLE`` otherwise.

Everything here is pure integer arithmetic on the bitset: ``~`` on an
``IntFlag`` member complements only the known bits and would drop the unknown
ones, so it is never used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..types import (
    ActiveTurn,
    ChatInputRequest,
    ChatState,
    SessionStatus,
    ToolCallPendingConfirmationState,
    ToolCallPendingResultConfirmationState,
    ToolCallResponsePart,
)
from ..types.enums import ACTIVITY_MASK

__all__ = [
    "ACTIVITY_MASK",
    "chat_activity",
    "chat_status",
    "has_blocking_tool_call",
    "recompute_chat_status",
    "with_activity",
    "without_flag",
]

_FLAG_MASK: Final = ~ACTIVITY_MASK
_BLOCKING: Final = (ToolCallPendingConfirmationState, ToolCallPendingResultConfirmationState)

# ``SessionStatus(value)`` goes through the enum machinery (about 1 µs); the
# values a chat goes through are few, so they are looked up here first.
_STATUSES: dict[int, SessionStatus] = {int(member): member for member in SessionStatus}
_MAX_CACHED: Final = 4096


def _status_of(value: int) -> SessionStatus:
    status = _STATUSES.get(value)
    if status is None:
        status = SessionStatus(value)
        if len(_STATUSES) < _MAX_CACHED:
            _STATUSES[value] = status
    return status


def has_blocking_tool_call(active_turn: ActiveTurn | None) -> bool:
    """Whether a tool call of ``active_turn`` waits for the user's confirmation."""
    if active_turn is None:
        return False
    for part in active_turn.response_parts:
        if type(part) is ToolCallResponsePart and isinstance(part.tool_call, _BLOCKING):
            return True
    return False


def chat_activity(
    active_turn: ActiveTurn | None,
    input_requests: Sequence[ChatInputRequest] | None,
    *,
    error: bool = False,
) -> SessionStatus:
    """The activity value (bits 0-4) of a chat with this active turn and these requests."""
    if error:
        return SessionStatus.ERROR
    if input_requests or has_blocking_tool_call(active_turn):
        return SessionStatus.INPUT_NEEDED
    if active_turn is not None:
        return SessionStatus.IN_PROGRESS
    return SessionStatus.IDLE


def with_activity(status: int, activity: int) -> SessionStatus:
    """``status`` with its activity bits replaced by ``activity``; every flag bit is kept.

    Returns ``status`` itself (when it is a ``SessionStatus``) if nothing changes.
    """
    value = (int(status) & _FLAG_MASK) | (int(activity) & ACTIVITY_MASK)
    if isinstance(status, SessionStatus) and value == status:
        return status
    return _status_of(value)


def without_flag(status: int, flag: int) -> SessionStatus:
    """``status`` with the bits of ``flag`` cleared; every other bit (unknown ones too) is kept."""
    value = int(status) & ~int(flag)
    if isinstance(status, SessionStatus) and value == status:
        return status
    return _status_of(value)


def chat_status(
    status: int,
    active_turn: ActiveTurn | None,
    input_requests: Sequence[ChatInputRequest] | None,
    *,
    error: bool = False,
) -> SessionStatus:
    """Recompute ``status`` for a chat with this active turn and these input requests.

    The flag bits of ``status`` are kept; the activity bits are replaced with
    :func:`chat_activity`.
    """
    return with_activity(status, chat_activity(active_turn, input_requests, error=error))


def recompute_chat_status(state: ChatState, *, error: bool = False) -> SessionStatus:
    """The recomputed ``status`` of ``state`` (see the module docstring for the rule)."""
    return chat_status(state.status, state.active_turn, state.input_requests, error=error)
