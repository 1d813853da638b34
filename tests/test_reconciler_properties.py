"""Property tests of the write-ahead reconciler against the library's own host.

A hypothesis state machine runs one real :class:`~agenthost_protocol.host.Host`
and two or three :class:`~agenthost_protocol.client.ClientConnection`\\ s (each
a ``ClientReconciler`` on the wire) over
:class:`~agenthost_protocol.testing.network.Network`, through random
interleavings of client dispatches (AHP 0.7.0 session, chat and changeset
actions, valid and invalid), deliveries one message at a time in each
direction, duplicated deliveries, server-originated actions (agent turns
with streamed text, input requests and tool calls awaiting confirmation;
changeset files rewritten), subscribe/unsubscribe, disposing a chat, link
drops (what is in flight is lost) and reconnects answered by replay or, once
the gap is older than the host's small replay buffer, by snapshots.

The embedder's side is test code on the host's public hooks (:class:`Agent`):

* its ``review`` hook rejects blank session titles, a second turn, a used
  turn id and truncation to an unknown turn, rewrites titles with blanks
  around them (so an echo may differ from the dispatch), and, with
  ``hold_directories``, holds the session's working-directory changes while
  a turn is active, settling them when no turn is: their echoes then come
  after those of later dispatches, and may come after a reconnect or an
  unsubscribe dropped them (``LATE_ECHO``);
* after every input it consumes a queued message at once when the chat is
  idle (``pendingMessageRemoved``, then ``turnStarted``), as the spec asks.

Properties:

* at every step, on every client and tracked channel,
  ``optimistic == confirmed`` with ``pending`` replayed on top (each action
  at its ``dispatched_at``), and ``confirmed`` equals the host's state as of
  the last envelope the client saw on that channel (the host's history is
  rebuilt from an observer connection subscribed to everything);
* at every step, ``pending`` is exactly the set of dispatched actions not yet
  answered: each dispatch is answered at most once, by an echo, a reported
  rejection, or a reported drop (reconnect, unsubscribe); a replay only drops
  actions the host had not applied when it answered; a duplicate is ignored;
* after delivery quiesces, every connected client's confirmed state equals
  the host's state and only the host's silence (a held action, a disposed
  channel) leaves an action pending.

The machine runs twice: with a clock that stands still, so that states
compare exactly with the host's, and with one that moves at every reading
(:class:`MovingClockMachine`), for the clock policy (the chat ``modifiedAt``
each side stamps from its own reading is then left out of comparisons).  A
third property feeds one reconciler well-typed and spoilt peer data from
:mod:`agenthost_protocol.testing.strategies`: only ``RemoteProtocolError``
may come out (``LocalProtocolError`` for its own spoilt actions), and a
refused call changes nothing.  Example counts come from the loaded
hypothesis profile (``tests/conftest.py``); ``HYPOTHESIS_PROFILE=long``
runs 20 times as many.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter, deque
from functools import partial
from typing import Any, get_args

import attrs
from attrs import evolve
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from agenthost_protocol import wire
from agenthost_protocol.channels import ACTION_UNIONS, ChannelKind, channel_kind
from agenthost_protocol.client import (
    ActionReceived,
    ClientConnection,
    ClientState,
    Event,
    Initialized,
    ProtocolViolation,
    Reconnected,
    RequestFailed,
    ResponseReceived,
)
from agenthost_protocol.errors import LocalProtocolError, RemoteProtocolError
from agenthost_protocol.host import ClientActionApplied, Host
from agenthost_protocol.host import Reconnected as HostReconnected
from agenthost_protocol.host.core import HOLD, ClientAction, Reject, ReviewVerdict
from agenthost_protocol.reconciler import (
    ClientReconciler,
    Received,
    ReceiveKind,
    ReconnectOutcome,
)
from agenthost_protocol.reducers import reduce
from agenthost_protocol.testing import strategies as ahst
from agenthost_protocol.testing.network import Network
from agenthost_protocol.types import (
    ActionEnvelope,
    ActionOrigin,
    ActiveTurn,
    AgentCapabilities,
    AgentInfo,
    ChangesetFile,
    ChangesetFileRemovedAction,
    ChangesetFileSetAction,
    ChangesetFilesReviewChangedAction,
    ChangesetState,
    ChatDeltaAction,
    ChatDraftChangedAction,
    ChatErrorAction,
    ChatInputAnswerChangedAction,
    ChatInputAnswered,
    ChatInputAnswerState,
    ChatInputAnswerValue,
    ChatInputBooleanAnswerValue,
    ChatInputBooleanQuestion,
    ChatInputCompletedAction,
    ChatInputRequest,
    ChatInputRequestedAction,
    ChatInputResponseKind,
    ChatInputTextAnswerValue,
    ChatInputTextQuestion,
    ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction,
    ChatQueuedMessagesReorderedAction,
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
    ChatWorkingDirectoryRemovedAction,
    ChatWorkingDirectorySetAction,
    ErrorInfo,
    FileEdit,
    InitializeResult,
    InputRequestResponsePart,
    JsonRpcNotification,
    JsonRpcSuccessResponse,
    MarkdownResponsePart,
    Message,
    MessageKind,
    MultipleWorkingDirectoriesCapability,
    PendingMessageKind,
    ReconnectReplayResult,
    ReconnectResultType,
    ReconnectSnapshotResult,
    RootState,
    SessionActivityChangedAction,
    SessionIsArchivedChangedAction,
    SessionIsReadChangedAction,
    SessionState,
    SessionStatus,
    SessionTitleChangedAction,
    SessionWorkingDirectoryRemovedAction,
    SessionWorkingDirectorySetAction,
    SnapshotState,
    StateAction,
    SubscribeParams,
    SubscribeResult,
    ToolCallCancellationReason,
    ToolCallConfirmationReason,
    ToolCallPendingConfirmationState,
    ToolCallResponsePart,
    ToolCallResult,
    ToolCallRunningState,
    UnknownAction,
)
from agenthost_protocol.versions import IS_CLIENT_DISPATCHABLE

from ._fixtures import (
    CHANGESET,
    CHAT_A,
    CHAT_B,
    DIRECTORIES,
    FILES,
    FIXED_NOW,
    PRIMARY_DIRECTORY,
    SESSION,
    Ticker,
    changeset_state,
    clock,
    message,
    stopped_at,
)

CHANNELS = (SESSION, CHAT_A, CHAT_B, CHANGESET)
ELSEWHERE = "ahp-changeset:/s2/elsewhere"
"""A channel nobody subscribes to: traffic there ages the replay buffer, cheaply."""
REPLAY_WINDOWS = (6, 24, 128, 512)
"""Replay buffer sizes (envelopes).  A reconnect after more traffic than that
gets snapshots; the ``snapshot`` reconnect makes sure of it."""
AGENT_INFO = AgentInfo(
    provider="test",
    display_name="Test",
    description="",
    models=(),
    capabilities=AgentCapabilities(
        multiple_working_directories=MultipleWorkingDirectoriesCapability(immutable_primary=True)
    ),
)
"""Working-directory actions need the capability; the primary one is immutable."""

CLIENT = st.integers(min_value=0, max_value=2)
CHAT_ACTIONS = (
    "start",
    "cancel",
    "queue",
    "steer",
    "unqueue",
    "reorder",
    "truncate",
    "draft",
    "add dir",
    "remove dir",
    "answer",
    "complete input",
    "confirm tool",
)
ANSWER_VALUES: tuple[ChatInputAnswerValue, ...] = (
    ChatInputTextAnswerValue(value="main"),
    ChatInputBooleanAnswerValue(value=True),
)
"""A text answer fits the question ``name``, a yes/no answer ``push``."""
GHOST = "ghost"
"""An id nothing has: the host rejects actions that need it to exist."""


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


# ── the embedder's side ──────────────────────────────────────────────────────


class Agent:
    """What an embedder adds to the host: review policies, agent streams, follow-ups."""

    def __init__(self, clock: Ticker, *, hold_directories: bool) -> None:
        self.clock = clock
        self.hold_directories = hold_directories
        self.host: Host | None = None
        self.applied: set[tuple[str, int]] = set()
        """``(clientId, clientSeq)`` of every client action the host applied."""
        self.applied_when_answered: dict[str, frozenset[tuple[str, int]]] = {}
        """``applied`` as it was when the host last answered each client's ``reconnect``."""
        self._ids = 0

    @property
    def h(self) -> Host:
        assert self.host is not None
        return self.host

    def fresh_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids}"

    def chat(self, uri: str) -> ChatState | None:
        state = self.h.state(uri) if self.h.has_channel(uri) else None
        return state if isinstance(state, ChatState) else None

    def active_turns(self) -> bool:
        return any(
            (chat := self.chat(uri)) is not None and chat.active_turn is not None
            for uri in (CHAT_A, CHAT_B)
        )

    # -- the review hook --

    def review(self, pending: ClientAction) -> ReviewVerdict:
        """Policies on valid client actions (none is a spec rule)."""
        action = pending.action
        chat = self.chat(pending.channel)
        match action:
            case SessionTitleChangedAction(title=title):
                if not title.strip():
                    return Reject("title must not be empty")
                if title != title.strip():
                    # normalised: the echo differs from what the client sent
                    return evolve(action, title=title.strip())
            case SessionWorkingDirectorySetAction() | SessionWorkingDirectoryRemovedAction():
                if self.hold_directories and self.active_turns():
                    return HOLD
            case ChatTurnStartedAction(turn_id=turn_id) if chat is not None:
                if chat.active_turn is not None:
                    return Reject("a turn is already active")
                if any(done.id == turn_id for done in chat.turns):
                    return Reject("turn id already used")
            case ChatTruncatedAction(turn_id=str() as turn_id) if chat is not None:
                if not any(done.id == turn_id for done in chat.turns):
                    return Reject("no such turn")
            case _:
                pass
        return action

    # -- follow-ups --

    def after_input(self) -> None:
        """What the embedder does after each input: read the events, consume a queued
        message of an idle chat, settle held actions once no turn is active."""
        host = self.h
        busy = True
        while busy:
            busy = False
            for ev in host.events():
                if isinstance(ev, ClientActionApplied) and ev.envelope.origin is not None:
                    origin = ev.envelope.origin
                    self.applied.add((origin.client_id, origin.client_seq))
                elif isinstance(ev, HostReconnected):
                    self.applied_when_answered[ev.client_id] = frozenset(self.applied)
            for uri in (CHAT_A, CHAT_B):
                chat = self.chat(uri)
                if chat is not None and chat.active_turn is None and chat.queued_messages:
                    queued = chat.queued_messages[0]
                    host.dispatch(
                        uri,
                        ChatPendingMessageRemovedAction(
                            kind=PendingMessageKind.QUEUED, id=queued.id
                        ),
                    )
                    host.dispatch(
                        uri,
                        ChatTurnStartedAction(
                            turn_id=self.fresh_id("q"),
                            started_at=self.clock.iso(),
                            message=queued.message,
                            queued_message_id=queued.id,
                        ),
                    )
                    busy = True
            if host.held_actions and not self.active_turns():
                for held in host.held_actions:
                    host.accept_held(held)
                busy = True

    # -- server-originated actions --

    def step(self, channel: str, choice: int) -> None:
        """One server-originated action on ``channel``, picked by ``choice``."""
        if not self.h.has_channel(channel):
            return
        state = self.h.state(channel)
        if isinstance(state, SessionState):
            self._session_step(channel, state, choice)
        elif isinstance(state, ChatState):
            self._chat_step(channel, state, choice)
        elif isinstance(state, ChangesetState):
            self._changeset_step(channel, state, choice)

    def asks(self, channel: str, choice: int) -> None:
        """The agent of ``channel`` asks the user something: an input request or a tool
        call to confirm, starting a turn first if none is active."""
        chat = self.chat(channel)
        if chat is None:
            return
        if chat.active_turn is None:
            self._chat_step(channel, chat, choice)
        chat = self.chat(channel)
        assert chat is not None
        self._chat_step(channel, chat, 3 if choice % 2 else 4)

    def finish_turns(self) -> None:
        """Complete every active turn (and those of the queued messages that follow)."""
        while self.active_turns():
            for uri in (CHAT_A, CHAT_B):
                chat = self.chat(uri)
                if chat is not None and chat.active_turn is not None:
                    turn_id = chat.active_turn.id
                    self.h.dispatch(uri, ChatTurnCompleteAction(turn_id=turn_id, duration=1))
            self.after_input()

    def _session_step(self, channel: str, state: SessionState, choice: int) -> None:
        match choice % 3:
            case 0:
                self.h.dispatch(channel, SessionTitleChangedAction(title=self.fresh_id("server-")))
            case 1:
                is_read = not (int(state.status) & SessionStatus.IS_READ)
                self.h.dispatch(channel, SessionIsReadChangedAction(is_read=is_read))
            case _:
                activity = None if state.activity else self.fresh_id("busy-")
                self.h.dispatch(channel, SessionActivityChangedAction(activity=activity))

    def _chat_step(self, channel: str, state: ChatState, choice: int) -> None:
        emit = partial(self.h.dispatch, channel)
        turn = state.active_turn
        if turn is None:
            # an agent-side turn (e.g. started from another surface)
            emit(ChatTurnStartedAction(
                turn_id=self.fresh_id("h"), started_at=self.clock.iso(),
                message=message("agent work"),
            ))
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
                emit(ChatResponsePartAction(turn_id=turn.id, part=part))
            case 2 if state.steering_message is not None:
                emit(ChatPendingMessageRemovedAction(
                    kind=PendingMessageKind.STEERING, id=state.steering_message.id
                ))
            case 3:
                # a new request, or the open one asked again (replaced in place)
                again = requests[0].id if requests and choice % 2 else None
                emit(ChatInputRequestedAction(request=self.input_request(again)))
            case 4:
                call_id = self.fresh_id("tc")
                emit(ChatToolCallStartAction(
                    turn_id=turn.id, tool_call_id=call_id, tool_name="grep", display_name="Grep"
                ))
                emit(ChatToolCallReadyAction(
                    turn_id=turn.id, tool_call_id=call_id, invocation_message="Searching"
                ))
            case 5 if running:
                result = ToolCallResult(success=True, past_tense_message="Searched")
                emit(ChatToolCallCompleteAction(
                    turn_id=turn.id, tool_call_id=running[0], result=result
                ))
            case 8 if choice % 2:
                error = ErrorInfo(error_type="agent", message="failed")
                emit(ChatErrorAction(turn_id=turn.id, duration=choice, error=error))
            case 8 | 9:
                emit(ChatTurnCompleteAction(turn_id=turn.id, duration=choice))
            case _ if parts:
                emit(ChatDeltaAction(turn_id=turn.id, part_id=parts[-1].id, content=f"+{choice}"))
            case _:
                part = MarkdownResponsePart(id=self.fresh_id("p"), content="")
                emit(ChatResponsePartAction(turn_id=turn.id, part=part))

    def _changeset_step(self, channel: str, state: ChangesetState, choice: int) -> None:
        present = [file.id for file in state.files]
        file_id = FILES[choice % len(FILES)]
        if choice % 2 and file_id in present:
            self.h.dispatch(channel, ChangesetFileRemovedAction(file_id=file_id))
        else:
            # (re)written without ``reviewed``: how a host resets the review
            file = ChangesetFile(id=file_id, edit=FileEdit())
            self.h.dispatch(channel, ChangesetFileSetAction(file=file))

    def input_request(self, request_id: str | None = None) -> ChatInputRequest:
        """The agent's question: a required text answer and an optional yes/no."""
        return ChatInputRequest(
            id=self.fresh_id("r") if request_id is None else request_id,
            message="Which branch?",
            questions=(
                ChatInputTextQuestion(id="name", message="Branch name", required=True),
                ChatInputBooleanQuestion(id="push", message="Push it?"),
            ),
        )


