"""The asyncio side of a host: one :class:`HostServer`, any number of transport connections.

A :class:`HostServer` owns a sans-I/O :class:`~agenthost_protocol.host.Host`
and pumps bytes between it and transports.  Transports are anything that
implements :class:`MessageStream` (one whole JSON-RPC message per
``receive``/``send``): :mod:`.websocket` and :mod:`.stdio` provide two.

Per connection the server runs a reader (each message into
``HostConnection.receive_data``) and a writer (a bounded send queue into the
transport).  After every input (a message, or an agent step through
:meth:`HostServer.flush`) it hands the host's events to the handler and then
moves what *every* connection must send into its queue, because one input
can queue data for any number of connections.  A connection whose queue
overflows is dropped: a client that stops reading cannot make the server's
memory grow.

All of it runs on one event loop; the host is never touched from another
thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import Protocol, TypeAlias

from attrs import frozen

from ..errors import LocalProtocolError
from ..host import ConnectionClosed, Event, Host, HostConnection, RequestReceived
from ..types.error_codes import JsonRpcErrorCode
from ._limits import DEFAULT_MAX_MESSAGE_SIZE

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "CloseReason",
    "EndOfStream",
    "EventHandler",
    "HostServer",
    "MessageRefused",
    "MessageStream",
    "ServerLimits",
]

log = logging.getLogger(__name__)

"""16 MiB: the default largest message a connection accepts."""

EventHandler: TypeAlias = Callable[[Event], None]
"""Called with every host event (``RequestReceived`` must be answered, now or later)."""


@frozen(kw_only=True)
class ServerLimits:
    """The per-connection limits of a :class:`HostServer`."""

    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    """The largest message accepted from a client, in bytes (UTF-8); a larger one
    closes that connection."""
    max_queue_messages: int = 4096
    """Messages waiting in one connection's send queue before it is dropped."""
    max_queue_bytes: int = 64 * 1024 * 1024
    """Bytes waiting in one connection's send queue before it is dropped."""
    close_timeout: float = 5.0
    """Seconds to wait for a transport to close cleanly before aborting it."""

    def __attrs_post_init__(self) -> None:
        if self.max_message_size < 1 or self.max_queue_messages < 1 or self.max_queue_bytes < 1:
            raise LocalProtocolError("the limits must be positive")
        if self.close_timeout < 0:
            raise LocalProtocolError("close_timeout must not be negative")


class CloseReason(str, Enum):
    """Why the server closes a transport (each transport maps it to its own codes)."""

    NORMAL = "normal"
    """The host closed the connection (a failed version negotiation ...)."""
    SHUTDOWN = "shutdown"
    """The server is shutting down."""
    OVERFLOW = "overflow"
    """The client does not read: its send queue overflowed."""
    REFUSED = "refused"
    """The transport refused what the client sent (a binary frame, an oversize line)."""


