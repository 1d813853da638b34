"""Property tests of the host, its clients and the in-memory network together.

A hypothesis state machine runs one real :class:`~agenthost_protocol.host.Host`
and two to five real :class:`~agenthost_protocol.client.ClientConnection`\\ s
over :class:`~agenthost_protocol.testing.network.Network`.  Each client offers
exactly one of the supported versions (0.7.0, 0.6.0, 0.5.2, 0.5.1), so the
negotiated one is known.  Rules: client dispatches (valid ones, and ones the
host must reject), server-originated streams (turns with response parts,
deltas, tool calls awaiting confirmation, turn ends; session and changeset
changes), bursts that overflow the replay buffer, subscribes and
unsubscribes, link drops (in-flight messages lost) and reconnects, which the
host answers by replay or, once the gap is older than its small replay
buffer, by snapshots.

Every message a client receives is tapped (``TappedClient.receive_data``), and
every envelope the host sequences is logged from its replay buffer after each
input (the buffer is never smaller than what one input can add, and the log
checks that no ``serverSeq`` is skipped).  Properties:

* at every step, on every client and tracked channel, ``optimistic`` is
  ``confirmed`` with each pending action replayed at its ``dispatched_at``;
* a client refuses to dispatch an action its version does not know, changing
  nothing (the host would reject it without telling that connection);
* at every step, no connection has received an action its negotiated version
  does not know (live or in a replay), the ``serverSeq``\\ s a client receives
  are strictly increasing (nothing delivered twice), and no client saw a
  protocol violation;
* after quiescence, every connected client has received exactly the envelopes
  of its subscribed channels since it subscribed (or took a snapshot) that the
  host sequenced for everyone or for it, and that its version knows: none
  lost; its confirmed state is the snapshot it started from with those
  envelopes applied, byte for byte (``wire.dumps``), and equals the host's
  state byte for byte whenever the host applied nothing there that the
  client's version does not know.  (A 0.6.0 client cannot follow a
  ``chat/workingDirectorySet`` it never receives: there its state differs from
  the host's by design, and ``event`` counts how often.)

The machine runs with a clock that stands still, so states compare byte for
byte, and (:class:`MovingClockNetworkMachine`) with one that moves at every
reading: AHP's chat ``modifiedAt`` is stamped by each side's reducer from its
own clock, so there the comparisons leave that one field out.  Example
counts come from the loaded hypothesis profile (``tests/conftest.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.client import (
    ActionReceived,
    ClientConnection,
    ClientState,
    Event,
    Initialized,
    ProtocolViolation,
    Reconnected,
    ResponseReceived,
)
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.host import Host
from agenthost_protocol.reducers import reduce
from agenthost_protocol.testing.network import Network
from agenthost_protocol.versions import SUPPORTED_PROTOCOL_VERSIONS, is_action_known_to_version

from ._fixtures import Ticker

ROOT = "ahp-root://"
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/c1"
CHANGESET = "ahp-changeset:/s1/working"
CHANNELS = (ROOT, SESSION, CHAT, CHANGESET)
VERSIONS = ("0.7.0", "0.6.0", "0.5.2", "0.5.1")
DIRECTORIES = ("file:///work/main", "file:///work/lib")
"""The session's working directories."""
OUTSIDE = "file:///elsewhere"
"""A directory outside the session's set: ``chat/workingDirectorySet`` of it is rejected."""
FILES = ("f1", "f2", "f3")
GHOST = "ghost"
"""An id nothing has."""
CLIENT = st.integers(min_value=0, max_value=4)
MAX_CLIENTS = 5
REPLAY_WINDOWS = (MAX_CLIENTS + 1, 8, 12, 10_000)
"""Replay buffer sizes; the smallest still holds what one round of delivery adds."""


def stopped_at(ms: int) -> Callable[[], int]:
    return lambda: ms


def unstamped(state: t.SnapshotState | None) -> t.SnapshotState | None:
    """``state`` without the chat ``modifiedAt``, which each side stamps from its clock."""
    if isinstance(state, t.ChatState):
        return attrs.evolve(state, modified_at="")
    return state


def message(text: str, kind: t.MessageKind = t.MessageKind.USER) -> t.Message:
    return t.Message(text=text, origin=t.MessageOrigin(kind=kind))


