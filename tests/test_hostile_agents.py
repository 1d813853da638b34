"""Agent processes that misbehave behind ``serve`` (issue 29, "Also"): floods, endless
lines, requests never answered, deaths in the middle of a prompt.

``serve --agent acp|pi -- python STAND-IN MODE`` runs in a subprocess on a real
loopback socket; ``tests/acp_agents/hostile_acp_agent.py`` and
``tests/acp_agents/hostile_pi_agent.py`` are the stand-ins.  What is checked
is what a user of the host sees: a ``ping`` still answers, the host's memory
stays bounded (``VmRSS`` of the ``serve`` process), the turn ends with
``chat/error`` naming the cause, no agent process or zombie is left, and
``serve`` stops on SIGTERM.  Every wait is bounded; each test kills ``serve``
and whatever it started on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.host.sessions import iso

from ._aio_peer import TIMEOUT, serving, stop
from ._procs import children, stat_fields

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc"),
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups"),
]

HERE = Path(__file__).parent
HOSTILE_ACP = str(HERE / "acp_agents" / "hostile_acp_agent.py")
HOSTILE_PI = str(HERE / "acp_agents" / "hostile_pi_agent.py")
ROOT = "ahp-root://"
SESSION, CHAT = "ahp-session:/h1", "ahp-chat:/h1"
USER = t.MessageOrigin(kind=t.MessageKind.USER)
FLOOD_SECONDS = 5.0 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 2.0
"""How long a flooding agent is watched (the suite's time is counted)."""
RSS_BOUND = 400 * 1024 * 1024
"""What ``serve`` may hold at most while an agent floods it (it starts at ~60 MB; a
line it kept whole would be gigabytes)."""


def run(coro: Coroutine[Any, Any, None], timeout: float = 120.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


# -- processes -------------------------------------------------------------------------


def zombies(pid: int) -> set[int]:
    return {c for c in children(pid) if (stat_fields(c) or ["?"])[0] == "Z"}


def alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def rss(pid: int) -> int:
    """The resident memory of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def poll(condition: Any, timeout: float = TIMEOUT) -> Any:
    async def wait() -> Any:
        while not (value := condition()):
            await asyncio.sleep(0.05)
        return value
    return await asyncio.wait_for(wait(), timeout)


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # each agent leads its own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


# -- the client's side ---------------------------------------------------------------------


def chat_of(state: t.SnapshotState) -> t.ChatState:
    assert isinstance(state, t.ChatState)
    return state


def ended(count: int) -> Any:
    return lambda s: chat_of(s).active_turn is None and len(chat_of(s).turns) == count


def replying(state: t.SnapshotState) -> bool:
    """The active turn has the agent's first words."""
    turn = chat_of(state).active_turn
    return turn is not None and bool(turn.response_parts)


def turn_started(turn_id: str, text: str = "go") -> t.ChatTurnStartedAction:
    return t.ChatTurnStartedAction(turn_id=turn_id, started_at=iso(1_767_225_600_000),
                                   message=t.Message(text=text, origin=USER))


class Watch:
    """``serve``'s highest RSS and slowest ``ping`` + ``listSessions`` while the agent
    misbehaves."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss(pid)
        self.slowest = 0.0

    async def sample(self, client: Any, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.peak = max(self.peak, rss(self.pid))
            started = time.monotonic()
            await asyncio.wait_for(client.ping(), TIMEOUT)
            await asyncio.wait_for(client.list_sessions(), TIMEOUT)
            self.slowest = max(self.slowest, time.monotonic() - started)
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def hostile(tmp_path: Path, kind: str, mode: str, *serve_args: str) -> AsyncIterator[
        tuple[asyncio.subprocess.Process, Any]]:
    """``serve --agent KIND -- python STAND-IN MODE`` and a client, a session created for
    ACP (pi's come per session: the test makes them)."""
    pytest.importorskip("websockets")
    if kind == "acp":
        pytest.importorskip("acp")
    from agenthost_protocol.aio.client import connect

    agent = HOSTILE_ACP if kind == "acp" else HOSTILE_PI
    err = tmp_path / "serve.err"
    seen: set[int] = set()
    try:
        # a short close: every test stops an agent that will not stop by itself
        async with serving(["--no-store", "--close-timeout", "0.5", *serve_args, "--agent",
                            kind, "--",
                            sys.executable, agent, mode], err) as (proc, url), connect(
                url, client_id="ide", reconnect=False, request_timeout=TIMEOUT) as client:
            await client.initialize([ROOT])
            try:
                yield proc, client
            finally:
                seen |= children(proc.pid)
    finally:
        kill_all(seen)


# -- ACP -------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def acp_in_process(mode: str, **options: Any) -> AsyncIterator[tuple[Any, Any, int]]:
    """An ACP runner in this process (its bounds can be lowered) with a real agent
    process in ``mode``, a client initialized and SESSION created: (runner, client, pid).
    The agent is killed on the way out whatever happened."""
    pytest.importorskip("acp")
    from agenthost_protocol.agent import acp_runner
    from agenthost_protocol.aio.server import HostServer
    from agenthost_protocol.host import Host

    from ._json_client import JsonClient

    host = Host(clock=lambda: time.time_ns() // 1_000_000, root=acp_runner.acp_root_state())
    server = HostServer(host)
    runner = acp_runner.AcpAgentRunner(server, acp_runner.AcpAgentCommand(
        command=sys.executable, args=(HOSTILE_ACP, mode)), close_timeout=0.5, **options)
    pid: int | None = None
    try:
        await runner.start()
        assert runner.process is not None
        pid = runner.process.pid
        client = JsonClient(server)
        client.timeout = TIMEOUT
        await client.request("initialize", {"protocolVersions": ["0.7.0"], "clientId": "ide"})
        await client.request("createSession", {"channel": SESSION})
        yield runner, client, pid
    finally:
        if pid is not None:
            kill_all({pid})


async def acp_turn(client: Any) -> None:
    assert await client.create_session(SESSION) == SESSION
    await client.subscribe(SESSION)
    await client.subscribe(CHAT)
    await client.dispatch(CHAT, turn_started("t1"))


async def acp_turn_error(client: Any, count: int = 1) -> t.ErrorInfo:
    state = await client.wait_for_state(CHAT, ended(count), confirmed=True, timeout=TIMEOUT)
    turn = chat_of(state).turns[-1]
    assert turn.state == t.TurnState.ERROR and turn.error is not None, turn
    return turn.error


async def stops_clean(proc: asyncio.subprocess.Process, agents: set[int],
                      tmp_path: Path) -> None:
    """``serve`` exits 0 on SIGTERM, leaves no agent process and no zombie, and logged
    no traceback."""
    assert await stop(proc) == 0
    assert agents and not [p for p in agents if alive(p)], "an agent process outlived serve"
    log = (tmp_path / "serve.err").read_text()
    assert "Traceback" not in log, log[-3000:]


def test_acp_agent_writing_an_endless_line(tmp_path: Path) -> None:
    async def main() -> None:
        async with hostile(tmp_path, "acp", "huge-line") as (proc, client):
            agents = children(proc.pid)
            watch = Watch(proc.pid)
            await acp_turn(client)
            await watch.sample(client, 3.0)
            error = await acp_turn_error(client)
            await watch.sample(client, 0.5)
            print(f"peak RSS {watch.peak / 2**20:.0f} MiB, slowest ping {watch.slowest:.3f} s")
            assert "line longer than" in error.message, error
            assert watch.peak < RSS_BOUND
            await poll(lambda: not zombies(proc.pid) and not any(alive(p) for p in agents))
            await stops_clean(proc, agents, tmp_path)

    run(main())


@pytest.mark.parametrize("mode", ["flood-garbage", "flood-unknown", "flood-reply",
                                  "flood-permission"])
def test_acp_agent_flooding_stdout(tmp_path: Path, mode: str) -> None:
    """Dropped (not JSON, no such session), kept (a reply: it grows as fast as the host
    takes it in, about 1 MB/s on two cores), or refused (questions past the bound): the
    host answers at once all along."""
    async def main() -> None:
        async with hostile(tmp_path, "acp", mode) as (proc, client):
            agents = children(proc.pid)
            watch = Watch(proc.pid)
            await acp_turn(client)
            await watch.sample(client, FLOOD_SECONDS)
            print(f"peak RSS {watch.peak / 2**20:.0f} MiB, slowest ping {watch.slowest:.3f} s")
            assert watch.peak < RSS_BOUND
            assert watch.slowest < 2.0
            # one line a second says what is dropped, not one per line
            log = (tmp_path / "serve.err").read_text()
            assert len(log) < 256 * 1024, log[-2000:]
            assert mode in ("flood-permission", "flood-reply") or "not logged" in log, (
                log[-2000:])
            if mode == "flood-permission":  # a flood of questions is not the agent's reply
                error = await acp_turn_error(client)
                assert error.message == ("the agent asked more than 256 questions at once: "
                                         "the host stopped it"), error
                await stops_clean(proc, agents, tmp_path)
                return
            # what is dropped is dropped: a client's cancel still ends the turn
            await client.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="t1", duration=1))
            await client.wait_for_state(CHAT, ended(1), confirmed=True, timeout=TIMEOUT)
            await stops_clean(proc, agents, tmp_path)

    run(main())


def test_acp_agent_ignoring_a_cancel_does_not_hold_the_next_turn(tmp_path: Path) -> None:
    """The client's cancel ends the turn at once; the agent never answers that prompt,
    yet the session's next prompt goes out after the cancel timeout (5 s in ``serve``)."""
    async def main() -> None:
        async with hostile(tmp_path, "acp", "silent") as (proc, client):
            agents = children(proc.pid)
            await acp_turn(client)
            await client.wait_for_state(CHAT, replying,
                                        confirmed=True, timeout=TIMEOUT)
            await client.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="t1", duration=1))
            await client.wait_for_state(CHAT, ended(1), confirmed=True, timeout=TIMEOUT)
            await client.dispatch(CHAT, turn_started("t2"))
            state = await client.wait_for_state(CHAT, ended(2), confirmed=True,
                                                timeout=TIMEOUT)
            assert [turn.state for turn in chat_of(state).turns] == [
                t.TurnState.CANCELLED, t.TurnState.COMPLETE]
            await stops_clean(proc, agents, tmp_path)

    run(main())