class History:
    """The host's state after every envelope, from an observer connection.

    The observer subscribes to every channel at the start and reduces what it
    receives (rejections go to the dispatcher only, so it sees exactly the
    applied envelopes), with a clock that stands still: with a moving clock
    only the chat ``modifiedAt`` differs from the host's, and comparisons
    leave it out.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self.conn = host.connect()
        self.conn.receive_data(json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersions": ["0.7.0"], "clientId": "observer",
                       "initialSubscriptions": list(CHANNELS)},
        }))
        [answer] = self.conn.data_to_send()
        msg = wire.parse_message(answer, result_method=lambda _: "initialize")
        assert isinstance(msg, JsonRpcSuccessResponse)
        result = msg.result
        assert isinstance(result, InitializeResult)
        self.states: dict[str, tuple[list[int], list[SnapshotState]]] = {
            snapshot.resource: ([snapshot.from_seq], [snapshot.state])
            for snapshot in result.snapshots
        }

    def sync(self) -> None:
        for data in self.conn.data_to_send():
            msg = wire.parse_message(data)
            assert isinstance(msg, JsonRpcNotification) and msg.method == "action"
            envelope = msg.params
            assert isinstance(envelope, ActionEnvelope) and envelope.rejection_reason is None
            seqs, states = self.states[envelope.channel]
            state = reduce(envelope.channel, states[-1], envelope.action,
                           now=stopped_at(FIXED_NOW))
            seqs.append(envelope.server_seq)
            states.append(state)

    def at(self, channel: str, seq: int) -> SnapshotState:
        """The state of ``channel`` right after envelope ``seq`` (or the latest before it)."""
        seqs, states = self.states[channel]
        return states[bisect.bisect_right(seqs, seq) - 1]

    def latest(self, channel: str) -> SnapshotState:
        return self.states[channel][1][-1]


class World:
    """What the clients' bookkeeping checks against: the host, its history, the agent."""

    def __init__(self, host: Host, agent: Agent, clock: Ticker) -> None:
        self.host = host
        self.agent = agent
        self.clock = clock
        self.history = History(host)

    def same(self, mine: SnapshotState, hosts: SnapshotState) -> bool:
        if self.clock.moves:
            return unstamped(mine) == unstamped(hosts)
        return mine == hosts


