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
exits later ends its active turn with ``chat/error``, and so does every
later turn of its session.  One that writes a line over 64 MiB, leaves 64
MiB of its stdin unread, or does not answer ``abort`` within
``cancel_timeout`` is stopped, with that as the error; bad lines and
unknown frames are dropped, their log lines throttled.  Disposing a session,
or :meth:`~PiAgentRunner.close`, stops its process, bounded: ``abort`` when
a run goes on, stdin closed, then SIGTERM and SIGKILL to its whole group.

What survives a restart of the host (a store): the history always (the
host's); the conversation with the agent when pi keeps a session file (it
does unless run with ``--no-session``).  The file ``get_state`` names goes
into the session's ``_meta`` (``{"pi": {"sessionFile": ...}}``, kept up to
date when pi moves to a new file); when a client uses a stored session
again, :meth:`~PiAgentRunner.resume_session` spawns its process as
``create_session`` does and sends ``switch_session`` with that file.  No
file recorded, a file that is gone, or a switch that fails: the process is
stopped, the history stays readable and every new turn ends with
``chat/error`` ``NotResumable``; but a chat with no turn yet has nothing to
lose (pi writes its file only once there is a reply): a new pi session
serves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlparse

from attrs import field, frozen

from .. import types as t
from ..aio.server import HostServer
from ..bridges.pi import PiBridge, PiDialect, PiOutput
from ..bridges.pi_frames import encode_frame
from ..host import Host
from .base import Agent, AgentError, NewSession
from .driver import AgentDriver
from .processes import AgentProcess, LogThrottle, spawn_agent_process, until
from .turn import Turn

__all__ = ["PI_PROVIDER", "PiAgentCommand", "PiAgentRunner", "pi_agent_info", "pi_root_state"]

log = logging.getLogger(__name__)

PI_PROVIDER: Final = "pi"
"""The default provider id of the pi agent in the root state."""

_READ_CHUNK: Final = 64 * 1024
_MAX_UNSENT: Final = 64 * 1024 * 1024
"""Bytes queued for an agent that does not read its stdin; past them it is stopped."""

META_KEY: Final = "pi"
"""The key of a session's ``_meta`` that holds pi's ``sessionFile``."""



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
        self.live = False
        """Its session is ready (created, or resumed): its session file is recorded."""
        self.recorded: str | None = None
        """The session file last written into the session's ``_meta``."""
        self.failure: str | None = None
        """Why the runner stopped the agent itself (it broke a bound), for the turn's error."""
        self.skipped = 0
        """The bridge's count of skipped frames, as last logged."""
        self.unsent = 0
        """Bytes queued for the agent's stdin and not taken by the pipe yet."""


