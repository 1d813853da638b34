"""Focused tests of ``chat_reducer`` (AHP 0.7.0), one rule of inventory §2.3 at a time.

The official fixtures pin the common paths; these tests add the edges: every
no-op returns the very same state object and every change a new one, the
six tool-call transitions recompute the status even when nothing matched,
flag bits (unknown ones too) survive every recompute, older states stay
valid while a newer one is streamed into, the module keeps no state between
calls, ``modifiedAt`` is JavaScript's ``toISOString`` over the whole ``Date``
range, and no sequence of well-typed actions makes the reducer raise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from types import FunctionType, ModuleType
from typing import Any, get_args

import attrs
import pytest
from attrs.exceptions import FrozenInstanceError
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import wire
from agenthost_protocol.reducers import _clock, _status
from agenthost_protocol.reducers import chat as chat_module
from agenthost_protocol.reducers.chat import chat_reducer
from agenthost_protocol.types import (
    ActiveTurn,
    ChatAction,
    ChatActivityChangedAction,
    ChatDeltaAction,
    ChatDraftChangedAction,
    ChatErrorAction,
    ChatInputAnswerChangedAction,
    ChatInputAnswered,
    ChatInputCompletedAction,
    ChatInputRequest,
    ChatInputRequestedAction,
    ChatInputResponseKind,
    ChatInputTextAnswerValue,
    ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction,
    ChatQueuedMessagesReorderedAction,
    ChatReasoningAction,
    ChatResponsePartAction,
    ChatState,
    ChatToolCallApprovedAction,
    ChatToolCallAuthRequiredAction,
    ChatToolCallAuthResolvedAction,
    ChatToolCallCompleteAction,
    ChatToolCallContentChangedAction,
    ChatToolCallDeltaAction,
    ChatToolCallDeniedAction,
    ChatToolCallReadyAction,
    ChatToolCallResultConfirmedAction,
    ChatToolCallStartAction,
    ChatTruncatedAction,
    ChatTurnCancelledAction,
    ChatTurnCompleteAction,
    ChatTurnsLoadedAction,
    ChatTurnStartedAction,
    ChatUsageAction,
    ChatWorkingDirectoryRemovedAction,
    ChatWorkingDirectorySetAction,
    ConfirmationOption,
    ConfirmationOptionKind,
    ContentRef,
    ErrorInfo,
    InputRequestResponsePart,
    MarkdownResponsePart,
    McpAuthRequiredReason,
    McpAuthRequirement,
    Message,
    MessageKind,
    MessageOrigin,
    PendingMessage,
    ProtectedResourceMetadata,
    ReasoningResponsePart,
    ResourceReponsePart,
    ResponsePart,
    RootActiveSessionsChangedAction,
    SessionStatus,
    SessionTitleChangedAction,
    StateAction,
    SystemNotificationResponsePart,
    ToolCallAuthRequiredState,
    ToolCallCancellationReason,
    ToolCallCancelledState,
    ToolCallClientContributor,
    ToolCallCompletedState,
    ToolCallConfirmationReason,
    ToolCallMcpContributor,
    ToolCallPendingConfirmationState,
    ToolCallPendingResultConfirmationState,
    ToolCallResponsePart,
    ToolCallResult,
    ToolCallRiskAssessmentCompleteState,
    ToolCallRiskAssessmentLoadingState,
    ToolCallRunningState,
    ToolCallState,
    ToolCallStreamingState,
    ToolResultTextContent,
    Turn,
    TurnState,
    UnknownAction,
    UnknownResponsePart,
    UnknownToolCallContributor,
    UnknownToolCallState,
    UsageInfo,
)
from agenthost_protocol.types._text import TextBuffer

NOW_MS = 9999
NOW = "1970-01-01T00:00:09.999Z"
OLD = "1970-01-01T00:00:01.000Z"
STARTED = "1970-01-01T00:00:02.000Z"
TURN = "turn-1"
IDLE, ERROR, IN_PROGRESS, INPUT_NEEDED = (
    SessionStatus.IDLE,
    SessionStatus.ERROR,
    SessionStatus.IN_PROGRESS,
    SessionStatus.INPUT_NEEDED,
)
IS_READ, IS_ARCHIVED = SessionStatus.IS_READ, SessionStatus.IS_ARCHIVED
UNKNOWN_BIT = 1 << 31


def clock() -> int:
    return NOW_MS


def no_clock() -> int:
    raise AssertionError("a no-op must not read the clock")


def reduce(state: ChatState, *actions: StateAction) -> ChatState:
    for action in actions:
        state = chat_reducer(state, action, now=clock)
    return state


def assert_noop(state: ChatState, *actions: StateAction) -> None:
    for action in actions:
        assert chat_reducer(state, action, now=no_clock) is state, action


def message(text: str = "Hello") -> Message:
    return Message(text=text, origin=MessageOrigin(kind=MessageKind.USER))


def chat(status: int = IDLE, **changes: Any) -> ChatState:
    changes.setdefault("turns", ())
    return ChatState(
        resource="ahp-chat:/1",
        title="Chat",
        status=SessionStatus(status),
        modified_at=OLD,
        **changes,
    )


def turn(*parts: ResponsePart, turn_id: str = TURN, **changes: Any) -> ActiveTurn:
    return ActiveTurn(
        id=turn_id, started_at=STARTED, message=message(), response_parts=parts, **changes
    )


def active(*parts: ResponsePart, status: int = IN_PROGRESS, **changes: Any) -> ChatState:
    return chat(status, active_turn=turn(*parts), **changes)


def finished(turn_id: str, text: str = "Earlier") -> Turn:
    return Turn(id=turn_id, message=message(text), response_parts=(), state=TurnState.COMPLETE)


def parts_of(state: ChatState) -> tuple[ResponsePart, ...]:
    assert state.active_turn is not None
    return state.active_turn.response_parts


def text_of(state: ChatState, index: int = 0) -> str:
    part = parts_of(state)[index]
    assert isinstance(part, (MarkdownResponsePart, ReasoningResponsePart))
    return part.content


def tool(state: ChatState, index: int = 0) -> ToolCallState:
    part = parts_of(state)[index]
    assert isinstance(part, ToolCallResponsePart)
    return part.tool_call


def input_part(state: ChatState, index: int = 0) -> InputRequestResponsePart:
    part = parts_of(state)[index]
    assert isinstance(part, InputRequestResponsePart)
    return part


def markdown(part_id: str = "md-1", content: str = "") -> MarkdownResponsePart:
    return MarkdownResponsePart(id=part_id, content=content)


def tc_part(tool_call: ToolCallState) -> ToolCallResponsePart:
    return ToolCallResponsePart(tool_call=tool_call)


CLIENT = ToolCallClientContributor(client_id="client-1")
MCP = ToolCallMcpContributor(customization_id="mcp-1")
REF = ContentRef(uri="file:///tool-inputs/tc-1.json")
OPTIONS = (
    ConfirmationOption(id="allow", label="Allow", kind=ConfirmationOptionKind.APPROVE),
    ConfirmationOption(id="deny", label="Deny", kind=ConfirmationOptionKind.DENY),
)
RISK = ToolCallRiskAssessmentCompleteState(reason="Reads only", safety=0.9)
AUTH = McpAuthRequirement(
    reason=McpAuthRequiredReason.REQUIRED,
    resource=ProtectedResourceMetadata(resource="https://mcp.example/fs"),
)
OUTPUT = (ToolResultTextContent(text="partial"),)
RESULT = ToolCallResult(
    success=True,
    past_tense_message="Ran ls",
    content=(ToolResultTextContent(text="a b"),),
    structured_content={"files": 2},
)
FAILED = ToolCallResult(success=False, past_tense_message="Gave up")


def base(tool_call_id: str = "tc-1") -> dict[str, Any]:
    return {"tool_call_id": tool_call_id, "tool_name": "bash", "display_name": "Run"}


def streaming(tool_call_id: str = "tc-1", **changes: Any) -> ToolCallStreamingState:
    return ToolCallStreamingState(**base(tool_call_id), **changes)


def pending(tool_call_id: str = "tc-1", **changes: Any) -> ToolCallPendingConfirmationState:
    fields: dict[str, Any] = {"invocation_message": "Run ls", "tool_input": "ls"}
    fields.update(changes)
    return ToolCallPendingConfirmationState(**base(tool_call_id), **fields)


def running(tool_call_id: str = "tc-1", **changes: Any) -> ToolCallRunningState:
    fields: dict[str, Any] = {
        "invocation_message": "Run ls",
        "tool_input": "ls",
        "confirmed": ToolCallConfirmationReason.USER_ACTION,
    }
    fields.update(changes)
    return ToolCallRunningState(**base(tool_call_id), **fields)


def auth_required(tool_call_id: str = "tc-1", **changes: Any) -> ToolCallAuthRequiredState:
    fields: dict[str, Any] = {
        "contributor": MCP,
        "invocation_message": "Run ls",
        "tool_input": "ls",
        "confirmed": ToolCallConfirmationReason.USER_ACTION,
        "auth": AUTH,
    }
    fields.update(changes)
    return ToolCallAuthRequiredState(**base(tool_call_id), **fields)


def pending_result(
    tool_call_id: str = "tc-1", **changes: Any
) -> ToolCallPendingResultConfirmationState:
    fields: dict[str, Any] = {
        "invocation_message": "Run ls",
        "tool_input": "ls",
        "confirmed": ToolCallConfirmationReason.SETTING,
        "selected_option": OPTIONS[0],
        "success": True,
        "past_tense_message": "Ran ls",
        "content": (ToolResultTextContent(text="a b"),),
    }
    fields.update(changes)
    return ToolCallPendingResultConfirmationState(**base(tool_call_id), **fields)


def completed(tool_call_id: str = "tc-1", **changes: Any) -> ToolCallCompletedState:
    fields: dict[str, Any] = {
        "invocation_message": "Run ls",
        "confirmed": ToolCallConfirmationReason.NOT_NEEDED,
        "success": True,
        "past_tense_message": "Ran ls",
    }
    fields.update(changes)
    return ToolCallCompletedState(**base(tool_call_id), **fields)


def cancelled(tool_call_id: str = "tc-1", **changes: Any) -> ToolCallCancelledState:
    fields: dict[str, Any] = {
        "invocation_message": "Run ls",
        "reason": ToolCallCancellationReason.DENIED,
    }
    fields.update(changes)
    return ToolCallCancelledState(**base(tool_call_id), **fields)


def start(
    turn_id: str = TURN, queued: str | None = None, started_at: str = STARTED
) -> ChatTurnStartedAction:
    return ChatTurnStartedAction(
        turn_id=turn_id, started_at=started_at, message=message(), queued_message_id=queued
    )


def complete_turn(turn_id: str = TURN, duration: int = 8999) -> ChatTurnCompleteAction:
    return ChatTurnCompleteAction(turn_id=turn_id, duration=duration)


def error_turn(turn_id: str = TURN, duration: int = 8999) -> ChatErrorAction:
    return ChatErrorAction(
        turn_id=turn_id, duration=duration, error=ErrorInfo(error_type="boom", message="Boom")
    )


def delta(text: str, part_id: str = "md-1", turn_id: str = TURN) -> ChatDeltaAction:
    return ChatDeltaAction(turn_id=turn_id, part_id=part_id, content=text)


def reasoning(text: str, part_id: str = "r-1", turn_id: str = TURN) -> ChatReasoningAction:
    return ChatReasoningAction(turn_id=turn_id, part_id=part_id, content=text)


def tool_start(tool_call_id: str = "tc-1", **changes: Any) -> ChatToolCallStartAction:
    return ChatToolCallStartAction(turn_id=TURN, tool_call_id=tool_call_id, **_names(changes))


def _names(changes: dict[str, Any]) -> dict[str, Any]:
    changes.setdefault("tool_name", "bash")
    changes.setdefault("display_name", "Run")
    return changes


def tool_delta(**changes: Any) -> ChatToolCallDeltaAction:
    changes.setdefault("tool_call_id", "tc-1")
    return ChatToolCallDeltaAction(turn_id=TURN, **changes)


def ready(confirmed: Any = None, **changes: Any) -> ChatToolCallReadyAction:
    changes.setdefault("tool_call_id", "tc-1")
    changes.setdefault("invocation_message", "Run ls -l")
    return ChatToolCallReadyAction(turn_id=TURN, confirmed=confirmed, **changes)


def approve(**changes: Any) -> ChatToolCallApprovedAction:
    changes.setdefault("tool_call_id", "tc-1")
    return ChatToolCallApprovedAction(
        turn_id=TURN, confirmed=ToolCallConfirmationReason.USER_ACTION, **changes
    )


def deny(**changes: Any) -> ChatToolCallDeniedAction:
    changes.setdefault("tool_call_id", "tc-1")
    return ChatToolCallDeniedAction(
        turn_id=TURN, reason=ToolCallCancellationReason.DENIED, **changes
    )


def complete(result: ToolCallResult = RESULT, **changes: Any) -> ChatToolCallCompleteAction:
    changes.setdefault("tool_call_id", "tc-1")
    changes.setdefault("turn_id", TURN)
    return ChatToolCallCompleteAction(result=result, **changes)


def result_confirmed(approved: bool, **changes: Any) -> ChatToolCallResultConfirmedAction:
    changes.setdefault("tool_call_id", "tc-1")
    return ChatToolCallResultConfirmedAction(turn_id=TURN, approved=approved, **changes)


def content_changed(**changes: Any) -> ChatToolCallContentChangedAction:
    changes.setdefault("tool_call_id", "tc-1")
    changes.setdefault("content", OUTPUT)
    return ChatToolCallContentChangedAction(turn_id=TURN, **changes)


def auth_needed(**changes: Any) -> ChatToolCallAuthRequiredAction:
    changes.setdefault("tool_call_id", "tc-1")
    return ChatToolCallAuthRequiredAction(turn_id=TURN, auth=AUTH, **changes)


def auth_resolved(**changes: Any) -> ChatToolCallAuthResolvedAction:
    changes.setdefault("tool_call_id", "tc-1")
    return ChatToolCallAuthResolvedAction(turn_id=TURN, **changes)


def pending_message(message_id: str, text: str | None = None) -> PendingMessage:
    return PendingMessage(id=message_id, message=message(text or message_id))


def request(request_id: str = "req-1", **changes: Any) -> ChatInputRequest:
    changes.setdefault("message", "Which one?")
    return ChatInputRequest(id=request_id, **changes)


def draft(text: str) -> ChatInputAnswered:
    return ChatInputAnswered(state="draft", value=ChatInputTextAnswerValue(value=text))  # type: ignore[arg-type]


def open_input(request_id: str = "req-1", **changes: Any) -> InputRequestResponsePart:
    return InputRequestResponsePart(request=request(request_id, **changes))


def resolved_input(request_id: str = "req-1", **changes: Any) -> InputRequestResponsePart:
    return InputRequestResponsePart(
        request=request(request_id, **changes), response=ChatInputResponseKind.ACCEPT
    )


# ─── Routing ─────────────────────────────────────────────────────────────────


def test_actions_of_other_channels_return_the_state_itself() -> None:
    state = active(markdown())
    seen: list[UnknownAction] = []
    for action in (
        SessionTitleChangedAction(title="x"),
        RootActiveSessionsChangedAction(active_sessions=3),
    ):
        assert chat_reducer(state, action, now=no_clock, on_unknown=seen.append) is state
    assert seen == []


def test_unknown_action_calls_on_unknown_and_returns_the_state_itself() -> None:
    state = active(markdown())
    unknown = UnknownAction(type="chat/somethingNew", raw={"type": "chat/somethingNew"})
    seen: list[UnknownAction] = []
    assert chat_reducer(state, unknown, now=no_clock, on_unknown=seen.append) is state
    assert seen == [unknown]
    assert chat_reducer(state, unknown) is state


def test_every_chat_action_class_is_routed() -> None:
    assert frozenset(get_args(ChatAction)) == chat_module._CHAT_ACTIONS
    assert len(get_args(ChatAction)) == 31  # 29 types, toolCallConfirmed twice, UnknownAction


# ─── Purity: nothing kept between calls ──────────────────────────────────────

_MUTABLE = (dict, list, set, bytearray)


@pytest.mark.parametrize("module", [chat_module, _status, _clock], ids=lambda m: m.__name__)
def test_reducer_modules_hold_no_mutable_state(module: ModuleType) -> None:
    for name, value in vars(module).items():
        if name.startswith("__") or isinstance(value, (ModuleType, FunctionType, type)):
            continue
        assert not isinstance(value, _MUTABLE), name
    assert not hasattr(chat_module, "_last_append")
    assert not hasattr(chat_module, "_last_timestamp")
    assert not hasattr(chat_module, "_BUILDING")
    assert not hasattr(_status, "_STATUSES")
    assert isinstance(_status._STATUS_TABLE, tuple)


def test_empty_part_id_on_an_active_turn_without_parts_is_a_noop() -> None:
    # The former module-level append memo started as ((), "", -1) and matched
    # this exact case (the empty-tuple singleton and partId ""), then raised
    # IndexError.
    state = active()
    assert_noop(state, delta("x", part_id=""), reasoning("x", part_id=""))
    grown = reduce(active(markdown("")), delta("a", part_id=""), delta("b", part_id=""))
    assert text_of(grown) == "ab"
    assert_noop(active(), delta("x", part_id=""))


def test_results_depend_on_the_arguments_only() -> None:
    # Reducing one state must not change what another reduction produces.
    one = active(markdown("p"), markdown("q"))
    two = active(markdown("q"), markdown("p"))
    assert text_of(reduce(one, delta("x", "p")), 0) == "x"
    assert text_of(reduce(two, delta("y", "p")), 1) == "y"
    assert text_of(reduce(one, delta("z", "q")), 1) == "z"
    ts_one = chat_reducer(chat(), start(), now=lambda: 5).modified_at
    ts_two = chat_reducer(chat(), start(), now=lambda: 6).modified_at
    assert (ts_one, ts_two) == ("1970-01-01T00:00:00.005Z", "1970-01-01T00:00:00.006Z")
    assert chat_reducer(chat(), start(), now=lambda: 5).modified_at == ts_one


# ─── Clock ───────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (9999, "1970-01-01T00:00:09.999Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (1_750_000_000_123, "2025-06-15T15:06:40.123Z"),
        (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        (253_402_300_800_000, "+010000-01-01T00:00:00.000Z"),
        (-62_167_219_200_000, "0000-01-01T00:00:00.000Z"),
        (-62_167_219_200_001, "-000001-12-31T23:59:59.999Z"),
        (-62_198_755_200_000, "-000001-01-01T00:00:00.000Z"),
        (-59_011_459_200_000, "0100-01-01T00:00:00.000Z"),
        (8_640_000_000_000_000, "+275760-09-13T00:00:00.000Z"),
        (-8_640_000_000_000_000, "-271821-04-20T00:00:00.000Z"),
    ],
)
def test_iso_timestamp_matches_to_iso_string(ms: int, text: str) -> None:
    # Values checked against node's ``new Date(ms).toISOString()``.
    assert _clock.iso_timestamp(ms) == text


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (8_640_000_000_000_001, "+275760-09-13T00:00:00.000Z"),
        (10**30, "+275760-09-13T00:00:00.000Z"),
        (float("inf"), "+275760-09-13T00:00:00.000Z"),
        (-8_640_000_000_000_001, "-271821-04-20T00:00:00.000Z"),
        (-(10**30), "-271821-04-20T00:00:00.000Z"),
        (float("-inf"), "-271821-04-20T00:00:00.000Z"),
        (float("nan"), "1970-01-01T00:00:00.000Z"),
        (1.9, "1970-01-01T00:00:00.001Z"),  # truncated toward zero, like TimeClip
        (-1.9, "1969-12-31T23:59:59.999Z"),
    ],
)
def test_iso_timestamp_clamps_outside_the_javascript_range(ms: float, text: str) -> None:
    assert _clock.iso_timestamp(ms) == text


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_CYCLE_MS = 146_097 * 86_400_000  # 400 Gregorian years: the calendar repeats exactly
_Y2000_MS = 946_684_800_000


def _oracle(ms: int) -> str:
    """``toISOString`` by :mod:`datetime`, after moving ``ms`` into 2000-2399 by whole cycles."""
    cycles = (ms - _Y2000_MS) // _CYCLE_MS
    moment = _EPOCH + timedelta(milliseconds=ms - cycles * _CYCLE_MS)
    year = moment.year + 400 * cycles
    year_text = f"{year:04d}" if 0 <= year <= 9999 else f"{year:+07d}"
    return (
        f"{year_text}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:"
        f"{moment.minute:02d}:{moment.second:02d}.{moment.microsecond // 1000:03d}Z"
    )


@given(
    st.one_of(
        st.integers(-_clock.MAX_TIME_MS, _clock.MAX_TIME_MS),
        st.integers(-70_000_000_000_000, 260_000_000_000_000),  # years around 0 and 10000
        st.integers(-(10**12), 10**12),
    )
)
def test_iso_timestamp_agrees_with_an_independent_oracle(ms: int) -> None:
    assert _clock.iso_timestamp(ms) == _oracle(ms)


def test_a_clock_outside_the_javascript_range_never_makes_a_reducer_raise() -> None:
    for ms in (10**20, -(10**20)):
        state = chat_reducer(chat(), start(), now=lambda ms=ms: ms)  # type: ignore[misc]
        assert state.modified_at[0] in "+-"


def test_each_action_reads_the_clock() -> None:
    started = chat_reducer(chat(), start(), now=lambda: 0)
    assert started.modified_at == "1970-01-01T00:00:00.000Z"
    ended = chat_reducer(started, complete_turn(), now=lambda: 1_750_000_000_123)
    assert ended.modified_at == "2025-06-15T15:06:40.123Z"
    again = chat_reducer(started, complete_turn(), now=lambda: 0)
    assert again.modified_at == "1970-01-01T00:00:00.000Z"


def test_wall_clock_is_used_without_now() -> None:
    state = chat_reducer(chat(), start())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", state.modified_at)
    assert state.modified_at > "2020"
    assert _clock.now_ms(None) > 1_577_836_800_000
    assert _clock.now_ms(clock) == NOW_MS


def test_modified_at_is_stamped_exactly_where_the_inventory_says() -> None:
    stamping: dict[str, tuple[ChatState, StateAction]] = {
        "turnStarted": (chat(), start()),
        "turnComplete": (active(), complete_turn()),
        "turnCancelled": (active(), ChatTurnCancelledAction(turn_id=TURN, duration=1)),
        "error": (active(), error_turn()),
        "inputRequested": (active(), ChatInputRequestedAction(request=request())),
        "inputAnswerChanged": (
            active(open_input()),
            ChatInputAnswerChangedAction(request_id="req-1", question_id="q", answer=draft("a")),
        ),
        "inputCompleted": (
            active(open_input()),
            ChatInputCompletedAction(request_id="req-1", response=ChatInputResponseKind.ACCEPT),
        ),
        "truncated": (chat(turns=(finished("t0"),)), ChatTruncatedAction()),
    }
    for name, (state, action) in stamping.items():
        assert reduce(state, action).modified_at == NOW, name
    silent: list[tuple[ChatState, StateAction]] = [
        (active(markdown()), delta("x")),
        (active(ReasoningResponsePart(id="r-1", content="")), reasoning("x")),
        (active(), ChatResponsePartAction(turn_id=TURN, part=markdown())),
        (active(), tool_start()),
        (active(tc_part(streaming())), tool_delta(content="{")),
        (active(tc_part(streaming())), ready()),
        (active(tc_part(pending())), approve()),
        (active(tc_part(pending())), deny()),
        (active(tc_part(running())), complete()),
        (active(tc_part(pending_result())), result_confirmed(True)),
        (active(tc_part(running())), content_changed()),
        (active(tc_part(running(contributor=MCP))), auth_needed()),
        (active(tc_part(auth_required())), auth_resolved()),
        (active(), ChatUsageAction(turn_id=TURN, usage=UsageInfo(input_tokens=1))),
        (chat(), ChatActivityChangedAction(activity="Reading")),
        (chat(), ChatWorkingDirectorySetAction(directory="file:///a")),
        (
            chat(working_directories=("file:///a",)),
            ChatWorkingDirectoryRemovedAction(directory="file:///a"),
        ),
        (chat(), ChatPendingMessageSetAction(kind="queued", id="a", message=message())),
        (
            chat(queued_messages=(pending_message("a"),)),
            ChatPendingMessageRemovedAction(kind="queued", id="a"),
        ),
        (
            chat(queued_messages=(pending_message("a"), pending_message("b"))),
            ChatQueuedMessagesReorderedAction(order=("b",)),
        ),
        (chat(), ChatDraftChangedAction(draft=message())),
        (chat(), ChatTurnsLoadedAction(turns=(finished("t0"),))),
    ]
    for state, action in silent:
        new = chat_reducer(state, action, now=no_clock)
        assert new is not state, action
        assert new.modified_at == OLD, action


# ─── Turn start ──────────────────────────────────────────────────────────────


def test_turn_started_sets_a_fresh_active_turn() -> None:
    state = reduce(chat(IDLE | IS_READ | IS_ARCHIVED | UNKNOWN_BIT), start())
    assert state.active_turn == ActiveTurn(
        id=TURN, started_at=STARTED, message=message(), response_parts=()
    )
    assert state.status == IN_PROGRESS | IS_ARCHIVED | UNKNOWN_BIT  # IS_READ cleared
    assert state.modified_at == NOW


def test_turn_started_replaces_an_existing_active_turn_silently() -> None:
    state = reduce(active(markdown(), tc_part(pending()), status=INPUT_NEEDED), start("turn-2"))
    assert state.active_turn is not None
    assert state.active_turn.id == "turn-2"
    assert state.active_turn.response_parts == ()
    assert state.turns == ()
    assert state.status == IN_PROGRESS  # the pending call went with the old turn


def test_turn_started_clears_an_error_activity() -> None:
    assert reduce(chat(ERROR), start()).status == IN_PROGRESS


def test_turn_started_consumes_the_queued_and_steering_message_with_that_id() -> None:
    initial = chat(
        steering_message=pending_message("a"),
        queued_messages=(pending_message("a"), pending_message("b")),
    )
    state = reduce(initial, start(queued="a"))
    assert state.steering_message is None
    assert state.queued_messages == (pending_message("b"),)
    state = reduce(state, complete_turn(), start(queued="b"))
    assert state.queued_messages is None


def test_turn_started_drops_an_empty_queue_when_consuming() -> None:
    assert reduce(chat(queued_messages=()), start(queued="a")).queued_messages is None
    assert reduce(chat(queued_messages=()), start()).queued_messages == ()


def test_turn_started_keeps_pending_messages_without_a_match() -> None:
    initial = chat(steering_message=pending_message("s"), queued_messages=(pending_message("q"),))
    for action in (start(), start(queued="zzz"), start(queued="")):
        state = reduce(initial, action)
        assert state.steering_message is initial.steering_message
        assert state.queued_messages is initial.queued_messages


def test_turn_started_again_with_the_same_values_returns_the_state_itself() -> None:
    state = reduce(chat(), start())
    assert reduce(state, start()) is state
    assert reduce(state, start(started_at=OLD)) is not state


# ─── Streaming text ──────────────────────────────────────────────────────────


def test_delta_appends_to_the_markdown_part() -> None:
    initial = active(markdown(content="Hel"))
    state = reduce(initial, delta("lo"), delta(", world"))
    assert text_of(state) == "Hello, world"
    assert type(text_of(state)) is str
    assert state.modified_at == OLD  # streaming never touches modifiedAt
    assert state.status is initial.status


def test_delta_no_ops() -> None:
    assert_noop(chat(), delta("x"))  # no active turn
    assert_noop(active(markdown()), delta("x", turn_id="other"), delta("x", part_id="missing"))
    # the first part with the id is not markdown: nothing is appended anywhere
    assert_noop(active(ReasoningResponsePart(id="md-1", content=""), markdown()), delta("x"))
    assert_noop(active(tc_part(streaming("shared")), markdown("shared")), delta("x", "shared"))
    unknown_call = tc_part(UnknownToolCallState(status="new", raw={"toolCallId": "md-1"}))
    assert_noop(active(unknown_call, markdown()), delta("x"))
    unknown = UnknownResponsePart(kind="future", raw={"kind": "future", "id": "md-1"})
    assert_noop(active(unknown, markdown()), delta("x"))
    assert_noop(active(markdown()), delta(""))  # an empty delta changes nothing


def test_delta_skips_parts_without_an_id() -> None:
    parts = (
        ResourceReponsePart(uri="file:///a"),
        SystemNotificationResponsePart(content="note"),
        open_input("md-1"),
        UnknownResponsePart(kind="future", raw={"kind": "future"}),
        tc_part(UnknownToolCallState(status="future", raw={"status": "future"})),
        markdown(),
    )
    state = reduce(active(*parts), delta("x"))
    assert text_of(state, 5) == "x"
    assert parts_of(state)[:5] == parts[:5]


def test_delta_goes_to_the_first_part_with_the_id() -> None:
    state = reduce(active(markdown(content="a"), markdown(content="b")), delta("!"))
    assert (text_of(state, 0), text_of(state, 1)) == ("a!", "b")


def test_delta_into_a_middle_part_keeps_the_others() -> None:
    initial = active(markdown("one"), markdown("two"), tc_part(running()))
    state = reduce(initial, delta("x", "two"), delta("y", "one"), delta("z", "two"))
    assert (text_of(state, 0), text_of(state, 1)) == ("y", "xz")
    assert parts_of(state)[2] is parts_of(initial)[2]


def test_reasoning_appends_to_reasoning_parts_only() -> None:
    initial = active(ReasoningResponsePart(id="r-1", content="Think"), markdown("md-1"))
    state = reduce(initial, reasoning("ing"))
    assert text_of(state) == "Thinking"
    assert state.modified_at == OLD
    assert_noop(initial, reasoning("x", part_id="md-1"), reasoning("x", turn_id="t-2"))
    assert_noop(initial, reasoning("x", part_id="zzz"), reasoning(""))
    assert_noop(chat(), reasoning("x"))


def test_older_states_stay_valid_while_streaming() -> None:
    states = [active(markdown())]
    for i in range(50):
        states.append(reduce(states[-1], delta(str(i % 10))))
    branch = reduce(states[10], delta("X"))  # extend an older state: a branch
    more = reduce(states[-1], delta("Y"))
    for i, state in enumerate(states):
        assert text_of(state) == "".join(str(j % 10) for j in range(i))
    assert text_of(branch) == "0123456789X"
    assert text_of(more) == text_of(states[-1]) + "Y"


def test_interleaved_streams_into_two_chats_and_two_parts() -> None:
    one = active(markdown("a"), markdown("b"))
    two = active(markdown("a"))
    for i in range(20):
        one = reduce(one, delta(str(i), "a" if i % 3 else "b"))
        two = reduce(two, delta(str(i), "a"))
    assert text_of(one, 0) == "".join(str(i) for i in range(20) if i % 3)
    assert text_of(one, 1) == "".join(str(i) for i in range(20) if not i % 3)
    assert text_of(two) == "".join(str(i) for i in range(20))


def test_response_part_is_appended_to_the_active_turn() -> None:
    part = markdown("md-2", "hi")
    state = reduce(active(markdown()), ChatResponsePartAction(turn_id=TURN, part=part))
    assert parts_of(state)[-1] is part
    assert len(parts_of(state)) == 2
    assert_noop(active(), ChatResponsePartAction(turn_id="other", part=part))
    assert_noop(chat(), ChatResponsePartAction(turn_id=TURN, part=part))


def test_response_part_does_not_recompute_even_for_an_input_request() -> None:
    state = reduce(active(), ChatResponsePartAction(turn_id=TURN, part=open_input()))
    assert state.status == IN_PROGRESS
    assert state.modified_at == OLD
    # The next action that recomputes notices it.
    assert reduce(state, complete(tool_call_id="none")).status == INPUT_NEEDED


def test_usage_is_set_on_the_active_turn() -> None:
    usage = UsageInfo(input_tokens=3, output_tokens=4)
    state = reduce(active(), ChatUsageAction(turn_id=TURN, usage=usage))
    assert state.active_turn is not None
    assert state.active_turn.usage is usage
    assert_noop(active(), ChatUsageAction(turn_id="other", usage=usage))
    assert_noop(chat(), ChatUsageAction(turn_id=TURN, usage=usage))


def test_equal_usage_returns_the_state_itself() -> None:
    state = reduce(active(), ChatUsageAction(turn_id=TURN, usage=UsageInfo(input_tokens=3)))
    assert_noop(state, ChatUsageAction(turn_id=TURN, usage=UsageInfo(input_tokens=3)))


# ─── Tool calls: start and streamed input ────────────────────────────────────


def test_tool_call_start_appends_a_streaming_call() -> None:
    action = tool_start(contributor=CLIENT, meta={"a": 1}, intention="List files")
    state = reduce(active(markdown()), action, action)  # no duplicate check
    expected = streaming(contributor=CLIENT, meta={"a": 1}, intention="List files")
    assert tool(state, 1) == expected
    assert tool(state, 2) == expected
    assert state.status == IN_PROGRESS
    assert_noop(active(), attrs.evolve(action, turn_id="other"))
    assert_noop(chat(), action)


def test_tool_call_delta_streams_the_input() -> None:
    initial = active(tc_part(streaming(meta={"m": 0})))
    state = reduce(initial, tool_delta(content='{"a"'))
    tc = tool(state)
    assert isinstance(tc, ToolCallStreamingState)
    assert (tc.partial_input, tc.invocation_message, tc.meta) == ('{"a"', None, {"m": 0})
    state = reduce(state, tool_delta(content=": 1}", invocation_message="Run", meta={"m": 1}))
    tc = tool(state)
    assert isinstance(tc, ToolCallStreamingState)
    assert (tc.partial_input, tc.invocation_message, tc.meta) == ('{"a": 1}', "Run", {"m": 1})


def test_tool_call_delta_without_content_keeps_the_partial_input() -> None:
    initial = active(tc_part(streaming(partial_input="{")))
    state = reduce(initial, tool_delta(invocation_message="Running"))
    tc = tool(state)
    assert isinstance(tc, ToolCallStreamingState)
    assert (tc.partial_input, tc.invocation_message) == ("{", "Running")
    fresh = tool(reduce(active(tc_part(streaming())), tool_delta(meta={"m": 1})))
    assert isinstance(fresh, ToolCallStreamingState)
    assert fresh.partial_input is None


def test_tool_call_delta_with_empty_content_starts_an_empty_input() -> None:
    tc = tool(reduce(active(tc_part(streaming())), tool_delta(content="")))
    assert isinstance(tc, ToolCallStreamingState)
    assert tc.partial_input == ""


def test_tool_call_delta_no_ops() -> None:
    initial = active(tc_part(streaming(partial_input="{", invocation_message="Run")))
    assert_noop(
        initial,
        tool_delta(),  # nothing to change
        tool_delta(content=""),
        tool_delta(invocation_message="Run"),
        tool_delta(content="x", tool_call_id="tc-2"),
        attrs.evolve(tool_delta(content="x"), turn_id="other"),
    )
    assert_noop(active(tc_part(running())), tool_delta(content="x"))
    assert_noop(chat(), tool_delta(content="x"))


def test_tool_call_actions_update_every_call_with_the_id() -> None:
    state = reduce(active(tc_part(streaming()), markdown(), tc_part(streaming())), ready())
    assert isinstance(tool(state, 0), ToolCallPendingConfirmationState)
    assert isinstance(tool(state, 2), ToolCallPendingConfirmationState)
    state = reduce(active(tc_part(streaming()), tc_part(streaming())), tool_delta(content="{"))
    assert [getattr(tool(state, i), "partial_input", None) for i in (0, 1)] == ["{", "{"]


# ─── toolCallReady ───────────────────────────────────────────────────────────


def test_tool_call_ready_from_streaming_waits_for_the_user() -> None:
    initial = active(tc_part(streaming(partial_input="ls", meta={"m": 0}, intention="List")))
    state = reduce(
        initial,
        ready(
            tool_input="ls -l",
            confirmation_title="Run in terminal",
            risk_assessment=RISK,
            editable=True,
            options=OPTIONS,
        ),
    )
    assert tool(state) == pending(
        meta={"m": 0},
        intention="List",
        invocation_message="Run ls -l",
        tool_input="ls -l",
        confirmation_title="Run in terminal",
        risk_assessment=RISK,
        editable=True,
        options=OPTIONS,
    )
    assert state.status == INPUT_NEEDED
    assert state.modified_at == OLD


def test_tool_call_ready_from_streaming_does_not_use_the_partial_input() -> None:
    state = reduce(active(tc_part(streaming(partial_input="ls"))), ready())
    tc = tool(state)
    assert isinstance(tc, ToolCallPendingConfirmationState)
    assert tc.tool_input is None


def test_tool_call_ready_stores_a_loading_risk_assessment() -> None:
    loading = ToolCallRiskAssessmentLoadingState()
    tc = tool(reduce(active(tc_part(streaming())), ready(risk_assessment=loading)))
    assert isinstance(tc, ToolCallPendingConfirmationState)
    assert tc.risk_assessment == loading


def test_tool_call_ready_confirmed_runs() -> None:
    initial = active(tc_part(streaming(meta={"m": 0})))
    state = reduce(initial, ready(ToolCallConfirmationReason.NOT_NEEDED, tool_input=REF))
    assert tool(state) == running(
        meta={"m": 0},
        invocation_message="Run ls -l",
        tool_input=REF,
        confirmed=ToolCallConfirmationReason.NOT_NEEDED,
    )
    assert state.status == IN_PROGRESS


def test_tool_call_ready_from_running_asks_again_and_keeps_the_input() -> None:
    initial = active(
        tc_part(running(tool_input=REF, selected_option=OPTIONS[0], content=OUTPUT)),
        status=IN_PROGRESS,
    )
    state = reduce(initial, ready(invocation_message="Needs more"))
    assert tool(state) == pending(invocation_message="Needs more", tool_input=REF)
    assert state.status == INPUT_NEEDED
    rerun = reduce(initial, ready(ToolCallConfirmationReason.SETTING))
    assert tool(rerun) == running(
        invocation_message="Run ls -l", tool_input=REF, confirmed=ToolCallConfirmationReason.SETTING
    )  # the selected option and the running content are dropped


def test_tool_call_ready_from_pending_falls_back_on_the_pending_values() -> None:
    previous = pending(
        tool_input=REF,
        intention="List",
        confirmation_title="Run?",
        risk_assessment=RISK,
        editable=True,
        options=OPTIONS,
        meta={"m": 0},
    )
    state = reduce(
        active(tc_part(previous), status=INPUT_NEEDED), ready(invocation_message="Again")
    )
    assert tool(state) == attrs.evolve(previous, invocation_message="Again")
    restated = reduce(
        active(tc_part(previous)),
        ready(
            tool_input="ls",
            intention="Other",
            confirmation_title="Sure?",
            editable=False,
            options=(),
            meta={"m": 1},
        ),
    )
    assert tool(restated) == pending(
        tool_input="ls",
        intention="Other",
        confirmation_title="Sure?",
        risk_assessment=RISK,
        editable=False,
        options=(),
        meta={"m": 1},
        invocation_message="Run ls -l",
    )


def test_tool_call_ready_from_pending_confirmed_runs() -> None:
    state = reduce(
        active(tc_part(pending(options=OPTIONS)), status=INPUT_NEEDED),
        ready(ToolCallConfirmationReason.NOT_NEEDED),
    )
    assert tool(state) == running(
        invocation_message="Run ls -l", confirmed=ToolCallConfirmationReason.NOT_NEEDED
    )
    assert state.status == IN_PROGRESS


def test_tool_call_ready_restating_a_pending_call_returns_the_state_itself() -> None:
    state = reduce(active(tc_part(streaming())), ready(options=OPTIONS))
    assert_noop(state, ready(), ready(options=OPTIONS))


@pytest.mark.parametrize(
    ("current", "proposed", "expected"),
    [
        (None, None, None),
        (None, MCP, MCP),
        (None, CLIENT, None),  # client ownership is set at start only
        (MCP, ToolCallMcpContributor(customization_id="mcp-2"), "mcp-2"),
        (MCP, CLIENT, MCP),
        (CLIENT, None, CLIENT),
        (CLIENT, ToolCallClientContributor(client_id="client-1"), CLIENT),
        (CLIENT, ToolCallClientContributor(client_id="client-2"), CLIENT),
        (CLIENT, MCP, CLIENT),
        (
            UnknownToolCallContributor(kind="agent", raw={"kind": "agent"}),
            MCP,
            MCP,
        ),
    ],
)
def test_tool_call_ready_refines_the_contributor_but_not_client_ownership(
    current: Any, proposed: Any, expected: Any
) -> None:
    if expected == "mcp-2":
        expected = ToolCallMcpContributor(customization_id="mcp-2")
    for confirmed in (None, ToolCallConfirmationReason.NOT_NEEDED):
        state = reduce(
            active(tc_part(streaming(contributor=current))),
            ready(confirmed, contributor=proposed),
        )
        assert tool(state).contributor == expected  # type: ignore[union-attr]


def test_tool_call_ready_takes_the_intention_else_keeps_it() -> None:
    initial = active(tc_part(streaming(intention="List")))
    assert tool(reduce(initial, ready())).intention == "List"  # type: ignore[union-attr]
    assert tool(reduce(initial, ready(intention="Sort"))).intention == "Sort"  # type: ignore[union-attr]


def test_tool_call_ready_ignores_finished_and_waiting_calls() -> None:
    for tc in (completed(), cancelled(), pending_result(), auth_required()):
        initial = active(tc_part(tc), status=chat_status_for(tc))
        assert_noop(initial, ready(), ready(ToolCallConfirmationReason.NOT_NEEDED))


def chat_status_for(tc: ToolCallState) -> SessionStatus:
    return _status.chat_activity(turn(tc_part(tc)))


# ─── toolCallConfirmed ───────────────────────────────────────────────────────


def test_approved_runs_with_the_selected_option() -> None:
    initial = active(tc_part(pending(options=OPTIONS, intention="List")), status=INPUT_NEEDED)
    state = reduce(initial, approve(selected_option_id="allow", meta={"m": 1}))
    assert tool(state) == running(intention="List", meta={"m": 1}, selected_option=OPTIONS[0])
    assert state.status == IN_PROGRESS
    unknown_option = reduce(initial, approve(selected_option_id="nope"))
    assert tool(unknown_option).selected_option is None  # type: ignore[union-attr]


def test_approved_edits_an_inline_tool_input() -> None:
    state = reduce(active(tc_part(pending(tool_input="ls"))), approve(edited_tool_input="ls -a"))
    assert tool(state).tool_input == "ls -a"  # type: ignore[union-attr]


def test_approved_never_edits_a_content_ref_or_absent_input() -> None:
    state = reduce(active(tc_part(pending(tool_input=REF))), approve(edited_tool_input="ls -a"))
    assert tool(state).tool_input == REF  # type: ignore[union-attr]
    state = reduce(active(tc_part(pending(tool_input=None))), approve(edited_tool_input="ls -a"))
    assert tool(state).tool_input is None  # type: ignore[union-attr]


def test_denied_cancels_with_the_reason() -> None:
    suggestion = message("Use ls -a instead")
    initial = active(tc_part(pending(options=OPTIONS, meta={"m": 0})), status=INPUT_NEEDED)
    state = reduce(
        initial,
        deny(selected_option_id="deny", reason_message="No", user_suggestion=suggestion),
    )
    assert tool(state) == cancelled(
        meta={"m": 0},
        tool_input="ls",
        reason_message="No",
        user_suggestion=suggestion,
        selected_option=OPTIONS[1],
    )
    assert state.status == IN_PROGRESS


def test_confirmation_applies_only_to_a_pending_call() -> None:
    for tc in (streaming(), running(), completed(), auth_required(), pending_result()):
        initial = active(tc_part(tc), status=chat_status_for(tc))
        assert_noop(initial, approve(), deny())


# ─── toolCallComplete ────────────────────────────────────────────────────────


def test_complete_from_running_takes_the_result_but_not_the_running_content() -> None:
    initial = active(tc_part(running(selected_option=OPTIONS[0], content=OUTPUT, intention="List")))
    state = reduce(initial, complete(meta={"m": 2}))
    assert tool(state) == completed(
        intention="List",
        meta={"m": 2},
        tool_input="ls",
        confirmed=ToolCallConfirmationReason.USER_ACTION,
        selected_option=OPTIONS[0],
        content=RESULT.content,
        structured_content={"files": 2},
    )
    bare = reduce(initial, complete(FAILED))
    assert tool(bare).content is None  # type: ignore[union-attr]


def test_complete_from_pending_is_not_needed_without_an_option() -> None:
    state = reduce(active(tc_part(pending(options=OPTIONS)), status=INPUT_NEEDED), complete())
    tc = tool(state)
    assert isinstance(tc, ToolCallCompletedState)
    assert tc.confirmed == ToolCallConfirmationReason.NOT_NEEDED
    assert tc.selected_option is None
    assert state.status == IN_PROGRESS


def test_complete_may_require_result_confirmation() -> None:
    state = reduce(active(tc_part(running())), complete(requires_result_confirmation=True))
    assert isinstance(tool(state), ToolCallPendingResultConfirmationState)
    assert state.status == INPUT_NEEDED


def test_complete_from_auth_required_with_a_failure_completes_with_pre_auth_content() -> None:
    initial = active(
        tc_part(auth_required(content=OUTPUT, selected_option=OPTIONS[0])), status=INPUT_NEEDED
    )
    for requires in (None, False, True):  # never pending-result-confirmation
        state = reduce(initial, complete(FAILED, requires_result_confirmation=requires))
        assert tool(state) == completed(
            contributor=MCP,
            tool_input="ls",
            confirmed=ToolCallConfirmationReason.USER_ACTION,
            selected_option=OPTIONS[0],
            success=False,
            past_tense_message="Gave up",
            content=OUTPUT,
        )
        assert state.status == IN_PROGRESS
    with_content = attrs.evolve(FAILED, content=(ToolResultTextContent(text="final"),))
    overridden = tool(reduce(initial, complete(with_content)))
    assert overridden.content == with_content.content  # type: ignore[union-attr]


def test_complete_from_auth_required_with_a_success_is_a_noop() -> None:
    assert_noop(active(tc_part(auth_required()), status=INPUT_NEEDED), complete())


def test_complete_ignores_other_statuses() -> None:
    for tc in (streaming(), completed(), cancelled(), pending_result()):
        assert_noop(active(tc_part(tc), status=chat_status_for(tc)), complete())


def test_result_confirmed_approved_completes() -> None:
    initial = active(tc_part(pending_result(meta={"m": 0})), status=INPUT_NEEDED)
    state = reduce(initial, result_confirmed(True))
    assert tool(state) == completed(
        meta={"m": 0},
        tool_input="ls",
        confirmed=ToolCallConfirmationReason.SETTING,
        selected_option=OPTIONS[0],
        content=(ToolResultTextContent(text="a b"),),
    )
    assert state.status == IN_PROGRESS


def test_result_confirmed_denied_cancels_without_the_result() -> None:
    initial = active(tc_part(pending_result()), status=INPUT_NEEDED)
    state = reduce(initial, result_confirmed(False, meta={"m": 1}))
    assert tool(state) == cancelled(
        meta={"m": 1},
        tool_input="ls",
        reason=ToolCallCancellationReason.RESULT_DENIED,
        selected_option=OPTIONS[0],
    )
    assert state.status == IN_PROGRESS
    for tc in (running(), pending(), completed()):
        assert_noop(active(tc_part(tc), status=chat_status_for(tc)), result_confirmed(True))


def test_content_changed_replaces_the_running_content() -> None:
    initial = active(tc_part(running(meta={"m": 0})))
    state = reduce(initial, content_changed())
    assert tool(state) == running(meta={"m": 0}, content=OUTPUT)
    state = reduce(state, content_changed(content=(), meta={"m": 1}))
    assert tool(state) == running(meta={"m": 1}, content=())


def test_content_changed_no_ops_and_never_recomputes() -> None:
    state = reduce(active(tc_part(running())), content_changed())
    assert_noop(state, content_changed())  # the same content again
    for tc in (pending(), auth_required(content=()), completed()):
        assert_noop(active(tc_part(tc), status=chat_status_for(tc)), content_changed())
    stale = active(tc_part(running()), status=ERROR)
    assert reduce(stale, content_changed()).status == ERROR
    assert_noop(stale, content_changed(tool_call_id="none"))


# ─── auth-required ───────────────────────────────────────────────────────────


def test_auth_required_pauses_a_running_mcp_call() -> None:
    initial = active(tc_part(running(contributor=MCP, selected_option=OPTIONS[0], content=OUTPUT)))
    state = reduce(initial, auth_needed(meta={"m": 1}))
    assert tool(state) == auth_required(meta={"m": 1}, selected_option=OPTIONS[0], content=OUTPUT)
    assert state.status == INPUT_NEEDED
    assert state.modified_at == OLD


def test_auth_required_no_ops() -> None:
    for tc in (running(contributor=CLIENT), running(), pending(contributor=MCP)):
        assert_noop(active(tc_part(tc), status=chat_status_for(tc)), auth_needed())


def test_auth_resolved_resumes_the_call() -> None:
    initial = active(
        tc_part(auth_required(content=OUTPUT, selected_option=OPTIONS[0])), status=INPUT_NEEDED
    )
    state = reduce(initial, auth_resolved())
    assert tool(state) == running(contributor=MCP, content=OUTPUT, selected_option=OPTIONS[0])
    assert state.status == IN_PROGRESS
    for tc in (running(contributor=MCP), pending()):
        assert_noop(active(tc_part(tc), status=chat_status_for(tc)), auth_resolved())


def test_auth_lifecycle_running_auth_required_running_completed() -> None:
    state = reduce(
        active(tc_part(running(contributor=MCP))),
        auth_needed(),
        auth_resolved(),
        content_changed(),
        complete(),
    )
    tc = tool(state)
    assert isinstance(tc, ToolCallCompletedState)
    assert tc.content == RESULT.content
    assert state.status == IN_PROGRESS


# ─── The status recompute of the six transitions ─────────────────────────────

Transition = (
    ChatToolCallReadyAction
    | ChatToolCallApprovedAction
    | ChatToolCallDeniedAction
    | ChatToolCallCompleteAction
    | ChatToolCallResultConfirmedAction
    | ChatToolCallAuthRequiredAction
    | ChatToolCallAuthResolvedAction
)
RECOMPUTING: list[Transition] = [
    ready(),
    approve(),
    deny(),
    complete(),
    result_confirmed(True),
    auth_needed(),
    auth_resolved(),
]


@pytest.mark.parametrize("action", RECOMPUTING, ids=lambda action: type(action).__name__)
def test_transitions_recompute_the_status_even_when_nothing_matched(action: Transition) -> None:
    wrong_turn = attrs.evolve(action, turn_id="other")
    unknown_id = attrs.evolve(action, tool_call_id="none")
    disallowed = active(tc_part(completed()), status=ERROR | IS_ARCHIVED | UNKNOWN_BIT)
    for state in (
        active(markdown(), status=ERROR),
        active(open_input(), status=IN_PROGRESS),
        active(tc_part(pending("tc-9")), status=IDLE),
        chat(IN_PROGRESS | IS_READ),
        chat(ERROR),
    ):
        for candidate in (wrong_turn, unknown_id):
            new = chat_reducer(state, candidate, now=no_clock)
            assert new == attrs.evolve(state, status=_status.recompute_chat_status(state))
            assert new is not state
    new = chat_reducer(disallowed, action, now=no_clock)
    assert new.status == IN_PROGRESS | IS_ARCHIVED | UNKNOWN_BIT
    assert new.active_turn is disallowed.active_turn


@pytest.mark.parametrize("action", RECOMPUTING, ids=lambda action: type(action).__name__)
def test_transitions_return_the_state_itself_when_the_recompute_changes_nothing(
    action: Transition,
) -> None:
    assert_noop(active(markdown(), status=IN_PROGRESS | IS_READ), action)
    assert_noop(chat(IDLE | IS_ARCHIVED), action)
    assert_noop(active(open_input(), status=INPUT_NEEDED), attrs.evolve(action, turn_id="x"))


def test_a_late_tool_call_complete_after_an_error_recomputes_to_idle() -> None:
    errored = reduce(active(tc_part(running())), error_turn())
    assert errored.status == ERROR
    assert errored.active_turn is None
    late = reduce(errored, complete(turn_id=TURN))
    assert late.status == IDLE
    assert late.turns is errored.turns
    assert late.modified_at == errored.modified_at


def test_streaming_and_content_actions_do_not_recompute() -> None:
    stale = active(tc_part(streaming()), markdown(), tc_part(running()), status=ERROR)
    for action in (
        delta("x"),
        tool_delta(content="x"),
        tool_start("tc-2"),
        content_changed(),
        ChatResponsePartAction(turn_id=TURN, part=markdown("md-2")),
        ChatUsageAction(turn_id=TURN, usage=UsageInfo(input_tokens=1)),
    ):
        new = reduce(stale, action)
        assert new is not stale, action
        assert new.status == ERROR, action


# ─── Turn end ────────────────────────────────────────────────────────────────


def test_turn_complete_archives_the_turn() -> None:
    usage = UsageInfo(input_tokens=1, output_tokens=2)
    initial = chat(
        IN_PROGRESS | IS_ARCHIVED | UNKNOWN_BIT,
        active_turn=turn(markdown(content="Hi"), usage=usage),
        turns=(finished("t0"),),
    )
    state = reduce(initial, complete_turn(duration=1234))
    assert state.turns[0] is initial.turns[0]
    assert state.turns[1] == Turn(
        id=TURN,
        started_at=STARTED,
        duration=1234,
        message=message(),
        response_parts=(markdown(content="Hi"),),
        usage=usage,
        state=TurnState.COMPLETE,
    )
    assert state.active_turn is None
    assert state.status == IDLE | IS_ARCHIVED | UNKNOWN_BIT
    assert state.modified_at == NOW


def test_turn_cancelled_and_error_archive_the_turn() -> None:
    cancelled_turn = reduce(active(), ChatTurnCancelledAction(turn_id=TURN, duration=5)).turns[-1]
    assert (cancelled_turn.state, cancelled_turn.error, cancelled_turn.duration) == (
        TurnState.CANCELLED,
        None,
        5,
    )
    state = reduce(active(status=IN_PROGRESS | IS_READ), error_turn())
    assert state.turns[-1].state == TurnState.ERROR
    assert state.turns[-1].error == ErrorInfo(error_type="boom", message="Boom")
    assert state.status == ERROR | IS_READ  # IS_READ is kept by a turn end


def test_turn_duration_is_clamped_to_zero() -> None:
    assert reduce(active(), complete_turn(duration=-1000)).turns[-1].duration == 0
    assert reduce(active(), complete_turn(duration=0)).turns[-1].duration == 0


def test_turn_end_no_ops() -> None:
    assert_noop(active(), complete_turn("other"), error_turn("other"))
    assert_noop(chat(ERROR), complete_turn(), error_turn())


def test_turn_end_force_cancels_unfinished_tool_calls() -> None:
    kept = (completed("done"), cancelled("gone"))
    initial = active(
        tc_part(
            streaming("s", partial_input="{", intention="I", contributor=CLIENT, meta={"m": 1})
        ),
        tc_part(streaming("s2", invocation_message="Streaming")),
        tc_part(pending("p", options=OPTIONS, confirmation_title="?", tool_input=REF)),
        tc_part(running("r", selected_option=OPTIONS[0], content=OUTPUT)),
        tc_part(auth_required("a", content=OUTPUT)),
        tc_part(pending_result("pr")),
        *(tc_part(tc) for tc in kept),
        status=INPUT_NEEDED,
    )
    state = reduce(initial, complete_turn())
    parts = state.turns[-1].response_parts

    def skipped(tool_call_id: str, **changes: Any) -> ToolCallCancelledState:
        changes.setdefault("tool_input", "ls")
        return cancelled(tool_call_id, reason=ToolCallCancellationReason.SKIPPED, **changes)

    assert [part.tool_call for part in parts] == [  # type: ignore[union-attr]
        skipped(
            "s",
            invocation_message="",
            tool_input=None,
            intention="I",
            contributor=CLIENT,
            meta={"m": 1},
        ),
        skipped("s2", invocation_message="Streaming", tool_input=None),
        skipped("p", tool_input=REF),
        skipped("r"),
        skipped("a", contributor=MCP),
        skipped("pr"),
        *kept,
    ]
    assert parts[-2] is parts_of(initial)[-2]
    assert parts[-1] is parts_of(initial)[-1]
    assert state.status == IDLE


def test_turn_end_keeps_every_other_part_including_open_input_requests() -> None:
    others = (
        markdown(content="a"),
        open_input("r1"),
        resolved_input("r2"),
        ResourceReponsePart(uri="file:///x"),
        UnknownResponsePart(kind="future", raw={"kind": "future"}),
    )
    state = reduce(active(*others, status=INPUT_NEEDED), complete_turn())
    assert all(new is old for new, old in zip(state.turns[-1].response_parts, others, strict=True))
    assert state.status == IDLE  # a request left in a finished turn needs nothing


def test_turn_end_cancels_an_unknown_status_as_the_reference_does() -> None:
    raw = {
        "status": "paused",
        "toolCallId": "u",
        "toolName": "bash",
        "displayName": "Run",
        "invocationMessage": "Run ls",
        "toolInput": {"uri": "file:///in"},
        "contributor": {"kind": "mcp", "customizationId": "mcp-1"},
        "extra": True,
    }
    state = reduce(active(tc_part(UnknownToolCallState(status="paused", raw=raw))), complete_turn())
    assert state.turns[-1].response_parts[0] == tc_part(
        cancelled(
            "u",
            contributor=MCP,
            tool_input=ContentRef(uri="file:///in"),
            reason=ToolCallCancellationReason.SKIPPED,
        )
    )


def test_turn_end_makes_an_ill_formed_cancellation_decodable() -> None:
    # Without the fields a cancelled call requires, the reference's result has
    # none (undefined, omitted in its JSON), and no peer could decode it: a whole
    # snapshot with it would be fatal.  The missing fields become "".
    bare = UnknownToolCallState(status="paused", raw={"status": "paused", "toolCallId": "u"})
    state = reduce(active(tc_part(bare)), complete_turn())
    tc = state.turns[-1].response_parts[0].tool_call  # type: ignore[union-attr]
    assert isinstance(tc, ToolCallCancelledState)
    assert wire.unstructure(tc) == {"status": "cancelled", "toolCallId": "u", "toolName": "",
                                    "displayName": "", "invocationMessage": "",
                                    "reason": "skipped"}
    assert wire.structure(wire.unstructure(state), ChatState) == state
    # a kept field of the wrong shape is left out rather than poisoning the call
    odd = UnknownToolCallState(status="paused", raw={
        "status": "paused", "toolCallId": "v", "toolName": "t", "displayName": "T",
        "invocationMessage": "m", "toolInput": 42})
    state = reduce(active(tc_part(odd)), complete_turn())
    tc = state.turns[-1].response_parts[0].tool_call  # type: ignore[union-attr]
    assert isinstance(tc, ToolCallCancelledState) and tc.tool_input is None
    assert wire.structure(wire.unstructure(state), ChatState) == state


# ─── Chat metadata ───────────────────────────────────────────────────────────


def test_activity_changed_sets_and_clears_the_activity() -> None:
    state = reduce(chat(), ChatActivityChangedAction(activity="Reading files"))
    assert state.activity == "Reading files"
    assert state.status == IDLE
    assert reduce(state, ChatActivityChangedAction()).activity is None
    assert_noop(state, ChatActivityChangedAction(activity="Reading files"))
    assert_noop(chat(), ChatActivityChangedAction())


def test_working_directory_set_appends_unless_present() -> None:
    first = reduce(chat(), ChatWorkingDirectorySetAction(directory="file:///a"))
    assert first.working_directories == ("file:///a",)
    both = reduce(first, ChatWorkingDirectorySetAction(directory="file:///b"))
    assert both.working_directories == ("file:///a", "file:///b")
    assert_noop(both, ChatWorkingDirectorySetAction(directory="file:///a"))
    from_empty = reduce(chat(working_directories=()), ChatWorkingDirectorySetAction(directory="x"))
    assert from_empty.working_directories == ("x",)


def test_working_directory_removed_may_leave_an_empty_set() -> None:
    state = chat(working_directories=("file:///a", "file:///b", "file:///a"))
    removed = reduce(state, ChatWorkingDirectoryRemovedAction(directory="file:///a"))
    assert removed.working_directories == ("file:///b", "file:///a")  # the first occurrence
    single = chat(working_directories=("file:///a",))
    emptied = reduce(single, ChatWorkingDirectoryRemovedAction(directory="file:///a"))
    assert emptied.working_directories == ()  # [] means "no access": not the same as absent
    assert wire.unstructure(emptied)["workingDirectories"] == []
    assert_noop(single, ChatWorkingDirectoryRemovedAction(directory="file:///z"))
    assert_noop(chat(), ChatWorkingDirectoryRemovedAction(directory="file:///a"))


def test_draft_changed_sets_and_clears_the_draft() -> None:
    state = reduce(chat(), ChatDraftChangedAction(draft=message("Draft")))
    assert state.draft == message("Draft")
    assert state.modified_at == OLD
    assert reduce(state, ChatDraftChangedAction()).draft is None
    assert_noop(state, ChatDraftChangedAction(draft=message("Draft")))
    assert_noop(chat(), ChatDraftChangedAction())


# ─── Pending messages ────────────────────────────────────────────────────────


def set_pending(kind: str, message_id: str, text: str | None = None) -> ChatPendingMessageSetAction:
    return ChatPendingMessageSetAction(
        kind=kind, id=message_id, message=message(text or message_id)
    )


def test_pending_message_set_steering_replaces() -> None:
    state = reduce(chat(steering_message=pending_message("a")), set_pending("steering", "b"))
    assert state.steering_message == pending_message("b")
    assert state.status == IDLE
    assert state.modified_at == OLD


def test_pending_message_set_queued_upserts() -> None:
    state = reduce(chat(), set_pending("queued", "a"), set_pending("queued", "b"))
    assert state.queued_messages == (pending_message("a"), pending_message("b"))
    state = reduce(state, set_pending("queued", "a", "changed"))
    assert state.queued_messages == (pending_message("a", "changed"), pending_message("b"))


def test_equal_pending_message_set_returns_the_state_itself() -> None:
    state = reduce(chat(), set_pending("steering", "s"), set_pending("queued", "q"))
    assert_noop(state, set_pending("steering", "s"), set_pending("queued", "q"))


def test_pending_message_kinds_other_than_steering_act_on_the_queue() -> None:
    # As in the reference: anything that is not "steering" is the queue.
    state = reduce(chat(), set_pending("later", "a"))
    assert state.queued_messages == (pending_message("a"),)
    state = reduce(state, ChatPendingMessageRemovedAction(kind="later", id="a"))
    assert state.queued_messages is None


def test_pending_message_removed() -> None:
    state = chat(steering_message=pending_message("s"), queued_messages=(pending_message("q"),))
    assert (
        reduce(state, ChatPendingMessageRemovedAction(kind="steering", id="s")).steering_message
        is None
    )
    assert (
        reduce(state, ChatPendingMessageRemovedAction(kind="queued", id="q")).queued_messages
        is None
    )
    assert_noop(
        state,
        ChatPendingMessageRemovedAction(kind="steering", id="q"),
        ChatPendingMessageRemovedAction(kind="queued", id="s"),
    )
    assert_noop(chat(), ChatPendingMessageRemovedAction(kind="queued", id="q"))
    assert_noop(chat(queued_messages=()), ChatPendingMessageRemovedAction(kind="queued", id="q"))
    assert_noop(chat(), ChatPendingMessageRemovedAction(kind="steering", id="s"))


def test_queued_messages_reordered() -> None:
    a, b, c = (pending_message(name) for name in "abc")
    state = chat(queued_messages=(a, b, c))
    reordered = reduce(state, ChatQueuedMessagesReorderedAction(order=("c", "zzz", "a", "c")))
    assert reordered.queued_messages == (c, a, b)
    assert_noop(state, ChatQueuedMessagesReorderedAction(order=("a", "b")))
    assert_noop(state, ChatQueuedMessagesReorderedAction(order=()))
    assert_noop(chat(), ChatQueuedMessagesReorderedAction(order=("a",)))


def test_queued_messages_reordered_keeps_the_last_of_a_repeated_id() -> None:
    first, second = pending_message("a", "first"), pending_message("a", "second")
    state = reduce(
        chat(queued_messages=(first, second)), ChatQueuedMessagesReorderedAction(order=("a",))
    )
    assert state.queued_messages == (second,)


# ─── Input requests ──────────────────────────────────────────────────────────


def requested(request_id: str = "req-1", **changes: Any) -> ChatInputRequestedAction:
    return ChatInputRequestedAction(request=request(request_id, **changes))


def answer_changed(
    question: str, answer: ChatInputAnswered | None, request_id: str = "req-1"
) -> ChatInputAnswerChangedAction:
    return ChatInputAnswerChangedAction(request_id=request_id, question_id=question, answer=answer)


def completed_input(
    response: ChatInputResponseKind = ChatInputResponseKind.ACCEPT,
    request_id: str = "req-1",
    answers: Any = None,
) -> ChatInputCompletedAction:
    return ChatInputCompletedAction(request_id=request_id, response=response, answers=answers)


def test_input_requested_without_an_active_turn_is_a_noop() -> None:
    assert_noop(chat(IDLE | IS_READ), requested())
    assert_noop(chat(ERROR), requested())


def test_input_requested_appends_a_part_and_needs_input() -> None:
    state = reduce(active(markdown(), status=IN_PROGRESS | IS_READ | IS_ARCHIVED), requested())
    assert parts_of(state)[1] == open_input()
    assert state.status == INPUT_NEEDED | IS_ARCHIVED  # IS_READ cleared
    assert state.modified_at == NOW


def test_input_requested_again_replaces_the_open_part_in_place() -> None:
    answers = {"q1": draft("node")}
    initial = active(open_input(answers=answers), markdown(), status=INPUT_NEEDED)
    state = reduce(initial, requested(message="Clarify, please"))
    assert parts_of(state) == (
        open_input(message="Clarify, please", answers=answers),  # the drafts survive
        markdown(),
    )
    own = reduce(initial, requested(answers={"q2": draft("deno")}))
    assert input_part(own).request.answers == {"q2": draft("deno")}
    emptied = reduce(initial, requested(answers={}))
    assert input_part(emptied).request.answers == {}


def test_input_requested_never_reuses_a_resolved_part() -> None:
    initial = active(resolved_input(), status=IN_PROGRESS)
    state = reduce(initial, requested())
    assert parts_of(state) == (resolved_input(), open_input())
    assert state.status == INPUT_NEEDED


def test_input_requested_again_with_the_same_request_returns_the_state_itself() -> None:
    state = reduce(active(), requested())
    assert reduce(state, requested()) is state


def test_input_answer_changed_sets_and_deletes_draft_answers() -> None:
    initial = active(open_input(), status=INPUT_NEEDED)
    state = reduce(initial, answer_changed("q1", draft("a")), answer_changed("q2", draft("b")))
    assert input_part(state).request.answers == {"q1": draft("a"), "q2": draft("b")}
    assert state.modified_at == NOW
    assert state.status == INPUT_NEEDED
    state = reduce(state, answer_changed("q1", None), answer_changed("q2", None))
    assert input_part(state).request.answers is None  # empty means absent
    assert reduce(state, answer_changed("q1", None)) is state  # nothing to delete, same time


def test_input_answer_changed_does_not_recompute() -> None:
    state = reduce(active(open_input(), status=IN_PROGRESS), answer_changed("q1", draft("a")))
    assert state.status == IN_PROGRESS


def test_input_answer_changed_no_ops() -> None:
    assert_noop(chat(), answer_changed("q1", draft("a")))
    assert_noop(active(open_input()), answer_changed("q1", draft("a"), request_id="other"))
    assert_noop(active(resolved_input()), answer_changed("q1", draft("a")))


def test_input_completed_resolves_the_part_in_place() -> None:
    initial = active(
        open_input(answers={"q1": draft("a"), "q2": draft("b")}),
        markdown(),
        status=INPUT_NEEDED | IS_ARCHIVED,
    )
    state = reduce(
        initial, completed_input(ChatInputResponseKind.DECLINE, answers={"q2": draft("final")})
    )
    assert parts_of(state) == (
        InputRequestResponsePart(
            request=request(answers={"q1": draft("a"), "q2": draft("final")}),
            response=ChatInputResponseKind.DECLINE,
        ),
        markdown(),
    )
    assert state.status == IN_PROGRESS | IS_ARCHIVED
    assert state.modified_at == NOW
    bare = reduce(active(open_input()), completed_input(answers={}))
    assert input_part(bare).request.answers is None
    assert input_part(bare).response == ChatInputResponseKind.ACCEPT


def test_input_completed_keeps_input_needed_while_others_are_open() -> None:
    initial = active(open_input("r1"), open_input("r2"), status=INPUT_NEEDED)
    state = reduce(initial, completed_input(request_id="r1"))
    assert state.status == INPUT_NEEDED
    assert reduce(state, completed_input(request_id="r2")).status == IN_PROGRESS


def test_input_completed_no_ops() -> None:
    assert_noop(chat(), completed_input())
    assert_noop(active(open_input("r1"), status=INPUT_NEEDED), completed_input(request_id="r2"))
    assert_noop(active(resolved_input()), completed_input())


def test_input_completed_targets_the_open_part_after_a_resolved_one() -> None:
    initial = active(resolved_input(), open_input(message="Again"), status=INPUT_NEEDED)
    state = reduce(initial, completed_input(ChatInputResponseKind.CANCEL))
    assert parts_of(state)[0] is parts_of(initial)[0]
    assert input_part(state, 1).response == ChatInputResponseKind.CANCEL


def test_only_open_requests_of_the_active_turn_need_input() -> None:
    assert _status.chat_activity(turn(open_input())) == INPUT_NEEDED
    assert _status.chat_activity(turn(resolved_input())) == IN_PROGRESS
    assert _status.chat_activity(None) == IDLE


# ─── Truncation and history paging ───────────────────────────────────────────


def test_truncated_without_a_turn_id_clears_turns_and_cursor() -> None:
    initial = chat(
        ERROR | IS_READ,
        turns=(finished("t0"), finished("t1")),
        turns_next_cursor="older",
        active_turn=turn(open_input()),
        steering_message=pending_message("s"),
        queued_messages=(pending_message("q"),),
        draft=message("Draft"),
    )
    state = reduce(initial, ChatTruncatedAction())
    assert state.turns == ()
    assert state.turns_next_cursor is None
    assert state.active_turn is None
    assert state.status == IDLE | IS_READ
    assert state.modified_at == NOW
    assert (state.steering_message, state.queued_messages, state.draft) == (
        initial.steering_message,
        initial.queued_messages,
        initial.draft,
    )


def test_truncated_to_a_turn_keeps_the_turns_up_to_it_and_the_cursor() -> None:
    initial = chat(
        turns=(finished("t0"), finished("t1"), finished("t2")),
        turns_next_cursor="older",
        active_turn=turn(),
        status=SessionStatus(IN_PROGRESS),
    )
    state = reduce(initial, ChatTruncatedAction(turn_id="t1"))
    assert [t.id for t in state.turns] == ["t0", "t1"]
    assert state.turns_next_cursor == "older"
    assert state.active_turn is None
    assert state.status == IDLE
    last = reduce(initial, ChatTruncatedAction(turn_id="t2"))
    assert last.turns == initial.turns
    assert last.active_turn is None


def test_truncated_to_an_unknown_turn_is_a_noop() -> None:
    assert_noop(chat(turns=(finished("t0"),), active_turn=turn()), ChatTruncatedAction(turn_id="x"))
    assert_noop(chat(), ChatTruncatedAction(turn_id="x"))


def test_truncated_again_returns_the_state_itself() -> None:
    state = reduce(chat(turns=(finished("t0"),)), ChatTruncatedAction())
    assert reduce(state, ChatTruncatedAction()) is state
    kept = reduce(chat(turns=(finished("t0"),)), ChatTruncatedAction(turn_id="t0"))
    assert reduce(kept, ChatTruncatedAction(turn_id="t0")) is kept


def test_turns_loaded_prepends_older_turns_and_sets_the_cursor() -> None:
    initial = chat(turns=(finished("t3"), finished("t4")), turns_next_cursor="c1")
    action = ChatTurnsLoadedAction(
        turns=(finished("t1"), finished("t2"), finished("t3", "Duplicate")), turns_next_cursor="c0"
    )
    state = reduce(initial, action)
    assert [t.id for t in state.turns] == ["t1", "t2", "t3", "t4"]
    assert state.turns[2] is initial.turns[0]  # the present turn wins
    assert state.turns_next_cursor == "c0"
    assert state.modified_at == OLD
    assert state.status == initial.status


def test_turns_loaded_without_a_cursor_clears_it() -> None:
    initial = chat(turns=(finished("t1"),), turns_next_cursor="c1")
    state = reduce(initial, ChatTurnsLoadedAction(turns=(finished("t1"),)))
    assert state.turns is initial.turns
    assert state.turns_next_cursor is None


def test_turns_loaded_keeps_repeats_within_the_page() -> None:
    # Only the turns already in the state are checked, as in the reference.
    state = reduce(chat(), ChatTurnsLoadedAction(turns=(finished("t1"), finished("t1"))))
    assert [t.id for t in state.turns] == ["t1", "t1"]


def test_turns_loaded_with_nothing_new_returns_the_state_itself() -> None:
    initial = chat(turns=(finished("t1"),), turns_next_cursor="c1")
    assert_noop(initial, ChatTurnsLoadedAction(turns=(finished("t1"),), turns_next_cursor="c1"))
    assert_noop(chat(), ChatTurnsLoadedAction(turns=()))


# ─── Status arithmetic ───────────────────────────────────────────────────────


def test_status_recompute_keeps_every_flag_bit() -> None:
    status = SessionStatus(INPUT_NEEDED | IS_READ | IS_ARCHIVED | UNKNOWN_BIT)
    recomputed = _status.with_activity(status, IDLE)
    assert int(recomputed) == IDLE | IS_READ | IS_ARCHIVED | UNKNOWN_BIT
    assert _status.with_activity(recomputed, IDLE) is recomputed
    assert int(_status.without_flag(recomputed, IS_READ)) == IDLE | IS_ARCHIVED | UNKNOWN_BIT
    assert int(_status.with_activity(0, INPUT_NEEDED)) == INPUT_NEEDED
    assert _status.with_activity(7, IDLE) is SessionStatus(1)
    for value in range(128):
        assert _status.with_activity(value, IDLE) == (value & ~31) | IDLE


def test_chat_activity_precedence() -> None:
    blocking = turn(tc_part(pending()))
    assert _status.chat_activity(blocking, error=True) == ERROR
    assert _status.chat_activity(blocking) == INPUT_NEEDED
    assert _status.chat_activity(turn(tc_part(auth_required()))) == INPUT_NEEDED
    assert _status.chat_activity(turn(tc_part(pending_result()))) == INPUT_NEEDED
    assert _status.chat_activity(turn(tc_part(running()), markdown())) == IN_PROGRESS
    assert _status.chat_activity(None) == IDLE
    assert _status.has_blocking_tool_call(turn(tc_part(auth_required())))
    assert not _status.has_blocking_tool_call(turn(open_input()))
    assert _status.has_open_input_request(turn(open_input()))
    assert not _status.has_open_input_request(turn(resolved_input(), tc_part(pending())))
    assert _status.needs_input(turn(open_input()))
    assert not _status.needs_input(None)
    state = active(tc_part(pending()), status=IN_PROGRESS | IS_READ)
    assert _status.recompute_chat_status(state) == INPUT_NEEDED | IS_READ
    assert _status.recompute_chat_status(state, error=True) == ERROR | IS_READ


# ─── Fast copies ─────────────────────────────────────────────────────────────


def test_fast_copies_are_ordinary_frozen_instances() -> None:
    state = active(markdown(content="x"))
    active_turn = state.active_turn
    assert active_turn is not None
    copied = chat_module._evolve_state(state, title="New")
    assert type(copied) is ChatState
    assert copied == attrs.evolve(state, title="New")
    assert hash(copied) == hash(attrs.evolve(state, title="New"))
    assert chat_module._evolve_state(state) == state
    with pytest.raises(FrozenInstanceError):
        copied.title = "x"  # type: ignore[misc]
    replaced = chat_module._turn_with_parts(active_turn, ())
    assert type(replaced) is ActiveTurn
    assert replaced == attrs.evolve(active_turn, response_parts=())
    part = active_turn.response_parts[0]
    assert isinstance(part, MarkdownResponsePart)
    grown_state = chat_module._with_markdown_text(
        state, active_turn, (), (), part, part._content.appended("y")
    )
    assert type(grown_state) is ChatState
    assert grown_state == attrs.evolve(
        state,
        active_turn=attrs.evolve(
            active_turn, response_parts=(MarkdownResponsePart(id="md-1", content="xy"),)
        ),
    )
    grown = grown_state.active_turn.response_parts[0]  # type: ignore[union-attr]
    assert type(grown) is MarkdownResponsePart
    with pytest.raises(FrozenInstanceError):
        grown.id = "x"  # type: ignore[misc]
    before, after = markdown("md-0"), markdown("md-2")
    middle = chat_module._with_markdown_text(
        state, active_turn, (before,), (after,), part, part._content.appended("z")
    )
    assert middle.active_turn is not None
    assert middle.active_turn.response_parts == (before, markdown("md-1", "xz"), after)
    assert chat_module._with_turn_parts(state, active_turn, ()) == attrs.evolve(
        state, active_turn=attrs.evolve(active_turn, response_parts=())
    )
    status = chat_module._state_with_status(state, SessionStatus.IDLE)
    assert status == attrs.evolve(state, status=SessionStatus.IDLE)
    with pytest.raises(TypeError):
        chat_module._evolve_state(state, no_such_field=1)


def test_fast_constructors_build_what_the_classes_build() -> None:
    """The generated constructors take the classes' arguments, defaults and converters."""
    built = chat_module._new_streaming(tool_call_id="tc-1", tool_name="ls", display_name="List")
    assert type(built) is ToolCallStreamingState
    assert built == ToolCallStreamingState(tool_call_id="tc-1", tool_name="ls", display_name="List")
    with pytest.raises(FrozenInstanceError):
        built.tool_name = "x"  # type: ignore[misc]
    # The converter of a streamed-text field runs, as in ``__init__``.
    partial = chat_module._new_streaming(
        tool_call_id="tc-1", tool_name="ls", display_name="List", partial_input="{"
    )
    assert type(partial._partial_input) is TextBuffer
    assert partial == attrs.evolve(built, partial_input="{")
    with pytest.raises(TypeError):
        chat_module._new_streaming(tool_call_id="tc-1", tool_name="ls")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        chat_module._new_streaming(  # type: ignore[call-arg]
            tool_call_id="tc-1", tool_name="ls", display_name="List", no_such_field=1
        )
    with pytest.raises(TypeError, match="slotted class without validators"):
        chat_module._builder(_Unslotted)


