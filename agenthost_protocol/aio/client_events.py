"""What the asyncio client reports: its events, event streams and dispatched-action handles.

:meth:`AsyncClient.events() <agenthost_protocol.aio.client.AsyncClient.events>`
yields :data:`ClientEvent` values: the sans-I/O client's unsolicited events
(:class:`~agenthost_protocol.client.ActionReceived`,
:class:`~agenthost_protocol.client.NotificationReceived`,
:class:`~agenthost_protocol.client.ProtocolViolation`) and the connection's
own (:class:`ConnectionLost`, :class:`Reconnecting`, :class:`Resumed`,
:class:`Reinitialized`, :class:`Closed`), plus :class:`EventsDropped` when a
slow consumer lost some.  Answers to requests are not events: they resolve
the awaited call.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TypeAlias, TypeVar

from attrs import field, frozen

from ..client import ActionReceived, NotificationReceived, ProtocolViolation
from ..reconciler import PendingAction, Received, ReceiveKind, ReconnectOutcome
from ..types import InitializeResult, StateAction
from .client_errors import ActionDropped, ActionRejected, ClientError, ClientTimeout

__all__ = [
    "DEFAULT_EVENT_BUFFER",
    "ClientEvent",
    "Closed",
    "ConnectionLost",
    "DispatchedAction",
    "EventStream",
    "EventsDropped",
    "Reconnecting",
    "Reinitialized",
    "Resumed",
]

T = TypeVar("T")

DEFAULT_EVENT_BUFFER = 1024
"""Events an :class:`EventStream` holds for a slow consumer before it drops the oldest."""


# ``asyncio.wait_for`` before Python 3.12 loses a cancellation that comes as the awaited
# thing completes (it returns the result instead): a Ctrl-C would be ignored.  These
# wait with ``asyncio.wait``, which always lets a cancellation through.


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set (``True``) or ``timeout`` seconds passed (``False``)."""
    if event.is_set():
        return True
    if timeout is None:
        await event.wait()
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=max(0.0, timeout))
    finally:
        waiter.cancel()
    return bool(done)


async def wait_future(future: asyncio.Future[T], timeout: float | None) -> T:
    """``future``'s result; raises ``asyncio.TimeoutError`` after ``timeout`` seconds."""
    if timeout is None:
        return await future
    done, _ = await asyncio.wait({future}, timeout=max(0.0, timeout))
    if not done:
        raise asyncio.TimeoutError
    return future.result()


@frozen(kw_only=True)
class ConnectionLost:
    """The transport dropped.  Requests in flight failed with
    :class:`~agenthost_protocol.aio.client.ConnectionClosedError`; the state is kept."""

    reason: str
    will_retry: bool
    """Whether the reconnect supervisor will try to resume (else :class:`Closed` follows)."""


@frozen(kw_only=True)
class Reconnecting:
    """The supervisor waits ``delay`` seconds, then makes reconnect attempt ``attempt`` (from 1)."""

    attempt: int
    delay: float
    last_error: str | None = None
    """Why the previous attempt failed (``None`` before the first)."""


@frozen(kw_only=True)
class Resumed:
    """``reconnect`` succeeded: the connection is open again with its state and subscriptions.

    ``outcome.dropped`` are our pending actions the host never answered (also
    in :attr:`AsyncClient.dropped_actions
    <agenthost_protocol.aio.client.AsyncClient.dropped_actions>`, and re-sent
    by :meth:`~agenthost_protocol.aio.client.AsyncClient.resend_dropped`);
    ``outcome.removed`` the channels the host no longer has.
    """

    outcome: ReconnectOutcome
    attempts: int
    """The attempts it took (1 for the first)."""


@frozen(kw_only=True)
class Reinitialized:
    """``reconnect`` was refused (the host forgot this client, or restarted), so the
    supervisor started afresh: ``initialize`` with the channels subscribed before.

    Every pending action was dropped (``dropped``, re-sendable like a
    :class:`Resumed`'s); ``removed`` lists the channels the host did not
    resubscribe (they no longer exist).
    """

    reason: str
    """Why ``reconnect`` could not be used (the host's error)."""
    result: InitializeResult = field(repr=False)
    dropped: tuple[PendingAction, ...]
    removed: tuple[str, ...]
    attempts: int


@frozen(kw_only=True)
class EventsDropped:
    """This stream's buffer overflowed: ``count`` older events were dropped.

    The state itself lost nothing (the client reconciles every message
    whether anyone reads events or not): read it again from
    :meth:`AsyncClient.state <agenthost_protocol.aio.client.AsyncClient.state>`.
    """

    count: int


@frozen(kw_only=True)
class Closed:
    """The client is closed for good: the last event of every stream."""

    reason: str
    error: ClientError | None = field(default=None, eq=False)
    """What closed it, unless the application did (:meth:`AsyncClient.close
    <agenthost_protocol.aio.client.AsyncClient.close>`)."""


ClientEvent: TypeAlias = (
    ActionReceived
    | NotificationReceived
    | ProtocolViolation
    | ConnectionLost
    | Reconnecting
    | Resumed
    | Reinitialized
    | EventsDropped
    | Closed
)
"""Everything an :class:`EventStream` yields."""


