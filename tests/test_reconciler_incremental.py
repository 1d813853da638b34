"""Property tests of the reconciler's rebase without a replay (footprints).

A foreign action that commutes with every pending action is applied to the
optimistic state already computed instead of replaying the pending actions
on the new confirmed state (``docs/reconciler.md``, "Rebasing without a
replay").  Three properties:

* **the footprints are sound**: for random states of every channel kind and
  random pairs of actions (one of them a client's own, as pending actions
  are) whose footprints say they commute, applying them in either order
  gives equal states.  This is the premise of the argument, checked pair by
  pair; ids come from tiny pools so that turns, parts, tool calls, input
  requests, files and annotations do collide.  For the chat, whose active
  turn is cut finest, every pair of a small universe (each action over the
  pools, tool calls in every status, parts of every kind) is also checked on
  states holding what they act on: random draws rarely meet the one
  combination that shows a wrong footprint (a pending confirmation against
  an appended blocking part, an answer draft against a stamped request);
* **the incremental reconciler equals the full replay**: one reconciler with
  the footprints and one forced to replay (``_incremental = False``), fed the
  same random schedules of dispatches, foreign envelopes (the host's and
  other clients'), echoes (of the head or not, as sent or normalised),
  rejections, replayed reconnects and late echoes on channels of every kind,
  read the same optimistic states, which are ``confirmed`` with ``pending``
  replayed on top; their confirmed states, pending actions and clock
  readings agree at every step, and a read never costs more reductions than
  a replay would;
* **the common case costs one reduction per read**: with the user's actions
  pending and the agent's arriving (data the pending actions do not touch),
  each read after a foreign envelope costs one reduction, where the replay
  costs one per pending action.

Example counts come from the loaded hypothesis profile (``tests/conftest.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, get_args

import attrs
import pytest
from attrs import evolve
from hypothesis import event, given, settings
from hypothesis import strategies as st

import agenthost_protocol.reconciler as reconciler_module
from agenthost_protocol.channels import ACTION_UNIONS, STATE_TYPES, ChannelKind
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.reconciler import ClientReconciler, PendingAction, ReceiveKind
from agenthost_protocol.reducers import reduce
from agenthost_protocol.testing import strategies as ahst
from agenthost_protocol.types import (
    ActionEnvelope,
    ActionOrigin,
    AnnotationsEntryRemovedAction,
    AnnotationsEntrySetAction,
    AnnotationsSetAction,
    AnnotationsUpdatedAction,
    ChangesetFileSetAction,
    ChangesetFilesReviewChangedAction,
    ChangesetOperationsChangedAction,
    ChangesetStatusChangedAction,
    ChatActivityChangedAction,
    ChatDeltaAction,
    ChatDraftChangedAction,
    ChatErrorAction,
    ChatInputAnswerChangedAction,
    ChatInputAnswered,
    ChatInputAnswerState,
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
    ErrorInfo,
    InputRequestResponsePart,
    MarkdownResponsePart,
    McpAuthRequiredReason,
    McpAuthRequirement,
    PendingMessageKind,
    ProtectedResourceMetadata,
    ReasoningResponsePart,
    ReconnectReplayResult,
    ResourceReponsePart,
    RootActiveSessionsChangedAction,
    RootAgentsChangedAction,
    RootConfigChangedAction,
    RootTerminalsChangedAction,
    SessionActiveClientSetAction,
    SessionActivityChangedAction,
    SessionChangesetsChangedAction,
    SessionChatAddedAction,
    SessionChatUpdatedAction,
    SessionInputNeededSetAction,
    SessionIsArchivedChangedAction,
    SessionIsReadChangedAction,
    SessionServerToolsChangedAction,
    SessionStatus,
    SessionTitleChangedAction,
    SessionWorkingDirectorySetAction,
    Snapshot,
    SnapshotState,
    StateAction,
    SystemNotificationResponsePart,
    TerminalClaimedAction,
    TerminalCommandExecutedAction,
    TerminalCwdChangedAction,
    TerminalDataAction,
    TerminalInputAction,
    TerminalResizedAction,
    TerminalTitleChangedAction,
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
    ToolCallRunningState,
    ToolCallStreamingState,
    ToolResultTextContent,
    Turn,
    TurnState,
    UnknownAction,
    UnknownResponsePart,
    UnknownToolCallState,
    UsageInfo,
)
from agenthost_protocol.types._text import TextBuffer
from agenthost_protocol.versions import IS_CLIENT_DISPATCHABLE

from ._fixtures import FIXED_NOW, Ticker, message, stopped_at

ME = "me"
OTHER = "other"
DEPTH = 1
"""Nesting of the generated values: deep enough for tool calls in parts, and cheap."""

CHANNELS: dict[ChannelKind, str] = {
    ChannelKind.ROOT: "ahp-root://",
    ChannelKind.SESSION: "ahp-session:/s1",
    ChannelKind.CHAT: "ahp-chat:/c1",
    ChannelKind.TERMINAL: "ahp-terminal:/t1",
    ChannelKind.CHANGESET: "ahp-changeset:/s1/working",
    ChannelKind.ANNOTATIONS: "ahp-session:/s1/annotations",
    ChannelKind.RESOURCE_WATCH: "ahp-resource-watch:/w1",
}
KINDS = tuple(CHANNELS)

# ── pinned values: random model values whose ids come from tiny pools ────────

IDS = ("a", "b")
"""One pool for every id (turns, parts, tool calls, requests, files, ...): a
delta's part id may then be a tool call's id, and a request's id a part's."""
DIRECTORIES = ("file:///w/one", "file:///w/two")
ID_FIELDS = frozenset(
    {
        "id",
        "turn_id",
        "part_id",
        "tool_call_id",
        "request_id",
        "queued_message_id",
        "annotation_id",
        "entry_id",
        "file_id",
        "operation_id",
        "command_id",
        "client_id",
        "question_id",
        "selected_option_id",
    }
)
ID_TUPLES = frozenset({"files", "order"})
DIRECTORY_FIELDS = frozenset({"directory"})
DIRECTORY_TUPLES = frozenset({"working_directories"})


def _pin(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with every id-like string field replaced by one drawn from the pools."""
    if isinstance(value, tuple):
        items = tuple(_pin(draw, item) for item in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if not attrs.has(type(value)) or isinstance(value, TextBuffer):
        return value
    changes: dict[str, Any] = {}
    for field in attrs.fields(type(value)):
        old = getattr(value, field.name)
        new = old
        if field.name in ID_FIELDS and type(old) is str:
            new = draw(st.sampled_from(IDS))
        elif field.name in DIRECTORY_FIELDS and type(old) is str:
            new = draw(st.sampled_from(DIRECTORIES))
        elif field.name in ID_TUPLES | DIRECTORY_TUPLES and isinstance(old, tuple):
            pool = IDS if field.name in ID_TUPLES else DIRECTORIES
            if all(type(item) is str for item in old):
                new = tuple(draw(st.sampled_from(pool)) for _ in old)
            else:
                new = _pin(draw, old)
        else:
            new = _pin(draw, old)
        if new is not old:
            changes[field.alias or field.name] = new
    return evolve(value, **changes) if changes else value


def _classes(kind: ChannelKind) -> tuple[type, ...]:
    return tuple(c for c in get_args(ACTION_UNIONS[kind]) if c is not UnknownAction)


def _wire_type(cls: type) -> str:
    default = attrs.fields_dict(cls)["type"].default
    return str(getattr(default, "value", default))


def _is_dispatchable(cls: type) -> bool:
    return IS_CLIENT_DISPATCHABLE.get(_wire_type(cls), False)


def _dispatchable(kind: ChannelKind) -> tuple[type, ...]:
    return tuple(c for c in _classes(kind) if _is_dispatchable(c))


@st.composite
def pinned(draw: st.DrawFn, classes: tuple[type, ...]) -> Any:
    cls = draw(st.sampled_from(classes))
    return _pin(draw, draw(ahst.from_type(cls, max_depth=DEPTH)))


def actions(kind: ChannelKind) -> st.SearchStrategy[StateAction]:
    if kind is ChannelKind.CHAT:
        # mostly the dense chat actions below, where turns, parts, tool calls
        # and requests meet; sometimes anything the model allows
        return st.one_of(CHAT_ACTIONS, CHAT_ACTIONS, CHAT_ACTIONS, pinned(_classes(kind)))
    return pinned(_classes(kind))


def own_actions(kind: ChannelKind) -> st.SearchStrategy[StateAction]:
    """Actions a client may dispatch on a channel of ``kind``."""
    if kind is ChannelKind.CHAT:
        return st.one_of(
            CHAT_OWN_ACTIONS, CHAT_OWN_ACTIONS, CHAT_OWN_ACTIONS, pinned(_dispatchable(kind))
        )
    return pinned(_dispatchable(kind))


# A chat's actions, built cheaply from the pools: every turn-scoped action may
# hit the active turn, every part and tool call may share an id, and tool calls
# come in every status (and one unknown to this library).

_ID = st.sampled_from(IDS)
_MAYBE_ID = st.one_of(st.none(), _ID)
_GO = message("go")
_CONTRIBUTORS = st.sampled_from(
    [None, ToolCallMcpContributor(customization_id="m"), ToolCallClientContributor(client_id=ME)]
)
_AUTH = ahst.from_type(McpAuthRequirement, max_depth=DEPTH)
_NAMED = {"tool_name": st.just("tool"), "display_name": st.just("Tool")}
_ASKED = {"invocation_message": st.just("run?")}
_CONFIRMED = {"confirmed": st.sampled_from(list(ToolCallConfirmationReason))}
_RESULT = {"success": st.booleans(), "past_tense_message": st.just("ran")}
_CALLS = st.one_of(
    st.builds(ToolCallStreamingState, tool_call_id=_ID, contributor=_CONTRIBUTORS, **_NAMED),
    st.builds(ToolCallPendingConfirmationState, tool_call_id=_ID, **_NAMED, **_ASKED),
    st.builds(
        ToolCallRunningState,
        tool_call_id=_ID,
        contributor=_CONTRIBUTORS,
        **_NAMED,
        **_ASKED,
        **_CONFIRMED,
    ),
    st.builds(
        ToolCallAuthRequiredState,
        tool_call_id=_ID,
        auth=_AUTH,
        contributor=st.just(ToolCallMcpContributor(customization_id="m")),
        **_NAMED,
        **_ASKED,
        **_CONFIRMED,
    ),
    st.builds(
        ToolCallPendingResultConfirmationState,
        tool_call_id=_ID,
        **_NAMED,
        **_ASKED,
        **_CONFIRMED,
        **_RESULT,
    ),
    st.builds(
        ToolCallCompletedState, tool_call_id=_ID, **_NAMED, **_ASKED, **_CONFIRMED, **_RESULT
    ),
    st.builds(
        ToolCallCancelledState,
        tool_call_id=_ID,
        reason=st.just(ToolCallCancellationReason.SKIPPED),
        **_NAMED,
        **_ASKED,
    ),
    _ID.map(
        lambda i: UnknownToolCallState(status="later", raw={"status": "later", "toolCallId": i})
    ),
)
_BLOCKING_CALLS = _CALLS.filter(
    lambda call: isinstance(
        call,
        ToolCallPendingConfirmationState
        | ToolCallPendingResultConfirmationState
        | ToolCallAuthRequiredState,
    )
)
_REQUESTS = st.builds(ChatInputRequest, id=_ID, message=st.just("?"))
_ANSWER = ChatInputAnswered(
    state=ChatInputAnswerState.DRAFT, value=ChatInputTextAnswerValue(value="yes")
)
_TEXT = st.sampled_from(["", "x", "yz"])
_PARTS = st.one_of(
    st.builds(MarkdownResponsePart, id=_ID, content=_TEXT),
    st.builds(ReasoningResponsePart, id=_ID, content=_TEXT),
    st.builds(ToolCallResponsePart, tool_call=_CALLS),
    st.builds(ToolCallResponsePart, tool_call=_BLOCKING_CALLS),  # a call that waits, more often
    st.builds(
        InputRequestResponsePart,
        request=_REQUESTS,
        response=st.sampled_from([None, None, ChatInputResponseKind.ACCEPT]),
    ),
    st.just(ResourceReponsePart(uri="file:///r")),
    st.just(SystemNotificationResponsePart(content="note")),
    _ID.map(lambda i: UnknownResponsePart(kind="later", raw={"kind": "later", "id": i})),
)
_TURN_CALL = {"turn_id": _ID, "tool_call_id": _ID}
_CHAT_BUILDERS: dict[type, st.SearchStrategy[Any]] = {
    ChatTurnStartedAction: st.builds(
        ChatTurnStartedAction,
        turn_id=_ID,
        started_at=st.just("2026"),
        message=st.just(_GO),
        queued_message_id=_MAYBE_ID,
    ),
    ChatDeltaAction: st.builds(ChatDeltaAction, turn_id=_ID, part_id=_ID, content=_TEXT),
    ChatReasoningAction: st.builds(ChatReasoningAction, turn_id=_ID, part_id=_ID, content=_TEXT),
    ChatResponsePartAction: st.builds(ChatResponsePartAction, turn_id=_ID, part=_PARTS),
    ChatToolCallStartAction: st.builds(
        ChatToolCallStartAction, **_TURN_CALL, contributor=_CONTRIBUTORS, **_NAMED
    ),
    ChatToolCallDeltaAction: st.builds(
        ChatToolCallDeltaAction,
        **_TURN_CALL,
        content=st.sampled_from([None, "", "x"]),
        invocation_message=st.sampled_from([None, "m"]),
    ),
    ChatToolCallReadyAction: st.builds(
        ChatToolCallReadyAction,
        **_TURN_CALL,
        invocation_message=st.just("run?"),
        confirmed=st.sampled_from([None, ToolCallConfirmationReason.NOT_NEEDED]),
        tool_input=st.sampled_from([None, "in"]),
        contributor=_CONTRIBUTORS,
    ),
    ChatToolCallApprovedAction: st.builds(
        ChatToolCallApprovedAction,
        **_TURN_CALL,
        **_CONFIRMED,
        edited_tool_input=st.sampled_from([None, "edited"]),
        selected_option_id=_MAYBE_ID,
    ),
    ChatToolCallDeniedAction: st.builds(
        ChatToolCallDeniedAction, **_TURN_CALL, reason=st.just(ToolCallCancellationReason.DENIED)
    ),
    ChatToolCallCompleteAction: st.builds(
        ChatToolCallCompleteAction,
        **_TURN_CALL,
        result=st.builds(ToolCallResult, **_RESULT),
        requires_result_confirmation=st.booleans(),
    ),
    ChatToolCallResultConfirmedAction: st.builds(
        ChatToolCallResultConfirmedAction, **_TURN_CALL, approved=st.booleans()
    ),
    ChatToolCallContentChangedAction: st.builds(
        ChatToolCallContentChangedAction,
        **_TURN_CALL,
        content=st.sampled_from([(), (ToolResultTextContent(text="out"),)]),
    ),
    ChatToolCallAuthRequiredAction: st.builds(
        ChatToolCallAuthRequiredAction, **_TURN_CALL, auth=_AUTH
    ),
    ChatToolCallAuthResolvedAction: st.builds(ChatToolCallAuthResolvedAction, **_TURN_CALL),
    ChatUsageAction: st.builds(
        ChatUsageAction, turn_id=_ID, usage=st.builds(UsageInfo, input_tokens=st.integers(0, 2))
    ),
    ChatTurnCompleteAction: st.builds(
        ChatTurnCompleteAction, turn_id=_ID, duration=st.integers(-1, 3)
    ),
    ChatTurnCancelledAction: st.builds(
        ChatTurnCancelledAction, turn_id=_ID, duration=st.integers(-1, 3)
    ),
    ChatErrorAction: st.builds(
        ChatErrorAction,
        turn_id=_ID,
        duration=st.integers(-1, 3),
        error=st.just(ErrorInfo(error_type="x", message="boom")),
    ),
    ChatActivityChangedAction: st.builds(
        ChatActivityChangedAction, activity=st.sampled_from([None, "busy"])
    ),
    ChatWorkingDirectorySetAction: st.builds(
        ChatWorkingDirectorySetAction, directory=st.sampled_from(DIRECTORIES)
    ),
    ChatWorkingDirectoryRemovedAction: st.builds(
        ChatWorkingDirectoryRemovedAction, directory=st.sampled_from(DIRECTORIES)
    ),
    ChatPendingMessageSetAction: st.builds(
        ChatPendingMessageSetAction,
        kind=st.sampled_from([*PendingMessageKind, "later"]),
        id=_ID,
        message=st.sampled_from([_GO, message("other")]),
    ),
    ChatPendingMessageRemovedAction: st.builds(
        ChatPendingMessageRemovedAction,
        kind=st.sampled_from([*PendingMessageKind, "later"]),
        id=_ID,
    ),
    ChatQueuedMessagesReorderedAction: st.builds(
        ChatQueuedMessagesReorderedAction, order=st.lists(_ID, max_size=3).map(tuple)
    ),
    ChatDraftChangedAction: st.builds(
        ChatDraftChangedAction, draft=st.sampled_from([None, _GO, message("draft")])
    ),
    ChatInputRequestedAction: st.builds(ChatInputRequestedAction, request=_REQUESTS),
    ChatInputAnswerChangedAction: st.builds(
        ChatInputAnswerChangedAction,
        request_id=_ID,
        question_id=st.sampled_from(["q1", "q2"]),
        answer=st.sampled_from([None, _ANSWER]),
    ),
    ChatInputCompletedAction: st.builds(
        ChatInputCompletedAction,
        request_id=_ID,
        response=st.sampled_from(list(ChatInputResponseKind)),
        answers=st.sampled_from([None, {"q1": _ANSWER}]),
    ),
    ChatTruncatedAction: st.builds(ChatTruncatedAction, turn_id=_MAYBE_ID),
    ChatTurnsLoadedAction: st.builds(
        ChatTurnsLoadedAction,
        turns=st.lists(
            st.builds(
                Turn,
                id=_ID,
                message=st.just(_GO),
                response_parts=st.just(()),
                state=st.just(TurnState.COMPLETE),
            ),
            max_size=2,
        ).map(tuple),
        turns_next_cursor=st.sampled_from([None, "older"]),
    ),
}
"""A strategy for each chat action class."""
CHAT_ACTIONS: st.SearchStrategy[StateAction] = st.one_of(list(_CHAT_BUILDERS.values()))
CHAT_OWN_ACTIONS: st.SearchStrategy[StateAction] = st.one_of(
    [builder for cls, builder in _CHAT_BUILDERS.items() if _is_dispatchable(cls)]
)


def _fold(channel: str, state: SnapshotState, steps: list[StateAction]) -> SnapshotState:
    for action in steps:
        state = reduce(channel, state, action, now=stopped_at(FIXED_NOW))
    return state


@st.composite
def states(draw: st.DrawFn, kind: ChannelKind) -> SnapshotState:
    """A pinned random state, moved on by a few pinned actions (a chat mostly into a turn)."""
    channel = CHANNELS[kind]
    state = _pin(draw, draw(ahst.states(STATE_TYPES[kind], max_depth=DEPTH)))
    steps: list[StateAction] = []
    if kind is ChannelKind.CHAT:
        start = draw(st.integers(0, 3))
        if start < 2:
            steps += _chat_setup()  # the turn the agent streams into
        elif start == 2:
            steps.append(ChatTurnStartedAction(turn_id=draw(_ID), started_at="2026", message=_GO))
    steps += draw(st.lists(actions(kind), max_size=8 if kind is ChannelKind.CHAT else 4))
    return _fold(channel, state, steps)


# ── 1. the footprints are sound ──────────────────────────────────────────────


def _admits(pending: StateAction, foreign: StateAction) -> bool:
    union = reconciler_module._Footprints()
    union.count(pending, 1)
    return union.admits(reconciler_module._footprint(foreign))


def _check_pairs(kind: ChannelKind, data: Any) -> None:
    """Every pair (one of ours, any action) whose footprints do not overlap commutes.

    Only such pairs matter: what is pending is always a client's own action.
    """
    channel = CHANNELS[kind]
    state = data.draw(states(kind), label="state")
    ours: list[StateAction] = []
    if _dispatchable(kind):
        ours = data.draw(st.lists(own_actions(kind), min_size=1, max_size=3), label="ours")
    theirs = data.draw(st.lists(actions(kind), min_size=1, max_size=4), label="theirs")
    admitted = 0
    for pending, foreign in itertools.chain(
        itertools.product(ours, theirs + ours), itertools.combinations(theirs, 2)
    ):
        commute = _admits(pending, foreign)
        assert commute == _admits(foreign, pending), "overlap is symmetric"
        if not commute:
            continue
        admitted += 1
        mine, arrival = stopped_at(FIXED_NOW + 1), stopped_at(FIXED_NOW + 2)
        one = reduce(channel, reduce(channel, state, foreign, now=arrival), pending, now=mine)
        two = reduce(channel, reduce(channel, state, pending, now=mine), foreign, now=arrival)
        assert one == two, (pending, foreign)
    event(f"commuting pairs: {min(admitted, 5)}{'+' if admitted >= 5 else ''}")


@given(data=st.data())
def test_chat_actions_whose_footprints_do_not_overlap_commute(data: Any) -> None:
    _check_pairs(ChannelKind.CHAT, data)


OTHER_KINDS = tuple(k for k in KINDS if k is not ChannelKind.CHAT)


@pytest.mark.parametrize("kind", OTHER_KINDS, ids=[k.value for k in OTHER_KINDS])
@settings(max_examples=max(5, settings().max_examples // 2))
@given(data=st.data())
def test_actions_whose_footprints_do_not_overlap_commute(kind: ChannelKind, data: Any) -> None:
    # whole fields, but for keyed files and annotations and the status bits:
    # fewer examples than for the chat's turn
    _check_pairs(kind, data)


# ── 1b. every pair over a small universe of chat actions and states ──────────
#
# Each chat action over the id pools (tool calls in every status, parts of
# every kind), on chat states that hold what those actions act on: random
# schedules rarely meet the one combination that shows a footprint wrong,
# this meets them all.

_AUTH_REQUIRED = McpAuthRequirement(
    reason=McpAuthRequiredReason.REQUIRED,
    resource=ProtectedResourceMetadata(resource="https://mcp.example"),
)
_MCP = ToolCallMcpContributor(customization_id="m")


def _call(status: type, call_id: str) -> Any:
    """A tool call in ``status`` (an unknown one for ``UnknownToolCallState``)."""
    named: dict[str, Any] = {"tool_call_id": call_id, "tool_name": "t", "display_name": "T"}
    asked = {**named, "invocation_message": "run?"}
    done = {**asked, "confirmed": ToolCallConfirmationReason.USER_ACTION}
    if status is ToolCallStreamingState:
        return ToolCallStreamingState(**named)
    if status is ToolCallPendingConfirmationState:
        return ToolCallPendingConfirmationState(**asked)
    if status is ToolCallRunningState:
        return ToolCallRunningState(**done, contributor=_MCP)
    if status is ToolCallAuthRequiredState:
        return ToolCallAuthRequiredState(**done, contributor=_MCP, auth=_AUTH_REQUIRED)
    if status is ToolCallPendingResultConfirmationState or status is ToolCallCompletedState:
        return status(**done, success=True, past_tense_message="ran")
    if status is ToolCallCancelledState:
        return ToolCallCancelledState(**asked, reason=ToolCallCancellationReason.SKIPPED)
    return UnknownToolCallState(status="later", raw={"status": "later", "toolCallId": call_id})


_STATUSES = (
    ToolCallStreamingState,
    ToolCallPendingConfirmationState,
    ToolCallRunningState,
    ToolCallAuthRequiredState,
    ToolCallPendingResultConfirmationState,
    ToolCallCompletedState,
    ToolCallCancelledState,
    UnknownToolCallState,
)


def _catalogue_parts() -> list[Any]:
    parts: list[Any] = [
        MarkdownResponsePart(id="a", content="x"),
        ReasoningResponsePart(id="b", content="y"),
        ResourceReponsePart(uri="file:///r"),
        SystemNotificationResponsePart(content="note"),
        UnknownResponsePart(kind="later", raw={"kind": "later", "id": "a"}),
    ]
    for i in IDS:
        parts += [ToolCallResponsePart(tool_call=_call(status, i)) for status in _STATUSES]
        parts.append(InputRequestResponsePart(request=ChatInputRequest(id=i)))
        parts.append(
            InputRequestResponsePart(
                request=ChatInputRequest(id=i), response=ChatInputResponseKind.ACCEPT
            )
        )
    return parts


def _turn_catalogue(turn: str) -> list[StateAction]:
    out: list[StateAction] = [
        ChatUsageAction(turn_id=turn, usage=UsageInfo(input_tokens=7)),
        ChatTurnCompleteAction(turn_id=turn, duration=1),
        ChatTurnCancelledAction(turn_id=turn, duration=1),
        ChatErrorAction(turn_id=turn, duration=1, error=ErrorInfo(error_type="x", message="!")),
    ]
    out += [
        ChatTurnStartedAction(turn_id=turn, started_at="2026", message=_GO, queued_message_id=q)
        for q in (None, *IDS)
    ]
    out += [ChatResponsePartAction(turn_id=turn, part=part) for part in _catalogue_parts()]
    for i in IDS:
        call: dict[str, Any] = {"turn_id": turn, "tool_call_id": i}
        out += [
            ChatDeltaAction(turn_id=turn, part_id=i, content="d"),
            ChatReasoningAction(turn_id=turn, part_id=i, content="r"),
            ChatToolCallStartAction(**call, tool_name="t", display_name="T"),
            ChatToolCallDeltaAction(**call, content="{"),
            ChatToolCallReadyAction(**call, invocation_message="run?"),
            ChatToolCallReadyAction(
                **call, invocation_message="go", confirmed=ToolCallConfirmationReason.NOT_NEEDED
            ),
            ChatToolCallApprovedAction(**call, confirmed=ToolCallConfirmationReason.USER_ACTION),
            ChatToolCallDeniedAction(**call, reason=ToolCallCancellationReason.DENIED),
            ChatToolCallResultConfirmedAction(**call, approved=True),
            ChatToolCallResultConfirmedAction(**call, approved=False),
            ChatToolCallContentChangedAction(**call, content=(ToolResultTextContent(text="o"),)),
            ChatToolCallAuthRequiredAction(**call, auth=_AUTH_REQUIRED),
            ChatToolCallAuthResolvedAction(**call),
        ]
        out += [
            ChatToolCallCompleteAction(
                **call,
                result=ToolCallResult(success=success, past_tense_message="ran"),
                requires_result_confirmation=review,
            )
            for success in (True, False)
            for review in (True, False)
        ]
    return out


def _chat_catalogue() -> list[StateAction]:
    loaded = Turn(id="b", message=_GO, response_parts=(), state=TurnState.COMPLETE)
    out: list[StateAction] = [
        ChatActivityChangedAction(activity="busy"),
        ChatDraftChangedAction(draft=_GO),
        ChatTruncatedAction(turn_id=None),
        ChatTurnsLoadedAction(turns=(loaded,), turns_next_cursor="older"),
        ChatQueuedMessagesReorderedAction(order=("a", "b")),
        ChatQueuedMessagesReorderedAction(order=("b", "a")),
    ]
    for directory in DIRECTORIES:
        out.append(ChatWorkingDirectorySetAction(directory=directory))
        out.append(ChatWorkingDirectoryRemovedAction(directory=directory))
    for i in IDS:
        out += [
            ChatTruncatedAction(turn_id=i),
            ChatInputRequestedAction(request=ChatInputRequest(id=i)),
            ChatInputAnswerChangedAction(request_id=i, question_id="q1", answer=_ANSWER),
            ChatInputAnswerChangedAction(request_id=i, question_id="q1"),
            ChatInputCompletedAction(request_id=i, response=ChatInputResponseKind.ACCEPT),
        ]
        for kind in (*PendingMessageKind, "later"):
            out.append(ChatPendingMessageSetAction(kind=kind, id=i, message=message("new")))
            out.append(ChatPendingMessageRemovedAction(kind=kind, id=i))
        out += _turn_catalogue(i)
    return out


def _chat_catalogue_states() -> list[SnapshotState]:
    """Chat states holding what the catalogue's actions act on, reached by actions."""
    channel = CHANNELS[ChannelKind.CHAT]
    base = ChatState(
        resource=channel,
        title="chat",
        status=SessionStatus(int(SessionStatus.IDLE) | int(SessionStatus.IS_READ)),
        modified_at="2026-01-01T00:00:00.000Z",
        turns=(Turn(id="a", message=_GO, response_parts=(), state=TurnState.COMPLETE),),
        turns_next_cursor="older",
        working_directories=(DIRECTORIES[0],),
    )
    queue: list[StateAction] = [
        ChatPendingMessageSetAction(kind=PendingMessageKind.QUEUED, id="a", message=_GO),
        ChatPendingMessageSetAction(kind=PendingMessageKind.QUEUED, id="b", message=_GO),
        ChatPendingMessageSetAction(kind=PendingMessageKind.STEERING, id="b", message=_GO),
    ]

    def turn(turn_id: str, *parts: Any) -> list[StateAction]:
        start = ChatTurnStartedAction(turn_id=turn_id, started_at="2026", message=_GO)
        return [start, *(ChatResponsePartAction(turn_id=turn_id, part=p) for p in parts)]

    def call(status: type, call_id: str) -> Any:
        return ToolCallResponsePart(tool_call=_call(status, call_id))

    scripts: list[list[StateAction]] = [
        [],
        queue,
        [*queue, *turn("a", MarkdownResponsePart(id="a", content="x"), call(_STATUSES[0], "b"))],
        turn(
            "a",
            MarkdownResponsePart(id="b", content="x"),
            call(ToolCallPendingConfirmationState, "b"),
            InputRequestResponsePart(request=ChatInputRequest(id="a")),
        ),
        turn(
            "b",
            call(ToolCallRunningState, "a"),
            ReasoningResponsePart(id="b", content="y"),
            InputRequestResponsePart(request=ChatInputRequest(id="b")),
        ),
        turn(
            "a",
            call(ToolCallStreamingState, "a"),
            InputRequestResponsePart(request=ChatInputRequest(id="b")),
        ),
        turn(
            "b",
            call(ToolCallAuthRequiredState, "b"),
            call(ToolCallPendingResultConfirmationState, "a"),
        ),
    ]
    return [_fold(channel, base, script) for script in scripts]


def test_every_pair_of_a_small_chat_universe_commutes_when_the_footprints_say_so() -> None:
    channel = CHANNELS[ChannelKind.CHAT]
    everything = _chat_catalogue()
    ours = [a for a in everything if _is_dispatchable(type(a))]
    footprints = {id(a): reconciler_module._footprint(a) for a in everything}
    unions = {}
    for a in ours:
        union = reconciler_module._Footprints()
        union.count(a, 1)
        unions[id(a)] = union
    pairs = [
        (pending, foreign)
        for pending in ours
        for foreign in everything
        if unions[id(pending)].admits(footprints[id(foreign)])
    ]
    assert len(pairs) > 1_000  # the universe has room for both answers
    mine, arrival = stopped_at(FIXED_NOW + 1), stopped_at(FIXED_NOW + 2)
    for state in _chat_catalogue_states():
        after_pending = {id(p): reduce(channel, state, p, now=mine) for p in ours}
        after_foreign = {id(f): reduce(channel, state, f, now=arrival) for f in everything}
        for pending, foreign in pairs:
            one = reduce(channel, after_foreign[id(foreign)], pending, now=mine)
            two = reduce(channel, after_pending[id(pending)], foreign, now=arrival)
            assert one == two, (state, pending, foreign)


def test_every_action_class_but_unknown_has_a_footprint_rule() -> None:
    for kind in KINDS:
        for cls in _classes(kind):
            assert cls in reconciler_module._FOOTPRINTS, cls
    assert (
        reconciler_module._footprint(UnknownAction(type="chat/x", raw={"type": "chat/x"})) is None
    )


# ── 2. the incremental reconciler reads what the full replay reads ───────────


@contextmanager
def counted() -> Iterator[list[int]]:
    """Count the reductions the reconciler performs inside the block."""
    calls = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return reduce(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reconciler_module, "reduce", counting)
        yield calls


def replayed(rec: ClientReconciler, channel: str) -> SnapshotState:
    """``confirmed`` with every pending action reduced on top at its ``dispatched_at``."""
    state = rec.confirmed(channel)
    for entry in rec.pending(channel):
        state = reduce(channel, state, entry.action, now=stopped_at(entry.dispatched_at))
    return state


class Pair:
    """One reconciler with footprints and one that always replays, driven alike."""

    def __init__(self, step: int) -> None:
        self.fast_clock, self.slow_clock = Ticker(step), Ticker(step)
        self.fast = ClientReconciler(ME, now=self.fast_clock)
        self.slow = ClientReconciler(ME, now=self.slow_clock)
        self.slow._incremental = False
        self.seq = 10
        self.dropped: list[PendingAction] = []

    def both(self, method: str, *args: Any) -> Any:
        """``method(*args)`` on both; they must agree on what comes back and on their clocks.

        ``None`` when both refused the call (a ``LocalProtocolError``).
        """
        try:
            fast = getattr(self.fast, method)(*args)
        except LocalProtocolError:
            with pytest.raises(LocalProtocolError):
                getattr(self.slow, method)(*args)
            return None
        slow = getattr(self.slow, method)(*args)
        assert fast == slow
        assert self.fast_clock.ms == self.slow_clock.ms
        return fast

    def envelope(
        self, channel: str, action: StateAction, origin: ActionOrigin | None = None, **kw: Any
    ) -> ActionEnvelope:
        self.seq += 1
        return ActionEnvelope(
            channel=channel, action=action, server_seq=self.seq, origin=origin, **kw
        )

    def read(self, channel: str) -> None:
        pending = len(self.fast.pending(channel))
        ticks = self.fast_clock.ms
        with counted() as cost:
            fast = self.fast.optimistic(channel)
        assert cost[0] <= pending  # never more than a replay
        assert fast == self.slow.optimistic(channel) == replayed(self.fast, channel)
        assert self.fast_clock.ms == ticks  # reading never reads the clock

    def check(self) -> None:
        for channel in self.fast.channels:
            assert self.fast.confirmed(channel) == self.slow.confirmed(channel)
            assert self.fast.pending(channel) == self.slow.pending(channel)


# ── what users and agents do: data that one touches and the other does not ──

# What a user keeps dispatching, and what the agent (or the host) sends
# meanwhile, per kind: data the user's actions do not touch.  The states
# give the agent's actions something to act on (an active turn with a
# markdown part "p", a reasoning part "r", a streaming tool call "c" and an
# open input request "q" the user drafts answers to).

TURN = "a"  # in the id pool: the random actions meet this turn too


def _chat_setup() -> list[StateAction]:
    return [
        ChatTurnStartedAction(turn_id=TURN, started_at="2026", message=message("go")),
        ChatResponsePartAction(turn_id=TURN, part=MarkdownResponsePart(id="p", content="")),
        ChatResponsePartAction(turn_id=TURN, part=ReasoningResponsePart(id="r", content="")),
        ChatToolCallStartAction(turn_id=TURN, tool_call_id="c", tool_name="x", display_name="x"),
        ChatInputRequestedAction(request=ChatInputRequest(id="q", message="?")),
    ]


def _user(kind: ChannelKind) -> st.SearchStrategy[StateAction]:
    """The user's actions, ids fixed to what the agent never touches."""

    def of(cls: type, **fixed: Any) -> st.SearchStrategy[Any]:
        values: st.SearchStrategy[Any] = ahst.from_type(cls, max_depth=DEPTH)
        return values.map(lambda a: evolve(a, **fixed))

    choices: dict[ChannelKind, list[st.SearchStrategy[StateAction]]] = {
        ChannelKind.ROOT: [of(RootConfigChangedAction)],
        ChannelKind.SESSION: [
            of(SessionTitleChangedAction),
            of(SessionIsReadChangedAction),
            of(SessionIsArchivedChangedAction),
            of(SessionWorkingDirectorySetAction),
            of(SessionActiveClientSetAction),
        ],
        ChannelKind.CHAT: [
            of(ChatDraftChangedAction),
            of(ChatPendingMessageSetAction, kind=PendingMessageKind.QUEUED),
            of(ChatWorkingDirectorySetAction),
            of(ChatInputAnswerChangedAction, request_id="q"),
        ],
        ChannelKind.TERMINAL: [
            of(TerminalResizedAction),
            of(TerminalClaimedAction),
            of(TerminalTitleChangedAction),
            of(TerminalInputAction),
        ],
        ChannelKind.CHANGESET: [of(ChangesetFilesReviewChangedAction, files=("mine",))],
        ChannelKind.ANNOTATIONS: [
            of(AnnotationsEntrySetAction, annotation_id="mine"),
            of(AnnotationsUpdatedAction, annotation_id="mine"),
            of(AnnotationsEntryRemovedAction, annotation_id="mine"),
        ],
    }
    return st.one_of(choices[kind])


def _agent(kind: ChannelKind) -> st.SearchStrategy[StateAction]:
    def of(cls: type, **fixed: Any) -> st.SearchStrategy[Any]:
        values: st.SearchStrategy[Any] = ahst.from_type(cls, max_depth=DEPTH)
        return values.map(lambda a: evolve(a, **fixed))

    fresh = st.sampled_from(["n1", "n2", "n3"])
    choices: dict[ChannelKind, list[st.SearchStrategy[StateAction]]] = {
        ChannelKind.ROOT: [
            of(RootAgentsChangedAction),
            of(RootActiveSessionsChangedAction),
            of(RootTerminalsChangedAction),
        ],
        ChannelKind.SESSION: [
            of(SessionChatUpdatedAction),
            of(SessionChatAddedAction),
            of(SessionActivityChangedAction),
            of(SessionInputNeededSetAction),
            of(SessionChangesetsChangedAction),
            of(SessionServerToolsChangedAction),
        ],
        ChannelKind.CHAT: [
            of(ChatDeltaAction, turn_id=TURN, part_id="p"),
            of(ChatReasoningAction, turn_id=TURN, part_id="r"),
            of(ChatToolCallDeltaAction, turn_id=TURN, tool_call_id="c"),
            of(ChatUsageAction, turn_id=TURN),
            fresh.flatmap(lambda n: of(ChatToolCallStartAction, turn_id=TURN, tool_call_id=n)),
            fresh.map(
                lambda n: ChatResponsePartAction(
                    turn_id=TURN, part=MarkdownResponsePart(id=n, content="more")
                )
            ),
        ],
        ChannelKind.TERMINAL: [
            of(TerminalDataAction),
            of(TerminalCwdChangedAction),
            of(TerminalCommandExecutedAction),
        ],
        ChannelKind.CHANGESET: [
            of(ChangesetStatusChangedAction),
            of(ChangesetOperationsChangedAction),
            fresh.flatmap(
                lambda n: of(ChangesetFileSetAction).map(
                    lambda a: evolve(a, file=evolve(a.file, id=n))
                )
            ),
        ],
        ChannelKind.ANNOTATIONS: [
            fresh.flatmap(lambda n: of(AnnotationsEntrySetAction, annotation_id=n)),
            fresh.flatmap(
                lambda n: of(AnnotationsSetAction).map(
                    lambda a: evolve(a, annotation=evolve(a.annotation, id=n))
                )
            ),
        ],
    }
    return st.one_of(choices[kind])


USERS = tuple(k for k in KINDS if k is not ChannelKind.RESOURCE_WATCH)
"""The kinds users dispatch to."""


@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=2, unique=True),
    step=st.sampled_from([0, 1_000]),
    data=st.data(),
)
def test_the_incremental_rebase_reads_what_a_full_replay_reads(
    kinds: list[ChannelKind], step: int, data: Any
) -> None:
    pair = Pair(step)
    for kind in kinds:
        snapshot = Snapshot(resource=CHANNELS[kind], state=data.draw(states(kind)), from_seq=10)
        pair.both("subscribe", snapshot)
    ops = ["dispatch"] * 3 + ["foreign"] * 4 + ["echo", "reject", "read", "reconnect", "late echo"]
    for _ in range(data.draw(st.integers(12, 30), label="steps")):
        kind = data.draw(st.sampled_from(kinds))
        channel = CHANNELS[kind]
        op = data.draw(st.sampled_from(ops))
        pending = pair.fast.pending(channel)
        if op == "dispatch" and _dispatchable(kind):
            # half what a user does alongside an agent, half anything allowed
            mine = _user(kind) if kind in USERS else own_actions(kind)
            action = data.draw(st.one_of(mine, own_actions(kind)))
            pair.both("dispatch", channel, action)
        elif op == "foreign":
            # the agent's actions (which commute with the user's), anything
            # (which may not), another client's (which meet ours most)
            choices = [actions(kind)]
            if kind in USERS:
                choices += [_agent(kind), _agent(kind), _user(kind)]
            action = data.draw(st.one_of(choices))
            origin = data.draw(st.sampled_from([None, ActionOrigin(client_id=OTHER, client_seq=1)]))
            env = pair.envelope(channel, action, origin)
            assert pair.both("receive", env).kind is ReceiveKind.FOREIGN
            if data.draw(st.booleans()):
                pair.read(channel)
        elif op in ("echo", "reject") and pending:
            index = data.draw(st.sampled_from([0, 0, 0, len(pending) - 1]))
            entry = pending[index]
            action = entry.action
            if op == "echo" and data.draw(st.integers(0, 4)) == 0:
                action = data.draw(actions(kind))  # the host normalised it
            reason = "no" if op == "reject" else None
            origin = ActionOrigin(client_id=ME, client_seq=entry.client_seq)
            env = pair.envelope(channel, action, origin, rejection_reason=reason)
            expected = ReceiveKind.REJECTED if reason else ReceiveKind.ECHO
            assert pair.both("receive", env).kind is expected
        elif op == "read":
            pair.read(channel)
        elif op == "reconnect":
            replay: list[ActionEnvelope] = []
            for _ in range(data.draw(st.integers(0, 2))):
                replay.append(pair.envelope(channel, data.draw(actions(kind))))
            if pending and data.draw(st.booleans()):
                origin = ActionOrigin(client_id=ME, client_seq=pending[0].client_seq)
                replay.append(pair.envelope(channel, pending[0].action, origin))
            result = ReconnectReplayResult(actions=tuple(replay), missing=())
            outcome = pair.both("apply_reconnect", result)
            pair.dropped += outcome.dropped
        elif op == "late echo" and pair.dropped:
            entry = pair.dropped.pop(data.draw(st.integers(0, len(pair.dropped) - 1)))
            if entry.channel in pair.fast.channels:
                origin = ActionOrigin(client_id=ME, client_seq=entry.client_seq)
                env = pair.envelope(entry.channel, entry.action, origin)
                assert pair.both("receive", env).kind is ReceiveKind.LATE_ECHO
        pair.check()
    for channel in pair.fast.channels:
        pair.read(channel)


# ── 3. the common case: the agent's actions do not touch the user's ──────────


@pytest.mark.parametrize("kind", USERS, ids=[k.value for k in USERS])
@settings(max_examples=max(5, settings().max_examples // 5))
@given(data=st.data())
def test_a_read_after_a_foreign_action_that_touches_other_data_costs_one_reduction(
    kind: ChannelKind, data: Any
) -> None:
    channel = CHANNELS[kind]
    state = _pin(data.draw, data.draw(ahst.states(STATE_TYPES[kind], max_depth=DEPTH)))
    if kind is ChannelKind.CHAT:
        state = _fold(channel, state, _chat_setup())
    pair = Pair(data.draw(st.sampled_from([0, 1_000])))
    snapshot = Snapshot(resource=channel, state=state, from_seq=10)
    pair.both("subscribe", snapshot)
    mine = data.draw(st.lists(_user(kind), min_size=1, max_size=8), label="pending")
    for action in mine:
        pair.both("dispatch", channel, action)
    pair.read(channel)
    pending = len(mine)
    for action in data.draw(st.lists(_agent(kind), min_size=1, max_size=8), label="foreign"):
        before = pair.fast.confirmed(channel)
        env = pair.envelope(channel, action)
        pair.both("receive", env)
        changed = pair.fast.confirmed(channel) is not before
        with counted() as fast:
            fast_state = pair.fast.optimistic(channel)
        with counted() as slow:
            slow_state = pair.slow.optimistic(channel)
        assert fast_state == slow_state == replayed(pair.fast, channel)
        assert slow[0] == (pending if changed else 0)  # the replay
        assert fast[0] == (1 if changed else 0)  # the foreign action, on the cached state
        event(f"pending {pending}: replay {slow[0]}, footprints {fast[0]}")
