"""The demo agent over the in-memory host-client pair: its script, its commands, convergence.

Every test serves the demo on the agent layer (``build_agent_server``) to
two real ``AsyncClient``\\ s, alice and bob, connected in memory
(``connected_client``).  The demo pauses before each step of its script;
here each pause is a gate the test opens (:class:`SteppedDemo`), and the
test's clock moves only when it opens one, so that the steps, their count
and their timestamps are the test's, every run the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agenthost_protocol import methods, wire
from agenthost_protocol import types as t
from agenthost_protocol.agent import Turn, build_agent_server
from agenthost_protocol.agent import demo as demo_module
from agenthost_protocol.agent.demo import DEMO_MODEL, DEMO_PROVIDER, DemoAgent
from agenthost_protocol.agent.hosting import ServeOptions
from agenthost_protocol.aio import AsyncClient, connected_client
from agenthost_protocol.aio.client import RequestError
from agenthost_protocol.aio.client_errors import ClientTimeout
from agenthost_protocol.aio.client_events import EventStream
from agenthost_protocol.client import NotificationReceived
from agenthost_protocol.host.sessions import chat_summary
from agenthost_protocol.reducers import reduce
from agenthost_protocol.types.error_codes import AhpErrorCode, JsonRpcErrorCode

from ._aio_hosts import run

START = 1_767_225_600_000
STEP_MS = 10
TIMEOUT = 10.0
ROOT = "ahp-root://"
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/s1"
TEXT = "Please echo this message back to me, word for word."
USER = t.MessageOrigin(kind=t.MessageKind.USER)
# the steps before the confirmation: the reasoning's pieces, the reply's, the tool call;
# after an approval: complete, the closing part, the end (test_approved_turn... checks it)
BEFORE = len(demo_module._pieces(demo_module._reasoning(TEXT))) + len(
    demo_module._pieces(demo_module._reply(TEXT))
) + 1
AFTER = 3


class SteppedDemo(DemoAgent):
    """The demo whose pauses are gates the test opens; it knows the turns it plays."""

    def __init__(self) -> None:
        super().__init__(step_delay=0)
        self.playing: dict[asyncio.Task[Any], Turn] = {}
        self.gates: dict[asyncio.Task[Any], asyncio.Future[None]] = {}

    async def turn(self, turn: Turn) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.playing[task] = turn
        try:
            await super().turn(turn)
        finally:
            del self.playing[task]

    async def pause(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.gates[task] = gate
        try:
            await gate
        finally:
            del self.gates[task]

    def turns(self) -> list[Turn]:
        return list(self.playing.values())


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


class World:
    """The demo served in memory, two clients on it, and a clock the test moves."""

    def __init__(self) -> None:
        self.now = START
        self.demo = SteppedDemo()
        self.server, self.service = build_agent_server(self.demo, ServeOptions(), self.clock)
        self.host = self.server.host
        self.applied: list[tuple[str, t.StateAction]] = []
        self.noops: list[str] = []
        self._check_every_dispatch()
        self.clients: list[AsyncClient] = []
        self.streams: dict[str, EventStream] = {}

    def clock(self) -> int:
        return self.now

    def _check_every_dispatch(self) -> None:
        """Note any server action the reducers would drop (they return the state itself)."""
        host, original = self.host, self.host.dispatch

        def dispatch(channel: str, action: t.StateAction) -> t.ActionEnvelope:
            if not host.has_channel(channel):
                self.noops.append(f"{action.type} on the missing {channel}")
            elif not isinstance(action, t.RootActiveSessionsChangedAction):
                before = host.state(channel)
                assert before is not None
                if reduce(channel, before, action, now=self.clock) is before:
                    self.noops.append(f"{action.type} on {channel} is a no-op")
            self.applied.append((channel, action))
            return original(channel, action)

        host.dispatch = dispatch  # type: ignore[method-assign]

    @property
    def alice(self) -> AsyncClient:
        return self.clients[0]

    @property
    def bob(self) -> AsyncClient:
        return self.clients[1]

    # -- waiting --------------------------------------------------------------------------

    def awaiting_confirmation(self, turn: Turn) -> bool:
        chat = self.host.state(turn.chat) if self.host.has_channel(turn.chat) else None
        return (isinstance(chat, t.ChatState) and chat.active_turn is not None
                and chat.active_turn.id == turn.id and any(
                    isinstance(p, t.ToolCallResponsePart)
                    and isinstance(p.tool_call, t.ToolCallPendingConfirmationState)
                    for p in chat.active_turn.response_parts))

    def _agent_at_rest(self) -> bool:
        """Every turn the driver plays waits at a closed gate or for a confirmation."""
        if self.service.driver.playing != len(self.demo.playing):
            return False  # a task not started yet, or one cancelled and not yet ended
        for task, turn in self.demo.playing.items():
            gate = self.demo.gates.get(task)
            if gate is not None and gate.done():
                return False  # opened (or cancelled): the turn goes on
            if gate is None and not self.awaiting_confirmation(turn):
                return False
        return True

    async def settle(self) -> None:
        """Until the agent is at rest and both clients got everything the host sent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while True:
            while not self._agent_at_rest():
                assert loop.time() < deadline, "the demo did not come to rest"
                await asyncio.sleep(0)
            seq = self.host.server_seq
            for client in self.clients:
                await client.ping()  # answered after everything the host queued before it
            if self._agent_at_rest() and self.host.server_seq == seq:
                return
            assert loop.time() < deadline, "the world did not settle"

    async def step(self) -> bool:
        """Play one step of every paused turn; whether any was played."""
        gates = [gate for gate in self.demo.gates.values() if not gate.done()]
        for gate in gates:
            self.now += STEP_MS
            gate.set_result(None)
        await self.settle()
        return bool(gates)

    async def play(self) -> int:
        steps = 0
        while await self.step():
            steps += 1
        return steps

    # -- what the clients do -------------------------------------------------------------

    async def create_session(self, uri: str = SESSION) -> None:
        await self.alice.create_session(uri)
        await self.settle()

    async def subscribe_all(self, *channels: str) -> None:
        for client in self.clients:
            for channel in channels:
                await client.subscribe(channel)
        await self.settle()

    async def refused(self, client: AsyncClient, method: methods.Method[Any, Any],
                      params: object) -> int:
        with pytest.raises(RequestError) as refused:
            await client.request(method, params)
        await self.settle()
        return refused.value.code

    async def start_turn(self, turn_id: str = "t1", text: str = TEXT, chat: str = CHAT) -> None:
        await self.alice.dispatch(chat, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=text, origin=USER),
        ))
        await self.settle()

    async def queue(self, queued_id: str, text: str, chat: str = CHAT) -> t.Message:
        message = t.Message(text=text, origin=USER)
        await self.alice.dispatch(chat, t.ChatPendingMessageSetAction(
            kind=t.PendingMessageKind.QUEUED, id=queued_id, message=message,
        ))
        await self.settle()
        return message

    async def confirm(self, approved: bool, turn_id: str = "t1", chat: str = CHAT) -> None:
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
        await self.bob.dispatch(chat, action)
        await self.settle()

    async def cancel(self, turn_id: str = "t1", chat: str = CHAT) -> None:
        await self.bob.dispatch(chat, t.ChatTurnCancelledAction(turn_id=turn_id, duration=5))
        await self.settle()

    async def notifications(self, client: str, method: str | None = None
                            ) -> list[NotificationReceived]:
        """The notifications ``client`` got since the last call (or since it joined)."""
        stream = self.streams[client]
        found: list[NotificationReceived] = []
        while True:
            try:
                event = await stream.next(0)
            except ClientTimeout:
                return found
            if isinstance(event, NotificationReceived) and method in (None, event.method):
                found.append(event)

    # -- reading the host ------------------------------------------------------------------

    def chat(self, uri: str = CHAT) -> t.ChatState:
        state = self.host.state(uri)
        assert isinstance(state, t.ChatState)
        return state

    def session(self, uri: str = SESSION) -> t.SessionState:
        state = self.host.state(uri)
        assert isinstance(state, t.SessionState)
        return state

    def assert_at_rest_with_nothing_playing(self) -> None:
        assert self.demo.playing == {} and self.service.driver.playing == 0

    def assert_converged(self) -> None:
        for client in self.clients:
            for channel in client.connection.subscriptions:
                if not self.host.has_channel(channel):
                    continue  # removed: a real client unsubscribes on session/chatRemoved
                assert client.connection.reconciler.pending(channel) == ()
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