# ── a client ─────────────────────────────────────────────────────────────────


class Client(ClientConnection):
    """A client connection with the properties' bookkeeping.

    Every ``clientSeq`` it dispatched is *outstanding* until an echo or a
    rejection answers it, or a reconnect or unsubscribe drops it (then it is
    *orphaned* until a late echo, if any).
    """

    def __init__(self, client_id: str, world: World) -> None:
        super().__init__(client_id, clock=world.clock)
        self.world = world
        self.outstanding: dict[int, tuple[str, StateAction]] = {}
        self.orphaned: dict[int, tuple[str, StateAction]] = {}
        self.released: set[str] = set()
        self.subscribing: set[str] = set()
        self.seen: dict[str, int] = {}
        self.delivered: deque[bytes] = deque(maxlen=8)
        self.problems: list[str] = []
        self.stats: Counter[str] = Counter()
        """What happened, for ``hypothesis.event`` statistics."""
        self.redelivering = False
        self.turn_count = 0
        self.verified: dict[str, tuple[object, ...]] = {}
        """Per channel, the objects :meth:`check` last found consistent."""

    def fresh_turn_id(self) -> str:
        self.turn_count += 1
        return f"{self.client_id}-t{self.turn_count}"

    # -- sending --

    def dispatch(self, channel: str, action: StateAction) -> bytes:
        data = super().dispatch(channel, action)
        client_seq = self.reconciler.pending(channel)[-1].client_seq
        self.stats["dispatch"] += 1
        assert client_seq not in self.outstanding
        self.outstanding[client_seq] = (channel, action)
        return data

    def subscribe(self, channel: str, **kwargs: Any) -> bytes:
        assert channel not in self.reconciler.channels
        data = super().subscribe(channel, **kwargs)
        self.subscribing.add(channel)
        return data

    def unsubscribe(self, channel: str) -> bytes:
        dropped = [entry.client_seq for entry in self.reconciler.pending(channel)]
        data = super().unsubscribe(channel)
        for client_seq in dropped:
            self.orphan(client_seq)
        self.released.add(channel)
        self.seen.pop(channel, None)
        return data

    def connection_lost(self) -> list[Event]:
        self.subscribing.clear()
        return super().connection_lost()

    # -- receiving --

    def receive_data(self, data: bytes | str) -> list[Event]:
        events = super().receive_data(data)
        for ev in events:
            self.observe(ev, data)
        return events

    def redeliver(self, index: int) -> None:
        """Deliver an already delivered envelope again: it must be ignored."""
        if not self.delivered or self.connection_state is not ClientState.OPEN:
            return
        data = self.delivered[index % len(self.delivered)]
        rec = self.reconciler
        before = {uri: (rec.confirmed(uri), rec.pending(uri)) for uri in rec.channels}
        self.redelivering = True
        try:
            [received] = self.receive_data(data)
        finally:
            self.redelivering = False
        assert isinstance(received, ActionReceived)
        after = {uri: (rec.confirmed(uri), rec.pending(uri)) for uri in rec.channels}
        assert before == after

    def observe(self, ev: Event, data: bytes | str) -> None:
        match ev:
            case Initialized(snapshots=snapshots):
                self.seen = {s.resource: s.from_seq for s in snapshots}
            case ResponseReceived(params=SubscribeParams(channel=channel), result=answer):
                self.subscribing.discard(channel)
                if isinstance(answer, SubscribeResult) and answer.snapshot is not None:
                    self.released.discard(channel)
                    self.seen[channel] = answer.snapshot.from_seq
            case RequestFailed(params=SubscribeParams(channel=channel)):
                self.subscribing.discard(channel)
            case ActionReceived(received=received):
                if not self.redelivering:
                    self.delivered.append(bytes(data, "utf-8") if isinstance(data, str) else data)
                self.account(received)
            case Reconnected(outcome=outcome):
                raw = json.loads(data)["result"]
                result: ReconnectReplayResult | ReconnectSnapshotResult
                if outcome.kind is ReconnectResultType.REPLAY:
                    result = wire.structure(raw, ReconnectReplayResult)
                else:
                    result = wire.structure(raw, ReconnectSnapshotResult)
                self.account_reconnect(outcome, result)
            case ProtocolViolation(error=error):
                self.problems.append(f"protocol violation: {error}")
            case _:
                pass

    def account(self, received: Received) -> None:
        """Check one :class:`Received` against the bookkeeping and update it."""
        envelope = received.envelope
        origin = envelope.origin
        ours = origin is not None and origin.client_id == self.client_id
        kind = received.kind
        if self.redelivering:
            self.stats[f"redelivered: {kind.value}"] += 1
            assert kind in (ReceiveKind.DUPLICATE, ReceiveKind.UNSUBSCRIBED), kind
            return
        self.stats[kind.value] += 1
        if ours and kind is not ReceiveKind.DUPLICATE:
            wire_type = getattr(envelope.action.type, "value", envelope.action.type)
            answer = envelope.rejection_reason or f"applied {wire_type}"
            self.stats[f"{answer} ({kind.value})"] += 1
        if kind is ReceiveKind.ECHO and received.echo_of is not None:
            head = self.reconciler.pending(envelope.channel)[:1]
            if head and head[0].client_seq < received.echo_of.client_seq:
                self.stats["echo overtaking pending"] += 1
            if received.echo_of.action != envelope.action:
                self.stats["echo differs from the dispatch"] += 1
        if kind is ReceiveKind.UNSUBSCRIBED:
            assert envelope.channel in self.released
            return
        assert kind is not ReceiveKind.DUPLICATE, "the transport never duplicates by itself"
        assert envelope.channel in self.reconciler.channels
        self.seen[envelope.channel] = envelope.server_seq
        if kind is ReceiveKind.FOREIGN:
            assert not ours and envelope.rejection_reason is None
            return
        # the host sends a rejection to its dispatcher only
        assert kind is not ReceiveKind.FOREIGN_REJECTED
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
        else:
            assert envelope.rejection_reason is None

    def orphan(self, client_seq: int) -> None:
        self.orphaned[client_seq] = self.outstanding.pop(client_seq)

    def account_reconnect(
        self, outcome: ReconnectOutcome, result: ReconnectReplayResult | ReconnectSnapshotResult
    ) -> None:
        self.stats[f"reconnect {outcome.kind.value}"] += 1
        if self.world.host.held_actions and any(
            held.client_id == self.client_id for held in self.world.host.held_actions
        ):
            self.stats["reconnect while held"] += 1
        if outcome.dropped:
            self.stats["reconnect dropped pending"] += 1
        if outcome.removed:
            self.stats["reconnect removed channels"] += 1
        applied = self.world.agent.applied_when_answered.get(self.client_id, frozenset())
        for received in outcome.received:
            self.account(received)
        for entry in outcome.dropped:
            if isinstance(result, ReconnectReplayResult) and entry.channel not in outcome.removed:
                # a replay answers everything the host did: what is left was not applied
                assert (self.client_id, entry.client_seq) not in applied
            self.orphan(entry.client_seq)
        for uri in outcome.removed:
            self.released.add(uri)
            self.seen.pop(uri, None)
        if isinstance(result, ReconnectSnapshotResult):
            for snapshot in result.snapshots:
                self.seen[snapshot.resource] = snapshot.from_seq
        assert not self.outstanding, "a reconnect clears every pending action"

    # -- the properties --

    def check(self) -> None:
        """Every-step properties of this client."""
        assert not self.problems, self.problems
        if self.connection_state is ClientState.IDLE:
            return
        rec = self.reconciler
        history = self.world.history
        history.sync()
        pending_seqs: dict[int, tuple[str, StateAction]] = {}
        for channel in rec.channels:
            confirmed = rec.confirmed(channel)
            pending = rec.pending(channel)
            for entry in pending:
                assert entry.channel == channel
                pending_seqs[entry.client_seq] = (channel, entry.action)
            optimistic = rec.optimistic(channel)
            hosts = history.at(channel, self.seen[channel])
            checked = (confirmed, optimistic, hosts, *pending)
            last = self.verified.get(channel, ())
            same = len(last) == len(checked)
            if same and all(a is b for a, b in zip(last, checked, strict=True)):
                continue  # the very objects already checked: the properties hold still
            # optimistic == confirmed with pending replayed on top, each action at
            # its dispatched_at (the clock policy): exact for any clock
            state = confirmed
            for entry in pending:
                state = reduce(channel, state, entry.action, now=stopped_at(entry.dispatched_at))
            assert optimistic == state, f"optimistic != confirmed + pending on {channel}"
            assert rec.optimistic(channel) is optimistic, "optimistic is cached"
            # confirmed == the host's state as of the last envelope seen on the channel
            assert self.world.same(confirmed, hosts), (
                f"{self.client_id} confirmed {channel} differs from the host's at seq "
                f"{self.seen[channel]}"
            )
            # kept alive here, so that ``is`` above never meets a recycled id
            self.verified[channel] = checked
        # no pending action lost or duplicated: pending is exactly the outstanding ones
        assert pending_seqs == self.outstanding
        assert rec.last_seen_server_seq <= self.world.host.server_seq

    def check_quiescent(self) -> None:
        """After delivery quiesced: confirmed equals the host's state, nothing left unanswered."""
        self.check()
        host = self.world.host
        for channel in self.reconciler.channels:
            if host.has_channel(channel):
                hosts = host.state(channel)
                assert hosts is not None
                assert self.world.same(self.reconciler.confirmed(channel), hosts)
        held = {h.client_seq for h in host.held_actions if h.client_id == self.client_id}
        for client_seq, (channel, _) in self.outstanding.items():
            # only the host's silence leaves an action pending: a held
            # action, or one sent to a channel disposed since
            assert client_seq in held or not host.has_channel(channel)


