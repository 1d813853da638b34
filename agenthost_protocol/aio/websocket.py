"""A :class:`~agenthost_protocol.aio.HostServer` over WebSocket (the ``ws`` extra).

As the AHP transport spec says for WebSocket: the host is the WebSocket
server, and every text frame carries exactly one JSON-RPC message.  No
subprotocol is required (one a client offers is simply not selected).  A
binary frame closes the connection with 1003 (unsupported data); a message
over the size limit is refused by websockets itself with 1009 (message too
big); a client that stops reading is closed with 1008 once its send queue
overflows; shutdown closes with 1001 (going away) after the queued messages.

Built on the asyncio API of ``websockets`` (13 or later); this module is
the only one that imports it.
"""

from __future__ import annotations

import logging
from typing import Final

from .server import CloseReason, EndOfStream, HostServer, MessageRefused

try:
    from websockets.asyncio.server import Server, ServerConnection, serve
    from websockets.exceptions import ConnectionClosed
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
}
_MESSAGE_TOO_BIG: Final = 1009
_MAX_REASON_BYTES: Final = 123  # RFC 6455: a close frame's payload is at most 125 bytes


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


class WebSocketStream:
    """One WebSocket connection as a :class:`~agenthost_protocol.aio.MessageStream`."""

    def __init__(self, websocket: ServerConnection) -> None:
        self._ws = websocket

    @property
    def websocket(self) -> ServerConnection:
        return self._ws

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
            # a str is sent as a text frame (bytes would be a binary one)
            await self._ws.send(data.decode("utf-8"))
        except ConnectionClosed as e:
            raise EndOfStream(_describe(e)) from None

    async def close(self, reason: CloseReason, message: str) -> None:
        await self._ws.close(_CLOSE_CODES[reason], _reason(message))

    def abort(self) -> None:
        self._ws.transport.abort()


class WebSocketServer:
    """A listening WebSocket endpoint of a :class:`~agenthost_protocol.aio.HostServer`.

    Made by :func:`serve_websocket`; ``async with`` closes it.
    """

    def __init__(self, server: HostServer, endpoint: Server, host: str | None) -> None:
        self._server = server
        self._endpoint = endpoint
        self._host = host
        # read now: a closed server has no sockets left to ask
        self._port: int = next(iter(endpoint.sockets)).getsockname()[1]

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
        """``ws://HOST:PORT`` (an IPv6 host in brackets)."""
        host = self._host or "0.0.0.0"
        if ":" in host:
            host = f"[{host}]"
        return f"ws://{host}:{self.port}"

    async def close(self, reason: str = "the host is shutting down") -> None:
        """Stop listening, close every connection after its queued messages, wait for them."""
        self._endpoint.close(close_connections=False)
        await self._server.close(reason)
        await self._endpoint.wait_closed()

    async def __aenter__(self) -> WebSocketServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def serve_websocket(
    server: HostServer,
    host: str | None = "127.0.0.1",
    port: int = 8765,
    *,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
) -> WebSocketServer:
    """Listen on ``host``:``port`` and serve ``server`` to every WebSocket client.

    ``server.limits.max_message_size`` bounds incoming messages.  AHP's
    keepalive is the client's ``ping`` request, answered at any time;
    ``ping_interval`` / ``ping_timeout`` add WebSocket ping frames, which the
    transport spec allows, to notice peers that vanished (``None`` disables).
    """

    async def handler(websocket: ServerConnection) -> None:
        await server.serve_connection(WebSocketStream(websocket))

    endpoint = await serve(
        handler,
        host,
        port,
        max_size=server.limits.max_message_size,
        # frames are taken off the queue at once; a short one bounds the memory
        # a client can fill with large messages
        max_queue=4,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        close_timeout=server.limits.close_timeout,
    )
    ws_server = WebSocketServer(server, endpoint, host)
    log.info("serving %s", ws_server.url)
    return ws_server