class EventStream:
    """One consumer's view of the client's events: a bounded buffer and an async iterator.

    Made by :meth:`AsyncClient.events
    <agenthost_protocol.aio.client.AsyncClient.events>`; it receives every
    event from then on.  When the consumer is slower than the host and the
    buffer holds ``maxsize`` events, the *oldest* is dropped and an
    :class:`EventsDropped` is yielded in its place: the reader never waits
    for a consumer (a consumer awaiting a request would otherwise deadlock
    it), and memory stays bounded.  After :class:`Closed` the iteration
    ends.  :meth:`close` (or leaving ``with``) detaches the stream; one that
    is simply dropped is detached when it is garbage-collected.
    """

    def __init__(self, maxsize: int = DEFAULT_EVENT_BUFFER) -> None:
        if maxsize < 1:
            raise ValueError("an event stream holds at least one event")
        self._maxsize = maxsize
        self._buffer: deque[ClientEvent] = deque()
        self._wakeup = asyncio.Event()
        self._ended = False
        self._lost = 0
        self.dropped = 0
        """How many events this stream dropped in all."""

    @property
    def closed(self) -> bool:
        """Whether the stream ended (nothing more will be yielded once the buffer is read)."""
        return self._ended

    def _put(self, event: ClientEvent) -> None:
        if self._ended:
            return
        if len(self._buffer) >= self._maxsize:
            self._buffer.popleft()
            self._lost += 1
            self.dropped += 1
        self._buffer.append(event)
        self._wakeup.set()

    def _put_many(self, events: list[ClientEvent]) -> None:
        """``_put`` of each of ``events``, in order, at once."""
        if self._ended:
            return
        buffer = self._buffer
        buffer.extend(events)
        excess = len(buffer) - self._maxsize
        if excess > 0:  # the oldest go, as one by one
            for _ in range(excess):
                buffer.popleft()
            self._lost += excess
            self.dropped += excess
        self._wakeup.set()

    def _end(self, final: ClientEvent | None = None) -> None:
        if self._ended:
            return
        if final is not None:
            self._put(final)
        self._ended = True
        self._wakeup.set()

    def close(self) -> None:
        """Detach: drop what is buffered and end the iteration."""
        self._buffer.clear()
        self._lost = 0
        self._end()

    async def next(self, timeout: float | None = None) -> ClientEvent | None:
        """The next event, or ``None`` once the stream ended; raises
        :class:`~agenthost_protocol.aio.client.ClientTimeout` after ``timeout`` seconds."""
        while True:
            if self._lost:
                count, self._lost = self._lost, 0
                return EventsDropped(count=count)
            if self._buffer:
                return self._buffer.popleft()
            if self._ended:
                return None
            self._wakeup.clear()
            if not await wait_event(self._wakeup, timeout):
                assert timeout is not None
                raise ClientTimeout(f"no event within {timeout:g} s", timeout)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> ClientEvent:
        if self._buffer and not self._lost:  # what next() returns first, without its await
            return self._buffer.popleft()
        event = await self.next()
        if event is None:
            raise StopAsyncIteration
        return event

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class DispatchedAction:
    """One action sent with :meth:`AsyncClient.dispatch
    <agenthost_protocol.aio.client.AsyncClient.dispatch>`: await :meth:`wait`
    for the host's answer.

    The action is already applied to the optimistic state; the host's echo
    confirms it, a rejection reverts it.  Nobody has to wait: an unawaited
    handle costs nothing.
    """

    __slots__ = ("_done", "_dropped", "_received", "pending")

    def __init__(self, pending: PendingAction) -> None:
        self.pending = pending
        """The reconciler's record (channel, ``clientSeq``, action, dispatch time)."""
        self._done = asyncio.Event()
        self._received: Received | None = None
        self._dropped: str | None = None

    def __repr__(self) -> str:
        state = ("pending" if not self._done.is_set()
                 else "dropped" if self._dropped is not None
                 else self._received.kind.value if self._received is not None else "?")
        return f"<DispatchedAction {self.channel} clientSeq={self.client_seq} {state}>"

    @property
    def channel(self) -> str:
        return self.pending.channel

    @property
    def client_seq(self) -> int:
        return self.pending.client_seq

    @property
    def action(self) -> StateAction:
        return self.pending.action

    @property
    def done(self) -> bool:
        """Whether the host answered, or the action was dropped."""
        return self._done.is_set()

    @property
    def received(self) -> Received | None:
        """The echo or rejection, once it came."""
        return self._received

    def _resolve(self, received: Received) -> None:
        if not self._done.is_set():
            self._received = received
            self._done.set()

    def _drop(self, reason: str) -> None:
        if not self._done.is_set():
            self._dropped = reason
            self._done.set()

    async def wait(self, timeout: float | None = None) -> Received:
        """The host's echo (``received.kind`` is ``ECHO``).

        Raises :class:`~agenthost_protocol.aio.client.ActionRejected` if the
        host rejected it, :class:`~agenthost_protocol.aio.client.ActionDropped`
        if it will never be answered (reconnect, unsubscribe, close), and
        :class:`~agenthost_protocol.aio.client.ClientTimeout` after
        ``timeout`` seconds.
        """
        if not await wait_event(self._done, timeout):
            assert timeout is not None
            raise ClientTimeout(
                f"no answer to clientSeq {self.client_seq} within {timeout:g} s", timeout
            )
        if self._dropped is not None:
            raise ActionDropped(self.pending, self._dropped)
        received = self._received
        assert received is not None
        if received.kind is ReceiveKind.REJECTED and received.rejection is not None:
            raise ActionRejected(received.rejection)
        return received
