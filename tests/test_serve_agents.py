"""``agenthost-protocol serve --agent acp|pi|xcsh -- COMMAND``: real agent processes behind it.

``serve`` runs in a subprocess on a real loopback socket (or stdio) and spawns
the agent over stdio: the ACP agent of ``tests/acp_agents/scripted_agent.py``,
written with the ACP SDK's agent side, or the scripted pi stand-in of
``tests/test_bridge_pi_standin.py``.  This library's asyncio client drives
it.  Every test is bounded in time, kills the ``serve`` process on the way
out whatever happens, and checks that no agent process outlives ``serve``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.aio.client import AsyncClient, SubprocessTransport, connect, connect_stdio
from agenthost_protocol.cli import main
from agenthost_protocol.host.sessions import iso

from ._aio_peer import TIMEOUT, child_env, serve_command, serving, spawn, stop
from ._procs import children, stat_fields

HERE = Path(__file__).parent
ACP_AGENT = str(HERE / "acp_agents" / "scripted_agent.py")
PI_STANDIN = str(HERE / "test_bridge_pi_standin.py")
ROOT = "ahp-root://"
USER = t.MessageOrigin(kind=t.MessageKind.USER)

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="finds the agent processes in /proc")


def run(coro: Coroutine[Any, Any, None], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


# -- processes -------------------------------------------------------------------------


def alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


async def agent_processes(pid: int, count: int = 1) -> set[int]:
    """Wait (bounded) until ``pid`` has ``count`` live children; those."""
    async def poll() -> set[int]:
        while len(found := {c for c in children(pid) if alive(c)}) < count:
            await asyncio.sleep(0.02)
        return found

    return await asyncio.wait_for(poll(), TIMEOUT)


def assert_gone(pids: set[int]) -> None:
    assert pids and not [p for p in pids if alive(p)], "an agent process outlived serve"


# -- state -----------------------------------------------------------------------------


def canonical(state: t.SnapshotState) -> str:
    """``wire.dumps(state)`` without ``modifiedAt``, which each side stamps with its clock."""

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "modifiedAt"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(json.loads(wire.dumps(state))), ensure_ascii=False)


async def converge(client: AsyncClient, fresh: AsyncClient, channels: tuple[str, ...]) -> None:
    """Until both clients' confirmed states are the same, byte for byte (bounded).

    Each ``ping`` answer comes after every action queued before it, so once
    the host is quiet both clients hold all of its state.
    """
    async def poll() -> None:
        while True:
            await asyncio.gather(client.ping(), fresh.ping())
            if all(canonical(client.confirmed(c)) == canonical(fresh.confirmed(c))
                   for c in channels):
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), TIMEOUT)


def chat_of(state: t.SnapshotState) -> t.ChatState:
    assert isinstance(state, t.ChatState)
    return state


def parts(state: t.SnapshotState) -> tuple[t.ResponsePart, ...]:
    turn = chat_of(state).active_turn
    return () if turn is None else turn.response_parts


def pending_call(state: t.SnapshotState) -> t.ToolCallPendingConfirmationState | None:
    for part in parts(state):
        if isinstance(part, t.ToolCallResponsePart) and isinstance(
                part.tool_call, t.ToolCallPendingConfirmationState):
            return part.tool_call
    return None


def open_input(state: t.SnapshotState) -> t.InputRequestResponsePart | None:
    for part in parts(state):
        if isinstance(part, t.InputRequestResponsePart) and part.response is None:
            return part
    return None


def text_of(response_parts: tuple[t.ResponsePart, ...]) -> str:
    return "".join(p.content for p in response_parts if isinstance(p, t.MarkdownResponsePart))


def ended(count: int) -> Any:
    return lambda s: chat_of(s).active_turn is None and len(chat_of(s).turns) == count


def turn_started(turn_id: str, text: str) -> t.ChatTurnStartedAction:
    return t.ChatTurnStartedAction(
        turn_id=turn_id, started_at=iso(1_767_225_600_000),
        message=t.Message(text=text, origin=USER))


def models(state: t.SnapshotState) -> list[str]:
    assert isinstance(state, t.RootState)
    return [m.id for a in state.agents for m in a.models]


# -- ACP ---------------------------------------------------------------------------------


@linux_only
def test_an_acp_agent_behind_serve(tmp_path: Path) -> None:
    """Text and a thought, a confirmed tool call, an answered elicitation, a cancelled turn."""
    pytest.importorskip("acp")
    pytest.importorskip("websockets")
    session, chat = "ahp-session:/e2e", "ahp-chat:/e2e"
    err = tmp_path / "serve.err"

    async def main() -> None:
        async with serving(["--agent", "acp", "--", sys.executable, ACP_AGENT], err) as (
                proc, url):
            # the agent was up before anything was served
            agents = await agent_processes(proc.pid)
            async with connect(url, client_id="ide", reconnect=False,
                               request_timeout=TIMEOUT) as client:
                await client.initialize([ROOT])
                root = client.confirmed(ROOT)
                assert isinstance(root, t.RootState)
                [agent] = root.agents
                assert (agent.provider, agent.display_name) == ("acp", "Scripted agent")
                assert await client.create_session(session) == session
                state = await client.subscribe(session)
                assert state is not None and isinstance(state.state, t.SessionState)
                assert state.state.lifecycle == t.SessionLifecycle.READY
                assert state.state.default_chat == chat
                await client.subscribe(chat)
                await client.wait_for_state(ROOT, lambda s: models(s) == ["small", "large"],
                                            confirmed=True, timeout=TIMEOUT)

                # turn 1: streamed, a permission approved, an elicitation answered
                await client.dispatch(chat, turn_started("turn-1", "hello"))
                state_1 = await client.wait_for_state(
                    chat, lambda s: pending_call(s) is not None, confirmed=True,
                    timeout=TIMEOUT)
                call = pending_call(state_1)
                assert call is not None and call.confirmation_title == "Run command"
                assert [o.id for o in call.options or ()] == ["allow", "reject"]
                assert text_of(parts(state_1)) == "You said: hello."
                await client.dispatch(chat, t.ChatToolCallApprovedAction(
                    turn_id="turn-1", tool_call_id=call.tool_call_id,
                    confirmed=t.ToolCallConfirmationReason.USER_ACTION,
                    selected_option_id="allow"))
                state_1 = await client.wait_for_state(
                    chat, lambda s: open_input(s) is not None, confirmed=True, timeout=TIMEOUT)
                asked = open_input(state_1)
                assert asked is not None and asked.request.message == "What is your name?"
                await client.dispatch(chat, t.ChatInputCompletedAction(
                    request_id=asked.request.id, response=t.ChatInputResponseKind.ACCEPT,
                    answers={"name": t.ChatInputAnswered(
                        state=t.ChatInputAnswerState.SUBMITTED,
                        value=t.ChatInputTextAnswerValue(value="Ada"))}))
                state_1 = await client.wait_for_state(chat, ended(1), confirmed=True,
                                                      timeout=TIMEOUT)
                [turn] = chat_of(state_1).turns
                assert turn.state == t.TurnState.COMPLETE and turn.duration is not None
                assert [type(p).__name__ for p in turn.response_parts] == [
                    "ReasoningResponsePart", "MarkdownResponsePart", "ToolCallResponsePart",
                    "InputRequestResponsePart", "MarkdownResponsePart"]
                assert text_of(turn.response_parts) == "You said: hello. Nice to meet you, Ada!"
                done = turn.response_parts[2]
                assert isinstance(done, t.ToolCallResponsePart)
                assert isinstance(done.tool_call, t.ToolCallCompletedState)
                assert done.tool_call.success
                thought = turn.response_parts[0]
                assert isinstance(thought, t.ReasoningResponsePart)
                assert thought.content == "The user said 5 characters."

                # turn 2: cancelled in the middle of its stream
                await client.dispatch(chat, turn_started("turn-2", "wait"))
                await client.wait_for_state(
                    chat, lambda s: text_of(parts(s)) == "Waiting...", confirmed=True,
                    timeout=TIMEOUT)
                await client.dispatch(chat, t.ChatTurnCancelledAction(turn_id="turn-2",
                                                                       duration=5))
                state_2 = await client.wait_for_state(chat, ended(2), confirmed=True,
                                                      timeout=TIMEOUT)
                assert [x.state for x in chat_of(state_2).turns] == [
                    t.TurnState.COMPLETE, t.TurnState.CANCELLED]

                # the client's state is the host's: a fresh client's snapshots say so
                async with connect(url, client_id="late", reconnect=False,
                                   request_timeout=TIMEOUT) as fresh:
                    await fresh.initialize([ROOT, session, chat])
                    await converge(client, fresh, (ROOT, session, chat))
                    # SIGTERM with both clients connected: the agent is stopped too
                    assert await stop(proc) == 0
        assert_gone(agents)
        log = err.read_text()
        assert "SIGTERM" in log and "Traceback" not in log, log

    run(main())


@linux_only
def test_sigterm_while_the_acp_agent_starts(tmp_path: Path) -> None:
    """An agent that never answers ``initialize``: a stop cancels the start, kills the agent."""
    pytest.importorskip("acp")
    err = tmp_path / "serve.err"

    async def main() -> None:
        silent = "import sys; sys.stdin.read()"  # reads, never answers
        async with spawn(["--port", "0", "--agent", "acp", "--", sys.executable, "-c", silent],
                         err) as proc:
            # serve handles signals before it spawns the agent
            agents = await agent_processes(proc.pid)
            assert await stop(proc) == 0
            assert proc.stdout is not None
            assert await proc.stdout.read() == b""  # nothing was served
        assert_gone(agents)
        log = err.read_text()
        assert "stopped before the agent started" in log and "Traceback" not in log, log

    run(main())


# -- pi / xcsh -----------------------------------------------------------------------------


@linux_only
def test_a_pi_agent_behind_serve(tmp_path: Path) -> None:
    pytest.importorskip("websockets")
    session, chat = "ahp-session:/p1", "ahp-chat:/p1"
    err = tmp_path / "serve.err"

    async def main() -> None:
        async with serving(["--agent", "pi", "--", sys.executable, PI_STANDIN], err) as (
                proc, url), connect(url, client_id="ide", reconnect=False,
                                    request_timeout=TIMEOUT) as client:
            await client.initialize([ROOT])
            root = client.confirmed(ROOT)
            assert isinstance(root, t.RootState)
            assert [(a.provider, a.display_name) for a in root.agents] == [("pi", "pi")]
            await client.create_session(session, provider="pi")
            await client.subscribe(session)
            ready = await client.wait_for_state(
                session, lambda s: isinstance(s, t.SessionState)
                and s.lifecycle != t.SessionLifecycle.CREATING, confirmed=True,
                timeout=TIMEOUT)
            assert isinstance(ready, t.SessionState)
            assert ready.lifecycle == t.SessionLifecycle.READY, ready
            agents = await agent_processes(proc.pid)  # one process per session
            await client.subscribe(chat)
            await client.wait_for_state(ROOT, lambda s: models(s) == ["standin/echo"],
                                        confirmed=True, timeout=TIMEOUT)
            await client.dispatch(chat, turn_started("t1", "run a tool"))
            state = await client.wait_for_state(chat, ended(1), confirmed=True,
                                                timeout=TIMEOUT)
            [turn] = chat_of(state).turns
            assert turn.state == t.TurnState.COMPLETE
            assert text_of(turn.response_parts) == "You said: run a toolDone."
            [call] = [p.tool_call for p in turn.response_parts
                      if isinstance(p, t.ToolCallResponsePart)]
            assert isinstance(call, t.ToolCallCompletedState) and call.success
            assert await stop(proc, signal.SIGINT) == 0
        assert_gone(agents)
        log = err.read_text()
        assert "SIGINT" in log and "Traceback" not in log, log

    run(main())


@linux_only
def test_an_xcsh_agent_behind_serve_stdio(tmp_path: Path) -> None:
    """``--stdio``: the end of the input stops the agent's process and ``serve`` (exit 0)."""
    session, chat = "ahp-session:/x1", "ahp-chat:/x1"
    command = serve_command("--stdio", "--agent", "xcsh", "--",
                            sys.executable, PI_STANDIN, "--xcsh")

    async def main() -> None:
        with open(tmp_path / "serve.err", "wb") as err:
            async with connect_stdio(command, env=child_env(), stderr=err,
                                     request_timeout=TIMEOUT, close_timeout=TIMEOUT) as client:
                transport = client.transport
                assert isinstance(transport, SubprocessTransport)
                proc = transport.process
                await client.initialize([ROOT])
                root = client.confirmed(ROOT)
                assert isinstance(root, t.RootState)
                assert [(a.provider, a.display_name) for a in root.agents] == [
                    ("xcsh", "xcsh")]
                await client.create_session(session)
                await client.subscribe(session)
                await client.wait_for_state(
                    session, lambda s: isinstance(s, t.SessionState)
                    and s.lifecycle == t.SessionLifecycle.READY, confirmed=True,
                    timeout=TIMEOUT)
                agents = await agent_processes(proc.pid)
                await client.subscribe(chat)
                await client.dispatch(chat, turn_started("t1", "hello"))
                state = await client.wait_for_state(chat, ended(1), confirmed=True,
                                                    timeout=TIMEOUT)
                [turn] = chat_of(state).turns
                assert turn.state == t.TurnState.COMPLETE
                assert text_of(turn.response_parts) == "You said: hello"
        assert proc.returncode == 0
        assert_gone(agents)
        assert "Traceback" not in (tmp_path / "serve.err").read_text()

    run(main())


