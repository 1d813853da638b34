"""A small in-test AHP 0.7.0 host and reconciler-driven clients, wired without I/O.

The host (:class:`Host`) is deliberately simple but keeps the rules the
reconciler depends on:

* one global ``serverSeq`` for all channels, every envelope takes the next
  one, rejections included;
* the library's reducers with the machine's shared clock (:class:`Ticker`),
  so a client's confirmed state can be compared with the host's (exactly
  when the clock stands still; apart from the chat ``modifiedAt`` it stamps
  when the clock moves, since host and client read it at different times);
* invalid client actions come back to the dispatching client (and, with
  ``broadcast_rejections``, to every subscriber) with a ``rejectionReason``
  and are not applied (:meth:`Host.validate` lists the rules: inventory §8
  for 0.7.0 plus a few harness policies); the host normalises session
  titles, so an echo may differ from the dispatched action;
* with ``hold_directories`` (a harness policy, not a spec rule: AHP 0.7.0
  removed the deferral of model and agent changes and defers nothing), the
  host holds the session's working-directory changes while any chat has an
  active turn, so their echoes come after those of later dispatches, and may
  come after a reconnect or an unsubscribe dropped them: the reconciler
  accepts both, and this keeps them covered;
* a queued message set while the chat is idle is consumed at once
  (``pendingMessageRemoved`` then ``turnStarted``), as is the next queued
  message when a turn ends;
* actions on a disposed channel are silently ignored (no echo);
* ``reconnect`` answers with a replay of the envelopes after
  ``lastSeenServerSeq`` (those sent to that client) when the gap is inside
  the replay window, else with fresh snapshots.

Each :class:`Connection` is two ordered queues (client to host, host to
client), so delivery can be delayed arbitrarily but never reordered, as on
the ordered, reliable AHP transport.  A disconnect loses whatever is in
flight on both queues.

A :class:`Client` wraps a :class:`ClientReconciler` plus the bookkeeping the
properties need: every ``clientSeq`` it dispatched is *outstanding* until an
echo or a rejection answers it, or a reconnect or unsubscribe drops it (then
it is *orphaned* until a late echo, if any).
"""

from __future__ import annotations

import bisect
from collections import Counter, deque
from collections.abc import Callable, Iterable

from attrs import define, evolve, field, frozen

from agenthost_protocol.host import validation
from agenthost_protocol.reconciler import (
    ClientReconciler,
    Received,
    ReceiveKind,
    ReconnectOutcome,
)
from agenthost_protocol.reducers import reduce
from agenthost_protocol.reducers._clock import iso_timestamp
from agenthost_protocol.types import (
    ActionEnvelope,
    ActionOrigin,
    ActiveTurn,
    ChangesetFile,
    ChangesetFileRemovedAction,
    ChangesetFileSetAction,
    ChangesetState,
    ChangesetStatus,
    ChatDeltaAction,
    ChatDraftChangedAction,
    ChatErrorAction,
    ChatInputAnswerChangedAction,
    ChatInputAnswered,
    ChatInputAnswerState,
    ChatInputBooleanQuestion,
    ChatInputCompletedAction,
    ChatInputRequest,
    ChatInputRequestedAction,
    ChatInputResponseKind,
    ChatInputTextQuestion,
    ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction,
    ChatResponsePartAction,
    ChatState,
    ChatToolCallApprovedAction,
    ChatToolCallCompleteAction,
    ChatToolCallDeniedAction,
    ChatToolCallReadyAction,
    ChatToolCallStartAction,
    ChatTruncatedAction,
    ChatTurnCancelledAction,
    ChatTurnCompleteAction,
    ChatTurnStartedAction,
    ChatWorkingDirectorySetAction,
    DispatchActionParams,
    ErrorInfo,
    FileEdit,
    InputRequestResponsePart,
    MarkdownResponsePart,
    Message,
    MessageKind,
    MessageOrigin,
    ModelSelection,
    PendingMessageKind,
    ReconnectParams,
    ReconnectReplayResult,
    ReconnectResult,
    ReconnectSnapshotResult,
    SessionActivityChangedAction,
    SessionIsReadChangedAction,
    SessionLifecycle,
    SessionState,
    SessionStatus,
    SessionTitleChangedAction,
    SessionWorkingDirectoryRemovedAction,
    SessionWorkingDirectorySetAction,
    Snapshot,
    SnapshotState,
    StateAction,
    ToolCallPendingConfirmationState,
    ToolCallResponsePart,
    ToolCallResult,
    ToolCallRunningState,
)
from agenthost_protocol.versions import IS_CLIENT_DISPATCHABLE

