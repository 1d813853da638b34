"""The reducer of a terminal channel (``TerminalState``).

Spec: 11 ``terminal/*`` actions.  ``terminal/data`` appends output to the
last content part when that part can still grow (an unfinished ``command``
part's ``output`` or an ``unclassified`` part's ``value``), else pushes a new
``unclassified`` part.  Appends go through the parts' text buffers, so a
stream of *n* deltas costs O(total length), not O(n²), and older states keep
their text.  ``terminal/input`` is side-effect only (the host forwards it to
the pty) and never changes state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, get_args

from typing_extensions import TypeIs, assert_never

from ..types import (
    StateAction,
    TerminalAction,
    TerminalClaimedAction,
    TerminalClearedAction,
    TerminalCommandDetectionAvailableAction,
    TerminalCommandExecutedAction,
    TerminalCommandFinishedAction,
    TerminalCommandPart,
    TerminalContentPart,
    TerminalCwdChangedAction,
    TerminalDataAction,
    TerminalExitedAction,
    TerminalInputAction,
    TerminalResizedAction,
    TerminalState,
    TerminalTitleChangedAction,
    TerminalUnclassifiedPart,
    UnknownAction,
)
from ._clock import Clock
from ._copy import evolve

__all__ = ["terminal_reducer"]

# Exact classes, as the chat reducer routes: a set lookup, not an ``isinstance`` per class.
_TERMINAL_ACTIONS: Final[frozenset[type]] = frozenset(get_args(TerminalAction))


def _is_terminal_action(action: StateAction) -> TypeIs[TerminalAction]:
    return type(action) in _TERMINAL_ACTIONS


def terminal_reducer(
    state: TerminalState,
    action: StateAction,
    *,
    now: Clock | None = None,
    on_unknown: Callable[[UnknownAction], None] | None = None,
) -> TerminalState:
    """Apply one action to a terminal state and return the new state.

    Pure: ``state`` is never modified.  Actions of other channels and
    :class:`~agenthost_protocol.types.UnknownAction` (after calling
    ``on_unknown``) return ``state`` itself, as does every action that changes
    nothing (``terminal/input`` always).  ``now`` is accepted for a uniform
    signature; command timestamps come from the actions.
    """
    if not _is_terminal_action(action):
        return state
    match action:
        case TerminalDataAction(data=data):
            return _append_data(state, data)
        case TerminalInputAction():
            return state
        case TerminalResizedAction(cols=cols, rows=rows):
            if state.cols == cols and state.rows == rows:
                return state
            return evolve(state, cols=cols, rows=rows)
        case TerminalClaimedAction(claim=claim):
            if state.claim == claim:
                return state
            return evolve(state, claim=claim)
        case TerminalTitleChangedAction(title=title):
            if state.title == title:
                return state
            return evolve(state, title=title)
        case TerminalCwdChangedAction(cwd=cwd):
            if state.cwd == cwd:
                return state
            return evolve(state, cwd=cwd)
        case TerminalExitedAction(exit_code=exit_code):
            if state.exit_code == exit_code:
                return state
            return evolve(state, exit_code=exit_code)
        case TerminalClearedAction():
            if not state.content:
                return state
            return evolve(state, content=())
        case TerminalCommandDetectionAvailableAction():
            if state.supports_command_detection:
                return state
            return evolve(state, supports_command_detection=True)
        case TerminalCommandExecutedAction(
            command_id=command_id, command_line=command_line, timestamp=timestamp
        ):
            part = TerminalCommandPart(
                command_id=command_id,
                command_line=command_line,
                output="",
                timestamp=timestamp,
                is_complete=False,
            )
            return evolve(state, content=(*state.content, part), supports_command_detection=True)
        case TerminalCommandFinishedAction(
            command_id=command_id, exit_code=exit_code, duration_ms=duration_ms
        ):
            return _finish_command(state, command_id, exit_code, duration_ms)
        case UnknownAction():
            if on_unknown is not None:
                on_unknown(action)
            return state
        case _:
            assert_never(action)


def _append_data(state: TerminalState, data: str) -> TerminalState:
    content = state.content
    last = content[-1] if content else None
    grown: TerminalContentPart
    if isinstance(last, TerminalCommandPart) and not last.is_complete:
        if not data:
            return state
        grown = last.with_output_appended(data)
    elif isinstance(last, TerminalUnclassifiedPart):
        if not data:
            return state
        grown = last.with_value_appended(data)
    else:
        return evolve(state, content=(*content, TerminalUnclassifiedPart(value=data)))
    return evolve(state, content=(*content[:-1], grown))


def _finish_command(
    state: TerminalState, command_id: str, exit_code: int | None, duration_ms: int | None
) -> TerminalState:
    changed = False
    parts: list[TerminalContentPart] = []
    for part in state.content:
        if isinstance(part, TerminalCommandPart) and part.command_id == command_id:
            finished = evolve(part, is_complete=True, exit_code=exit_code, duration_ms=duration_ms)
            if finished != part:
                parts.append(finished)
                changed = True
                continue
        parts.append(part)
    return evolve(state, content=tuple(parts)) if changed else state