def test_acp_agent_that_never_answers_session_new(tmp_path: Path) -> None:
    """``createSession`` is answered after ``request_timeout`` with the cause, not never."""
    pytest.importorskip("acp")
    from agenthost_protocol.agent.acp_runner import (
        AcpAgentCommand,
        AcpAgentRunner,
        acp_root_state,
    )
    from agenthost_protocol.aio.server import HostServer
    from agenthost_protocol.host import Host

    from ._json_client import JsonClient

    async def main() -> None:
        host = Host(clock=lambda: time.time_ns() // 1_000_000, root=acp_root_state())
        server = HostServer(host)
        runner = AcpAgentRunner(server, AcpAgentCommand(
            command=sys.executable, args=(HOSTILE_ACP, "silent-new")),
            close_timeout=0.5, request_timeout=1.0)
        pid: int | None = None
        try:
            await runner.start()
            assert runner.process is not None
            pid = runner.process.pid
            client = JsonClient(server)
            await client.request("initialize", {"protocolVersions": ["0.7.0"],
                                                "clientId": "ide"})
            started = time.monotonic()
            client.send({"id": 99, "method": "createSession", "params": {"channel": SESSION}})
            await client.until(lambda: any(m.get("id") == 99 for m in client.inbox),
                               timeout=TIMEOUT)
            assert time.monotonic() - started < 10.0
            state = host.state(SESSION)
            assert isinstance(state, t.SessionState)
            assert state.lifecycle == t.SessionLifecycle.CREATION_FAILED, state
            assert "did not answer session/new within 1 s" in str(state.creation_error), state
            await asyncio.wait_for(runner.close(), TIMEOUT)
            await poll(lambda: not alive(pid))
        finally:
            if pid is not None:
                kill_all({pid})

    run(main())


@pytest.mark.parametrize("mode", ["exit", "kill9"])
def test_acp_agent_dying_while_a_prompt_runs(tmp_path: Path, mode: str) -> None:
    """The turn ends with the cause, the process is reaped (no zombie), the next turn and
    the next session say the agent is gone, at once; ``serve`` still stops clean."""
    async def main() -> None:
        async with hostile(tmp_path, "acp", mode) as (proc, client):
            agents = children(proc.pid)
            await acp_turn(client)
            error = await acp_turn_error(client)
            status = "7" if mode == "exit" else "-9"
            assert error.message == f"the agent exited with status {status}", error
            await poll(lambda: not children(proc.pid))  # reaped: not even a zombie
            await client.dispatch(CHAT, turn_started("t2"))
            error = await acp_turn_error(client, 2)
            assert error.message == f"the agent exited with status {status}", error
            with pytest.raises(Exception, match="not running"):
                await client.create_session("ahp-session:/h2")
            await stops_clean(proc, agents, tmp_path)

    run(main())


# -- pi ----------------------------------------------------------------------------------------


async def pi_session(client: Any, proc: asyncio.subprocess.Process, session: str = SESSION,
                     chat: str = CHAT) -> set[int]:
    """A ready session (its agent process spawned); the agent processes of ``serve``."""
    await client.create_session(session, provider="pi")
    await client.subscribe(session)
    ready = await client.wait_for_state(
        session, lambda s: isinstance(s, t.SessionState)
        and s.lifecycle != t.SessionLifecycle.CREATING, confirmed=True, timeout=TIMEOUT)
    assert ready.lifecycle == t.SessionLifecycle.READY, ready
    await client.subscribe(chat)
    return children(proc.pid)


def test_pi_agent_writing_an_endless_line(tmp_path: Path) -> None:
    async def main() -> None:
        async with hostile(tmp_path, "pi", "huge-line") as (proc, client):
            agents = await pi_session(client, proc)
            watch = Watch(proc.pid)
            await client.dispatch(CHAT, turn_started("t1"))
            await watch.sample(client, 3.0)
            error = await acp_turn_error(client)
            print(f"peak RSS {watch.peak / 2**20:.0f} MiB, slowest ping {watch.slowest:.3f} s")
            assert "line longer than" in error.message and "stopped it" in error.message, error
            assert watch.peak < RSS_BOUND
            await poll(lambda: not children(proc.pid))  # reaped: not even a zombie
            await client.dispatch(CHAT, turn_started("t2"))
            assert (await acp_turn_error(client, 2)).message == error.message
            await stops_clean(proc, agents, tmp_path)

    run(main())


@pytest.mark.parametrize("mode", ["flood-garbage", "flood-unknown", "flood-dialogs"])
def test_pi_agent_flooding_stdout(tmp_path: Path, mode: str) -> None:
    async def main() -> None:
        async with hostile(tmp_path, "pi", mode) as (proc, client):
            agents = await pi_session(client, proc)
            watch = Watch(proc.pid)
            await client.dispatch(CHAT, turn_started("t1"))
            await watch.sample(client, FLOOD_SECONDS)
            print(f"peak RSS {watch.peak / 2**20:.0f} MiB, slowest ping {watch.slowest:.3f} s")
            assert watch.peak < RSS_BOUND
            assert watch.slowest < 2.0
            log = (tmp_path / "serve.err").read_text()
            assert len(log) < 64 * 1024 and "not logged" in log, log[-2000:]
            if mode == "flood-dialogs":  # 64 questions at most, one status line
                session = client.confirmed(SESSION)
                assert isinstance(session, t.SessionState) and session.activity is not None
                assert len(session.activity) < 64 * 1024
                turn = chat_of(client.confirmed(CHAT)).active_turn
                assert turn is not None
                questions = [p for p in turn.response_parts
                             if isinstance(p, t.InputRequestResponsePart)]
                assert len(questions) == 64
            await client.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="t1", duration=1))
            await client.wait_for_state(CHAT, ended(1), confirmed=True, timeout=TIMEOUT)
            await stops_clean(proc, agents, tmp_path)

    run(main())