FIXED_NOW = 1_767_225_600_000
"""The instant the harness clocks start at (2026-01-01T00:00:00Z)."""


def clock() -> int:
    """A clock that stands still: host and clients agree, so states compare exactly."""
    return FIXED_NOW


def stopped_at(ms: int) -> Callable[[], int]:
    """A clock that always reads ``ms``."""
    return lambda: ms


class Ticker:
    """The clock of one run: epoch ms from :data:`FIXED_NOW`, ``step`` ms later at each reading.

    ``step=0`` is :func:`clock`.  Host and clients share one ticker, so with
    a non-zero step no two readings are equal.
    """

    def __init__(self, step: int = 0) -> None:
        self.step = step
        self.ms = FIXED_NOW

    def __call__(self) -> int:
        self.ms += self.step
        return self.ms

    @property
    def moves(self) -> bool:
        return self.step != 0

    def iso(self) -> str:
        """A reading as an ISO timestamp, for ``startedAt``."""
        return iso_timestamp(self())


SESSION = "ahp-session:/s1"
CHAT_A = "ahp-chat:/a"
CHAT_B = "ahp-chat:/b"
CHANGESET = "ahp-changeset:/s1/working"
CHANNELS = (SESSION, CHAT_A, CHAT_B, CHANGESET)

PRIMARY_DIRECTORY = "file:///work/main"
"""The session's first working directory, which the host will not remove."""
DIRECTORIES = (PRIMARY_DIRECTORY, "file:///work/lib", "file:///work/docs")
"""The directories clients add to and remove from the session (and chats)."""
FILES = ("f1", "f2", "f3")
"""The files of the changeset at the start."""


def session_state(uri: str = SESSION) -> SessionState:
    return SessionState(
        provider="test",
        title="untitled",
        status=SessionStatus.IDLE,
        working_directories=(PRIMARY_DIRECTORY,),
        lifecycle=SessionLifecycle.READY,
        active_clients=(),
        chats=(),
    )


def chat_state(uri: str) -> ChatState:
    return ChatState(
        resource=uri,
        title="chat",
        status=SessionStatus.IDLE,
        modified_at=iso_timestamp(FIXED_NOW),
        turns=(),
    )


def changeset_state() -> ChangesetState:
    files = tuple(ChangesetFile(id=file_id, edit=FileEdit()) for file_id in FILES)
    return ChangesetState(status=ChangesetStatus.READY, files=files)


def message(text: str, kind: MessageKind = MessageKind.USER, model: str | None = None) -> Message:
    selection = None if model is None else ModelSelection(id=model)
    return Message(text=text, origin=MessageOrigin(kind=kind), model=selection)


def initial_states() -> dict[str, SnapshotState]:
    return {
        SESSION: session_state(),
        CHAT_A: chat_state(CHAT_A),
        CHAT_B: chat_state(CHAT_B),
        CHANGESET: changeset_state(),
    }


def unstamped(state: SnapshotState) -> SnapshotState:
    """``state`` without the one value a moving clock makes differ between host and client."""
    if isinstance(state, ChatState):
        return evolve(state, modified_at="")
    return state


def open_requests(turn: ActiveTurn | None) -> list[ChatInputRequest]:
    """The unresolved input requests of ``turn``, in order."""
    if turn is None:
        return []
    return [
        part.request
        for part in turn.response_parts
        if isinstance(part, InputRequestResponsePart) and part.response is None
    ]


def pending_confirmations(turn: ActiveTurn | None) -> list[str]:
    """The ids of the tool calls of ``turn`` that wait for the user's confirmation."""
    if turn is None:
        return []
    return [
        part.tool_call.tool_call_id
        for part in turn.response_parts
        if isinstance(part, ToolCallResponsePart)
        and isinstance(part.tool_call, ToolCallPendingConfirmationState)
    ]


# ── messages on the wire ─────────────────────────────────────────────────────


@frozen
class Subscribe:
    channel: str


@frozen
class Unsubscribe:
    channel: str


@frozen
class SubscribeAnswer:
    channel: str
    snapshot: Snapshot | None
    """``None``: the host answered with an error (no such channel)."""


ClientMessage = DispatchActionParams | Subscribe | Unsubscribe
HostMessage = ActionEnvelope | SubscribeAnswer


@define
class Connection:
    client_id: str
    connected: bool = True
    subscriptions: set[str] = field(factory=set)
    """The host's view of what this client subscribes to."""
    to_host: deque[ClientMessage] = field(factory=deque)
    to_client: deque[HostMessage] = field(factory=deque)

    def drop(self) -> None:
        self.connected = False
        self.to_host.clear()
        self.to_client.clear()


