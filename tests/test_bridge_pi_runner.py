"""The pi runner end to end: a scripted stand-in process behind a real host.

The stand-in (``test_bridge_pi_standin.py``) speaks pi's RPC frames on
stdio; the runner spawns it per session and connects it to a
:class:`~agenthost_protocol.aio.HostServer`; a client drives the host over
an in-process connection with raw JSON-RPC.  Each test runs its own event
loop under a time bound and closes the runner, so no process is left behind.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.agent.pi_runner import PiAgentCommand, PiAgentRunner, pi_root_state
from agenthost_protocol.aio.server import HostServer
from agenthost_protocol.bridges.pi import PiDialect
from agenthost_protocol.host import Host

from ._json_client import JsonClient

STANDIN = str(Path(__file__).with_name("test_bridge_pi_standin.py"))
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/s1"


def run(coro: Coroutine[Any, Any, None], timeout: float = 20.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


class World(JsonClient):
    timeout = 10.0

    def __init__(self, command: PiAgentCommand, dialect: PiDialect = PiDialect.PI) -> None:
        super().__init__(HostServer(Host(
            clock=lambda: 1_767_225_600_000,
            server_info=t.Implementation(name="pi-test", version="1"),
            root=pi_root_state(dialect=dialect))))
        self.runner = PiAgentRunner(self.server, command, dialect=dialect, idle_tick=0.05,
                                    start_timeout=10.0, close_timeout=2.0)

    def chat(self, uri: str = CHAT) -> t.ChatState:
        return super().chat(uri)

    def session(self, uri: str = SESSION) -> t.SessionState:
        return super().session(uri)

    async def start(self) -> None:
        await self.request("initialize", {"protocolVersions": ["0.7.0"], "clientId": "ide"})
        assert await self.request("createSession", {"channel": SESSION, "provider": "pi"}) is None
        await self.until(lambda: self.session().lifecycle != "creating")

    async def turn(self, turn_id: str, text: str) -> None:
        self.dispatch(CHAT, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=text, origin=t.MessageOrigin(kind=t.MessageKind.USER))))
        await self.until(lambda: (self.chat().active_turn or t.ActiveTurn(
            id="", started_at="", message=t.Message(text="", origin=t.MessageOrigin(
                kind="user")), response_parts=())).id != turn_id)


def texts(turn: t.Turn) -> str:
    return "".join(p.content for p in turn.response_parts if isinstance(p, t.MarkdownResponsePart))


@pytest.mark.parametrize("dialect", [PiDialect.PI, PiDialect.XCSH])
def test_the_runner_serves_a_stand_in_agent(dialect: PiDialect) -> None:
    args = (STANDIN, "--xcsh") if dialect is PiDialect.XCSH else (STANDIN,)
    world = World(PiAgentCommand(command=sys.executable, args=args, inherit_stderr=False),
                  dialect)

    async def scenario() -> None:
        try:
            await world.start()
            assert world.session().lifecycle == "ready"
            # xcsh is ready at its "ready" frame, maybe before get_state names the session
            await world.until(lambda: world.session().title == "Stand-in session")

            def models() -> list[str]:
                root = world.host.state("ahp-root://")
                assert isinstance(root, t.RootState)
                return [m.id for m in root.agents[0].models]

            await world.until(lambda: models() == ["standin/echo"])
            [process] = world.runner.processes
            # a turn with a tool call
            await world.turn("t1", "run a tool")
            first = world.chat().turns[0]
            assert first.state == "complete" and texts(first) == "You said: run a toolDone."
            [call] = [p.tool_call for p in first.response_parts
                      if isinstance(p, t.ToolCallResponsePart)]
            assert isinstance(call, t.ToolCallCompletedState) and call.success
            # an extension dialog answered by the client
            world.dispatch(CHAT, t.ChatTurnStartedAction(
                turn_id="t2", started_at="2026-01-01T00:00:01.000Z",
                message=t.Message(text="please confirm", origin=t.MessageOrigin(kind="user"))))
            await world.until(lambda: world.chat().active_turn is not None and any(
                isinstance(p, t.InputRequestResponsePart)
                for p in world.chat().active_turn.response_parts))  # type: ignore[union-attr]
            active = world.chat().active_turn
            assert active is not None
            [request] = [p.request for p in active.response_parts
                         if isinstance(p, t.InputRequestResponsePart)]
            world.dispatch(CHAT, t.ChatInputCompletedAction(
                request_id=request.id, response="accept", answers={"answer": t.ChatInputAnswered(
                    state=t.ChatInputAnswerState.SUBMITTED,
                    value=t.ChatInputBooleanAnswerValue(value=True))}))
            await world.until(lambda: len(world.chat().turns) == 2)
            assert texts(world.chat().turns[1]) == "You said: please confirm (confirmed=True)"
            # cancelling a run: abort
            world.dispatch(CHAT, t.ChatTurnStartedAction(
                turn_id="t3", started_at="2026-01-01T00:00:02.000Z",
                message=t.Message(text="go slow", origin=t.MessageOrigin(kind="user"))))
            await world.until(lambda: world.chat().active_turn is not None and bool(
                world.chat().active_turn.response_parts))  # type: ignore[union-attr]
            world.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="t3", duration=1))
            await world.until(lambda: len(world.chat().turns) == 3)
            assert world.chat().turns[2].state == "cancelled"
            # the agent dies in the middle of a turn
            await world.turn("t4", "now crash")
            last = world.chat().turns[3]
            assert last.state == "error" and last.error is not None
            assert last.error.error_type == "agent-exited"
            await world.until(lambda: process.returncode is not None)
            assert process.returncode == 3
        finally:
            await world.runner.close()
        assert world.runner.processes == ()

    run(scenario())


def test_an_agent_that_cannot_start_fails_the_session() -> None:
    world = World(PiAgentCommand(command="/nonexistent/pi-agent"))

    async def scenario() -> None:
        try:
            await world.start()
            session = world.session()
            assert session.lifecycle == "creationFailed"
            assert session.creation_error is not None
            assert session.creation_error.error_type == "spawn"
        finally:
            await world.runner.close()

    run(scenario())


def test_an_agent_that_exits_at_once_fails_the_session_and_close_stops_the_rest() -> None:
    world = World(PiAgentCommand(command=sys.executable, args=("-c", "pass")))

    async def scenario() -> None:
        try:
            await world.start()
            assert world.session().lifecycle == "creationFailed"
            # a second session whose agent is alive, then the runner closes it
            world.runner._agent = PiAgentCommand(command=sys.executable, args=(STANDIN,))
            await world.request("createSession", {"channel": "ahp-session:/s2"})
            await world.until(lambda: world.runner.bridge("ahp-session:/s2") is not None
                              and world.host.state("ahp-session:/s2").lifecycle  # type: ignore[union-attr]
                              == "ready")
            [process] = world.runner.processes
        finally:
            await world.runner.close()
        assert process.returncode is not None

    run(scenario())
