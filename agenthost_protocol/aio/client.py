"""The asyncio AHP client: typed, awaitable requests over a sans-I/O :class:`ClientConnection`.

:class:`AsyncClient` wraps one :class:`~agenthost_protocol.client.ClientConnection`
and a transport (:mod:`.client_transport`), as h11 and wsproto get wrapped
for asyncio: a reader task feeds every message to ``receive_data`` and
resolves the awaited requests by id; everything the protocol decides stays
in the sans-I/O layer.  ::

    from agenthost_protocol import methods, types as t
    from agenthost_protocol.aio.client import connect

    async with connect("ws://127.0.0.1:8765") as client:
        await client.initialize(["ahp-root://"])
        listing = await client.request(methods.LIST_SESSIONS, t.ListSessionsParams())
        session = await client.create_session(provider="demo")
        await client.subscribe(session)
        async for event in client.events():
            ...

* every request has a timeout (:class:`RequestTimeout`); the host's errors
  raise :class:`RequestError` with their code (:class:`VersionMismatch` for
  ``-32005``);
* :meth:`AsyncClient.events` iterates the events through a bounded buffer;
* a reconnect supervisor (:class:`ReconnectPolicy`) resumes a dropped
  connection with ``reconnect`` (exponential backoff with jitter), reports
  the pending actions it dropped and re-sends them on request, and starts
  afresh with ``initialize`` when the host forgot the client; a handshake
  the host refuses for good (:class:`HandshakeRefused`: the token, the
  Origin or the Host) ends it at once, never retried;
* :func:`connect` speaks WebSocket, :func:`connect_stdio` JSON Lines to a
  host process it spawns.

Every client runs on one event loop; it is not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import random
import uuid
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from enum import Enum
from types import TracebackType
from typing import IO, TYPE_CHECKING, Final, TypeAlias, TypeVar

from attrs import field, frozen

from .. import methods
from .._version import __version__
from ..channels import ChannelKind, channel_kind
from ..client import (
    ActionReceived,
    ClientConnection,
    ClientState,
    Event,
    FailureReason,
    Initialized,
    NotificationReceived,
    ProtocolViolation,
    Reconnected,
    RequestFailed,
    ResponseReceived,
    ServerRequestReceived,
)
from ..errors import LocalProtocolError, ProtocolError
from ..methods import Method, ServerRequestResult
from ..reconciler import ORPHAN_LIMIT, PendingAction, Received, ReceiveKind
from ..reducers import Clock
from ..types import (
    ChatSource,
    ChatState,
    ClientCapabilities,
    CreateChatParams,
    CreateSessionParams,
    DisposeChatParams,
    DisposeSessionParams,
    FetchTurnsParams,
    Implementation,
    InitializeResult,
    JsonRpcErrorCode,
    ListSessionsParams,
    ListSessionsResult,
    Message,
    MessageKind,
    MessageOrigin,
    PingParams,
    SessionActiveClient,
    Snapshot,
    SnapshotState,
    StateAction,
    SubscribeView,
    SubscriptionDeliveryOptions,
)
from ..versions import SUPPORTED_PROTOCOL_VERSIONS
from .client_errors import (
    ActionDropped,
    ActionRejected,
    ClientError,
    ClientTimeout,
    ConnectError,
    ConnectionClosedError,
    HandshakeCheck,
    HandshakeRefused,
    HostProtocolError,
    RequestError,
    RequestTimeout,
    VersionMismatch,
    redact_url,
)
from .client_events import (
    DEFAULT_EVENT_BUFFER,
    ClientEvent,
    Closed,
    ConnectionLost,
    DispatchedAction,
    EventsDropped,
    EventStream,
    Reconnecting,
    Reinitialized,
    Resumed,
    wait_event,
    wait_future,
)
from .client_transport import (
    DEFAULT_MAX_MESSAGE_SIZE,
    TOKEN_ENV,
    MessageTransport,
    SubprocessTransport,
    TransportClosed,
    TransportOpener,
    WebSocketTransport,
    _authorized,
    _check_token,
    _has_authorization,
    open_subprocess,
    open_websocket,
    url_token,
)

if TYPE_CHECKING:
    from ssl import SSLContext

DEFAULT_CHAT_VIEW_TURNS: Final = 50
"""Turns of a chat :meth:`AsyncClient.subscribe` asks for by default (its latest)."""
DEFAULT_CHAT_DELIVERY_MS: Final = 20
"""The ``delivery.maxLatencyMs`` :meth:`AsyncClient.subscribe` asks for a chat by default:
a host may merge a streaming reply's deltas within it.  Well under what a reader
notices, and an agent streams several deltas in it: fewer messages to decode."""

__all__ = [
    "DEFAULT_CHAT_DELIVERY_MS",
    "DEFAULT_CHAT_VIEW_TURNS",
    "DEFAULT_CLIENT_INFO",
    "DEFAULT_EVENT_BUFFER",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "TOKEN_ENV",
    "USE_DEFAULT",
    "ActionDropped",
    "ActionReceived",
    "ActionRejected",
    "AsyncClient",
    "ClientError",
    "ClientEvent",
    "ClientTimeout",
    "Closed",
    "ConnectError",
    "Connecting",
    "ConnectionClosedError",
    "ConnectionLost",
    "DispatchedAction",
    "EventStream",
    "EventsDropped",
    "HandshakeCheck",
    "HandshakeRefused",
    "HostProtocolError",
    "MessageTransport",
    "NotificationReceived",
    "ProtocolViolation",
    "ReconnectPolicy",
    "Reconnecting",
    "Reinitialized",
    "RequestError",
    "RequestTimeout",
    "Resumed",
    "ServerRequestHandler",
    "ServerRequestReceived",
    "SubprocessTransport",
    "TransportClosed",
    "TransportOpener",
    "UseDefault",
    "VersionMismatch",
    "WebSocketTransport",
    "connect",
    "connect_stdio",
    "new_chat_uri",
    "new_session_uri",
    "open_subprocess",
    "open_websocket",
    "redact_url",
    "url_token",
]

log = logging.getLogger(__name__)

P = TypeVar("P")
R = TypeVar("R")

DEFAULT_CLIENT_INFO: Final = Implementation(name="agenthost-protocol", version=__version__)
"""The ``clientInfo`` sent in ``initialize`` unless another is given."""

ServerRequestHandler: TypeAlias = Callable[[ServerRequestReceived], Awaitable[ServerRequestResult]]
"""Answers a host's request (``resourceRead`` ...): returns the method's result,
or raises :class:`RequestError` to answer with that error."""


class UseDefault(Enum):
    """The type of :data:`USE_DEFAULT`."""

    TOKEN = "use-default"


USE_DEFAULT: Final = UseDefault.TOKEN
"""``timeout=USE_DEFAULT``: the client's ``request_timeout`` (``None`` means no limit)."""

Timeout: TypeAlias = "float | UseDefault | None"

_RequestEnd: TypeAlias = Initialized | ResponseReceived | Reconnected | RequestFailed


def new_session_uri() -> str:
    """A fresh session URI, ``ahp-session:/<uuid>``."""
    return f"ahp-session:/{uuid.uuid4()}"


