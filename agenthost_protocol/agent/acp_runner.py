"""An ACP agent process behind an AHP host, on the agent layer (extra ``acp``).

:class:`AcpAgentRunner` is an :class:`~agenthost_protocol.agent.Agent` whose
:class:`~agenthost_protocol.agent.AgentDriver` it installs as the server's
handler: the driver does the protocol (sessions, listings, disposal,
summaries, turn tasks); what is left here is ACP's.  One agent process,
speaking the Agent Client Protocol on stdio through the ACP SDK's JSON-RPC
``acp.connection.Connection``, serves every session:

* :meth:`~AcpAgentRunner.start` spawns it and sends ``initialize``; its name
  goes into the root state (:meth:`~AgentDriver.set_info`);
* :meth:`~AcpAgentRunner.create_session` runs ``session/new`` before
  ``createSession`` is answered (``answers_when_ready``): the session is then
  ready with the agent's config and a
  :class:`~agenthost_protocol.bridges.acp.AcpBridge`, its models in the root
  state (:meth:`~AgentDriver.set_models`); the agent's error text fails it;
* the agent's notifications and requests (permission, elicitation) go to
  the session's bridge, whose outputs are carried out: AHP actions through
  :meth:`~AgentDriver.dispatch_actions`, requests and notifications sent to
  the agent, its waiting requests answered; every client action goes to the
  bridge (:meth:`~AcpAgentRunner.client_action`, ``manages_chats``), and
  :meth:`~AcpAgentRunner.turn` waits for the bridge to end the turn;
* a disposed session's prompt is cancelled, its waiting requests answered
  and, if the agent can, ``session/close`` sent.

What survives a restart of the host (a store, ``build_acp_server(store=...)``):
the history always (the host's); the conversation with the agent when the
agent advertised ``agentCapabilities.loadSession``.  Each session's ACP
``sessionId`` and ``cwd`` are kept in its ``_meta`` (``{"acp": {"sessionId",
"cwd"}}``, :meth:`~AcpAgentRunner.session_created`); when a client uses a
stored session again, :meth:`~AcpAgentRunner.resume_session` sends
``session/load`` to the one agent process and connects a new bridge to the
session's chat.  What the agent replays while it loads is dropped: the host
has that history already.  An agent without ``loadSession``, a session
without a recorded id, or a ``session/load`` that fails: its history stays
readable and every new turn ends with ``chat/error`` ``NotResumable``.

The agent's requests are read as raw JSON (the SDK's low-level connection),
so the bridge sees exactly what the agent sent, whatever schema version it
was built against; its stdout is read through a bounded reader of this
module, not the SDK's (which holds a line whole whatever its length).  An
agent that breaks a bound (a line over ``max_line_bytes``, more than
``MAX_WAITING_REQUESTS`` requests waiting, ``MAX_UNREAD_BYTES`` of its stdin
unread) is stopped, and every turn ends with ``chat/error`` saying which;
every request but ``session/prompt`` has a deadline (``request_timeout``).
The agent may not read or write files or run terminals through the host: the
runner advertises neither ``fs`` nor ``terminal``.

The agent runs in a process group of its own (:mod:`.processes`; not the
SDK's ``spawn_stdio_transport``, which signals only its direct child and
then waits for it without a bound): :meth:`AcpAgentRunner.close` cancels the
turns and the prompts in flight, closes its stdin, then signals the whole
group, every step bounded, so neither the agent nor what it started
(Codex's native binary, a shell tool) outlives the runner.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import os
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Final
from urllib.parse import unquote, urlparse

import attrs
from acp.connection import Connection
from acp.exceptions import RequestError
from acp.transports import default_environment
from attrs import field, frozen

from .. import types as t
from .._version import __version__
from ..aio.server import HostServer, ServerLimits
from ..bridges.acp import (
    AcpBridge,
    AcpErrorReply,
    AcpNotification,
    AcpReply,
    AcpRequest,
    AcpSessionSetup,
    AhpDispatch,
    BridgeOutput,
    PromptCapabilities,
    acp_error_message,
)
from ..bridges.pi_frames import DEFAULT_MAX_LINE_BYTES, JsonLinesDecoder, MalformedLine
from ..host import Authorize, Host, HostStore, OwnershipPolicy
from .base import Agent, AgentError, NewSession
from .driver import AgentDriver
from .processes import AgentProcess as _AgentProcess
from .processes import LogThrottle as _LogThrottle
from .processes import spawn_agent_process as _spawn_agent_process
from .processes import until as _until
from .turn import Turn

__all__ = ["ACP_PROVIDER", "AcpAgentCommand", "AcpAgentRunner", "acp_agent_info",
           "acp_root_state", "build_acp_server"]

log = logging.getLogger(__name__)

ACP_PROVIDER: Final = "acp"
"""The default provider id of the ACP agent in the root state."""

ACP_PROTOCOL_VERSION: Final = 1

META_KEY: Final = "acp"
"""The key of a session's ``_meta`` that holds its ACP ``sessionId`` and ``cwd``."""

