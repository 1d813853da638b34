"""pi / xcsh agents behind an AHP host, on the agent layer: one agent process per AHP session.

:class:`PiAgentRunner` is an :class:`~agenthost_protocol.agent.Agent` whose
:class:`~agenthost_protocol.agent.AgentDriver` it installs as the
server's handler: the driver does the protocol (sessions, listings,
disposal, summaries, turn tasks); what is left here is pi's.  pi's RPC mode
serves one session per process, so each session's
:meth:`~PiAgentRunner.create_session` spawns ``COMMAND ARGS`` (for example
``pi --mode rpc --no-session``) with stdin and stdout as pipes, in a process
group of its own (:mod:`.processes`), and connects it to the session's one
chat through a :class:`~agenthost_protocol.bridges.pi.PiBridge`:

* the agent's stdout is read in chunks into the bridge; what it returns is
  carried out: AHP actions dispatched through the driver
  (:meth:`~AgentDriver.dispatch_actions`), frames written to the agent's
  stdin, in order, the agent's models into the root state;
* when the agent writes nothing for ``idle_tick`` seconds the bridge gets a
  :meth:`~agenthost_protocol.bridges.pi.PiBridge.tick`;
* every client action on the session or its chat goes to the bridge
  (:meth:`~PiAgentRunner.client_action`: the prompt frame for a new turn,
  ``abort`` for a cancel, confirmations, dialogs, queued and steering
  messages: the bridge keeps the chat, ``manages_chats``);
* :meth:`~PiAgentRunner.turn` waits for the bridge to end the turn; cancelled
  while the bridge still plays it, it sends ``abort``.

The session is ready once the agent answers ``get_state`` (or xcsh says
``ready``); an agent that cannot be spawned, or exits or stays silent
before that, fails the session (``session/creationFailed``).  An agent that
exits later ends its active turn with ``chat/error``.  Disposing a session,
or :meth:`~PiAgentRunner.close`, stops its process, bounded: ``abort`` when
a run goes on, stdin closed, then SIGTERM and SIGKILL to its whole group.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Mapping
from typing import Final
from urllib.parse import unquote, urlparse

from attrs import field, frozen

from .. import types as t
from ..aio.server import HostServer
from ..bridges.pi import PiBridge, PiDialect, PiOutput
from ..bridges.pi_frames import encode_frame
from ..host import Host
from .base import Agent, AgentError, NewSession
from .driver import AgentDriver
from .processes import AgentProcess, spawn_agent_process, until
from .turn import Turn

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


class _PiProcess:
    """One agent process and its bridge (one AHP session, one chat)."""

    def __init__(self, bridge: PiBridge, group: AgentProcess,
                 active_client: t.SessionActiveClient | None) -> None:
        self.bridge = bridge
        self.group = group
        self.process = group.process
        self.active_client = active_client
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.ready = asyncio.Event()
        self.exited = asyncio.Event()
        self.changed = asyncio.Event()
        """Set whenever the bridge's output was carried out (turns wait on it)."""
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping: asyncio.Task[None] | None = None


