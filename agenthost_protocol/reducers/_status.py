"""The chat status recompute: the activity bits of a ``SessionStatus`` (AHP 0.7.0).

A chat's ``status`` (and a session's) is a bitset: bits 0-4 hold one
activity value (``IDLE``, ``ERROR``, ``IN_PROGRESS``, ``INPUT_NEEDED``) and
bits 5 and up are independent flags (``IS_READ``, ``IS_ARCHIVED`` and any
unknown bits of a newer peer).  Recomputing keeps every flag bit and replaces
the activity bits with, in this order of precedence (inventory §2, "Chat
status recompute"):

1. ``ERROR`` when the turn ended through ``chat/error``;
2. ``INPUT_NEEDED`` when the **active turn** holds an ``inputRequest`` part
   without a ``response``, or a tool call that waits for the user
   (``pending-confirmation``, ``pending-result-confirmation`` or
   ``auth-required``);
3. ``IN_PROGRESS`` when a turn is active;
4. ``IDLE`` otherwise.

Only the active turn counts: an unanswered request left in a finished turn
does not need input any more.

Everything here is pure integer arithmetic on the bitset: ``~`` on an
``IntFlag`` member complements only the known bits and would drop the unknown
ones, so it is never used.
"""

from __future__ import annotations

from typing import Final, get_args

from ..types import (
    ActiveTurn,
    ChatState,
    InputRequestResponsePart,
    SessionStatus,
    ToolCallAuthRequiredState,
    ToolCallPendingConfirmationState,
    ToolCallPendingResultConfirmationState,
    ToolCallResponsePart,
    ToolCallState,
)
from ..types.enums import ACTIVITY_MASK

__all__ = [
    "ACTIVITY_MASK",
    "BLOCKING_TYPES",
    "NOT_BLOCKING_TYPES",
    "chat_activity",
    "chat_status",
    "has_blocking_tool_call",
    "has_open_input_request",
    "needs_input",
    "recompute_chat_status",
    "status_of",
    "with_activity",
    "without_flag",
]

_FLAG_MASK: Final = ~ACTIVITY_MASK
_BLOCKING: Final = (
    ToolCallPendingConfirmationState,
    ToolCallPendingResultConfirmationState,
    ToolCallAuthRequiredState,
)
# ``isinstance`` against the three classes costs three subclass checks for
# every other call: the exact classes are looked up first, and ``isinstance``
# decides only for a class of neither set (a subclass).
BLOCKING_TYPES: Final[frozenset[type]] = frozenset(_BLOCKING)
NOT_BLOCKING_TYPES: Final[frozenset[type]] = frozenset(get_args(ToolCallState)) - BLOCKING_TYPES

# ``SessionStatus(value)`` goes through the enum machinery (about 1 µs), and
# a chat only ever moves between a handful of values, all below 128 unless a
# newer peer set unknown bits.  An immutable table, built once at import.
_TABLE_SIZE: Final = 128
_STATUS_TABLE: Final[tuple[SessionStatus, ...]] = tuple(
    SessionStatus(value) for value in range(_TABLE_SIZE)
)


def status_of(value: int) -> SessionStatus:
    """``SessionStatus(value)``, from the table for the usual values."""
    if 0 <= value < _TABLE_SIZE:
        return _STATUS_TABLE[value]
    return SessionStatus(value)


def has_blocking_tool_call(active_turn: ActiveTurn | None) -> bool:
    """Whether a tool call of ``active_turn`` waits for the user (confirmation or auth)."""
    if active_turn is None:
        return False
    for part in active_turn.response_parts:
        if type(part) is ToolCallResponsePart and isinstance(part.tool_call, _BLOCKING):
            return True
    return False


def has_open_input_request(active_turn: ActiveTurn | None) -> bool:
    """Whether ``active_turn`` holds an input request that has no ``response`` yet."""
    if active_turn is None:
        return False
    for part in active_turn.response_parts:
        if type(part) is InputRequestResponsePart and part.response is None:
            return True
    return False


def needs_input(active_turn: ActiveTurn | None) -> bool:
    """Whether the chat waits for the user: an open input request or a blocking tool call."""
    if active_turn is None:
        return False
    for part in active_turn.response_parts:
        kind = type(part)
        if kind is ToolCallResponsePart:
            if isinstance(part.tool_call, _BLOCKING):  # type: ignore[union-attr]
                return True
        elif kind is InputRequestResponsePart and part.response is None:  # type: ignore[union-attr]
            return True
    return False


def chat_activity(active_turn: ActiveTurn | None, *, error: bool = False) -> SessionStatus:
    """The activity value (bits 0-4) of a chat with this active turn."""
    if error:
        return SessionStatus.ERROR
    if needs_input(active_turn):
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
    return status_of(value)


def without_flag(status: int, flag: int) -> SessionStatus:
    """``status`` with the bits of ``flag`` cleared; every other bit (unknown ones too) is kept."""
    value = int(status) & ~int(flag)
    if isinstance(status, SessionStatus) and value == status:
        return status
    return status_of(value)


def chat_status(
    status: int, active_turn: ActiveTurn | None, *, error: bool = False
) -> SessionStatus:
    """Recompute ``status`` for a chat with this active turn.

    The flag bits of ``status`` are kept; the activity bits are replaced with
    :func:`chat_activity`.  Returns ``status`` itself (when it is a
    ``SessionStatus``) if nothing changes.  The chat reducer calls this after
    most actions, so it does the work of :func:`chat_activity` and
    :func:`with_activity` in one call.
    """
    if error:
        activity = _ERROR
    elif active_turn is None:
        activity = _IDLE
    else:
        activity = _IN_PROGRESS
        for part in active_turn.response_parts:
            kind = type(part)
            if kind is ToolCallResponsePart:
                call = part.tool_call  # type: ignore[union-attr]
                call_kind = type(call)
                if call_kind in BLOCKING_TYPES or (
                    call_kind not in NOT_BLOCKING_TYPES and isinstance(call, _BLOCKING)
                ):
                    activity = _INPUT_NEEDED
                    break
            elif kind is InputRequestResponsePart and part.response is None:  # type: ignore[union-attr]
                activity = _INPUT_NEEDED
                break
    value = (int(status) & _FLAG_MASK) | activity
    if value == status and isinstance(status, SessionStatus):
        return status
    if 0 <= value < _TABLE_SIZE:
        return _STATUS_TABLE[value]
    return SessionStatus(value)


_ERROR: Final = int(SessionStatus.ERROR)
_IDLE: Final = int(SessionStatus.IDLE)
_IN_PROGRESS: Final = int(SessionStatus.IN_PROGRESS)
_INPUT_NEEDED: Final = int(SessionStatus.INPUT_NEEDED)


def recompute_chat_status(state: ChatState, *, error: bool = False) -> SessionStatus:
    """The recomputed ``status`` of ``state`` (see the module docstring for the rule)."""
    return chat_status(state.status, state.active_turn, error=error)
