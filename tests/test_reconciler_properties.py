"""Property tests of the write-ahead reconciler against an in-test host.

A hypothesis state machine drives a :class:`tests._harness.Host` and two or
three :class:`tests._harness.Client`\\ s (each a ``ClientReconciler`` on an
ordered connection) through random interleavings of client dispatches (AHP
0.7.0 session, chat and changeset actions, valid and invalid), host
processing, delayed and duplicated deliveries, server-originated actions
(agent turns with streamed text, input requests and tool calls awaiting
confirmation; changeset files rewritten), subscribe/unsubscribe, channel
disposal, disconnects and reconnects answered by replay or by snapshot.
Properties:

* at every step, on every client and tracked channel,
  ``optimistic == confirmed`` with ``pending`` replayed on top, and
  ``confirmed`` equals the host's state as of the last envelope the client
  saw on that channel;
* at every step, ``pending`` is exactly the set of dispatched actions not yet
  answered: each dispatch is answered at most once, by an echo, a reported
  rejection, or a reported drop (reconnect, unsubscribe); a replay only drops
  actions the host never applied;
* after delivery quiesces, every client's confirmed state equals the host's
  state and only the host's silence (a held action, a disposed channel)
  leaves an action pending.

The machine runs twice: with a clock that stands still, so that states
compare exactly with the host's, and with one that moves at every reading
(:class:`MovingClockMachine`), for the clock policy.  A third property feeds
one reconciler well-typed and spoilt peer data from
:mod:`agenthost_protocol.testing.strategies`: only ``RemoteProtocolError``
may come out (``LocalProtocolError`` for its own spoilt actions), and a
refused call changes nothing.  Example counts come
from the loaded hypothesis profile (``tests/conftest.py``);
``HYPOTHESIS_PROFILE=long`` runs 20 times as many.
"""

from __future__ import annotations

from functools import partial
from typing import Any, get_args

import attrs
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from agenthost_protocol.channels import ACTION_UNIONS, ChannelKind, channel_kind
from agenthost_protocol.errors import LocalProtocolError, RemoteProtocolError
from agenthost_protocol.reconciler import ClientReconciler
from agenthost_protocol.testing import strategies as ahst
from agenthost_protocol.types import (
    ActionOrigin,
    ChangesetFilesReviewChangedAction,
    ChangesetState,
    ChatDraftChangedAction,
    ChatInputAnswerChangedAction,
    ChatInputAnswered,
    ChatInputAnswerState,
    ChatInputAnswerValue,
    ChatInputBooleanAnswerValue,
    ChatInputCompletedAction,
    ChatInputResponseKind,
    ChatInputTextAnswerValue,
    ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction,
    ChatQueuedMessagesReorderedAction,
    ChatState,
    ChatToolCallApprovedAction,
    ChatToolCallDeniedAction,
    ChatTruncatedAction,
    ChatTurnCancelledAction,
    ChatTurnStartedAction,
    ChatWorkingDirectoryRemovedAction,
    ChatWorkingDirectorySetAction,
    Message,
    MessageKind,
    PendingMessageKind,
    ReconnectReplayResult,
    ReconnectSnapshotResult,
    SessionIsArchivedChangedAction,
    SessionIsReadChangedAction,
    SessionTitleChangedAction,
    SessionWorkingDirectoryRemovedAction,
    SessionWorkingDirectorySetAction,
    StateAction,
    ToolCallCancellationReason,
    ToolCallConfirmationReason,
    UnknownAction,
)
from agenthost_protocol.versions import IS_CLIENT_DISPATCHABLE

from ._harness import (
    CHANGESET,
    CHANNELS,
    CHAT_A,
    CHAT_B,
    DIRECTORIES,
    FILES,
    SESSION,
    Client,
    Host,
    Ticker,
    clock,
    message,
    open_requests,
    pending_confirmations,
    quiesce,
)

CLIENT = st.integers(min_value=0, max_value=2)
EXAMPLES_SCALE = 4
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
                started_at=client.clock.iso(),
                message=draw_message(data, f"hi from {client.id}"),
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
    state = client.rec.optimistic(channel)
    if isinstance(state, ChatState):
        return draw_chat_action(data, client, state)
    if isinstance(state, ChangesetState):
        files = data.draw(st.lists(st.sampled_from([*FILES, GHOST]), min_size=1, max_size=3))
        return ChangesetFilesReviewChangedAction(
            files=tuple(files), reviewed=data.draw(st.booleans())
        )
    return draw_session_action(data)


class ReconcilerMachine(RuleBasedStateMachine):
    """One host, two or three clients, random interleavings."""

    host: Host
    clients: list[Client]

    @initialize(
        count=st.integers(min_value=2, max_value=3),
        broadcast_rejections=st.booleans(),
        replay_window=st.none() | st.integers(min_value=0, max_value=12),
        hold_directories=st.booleans(),
        data=st.data(),
    )
    def start(
        self,
        count: int,
        broadcast_rejections: bool,
        replay_window: int | None,
        hold_directories: bool,
        data: st.DataObject,
    ) -> None:
        self.host = Host(
            broadcast_rejections=broadcast_rejections,
            replay_window=replay_window,
            hold_directories=hold_directories,
            now=self.make_clock(data),
        )
        self.clients = []
        for index in range(count):
            # every client starts on the session and chat A, some also on chat B or the changeset
            extra = data.draw(
                st.lists(st.sampled_from([CHAT_B, CHANGESET]), unique=True),
                label=f"c{index} also on",
            )
            channels = [SESSION, CHAT_A, *extra]
            self.clients.append(Client(f"c{index}", self.host, channels))

    def make_clock(self, data: st.DataObject) -> Ticker:
        """The clock of host and clients: one that stands still, so states compare exactly."""
        return Ticker()

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

    @precondition(lambda self: bool(self.host.held))
    @rule(data=st.data(), odds=st.integers(min_value=0, max_value=3))
    def reconnect_holding(self, data: st.DataObject, odds: int) -> None:
        """Reconnect a client whose action the host holds: its answer will come late.

        One draw in four acts, as for :meth:`connection`.
        """
        if odds != 3:
            return
        ids = sorted({client_id for client_id, _ in self.host.held})
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

    @rule(channel=st.sampled_from(CHANNELS), choice=st.integers(min_value=0, max_value=19))
    def agent(self, channel: str, choice: int) -> None:
        self.host.agent_step(channel, choice)

    @rule(channel=st.sampled_from([CHAT_A, CHAT_B]), choice=st.integers(min_value=0, max_value=1))
    def agent_asks(self, channel: str, choice: int) -> None:
        self.host.agent_asks(channel, choice)

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
        # held actions are answered once no turn is active, late echoes included
        self.host.finish_turns()
        quiesce(self.host, self.clients)
        assert not self.host.held
        for client in self.clients:
            client.check_quiescent()
        # the session is never disposed: everyone subscribed to it agrees
        for client in self.clients:
            if SESSION in client.rec.channels:
                assert client.rec.confirmed(SESSION) == self.host.states[SESSION]
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