def new_chat_uri() -> str:
    """A fresh chat URI, ``ahp-chat:/<uuid>``."""
    return f"ahp-chat:/{uuid.uuid4()}"


@frozen(kw_only=True)
class ReconnectPolicy:
    """How the supervisor resumes a dropped connection.

    Attempt ``n`` (from 1) waits ``min(max_delay, initial_delay *
    multiplier ** (n - 1))`` seconds, of which a random fraction up to
    ``jitter`` is taken off (``jitter=1`` is "full jitter", ``0`` none), so
    that clients dropped together do not come back together.  ``rng`` draws
    the jitter (inject a seeded ``random.Random`` in tests).

    An attempt the host refuses with :class:`HandshakeRefused` (HTTP 401 or
    403) is the last: the client closes with that error, whatever
    ``max_attempts`` says.
    """

    initial_delay: float = 0.25
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5
    max_attempts: int | None = None
    """``None``: try forever (until :meth:`AsyncClient.close`)."""
    connect_timeout: float = 10.0
    """Seconds for one attempt to open a transport."""
    handshake_timeout: float = 10.0
    """Seconds for the host to answer ``reconnect`` (or ``initialize``) on it."""
    resend_dropped: bool = False
    """Re-send the dropped pending actions at once (:meth:`AsyncClient.resend_dropped`).
    Off by default: after a snapshot the host may have applied them already."""
    rng: random.Random = field(factory=random.Random, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not (0 <= self.initial_delay <= self.max_delay):
            raise ValueError("0 <= initial_delay <= max_delay please")
        if self.multiplier < 1:
            raise ValueError("the backoff multiplier is at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter is a fraction between 0 and 1")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts is at least 1 (or None: forever)")
        if self.connect_timeout <= 0 or self.handshake_timeout <= 0:
            raise ValueError("the timeouts must be positive")

    def delay(self, attempt: int) -> float:
        """The seconds to wait before attempt ``attempt`` (from 1); draws from :attr:`rng`."""
        try:
            base = self.initial_delay * self.multiplier ** max(0, attempt - 1)
        except OverflowError:
            base = math.inf
        return min(self.max_delay, base) * (1.0 - self.jitter * self.rng.random())


_READ_BATCH: Final = 256
"""Messages the reader takes from a transport at a time (``receive_batch``), at most."""


class _Streams:
    """The event streams of a client, held weakly: one dropped unclosed goes when collected."""

    __slots__ = ("__weakref__", "_live", "_refs")

    def __init__(self) -> None:
        # insertion-ordered; ``_live`` is a copy to iterate while a collection may remove one
        self._refs: dict[weakref.ref[EventStream], None] = {}
        self._live: tuple[weakref.ref[EventStream], ...] = ()

    def add(self, stream: EventStream) -> None:
        self._refs[weakref.ref(stream, self._gone)] = None
        self._live = tuple(self._refs)

    def _gone(self, ref: weakref.ref[EventStream]) -> None:
        if self._refs.pop(ref, 0) is None:
            self._live = tuple(self._refs)

    def publish(self, event: ClientEvent) -> None:
        for ref in self._live:
            stream = ref()
            if stream is not None:
                stream._put(event)

    def publish_many(self, events: list[ClientEvent]) -> None:
        """``publish`` of each of ``events``, in order."""
        for ref in self._live:
            stream = ref()
            if stream is not None:
                stream._put_many(events)

    def end(self, final: ClientEvent) -> None:
        """End every stream with ``final`` and forget them."""
        live = self._live
        self._refs = {}
        self._live = ()
        for ref in live:
            stream = ref()
            if stream is not None:
                stream._end(final)


class _Link:
    """One transport the client used: its reader, and whether a handshake opened it."""

    __slots__ = ("number", "opened", "reader", "transport")

    def __init__(self, transport: MessageTransport, number: int) -> None:
        self.transport = transport
        self.number = number
        self.opened = False
        self.reader: asyncio.Task[None] | None = None


@frozen(kw_only=True)
class _Restart:
    """What the supervisor's fallback ``initialize`` must report once answered."""

    reason: str
    channels: tuple[str, ...]
    dropped: tuple[PendingAction, ...]
    attempts: int


class AsyncClient:
    """An AHP client on an event loop: one sans-I/O connection, one transport at a time.

    ``opener`` opens a transport to the host (:func:`connect` and
    :func:`connect_stdio` make one; it is called again for every reconnect
    attempt).  ``target`` names the host in messages (through :func:`redact_url`,
    so an access token in a URL is never shown).  ``client_id`` (default:
    a fresh UUID) identifies the client across reconnects.
    ``protocol_versions``, ``client_info``, ``locale``, ``clock`` are the
    :class:`~agenthost_protocol.client.ClientConnection`'s.

    ``request_timeout`` (seconds, ``None``: no limit) bounds every request
    that is not given its own ``timeout``.  ``reconnect``: the supervisor's
    policy (``None``: a dropped transport closes the client).
    ``on_server_request`` answers the host's requests (without it they are
    answered ``-32601``, never left hanging).  ``event_buffer``: the default
    size of an :class:`EventStream`'s buffer.  ``chat_view_turns``: how many
    of a chat's latest turns :meth:`subscribe` asks for by default (``None``:
    all of them); older ones come with :meth:`fetch_older_turns`.
    ``chat_delivery_ms``: the ``delivery.maxLatencyMs`` it asks for a chat by
    default (a host may merge deltas within it; ``None`` or ``0``: every action
    as dispatched).

    Use it as ``async with`` (or :meth:`open` then :meth:`close`)::

        async with AsyncClient(opener) as client: ...
    """

    def __init__(
        self,
        opener: TransportOpener,
        *,
        target: str = "the host",
        client_id: str | None = None,
        protocol_versions: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS,
        client_info: Implementation | None = DEFAULT_CLIENT_INFO,
        locale: str | None = None,
        clock: Clock | None = None,
        request_timeout: float | None = 30.0,
        close_timeout: float = 10.0,
        reconnect: ReconnectPolicy | None = None,
        on_server_request: ServerRequestHandler | None = None,
        event_buffer: int = DEFAULT_EVENT_BUFFER,
        chat_view_turns: int | None = DEFAULT_CHAT_VIEW_TURNS,
        chat_delivery_ms: int | None = DEFAULT_CHAT_DELIVERY_MS,
    ) -> None:
        if request_timeout is not None and request_timeout <= 0:
            raise ValueError("request_timeout must be positive (or None)")
        if event_buffer < 1:
            raise ValueError("event_buffer must be at least 1")
        self._opener = opener
        # a URL may carry the access token, and the target goes into every log line
        self._target = redact_url(target)
        self._conn = ClientConnection(
            client_id if client_id is not None else f"agenthost-protocol-{uuid.uuid4()}",
            protocol_versions=protocol_versions, clock=clock, client_info=client_info,
            locale=locale,
        )
        self._request_timeout = request_timeout
        self._close_timeout = close_timeout
        self._policy = reconnect
        self._on_server_request = on_server_request
        self._event_buffer = event_buffer
        if chat_view_turns is not None and chat_view_turns < 0:
            raise ValueError("chat_view_turns must not be negative (or None)")
        self.chat_view_turns = chat_view_turns
        if chat_delivery_ms is not None and chat_delivery_ms < 0:
            raise ValueError("chat_delivery_ms must not be negative (or None)")
        self.chat_delivery_ms = chat_delivery_ms
        self._link: _Link | None = None
        self._links = 0
        self._opened = False
        self._waiting: dict[int, asyncio.Future[_RequestEnd]] = {}
        self._handles: dict[int, DispatchedAction] = {}
        self._dropped: list[PendingAction] = []
        self._streams = _Streams()
        self._changed = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._supervisor: asyncio.Task[None] | None = None
        self._resuming = False
        self._attempts = 0
        self._restart: _Restart | None = None
        # tasks to cancel on close (server requests) and to await (transports closing)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closers: set[asyncio.Task[None]] = set()
        self._closing = False
        self._closed = False
        self._close_reason = ""
        self._close_error: ClientError | None = None
        self._fully_closed = asyncio.Event()

    # -- reading ---------------------------------------------------------------------------

    @property
    def connection(self) -> ClientConnection:
        """The sans-I/O connection (the reconciler, pending requests ...); do not send with it."""
        return self._conn

    @property
    def client_id(self) -> str:
        return self._conn.client_id

    @property
    def target(self) -> str:
        return self._target

    @property
    def protocol_version(self) -> str | None:
        """The negotiated protocol version (``None`` before ``initialize``)."""
        return self._conn.negotiated_version

    @property
    def is_open(self) -> bool:
        """Whether the connection is initialized and a transport is up."""
        return self._link is not None and self._conn.connection_state is ClientState.OPEN

    @property
    def closed(self) -> bool:
        """Whether the client is closed for good."""
        return self._closed

    @property
    def close_reason(self) -> str:
        """Why the client closed ("" while it is not)."""
        return self._close_reason

    @property
    def close_error(self) -> ClientError | None:
        """What closed the client, unless :meth:`close` did."""
        return self._close_error

    @property
    def transport(self) -> MessageTransport | None:
        """The current transport (``None`` while reconnecting or closed)."""
        return None if self._link is None else self._link.transport

    @property
    def dropped_actions(self) -> tuple[PendingAction, ...]:
        """Pending actions reconnects dropped and that were not re-sent, oldest first.

        :meth:`resend_dropped` re-sends (and forgets) them; an action the host
        turns out to have applied after all (a late echo) leaves this list.
        """
        return tuple(self._dropped)

    def state(self, channel: str) -> SnapshotState:
        """The state of ``channel`` to render: confirmed plus our pending actions."""
        return self._conn.state(channel)

    def confirmed(self, channel: str) -> SnapshotState:
        """The state of ``channel`` the host acknowledged."""
        return self._conn.confirmed(channel)

    def is_tracked(self, channel: str) -> bool:
        """Whether ``channel`` has a tracked state (subscribed, with a snapshot)."""
        try:
            return channel in self._conn.reconciler.channels
        except LocalProtocolError:
            return False

    # -- life --------------------------------------------------------------------------

    async def open(self) -> AsyncClient:
        """Open the first transport (raises :class:`ConnectError`); returns the client."""
        if self._closing or self._closed:
            raise ConnectionClosedError("the client is closed")
        if self._opened:
            raise LocalProtocolError("the client was opened already")
        self._opened = True
        transport = await self._opener()
        if self._closing_now():  # closed while opening
            await self._close_transport_now(transport)
            raise ConnectionClosedError("the client is closed")
        self._attach(transport)
        return self

    async def close(self) -> None:
        """Close the transport (ending a spawned host process) and stop everything.

        Requests still waiting fail with :class:`ConnectionClosedError`,
        unanswered dispatched actions are dropped, every event stream ends with
        :class:`Closed`.  Idempotent.
        """
        if self._closing:
            await self._fully_closed.wait()
            return
        self._closing = True
        try:
            supervisor = self._supervisor
            if supervisor is not None and supervisor is not asyncio.current_task():
                supervisor.cancel()
                await asyncio.gather(supervisor, return_exceptions=True)
            link = self._link
            if link is not None:
                self._link = None
                if link.reader is not None and link.reader is not asyncio.current_task():
                    link.reader.cancel()
                    await asyncio.gather(link.reader, return_exceptions=True)
                await self._close_transport(link)
                for event in self._conn.connection_lost():
                    self._request_ended(event)
            current = asyncio.current_task()
            tasks = [task for task in self._tasks if task is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._closers:
                await asyncio.gather(*self._closers, return_exceptions=True)
        finally:
            self._finish(None, "closed by the application")
            self._fully_closed.set()

    async def __aenter__(self) -> AsyncClient:
        if not self._opened:
            try:
                await self.open()
            except BaseException:
                await self.close()
                raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- requests ------------------------------------------------------------------------

    async def request(self, method: Method[P, R], params: P, *, timeout: Timeout = USE_DEFAULT
                      ) -> R:
        """Send any client-to-server request; its result, typed by ``method``.

        ``method`` is a :mod:`~agenthost_protocol.methods` constant:
        ``await client.request(methods.LIST_SESSIONS, ListSessionsParams())``
        is a ``ListSessionsResult``.  Raises :class:`RequestError` for the
        host's error, :class:`RequestTimeout`, :class:`ConnectionClosedError`
        when the transport drops first, and ``LocalProtocolError`` for what
        the protocol forbids now (see :meth:`ClientConnection.request
        <agenthost_protocol.client.ClientConnection.request>`).  While the
        supervisor reconnects, the request waits (within its timeout) for the
        connection to open again.
        """
        end = await self._call(
            method.name, lambda: self._conn.request(method, params), timeout,
            need_open=method.name != "ping",
        )
        assert isinstance(end, ResponseReceived)
        return end.result_for(method)

    async def initialize(
        self,
        subscriptions: Iterable[str] = (),
        *,
        capabilities: ClientCapabilities | None = None,
        protocol_versions: Sequence[str] | None = None,
        timeout: Timeout = USE_DEFAULT,
    ) -> InitializeResult:
        """The handshake: ``initialize``, subscribing to ``subscriptions`` at once.

        Returns the host's result (the negotiated version is also
        :attr:`protocol_version`; the snapshots are tracked).  Raises
        :class:`VersionMismatch` when the host speaks none of the offered
        versions (it then closes the connection, and the client with it).
        """
        if isinstance(subscriptions, str):
            raise LocalProtocolError("subscriptions is a sequence of URIs, not one string")
        channels = tuple(subscriptions)
        end = await self._call(
            "initialize",
            lambda: self._issued(lambda: self._conn.initialize(
                initial_subscriptions=channels, capabilities=capabilities,
                protocol_versions=protocol_versions,
            )),
            timeout, need_open=False,
        )
        assert isinstance(end, Initialized)
        return end.result

    async def ping(self, *, timeout: Timeout = USE_DEFAULT) -> None:
        """``ping``: the host answers it at any time (a keepalive, a liveness check)."""
        await self.request(methods.PING, PingParams(), timeout=timeout)

    async def subscribe(
        self,
        channel: str,
        *,
        delivery: SubscriptionDeliveryOptions | None = None,
        view: SubscribeView | None = None,
        timeout: Timeout = USE_DEFAULT,
    ) -> Snapshot | None:
        """Subscribe to ``channel``; its snapshot (now tracked), ``None`` for a stateless one.

        A chat is asked for with ``view`` (default: its last ``chat_view_turns``
        turns, so that a long chat opens at once; ``SubscribeView()`` asks for
        all); :meth:`fetch_older_turns` pages the rest.  And with ``delivery``
        (default: ``maxLatencyMs`` of ``chat_delivery_ms``, which lets the host
        merge a stream's deltas; ``SubscriptionDeliveryOptions(max_latency_ms=0)``
        asks for every action as dispatched).  Raises
        :class:`RequestError` (``-32008`` NotFound ...) if the host refuses.
        """
        if channel_kind(channel) is ChannelKind.CHAT:
            if view is None and self.chat_view_turns is not None:
                view = SubscribeView(turns=self.chat_view_turns)
            if delivery is None and self.chat_delivery_ms:
                delivery = SubscriptionDeliveryOptions(max_latency_ms=self.chat_delivery_ms)
        end = await self._call(
            "subscribe",
            lambda: self._issued(lambda: self._conn.subscribe(channel, delivery=delivery,
                                                              view=view)),
            timeout,
        )
        assert isinstance(end, ResponseReceived)
        return end.result_for(methods.SUBSCRIBE).snapshot

    async def fetch_older_turns(self, chat: str, *, timeout: Timeout = USE_DEFAULT) -> bool:
        """Load the page of ``chat``'s turns before those held (``fetchTurns`` with the
        chat's ``turnsNextCursor``); ``False`` when there are none left.

        The host sends them as ``chat/turnsLoaded`` before it answers, so the
        confirmed state holds them when this returns.
        """
        state = self._conn.confirmed(chat) if self.is_tracked(chat) else None
        if not isinstance(state, ChatState) or state.turns_next_cursor is None:
            return False
        await self.request(methods.FETCH_TURNS,
                           FetchTurnsParams(channel=chat, cursor=state.turns_next_cursor),
                           timeout=timeout)
        return True

    async def unsubscribe(self, channel: str, *, timeout: Timeout = USE_DEFAULT
                          ) -> tuple[PendingAction, ...]:
        """Stop following ``channel`` (a notification: not answered); returns its
        pending actions, which are dropped unanswered."""
        limit = self._limit(timeout)
        await self._ready("unsubscribe", self._deadline(limit), limit, need_open=True)
        dropped = self._conn.reconciler.pending(channel) if self.is_tracked(channel) else ()
        data = self._conn.unsubscribe(channel)
        for pending in dropped:
            self._drop_handle(pending.client_seq, "its channel was unsubscribed")
        self._tick()
        with contextlib.suppress(ConnectionClosedError):
            await self._send(data)
        return dropped

    async def dispatch(self, channel: str, action: StateAction, *,
                       timeout: Timeout = USE_DEFAULT) -> DispatchedAction:
        """Apply ``action`` optimistically and send it; a handle to await its echo.

        Returns once the action is sent, without waiting for the host: await
        :meth:`DispatchedAction.wait` for the echo (or the rejection).  The
        action is in the optimistic state (:meth:`state`) before the first
        ``await`` of this method.  If the transport drops, the action stays
        pending and the reconnect decides: echoed in the replay, or dropped
        (:attr:`dropped_actions`).  Raises ``LocalProtocolError`` for an
        action the protocol forbids here; while the supervisor reconnects it
        waits (within ``timeout``) for the connection to open again.
        """
        limit = self._limit(timeout)
        await self._ready("dispatchAction", self._deadline(limit), limit, need_open=True)
        data = self._conn.dispatch(channel, action)
        pending = self._conn.reconciler.pending(channel)[-1]
        handle = DispatchedAction(pending)
        self._handles[pending.client_seq] = handle
        self._tick()
        with contextlib.suppress(ConnectionClosedError):
            await self._send(data)
        return handle

    async def resend_dropped(self, *, timeout: Timeout = USE_DEFAULT
                             ) -> tuple[DispatchedAction, ...]:
        """Re-dispatch :attr:`dropped_actions` (with new ``clientSeq``\\ s) and forget them.

        Actions of channels no longer tracked, or that the protocol no longer
        allows, are skipped (logged).  Returns the new handles.
        """
        actions, self._dropped = self._dropped, []
        handles: list[DispatchedAction] = []
        for pending in actions:
            if not self.is_tracked(pending.channel):
                log.info("not re-sending clientSeq %d: %s is no longer subscribed",
                         pending.client_seq, pending.channel)
                continue
            try:
                handles.append(await self.dispatch(pending.channel, pending.action,
                                                   timeout=timeout))
            except ProtocolError as e:
                log.warning("not re-sending clientSeq %d on %s: %s", pending.client_seq,
                            pending.channel, e)
        return tuple(handles)

    async def create_session(
        self,
        channel: str | None = None,
        *,
        provider: str | None = None,
        working_directories: Sequence[str] | None = None,
        config: Mapping[str, object] | None = None,
        active_client: SessionActiveClient | None = None,
        timeout: Timeout = USE_DEFAULT,
    ) -> str:
        """``createSession``; returns the session's URI (``channel``, or a fresh one).

        Subscribe to it to follow it (its ``lifecycle`` says when it is ready).
        """
        uri = channel if channel is not None else new_session_uri()
        params = CreateSessionParams(
            channel=uri, provider=provider,
            working_directories=tuple(working_directories) if working_directories else None,
            config=config, active_client=active_client,
        )
        await self.request(methods.CREATE_SESSION, params, timeout=timeout)
        return uri

    async def dispose_session(self, channel: str, *, timeout: Timeout = USE_DEFAULT) -> None:
        """``disposeSession``."""
        await self.request(methods.DISPOSE_SESSION, DisposeSessionParams(channel=channel),
                           timeout=timeout)

    async def create_chat(
        self,
        session: str,
        chat: str | None = None,
        *,
        initial_message: Message | str | None = None,
        source: ChatSource | None = None,
        working_directories: Sequence[str] | None = None,
        timeout: Timeout = USE_DEFAULT,
    ) -> str:
        """``createChat`` in ``session``; returns the chat's URI (``chat``, or a fresh one).

        A ``str`` ``initial_message`` is sent as a user message.
        """
        uri = chat if chat is not None else new_chat_uri()
        message = (Message(text=initial_message, origin=MessageOrigin(kind=MessageKind.USER))
                   if isinstance(initial_message, str) else initial_message)
        params = CreateChatParams(
            channel=session, chat=uri, initial_message=message, source=source,
            working_directories=tuple(working_directories) if working_directories else None,
        )
        await self.request(methods.CREATE_CHAT, params, timeout=timeout)
        return uri

    async def dispose_chat(self, chat: str, *, timeout: Timeout = USE_DEFAULT) -> None:
        """``disposeChat``."""
        await self.request(methods.DISPOSE_CHAT, DisposeChatParams(channel=chat),
                           timeout=timeout)

    async def list_sessions(self, *, limit: int | None = None, cursor: str | None = None,
                            timeout: Timeout = USE_DEFAULT) -> ListSessionsResult:
        """``listSessions``: one page of session summaries."""
        return await self.request(methods.LIST_SESSIONS,
                                  ListSessionsParams(limit=limit, cursor=cursor), timeout=timeout)

    # -- waiting for state ---------------------------------------------------------------

    async def wait_for_state(
        self,
        channel: str,
        predicate: Callable[[SnapshotState], bool],
        *,
        confirmed: bool = False,
        timeout: float | None = None,
    ) -> SnapshotState:
        """Wait until ``predicate`` holds on ``channel``'s state; that state.

        The optimistic state, or with ``confirmed`` the host's.  Checked now
        and after every message.  Raises :class:`ClientTimeout`,
        :class:`ConnectionClosedError` if the client closes first, and
        ``LocalProtocolError`` if the channel is not (or no longer) tracked
        while the connection is open.
        """
        deadline = self._deadline(timeout)
        while True:
            if self._closed:
                raise self._closed_error()
            changed = self._changed
            if self.is_tracked(channel):
                state = self.confirmed(channel) if confirmed else self.state(channel)
                if predicate(state):
                    return state
            elif self._conn.connection_state is ClientState.OPEN:
                raise LocalProtocolError(f"channel {channel!r} is not subscribed")
            await self._wait_changed(changed, deadline, timeout, f"waiting on {channel}")

    # -- events ----------------------------------------------------------------------------

    def events(self, *, buffer: int | None = None) -> EventStream:
        """A new stream of the events from now on (see :class:`EventStream`).

        ``async for event in client.events(): ...``; each stream has its own
        buffer of ``buffer`` events (default: the client's ``event_buffer``).
        """
        stream = EventStream(buffer if buffer is not None else self._event_buffer)
        if self._closed:
            stream._end(Closed(reason=self._close_reason, error=self._close_error))
        else:
            self._streams.add(stream)
        return stream

    # -- internals: sending and waiting ----------------------------------------------------------

    def _limit(self, timeout: Timeout) -> float | None:
        return self._request_timeout if isinstance(timeout, UseDefault) else timeout

    @staticmethod
    def _deadline(limit: float | None) -> float | None:
        return None if limit is None else asyncio.get_running_loop().time() + limit

    def _closed_error(self) -> ClientError:
        refused = self._close_error
        if isinstance(refused, HandshakeRefused):
            # the cause, to whoever asks: "the host refused the token", not "closed"
            return refused.again()
        return ConnectionClosedError(
            f"the client is closed ({self._close_reason})" if self._close_reason
            else "the client is closed"
        )

    def _closing_now(self) -> bool:
        # a method, not the attribute: mypy would keep a narrowing across an await
        return self._closing

    def _supervising(self) -> bool:
        """Whether the supervisor is making attempts (not its follow-up after resuming)."""
        return self._resuming and self._supervisor is not None and not self._supervisor.done()

    async def _wait_changed(self, changed: asyncio.Event, deadline: float | None,
                            limit: float | None, what: str) -> None:
        remaining = None if deadline is None else deadline - asyncio.get_running_loop().time()
        if not await wait_event(changed, remaining):
            assert limit is not None
            raise ClientTimeout(f"{what}: nothing within {limit:g} s", limit)

    async def _ready(self, what: str, deadline: float | None, limit: float | None, *,
                     need_open: bool) -> None:
        """Return when ``what`` can be sent; wait while the supervisor reconnects."""
        while True:
            if self._closing or self._closed:
                raise self._closed_error()
            state = self._conn.connection_state
            if self._link is not None and (state is ClientState.OPEN or not need_open):
                return
            if not self._supervising():
                if self._link is None:
                    raise ConnectionClosedError("the client is not connected")
                return  # the connection refuses with LocalProtocolError: the caller's mistake
            changed = self._changed
            try:
                await self._wait_changed(changed, deadline, limit, what)
            except ClientTimeout:
                assert limit is not None
                raise RequestTimeout(what, limit) from None

    def _issued(self, make: Callable[[], bytes]) -> tuple[int, bytes]:
        """Run a request-making method of the connection; the new request's id and bytes."""
        before = set(self._conn.pending_requests)
        data = make()
        (request_id,) = set(self._conn.pending_requests) - before
        return request_id, data

    async def _call(self, method: str, issue: Callable[[], tuple[int, bytes]],
                    timeout: Timeout, *, need_open: bool = True) -> _RequestEnd:
        limit = self._limit(timeout)
        deadline = self._deadline(limit)
        await self._ready(method, deadline, limit, need_open=need_open)
        link = self._link
        request_id, data = issue()
        try:
            end = await self._exchange(link, request_id, data, method=method,
                                       deadline=deadline, limit=limit)
        except ClientTimeout:
            assert limit is not None
            raise RequestTimeout(method, limit) from None
        if isinstance(end, RequestFailed):
            raise self._failure(end)
        return end

    async def _exchange(self, link: _Link | None, request_id: int, data: bytes, *,
                        method: str, deadline: float | None, limit: float | None
                        ) -> _RequestEnd:
        """Send a request the connection issued; its end (raises :class:`ClientTimeout`)."""
        future: asyncio.Future[_RequestEnd] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        try:
            # a send that fails drops the link, which fails the request (CONNECTION_LOST)
            with contextlib.suppress(ConnectionClosedError):
                await self._send(data, link)
            remaining = None if deadline is None else deadline - asyncio.get_running_loop().time()
            try:
                return await wait_future(future, remaining)
            except asyncio.TimeoutError:
                assert limit is not None
                raise ClientTimeout(f"{method}: no answer within {limit:g} s", limit) from None
        finally:
            self._waiting.pop(request_id, None)

    async def _send(self, data: bytes, link: _Link | None = None) -> None:
        # no await before the lock: messages leave in the order the connection made them
        link = link if link is not None else self._link
        if link is None or link is not self._link:
            raise ConnectionClosedError("the transport is gone")
        async with self._send_lock:
            try:
                await link.transport.send(data)
            except TransportClosed as e:
                self._lost(link, e.reason)
                raise ConnectionClosedError(e.reason) from None

    def _failure(self, event: RequestFailed) -> ClientError:
        error = event.error
        if event.reason is FailureReason.ERROR_RESPONSE and error is not None:
            if VersionMismatch.matches(error):
                offered = getattr(event.params, "protocol_versions", None) or \
                    self._conn.protocol_versions
                return VersionMismatch(event.method, error, offered)
            return RequestError(event.method, error)
        if event.reason is FailureReason.CONNECTION_LOST:
            return ConnectionClosedError(
                f"the connection was lost before the host answered {event.method}"
            )
        detail = error.message if error is not None else "a malformed answer"
        return HostProtocolError(f"{event.method}: the host broke the protocol: {detail}")

    # -- internals: the reader ---------------------------------------------------------------

    def _attach(self, transport: MessageTransport) -> _Link:
        self._links += 1
        link = _Link(transport, self._links)
        link.reader = asyncio.create_task(self._read(link), name=f"ahp-client-reader-{link.number}")
        self._link = link
        self._tick()
        return link

    async def _read(self, link: _Link) -> None:
        transport = link.transport
        # a transport that can hand over what it has received in one go (WebSocketTransport)
        batch: Callable[[int], Awaitable[Sequence[bytes | str]]] | None = getattr(
            transport, "receive_batch", None)
        try:
            if batch is None:
                while True:
                    data = await transport.receive()
                    if not await self._receive(link, (data,)):
                        return
            while True:
                messages = await batch(_READ_BATCH)
                if not await self._receive(link, messages):
                    return
                if len(messages) >= _READ_BATCH:
                    # more may be waiting: let the application (and other clients) run first
                    await asyncio.sleep(0)
        except TransportClosed as e:
            reason = e.reason
        except Exception:
            # a bug here must not leave requests waiting forever
            log.exception("the client's reader failed")
            reason = "internal error in the client's reader"
        self._lost(link, reason)

    async def _receive(self, link: _Link, messages: Sequence[bytes | str]) -> bool:
        """Handle messages, in order; whether to keep reading this link.

        The connection takes them together (``_receive_batch``: the same
        events as one by one); the replies they ask for go out after them,
        in order.
        """
        if link is not self._link:
            return False
        events = self._conn._receive_batch(messages)
        streams = self._streams
        publish = streams.publish
        replies: list[bytes] = []
        fatal: ProtocolViolation | None = None
        # the actions received in a row, published together (nothing reads a stream meanwhile)
        actions: list[ClientEvent] = []
        for event in events:
            if type(event) is ActionReceived:  # the streaming path, first
                if event.received.echo_of is not None:
                    self._settle(event.received)
                actions.append(event)
                continue
            if actions:
                streams.publish_many(actions)
                actions = []
            if isinstance(event, (Initialized, ResponseReceived, Reconnected, RequestFailed)):
                self._request_ended(event)
            elif isinstance(event, ActionReceived):
                self._action_received(event)
                publish(event)
            elif isinstance(event, NotificationReceived):
                publish(event)
            elif isinstance(event, ServerRequestReceived):
                self._server_request(event, replies)
            else:
                log.warning("%s: the host broke the protocol (%s): %s", self._target,
                            "fatal" if event.fatal else "ignored", event.error)
                if event.reply is not None:
                    replies.append(event.reply)
                publish(event)
                if event.fatal:
                    fatal = event
        if actions:
            streams.publish_many(actions)
        self._tick()
        for reply in replies:
            try:
                await self._send(reply, link)
            except ConnectionClosedError:
                return False
        if fatal is not None:
            self._lost(link, f"the host broke the protocol: {fatal.error}")
            return False
        return True

    def _request_ended(self, event: Event) -> None:
        if isinstance(event, Initialized):
            self._on_initialized(event)
        elif isinstance(event, Reconnected):
            self._on_resumed(event)
        if not isinstance(event, (Initialized, ResponseReceived, Reconnected, RequestFailed)):
            return
        future = self._waiting.pop(event.id, None)
        if future is not None and not future.done():
            future.set_result(event)

    def _on_initialized(self, event: Initialized) -> None:
        if self._link is not None:
            self._link.opened = True
        restart, self._restart = self._restart, None
        if restart is None:
            return
        for handle in self._handles.values():
            handle._drop("the host forgot this client: the connection started afresh")
        self._handles.clear()
        self._remember_dropped(restart.dropped)
        tracked = set(self._conn.reconciler.channels)
        removed = tuple(c for c in restart.channels if c not in tracked)
        log.info("%s: started afresh (%s); %d pending actions dropped", self._target,
                 restart.reason, len(restart.dropped))
        self._publish(Reinitialized(reason=restart.reason, result=event.result,
                                    dropped=restart.dropped, removed=removed,
                                    attempts=restart.attempts))

    def _on_resumed(self, event: Reconnected) -> None:
        if self._link is not None:
            self._link.opened = True
        outcome = event.outcome
        for received in outcome.received:
            self._settle(received)
        for pending in outcome.dropped:
            self._drop_handle(pending.client_seq,
                              "the host never answered it before the connection dropped")
        self._remember_dropped(outcome.dropped)
        log.info("%s: resumed (%s, %d replayed, %d dropped, %d removed)", self._target,
                 outcome.kind.value, len(outcome.received), len(outcome.dropped),
                 len(outcome.removed))
        self._publish(Resumed(outcome=outcome, attempts=self._attempts))

    def _action_received(self, event: ActionReceived) -> None:
        self._settle(event.received)

    def _settle(self, received: Received) -> None:
        echo_of = received.echo_of
        if echo_of is None:
            return
        if received.kind in (ReceiveKind.ECHO, ReceiveKind.REJECTED):
            handle = self._handles.pop(echo_of.client_seq, None)
            if handle is not None:
                handle._resolve(received)
        elif received.kind is ReceiveKind.LATE_ECHO:
            # the host applied it after all: re-sending it would apply it twice
            self._dropped = [p for p in self._dropped if p.client_seq != echo_of.client_seq]

    def _drop_handle(self, client_seq: int, reason: str) -> None:
        handle = self._handles.pop(client_seq, None)
        if handle is not None:
            handle._drop(reason)

    def _remember_dropped(self, dropped: Iterable[PendingAction]) -> None:
        self._dropped.extend(dropped)
        if len(self._dropped) > ORPHAN_LIMIT:
            del self._dropped[: len(self._dropped) - ORPHAN_LIMIT]

    def _server_request(self, event: ServerRequestReceived, replies: list[bytes]) -> None:
        handler = self._on_server_request
        if handler is None:
            replies.append(event.responder.error(
                JsonRpcErrorCode.METHOD_NOT_FOUND, f"this client does not serve {event.method}"
            ))
            return
        self._spawn(self._serve_request(event, handler), self._tasks)

    async def _serve_request(self, event: ServerRequestReceived,
                             handler: ServerRequestHandler) -> None:
        responder = event.responder
        code: int = JsonRpcErrorCode.INTERNAL_ERROR
        message = "the client failed to answer"
        error_data: object = None
        try:
            result = await handler(event)
        except RequestError as e:
            code, message, error_data = e.code, e.error.message, e.error.data
        except Exception:
            log.exception("the handler of the host's %s request failed", event.method)
        else:
            try:
                data = responder.respond(result)
            except LocalProtocolError as e:
                # a result of the wrong class, or the request died with its transport
                log.warning("cannot answer the host's %s request: %s", event.method, e)
                message = str(e)
            else:
                with contextlib.suppress(ConnectionClosedError):
                    await self._send(data)
                return
        try:
            data = responder.error(code, message, error_data)
        except LocalProtocolError:
            return  # it died with its transport: nobody waits for the answer
        with contextlib.suppress(ConnectionClosedError):
            await self._send(data)

    def _publish(self, event: ClientEvent) -> None:
        self._streams.publish(event)

    def _tick(self) -> None:
        """Wake everything waiting for a change (state, connection)."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _spawn(self, coro: Awaitable[None], into: set[asyncio.Task[None]]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        into.add(task)
        task.add_done_callback(into.discard)

    # -- internals: losing, resuming, finishing ---------------------------------------------------

    def _lost(self, link: _Link, reason: str) -> None:
        """``link`` is gone (or must go): fail what waits on it, then resume or finish."""
        if link is not self._link:
            return
        self._link = None
        if link.reader is not None and link.reader is not asyncio.current_task():
            link.reader.cancel()
        self._spawn(self._close_transport(link), self._closers)
        for event in self._conn.connection_lost():
            self._request_ended(event)
        self._restart = None
        supervising = self._supervising()
        resumable = (
            not self._closing and self._policy is not None
            and self._conn.connection_state is ClientState.DISCONNECTED
        )
        if link.opened:
            log.info("%s: connection lost (%s)", self._target, reason)
            self._publish(ConnectionLost(reason=reason, will_retry=resumable))
        self._tick()
        if self._closing or supervising:
            return  # the supervisor goes on with its next attempt
        if resumable:
            supervisor = asyncio.get_running_loop().create_task(
                self._supervise(reason), name="ahp-client-supervisor"
            )
            # an earlier supervisor may still be re-sending: close() cancels both
            self._tasks.add(supervisor)
            supervisor.add_done_callback(self._tasks.discard)
            self._supervisor = supervisor
        else:
            self._finish(ConnectionClosedError(reason), reason)

    async def _close_transport(self, link: _Link) -> None:
        await self._close_transport_now(link.transport)

    async def _close_transport_now(self, transport: MessageTransport) -> None:
        try:
            await asyncio.wait_for(transport.close(), self._close_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("%s: closing the transport failed: %r", self._target, e)
            abort = getattr(transport, "abort", None)
            if callable(abort):
                with contextlib.suppress(Exception):
                    abort()

    def _finish(self, error: ClientError | None, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        self._close_error = error
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error.again() if isinstance(error, HandshakeRefused)
                                     else ConnectionClosedError(reason))
        self._waiting.clear()
        for handle in self._handles.values():
            handle._drop(f"the client closed: {reason}")
        self._handles.clear()
        self._streams.end(Closed(reason=reason, error=error))
        self._tick()
        if error is not None:
            log.info("%s: closed (%s)", self._target, reason)

    async def _supervise(self, reason: str) -> None:
        """Resume the connection: backoff, new transport, ``reconnect`` (or ``initialize``)."""
        policy = self._policy
        assert policy is not None
        channels = self._conn.reconciler.channels
        subscribed = tuple(sorted(self._conn.subscriptions - set(channels)))
        self._resuming = True
        try:
            stateless = await self._attempt(policy, reason, channels, subscribed)
        finally:
            # from here on a drop starts a new supervisor
            self._resuming = False
        if stateless is None:
            return
        # open again: what the handshake does not restore
        self._attempts = 0
        for channel in stateless:
            if channel in self._conn.subscriptions:
                continue
            try:
                await self.subscribe(channel)
            except (ClientError, ProtocolError) as e:
                log.warning("%s: could not subscribe to %s again: %s", self._target, channel, e)
        if policy.resend_dropped and self._dropped:
            await self.resend_dropped()

    async def _attempt(self, policy: ReconnectPolicy, reason: str, channels: tuple[str, ...],
                       stateless: tuple[str, ...]) -> tuple[str, ...] | None:
        """Make attempts until the connection is open again: the stateless channels to
        subscribe to again, or ``None`` when the client closed instead."""
        refused: str | None = None  # why the host refused reconnect: from then on, initialize
        last_error = reason
        attempt = 0
        while True:
            attempt += 1
            if policy.max_attempts is not None and attempt > policy.max_attempts:
                message = f"gave up after {policy.max_attempts} reconnect attempts ({last_error})"
                log.warning("%s: %s", self._target, message)
                self._finish(ConnectionClosedError(message), message)
                return None
            delay = policy.delay(attempt)
            self._publish(Reconnecting(attempt=attempt, delay=delay,
                                       last_error=last_error if attempt > 1 else None))
            await asyncio.sleep(delay)
            try:
                transport = await asyncio.wait_for(self._opener(), policy.connect_timeout)
            except HandshakeRefused as e:
                # final: the same handshake is refused again however long we wait
                log.warning("%s: %s; not reconnecting", self._target, e.reason)
                self._finish(e, str(e))
                return None
            except ConnectError as e:
                last_error = e.reason
                continue
            except asyncio.TimeoutError:
                last_error = f"no connection within {policy.connect_timeout:g} s"
                continue
            if self._closing_now():
                await self._close_transport_now(transport)
                return None
            link = self._attach(transport)
            self._attempts = attempt
            try:
                if refused is None:
                    end = await self._handshake(link, "reconnect", self._conn.reconnect,
                                                policy.handshake_timeout)
                    if isinstance(end, Reconnected):
                        return stateless
                    assert isinstance(end, RequestFailed)
                    if end.reason is not FailureReason.ERROR_RESPONSE or end.error is None:
                        last_error = str(self._failure(end))
                        continue
                    refused = f"reconnect refused: {end.error.message} ({end.error.code})"
                    log.info("%s: %s; starting afresh", self._target, refused)
                    if self._link is not link:
                        last_error = refused  # the host closed this transport: a new one
                        continue
                # the host forgot us (or restarted): initialize, with every channel we had
                reconciler = self._conn.reconciler
                self._restart = _Restart(
                    reason=refused, channels=channels,
                    dropped=tuple(sorted(
                        (p for c in reconciler.channels for p in reconciler.pending(c)),
                        key=lambda p: p.client_seq,
                    )),
                    attempts=attempt,
                )
                end = await self._handshake(
                    link, "initialize",
                    functools.partial(self._conn.initialize,
                                      initial_subscriptions=(*channels, *stateless)),
                    policy.handshake_timeout,
                )
                if isinstance(end, Initialized):
                    return ()  # the initialize subscribed to the stateless channels too
                assert isinstance(end, RequestFailed)
                if end.reason is FailureReason.ERROR_RESPONSE:
                    failure = self._failure(end)
                    message = f"the host refused to start afresh: {failure}"
                    self._finish(failure, message)
                    self._lost(link, message)
                    return None
                last_error = str(self._failure(end))
            except ClientTimeout as e:
                last_error = str(e)
                self._lost(link, last_error)
    async def _handshake(self, link: _Link, method: str, make: Callable[[], bytes],
                         timeout: float) -> _RequestEnd:
        request_id, data = self._issued(make)
        return await self._exchange(link, request_id, data, method=method,
                                    deadline=self._deadline(timeout), limit=timeout)


class Connecting:
    """What :func:`connect` returns: ``await`` it for an open client, or ``async with`` it.

    ``async with connect(url) as client:`` closes the client (and its
    transport, and a spawned host process) however the block ends.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    @property
    def client(self) -> AsyncClient:
        """The client (not open yet)."""
        return self._client

    def __await__(self) -> Generator[object, None, AsyncClient]:
        return self._client.open().__await__()

    async def __aenter__(self) -> AsyncClient:
        return await self._client.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._client.close()


def _policy(reconnect: ReconnectPolicy | bool) -> ReconnectPolicy | None:
    if isinstance(reconnect, ReconnectPolicy):
        return reconnect
    return ReconnectPolicy() if reconnect else None


def _websocket_token(url: str, token: str | None,
                     headers: Mapping[str, str] | None) -> tuple[str | None, str]:
    """The token to send as ``Authorization: Bearer``, and where it came from."""
    if token is not None:
        return token, "the token argument"
    if url_token(url) is not None or _has_authorization(headers):
        return None, ""  # the URL or the caller's own header authenticates
    ambient = os.environ.get(TOKEN_ENV)
    return (ambient or None), TOKEN_ENV


def _child_env(env: Mapping[str, str] | None, token: str | None) -> Mapping[str, str] | None:
    """The environment of a spawned host: ``env`` (``None``: ours) with ``AHP_TOKEN``."""
    if token is not None:
        _check_token(token, "the token argument")
        return {**(env if env is not None else os.environ), TOKEN_ENV: token}
    if env is None:
        return None  # the child inherits ours, AHP_TOKEN included
    ambient = os.environ.get(TOKEN_ENV)
    if ambient and TOKEN_ENV not in env:
        return {**env, TOKEN_ENV: ambient}
    return env


def connect(
    url: str,
    *,
    token: str | None = None,
    client_id: str | None = None,
    protocol_versions: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS,
    client_info: Implementation | None = DEFAULT_CLIENT_INFO,
    locale: str | None = None,
    clock: Clock | None = None,
    request_timeout: float | None = 30.0,
    reconnect: ReconnectPolicy | bool = True,
    on_server_request: ServerRequestHandler | None = None,
    event_buffer: int = DEFAULT_EVENT_BUFFER,
    chat_view_turns: int | None = DEFAULT_CHAT_VIEW_TURNS,
    chat_delivery_ms: int | None = DEFAULT_CHAT_DELIVERY_MS,
    headers: Mapping[str, str] | None = None,
    open_timeout: float | None = 10.0,
    max_message_size: int | None = DEFAULT_MAX_MESSAGE_SIZE,
    ping_interval: float | None = 20.0,
    ssl: SSLContext | None = None,
) -> Connecting:
    """A client of the host at WebSocket ``url`` (``ws://HOST:PORT``).

    ``async with connect(url) as client:`` or ``client = await connect(url)``
    (then :meth:`AsyncClient.close`).  Raises :class:`ConnectError` when the
    connection cannot be made.  ``reconnect``: ``True`` for the default
    :class:`ReconnectPolicy` (retry forever), a policy, or ``False``.
    ``headers`` go with the WebSocket upgrade request; ``open_timeout``,
    ``max_message_size`` and ``ping_interval`` (WebSocket ping frames) are
    the transport's; so is ``ssl``, the TLS context of a ``wss://`` URL
    (default: the system's trust store).  The other options are
    :class:`AsyncClient`'s.

    ``token`` is the host's access token (``agenthost-protocol serve`` wants
    one).  It is taken from, in this order: the ``token`` argument; a
    ``token`` (else ``tkn``) query parameter of ``url`` (the URL ``serve``
    prints, ``ws://127.0.0.1:8765/?token=...``); the environment variable
    ``AHP_TOKEN`` (if non-empty), read now.  Wherever it comes from, it is
    sent as ``Authorization: Bearer <token>`` with every upgrade request,
    reconnects included, and every ``token`` / ``tkn`` query parameter is
    left out of the URL: the request target, which servers and proxies log,
    never holds it, and the host sees one token.  An ``Authorization`` header
    in ``headers`` is the caller's own authentication: ``AHP_TOKEN`` is then
    ignored, and a ``token`` argument or a token in the URL as well raises
    ``ValueError`` (as does a token with spaces or control characters).  The
    token never appears in messages or log lines (:func:`redact_url`).

    A handshake the host refuses for good raises :class:`HandshakeRefused`
    (a :class:`ConnectError`): ``check`` is ``"token"`` (HTTP 401) or
    ``"origin-or-host"`` (HTTP 403).  The client never retries one: a
    reconnect refused so (the host restarted with ``serve --new-token``)
    closes the client at once, and waiting requests raise it.
    """
    token, source = _websocket_token(url, token, headers)
    # checked now, not at the first open: a bad token is the caller's mistake
    ws_url, request_headers = _authorized(url, token, headers, source)

    async def opener() -> MessageTransport:
        return await open_websocket(ws_url, headers=request_headers, open_timeout=open_timeout,
                                    max_message_size=max_message_size,
                                    ping_interval=ping_interval, ping_timeout=ping_interval,
                                    ssl=ssl)

    return Connecting(AsyncClient(
        opener, target=url, client_id=client_id, protocol_versions=protocol_versions,
        client_info=client_info, locale=locale, clock=clock, request_timeout=request_timeout,
        reconnect=_policy(reconnect), on_server_request=on_server_request,
        event_buffer=event_buffer, chat_view_turns=chat_view_turns,
        chat_delivery_ms=chat_delivery_ms,
    ))


def connect_stdio(
    command: Sequence[str],
    *,
    token: str | None = None,
    stderr: int | IO[bytes] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    client_id: str | None = None,
    protocol_versions: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS,
    client_info: Implementation | None = DEFAULT_CLIENT_INFO,
    locale: str | None = None,
    clock: Clock | None = None,
    request_timeout: float | None = 30.0,
    reconnect: ReconnectPolicy | bool = False,
    on_server_request: ServerRequestHandler | None = None,
    event_buffer: int = DEFAULT_EVENT_BUFFER,
    chat_view_turns: int | None = DEFAULT_CHAT_VIEW_TURNS,
    chat_delivery_ms: int | None = DEFAULT_CHAT_DELIVERY_MS,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    close_timeout: float = 5.0,
) -> Connecting:
    """A client of a host process it spawns, JSON Lines on the process's stdin/stdout.

    ``connect_stdio(["agenthost-protocol", "serve", "--stdio"])``.  Closing
    the client closes the process's stdin, then terminates or kills it after
    ``close_timeout`` seconds, and always reaps it.  ``stderr`` is where the
    process's stderr goes (``None``: ours).  ``reconnect`` is off by
    default: a new process is a new host, so a reconnect always starts
    afresh (:class:`Reinitialized`).  Raises :class:`ConnectError` when the
    command cannot be started.

    The pipe needs no access token: this process owns it.  A ``token``
    (else ``AHP_TOKEN`` of this process, if set) is handed to the child as
    its ``AHP_TOKEN``, for a child that connects to a WebSocket host itself.
    ``env`` replaces the child's environment (``None``: this process's); an
    ``AHP_TOKEN`` of ``env`` beats ours, ``token`` beats both.
    """
    argv = tuple(command)
    child_env = _child_env(env, token)

    async def opener() -> MessageTransport:
        return await open_subprocess(argv, stderr=stderr, env=child_env, cwd=cwd,
                                     max_message_size=max_message_size,
                                     close_timeout=close_timeout)

    return Connecting(AsyncClient(
        opener, target=" ".join(argv), client_id=client_id,
        protocol_versions=protocol_versions, client_info=client_info, locale=locale,
        clock=clock, request_timeout=request_timeout, reconnect=_policy(reconnect),
        on_server_request=on_server_request, event_buffer=event_buffer,
        chat_view_turns=chat_view_turns, chat_delivery_ms=chat_delivery_ms,
        close_timeout=2 * close_timeout + 5,
    ))