def pending_confirmations(turn: t.ActiveTurn | None) -> list[str]:
    if turn is None:
        return []
    return [
        part.tool_call.tool_call_id
        for part in turn.response_parts
        if isinstance(part, t.ToolCallResponsePart)
        and isinstance(part.tool_call, t.ToolCallPendingConfirmationState)
    ]


def running_calls(turn: t.ActiveTurn) -> list[str]:
    return [
        part.tool_call.tool_call_id
        for part in turn.response_parts
        if isinstance(part, t.ToolCallResponsePart)
        and isinstance(part.tool_call, t.ToolCallRunningState)
    ]


@attrs.define
class Era:
    """A client's subscription to one channel since its last snapshot."""

    from_seq: int
    base: t.SnapshotState
    """The confirmed state the snapshot gave."""
    got: list[int] = attrs.field(factory=list)
    """The ``serverSeq``\\ s received on the channel since, live or replayed."""


class TappedClient(ClientConnection):
    """A client connection that records what it receives, for the properties."""

    def __init__(self, client_id: str, version: str, clock: Ticker) -> None:
        super().__init__(client_id, protocol_versions=[version], clock=clock)
        self.version = version
        self.seqs: list[int] = []
        """Every ``serverSeq`` received, in order."""
        self.eras: dict[str, Era] = {}
        self.problems: list[str] = []
        self.replays = 0
        self.snapshots = 0
        self.kinds: set[str] = set()
        """How the reconciler took the envelopes (echo, rejected ...), for statistics."""

    def receive_data(self, data: bytes | str) -> list[Event]:
        events = super().receive_data(data)
        obj = json.loads(data)
        for ev in events:
            self._observe(ev, obj)
        if obj.get("method") == "action":
            self._record(obj["params"])
        return events

    def unsubscribe(self, channel: str) -> bytes:
        data = super().unsubscribe(channel)
        self.eras.pop(channel, None)
        return data

    def _begin(self, snapshots: Iterable[t.Snapshot]) -> None:
        for snapshot in snapshots:
            self.eras[snapshot.resource] = Era(
                from_seq=snapshot.from_seq, base=self.confirmed(snapshot.resource)
            )

    def _observe(self, ev: Event, obj: dict[str, Any]) -> None:
        if isinstance(ev, ActionReceived):
            self.kinds.add(ev.received.kind.value)
        elif isinstance(ev, ProtocolViolation):
            self.problems.append(f"protocol violation: {ev.error}")
        elif isinstance(ev, Initialized):
            self.eras = {}
            self._begin(ev.snapshots)
            if ev.protocol_version != self.version:
                self.problems.append(f"negotiated {ev.protocol_version}, offered {self.version}")
        elif isinstance(ev, ResponseReceived) and isinstance(ev.result, t.SubscribeResult):
            if ev.result.snapshot is not None:
                self._begin([ev.result.snapshot])
        elif isinstance(ev, Reconnected):
            result = obj["result"]
            if ev.outcome.kind is t.ReconnectResultType.SNAPSHOT:
                self.snapshots += 1
                self.eras = {}
                snapshots = wire.structure(result, t.ReconnectSnapshotResult).snapshots
                self._begin(snapshots)
            else:
                self.replays += 1
                for uri in ev.outcome.removed:
                    self.eras.pop(uri, None)
                for envelope in result["actions"]:
                    self._record(envelope)
            if set(self.eras) != set(self.reconciler.channels):
                self.problems.append("tracked channels differ from the subscriptions")

    def _record(self, envelope: dict[str, Any]) -> None:
        seq = envelope["serverSeq"]
        action_type = envelope["action"]["type"]
        if not is_action_known_to_version(action_type, self.version):
            self.problems.append(f"{self.version} connection got {action_type} (seq {seq})")
        if self.seqs and seq <= self.seqs[-1]:
            self.problems.append(f"seq {seq} after {self.seqs[-1]}: duplicated or reordered")
        self.seqs.append(seq)
        era = self.eras.get(envelope["channel"])
        if era is not None and seq > era.from_seq:
            era.got.append(seq)


@attrs.frozen
class Logged:
    envelope: t.ActionEnvelope
    only_to: str | None


