"""``HostServer`` and the JSON Lines adapter over plain TCP streams on loopback."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.agent import build_agent_server
from agenthost_protocol.agent.demo import DemoAgent
from agenthost_protocol.agent.hosting import ServeOptions
from agenthost_protocol.aio import (
    CloseReason,
    HostServer,
    LineStream,
    ServerLimits,
    serve_streams,
)
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.host import Event, Host, RequestReceived

from ._aio_peer import TIMEOUT, child_env

NOW = 1_767_225_600_000
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}\n'
INIT = (b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersions":["0.7.0"],'
        b'"clientId":"c"}}\n')


def run(coro: Coroutine[Any, Any, None], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


@asynccontextmanager
async def tcp(server: HostServer) -> AsyncIterator[tuple[asyncio.StreamReader,
                                                         asyncio.StreamWriter]]:
    """A JSON Lines host on a loopback TCP port, and one client connection to it."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_streams(server, reader, writer)

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**24)
    try:
        yield reader, writer
    finally:
        writer.close()
        await server.close(timeout=TIMEOUT)
        listener.close()
        await listener.wait_closed()


async def line(reader: asyncio.StreamReader) -> Any:
    data = await asyncio.wait_for(reader.readline(), TIMEOUT)
    assert data, "the host closed the connection"
    return json.loads(data)


def test_limits_are_checked() -> None:
    with pytest.raises(LocalProtocolError):
        ServerLimits(max_message_size=0)
    with pytest.raises(LocalProtocolError):
        ServerLimits(close_timeout=-1)


def test_without_a_handler_every_request_is_answered() -> None:
    async def main() -> None:
        server = HostServer(Host(clock=lambda: NOW))
        async with tcp(server) as (reader, writer):
            writer.write(INIT + b'{"jsonrpc":"2.0","id":3,"method":"listSessions","params":{}}\n')
            assert (await line(reader))["id"] == 2
            answer = await line(reader)
            assert answer["id"] == 3 and answer["error"]["code"] == -32601

    run(main())


def test_a_failing_handler_answers_internal_error_and_the_server_goes_on() -> None:
    seen: list[Event] = []

    def handler(event: Event) -> None:
        seen.append(event)
        if isinstance(event, RequestReceived):
            raise RuntimeError("boom")

    async def main() -> None:
        server = HostServer(Host(clock=lambda: NOW), handler)
        async with tcp(server) as (reader, writer):
            writer.write(INIT + b'{"jsonrpc":"2.0","id":3,"method":"listSessions","params":{}}\n'
                         + PING)
            assert (await line(reader))["id"] == 2
            answer = await line(reader)
            assert answer["id"] == 3 and answer["error"]["code"] == -32603
            assert (await line(reader)) == {"jsonrpc": "2.0", "id": 1, "result": None}

    run(main())
    assert any(isinstance(e, RequestReceived) for e in seen)


class _Completions:
    """A service that answers ``completions`` and fails on ``resolveSessionConfig``."""

    def __init__(self) -> None:
        self.closed = False
        self.seen: list[str] = []

    def handle(self, event: Event) -> bool:
        self.seen.append(type(event).__name__)
        if isinstance(event, RequestReceived) and event.method == "completions":
            event.responder.respond(t.CompletionsResult(items=()))
            return True
        if isinstance(event, RequestReceived) and event.method == "resolveSessionConfig":
            raise RuntimeError("boom")
        return False

    async def close(self) -> None:
        self.closed = True


def test_a_service_takes_its_requests_before_the_handler_and_is_closed() -> None:
    handled: list[str] = []
    service = _Completions()

    def handler(event: Event) -> None:
        if isinstance(event, RequestReceived):
            handled.append(event.method)
            event.responder.error(-32601, "the handler's")

    async def main() -> None:
        server = HostServer(Host(clock=lambda: NOW), handler)
        server.add_service(service)
        assert server.services == (service,)
        async with tcp(server) as (reader, writer):
            writer.write(
                INIT
                + b'{"jsonrpc":"2.0","id":3,"method":"completions","params":{"kind":"userMessage",'
                  b'"channel":"ahp-session:/x","text":"","offset":0}}\n'
                + b'{"jsonrpc":"2.0","id":4,"method":"resolveSessionConfig","params":{}}\n'
                + b'{"jsonrpc":"2.0","id":5,"method":"listSessions","params":{}}\n')
            assert (await line(reader))["id"] == 2
            assert (await line(reader)) == {"jsonrpc": "2.0", "id": 3, "result": {"items": []}}
            failed = await line(reader)
            assert failed["id"] == 4 and failed["error"]["code"] == -32603
            answer = await line(reader)
            assert answer["id"] == 5 and answer["error"]["message"] == "the handler's"

    run(main())
    assert handled == ["listSessions"]
    assert service.closed
    assert "ConnectionClosed" in service.seen


