"""Issue 19: the agent layer (``agenthost_protocol.agent``), tested in memory.

Every test but the last runs a real ``HostServer`` and a real ``AsyncClient``
over the in-memory pair (``aio.memory``); the last runs ``serve --agent
examples.reverse:agent`` and ``chat`` as a user would.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import ClassVar

import pytest

from agenthost_protocol import methods
from agenthost_protocol import types as t
from agenthost_protocol.agent import (
    Agent,
    AgentError,
    NewSession,
    Turn,
    build_agent_server,
    load_agent,
)
from agenthost_protocol.agent.hosting import ServeOptions
from agenthost_protocol.aio import AsyncClient, MemoryOpener, ServerLimits, connected_client
from agenthost_protocol.aio.client import RequestError
from agenthost_protocol.types.error_codes import AhpErrorCode
from examples.reverse import Reverse

from ._aio_hosts import run
from ._aio_peer import TIMEOUT, child_env, serving

USER = t.MessageOrigin(kind=t.MessageKind.USER)
SESSION = "ahp-session:/s"
REPO = Path(__file__).resolve().parent.parent


def clock() -> int:
    return 1_767_225_600_000


@asynccontextmanager
async def agent_client(agent: Agent, opener: MemoryOpener | None = None,
                       **options: object) -> AsyncIterator[tuple[AsyncClient, str]]:
    server, service = build_agent_server(agent, ServeOptions(limits=ServerLimits()), clock)
    await service.start()
    try:
        async with connected_client(server, opener=opener, **options) as client:  # type: ignore[arg-type]
            await client.initialize(["ahp-root://"])
            await client.create_session(SESSION)
            snapshot = await client.subscribe(SESSION)
            assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
            chat = snapshot.state.default_chat
            assert chat is not None
            await client.subscribe(chat)
            yield client, chat
    finally:
        await service.close()
        await server.close()


async def start_turn(client: AsyncClient, chat: str, text: str, turn_id: str = "t1") -> None:
    await client.dispatch(chat, t.ChatTurnStartedAction(
        turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text=text, origin=USER)))


async def until(client: AsyncClient, chat: str,
                predicate: Callable[[t.ChatState], bool]) -> t.ChatState:
    state = await client.wait_for_state(
        chat, lambda s: isinstance(s, t.ChatState) and predicate(s), timeout=TIMEOUT)
    assert isinstance(state, t.ChatState)
    return state


def pending_call(state: t.ChatState) -> t.ToolCallPendingConfirmationState | None:
    if state.active_turn is None:
        return None
    for part in state.active_turn.response_parts:
        if isinstance(part, t.ToolCallResponsePart) and isinstance(
                part.tool_call, t.ToolCallPendingConfirmationState):
            return part.tool_call
    return None


def reply(turn: t.Turn) -> str:
    return "".join(p.content for p in turn.response_parts
                   if isinstance(p, t.MarkdownResponsePart))


@pytest.mark.parametrize("approve", [True, False])
def test_the_reverse_agent_streams_and_asks(approve: bool) -> None:
    async def body() -> None:
        async with agent_client(Reverse()) as (client, chat):
            await start_turn(client, chat, "one two three four")
            state = await until(client, chat, lambda s: pending_call(s) is not None)
            assert state.status == t.SessionStatus.INPUT_NEEDED
            (summary,) = (await client.list_sessions()).items
            assert summary.status == t.SessionStatus.INPUT_NEEDED
            assert summary.title == "one two three four"
            call = pending_call(state)
            assert call is not None
            action: t.StateAction
            if approve:
                action = t.ChatToolCallApprovedAction(
                    turn_id="t1", tool_call_id=call.tool_call_id,
                    confirmed=t.ToolCallConfirmationReason.USER_ACTION)
            else:
                action = t.ChatToolCallDeniedAction(
                    turn_id="t1", tool_call_id=call.tool_call_id,
                    reason=t.ToolCallCancellationReason.DENIED)
            await client.dispatch(chat, action)
            state = await until(client, chat, lambda s: bool(s.turns))
            (turn,) = state.turns
            assert turn.state == t.TurnState.COMPLETE
            assert reply(turn).startswith("four three two one")
            assert reply(turn).endswith("Echoed." if approve else "Not echoed.")
            (summary,) = (await client.list_sessions()).items
            assert summary.status == t.SessionStatus.IDLE

    run(body())


class Failing(Agent):
    provider = "failing"

    async def turn(self, turn: Turn) -> None:
        await turn.stream("about to fail")
        if turn.text == "fail":
            raise RuntimeError("the model is down")


def test_an_exception_fails_the_turn_not_the_host(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        async with agent_client(Failing()) as (client, chat):
            await start_turn(client, chat, "fail")
            state = await until(client, chat, lambda s: bool(s.turns))
            assert state.turns[0].state == t.TurnState.ERROR
            assert state.turns[0].error is not None
            assert state.turns[0].error.message == "the model is down"
            await start_turn(client, chat, "fine", turn_id="t2")
            state = await until(client, chat, lambda s: len(s.turns) == 2)
            assert state.turns[1].state == t.TurnState.COMPLETE

    run(body())
    assert "the model is down" in caplog.text


class Slow(Agent):
    provider = "slow"
    cancelled = 0

    async def turn(self, turn: Turn) -> None:
        try:
            for n in range(1000):
                await turn.stream(f"{n} ")
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            Slow.cancelled += 1
            raise


def test_a_client_cancel_cancels_the_coroutine() -> None:
    async def body() -> None:
        async with agent_client(Slow()) as (client, chat):
            await start_turn(client, chat, "go")
            await until(client, chat, lambda s: s.active_turn is not None
                        and len(s.active_turn.response_parts) > 0)
            await client.dispatch(chat, t.ChatTurnCancelledAction(turn_id="t1", duration=1))
            state = await until(client, chat, lambda s: bool(s.turns))
            assert state.turns[0].state == t.TurnState.CANCELLED
            for _ in range(100):
                if Slow.cancelled:
                    break
                await asyncio.sleep(0.01)
            assert Slow.cancelled == 1

    run(body())


class Asking(Agent):
    provider = "asking"

    async def turn(self, turn: Turn) -> None:
        answer = await turn.ask("Which colour?")
        await turn.stream(f"you said {t.ChatInputResponseKind(answer.response).value}")


def test_ask_waits_for_the_clients_answer() -> None:
    async def body() -> None:
        async with agent_client(Asking()) as (client, chat):
            await start_turn(client, chat, "hi")
            state = await until(client, chat, lambda s: s.status == t.SessionStatus.INPUT_NEEDED)
            assert state.active_turn is not None
            request = next(p.request for p in state.active_turn.response_parts
                           if isinstance(p, t.InputRequestResponsePart))
            await client.dispatch(chat, t.ChatInputCompletedAction(
                request_id=request.id, response=t.ChatInputResponseKind.ACCEPT))
            state = await until(client, chat, lambda s: bool(s.turns))
            assert reply(state.turns[0]) == "you said accept"

    run(body())


def test_sessions_chats_and_unknown_commands() -> None:
    async def body() -> None:
        async with agent_client(Reverse()) as (client, chat):
            del chat
            root = client.state("ahp-root://")
            assert isinstance(root, t.RootState)
            assert [a.provider for a in root.agents] == ["reverse"]
            assert root.active_sessions == 1
            side = await client.create_chat(SESSION)
            assert side.startswith("ahp-chat:/")
            await client.request(methods.DISPOSE_CHAT, t.DisposeChatParams(channel=side))
            with pytest.raises(RequestError) as refused:
                await client.request(methods.CREATE_SESSION, t.CreateSessionParams(
                    channel="ahp-session:/x", provider="nobody"))
            assert refused.value.code == -32002
            with pytest.raises(RequestError) as refused:
                await client.request(methods.AUTHENTICATE, t.AuthenticateParams(
                    resource="r", token="t"))
            assert refused.value.code == -32602  # no protected resource is advertised
            with pytest.raises(RequestError) as refused:
                await client.request(methods.CREATE_TERMINAL, t.CreateTerminalParams(
                    channel="ahp-terminal:/x", claim=t.TerminalClientClaim(client_id="c")))
            assert refused.value.code == -32601
            await client.request(methods.DISPOSE_SESSION,
                                 t.DisposeSessionParams(channel=SESSION))
            assert (await client.list_sessions()).items == ()

    run(body())


def test_queued_messages_start_the_next_turn() -> None:
    async def body() -> None:
        async with agent_client(Slow()) as (client, chat):
            await start_turn(client, chat, "first")
            await until(client, chat, lambda s: s.active_turn is not None)
            await client.dispatch(chat, t.ChatPendingMessageSetAction(
                kind=t.PendingMessageKind.QUEUED, id="q1",
                message=t.Message(text="second", origin=USER)))
            await client.dispatch(chat, t.ChatTurnCancelledAction(turn_id="t1", duration=1))
            state = await until(client, chat, lambda s: s.active_turn is not None
                                and s.active_turn.message.text == "second")
            assert not state.queued_messages

    run(body())


def test_a_dropped_link_reconnects_in_memory() -> None:
    async def body() -> None:
        opener_box: list[MemoryOpener] = []
        agent = Reverse()
        server, service = build_agent_server(agent, ServeOptions(), clock)
        opener = MemoryOpener(server)
        opener_box.append(opener)
        async with connected_client(server, opener=opener, reconnect=True) as client:
            await client.initialize(["ahp-root://"])
            await client.create_session(SESSION)
            opener.link.delay = 0.01
            opener.link.drop()
            for _ in range(200):
                if len(opener.links) == 2 and client.is_tracked("ahp-root://"):
                    break
                await asyncio.sleep(0.02)
            assert len(opener.links) == 2
            assert (await client.list_sessions()).items[0].resource == SESSION
        await service.close()
        await server.close()

    run(body())


class Tooling(Agent):
    """Names its tool call, and reports how the call went."""

    provider = "tooling"
    seen: ClassVar[list[tuple[bool, bool]]] = []

    def title_for(self, message: t.Message) -> str:
        return "" if message.text == "untitled" else f"About {message.text}"

    async def turn(self, turn: Turn) -> None:
        call = await turn.tool("lookup", {"q": turn.text}, call_id="model-call-7",
                               intention="Look it up", confirm=True)
        Tooling.seen.append((call.approved, call.running))
        await call.complete("the agent's result")  # left alone unless still running
        await turn.stream("after the call")


def test_tool_calls_take_an_id_and_an_intention_and_clients_may_complete_them() -> None:
    async def body() -> None:
        Tooling.seen.clear()
        async with agent_client(Tooling()) as (client, chat):
            await start_turn(client, chat, "untitled")
            state = await until(client, chat, lambda s: pending_call(s) is not None)
            call = pending_call(state)
            assert call is not None and call.tool_call_id == "model-call-7"
            assert state.active_turn is not None
            start = next(p.tool_call for p in state.active_turn.response_parts
                         if isinstance(p, t.ToolCallResponsePart))
            assert isinstance(start, t.ToolCallPendingConfirmationState)
            assert start.intention == "Look it up"
            # the client runs the call itself: that approves it, and the agent's result is
            # not sent (the reducer would drop it)
            await client.dispatch(chat, t.ChatToolCallCompleteAction(
                turn_id="t1", tool_call_id="model-call-7", result=t.ToolCallResult(
                    success=True, past_tense_message="looked up by the client")))
            state = await until(client, chat, lambda s: bool(s.turns))
            assert Tooling.seen == [(True, False)]
            (turn,) = state.turns
            assert turn.state == t.TurnState.COMPLETE and reply(turn) == "after the call"
            done = next(p.tool_call for p in turn.response_parts
                        if isinstance(p, t.ToolCallResponsePart))
            assert isinstance(done, t.ToolCallCompletedState)
            assert done.past_tense_message == "looked up by the client"
            (summary,) = (await client.list_sessions()).items
            assert summary.title == ""  # title_for gave none
            # approved by a client: running, and the agent completes it
            await start_turn(client, chat, "cats", turn_id="t2")
            state = await until(client, chat, lambda s: pending_call(s) is not None)
            await client.dispatch(chat, t.ChatToolCallApprovedAction(
                turn_id="t2", tool_call_id="model-call-7",
                confirmed=t.ToolCallConfirmationReason.USER_ACTION))
            state = await until(client, chat, lambda s: len(s.turns) == 2)
            assert Tooling.seen[1] == (True, True)
            done = next(p.tool_call for p in state.turns[1].response_parts
                        if isinstance(p, t.ToolCallResponsePart))
            assert isinstance(done, t.ToolCallCompletedState)
            assert done.content == (t.ToolResultTextContent(text="the agent's result"),)
            (summary,) = (await client.list_sessions()).items
            assert summary.title == "About cats"

    run(body())


def test_a_truncated_chat_stops_its_turn() -> None:
    async def body() -> None:
        Slow.cancelled = 0
        async with agent_client(Slow()) as (client, chat):
            await start_turn(client, chat, "go")
            await until(client, chat, lambda s: s.active_turn is not None
                        and len(s.active_turn.response_parts) > 0)
            await client.dispatch(chat, t.ChatTruncatedAction())
            state = await until(client, chat, lambda s: s.active_turn is None)
            assert state.turns == ()
            for _ in range(100):
                if Slow.cancelled:
                    break
                await asyncio.sleep(0.01)
            assert Slow.cancelled == 1
            seq = client.confirmed(chat)
            await asyncio.sleep(0.05)  # nothing more is dispatched for the dropped turn
            assert client.confirmed(chat) == seq

    run(body())


def test_load_agent_names_what_is_wrong() -> None:
    assert isinstance(load_agent("examples.reverse:agent"), Reverse)
    assert isinstance(load_agent("examples.reverse:Reverse"), Reverse)
    for spec, words in (("examples.reverse", "module:attr"),
                        ("examples.nothing:agent", "cannot import"),
                        ("examples.reverse:nope", "has no"),
                        ("examples.reverse:asyncio", "not an Agent")):
        with pytest.raises(ValueError, match=words):
            load_agent(spec)


def test_serve_runs_the_reverse_example_for_chat(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(["--agent", "examples.reverse:agent"],
                           tmp_path / "serve.err") as (_proc, url):
            done = await asyncio.wait_for(asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "agenthost_protocol.cli", "chat", url,
                 "one two three four", "--yes"],
                capture_output=True, env=child_env(), cwd=REPO, timeout=TIMEOUT, check=False,
            ), TIMEOUT + 5)
            assert done.returncode == 0, done.stderr
            assert re.match(rb"four three two one\s", done.stdout), done.stdout

    run(body(), 60)


# -- hooks for an agent that keeps its own state (the pi runner's kind) --------------------


class Managed(Agent):
    """Sets sessions up asynchronously, keeps its chat itself, learns its models late."""

    provider = "managed"
    manages_chats = True

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.actions: list[str] = []
        self.disposed: list[str] = []
        self.cancelled: list[str] = []

    def info(self) -> t.AgentInfo:
        return t.AgentInfo(provider=self.provider, display_name="Managed", description="",
                           models=())  # one chat per session: no multiple_chats

    async def create_session(self, session: NewSession) -> None:
        if session.uri.endswith("bad"):
            raise AgentError("cannot start it", error_type="spawn")
        try:
            await self.go.wait()
        except asyncio.CancelledError:
            self.cancelled.append(session.uri)
            raise
        self.driver.set_models((t.SessionModelInfo(id="m1", provider=self.provider, name="M"),))

    async def dispose_session(self, session: str) -> None:
        self.disposed.append(session)

    def client_action(self, channel: str, action: t.StateAction) -> None:
        self.actions.append(action.type)
        if isinstance(action, t.ChatToolCallApprovedAction):  # the agent decides, not the layer
            self.driver.dispatch_actions([
                (channel, t.ChatToolCallCompleteAction(
                    turn_id=action.turn_id, tool_call_id=action.tool_call_id,
                    result=t.ToolCallResult(success=True, past_tense_message="Ran"))),
                (channel, t.ChatTurnCompleteAction(turn_id=action.turn_id, duration=5)),
            ])

    async def turn(self, turn: Turn) -> None:
        self.driver.dispatch_actions([
            (turn.chat, t.ChatToolCallStartAction(turn_id=turn.id, tool_call_id="c1",
                                                  tool_name="run", display_name="run")),
            (turn.chat, t.ChatToolCallReadyAction(turn_id=turn.id, tool_call_id="c1",
                                                  invocation_message="Run",
                                                  confirmation_title="Run it?")),
            ("ahp-chat:/gone", t.ChatTurnCompleteAction(turn_id=turn.id, duration=1)),
        ])
        while turn.active:
            await asyncio.sleep(0.01)


def test_an_agent_sets_sessions_up_keeps_its_chats_and_learns_models() -> None:
    async def body() -> None:
        agent = Managed()
        server, service = build_agent_server(agent, ServeOptions(limits=ServerLimits()), clock)
        await service.start()
        try:
            async with connected_client(server) as client:
                await client.initialize(["ahp-root://"])
                # a failing set-up fails the session with the error's type and text
                await client.create_session("ahp-session:/bad")
                await client.subscribe("ahp-session:/bad")
                failed = await client.wait_for_state(
                    "ahp-session:/bad", lambda s: isinstance(s, t.SessionState)
                    and s.lifecycle != t.SessionLifecycle.CREATING, timeout=TIMEOUT)
                assert isinstance(failed, t.SessionState) and failed.creation_error is not None
                assert (failed.creation_error.error_type, failed.creation_error.message) == (
                    "spawn", "cannot start it")
                # answered first, ready once the agent is done
                await client.create_session(SESSION)
                snapshot = await client.subscribe(SESSION)
                assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
                assert snapshot.state.lifecycle == t.SessionLifecycle.CREATING
                agent.go.set()
                ready = await client.wait_for_state(
                    SESSION, lambda s: isinstance(s, t.SessionState)
                    and s.lifecycle == t.SessionLifecycle.READY, timeout=TIMEOUT)
                assert isinstance(ready, t.SessionState) and ready.default_chat is not None
                chat = ready.default_chat
                await client.subscribe(chat)
                root = client.state("ahp-root://")
                assert isinstance(root, t.RootState)
                assert [m.id for m in root.agents[0].models] == ["m1"]
                assert root.active_sessions == 1
                with pytest.raises(RequestError) as refused:
                    await client.create_chat(SESSION)
                assert refused.value.code == -32602  # one chat per session
                # the agent's own confirmation: the layer resolves nothing, the agent ends it
                await start_turn(client, chat, "go")
                state = await until(client, chat, lambda s: pending_call(s) is not None)
                assert state.status == t.SessionStatus.INPUT_NEEDED
                await client.dispatch(chat, t.ChatToolCallApprovedAction(
                    turn_id="t1", tool_call_id="c1",
                    confirmed=t.ToolCallConfirmationReason.USER_ACTION))
                state = await until(client, chat, lambda s: bool(s.turns))
                assert state.turns[0].state == t.TurnState.COMPLETE
                assert t.ActionType.CHAT_TOOL_CALL_CONFIRMED in agent.actions
                (summary,) = (await client.list_sessions()).items
                assert summary.status == t.SessionStatus.IDLE
                # queued messages are the agent's too
                await client.dispatch(chat, t.ChatPendingMessageSetAction(
                    kind=t.PendingMessageKind.QUEUED, id="q1",
                    message=t.Message(text="later", origin=USER)))
                await asyncio.sleep(0.05)
                state = await until(client, chat, lambda s: True)
                assert state.active_turn is None and len(state.queued_messages or ()) == 1
                # disposal: the async hook; a session still being set up is cancelled
                await client.dispose_session(SESSION)
                agent.go.clear()
                await client.create_session("ahp-session:/slow")
                await client.dispose_session("ahp-session:/slow")
                for _ in range(100):
                    if agent.disposed and agent.cancelled:
                        break
                    await asyncio.sleep(0.01)
                assert agent.disposed == [SESSION]
                assert agent.cancelled == ["ahp-session:/slow"]
        finally:
            await service.close()
            await server.close()

    run(body())


class ReadyFirst(Agent):
    """Sets sessions up before ``createSession`` is answered (the ACP runner's kind)."""

    provider = "first"
    answers_when_ready = True

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.taking = True

    def refuse_session(self, session: NewSession) -> str | None:
        return None if self.taking else "not taking sessions"

    async def create_session(self, session: NewSession) -> t.SessionConfigState | None:
        await self.go.wait()
        if session.uri.endswith("bad"):
            raise AgentError("no session for you", error_type="agent:new")
        self.driver.set_info(t.AgentInfo(provider=self.provider, display_name="Learnt",
                                         description="named at run time", models=()))
        return t.SessionConfigState(schema=t.SessionConfigSchema(properties={}),
                                    values={"mode": "ask"})

    async def turn(self, turn: Turn) -> None:
        await turn.stream("ok")


def test_an_agent_may_answer_create_session_once_ready_or_refuse_it() -> None:
    async def body() -> None:
        agent = ReadyFirst()
        server, service = build_agent_server(agent, ServeOptions(limits=ServerLimits()), clock)
        await service.start()
        try:
            async with connected_client(server) as client:
                await client.initialize(["ahp-root://"])
                creating = asyncio.ensure_future(client.create_session(SESSION))
                await asyncio.sleep(0.05)
                assert not creating.done() and not server.host.has_channel(SESSION)
                with pytest.raises(RequestError) as taken:  # its URI is taken meanwhile
                    await client.create_session(SESSION)
                assert taken.value.code == AhpErrorCode.SESSION_ALREADY_EXISTS
                agent.go.set()
                assert await asyncio.wait_for(creating, TIMEOUT) == SESSION
                # answered: ready, with its chat and the config the agent returned
                state = server.host.state(SESSION)
                assert isinstance(state, t.SessionState)
                assert state.lifecycle == t.SessionLifecycle.READY
                assert state.default_chat is not None
                assert server.host.has_channel(state.default_chat)
                assert state.config is not None and state.config.values == {"mode": "ask"}
                root = server.host.state("ahp-root://")
                assert isinstance(root, t.RootState)
                assert [(a.provider, a.display_name) for a in root.agents] == [
                    ("first", "Learnt")]
                # a failed set-up: created failed, and answered
                await client.create_session("ahp-session:/bad")
                failed = server.host.state("ahp-session:/bad")
                assert isinstance(failed, t.SessionState)
                assert failed.creation_error == t.ErrorInfo(error_type="agent:new",
                                                            message="no session for you")
                # refused: an error answer, no session
                agent.taking = False
                with pytest.raises(RequestError) as refused:
                    await client.create_session("ahp-session:/no")
                assert refused.value.code == -32603
                assert "not taking sessions" in str(refused.value)
                assert not server.host.has_channel("ahp-session:/no")
                # one being set up when the host closes is answered, not left hanging
                agent.taking, agent.go = True, asyncio.Event()
                pending = asyncio.ensure_future(client.create_session("ahp-session:/late"))
                await asyncio.sleep(0.05)
                await service.close()
                with pytest.raises(RequestError):
                    await asyncio.wait_for(pending, TIMEOUT)
        finally:
            await service.close()
            await server.close()

    run(body())