# -- usage and start-up errors ---------------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["--agent", "demo", "--", "x"], "the demo agent takes no command"),
    (["--", "my-agent", "--acp"], "the demo agent takes no command"),
    (["--agent", "acp"], "--agent acp needs the agent's command line"),
    (["--agent", "pi", "--"], "--agent pi needs the agent's command line"),
    (["--agent", "nope", "--", "x"], "invalid choice: 'nope'"),
])
def test_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", *argv])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err and "usage:" in captured.err


@pytest.mark.parametrize(("argv", "message"), [
    (["--agent", "acp", "--", "/nonexistent/acp-agent", "--acp"],
     "cannot start the agent: '/nonexistent/acp-agent' is not an executable file"),
    (["--agent", "pi", "--", "no-such-pi-agent-on-path", "--mode", "rpc"],
     "cannot start the agent: 'no-such-pi-agent-on-path' is not an executable file on PATH"),
    (["--agent", "acp", "--", sys.executable, "-c", "import sys; sys.exit(3)"],
     "did not initialize: Connection closed (it exited with status 3)"),
])
def test_an_agent_that_cannot_start_exits_1(argv: list[str], message: str) -> None:
    if "-c" in argv:
        pytest.importorskip("acp")
    done = subprocess.run(serve_command("--port", "0", *argv), capture_output=True,
                          env=child_env(), timeout=TIMEOUT, check=False)
    assert done.returncode == 1, done.stderr.decode()
    assert done.stdout == b""  # no "serving" line: nothing was served
    lines = [line for line in done.stderr.decode().splitlines()
             if line.startswith("agenthost-protocol serve:")]
    assert len(lines) == 1 and message in lines[0], done.stderr.decode()