@asynccontextmanager
async def world(*, session: bool = True) -> AsyncIterator[World]:
    """A :class:`World` with alice and bob initialized (on the root); with ``session``,
    alice created :data:`SESSION` and both follow it and its chat."""
    w = World()
    errors = _Errors()
    logging.getLogger("agenthost_protocol").addHandler(errors)
    await w.service.start()
    try:
        async with connected_client(w.server, client_id="alice", clock=w.clock,
                                    chat_view_turns=None) as alice, \
                connected_client(w.server, client_id="bob", clock=w.clock,
                                 chat_view_turns=None) as bob:
            for name, client in (("alice", alice), ("bob", bob)):
                await client.initialize([ROOT])
                w.clients.append(client)
                w.streams[name] = client.events()
            if session:
                await w.create_session()
                await w.subscribe_all(SESSION, CHAT)
            yield w
            assert w.noops == []
    finally:
        await w.service.close()
        await w.server.close()
        logging.getLogger("agenthost_protocol").removeHandler(errors)
    assert errors.records == []  # no turn failed, no handler raised


def scenario(body: Callable[[World], Awaitable[None]], *, session: bool = True) -> None:
    async def main() -> None:
        async with world(session=session) as w:
            await body(w)

    run(main())


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
    async def body(w: World) -> None:
        root = w.alice.confirmed(ROOT)
        assert isinstance(root, t.RootState)
        (agent,) = root.agents
        assert agent.provider == DEMO_PROVIDER
        assert agent.models == (DEMO_MODEL,)
        assert agent.capabilities is not None and agent.capabilities.multiple_chats is not None
        assert root.active_sessions == 0

    scenario(body, session=False)