# ── the host ─────────────────────────────────────────────────────────────────

_TURN_ENDS = (
    ChatTurnCompleteAction | ChatTurnCancelledAction | ChatErrorAction | ChatTruncatedAction
)
_HELD = SessionWorkingDirectorySetAction | SessionWorkingDirectoryRemovedAction


class Host:
    """Reducers, one global ``serverSeq`` and the validation rules; no I/O."""

    def __init__(
        self,
        states: dict[str, SnapshotState] | None = None,
        *,
        broadcast_rejections: bool = False,
        replay_window: int | None = None,
        hold_directories: bool = False,
        now: Ticker | None = None,
    ) -> None:
        self.seq = 0
        self.clock = Ticker() if now is None else now
        self.states: dict[str, SnapshotState] = {}
        self.history: dict[str, tuple[list[int], list[SnapshotState]]] = {}
        self.log: list[tuple[ActionEnvelope, str | None]] = []
        """Every envelope sent, with the one client it went to (``None``: all subscribers)."""
        self.connections: dict[str, Connection] = {}
        self.held: list[tuple[str, DispatchActionParams]] = []
        self.applied: set[tuple[str, int]] = set()
        """``(clientId, clientSeq)`` of every client action applied."""
        self.broadcast_rejections = broadcast_rejections
        self.replay_window = replay_window
        self.hold_directories = hold_directories
        self._ids = 0
        for uri, state in (states or initial_states()).items():
            self.create(uri, state)

    # -- channels and state --

    def create(self, channel: str, state: SnapshotState) -> None:
        self.states[channel] = state
        self.history[channel] = ([self.seq], [state])

    def dispose(self, channel: str) -> None:
        del self.states[channel]
        self._release_held()

    def snapshot(self, channel: str) -> Snapshot:
        return Snapshot(resource=channel, state=self.states[channel], from_seq=self.seq)

    def state_at(self, channel: str, seq: int) -> SnapshotState:
        """The state of ``channel`` right after envelope ``seq`` (or the latest before it)."""
        seqs, states = self.history[channel]
        return states[bisect.bisect_right(seqs, seq) - 1]

    def active_turns(self) -> bool:
        return any(
            isinstance(state, ChatState) and state.active_turn is not None
            for state in self.states.values()
        )

    def session_directories(self) -> tuple[str, ...]:
        state = self.states[SESSION]
        assert isinstance(state, SessionState)
        return state.working_directories or ()

    def fresh_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids}"

    # -- connections --

    def connect(self, client_id: str) -> Connection:
        conn = Connection(client_id)
        self.connections[client_id] = conn
        return conn

    def initial_snapshot(self, conn: Connection, channel: str) -> Snapshot:
        """A snapshot handed over out of band (``initialize``'s ``initialSubscriptions``)."""
        conn.subscriptions.add(channel)
        return self.snapshot(channel)

    def _send(self, envelope: ActionEnvelope, only_to: str | None) -> None:
        self.log.append((envelope, only_to))
        for conn in self.connections.values():
            if not conn.connected or envelope.channel not in conn.subscriptions:
                continue
            if only_to is None or conn.client_id == only_to:
                conn.to_client.append(envelope)

    def emit(
        self, channel: str, action: StateAction, origin: ActionOrigin | None = None
    ) -> ActionEnvelope:
        """Apply an accepted action and send its envelope to every subscriber."""
        self.seq += 1
        state = reduce(channel, self.states[channel], action, now=self.clock)
        self.states[channel] = state
        seqs, states = self.history[channel]
        seqs.append(self.seq)
        states.append(state)
        if origin is not None:
            self.applied.add((origin.client_id, origin.client_seq))
        envelope = ActionEnvelope(
            channel=channel, action=action, server_seq=self.seq, origin=origin
        )
        self._send(envelope, None)
        self._after(channel, action)
        return envelope

    def reject(self, client_id: str, params: DispatchActionParams, reason: str) -> None:
        self.seq += 1
        envelope = ActionEnvelope(
            channel=params.channel,
            action=params.action,
            server_seq=self.seq,
            origin=ActionOrigin(client_id=client_id, client_seq=params.client_seq),
            rejection_reason=reason,
        )
        self._send(envelope, None if self.broadcast_rejections else client_id)

    def _after(self, channel: str, action: StateAction) -> None:
        """The host's own follow-ups: consume a queued message, release held actions."""
        if not isinstance(action, ChatPendingMessageSetAction | _TURN_ENDS):
            return
        state = self.states.get(channel)
        if isinstance(state, ChatState) and state.active_turn is None and state.queued_messages:
            queued = state.queued_messages[0]
            self.emit(
                channel,
                ChatPendingMessageRemovedAction(kind=PendingMessageKind.QUEUED, id=queued.id),
            )
            self.emit(
                channel,
                ChatTurnStartedAction(
                    turn_id=self.fresh_id("q"),
                    started_at=self.clock.iso(),
                    message=queued.message,
                    queued_message_id=queued.id,
                ),
            )
        self._release_held()

    def _release_held(self) -> None:
        if self.held and not self.active_turns():
            held, self.held = self.held, []
            for client_id, params in held:
                self.accept(client_id, params)

    # -- client messages --

    def validate(self, channel: str, action: StateAction) -> str | None:
        """The rejection reason for a client action, or ``None`` if it is valid.

        Spec rules (inventory §8, 0.7.0): not client-dispatchable;
        ``chat/turnCancelled`` with no such active turn;
        ``chat/toolCallConfirmed`` of a call that is not pending confirmation;
        ``chat/inputAnswerChanged``/``inputCompleted`` with no unresolved
        input part of that id in the active turn, with an answer to an unknown
        question or of the wrong kind, or accepting without a submitted answer
        to every required question; ``chat/pendingMessageRemoved`` of an
        unknown message; a message that is not the user's in
        ``chat/turnStarted``, ``pendingMessageSet`` or ``draftChanged``;
        ``chat/workingDirectorySet`` of a directory outside the session's set.
        The host advertises ``multipleWorkingDirectories`` with an immutable
        primary, so it declines removing the session's first directory (a
        MAY), and a changeset ``review`` capability.

        Harness policies: an action of another channel's family; a blank
        session title (other titles are accepted with their surrounding blanks
        trimmed, so the echo differs from the dispatch); ``chat/turnStarted``
        while a turn is active or with a used turn id; ``chat/truncated`` to
        an unknown turn.
        """
        state = self.states[channel]
        wire = str(getattr(action.type, "value", action.type))
        if not IS_CLIENT_DISPATCHABLE.get(wire, False):
            return "not client-dispatchable"
        family = {ChatState: "chat/", SessionState: "session/", ChangesetState: "changeset/"}
        if not wire.startswith(family[type(state)]):
            return "wrong channel"
        if isinstance(state, SessionState):
            return self._validate_session(state, action)
        if isinstance(state, ChatState):
            return self._validate_chat(state, action)
        return None

    def _validate_session(self, state: SessionState, action: StateAction) -> str | None:
        match action:
            case SessionTitleChangedAction(title=title) if not title.strip():
                return "title must not be empty"
            case SessionWorkingDirectoryRemovedAction(directory=directory):
                if state.working_directories and state.working_directories[0] == directory:
                    return "the primary working directory cannot be removed"
            case _:
                pass
        return None

    def _validate_chat(self, state: ChatState, action: StateAction) -> str | None:
        turn = state.active_turn
        match action:
            case ChatTurnStartedAction(turn_id=turn_id, message=msg):
                if turn is not None:
                    return "a turn is already active"
                if any(done.id == turn_id for done in state.turns):
                    return "turn id already used"
                return _user_message(msg)
            case ChatTurnCancelledAction(turn_id=turn_id):
                if turn is None or turn.id != turn_id:
                    return "no such active turn"
            case ChatToolCallApprovedAction(turn_id=turn_id, tool_call_id=call_id) | (
                ChatToolCallDeniedAction(turn_id=turn_id, tool_call_id=call_id)
            ):
                if turn is None or turn.id != turn_id or call_id not in pending_confirmations(turn):
                    return "no such tool call pending confirmation"
            case ChatInputAnswerChangedAction(
                request_id=request_id, question_id=question_id, answer=answer
            ):
                request = _open_request(turn, request_id)
                if request is None:
                    return "no such open input request"
                return _check_answers(request, {question_id: answer})
            case ChatInputCompletedAction(request_id=request_id, response=response, answers=given):
                request = _open_request(turn, request_id)
                if request is None:
                    return "no such open input request"
                problem = _check_answers(request, given or {})
                if problem is not None or response != ChatInputResponseKind.ACCEPT:
                    return problem
                answers = {**(request.answers or {}), **(given or {})}
                for question_id, question in _questions(request).items():
                    answer = answers.get(question_id)
                    submitted = isinstance(answer, ChatInputAnswered) and (
                        answer.state == ChatInputAnswerState.SUBMITTED
                    )
                    if getattr(question, "required", False) and not submitted:
                        return f"question {question_id!r} needs an answer"
            case ChatPendingMessageSetAction(message=msg):
                return _user_message(msg)
            case ChatPendingMessageRemovedAction(kind=kind, id=message_id):
                if kind == PendingMessageKind.STEERING:
                    known = state.steering_message is not None and (
                        state.steering_message.id == message_id
                    )
                else:
                    known = any(m.id == message_id for m in state.queued_messages or ())
                if not known:
                    return "no such pending message"
            case ChatDraftChangedAction(draft=draft) if draft is not None:
                return _user_message(draft)
            case ChatWorkingDirectorySetAction(directory=directory):
                if directory not in self.session_directories():
                    return "not a working directory of the session"
            case ChatTruncatedAction(turn_id=turn_id) if turn_id is not None:
                if not any(done.id == turn_id for done in state.turns):
                    return "no such turn"
            case _:
                pass
        return None

    def accept(self, client_id: str, params: DispatchActionParams) -> None:
        """Validate, then hold, reject or apply one client action."""
        if params.channel not in self.states:
            return  # silently ignored: the channel is gone
        if self.hold_directories and isinstance(params.action, _HELD) and self.active_turns():
            self.held.append((client_id, params))
            return
        reason = self.validate(params.channel, params.action)
        if reason is not None:
            self.reject(client_id, params, reason)
            return
        action = params.action
        if isinstance(action, SessionTitleChangedAction) and action.title != action.title.strip():
            # the host normalises: the echo differs from what the client sent
            action = evolve(action, title=action.title.strip())
        origin = ActionOrigin(client_id=client_id, client_seq=params.client_seq)
        self.emit(params.channel, action, origin)

    def process(self, conn: Connection) -> bool:
        """Handle the next message from ``conn``; ``False`` if there was none."""
        if not conn.to_host:
            return False
        msg = conn.to_host.popleft()
        match msg:
            case DispatchActionParams():
                self.accept(conn.client_id, msg)
            case Subscribe(channel=channel):
                if channel in self.states:
                    conn.subscriptions.add(channel)
                    conn.to_client.append(SubscribeAnswer(channel, self.snapshot(channel)))
                else:
                    conn.to_client.append(SubscribeAnswer(channel, None))
            case Unsubscribe(channel=channel):
                conn.subscriptions.discard(channel)
        return True

    def reconnect(self, params: ReconnectParams, *, force_snapshot: bool) -> ReconnectResult:
        conn = self.connections[params.client_id]
        conn.drop()
        conn.connected = True
        live = [uri for uri in params.subscriptions if uri in self.states]
        conn.subscriptions = set(live)
        gap = self.seq - params.last_seen_server_seq
        if force_snapshot or (self.replay_window is not None and gap > self.replay_window):
            return ReconnectSnapshotResult(snapshots=tuple(self.snapshot(uri) for uri in live))
        actions = tuple(
            envelope
            for envelope, only_to in self.log
            if envelope.server_seq > params.last_seen_server_seq
            and envelope.channel in conn.subscriptions
            and only_to in (None, params.client_id)
        )
        missing = tuple(uri for uri in params.subscriptions if uri not in self.states)
        return ReconnectReplayResult(actions=actions, missing=missing)

    # -- the agent and other server-originated actions --

    def agent_step(self, channel: str, choice: int) -> None:
        """One server-originated action on ``channel``, picked by ``choice``."""
        state = self.states.get(channel)
        if isinstance(state, SessionState):
            self._session_step(channel, state, choice)
        elif isinstance(state, ChatState):
            self._chat_step(channel, state, choice)
        elif isinstance(state, ChangesetState):
            self._changeset_step(channel, state, choice)

    def finish_turns(self) -> None:
        """The agent completes every active turn (and those of the queued messages that
        follow), so that held actions are answered."""
        while self.active_turns():
            for channel, state in list(self.states.items()):
                if isinstance(state, ChatState) and state.active_turn is not None:
                    turn_id = state.active_turn.id
                    self.emit(channel, ChatTurnCompleteAction(turn_id=turn_id, duration=1))

    def agent_asks(self, channel: str, choice: int) -> None:
        """The agent of ``channel`` asks the user something: an input request or a tool
        call to confirm, starting a turn first if none is active."""
        state = self.states.get(channel)
        if not isinstance(state, ChatState):
            return
        if state.active_turn is None:
            self._chat_step(channel, state, choice)
        state = self.states[channel]
        assert isinstance(state, ChatState)
        self._chat_step(channel, state, 3 if choice % 2 else 4)

    def _session_step(self, channel: str, state: SessionState, choice: int) -> None:
        match choice % 3:
            case 0:
                self.emit(channel, SessionTitleChangedAction(title=self.fresh_id("server-")))
            case 1:
                is_read = not (int(state.status) & SessionStatus.IS_READ)
                self.emit(channel, SessionIsReadChangedAction(is_read=is_read))
            case _:
                activity = None if state.activity else self.fresh_id("busy-")
                self.emit(channel, SessionActivityChangedAction(activity=activity))

    def _chat_step(self, channel: str, state: ChatState, choice: int) -> None:
        turn = state.active_turn
        if turn is None:
            # an agent-side turn (e.g. started from another surface)
            self.emit(
                channel,
                ChatTurnStartedAction(
                    turn_id=self.fresh_id("h"),
                    started_at=self.clock.iso(),
                    message=message("agent work"),
                ),
            )
            return
        parts = [p for p in turn.response_parts if isinstance(p, MarkdownResponsePart)]
        requests = open_requests(turn)
        running = [
            part.tool_call.tool_call_id
            for part in turn.response_parts
            if isinstance(part, ToolCallResponsePart)
            and isinstance(part.tool_call, ToolCallRunningState)
        ]
        # turns end in two draws out of ten, so that users get to answer the agent
        match choice % 10:
            case 0:
                part = MarkdownResponsePart(id=self.fresh_id("p"), content="")
                self.emit(channel, ChatResponsePartAction(turn_id=turn.id, part=part))
            case 2 if state.steering_message is not None:
                steering = state.steering_message
                self.emit(
                    channel,
                    ChatPendingMessageRemovedAction(
                        kind=PendingMessageKind.STEERING, id=steering.id
                    ),
                )
            case 3:
                # a new request, or the open one asked again (replaced in place)
                again = requests[0].id if requests and choice % 2 else None
                self.emit(channel, ChatInputRequestedAction(request=input_request(self, again)))
            case 4:
                call_id = self.fresh_id("tc")
                self.emit(
                    channel,
                    ChatToolCallStartAction(
                        turn_id=turn.id, tool_call_id=call_id, tool_name="grep", display_name="Grep"
                    ),
                )
                self.emit(
                    channel,
                    ChatToolCallReadyAction(
                        turn_id=turn.id, tool_call_id=call_id, invocation_message="Searching"
                    ),
                )
            case 5 if running:
                result = ToolCallResult(success=True, past_tense_message="Searched")
                self.emit(
                    channel,
                    ChatToolCallCompleteAction(
                        turn_id=turn.id, tool_call_id=running[0], result=result
                    ),
                )
            case 8 if choice % 2:
                error = ErrorInfo(error_type="agent", message="failed")
                self.emit(channel, ChatErrorAction(turn_id=turn.id, duration=choice, error=error))
            case 8 | 9:
                self.emit(channel, ChatTurnCompleteAction(turn_id=turn.id, duration=choice))
            case _ if parts:
                self.emit(
                    channel,
                    ChatDeltaAction(turn_id=turn.id, part_id=parts[-1].id, content=f"+{choice}"),
                )
            case _:
                part = MarkdownResponsePart(id=self.fresh_id("p"), content="")
                self.emit(channel, ChatResponsePartAction(turn_id=turn.id, part=part))

    def _changeset_step(self, channel: str, state: ChangesetState, choice: int) -> None:
        present = [file.id for file in state.files]
        file_id = FILES[choice % len(FILES)]
        if choice % 2 and file_id in present:
            self.emit(channel, ChangesetFileRemovedAction(file_id=file_id))
        else:
            # (re)written without ``reviewed``: how a host resets the review
            file = ChangesetFile(id=file_id, edit=FileEdit())
            self.emit(channel, ChangesetFileSetAction(file=file))


