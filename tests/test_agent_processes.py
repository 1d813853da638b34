"""Agent processes as five real agents behaved behind ``serve`` (issue 18, items 3 to 5).

The stand-ins in ``tests/acp_agents`` reproduce each behaviour:
``raw_agent.py`` (ACP without the SDK: errors with ``data``, the
``session/close`` capability, Gemini's ``models`` list, a grandchild that
holds stdout and ignores SIGTERM, a tool still running at shutdown) and
``pi_tool_agent.py`` (pi with a tool's command that only a signal to the
whole group stops).  Both record what they got, in order, and the pids of
what they started, in a file the test reads.

Every wait is bounded.  Each test kills, on the way out whatever happened,
every process group and process it learnt of, so none outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.agent.pi_runner import PiAgentCommand, PiAgentRunner, pi_root_state
from agenthost_protocol.aio.server import HostServer
from agenthost_protocol.bridges.acp import (
    ERROR_TEXT_LIMIT,
    MODEL_KEY,
    AcpRequest,
    AcpSessionSetup,
    acp_error_message,
)
from agenthost_protocol.host import Host

from ._aio_peer import TIMEOUT, serving, stop
from ._json_client import JsonClient
from .acp_agents import raw_agent
from .acp_agents.world import ACP_SESSION, World

if TYPE_CHECKING:
    from agenthost_protocol.agent.acp_runner import AcpAgentRunner

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

HERE = Path(__file__).parent
RAW_AGENT = str(HERE / "acp_agents" / "raw_agent.py")
PI_TOOL_AGENT = str(HERE / "acp_agents" / "pi_tool_agent.py")
ROOT = "ahp-root://"
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/s1"
USER = t.MessageOrigin(kind=t.MessageKind.USER)
STEP = 0.5
"""The runners' ``close_timeout`` here: a stop takes at most about four of them."""


def run(coro: Coroutine[Any, Any, None], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


async def until(condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout)


# -- processes ------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie does not (this machine's init may never reap one)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return not Path("/proc").is_dir()
    return stat.rpartition(b")")[2].split()[0] not in (b"Z", b"X")


async def gone(pids: set[int], timeout: float = TIMEOUT) -> None:
    assert pids
    try:
        await until(lambda: not any(alive(p) for p in pids), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"still alive: {[p for p in pids if alive(p)]}") from None


class Record:
    """The file a stand-in writes a line into per event."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[str]:
        try:
            return self.path.read_text().splitlines()
        except FileNotFoundError:
            return []

    def pids(self, what: str) -> list[int]:
        return [int(line.split()[1]) for line in self.lines() if line.startswith(what + " ")]

    async def pid(self, what: str) -> int:
        await until(lambda: bool(self.pids(what)))
        return self.pids(what)[0]

    async def has(self, line: str) -> None:
        await until(lambda: line in self.lines())

    def before(self, first: str, second: str) -> bool:
        lines = self.lines()
        return first in lines and second in lines and lines.index(first) < lines.index(second)


def kill_everything(record: Record) -> None:
    """The last resort of every test: what the stand-in started, and their groups, killed."""
    for pid in [*record.pids("agent"), *record.pids("grandchild"), *record.pids("tool")]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # the agents lead their groups
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


# -- a client on the host's own connection --------------------------------------------------


class Client(JsonClient):
    """Raw JSON-RPC on a ``host.connect()`` connection; the state is read from the host."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The whole answer: ``result`` or ``error``."""
        number = next(self.ids)
        self.send({"id": number, "method": method, "params": params})

        def answered() -> bool:
            self.inbox += [json.loads(m) for m in self.conn.data_to_send()]
            return any(m.get("id") == number for m in self.inbox)

        await until(answered)
        [answer] = [m for m in self.inbox if m.get("id") == number]
        return answer

    async def initialize(self) -> None:
        answer = await self.request("initialize", {"protocolVersions": ["0.7.0"],
                                                   "clientId": "ide"})
        assert "result" in answer, answer

    async def create_session(self, uri: str = SESSION) -> t.SessionState:
        answer = await self.request("createSession", {"channel": uri})
        assert answer.get("result", 1) is None, answer
        await until(lambda: self.session(uri).lifecycle != t.SessionLifecycle.CREATING)
        return self.session(uri)

    def session(self, uri: str = SESSION) -> t.SessionState:
        return super().session(uri)

    def chat(self, uri: str = CHAT) -> t.ChatState:
        return super().chat(uri)

    def root(self) -> t.RootState:
        state = self.host.state(ROOT)
        assert isinstance(state, t.RootState)
        return state

    def start_turn(self, turn_id: str, text: str = "hi", model: str | None = None) -> None:
        self.dispatch(CHAT, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=text, origin=USER,
                              model=t.ModelSelection(id=model) if model else None)))

    async def turn_ended(self, count: int) -> t.Turn:
        await until(lambda: self.chat().active_turn is None and len(self.chat().turns) == count)
        return self.chat().turns[-1]

    def running_tool(self) -> bool:
        turn = self.chat().active_turn
        return turn is not None and any(
            isinstance(p, t.ToolCallResponsePart) and isinstance(p.tool_call,
                                                                 t.ToolCallRunningState)
            for p in turn.response_parts)