def test_the_demo_over_tcp_json_lines() -> None:
    async def main() -> None:
        server, service = build_agent_server(DemoAgent(step_delay=0), ServeOptions(),
                                             lambda: NOW)
        host = server.host
        async with tcp(server) as (reader, writer):
            writer.write(INIT)
            assert (await line(reader))["id"] == 2
            writer.write(b'{"jsonrpc":"2.0","id":3,"method":"createSession","params":'
                         b'{"channel":"ahp-session:/x"}}\n'
                         b'{"jsonrpc":"2.0","id":4,"method":"subscribe","params":'
                         b'{"channel":"ahp-chat:/x"}}\n')
            writer.write(json.dumps({"jsonrpc": "2.0", "method": "dispatchAction", "params": {
                "channel": "ahp-chat:/x", "clientSeq": 1, "action": {
                    "type": "chat/turnStarted", "turnId": "t", "startedAt": "2026-01-01T00:00:00Z",
                    "message": {"text": "hi", "origin": {"kind": "user"}}}}}).encode() + b"\n")
            types = []
            while "chat/toolCallReady" not in types:
                message = await line(reader)
                if message.get("method") == "action":
                    types.append(message["params"]["action"]["type"])
            assert types[0] == "chat/turnStarted" and "chat/delta" in types
            writer.write(b'{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":'
                         b'"ahp-chat:/x","clientSeq":2,"action":{"type":"chat/turnCancelled",'
                         b'"turnId":"t","duration":1}}}\n')
            while True:
                message = await line(reader)
                if message.get("method") == "action":
                    assert message["params"]["action"]["type"] == "chat/turnCancelled"
                    break
            chat = host.state("ahp-chat:/x")
            assert isinstance(chat, t.ChatState) and chat.active_turn is None
            assert service.driver.playing == 0
        await service.close()

    run(main())


def test_close_closes_every_connection_promptly() -> None:
    async def main() -> None:
        host = Host(clock=lambda: NOW)
        server = HostServer(host, limits=ServerLimits(close_timeout=0.2))
        async with tcp(server) as (_reader, writer):
            writer.write(INIT)
            await writer.drain()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + TIMEOUT
            while server.connection_count == 0:
                assert loop.time() < deadline
                await asyncio.sleep(0.01)
            started = loop.time()
            await server.close(timeout=0.5)
            assert server.connection_count == 0
            assert loop.time() - started < 3
            assert server.closing

    run(main())


def test_a_closing_server_refuses_new_connections() -> None:
    class Stream:
        def __init__(self) -> None:
            self.closed: list[CloseReason] = []

        async def receive(self) -> bytes | str:
            raise AssertionError("not read")

        async def send(self, data: bytes) -> None:
            raise AssertionError("nothing sent")

        async def close(self, reason: CloseReason, message: str) -> None:
            self.closed.append(reason)

        def abort(self) -> None:
            raise AssertionError("not aborted")

    async def main() -> None:
        server = HostServer(Host(clock=lambda: NOW))
        await server.close()
        stream = Stream()
        await server.serve_connection(stream)
        assert stream.closed == [CloseReason.SHUTDOWN]

    run(main())


def test_line_stream_framing() -> None:
    class Source:
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = chunks

        async def read(self, n: int = -1) -> bytes:
            return self.chunks.pop(0) if self.chunks else b""

    class Sink:
        def __init__(self) -> None:
            self.data = b""

        def write(self, data: bytes) -> None:
            self.data += data

        async def drain(self) -> None:
            return None

        def close(self) -> None:
            return None

        async def wait_closed(self) -> None:
            return None

    async def main() -> None:
        from agenthost_protocol.aio import EndOfStream, MessageRefused

        stream = LineStream(Source([b'{"a":', b'1}\r\n\n  \n{"b":2}\n{"c"', b":3}"]), Sink(),
                            max_message_size=10)
        assert [await stream.receive() for _ in range(3)] == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
        with pytest.raises(EndOfStream) as end:
            await stream.receive()
        assert end.value.drain
        big = LineStream(Source([b"x" * 5, b"x" * 20, b"\n"]), Sink(), max_message_size=10)
        with pytest.raises(MessageRefused):
            await big.receive()

    run(main())


def test_the_docs_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("websockets")
    page = Path(__file__).parent.parent / "docs" / "serve.md"
    (code,) = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    # as written, but serving for a moment instead of an hour
    short = code.replace("await asyncio.sleep(3600)", "await asyncio.sleep(0.05)")
    assert short != code
    target = tmp_path / "serve_example.py"
    target.write_text(short, encoding="utf-8")
    ran = subprocess.run([sys.executable, str(target)], capture_output=True, text=True,
                         check=False, timeout=TIMEOUT, env=child_env())
    assert ran.returncode == 0, ran.stderr
    assert re.fullmatch(r"serving ws://127\.0\.0\.1:\d+\n", ran.stdout)


def test_the_server_removes_an_active_client_gone_past_its_grace_period() -> None:
    """The core has no timer: HostServer runs ``expire_clients`` when it is due, so an
    active client that dropped and stayed away leaves ``activeClients``."""
    import time

    from agenthost_protocol.aio import MemoryOpener, connected_client

    def wall_clock_ms() -> int:
        return int(time.time() * 1000)

    session, chat = "ahp-session:/grace", "ahp-chat:/grace"

    async def main() -> None:
        host = Host(clock=wall_clock_ms, active_client_grace_ms=200,
                    root=t.RootState(agents=(), active_sessions=0))
        host.create_session(session, provider="demo")
        host.ready_session(session, default_chat=chat)
        server = HostServer(host)
        opener = MemoryOpener(server)
        async with connected_client(server) as watcher, \
                connected_client(server, opener=opener, client_id="leaver") as leaver:
            await watcher.initialize([session])
            await leaver.initialize([session])
            await leaver.dispatch(session, t.SessionActiveClientSetAction(
                active_client=t.SessionActiveClient(client_id="leaver", tools=())))
            await watcher.wait_for_state(
                session, lambda s: isinstance(s, t.SessionState) and len(s.active_clients) == 1,
                timeout=TIMEOUT)
            for link in opener.links:
                link.drop()
            started = asyncio.get_running_loop().time()
            await watcher.wait_for_state(
                session, lambda s: isinstance(s, t.SessionState) and not s.active_clients,
                timeout=TIMEOUT)
            # the grace period, then at most one check interval (two seconds)
            assert asyncio.get_running_loop().time() - started < 10
        await server.close()

    run(main())