class PiAgentRunner(Agent):
    """Spawns one pi / xcsh process per AHP session of ``server``'s host.

    ``provider`` is the agent's provider id (the host's root should list it:
    :func:`pi_root_state`).  ``confirm_tools`` is the bridge's option;
    ``start_timeout`` bounds the wait for the agent's first answer;
    ``idle_tick`` is the quiet time before the bridge's tick; ``close_timeout``
    bounds each step of stopping a process.
    """

    manages_chats = True

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
        self._agents: dict[str, _PiProcess] = {}
        """AHP session and chat URIs -> the agent."""
        self._ids = itertools.count(1)
        self._retiring: set[_PiProcess] = set()
        """Agents being stopped (disposed sessions among them): ``close`` waits for them."""
        self._closing = False
        server.handler = AgentDriver(self, server.host, server.flush).handle

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

    # -- the agent layer's hooks --------------------------------------------------------

    def info(self) -> t.AgentInfo:
        return pi_agent_info(self._provider, self._dialect)

    def title_for(self, message: t.Message) -> str:
        return ""  # the bridge titles the session (pi's session name)

    def client_action(self, channel: str, action: t.StateAction) -> None:
        agent = self._agents.get(channel)
        if agent is not None:
            self._carry(agent, agent.bridge.receive_client_action(channel, action))

    async def turn(self, turn: Turn) -> None:
        """The bridge got the turn's prompt (:meth:`client_action`) and ends the turn
        itself: wait for that; cancelled while it plays the turn, ``abort``."""
        agent = self._agents.get(turn.chat)
        if agent is None:
            return
        try:
            while turn.active and not agent.exited.is_set():
                agent.changed.clear()
                await agent.changed.wait()
        except asyncio.CancelledError:
            if agent.bridge.turn_id == turn.id and not agent.exited.is_set():
                self._carry(agent, agent.bridge.abort())
            raise

    async def create_session(self, session: NewSession) -> None:
        uri, chat = session.uri, session.chat
        directories = session.working_directories
        cwd = (_path(directories[0]) if directories else None) or self._agent.cwd
        env = {**os.environ, **self._agent.env} if self._agent.env else None
        try:
            group = await spawn_agent_process(
                self._agent.command, self._agent.args, cwd=cwd, env=env,
                stderr=None if self._agent.inherit_stderr else asyncio.subprocess.DEVNULL,
            )
        except OSError as e:
            raise AgentError(f"cannot start {self._agent.command}: {e}",
                             error_type="spawn") from e
        bridge = PiBridge(session=uri, chat=chat, clock=self.host.now,
                          new_id=lambda: f"pi-{next(self._ids)}", dialect=self._dialect,
                          provider=self._provider, confirm_tools=self._confirm_tools)
        agent = _PiProcess(bridge, group, session.active_client)
        self._agents[uri] = agent
        loop = asyncio.get_running_loop()
        agent.tasks = [loop.create_task(self._write(agent)), loop.create_task(self._read(agent))]
        try:
            self._carry(agent, bridge.start())
            ready = asyncio.ensure_future(agent.ready.wait())
            exited = asyncio.ensure_future(agent.exited.wait())
            try:
                await asyncio.wait({ready, exited}, timeout=self._start_timeout,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                ready.cancel()
                exited.cancel()
            if not agent.ready.is_set():
                raise AgentError("the agent did not answer" if not agent.exited.is_set()
                                 else f"the agent exited with status {agent.process.returncode}",
                                 error_type="spawn")
        except BaseException:  # failed, or cancelled (the session was disposed)
            self._agents.pop(uri, None)
            await asyncio.shield(self._retire(agent))
            raise
        self._agents[chat] = agent

    def session_created(self, session: str) -> None:
        agent = self._agents.get(session)
        if agent is not None and agent.active_client is not None:
            self._carry(agent, agent.bridge.set_active_clients((agent.active_client,)))

    async def dispose_session(self, session: str) -> None:
        agent = self._agents.pop(session, None)
        if agent is not None:
            self._agents.pop(agent.bridge.chat, None)
            await self._retire(agent)

    # -- carrying out what a bridge said ---------------------------------------------------

    def _carry(self, agent: _PiProcess, out: PiOutput) -> None:
        bridge = agent.bridge
        for command in out.commands:
            agent.outbox.put_nowait(encode_frame(command))
        self.driver.dispatch_actions((d.channel, d.action) for d in out.actions)
        if bridge.models:
            self.driver.set_models(bridge.models)
        if bridge.ready:
            agent.ready.set()
        agent.changed.set()

    # -- the processes -----------------------------------------------------------------------

    async def _read(self, agent: _PiProcess) -> None:
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

    async def _write(self, agent: _PiProcess) -> None:
        stdin = agent.process.stdin
        assert stdin is not None
        try:
            while (data := await agent.outbox.get()) is not None:
                stdin.write(data)
                await stdin.drain()
        except (OSError, ConnectionError) as e:
            log.info("pi: writing to the agent failed: %s", e)

    async def _stop(self, agent: _PiProcess) -> None:
        """Stop one process, bounded: ``abort`` if it runs, EOF, then its group signalled."""
        if not agent.exited.is_set() and agent.bridge.busy:
            # pi ends its running tool on abort; signalled instead, it leaves the tool's
            # command running, orphaned
            self._carry(agent, agent.bridge.abort())
            await until(lambda: not agent.bridge.busy or agent.exited.is_set(),
                        self._close_timeout)
        agent.outbox.put_nowait(None)
        writer = agent.tasks[0] if agent.tasks else None
        if writer is not None:  # what is queued (the abort) goes out before the EOF
            await asyncio.wait({writer}, timeout=self._close_timeout)
        await agent.group.stop(self._close_timeout)
        for task in agent.tasks:
            task.cancel()
        await asyncio.gather(*agent.tasks, return_exceptions=True)

    def _retire(self, agent: _PiProcess) -> asyncio.Task[None]:
        """The one stop of ``agent`` (started now if it was not yet)."""
        if agent.stopping is None:
            agent.stopping = asyncio.get_running_loop().create_task(self._stop(agent))
            self._retiring.add(agent)
            agent.stopping.add_done_callback(lambda _: self._retiring.discard(agent))
        return agent.stopping

    async def close(self) -> None:
        """Stop every turn (the driver), then every agent process, bounded."""
        self._closing = True
        await self.driver.close()
        agents = {*self._agents.values(), *self._retiring}
        await asyncio.gather(*(self._retire(a) for a in agents), return_exceptions=True)