def test_pi_agent_ignoring_abort_is_stopped(tmp_path: Path) -> None:
    """The client's cancel ends the turn at once; the agent never answers ``abort``, so the
    next turn (held until the agent is idle) ends after the cancel timeout (10 s in
    ``serve``) with the cause, the agent stopped and reaped."""
    async def main() -> None:
        async with hostile(tmp_path, "pi", "silent") as (proc, client):
            agents = await pi_session(client, proc)
            await client.dispatch(CHAT, turn_started("t1"))
            await client.wait_for_state(CHAT, replying,
                                        confirmed=True, timeout=TIMEOUT)
            await client.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="t1", duration=1))
            await client.wait_for_state(CHAT, ended(1), confirmed=True, timeout=TIMEOUT)
            await client.dispatch(CHAT, turn_started("t2"))
            error = await acp_turn_error(client, 2)
            assert error.message == ("the agent did not answer abort within 10 s: "
                                     "the host stopped it"), error
            await poll(lambda: not children(proc.pid))
            await stops_clean(proc, agents, tmp_path)

    run(main())


@pytest.mark.parametrize("mode", ["exit", "kill9"])
def test_pi_agent_dying_while_a_prompt_runs(tmp_path: Path, mode: str) -> None:
    """The turn ends with the cause, the process is reaped, the next turn says the agent
    is gone; another session gets a process of its own."""
    async def main() -> None:
        async with hostile(tmp_path, "pi", mode) as (proc, client):
            agents = await pi_session(client, proc)
            await client.dispatch(CHAT, turn_started("t1"))
            error = await acp_turn_error(client)
            status = "7" if mode == "exit" else "-9"
            assert error.message == f"the agent exited with status {status}", error
            await poll(lambda: not children(proc.pid))  # reaped: not even a zombie
            await client.dispatch(CHAT, turn_started("t2"))
            assert (await acp_turn_error(client, 2)).message == error.message
            agents |= await pi_session(client, proc, "ahp-session:/h2", "ahp-chat:/h2")
            assert len(children(proc.pid)) == 1
            await stops_clean(proc, agents, tmp_path)

    run(main())


