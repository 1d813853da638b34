"""``agenthost_protocol.asgi`` under real ASGI servers (uvicorn, hypercorn) on loopback.

Each server runs in-process as a task of the test's event loop, on a free
port of 127.0.0.1, and is stopped (and awaited) on the way out; every wait
is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("hypercorn")
pytest.importorskip("starlette")

from starlette.applications import Starlette
from starlette.routing import Mount
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from agenthost_protocol import types as t
from agenthost_protocol.agent import AgentDriver
from agenthost_protocol.agent.demo import DemoAgent, demo_root_state
from agenthost_protocol.aio import HostServer, ServerLimits
from agenthost_protocol.aio.access import AccessPolicy
from agenthost_protocol.aio.client import AsyncClient, connect
from agenthost_protocol.aio.server import CloseReason
from agenthost_protocol.asgi import CLOSE_CODES, asgi_app, route_path
from agenthost_protocol.host import Host
from agenthost_protocol.types.error_codes import AhpErrorCode

from ._aio_hosts import (
    ROOT,
    TIMEOUT,
    approve,
    awaiting_confirmation,
    clock,
    free_port,
    run,
    turn_started,
    turns_done,
)
from ._asgi_run import Kind, run_server
from ._raw_ws import masked_text_frame

KINDS: tuple[Kind, ...] = ("uvicorn", "hypercorn")
TOKEN = "s3cret-token"


def zero_masked_text_frame(text: str) -> bytes:
    """A client's text frame with the mask key 0 (valid, and no per-byte work for a
    megabyte of payload)."""
    return masked_text_frame(text, mask=b"\0\0\0\0")


class Served:
    def __init__(self, server: HostServer, port: int, prefix: str) -> None:
        self.server = server
        self.port = port
        self.prefix = prefix
        """The path the host is served at (``/`` or ``/ahp/``)."""
        self.closed_by_lifespan = False
        """Whether the host was closed when the ASGI server had stopped (before the test's
        own ``server.close()``): the lifespan's shutdown did it."""

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{self.prefix}"


@contextlib.asynccontextmanager
async def served(kind: Kind, *, mounted: bool = False, policy: AccessPolicy | None = None,
                 limits: ServerLimits | None = None) -> AsyncIterator[Served]:
    """The demo agent's host through ``asgi_app`` under ``kind``, at ``/`` or at ``/ahp/``."""
    host = Host(clock=clock, root=demo_root_state(),
                server_info=t.Implementation(name="test-host"))
    server = HostServer(host, limits=limits)
    driver = AgentDriver(DemoAgent(), host, server.flush)
    server.handler = driver.handle
    app = asgi_app(server, policy=policy if policy is not None else AccessPolicy(token=TOKEN))
    outer: object = Starlette(routes=[Mount("/ahp", app=app)]) if mounted else app
    port = free_port()
    try:
        s = Served(server, port, "/ahp/" if mounted else "/")
        async with run_server(kind, outer, port):
            yield s
        s.closed_by_lifespan = server.closing
    finally:
        await driver.close()
        await server.close()


