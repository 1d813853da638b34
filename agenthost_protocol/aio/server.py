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

Server-wide budgets bound what all connections together may cost: a cap on
connections, and one on the bytes waiting to be sent or being sent to all
of them.  When the bytes budget is full, connections whose writes have
been stuck longest (clients that stopped reading) are dropped first; a
connection that reads is never dropped for it.  A connection must
complete its handshake within a deadline, and a ``clientId`` claimed by a
second connection is settled by pinging its holder
(:class:`~agenthost_protocol.host.ClientIdClaimed`).

All of it runs on one event loop; the host is never touched from another
thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Final, Literal, Protocol, TypeAlias, runtime_checkable

from attrs import frozen

from ..errors import LocalProtocolError
from ..host import (
    ClientIdClaimed,
    ConnectionClosed,
    ConnectionState,
    Event,
    Host,
    HostConnection,
    HostLimits,
    Initialized,
    Reconnected,
    RequestReceived,
    Responder,
    StoreFailed,
)
from ..types.error_codes import JsonRpcErrorCode
from ._limits import DEFAULT_MAX_MESSAGE_SIZE
from .activity import ActivityLog, printable, shown

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "CloseReason",
    "DirectStream",
    "EndOfStream",
    "FrameCache",
    "EventHandler",
    "HostServer",
    "HostService",
    "StreamWrapper",
    "MessageRefused",
    "MessageStream",
    "ProbeableStream",
    "ServerLimits",
]

log = logging.getLogger(__name__)

"""16 MiB: the default largest message a connection accepts."""

EventHandler: TypeAlias = Callable[[Event], None]
"""Called with every host event (``RequestReceived`` must be answered, now or later)."""


@frozen(kw_only=True)
class ServerLimits:
    """The limits of a :class:`HostServer`: per connection and for the whole server.

    Every field is also an ``agenthost-protocol serve`` flag (``docs/serve.md``).
    """

    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    """The largest message accepted from a client, in bytes (UTF-8); a larger one
    closes that connection.  Also the largest the host sends (the host core's
    ``HostLimits.max_message_size``): what the library's client accepts."""
    max_queue_messages: int = 4096
    """Messages waiting in one connection's send queue before it is dropped."""
    max_queue_bytes: int = 64 * 1024 * 1024
    """Bytes waiting in one connection's send queue before it is dropped."""
    close_timeout: float = 5.0
    """Seconds to wait for a transport to close cleanly before aborting it."""
    max_connections: int = 256
    """Connections served at once; one more is refused (HTTP 503 on WebSocket)."""
    max_total_queue_bytes: int = 256 * 1024 * 1024
    """Bytes waiting for or being sent to all connections together.  When it is
    full, the connections whose sends have been stuck for ``stall_timeout``
    are dropped, longest stuck first; sends beyond it wait their turn."""
    stall_timeout: float = 2.0
    """Seconds one send may stay stuck before its connection counts as not
    reading (and may be dropped when the server's bytes budget is full)."""
    initialize_timeout: float = 10.0
    """Seconds a new connection has to complete ``initialize`` or ``reconnect``."""
    claim_probe_timeout: float = 3.0
    """Seconds the holder of a claimed ``clientId`` has to answer a ping."""
    max_subscriptions: int = 1024
    """Distinct channels one connection may subscribe to (the host core's)."""
    max_reconnects_per_minute: int = 30
    """``reconnect`` requests one connection may send per minute (the host core's)."""
    max_sessions: int = 10_000
    """Sessions the host keeps at once, stored ones included (the host core's)."""
    max_chats_per_session: int = 256
    """Chats one session may have (the host core's)."""
    max_watches: int = 64
    """File watches (``createResourceWatch``) the host keeps at once, for every
    connection together (:mod:`.watches`); one more is refused ``-32600``."""
    max_terminals: int = 64
    """Terminals listed at once, an exited one until it is disposed (a
    :class:`~agenthost_protocol.aio.terminals.TerminalService`'s budget): a
    ``createTerminal`` beyond it is refused with ``-32600``."""
    compression: Literal["auto", "deflate", "none"] = "auto"
    """WebSocket permessage-deflate with the clients that offer it: ``"deflate"``,
    ``"none"``, or ``"auto"``: none on a loopback address (the bytes cost
    nothing there, and deflating them about half again the server's CPU),
    deflate elsewhere."""

    def __attrs_post_init__(self) -> None:
        if min(self.max_message_size, self.max_queue_messages, self.max_queue_bytes,
               self.max_connections, self.max_total_queue_bytes, self.max_subscriptions,
               self.max_reconnects_per_minute, self.max_sessions,
               self.max_chats_per_session, self.max_watches,
               self.max_terminals) < 1:
            raise LocalProtocolError("the limits must be positive")
        if self.compression not in ("auto", "deflate", "none"):
            raise LocalProtocolError("compression is auto, deflate or none")
        if min(self.close_timeout, self.stall_timeout) < 0:
            raise LocalProtocolError("close_timeout and stall_timeout must not be negative")
        if min(self.initialize_timeout, self.claim_probe_timeout) <= 0:
            raise LocalProtocolError("initialize_timeout and claim_probe_timeout must be "
                                     "positive")

    def host_limits(self) -> HostLimits:
        """The budgets the host core enforces itself."""
        return HostLimits(max_subscriptions=self.max_subscriptions,
                          max_reconnects_per_minute=self.max_reconnects_per_minute,
                          max_message_size=self.max_message_size,
                          max_sessions=self.max_sessions,
                          max_chats_per_session=self.max_chats_per_session)


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
    POLICY = "policy"
    """The client broke a budget: no handshake in time, or too many connections."""
    INTERNAL = "internal"
    """The server failed (a bug, logged with its traceback): the client should reconnect."""


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