# -- the ACP runner -------------------------------------------------------------------------


class AcpWorld:
    def __init__(self, runner: AcpAgentRunner, client: Client, record: Record) -> None:
        self.runner = runner
        self.client = client
        self.record = record

    @property
    def agent_pid(self) -> int:
        process = self.runner.process
        assert process is not None
        return process.pid


@contextlib.asynccontextmanager
async def acp_world(tmp_path: Path, *flags: str) -> AsyncIterator[AcpWorld]:
    """The ACP runner with ``raw_agent.py FLAGS`` started, and a client initialized."""
    pytest.importorskip("acp")
    from agenthost_protocol.agent.acp_runner import (
        AcpAgentCommand,
        AcpAgentRunner,
        acp_root_state,
    )

    record = Record(tmp_path / "agent.record")
    host = Host(clock=lambda: time.time_ns() // 1_000_000, root=acp_root_state())
    server = HostServer(host)
    runner = AcpAgentRunner(server, AcpAgentCommand(
        command=sys.executable, args=(RAW_AGENT, "--record", str(record.path), *flags)),
        close_timeout=STEP, start_timeout=TIMEOUT)
    try:
        await runner.start()
        client = Client(server)
        await client.initialize()
        yield AcpWorld(runner, client, record)
    finally:
        try:
            await asyncio.wait_for(runner.close(), TIMEOUT)
        finally:
            kill_everything(record)


# -- 3. the agent's own error text ----------------------------------------------------------


@pytest.mark.parametrize("where", ["details", "message", "string"])
def test_a_failed_prompt_shows_the_agents_own_error(tmp_path: Path, where: str) -> None:
    """Qwen (``data.details``), Codex (``data.message``), or a string ``data``."""
    async def scenario() -> None:
        async with acp_world(tmp_path, "--prompt-error", where) as w:
            assert (await w.client.create_session()).lifecycle == t.SessionLifecycle.READY
            w.client.start_turn("t1")
            turn = await w.client.turn_ended(1)
            assert turn.state == t.TurnState.ERROR and turn.error is not None
            assert turn.error.error_type == "acp:-32603"
            assert turn.error.message == f"Internal error (acp:-32603): {raw_agent.CAUSE}"

    run(scenario())


def test_a_failed_session_new_shows_the_agents_own_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acp_world(tmp_path, "--new-error") as w:
            session = await w.client.create_session()
            assert session.lifecycle == t.SessionLifecycle.CREATION_FAILED
            assert session.creation_error == t.ErrorInfo(
                error_type="acp:session/new",
                message=f"Internal error (acp:-32603): {raw_agent.NEW_SESSION_CAUSE}")

    run(scenario())


@pytest.mark.parametrize(("data", "text"), [
    ({"details": "400 Bad Request", "message": "other"},
     "Internal error (acp:-32603): 400 Bad Request"),
    ({"message": "quota exceeded"}, "Internal error (acp:-32603): quota exceeded"),
    ("plain words", "Internal error (acp:-32603): plain words"),
    ({"details": "  ", "message": 5}, "Internal error (acp:-32603)"),
    ({"details": "Internal error"}, "Internal error (acp:-32603)"),  # no repetition
    (None, "Internal error (acp:-32603)"),
    ([1, 2], "Internal error (acp:-32603)"),
])
def test_where_the_error_text_is_read_from(data: object, text: str) -> None:
    assert acp_error_message(-32603, "Internal error", data) == text


def test_the_agents_error_text_is_bounded() -> None:
    """A hostile agent's megabyte of detail: cut on a character boundary, ``data`` not kept."""
    for detail in ("x" * 1_000_000, "é" * 300_000, "🙂" * 200_000):
        text = acp_error_message(-32603, "Internal error", {"details": detail})
        assert len(text.encode("utf-8")) <= ERROR_TEXT_LIMIT
        assert text.startswith("Internal error (acp:-32603): " + detail[:10])
        assert text.endswith("…")
    w = World()
    w.start()
    [prompt] = w.prompts
    del w.requests[prompt.token]
    w.run(w.bridge.receive_error(prompt.token, -32603, "Internal error",
                                 {"details": "y" * 1_000_000}))
    error = w.chat.turns[-1].error
    assert error is not None and len(error.message.encode("utf-8")) <= ERROR_TEXT_LIMIT
    assert error.meta is None  # the raw data is kept in _meta only when it is small
    w.start()
    [prompt] = w.prompts
    del w.requests[prompt.token]
    w.run(w.bridge.receive_error(prompt.token, -32603, "Internal error", {"details": "small"}))
    assert w.chat.turns[-1].error == t.ErrorInfo(
        error_type="acp:-32603", message="Internal error (acp:-32603): small",
        meta={"data": {"details": "small"}})


# -- 4. no agent process outlives the runner ------------------------------------------------


@pytest.mark.parametrize("advertised", [True, False])
def test_dispose_closes_the_acp_session_when_the_agent_can(tmp_path: Path,
                                                           advertised: bool) -> None:
    """Claude Code keeps a process per session until ``session/close``."""
    async def scenario() -> None:
        async with acp_world(tmp_path, *(["--close"] if advertised else [])) as w:
            await w.client.create_session()
            answer = await w.client.request("disposeSession", {"channel": SESSION})
            assert answer.get("result", 1) is None, answer
            # a second session: its session/new comes after whatever dispose sent
            await w.client.create_session("ahp-session:/s2")
            await until(lambda: w.record.lines().count("session/new") == 2)
            lines = w.record.lines()
            if advertised:
                assert "session/close raw-1" in lines
                assert lines.index("session/close raw-1") < len(lines) - 1 - lines[::-1].index(
                    "session/new")
            else:
                assert not [line for line in lines if line.startswith("session/close")]

    run(scenario())


@pytest.mark.parametrize("stubborn", [False, True], ids=["exits-at-eof", "stubborn"])
def test_close_stops_the_agent_and_a_grandchild_holding_its_stdout(
        tmp_path: Path, stubborn: bool) -> None:
    """Codex: its native binary holds the pipe and outlived ``serve``, even idle."""
    async def scenario() -> None:
        flags = ["--grandchild", *(["--stubborn"] if stubborn else [])]
        async with acp_world(tmp_path, *flags) as w:
            grandchild = await w.record.pid("grandchild")
            agent = w.agent_pid
            assert alive(grandchild) and alive(agent)
            started = time.monotonic()
            await asyncio.wait_for(w.runner.close(), TIMEOUT)
            assert time.monotonic() - started < 4 * STEP + 2.0
            await gone({agent, grandchild}, timeout=2.0)
            process = w.runner.process
            assert process is not None and process.returncode is not None  # reaped
            if stubborn:
                assert w.record.before("EOF", "SIGTERM")

    run(scenario())


def test_an_agent_that_crashes_leaves_no_process_behind(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acp_world(tmp_path, "--grandchild", "--exit-on-prompt") as w:
            grandchild = await w.record.pid("grandchild")
            await w.client.create_session()
            w.client.start_turn("t1")
            turn = await w.client.turn_ended(1)
            assert turn.error is not None and turn.error.error_type == "acp:disconnected"
            # without close(): nobody talks to what the agent left
            await gone({w.agent_pid, grandchild})
            assert w.runner.process is not None and w.runner.process.returncode == 3

    run(scenario())


def test_close_cancels_the_prompt_first_and_stops_its_running_tool(tmp_path: Path) -> None:
    """Gemini's shell tool: ``session/cancel``, then EOF, then the group signalled."""
    async def scenario() -> None:
        async with acp_world(tmp_path, "--tool", "--stubborn") as w:
            await w.client.create_session()
            w.client.start_turn("t1", "run sleep")
            tool = await w.record.pid("tool")
            await until(w.client.running_tool)
            await asyncio.wait_for(w.runner.close(), TIMEOUT)
            assert w.record.before("session/cancel", "EOF")
            assert w.record.before("EOF", "SIGTERM")
            await gone({w.agent_pid, tool}, timeout=2.0)
            # the agent answered the cancel: the turn ended as cancelled, not as an error
            turn = await w.client.turn_ended(1)
            assert turn.state == t.TurnState.CANCELLED

    run(scenario())


def test_serve_exits_on_sigterm_while_a_tool_runs(tmp_path: Path) -> None:
    """``serve`` never exited after SIGTERM with Gemini running a shell tool."""
    pytest.importorskip("acp")
    pytest.importorskip("websockets")
    from agenthost_protocol.aio.client import connect

    record = Record(tmp_path / "agent.record")
    err = tmp_path / "serve.err"

    async def main() -> None:
        command = [sys.executable, RAW_AGENT, "--record", str(record.path), "--tool",
                   "--stubborn"]
        async with serving(["--agent", "acp", "--", *command], err) as (proc, url), connect(
                url, client_id="ide", reconnect=False, request_timeout=TIMEOUT) as client:
            await client.initialize([ROOT])
            await client.create_session(SESSION)
            await client.subscribe(CHAT)
            await client.dispatch(CHAT, t.ChatTurnStartedAction(
                turn_id="t1", started_at="2026-01-01T00:00:00.000Z",
                message=t.Message(text="run sleep", origin=USER)))
            tool = await record.pid("tool")
            agent = await record.pid("agent")
            started = time.monotonic()
            assert await stop(proc) == 0
            # cancel answered at once; then EOF, SIGTERM and SIGKILL steps of 2 s each
            assert time.monotonic() - started < 12.0
        await gone({agent, tool}, timeout=2.0)
        assert record.before("session/cancel", "EOF")
        assert "Traceback" not in err.read_text()

    try:
        run(main())
    finally:
        kill_everything(record)


# -- 5. models listed in session/new (Gemini CLI) -------------------------------------------


def test_legacy_models_in_the_session_setup() -> None:
    setup = AcpSessionSetup.from_new_session({"sessionId": "s", "models": raw_agent.MODELS})
    assert setup.model_key == MODEL_KEY
    assert setup.models("acp") == (
        t.SessionModelInfo(id="gemini-2.5-pro", provider="acp", name="Gemini 2.5 Pro"),
        t.SessionModelInfo(id="gemini-2.5-flash", provider="acp", name="Gemini 2.5 Flash"))
    config = setup.config
    assert config is not None and config.values == {"model": "gemini-2.5-pro"}
    schema = config.schema.properties["model"]
    assert schema.enum == ("gemini-2.5-pro", "gemini-2.5-flash") and schema.session_mutable
    # an unknown current model: the first one
    odd = AcpSessionSetup.from_new_session({"models": {**raw_agent.MODELS,
                                                       "currentModelId": "gone"}})
    assert odd.values() == {"model": "gemini-2.5-pro"}
    # a model config option is the agent's picker: the list is not used
    both = AcpSessionSetup.from_new_session({"models": raw_agent.MODELS, "configOptions": [
        {"id": "llm", "name": "Model", "category": "model", "type": "select",
         "currentValue": "a", "options": [{"value": "a", "name": "A"}]}]})
    assert both.legacy_models == () and both.model_key == "llm"
    assert [m.id for m in both.models("acp")] == ["a"]
    # garbage is skipped
    assert AcpSessionSetup.from_new_session({"models": {"availableModels": [
        {"name": "no id"}, 5]}}).model_key is None


def test_the_bridge_switches_a_legacy_model_before_the_prompt() -> None:
    w = World(AcpSessionSetup.from_new_session({"models": raw_agent.MODELS}))
    w.start("hi", model=t.ModelSelection(id="gemini-2.5-flash"))
    [switch] = w.requests.values()  # the prompt waits for the switch
    assert (switch.method, switch.params) == ("session/set_model", {
        "sessionId": ACP_SESSION, "modelId": "gemini-2.5-flash"})
    out = w.answer(switch.token, {})
    assert [type(o).__name__ for o in out] == ["AhpDispatch", "AcpRequest"]
    assert w.session.config is not None
    assert w.session.config.values["model"] == "gemini-2.5-flash"
    w.finish("end_turn", usage={"inputTokens": 1, "outputTokens": 2})
    usage = w.chat.turns[-1].usage
    assert usage is not None and usage.model == "gemini-2.5-flash"
    # the same model again: no switch; a refused switch: the prompt goes anyway
    w.start("again", model=t.ModelSelection(id="gemini-2.5-flash"))
    assert [r.method for r in w.requests.values()] == ["session/prompt"]
    w.finish()
    w.start("back", model=t.ModelSelection(id="gemini-2.5-pro"))
    [switch] = w.requests.values()
    out = w.fail(switch.token, -32602, "no such model")
    assert [o.method for o in out if isinstance(o, AcpRequest)] == ["session/prompt"]
    assert w.session.config is not None
    assert w.session.config.values["model"] == "gemini-2.5-flash"


def test_models_of_session_new_reach_the_root_state_and_set_model_switches_them(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        async with acp_world(tmp_path, "--models") as w:
            session = await w.client.create_session()
            [agent] = w.client.root().agents
            assert [(m.id, m.name) for m in agent.models] == [
                ("gemini-2.5-pro", "Gemini 2.5 Pro"), ("gemini-2.5-flash", "Gemini 2.5 Flash")]
            assert session.config is not None
            assert session.config.values == {"model": "gemini-2.5-pro"}
            # a turn on another model: set_model, then the prompt
            w.client.start_turn("t1", model="gemini-2.5-flash")
            assert (await w.client.turn_ended(1)).state == t.TurnState.COMPLETE
            assert w.record.before("session/set_model gemini-2.5-flash", "session/prompt")
            config = w.client.session().config
            assert config is not None and config.values["model"] == "gemini-2.5-flash"
            # the same model: nothing to switch
            w.client.start_turn("t2", model="gemini-2.5-flash")
            await w.client.turn_ended(2)
            # the client changes the session's model
            w.client.dispatch(SESSION, t.SessionConfigChangedAction(
                config={"model": "gemini-2.5-pro"}))
            await w.record.has("session/set_model gemini-2.5-pro")
            assert [line for line in w.record.lines() if line.startswith("session/set_model")] \
                == ["session/set_model gemini-2.5-flash", "session/set_model gemini-2.5-pro"]

    run(scenario())


# -- pi: abort before the stop, and the tool's process gone ---------------------------------


@pytest.mark.parametrize("how", ["close", "dispose"])
def test_pi_gets_abort_before_it_is_stopped_and_its_tool_dies(tmp_path: Path,
                                                              how: str) -> None:
    record = Record(tmp_path / "pi.record")
    host = Host(clock=lambda: time.time_ns() // 1_000_000, root=pi_root_state())
    server = HostServer(host)
    runner = PiAgentRunner(server, PiAgentCommand(
        command=sys.executable, args=(PI_TOOL_AGENT, str(record.path))),
        idle_tick=0.05, start_timeout=TIMEOUT, close_timeout=STEP)

    async def scenario() -> None:
        try:
            client = Client(server)
            await client.initialize()
            assert (await client.create_session()).lifecycle == t.SessionLifecycle.READY
            client.start_turn("t1", "run a tool")
            tool = await record.pid("tool")
            agent = await record.pid("agent")
            await until(client.running_tool)
            if how == "close":
                await asyncio.wait_for(runner.close(), TIMEOUT)
                # pi ended the run on abort: the turn was cancelled before the process went
                assert client.chat().turns[-1].state == t.TurnState.CANCELLED
            else:
                answer = await client.request("disposeSession", {"channel": SESSION})
                assert answer.get("result", 1) is None, answer
            await gone({agent, tool})
            assert record.before("abort", "EOF")
            assert runner.processes == ()
        finally:
            try:
                await asyncio.wait_for(runner.close(), TIMEOUT)
            finally:
                kill_everything(record)

    run(scenario())
