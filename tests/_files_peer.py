"""A host serving files (and watches) on a loopback JSON Lines socket, and a raw client."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agenthost_protocol.aio import HostServer, ServerLimits
from agenthost_protocol.aio.files import FileService, Root, Roots
from agenthost_protocol.aio.stdio import serve_streams
from agenthost_protocol.aio.watches import WatchService
from agenthost_protocol.host import Host

TIMEOUT = 20.0
NOW = 1_767_225_600_000


class Peer:
    """One client connection: requests by method, answers matched by id, the rest kept."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.ids = itertools.count(1)
        self.notes: list[Any] = []

    async def message(self, timeout: float = TIMEOUT) -> Any:
        data = await asyncio.wait_for(self.reader.readline(), timeout)
        assert data, "the host closed the connection"
        return json.loads(data)

    async def call(self, method: str, **params: Any) -> Any:
        """The whole answer (``result`` or ``error``) to one request."""
        request_id = next(self.ids)
        if method != "initialize":
            params.setdefault("channel", "ahp-root://")
        self.writer.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                                      "params": params}).encode() + b"\n")
        while True:
            msg = await self.message()
            if msg.get("id") == request_id:
                return msg
            self.notes.append(msg)

    async def ok(self, method: str, **params: Any) -> Any:
        answer = await self.call(method, **params)
        assert "result" in answer, answer
        return answer["result"]

    async def code(self, method: str, **params: Any) -> int:
        answer = await self.call(method, **params)
        assert "error" in answer, answer
        return int(answer["error"]["code"])

    def notify(self, method: str, **params: Any) -> None:
        self.writer.write(json.dumps({"jsonrpc": "2.0", "method": method,
                                      "params": params}).encode() + b"\n")

    async def action(self, channel: str, timeout: float = TIMEOUT) -> Any:
        """The next action envelope on ``channel`` (others are kept)."""
        for i, msg in enumerate(self.notes):
            if msg.get("method") == "action" and msg["params"]["channel"] == channel:
                del self.notes[i]
                return msg["params"]
        while True:
            msg = await self.message(timeout)
            if msg.get("method") == "action" and msg["params"]["channel"] == channel:
                return msg["params"]
            self.notes.append(msg)


def make_server(roots: list[Root], *, limits: ServerLimits | None = None,
                debounce_ms: int = 30, unclaimed_timeout: float = 30.0) -> HostServer:
    server = HostServer(Host(clock=lambda: NOW), limits=limits or ServerLimits())
    resolved = Roots(roots)
    server.add_service(FileService(server, resolved))
    server.add_service(WatchService(server, resolved, debounce_ms=debounce_ms, step_ms=10,
                                    unclaimed_timeout=unclaimed_timeout))
    return server


@asynccontextmanager
async def serving(server: HostServer) -> AsyncIterator[Any]:
    """A loopback listener for ``server``; yields a function that opens an initialized
    :class:`Peer`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_streams(server, reader, writer)

    listener = await asyncio.start_server(handle, "127.0.0.1", 0, limit=2**26)
    port = listener.sockets[0].getsockname()[1]
    writers: list[asyncio.StreamWriter] = []
    names = itertools.count(1)

    async def connect() -> Peer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**26)
        writers.append(writer)
        peer = Peer(reader, writer)
        await peer.ok("initialize", protocolVersions=["0.7.0"], clientId=f"c{next(names)}")
        return peer

    try:
        yield connect
    finally:
        for writer in writers:
            writer.close()
        await server.close(timeout=TIMEOUT)
        listener.close()
        await listener.wait_closed()
