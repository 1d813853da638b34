"""Issue 28, item 2: a default store per agent, and another agent's sessions refused.

``serve`` runs in subprocesses on real loopback sockets, each with this
test's own ``XDG_DATA_HOME`` (conftest); every process is killed on the way
out.  The agents: the demo, ``examples.reverse:agent`` (the agent layer), the
scripted ACP agent of ``tests/acp_agents`` and the pi stand-in.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.agent.driver import NOT_SERVED
from agenthost_protocol.agent.hosting import AgentKind, ServeOptions, program_name
from agenthost_protocol.aio.client import AsyncClient, RequestError, connect
from agenthost_protocol.sqlite_store import SQLiteStore
from agenthost_protocol.types.error_codes import AhpErrorCode, JsonRpcErrorCode

from ._aio_peer import REPO, TIMEOUT, child_env, serve_command, serving, stop

pytest.importorskip("websockets")

HERE = Path(__file__).parent
ACP_AGENT = str(HERE / "acp_agents" / "scripted_agent.py")
PI_STANDIN = str(HERE / "test_bridge_pi_standin.py")
ROOT = "ahp-root://"
USER = t.MessageOrigin(kind=t.MessageKind.USER)
REVERSE = ["--agent", "examples.reverse:agent"]


def run(coro: Coroutine[Any, Any, None], timeout: float = 90.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


def data_dir() -> Path:
    return Path(os.environ["XDG_DATA_HOME"]) / "agenthost-protocol"


def turn_started(turn_id: str, text: str) -> t.ChatTurnStartedAction:
    return t.ChatTurnStartedAction(turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
                                   message=t.Message(text=text, origin=USER))


async def store_line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)
    assert line.startswith(b"web http://"), line
    line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)
    assert line.startswith(b"store "), line
    return line.decode().strip().removeprefix("store ")


# -- the names ---------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "name"), [
    (ServeOptions(), "demo.sqlite3"),
    (ServeOptions(agent=AgentKind.ACP, agent_command=("claude-agent-acp", "--x")),
     "acp-claude-agent-acp.sqlite3"),
    (ServeOptions(agent=AgentKind.PI, agent_command=("/opt/bin/pi", "--mode", "rpc")),
     "pi-pi.sqlite3"),
    (ServeOptions(agent=AgentKind.XCSH, agent_command=("xcsh",)), "xcsh-xcsh.sqlite3"),
    (ServeOptions(agent=AgentKind.ACP,
                  agent_command=("npx", "-y", "@zed-industries/claude-code-acp@latest")),
     "acp-claude-code-acp.sqlite3"),
    (ServeOptions(agent=AgentKind.ACP, agent_command=("python3", "-m", "my_agent")),
     "acp-my_agent.sqlite3"),
    (ServeOptions(agent=AgentKind.ACP, agent_command=("node", "dist/agent.js")),
     "acp-agent.sqlite3"),
    # hostile or odd commands: no separator, no leading dot, bounded
    (ServeOptions(agent=AgentKind.PI, agent_command=("../../.evil name\n",)),
     "pi-.evil_name_.sqlite3"),
    (ServeOptions(agent=AgentKind.PI, agent_command=("/",)), "pi-.sqlite3"),
    (ServeOptions(agent=AgentKind.PI, agent_command=("x" * 500,)),
     "pi-" + "x" * 61 + ".sqlite3"),
])
def test_the_default_store_is_named_after_the_agent(options: ServeOptions, name: str) -> None:
    assert options.store_name() == name
    path = options.store_path()
    assert path is not None and Path(path) == data_dir() / name
    assert options.store_name() == os.path.basename(options.store_name())


def test_an_agent_of_the_agent_layer_names_its_store_after_its_provider() -> None:
    sys.path.insert(0, str(REPO))
    try:
        from examples.reverse import agent
    finally:
        sys.path.remove(str(REPO))
    assert ServeOptions(agent_object=agent).store_name() == "reverse.sqlite3"
    assert ServeOptions(agent_object=agent, store="x.db").store_path() == "x.db"
    assert ServeOptions(agent_object=agent, no_store=True).store_path() is None
    assert program_name(()) == ""


def test_store_names_are_safe_file_names() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    @given(st.lists(st.text(max_size=80), min_size=1, max_size=4),
           st.sampled_from([AgentKind.ACP, AgentKind.PI, AgentKind.XCSH]))
    def check(command: list[str], kind: AgentKind) -> None:
        name = ServeOptions(agent=kind, agent_command=command).store_name()
        assert name.endswith(".sqlite3") and len(name) <= 64 + len(".sqlite3")
        assert "/" not in name and "\\" not in name and not name.startswith(".")
        assert name.startswith(f"{kind.value}-")
        assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name)

    check()


# -- served side by side -----------------------------------------------------------------


def test_two_different_agents_are_served_at_once_with_no_flags(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving([], tmp_path / "demo.err") as (demo, demo_url), \
                serving(REVERSE, tmp_path / "reverse.err") as (reverse, reverse_url):
            assert await store_line(demo) == str(data_dir() / "demo.sqlite3")
            assert await store_line(reverse) == str(data_dir() / "reverse.sqlite3")
            for url, provider in ((demo_url, "demo"), (reverse_url, "reverse")):
                async with connect(url, reconnect=False, request_timeout=TIMEOUT) as client:
                    await client.initialize([ROOT])
                    root = client.confirmed(ROOT)
                    assert isinstance(root, t.RootState)
                    assert [a.provider for a in root.agents] == [provider]
            assert await stop(demo) == 0
            assert await stop(reverse) == 0
        assert sorted(p.name for p in data_dir().glob("*.sqlite3")) == [
            "demo.sqlite3", "reverse.sqlite3"]

    run(main())


def test_the_same_agent_twice_is_refused_naming_store_and_no_store(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving([], tmp_path / "first.err") as (first, _url):
            await store_line(first)
            done = await asyncio.to_thread(
                subprocess.run, serve_command("--port", "0"), capture_output=True,
                env=child_env(), timeout=TIMEOUT, check=False)
            assert done.returncode == 1
            lines = done.stderr.decode().strip().splitlines()
            assert len(lines) == 1, lines
            line = lines[0]
            assert line.startswith("agenthost-protocol serve: "), line
            assert str(data_dir() / "demo.sqlite3") in line
            assert "in use" in line and "--store PATH" in line and "--no-store" in line
            assert done.stdout == b""  # nothing was served
            assert await stop(first) == 0

    run(main())


def test_an_old_shared_store_is_pointed_at_once(tmp_path: Path) -> None:
    data_dir().mkdir(parents=True)
    legacy = data_dir() / "host.sqlite3"
    SQLiteStore(legacy).close()

    async def main() -> None:
        err = tmp_path / "serve.err"
        async with serving([], err) as (proc, _url):
            await store_line(proc)
            assert await stop(proc) == 0
        notices = [line for line in err.read_text().splitlines() if str(legacy) in line]
        assert len(notices) == 1 and f"--store {legacy}" in notices[0], err.read_text()
        # the agent's own store exists now: no more notice
        async with serving([], err) as (proc, _url):
            await store_line(proc)
            assert await stop(proc) == 0
        assert str(legacy) not in err.read_text()

    run(main())


# -- another agent's sessions ------------------------------------------------------------


async def demo_sessions(store: Path, tmp_path: Path, count: int = 1) -> list[str]:
    """Sessions the demo made in ``store``, each with one ended turn."""
    made = []
    async with serving(["--store", str(store), "--step-delay", "0"],
                       tmp_path / "maker.err") as (proc, url):
        async with connect(url, reconnect=False, request_timeout=TIMEOUT) as client:
            await client.initialize([ROOT])
            for n in range(count):
                session = await client.create_session(f"ahp-session:/made-{n}")
                state = await client.subscribe(session)
                assert state is not None and isinstance(state.state, t.SessionState)
                chat = state.state.default_chat
                assert chat is not None
                await client.subscribe(chat)
                await client.dispatch(chat, turn_started("t1", "hello"))
                # the demo waits for its tool call to be confirmed: cancelled instead
                await client.dispatch(chat, t.ChatTurnCancelledAction(turn_id="t1", duration=0))
                await client.wait_for_state(
                    chat, lambda s: isinstance(s, t.ChatState) and s.active_turn is None
                    and len(s.turns) == 1, confirmed=True, timeout=TIMEOUT)
                made.append(session)
        assert await stop(proc) == 0
    return made


async def refused(client: AsyncClient, session: str, provider: str, served: str) -> None:
    """A turn in ``session`` ends at once with the provider's chat/error; none stays active."""
    listing = await client.list_sessions()
    assert session in [s.resource for s in listing.items]
    state = await client.subscribe(session)
    assert state is not None and isinstance(state.state, t.SessionState)
    assert state.state.provider == provider
    chat = state.state.default_chat
    assert chat is not None
    before = await client.subscribe(chat)
    assert before is not None and isinstance(before.state, t.ChatState)
    turns = len(before.state.turns)
    started = time.monotonic()
    await client.dispatch(chat, turn_started("t-new", "are you there?"))
    ended = await client.wait_for_state(
        chat, lambda s: isinstance(s, t.ChatState) and len(s.turns) == turns + 1
        and s.active_turn is None, confirmed=True, timeout=10)
    assert time.monotonic() - started < 10
    assert isinstance(ended, t.ChatState)
    last = ended.turns[-1]
    assert last.id == "t-new" and last.state == t.TurnState.ERROR
    assert last.error is not None and last.error.error_type == NOT_SERVED
    assert f"provider {provider!r}" in last.error.message
    assert f"serves {served!r}" in last.error.message
    # and a queued message: taken out and refused the same way
    await client.dispatch(chat, t.ChatPendingMessageSetAction(
        kind=t.PendingMessageKind.QUEUED, id="q1",
        message=t.Message(text="later", origin=USER)))
    queued = await client.wait_for_state(
        chat, lambda s: isinstance(s, t.ChatState) and len(s.turns) == turns + 2
        and s.active_turn is None and not s.queued_messages, confirmed=True, timeout=10)
    assert isinstance(queued, t.ChatState)
    assert queued.turns[-1].error is not None
    assert queued.turns[-1].error.error_type == NOT_SERVED
    # no new chat in it either (an agent of one chat per session refuses any)
    with pytest.raises(RequestError) as refusal:
        await client.create_chat(session, "ahp-chat:/another")
    assert refusal.value.code in (AhpErrorCode.PROVIDER_NOT_FOUND, JsonRpcErrorCode.INVALID_PARAMS)
    if served == "reverse":  # the agent layer's agents have several chats a session
        assert refusal.value.code == AhpErrorCode.PROVIDER_NOT_FOUND
    if refusal.value.code == AhpErrorCode.PROVIDER_NOT_FOUND:
        assert f"provider {provider!r}" in refusal.value.error.message


