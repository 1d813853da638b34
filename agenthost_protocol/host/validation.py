"""Which client actions a host rejects: inventory §8 as pure functions.

Each function takes what the rule needs (the channel state, the action, the
dispatching client) and returns a rejection reason, or ``None`` when the rule
has nothing against the action.  :func:`validate` runs the families in order
and returns the first reason.  The reasons are short English sentences sent
to the client as ``rejectionReason``; they are not part of the protocol.

The MUSTs of the spec are all here, the SHOULDs as far as the channel state
lets a host decide them.  Rules the state cannot decide (a ``toolCallComplete``
for a call the host has not seen, a chat attachment naming a turn beyond the
loaded window) are left to the embedder.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from attrs import frozen

from .. import types as t
from ..channels import ChannelKind, channel_kind
from ..versions import is_action_known_to_version, is_client_dispatchable

__all__ = [
    "MAX_QUEUED_MESSAGES",
    "ValidationContext",
    "check_chat",
    "check_chat_source",
    "check_dispatchable",
    "check_family",
    "check_session",
    "check_terminal",
    "MAX_TERMINAL_SIZE",
    "MAX_TERMINAL_TITLE",
    "validate",
]

MAX_QUEUED_MESSAGES: Final = 64
"""The most queued messages a client may add to a chat (each at most 64 KiB
inline: :mod:`.bounds`); a steering message replaces the one there is."""

_FAMILY: Mapping[ChannelKind, str] = MappingProxyType({
    ChannelKind.ROOT: "root/",
    ChannelKind.SESSION: "session/",
    ChannelKind.CHAT: "chat/",
    ChannelKind.TERMINAL: "terminal/",
    ChannelKind.CHANGESET: "changeset/",
    ChannelKind.ANNOTATIONS: "annotations/",
    ChannelKind.RESOURCE_WATCH: "resourceWatch/",
})

_KIND_OF_STATE: Mapping[type, ChannelKind] = MappingProxyType({
    t.RootState: ChannelKind.ROOT,
    t.SessionState: ChannelKind.SESSION,
    t.ChatState: ChannelKind.CHAT,
    t.TerminalState: ChannelKind.TERMINAL,
    t.ChangesetState: ChannelKind.CHANGESET,
    t.AnnotationsState: ChannelKind.ANNOTATIONS,
    t.ResourceWatchState: ChannelKind.RESOURCE_WATCH,
})


@frozen(kw_only=True)
class ValidationContext:
    """What the rules may look at beyond the target channel's own state.

    ``session`` is the state of the session that owns the target chat (or is
    the target), ``capabilities`` the ``AgentCapabilities`` of that session's
    provider (from the root state), ``None`` when the agent advertises none.
    """

    client_id: str
    """The dispatching client."""
    version: str
    """Its negotiated protocol version."""
    session: t.SessionState | None = None
    capabilities: t.AgentCapabilities | None = None


def _wire_type(action: t.StateAction) -> str:
    tp = action.type
    return str(getattr(tp, "value", tp))


def check_dispatchable(action: t.StateAction, version: str) -> str | None:
    """Only client-dispatchable actions the negotiated version knows."""
    if isinstance(action, t.UnknownAction) or not is_client_dispatchable(action):
        return "not client-dispatchable"
    if not is_action_known_to_version(action, version):
        return f"unknown to protocol version {version}"
    return None


def check_family(uri: str, state: t.SnapshotState, action: t.StateAction) -> str | None:
    """The action belongs to the kind of channel it was sent to."""
    kind = channel_kind(uri) or _KIND_OF_STATE.get(type(state))
    family = _FAMILY.get(kind) if kind is not None else None
    if family is None or not _wire_type(action).startswith(family):
        return "not an action of this channel"
    return None


def _user_message(msg: t.Message | None) -> str | None:
    if msg is not None and msg.origin.kind != t.MessageKind.USER:
        return "clients send user messages only"
    return None


def _working_directories_allowed(ctx: ValidationContext) -> bool:
    caps = ctx.capabilities
    return caps is not None and caps.multiple_working_directories is not None


def check_session(
    state: t.SessionState, action: t.StateAction, ctx: ValidationContext
) -> str | None:
    """Session rules: the default chat, working directories, config mutability, and
    a client's own active-client entry."""
    match action:
        case t.SessionDefaultChatChangedAction(default_chat=chat) if chat is not None:
            if not any(summary.resource == chat for summary in state.chats):
                return "not a chat of this session"
        case t.SessionWorkingDirectorySetAction() | t.SessionWorkingDirectoryRemovedAction():
            if not _working_directories_allowed(ctx):
                return "the agent does not support multiple working directories"
            if isinstance(action, t.SessionWorkingDirectoryRemovedAction):
                mwd = ctx.capabilities.multiple_working_directories if ctx.capabilities else None
                dirs = state.working_directories or ()
                if mwd is not None and mwd.immutable_primary and dirs[:1] == (action.directory,):
                    return "the primary working directory cannot be removed"
        case t.SessionConfigChangedAction(config=values, replace=replace):
            return _check_config(state, values, replace=bool(replace))
        case t.SessionActiveClientSetAction(active_client=entry):
            # "a client dispatches this action with its own SessionActiveClient":
            # clientIds are public, so another's entry (its tools) is not ours to write
            if entry.client_id != ctx.client_id:
                return "a client may only set its own active-client entry"
        case t.SessionActiveClientRemovedAction(client_id=client_id):
            if client_id != ctx.client_id:
                return "a client may only remove its own active-client entry"
        case _:
            pass
    return None


