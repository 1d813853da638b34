"""The realistic agent stream shared by the stream benchmarks.

Each turn is ``chat/turnStarted``, then 5 times: a markdown
``chat/responsePart``, 40 ``chat/delta`` actions of 8 characters, and a tool
call (``chat/toolCallStart``, ``chat/toolCallDelta``, ``chat/toolCallReady``
confirmed ``not-needed``, ``chat/toolCallComplete`` with a text result), then
``chat/turnComplete``: 227 actions per turn.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from agenthost_protocol.types import (
    ChatAction,
    ChatDeltaAction,
    ChatResponsePartAction,
    ChatState,
    ChatToolCallCompleteAction,
    ChatToolCallDeltaAction,
    ChatToolCallReadyAction,
    ChatToolCallStartAction,
    ChatTurnCompleteAction,
    ChatTurnStartedAction,
    MarkdownResponsePart,
    Message,
    MessageKind,
    MessageOrigin,
    SessionStatus,
    ToolCallConfirmationReason,
    ToolCallResult,
    ToolResultTextContent,
)

CHANNEL = "ahp-chat:/0b9e3c2a-6f1d-4d8e-9a57-3c1f2e4b5a60"
SECTIONS_PER_TURN = 5
DELTAS_PER_SECTION = 40
ACTIONS_PER_TURN = 2 + SECTIONS_PER_TURN * (1 + DELTAS_PER_SECTION + 4)
DELTA = "lorem ip"
CLOCK = 1_750_000_000_000
STARTED_AT = "2025-06-15T12:00:00.000Z"
TURN_MS = 4_200
"""The ``duration`` each turn reports."""


def add_timer_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wall",
        action="store_true",
        help="time with the wall clock (perf_counter) instead of the process's CPU time",
    )


def timer(args: argparse.Namespace) -> Callable[[], float]:
    """The benchmark timer: CPU time of this process (default) or the wall clock.

    CPU time leaves out the time the process waits for a core, so figures stay
    comparable on a busy machine; on an idle one both agree.
    """
    return time.perf_counter if args.wall else time.process_time


def timer_name(args: argparse.Namespace) -> str:
    return "wall-clock time" if args.wall else "CPU time"


def clock() -> int:
    """A fixed clock, so runs are deterministic."""
    return CLOCK


def initial_state() -> ChatState:
    return ChatState(
        resource=CHANNEL,
        title="Benchmark chat",
        status=SessionStatus.IDLE,
        modified_at="2025-06-15T12:00:00.000Z",
        turns=(),
    )


def turn_actions(turn: int) -> list[ChatAction]:
    """The 227 actions of one turn."""
    turn_id = f"turn-{turn}"
    user = Message(text=f"Question {turn}", origin=MessageOrigin(kind=MessageKind.USER))
    actions: list[ChatAction] = [
        ChatTurnStartedAction(turn_id=turn_id, started_at=STARTED_AT, message=user)
    ]
    for section in range(SECTIONS_PER_TURN):
        part_id = f"md-{turn}-{section}"
        tool_call_id = f"tc-{turn}-{section}"
        actions.append(
            ChatResponsePartAction(
                turn_id=turn_id, part=MarkdownResponsePart(id=part_id, content="")
            )
        )
        # A distinct string object per delta, as a decoder would give them.
        actions.extend(
            ChatDeltaAction(turn_id=turn_id, part_id=part_id, content=DELTA[:4] + DELTA[4:])
            for _ in range(DELTAS_PER_SECTION)
        )
        actions += [
            ChatToolCallStartAction(
                turn_id=turn_id, tool_call_id=tool_call_id, tool_name="grep", display_name="Search"
            ),
            ChatToolCallDeltaAction(
                turn_id=turn_id, tool_call_id=tool_call_id, content='{"pattern": "TODO"}'
            ),
            ChatToolCallReadyAction(
                turn_id=turn_id,
                tool_call_id=tool_call_id,
                invocation_message="Searching for TODO",
                tool_input='{"pattern": "TODO"}',
                confirmed=ToolCallConfirmationReason.NOT_NEEDED,
            ),
            ChatToolCallCompleteAction(
                turn_id=turn_id,
                tool_call_id=tool_call_id,
                result=ToolCallResult(
                    success=True,
                    past_tense_message="Searched for TODO",
                    content=(ToolResultTextContent(text="src/app.py:12: # TODO"),),
                ),
            ),
        ]
    actions.append(ChatTurnCompleteAction(turn_id=turn_id, duration=TURN_MS))
    assert len(actions) == ACTIONS_PER_TURN
    return actions


def stream(turns: int) -> list[ChatAction]:
    """``turns`` turns of actions (227 each)."""
    return [action for turn in range(turns) for action in turn_actions(turn)]


def check_final(state: ChatState, turns: int, *, deltas: bool = True) -> None:
    """The stream ended where it should: every turn archived, every tool call completed."""
    assert state.active_turn is None
    assert len(state.turns) == turns
    assert state.status == SessionStatus.IDLE
    last = state.turns[-1]
    assert last.started_at == STARTED_AT and last.duration == TURN_MS
    assert len(last.response_parts) == 2 * SECTIONS_PER_TURN
    text = last.response_parts[0]
    assert isinstance(text, MarkdownResponsePart)
    assert text.content == (DELTA * DELTAS_PER_SECTION if deltas else "")