def test_an_agent_layer_host_refuses_a_turn_in_another_providers_session(
    tmp_path: Path,
) -> None:
    store = tmp_path / "shared.sqlite3"

    async def main() -> None:
        [session] = await demo_sessions(store, tmp_path)
        err = tmp_path / "reverse.err"
        async with serving([*REVERSE, "--store", str(store)], err) as (proc, url):
            async with connect(url, reconnect=False, request_timeout=TIMEOUT) as client:
                await client.initialize([ROOT])
                await refused(client, session, "demo", "reverse")
                # its own sessions are played as before, in the same store
                mine = await client.create_session("ahp-session:/mine")
                state = await client.subscribe(mine)
                assert state is not None and isinstance(state.state, t.SessionState)
                assert state.state.provider == "reverse"
            assert await stop(proc) == 0
        assert "Traceback" not in err.read_text()

    run(main())


@pytest.mark.parametrize("agent", ["acp", "pi"])
def test_an_agent_process_host_refuses_a_turn_in_another_providers_session(
    tmp_path: Path, agent: str,
) -> None:
    if agent == "acp":
        pytest.importorskip("acp")
    store = tmp_path / "shared.sqlite3"
    command: Sequence[str] = (sys.executable, ACP_AGENT if agent == "acp" else PI_STANDIN)

    async def main() -> None:
        [session] = await demo_sessions(store, tmp_path)
        err = tmp_path / "agent.err"
        async with serving(["--store", str(store), "--agent", agent, "--", *command],
                           err) as (proc, url):
            async with connect(url, reconnect=False, request_timeout=TIMEOUT) as client:
                await client.initialize([ROOT])
                await refused(client, session, "demo", agent)
            assert await stop(proc) == 0
        assert "Traceback" not in err.read_text()

    run(main())
