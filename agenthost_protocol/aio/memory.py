"""A host and a client in one process, no sockets: for testing agents and clients.

Like MCP's ``create_connected_server_and_client_session``::

    async with connected_client(server) as client:      # an AsyncClient
        await client.initialize()
        ...

``server`` is a :class:`~agenthost_protocol.aio.HostServer` (an agent's:
:func:`~agenthost_protocol.agent.build_agent_server`, or one of your own).
Each connection is a :class:`MemoryLink`: a pair of in-memory message
queues that a test can break (:meth:`MemoryLink.drop`, as a lost socket) or
slow down (:attr:`MemoryLink.delay`), so reconnects and races are tested
in-process.  The client's reconnect supervisor opens a new link to the same
server; :attr:`MemoryOpener.links` lists them::

    opener = MemoryOpener(server)
    async with connected_client(server, opener=opener, reconnect=True) as client:
        ...
        opener.link.drop()          # the client reconnects on a new link
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from .client import AsyncClient, ReconnectPolicy
from .client_transport import TransportClosed
from .server import CloseReason, EndOfStream, HostServer

__all__ = ["MemoryLink", "MemoryOpener", "connected_client"]

_END = object()


class MemoryLink:
    """One in-memory connection: the host's :class:`~agenthost_protocol.aio.MessageStream`
    end and the client's :class:`~agenthost_protocol.aio.client.MessageTransport` end."""

    def __init__(self) -> None:
        self._to_host: asyncio.Queue[object] = asyncio.Queue()
        self._to_client: asyncio.Queue[object] = asyncio.Queue()
        self.delay = 0.0
        """Seconds each message takes, both ways (a slow network)."""
        self.dropped = False
        self.closed_reason = ""
        self.host = _HostEnd(self)
        self.client = _ClientEnd(self)

    def drop(self, reason: str = "the link dropped") -> None:
        """Break the link: both ends see it gone, what was in flight is lost."""
        if self.dropped:
            return
        self.dropped = True
        self.closed_reason = reason
        for queue in (self._to_host, self._to_client):
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(_END)

    async def _carry(self, queue: asyncio.Queue[object], data: bytes) -> None:
        if self.dropped:
            raise ConnectionResetError(self.closed_reason)
        if self.delay:
            await asyncio.sleep(self.delay)
        if not self.dropped:
            queue.put_nowait(data)


class _HostEnd:
    def __init__(self, link: MemoryLink) -> None:
        self._link = link

    async def receive(self) -> bytes | str:
        item = await self._link._to_host.get()
        if item is _END:
            raise EndOfStream(self._link.closed_reason or "closed by the client")
        assert isinstance(item, bytes)
        return item

    async def send(self, data: bytes) -> None:
        try:
            await self._link._carry(self._link._to_client, data)
        except ConnectionResetError as e:
            raise EndOfStream(str(e)) from None

    async def close(self, reason: CloseReason, message: str) -> None:
        self._link.drop(f"closed by the host ({reason.value}: {message})")

    def abort(self) -> None:
        self._link.drop("aborted by the host")

    async def probe(self, timeout: float) -> bool:
        return not self._link.dropped


class _ClientEnd:
    def __init__(self, link: MemoryLink) -> None:
        self._link = link

    async def send(self, data: bytes) -> None:
        try:
            await self._link._carry(self._link._to_host, data)
        except ConnectionResetError as e:
            raise TransportClosed(str(e)) from None

    async def receive(self) -> bytes | str:
        item = await self._link._to_client.get()
        if item is _END:
            raise TransportClosed(self._link.closed_reason or "closed")
        assert isinstance(item, bytes)
        return item

    async def close(self) -> None:
        self._link.drop("closed by the client")


class MemoryOpener:
    """Opens :class:`MemoryLink` connections to ``server`` (an ``AsyncClient``'s opener)."""

    def __init__(self, server: HostServer) -> None:
        self.server = server
        self.links: list[MemoryLink] = []
        self._served: set[asyncio.Task[None]] = set()

    async def __call__(self) -> _ClientEnd:
        link = MemoryLink()
        self.links.append(link)
        task = asyncio.get_running_loop().create_task(self.server.serve_connection(link.host))
        self._served.add(task)
        task.add_done_callback(self._served.discard)
        return link.client

    @property
    def link(self) -> MemoryLink:
        """The newest link."""
        return self.links[-1]

    async def aclose(self) -> None:
        for link in self.links:
            link.drop("the test ended")
        tasks = tuple(self._served)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)


@contextlib.asynccontextmanager
async def connected_client(
    server: HostServer,
    *,
    opener: MemoryOpener | None = None,
    reconnect: ReconnectPolicy | bool = False,
    **options: Any,
) -> AsyncIterator[AsyncClient]:
    """An :class:`~agenthost_protocol.aio.client.AsyncClient` connected to ``server``
    in memory (not initialized yet).  Pass an ``opener`` (a :class:`MemoryOpener`
    of ``server``) to reach its links (drop them, slow them).  ``options`` are
    ``AsyncClient``'s."""
    opener = opener if opener is not None else MemoryOpener(server)
    policy = ReconnectPolicy() if reconnect is True else reconnect or None
    client = AsyncClient(opener, target="in-memory host", reconnect=policy, **options)
    try:
        async with client:
            yield client
    finally:
        await opener.aclose()
