"""A small in-test AHP host and reconciler-driven clients, wired without I/O.

The host (:class:`Host`) is deliberately simple but keeps the rules the
reconciler depends on:

* one global ``serverSeq`` for all channels, every envelope takes the next
  one, rejections included;
* the library's reducers with the shared fixed :func:`clock`, so a client's
  confirmed state can be compared with the host's;
* invalid client actions come back to the dispatching client (and, with
  ``broadcast_rejections``, to every subscriber) with a ``rejectionReason``
  and are not applied (:meth:`Host.validate` lists the rules); the host
  normalises session titles, so an echo may differ from the dispatched action;
* ``session/modelChanged`` is deferred while any chat has an active turn
  (spec: session-channel.md), so its echo can overtake later dispatches;
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
from collections.abc import Iterable

from attrs import define, evolve, field, frozen

from agenthost_protocol.reconciler import (
    ClientReconciler,
    Received,
    ReceiveKind,
    ReconnectOutcome,
)
from agenthost_protocol.reducers import reduce
from agenthost_protocol.types import (
    ActionEnvelope,
    ActionOrigin,
    ChatDeltaAction,
    ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction,
    ChatResponsePartAction,
    ChatState,
    ChatTruncatedAction,
    ChatTurnCancelledAction,
    ChatTurnCompleteAction,
    ChatTurnStartedAction,
    DispatchActionParams,
    MarkdownResponsePart,
    Message,
    MessageKind,
    MessageOrigin,
    PendingMessageKind,
    ReconnectParams,
    ReconnectReplayResult,
    ReconnectResult,
    ReconnectSnapshotResult,
    SessionActivityChangedAction,
    SessionIsReadChangedAction,
    SessionLifecycle,
    SessionModelChangedAction,
    SessionState,
    SessionStatus,
    SessionSummary,
    SessionTitleChangedAction,
    Snapshot,
    SnapshotState,
    StateAction,
)
from agenthost_protocol.versions import IS_CLIENT_DISPATCHABLE

FIXED_NOW = 1_767_225_600_000
"""The one instant every reducer in the harness sees (2026-01-01T00:00:00Z)."""


def clock() -> int:
    """The shared reducer clock: host and clients must agree for states to compare equal."""
    return FIXED_NOW


SESSION = "ahp-session:/s1"
CHAT_A = "ahp-chat:/a"
CHAT_B = "ahp-chat:/b"
CHANNELS = (SESSION, CHAT_A, CHAT_B)


def session_state(uri: str = SESSION) -> SessionState:
    summary = SessionSummary(
        resource=uri,
        provider="test",
        title="untitled",
        status=SessionStatus.IDLE,
        created_at=FIXED_NOW,
        modified_at=FIXED_NOW,
    )
    return SessionState(
        summary=summary, lifecycle=SessionLifecycle.READY, active_clients=(), chats=()
    )


def chat_state(uri: str) -> ChatState:
    return ChatState(
        resource=uri,
        title="chat",
        status=SessionStatus.IDLE,
        modified_at="2026-01-01T00:00:00.000Z",
        turns=(),
    )


def message(text: str, kind: MessageKind = MessageKind.USER) -> Message:
    return Message(text=text, origin=MessageOrigin(kind=kind))


def initial_states() -> dict[str, SnapshotState]:
    return {SESSION: session_state(), CHAT_A: chat_state(CHAT_A), CHAT_B: chat_state(CHAT_B)}


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


class Host:
    """Reducers, one global ``serverSeq`` and the validation rules; no I/O."""

    def __init__(
        self,
        states: dict[str, SnapshotState] | None = None,
        *,
        broadcast_rejections: bool = False,
        replay_window: int | None = None,
    ) -> None:
        self.seq = 0
        self.states: dict[str, SnapshotState] = {}
        self.history: dict[str, tuple[list[int], list[SnapshotState]]] = {}
        self.log: list[tuple[ActionEnvelope, str | None]] = []
        """Every envelope sent, with the one client it went to (``None``: all subscribers)."""
        self.connections: dict[str, Connection] = {}
        self.deferred: list[tuple[str, DispatchActionParams]] = []
        self.applied: set[tuple[str, int]] = set()
        """``(clientId, clientSeq)`` of every client action applied."""
        self.broadcast_rejections = broadcast_rejections
        self.replay_window = replay_window
        self._ids = 0
        for uri, state in (states or initial_states()).items():
            self.create(uri, state)

    # -- channels and state --

    def create(self, channel: str, state: SnapshotState) -> None:
        self.states[channel] = state
        self.history[channel] = ([self.seq], [state])

    def dispose(self, channel: str) -> None:
        del self.states[channel]

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
        state = reduce(channel, self.states[channel], action, now=clock)
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
        """The host's own follow-ups: consume a queued message, run deferred actions."""
        if not isinstance(
            action,
            ChatPendingMessageSetAction
            | ChatTurnCompleteAction
            | ChatTurnCancelledAction
            | ChatTruncatedAction,
        ):
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
                    turn_id=self.fresh_id("q"), message=queued.message, queued_message_id=queued.id
                ),
            )
        if self.deferred and not self.active_turns():
            deferred, self.deferred = self.deferred, []
            for client_id, params in deferred:
                self.accept(client_id, params)

    # -- client messages --

    def validate(self, channel: str, action: StateAction) -> str | None:
        """The rejection reason for a client action, or ``None`` if it is valid.

        Rules (spec MUSTs and SHOULDs, plus one harness policy):
        not client-dispatchable; an action of another channel's family; a
        blank session title (harness policy; other titles are accepted with
        their surrounding blanks trimmed, so the echo differs from the
        dispatch); ``chat/turnStarted`` while a turn is active or with a used
        turn id; ``chat/turnCancelled`` with no
        such active turn; ``chat/pendingMessageRemoved`` of an unknown
        message; ``chat/truncated`` to an unknown turn.
        """
        state = self.states[channel]
        wire = str(getattr(action.type, "value", action.type))
        if not IS_CLIENT_DISPATCHABLE.get(wire, False):
            return "not client-dispatchable"
        family = "chat/" if isinstance(state, ChatState) else "session/"
        if not wire.startswith(family):
            return "wrong channel"
        match action:
            case SessionTitleChangedAction(title=title) if not title.strip():
                return "title must not be empty"
            case ChatTurnStartedAction(turn_id=turn_id):
                assert isinstance(state, ChatState)
                if state.active_turn is not None:
                    return "a turn is already active"
                if any(turn.id == turn_id for turn in state.turns):
                    return "turn id already used"
            case ChatTurnCancelledAction(turn_id=turn_id):
                assert isinstance(state, ChatState)
                if state.active_turn is None or state.active_turn.id != turn_id:
                    return "no such active turn"
            case ChatPendingMessageRemovedAction(kind=kind, id=message_id):
                assert isinstance(state, ChatState)
                if kind == PendingMessageKind.STEERING:
                    known = state.steering_message is not None and (
                        state.steering_message.id == message_id
                    )
                else:
                    known = any(m.id == message_id for m in state.queued_messages or ())
                if not known:
                    return "no such pending message"
            case ChatTruncatedAction(turn_id=turn_id) if turn_id is not None:
                assert isinstance(state, ChatState)
                if not any(turn.id == turn_id for turn in state.turns):
                    return "no such turn"
            case _:
                pass
        return None

    def accept(self, client_id: str, params: DispatchActionParams) -> None:
        """Validate, then defer, reject or apply one client action."""
        if params.channel not in self.states:
            return  # silently ignored: the channel is gone
        if isinstance(params.action, SessionModelChangedAction) and self.active_turns():
            self.deferred.append((client_id, params))
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
            match choice % 3:
                case 0:
                    self.emit(channel, SessionTitleChangedAction(title=self.fresh_id("server-")))
                case 1:
                    is_read = not (int(state.summary.status) & SessionStatus.IS_READ)
                    self.emit(channel, SessionIsReadChangedAction(is_read=is_read))
                case _:
                    activity = None if state.summary.activity else self.fresh_id("busy-")
                    self.emit(channel, SessionActivityChangedAction(activity=activity))
            return
        if not isinstance(state, ChatState):
            return
        turn = state.active_turn
        if turn is None:
            # an agent-side turn (e.g. started from another surface)
            self.emit(
                channel,
                ChatTurnStartedAction(turn_id=self.fresh_id("h"), message=message("agent work")),
            )
            return
        parts = [p for p in turn.response_parts if isinstance(p, MarkdownResponsePart)]
        match choice % 4:
            case 0:
                part = MarkdownResponsePart(id=self.fresh_id("p"), content="")
                self.emit(channel, ChatResponsePartAction(turn_id=turn.id, part=part))
            case 1 if parts:
                self.emit(
                    channel,
                    ChatDeltaAction(turn_id=turn.id, part_id=parts[-1].id, content=f"+{choice}"),
                )
            case 2 if state.steering_message is not None:
                steering = state.steering_message
                self.emit(
                    channel,
                    ChatPendingMessageRemovedAction(
                        kind=PendingMessageKind.STEERING, id=steering.id
                    ),
                )
            case _:
                self.emit(channel, ChatTurnCompleteAction(turn_id=turn.id))