@attrs.frozen(slots=False)
class _Unslotted:
    value: int


# ─── Any order: never raises, identity exactly on equality ───────────────────

_IDS = st.sampled_from(["turn-1", "turn-2"])
_PARTS = st.sampled_from(["md-1", "r-1", "tc-1", "tc-2", ""])
_TOOLS = st.sampled_from(["tc-1", "tc-2"])
_REQUESTS = st.sampled_from(["req-1", "req-2"])
_TEXT = st.text(alphabet="ab", max_size=2)
_META = st.sampled_from([None, {"m": 1}])
_CONTRIBUTORS = st.sampled_from([None, CLIENT, MCP, ToolCallClientContributor(client_id="c2")])
_INPUTS = st.sampled_from([None, "ls", REF])
_OPTIONAL_ANSWERS = st.sampled_from([None, {}, {"q": draft("x")}])


def _turn_actions() -> st.SearchStrategy[StateAction]:
    return st.one_of(
        st.builds(
            ChatTurnStartedAction,
            turn_id=_IDS,
            started_at=st.sampled_from([OLD, STARTED]),
            message=st.just(message()),
            queued_message_id=st.sampled_from([None, "a", "b"]),
        ),
        st.builds(ChatTurnCompleteAction, turn_id=_IDS, duration=st.integers(-5, 5)),
        st.builds(ChatTurnCancelledAction, turn_id=_IDS, duration=st.integers(-5, 5)),
        st.builds(
            ChatErrorAction,
            turn_id=_IDS,
            duration=st.integers(-5, 5),
            error=st.just(ErrorInfo(error_type="e", message="m")),
        ),
        st.builds(ChatTruncatedAction, turn_id=st.sampled_from([None, "turn-1", "turn-2", "t0"])),
        st.builds(
            ChatTurnsLoadedAction,
            turns=st.lists(st.sampled_from([finished("t0"), finished("t9")]), max_size=2).map(
                tuple
            ),
            turns_next_cursor=st.sampled_from([None, "c"]),
        ),
        st.builds(
            ChatUsageAction,
            turn_id=_IDS,
            usage=st.sampled_from([UsageInfo(input_tokens=1), UsageInfo()]),
        ),
    )