async def http_get(port: int, target: str, headers: dict[str, str] | None = None,
                   ) -> tuple[int, dict[str, str], bytes]:
    """A raw HTTP/1.1 request; the status, the headers (names lowercased), the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = [f"GET {target} HTTP/1.1"]
        all_headers = {"Host": f"127.0.0.1:{port}", "Connection": "close"}
        all_headers.update(headers or {})
        lines += [f"{k}: {v}" for k, v in all_headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), TIMEOUT)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    if parsed.get("transfer-encoding") == "chunked":
        out = b""
        while body:
            size_text, _, rest = body.partition(b"\r\n")
            size = int(size_text, 16)
            if size == 0:
                break
            out += rest[:size]
            body = rest[size + 2:]
        body = out
    return int(status_line.split()[1]), parsed, body


def upgrade_headers(port: int, **extra: str) -> dict[str, str]:
    headers = {"Host": f"127.0.0.1:{port}", "Upgrade": "websocket", "Connection": "Upgrade",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
    headers.update(extra)
    return headers


async def turn_round_trip(client: AsyncClient) -> None:
    await client.initialize([ROOT])
    session = await client.create_session(provider="demo")
    snapshot = await client.subscribe(session)
    assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
    chat = snapshot.state.default_chat
    assert chat is not None
    await client.subscribe(chat)
    await client.dispatch(chat, turn_started())
    await client.wait_for_state(chat, awaiting_confirmation, timeout=TIMEOUT)
    await client.dispatch(chat, approve())
    state = await client.wait_for_state(chat, turns_done(1), confirmed=True, timeout=TIMEOUT)
    assert isinstance(state, t.ChatState) and len(state.turns) == 1


@pytest.mark.parametrize("mounted", [False, True], ids=["root", "mounted"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_turn_round_trip_and_http_answers(kind: Kind, mounted: bool) -> None:
    async def body() -> None:
        async with served(kind, mounted=mounted) as s:
            # the library's client: the token as Authorization: Bearer
            async with connect(s.url, token=TOKEN, clock=clock, reconnect=False) as client:
                await turn_round_trip(client)
            # a raw client, the token in the query
            async with ws_connect(f"{s.url}?tkn={TOKEN}", ping_interval=None) as ws:
                await ws.send('{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}')
                answer = await asyncio.wait_for(ws.recv(), TIMEOUT)
                assert '"id":1' in str(answer) and '"result"' in str(answer)
            status, headers, text = await http_get(s.port, s.prefix)
            assert status == 426 and headers.get("upgrade") == "websocket", (status, headers)
            assert b"WebSocket" in text
            assert (await http_get(s.port, s.prefix + "elsewhere"))[0] == 404
            if mounted:
                assert (await http_get(s.port, "/other/"))[0] == 404
                # Starlette's own refusal of a WebSocket it has no route for
                with pytest.raises(InvalidStatus) as refused:
                    async with ws_connect(f"ws://127.0.0.1:{s.port}/other/?token={TOKEN}",
                                          ping_interval=None):
                        pass
                assert refused.value.response.status_code in (403, 404)
            # a WebSocket under the root path is no host
            status, _, _ = await http_get(
                s.port, f"{s.prefix}elsewhere?token={TOKEN}", upgrade_headers(s.port))
            assert status == 404
        # Starlette does not pass its lifespan to a mounted application
        assert s.closed_by_lifespan is not mounted

    run(body())


@pytest.mark.parametrize("kind", KINDS)
def test_handshake_refusals(kind: Kind) -> None:
    async def body() -> None:
        async with served(kind, policy=AccessPolicy(token=TOKEN)) as s:
            port = s.port
            cases: list[tuple[str, dict[str, str], int, str]] = [
                ("/", upgrade_headers(port), 401, "access token"),
                ("/?token=wrong", upgrade_headers(port), 401, "access token"),
                ("/", upgrade_headers(port, Authorization="Bearer wrong"), 401, "access token"),
                (f"/?token={TOKEN}", upgrade_headers(port, Origin="https://evil.example"),
                 403, "Origin"),
                (f"/?token={TOKEN}", upgrade_headers(port, Host="evil.example"), 403, "Host"),
            ]
            for target, headers, want, words in cases:
                status, got, text = await http_get(port, target, headers)
                assert status == want, (target, headers, status, text)
                assert words.encode() in text and text.endswith(b"\n")
                assert TOKEN.encode() not in text
                if want == 401:
                    assert got.get("www-authenticate", "").startswith("Bearer")
            # the right token in each of its three places is let in
            for target, headers in ((f"/?token={TOKEN}", {}), (f"/?tkn={TOKEN}", {}),
                                    ("/", {"Authorization": f"Bearer {TOKEN}"})):
                async with ws_connect(f"ws://127.0.0.1:{port}{target}",
                                      additional_headers=headers, ping_interval=None) as ws:
                    await ws.send('{"jsonrpc":"2.0","id":7,"method":"ping","params":{}}')
                    assert '"id":7' in str(await asyncio.wait_for(ws.recv(), TIMEOUT))

    run(body())


@pytest.mark.parametrize("kind", KINDS)
def test_an_oversized_message_closes_only_its_connection(kind: Kind) -> None:
    async def body() -> None:
        async with served(kind, limits=ServerLimits(max_message_size=4096)) as s:
            url = f"{s.url}?token={TOKEN}"
            async with ws_connect(url, ping_interval=None) as good, \
                    ws_connect(url, ping_interval=None) as bad:
                await bad.send('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"'
                               + "é" * 3000 + '"}}')  # 3000 characters, 6000 bytes
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(bad.recv(), TIMEOUT)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
                await bad.wait_closed()
                await good.send('{"jsonrpc":"2.0","id":2,"method":"ping","params":{}}')
                assert '"id":2' in str(await asyncio.wait_for(good.recv(), TIMEOUT))
                # a binary frame: 1003, the other connection still served
                await bad.close()
            async with ws_connect(url, ping_interval=None) as binary:
                await binary.send(b"\x00\x01")
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(binary.recv(), TIMEOUT)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003

    run(body())


# -- the application alone, with an in-memory ASGI server -------------------------------


async def call_app(app: Callable[..., Awaitable[None]], scope: dict[str, object],
                   incoming: list[dict[str, object]]) -> list[MutableMapping[str, object]]:
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for message in incoming:
        queue.put_nowait(message)
    sent: list[MutableMapping[str, object]] = []

    async def receive() -> dict[str, object]:
        return await queue.get()

    async def send(message: MutableMapping[str, object]) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), TIMEOUT)
    return sent


def test_without_the_denial_extension_a_refusal_closes_before_accept() -> None:
    async def body() -> None:
        server = HostServer(Host(clock=clock, root=demo_root_state()))
        app = asgi_app(server, policy=AccessPolicy(token=TOKEN))
        scope: dict[str, object] = {
            "type": "websocket", "path": "/", "root_path": "", "query_string": b"",
            "headers": [(b"host", b"127.0.0.1:9")], "client": ("127.0.0.1", 5)}
        sent = await call_app(app, scope, [{"type": "websocket.connect"}])
        assert [m["type"] for m in sent] == ["websocket.close"]
        assert sent[0]["code"] == 1008 and "token" in str(sent[0]["reason"])
        # with it: the status and the reason, never an accept
        scope["extensions"] = {"websocket.http.response": {}}
        sent = await call_app(app, scope, [{"type": "websocket.connect"}])
        assert [m["type"] for m in sent] == ["websocket.http.response.start",
                                            "websocket.http.response.body"]
        assert sent[0]["status"] == 401
        # lifespan: startup, then shutdown closes the host
        sent = await call_app(app, {"type": "lifespan"},
                              [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
        assert [m["type"] for m in sent] == ["lifespan.startup.complete",
                                            "lifespan.shutdown.complete"]
        assert server.closing
        # a closing host refuses new WebSockets before accepting them
        scope["query_string"] = f"token={TOKEN}".encode()
        sent = await call_app(app, scope, [{"type": "websocket.connect"}])
        assert sent[0]["type"] == "websocket.http.response.start" and sent[0]["status"] == 503
        # a client gone before its handshake was answered: nothing sent
        assert await call_app(app, scope, [{"type": "websocket.disconnect", "code": 1006}]) == []

    run(body())


def test_close_codes_and_paths() -> None:
    from agenthost_protocol.aio.websocket import _CLOSE_CODES

    assert dict(CLOSE_CODES) == dict(_CLOSE_CODES)
    assert CLOSE_CODES[CloseReason.OVERFLOW] == 1008
    assert route_path({"path": "/ahp/", "root_path": "/ahp"}) == "/"
    assert route_path({"path": "/", "root_path": "/ahp"}) == "/"  # servers that strip it
    assert route_path({"path": "/ahp", "root_path": "/ahp"}) == "/"
    assert route_path({"path": "/ahpx/", "root_path": "/ahp"}) == "/ahpx/"
    assert route_path({"path": "/x", "root_path": ""}) == "/x"


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_that_stops_reading_is_dropped_alone(
        kind: Kind, caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        # a close that cannot be sent (the client reads nothing) is given up after 0.5 s
        limits = ServerLimits(max_queue_bytes=4 * 1024 * 1024, close_timeout=0.5)
        async with served(kind, limits=limits) as s:
            url = f"{s.url}?token={TOKEN}"
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", s.port))
            reader, writer = await asyncio.open_connection(sock=sock)
            try:
                request = "".join(f"{k}: {v}\r\n" for k, v in upgrade_headers(s.port).items())
                writer.write(f"GET /?token={TOKEN} HTTP/1.1\r\n{request}\r\n".encode())
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
                assert head.startswith(b"HTTP/1.1 101"), head
                async with ws_connect(url, ping_interval=None) as good:
                    big_id = "x" * 1_000_000
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + 10.0
                    n = 0
                    # pings whose answers (1 MB each) it never reads, until it is dropped
                    while s.server.connection_count > 1:
                        assert loop.time() < deadline, "the slow client was never dropped"
                        n += 1
                        frame = ('{"jsonrpc":"2.0","id":"' + big_id + str(n)
                                 + '","method":"ping","params":{}}')
                        writer.write(zero_masked_text_frame(frame))
                        if writer.transport.get_write_buffer_size() > 4_000_000:
                            await asyncio.sleep(0.05)  # the server has enough to answer
                        await asyncio.sleep(0.002)
                    await good.send('{"jsonrpc":"2.0","id":2,"method":"ping","params":{}}')
                    assert '"id":2' in str(await asyncio.wait_for(good.recv(), TIMEOUT))
            finally:
                writer.transport.abort()
        assert "send queue full" in caplog.text

    run(body())


def init_message(client_id: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersions": ["0.7.0"], "clientId": client_id}})


def test_a_claimed_client_id_stays_with_its_open_holder() -> None:
    """ASGI cannot ping: the holder of a claimed clientId counts as alive while open."""
    async def body() -> None:
        async with served("uvicorn") as s:
            url = f"{s.url}?token={TOKEN}"
            async with ws_connect(url, ping_interval=None) as holder:
                await holder.send(init_message("same"))
                assert "result" in json.loads(await asyncio.wait_for(holder.recv(), TIMEOUT))
                async with ws_connect(url, ping_interval=None) as claimant:
                    await claimant.send(init_message("same"))
                    answer = json.loads(await asyncio.wait_for(claimant.recv(), TIMEOUT))
                    assert answer["error"]["code"] == AhpErrorCode.ALREADY_EXISTS, answer
                await holder.send('{"jsonrpc":"2.0","id":2,"method":"ping","params":{}}')
                assert '"id":2' in str(await asyncio.wait_for(holder.recv(), TIMEOUT))
            # once the holder's connection is gone, the id is free
            loop = asyncio.get_running_loop()
            deadline = loop.time() + TIMEOUT
            while s.server.connection_count:
                assert loop.time() < deadline
                await asyncio.sleep(0.01)
            async with ws_connect(url, ping_interval=None) as again:
                await again.send(init_message("same"))
                assert "result" in json.loads(await asyncio.wait_for(again.recv(), TIMEOUT))

    run(body())