@pytest.mark.parametrize("kind", ["acp", "pi"])
def test_serve_stops_while_an_agent_ignores_everything(tmp_path: Path, kind: str) -> None:
    """A prompt never answered, its cancel (abort) ignored: SIGTERM still stops ``serve``
    within its bounded steps, the agent reaped."""
    async def main() -> None:
        async with hostile(tmp_path, kind, "silent") as (proc, client):
            if kind == "acp":
                await acp_turn(client)
                agents = children(proc.pid)
            else:
                agents = await pi_session(client, proc)
                await client.dispatch(CHAT, turn_started("t1"))
            await client.wait_for_state(CHAT, replying,
                                        confirmed=True, timeout=TIMEOUT)
            started = time.monotonic()
            await stops_clean(proc, agents, tmp_path)
            assert time.monotonic() - started < 15.0

    run(main())


# -- the pieces, without processes ------------------------------------------------------------


def test_the_bridge_forgets_cancelled_prompts_and_sends_the_held_one() -> None:
    from agenthost_protocol.bridges.acp import AcpRequest

    from .acp_agents.world import World

    w = World()
    w.start("first")
    [first] = w.prompts
    w.cancel()  # session/cancel goes out; the agent never answers the prompt
    w.start("second")
    assert w.prompts == [first]  # the second is held behind the first
    assert w.bridge.busy
    out = w.run(w.bridge.forget_cancelled_prompts())
    [second] = [o for o in out if isinstance(o, AcpRequest)]
    assert second.method == "session/prompt" and second.token != first.token
    assert w.run(w.bridge.forget_cancelled_prompts()) == []  # the active turn's prompt stays
    del w.requests[first.token]
    w.run(w.bridge.receive_response(first.token, {"stopReason": "cancelled"}))  # late: skipped
    assert w.chat.active_turn is not None
    w.finish()
    final = w.chat
    assert final.active_turn is None and final.turns[-1].state == t.TurnState.COMPLETE