class NetworkMachine(RuleBasedStateMachine):
    """One host, two to five clients of different versions, one in-memory network."""

    host: Host
    net: Network
    clients: list[TappedClient]
    clock: Ticker

    def make_clock(self, data: st.DataObject) -> Ticker:
        """A clock that stands still: host and clients states compare byte for byte."""
        return Ticker()

    def same(self, a: t.SnapshotState | None, b: t.SnapshotState | None) -> bool:
        if self.clock.step:
            a, b = unstamped(a), unstamped(b)
        return wire.dumps(a) == wire.dumps(b)

    @initialize(
        versions=st.lists(st.sampled_from(VERSIONS), min_size=2, max_size=MAX_CLIENTS),
        window=st.sampled_from(REPLAY_WINDOWS),
        data=st.data(),
    )
    def start(self, versions: list[str], window: int, data: st.DataObject) -> None:
        self.clock = self.make_clock(data)
        capabilities = t.AgentCapabilities(
            multiple_working_directories=t.MultipleWorkingDirectoriesCapability(
                immutable_primary=True)
        )
        agent = t.AgentInfo(
            provider="test", display_name="Test", description="", models=(),
            capabilities=capabilities,
        )
        self.host = Host(
            clock=self.clock,
            root=t.RootState(agents=(agent,)),
            replay_max_envelopes=window,
            supported_versions=SUPPORTED_PROTOCOL_VERSIONS,
        )
        self.log: dict[int, Logged] = {}
        self.ids = 0
        self.rejections = 0
        self.host.create_session(
            SESSION, provider="test", title="untitled", working_directories=DIRECTORIES
        )
        self.host.ready_session(SESSION, default_chat=CHAT)
        files = tuple(t.ChangesetFile(id=f, edit=t.FileEdit()) for f in FILES)
        self.host.add_channel(
            CHANGESET, t.ChangesetState(status=t.ChangesetStatus.READY, files=files)
        )
        self.poll()
        self.net = Network(self.host)
        self.clients = []
        for index, version in enumerate(versions):
            client = TappedClient(f"c{index}", version, self.clock)
            channels = data.draw(
                st.lists(st.sampled_from(CHANNELS), unique=True), label=f"c{index} channels"
            )
            link = self.net.connect(client)
            link.send(client.initialize(initial_subscriptions=channels))
            self.clients.append(client)
        self.settle()
        for client in self.clients:
            assert client.connection_state is ClientState.OPEN, client.problems

    # -- helpers --

    def fresh_id(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.ids}"

    def poll(self) -> None:
        """Log what the host sequenced since the last poll (and drain its events)."""
        for _ in self.host.events():
            pass
        last = max(self.log, default=0)
        for seq in range(last + 1, self.host.server_seq + 1):
            entry = self.host.replay.get(seq)
            assert entry is not None, f"seq {seq} left the replay buffer before it was logged"
            self.log[seq] = Logged(entry.envelope, entry.only_to)
            if entry.envelope.rejection_reason is not None:
                self.rejections += 1

    def deliver(self) -> bool:
        moved = self.net.deliver()
        self.poll()
        return moved

    def settle(self) -> None:
        for _ in range(100_000):
            if not self.deliver():
                return
        raise AssertionError("the network does not quiesce")

    def client(self, index: int) -> TappedClient:
        return self.clients[index % len(self.clients)]

    def emit(self, channel: str, action: t.StateAction) -> None:
        self.host.dispatch(channel, action)
        self.poll()

    def chat(self) -> t.ChatState:
        state = self.host.state(CHAT)
        assert isinstance(state, t.ChatState)
        return state

    # -- clients --

    def draw_action(
        self, data: st.DataObject, client: TappedClient, channel: str
    ) -> t.StateAction | None:
        """Mostly actions the host accepts, sometimes ones it must reject; ``None`` if
        the client's version knows none of those drawn (changeset actions before 0.6.0).

        The client refuses to dispatch an action its version does not know (the
        host would reject it and could not tell that connection): checked here.
        """
        state = client.optimistic(channel)
        for _ in range(5):
            action = self.draw_one(data, client, state)
            if is_action_known_to_version(action, client.version):
                return action
            pending = client.reconciler.pending(channel)
            with pytest.raises(LocalProtocolError, match="unknown to the negotiated"):
                client.dispatch(channel, action)
            assert client.reconciler.pending(channel) == pending
            assert client.optimistic(channel) is state
        return None

    def draw_one(
        self, data: st.DataObject, client: TappedClient, state: t.SnapshotState
    ) -> t.StateAction:
        if isinstance(state, t.ChangesetState):
            files = data.draw(st.lists(st.sampled_from([*FILES, GHOST]), min_size=1, max_size=3))
            return t.ChangesetFilesReviewChangedAction(
                files=tuple(files), reviewed=data.draw(st.booleans())
            )
        if isinstance(state, t.SessionState):
            what = data.draw(st.sampled_from(
                ["title", "read", "archived", "directory", "remove directory"]
            ))
            match what:
                case "title":
                    return t.SessionTitleChangedAction(title=self.fresh_id(client.client_id))
                case "read":
                    return t.SessionIsReadChangedAction(is_read=data.draw(st.booleans()))
                case "archived":
                    return t.SessionIsArchivedChangedAction(is_archived=data.draw(st.booleans()))
                case "directory":
                    directory = data.draw(st.sampled_from(DIRECTORIES))
                    return t.SessionWorkingDirectorySetAction(directory=directory)
                case _:
                    # the primary one is immutable: the host rejects its removal
                    directory = data.draw(st.sampled_from(DIRECTORIES))
                    return t.SessionWorkingDirectoryRemovedAction(directory=directory)
        assert isinstance(state, t.ChatState)
        active = state.active_turn
        calls = pending_confirmations(active)
        queued = [m.id for m in state.queued_messages or ()]
        choices = [
            "start", "queue", "steer", "unqueue", "draft", "directory",
            "cancel", "bad cancel", "bad confirm", "bad unqueue", "bad directory",
            "bad start", "bad answer",
        ]
        if calls:
            choices += ["confirm"] * 4
        match data.draw(st.sampled_from(choices), label="chat action"):
            case "start":
                return t.ChatTurnStartedAction(
                    turn_id=self.fresh_id("u"), started_at=self.clock.iso(),
                    message=message(f"hi from {client.client_id}"),
                )
            case "bad start":
                return t.ChatTurnStartedAction(
                    turn_id=self.fresh_id("u"), started_at=self.clock.iso(),
                    message=message("an agent's words", t.MessageKind.AGENT),
                )
            case "queue" | "steer" as what:
                kind = (
                    t.PendingMessageKind.QUEUED if what == "queue"
                    else t.PendingMessageKind.STEERING
                )
                message_id = self.fresh_id("m")
                return t.ChatPendingMessageSetAction(
                    kind=kind, id=message_id, message=message(message_id)
                )
            case "unqueue" if queued:
                return t.ChatPendingMessageRemovedAction(
                    kind=t.PendingMessageKind.QUEUED, id=data.draw(st.sampled_from(queued))
                )
            case "unqueue" | "bad unqueue":
                return t.ChatPendingMessageRemovedAction(
                    kind=t.PendingMessageKind.QUEUED, id=GHOST
                )
            case "draft":
                draft = data.draw(st.sampled_from([None, message("draft")]))
                return t.ChatDraftChangedAction(draft=draft)
            case "directory":
                return t.ChatWorkingDirectorySetAction(
                    directory=data.draw(st.sampled_from(DIRECTORIES))
                )
            case "bad directory":
                return t.ChatWorkingDirectorySetAction(directory=OUTSIDE)
            case "cancel" if active is not None:
                return t.ChatTurnCancelledAction(turn_id=active.id, duration=1)
            case "cancel" | "bad cancel":
                return t.ChatTurnCancelledAction(turn_id=GHOST, duration=1)
            case "confirm":
                call = data.draw(st.sampled_from(calls))
                assert active is not None
                if data.draw(st.booleans()):
                    return t.ChatToolCallApprovedAction(
                        turn_id=active.id, tool_call_id=call,
                        confirmed=t.ToolCallConfirmationReason.USER_ACTION,
                    )
                return t.ChatToolCallDeniedAction(
                    turn_id=active.id, tool_call_id=call,
                    reason=t.ToolCallCancellationReason.DENIED,
                )
            case "bad confirm":
                return t.ChatToolCallApprovedAction(
                    turn_id=active.id if active is not None else GHOST, tool_call_id=GHOST,
                    confirmed=t.ToolCallConfirmationReason.USER_ACTION,
                )
            case _:
                return t.ChatInputAnswerChangedAction(
                    request_id=GHOST, question_id=GHOST, answer=None
                )

    @rule(index=CLIENT, count=st.integers(min_value=1, max_value=3), data=st.data())
    def dispatch(self, index: int, count: int, data: st.DataObject) -> None:
        client = self.client(index)
        if client.connection_state is not ClientState.OPEN:
            return
        # nothing on the root channel is client-dispatchable
        channels = [c for c in client.reconciler.channels if c != ROOT]
        if not channels:
            return
        link = self.net.link(client)
        for _ in range(count):
            channel = data.draw(st.sampled_from(channels), label="channel")
            action = self.draw_action(data, client, channel)
            if action is not None:
                link.send(client.dispatch(channel, action))

    @rule(index=CLIENT, approve=st.booleans(), data=st.data())
    def confirm(self, index: int, approve: bool, data: st.DataObject) -> None:
        """The user answers a tool call the agent asked to confirm, as the client shows it."""
        client = self.client(index)
        if client.connection_state is not ClientState.OPEN or CHAT not in client.eras:
            return
        state = client.optimistic(CHAT)
        assert isinstance(state, t.ChatState)
        calls = pending_confirmations(state.active_turn)
        if state.active_turn is None or not calls:
            return
        event("a tool call confirmed or denied")
        turn, call = state.active_turn.id, data.draw(st.sampled_from(calls), label="call")
        action: t.StateAction
        if approve:
            action = t.ChatToolCallApprovedAction(
                turn_id=turn, tool_call_id=call,
                confirmed=t.ToolCallConfirmationReason.USER_ACTION,
            )
        else:
            action = t.ChatToolCallDeniedAction(
                turn_id=turn, tool_call_id=call, reason=t.ToolCallCancellationReason.DENIED,
            )
        self.net.link(client).send(client.dispatch(CHAT, action))

    @rule(index=CLIENT, data=st.data())
    def subscription(self, index: int, data: st.DataObject) -> None:
        client = self.client(index)
        if client.connection_state is not ClientState.OPEN:
            return
        link = self.net.link(client)
        asked = set(client.pending_requests.values())
        free = [c for c in CHANNELS if c not in client.subscriptions]
        subscribed = sorted(client.subscriptions)
        if free and "subscribe" not in asked and (
            not subscribed or data.draw(st.booleans(), label="subscribe")
        ):
            link.send(client.subscribe(data.draw(st.sampled_from(free), label="channel")))
        elif subscribed:
            link.send(client.unsubscribe(data.draw(st.sampled_from(subscribed), label="channel")))

    @rule(index=CLIENT, odds=st.integers(min_value=0, max_value=2))
    def drop(self, index: int, odds: int) -> None:
        """The link breaks (one draw in three, so that links live long enough)."""
        if odds == 0:
            self.net.link(self.client(index)).drop()

    @rule(index=CLIENT, odds=st.integers(min_value=0, max_value=2))
    def reconnect(self, index: int, odds: int) -> None:
        """A dropped client reconnects; now and then one drops and reconnects at once."""
        client = self.client(index)
        if client.connection_state is ClientState.DISCONNECTED or odds == 0:
            self.net.reconnect(client)

    # -- the network --

    @rule(count=st.integers(min_value=1, max_value=8))
    def step(self, count: int) -> None:
        for _ in range(count):
            self.deliver()

    @rule()
    def quiesce(self) -> None:
        self.settle()
        for client in self.clients:
            self.check_quiescent(client)

    # -- the host --

    @rule(choice=st.integers(min_value=0, max_value=19))
    def agent(self, choice: int) -> None:
        """One step of the agent's stream on the chat."""
        turn = self.chat().active_turn
        if turn is None:
            self.emit(CHAT, t.ChatTurnStartedAction(
                turn_id=self.fresh_id("h"), started_at=self.clock.iso(),
                message=message("agent work"),
            ))
            return
        markdown = [p for p in turn.response_parts if isinstance(p, t.MarkdownResponsePart)]
        running = running_calls(turn)
        match choice % 10:
            case 0 | 1:
                part = t.MarkdownResponsePart(id=self.fresh_id("p"), content="")
                self.emit(CHAT, t.ChatResponsePartAction(turn_id=turn.id, part=part))
            case 2 | 3:
                call = self.fresh_id("tc")
                self.emit(CHAT, t.ChatToolCallStartAction(
                    turn_id=turn.id, tool_call_id=call, tool_name="grep", display_name="Grep",
                ))
                self.emit(CHAT, t.ChatToolCallReadyAction(
                    turn_id=turn.id, tool_call_id=call, invocation_message="Searching",
                ))
            case 4 if running:
                result = t.ToolCallResult(success=True, past_tense_message="Searched")
                self.emit(CHAT, t.ChatToolCallCompleteAction(
                    turn_id=turn.id, tool_call_id=running[0], result=result,
                ))
            case 8:
                self.emit(CHAT, t.ChatTurnCompleteAction(turn_id=turn.id, duration=choice))
            case 9 if choice % 2:
                error = t.ErrorInfo(error_type="agent", message="failed")
                self.emit(CHAT, t.ChatErrorAction(turn_id=turn.id, duration=choice, error=error))
            case _ if markdown:
                self.emit(CHAT, t.ChatDeltaAction(
                    turn_id=turn.id, part_id=markdown[-1].id, content=f"+{choice}",
                ))
            case _:
                part = t.MarkdownResponsePart(id=self.fresh_id("p"), content="")
                self.emit(CHAT, t.ChatResponsePartAction(turn_id=turn.id, part=part))

    @rule()
    def agent_asks(self) -> None:
        """The agent starts a tool call that waits for the user's confirmation."""
        if self.chat().active_turn is None:
            self.agent(0)
        self.agent(2)

    @rule(choice=st.integers(min_value=0, max_value=5))
    def host_side(self, choice: int) -> None:
        """A session or changeset change made by the host itself."""
        match choice:
            case 0:
                self.emit(SESSION, t.SessionTitleChangedAction(title=self.fresh_id("server")))
            case 1:
                self.emit(SESSION, t.SessionActivityChangedAction(
                    activity=self.fresh_id("busy")))
            case 2:
                # known to 0.7.0 only: older connections never hear of it
                self.emit(CHAT, t.ChatWorkingDirectorySetAction(directory=DIRECTORIES[1]))
            case 3:
                self.emit(CHAT, t.ChatWorkingDirectoryRemovedAction(directory=DIRECTORIES[1]))
            case 4:
                file = t.ChangesetFile(id=FILES[self.ids % 3], edit=t.FileEdit())
                self.ids += 1
                self.emit(CHANGESET, t.ChangesetFileSetAction(file=file))
            case _:
                self.emit(CHANGESET, t.ChangesetFilesReviewChangedAction(
                    files=FILES[:2], reviewed=True))

    @rule(count=st.integers(min_value=6, max_value=14))
    def burst(self, count: int) -> None:
        """A stream of session changes while someone is away: small replay buffers
        overflow, and that client's reconnect gets snapshots."""
        if all(c.connection_state is ClientState.OPEN for c in self.clients):
            return
        for _ in range(count):
            self.emit(SESSION, t.SessionTitleChangedAction(title=self.fresh_id("burst")))

    # -- properties --

    @invariant()
    def consistent(self) -> None:
        for client in self.clients:
            assert not client.problems, (client.client_id, client.problems)
            if client.connection_state is ClientState.IDLE:
                continue
            rec = client.reconciler
            for channel in rec.channels:
                state = rec.confirmed(channel)
                for entry in rec.pending(channel):
                    now = stopped_at(entry.dispatched_at)
                    state = reduce(channel, state, entry.action, now=now)
                assert wire.dumps(rec.optimistic(channel)) == wire.dumps(state), (
                    client.client_id, channel)

    def check_quiescent(self, client: TappedClient) -> None:
        if client.connection_state is not ClientState.OPEN:
            return
        assert not client.problems, (client.client_id, client.problems)
        assert set(client.eras) == set(client.reconciler.channels), client.client_id
        for channel, era in client.eras.items():
            expected: list[int] = []
            state = era.base
            unknown = False
            for seq in range(era.from_seq + 1, self.host.server_seq + 1):
                logged = self.log[seq]
                envelope = logged.envelope
                if envelope.channel != channel or logged.only_to not in (None, client.client_id):
                    continue
                known = is_action_known_to_version(envelope.action, client.version)
                if known:
                    expected.append(seq)
                if envelope.rejection_reason is not None:
                    continue
                if known:
                    state = reduce(channel, state, envelope.action, now=self.clock)
                else:
                    unknown = True
            # none lost, none twice
            assert era.got == expected, (client.client_id, client.version, channel)
            confirmed = client.confirmed(channel)
            assert self.same(confirmed, state), (client.client_id, channel)
            if unknown:
                event(f"{client.version} confirmed state diverges by version")
            else:
                assert self.same(confirmed, self.host.state(channel)), (
                    client.client_id, client.version, channel)
            assert client.reconciler.pending(channel) == ()

    def teardown(self) -> None:
        if not hasattr(self, "net"):
            return
        for client in self.clients:
            if client.connection_state is not ClientState.OPEN:
                self.net.reconnect(client)
        self.settle()
        for client in self.clients:
            assert client.connection_state is ClientState.OPEN
            self.check_quiescent(client)
            if client.replays:
                event("reconnected by replay")
            if client.snapshots:
                event("reconnected by snapshot")
            for kind in client.kinds:
                event(f"envelope taken as {kind}")
        if self.rejections:
            event("host rejected a client action")