class PiAgentRunner(Agent):
    """Spawns one pi / xcsh process per AHP session of ``server``'s host.

    ``provider`` is the agent's provider id (the host's root should list it:
    :func:`pi_root_state`).  ``confirm_tools`` is the bridge's option;
    ``start_timeout`` bounds the wait for the agent's first answer;
    ``idle_tick`` is the quiet time before the bridge's tick; ``close_timeout``
    bounds each step of stopping a process; ``resume_timeout`` bounds the
    answer to ``switch_session``; an agent that has not answered ``abort``
    (a client's cancel) within ``cancel_timeout`` seconds is stopped.  A line
    longer than the bridge's bound (64 MiB) on an agent's stdout stops that
    agent.  Either way its turn ends with ``chat/error`` saying why, and so
    does every later turn of its session.
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
        resume_timeout: float = 30.0,
        cancel_timeout: float = 10.0,
    ) -> None:
        self._server = server
        self._agent = agent
        self._dialect = dialect
        self._provider = provider
        self._confirm_tools = confirm_tools
        self._start_timeout = start_timeout
        self._idle_tick = idle_tick
        self._close_timeout = close_timeout
        self._resume_timeout = resume_timeout
        self._cancel_timeout = cancel_timeout
        self._bad_lines = LogThrottle(log)
        self._unknown_frames = LogThrottle(log, logging.INFO)
        self._agents: dict[str, _PiProcess] = {}
        """AHP session and chat URIs -> the agent."""
        self._ids = itertools.count(1)
        self._retiring: set[_PiProcess] = set()
        """Agents being stopped (disposed sessions among them): ``close`` waits for them."""
        self._closing = False
        server.handler = AgentDriver(self, server.host, server.flush,
                                     close_timeout=close_timeout).handle

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
        # a stored session's actions wait in the agent layer until resume_session is
        # done; one that could not be resumed has no process: nothing to tell
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
        directories = session.working_directories
        cwd = (_path(directories[0]) if directories else None) or self._agent.cwd
        await self._spawn_session(session.uri, session.chat, cwd, session.active_client,
                                  self._new_id())

    async def _spawn_session(self, uri: str, chat: str, cwd: str | None,
                             active_client: t.SessionActiveClient | None,
                             new_id: Callable[[], str]) -> _PiProcess:
        """Spawn the session's process and wait until it answers (registered for ``uri``
        meanwhile, for ``chat`` too once it did); raises :class:`AgentError`."""
        env = {**os.environ, **self._agent.env} if self._agent.env else None
        try:
            group = await spawn_agent_process(
                self._agent.command, self._agent.args, cwd=cwd, env=env,
                stderr=None if self._agent.inherit_stderr else asyncio.subprocess.DEVNULL,
            )
        except OSError as e:
            raise AgentError(f"cannot start {self._agent.command}: {e}",
                             error_type="spawn") from e
        bridge = PiBridge(session=uri, chat=chat, clock=self.host.now, new_id=new_id,
                          dialect=self._dialect, provider=self._provider,
                          confirm_tools=self._confirm_tools)
        agent = _PiProcess(bridge, group, active_client)
        self._agents[uri] = agent
        loop = asyncio.get_running_loop()
        agent.tasks = [loop.create_task(self._write(agent)), loop.create_task(self._read(agent))]
        try:
            self._carry(agent, bridge.start())
            await self._until(agent, lambda: bridge.ready, self._start_timeout)
            if not agent.ready.is_set():
                raise AgentError("the agent did not answer" if not agent.exited.is_set()
                                 else f"the agent exited with status {agent.process.returncode}",
                                 error_type="spawn")
        except BaseException:  # failed, or cancelled (the session was disposed)
            self._agents.pop(uri, None)
            await asyncio.shield(self._retire(agent))
            raise
        self._agents[chat] = agent
        return agent

    async def _until(self, agent: _PiProcess, condition: Callable[[], bool],
                     timeout: float) -> None:
        """Wait until ``condition()`` holds after one of the bridge's outputs, the agent
        exits, or ``timeout`` passes."""
        async def wait() -> None:
            while not condition() and not agent.exited.is_set():
                agent.changed.clear()
                await agent.changed.wait()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(wait(), timeout)

    def _new_id(self, taken: frozenset[str] = frozenset()) -> Callable[[], str]:
        """The bridge's ids (``pi-1`` ...: turns, input requests), skipping the turn ids
        a stored chat has already."""
        def new_id() -> str:
            while True:
                candidate = f"pi-{next(self._ids)}"
                if candidate not in taken:
                    return candidate
        return new_id

    async def resume_session(self, session: str, state: t.SessionState) -> str | None:
        """A session of an earlier run is used again: its process spawned as
        :meth:`create_session` does, then ``switch_session`` to the file pi kept it in.

        ``None`` once pi switched; else the process is stopped and why it cannot
        continue.  Never raises for what the agent does.
        """
        return await self._resume(session, state)

    async def _resume(self, session: str, state: t.SessionState) -> str | None:
        kept = "this session's history is kept but it cannot continue"
        if not self.host.has_channel(session):
            return "the session was disposed"
        chat = state.default_chat or next((c.resource for c in state.chats), None) or next(
            iter(self.host.chats_of(session)), None)
        if chat is None:
            return f"this session has no chat: {kept}"
        chat_state = self.host.state(chat) if self.host.has_channel(chat) else None
        turns = chat_state.turns if isinstance(chat_state, t.ChatState) else ()
        stored = state.meta.get(META_KEY) if state.meta is not None else None
        recorded = stored.get("sessionFile") if isinstance(stored, Mapping) else None
        directories = state.working_directories
        cwd = (_path(directories[0]) if directories else None) or self._agent.cwd
        path: str | None = None
        if isinstance(recorded, str) and recorded:
            full = Path(cwd or os.getcwd(), recorded)  # pi names it absolute; else from cwd
            if full.is_file():
                path = recorded if Path(recorded).is_absolute() else str(full)
            elif turns:
                return f"the session file {recorded} is gone: {kept}"
        elif turns:
            if "--no-session" in self._agent.args:
                return (f"{self._agent.command} runs with --no-session: there is no session "
                        f"file to resume this session from; {kept}")
            return f"the agent reported no session file for this session: {kept}"
        # path None: a chat without turns has nothing to lose (pi writes its file only
        # once there is a reply): a new pi session serves it
        if self._closing:
            return f"the host is shutting down: {kept}"
        try:
            agent = await self._spawn_session(
                session, chat, cwd, None, self._new_id(frozenset(turn.id for turn in turns)))
        except AgentError as e:
            return f"the agent did not start again ({e}): {kept}"
        reason = "the session or the host went away while it was resumed"
        try:
            switched: tuple[bool, str] | None = (True, "")
            if path is not None:
                self._carry(agent, agent.bridge.switch_session(path))
                await self._until(agent, lambda: agent.bridge.switched is not None,
                                  self._resume_timeout)
                switched = agent.bridge.switched
                if switched is None or not switched[0]:
                    why = (switched[1] if switched is not None
                           else "the agent exited" if agent.exited.is_set()
                           else f"no answer within {self._resume_timeout:g} s")
                    reason = f"the agent could not switch to the session file {path} ({why})"
                else:
                    agent.recorded = path  # what the session's _meta says already
            if (switched is not None and switched[0] and not self._closing
                    and not agent.exited.is_set() and self.host.has_channel(session)):
                agent.live = True
                self._record(agent)  # a new session's file, if pi named one
                return None
        except BaseException:  # cancelled (the host closes): the process goes too
            await asyncio.shield(self._forget(agent))
            raise
        await self._forget(agent)
        return f"{reason}: {kept}"

    async def _forget(self, agent: _PiProcess) -> None:
        """Unregister ``agent`` and stop its process."""
        for uri in (agent.bridge.session, agent.bridge.chat):
            if self._agents.get(uri) is agent:
                del self._agents[uri]
        await self._retire(agent)

    def _record(self, agent: _PiProcess) -> None:
        """``{"pi": {"sessionFile"}}`` into the session's ``_meta`` (the other keys kept),
        when the file pi reported is not the one recorded."""
        file = agent.bridge.session_file
        uri = agent.bridge.session
        if not agent.live or file is None or file == agent.recorded:
            return
        state = self.host.state(uri) if self.host.has_channel(uri) else None
        if not isinstance(state, t.SessionState):
            return
        agent.recorded = file
        meta = {**(state.meta or {}), META_KEY: {"sessionFile": file}}
        self.driver.dispatch_session(uri, t.SessionMetaChangedAction(meta=meta))

    def session_created(self, session: str) -> None:
        agent = self._agents.get(session)
        if agent is None:
            return
        agent.live = True
        self._record(agent)  # what get_state said: the session file pi keeps it in
        if agent.active_client is not None:
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
            frame = encode_frame(command)
            if agent.unsent + len(frame) > _MAX_UNSENT:
                self._fail(agent, f"the agent left more than {_MAX_UNSENT} bytes of its stdin "
                                  f"unread")
                break
            agent.unsent += len(frame)
            agent.outbox.put_nowait(frame)
            if command["type"] == "abort" and not agent.exited.is_set():
                self._watch_abort(agent)
        self.driver.dispatch_actions((d.channel, d.action) for d in out.actions)
        if bridge.models:
            self.driver.set_models(bridge.models)
        if bridge.ready:
            agent.ready.set()
        if bridge.session_file != agent.recorded:
            self._record(agent)  # pi moved to another file (new_session ...)
        agent.changed.set()

    # -- the processes -----------------------------------------------------------------------

    def _watch_abort(self, agent: _PiProcess) -> None:
        """An agent that does not answer ``abort`` in time is hung: it is stopped, or the
        session's next prompt (held until the agent is idle) would wait forever."""
        async def deadline() -> None:
            await asyncio.sleep(self._cancel_timeout)
            if agent.bridge.aborting and not agent.exited.is_set():
                self._fail(agent, f"the agent did not answer abort within "
                                  f"{self._cancel_timeout:g} s")
        self._spawn(agent, deadline())

    def _spawn(self, agent: _PiProcess, coroutine: Coroutine[Any, Any, None]) -> None:
        """A task of ``agent`` (cancelled when it is stopped), forgotten once done."""
        task = asyncio.get_running_loop().create_task(coroutine)
        agent.tasks.append(task)

        def done(task: asyncio.Task[None]) -> None:
            if task in agent.tasks:
                agent.tasks.remove(task)
        task.add_done_callback(done)

    def _fail(self, agent: _PiProcess, reason: str) -> None:
        """The agent broke a bound: stop it; its turn ends with ``reason`` (``_read``)."""
        if agent.failure is not None or agent.exited.is_set():
            return
        agent.failure = f"{reason}: the host stopped it"
        log.warning("pi: %s", agent.failure)
        async def stop() -> None:
            await agent.group.stop(self._close_timeout)
        self._spawn(agent, stop())

    def _checked(self, agent: _PiProcess, out: PiOutput) -> PiOutput:
        """The bad lines and the skipped frames of ``out`` logged, throttled; a line over
        the bound stops the agent."""
        for bad in out.malformed:
            if bad.too_long:
                self._fail(agent, f"the agent wrote a {bad.reason} on its stdout")
            else:
                self._bad_lines.log("pi: line %d of the agent skipped (%s): %r", bad.line,
                                    bad.reason, bad.excerpt)
        count, kind = agent.bridge.skipped_frames
        if count != agent.skipped:
            agent.skipped = count
            self._unknown_frames.log("pi: a frame of the agent skipped: %s", kind)
        return out

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
                self._carry(agent, self._checked(agent, agent.bridge.receive_data(data)))
                if agent.failure is not None:
                    break
        except (OSError, ValueError) as e:
            log.warning("pi: reading the agent failed: %s", e)
        if agent.failure is not None:
            await agent.group.stop(self._close_timeout)
        await agent.group.wait_exit(self._close_timeout)
        code = agent.process.returncode
        agent.exited.set()
        agent.outbox.put_nowait(None)
        reason = agent.failure or (f"the agent exited with status {code}" if code is not None
                                   else "the agent closed its output")
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
                agent.unsent -= len(data)
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