def test_create_session_makes_a_ready_session_with_a_default_chat() -> None:
    async def body(w: World) -> None:
        await w.alice.request(methods.CREATE_SESSION, t.CreateSessionParams(
            channel=SESSION, working_directories=("file:///a", "file:///b"), progress_token="p1",
        ))  # answered null (the request's result type is None)
        await w.settle()
        session = w.session()
        assert session.lifecycle == t.SessionLifecycle.READY
        assert session.default_chat == CHAT
        assert [c.resource for c in session.chats] == [CHAT]
        # no multipleWorkingDirectories capability: only the first one counts
        assert session.working_directories == ("file:///a",)
        root = w.bob.confirmed(ROOT)
        assert isinstance(root, t.RootState) and root.active_sessions == 1
        notes = await w.notifications("bob")
        assert [n.method for n in notes] == ["root/sessionAdded", "root/progress"]
        progress = notes[1].params
        assert isinstance(progress, t.ProgressParams)
        assert progress.progress == progress.total == 1 and progress.progress_token == "p1"
        listing = await w.bob.list_sessions()
        assert [s.resource for s in listing.items] == [SESSION]

    scenario(body, session=False)


def test_create_session_sets_the_active_client() -> None:
    async def body(w: World) -> None:
        active = t.SessionActiveClient(client_id="alice", tools=())
        await w.alice.create_session(SESSION, active_client=active)
        await w.settle()
        assert w.session().active_clients == (active,)

    scenario(body, session=False)


@pytest.mark.parametrize(("params", "code"), [
    (t.CreateSessionParams(channel=SESSION), AhpErrorCode.SESSION_ALREADY_EXISTS),
    (t.CreateSessionParams(channel="ahp-chat:/x"), JsonRpcErrorCode.INVALID_PARAMS),
    (t.CreateSessionParams(channel="ahp-session:/s2", provider="copilot"),
     AhpErrorCode.PROVIDER_NOT_FOUND),
    (t.CreateSessionParams(channel="ahp-session:/s2",
                           fork=t.SessionForkSource(session=SESSION, turn_id="t1")),
     JsonRpcErrorCode.INVALID_PARAMS),
])
def test_create_session_errors(params: t.CreateSessionParams, code: int) -> None:
    async def body(w: World) -> None:
        assert await w.refused(w.alice, methods.CREATE_SESSION, params) == code
        w.assert_converged()

    scenario(body)


def test_default_chat_uri_avoids_a_taken_one() -> None:
    async def body(w: World) -> None:
        w.host.add_channel("ahp-chat:/s1", t.ChatState(
            resource="ahp-chat:/s1", title="", status=t.SessionStatus.IDLE,
            modified_at="2026-01-01T00:00:00.000Z", turns=(),
        ))
        await w.create_session()
        assert w.session().default_chat == "ahp-chat:/s1-2"

    scenario(body, session=False)


