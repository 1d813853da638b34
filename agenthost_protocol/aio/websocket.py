"""A :class:`~agenthost_protocol.aio.HostServer` over WebSocket (the ``ws`` extra).

As the AHP transport spec says for WebSocket: the host is the WebSocket
server, and every text frame carries exactly one JSON-RPC message.  No
subprotocol is required: ``ahp`` is selected when a client offers it (a
browser offers it next to the token's ``ahp.token.*``, never selected), any
other is not.  A
binary frame closes the connection with 1003 (unsupported data); a message
over the size limit is refused by websockets itself with 1009 (message too
big); a client that stops reading is closed with 1008 once its send queue
overflows; shutdown closes with 1001 (going away) after the queued messages.

Before any of that, the HTTP upgrade request is checked against an
:class:`~agenthost_protocol.aio.access.AccessPolicy` (Host, Origin, access
token): a refused handshake never reaches the host.  It gets 401 with
``WWW-Authenticate: Bearer`` for the token, 403 for the Host or the Origin
(told apart, so a client knows which to fix), each with the one-line reason
as its body; 503 when the server serves ``max_connections`` already.  With
``web``, a plain HTTP request (no upgrade) gets the web client's files
instead (:mod:`.web`).
Then the embedder's ``authenticate`` function, if given, says who the client
is (see :mod:`.authn`): its principal goes with the connection.
Connections that have not sent their upgrade request yet are bounded too
(``max_connections`` of them, one more closes the oldest; 32 KiB of request
each), so stalled handshakes cannot pile up file descriptors or memory.

Built on the asyncio API of ``websockets`` (13 or later); this module is
the only one that imports it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl as _ssl
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Final

from .access import AccessPolicy, Refusal, is_loopback, select_subprotocol
from .authn import Admitted, Authenticate, HandshakeAuthenticator, websocket_scope
from .log_quota import LogQuota
from .redact import RedactSecrets
from .server import CloseReason, EndOfStream, FrameCache, HostServer, MessageRefused
from .web import TOKEN_CHECK_PATH, WebFiles, token_check_response

try:
    from websockets.asyncio.server import Server, ServerConnection, serve
    from websockets.datastructures import Headers
    from websockets.exceptions import ConnectionClosed
    from websockets.frames import Frame, Opcode
    from websockets.http11 import Request, Response
    from websockets.protocol import Event, State
    from websockets.typing import Subprotocol
except ImportError as e:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "agenthost_protocol.aio.websocket needs the websockets package (13 or later): "
        "pip install 'agenthost-protocol[ws]'"
    ) from e

__all__ = ["WebSocketServer", "WebSocketStream", "serve_websocket"]

log = logging.getLogger(__name__)

_CLOSE_CODES: Final = {
    CloseReason.NORMAL: 1000,
    CloseReason.SHUTDOWN: 1001,
    CloseReason.OVERFLOW: 1008,
    CloseReason.REFUSED: 1003,
    CloseReason.POLICY: 1008,
    CloseReason.INTERNAL: 1011,
}
_MESSAGE_TOO_BIG: Final = 1009
# websockets 14 and later send bytes as a text frame when asked (13 needs a str)
_BYTES_AS_TEXT: Final = "text" in inspect.signature(ServerConnection.send).parameters
_MAX_REASON_BYTES: Final = 123  # RFC 6455: a close frame's payload is at most 125 bytes
_DATA_OPCODES: Final = frozenset({Opcode.TEXT, Opcode.BINARY, Opcode.CONT})


class _HideFrameData(logging.Filter):
    """websockets logs every frame at debug, payload included: the messages' text and
    tool content.  The server's log shows a data frame's kind and size only."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], Frame):
            frame = args[0]
            if frame.opcode in _DATA_OPCODES:
                record.args = (f"{frame.opcode.name} [{len(frame.data)} bytes]",)
        return True


class _QuietUnopened(logging.Filter):
    """websockets logs "connection closed" for every TCP connection, those that never
    became a WebSocket too (refused, stalled, closed for stalling), and each refusal's
    response: someone without the token could write lines per connection without
    bound.  This module says those itself, bounded (:class:`~.log_quota.LogQuota`)."""

    _REFUSALS: Final = frozenset({"HTTP response sent (%d %s)", "connection rejected (%d %s)"})

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in self._REFUSALS:
            return False
        if record.msg != "connection closed":
            return True
        connection = getattr(record, "websocket", None)
        try:
            response = getattr(connection, "response", None)
        except ReferenceError:  # websockets passes a weak proxy
            return False
        return isinstance(response, Response) and response.status_code == 101