class MovingClockNetworkMachine(NetworkMachine):
    """The same runs with a clock that moves at every reading, forwards or back."""

    def make_clock(self, data: st.DataObject) -> Ticker:
        return Ticker(step=data.draw(st.sampled_from([1, 1_000, -7]), label="clock step"))


def _settings(scale: int) -> settings:
    return settings(
        # each example is one run of the machine; ``long`` runs 20 times as many
        max_examples=scale * settings().max_examples,
        stateful_step_count=80,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


TestNetworkMachine = NetworkMachine.TestCase
TestNetworkMachine.settings = _settings(2)
TestMovingClockNetworkMachine = MovingClockNetworkMachine.TestCase
TestMovingClockNetworkMachine.settings = _settings(1)


def test_tap_sees_nothing_unknown_for_a_one_version_offer() -> None:
    """Each client offers one version, so the negotiated one is that version."""
    host = Host(clock=Ticker())
    net = Network(host)
    for version in VERSIONS:
        client = TappedClient(version, version, Ticker())
        link = net.connect(client)
        link.send(client.initialize())
        net.run_until_quiet()
        assert client.negotiated_version == version


def test_a_client_does_not_dispatch_what_its_version_does_not_know() -> None:
    """The host rejects an action unknown to the connection's version but, by its
    policy, sends the rejection only to versions that know the action: dispatched,
    it would stay pending (and in the optimistic state) until the next reconnect.
    So ``ClientConnection.dispatch`` refuses it, changing nothing."""
    clock = Ticker()
    capabilities = t.AgentCapabilities(
        multiple_working_directories=t.MultipleWorkingDirectoriesCapability()
    )
    agent = t.AgentInfo(
        provider="test", display_name="Test", description="", models=(),
        capabilities=capabilities,
    )
    host = Host(clock=clock, root=t.RootState(agents=(agent,)))
    host.create_session(SESSION, provider="test", working_directories=DIRECTORIES)
    host.ready_session(SESSION, default_chat=CHAT)
    net = Network(host)
    old = ClientConnection("old", clock=clock, protocol_versions=["0.6.0"])
    link = net.connect(old)
    link.send(old.initialize(initial_subscriptions=[CHAT]))
    net.run_until_quiet()
    seq = host.server_seq
    with pytest.raises(LocalProtocolError, match="unknown to the negotiated protocol version"):
        old.dispatch(CHAT, t.ChatWorkingDirectorySetAction(directory=DIRECTORIES[0]))
    assert old.reconciler.pending(CHAT) == ()
    net.run_until_quiet()
    assert host.server_seq == seq
    # what 0.6.0 knows still goes through
    link.send(old.dispatch(CHAT, t.ChatDraftChangedAction(draft=None)))
    net.run_until_quiet()
    assert host.server_seq == seq + 1 and old.reconciler.pending(CHAT) == ()