@pytest.mark.parametrize(("method", "params", "code"), [
    (methods.CREATE_TERMINAL, t.CreateTerminalParams(
        channel="ahp-terminal:/x", claim=t.TerminalClientClaim(client_id="alice"),
    ), JsonRpcErrorCode.METHOD_NOT_FOUND),
    (methods.RESOURCE_READ, t.ResourceReadParams(uri="file:///etc/passwd"),
     JsonRpcErrorCode.METHOD_NOT_FOUND),
    (methods.AUTHENTICATE, t.AuthenticateParams(resource="https://x", token="t"),
     JsonRpcErrorCode.INVALID_PARAMS),
    (methods.DISPOSE_SESSION, t.DisposeSessionParams(channel="ahp-session:/nope"),
     AhpErrorCode.SESSION_NOT_FOUND),
    (methods.DISPOSE_CHAT, t.DisposeChatParams(channel="ahp-chat:/nope"),
     AhpErrorCode.NOT_FOUND),
])
def test_unsupported_and_bad_commands_get_errors(
    method: methods.Method[Any, Any], params: object, code: int
) -> None:
    async def body(w: World) -> None:
        assert await w.refused(w.alice, method, params) == code

    scenario(body)


def test_small_commands_are_answered() -> None:
    async def body(w: World) -> None:
        assert await w.alice.request(methods.COMPLETIONS, t.CompletionsParams(
            channel=CHAT, text="x", offset=0)) == t.CompletionsResult(items=())
        assert await w.alice.request(
            methods.SESSION_CONFIG_COMPLETIONS, t.SessionConfigCompletionsParams(property="p"),
        ) == t.SessionConfigCompletionsResult(items=())
        assert await w.alice.request(methods.FETCH_TURNS, t.FetchTurnsParams(
            channel=CHAT)) == t.FetchTurnsResult()
        resolved = await w.alice.request(methods.RESOLVE_SESSION_CONFIG,
                                         t.ResolveSessionConfigParams())
        assert isinstance(resolved, t.ResolveSessionConfigResult)
        await w.settle()
        w.assert_converged()

    scenario(body)


def test_dispose_session_stops_its_turns() -> None:
    async def body(w: World) -> None:
        await w.start_turn()
        await w.step()
        await w.bob.dispose_session(SESSION)
        await w.settle()
        assert not w.host.has_channel(SESSION) and not w.host.has_channel(CHAT)
        w.assert_at_rest_with_nothing_playing()
        assert await w.play() == 0
        root = w.alice.confirmed(ROOT)
        assert isinstance(root, t.RootState) and root.active_sessions == 0

    scenario(body)


def test_create_and_dispose_chats() -> None:
    async def body(w: World) -> None:
        initial = t.Message(text="hi from a new chat", origin=USER)
        await w.alice.create_chat(SESSION, "ahp-chat:/c2", initial_message=initial)
        await w.settle()
        await w.subscribe_all("ahp-chat:/c2")
        (turn,) = w.demo.turns()
        assert turn.chat == "ahp-chat:/c2" and turn.text == initial.text
        await w.play()
        await w.confirm(True, turn_id=turn.id, chat="ahp-chat:/c2")
        await w.play()
        c2 = w.chat("ahp-chat:/c2")
        assert [done.state for done in c2.turns] == [t.TurnState.COMPLETE]
        w.assert_converged()
        # a fork of the completed turn copies it
        fork = t.ForkChatSource(chat="ahp-chat:/c2", turn_id=turn.id)
        await w.alice.create_chat(SESSION, "ahp-chat:/c3", source=fork)
        await w.settle()
        assert w.chat("ahp-chat:/c3").turns == c2.turns
        await w.alice.dispose_chat("ahp-chat:/c2")
        await w.settle()
        assert [c.resource for c in w.session().chats] == [CHAT, "ahp-chat:/c3"]
        w.assert_converged()

    scenario(body)


# -- the script -----------------------------------------------------------------------------