def _check_config(
    state: t.SessionState, values: Mapping[str, object], *, replace: bool
) -> str | None:
    if state.config is None:
        return "the session has no config"
    schema = state.config.schema.properties
    changed = set(values)
    if replace:
        # a replace also drops or resets every property it leaves out
        changed |= set(state.config.values)
    for name in sorted(changed):
        prop = schema.get(name)
        if prop is None or not prop.session_mutable:
            return f"config property {name!r} is not session-mutable"
    return None


def _tool_call(turn: t.ActiveTurn | None, turn_id: str, call_id: str) -> t.ToolCallState | None:
    if turn is None or turn.id != turn_id:
        return None
    for part in turn.response_parts:
        if (
            isinstance(part, t.ToolCallResponsePart)
            and getattr(part.tool_call, "tool_call_id", None) == call_id
        ):
            return part.tool_call
    return None


def _client_owner(call: t.ToolCallState) -> str | None:
    contributor = getattr(call, "contributor", None)
    return contributor.client_id if isinstance(contributor, t.ToolCallClientContributor) else None


def _open_request(turn: t.ActiveTurn | None, request_id: str) -> t.ChatInputRequest | None:
    if turn is None:
        return None
    for part in turn.response_parts:
        if (
            isinstance(part, t.InputRequestResponsePart)
            and part.response is None
            and part.request.id == request_id
        ):
            return part.request
    return None


def _questions(request: t.ChatInputRequest) -> dict[str, t.ChatInputQuestion]:
    return {
        q.id: q for q in request.questions or () if not isinstance(q, t.UnknownChatInputQuestion)
    }


def _check_answers(
    request: t.ChatInputRequest, answers: Mapping[str, t.ChatInputAnswer | None]
) -> str | None:
    questions = _questions(request)
    for question_id, answer in answers.items():
        question = questions.get(question_id)
        if question is None:
            return f"no question {question_id!r}"
        if isinstance(answer, t.ChatInputAnswered) and not _fits(question, answer.value):
            return f"wrong kind of answer to {question_id!r}"
    return None


def _fits(question: t.ChatInputQuestion, value: object) -> bool:
    expected: dict[type, type] = {
        t.ChatInputTextQuestion: t.ChatInputTextAnswerValue,
        t.ChatInputBooleanQuestion: t.ChatInputBooleanAnswerValue,
        t.ChatInputNumberQuestion: t.ChatInputNumberAnswerValue,
        t.ChatInputSingleSelectQuestion: t.ChatInputSelectedAnswerValue,
        t.ChatInputMultiSelectQuestion: t.ChatInputSelectedManyAnswerValue,
    }
    want = expected.get(type(question))
    return want is None or isinstance(value, want)