# ── what users do ────────────────────────────────────────────────────────────


def draw_message(data: st.DataObject, text: str) -> Message:
    """A user message, with a model selection now and then (AHP 0.7.0 selects the model
    per message); rarely one of another kind, which the host refuses from a client."""
    model = data.draw(st.sampled_from([None, None, "m1", "m2"]), label="model")
    kind = (
        MessageKind.AGENT if data.draw(st.integers(0, 9), label="kind") == 0 else MessageKind.USER
    )
    return message(text, kind, model)


def draw_session_action(data: st.DataObject) -> StateAction:
    match data.draw(st.sampled_from(["title", "read", "archived", "add dir", "remove dir"])):
        case "title":
            title = data.draw(st.sampled_from(["", " ", "alpha", "beta", " beta "]))
            return SessionTitleChangedAction(title=title)
        case "read":
            return SessionIsReadChangedAction(is_read=data.draw(st.booleans()))
        case "archived":
            return SessionIsArchivedChangedAction(is_archived=data.draw(st.booleans()))
        case "add dir":
            return SessionWorkingDirectorySetAction(
                directory=data.draw(st.sampled_from(DIRECTORIES))
            )
        case _:
            directory = data.draw(st.sampled_from(DIRECTORIES))
            return SessionWorkingDirectoryRemovedAction(directory=directory)


