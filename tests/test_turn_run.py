"""``Turn.run``: an agent's command in a host terminal that every client can watch,
over real ptys and real loopback sockets."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.agent import Agent, Turn
from agenthost_protocol.aio.client import connect

from ._aio_hosts import clock, run, turn_started
from ._terminals import ROOT, alive, shell_options, terminal_host, text_of, until

pytestmark = pytest.mark.skipif(os.name != "posix", reason="terminals need a POSIX pty")


class Runner(Agent):
    provider = "demo"

    def __init__(self) -> None:
        self.results: list[object] = []

    async def turn(self, turn: Turn) -> None:
        timeout = 0.5 if "timeout" in turn.text else None
        result = await turn.run(turn.text, timeout=timeout, interrupt_grace=0.5)
        self.results.append(result)
        await turn.stream(f"exit {result.exit_code}")


def _terminal_of(state: object) -> str | None:
    if not isinstance(state, t.ChatState) or state.active_turn is None:
        return None
    for part in state.active_turn.response_parts:
        if isinstance(part, t.ToolCallResponsePart):
            for block in getattr(part.tool_call, "content", None) or ():
                if isinstance(block, t.ToolResultTerminalContent):
                    return block.resource
    return None


def test_a_run_is_watched_live_by_a_second_client_and_cancelled_by_a_third(
        tmp_path: Path) -> None:
    async def body() -> None:
        agent = Runner()
        options = shell_options("bash", tmp_path, kill_timeout=0.5)
        async with terminal_host(tmp_path, options=options, agent=agent) as th, \
                connect(th.url, clock=clock) as starter, \
                connect(th.url, clock=clock) as watcher, \
                connect(th.url, clock=clock) as canceller:
            for client in (starter, watcher, canceller):
                await client.initialize([ROOT])
            session = await starter.create_session(provider="demo")
            snapshot = await starter.subscribe(session)
            assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
            chat = snapshot.state.default_chat
            assert chat is not None
            await watcher.subscribe(chat)
            await canceller.subscribe(chat)
            await starter.subscribe(chat)
            await starter.dispatch(chat, turn_started(
                "t1", "echo started-$((6*7)); sleep 30; echo never"))
            state = await watcher.wait_for_state(chat, lambda s: _terminal_of(s) is not None,
                                                 confirmed=True, timeout=10)
            terminal = _terminal_of(state)
            assert terminal is not None
            await watcher.subscribe(terminal)
            live = await until(watcher, terminal, lambda s: "started-42" in text_of(s))
            assert live.exit_code is None  # still running: seen live
            assert live.claim == t.TerminalSessionClaim(
                session=session, turn_id="t1", tool_call_id="t1.tool1")
            pid = th.service.process_id(terminal)
            assert pid is not None and alive(pid)
            await canceller.dispatch(chat, t.ChatTurnCancelledAction(turn_id="t1", duration=0))
            ended = await until(watcher, terminal, lambda s: any(
                isinstance(p, t.TerminalCommandPart) and p.is_complete for p in s.content))
            assert "never" not in text_of(ended).replace("; echo never", "")
            for _ in range(100):
                if not alive(pid):
                    break
                await asyncio.sleep(0.05)
            assert not alive(pid)
            await until(watcher, terminal, lambda s: s.claim == t.TerminalSessionClaim(
                session=session))
            chat_state = await watcher.wait_for_state(
                chat, lambda s: isinstance(s, t.ChatState) and bool(s.turns),
                confirmed=True, timeout=5)
            assert isinstance(chat_state, t.ChatState)
            assert chat_state.turns[0].state == t.TurnState.CANCELLED
            # the session's terminals go with it
            await starter.dispose_session(session)
            await watcher.wait_for_state(ROOT, lambda r: isinstance(r, t.RootState)
                                         and not r.terminals, confirmed=True, timeout=5)

    run(body(), 40)


def test_a_run_gives_its_exit_code_output_and_timeout(tmp_path: Path) -> None:
    async def body() -> None:
        agent = Runner()
        options = shell_options("bash", tmp_path)
        async with terminal_host(tmp_path, options=options, agent=agent) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            session = await client.create_session(provider="demo")
            snapshot = await client.subscribe(session)
            assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
            chat = snapshot.state.default_chat
            assert chat is not None
            await client.subscribe(chat)
            await client.dispatch(chat, turn_started("t1", "printf 'a\\nb\\n'; exit 5"))
            state = await client.wait_for_state(
                chat, lambda s: isinstance(s, t.ChatState) and len(s.turns) == 1,
                confirmed=True, timeout=10)
            assert isinstance(state, t.ChatState)
            (call,) = [p.tool_call for p in state.turns[0].response_parts
                       if isinstance(p, t.ToolCallResponsePart)]
            assert isinstance(call, t.ToolCallCompletedState) and not call.success
            (block,) = call.content or ()
            assert isinstance(block, t.ToolResultTerminalContent) and block.result is not None
            assert block.result.exit_code == 5 and block.result.preview == "a\r\nb\r\n"
            await client.dispatch(chat, turn_started("t2", "sleep 20 # timeout"))
            await client.wait_for_state(
                chat, lambda s: isinstance(s, t.ChatState) and len(s.turns) == 2,
                confirmed=True, timeout=10)
            first, second = agent.results
            assert getattr(first, "exit_code", None) == 5
            assert getattr(first, "output", None) == "a\r\nb\r\n"
            assert getattr(second, "timed_out", None) is True
            assert len(th.service.terminals) == 2

    run(body(), 40)