def test_approved_turn_plays_the_whole_script() -> None:
    async def body(w: World) -> None:
        await w.start_turn()
        assert w.session().title == TEXT
        assert w.chat().status == t.SessionStatus.IN_PROGRESS
        before = await w.play()
        chat = w.chat()
        (turn,) = w.demo.turns()
        assert w.awaiting_confirmation(turn)  # and at no gate: play() found none
        reasoning, reply, _call = parts(chat)
        assert isinstance(reasoning, t.ReasoningResponsePart) and "characters" in reasoning.content
        assert reasoning.content == demo_module._reasoning(TEXT)
        assert isinstance(reply, t.MarkdownResponsePart)
        assert reply.content.startswith("You said:\n\n> " + TEXT)
        assert reply.content == demo_module._reply(TEXT)
        call = tool_call(chat)
        assert isinstance(call, t.ToolCallPendingConfirmationState)
        assert call.tool_call_id == "t1.echo" and call.tool_name == "echo"
        assert call.confirmation_title == "Run the echo tool?"
        assert chat.status == t.SessionStatus.INPUT_NEEDED
        deltas = [a for _, a in w.applied if isinstance(a, t.ChatDeltaAction)]
        reasonings = [a for _, a in w.applied if isinstance(a, t.ChatReasoningAction)]
        assert len(deltas) >= 3 and len(reasonings) >= 2
        assert before == len(deltas) + len(reasonings) + 1 == BEFORE
        w.assert_converged()

        await w.confirm(True)
        after = await w.play()
        assert after == AFTER
        chat = w.chat()
        assert chat.active_turn is None
        (done,) = chat.turns
        assert done.state == t.TurnState.COMPLETE
        assert done.duration == (before + after) * STEP_MS
        result = next(p.tool_call for p in done.response_parts
                      if isinstance(p, t.ToolCallResponsePart))
        assert isinstance(result, t.ToolCallCompletedState) and result.success
        assert result.content == (t.ToolResultTextContent(text=TEXT),)
        closing = done.response_parts[-1]
        assert isinstance(closing, t.MarkdownResponsePart)
        assert closing.content == demo_module.APPROVED_TEXT
        assert chat.status == t.SessionStatus.IDLE
        w.assert_at_rest_with_nothing_playing()
        w.assert_converged()

    scenario(body)


def test_denied_turn_cancels_the_tool_call() -> None:
    async def body(w: World) -> None:
        await w.start_turn()
        await w.play()
        await w.confirm(False)
        assert await w.play() == 2
        (turn,) = w.chat().turns
        assert turn.state == t.TurnState.COMPLETE
        call = next(p.tool_call for p in turn.response_parts
                    if isinstance(p, t.ToolCallResponsePart))
        assert isinstance(call, t.ToolCallCancelledState)
        assert call.reason == t.ToolCallCancellationReason.DENIED
        done = turn.response_parts[-1]
        assert isinstance(done, t.MarkdownResponsePart) and done.content == demo_module.DENIED_TEXT
        w.assert_converged()

    scenario(body)


@pytest.mark.parametrize("approved", [True, False])
@pytest.mark.parametrize("at", range(BEFORE + AFTER))
def test_cancel_at_every_step(at: int, approved: bool) -> None:
    async def body(w: World) -> None:
        await w.start_turn()
        for _ in range(min(at, BEFORE)):
            assert await w.step()
        if at >= BEFORE:
            await w.confirm(approved)
            for _ in range(at - BEFORE):
                assert await w.step()
        await w.cancel()
        seq = w.host.server_seq
        w.assert_at_rest_with_nothing_playing()
        assert await w.play() == 0 and w.host.server_seq == seq
        chat = w.chat()
        assert chat.active_turn is None
        (turn,) = chat.turns
        if at == BEFORE + AFTER - 1 and approved is False:
            # the denied path is one step shorter: its turn had already completed
            assert turn.state == t.TurnState.COMPLETE
        else:
            assert turn.state == t.TurnState.CANCELLED
        for part in turn.response_parts:
            if isinstance(part, t.ToolCallResponsePart):
                assert isinstance(part.tool_call,
                                  (t.ToolCallCancelledState, t.ToolCallCompletedState))
        w.assert_converged()

    scenario(body)


def test_a_new_turn_replaces_the_running_one() -> None:
    async def body(w: World) -> None:
        await w.start_turn("t1")
        await w.step()
        await w.start_turn("t2", text="second")
        (turn,) = w.demo.turns()
        assert turn.id == "t2"
        await w.play()
        await w.confirm(True, turn_id="t2")
        await w.play()
        chat = w.chat()
        assert [done.id for done in chat.turns] == ["t2"]  # t1 was replaced, as the reducer does
        w.assert_converged()

    scenario(body)