def draw_chat_action(data: st.DataObject, client: Client, state: ChatState) -> StateAction:
    queued_ids = [m.id for m in state.queued_messages or ()]
    turn_ids = [turn.id for turn in state.turns]
    active = state.active_turn
    prompts = [
        *(["answer", "complete input"] if open_requests(active) else []),
        *(["confirm tool"] if pending_confirmations(active) else []),
    ]
    if not prompts or not data.draw(st.booleans(), label="answer the agent"):
        what = data.draw(st.sampled_from(CHAT_ACTIONS))
    else:
        what = data.draw(st.sampled_from(prompts))
    match what:
        case "start":
            reuse = turn_ids and data.draw(st.integers(0, 5)) == 0
            turn_id = data.draw(st.sampled_from(turn_ids)) if reuse else client.fresh_turn_id()
            return ChatTurnStartedAction(
                turn_id=turn_id,
                started_at=client.world.clock.iso(),
                message=draw_message(data, f"hi from {client.client_id}"),
            )
        case "cancel":
            guess = [active.id] if active is not None else []
            turn_id = data.draw(st.sampled_from([*guess, *turn_ids[-1:], GHOST]))
            return ChatTurnCancelledAction(turn_id=turn_id, duration=data.draw(st.integers(0, 9)))
        case "queue":
            message_id = data.draw(st.sampled_from(["m1", "m2", "m3"]))
            return ChatPendingMessageSetAction(
                kind=PendingMessageKind.QUEUED,
                id=message_id,
                message=draw_message(data, message_id),
            )
        case "steer":
            message_id = data.draw(st.sampled_from(["s1", "s2"]))
            return ChatPendingMessageSetAction(
                kind=PendingMessageKind.STEERING,
                id=message_id,
                message=draw_message(data, message_id),
            )
        case "unqueue":
            steering = state.steering_message
            if steering is not None and data.draw(st.booleans()):
                return ChatPendingMessageRemovedAction(
                    kind=PendingMessageKind.STEERING, id=steering.id
                )
            message_id = data.draw(st.sampled_from([*queued_ids, GHOST]))
            return ChatPendingMessageRemovedAction(kind=PendingMessageKind.QUEUED, id=message_id)
        case "reorder":
            order = data.draw(st.permutations(queued_ids)) if queued_ids else ["m2", "m1"]
            return ChatQueuedMessagesReorderedAction(order=tuple(order))
        case "truncate":
            keep = data.draw(st.sampled_from([None, *turn_ids[-2:], GHOST]))
            return ChatTruncatedAction(turn_id=keep)
        case "draft":
            if data.draw(st.booleans()):
                return ChatDraftChangedAction(draft=None)
            return ChatDraftChangedAction(draft=draw_message(data, "draft"))
        case "add dir":
            # the last one is not in the session's set unless a client added it
            directory = data.draw(st.sampled_from(DIRECTORIES))
            return ChatWorkingDirectorySetAction(directory=directory)
        case "remove dir":
            directory = data.draw(st.sampled_from(DIRECTORIES))
            return ChatWorkingDirectoryRemovedAction(directory=directory)
        case "answer" | "complete input":
            requests = [r.id for r in open_requests(active)]
            request_id = data.draw(st.sampled_from([*requests, *requests, GHOST]))
            question = data.draw(st.sampled_from(["name", "push", GHOST]))
            answer = ChatInputAnswered(
                state=data.draw(
                    st.sampled_from([ChatInputAnswerState.DRAFT, ChatInputAnswerState.SUBMITTED])
                ),
                value=data.draw(st.sampled_from(ANSWER_VALUES)),
            )
            if what == "answer":
                cleared = data.draw(st.booleans())
                return ChatInputAnswerChangedAction(
                    request_id=request_id, question_id=question, answer=None if cleared else answer
                )
            response = data.draw(st.sampled_from(list(ChatInputResponseKind)))
            answers = data.draw(st.sampled_from([None, {question: answer}]))
            return ChatInputCompletedAction(
                request_id=request_id, response=response, answers=answers
            )
        case _:
            calls = pending_confirmations(active)
            call_id = data.draw(st.sampled_from([*calls, *calls, GHOST]))
            turn_id = active.id if active is not None else GHOST
            if data.draw(st.booleans()):
                return ChatToolCallApprovedAction(
                    turn_id=turn_id,
                    tool_call_id=call_id,
                    confirmed=ToolCallConfirmationReason.USER_ACTION,
                )
            return ChatToolCallDeniedAction(
                turn_id=turn_id, tool_call_id=call_id, reason=ToolCallCancellationReason.DENIED
            )