# ── a client ─────────────────────────────────────────────────────────────────


class Client:
    """A :class:`ClientReconciler` on a :class:`Connection`, with the properties' bookkeeping."""

    def __init__(self, client_id: str, host: Host, channels: Iterable[str]) -> None:
        self.id = client_id
        self.host = host
        self.conn = host.connect(client_id)
        self.rec = ClientReconciler(client_id, now=clock)
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
        if any(cid == self.id for cid, _ in self.host.deferred):
            self.stats["reconnect while deferred"] += 1
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

    def check(self) -> None:
        """Every-step properties of this client."""
        rec = self.rec
        pending_seqs: dict[int, tuple[str, StateAction]] = {}
        for channel in rec.channels:
            confirmed = rec.confirmed(channel)
            pending = rec.pending(channel)
            # optimistic == confirmed with pending replayed on top
            state = confirmed
            for entry in pending:
                assert entry.channel == channel
                pending_seqs[entry.client_seq] = (channel, entry.action)
                state = reduce(channel, state, entry.action, now=clock)
            optimistic = rec.optimistic(channel)
            assert optimistic == state, f"optimistic != confirmed + pending on {channel}"
            assert rec.optimistic(channel) is optimistic, "optimistic is cached"
            # confirmed == the host's state as of the last envelope seen on the channel
            assert confirmed == self.host.state_at(channel, self.seen[channel]), (
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
                assert self.rec.confirmed(channel) == self.host.states[channel]
        deferred = {p.client_seq for cid, p in self.host.deferred if cid == self.id}
        for client_seq, (channel, _) in self.outstanding.items():
            # only the host's silence leaves an action pending: a deferred
            # action, or one sent to a channel disposed since
            assert client_seq in deferred or channel not in self.host.states


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
