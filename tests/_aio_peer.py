"""Test helper: a sans-I/O ``ClientConnection`` driven over a real transport.

A :class:`Peer` sends what the client's methods return and feeds every
message the host sends into ``client.receive_data``, over a raw
``websockets`` client connection or a subprocess's stdin/stdout (JSON
Lines).  Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.client import (
    ClientConnection,
    Event,
    Initialized,
    ProtocolViolation,
    Reconnected,
    RequestFailed,
    ResponseReceived,
)

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection as WsClient

TIMEOUT = 20.0
ROOT = "ahp-root://"
USER = t.MessageOrigin(kind=t.MessageKind.USER)


class TransportGone(Exception):
    """The transport closed while the test waited for something."""


class Peer:
    """A client over a transport given as two coroutine functions."""

    def __init__(
        self,
        client: ClientConnection,
        send: Callable[[bytes], Awaitable[None]],
        recv: Callable[[], Awaitable[bytes | str]],
    ) -> None:
        self.client = client
        self._send = send
        self._recv = recv
        self.backlog: deque[Event] = deque()
        self.received = 0

    async def send(self, data: bytes) -> None:
        await self._send(data)

    async def pump(self, timeout: float = TIMEOUT) -> list[Event]:
        """Read one message from the host and feed it to the client."""
        try:
            data = await asyncio.wait_for(self._recv(), timeout)
        except (EOFError, ConnectionError) as e:
            raise TransportGone(str(e)) from None
        self.received += 1
        events = self.client.receive_data(data)
        for event in events:
            if isinstance(event, ProtocolViolation):
                raise AssertionError(f"the host violated the protocol: {event.error}")
        self.backlog.extend(events)
        return events

    async def until(self, predicate: Callable[[Event], bool], timeout: float = TIMEOUT) -> Event:
        """The first event (backlog first) that ``predicate`` accepts; earlier ones are dropped."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            while self.backlog:
                event = self.backlog.popleft()
                if predicate(event):
                    return event
            left = deadline - loop.time()
            if left <= 0:
                raise asyncio.TimeoutError("no such event")
            await self.pump(left)

    async def until_state(
        self, channel: str, predicate: Callable[[t.SnapshotState], bool],
        timeout: float = TIMEOUT,
    ) -> t.SnapshotState:
        """Pump until ``predicate`` holds on the confirmed state of ``channel``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            state = self.client.confirmed(channel)
            if predicate(state):
                return state
            left = deadline - loop.time()
            if left <= 0:
                raise asyncio.TimeoutError(f"{channel} never got there: {state!r}")
            await self.pump(left)

    async def answer(self, request_id: int, timeout: float = TIMEOUT) -> Event:
        """Wait for the end of request ``request_id``."""
        def ends(event: Event) -> bool:
            return isinstance(event, (ResponseReceived, RequestFailed, Initialized, Reconnected)) \
                and event.id == request_id

        return await self.until(ends, timeout)

    async def request(self, method: str, params: object) -> Event:
        request_id, data = self.client.request(method, params)
        await self.send(data)
        return await self.answer(request_id)

    async def initialize(self, subscriptions: Sequence[str] = (ROOT,)) -> Initialized:
        data = self.client.initialize(initial_subscriptions=subscriptions)
        await self.send(data)
        event = await self.until(lambda e: isinstance(e, (Initialized, RequestFailed)))
        assert isinstance(event, Initialized), event
        return event

    async def subscribe(self, channel: str) -> ResponseReceived:
        await self.send(self.client.subscribe(channel))
        event = await self.until(
            lambda e: isinstance(e, (ResponseReceived, RequestFailed))
            and e.method == "subscribe"
        )
        assert isinstance(event, ResponseReceived), event
        return event

    async def dispatch(self, channel: str, action: t.StateAction) -> None:
        await self.send(self.client.dispatch(channel, action))


# -- WebSocket -------------------------------------------------------------------------


async def ws_peer(
    url: str, client_id: str, *, clock: Callable[[], int] | None = None,
    **connect_options: Any,
) -> tuple[Peer, WsClient]:
    """A peer over a raw websockets client connection; returns it and the connection.

    ``clock`` is the client's reducer clock: chat reducers stamp ``modifiedAt``
    with it, so only clients sharing the host's clock end with identical state.
    """
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    ws = await asyncio.wait_for(connect(url, max_size=None, **connect_options), TIMEOUT)

    async def send(data: bytes) -> None:
        try:
            await ws.send(data.decode("utf-8"))
        except ConnectionClosed as e:
            raise TransportGone(str(e)) from None

    async def recv() -> bytes | str:
        try:
            return await ws.recv()
        except ConnectionClosed as e:
            raise TransportGone(str(e)) from None

    return Peer(ClientConnection(client_id, clock=clock), send, recv), ws


def rebind(peer: Peer, other: Peer) -> Peer:
    """``peer``'s client over ``other``'s transport (for a reconnect)."""
    return Peer(peer.client, other._send, other._recv)


# -- subprocesses ------------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def serve_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agenthost_protocol.cli", "serve", *args]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextlib.asynccontextmanager
async def spawn(
    args: Sequence[str], stderr_path: Path, *, stdin: int | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``agenthost-protocol serve ARGS`` in a subprocess, killed on the way out whatever happens.

    stderr goes to a file: a pipe nobody reads would block a chatty child.
    """
    with open(stderr_path, "wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *serve_command(*args), stdin=stdin, stdout=asyncio.subprocess.PIPE, stderr=err,
            env=child_env(), limit=64 * 1024 * 1024,
        )
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.kill()
            await asyncio.wait_for(proc.wait(), TIMEOUT)


@contextlib.asynccontextmanager
async def serving(args: Sequence[str], stderr_path: Path) -> AsyncIterator[tuple[
        asyncio.subprocess.Process, str]]:
    """``serve --port 0 ARGS`` in a subprocess; yields it and its ``ws://`` URL."""
    async with spawn(["--port", "0", *args], stderr_path) as proc:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)
        assert line.startswith(b"serving ws://127.0.0.1:"), (line, stderr_path.read_text())
        yield proc, line.split()[1].decode()


async def stop(proc: asyncio.subprocess.Process, sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` and wait (bounded) for the exit status."""
    proc.send_signal(sig)
    return await asyncio.wait_for(proc.wait(), TIMEOUT)


def without_clock(state: t.SnapshotState) -> object:
    """``state`` as JSON without ``modifiedAt``, which every reducer stamps with its own clock."""

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "modifiedAt"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(wire.dump(state))


def stdio_peer(proc: asyncio.subprocess.Process, client_id: str) -> Peer:
    """A peer speaking JSON Lines on a subprocess's stdin and stdout."""
    assert proc.stdin is not None and proc.stdout is not None
    writer, reader = proc.stdin, proc.stdout

    async def send(data: bytes) -> None:
        writer.write(data + b"\n")
        await writer.drain()

    async def recv() -> bytes:
        line = await reader.readline()
        if not line:
            raise EOFError("the host closed its output")
        return line

    return Peer(ClientConnection(client_id), send, recv)