def draw_client_action(data: st.DataObject, client: Client, channel: str) -> StateAction:
    """What a user might do next, judged from the optimistic state the UI shows.

    Mostly sensible actions, sometimes ones the host will reject (an empty
    title, cancelling a turn that is not active, removing an unknown message,
    answering a question that is not asked, a directory outside the session's
    set, an agent message).
    """
    state = client.optimistic(channel)
    if isinstance(state, ChatState):
        return draw_chat_action(data, client, state)
    if isinstance(state, ChangesetState):
        files = data.draw(st.lists(st.sampled_from([*FILES, GHOST]), min_size=1, max_size=3))
        return ChangesetFilesReviewChangedAction(
            files=tuple(files), reviewed=data.draw(st.booleans())
        )
    return draw_session_action(data)


class ReconcilerMachine(RuleBasedStateMachine):
    """One host, two or three clients, one in-memory network, random interleavings."""

    host: Host
    agent: Agent
    world: World
    net: Network
    clients: list[Client]

    @initialize(
        count=st.integers(min_value=2, max_value=3),
        window=st.sampled_from(REPLAY_WINDOWS),
        hold_directories=st.booleans(),
        data=st.data(),
    )
    def start(self, count: int, window: int, hold_directories: bool, data: st.DataObject) -> None:
        clock = self.make_clock(data)
        self.window = window
        self.agent = Agent(clock, hold_directories=hold_directories)
        self.host = Host(
            clock=clock,
            root=RootState(agents=(AGENT_INFO,)),
            replay_max_envelopes=window,
            # the moving clock runs hours per step: clients are never forgotten here
            remembered_clients_max_age_ms=None,
            review=self.agent.review,
        )
        self.agent.host = self.host
        host = self.host
        host.create_session(
            SESSION, provider="test", title="untitled", working_directories=(PRIMARY_DIRECTORY,)
        )
        host.ready_session(SESSION, default_chat=CHAT_A, chat_title="chat")
        host.add_chat(SESSION, CHAT_B, title="chat")
        host.add_channel(CHANGESET, changeset_state())
        host.add_channel(ELSEWHERE, changeset_state())
        self.world = World(host, self.agent, clock)
        self.verified: dict[str, tuple[SnapshotState, SnapshotState | None]] = {}
        """Per channel, the history's and the host's states last found equal."""
        self.net = Network(host)
        self.clients = []
        for index in range(count):
            # every client starts on the session and chat A, some also on chat B or the changeset
            extra = data.draw(
                st.lists(st.sampled_from([CHAT_B, CHANGESET]), unique=True),
                label=f"c{index} also on",
            )
            client = Client(f"c{index}", self.world)
            link = self.net.connect(client)
            link.send(client.initialize(initial_subscriptions=[SESSION, CHAT_A, *extra]))
            self.clients.append(client)
        self.settle()
        assert all(c.connection_state is ClientState.OPEN for c in self.clients)

    def make_clock(self, data: st.DataObject) -> Ticker:
        """The clock of host and clients: one that stands still, so states compare exactly."""
        return Ticker()

    def client(self, index: int) -> Client:
        return self.clients[index % len(self.clients)]

    def to_host(self, client: Client) -> bool:
        moved = self.net.deliver_to_host(client)
        if moved:
            self.agent.after_input()
        return moved

    def settle(self) -> None:
        """Run host and clients until no message is in flight anywhere."""
        busy = True
        while busy:
            busy = False
            for client in self.clients:
                while self.to_host(client):
                    busy = True
                while self.net.deliver_to_client(client):
                    busy = True

    # -- clients --

    @rule(index=CLIENT, count=st.integers(min_value=1, max_value=3), data=st.data())
    def dispatch(self, index: int, count: int, data: st.DataObject) -> None:
        client = self.client(index)
        if client.connection_state is not ClientState.OPEN or not client.reconciler.channels:
            return
        link = self.net.link(client)
        for _ in range(count):
            channel = data.draw(st.sampled_from(client.reconciler.channels), label="channel")
            link.send(client.dispatch(channel, draw_client_action(data, client, channel)))

    @rule(index=CLIENT, count=st.integers(min_value=1, max_value=6))
    def deliver(self, index: int, count: int) -> None:
        client = self.client(index)
        for _ in range(count):
            self.net.deliver_to_client(client)

    @rule(index=CLIENT, which=st.integers(min_value=-8, max_value=-1))
    def redeliver(self, index: int, which: int) -> None:
        self.client(index).redeliver(which)

    @rule(index=CLIENT, data=st.data())
    def subscription(self, index: int, data: st.DataObject) -> None:
        """Subscribe to a channel not tracked, or unsubscribe from a tracked one."""
        client = self.client(index)
        if client.connection_state is not ClientState.OPEN:
            return
        tracked = client.reconciler.channels
        free = [uri for uri in CHANNELS if uri not in tracked and uri not in client.subscribing]
        link = self.net.link(client)
        if free and (not tracked or data.draw(st.booleans(), label="subscribe")):
            link.send(client.subscribe(data.draw(st.sampled_from(free), label="channel")))
        elif tracked:
            link.send(client.unsubscribe(data.draw(st.sampled_from(tracked), label="channel")))

    @rule(
        index=CLIENT,
        what=st.sampled_from(["disconnect", "replay", "snapshot"]),
        odds=st.integers(min_value=0, max_value=3),
    )
    def connection(self, index: int, what: str, odds: int) -> None:
        """Drop the link, or reconnect (dropping it first if it is up).

        Only one draw in four acts on a live link, so that links live long
        enough for round trips to complete; a dropped client may reconnect at
        once.  ``snapshot`` first ages the replay buffer past the client.
        """
        client = self.client(index)
        link = self.net.link(client)
        if odds != 3 and link.open:
            return
        if what == "disconnect":
            link.drop()
        else:
            self.reconnect(client, snapshot=what == "snapshot")

    def reconnect(self, client: Client, *, snapshot: bool) -> None:
        if snapshot:
            # more traffic than the buffer holds: the gap is older than its floor
            for n in range(self.window + 1):
                file = ChangesetFile(id=FILES[n % len(FILES)], edit=FileEdit())
                self.host.dispatch(ELSEWHERE, ChangesetFileSetAction(file=file))
            self.agent.after_input()
        self.net.reconnect(client)

    @precondition(lambda self: bool(self.host.held_actions))
    @rule(data=st.data(), odds=st.integers(min_value=0, max_value=3))
    def reconnect_holding(self, data: st.DataObject, odds: int) -> None:
        """Reconnect a client whose action the host holds: its answer will come late.

        One draw in four acts, as for :meth:`connection`.
        """
        if odds != 3:
            return
        ids = sorted({held.client_id for held in self.host.held_actions})
        client_id = data.draw(st.sampled_from(ids), label="client")
        client = next(c for c in self.clients if c.client_id == client_id)
        self.reconnect(client, snapshot=data.draw(st.booleans(), label="snapshot"))

    # -- the host --

    @rule(index=CLIENT, count=st.integers(min_value=1, max_value=4))
    def host_process(self, index: int, count: int) -> None:
        client = self.client(index)
        for _ in range(count):
            self.to_host(client)

    @rule(count=st.integers(min_value=1, max_value=4))
    def pump(self, count: int) -> None:
        """The network catches up a little everywhere."""
        for client in self.clients:
            for _ in range(count):
                self.to_host(client)
            for _ in range(count):
                self.net.deliver_to_client(client)

    @rule(channel=st.sampled_from(CHANNELS), choice=st.integers(min_value=0, max_value=19))
    def agent_step(self, channel: str, choice: int) -> None:
        self.agent.step(channel, choice)
        self.agent.after_input()

    @rule(channel=st.sampled_from([CHAT_A, CHAT_B]), choice=st.integers(min_value=0, max_value=1))
    def agent_asks(self, channel: str, choice: int) -> None:
        self.agent.asks(channel, choice)
        self.agent.after_input()

    @precondition(lambda self: self.host.has_channel(CHAT_B))
    @rule()
    def dispose_chat(self) -> None:
        self.host.dispose_chat(CHAT_B)
        self.agent.after_input()

    @rule()
    def quiesce(self) -> None:
        self.settle()
        for client in self.clients:
            if client.connection_state is ClientState.OPEN:
                client.check_quiescent()

    # -- properties --

    @invariant()
    def consistent(self) -> None:
        history = self.world.history
        history.sync()
        for channel in CHANNELS:
            if self.host.has_channel(channel):
                pair = (history.latest(channel), self.host.state(channel))
                last = self.verified.get(channel)
                if last is not None and last[0] is pair[0] and last[1] is pair[1]:
                    continue  # the very states already compared
                assert pair[1] is not None
                assert self.world.same(pair[0], pair[1]), channel
                self.verified[channel] = pair
        for client in self.clients:
            client.check()

    def teardown(self) -> None:
        if not hasattr(self, "net"):
            return
        for client in self.clients:
            if client.connection_state is ClientState.DISCONNECTED:
                self.net.reconnect(client)
        self.settle()
        # held actions are answered once no turn is active, late echoes included
        self.agent.finish_turns()
        self.settle()
        assert not self.host.held_actions
        self.world.history.sync()
        for client in self.clients:
            assert client.connection_state is ClientState.OPEN
            client.check_quiescent()
        # the session is never disposed: everyone subscribed to it agrees
        for client in self.clients:
            if SESSION in client.reconciler.channels:
                assert client.confirmed(SESSION) == self.host.state(SESSION)
            for what in client.stats:
                event(what)