class EndOfStream(Exception):
    """Raised by :meth:`MessageStream.receive`: the client closed its side.

    ``drain``: whether what is queued for the client should still be sent
    (a JSON Lines stream whose input ended may still be read; a closed
    WebSocket may not).
    """

    def __init__(self, reason: str = "closed by the client", *, drain: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.drain = drain


class MessageRefused(Exception):
    """Raised by :meth:`MessageStream.receive`: the client sent what the transport cannot take.

    The connection is closed with ``reason`` (:attr:`CloseReason.REFUSED`).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MessageStream(Protocol):
    """One transport connection carrying whole JSON-RPC messages, as the server needs it."""

    async def receive(self) -> bytes | str:
        """The next message; raises :class:`EndOfStream` or :class:`MessageRefused`."""
        ...

    async def send(self, data: bytes) -> None:
        """Send one message (UTF-8 JSON); may wait while the transport is busy.

        Raises :class:`EndOfStream` (or any ``OSError``) if the transport is gone.
        """
        ...

    async def close(self, reason: CloseReason, message: str) -> None:
        """Close the transport, telling the client ``message`` where the transport can."""
        ...

    def abort(self) -> None:
        """Drop the transport at once (after :meth:`close` took too long)."""
        ...


class _Peer:
    """One connection: its host end, its transport and its bounded send queue."""

    def __init__(self, server: HostServer, conn: HostConnection, stream: MessageStream) -> None:
        self.server = server
        self.conn = conn
        self.stream = stream
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        self.wake = asyncio.Event()
        self.finished = asyncio.Event()
        self.draining = False
        self.close_reason: CloseReason | None = None
        self.close_message = ""

    def pull(self) -> None:
        """Move what the host queued for this connection into the send queue."""
        if self.finished.is_set():
            self.conn.data_to_send()
            return
        data = self.conn.data_to_send()
        if not data:
            return
        limits = self.server.limits
        for message in data:
            self.queue.append(message)
            self.queued_bytes += len(message)
        if len(self.queue) > limits.max_queue_messages or (
            self.queued_bytes > limits.max_queue_bytes
        ):
            log.warning("connection #%d: send queue full (%d messages, %d bytes): the client "
                        "is not reading; closing it", self.conn.number, len(self.queue),
                        self.queued_bytes)
            self.queue.clear()
            self.queued_bytes = 0
            self.conn.connection_lost()
            self.finish(CloseReason.OVERFLOW, "send queue full: the client is not reading")
            return
        self.wake.set()

    def host_closed(self, reason: str) -> None:
        """The host closed the connection: send what is queued, then close the transport."""
        if self.finished.is_set():
            return
        self.draining = True
        self.close_reason = (
            CloseReason.SHUTDOWN if self.server.closing else CloseReason.NORMAL
        )
        self.close_message = reason
        self.wake.set()

    def finish(self, reason: CloseReason | None, message: str = "") -> None:
        """Stop: ``reason`` says how to close the transport (``None``: it is already gone)."""
        if self.finished.is_set():
            return
        self.close_reason = reason
        self.close_message = message
        self.finished.set()
        self.wake.set()

    async def write_loop(self) -> None:
        try:
            while not self.finished.is_set():
                while self.queue and not self.finished.is_set():
                    message = self.queue.popleft()
                    self.queued_bytes -= len(message)
                    await self.stream.send(message)
                if self.draining:
                    self.finish(self.close_reason, self.close_message)
                    return
                self.wake.clear()
                await self.wake.wait()
        except (EndOfStream, OSError) as e:
            self.finish(None, f"the transport failed while sending: {e}")

    async def read_loop(self) -> None:
        conn = self.conn
        try:
            while not conn.closed:
                data = await self.stream.receive()
                conn.receive_data(data)
                self.server.flush()
        except EndOfStream as e:
            log.debug("connection #%d: %s", conn.number, e.reason)
            if e.drain and not conn.closed:
                conn.close(e.reason)
                self.server.flush()
            else:
                self.finish(None, e.reason)
        except MessageRefused as e:
            log.warning("connection #%d: %s; closing it", conn.number, e.reason)
            self.finish(CloseReason.REFUSED, e.reason)
        except OSError as e:
            self.finish(None, f"the transport failed: {e}")


class HostServer:
    """A :class:`~agenthost_protocol.host.Host` served to transport connections.

    ``handler`` gets every host event but ``ConnectionClosed`` bookkeeping,
    which the server does itself (the handler still sees it).  Without a
    handler every ``RequestReceived`` is answered ``MethodNotFound``, so no
    request is ever left unanswered.  A handler that raises is logged and its
    request (if any) answered ``InternalError``.
    """

    def __init__(
        self,
        host: Host,
        handler: EventHandler | None = None,
        *,
        limits: ServerLimits | None = None,
    ) -> None:
        self._host = host
        self.handler = handler
        self.limits = limits if limits is not None else ServerLimits()
        self._peers: dict[HostConnection, _Peer] = {}
        self._closing = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._flushing = False

    @property
    def host(self) -> Host:
        return self._host

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` was called: new connections are refused."""
        return self._closing

    @property
    def connection_count(self) -> int:
        """The transport connections being served."""
        return len(self._peers)

    def flush(self) -> None:
        """Handle the host's pending events, then queue what every connection must send.

        Call it after anything that changes the host from outside a
        connection (an agent's step, ``host.dispatch``); the server calls it
        after every message it receives.
        """
        if self._flushing:
            # a handler calling flush() from inside flush(): the outer loop goes on
            return
        self._flushing = True
        try:
            while True:
                for event in self._host.events():
                    self._handle(event)
                for peer in tuple(self._peers.values()):
                    peer.pull()
                # an overflow closes its connection, which queues a ConnectionClosed event
                late = self._host.next_event()
                if late is None:
                    break
                self._handle(late)
        finally:
            self._flushing = False

    def _handle(self, event: Event) -> None:
        if isinstance(event, ConnectionClosed):
            peer = self._peers.get(event.connection)
            if peer is not None:
                peer.host_closed(event.reason)
        handler = self.handler
        if handler is None:
            if isinstance(event, RequestReceived):
                event.responder.error(JsonRpcErrorCode.METHOD_NOT_FOUND,
                                      f"this host does not support {event.method}")
            return
        try:
            handler(event)
        except Exception:
            log.exception("the event handler failed on %r", event)
            if isinstance(event, RequestReceived) and not event.responder.answered:
                with contextlib.suppress(LocalProtocolError):
                    event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR,
                                          "internal error in the host's agent")

    async def serve_connection(self, stream: MessageStream) -> None:
        """Serve one transport connection until it ends; returns when the transport is closed.

        Never raises for what the client does; cancelling it drops the
        connection.
        """
        if self._closing:
            await self._close_stream(stream, CloseReason.SHUTDOWN, "the host is shutting down")
            return
        conn = self._host.connect()
        peer = _Peer(self, conn, stream)
        self._peers[conn] = peer
        self._idle.clear()
        log.info("connection #%d: open", conn.number)
        reader = asyncio.create_task(peer.read_loop())
        writer = asyncio.create_task(peer.write_loop())
        try:
            await peer.finished.wait()
        finally:
            for task in (reader, writer):
                task.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
            if not conn.closed:
                conn.connection_lost()
            self.flush()  # the handler hears of the closed connection now
            reason = peer.close_reason
            try:
                if reason is not None:
                    await self._close_stream(stream, reason, peer.close_message)
            finally:
                del self._peers[conn]
                if not self._peers:
                    self._idle.set()
            log.info("connection #%d: closed (%s)", conn.number,
                     f"{reason.value}: {peer.close_message}" if reason is not None
                     else peer.close_message or "by the client")

    async def _close_stream(self, stream: MessageStream, reason: CloseReason,
                            message: str) -> None:
        try:
            await asyncio.wait_for(stream.close(reason, message), self.limits.close_timeout)
        except (asyncio.TimeoutError, OSError, EndOfStream):
            stream.abort()

    async def close(self, reason: str = "the host is shutting down", *,
                    timeout: float | None = None) -> None:
        """Close every connection (queued messages are still sent first) and wait for them.

        New connections are refused from now on.  After ``timeout`` seconds
        (default: twice the close timeout) the remaining transports are aborted.
        """
        self._closing = True
        for peer in tuple(self._peers.values()):
            if not peer.conn.closed:
                peer.conn.close(reason)
        self.flush()
        wait = timeout if timeout is not None else 2 * self.limits.close_timeout + 1
        try:
            await asyncio.wait_for(self._idle.wait(), wait)
        except asyncio.TimeoutError:
            log.warning("%d connection(s) did not close in %.1f s: aborting them",
                        len(self._peers), wait)
            for peer in tuple(self._peers.values()):
                peer.stream.abort()
                peer.finish(None, "aborted at shutdown")
            try:
                await asyncio.wait_for(self._idle.wait(), self.limits.close_timeout)
            except asyncio.TimeoutError:
                log.error("%d connection(s) still open after aborting them", len(self._peers))

    async def wait_idle(self) -> None:
        """Wait until no connection is served."""
        await self._idle.wait()