def test_log_throttle_says_how_many_lines_it_left_out(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from agenthost_protocol.agent.processes import LogThrottle

    now = [0.0]
    throttle = LogThrottle(logging.getLogger("throttled"), interval=1.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="throttled"):
        for _ in range(1000):
            throttle.log("bad line %d", 1)
        now[0] = 1.5
        throttle.log("bad line %d", 2)
    assert [r.getMessage() for r in caplog.records] == [
        "bad line 1", "bad line 2 (999 more like it not logged)"]
    assert throttle.skipped == 0


def test_acp_agent_that_never_answers_a_model_switch(tmp_path: Path) -> None:
    """The prompt held behind ``session/set_model`` goes out after ``request_timeout``
    (the switch counts as refused), instead of never."""
    async def main() -> None:
        async with acp_in_process("silent-switch", request_timeout=1.0) as (
                runner, client, pid):
            client.dispatch(CHAT, t.ChatTurnStartedAction(
                turn_id="t1", started_at=iso(1_767_225_600_000),
                message=t.Message(text="go", origin=USER, model=t.ModelSelection(id="b"))))
            started = time.monotonic()
            await client.until(lambda: client.chat(CHAT).active_turn is None
                               and len(client.chat(CHAT).turns) == 1)
            assert time.monotonic() - started < 10.0
            assert client.chat(CHAT).turns[0].state == t.TurnState.COMPLETE
            await asyncio.wait_for(runner.close(), TIMEOUT)
            await poll(lambda: not alive(pid))

    run(main())


# -- agents that do not read their stdin (the bound lowered, in process) ------------------------


def test_acp_agent_not_reading_its_stdin_is_stopped(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers to an agent that never reads pile up in the pipe's buffer; past the bound
    (64 MiB, here 1 MiB) the agent is stopped and the turn says why."""
    pytest.importorskip("acp")
    from agenthost_protocol.agent import acp_runner

    monkeypatch.setattr(acp_runner, "MAX_UNREAD_BYTES", 1024 * 1024)

    async def main() -> None:
        async with acp_in_process("flood-requests") as (runner, client, pid):
            client.dispatch(CHAT, turn_started("t1"))
            await client.until(lambda: client.chat(CHAT).active_turn is None
                               and len(client.chat(CHAT).turns) == 1)
            error = client.chat(CHAT).turns[0].error
            assert error is not None and error.message == (
                "the agent left more than 1048576 bytes of its stdin unread: "
                "the host stopped it"), error
            await poll(lambda: not alive(pid))
            await asyncio.wait_for(runner.close(), TIMEOUT)

    run(main())


def test_pi_agent_not_reading_its_stdin_is_stopped(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The dialogs the bridge cancels at once are answers the agent never reads; past the
    bound (64 MiB, here 256 KiB) the agent is stopped and the turn says why."""
    from agenthost_protocol.agent import pi_runner
    from agenthost_protocol.aio.server import HostServer
    from agenthost_protocol.host import Host

    from ._json_client import JsonClient

    monkeypatch.setattr(pi_runner, "_MAX_UNSENT", 256 * 1024)

    async def main() -> None:
        host = Host(clock=lambda: time.time_ns() // 1_000_000, root=pi_runner.pi_root_state())
        server = HostServer(host)
        runner = pi_runner.PiAgentRunner(server, pi_runner.PiAgentCommand(
            command=sys.executable, args=(HOSTILE_PI, "flood-dialogs")), close_timeout=0.5)
        try:
            client = JsonClient(server)
            client.timeout = TIMEOUT
            await client.request("initialize", {"protocolVersions": ["0.7.0"],
                                                "clientId": "ide"})
            await client.request("createSession", {"channel": SESSION, "provider": "pi"})
            await client.until(lambda: bool(runner.processes) and host.has_channel(CHAT))
            [process] = runner.processes
            client.dispatch(CHAT, turn_started("t1"))
            await client.until(lambda: client.chat(CHAT).active_turn is None
                               and len(client.chat(CHAT).turns) == 1)
            error = client.chat(CHAT).turns[0].error
            assert error is not None and error.message == (
                "the agent left more than 262144 bytes of its stdin unread: "
                "the host stopped it"), error
            await poll(lambda: not alive(process.pid))
        finally:
            await asyncio.wait_for(runner.close(), TIMEOUT)

    run(main())
