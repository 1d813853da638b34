"""A chat's turns as text for a person: what ``sessions show`` prints.

Pure (no asyncio): it takes the states the client holds and returns lines.
Every string the host provides goes through :func:`~.terminal.safe_text`
and is bounded (:data:`MAX_PART_CHARS`), so a hostile host can neither act
on the terminal nor flood it from one part.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from .. import types as t
from .terminal import safe_text

__all__ = [
    "MAX_LINE_CHARS",
    "MAX_PART_CHARS",
    "bounded",
    "chat_lines",
    "one_line",
    "status_name",
    "text_of",
    "tool_note",
    "turn_lines",
]

MAX_PART_CHARS: Final = 200_000
"""The most characters of one message or response part that are shown."""
MAX_LINE_CHARS: Final = 200
"""The most characters of a one-line field (a title, a provider, a tool's name)."""

_ACTIVITY: Final = {
    int(t.SessionStatus.IDLE): "idle",
    int(t.SessionStatus.ERROR): "error",
    int(t.SessionStatus.IN_PROGRESS): "in-progress",
    int(t.SessionStatus.INPUT_NEEDED): "input-needed",
}


def bounded(text: str, limit: int = MAX_PART_CHARS) -> str:
    """``text`` made safe, at most ``limit`` characters of it (then how many were left)."""
    if len(text) > limit:
        text = text[:limit] + f" [... {len(text) - limit} more characters]"
    return safe_text(text)


def one_line(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` on one line without tabs (a column of tab-separated output), bounded, safe."""
    flat = " ".join(text.split()) if any(c in text for c in "\t\n\r\v\f") else text
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return safe_text(flat)


def text_of(value: t.StringOrMarkdown | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else value.markdown


def status_name(status: int) -> str:
    """A session's status bits in words: its activity (``idle``, ``in-progress``,
    ``input-needed``, ``error``), then ``,archived`` when it is archived."""
    value = int(status)
    name = _ACTIVITY.get(value & t.ACTIVITY_MASK, str(value & t.ACTIVITY_MASK))
    if value & t.SessionStatus.IS_ARCHIVED:
        name += ",archived"
    return name


def tool_note(call: t.ToolCallState) -> str | None:
    """One line on a tool call (``[tool NAME: done: ...]``), ``None`` for a status of a
    newer protocol version."""
    if isinstance(call, t.UnknownToolCallState):
        return None
    name = one_line(call.display_name)
    if isinstance(call, t.ToolCallCompletedState):
        message = one_line(text_of(call.past_tense_message)) if call.success else ""
        outcome = "done" if call.success else "failed"
        return f"[tool {name}: {outcome}{': ' + message if message else ''}]"
    if isinstance(call, t.ToolCallCancelledState):
        reason = str(getattr(call.reason, "value", call.reason))
        return f"[tool {name}: cancelled ({one_line(reason)})]"
    if isinstance(call, t.ToolCallRunningState):
        return f"[tool {name}: running]"
    if isinstance(call, t.ToolCallPendingConfirmationState):
        return f"[tool {name}: waiting for confirmation]"
    status = str(getattr(call.status, "value", call.status))
    return f"[tool {name}: {one_line(status)}]"


def _parts(parts: tuple[t.ResponsePart, ...], reasoning: bool) -> Iterator[str]:
    for part in parts:
        if isinstance(part, t.MarkdownResponsePart):
            if part.content:
                yield bounded(part.content).rstrip("\n")
        elif isinstance(part, t.ReasoningResponsePart):
            if reasoning and part.content:
                yield "thinking: " + bounded(part.content).rstrip("\n")
        elif isinstance(part, t.ToolCallResponsePart):
            note = tool_note(part.tool_call)
            if note is not None:
                yield note


def turn_lines(turn: t.Turn | t.ActiveTurn, *, reasoning: bool = True) -> Iterator[str]:
    """A turn as blocks of text: the user's message (each line after ``> ``), each
    part of the reply, and how it ended when it did not complete; one blank line between
    two blocks is the caller's (:func:`chat_lines`)."""
    message = bounded(turn.message.text).rstrip("\n")
    yield "\n".join("> " + line for line in message.split("\n"))
    yield from _parts(turn.response_parts, reasoning)
    if isinstance(turn, t.ActiveTurn):
        yield "[the turn is under way]"
        return
    state = str(getattr(turn.state, "value", turn.state))
    if state == t.TurnState.ERROR.value:
        error = turn.error
        detail = (f"{one_line(error.message, MAX_PART_CHARS)} ({one_line(error.error_type)})"
                  if error is not None else "no details")
        yield f"[the turn failed: {detail}]"
    elif state == t.TurnState.CANCELLED.value:
        yield "[the turn was cancelled]"
    elif state != t.TurnState.COMPLETE.value:
        yield f"[the turn ended: {one_line(state)}]"


def chat_lines(chat: t.ChatState, *, reasoning: bool = True) -> Iterator[str]:
    """A chat's loaded turns, oldest first, then its active turn: blocks of text separated
    by one blank line (each block is yielded with the blank line before it but the
    first)."""
    turns: list[t.Turn | t.ActiveTurn] = list(chat.turns)
    if chat.active_turn is not None:
        turns.append(chat.active_turn)
    first = True
    for turn in turns:
        for block in turn_lines(turn, reasoning=reasoning):
            yield block if first else "\n" + block
            first = False
