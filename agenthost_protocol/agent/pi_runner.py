"""pi / xcsh agents behind an AHP host, on asyncio: one agent process per AHP session.

:class:`PiAgentRunner` is a :class:`~agenthost_protocol.aio.HostServer`'s
event handler (it installs itself, where an agent of the agent layer has an
:class:`~agenthost_protocol.agent.AgentDriver`).  pi's RPC mode serves one
session per process, so each ``createSession`` spawns ``COMMAND ARGS`` (for
example ``pi --mode rpc --no-session``) with stdin and stdout as pipes, and
connects it to the new session's one chat through a
:class:`~agenthost_protocol.bridges.pi.PiBridge`:

* the agent's stdout is read in chunks into the bridge; what it returns is
  carried out: AHP actions dispatched on the host (then flushed to every
  connection), frames written to the agent's stdin, in order;
* when the agent writes nothing for ``idle_tick`` seconds the bridge gets a
  :meth:`~agenthost_protocol.bridges.pi.PiBridge.tick` (a held error ends,
  dialog time-outs pass, a prompt that started no run is probed);
* every client action the host applies on the session or its chat goes to
  the bridge; the chat's summary is mirrored into the session's catalogue
  and the session's into ``root/sessionSummaryChanged``;
* the agent's models (``get_available_models``) go into the root state.

The session is ready once the agent answers ``get_state`` (or xcsh says
``ready``); an agent that cannot be spawned, or exits or stays silent
before that, fails the session (``session/creationFailed``).  An agent that
exits later ends its active turn with ``chat/error``.  :meth:`close` stops
every process, bounded: ``abort`` when a run goes on, stdin closed, then
SIGTERM and SIGKILL to the process's whole group.

Every agent process starts in a process group of its own (a new session),
because agents start processes too (pi's tool commands, Codex's native
binary under its Node wrapper): signalling the direct child alone leaves
them running, reparented to init, and holding the stdout pipe open, which
an asyncio process's ``wait()`` waits for.  :class:`_AgentProcess` is that
process and its bounded stopping; the ACP runner uses it as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Final
from urllib.parse import unquote, urlparse

import attrs
from attrs import field, frozen

from .. import types as t
from ..aio.server import HostServer
from ..bridges.pi import PiBridge, PiDialect, PiOutput
from ..bridges.pi_frames import encode_frame
from ..channels import ROOT_CHANNEL, ChannelKind, channel_kind
from ..errors import LocalProtocolError
from ..host import ClientActionApplied, Event, Host, RequestReceived
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode
from .dispatch import dispatch_agent_action

__all__ = ["PI_PROVIDER", "PiAgentCommand", "PiAgentRunner", "pi_agent_info", "pi_root_state"]

log = logging.getLogger(__name__)

PI_PROVIDER: Final = "pi"
"""The default provider id of the pi agent in the root state."""

_READ_CHUNK: Final = 64 * 1024


def pi_agent_info(provider: str = PI_PROVIDER, dialect: PiDialect = PiDialect.PI,
                  models: tuple[t.SessionModelInfo, ...] = ()) -> t.AgentInfo:
    """The agent as the root state lists it (one chat per session: no fork, no side chats)."""
    name = "xcsh" if dialect is PiDialect.XCSH else "pi"
    return t.AgentInfo(provider=provider, display_name=name,
                       description=f"The {name} coding agent in RPC mode", models=models)


def pi_root_state(provider: str = PI_PROVIDER, dialect: PiDialect = PiDialect.PI) -> t.RootState:
    """The root state of a host that runs the pi agent (models added once it answers)."""
    return t.RootState(agents=(pi_agent_info(provider, dialect),), active_sessions=0)


@frozen(kw_only=True)
class PiAgentCommand:
    """How to start an agent: ``command args...``; ``env`` is added to ours."""

    command: str
    args: tuple[str, ...] = ()
    cwd: str | None = None
    """The working directory when the client names none (default: ours)."""
    env: Mapping[str, str] | None = field(default=None, hash=False)
    inherit_stderr: bool = True
    """The agent's stderr goes to ours (else it is discarded: a pipe nobody reads would
    block a chatty agent)."""


def _path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return unquote(parsed.path) or None


# -- agent processes in a group of their own ------------------------------------------------

_POLL: Final = 0.02
_STREAM_LIMIT: Final = 64 * 1024
"""The stdout reader's buffer limit: asyncio's default (both runners read in chunks)."""
if sys.platform == "win32":
    _STOP_SIGNALS: Final = (signal.SIGTERM,)
else:
    _STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGKILL)


async def _until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` for at most ``timeout`` seconds; whether it came true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL)
    return True


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The stock protocol, telling when the process itself exited.

    ``Process.wait()`` (3.11 to 3.13) also waits for every pipe to close, which
    a grandchild that inherited stdout may never do.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class _AgentProcess:
    """An agent process started in a process group of its own, and its bounded stop.

    :meth:`stop` closes stdin, gives the process ``step`` seconds to exit, then
    signals the whole group (SIGTERM, then SIGKILL, ``step`` seconds each)
    until no process of it is left, and closes the pipes, so a process that
    left the group cannot hold the runner either.  Every wait is bounded, and
    the process is reaped by asyncio's child watcher.
    """

    def __init__(self, process: asyncio.subprocess.Process,
                 transport: asyncio.SubprocessTransport, protocol: _ExitProtocol) -> None:
        self.process = process
        self._transport = transport
        self._protocol = protocol
        self._stopping: asyncio.Future[int | None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def wait_exit(self, timeout: float | None = None) -> bool:
        """Wait until the process exited (not its pipes); whether it did in ``timeout``."""
        if self.process.returncode is not None:
            return True
        try:
            await asyncio.wait_for(self._protocol.exited.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def group_alive(self) -> bool:
        """Whether a process of the group runs (zombies do not: a container's init
        may never reap them)."""
        if sys.platform == "win32":
            return self.process.returncode is None
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return _group_has_live_member(self.pid)

    async def stop(self, step: float) -> int | None:
        """Stop the process and its group (at most about ``4 * step`` seconds); its status.

        Safe to call more than once and from several tasks: they share one stop,
        which goes on if a caller is cancelled.
        """
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(step))
        return await asyncio.shield(self._stopping)

    async def _stop(self, step: float) -> int | None:
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()
        await self.wait_exit(step)  # agents that end at EOF stop their own tools first
        for signum in _STOP_SIGNALS:
            if not self.group_alive():
                break
            self._signal(signum)
            await _until(lambda: not self.group_alive(), step)
        # a process that left the group may still hold a pipe: it no longer holds us
        self._transport.close()
        await self.wait_exit(step)
        if self.group_alive():
            log.warning("agent process group %s still has processes after SIGKILL", self.pid)
        return self.process.returncode

    def _signal(self, signum: int) -> None:
        if sys.platform == "win32":  # no process groups to signal: the process itself
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            return
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass
        except PermissionError:  # a member changed its user: the leader at least
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)


def _group_has_live_member(pgid: int) -> bool:
    """Whether ``/proc`` shows a process of group ``pgid`` that is not a zombie.

    Without ``/proc`` the answer is yes: ``killpg(pgid, 0)`` already found one.
    """
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    wanted = str(pgid)
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # after the command name (which may hold spaces and parentheses): state ppid pgrp
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 2 and fields[2].decode() == wanted and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _spawn_agent_process(
    command: str,
    args: Sequence[str],
    *,
    cwd: str | None,
    env: Mapping[str, str] | None,
    stderr: int | None,
) -> _AgentProcess:
    """``command args...`` with piped stdin and stdout, leading a new session (its group).

    Raises ``OSError`` when it cannot be started.
    """
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitProtocol(_STREAM_LIMIT, loop), command, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr,
        cwd=cwd, env=dict(env) if env is not None else None, start_new_session=True,
    )
    return _AgentProcess(asyncio.subprocess.Process(transport, protocol, loop), transport,
                         protocol)


class _Agent:
    """One agent process and its bridge (one AHP session, one chat)."""

    def __init__(self, bridge: PiBridge, group: _AgentProcess) -> None:
        self.bridge = bridge
        self.group = group
        self.process = group.process
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.ready = asyncio.Event()
        self.exited = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping: asyncio.Task[None] | None = None


class PiAgentRunner:
    """Spawns one pi / xcsh process per AHP session of ``server``'s host.

    ``provider`` is the agent's provider id (the host's root should list it:
    :func:`pi_root_state`).  ``confirm_tools`` is the bridge's option;
    ``start_timeout`` bounds the wait for the agent's first answer;
    ``idle_tick`` is the quiet time before the bridge's tick; ``close_timeout``
    bounds each step of stopping a process.
    """

    def __init__(
        self,
        server: HostServer,
        agent: PiAgentCommand,
        *,
        dialect: PiDialect = PiDialect.PI,
        provider: str = PI_PROVIDER,
        confirm_tools: bool = False,
        start_timeout: float = 30.0,
        idle_tick: float = 0.5,
        close_timeout: float = 3.0,
    ) -> None:
        self._server = server
        self._agent = agent
        self._dialect = dialect
        self._provider = provider
        self._confirm_tools = confirm_tools
        self._start_timeout = start_timeout
        self._idle_tick = idle_tick
        self._close_timeout = close_timeout
        self._agents: dict[str, _Agent] = {}
        """AHP session and chat URIs -> the agent."""
        self._announced: dict[str, t.SessionSummary] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._retiring: set[_Agent] = set()
        """Agents being stopped (disposed sessions among them): ``close`` waits for them."""
        self._closing = False
        self._commands = {
            "createSession": self._create_session,
            "disposeSession": self._dispose_session,
            "listSessions": self.host.answer_list_sessions,
            "createChat": self._one_chat,
            "disposeChat": self._one_chat,
            "fetchTurns": self._fetch_turns,
            "completions": self._completions,
            "resolveSessionConfig": self._resolve_session_config,
            "sessionConfigCompletions": self._session_config_completions,
        }
        server.handler = self.handle

    @property
    def host(self) -> Host:
        return self._server.host

    @property
    def processes(self) -> tuple[asyncio.subprocess.Process, ...]:
        """The agent processes still running."""
        agents = {id(a): a for a in self._agents.values()}.values()
        return tuple(a.process for a in agents
                     if not a.exited.is_set() and a.process.returncode is None)

    def bridge(self, channel: str) -> PiBridge | None:
        """The bridge of an AHP session or chat URI."""
        agent = self._agents.get(channel)
        return None if agent is None else agent.bridge

    # -- host events ------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """The server's event handler."""
        if isinstance(event, RequestReceived):
            command = self._commands.get(event.method)
            if command is None:
                event.responder.error(JsonRpcErrorCode.METHOD_NOT_FOUND,
                                      f"the pi bridge does not support {event.method}")
            else:
                command(event)
        elif isinstance(event, ClientActionApplied):
            channel = event.envelope.channel
            agent = self._agents.get(channel)
            if agent is not None:
                action = event.envelope.action
                self._carry(agent, agent.bridge.receive_client_action(channel, action))

    # -- carrying out what a bridge said ---------------------------------------------------

    def _carry(self, agent: _Agent, out: PiOutput) -> None:
        bridge = agent.bridge
        chats = False
        for d in out.actions:
            if self.host.has_channel(d.channel):
                dispatch_agent_action(self.host, d.channel, d.action, log)
                chats = chats or d.channel == bridge.chat
        for command in out.commands:
            agent.outbox.put_nowait(encode_frame(command))
        if chats:
            self._mirror(bridge)
        self._announce(bridge.session)
        self._models(bridge)
        if bridge.ready:
            agent.ready.set()
        self._server.flush()

    def _mirror(self, bridge: PiBridge) -> None:
        """``session/chatUpdated`` with the chat's summary fields the catalogue lacks."""
        self.host.mirror_chat(bridge.session, bridge.chat)

    def _announce(self, session: str) -> None:
        """``root/sessionSummaryChanged`` with what changed since the last announcement."""
        old = self._announced.get(session)
        if old is not None and self.host.has_channel(session):
            self._announced[session] = self.host.announce_summary(session, old)

    def _models(self, bridge: PiBridge) -> None:
        root = self.host.state(ROOT_CHANNEL)
        if not isinstance(root, t.RootState) or not bridge.models:
            return
        agents = tuple(attrs.evolve(a, models=bridge.models)
                       if a.provider == self._provider and a.models != bridge.models else a
                       for a in root.agents)
        if agents != root.agents:
            self.host.dispatch(ROOT_CHANNEL, t.RootAgentsChangedAction(agents=agents))

    # -- the processes -----------------------------------------------------------------------

    def _spawn_task(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _read(self, agent: _Agent) -> None:
        stdout = agent.process.stdout
        assert stdout is not None
        try:
            while True:
                try:
                    data = await asyncio.wait_for(stdout.read(_READ_CHUNK), self._idle_tick)
                except asyncio.TimeoutError:
                    self._carry(agent, agent.bridge.tick())
                    continue
                if not data:
                    break
                self._carry(agent, agent.bridge.receive_data(data))
        except (OSError, ValueError) as e:
            log.warning("pi: reading the agent failed: %s", e)
        await agent.group.wait_exit(self._close_timeout)
        code = agent.process.returncode
        agent.exited.set()
        agent.outbox.put_nowait(None)
        reason = f"the agent exited with status {code}" if code is not None else (
            "the agent closed its output")
        if not self._closing:
            log.warning("pi: %s", reason)
        self._carry(agent, agent.bridge.end_of_output(reason))
        # what it started (a tool's command) has nobody to answer to any more
        await agent.group.stop(self._close_timeout)

    async def _write(self, agent: _Agent) -> None:
        stdin = agent.process.stdin
        assert stdin is not None
        try:
            while (data := await agent.outbox.get()) is not None:
                stdin.write(data)
                await stdin.drain()
        except (OSError, ConnectionError) as e:
            log.info("pi: writing to the agent failed: %s", e)

    async def _stop(self, agent: _Agent) -> None:
        """Stop one process, bounded: ``abort`` if it runs, EOF, then its group signalled."""
        if not agent.exited.is_set() and agent.bridge.busy:
            # pi ends its running tool on abort; signalled instead, it leaves the tool's
            # command running, orphaned
            self._carry(agent, agent.bridge.abort())
            await _until(lambda: not agent.bridge.busy or agent.exited.is_set(),
                         self._close_timeout)
        agent.outbox.put_nowait(None)
        writer = agent.tasks[0] if agent.tasks else None
        if writer is not None:  # what is queued (the abort) goes out before the EOF
            await asyncio.wait({writer}, timeout=self._close_timeout)
        await agent.group.stop(self._close_timeout)
        for task in agent.tasks:
            task.cancel()
        await asyncio.gather(*agent.tasks, return_exceptions=True)

    def _retire(self, agent: _Agent) -> asyncio.Task[None]:
        """The one stop of ``agent`` (started now if it was not yet)."""
        if agent.stopping is None:
            agent.stopping = asyncio.get_running_loop().create_task(self._stop(agent))
            self._retiring.add(agent)
            agent.stopping.add_done_callback(lambda _: self._retiring.discard(agent))
        return agent.stopping

    async def close(self) -> None:
        """Stop every agent process and every task of the runner."""
        self._closing = True
        agents = {*self._agents.values(), *self._retiring}
        await asyncio.gather(*(self._retire(a) for a in agents), return_exceptions=True)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- commands ------------------------------------------------------------------------

    def _create_session(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.CreateSessionParams):
            raise LocalProtocolError(f"{event.method} is not createSession")
        uri = params.channel
        if channel_kind(uri) is not ChannelKind.SESSION:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                                  f"{uri!r} is not a session URI (ahp-session:/<id>)")
        elif self.host.has_channel(uri):
            event.responder.error(AhpErrorCode.SESSION_ALREADY_EXISTS, f"{uri!r} exists")
        elif params.provider is not None and params.provider != self._provider:
            event.responder.error(AhpErrorCode.PROVIDER_NOT_FOUND,
                                  f"no provider {params.provider!r}; this host has "
                                  f"{self._provider!r}")
        elif params.fork is not None:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                                  "the pi bridge cannot fork sessions")
        elif self._closing:
            event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR, "the host is shutting down")
        else:
            directories = params.working_directories[:1] if params.working_directories else None
            self.host.create_session(uri, provider=self._provider,
                                     working_directories=directories)
            event.responder.respond(None)
            self._spawn_task(self._start_session(params, directories))

    async def _start_session(self, params: t.CreateSessionParams,
                             directories: tuple[str, ...] | None) -> None:
        uri = params.channel
        cwd = (_path(directories[0]) if directories else None) or self._agent.cwd
        env = {**os.environ, **self._agent.env} if self._agent.env else None
        try:
            group = await _spawn_agent_process(
                self._agent.command, self._agent.args, cwd=cwd, env=env,
                stderr=None if self._agent.inherit_stderr else asyncio.subprocess.DEVNULL,
            )
        except OSError as e:
            self._fail(uri, f"cannot start {self._agent.command}: {e}")
            return
        process = group.process
        chat = "ahp-chat:/" + uri.removeprefix("ahp-session:/")
        bridge = PiBridge(session=uri, chat=chat, clock=self.host.now,
                          new_id=lambda: f"pi-{next(self._ids)}", dialect=self._dialect,
                          provider=self._provider, confirm_tools=self._confirm_tools)
        agent = _Agent(bridge, group)
        self._agents[uri] = agent
        agent.tasks = [self._spawn_task(self._write(agent)), self._spawn_task(self._read(agent))]
        self._carry(agent, bridge.start())
        ready = asyncio.ensure_future(agent.ready.wait())
        exited = asyncio.ensure_future(agent.exited.wait())
        try:
            await asyncio.wait({ready, exited}, timeout=self._start_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            exited.cancel()
        if not agent.ready.is_set() or not self.host.has_channel(uri):
            self._agents.pop(uri, None)
            await asyncio.shield(self._retire(agent))
            self._fail(uri, "the agent did not answer" if not agent.exited.is_set()
                       else f"the agent exited with status {process.returncode}")
            return
        self._agents[chat] = agent
        self._announced[uri] = self.host.ready_session(uri, default_chat=chat)
        if params.active_client is not None:
            self.host.dispatch(uri, t.SessionActiveClientSetAction(
                active_client=params.active_client))
            self._carry(agent, bridge.set_active_clients((params.active_client,)))
        self.host.dispatch(ROOT_CHANNEL, t.RootActiveSessionsChangedAction(
            active_sessions=len(self._announced)))
        self._server.flush()

    def _fail(self, uri: str, message: str) -> None:
        log.warning("pi: session %s failed: %s", uri, message)
        if self.host.has_channel(uri):
            self.host.fail_session(uri, t.ErrorInfo(error_type="spawn", message=message))
            self._server.flush()

    def _dispose_session(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.DisposeSessionParams):
            raise LocalProtocolError(f"{event.method} is not disposeSession")
        uri = params.channel
        if not self.host.has_channel(uri):
            event.responder.error(AhpErrorCode.SESSION_NOT_FOUND, f"no session {uri!r}")
            return
        agent = self._agents.pop(uri, None)
        if agent is not None:
            self._agents.pop(agent.bridge.chat, None)
            self._retire(agent)
        self.host.dispose_session(uri)
        if self._announced.pop(uri, None) is not None:
            self.host.dispatch(ROOT_CHANNEL, t.RootActiveSessionsChangedAction(
                active_sessions=len(self._announced)))
        event.responder.respond(None)

    def _one_chat(self, event: RequestReceived) -> None:
        event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                              "a pi session has exactly one chat")

    def _fetch_turns(self, event: RequestReceived) -> None:
        self.host.fetch_turns(event, ())  # the agent keeps no turns the state lacks

    def _completions(self, event: RequestReceived) -> None:
        event.responder.respond(t.CompletionsResult(items=()))

    def _resolve_session_config(self, event: RequestReceived) -> None:
        event.responder.respond(t.ResolveSessionConfigResult(
            schema=t.SessionConfigSchema(properties={}), values={}))

    def _session_config_completions(self, event: RequestReceived) -> None:
        event.responder.respond(t.SessionConfigCompletionsResult(items=()))