def _stream_actions() -> st.SearchStrategy[StateAction]:
    return st.one_of(
        st.builds(ChatDeltaAction, turn_id=_IDS, part_id=_PARTS, content=_TEXT),
        st.builds(ChatReasoningAction, turn_id=_IDS, part_id=_PARTS, content=_TEXT),
        st.builds(
            ChatResponsePartAction,
            turn_id=_IDS,
            part=st.sampled_from(
                [
                    markdown(),
                    ReasoningResponsePart(id="r-1", content=""),
                    markdown(""),
                    open_input(),
                ]
            ),
        ),
    )


def _tool_actions() -> st.SearchStrategy[StateAction]:
    return st.one_of(
        st.builds(
            ChatToolCallStartAction,
            turn_id=_IDS,
            tool_call_id=_TOOLS,
            tool_name=st.just("t"),
            display_name=st.just("T"),
            contributor=_CONTRIBUTORS,
            intention=st.sampled_from([None, "i"]),
        ),
        st.builds(
            ChatToolCallDeltaAction,
            turn_id=_IDS,
            tool_call_id=_TOOLS,
            content=st.sampled_from([None, "", "{"]),
            invocation_message=st.sampled_from([None, "m"]),
            meta=_META,
        ),
        st.builds(
            ChatToolCallReadyAction,
            turn_id=_IDS,
            tool_call_id=_TOOLS,
            invocation_message=st.sampled_from(["go", "again"]),
            tool_input=_INPUTS,
            contributor=_CONTRIBUTORS,
            meta=_META,
            confirmed=st.sampled_from([None, ToolCallConfirmationReason.NOT_NEEDED]),
            options=st.sampled_from([None, OPTIONS]),
            risk_assessment=st.sampled_from([None, RISK]),
        ),
        st.builds(
            ChatToolCallApprovedAction,
            turn_id=_IDS,
            tool_call_id=_TOOLS,
            confirmed=st.just(ToolCallConfirmationReason.USER_ACTION),
            selected_option_id=st.sampled_from([None, "allow"]),
            edited_tool_input=st.sampled_from([None, "e"]),
        ),
        st.builds(
            ChatToolCallDeniedAction,
            turn_id=_IDS,
            tool_call_id=_TOOLS,
            reason=st.just(ToolCallCancellationReason.DENIED),
        ),
        st.builds(
            ChatToolCallCompleteAction,
            turn_id=_IDS,
            tool_call_id=_TOOLS,
            result=st.sampled_from([RESULT, FAILED]),
            requires_result_confirmation=st.sampled_from([None, True]),
        ),
        st.builds(
            ChatToolCallResultConfirmedAction,
            turn_id=_IDS,
            tool_call_id=_TOOLS,
            approved=st.booleans(),
        ),
        st.builds(
            ChatToolCallContentChangedAction,
            turn_id=_IDS,
            tool_call_id=_TOOLS,
            content=st.sampled_from([(), OUTPUT]),
            meta=_META,
        ),
        st.builds(
            ChatToolCallAuthRequiredAction, turn_id=_IDS, tool_call_id=_TOOLS, auth=st.just(AUTH)
        ),
        st.builds(ChatToolCallAuthResolvedAction, turn_id=_IDS, tool_call_id=_TOOLS, meta=_META),
    )