def _check_completed(
    request: t.ChatInputRequest, action: t.ChatInputCompletedAction
) -> str | None:
    given = action.answers or {}
    problem = _check_answers(request, given)
    if problem is not None or action.response != t.ChatInputResponseKind.ACCEPT:
        return problem
    answers = {**(request.answers or {}), **given}
    for question_id, question in _questions(request).items():
        answer = answers.get(question_id)
        submitted = isinstance(answer, t.ChatInputAnswered) and (
            answer.state == t.ChatInputAnswerState.SUBMITTED
        )
        if getattr(question, "required", False) and not submitted:
            return f"question {question_id!r} needs a submitted answer"
    return None


def check_chat(state: t.ChatState, action: t.StateAction, ctx: ValidationContext) -> str | None:
    """Chat rules: turns, tool calls and their owners, input requests, messages, directories."""
    turn = state.active_turn
    match action:
        case t.ChatTurnStartedAction(message=msg):
            return _user_message(msg)
        case t.ChatPendingMessageSetAction(kind=kind, id=message_id, message=msg):
            queued = state.queued_messages or ()
            if kind == t.PendingMessageKind.QUEUED and len(queued) >= MAX_QUEUED_MESSAGES and (
                not any(m.id == message_id for m in queued)
            ):
                # they add up in the chat's state outside its turns, which a
                # snapshot must carry whole (issue 29)
                return f"the queue is full: at most {MAX_QUEUED_MESSAGES} queued messages"
            return _user_message(msg)
        case t.ChatDraftChangedAction(draft=draft):
            return _user_message(draft)
        case t.ChatTurnCancelledAction(turn_id=turn_id):
            if turn is None or turn.id != turn_id:
                return "no such active turn"
        case t.ChatToolCallApprovedAction(turn_id=turn_id, tool_call_id=call_id) | (
            t.ChatToolCallDeniedAction(turn_id=turn_id, tool_call_id=call_id)
        ):
            call = _tool_call(turn, turn_id, call_id)
            if not isinstance(call, t.ToolCallPendingConfirmationState):
                return "no such tool call pending confirmation"
        case t.ChatToolCallReadyAction(turn_id=turn_id, tool_call_id=call_id, contributor=new):
            call = _tool_call(turn, turn_id, call_id)
            if call is not None and new is not None:
                before = getattr(call, "contributor", None)
                if _executor(before) != _executor(new):
                    return "toolCallReady must not change who executes the call"
        case t.ChatToolCallCompleteAction(turn_id=turn_id, tool_call_id=call_id, result=result):
            call = _tool_call(turn, turn_id, call_id)
            if call is not None:
                owner = _client_owner(call)
                if owner is not None and owner != ctx.client_id:
                    return "only the contributing client completes this tool call"
                if isinstance(call, t.ToolCallAuthRequiredState) and result.success:
                    return "a tool call waiting for authentication cannot succeed"
        case t.ChatToolCallContentChangedAction(turn_id=turn_id, tool_call_id=call_id):
            call = _tool_call(turn, turn_id, call_id)
            owner = None if call is None else _client_owner(call)
            if owner is not None and owner != ctx.client_id:
                return "only the contributing client changes this tool call's content"
        case t.ChatInputAnswerChangedAction(
            request_id=request_id, question_id=question_id, answer=answer
        ):
            request = _open_request(turn, request_id)
            if request is None:
                return "no such open input request"
            return _check_answers(request, {question_id: answer})
        case t.ChatInputCompletedAction(request_id=request_id):
            request = _open_request(turn, request_id)
            if request is None:
                return "no such open input request"
            return _check_completed(request, action)
        case t.ChatPendingMessageRemovedAction(kind=kind, id=message_id):
            if kind == t.PendingMessageKind.STEERING:
                known = state.steering_message is not None and state.steering_message.id == (
                    message_id
                )
            elif kind == t.PendingMessageKind.QUEUED:
                known = any(m.id == message_id for m in state.queued_messages or ())
            else:
                known = False
            if not known:
                return "no such pending message"
        case t.ChatWorkingDirectorySetAction(directory=directory):
            if not _working_directories_allowed(ctx):
                return "the agent does not support multiple working directories"
            if ctx.session is None or directory not in (ctx.session.working_directories or ()):
                return "not a working directory of the session"
        case t.ChatWorkingDirectoryRemovedAction():
            if not _working_directories_allowed(ctx):
                return "the agent does not support multiple working directories"
        case _:
            pass
    return None