# a child of websockets' own server logger, so its level and handlers apply unchanged; at
# debug it shows each handshake's request line (``GET /?token=...``) and headers
# (``Authorization``): never the token, never a message's text
_WS_LOGGER: Final = logging.getLogger("websockets.server.agenthost_protocol")
_WS_LOGGER.addFilter(_HideFrameData())
_WS_LOGGER.addFilter(RedactSecrets())
_WS_LOGGER.addFilter(_QuietUnopened())


MAX_REQUEST_HEAD: Final = 32 * 1024
"""The bytes a connection may send before its upgrade request is complete.  A
real one is well under a kilobyte (a browser's cookies add a few); websockets
alone would buffer up to 128 header lines of 8 KiB each, a megabyte per
waiting connection."""


class _Handshakes:
    """The connections whose upgrade request has not arrived yet, oldest first,
    with the bytes each has sent.

    websockets gives each one its ``open_timeout`` and no bound on how many:
    someone who cannot pass the access check can still open connections, send
    half a request and stall, faster than the timeout ends them, each holding a
    file descriptor and what it sent.  At most ``limit`` wait here; one more
    closes the oldest: a real client's request follows its connect at once, so
    it is never the oldest for long, while a flood mostly displaces itself.  One
    that sends more than :data:`MAX_REQUEST_HEAD` before its request is complete
    is closed.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._waiting: dict[ServerConnection, int] = {}
        self._displaced = 0
        self._too_long = 0
        self._told = -1.0
        self._closing = False

    def close(self) -> None:
        """Close every waiting connection, and any that comes from now on: at
        shutdown a stalled handshake would otherwise hold the server for its
        whole ``open_timeout``."""
        self._closing = True
        for connection in list(self._waiting):
            connection.transport.abort()
        self._waiting.clear()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, connection: ServerConnection) -> None:
        if self._closing:
            connection.transport.abort()
            return
        while len(self._waiting) >= self.limit:
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            oldest.transport.abort()
            self._displaced += 1
        self._waiting[connection] = 0
        self._tell()

    def received(self, connection: ServerConnection, size: int) -> bool:
        """Count ``size`` bytes from a waiting ``connection``; ``False``: it sent too
        many, and is closed."""
        sent = self._waiting.get(connection)
        if sent is None:
            return True
        if sent + size <= MAX_REQUEST_HEAD:
            self._waiting[connection] = sent + size
            return True
        del self._waiting[connection]
        connection.transport.abort()
        self._too_long += 1
        self._tell()
        return False

    def _tell(self) -> None:
        if not (self._displaced or self._too_long):
            return
        now = time.monotonic()
        if now - self._told < 10.0:  # one line per 10 s, not one per connection of a flood
            return
        if self._displaced:
            log.warning("closed %d WebSocket connections that had not sent their upgrade "
                        "request: more than %d were waiting at once",
                        self._displaced, self.limit)
        if self._too_long:
            log.warning("closed %d WebSocket connections whose upgrade request was longer "
                        "than %d bytes", self._too_long, MAX_REQUEST_HEAD)
        self._displaced, self._too_long, self._told = 0, 0, now

    def done(self, connection: ServerConnection) -> None:
        self._waiting.pop(connection, None)


def _counted(handshakes: _Handshakes) -> type[ServerConnection]:
    """A websockets connection that is counted in ``handshakes`` until its request came."""

    class CountedConnection(ServerConnection):
        principal: object = None
        """Who ``authenticate`` said the client is (``None``: not asked)."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            handshakes.add(self)

        def data_received(self, data: bytes) -> None:
            if handshakes.received(self, len(data)):
                super().data_received(data)

        def process_event(self, event: Event) -> None:
            handshakes.done(self)
            super().process_event(event)

        def connection_lost(self, exc: Exception | None) -> None:
            handshakes.done(self)
            super().connection_lost(exc)

    return CountedConnection


