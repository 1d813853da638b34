"""Focused tests of ``chat_reducer``, one rule of inventory §2.3 at a time.

The official fixtures (``test_reducer_fixtures.py``) pin the common paths;
these tests add the edges: every no-op returns the very same state object,
flag bits (including unknown ones) survive every status recompute, older
states stay valid while a newer one is streamed into, and no sequence of
well-typed actions makes the reducer raise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, get_args

import attrs
import pytest
from attrs.exceptions import FrozenInstanceError
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol.reducers import _status
from agenthost_protocol.reducers import chat as chat_module
from agenthost_protocol.reducers.chat import chat_reducer
from agenthost_protocol.types import (
    ActiveTurn,
    ChatAction,
    ChatDeltaAction,
    ChatErrorAction,
    ChatInputAnswerChangedAction,
    ChatInputAnswered,
    ChatInputCompletedAction,
    ChatInputRequest,
    ChatInputRequestedAction,
    ChatInputResponseKind,
    ChatInputSkipped,
    ChatInputTextAnswerValue,
    ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction,
    ChatQueuedMessagesReorderedAction,
    ChatReasoningAction,
    ChatResponsePartAction,
    ChatState,
    ChatToolCallApprovedAction,
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
    ChatTurnStartedAction,
    ChatUsageAction,
    ConfirmationOption,
    ConfirmationOptionKind,
    ErrorInfo,
    MarkdownResponsePart,
    Message,
    MessageKind,
    MessageOrigin,
    PendingMessage,
    PendingMessageKind,
    ReasoningResponsePart,
    ResourceReponsePart,
    ResponsePart,
    RootActiveSessionsChangedAction,
    SessionStatus,
    SessionTitleChangedAction,
    StateAction,
    SystemNotificationResponsePart,
    ToolCallCancellationReason,
    ToolCallCancelledState,
    ToolCallClientContributor,
    ToolCallCompletedState,
    ToolCallConfirmationReason,
    ToolCallPendingConfirmationState,
    ToolCallPendingResultConfirmationState,
    ToolCallResponsePart,
    ToolCallResult,
    ToolCallRunningState,
    ToolCallState,
    ToolCallStreamingState,
    ToolResultTextContent,
    Turn,
    TurnState,
    UnknownAction,
    UnknownResponsePart,
    UnknownToolCallState,
    UsageInfo,
)

NOW = "1970-01-01T00:00:09.999Z"
OLD = "1970-01-01T00:00:01.000Z"
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
    return 9999


def reduce(state: ChatState, *actions: StateAction) -> ChatState:
    for action in actions:
        state = chat_reducer(state, action, now=clock)
    return state


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


def active(*parts: ResponsePart, status: int = IN_PROGRESS, **changes: Any) -> ChatState:
    turn = ActiveTurn(id=TURN, message=message(), response_parts=parts)
    return chat(status, active_turn=turn, **changes)


def markdown(part_id: str = "md-1", content: str = "") -> MarkdownResponsePart:
    return MarkdownResponsePart(id=part_id, content=content)


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


def tc_part(tool_call: ToolCallState) -> ToolCallResponsePart:
    return ToolCallResponsePart(tool_call=tool_call)


def streaming(tool_call_id: str = "tc-1", **changes: Any) -> ToolCallStreamingState:
    return ToolCallStreamingState(
        tool_call_id=tool_call_id, tool_name="bash", display_name="Run", **changes
    )


def pending(tool_call_id: str = "tc-1", **changes: Any) -> ToolCallPendingConfirmationState:
    return ToolCallPendingConfirmationState(
        tool_call_id=tool_call_id,
        tool_name="bash",
        display_name="Run",
        invocation_message="Run ls",
        tool_input="ls",
        **changes,
    )


def running(tool_call_id: str = "tc-1", **changes: Any) -> ToolCallRunningState:
    fields: dict[str, Any] = {
        "invocation_message": "Run ls",
        "tool_input": "ls",
        "confirmed": ToolCallConfirmationReason.USER_ACTION,
    }
    fields.update(changes)
    return ToolCallRunningState(
        tool_call_id=tool_call_id, tool_name="bash", display_name="Run", **fields
    )


def pending_result(tool_call_id: str = "tc-1") -> ToolCallPendingResultConfirmationState:
    return ToolCallPendingResultConfirmationState(
        tool_call_id=tool_call_id,
        tool_name="bash",
        display_name="Run",
        invocation_message="Run ls",
        tool_input="ls",
        confirmed=ToolCallConfirmationReason.SETTING,
        selected_option=OPTIONS[0],
        success=True,
        past_tense_message="Ran ls",
        content=(ToolResultTextContent(text="a b"),),
    )


def completed(tool_call_id: str = "tc-1") -> ToolCallCompletedState:
    return ToolCallCompletedState(
        tool_call_id=tool_call_id,
        tool_name="bash",
        display_name="Run",
        invocation_message="Run ls",
        confirmed=ToolCallConfirmationReason.NOT_NEEDED,
        success=True,
        past_tense_message="Ran ls",
    )


def cancelled(tool_call_id: str = "tc-1") -> ToolCallCancelledState:
    return ToolCallCancelledState(
        tool_call_id=tool_call_id,
        tool_name="bash",
        display_name="Run",
        invocation_message="Run ls",
        reason=ToolCallCancellationReason.DENIED,
    )


OPTIONS = (
    ConfirmationOption(id="allow", label="Allow", kind=ConfirmationOptionKind.APPROVE),
    ConfirmationOption(id="deny", label="Deny", kind=ConfirmationOptionKind.DENY),
)
RESULT = ToolCallResult(
    success=True,
    past_tense_message="Ran ls",
    content=(ToolResultTextContent(text="a b"),),
    structured_content={"files": 2},
)


def ready(confirmed: Any = None, **changes: Any) -> ChatToolCallReadyAction:
    return ChatToolCallReadyAction(
        turn_id=TURN,
        tool_call_id="tc-1",
        invocation_message="Run ls -l",
        tool_input="ls -l",
        confirmed=confirmed,
        **changes,
    )


def approve(**changes: Any) -> ChatToolCallApprovedAction:
    return ChatToolCallApprovedAction(
        turn_id=TURN,
        tool_call_id="tc-1",
        confirmed=ToolCallConfirmationReason.USER_ACTION,
        **changes,
    )


def deny(**changes: Any) -> ChatToolCallDeniedAction:
    return ChatToolCallDeniedAction(
        turn_id=TURN, tool_call_id="tc-1", reason=ToolCallCancellationReason.DENIED, **changes
    )


def complete(**changes: Any) -> ChatToolCallCompleteAction:
    return ChatToolCallCompleteAction(turn_id=TURN, tool_call_id="tc-1", result=RESULT, **changes)


def pending_message(message_id: str) -> PendingMessage:
    return PendingMessage(id=message_id, message=message(message_id))


def request(request_id: str = "req-1", **changes: Any) -> ChatInputRequest:
    changes.setdefault("message", "Which one?")
    return ChatInputRequest(id=request_id, **changes)


def draft(text: str) -> ChatInputAnswered:
    return ChatInputAnswered(state="draft", value=ChatInputTextAnswerValue(value=text))  # type: ignore[arg-type]


def assert_noop(state: ChatState, *actions: StateAction) -> None:
    for action in actions:
        assert chat_reducer(state, action, now=clock) is state, action


# ─── Routing ─────────────────────────────────────────────────────────────────


def test_actions_of_other_channels_return_the_state_itself() -> None:
    state = active(markdown())
    seen: list[UnknownAction] = []
    for action in (
        SessionTitleChangedAction(title="x"),
        RootActiveSessionsChangedAction(active_sessions=3),
    ):
        assert chat_reducer(state, action, now=clock, on_unknown=seen.append) is state
    assert seen == []


def test_unknown_action_calls_on_unknown_and_returns_the_state_itself() -> None:
    state = active(markdown())
    unknown = UnknownAction(type="chat/somethingNew", raw={"type": "chat/somethingNew"})
    seen: list[UnknownAction] = []
    assert chat_reducer(state, unknown, on_unknown=seen.append) is state
    assert seen == [unknown]
    assert chat_reducer(state, unknown) is state


def test_every_chat_action_class_is_routed() -> None:
    assert frozenset(get_args(ChatAction)) == chat_module._CHAT_ACTIONS


def test_each_action_reads_the_clock() -> None:
    started = chat_reducer(chat(), start(), now=lambda: 0)
    assert started.modified_at == "1970-01-01T00:00:00.000Z"
    ended = chat_reducer(
        started, ChatTurnCompleteAction(turn_id=TURN), now=lambda: 1_750_000_000_123
    )
    assert ended.modified_at == "2025-06-15T15:06:40.123Z"
    again = chat_reducer(started, ChatTurnCompleteAction(turn_id=TURN), now=lambda: 0)
    assert again.modified_at == "1970-01-01T00:00:00.000Z"


def test_wall_clock_is_used_without_now() -> None:
    state = chat_reducer(chat(), ChatTurnStartedAction(turn_id=TURN, message=message()))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", state.modified_at)
    assert state.modified_at > "2020"


# ─── Turn start ──────────────────────────────────────────────────────────────


def test_turn_started_sets_a_fresh_active_turn() -> None:
    state = reduce(chat(IDLE | IS_READ | IS_ARCHIVED | UNKNOWN_BIT), start())
    assert state.active_turn == ActiveTurn(id=TURN, message=message(), response_parts=())
    assert state.status == IN_PROGRESS | IS_ARCHIVED | UNKNOWN_BIT  # IS_READ cleared
    assert state.modified_at == NOW


def start(turn_id: str = TURN, queued: str | None = None) -> ChatTurnStartedAction:
    return ChatTurnStartedAction(turn_id=turn_id, message=message(), queued_message_id=queued)


def test_turn_started_replaces_an_existing_active_turn() -> None:
    state = reduce(active(markdown()), start("turn-2"))
    assert state.active_turn is not None
    assert state.active_turn.id == "turn-2"
    assert state.active_turn.response_parts == ()
    assert state.turns == ()


def test_turn_started_with_open_input_request_needs_input() -> None:
    state = reduce(chat(input_requests=(request(),)), start())
    assert state.status == INPUT_NEEDED


def test_turn_started_consumes_the_queued_and_steering_message_with_that_id() -> None:
    initial = chat(
        steering_message=pending_message("a"),
        queued_messages=(pending_message("a"), pending_message("b")),
    )
    state = reduce(initial, start(queued="a"))
    assert state.steering_message is None
    assert state.queued_messages == (pending_message("b"),)
    state = reduce(state, ChatTurnCompleteAction(turn_id=TURN), start(queued="b"))
    assert state.queued_messages is None


def test_turn_started_keeps_pending_messages_without_a_match() -> None:
    initial = chat(steering_message=pending_message("s"), queued_messages=(pending_message("q"),))
    for action in (start(), start(queued="zzz")):
        state = reduce(initial, action)
        assert state.steering_message is initial.steering_message
        assert state.queued_messages is initial.queued_messages


# ─── Streaming text ──────────────────────────────────────────────────────────


def test_delta_appends_to_the_markdown_part() -> None:
    state = reduce(active(markdown(content="Hel")), delta("lo"), delta(", world"))
    assert text_of(state) == "Hello, world"
    assert type(text_of(state)) is str
    assert state.modified_at == OLD  # streaming never touches modifiedAt
    assert state.status is active().status


def delta(text: str, part_id: str = "md-1", turn_id: str = TURN) -> ChatDeltaAction:
    return ChatDeltaAction(turn_id=turn_id, part_id=part_id, content=text)


def reasoning(text: str, part_id: str = "r-1", turn_id: str = TURN) -> ChatReasoningAction:
    return ChatReasoningAction(turn_id=turn_id, part_id=part_id, content=text)


def test_delta_no_ops() -> None:
    tool_call = tc_part(streaming("shared"))
    assert_noop(chat(), delta("x"))  # no active turn
    assert_noop(active(markdown()), delta("x", turn_id="other"), delta("x", part_id="missing"))
    # a reasoning part, a tool call (matched on toolCallId) and an unknown part with
    # that id are all found first, and are not markdown
    assert_noop(active(ReasoningResponsePart(id="md-1", content="")), delta("x"))
    assert_noop(active(tool_call, markdown("shared")), delta("x", part_id="shared"))
    unknown = UnknownResponsePart(kind="future", raw={"kind": "future", "id": "md-1"})
    assert_noop(active(unknown, markdown()), delta("x"))
    # an empty delta changes nothing
    assert_noop(active(markdown()), delta(""))


def test_delta_skips_parts_without_an_id() -> None:
    parts = (
        ResourceReponsePart(uri="file:///a"),
        SystemNotificationResponsePart(content="note"),
        UnknownResponsePart(kind="future", raw={"kind": "future"}),
        tc_part(UnknownToolCallState(status="future", raw={"status": "future"})),
        markdown(),
    )
    state = reduce(active(*parts), delta("x"))
    assert text_of(state, 4) == "x"
    assert parts_of(state)[:4] == parts[:4]


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
    assert_noop(initial, reasoning("x", part_id="md-1"), reasoning("x", turn_id="t-2"))


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


def test_the_append_memo_never_changes_a_result() -> None:
    # Same parts tuple and part id as the memo, but a different target kind.
    state = reduce(active(markdown("p")), delta("x", "p"))
    assert_noop(state, reasoning("y", "p"))
    # A state built independently never hits the memo; results are the same.
    rebuilt = active(markdown("p", "x"))
    assert text_of(reduce(rebuilt, delta("z", "p"))) == text_of(reduce(state, delta("z", "p")))


def test_response_part_is_appended_to_the_active_turn() -> None:
    part = markdown("md-2", "hi")
    state = reduce(active(markdown()), ChatResponsePartAction(turn_id=TURN, part=part))
    assert parts_of(state)[-1] is part
    assert len(parts_of(state)) == 2
    assert_noop(active(), ChatResponsePartAction(turn_id="other", part=part))
    assert_noop(chat(), ChatResponsePartAction(turn_id=TURN, part=part))


def test_usage_is_set_on_the_active_turn() -> None:
    usage = UsageInfo(input_tokens=3, output_tokens=4)
    state = reduce(active(), ChatUsageAction(turn_id=TURN, usage=usage))
    assert state.active_turn is not None
    assert state.active_turn.usage is usage
    assert_noop(active(), ChatUsageAction(turn_id="other", usage=usage))
    assert_noop(chat(), ChatUsageAction(turn_id=TURN, usage=usage))


# ─── Tool calls ──────────────────────────────────────────────────────────────


def tool_start(tool_call_id: str = "tc-1", **changes: Any) -> ChatToolCallStartAction:
    return ChatToolCallStartAction(
        turn_id=TURN, tool_call_id=tool_call_id, tool_name="bash", display_name="Run", **changes
    )


def test_tool_call_start_appends_a_streaming_call() -> None:
    contributor = ToolCallClientContributor(client_id="client-1")
    action = tool_start(contributor=contributor, meta={"a": 1})
    state = reduce(active(markdown()), action, action)  # no duplicate check
    expected = streaming(contributor=contributor, meta={"a": 1})
    assert tool(state, 1) == expected
    assert tool(state, 2) == expected
    assert_noop(active(), attrs.evolve(action, turn_id="other"))
    assert_noop(chat(), action)


def test_tool_call_delta_streams_the_input() -> None:
    initial = active(tc_part(streaming(meta={"m": 0})))
    first = ChatToolCallDeltaAction(turn_id=TURN, tool_call_id="tc-1", content='{"a"')
    second = ChatToolCallDeltaAction(
        turn_id=TURN, tool_call_id="tc-1", content=": 1}", invocation_message="Run", meta={"m": 1}
    )
    state = reduce(initial, first)
    tc = tool(state)
    assert isinstance(tc, ToolCallStreamingState)
    assert (tc.partial_input, tc.invocation_message, tc.meta) == ('{"a"', None, {"m": 0})
    tc = tool(reduce(state, second))
    assert isinstance(tc, ToolCallStreamingState)
    assert (tc.partial_input, tc.invocation_message, tc.meta) == ('{"a": 1}', "Run", {"m": 1})
    assert_noop(active(tc_part(running())), first)
    assert_noop(initial, attrs.evolve(first, tool_call_id="tc-2"), attrs.evolve(first, turn_id="x"))


def test_tool_call_actions_update_every_call_with_the_id() -> None:
    state = reduce(active(tc_part(streaming()), tc_part(streaming())), ready())
    assert isinstance(tool(state, 0), ToolCallPendingConfirmationState)
    assert isinstance(tool(state, 1), ToolCallPendingConfirmationState)


def test_tool_call_ready_without_confirmation_waits_for_the_user() -> None:
    edits = None
    initial = active(tc_part(streaming(partial_input="ls", meta={"m": 0})), status=IN_PROGRESS)
    state = reduce(
        initial,
        ready(confirmation_title="Run in terminal", editable=True, edits=edits, options=OPTIONS),
    )
    assert tool(state) == ToolCallPendingConfirmationState(
        tool_call_id="tc-1",
        tool_name="bash",
        display_name="Run",
        meta={"m": 0},
        invocation_message="Run ls -l",
        tool_input="ls -l",
        confirmation_title="Run in terminal",
        editable=True,
        options=OPTIONS,
    )
    assert state.status == INPUT_NEEDED
    assert state.modified_at == OLD


def test_tool_call_ready_confirmed_runs() -> None:
    initial = active(tc_part(streaming(partial_input="ls")))
    state = reduce(initial, ready(confirmed=ToolCallConfirmationReason.NOT_NEEDED, meta={"m": 1}))
    assert tool(state) == ToolCallRunningState(
        tool_call_id="tc-1",
        tool_name="bash",
        display_name="Run",
        meta={"m": 1},
        invocation_message="Run ls -l",
        tool_input="ls -l",
        confirmed=ToolCallConfirmationReason.NOT_NEEDED,
    )
    assert state.status is initial.status  # still in progress: no new status object


def test_tool_call_ready_re_confirms_a_running_call() -> None:
    initial = active(
        tc_part(running(selected_option=OPTIONS[0], content=(ToolResultTextContent(text="."),)))
    )
    tc = tool(reduce(initial, ready()))
    assert isinstance(tc, ToolCallPendingConfirmationState)
    assert (tc.invocation_message, tc.tool_input, tc.options) == ("Run ls -l", "ls -l", None)


def test_tool_call_ready_ignores_other_states() -> None:
    for tool_call in (pending(), pending_result(), completed(), cancelled()):
        assert_noop(active(tc_part(tool_call)), ready(), ready(confirmed="not-needed"))
    assert_noop(active(tc_part(streaming())), attrs.evolve(ready(), turn_id="other"))


def test_tool_call_approved_runs_with_the_selected_option() -> None:
    initial = active(tc_part(pending(options=OPTIONS, meta={"m": 0})), status=INPUT_NEEDED)
    state = reduce(initial, approve(selected_option_id="allow", edited_tool_input="ls -a"))
    assert tool(state) == ToolCallRunningState(
        tool_call_id="tc-1",
        tool_name="bash",
        display_name="Run",
        meta={"m": 0},
        invocation_message="Run ls",
        tool_input="ls -a",
        confirmed=ToolCallConfirmationReason.USER_ACTION,
        selected_option=OPTIONS[0],
    )
    assert state.status == IN_PROGRESS
    tc = tool(reduce(initial, approve(selected_option_id="nope")))
    assert isinstance(tc, ToolCallRunningState)
    assert (tc.selected_option, tc.tool_input) == (None, "ls")


def test_tool_call_denied_is_cancelled() -> None:
    initial = active(tc_part(pending(options=OPTIONS)), status=INPUT_NEEDED | IS_ARCHIVED)
    action = deny(
        reason_message="no", user_suggestion=message("try pwd"), selected_option_id="deny"
    )
    state = reduce(initial, action)
    assert tool(state) == ToolCallCancelledState(
        tool_call_id="tc-1",
        tool_name="bash",
        display_name="Run",
        invocation_message="Run ls",
        tool_input="ls",
        reason=ToolCallCancellationReason.DENIED,
        reason_message="no",
        user_suggestion=message("try pwd"),
        selected_option=OPTIONS[1],
    )
    assert state.status == IN_PROGRESS | IS_ARCHIVED


def test_tool_call_confirmed_only_from_pending_confirmation() -> None:
    for tool_call in (streaming(), running(), pending_result(), completed(), cancelled()):
        assert_noop(active(tc_part(tool_call)), approve(), deny())


def test_tool_call_complete_from_running_keeps_the_confirmation() -> None:
    initial = active(tc_part(running(selected_option=OPTIONS[0], meta={"m": 0})))
    tc = tool(reduce(initial, complete()))
    assert tc == ToolCallCompletedState(
        tool_call_id="tc-1",
        tool_name="bash",
        display_name="Run",
        meta={"m": 0},
        invocation_message="Run ls",
        tool_input="ls",
        confirmed=ToolCallConfirmationReason.USER_ACTION,
        selected_option=OPTIONS[0],
        success=True,
        past_tense_message="Ran ls",
        content=RESULT.content,
        structured_content={"files": 2},
    )


def test_tool_call_complete_from_pending_confirmation_is_not_needed() -> None:
    initial = active(tc_part(pending(options=OPTIONS)), status=INPUT_NEEDED)
    state = reduce(initial, complete(meta={"m": 1}))
    tc = tool(state)
    assert isinstance(tc, ToolCallCompletedState)
    assert (tc.confirmed, tc.selected_option, tc.meta) == ("not-needed", None, {"m": 1})
    assert state.status == IN_PROGRESS


def test_tool_call_complete_with_result_confirmation_waits_for_the_user() -> None:
    state = reduce(active(tc_part(running())), complete(requires_result_confirmation=True))
    tc = tool(state)
    assert isinstance(tc, ToolCallPendingResultConfirmationState)
    assert (tc.success, tc.past_tense_message, tc.content) == (True, "Ran ls", RESULT.content)
    assert state.status == INPUT_NEEDED


def test_tool_call_complete_only_from_running_or_pending() -> None:
    for tool_call in (streaming(), pending_result(), completed(), cancelled()):
        assert_noop(active(tc_part(tool_call)), complete())
    assert_noop(active(tc_part(running())), attrs.evolve(complete(), tool_call_id="tc-2"))


def test_tool_call_result_confirmed() -> None:
    initial = active(tc_part(pending_result()), status=INPUT_NEEDED)
    approved = ChatToolCallResultConfirmedAction(turn_id=TURN, tool_call_id="tc-1", approved=True)
    state = reduce(initial, approved)
    tc = tool(state)
    assert isinstance(tc, ToolCallCompletedState)
    assert (tc.confirmed, tc.selected_option, tc.content) == ("setting", OPTIONS[0], RESULT.content)
    assert state.status == IN_PROGRESS
    denied = attrs.evolve(approved, approved=False, meta={"m": 2})
    tc = tool(reduce(initial, denied))
    assert tc == ToolCallCancelledState(
        tool_call_id="tc-1",
        tool_name="bash",
        display_name="Run",
        meta={"m": 2},
        invocation_message="Run ls",
        tool_input="ls",
        reason=ToolCallCancellationReason.RESULT_DENIED,
        selected_option=OPTIONS[0],
    )
    for tool_call in (streaming(), pending(), running(), completed(), cancelled()):
        assert_noop(active(tc_part(tool_call)), approved, denied)


def test_tool_call_content_changed_only_while_running() -> None:
    content = (ToolResultTextContent(text="partial"),)
    action = ChatToolCallContentChangedAction(turn_id=TURN, tool_call_id="tc-1", content=content)
    initial = active(tc_part(running(meta={"m": 0})))
    state = reduce(initial, action)
    tc = tool(state)
    assert isinstance(tc, ToolCallRunningState)
    assert (tc.content, tc.meta) == (content, {"m": 0})
    tc = tool(reduce(initial, attrs.evolve(action, meta={"m": 1})))
    assert isinstance(tc, ToolCallRunningState)
    assert tc.meta == {"m": 1}
    assert state.status is initial.status
    for tool_call in (streaming(), pending(), pending_result(), completed(), cancelled()):
        assert_noop(active(tc_part(tool_call)), action)


def test_unknown_tool_call_states_are_never_matched() -> None:
    unknown = UnknownToolCallState(status="future", raw={"status": "future", "toolCallId": "tc-1"})
    initial = active(tc_part(unknown))
    assert_noop(initial, ready(), approve(), complete())


# ─── Turn end ────────────────────────────────────────────────────────────────


def test_turn_complete_archives_the_turn_and_cancels_unfinished_tool_calls() -> None:
    usage = UsageInfo(output_tokens=5)
    done = tc_part(completed("c"))
    refused = tc_part(cancelled("x"))
    unknown = tc_part(UnknownToolCallState(status="future", raw={"status": "future"}))
    parts = (
        markdown(content="Hi"),
        tc_part(streaming("s", partial_input="{", meta={"m": 1})),
        tc_part(streaming("s2", invocation_message="Streaming")),
        tc_part(pending("p")),
        tc_part(running("r", selected_option=OPTIONS[0])),
        tc_part(pending_result("pr")),
        done,
        refused,
        unknown,
    )
    initial = active(
        *parts, status=INPUT_NEEDED | IS_READ | UNKNOWN_BIT, input_requests=(request(),)
    )
    initial = reduce(initial, ChatUsageAction(turn_id=TURN, usage=usage))
    state = reduce(initial, ChatTurnCompleteAction(turn_id=TURN))

    def skipped(tool_call_id: str, invocation: str, tool_input: str | None, **kw: Any) -> Any:
        return tc_part(
            ToolCallCancelledState(
                tool_call_id=tool_call_id,
                tool_name="bash",
                display_name="Run",
                invocation_message=invocation,
                tool_input=tool_input,
                reason=ToolCallCancellationReason.SKIPPED,
                **kw,
            )
        )

    (turn,) = state.turns
    assert turn == Turn(
        id=TURN,
        message=message(),
        response_parts=(
            parts[0],
            skipped("s", "", None, meta={"m": 1}),
            skipped("s2", "Streaming", None),
            skipped("p", "Run ls", "ls"),
            skipped("r", "Run ls", "ls"),
            skipped("pr", "Run ls", "ls"),
            done,
            refused,
            unknown,
        ),
        usage=usage,
        state=TurnState.COMPLETE,
    )
    assert turn.response_parts[6] is done
    assert state.active_turn is None
    assert state.input_requests is None
    assert state.status == IDLE | IS_READ | UNKNOWN_BIT
    assert state.modified_at == NOW


def test_turn_cancelled_and_error() -> None:
    error = ErrorInfo(error_type="boom", message="Boom")
    cancelled_state = reduce(active(status=IN_PROGRESS), ChatTurnCancelledAction(turn_id=TURN))
    assert cancelled_state.turns[0].state == TurnState.CANCELLED
    assert cancelled_state.turns[0].error is None
    assert cancelled_state.status == IDLE
    errored = reduce(
        active(status=INPUT_NEEDED | IS_ARCHIVED), ChatErrorAction(turn_id=TURN, error=error)
    )
    assert errored.turns[0].state == TurnState.ERROR
    assert errored.turns[0].error is error
    assert errored.status == ERROR | IS_ARCHIVED
    # the next turn clears the error activity again
    assert reduce(errored, start("turn-2")).status == IN_PROGRESS | IS_ARCHIVED


def test_turn_end_no_ops() -> None:
    error = ErrorInfo(error_type="boom", message="Boom")
    ends: list[ChatTurnCompleteAction | ChatTurnCancelledAction | ChatErrorAction] = [
        ChatTurnCompleteAction(turn_id="other"),
        ChatTurnCancelledAction(turn_id="other"),
        ChatErrorAction(turn_id="other", error=error),
    ]
    assert_noop(active(), *ends)
    assert_noop(chat(), *(attrs.evolve(end, turn_id=TURN) for end in ends))


# ─── Pending messages ────────────────────────────────────────────────────────


def set_message(kind: str, message_id: str) -> ChatPendingMessageSetAction:
    return ChatPendingMessageSetAction(kind=kind, id=message_id, message=message(message_id))


def remove_message(kind: str, message_id: str) -> ChatPendingMessageRemovedAction:
    return ChatPendingMessageRemovedAction(kind=kind, id=message_id)


def test_pending_message_set() -> None:
    state = reduce(active(), set_message("steering", "s1"), set_message("steering", "s2"))
    assert state.steering_message == pending_message("s2")
    state = reduce(
        state, set_message("queued", "a"), set_message("queued", "b"), set_message("queued", "a")
    )
    assert state.queued_messages == (pending_message("a"), pending_message("b"))
    assert state.modified_at == OLD
    assert state.status is active().status
    assert_noop(state, set_message("future-kind", "z"))


def test_pending_message_removed() -> None:
    initial = chat(
        steering_message=pending_message("s"),
        queued_messages=(pending_message("a"), pending_message("b")),
    )
    assert reduce(initial, remove_message("steering", "s")).steering_message is None
    state = reduce(initial, remove_message(PendingMessageKind.QUEUED, "a"))
    assert state.queued_messages == (pending_message("b"),)
    assert reduce(state, remove_message("queued", "b")).queued_messages is None
    assert_noop(
        initial,
        remove_message("steering", "a"),
        remove_message("queued", "s"),
        remove_message("future-kind", "a"),
    )
    assert_noop(chat(), remove_message("steering", "s"), remove_message("queued", "a"))
    assert_noop(chat(queued_messages=()), remove_message("queued", "a"))


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        (("c", "a", "b"), "cab"),
        (("b",), "bac"),
        (("zzz", "c", "c", "a"), "cab"),
        ((), "abc"),
    ],
)
def test_queued_messages_reordered(order: tuple[str, ...], expected: str) -> None:
    initial = chat(queued_messages=tuple(pending_message(x) for x in "abc"))
    state = reduce(initial, ChatQueuedMessagesReorderedAction(order=order))
    assert state.queued_messages is not None
    assert "".join(m.id for m in state.queued_messages) == expected
    if expected == "abc":
        assert state is initial


def test_queued_messages_reordered_without_a_queue_is_a_no_op() -> None:
    assert_noop(chat(), ChatQueuedMessagesReorderedAction(order=("a",)))


# ─── Input requests ──────────────────────────────────────────────────────────


def test_input_requested_needs_input_and_clears_is_read() -> None:
    state = reduce(chat(IDLE | IS_READ | UNKNOWN_BIT), ChatInputRequestedAction(request=request()))
    assert state.input_requests == (request(),)
    assert state.status == INPUT_NEEDED | UNKNOWN_BIT
    assert state.modified_at == NOW


def test_input_requested_upserts_and_keeps_drafts() -> None:
    answered = request(answers={"q1": draft("x")})
    initial = chat(input_requests=(request("other"), answered))
    state = reduce(initial, ChatInputRequestedAction(request=request(message="New text")))
    assert state.input_requests == (
        request("other"),
        request(message="New text", answers={"q1": draft("x")}),
    )
    replaced = request(answers={"q2": draft("y")})
    state = reduce(initial, ChatInputRequestedAction(request=replaced))
    assert state.input_requests == (request("other"), replaced)


def test_input_answer_changed() -> None:
    initial = active(input_requests=(request(),), status=INPUT_NEEDED)
    state = reduce(
        initial,
        ChatInputAnswerChangedAction(request_id="req-1", question_id="q1", answer=draft("a")),
        ChatInputAnswerChangedAction(
            request_id="req-1", question_id="q2", answer=ChatInputSkipped()
        ),
    )
    assert state.input_requests is not None
    assert state.input_requests[0].answers == {"q1": draft("a"), "q2": ChatInputSkipped()}
    assert state.modified_at == NOW
    assert state.status is initial.status
    state = reduce(
        state,
        ChatInputAnswerChangedAction(request_id="req-1", question_id="q1"),
        ChatInputAnswerChangedAction(request_id="req-1", question_id="q2"),
    )
    assert state.input_requests == (request(),)  # answers back to absent
    assert_noop(initial, ChatInputAnswerChangedAction(request_id="nope", question_id="q1"))
    assert_noop(chat(), ChatInputAnswerChangedAction(request_id="req-1", question_id="q1"))


def test_input_completed_removes_the_request_and_recomputes_status() -> None:
    def completed_action(request_id: str) -> ChatInputCompletedAction:
        return ChatInputCompletedAction(
            request_id=request_id,
            response=ChatInputResponseKind.ACCEPT,
            answers={"q1": draft("ignored")},
        )

    initial = active(input_requests=(request("a"), request("b")), status=INPUT_NEEDED | IS_ARCHIVED)
    state = reduce(initial, completed_action("a"))
    assert state.input_requests == (request("b"),)
    assert state.status == INPUT_NEEDED | IS_ARCHIVED
    state = reduce(state, completed_action("b"))
    assert state.input_requests is None
    assert state.status == IN_PROGRESS | IS_ARCHIVED
    assert state.modified_at == NOW
    # still blocked by a tool call waiting for confirmation
    blocked = active(tc_part(pending()), input_requests=(request("a"),), status=INPUT_NEEDED)
    assert reduce(blocked, completed_action("a")).status == INPUT_NEEDED
    idle = chat(input_requests=(request("a"),), status=INPUT_NEEDED)
    assert reduce(idle, completed_action("a")).status == IDLE
    assert_noop(initial, completed_action("nope"))
    assert_noop(chat(), completed_action("a"))


# ─── Truncation ──────────────────────────────────────────────────────────────


def finished_turn(turn_id: str) -> Turn:
    return Turn(id=turn_id, message=message(turn_id), response_parts=(), state=TurnState.COMPLETE)


def test_truncated() -> None:
    turns = tuple(finished_turn(t) for t in ("t1", "t2", "t3"))
    initial = active(
        turns=turns,
        status=INPUT_NEEDED | IS_READ,
        input_requests=(request(),),
        steering_message=pending_message("s"),
        queued_messages=(pending_message("q"),),
    )
    state = reduce(initial, ChatTruncatedAction(turn_id="t2"))
    assert state.turns == turns[:2]
    assert state.active_turn is None
    assert state.input_requests is None
    assert state.status == IDLE | IS_READ
    assert state.modified_at == NOW
    assert state.steering_message is initial.steering_message
    assert state.queued_messages is initial.queued_messages
    assert reduce(initial, ChatTruncatedAction()).turns == ()
    assert reduce(initial, ChatTruncatedAction(turn_id="t3")).turns is turns
    assert_noop(initial, ChatTruncatedAction(turn_id="unknown"))


# ─── The status module ───────────────────────────────────────────────────────


def test_status_recompute_keeps_every_flag_bit() -> None:
    status = SessionStatus(ERROR | IS_READ | IS_ARCHIVED | UNKNOWN_BIT)
    recomputed = _status.with_activity(status, IDLE)
    assert int(recomputed) == IDLE | IS_READ | IS_ARCHIVED | UNKNOWN_BIT
    assert _status.with_activity(recomputed, IDLE) is recomputed
    assert int(_status.without_flag(recomputed, IS_READ)) == IDLE | IS_ARCHIVED | UNKNOWN_BIT
    assert int(_status.with_activity(0, INPUT_NEEDED)) == INPUT_NEEDED


def test_chat_activity_precedence() -> None:
    turn = ActiveTurn(id=TURN, message=message(), response_parts=(tc_part(pending()),))
    plain = ActiveTurn(id=TURN, message=message(), response_parts=(tc_part(running()),))
    assert _status.chat_activity(turn, (request(),), error=True) == ERROR
    assert _status.chat_activity(None, (request(),)) == INPUT_NEEDED
    assert _status.chat_activity(turn, None) == INPUT_NEEDED
    assert _status.chat_activity(plain, ()) == IN_PROGRESS
    assert _status.chat_activity(None, ()) == IDLE
    assert _status.has_blocking_tool_call(
        ActiveTurn(id=TURN, message=message(), response_parts=(tc_part(pending_result()),))
    )
    state = active(tc_part(pending()), status=IN_PROGRESS | IS_READ)
    assert _status.recompute_chat_status(state) == INPUT_NEEDED | IS_READ
    assert _status.recompute_chat_status(state, error=True) == ERROR | IS_READ


# ─── Fast copies ─────────────────────────────────────────────────────────────


def test_fast_copies_are_ordinary_frozen_instances() -> None:
    state = active(markdown(content="x"))
    turn = state.active_turn
    assert turn is not None
    copied = chat_module._evolve_state(state, title="New")
    assert type(copied) is ChatState
    assert copied == attrs.evolve(state, title="New")
    assert hash(copied) == hash(attrs.evolve(state, title="New"))
    assert chat_module._evolve_state(state) == state
    with pytest.raises(FrozenInstanceError):
        copied.title = "x"  # type: ignore[misc]
    replaced = chat_module._turn_with_parts(turn, ())
    assert type(replaced) is ActiveTurn
    assert replaced == attrs.evolve(turn, response_parts=())
    part = turn.response_parts[0]
    assert isinstance(part, MarkdownResponsePart)
    grown = chat_module._markdown_with_content(part, part._content.appended("y"))
    assert type(grown) is MarkdownResponsePart
    assert grown == MarkdownResponsePart(id="md-1", content="xy")
    with pytest.raises(TypeError):
        chat_module._evolve_state(state, no_such_field=1)


# ─── Any order, never raises ─────────────────────────────────────────────────

_IDS = st.sampled_from(["turn-1", "turn-2"])
_PARTS = st.sampled_from(["md-1", "r-1", "tc-1", "tc-2"])
_TOOLS = st.sampled_from(["tc-1", "tc-2"])
_TEXT = st.text(max_size=3)
_ACTIONS: st.SearchStrategy[StateAction] = st.one_of(
    st.builds(
        ChatTurnStartedAction,
        turn_id=_IDS,
        message=st.just(message()),
        queued_message_id=st.sampled_from([None, "a", "b"]),
    ),
    st.builds(ChatDeltaAction, turn_id=_IDS, part_id=_PARTS, content=_TEXT),
    st.builds(ChatReasoningAction, turn_id=_IDS, part_id=_PARTS, content=_TEXT),
    st.builds(
        ChatResponsePartAction,
        turn_id=_IDS,
        part=st.sampled_from([markdown(), ReasoningResponsePart(id="r-1", content="")]),
    ),
    st.builds(
        ChatToolCallStartAction,
        turn_id=_IDS,
        tool_call_id=_TOOLS,
        tool_name=st.just("t"),
        display_name=st.just("T"),
    ),
    st.builds(ChatToolCallDeltaAction, turn_id=_IDS, tool_call_id=_TOOLS, content=_TEXT),
    st.builds(
        ChatToolCallReadyAction,
        turn_id=_IDS,
        tool_call_id=_TOOLS,
        invocation_message=st.just("go"),
        confirmed=st.sampled_from([None, ToolCallConfirmationReason.NOT_NEEDED]),
        options=st.sampled_from([None, OPTIONS]),
    ),
    st.builds(
        ChatToolCallApprovedAction,
        turn_id=_IDS,
        tool_call_id=_TOOLS,
        confirmed=st.just(ToolCallConfirmationReason.USER_ACTION),
        selected_option_id=st.sampled_from([None, "allow"]),
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
        result=st.just(RESULT),
        requires_result_confirmation=st.booleans(),
    ),
    st.builds(
        ChatToolCallResultConfirmedAction, turn_id=_IDS, tool_call_id=_TOOLS, approved=st.booleans()
    ),
    st.builds(
        ChatToolCallContentChangedAction, turn_id=_IDS, tool_call_id=_TOOLS, content=st.just(())
    ),
    st.builds(ChatTurnCompleteAction, turn_id=_IDS),
    st.builds(ChatTurnCancelledAction, turn_id=_IDS),
    st.builds(ChatErrorAction, turn_id=_IDS, error=st.just(ErrorInfo(error_type="e", message="m"))),
    st.builds(ChatUsageAction, turn_id=_IDS, usage=st.just(UsageInfo(input_tokens=1))),
    st.builds(
        ChatPendingMessageSetAction,
        kind=st.sampled_from(["steering", "queued"]),
        id=st.sampled_from(["a", "b"]),
        message=st.just(message()),
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
    st.builds(ChatInputRequestedAction, request=st.sampled_from([request("a"), request("b")])),
    st.builds(
        ChatInputAnswerChangedAction,
        request_id=st.sampled_from(["a", "b"]),
        question_id=st.just("q"),
        answer=st.sampled_from([None, draft("x")]),
    ),
    st.builds(
        ChatInputCompletedAction,
        request_id=st.sampled_from(["a", "b"]),
        response=st.just(ChatInputResponseKind.CANCEL),
    ),
    st.builds(ChatTruncatedAction, turn_id=st.sampled_from([None, "turn-1", "turn-2"])),
    st.just(UnknownAction(type="chat/future", raw={"type": "chat/future"})),
)


def _snapshot(states: Iterable[ChatState]) -> list[Any]:
    from agenthost_protocol import wire

    return [wire.dump(state) for state in states]


@given(st.lists(_ACTIONS, max_size=40))
def test_any_sequence_of_actions_is_reduced_without_raising(actions: list[StateAction]) -> None:
    states = [chat(IDLE | IS_ARCHIVED | UNKNOWN_BIT)]
    for action in actions:
        states.append(chat_reducer(states[-1], action, now=clock))
    before = _snapshot(states)
    # Replaying gives equal states, and reducing further changed none of the old ones.
    replayed = reduce(states[0], *actions)
    assert replayed == states[-1]
    assert _snapshot(states) == before
    for state in states:
        assert int(state.status) & (IS_ARCHIVED | UNKNOWN_BIT) == IS_ARCHIVED | UNKNOWN_BIT
        expected = _status.recompute_chat_status(state)
        if not (
            state.turns and state.turns[-1].state == TurnState.ERROR and state.active_turn is None
        ):
            assert state.status == expected or state is states[0]