def _executor(contributor: object) -> object:
    """Who executes a call: the client id of a client contributor, else the host side."""
    if isinstance(contributor, t.ToolCallClientContributor):
        return ("client", contributor.client_id)
    return ("host",)


MAX_TERMINAL_SIZE: Final = 4096
"""The most columns, and rows, a client may give a terminal (``terminal/resized``)."""
MAX_TERMINAL_TITLE: Final = 1024
"""The longest terminal title a client may set (``terminal/titleChanged``)."""


def check_terminal(
    state: t.TerminalState, action: t.StateAction, ctx: ValidationContext
) -> str | None:
    """``terminal/claimed`` only from the client that holds the claim; a size a pty can
    take (1 to :data:`MAX_TERMINAL_SIZE`); a title of at most :data:`MAX_TERMINAL_TITLE`
    characters (it is copied into the root's catalogue, which every client holds)."""
    if isinstance(action, t.TerminalClaimedAction):
        claim = state.claim
        if not (isinstance(claim, t.TerminalClientClaim) and claim.client_id == ctx.client_id):
            return "only the claim holder transfers the terminal"
    elif isinstance(action, t.TerminalResizedAction):
        if not (1 <= action.cols <= MAX_TERMINAL_SIZE and 1 <= action.rows <= MAX_TERMINAL_SIZE):
            return f"a terminal has 1 to {MAX_TERMINAL_SIZE} columns and rows"
    elif isinstance(action, t.TerminalTitleChangedAction) and (
            len(action.title) > MAX_TERMINAL_TITLE):
        return f"a terminal title has at most {MAX_TERMINAL_TITLE} characters"
    return None


def check_chat_source(
    session: t.SessionState,
    chat_uri: str,
    source: t.ChatSource | None,
    chats: Mapping[str, t.ChatState],
    capabilities: t.AgentCapabilities | None,
    *,
    working_directories: tuple[str, ...] | None = None,
) -> str | None:
    """The ``createChat`` checks: source capability, ownership, turn, selection, directories.

    ``chats`` maps chat URIs to their states (those the host holds).
    """
    if working_directories and not isinstance(source, t.ForkChatSource):
        # forks inherit the source's directories and ignore the field
        allowed = set(session.working_directories or ())
        if not set(working_directories or ()) <= allowed:
            return "working directories must be a subset of the session's"
    if source is None:
        return None
    multiple = capabilities.multiple_chats if capabilities is not None else None
    if isinstance(source, t.ForkChatSource):
        if multiple is None or not multiple.fork:
            return "the agent does not support forking chats"
    elif multiple is None or not multiple.side_chat:
        return "the agent does not support side chats"
    if source.chat == chat_uri:
        return "a chat cannot be its own source"
    if not any(summary.resource == source.chat for summary in session.chats):
        return "the source chat is not in this session"
    chat = chats.get(source.chat)
    if chat is None:
        return "unknown source chat"
    completed = any(turn.id == source.turn_id for turn in chat.turns)
    active = chat.active_turn is not None and chat.active_turn.id == source.turn_id
    if isinstance(source, t.ForkChatSource):
        if not completed:
            return "a fork must name a completed turn"
    else:
        if not (completed or active):
            return "unknown source turn"
        if source.selection is not None and not source.selection.text:
            return "a side-chat selection must not be empty"
    return None


def validate(
    uri: str, state: t.SnapshotState, action: t.StateAction, ctx: ValidationContext
) -> str | None:
    """The first rejection reason for a client's ``action`` on channel ``uri``, or ``None``."""
    reason = check_dispatchable(action, ctx.version) or check_family(uri, state, action)
    if reason is not None:
        return reason
    if isinstance(state, t.SessionState):
        return check_session(state, action, ctx)
    if isinstance(state, t.ChatState):
        return check_chat(state, action, ctx)
    if isinstance(state, t.TerminalState):
        return check_terminal(state, action, ctx)
    return None