def _chat_actions() -> st.SearchStrategy[StateAction]:
    return st.one_of(
        st.builds(ChatActivityChangedAction, activity=st.sampled_from([None, "x"])),
        st.builds(ChatWorkingDirectorySetAction, directory=st.sampled_from(["a", "b"])),
        st.builds(ChatWorkingDirectoryRemovedAction, directory=st.sampled_from(["a", "b"])),
        st.builds(ChatDraftChangedAction, draft=st.sampled_from([None, message()])),
        st.builds(
            ChatPendingMessageSetAction,
            kind=st.sampled_from(["steering", "queued"]),
            id=st.sampled_from(["a", "b"]),
            message=st.sampled_from([message(), message("Other")]),
        ),
        st.builds(
            ChatPendingMessageRemovedAction,
            kind=st.sampled_from(["steering", "queued"]),
            id=st.sampled_from(["a", "b"]),
        ),
        st.builds(
            ChatQueuedMessagesReorderedAction,
            order=st.lists(st.sampled_from(["a", "b", "c"]), max_size=3).map(tuple),
        ),
        st.builds(
            ChatInputRequestedAction,
            request=st.builds(request, _REQUESTS, answers=_OPTIONAL_ANSWERS),
        ),
        st.builds(
            ChatInputAnswerChangedAction,
            request_id=_REQUESTS,
            question_id=st.sampled_from(["q", "r"]),
            answer=st.sampled_from([None, draft("x")]),
        ),
        st.builds(
            ChatInputCompletedAction,
            request_id=_REQUESTS,
            response=st.sampled_from(list(ChatInputResponseKind)),
            answers=_OPTIONAL_ANSWERS,
        ),
        st.just(UnknownAction(type="chat/future", raw={"type": "chat/future"})),
    )


