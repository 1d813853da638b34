"""An ACP agent process behind an AHP host, on asyncio (extra ``acp``).

:class:`AcpAgentRunner` spawns an agent that speaks the Agent Client Protocol
on stdio, with the ACP SDK's JSON-RPC connection (``agent-client-protocol``:
``acp.transports.spawn_stdio_transport`` and ``acp.connection.Connection``),
and connects it to a :class:`~agenthost_protocol.aio.HostServer`:

* it is the server's event handler (it installs itself; an agent of the agent
  layer has an :class:`~agenthost_protocol.agent.AgentDriver` there): it answers the commands
  the host core leaves to the embedder (``createSession`` runs ACP
  ``session/new``; ``listSessions``, ``disposeSession``, ``fetchTurns`` ...)
  and hands every applied client action to the session's
  :class:`~agenthost_protocol.bridges.acp.AcpBridge`;
* one AHP session (with its one chat) per ACP session, the agent's models (its
  ``model`` config option) and name in the root state;
* what the bridges return is carried out: AHP actions dispatched on the host
  (then flushed to every connection), requests and notifications sent to the
  agent, the agent's waiting requests answered.

The agent's requests are read as raw JSON (the SDK's low-level connection),
so the bridge sees exactly what the agent sent, whatever schema version it
was built against.  The agent may not read or write files or run terminals
through the host: the runner advertises neither ``fs`` nor ``terminal``.

The agent runs in a process group of its own (not the SDK's
``spawn_stdio_transport``, which signals only its direct child and then
waits for it without a bound): :meth:`AcpAgentRunner.close` cancels the
prompts in flight, closes its stdin, then signals the whole group, every
step bounded, so neither the agent nor what it started (Codex's native
binary, a shell tool) outlives the runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
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
from ..channels import ROOT_CHANNEL, ChannelKind, channel_kind
from ..errors import LocalProtocolError
from ..host import ClientActionApplied, Event, Host, RequestReceived
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode
from .dispatch import dispatch_agent_action
from .processes import AgentProcess as _AgentProcess
from .processes import spawn_agent_process as _spawn_agent_process
from .processes import until as _until

__all__ = ["ACP_PROVIDER", "AcpAgentCommand", "AcpAgentRunner", "acp_agent_info",
           "acp_root_state", "build_acp_server"]

log = logging.getLogger(__name__)

ACP_PROVIDER: Final = "acp"
"""The default provider id of the ACP agent in the root state."""

ACP_PROTOCOL_VERSION: Final = 1


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
    )
    server = HostServer(host, limits=limits)
    return server, AcpAgentRunner(server, agent, provider=provider, session_cwd=session_cwd)


class AcpAgentRunner:
    """One ACP agent process serving every session of ``server``'s host.

    Call :meth:`start` (spawns the agent, ``initialize``), then serve; call
    :meth:`close` to stop (prompts in flight cancelled, the agent's stdin
    closed, then SIGTERM and SIGKILL to its process group).  ``provider`` is
    the agent's provider id in the root state (the host's root should list
    it: :func:`acp_root_state`); ``session_cwd`` is the ``cwd`` of
    ``session/new`` when a client names no working directory (default: the
    host's current directory); ``close_timeout`` bounds each step of
    stopping the agent.
    """

    def __init__(
        self,
        server: HostServer,
        agent: AcpAgentCommand,
        *,
        provider: str = ACP_PROVIDER,
        session_cwd: str | None = None,
        start_timeout: float = 30.0,
        close_timeout: float = 2.0,
    ) -> None:
        self._server = server
        self._agent = agent
        self._provider = provider
        self._session_cwd = session_cwd
        self._start_timeout = start_timeout
        self._close_timeout = close_timeout
        self._conn: Connection | None = None
        self._group: _AgentProcess | None = None
        self._caps = PromptCapabilities()
        self._closes_sessions = False
        """The agent advertised ``sessionCapabilities.close`` (``session/close``)."""
        self._info = acp_agent_info(provider)
        self._bridges: dict[str, AcpBridge] = {}
        """ACP sessionId -> its bridge."""
        self._by_channel: dict[str, AcpBridge] = {}
        """AHP session and chat URIs -> the bridge."""
        self._announced: dict[str, t.SessionSummary] = {}
        self._waiting: dict[int, asyncio.Future[BridgeOutput]] = {}
        """The agent's requests waiting for a bridge's answer, by our own request number."""
        self._numbers = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = False
        self._closing = False
        self._commands: dict[str, Callable[[RequestReceived], None]] = {
            "createSession": self._create_session,
            "disposeSession": self._dispose_session,
            "listSessions": self.host.answer_list_sessions,
            "createChat": self._create_chat,
            "disposeChat": self._create_chat,
            "fetchTurns": self._fetch_turns,
            "completions": self._completions,
            "resolveSessionConfig": self._resolve_session_config,
            "sessionConfigCompletions": self._session_config_completions,
            "authenticate": self._authenticate,
        }
        server.handler = self.handle

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
            conn = Connection(self._on_agent, group.process.stdin, group.process.stdout)
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
        info = result.get("agentInfo") if isinstance(result, Mapping) else None
        if isinstance(info, Mapping):
            name = info.get("title") or info.get("name")
            version = info.get("version")
            if isinstance(name, str) and name:
                described = f"{name} {version}" if isinstance(version, str) else name
                self._set_info(attrs.evolve(self._info, display_name=name,
                                            description=f"{described} (ACP)"))
        self._spawn(self._watch(group))

    async def close(self) -> None:
        """Stop the agent and what it started (bounded), end the turns still active.

        First ``session/cancel`` for every prompt in flight, and a moment for
        the answers (agents stop their tools on a cancel; Gemini CLI's shell
        tool otherwise keeps running), then the process group is stopped.
        """
        if self._closing:
            return
        self._closing = True
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
        log.warning("the ACP agent exited with status %s", code)
        for bridge in list(self._bridges.values()):
            self._carry(bridge, bridge.agent_closed(f"the agent exited with status {code}"))
        for future in self._waiting.values():
            future.cancel()
        # what it started (tools, a native binary) has nobody to answer to any more
        await group.stop(self._close_timeout)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- host events --------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """The server's event handler."""
        if isinstance(event, RequestReceived):
            command = self._commands.get(event.method)
            if command is None:
                event.responder.error(JsonRpcErrorCode.METHOD_NOT_FOUND,
                                      f"the ACP bridge does not support {event.method}")
            else:
                command(event)
        elif isinstance(event, ClientActionApplied):
            channel = event.envelope.channel
            bridge = self._by_channel.get(channel)
            if bridge is not None:
                self._carry(bridge, bridge.receive_client_action(channel, event.envelope.action))

    # -- the agent's messages -------------------------------------------------------------

    async def _on_agent(self, method: str, params: object, is_notification: bool) -> object:
        """The SDK connection's handler: every request and notification from the agent.

        The bridge is fed before the first ``await``: the connection starts one
        task per message in arrival order, so the bridge sees them in order.
        """
        bridge = self._route(params)
        if is_notification:
            if bridge is None:
                log.info("ACP notification %r for no known session skipped", method)
            else:
                self._carry(bridge, bridge.receive_notification(method, params))
            return None
        if bridge is None:
            if method == "session/request_permission":
                return {"outcome": {"outcome": "cancelled"}}
            if method == "elicitation/create":
                return {"action": "cancel"}
            raise RequestError.method_not_found(method)
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
        """Do what a bridge said, in order, then send what changed to every connection."""
        chats = False
        for output in outputs:
            if isinstance(output, AhpDispatch):
                if self.host.has_channel(output.channel):
                    dispatch_agent_action(self.host, output.channel, output.action, log)
                    chats = chats or output.channel == bridge.chat
            elif isinstance(output, AcpRequest):
                self._spawn(self._request(bridge, output))
            elif isinstance(output, AcpNotification):
                self._spawn(self._notify(output))
            else:
                future = self._waiting.get(output.request_id)  # type: ignore[arg-type]
                if future is not None and not future.done():
                    future.set_result(output)
        if chats:
            self._mirror(bridge)
        self._announce(bridge.session)
        self._server.flush()

    async def _request(self, bridge: AcpBridge, request: AcpRequest) -> None:
        conn = self._conn
        if conn is None or not self._running:
            return
        if self._closing and request.method == "session/prompt":
            return  # a held prompt released while stopping: the turn ends with the agent
        try:
            result: object = await conn.send_request(request.method, dict(request.params))
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

    # -- commands -------------------------------------------------------------------------

    def _create_session(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.CreateSessionParams):
            raise LocalProtocolError(f"{event.method} is not createSession")
        uri = params.channel
        if channel_kind(uri) is not ChannelKind.SESSION:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                                  f"{uri!r} is not a session URI (ahp-session:/<id>)")
        elif self.host.has_channel(uri) or uri in self._by_channel:
            event.responder.error(AhpErrorCode.SESSION_ALREADY_EXISTS, f"{uri!r} exists")
        elif params.provider is not None and params.provider != self._provider:
            event.responder.error(AhpErrorCode.PROVIDER_NOT_FOUND,
                                  f"no provider {params.provider!r}; this host has "
                                  f"{self._provider!r}")
        elif params.fork is not None:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                                  "the ACP bridge cannot fork sessions")
        elif not self._running or self._closing:
            event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR, "the ACP agent is not running")
        else:
            self._spawn(self._new_session(event, params))

    async def _new_session(self, event: RequestReceived, params: t.CreateSessionParams) -> None:
        uri = params.channel
        directories = params.working_directories[:1] if params.working_directories else None
        cwd = _path(directories[0]) if directories else None
        cwd = cwd or self._session_cwd or os.getcwd()
        conn = self._conn
        try:
            if conn is None:
                raise ConnectionError("the agent is gone")
            result: object = await conn.send_request("session/new", {"cwd": cwd,
                                                                      "mcpServers": []})
            session_id = result.get("sessionId") if isinstance(result, Mapping) else None
            if not isinstance(session_id, str) or not session_id:
                raise RequestError(-32603, "session/new gave no sessionId")
        except (RequestError, ConnectionError) as e:
            if self.host.has_channel(uri):
                event.responder.error(AhpErrorCode.SESSION_ALREADY_EXISTS, f"{uri!r} exists")
                return
            if isinstance(e, RequestError):  # the cause is in data (e.g. an HTTP 400 body)
                message = acp_error_message(e.code, str(e), e.data)
            else:
                message = str(e) or type(e).__name__
            self.host.create_session(uri, provider=self._provider,
                                     working_directories=directories)
            event.responder.respond(None)
            self.host.fail_session(uri, t.ErrorInfo(error_type="acp:session/new",
                                                    message=message))
            self._server.flush()
            return
        if self.host.has_channel(uri):  # taken while the agent was busy
            event.responder.error(AhpErrorCode.SESSION_ALREADY_EXISTS, f"{uri!r} exists")
            return
        setup = AcpSessionSetup.from_new_session(result)
        self.host.create_session(uri, provider=self._provider, working_directories=directories,
                                 config=setup.config)
        event.responder.respond(None)
        chat = self._free_chat_uri(uri)
        counter = itertools.count(1)
        bridge = AcpBridge(
            acp_session_id=session_id, session=uri, chat=chat,
            new_id=lambda kind: f"acp-{kind}-{next(counter)}", now=self.host.now,
            setup=setup, prompt_capabilities=self._caps,
        )
        self._bridges[session_id] = bridge
        self._by_channel[uri] = self._by_channel[chat] = bridge
        self._announced[uri] = self.host.ready_session(uri, default_chat=chat)
        if params.active_client is not None:
            self.host.dispatch(uri, t.SessionActiveClientSetAction(
                active_client=params.active_client))
        models = setup.models(self._provider)
        if models and models != self._info.models:
            self._set_info(attrs.evolve(self._info, models=models))
        self._count_sessions()
        if params.progress_token is not None:
            self.host.notify("root/progress", t.ProgressParams(
                channel=ROOT_CHANNEL, progress_token=params.progress_token, progress=1, total=1,
            ))
        self._server.flush()

    def _free_chat_uri(self, session: str) -> str:
        base = "ahp-chat:/" + session.removeprefix("ahp-session:/")
        uri, n = base, 1
        while self.host.has_channel(uri):
            n += 1
            uri = f"{base}-{n}"
        return uri

    def _dispose_session(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.DisposeSessionParams):
            raise LocalProtocolError(f"{event.method} is not disposeSession")
        uri = params.channel
        bridge = self._by_channel.get(uri)
        if bridge is None or bridge.session != uri:
            event.responder.error(AhpErrorCode.SESSION_NOT_FOUND, f"no session {uri!r}")
            return
        # stop the agent's work for a session nobody will see, and free what it holds
        self._carry(bridge, bridge.dispose(close=self._closes_sessions))
        del self._bridges[bridge.acp_session_id]
        self._by_channel.pop(bridge.session, None)
        self._by_channel.pop(bridge.chat, None)
        self.host.dispose_session(uri)
        if self._announced.pop(uri, None) is not None:
            self._count_sessions()
        event.responder.respond(None)

    def _create_chat(self, event: RequestReceived) -> None:
        event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                              "an ACP session has exactly one chat")

    def _fetch_turns(self, event: RequestReceived) -> None:
        self.host.fetch_turns(event, ())  # the agent keeps no turns the state lacks

    def _completions(self, event: RequestReceived) -> None:
        event.responder.respond(t.CompletionsResult(items=()))

    def _resolve_session_config(self, event: RequestReceived) -> None:
        # the agent tells its options only in session/new: nothing to offer before
        schema = t.SessionConfigSchema(properties={})
        event.responder.respond(t.ResolveSessionConfigResult(schema=schema, values={}))

    def _session_config_completions(self, event: RequestReceived) -> None:
        event.responder.respond(t.SessionConfigCompletionsResult(items=()))

    def _authenticate(self, event: RequestReceived) -> None:
        event.responder.error(JsonRpcErrorCode.INVALID_PARAMS,
                              "the ACP bridge has no protected resources")

    # -- keeping summaries in step ----------------------------------------------------------

    def _set_info(self, info: t.AgentInfo) -> None:
        self._info = info
        root = self.host.state(ROOT_CHANNEL)
        if not isinstance(root, t.RootState):
            return
        agents = tuple(info if a.provider == self._provider else a for a in root.agents)
        if info not in agents:
            agents = (*agents, info)
        if agents != root.agents:
            self.host.dispatch(ROOT_CHANNEL, t.RootAgentsChangedAction(agents=agents))

    def _count_sessions(self) -> None:
        self.host.dispatch(ROOT_CHANNEL, t.RootActiveSessionsChangedAction(
            active_sessions=len(self._announced)))

    def _mirror(self, bridge: AcpBridge) -> None:
        """``session/chatUpdated`` with the chat's summary fields the catalogue lacks."""
        self.host.mirror_chat(bridge.session, bridge.chat)

    def _announce(self, session: str) -> None:
        """``root/sessionSummaryChanged`` with what changed since the last announcement."""
        old = self._announced.get(session)
        if old is not None and self.host.has_channel(session):
            self._announced[session] = self.host.announce_summary(session, old)


def _closes_sessions(initialize_result: object) -> bool:
    """Whether ``initialize`` advertised ``agentCapabilities.sessionCapabilities.close``
    (any object, ``{}`` included; absent or ``null``: not)."""
    caps = initialize_result.get("agentCapabilities") if isinstance(
        initialize_result, Mapping) else None
    sessions = caps.get("sessionCapabilities") if isinstance(caps, Mapping) else None
    return isinstance(sessions, Mapping) and isinstance(sessions.get("close"), Mapping)


def _path(uri: str) -> str | None:
    """The local path of a ``file:`` URI (ACP wants an absolute path for ``cwd``)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return unquote(parsed.path) or None