def test_a_client_that_completes_the_pending_call_moves_the_turn_on() -> None:
    async def body(w: World) -> None:
        await w.start_turn()
        await w.play()
        result = t.ToolCallResult(success=True, past_tense_message="done by bob")
        await w.bob.dispatch(CHAT, t.ChatToolCallCompleteAction(
            turn_id="t1", tool_call_id="t1.echo", result=result,
        ))
        await w.settle()
        assert await w.play() == 2
        (turn,) = w.chat().turns
        assert turn.state == t.TurnState.COMPLETE
        call = next(p.tool_call for p in turn.response_parts
                    if isinstance(p, t.ToolCallResponsePart))
        assert isinstance(call, t.ToolCallCompletedState)
        assert call.past_tense_message == "done by bob"  # bob's result, not the agent's
        done = turn.response_parts[-1]
        assert isinstance(done, t.MarkdownResponsePart)
        assert done.content == demo_module.APPROVED_TEXT
        w.assert_converged()

    scenario(body)


def test_queued_messages_start_turns() -> None:
    async def body(w: World) -> None:
        # queued while idle: consumed at once
        queued = await w.queue("q1", "queued while idle")
        (turn,) = w.demo.turns()
        assert turn.text == queued.text and w.chat().queued_messages is None
        # queued during a turn: started when the turn ends
        later = await w.queue("q2", "queued during a turn")
        await w.play()
        await w.confirm(True, turn_id=turn.id)
        await w.play()
        (second,) = w.demo.turns()
        assert second.text == later.text and second.id != turn.id
        chat = w.chat()
        assert chat.active_turn is not None and chat.active_turn.message == later
        assert chat.queued_messages is None
        w.assert_converged()

    scenario(body)


def test_session_summary_changes_are_announced() -> None:
    async def body(w: World) -> None:
        await w.start_turn()
        await w.play()
        changed = [n.params for n in await w.notifications("bob", "root/sessionSummaryChanged")]
        assert changed
        titles = [p.changes.title for p in changed if isinstance(p, t.SessionSummaryChangedParams)]
        assert TEXT in titles
        listing = await w.bob.list_sessions()
        assert listing.items[0].title == TEXT

    scenario(body)


def test_summaries_show_a_session_waiting_for_confirmation() -> None:
    async def body(w: World) -> None:
        await w.notifications("bob")
        await w.start_turn()
        await w.play()  # up to the tool call's confirmation
        assert w.chat().status == t.SessionStatus.INPUT_NEEDED
        changed = [n.params for n in await w.notifications("bob", "root/sessionSummaryChanged")]
        statuses = [p.changes.status for p in changed
                    if isinstance(p, t.SessionSummaryChangedParams)
                    and p.changes.status is not None]
        assert statuses[-1] == t.SessionStatus.INPUT_NEEDED, statuses
        listing = await w.bob.list_sessions()
        assert listing.items[0].status == t.SessionStatus.INPUT_NEEDED
        await w.confirm(True)
        await w.play()
        assert w.host.session_summary(SESSION).status == t.SessionStatus.IDLE

    scenario(body)


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



# -- the pacing and the pure pieces -----------------------------------------------------------


def test_the_demo_paces_its_steps_by_step_delay() -> None:
    async def body() -> None:
        agent = DemoAgent(step_delay=0.02)
        server, service = build_agent_server(agent, ServeOptions(), lambda: START)
        try:
            async with connected_client(server, chat_view_turns=None) as client:
                await client.initialize([ROOT])
                await client.create_session(SESSION)
                await client.subscribe(CHAT)
                loop = asyncio.get_running_loop()
                began = loop.time()
                await client.dispatch(CHAT, t.ChatTurnStartedAction(
                    turn_id="t1", started_at="2026-01-01T00:00:00.000Z",
                    message=t.Message(text=TEXT, origin=USER)))
                await client.wait_for_state(CHAT, lambda s: isinstance(s, t.ChatState) and (
                    s.status == t.SessionStatus.INPUT_NEEDED), confirmed=True, timeout=TIMEOUT)
                assert loop.time() - began >= BEFORE * 0.02 * 0.9
        finally:
            await service.close()
            await server.close()
    run(body())
    with pytest.raises(ValueError, match="negative"):
        DemoAgent(step_delay=-1)


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