def _text_frame(message: bytes) -> bytes:
    """``message`` as one unmasked, uncompressed text frame (RFC 6455 section 5.2): what a
    server sends, the same to every client that negotiated no extension."""
    size = len(message)
    if size < 126:
        return bytes((0x81, size)) + message
    if size < 65536:
        return b"\x81\x7e" + size.to_bytes(2, "big") + message
    return b"\x81\x7f" + size.to_bytes(8, "big") + message


def _reason(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= _MAX_REASON_BYTES:
        return text
    return data[: _MAX_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."


def _describe(error: ConnectionClosed) -> str:
    sent, rcvd = error.sent, error.rcvd
    if sent is not None and sent.code == _MESSAGE_TOO_BIG:
        return f"message too big, closed with 1009: {sent.reason}"
    if rcvd is not None:
        detail = f"{rcvd.code} {rcvd.reason}".rstrip()
        return f"closed by the client ({detail})"
    return "the connection dropped without a close frame"


def _is_upgrade(request: Request) -> bool:
    return any("websocket" in value.lower() for value in request.headers.get_all("Upgrade"))


class WebSocketStream:
    """One WebSocket connection as a :class:`~agenthost_protocol.aio.MessageStream`."""

    def __init__(self, websocket: ServerConnection) -> None:
        self._ws = websocket

    @property
    def websocket(self) -> ServerConnection:
        return self._ws

    @property
    def peer(self) -> str:
        """The client's address, ``HOST:PORT`` (for log lines)."""
        address = self._ws.remote_address
        if isinstance(address, tuple) and len(address) >= 2:
            host = str(address[0])
            return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
        return str(address)

    async def receive(self) -> bytes | str:
        try:
            message = await self._ws.recv()
        except ConnectionClosed as e:
            sent = e.sent
            if sent is not None and sent.code == _MESSAGE_TOO_BIG:
                log.warning("%s: %s", self._ws.remote_address, _describe(e))
            raise EndOfStream(_describe(e)) from None
        if not isinstance(message, str):
            raise MessageRefused("binary frame refused: AHP messages are text frames")
        return message

    async def send(self, data: bytes) -> None:
        try:
            if _BYTES_AS_TEXT:
                # no str copy of every message for every connection
                await self._ws.send(data, text=True)
            else:
                # a str is sent as a text frame (bytes would be a binary one)
                await self._ws.send(data.decode("utf-8"))
        except ConnectionClosed as e:
            raise EndOfStream(_describe(e)) from None

    def write_now(self, messages: Sequence[bytes], frames: FrameCache) -> bool:
        """All of ``messages`` in one write to the socket, unless flow control holds it
        (see :class:`~agenthost_protocol.aio.DirectStream`)."""
        ws = self._ws
        transport = ws.transport
        if ws.paused or ws.protocol.state is not State.OPEN or transport.is_closing():
            return False
        if ws.protocol.extensions:
            # compressed per connection: websockets' own framing, still one write
            protocol = ws.protocol
            for message in messages:
                protocol.send_text(message)
            transport.write(b"".join(protocol.data_to_send()))
            return True
        out = []
        for message in messages:
            hit = frames.get(id(message))
            if hit is None or hit[0] is not message:
                frame = _text_frame(message)
                frames[id(message)] = (message, frame)
            else:
                frame = hit[1]
            out.append(frame)
        transport.write(out[0] if len(out) == 1 else b"".join(out))
        return True

    async def close(self, reason: CloseReason, message: str) -> None:
        await self._ws.close(_CLOSE_CODES[reason], _reason(message))

    def abort(self) -> None:
        self._ws.transport.abort()

    async def probe(self, timeout: float) -> bool:
        """A WebSocket ping; ``True`` if the pong comes within ``timeout`` seconds."""
        async def ping() -> None:
            # sending may itself wait, on a peer that does not read
            pong = await self._ws.ping()
            await pong

        try:
            await asyncio.wait_for(ping(), timeout)
        except (asyncio.TimeoutError, ConnectionClosed):
            return False
        return True


class WebSocketServer:
    """A listening WebSocket endpoint of a :class:`~agenthost_protocol.aio.HostServer`.

    Made by :func:`serve_websocket`; ``async with`` closes it.
    """

    def __init__(
        self,
        server: HostServer,
        endpoint: Server,
        host: str | None,
        *,
        secure: bool = False,
        access: AccessPolicy | None = None,
        authenticate: Authenticate | None = None,
    ) -> None:
        self._server = server
        self._authenticate = authenticate
        self._endpoint = endpoint
        self._host = host
        self._secure = secure
        self._access = access if access is not None else AccessPolicy()
        # read now: a closed server has no sockets left to ask
        self._port: int = next(iter(endpoint.sockets)).getsockname()[1]
        self._handshakes: _Handshakes | None = None

    @property
    def server(self) -> HostServer:
        return self._server

    @property
    def endpoint(self) -> Server:
        """The ``websockets`` server."""
        return self._endpoint

    @property
    def port(self) -> int:
        """The port listened on (the one the system chose for port 0)."""
        return self._port

    @property
    def url(self) -> str:
        """``ws://HOST:PORT`` or ``wss://HOST:PORT`` (an IPv6 host in brackets), no token."""
        host = self._host or "0.0.0.0"
        if ":" in host:
            host = f"[{host}]"
        return f"{'wss' if self._secure else 'ws'}://{host}:{self.port}"

    @property
    def access(self) -> AccessPolicy:
        """What a handshake must show."""
        return self._access

    @property
    def authenticate(self) -> Authenticate | None:
        """The embedder's ``authenticate`` function, if any (see :mod:`.authn`)."""
        return self._authenticate

    async def close(self, reason: str = "the host is shutting down") -> None:
        """Stop listening, close every connection after its queued messages, wait for them."""
        self._endpoint.close(close_connections=False)
        if self._handshakes is not None:
            self._handshakes.close()
        await self._server.close(reason)
        await self._endpoint.wait_closed()

    async def __aenter__(self) -> WebSocketServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _address(value: object) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2 and isinstance(value[1], int):
        return (str(value[0]), value[1])
    return None


def _peer(connection: ServerConnection) -> str:
    address = _address(connection.remote_address)
    if address is None:
        return "an unknown address"
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _scope(connection: ServerConnection, request: Request) -> dict[str, object]:
    protocols = [p.strip() for value in request.headers.get_all("Sec-WebSocket-Protocol")
                 for p in value.split(",") if p.strip()]
    return websocket_scope(
        target=request.path, headers=list(request.headers.raw_items()),
        client=_address(connection.remote_address), server=_address(connection.local_address),
        secure=connection.transport.get_extra_info("sslcontext") is not None,
        subprotocols=protocols)


async def serve_websocket(
    server: HostServer,
    host: str | None = "127.0.0.1",
    port: int = 8765,
    *,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
    access: AccessPolicy | None = None,
    ssl: _ssl.SSLContext | None = None,
    open_timeout: float = 10.0,
    authenticate: Authenticate | None = None,
    web: WebFiles | None = None,
) -> WebSocketServer:
    """Listen on ``host``:``port`` and serve ``server`` to every WebSocket client.

    ``access`` says what a handshake must show (Host, Origin, token; the
    default :class:`AccessPolicy` asks for no token, but still refuses
    browser origins and foreign Host names).  ``ssl`` serves ``wss://``.
    ``server.limits.max_message_size`` bounds incoming messages.  AHP's
    keepalive is the client's ``ping`` request, answered at any time;
    ``ping_interval`` / ``ping_timeout`` add WebSocket ping frames, which the
    transport spec allows, to notice peers that vanished (``None`` disables).

    A connection has ``open_timeout`` seconds to complete its upgrade (the TLS
    handshake included).  Connections still waiting to send their upgrade
    request are bounded like served ones, at ``server.limits.max_connections``:
    one more closes the one that has waited longest, so stalled handshakes
    cannot hold an unbounded number of file descriptors; one that sends more
    than :data:`MAX_REQUEST_HEAD` bytes before its request is complete is
    closed too.

    ``authenticate(scope) -> principal | None`` (sync or async) runs on each
    handshake the access check let through, before it is accepted: it gets
    an ASGI ``websocket`` scope built from the request (the same function
    works under :func:`~agenthost_protocol.asgi.asgi_app`), and the principal
    it returns goes with the connection
    (:attr:`~agenthost_protocol.host.HostConnection.principal`).  ``None``
    refuses with 401, :class:`~.authn.AuthenticationRefused` with its status,
    any other error with 500; ``open_timeout`` bounds it (see :mod:`.authn`).

    With ``web``, a plain HTTP request (no ``Upgrade: websocket``) that passes
    the Host check gets the web client's files (:mod:`.web`), token or not:
    the page holds no secret.
    """
    policy = access if access is not None else AccessPolicy()
    handshakes = _Handshakes(server.limits.max_connections)
    refusals = LogQuota("refused WebSocket handshakes", log)
    compression = server.limits.compression
    if compression == "auto":
        compression = "none" if host is not None and is_loopback(host) else "deflate"

    authenticator = None if authenticate is None else HandshakeAuthenticator(
        authenticate, timeout=open_timeout, limit=server.limits.max_connections, logger=log)

    async def handler(websocket: ServerConnection) -> None:
        await server.serve_connection(WebSocketStream(websocket),
                                      principal=getattr(websocket, "principal", None))

    def choose(connection: ServerConnection,
               offered: Sequence[Subprotocol]) -> Subprotocol | None:
        chosen = select_subprotocol(offered)
        return None if chosen is None else Subprotocol(chosen)

    def header_of(request: Request) -> Callable[[str], str | None]:
        def header(name: str) -> str | None:
            values = request.headers.get_all(name)
            # a repeated Host, Origin or Authorization is not one to trust
            return None if not values else values[0] if len(values) == 1 else "\x00repeated"
        return header

    def refuse(connection: ServerConnection, refusal: Refusal) -> Response:
        status, reason = HTTPStatus(refusal.status), refusal.reason
        if refusals.allow():
            # the path may carry a token: never logged
            log.warning("refused a WebSocket handshake from %s: %d %s",
                        connection.remote_address, status, reason)
        response = connection.respond(status, reason + "\n")
        if status == HTTPStatus.UNAUTHORIZED:
            response.headers["WWW-Authenticate"] = 'Bearer realm="agenthost-protocol"'
        return response

    def page(files: WebFiles, request: Request) -> Response:
        header = header_of(request)
        # websockets before 15 parse GET only: the rest never gets here
        method = str(getattr(request, "method", "GET"))
        if request.path.split("?", 1)[0] == TOKEN_CHECK_PATH and method == "GET":
            # only the Authorization header counts here, never a query
            checked = policy.check("/", header)
            answer = token_check_response(None if checked is None else checked.status,
                                          header("Host"), secure=ssl is not None)
        else:
            answer = files.respond(method, request.path, header("Host"), secure=ssl is not None)
        return Response(answer.status, answer.reason, Headers(list(answer.headers)),
                        answer.body)

    def check(connection: ServerConnection, request: Request) -> Response | None:
        if web is not None and not _is_upgrade(request):
            refused = policy.check_host(header_of(request)("Host"))
            return page(web, request) if refused is None else refuse(connection, refused)
        refusal = policy.check(request.path, header_of(request))
        if refusal is None and server.at_capacity:
            refusal = Refusal(status=HTTPStatus.SERVICE_UNAVAILABLE,
                              reason="too many connections")
        return None if refusal is None else refuse(connection, refusal)

    async def check_and_authenticate(connection: ServerConnection,
                                     request: Request) -> Response | None:
        refused = check(connection, request)
        if refused is not None or authenticator is None:
            return refused
        outcome = await authenticator(_scope(connection, request), _peer(connection))
        if not isinstance(outcome, Admitted):
            return refuse(connection, outcome)
        connection.principal = outcome.principal  # type: ignore[attr-defined]
        return None

    endpoint = await serve(
        handler,
        host,
        port,
        # a plain function without authenticate: any websockets 13+ takes one
        process_request=check if authenticator is None else check_and_authenticate,
        select_subprotocol=choose,
        ssl=ssl,
        max_size=server.limits.max_message_size,
        # frames are taken off the queue at once; a short one bounds the memory
        # a client can fill with large messages
        max_queue=4,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        close_timeout=server.limits.close_timeout,
        compression="deflate" if compression == "deflate" else None,
        logger=_WS_LOGGER,
        open_timeout=open_timeout,
        create_connection=_counted(handshakes),
    )
    ws_server = WebSocketServer(server, endpoint, host, secure=ssl is not None, access=policy,
                                authenticate=authenticate)
    ws_server._handshakes = handshakes
    log.info("serving %s", ws_server.url)
    return ws_server
