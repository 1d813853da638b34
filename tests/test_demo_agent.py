"""The demo agent on the in-memory network: its script, its commands, and convergence.

Every test drives a real host and real clients (``testing.network``); the
agent's steps are played one by one, so every interleaving is the test's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.agents import DEMO_MODEL, DEMO_PROVIDER, DemoAgent, TurnPhase
from agenthost_protocol.agents import demo as demo_module
from agenthost_protocol.agents.demo import demo_root_state
from agenthost_protocol.client import (
    ClientConnection,
    Initialized,
    NotificationReceived,
    RequestFailed,
    ResponseReceived,
)
from agenthost_protocol.host import Host
from agenthost_protocol.host.sessions import chat_summary
from agenthost_protocol.reducers import reduce
from agenthost_protocol.testing.network import Link, Network
from agenthost_protocol.types.error_codes import AhpErrorCode, JsonRpcErrorCode

START = 1_767_225_600_000
STEP_MS = 10
ROOT = "ahp-root://"
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/s1"
TEXT = "Please echo this message back to me, word for word."
USER = t.MessageOrigin(kind=t.MessageKind.USER)
# the steps before the confirmation: two parts, their pieces, tool call start and ready;
# after an approval: complete, the closing part, the end (test_approved_turn... checks it)
BEFORE = 4 + len(demo_module._pieces(demo_module._reasoning(TEXT))) + len(
    demo_module._pieces(demo_module._reply(TEXT))
)
AFTER = 3


class World:
    """A host with the demo agent, two clients on one chat, and a clock the test moves."""

    def __init__(self) -> None:
        self.now = START
        self.host = Host(clock=self.clock, root=demo_root_state())
        self.agent = DemoAgent(self.host)
        self.applied: list[tuple[str, t.StateAction]] = []
        self._check_every_dispatch()
        self.net = Network(self.host)
        self.alice, self.alice_link = self.join("alice")
        self.bob, self.bob_link = self.join("bob")

    def clock(self) -> int:
        return self.now

    def _check_every_dispatch(self) -> None:
        """Fail on any server action the reducers would drop (they return the state itself)."""
        host, original = self.host, self.host.dispatch

        def dispatch(channel: str, action: t.StateAction) -> t.ActionEnvelope:
            before = host.state(channel)
            assert before is not None
            if not isinstance(action, t.RootActiveSessionsChangedAction):
                after = reduce(channel, before, action, now=self.clock)
                assert after is not before, f"{action.type} on {channel} would be a no-op"
            self.applied.append((channel, action))
            return original(channel, action)

        host.dispatch = dispatch  # type: ignore[method-assign]

    def join(self, client_id: str) -> tuple[ClientConnection, Link]:
        client = ClientConnection(client_id, clock=self.clock)
        link = self.net.connect(client)
        link.send(client.initialize(initial_subscriptions=[ROOT]))
        self.settle()
        assert isinstance(link.take_events()[0], Initialized)
        return client, link

    def settle(self) -> None:
        self.net.run_until_quiet(self.agent.handle)

    def request(self, link: Link, method: str, params: object) -> ResponseReceived | RequestFailed:
        request_id, data = link.client.request(method, params)
        link.send(data)
        self.settle()
        for event in link.take_events():
            if isinstance(event, (ResponseReceived, RequestFailed)) and event.id == request_id:
                return event
        raise AssertionError(f"{method} was not answered")

    def create_session(self, uri: str = SESSION) -> None:
        answer = self.request(self.alice_link, "createSession", t.CreateSessionParams(channel=uri))
        assert isinstance(answer, ResponseReceived), answer

    def subscribe_all(self, *channels: str) -> None:
        for client, link in ((self.alice, self.alice_link), (self.bob, self.bob_link)):
            for channel in channels:
                link.send(client.subscribe(channel))
        self.settle()

    def start_turn(self, turn_id: str = "t1", text: str = TEXT, chat: str = CHAT) -> None:
        message = t.Message(text=text, origin=USER)
        self.alice_link.send(self.alice.dispatch(chat, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z", message=message,
        )))
        self.settle()

    def step(self) -> bool:
        """Play one step of every runnable turn; whether any was played."""
        runs = self.agent.runnable()
        for run in runs:
            self.now += STEP_MS
            self.agent.step(run)
            self.settle()
        return bool(runs)

    def play(self) -> int:
        steps = 0
        while self.step():
            steps += 1
        return steps

    def confirm(self, approved: bool, turn_id: str = "t1", chat: str = CHAT) -> None:
        call_id = f"{turn_id}.echo"
        action: t.StateAction
        if approved:
            action = t.ChatToolCallApprovedAction(
                turn_id=turn_id, tool_call_id=call_id,
                confirmed=t.ToolCallConfirmationReason.USER_ACTION,
            )
        else:
            action = t.ChatToolCallDeniedAction(
                turn_id=turn_id, tool_call_id=call_id, reason=t.ToolCallCancellationReason.DENIED,
            )
        self.bob_link.send(self.bob.dispatch(chat, action))
        self.settle()

    def cancel(self, turn_id: str = "t1", chat: str = CHAT) -> None:
        self.bob_link.send(self.bob.dispatch(chat, t.ChatTurnCancelledAction(
            turn_id=turn_id, duration=5,
        )))
        self.settle()

    def chat(self, uri: str = CHAT) -> t.ChatState:
        state = self.host.state(uri)
        assert isinstance(state, t.ChatState)
        return state

    def session(self, uri: str = SESSION) -> t.SessionState:
        state = self.host.state(uri)
        assert isinstance(state, t.SessionState)
        return state

    def assert_converged(self) -> None:
        for client in (self.alice, self.bob):
            for channel in client.subscriptions:
                if not self.host.has_channel(channel):
                    continue  # removed: a real client unsubscribes on session/chatRemoved
                assert client.reconciler.pending(channel) == ()
                assert wire.dumps(client.confirmed(channel)) == wire.dumps(
                    self.host.state(channel)
                ), channel
        # the catalogue mirrors every chat (session/chatUpdated)
        for uri in self.host.channels:
            state = self.host.state(uri)
            if isinstance(state, t.SessionState):
                for entry in state.chats:
                    chat = self.host.state(entry.resource)
                    assert isinstance(chat, t.ChatState)
                    assert entry == chat_summary(chat), entry.resource


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    w.create_session()
    w.subscribe_all(SESSION, CHAT)
    yield w


def parts(chat: t.ChatState) -> tuple[t.ResponsePart, ...]:
    turn = chat.active_turn
    assert turn is not None
    return turn.response_parts


def tool_call(chat: t.ChatState) -> t.ToolCallState:
    calls = [p.tool_call for p in parts(chat) if isinstance(p, t.ToolCallResponsePart)]
    assert len(calls) == 1
    return calls[0]


# -- the root and the commands ----------------------------------------------------------


def test_root_state_lists_the_demo_agent_and_its_model() -> None:
    w = World()
    root = w.alice.confirmed(ROOT)
    assert isinstance(root, t.RootState)
    (agent,) = root.agents
    assert agent.provider == DEMO_PROVIDER
    assert agent.models == (DEMO_MODEL,)
    assert agent.capabilities is not None and agent.capabilities.multiple_chats is not None
    assert root.active_sessions == 0


def test_create_session_makes_a_ready_session_with_a_default_chat() -> None:
    w = World()
    answer = w.request(w.alice_link, "createSession", t.CreateSessionParams(
        channel=SESSION, working_directories=("file:///a", "file:///b"), progress_token="p1",
    ))
    assert isinstance(answer, ResponseReceived) and answer.result is None
    session = w.session()
    assert session.lifecycle == t.SessionLifecycle.READY
    assert session.default_chat == CHAT
    assert [c.resource for c in session.chats] == [CHAT]
    # no multipleWorkingDirectories capability: only the first one counts
    assert session.working_directories == ("file:///a",)
    root = w.bob.confirmed(ROOT)
    assert isinstance(root, t.RootState) and root.active_sessions == 1
    notes = [e for e in w.bob_link.take_events() if isinstance(e, NotificationReceived)]
    assert [n.method for n in notes] == ["root/sessionAdded", "root/progress"]
    progress = notes[1].params
    assert isinstance(progress, t.ProgressParams)
    assert progress.progress == progress.total == 1 and progress.progress_token == "p1"
    listing = w.request(w.bob_link, "listSessions", t.ListSessionsParams())
    assert isinstance(listing, ResponseReceived)
    assert isinstance(listing.result, t.ListSessionsResult)
    assert [s.resource for s in listing.result.items] == [SESSION]


def test_create_session_sets_the_active_client() -> None:
    w = World()
    active = t.SessionActiveClient(client_id="alice", tools=())
    w.request(w.alice_link, "createSession", t.CreateSessionParams(
        channel=SESSION, active_client=active,
    ))
    assert w.session().active_clients == (active,)


@pytest.mark.parametrize(("params", "code"), [
    (t.CreateSessionParams(channel=SESSION), AhpErrorCode.SESSION_ALREADY_EXISTS),
    (t.CreateSessionParams(channel="ahp-chat:/x"), JsonRpcErrorCode.INVALID_PARAMS),
    (t.CreateSessionParams(channel="ahp-session:/s2", provider="copilot"),
     AhpErrorCode.PROVIDER_NOT_FOUND),
    (t.CreateSessionParams(channel="ahp-session:/s2",
                           fork=t.SessionForkSource(session=SESSION, turn_id="t1")),
     JsonRpcErrorCode.INVALID_PARAMS),
])
def test_create_session_errors(world: World, params: t.CreateSessionParams, code: int) -> None:
    answer = world.request(world.alice_link, "createSession", params)
    assert isinstance(answer, RequestFailed) and answer.error is not None
    assert answer.error.code == code


def test_default_chat_uri_avoids_a_taken_one() -> None:
    w = World()
    w.host.add_channel("ahp-chat:/s1", t.ChatState(
        resource="ahp-chat:/s1", title="", status=t.SessionStatus.IDLE,
        modified_at="2026-01-01T00:00:00.000Z", turns=(),
    ))
    w.create_session()
    assert w.session().default_chat == "ahp-chat:/s1-2"


@pytest.mark.parametrize(("method", "params", "code"), [
    ("createTerminal", t.CreateTerminalParams(
        channel="ahp-terminal:/x", claim=t.TerminalClientClaim(client_id="alice"),
    ), JsonRpcErrorCode.METHOD_NOT_FOUND),
    ("resourceRead", t.ResourceReadParams(uri="file:///etc/passwd"),
     JsonRpcErrorCode.METHOD_NOT_FOUND),
    ("authenticate", t.AuthenticateParams(resource="https://x", token="t"),
     JsonRpcErrorCode.INVALID_PARAMS),
    ("disposeSession", t.DisposeSessionParams(channel="ahp-session:/nope"),
     AhpErrorCode.SESSION_NOT_FOUND),
    ("disposeChat", t.DisposeChatParams(channel="ahp-chat:/nope"), AhpErrorCode.NOT_FOUND),
])
def test_unsupported_and_bad_commands_get_errors(
    world: World, method: str, params: object, code: int
) -> None:
    answer = world.request(world.alice_link, method, params)
    assert isinstance(answer, RequestFailed) and answer.error is not None
    assert answer.error.code == code


def test_small_commands_are_answered(world: World) -> None:
    for method, params, result in [
        ("completions", t.CompletionsParams(channel=CHAT, text="x", offset=0),
         t.CompletionsResult(items=())),
        ("sessionConfigCompletions", t.SessionConfigCompletionsParams(property="p"),
         t.SessionConfigCompletionsResult(items=())),
        ("fetchTurns", t.FetchTurnsParams(channel=CHAT), t.FetchTurnsResult()),
    ]:
        answer = world.request(world.alice_link, method, params)
        assert isinstance(answer, ResponseReceived), (method, answer)
        assert answer.result == result
    resolved = world.request(world.alice_link, "resolveSessionConfig",
                             t.ResolveSessionConfigParams())
    assert isinstance(resolved, ResponseReceived)
    assert isinstance(resolved.result, t.ResolveSessionConfigResult)
    world.assert_converged()


def test_dispose_session_stops_its_turns(world: World) -> None:
    world.start_turn()
    world.step()
    answer = world.request(world.bob_link, "disposeSession",
                           t.DisposeSessionParams(channel=SESSION))
    assert isinstance(answer, ResponseReceived)
    assert not world.host.has_channel(SESSION) and not world.host.has_channel(CHAT)
    assert world.agent.runs == () and world.play() == 0
    root = world.alice.confirmed(ROOT)
    assert isinstance(root, t.RootState) and root.active_sessions == 0


def test_create_and_dispose_chats(world: World) -> None:
    initial = t.Message(text="hi from a new chat", origin=USER)
    answer = world.request(world.alice_link, "createChat", t.CreateChatParams(
        channel=SESSION, chat="ahp-chat:/c2", initial_message=initial,
    ))
    assert isinstance(answer, ResponseReceived)
    world.subscribe_all("ahp-chat:/c2")
    (run,) = world.agent.runs
    assert run.chat == "ahp-chat:/c2" and run.text == initial.text
    world.play()
    world.confirm(True, turn_id=run.turn_id, chat="ahp-chat:/c2")
    world.play()
    c2 = world.chat("ahp-chat:/c2")
    assert [turn.state for turn in c2.turns] == [t.TurnState.COMPLETE]
    world.assert_converged()
    # a fork of the completed turn copies it
    fork = t.ForkChatSource(chat="ahp-chat:/c2", turn_id=run.turn_id)
    answer = world.request(world.alice_link, "createChat", t.CreateChatParams(
        channel=SESSION, chat="ahp-chat:/c3", source=fork,
    ))
    assert isinstance(answer, ResponseReceived)
    assert world.chat("ahp-chat:/c3").turns == c2.turns
    answer = world.request(world.alice_link, "disposeChat",
                           t.DisposeChatParams(channel="ahp-chat:/c2"))
    assert isinstance(answer, ResponseReceived)
    assert [c.resource for c in world.session().chats] == [CHAT, "ahp-chat:/c3"]
    world.assert_converged()


# -- the script -----------------------------------------------------------------------------


def test_approved_turn_plays_the_whole_script(world: World) -> None:
    world.start_turn()
    assert world.session().title == TEXT
    assert world.chat().status == t.SessionStatus.IN_PROGRESS
    before = world.play()
    chat = world.chat()
    (run,) = world.agent.runs
    assert run.phase is TurnPhase.AWAITING_CONFIRMATION
    reasoning, reply, _call = parts(chat)
    assert isinstance(reasoning, t.ReasoningResponsePart) and "characters" in reasoning.content
    assert isinstance(reply, t.MarkdownResponsePart)
    assert reply.content.startswith("You said:\n\n> " + TEXT)
    call = tool_call(chat)
    assert isinstance(call, t.ToolCallPendingConfirmationState)
    assert chat.status == t.SessionStatus.INPUT_NEEDED
    deltas = [a for _, a in world.applied if isinstance(a, t.ChatDeltaAction)]
    reasonings = [a for _, a in world.applied if isinstance(a, t.ChatReasoningAction)]
    assert len(deltas) >= 3 and len(reasonings) >= 2
    assert before == 2 + len(deltas) + len(reasonings) + 2 == BEFORE
    world.assert_converged()

    world.confirm(True)
    after = world.play()
    assert after == AFTER
    chat = world.chat()
    assert chat.active_turn is None
    (turn,) = chat.turns
    assert turn.state == t.TurnState.COMPLETE
    assert turn.duration == (before + after) * STEP_MS
    call = next(p.tool_call for p in turn.response_parts if isinstance(p, t.ToolCallResponsePart))
    assert isinstance(call, t.ToolCallCompletedState) and call.success
    assert call.content == (t.ToolResultTextContent(text=TEXT),)
    done = turn.response_parts[-1]
    assert isinstance(done, t.MarkdownResponsePart) and done.content == demo_module.APPROVED_TEXT
    assert chat.status == t.SessionStatus.IDLE
    assert world.agent.runs == ()
    world.assert_converged()


def test_denied_turn_cancels_the_tool_call(world: World) -> None:
    world.start_turn()
    world.play()
    world.confirm(False)
    assert world.play() == 2
    (turn,) = world.chat().turns
    assert turn.state == t.TurnState.COMPLETE
    call = next(p.tool_call for p in turn.response_parts if isinstance(p, t.ToolCallResponsePart))
    assert isinstance(call, t.ToolCallCancelledState)
    assert call.reason == t.ToolCallCancellationReason.DENIED
    done = turn.response_parts[-1]
    assert isinstance(done, t.MarkdownResponsePart) and done.content == demo_module.DENIED_TEXT
    world.assert_converged()



@pytest.mark.parametrize("approved", [True, False])
@pytest.mark.parametrize("at", range(BEFORE + AFTER))
def test_cancel_at_every_step(world: World, at: int, approved: bool) -> None:
    world.start_turn()
    for _ in range(min(at, BEFORE)):
        assert world.step()
    if at >= BEFORE:
        world.confirm(approved)
        for _ in range(at - BEFORE):
            assert world.step()
    world.cancel()
    seq = world.host.server_seq
    assert world.agent.runs == ()
    assert world.play() == 0 and world.host.server_seq == seq
    chat = world.chat()
    assert chat.active_turn is None
    (turn,) = chat.turns
    if at == BEFORE + AFTER - 1 and approved is False:
        # the denied path is one step shorter: its turn had already completed
        assert turn.state == t.TurnState.COMPLETE
    else:
        assert turn.state == t.TurnState.CANCELLED
    for part in turn.response_parts:
        if isinstance(part, t.ToolCallResponsePart):
            assert isinstance(part.tool_call, (t.ToolCallCancelledState, t.ToolCallCompletedState))
    world.assert_converged()


def test_a_new_turn_replaces_the_running_one(world: World) -> None:
    world.start_turn("t1")
    world.step()
    world.start_turn("t2", text="second")
    (run,) = world.agent.runs
    assert run.turn_id == "t2"
    world.play()
    world.confirm(True, turn_id="t2")
    world.play()
    chat = world.chat()
    assert [turn.id for turn in chat.turns] == ["t2"]  # t1 was replaced, as the reducer does
    world.assert_converged()


def test_a_client_that_completes_the_pending_call_moves_the_turn_on(world: World) -> None:
    world.start_turn()
    world.play()
    result = t.ToolCallResult(success=True, past_tense_message="done by bob")
    world.bob_link.send(world.bob.dispatch(CHAT, t.ChatToolCallCompleteAction(
        turn_id="t1", tool_call_id="t1.echo", result=result,
    )))
    world.settle()
    assert world.play() == 2
    (turn,) = world.chat().turns
    assert turn.state == t.TurnState.COMPLETE
    world.assert_converged()


def test_queued_messages_start_turns(world: World) -> None:
    # queued while idle: consumed at once
    queued = t.Message(text="queued while idle", origin=USER)
    world.alice_link.send(world.alice.dispatch(CHAT, t.ChatPendingMessageSetAction(
        kind=t.PendingMessageKind.QUEUED, id="q1", message=queued,
    )))
    world.settle()
    (run,) = world.agent.runs
    assert run.text == queued.text and world.chat().queued_messages is None
    # queued during a turn: started when the turn ends
    later = t.Message(text="queued during a turn", origin=USER)
    world.alice_link.send(world.alice.dispatch(CHAT, t.ChatPendingMessageSetAction(
        kind=t.PendingMessageKind.QUEUED, id="q2", message=later,
    )))
    world.settle()
    world.play()
    world.confirm(True, turn_id=run.turn_id)
    world.play()
    (second,) = world.agent.runs
    assert second.text == later.text and second.turn_id != run.turn_id
    chat = world.chat()
    assert chat.active_turn is not None and chat.active_turn.message == later
    assert chat.queued_messages is None
    world.assert_converged()


def test_session_summary_changes_are_announced(world: World) -> None:
    world.alice_link.take_events()
    world.start_turn()
    world.play()
    changed = [e.params for e in world.bob_link.take_events()
               if isinstance(e, NotificationReceived) and e.method == "root/sessionSummaryChanged"]
    assert changed
    titles = [p.changes.title for p in changed if isinstance(p, t.SessionSummaryChangedParams)]
    assert TEXT in titles
    listing = world.request(world.bob_link, "listSessions", t.ListSessionsParams())
    assert isinstance(listing, ResponseReceived)
    assert isinstance(listing.result, t.ListSessionsResult)
    assert listing.result.items[0].title == TEXT


def test_summaries_show_a_session_waiting_for_confirmation(world: World) -> None:
    world.bob_link.take_events()
    world.start_turn()
    world.play()  # up to the tool call's confirmation
    assert world.chat().status == t.SessionStatus.INPUT_NEEDED
    changed = [e.params for e in world.bob_link.take_events()
               if isinstance(e, NotificationReceived) and e.method == "root/sessionSummaryChanged"]
    statuses = [p.changes.status for p in changed
                if isinstance(p, t.SessionSummaryChangedParams) and p.changes.status is not None]
    assert statuses[-1] == t.SessionStatus.INPUT_NEEDED, statuses
    listing = world.request(world.bob_link, "listSessions", t.ListSessionsParams())
    assert isinstance(listing, ResponseReceived)
    assert isinstance(listing.result, t.ListSessionsResult)
    assert listing.result.items[0].status == t.SessionStatus.INPUT_NEEDED
    world.confirm(True)
    world.play()
    assert world.host.session_summary(SESSION).status == t.SessionStatus.IDLE


def test_summary_aggregation_over_chats() -> None:
    from agenthost_protocol.host.sessions import summary_of

    def chat_with(uri: str, status: t.SessionStatus, modified: str) -> t.ChatState:
        return t.ChatState(resource=uri, title="", status=status, modified_at=modified,
                           turns=(), activity=f"activity of {uri}")

    session = t.SessionState(provider="demo", title="s", lifecycle=t.SessionLifecycle.READY,
                             status=t.SessionStatus.IDLE | t.SessionStatus.IS_READ,
                             active_clients=(), chats=(), default_chat="ahp-chat:/a")
    created = "2026-01-01T00:00:00.000Z"
    busy = chat_with("ahp-chat:/a", t.SessionStatus.IN_PROGRESS, "2026-01-01T00:00:01.000Z")
    idle = chat_with("ahp-chat:/b", t.SessionStatus.IDLE, "2026-01-01T00:00:09.000Z")
    # the default chat supplies the bits; IsRead stays the session's
    summary = summary_of(SESSION, session, created, [busy, idle])
    assert summary.status == t.SessionStatus.IN_PROGRESS | t.SessionStatus.IS_READ
    assert summary.activity == "activity of ahp-chat:/a"
    # InputNeeded, then Error, of any chat is promoted
    failed = chat_with("ahp-chat:/c", t.SessionStatus.ERROR, created)
    waiting = chat_with("ahp-chat:/d", t.SessionStatus.INPUT_NEEDED, created)
    summary = summary_of(SESSION, session, created, [busy, failed, waiting])
    assert summary.status == t.SessionStatus.INPUT_NEEDED | t.SessionStatus.IS_READ
    assert summary.activity == "activity of ahp-chat:/d"
    assert summary_of(SESSION, session, created, [busy, failed]).status == (
        t.SessionStatus.ERROR | t.SessionStatus.IS_READ)
    # without the default chat: the most recently modified one
    other = t.SessionState(provider="demo", title="s", lifecycle=t.SessionLifecycle.READY,
                           status=t.SessionStatus.IDLE, active_clients=(), chats=())
    assert summary_of(SESSION, other, created, [busy, idle]).status == t.SessionStatus.IDLE
    assert summary_of(SESSION, other, created, []).status == t.SessionStatus.IDLE


def test_pieces_keep_every_character() -> None:
    for text in ["", "one", "a b c d e f g h i j", "  lead and trail  ", "x\n\ny " * 200]:
        pieces = demo_module._pieces(text)
        assert "".join(pieces) == text
        assert len(pieces) <= demo_module.MAX_PIECES


def test_long_titles_are_cut() -> None:
    assert demo_module._title("\n\n  hello  \nworld") == "hello"
    assert demo_module._title("") == "Demo chat"
    long = demo_module._title("x" * 200)
    assert len(long) == demo_module.TITLE_LENGTH and long.endswith("…")