MAX_LINE_BYTES: Final = DEFAULT_MAX_LINE_BYTES
"""64 MiB: a longer line on the agent's stdout stops the agent (a tool call's diff may be big;
the SDK's own reader keeps a line whole whatever its size)."""

_READ_CHUNK: Final = 64 * 1024

MAX_WAITING_REQUESTS: Final = 256
"""The agent's requests (permissions, elicitations) that may wait for clients at once; one
more stops the agent (each shows a tool call or a question: a flood would bury the chat)."""

MAX_UNREAD_BYTES: Final = 64 * 1024 * 1024
"""What may wait in the pipe to an agent that does not read its stdin; past it the agent
is stopped (every answer to it would be kept)."""


class _AgentStdio:
    """The agent's stdio as the SDK connection's message transport, bounded.

    The SDK's own stdio transport joins the chunks of a line whatever its
    length (one line of gigabytes is held whole) and logs a traceback for every
    line that is not JSON.  Here a line past ``max_line_bytes`` is never kept:
    ``on_overflow`` is told (the runner stops the agent) and the stream ends;
    lines that are not JSON objects are dropped, their warnings throttled.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 max_line_bytes: int, on_overflow: Callable[[str], None]) -> None:
        self._reader = reader
        self._writer = writer
        self._max = max_line_bytes
        self._decoder = JsonLinesDecoder(max_line_bytes=max_line_bytes)
        self._ready: collections.deque[dict[str, Any]] = collections.deque()
        self._ended = False
        self._given_up = False
        self._on_overflow = on_overflow
        self._bad = _LogThrottle(log)

    async def send(self, message: dict[str, Any]) -> None:
        if self._writer.transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
            self._on_overflow(f"the agent left more than {MAX_UNREAD_BYTES} bytes of its "
                              f"stdin unread")
            raise ConnectionError("the agent does not read its stdin")
        # one write() per message: concurrent senders never interleave inside a line
        self._writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while not self._ready:
            if self._ended:
                return None
            data = await self._reader.read(_READ_CHUNK)
            if self._given_up:  # the runner gave up on the agent meanwhile
                return None
            frames = self._decoder.feed(data) if data else self._decoder.close()
            self._ended = not data
            for frame in frames:
                if not isinstance(frame, MalformedLine):
                    self._ready.append(dict(frame))
                elif frame.too_long:
                    self._ended = True
                    self._ready.clear()
                    self._on_overflow(f"the agent wrote a line longer than {self._max} bytes "
                                      f"on its stdout")
                    return None
                else:
                    self._bad.log("ACP agent: line %d skipped (%s): %r", frame.line,
                                      frame.reason, frame.excerpt)
        return self._ready.popleft()

    def end(self) -> None:
        """Read nothing more: what the agent writes from now on is dropped."""
        self._ended = self._given_up = True
        self._ready.clear()

    async def close(self) -> None:
        self.end()



def acp_agent_info(
    provider: str = ACP_PROVIDER,
    display_name: str = "ACP agent",
    description: str = "An agent speaking the Agent Client Protocol",
    models: tuple[t.SessionModelInfo, ...] = (),
) -> t.AgentInfo:
    """The ACP agent as the root state lists it (no fork, no side chats: one chat a session)."""
    return t.AgentInfo(provider=provider, display_name=display_name, description=description,
                       models=models)


def acp_root_state(provider: str = ACP_PROVIDER) -> t.RootState:
    """The root state of a host that runs one ACP agent (updated once the agent is known)."""
    return t.RootState(agents=(acp_agent_info(provider),), active_sessions=0)


@frozen(kw_only=True)
class AcpAgentCommand:
    """How to start the agent: ``command args...`` in ``cwd``, with ``env`` added."""

    command: str
    args: tuple[str, ...] = ()
    cwd: str | None = None
    env: Mapping[str, str] | None = field(default=None, hash=False)
    """Added to the trimmed environment the SDK gives an agent (``HOME``, ``PATH`` ...)."""
    inherit_stderr: bool = True
    """The agent's stderr goes to ours (else it is discarded: a pipe nobody reads
    would block a chatty agent)."""


def build_acp_server(
    agent: AcpAgentCommand,
    *,
    clock: Callable[[], int],
    provider: str = ACP_PROVIDER,
    replay_window: int = 10_000,
    limits: ServerLimits | None = None,
    session_cwd: str | None = None,
    store: HostStore | None = None,
    close_timeout: float = 2.0,
    authorize: Authorize | OwnershipPolicy | None = None,
) -> tuple[HostServer, AcpAgentRunner]:
    """A :class:`HostServer` whose host runs ``agent``, and its runner (not started yet).

    The shape of ``agent.build_agent_server``: ``await runner.start()``
    before serving, ``await runner.close()`` where an agent's service is closed.
    """
    host = Host(
        clock=clock,
        server_info=t.Implementation(name="agenthost-protocol", version=__version__),
        root=acp_root_state(provider),
        replay_max_envelopes=replay_window,
        store=store,
        authorize=authorize,
    )
    server = HostServer(host, limits=limits)
    return server, AcpAgentRunner(server, agent, provider=provider, session_cwd=session_cwd,
                                  close_timeout=close_timeout)


class AcpAgentRunner(Agent):
    """One ACP agent process serving every session of ``server``'s host.

    Call :meth:`start` (spawns the agent, ``initialize``), then serve; call
    :meth:`close` to stop (the turns cancelled, prompts in flight cancelled,
    the agent's stdin closed, then SIGTERM and SIGKILL to its process group).
    ``provider`` is the agent's provider id in the root state (the host's
    root should list it: :func:`acp_root_state`); ``session_cwd`` is the
    ``cwd`` of ``session/new`` when a client names no working directory
    (default: the host's current directory); ``close_timeout`` bounds each
    step of stopping the agent; ``resume_timeout`` bounds ``session/load``;
    ``request_timeout`` bounds every other request but ``session/prompt``
    (``session/new``, model and mode switches, ``session/close``); a prompt
    whose turn is over (cancelled) is waited for ``cancel_timeout`` seconds
    after ``session/cancel``, then the session's next prompt goes out anyway;
    a line longer than ``max_line_bytes`` on the agent's stdout stops the
    agent (every turn ends with ``chat/error`` saying so).
    """

    manages_chats = True
    answers_when_ready = True

    def __init__(
        self,
        server: HostServer,
        agent: AcpAgentCommand,
        *,
        provider: str = ACP_PROVIDER,
        session_cwd: str | None = None,
        start_timeout: float = 30.0,
        close_timeout: float = 2.0,
        resume_timeout: float = 30.0,
        request_timeout: float = 60.0,
        cancel_timeout: float = 5.0,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self._server = server
        self._agent = agent
        self._provider = provider
        self._session_cwd = session_cwd
        self._start_timeout = start_timeout
        self._close_timeout = close_timeout
        self._resume_timeout = resume_timeout
        self._request_timeout = request_timeout
        self._cancel_timeout = cancel_timeout
        self._max_line_bytes = max_line_bytes
        self._failure: str | None = None
        """Why the runner stopped the agent itself (it broke a bound), for the turns' errors."""
        self._unknown = _LogThrottle(log, logging.INFO)
        self._conn: Connection | None = None
        self._stdio: _AgentStdio | None = None
        self._group: _AgentProcess | None = None
        self._caps = PromptCapabilities()
        self._closes_sessions = False
        """The agent advertised ``sessionCapabilities.close`` (``session/close``)."""
        self._loads_sessions = False
        """The agent advertised ``agentCapabilities.loadSession`` (``session/load``)."""
        self._cwds: dict[str, str] = {}
        """ACP sessionId -> its ``cwd``."""
        self._loading: set[str] = set()
        """ACP sessionIds whose ``session/load`` runs: their replayed updates are dropped."""
        self._info = acp_agent_info(provider)
        self._bridges: dict[str, AcpBridge] = {}
        """ACP sessionId -> its bridge."""
        self._by_channel: dict[str, AcpBridge] = {}
        """AHP session and chat URIs -> the bridge."""
        self._waiting: dict[int, asyncio.Future[BridgeOutput]] = {}
        """The agent's requests waiting for a bridge's answer, by our own request number."""
        self._numbers = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        """Set whenever a bridge's output was carried out (turns wait on it)."""
        self._running = False
        self._closing = False
        server.handler = AgentDriver(self, server.host, server.flush,
                                     close_timeout=close_timeout).handle

    @property
    def host(self) -> Host:
        return self._server.host

    @property
    def running(self) -> bool:
        """Whether the agent process is up (started and not exited)."""
        return self._running

    @property
    def process(self) -> asyncio.subprocess.Process | None:
        """The agent process (the leader of its process group), once spawned."""
        return self._group.process if self._group is not None else None

    def bridge(self, channel: str) -> AcpBridge | None:
        """The bridge of an AHP session or chat URI."""
        return self._by_channel.get(channel)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the agent and ``initialize`` it; raises ``OSError`` or ``RuntimeError``."""
        agent = self._agent
        try:
            # the SDK's trimmed environment (HOME, PATH ...), as its own spawn gives it
            group = await _spawn_agent_process(
                agent.command, agent.args, cwd=agent.cwd,
                env={**default_environment(), **(agent.env or {})},
                stderr=None if agent.inherit_stderr else asyncio.subprocess.DEVNULL,
            )
            self._group = group
            assert group.process.stdin is not None and group.process.stdout is not None
            stdio = _AgentStdio(group.process.stdout, group.process.stdin,
                                max_line_bytes=self._max_line_bytes,
                                on_overflow=self._misbehaved)
            self._stdio = stdio
            conn = Connection(self._on_agent, stdio)
            self._conn = conn
            self._running = True
            result: object = await asyncio.wait_for(conn.send_request("initialize", {
                "protocolVersion": ACP_PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": False, "writeTextFile": False},
                    "terminal": False,
                    "elicitation": {"form": {}, "url": {}},
                },
                "clientInfo": {"name": "agenthost-protocol", "version": __version__},
            }), self._start_timeout)
        except BaseException as e:
            self._running = False
            await asyncio.shield(self._stop_agent())
            if isinstance(e, (RequestError, ConnectionError, asyncio.TimeoutError)):
                raise RuntimeError(f"the ACP agent did not initialize: {e}") from e
            raise
        self._caps = PromptCapabilities.from_initialize(result)
        self._closes_sessions = _closes_sessions(result)
        self._loads_sessions = _loads_sessions(result)
        info = result.get("agentInfo") if isinstance(result, Mapping) else None
        if isinstance(info, Mapping):
            name = info.get("title") or info.get("name")
            version = info.get("version")
            if isinstance(name, str) and name:
                described = f"{name} {version}" if isinstance(version, str) else name
                self._info = attrs.evolve(self._info, display_name=name,
                                          description=f"{described} (ACP)")
                self.driver.set_info(self._info)
        self._spawn(self._watch(group))

    async def close(self) -> None:
        """Stop the turns (the driver), then the agent and what it started (bounded);
        the turns the agent did not end get ``chat/error``.

        First ``session/cancel`` for every prompt in flight, and a moment for
        the answers (agents stop their tools on a cancel; Gemini CLI's shell
        tool otherwise keeps running), then the process group is stopped.
        """
        if self._closing:
            return
        self._closing = True
        await self.driver.close()
        conn, group = self._conn, self._group
        bridges = list(self._bridges.values())
        if conn is not None and group is not None and self._running:
            busy = [b for b in bridges if b.busy]
            if busy:
                sends = asyncio.gather(*(conn.send_notification(
                    "session/cancel", {"sessionId": b.acp_session_id}) for b in busy),
                    return_exceptions=True)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(sends, self._close_timeout)
                await _until(lambda: not any(b.busy for b in busy)
                             or group.returncode is not None, self._close_timeout)
        await self._stop_agent()
        self._running = False
        for future in self._waiting.values():
            future.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for bridge in bridges:  # a turn the agent did not end: its clients are told why
            self._carry(bridge, bridge.agent_closed("the host stopped the agent"))

    async def _stop_agent(self) -> None:
        """The process group stopped, then the connection closed, each bounded."""
        group, conn = self._group, self._conn
        if group is not None:
            await group.stop(self._close_timeout)
        if conn is not None:
            # its sender may wait on a pipe nobody reads any more
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(conn.close(), self._close_timeout)

    async def _watch(self, group: _AgentProcess) -> None:
        await group.wait_exit()
        code = group.returncode
        if self._closing or not self._running:
            return
        self._running = False
        reason = self._failure or f"the agent exited with status {code}"
        log.warning("the ACP agent is gone: %s", reason)
        for bridge in list(self._bridges.values()):
            self._carry(bridge, bridge.agent_closed(reason))
        for future in self._waiting.values():
            future.cancel()
        # what it started (tools, a native binary) has nobody to answer to any more
        await group.stop(self._close_timeout)

    def _misbehaved(self, reason: str) -> None:
        """The agent broke a bound the host keeps: it is stopped, its turns end with ``reason``."""
        if self._failure is not None or self._closing:
            return
        self._failure = f"{reason}: the host stopped it"
        if self._stdio is not None:
            self._stdio.end()
        group = self._group
        if group is not None:
            self._spawn(self._stop_group(group))

    async def _stop_group(self, group: _AgentProcess) -> None:
        await group.stop(self._close_timeout)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the agent layer's hooks --------------------------------------------------------

    def info(self) -> t.AgentInfo:
        return self._info

    def title_for(self, message: t.Message) -> str:
        return ""  # the bridge titles the session (the agent's session_info_update)

    def refuse_session(self, session: NewSession) -> str | None:
        return None if self._running and not self._closing else "the ACP agent is not running"

    async def create_session(self, session: NewSession) -> t.SessionConfigState | None:
        """``session/new``; the agent's error text fails the session."""
        directories = session.working_directories
        cwd = (_path(directories[0]) if directories else None) or self._session_cwd or os.getcwd()
        conn = self._conn
        try:
            if conn is None or not self._running:
                raise ConnectionError("the agent is gone")
            result: object = await asyncio.wait_for(conn.send_request(
                "session/new", {"cwd": cwd, "mcpServers": []}), self._request_timeout)
            session_id = result.get("sessionId") if isinstance(result, Mapping) else None
            if not isinstance(session_id, str) or not session_id:
                raise RequestError(-32603, "session/new gave no sessionId")
        except RequestError as e:  # the cause is in data (e.g. an HTTP 400 body)
            raise AgentError(acp_error_message(e.code, str(e), e.data),
                             error_type="acp:session/new") from e
        except ConnectionError as e:
            raise AgentError(str(e) or type(e).__name__, error_type="acp:session/new") from e
        except asyncio.TimeoutError as e:
            raise AgentError(f"the agent did not answer session/new within "
                             f"{self._request_timeout:g} s", error_type="acp:session/new") from e
        setup = AcpSessionSetup.from_new_session(result)
        bridge = AcpBridge(
            acp_session_id=session_id, session=session.uri, chat=session.chat,
            new_id=_id_factory(), now=self.host.now, setup=setup,
            prompt_capabilities=self._caps,
        )
        self._add_bridge(bridge, cwd)
        models = setup.models(self._provider)
        if models:
            self.driver.set_models(models)
        return setup.config

    def session_created(self, session: str) -> None:
        """The session is ready: its ACP ``sessionId`` and ``cwd`` go into its ``_meta``
        (``{"acp": {...}}``, the other keys kept), which the host's store keeps for
        :meth:`resume_session`."""
        bridge = self._by_channel.get(session)
        if bridge is not None and bridge.session == session:
            self._remember(bridge)

    async def resume_session(self, session: str, state: t.SessionState) -> str | None:
        """A session of an earlier run is used again: ``session/load`` its ACP session.

        ``None`` once the agent loaded it (what it replays meanwhile is dropped:
        the host has the history); else why it cannot continue.  Never raises
        for what the agent does.
        """
        return await self._resume(session, state)

    async def _resume(self, session: str, state: t.SessionState) -> str | None:
        kept = "this session's history is kept but it cannot continue"
        if not self.host.has_channel(session):
            return "the session was disposed"
        stored = state.meta.get(META_KEY) if state.meta is not None else None
        session_id = stored.get("sessionId") if isinstance(stored, Mapping) else None
        if not isinstance(session_id, str) or not session_id:
            return f"no ACP session id was recorded for this session: {kept}"
        if not self._loads_sessions:
            return f"the ACP agent cannot load sessions (no loadSession capability): {kept}"
        chat = _chat_of(self.host, session, state)
        if chat is None:
            return f"this session has no chat: {kept}"
        conn = self._conn
        if conn is None or not self._running or self._closing:
            return f"the ACP agent is not running: {kept}"
        if session_id in self._bridges or session_id in self._loading:
            return f"ACP session {session_id} is in use by another session: {kept}"
        recorded = stored.get("cwd") if isinstance(stored, Mapping) else None
        directories = state.working_directories
        cwd = (recorded if isinstance(recorded, str) and recorded else None) or (
            _path(directories[0]) if directories else None) or self._session_cwd or os.getcwd()
        self._loading.add(session_id)
        try:
            result: object = await asyncio.wait_for(conn.send_request("session/load", {
                "sessionId": session_id, "cwd": cwd, "mcpServers": []}), self._resume_timeout)
        except RequestError as e:
            reason = acp_error_message(e.code, str(e), e.data)
            return f"the ACP agent could not load session {session_id} ({reason}): {kept}"
        except asyncio.TimeoutError:
            return (f"the ACP agent did not answer session/load within "
                    f"{self._resume_timeout:g} s: {kept}")
        except ConnectionError:
            return f"the ACP agent is gone: {kept}"
        finally:
            self._loading.discard(session_id)
        if self._closing or not self._running or not self.host.has_channel(session):
            if self._closes_sessions and self._running:  # loaded for nothing: let it go
                self._spawn(self._close_session(conn, session_id))
            return f"the session or the agent went away while it was loaded: {kept}"
        setup = AcpSessionSetup.from_new_session(result)
        chat_state = self.host.state(chat) if self.host.has_channel(chat) else None
        taken = frozenset(turn.id for turn in chat_state.turns) if isinstance(
            chat_state, t.ChatState) else frozenset()
        bridge = AcpBridge(
            acp_session_id=session_id, session=session, chat=chat,
            new_id=_id_factory(taken), now=self.host.now, setup=setup,
            prompt_capabilities=self._caps, title=state.title, meta=state.meta,
        )
        self._add_bridge(bridge, cwd)
        models = setup.models(self._provider)
        if models:
            self.driver.set_models(models)
        if state.config is not None:
            # the agent follows what the session shows (the bridge switches what differs)
            values = setup.values()
            wanted = {k: v for k, v in state.config.values.items() if k in values}
            if wanted:
                self._carry(bridge, bridge.receive_client_action(
                    session, t.SessionConfigChangedAction(config=wanted)))
        self._remember(bridge)
        return None

    async def _close_session(self, conn: Connection, session_id: str) -> None:
        with contextlib.suppress(RequestError, ConnectionError, asyncio.TimeoutError):
            await asyncio.wait_for(conn.send_request("session/close", {"sessionId": session_id}),
                                   self._close_timeout)

    def _add_bridge(self, bridge: AcpBridge, cwd: str) -> None:
        self._bridges[bridge.acp_session_id] = bridge
        self._cwds[bridge.acp_session_id] = cwd
        self._by_channel[bridge.session] = self._by_channel[bridge.chat] = bridge

    def _remember(self, bridge: AcpBridge) -> None:
        """``{"acp": {"sessionId", "cwd"}}`` into the session's ``_meta`` (if it changed)."""
        uri = bridge.session
        state = self.host.state(uri) if self.host.has_channel(uri) else None
        if not isinstance(state, t.SessionState):
            return
        record = {"sessionId": bridge.acp_session_id}
        cwd = self._cwds.get(bridge.acp_session_id)
        if cwd is not None:
            record["cwd"] = cwd
        self._carry(bridge, bridge.set_meta(META_KEY, record, base=state.meta))

    def session_disposed(self, session: str) -> None:
        """Stop the agent's work for a session nobody will see, and free what it holds."""
        bridge = self._by_channel.get(session)
        if bridge is None or bridge.session != session:
            return
        self._carry(bridge, bridge.dispose(close=self._closes_sessions))
        self._bridges.pop(bridge.acp_session_id, None)
        self._cwds.pop(bridge.acp_session_id, None)
        self._by_channel.pop(bridge.session, None)
        self._by_channel.pop(bridge.chat, None)

    def client_action(self, channel: str, action: t.StateAction) -> None:
        # a stored session's actions wait in the agent layer until resume_session is
        # done; one that could not be resumed has no bridge: nothing to tell
        bridge = self._by_channel.get(channel)
        if bridge is not None:
            self._carry(bridge, bridge.receive_client_action(channel, action))

    async def turn(self, turn: Turn) -> None:
        """The bridge got the turn's prompt (:meth:`client_action`) and ends the turn
        itself, a cancel included (``session/cancel``): wait for that."""
        while turn.active:
            self._changed.clear()
            await self._changed.wait()

    # -- the agent's messages -------------------------------------------------------------

    async def _on_agent(self, method: str, params: object, is_notification: bool) -> object:
        """The SDK connection's handler: every request and notification from the agent.

        The bridge is fed before the first ``await``: the connection starts one
        task per message in arrival order, so the bridge sees them in order.
        """
        loading = params.get("sessionId") if isinstance(params, Mapping) else None
        if isinstance(loading, str) and loading in self._loading:
            if is_notification:
                return None  # replayed by session/load: the host has this history already
            if method == "session/request_permission":
                return {"outcome": {"outcome": "cancelled"}}
            if method == "elicitation/create":
                return {"action": "cancel"}
            raise RequestError.method_not_found(method)
        bridge = self._route(params)
        if is_notification:
            if bridge is None:
                self._unknown.log("ACP notification %r for no known session skipped",
                                      method)
            else:
                self._carry(bridge, bridge.receive_notification(method, params))
            return None
        if bridge is None:
            if method == "session/request_permission":
                return {"outcome": {"outcome": "cancelled"}}
            if method == "elicitation/create":
                return {"action": "cancel"}
            raise RequestError.method_not_found(method)
        if len(self._waiting) >= MAX_WAITING_REQUESTS:
            self._misbehaved(f"the agent asked more than {MAX_WAITING_REQUESTS} questions "
                             f"at once")
            raise RequestError.internal_error({"details": "too many requests waiting"})
        number = next(self._numbers)
        future: asyncio.Future[BridgeOutput] = asyncio.get_running_loop().create_future()
        self._waiting[number] = future
        try:
            self._carry(bridge, bridge.receive_request(number, method, params))
            reply = await future
        finally:
            self._waiting.pop(number, None)
        if isinstance(reply, AcpErrorReply):
            raise RequestError(reply.code, reply.message)
        assert isinstance(reply, AcpReply)
        return dict(reply.result)

    def _route(self, params: object) -> AcpBridge | None:
        """The bridge of the message's ``sessionId``; without one, the only busy session."""
        if not isinstance(params, Mapping):
            return None
        session_id = params.get("sessionId")
        if isinstance(session_id, str):
            return self._bridges.get(session_id)
        busy = [b for b in self._bridges.values() if b.busy]
        return busy[0] if len(busy) == 1 else None

    def _carry(self, bridge: AcpBridge, outputs: Iterable[BridgeOutput]) -> None:
        """Do what a bridge said, in order: AHP actions through the driver (which keeps
        the summaries and flushes), requests and notifications to the agent, the
        agent's waiting requests answered."""
        actions: list[tuple[str, t.StateAction]] = []
        for output in outputs:
            if isinstance(output, AhpDispatch):
                actions.append((output.channel, output.action))
            elif isinstance(output, AcpRequest):
                self._spawn(self._request(bridge, output))
            elif isinstance(output, AcpNotification):
                self._spawn(self._notify(output))
                if output.method == "session/cancel":
                    self._spawn(self._cancel_deadline(bridge))
            else:
                future = self._waiting.get(output.request_id)  # type: ignore[arg-type]
                if future is not None and not future.done():
                    future.set_result(output)
        self.driver.dispatch_actions(actions)
        self._changed.set()

    async def _cancel_deadline(self, bridge: AcpBridge) -> None:
        await asyncio.sleep(self._cancel_timeout)
        if self._running and self._bridges.get(bridge.acp_session_id) is bridge:
            self._carry(bridge, bridge.forget_cancelled_prompts())

    async def _request(self, bridge: AcpBridge, request: AcpRequest) -> None:
        conn = self._conn
        if conn is None or not self._running:
            return
        if self._closing and request.method == "session/prompt":
            return  # a held prompt released while stopping: the turn ends with the agent
        # a prompt may work for hours (a client's cancel ends its turn); anything else
        # the agent leaves unanswered would hold the session (a model switch holds the
        # next prompt)
        timeout = None if request.method == "session/prompt" else self._request_timeout
        try:
            result: object = await asyncio.wait_for(
                conn.send_request(request.method, dict(request.params)), timeout)
        except asyncio.TimeoutError:
            outputs = bridge.receive_error(
                request.token, -32603, f"the agent did not answer {request.method} within "
                f"{self._request_timeout:g} s")
        except RequestError as e:
            outputs = bridge.receive_error(request.token, e.code, str(e), e.data)
        except ConnectionError:
            return  # the agent is gone: _watch ends the turns
        else:
            outputs = bridge.receive_response(request.token, result)
        self._carry(bridge, outputs)

    async def _notify(self, notification: AcpNotification) -> None:
        conn = self._conn
        if conn is None or not self._running:
            return
        with contextlib.suppress(ConnectionError):
            await conn.send_notification(notification.method, dict(notification.params))


def _closes_sessions(initialize_result: object) -> bool:
    """Whether ``initialize`` advertised ``agentCapabilities.sessionCapabilities.close``
    (any object, ``{}`` included; absent or ``null``: not)."""
    caps = initialize_result.get("agentCapabilities") if isinstance(
        initialize_result, Mapping) else None
    sessions = caps.get("sessionCapabilities") if isinstance(caps, Mapping) else None
    return isinstance(sessions, Mapping) and isinstance(sessions.get("close"), Mapping)


def _loads_sessions(initialize_result: object) -> bool:
    """Whether ``initialize`` advertised ``agentCapabilities.loadSession: true``."""
    caps = initialize_result.get("agentCapabilities") if isinstance(
        initialize_result, Mapping) else None
    return isinstance(caps, Mapping) and caps.get("loadSession") is True


def _chat_of(host: Host, session: str, state: t.SessionState) -> str | None:
    """The one chat of an ACP session: its default chat, else the first it has."""
    if state.default_chat:
        return state.default_chat
    chats = [c.resource for c in state.chats] or list(host.chats_of(session))
    return chats[0] if chats else None


def _id_factory(taken: frozenset[str] = frozenset()) -> Callable[[str], str]:
    """The bridge's ids (``acp-turn-1`` ...), skipping the turn ids a chat has already."""
    counter = itertools.count(1)

    def new_id(kind: str) -> str:
        while True:
            candidate = f"acp-{kind}-{next(counter)}"
            if candidate not in taken:
                return candidate

    return new_id


def _path(uri: str) -> str | None:
    """The local path of a ``file:`` URI (ACP wants an absolute path for ``cwd``)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return unquote(parsed.path) or None