class MovingClockMachine(ReconcilerMachine):
    """The same runs with a clock that moves at every reading, forwards or back.

    ``optimistic`` must still be exactly ``confirmed`` with each pending
    action replayed at its ``dispatched_at`` (the reconciler's clock policy);
    ``confirmed`` agrees with the host's state but for the chat
    ``modifiedAt``, which each side stamps from its own reading.
    """

    def make_clock(self, data: st.DataObject) -> Ticker:
        step = data.draw(st.sampled_from([1, 1_000, 3_600_000, -7]), label="clock step")
        return Ticker(step=step)


def _settings(scale: int) -> settings:
    return settings(
        # each example is one whole run of the machine; a few per profile
        # example keeps the CI run at seconds and the ``long`` profile at 20x that
        max_examples=scale * settings().max_examples,
        stateful_step_count=100,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


EXAMPLES_SCALE = 4
TestReconcilerMachine = ReconcilerMachine.TestCase
TestReconcilerMachine.settings = _settings(EXAMPLES_SCALE)
TestMovingClockMachine = MovingClockMachine.TestCase
TestMovingClockMachine.settings = _settings(EXAMPLES_SCALE // 2)


# ── peer data and the caller's mistakes ─────────────────────────────────────

JUNK = st.sampled_from([None, "", "junk", -1, 2**70, 1.5, True, (), ("x",), {}, {"k": 1}])
"""Values of the wrong type for most fields."""
PEER = "me"


def corrupted(data: st.DataObject, value: Any, depth: int = 0) -> Any:
    """``value`` with one field, somewhere inside, replaced by junk (or ``value`` itself
    when it has no field to spoil).  The outermost type is kept."""
    fields = attrs.fields(type(value)) if attrs.has(type(value)) else ()
    if not fields or depth > 3:
        return value
    field = data.draw(st.sampled_from(fields), label="spoilt field")
    inner = getattr(value, field.name)
    if attrs.has(type(inner)) and data.draw(st.booleans(), label="deeper"):
        new = corrupted(data, inner, depth + 1)
    elif isinstance(inner, tuple) and inner and data.draw(st.booleans(), label="element"):
        index = data.draw(st.integers(0, len(inner) - 1), label="index")
        element = inner[index]
        spoilt = corrupted(data, element, depth + 1) if attrs.has(type(element)) else None
        new = (
            *inner[:index],
            data.draw(JUNK) if spoilt is element else spoilt,
            *inner[index + 1 :],
        )
    else:
        new = data.draw(JUNK, label="junk")
    try:
        return attrs.evolve(value, **{field.alias: new})
    except Exception:
        return value


def maybe_corrupted(data: st.DataObject, value: Any) -> Any:
    return corrupted(data, value) if data.draw(st.booleans(), label="spoil") else value


def view(rec: ClientReconciler) -> Any:
    """Everything observable but the optimistic states (reading them may refuse)."""
    return (
        rec.last_seen_server_seq,
        rec.reconnect_params(),
        {uri: (rec.confirmed(uri), rec.pending(uri)) for uri in rec.channels},
    )


def refused_or_done(rec: ClientReconciler, call: partial[Any], *allowed: type[Exception]) -> None:
    """``call`` succeeds, or raises one of ``allowed`` and leaves ``rec`` as it was."""
    before = view(rec)
    try:
        call()
    except allowed:
        assert view(rec) == before
        event(f"refused by {call.func.__name__}")


def _wire_type(cls: type) -> str:
    default = attrs.fields_dict(cls)["type"].default
    return str(getattr(default, "value", default))


DISPATCHABLE = {
    kind: [
        cls
        for cls in get_args(union)
        if cls is not UnknownAction and IS_CLIENT_DISPATCHABLE.get(_wire_type(cls), False)
    ]
    for kind, union in ACTION_UNIONS.items()
}
"""The client-dispatchable action classes of each channel kind."""


def replay_results(channel: str, channels: tuple[str, ...]) -> st.SearchStrategy[Any]:
    kind = channel_kind(channel) or ChannelKind.TERMINAL
    envelopes = ahst.envelopes(kind, max_depth=3).map(lambda e: attrs.evolve(e, channel=channel))
    return st.builds(
        ReconnectReplayResult,
        actions=st.lists(envelopes, max_size=3).map(tuple),
        missing=st.lists(st.sampled_from(channels), max_size=1).map(tuple),
    )


def snapshot_results(channel: str) -> st.SearchStrategy[Any]:
    kind = channel_kind(channel) or ChannelKind.TERMINAL
    snapshot = ahst.snapshots(kind, max_depth=3).map(lambda s: attrs.evolve(s, resource=channel))
    return st.builds(ReconnectSnapshotResult, snapshots=st.lists(snapshot, max_size=1).map(tuple))


def step(data: st.DataObject, rec: ClientReconciler, channel: str) -> None:
    kind = channel_kind(channel) or ChannelKind.TERMINAL
    match data.draw(st.sampled_from(["dispatch", "receive", "read", "reconnect"])):
        case "dispatch" if DISPATCHABLE.get(kind):
            cls = data.draw(st.sampled_from(DISPATCHABLE[kind]), label="action class")
            action = maybe_corrupted(data, data.draw(ahst.from_type(cls, max_depth=3)))
            refused_or_done(
                rec, partial(rec.dispatch, channel, action), LocalProtocolError, RemoteProtocolError
            )
        case "receive":
            envelope = data.draw(ahst.envelopes(kind, max_depth=3))
            ours = [
                ActionOrigin(client_id=PEER, client_seq=p.client_seq) for p in rec.pending(channel)
            ]
            envelope = attrs.evolve(
                envelope,
                channel=channel,
                server_seq=data.draw(st.integers(0, 10**6), label="serverSeq"),
                origin=data.draw(st.sampled_from([envelope.origin, *ours]), label="origin"),
            )
            envelope = maybe_corrupted(data, envelope)
            refused_or_done(rec, partial(rec.receive, envelope), RemoteProtocolError)
        case "reconnect":
            results = st.one_of(replay_results(channel, rec.channels), snapshot_results(channel))
            result = maybe_corrupted(data, data.draw(results, label="result"))
            refused_or_done(rec, partial(rec.apply_reconnect, result), RemoteProtocolError)
        case _:
            refused_or_done(rec, partial(rec.optimistic, channel), RemoteProtocolError)


@settings(max_examples=2 * settings().max_examples, deadline=None)
@given(data=st.data())
def test_peer_data_raises_remote_errors_and_misuse_local_ones(data: st.DataObject) -> None:
    """Whatever the host sends (well-typed or not) raises nothing but ``RemoteProtocolError``,
    a caller's ill-typed action nothing but ``LocalProtocolError``, and a refused call
    changes nothing.  Values come from :mod:`agenthost_protocol.testing.strategies`."""
    rec = ClientReconciler(PEER, now=clock)
    for _ in range(data.draw(st.integers(1, 3), label="subscriptions")):
        snapshot = maybe_corrupted(data, data.draw(ahst.snapshots(max_depth=3), label="snapshot"))
        if isinstance(snapshot.resource, str) and snapshot.resource in rec.channels:
            continue  # subscribing twice is the caller's mistake, tested elsewhere
        refused_or_done(rec, partial(rec.subscribe, snapshot), RemoteProtocolError)
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        if not rec.channels:
            return
        step(data, rec, data.draw(st.sampled_from(rec.channels), label="channel"))