@runtime_checkable
class ProbeableStream(Protocol):
    """A :class:`MessageStream` that can tell whether its peer is still there.

    Used when another connection claims this one's ``clientId``; a stream
    without ``probe`` is taken as alive while it is open (the claim is refused).
    """

    async def probe(self, timeout: float) -> bool:
        """Whether the peer answers a liveness check (a WebSocket ping) within ``timeout``."""
        ...


@runtime_checkable
class HostService(Protocol):
    """Something that serves part of the protocol beside the agent: terminals, files,
    watches.  Added with :meth:`HostServer.add_service`; the server offers it every
    event before its handler.

    ``handle`` returns ``True`` when the event was the service's alone (a request
    it answered, or will answer; a client action on one of its channels): the
    handler then does not see it.  Events every part must see (``ConnectionClosed``
    ...) are taken note of and ``False`` returned.  ``handle`` must not block.
    """

    def handle(self, event: Event) -> bool:
        """Take ``event`` (``True``) or pass it on (``False``)."""
        ...

    async def close(self) -> None:
        """Release what the service holds (its processes, watches) in bounded time."""
        ...


FrameCache: TypeAlias = "dict[int, tuple[bytes, bytes]]"
"""Frames built during one flush, by ``id`` of the message: ``(message, frame)``.

Every connection of a flush gets the same message objects (an envelope is
encoded once for all its subscribers), so a transport whose framing does not
depend on the connection builds each frame once for all of them.  The
message is kept beside its frame: it stays alive, so its ``id`` is not
reused while the cache lives."""

EXPIRY_CHECK_INTERVAL: Final = 2.0
"""The longest time in seconds between two looks at the host's deadlines
(:meth:`~agenthost_protocol.host.Host.next_deadline`)."""
DIRECT_WRITE_LIMIT: Final = 64 * 1024
"""The most bytes one connection is handed directly in one flush; more goes
through its send queue, where the server's budgets count it."""


@runtime_checkable
class DirectStream(Protocol):
    """A :class:`MessageStream` whose transport can take messages without waiting.

    The server hands such a stream what a flush produced for it in one call
    while its transport keeps up (one write, frames built once for all
    connections), and falls back to :meth:`MessageStream.send` (which waits)
    while it does not.
    """

    def write_now(self, messages: Sequence[bytes], frames: FrameCache) -> bool:
        """Write ``messages`` at once if the transport takes them without waiting
        (open, not paused by flow control); ``False``, writing nothing, if not.

        ``frames`` is shared by the connections of one flush with streams of
        the same class (see :data:`FrameCache`).  Raises :class:`EndOfStream`
        or ``OSError`` if the transport is gone.
        """
        ...