def input_request(host: Host, request_id: str | None = None) -> ChatInputRequest:
    """The agent's question: a required text answer and an optional yes/no."""
    return ChatInputRequest(
        id=host.fresh_id("r") if request_id is None else request_id,
        message="Which branch?",
        questions=(
            ChatInputTextQuestion(id="name", message="Branch name", required=True),
            ChatInputBooleanQuestion(id="push", message="Push it?"),
        ),
    )


def _user_message(msg: Message) -> str | None:
    if msg.origin.kind != MessageKind.USER:
        return "clients send user messages only"
    return None


def _open_request(turn: ActiveTurn | None, request_id: str) -> ChatInputRequest | None:
    return next((r for r in open_requests(turn) if r.id == request_id), None)


# The answer checks are the host core's (inventory §8: an answer must name a
# question of the request and hold a value of its kind).
_check_answers = validation._check_answers
_questions = validation._questions


# ── a client ─────────────────────────────────────────────────────────────────


class Client:
    """A :class:`ClientReconciler` on a :class:`Connection`, with the properties' bookkeeping."""

    def __init__(self, client_id: str, host: Host, channels: Iterable[str]) -> None:
        self.id = client_id
        self.host = host
        self.clock = host.clock
        self.conn = host.connect(client_id)
        self.rec = ClientReconciler(client_id, now=self.clock)
        self.outstanding: dict[int, tuple[str, StateAction]] = {}
        self.orphaned: dict[int, tuple[str, StateAction]] = {}
        self.released: set[str] = set()
        self.subscribing: set[str] = set()
        self.seen: dict[str, int] = {}
        self.delivered: list[ActionEnvelope] = []
        self.rejected: list[int] = []
        self.dropped: list[int] = []
        self.stats: Counter[str] = Counter()
        """What happened, for ``hypothesis.event`` statistics."""
        self._turns = 0
        for channel in channels:
            snapshot = host.initial_snapshot(self.conn, channel)
            self.rec.subscribe(snapshot)
            self.seen[channel] = snapshot.from_seq

    def fresh_turn_id(self) -> str:
        self._turns += 1
        return f"{self.id}-t{self._turns}"

    # -- sending --

    def dispatch(self, channel: str, action: StateAction) -> None:
        params = self.rec.dispatch(channel, action)
        self.stats["dispatch"] += 1
        assert params.client_seq not in self.outstanding
        self.outstanding[params.client_seq] = (channel, action)
        if self.conn.connected:
            self.conn.to_host.append(params)
        # else: lost with the connection; the next reconnect reports it dropped

    def subscribe(self, channel: str) -> None:
        assert channel not in self.rec.channels
        self.subscribing.add(channel)
        self.conn.to_host.append(Subscribe(channel))

    def unsubscribe(self, channel: str) -> None:
        for entry in self.rec.unsubscribe(channel):
            self._drop(entry.client_seq)
        self.released.add(channel)
        self.seen.pop(channel, None)
        self.conn.to_host.append(Unsubscribe(channel))

    # -- receiving --

    def deliver(self) -> bool:
        """Hand the next host message to the reconciler; ``False`` if there was none."""
        if not self.conn.to_client:
            return False
        msg = self.conn.to_client.popleft()
        if isinstance(msg, SubscribeAnswer):
            self.subscribing.discard(msg.channel)
            if msg.snapshot is not None:
                self.rec.subscribe(msg.snapshot)
                self.released.discard(msg.channel)
                self.seen[msg.channel] = msg.snapshot.from_seq
            return True
        self.delivered.append(msg)
        self.account(self.rec.receive(msg))
        return True

    def redeliver(self, index: int) -> Received | None:
        """Deliver an already delivered envelope again: it must be ignored."""
        if not self.delivered:
            return None
        envelope = self.delivered[index % len(self.delivered)]
        before = {
            uri: (self.rec.confirmed(uri), self.rec.pending(uri)) for uri in self.rec.channels
        }
        received = self.rec.receive(envelope)
        self.stats[f"redelivered: {received.kind.value}"] += 1
        assert received.kind in (ReceiveKind.DUPLICATE, ReceiveKind.UNSUBSCRIBED), received.kind
        after = {uri: (self.rec.confirmed(uri), self.rec.pending(uri)) for uri in self.rec.channels}
        assert before == after
        return received

    def account(self, received: Received) -> None:
        """Check one :class:`Received` against the bookkeeping and update it."""
        envelope = received.envelope
        origin = envelope.origin
        ours = origin is not None and origin.client_id == self.id
        kind = received.kind
        self.stats[kind.value] += 1
        if ours and kind is not ReceiveKind.DUPLICATE:
            wire_type = getattr(envelope.action.type, "value", envelope.action.type)
            answer = envelope.rejection_reason or f"applied {wire_type}"
            self.stats[f"{answer} ({kind.value})"] += 1
        if kind is ReceiveKind.ECHO and received.echo_of is not None:
            head = self.rec.pending(envelope.channel)[:1]
            if head and head[0].client_seq < received.echo_of.client_seq:
                self.stats["echo overtaking pending"] += 1
        if kind is ReceiveKind.UNSUBSCRIBED:
            assert envelope.channel in self.released
            return
        assert kind is not ReceiveKind.DUPLICATE, "the transport never duplicates by itself"
        assert envelope.channel in self.rec.channels
        self.seen[envelope.channel] = envelope.server_seq
        if kind is ReceiveKind.FOREIGN:
            assert not ours and envelope.rejection_reason is None
        elif kind is ReceiveKind.FOREIGN_REJECTED:
            assert not ours and self.host.broadcast_rejections
        else:
            assert ours and origin is not None and received.echo_of is not None
            client_seq = origin.client_seq
            assert received.echo_of.client_seq == client_seq
            if kind is ReceiveKind.LATE_ECHO or (
                kind is ReceiveKind.REJECTED and client_seq in self.orphaned
            ):
                channel, action = self.orphaned.pop(client_seq)
            else:
                assert kind in (ReceiveKind.ECHO, ReceiveKind.REJECTED)
                channel, action = self.outstanding.pop(client_seq)
            assert (channel, action) == (received.echo_of.channel, received.echo_of.action)
            if kind is ReceiveKind.REJECTED:
                assert received.rejection is not None
                assert received.rejection.reason == envelope.rejection_reason
                self.rejected.append(client_seq)
            else:
                assert envelope.rejection_reason is None

    def _drop(self, client_seq: int) -> None:
        self.orphaned[client_seq] = self.outstanding.pop(client_seq)
        self.dropped.append(client_seq)

    # -- reconnecting --

    def disconnect(self) -> None:
        self.conn.drop()
        self.subscribing.clear()

    def reconnect(self, *, force_snapshot: bool) -> ReconnectOutcome:
        self.disconnect()
        if any(cid == self.id for cid, _ in self.host.held):
            self.stats["reconnect while held"] += 1
        params = self.rec.reconnect_params()
        result = self.host.reconnect(params, force_snapshot=force_snapshot)
        # which of our pending actions the host applied before answering
        applied_before = {seq for seq in self.outstanding if (self.id, seq) in self.host.applied}
        outcome = self.rec.apply_reconnect(result)
        self.stats[f"reconnect {outcome.kind.value}"] += 1
        if outcome.dropped:
            self.stats["reconnect dropped pending"] += 1
        if outcome.removed:
            self.stats["reconnect removed channels"] += 1
        for received in outcome.received:
            self.account(received)
        for entry in outcome.dropped:
            if isinstance(result, ReconnectReplayResult) and entry.channel not in outcome.removed:
                # a replay answers everything the host did: what is left was never applied
                assert entry.client_seq not in applied_before
            self._drop(entry.client_seq)
        for uri in outcome.removed:
            self.released.add(uri)
            self.seen.pop(uri, None)
        if isinstance(result, ReconnectSnapshotResult):
            for snapshot in result.snapshots:
                self.seen[snapshot.resource] = snapshot.from_seq
        assert not self.outstanding, "a reconnect clears every pending action"
        return outcome

    # -- the properties --

    def same_as_host(self, mine: SnapshotState, hosts: SnapshotState) -> bool:
        if self.clock.moves:
            return unstamped(mine) == unstamped(hosts)
        return mine == hosts

    def check(self) -> None:
        """Every-step properties of this client."""
        rec = self.rec
        pending_seqs: dict[int, tuple[str, StateAction]] = {}
        for channel in rec.channels:
            confirmed = rec.confirmed(channel)
            pending = rec.pending(channel)
            # optimistic == confirmed with pending replayed on top, each action at
            # its dispatched_at (the clock policy): exact for any clock
            state = confirmed
            for entry in pending:
                assert entry.channel == channel
                pending_seqs[entry.client_seq] = (channel, entry.action)
                state = reduce(channel, state, entry.action, now=stopped_at(entry.dispatched_at))
            optimistic = rec.optimistic(channel)
            assert optimistic == state, f"optimistic != confirmed + pending on {channel}"
            assert rec.optimistic(channel) is optimistic, "optimistic is cached"
            # confirmed == the host's state as of the last envelope seen on the channel
            assert self.same_as_host(confirmed, self.host.state_at(channel, self.seen[channel])), (
                f"{self.id} confirmed {channel} differs from the host's at seq {self.seen[channel]}"
            )
        # no pending action lost or duplicated: pending is exactly the outstanding ones
        assert pending_seqs == self.outstanding
        assert rec.last_seen_server_seq <= self.host.seq

    def check_quiescent(self) -> None:
        """After delivery quiesced: confirmed equals the host's state, nothing left unanswered."""
        self.check()
        for channel in self.rec.channels:
            if channel in self.host.states:
                assert self.same_as_host(self.rec.confirmed(channel), self.host.states[channel])
        held = {p.client_seq for cid, p in self.host.held if cid == self.id}
        for client_seq, (channel, _) in self.outstanding.items():
            # only the host's silence leaves an action pending: a held
            # action, or one sent to a channel disposed since
            assert client_seq in held or channel not in self.host.states


def quiesce(host: Host, clients: Iterable[Client]) -> None:
    """Run host and clients until no message is in flight anywhere."""
    clients = list(clients)
    busy = True
    while busy:
        busy = False
        for client in clients:
            if not client.conn.connected:
                continue
            while host.process(client.conn):
                busy = True
            while client.deliver():
                busy = True
