"""Property tests of the write-ahead reconciler against an in-test host.

A hypothesis state machine drives a :class:`tests._harness.Host` and two or
three :class:`tests._harness.Client`\\ s (each a ``ClientReconciler`` on an
ordered connection) through random interleavings of client dispatches,
host processing, delayed and duplicated deliveries, server-originated
actions, subscribe/unsubscribe, channel disposal, disconnects and reconnects
answered by replay or by snapshot.  Properties:

* at every step, on every client and tracked channel,
  ``optimistic == confirmed`` with ``pending`` replayed on top, and
  ``confirmed`` equals the host's state as of the last envelope the client
  saw on that channel;
* at every step, ``pending`` is exactly the set of dispatched actions not yet
  answered: each dispatch is answered at most once, by an echo, a reported
  rejection, or a reported drop (reconnect, unsubscribe); a replay only drops
  actions the host never applied;
* after delivery quiesces, every client's confirmed state equals the host's
  state and only the host's silence (a deferred action, a disposed channel)
  leaves an action pending.

Example counts come from the loaded hypothesis profile (``tests/conftest.py``);
``HYPOTHESIS_PROFILE=long`` runs 20 times as many.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from agenthost_protocol.types import (
    ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction,
    ChatQueuedMessagesReorderedAction,
    ChatState,
    ChatTruncatedAction,
    ChatTurnCancelledAction,
    ChatTurnStartedAction,
    ModelSelection,
    PendingMessageKind,
    SessionIsArchivedChangedAction,
    SessionIsReadChangedAction,
    SessionModelChangedAction,
    SessionTitleChangedAction,
    StateAction,
)

from ._harness import CHANNELS, CHAT_A, CHAT_B, SESSION, Client, Host, message, quiesce

CLIENT = st.integers(min_value=0, max_value=2)
EXAMPLES_SCALE = 4


def draw_client_action(data: st.DataObject, client: Client, channel: str) -> StateAction:
    """What a user might do next, judged from the optimistic state the UI shows.

    Mostly sensible actions, sometimes ones the host will reject (an empty
    title, cancelling a turn that is not active, removing an unknown message).
    """
    state = client.rec.optimistic(channel)
    if not isinstance(state, ChatState):
        match data.draw(st.sampled_from(["title", "read", "archived", "model"])):
            case "title":
                title = data.draw(st.sampled_from(["", " ", "alpha", "beta", " beta "]))
                return SessionTitleChangedAction(title=title)
            case "read":
                return SessionIsReadChangedAction(is_read=data.draw(st.booleans()))
            case "archived":
                return SessionIsArchivedChangedAction(is_archived=data.draw(st.booleans()))
            case _:
                model = ModelSelection(id=data.draw(st.sampled_from(["m1", "m2", "m3"])))
                return SessionModelChangedAction(model=model)
    queued_ids = [m.id for m in state.queued_messages or ()]
    turn_ids = [turn.id for turn in state.turns]
    match data.draw(
        st.sampled_from(["start", "cancel", "queue", "steer", "unqueue", "reorder", "truncate"])
    ):
        case "start":
            reuse = turn_ids and data.draw(st.integers(0, 5)) == 0
            turn_id = data.draw(st.sampled_from(turn_ids)) if reuse else client.fresh_turn_id()
            return ChatTurnStartedAction(turn_id=turn_id, message=message(f"hi from {client.id}"))
        case "cancel":
            active = state.active_turn
            guess = [active.id] if active is not None else []
            turn_id = data.draw(st.sampled_from([*guess, *turn_ids[-1:], "ghost"]))
            return ChatTurnCancelledAction(turn_id=turn_id)
        case "queue":
            message_id = data.draw(st.sampled_from(["m1", "m2", "m3"]))
            return ChatPendingMessageSetAction(
                kind=PendingMessageKind.QUEUED, id=message_id, message=message(message_id)
            )
        case "steer":
            message_id = data.draw(st.sampled_from(["s1", "s2"]))
            return ChatPendingMessageSetAction(
                kind=PendingMessageKind.STEERING, id=message_id, message=message(message_id)
            )
        case "unqueue":
            steering = state.steering_message
            if steering is not None and data.draw(st.booleans()):
                return ChatPendingMessageRemovedAction(
                    kind=PendingMessageKind.STEERING, id=steering.id
                )
            message_id = data.draw(st.sampled_from([*queued_ids, "ghost"]))
            return ChatPendingMessageRemovedAction(kind=PendingMessageKind.QUEUED, id=message_id)
        case "reorder":
            order = data.draw(st.permutations(queued_ids)) if queued_ids else ["m2", "m1"]
            return ChatQueuedMessagesReorderedAction(order=tuple(order))
        case _:
            keep = data.draw(st.sampled_from([None, *turn_ids[-2:], "ghost"]))
            return ChatTruncatedAction(turn_id=keep)


class ReconcilerMachine(RuleBasedStateMachine):
    """One host, two or three clients, random interleavings."""

    host: Host
    clients: list[Client]

    @initialize(
        count=st.integers(min_value=2, max_value=3),
        broadcast_rejections=st.booleans(),
        replay_window=st.none() | st.integers(min_value=0, max_value=12),
        data=st.data(),
    )
    def start(
        self,
        count: int,
        broadcast_rejections: bool,
        replay_window: int | None,
        data: st.DataObject,
    ) -> None:
        self.host = Host(broadcast_rejections=broadcast_rejections, replay_window=replay_window)
        self.clients = []
        for index in range(count):
            # every client starts on the session and chat A, some also on chat B
            extra = data.draw(st.booleans(), label=f"c{index} on chat B")
            channels = [SESSION, CHAT_A, *([CHAT_B] if extra else [])]
            self.clients.append(Client(f"c{index}", self.host, channels))

    def client(self, index: int) -> Client:
        return self.clients[index % len(self.clients)]

    # -- clients --

    @rule(index=CLIENT, count=st.integers(min_value=1, max_value=3), data=st.data())
    def dispatch(self, index: int, count: int, data: st.DataObject) -> None:
        client = self.client(index)
        if not client.rec.channels:
            return
        for _ in range(count):
            channel = data.draw(st.sampled_from(client.rec.channels), label="channel")
            client.dispatch(channel, draw_client_action(data, client, channel))

    @rule(index=CLIENT, count=st.integers(min_value=1, max_value=6))
    def deliver(self, index: int, count: int) -> None:
        client = self.client(index)
        for _ in range(count):
            client.deliver()

    @rule(index=CLIENT, which=st.integers(min_value=-8, max_value=-1))
    def redeliver(self, index: int, which: int) -> None:
        self.client(index).redeliver(which)

    @rule(index=CLIENT, data=st.data())
    def subscription(self, index: int, data: st.DataObject) -> None:
        """Subscribe to a channel not tracked, or unsubscribe from a tracked one."""
        client = self.client(index)
        if not client.conn.connected:
            return
        free = [
            uri
            for uri in CHANNELS
            if uri not in client.rec.channels and uri not in client.subscribing
        ]
        if free and (not client.rec.channels or data.draw(st.booleans(), label="subscribe")):
            client.subscribe(data.draw(st.sampled_from(free), label="channel"))
        elif client.rec.channels:
            client.unsubscribe(data.draw(st.sampled_from(client.rec.channels), label="channel"))

    @rule(
        index=CLIENT,
        what=st.sampled_from(["disconnect", "replay", "snapshot"]),
        odds=st.integers(min_value=0, max_value=3),
    )
    def connection(self, index: int, what: str, odds: int) -> None:
        """Drop the connection, or reconnect (dropping it first if it is up).

        Only one draw in four acts, so that connections live long enough for
        round trips to complete; a disconnected client may reconnect at once.
        """
        client = self.client(index)
        if odds != 3 and client.conn.connected:
            return
        if what == "disconnect":
            client.disconnect()
        else:
            client.reconnect(force_snapshot=what == "snapshot")

    @precondition(lambda self: bool(self.host.deferred))
    @rule(data=st.data(), odds=st.integers(min_value=0, max_value=3))
    def reconnect_deferring(self, data: st.DataObject, odds: int) -> None:
        """Reconnect a client whose action the host deferred: its echo will come late.

        One draw in four acts, as for :meth:`connection`.
        """
        if odds != 3:
            return
        ids = sorted({client_id for client_id, _ in self.host.deferred})
        client_id = data.draw(st.sampled_from(ids), label="client")
        client = next(c for c in self.clients if c.id == client_id)
        client.reconnect(force_snapshot=data.draw(st.booleans(), label="snapshot"))

    # -- the host --

    @rule(index=CLIENT, count=st.integers(min_value=1, max_value=4))
    def host_process(self, index: int, count: int) -> None:
        conn = self.client(index).conn
        for _ in range(count):
            self.host.process(conn)

    @rule(count=st.integers(min_value=1, max_value=4))
    def pump(self, count: int) -> None:
        """The network catches up a little everywhere."""
        for client in self.clients:
            for _ in range(count):
                self.host.process(client.conn)
            for _ in range(count):
                client.deliver()

    @rule(channel=st.sampled_from(CHANNELS), choice=st.integers(min_value=0, max_value=11))
    def agent(self, channel: str, choice: int) -> None:
        self.host.agent_step(channel, choice)

    @precondition(lambda self: CHAT_B in self.host.states)
    @rule()
    def dispose_chat(self) -> None:
        self.host.dispose(CHAT_B)

    @rule()
    def quiesce(self) -> None:
        quiesce(self.host, self.clients)
        for client in self.clients:
            if client.conn.connected:
                client.check_quiescent()

    # -- properties --

    @invariant()
    def consistent(self) -> None:
        for client in self.clients:
            client.check()

    def teardown(self) -> None:
        if not hasattr(self, "host"):
            return
        for client in self.clients:
            if not client.conn.connected:
                client.reconnect(force_snapshot=False)
        quiesce(self.host, self.clients)
        for client in self.clients:
            client.check_quiescent()
        # the session is never disposed: everyone subscribed to it agrees
        for client in self.clients:
            if SESSION in client.rec.channels:
                assert client.rec.confirmed(SESSION) == self.host.states[SESSION]
            for what in client.stats:
                event(what)


TestReconcilerMachine = ReconcilerMachine.TestCase
TestReconcilerMachine.settings = settings(
    # each example is one whole run of the machine; four per profile example
    # keeps the CI run at a few seconds and the ``long`` profile at 20x that
    max_examples=EXAMPLES_SCALE * settings().max_examples,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