class _SendBudget:
    """The bytes being sent to all connections at once (each send copies its message).

    A send waits until its message fits (one alone always fits); a waiter
    that waited ``stall_timeout`` asks the server to drop the connections
    whose sends are stuck, which frees their share.
    """

    def __init__(self, server: HostServer) -> None:
        self.server = server
        self.used = 0
        self.changed = asyncio.Event()

    async def acquire(self, size: int) -> None:
        limit = self.server.limits.max_total_queue_bytes
        while self.used and self.used + size > limit:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(),
                                       max(self.server.limits.stall_timeout, 0.05))
            except asyncio.TimeoutError:
                self.server._shed(self.used + size - limit)
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        self.changed.set()


class _Signal:
    """An :class:`asyncio.Event` for one waiter at a time, without the Event's deque of
    waiters: each connection holds two, and a server holds thousands of idle ones."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        if self._set:
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None


class _Peer:
    """One connection: its host end, its transport and its bounded send queue.

    The queue and the writer task that empties it exist only once something
    had to wait for the transport: a connection whose transport keeps up
    (every message handed over at once) never needs them.
    """

    def __init__(self, server: HostServer, conn: HostConnection, stream: MessageStream) -> None:
        self.server = server
        self.conn = conn
        self.stream = stream
        self.queue: deque[bytes] | None = None
        self.writer: asyncio.Task[None] | None = None
        self.queued_bytes = 0
        """Bytes in the queue and in the send under way (what the budgets count)."""
        self.sending_since: float | None = None
        """When the send under way started (loop time); ``None``: none is."""
        self.direct = stream.write_now if isinstance(stream, DirectStream) else None
        self.kind = type(stream)
        self.wake = _Signal()
        self.finished = _Signal()
        self.draining = False
        self.close_reason: CloseReason | None = None
        self.close_message = ""

    def pull(self, frames: dict[type, FrameCache]) -> None:
        """Hand what the host queued for this connection to its transport, or queue it."""
        if self.finished.is_set():
            self.conn.data_to_send()
            return
        data = self.conn.data_to_send()
        if not data:
            return
        direct = self.direct
        if (direct is not None and not self.queue and self.sending_since is None
                and not self.draining):
            # nothing waits before these: they may overtake nothing
            cache = frames.get(self.kind)
            if cache is None:
                cache = frames[self.kind] = {}
            try:
                if sum(map(len, data)) <= DIRECT_WRITE_LIMIT and direct(data, cache):
                    return
            except (EndOfStream, OSError) as e:
                self.finish(None, f"the transport failed while sending: {e}")
                return
        limits = self.server.limits
        queue = self.queue
        if queue is None:
            queue = self.queue = deque()
        added = 0
        for message in data:
            queue.append(message)
            added += len(message)
        self.queued_bytes += added
        self.server._queued_bytes += added
        if len(queue) > limits.max_queue_messages or (
            self.queued_bytes > limits.max_queue_bytes
        ):
            log.warning("connection #%d: send queue full (%d messages, %d bytes): the client "
                        "is not reading; closing it", self.conn.number, len(queue),
                        self.queued_bytes)
            self.drop(CloseReason.OVERFLOW, "send queue full: the client is not reading")
            return
        self.start_writer()
        self.wake.set()
        if self.server._queued_bytes > limits.max_total_queue_bytes:
            self.server._shed(self.server._queued_bytes - limits.max_total_queue_bytes)

    def stalled_for(self, now: float) -> float:
        """How long the send under way has been stuck (0: none is)."""
        return 0.0 if self.sending_since is None else now - self.sending_since

    def drop(self, reason: CloseReason | None, message: str) -> None:
        """Give up on the client: forget its queue, close its host end, end the transport."""
        self.server._queued_bytes -= self.queued_bytes
        self.queue = None
        self.queued_bytes = 0
        if not self.conn.closed:
            self.conn.connection_lost()
        self.finish(reason, message)

    def host_closed(self, reason: str) -> None:
        """The host closed the connection: send what is queued, then close the transport."""
        if self.finished.is_set():
            return
        self.draining = True
        self.close_reason = (
            CloseReason.SHUTDOWN if self.server.closing else CloseReason.NORMAL
        )
        self.close_message = reason
        self.start_writer()  # it sends what is queued, then finishes
        self.wake.set()

    def finish(self, reason: CloseReason | None, message: str = "") -> None:
        """Stop: ``reason`` says how to close the transport (``None``: it is already gone)."""
        if self.finished.is_set():
            return
        self.close_reason = reason
        self.close_message = message
        self.finished.set()
        self.wake.set()

    def start_writer(self) -> None:
        if self.writer is None and not self.finished.is_set():
            self.writer = asyncio.get_running_loop().create_task(self.write_loop())

    async def write_loop(self) -> None:
        budget = self.server._send_budget
        loop = asyncio.get_running_loop()
        try:
            while not self.finished.is_set():
                while self.queue and not self.finished.is_set():
                    if self.direct is not None and self._write_queued(self.queue):
                        continue
                    size = len(self.queue[0])
                    await budget.acquire(size)
                    try:
                        if not self.queue or self.finished.is_set():
                            continue
                        message = self.queue.popleft()
                        self.sending_since = loop.time()
                        await self.stream.send(message)
                    finally:
                        self.sending_since = None
                        budget.release(size)
                    # counted until sent: the transport holds its own copy meanwhile
                    # (a drop meanwhile already uncounted the whole queue)
                    if not self.finished.is_set():
                        self.queued_bytes -= size
                        self.server._queued_bytes -= size
                if self.draining:
                    self.finish(self.close_reason, self.close_message)
                    return
                self.wake.clear()
                await self.wake.wait()
        except (EndOfStream, OSError) as e:
            self.finish(None, f"the transport failed while sending: {e}")
        except Exception:
            log.exception("connection #%d: the writer failed", self.conn.number)
            self.drop(CloseReason.INTERNAL, "internal error in the host")

    def _write_queued(self, queue: deque[bytes]) -> bool:
        """Hand the transport the queue's head, up to :data:`DIRECT_WRITE_LIMIT` bytes, in
        one write if it takes them without waiting; ``False`` if it does not."""
        assert self.direct is not None
        batch = [queue[0]]
        size = len(batch[0])
        for message in itertools.islice(queue, 1, None):
            if size + len(message) > DIRECT_WRITE_LIMIT:
                break
            batch.append(message)
            size += len(message)
        if not self.direct(batch, {}):
            return False
        for _ in batch:
            queue.popleft()
        self.queued_bytes -= size
        self.server._queued_bytes -= size
        return True

    async def read_loop(self) -> None:
        conn = self.conn
        try:
            while not conn.closed:
                data = await self.stream.receive()
                conn.receive_data(data)
                # a client's input is answered at once, and the budgets checked at once
                self.server._flush(defer_send=False)
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
        except Exception:
            # a bug of ours (or of an embedder's hook) must not leave the client hanging
            log.exception("connection #%d: failed on a message; closing it", conn.number)
            self.drop(CloseReason.INTERNAL, "internal error in the host")


class StreamWrapper(Protocol):
    """Something each connection's stream passes through (``serve --capture``'s files):
    asked once a connection, never per message."""

    def wrap(self, stream: MessageStream) -> MessageStream:
        """The stream to serve in place of ``stream``."""
        ...

    def done(self, stream: MessageStream) -> None:
        """The connection served on ``stream`` (what :meth:`wrap` returned) ended."""
        ...


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
        commit_interval: float = 0.002,
        send_interval: float = 0.001,
    ) -> None:
        if commit_interval < 0 or send_interval < 0:
            raise LocalProtocolError("commit_interval and send_interval must not be negative")
        self._host = host
        self.handler = handler
        self.commit_interval = commit_interval
        """With a store: the least time between two commits while changes stream
        in.  A change after a quiet spell is committed (and sent) at once; during a
        stream, what comes within the interval waits for one commit together, so
        a stream costs a commit per interval, not per action (group commit)."""
        self.send_interval = send_interval
        """The least time between two flushes while messages stream in (without a
        store, or with nothing to commit).  A message after a quiet spell is sent
        at once; during a stream, what comes within the interval goes out
        together: one write per connection per interval, not per message, which
        is what makes a fan-out cheaper than a broadcast per message.  ``0``:
        every flush sends at once."""
        self._last_commit = -math.inf
        self._last_send = -math.inf
        self._flush_timer: asyncio.TimerHandle | None = None
        self._delivery_timer: asyncio.TimerHandle | None = None
        self._expiry_timer: asyncio.TimerHandle | None = None
        self.limits = limits if limits is not None else ServerLimits()
        if limits is not None:
            # a host built with budgets of its own keeps them unless the server is given some
            host.limits = limits.host_limits()
        self._peers: dict[HostConnection, _Peer] = {}
        self._queued_bytes = 0
        self._send_budget = _SendBudget(self)
        self._probes: set[asyncio.Task[None]] = set()
        self._recheck: asyncio.TimerHandle | None = None
        self._closing = False
        self.stream_wrapper: StreamWrapper | None = None
        """Wraps each accepted connection's stream (``None``: served as it comes)."""
        self._idle = asyncio.Event()
        self._idle.set()
        self._flushing = False
        self._services: list[HostService] = []
        if host.observer is None:
            # what the host does, logged the same for every agent and transport
            host.observer = ActivityLog(host)

    def add_service(self, service: HostService) -> None:
        """Offer every event to ``service`` before the handler (in the order
        added); :meth:`close` closes it after the connections."""
        self._services.append(service)

    @property
    def services(self) -> tuple[HostService, ...]:
        """The services added, in the order they are offered events."""
        return tuple(self._services)

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

    @property
    def at_capacity(self) -> bool:
        """Whether one more connection would exceed ``limits.max_connections``."""
        return len(self._peers) >= self.limits.max_connections

    @property
    def queued_bytes(self) -> int:
        """Bytes waiting for or being sent to all connections (what the budget counts)."""
        return self._queued_bytes

    def reading_queued_bytes(self) -> int:
        """Bytes waiting for or being sent to the connections that read: those whose
        send under way has not been stuck for ``limits.stall_timeout``.  What a
        producer (a terminal's output) waits on for backpressure: a client that
        stopped reading holds it back no longer than that, and is left to the
        budgets, which drop it."""
        try:
            now = asyncio.get_running_loop().time()
        except RuntimeError:
            return self._queued_bytes
        stall = self.limits.stall_timeout
        return sum(peer.queued_bytes for peer in self._peers.values()
                   if peer.stalled_for(now) < stall)

    def _shed(self, excess: int) -> None:
        """Drop the connections whose sends are stuck, longest first, until ``excess``
        bytes are freed; a connection that reads is never dropped for the budget."""
        now = asyncio.get_running_loop().time()
        stuck = sorted(
            (peer for peer in self._peers.values()
             if not peer.finished.is_set()
             and peer.stalled_for(now) >= self.limits.stall_timeout),
            key=lambda peer: peer.stalled_for(now), reverse=True,
        )
        for peer in stuck:
            if excess <= 0:
                return
            excess -= peer.queued_bytes
            log.warning("connection #%d: dropped, the server's send budget (%d bytes) is "
                        "full and its client has not read for %.1f s", peer.conn.number,
                        self.limits.max_total_queue_bytes, peer.stalled_for(now))
            peer.drop(None, "dropped: the server's send budget is full and the client "
                      "is not reading")
            # a stuck transport would hold its buffer until the close timed out
            peer.stream.abort()
        if excess > 0 and self._recheck is None:
            # over budget, with sends not stuck long enough yet: look again when they are
            self._recheck = asyncio.get_running_loop().call_later(
                max(self.limits.stall_timeout, 0.05), self._check_budget)

    def _check_budget(self) -> None:
        self._recheck = None
        excess = self._queued_bytes - self.limits.max_total_queue_bytes
        if excess > 0:
            self._shed(excess)

    def flush(self) -> None:
        """Handle the host's pending events, then queue what every connection must send.

        Call it after anything that changes the host from outside a
        connection (an agent's step, ``host.dispatch``); the server does it
        after every message it receives.  While such flushes stream in, what
        they queue is handed to the transports at most once per
        ``send_interval`` (a timer does the last); a client's own input is
        answered at once.
        """
        self._flush(defer_send=True)

    def _flush(self, *, defer_send: bool) -> None:
        if self._flushing:
            # a handler calling flush() from inside flush(): the outer loop goes on
            return
        if not self._commit_due():
            return  # the flush timer flushes
        self._flushing = True
        try:
            while True:
                # stored before the handler hears of it: an agent acts on what was
                # kept, and a failed commit takes back the events of its client actions
                self._host.commit()
                for event in self._host.events():
                    self._handle(event)
                if not self._send_due(defer_send):
                    break  # the flush timer sends
                self._host.deliver_due()
                frames: dict[type, FrameCache] = {}
                for peer in tuple(self._peers.values()):
                    peer.pull(frames)
                if defer_send and self._peers:
                    # the interval runs from the end of the writes: when they take
                    # long (many connections, compression), what comes meanwhile
                    # waits to go out together, which makes the next ones cheaper
                    with contextlib.suppress(RuntimeError):
                        self._last_send = asyncio.get_running_loop().time()
                # an overflow closes its connection, which queues a ConnectionClosed event
                late = self._host.next_event()
                if late is None:
                    break
                self._handle(late)
        finally:
            self._flushing = False
        self._schedule_delivery()
        self._schedule_expiry()

    def _schedule_delivery(self) -> None:
        """A timer for the deltas the host holds to merge (``delivery.maxLatencyMs``)."""
        due = self._host.next_delivery()
        if due is None or self._closing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        when = loop.time() + max(0, due - self._host.now()) / 1000
        timer = self._delivery_timer
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._delivery_timer = loop.call_at(when, self._deliver_later, due)

    def _schedule_expiry(self) -> None:
        """A timer for what the host's clock makes due (:meth:`Host.expire_clients`): an
        active client gone past its grace period leaves ``activeClients``, remembered
        clients past their age are forgotten.  The core has no timer of its own.

        Armed once and then re-armed by itself, at most :data:`EXPIRY_CHECK_INTERVAL`
        apart: finding the next deadline looks at every remembered client, too much
        for every flush, and a deadline that comes nearer meanwhile (a client just
        dropped) is seen at the next check."""
        if self._expiry_timer is not None or self._closing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        due = self._host.next_deadline()
        if due is None:
            return
        # never at once: a deadline the host cannot clear must not spin the loop
        delay = min(EXPIRY_CHECK_INTERVAL, max(0.1, (due - self._host.now()) / 1000))
        self._expiry_timer = loop.call_later(delay, self._expire_later)

    def _expire_later(self) -> None:
        self._expiry_timer = None
        due = self._host.next_deadline()
        if due is not None and due <= self._host.now():
            self._host.expire_clients()
        self.flush()  # which arms the next check

    def _deliver_later(self, due: int) -> None:
        self._delivery_timer = None
        # by the loop's clock the window has passed, whatever the host's clock says
        self._host.deliver_due(until=due)
        self.flush()

    def _commit_due(self) -> bool:
        """Whether to commit (and go on) now: ``False`` when the last commit was less than
        ``commit_interval`` ago and changes wait; the flush timer comes back then."""
        if not self._host.uncommitted or self._closing:
            return True
        return self._due("_last_commit", self.commit_interval)

    def _send_due(self, defer: bool) -> bool:
        """Whether to hand the connections what waits for them now: ``False`` when the
        last time was less than ``send_interval`` ago; the flush timer comes back then."""
        if self._closing or not defer:
            return True
        return self._due("_last_send", self.send_interval)

    def _due(self, last: Literal["_last_commit", "_last_send"], interval: float) -> bool:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return True  # no loop, no timer: at once
        now = loop.time()
        due = getattr(self, last) + interval
        if now >= due:
            setattr(self, last, now)
            return True
        timer = self._flush_timer
        if timer is None or timer.when() > due:
            if timer is not None:
                timer.cancel()
            self._flush_timer = loop.call_at(due, self._flush_later)
        return False

    def _flush_later(self) -> None:
        self._flush_timer = None
        self.flush()

    def _handle(self, event: Event) -> None:
        if isinstance(event, ConnectionClosed):
            peer = self._peers.get(event.connection)
            if peer is not None:
                peer.host_closed(event.reason)
        elif isinstance(event, StoreFailed):
            log.error("the store failed: %s%s", event.message,
                      f" ({event.refused} client actions refused)" if event.refused else "")
        elif isinstance(event, Initialized | Reconnected):
            self._log_handshake(event)
        elif isinstance(event, ClientIdClaimed):
            task = asyncio.get_running_loop().create_task(self._settle_claim(event))
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)
        for service in self._services:
            try:
                if service.handle(event):
                    return
            except Exception:
                log.exception("the service %s failed on %s%s", type(service).__name__,
                              type(event).__name__,
                              f" ({event.method})" if isinstance(event, RequestReceived) else "")
                if isinstance(event, RequestReceived):
                    if not event.responder.answered:
                        with contextlib.suppress(LocalProtocolError):
                            event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR,
                                                  f"internal error in the host's {event.method}")
                    return
        handler = self.handler
        if handler is None:
            if isinstance(event, RequestReceived):
                event.responder.error(JsonRpcErrorCode.METHOD_NOT_FOUND,
                                      f"this host does not support {event.method}")
            return
        try:
            handler(event)
        except Exception:
            # the event's kind, not its repr: its params may hold what a user wrote
            log.exception("the event handler failed on %s%s", type(event).__name__,
                          f" ({event.method})" if isinstance(event, RequestReceived) else "")
            if isinstance(event, RequestReceived) and not event.responder.answered:
                with contextlib.suppress(LocalProtocolError):
                    event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR,
                                          "internal error in the host's agent")
        else:
            if isinstance(event, RequestReceived) and not event.responder.answered:
                # answering later is allowed; forgetting the request is not: once
                # nothing holds its responder, nothing ever will answer it
                weakref.finalize(event.responder, self._forgotten, event.connection,
                                 event.request_id, event.method)

    @staticmethod
    def _log_handshake(event: Initialized | Reconnected) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        if isinstance(event, Initialized):
            how = "initialized"
        else:
            how = "reconnected, " + ("missed actions replayed" if event.replayed
                                     else "given snapshots")
        log.info("connection #%d: client %s %s (protocol %s)", event.connection.number,
                 shown(event.client_id), how, shown(event.protocol_version))

    def _forgotten(self, conn: HostConnection, request_id: object, method: str) -> None:
        if conn.closed or not isinstance(request_id, (int, str)):
            return
        if not conn.is_unanswered(request_id):
            return
        log.error("connection #%d: the handler dropped %s (request %r) without answering it; "
                  "answered InternalError", conn.number, method, request_id)
        # the dropped responder is gone; a new one for the same request answers it once
        Responder(conn, request_id, method).error(
            JsonRpcErrorCode.INTERNAL_ERROR, f"the host dropped {method} without answering it")
        with contextlib.suppress(RuntimeError):  # no running loop: the server is gone
            asyncio.get_running_loop().call_soon(self.flush)

    async def _settle_claim(self, event: ClientIdClaimed) -> None:
        holder = self._peers.get(event.holder)
        alive = holder is not None and not holder.finished.is_set()
        if holder is not None and alive and isinstance(holder.stream, ProbeableStream):
            try:
                alive = await holder.stream.probe(self.limits.claim_probe_timeout)
            except Exception:  # a probe that fails says the same as no answer
                log.debug("connection #%d: the probe failed", holder.conn.number,
                          exc_info=True)
                alive = False
        log.info("connection #%d claims clientId %r held by #%d: %s",
                 event.connection.number, event.client_id, event.holder.number,
                 "refused, the holder answered" if alive else "granted, the holder is gone")
        self._host.settle_claim(event.connection, holder_alive=alive, holder=event.holder)
        if not alive and holder is not None:
            holder.drop(None, "replaced: its clientId was claimed and it did not answer a ping")
            holder.stream.abort()
        self.flush()

    def _handshake_deadline(self, peer: _Peer) -> None:
        if peer.conn.state is ConnectionState.AWAITING_INITIALIZE and not peer.finished.is_set():
            message = (f"no initialize within {self.limits.initialize_timeout:g} s")
            log.info("connection #%d: %s; closing it", peer.conn.number, message)
            peer.drop(CloseReason.POLICY, message)

    async def serve_connection(self, stream: MessageStream, *,
                               principal: object = None) -> None:
        """Serve one transport connection until it ends; returns when the transport is closed.

        ``principal`` is who the embedder authenticated on the handshake
        (``None``: nobody in particular); the host's connection carries it
        (:attr:`~agenthost_protocol.host.HostConnection.principal`).  Never
        raises for what the client does; cancelling it drops the connection.
        """
        peer = getattr(stream, "peer", None)  # read here: a wrapper may not pass it on
        wrapper = self.stream_wrapper
        if wrapper is None or self._closing or self.at_capacity:
            # a connection refused at once is not wrapped (no capture file for it)
            await self._serve_connection(stream, peer, principal)
            return
        wrapped = wrapper.wrap(stream)
        try:
            await self._serve_connection(wrapped, peer, principal)
        finally:
            wrapper.done(wrapped)

    async def _serve_connection(self, stream: MessageStream, peer_name: object = None,
                                principal: object = None) -> None:
        if self._closing:
            await self._close_stream(stream, CloseReason.SHUTDOWN, "the host is shutting down")
            return
        if self.at_capacity:
            log.warning("refused a connection: %d connections served, the limit",
                        len(self._peers))
            await self._close_stream(stream, CloseReason.POLICY,
                                     "too many connections: try again later")
            return
        conn = self._host.connect(principal=principal)
        peer = _Peer(self, conn, stream)
        self._peers[conn] = peer
        self._idle.clear()
        log.info("connection #%d: open%s", conn.number,
                 f" from {shown(peer_name)}" if isinstance(peer_name, str) else "")
        reader = asyncio.create_task(peer.read_loop())
        deadline = asyncio.get_running_loop().call_later(
            self.limits.initialize_timeout, self._handshake_deadline, peer
        )
        try:
            await peer.finished.wait()
        finally:
            deadline.cancel()
            tasks = [reader] if peer.writer is None else [reader, peer.writer]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if not conn.closed:
                conn.connection_lost()
            self.flush()  # the handler hears of the closed connection now
            reason = peer.close_reason
            try:
                if reason is not None:
                    await self._close_stream(stream, reason, peer.close_message)
            finally:
                del self._peers[conn]
                self._queued_bytes -= peer.queued_bytes
                peer.queued_bytes = 0
                if not self._peers:
                    self._idle.set()
            client = conn.client_id
            log.info("connection #%d%s: closed (%s)", conn.number,
                     "" if client is None else f" (client {shown(client)})",
                     printable(f"{reason.value}: {peer.close_message}" if reason is not None
                               else peer.close_message or "by the client"))

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
        for timer in (self._flush_timer, self._delivery_timer, self._expiry_timer):
            if timer is not None:
                timer.cancel()
        self._flush_timer = self._delivery_timer = self._expiry_timer = None
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        for probe in tuple(self._probes):
            probe.cancel()
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
        for service in tuple(self._services):
            try:
                await service.close()
            except Exception:
                log.exception("closing the service %s failed", type(service).__name__)

    async def wait_idle(self) -> None:
        """Wait until no connection is served."""
        await self._idle.wait()
