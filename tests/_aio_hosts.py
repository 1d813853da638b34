"""Test helpers for the asyncio client: hosts on loopback ports, and transports that misbehave.

Every host here runs in-process on an ephemeral port of 127.0.0.1 and is
closed on the way out of its ``async with``; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from agenthost_protocol import types as t
from agenthost_protocol.agent import AgentDriver
from agenthost_protocol.agent.demo import DemoAgent, demo_root_state
from agenthost_protocol.aio import HostServer, ServerLimits
from agenthost_protocol.aio.access import AccessPolicy
from agenthost_protocol.aio.client import (
    ClientEvent,
    EventStream,
    MessageTransport,
    WebSocketTransport,
    open_websocket,
)
from agenthost_protocol.aio.websocket import WebSocketServer, serve_websocket
from agenthost_protocol.host import Event as HostEvent
from agenthost_protocol.host import Host, HostStore
from agenthost_protocol.versions import SUPPORTED_PROTOCOL_VERSIONS

ROOT = "ahp-root://"
NOW = 1_767_225_600_000
TIMEOUT = 10.0
USER = t.MessageOrigin(kind=t.MessageKind.USER)

E = TypeVar("E")


def clock() -> int:
    # the host and the clients share it, so that reducer timestamps agree
    return NOW


def run(coro: Coroutine[Any, Any, None], timeout: float = 30.0) -> None:
    """Run a test body on a fresh event loop, bounded in time."""
    asyncio.run(asyncio.wait_for(coro, timeout))


class DemoHost:
    """The demo agent's host, served over WebSocket."""

    def __init__(self, server: HostServer, endpoint: WebSocketServer,
                 driver: AgentDriver) -> None:
        self.server = server
        self.endpoint = endpoint
        self.driver = driver
        """The agent layer driving the demo (``driver.agent``)."""
        self.events: list[HostEvent] = []

    @property
    def agent(self) -> DemoAgent:
        agent = self.driver.agent
        assert isinstance(agent, DemoAgent)
        return agent

    @property
    def host(self) -> Host:
        return self.server.host

    @property
    def url(self) -> str:
        return self.endpoint.url


@contextlib.asynccontextmanager
async def demo_host(
    *,
    step_delay: float = 0.0,
    replay_window: int = 10_000,
    remembered_clients: int = 1024,
    supported_versions: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS,
    intercept: Callable[[DemoHost, HostEvent], bool] | None = None,
    limits: ServerLimits | None = None,
    access: AccessPolicy | None = None,
    store: HostStore | None = None,
) -> AsyncIterator[DemoHost]:
    """A demo host on a loopback port.  ``intercept(host, event)`` sees every host
    event first; returning ``True`` keeps it from the demo agent."""
    host = Host(clock=clock, root=demo_root_state(), replay_max_envelopes=replay_window,
                remembered_clients=remembered_clients, supported_versions=supported_versions,
                server_info=t.Implementation(name="test-host"), store=store)
    server = HostServer(host, limits=limits)
    driver = AgentDriver(DemoAgent(step_delay=step_delay), host, server.flush)
    endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None, access=access)
    demo = DemoHost(server, endpoint, driver)

    def handle(event: HostEvent) -> None:
        demo.events.append(event)
        if intercept is not None and intercept(demo, event):
            return
        driver.handle(event)

    server.handler = handle
    try:
        yield demo
    finally:
        await driver.close()
        await endpoint.close()


@contextlib.asynccontextmanager
async def silent_host() -> AsyncIterator[str]:
    """A WebSocket server that accepts connections and never answers; its URL."""
    from websockets.asyncio.server import ServerConnection, serve

    async def handler(websocket: ServerConnection) -> None:
        with contextlib.suppress(Exception):
            async for _ in websocket:
                pass

    server = await serve(handler, "127.0.0.1", 0, ping_interval=None)
    port = next(iter(server.sockets)).getsockname()[1]
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), TIMEOUT)


def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class FlakyTransport:
    """A WebSocket transport the test can break: ``holding`` swallows what is sent
    (the host never sees it), :meth:`abort` drops the TCP connection."""

    def __init__(self, inner: WebSocketTransport) -> None:
        self.inner = inner
        self.holding = False

    async def send(self, data: bytes) -> None:
        if not self.holding:
            await self.inner.send(data)

    async def receive(self) -> bytes | str:
        return await self.inner.receive()

    async def close(self) -> None:
        await self.inner.close()

    def abort(self) -> None:
        self.inner.abort()


class Opener:
    """A transport opener that records its transports; closing ``gate`` holds new ones."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.transports: list[FlakyTransport] = []
        self.attempts = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self) -> MessageTransport:
        self.attempts += 1
        await self.gate.wait()
        transport = FlakyTransport(await open_websocket(self.url, ping_interval=None))
        self.transports.append(transport)
        return transport

    @property
    def current(self) -> FlakyTransport:
        return self.transports[-1]


async def next_of(stream: EventStream, kind: type[E], timeout: float = TIMEOUT,
                  seen: list[ClientEvent] | None = None) -> E:
    """The next event of class ``kind`` on ``stream`` (the others are kept in ``seen``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        event = await stream.next(max(0.0, deadline - loop.time()))
        assert event is not None, f"the stream ended before a {kind.__name__}"
        if isinstance(event, kind):
            return event
        if seen is not None:
            seen.append(event)


def turn_started(turn_id: str = "t1", text: str = "hello over a socket"
                 ) -> t.ChatTurnStartedAction:
    return t.ChatTurnStartedAction(turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
                                   message=t.Message(text=text, origin=USER))


def approve(turn_id: str = "t1") -> t.ChatToolCallApprovedAction:
    return t.ChatToolCallApprovedAction(turn_id=turn_id, tool_call_id=f"{turn_id}.echo",
                                        confirmed=t.ToolCallConfirmationReason.USER_ACTION)


def awaiting_confirmation(state: t.SnapshotState) -> bool:
    assert isinstance(state, t.ChatState)
    turn = state.active_turn
    return turn is not None and any(
        isinstance(p, t.ToolCallResponsePart)
        and isinstance(p.tool_call, t.ToolCallPendingConfirmationState)
        for p in turn.response_parts
    )


def streaming(state: t.SnapshotState) -> bool:
    """Some reasoning has streamed into the active turn."""
    assert isinstance(state, t.ChatState)
    turn = state.active_turn
    return turn is not None and any(
        isinstance(p, t.ReasoningResponsePart) and p.content for p in turn.response_parts
    )


def turns_done(n: int) -> Callable[[t.SnapshotState], bool]:
    def done(state: t.SnapshotState) -> bool:
        assert isinstance(state, t.ChatState)
        return len(state.turns) >= n and state.active_turn is None

    return done


def serve_stdio_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agenthost_protocol.cli", "serve", "--stdio", *args]



@contextlib.asynccontextmanager
async def scripted_host(answer: Callable[[dict[str, Any]], Sequence[str]]) -> AsyncIterator[str]:
    """A WebSocket server that sends ``answer(message)`` for each JSON message it gets; its URL.

    For hosts that misbehave in ways the real one never does.
    """
    import json

    from websockets.asyncio.server import ServerConnection, serve

    async def handler(websocket: ServerConnection) -> None:
        with contextlib.suppress(Exception):
            async for message in websocket:
                for reply in answer(json.loads(message)):
                    await websocket.send(reply)

    server = await serve(handler, "127.0.0.1", 0, ping_interval=None)
    port = next(iter(server.sockets)).getsockname()[1]
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), TIMEOUT)