_ACTIONS: st.SearchStrategy[StateAction] = st.one_of(
    _turn_actions(), _stream_actions(), _tool_actions(), _chat_actions()
)
_INITIAL = st.sampled_from(
    [
        chat(IDLE | IS_ARCHIVED | UNKNOWN_BIT),
        chat(ERROR | IS_ARCHIVED | UNKNOWN_BIT, turns=(finished("t0"),), turns_next_cursor="c"),
        active(
            markdown(),
            tc_part(running(contributor=MCP)),
            tc_part(pending("tc-2", options=OPTIONS)),
            open_input(),
            status=INPUT_NEEDED | IS_ARCHIVED | UNKNOWN_BIT,
        ),
        active(
            tc_part(auth_required("tc-1")),
            ReasoningResponsePart(id="r-1", content=""),
            resolved_input("req-2"),
            status=IDLE | IS_ARCHIVED | UNKNOWN_BIT,  # a stale status
            queued_messages=(pending_message("a"), pending_message("b")),
            working_directories=("a",),
        ),
    ]
)
# After these, the activity bits are the recomputed ones (``chat/error`` aside).
_RECOMPUTING = (
    ChatToolCallReadyAction,
    ChatToolCallApprovedAction,
    ChatToolCallDeniedAction,
    ChatToolCallCompleteAction,
    ChatToolCallResultConfirmedAction,
    ChatToolCallAuthRequiredAction,
    ChatToolCallAuthResolvedAction,
    ChatTurnStartedAction,
    ChatInputRequestedAction,
    ChatInputCompletedAction,
    ChatTruncatedAction,
)


def _snapshot(states: Iterable[ChatState]) -> list[Any]:
    return [wire.dump(state) for state in states]


@given(_INITIAL, st.lists(_ACTIONS, max_size=40))
def test_any_sequence_of_actions_is_reduced_without_raising(
    initial: ChatState, actions: list[StateAction]
) -> None:
    states = [initial]
    for action in actions:
        state = states[-1]
        new = chat_reducer(state, action, now=clock)
        # ``state`` itself exactly when the result equals it.
        assert (new is state) == (new == state), action
        assert type(new) is ChatState
        if isinstance(action, _RECOMPUTING) and new is not state:
            assert int(new.status) & 31 == int(_status.recompute_chat_status(new)) & 31, action
        assert int(new.status) & (IS_ARCHIVED | UNKNOWN_BIT) == IS_ARCHIVED | UNKNOWN_BIT
        states.append(new)
    before = _snapshot(states)
    # Replaying gives equal states, and reducing further changed none of the old ones.
    assert reduce(states[0], *actions) == states[-1]
    assert _snapshot(states) == before
    # Every state survives the wire codec.
    for state in states:
        assert wire.structure(wire.dump(state), ChatState) == state
