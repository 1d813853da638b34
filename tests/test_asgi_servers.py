"""Issue 30: ``asgi_app`` under real ASGI servers, at the root and mounted, as a user runs it.

``check-host`` passes against the host under uvicorn (its two WebSocket
implementations: websockets, and wsproto as hypercorn uses too) and under
hypercorn, at the root, mounted in Starlette and mounted in FastAPI; the
handshake refusals at a mounted path; the lifespan's shutdown ends every
connection cleanly; a slow consumer is dropped under a mounted app as under
``serve``.  Every server runs in-process, on a free port of 127.0.0.1, and is
stopped and awaited on the way out; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Literal

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("hypercorn")
pytest.importorskip("starlette")
pytest.importorskip("fastapi")

from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.routing import Mount
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from agenthost_protocol import types as t
from agenthost_protocol.agent import AgentDriver
from agenthost_protocol.agent.demo import DemoAgent, demo_root_state
from agenthost_protocol.aio import DirectStream, HostServer, ServerLimits
from agenthost_protocol.aio.access import AccessPolicy
from agenthost_protocol.aio.client import connect
from agenthost_protocol.aio.server import CloseReason, EndOfStream
from agenthost_protocol.asgi import AsgiStream, asgi_app
from agenthost_protocol.host import Host
from agenthost_protocol.hostcheck.driver import HandshakeRefused, Recorder, WebSocketTarget
from agenthost_protocol.hostcheck.machine import check_host

from ._aio_hosts import TIMEOUT, clock, free_port, run
from ._aio_peer import child_env
from ._asgi_run import Kind, run_server
from .test_asgi import http_get, turn_round_trip, upgrade_headers, zero_masked_text_frame

KINDS: tuple[Kind, ...] = ("uvicorn", "uvicorn-wsproto", "hypercorn")
Where = Literal["root", "starlette", "fastapi"]
WHERE: tuple[Where, ...] = ("root", "starlette", "fastapi")
TOKEN = "asgi-servers-token"


class Served:
    def __init__(self, server: HostServer, port: int, prefix: str) -> None:
        self.server = server
        self.port = port
        self.prefix = prefix
        self.closed_when_stopped = False
        """Whether the host was closed once the ASGI server had stopped, before the
        test's own clean-up: a lifespan (the app's own, or the embedding one's) did it."""

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{self.prefix}"


@contextlib.asynccontextmanager
async def served(kind: Kind, where: Where, *, limits: ServerLimits | None = None,
                 ) -> AsyncIterator[Served]:
    """The demo agent's host through ``asgi_app``: the whole application (``root``), or
    mounted at ``/ahp`` in a Starlette or a FastAPI application whose own lifespan
    closes the host, as docs/embedding.md shows."""
    host = Host(clock=clock, root=demo_root_state(),
                server_info=t.Implementation(name="test-host"))
    server = HostServer(host, limits=limits)
    driver = AgentDriver(DemoAgent(), host, server.flush)
    server.handler = driver.handle
    app = asgi_app(server, policy=AccessPolicy(token=TOKEN))

    @contextlib.asynccontextmanager
    async def lifespan(_: object) -> AsyncIterator[None]:
        yield
        await driver.close()
        await server.close()

    outer: object
    if where == "starlette":
        outer = Starlette(routes=[Mount("/ahp", app=app)], lifespan=lifespan)
    elif where == "fastapi":
        api = FastAPI(lifespan=lifespan)
        api.mount("/ahp", app)
        outer = api
    else:
        outer = app
    port = free_port()
    s = Served(server, port, "/" if where == "root" else "/ahp/")
    try:
        async with run_server(kind, outer, port):
            yield s
        s.closed_when_stopped = server.closing
    finally:
        await driver.close()
        await server.close()


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("kind", KINDS)
def test_check_host_passes(kind: Kind, where: Where) -> None:
    async def body() -> None:
        async with served(kind, where) as s:
            # check-host's own clients are synchronous (a thread each): off the loop
            outcome = await asyncio.to_thread(
                check_host, WebSocketTarget(url=s.url, token=TOKEN), examples=8, steps=20,
                seed=0, shrink_budget=2.0)
            assert outcome.error is None, outcome.error
            assert outcome.failed == [], [str(v) for vs in outcome.violations.values()
                                          for v in vs]
            assert outcome.examples >= 8 and outcome.created > 0
            assert outcome.undisposed == ()
            # and it left the host as it found it: every session it made is gone
            root = s.server.host.state("ahp-root://")
            assert isinstance(root, t.RootState) and not root.active_sessions
            # a refused token is check-host's "could not run" (the 401 and its reason),
            # not a pass
            wrong = WebSocketTarget(url=s.url, token="wrong")
            with pytest.raises(HandshakeRefused) as refused:
                await asyncio.to_thread(wrong.open, 0, Recorder())
            assert refused.value.status == 401 and "access token" in str(refused.value)
            refusal = await asyncio.to_thread(check_host, wrong, examples=1, steps=2, seed=0)
            assert refusal.error is not None and "401" in refusal.error, refusal.error
            assert refusal.created == 0
        assert s.closed_when_stopped

    run(body(), 90)


@pytest.mark.parametrize("kind", KINDS)
def test_refusals_at_a_mounted_path(kind: Kind) -> None:
    async def body() -> None:
        async with served(kind, "fastapi") as s:
            port, at = s.port, "/ahp/"
            cases: list[tuple[str, dict[str, str], int, str]] = [
                (at, upgrade_headers(port), 401, "access token"),
                (f"{at}?token=wrong", upgrade_headers(port), 401, "access token"),
                (at, upgrade_headers(port, Authorization="Bearer wrong"), 401, "access token"),
                (f"{at}?token={TOKEN}", upgrade_headers(port, Origin="https://evil.example"),
                 403, "Origin"),
                (f"{at}?token={TOKEN}", upgrade_headers(port, Host="evil.example"), 403,
                 "Host"),
            ]
            for target, headers, want, words in cases:
                status, got, text = await http_get(port, target, headers)
                assert status == want, (target, headers, status, text)
                assert words.encode() in text and TOKEN.encode() not in text
                if want == 401:
                    assert got.get("www-authenticate", "").startswith("Bearer")
            assert s.server.connection_count == 0
            # the HTTP answers of the mounted path, and FastAPI's own 404 beside it
            status, headers_426, _ = await http_get(port, at)
            assert status == 426 and headers_426.get("upgrade") == "websocket"
            assert (await http_get(port, f"{at}other"))[0] == 404
            assert (await http_get(port, "/elsewhere"))[0] == 404
            # the library's client, its token in the Authorization header
            async with connect(s.url, token=TOKEN, clock=clock, reconnect=False) as client:
                await turn_round_trip(client)

    run(body())


@pytest.mark.parametrize("where", ["root", "fastapi"])
@pytest.mark.parametrize("kind", KINDS)
def test_shutdown_ends_every_connection_cleanly(
        kind: Kind, where: Where, caplog: pytest.LogCaptureFixture) -> None:
    """Stopping the ASGI server (its lifespan: the app's, or the embedding app's) closes
    the host and every connection, with a close frame, within a bounded time, and
    nothing of ours logs an error."""
    async def body() -> None:
        caplog.set_level(logging.INFO, logger="agenthost_protocol")
        sockets = []
        async with served(kind, where) as s:
            for _ in range(3):
                ws = await ws_connect(f"{s.url}?token={TOKEN}", ping_interval=None)
                sockets.append(ws)
                await ws.send('{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}')
                assert '"id":1' in str(await asyncio.wait_for(ws.recv(), TIMEOUT))
            assert s.server.connection_count == 3
            loop = asyncio.get_running_loop()
            stopping = loop.time()
        # the ASGI server has stopped: uvicorn closes its WebSockets itself (1012);
        # hypercorn ends them after its graceful_timeout (1 s here)
        assert loop.time() - stopping < 5.0
        assert s.closed_when_stopped and s.server.connection_count == 0
        for ws in sockets:
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), TIMEOUT)
            assert closed.value.rcvd is not None, "no close frame"
            assert closed.value.rcvd.code in (1000, 1001, 1012), closed.value.rcvd
        ours = [r for r in caplog.records
                if r.name.startswith("agenthost_protocol") and r.levelno >= logging.ERROR]
        assert ours == [], [r.getMessage() for r in ours]

    run(body())


@pytest.mark.parametrize("size", [1_000_000, 20_000], ids=["1MB", "20kB"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_slow_consumer_is_dropped_under_a_mounted_app(
        kind: Kind, size: int, caplog: pytest.LogCaptureFixture) -> None:
    """A client that stops reading is dropped as under ``serve`` (its send queue
    overflows); another client of the same host goes on being served.  Answers of
    1 MB go through the send queue from the first; answers of 20 kB are handed to
    the server's ``send`` at once until it waits (``AsgiStream.write_now``)."""
    async def body() -> None:
        limits = ServerLimits(max_queue_bytes=4 * 1024 * 1024, close_timeout=0.5)
        async with served(kind, "fastapi", limits=limits) as s:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            await loop.sock_connect(sock, ("127.0.0.1", s.port))
            reader, writer = await asyncio.open_connection(sock=sock)
            try:
                request = "".join(f"{k}: {v}\r\n" for k, v in upgrade_headers(s.port).items())
                writer.write(f"GET /ahp/?token={TOKEN} HTTP/1.1\r\n{request}\r\n".encode())
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
                assert head.startswith(b"HTTP/1.1 101"), head
                async with ws_connect(f"{s.url}?token={TOKEN}", ping_interval=None) as good:
                    big_id = "x" * size
                    deadline = loop.time() + 10.0
                    n = 0
                    # pings whose answers (1 MB each) it never reads, until it is dropped
                    while s.server.connection_count > 1:
                        assert loop.time() < deadline, "the slow client was never dropped"
                        n += 1
                        writer.write(zero_masked_text_frame(
                            '{"jsonrpc":"2.0","id":"' + big_id + str(n)
                            + '","method":"ping","params":{}}'))
                        if writer.transport.get_write_buffer_size() > 4_000_000:
                            await asyncio.sleep(0.05)
                        # the server's turn: after each big one, after ten small ones
                        await asyncio.sleep(0.002 if size > 100_000 or n % 10 == 0 else 0)
                    await good.send('{"jsonrpc":"2.0","id":2,"method":"ping","params":{}}')
                    assert '"id":2' in str(await asyncio.wait_for(good.recv(), TIMEOUT))
            finally:
                writer.transport.abort()
        assert "send queue full" in caplog.text

    run(body())


# -- AsgiStream.write_now: the server's send run up to its first wait ---------------------


class GatedSend:
    """An ASGI ``send`` that waits while its gate is shut, as a server's flow control does,
    and fails once ``fail`` is set."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.sent: list[str] = []
        self.fail: str | None = None

    async def __call__(self, message: MutableMapping[str, object]) -> None:
        await self.gate.wait()
        if self.fail is not None:
            raise RuntimeError(self.fail)
        self.sent.append(str(message.get("text", message["type"])))


async def never() -> dict[str, object]:
    await asyncio.Event().wait()
    return {}


def test_write_now_keeps_the_order_when_the_server_waits() -> None:
    async def body() -> None:
        send = GatedSend()
        stream = AsgiStream(never, send, max_message_size=1024)
        assert isinstance(stream, DirectStream)
        # the server takes them without waiting: sent before write_now returns
        assert stream.write_now([b"a", b"b", b"c"], {})
        assert send.sent == ["a", "b", "c"]
        # it waits on the second: the rest of the call goes on in a task, in order
        send.gate.clear()
        assert stream.write_now([b"d", b"e"], {})
        assert send.sent == ["a", "b", "c"]
        # meanwhile nothing more is taken at once: the send queue's turn
        assert not stream.write_now([b"f"], {})
        later = asyncio.create_task(stream.send(b"f"))
        await asyncio.sleep(0.01)
        assert not later.done() and send.sent == ["a", "b", "c"]
        send.gate.set()
        await asyncio.wait_for(later, TIMEOUT)
        assert send.sent == ["a", "b", "c", "d", "e", "f"]
        assert stream.write_now([b"g"], {}) and send.sent[-1] == "g"
        await stream.close(CloseReason.NORMAL, "bye")
        assert send.sent[-1] == "websocket.close"
        assert not stream.write_now([b"h"], {})
        with pytest.raises(EndOfStream):
            await stream.send(b"h")

    run(body())


def test_write_now_failures_end_the_stream() -> None:
    async def body() -> None:
        # the server fails at once: EndOfStream from write_now itself
        send = GatedSend()
        send.fail = "client gone"
        stream = AsgiStream(never, send, max_message_size=1024)
        with pytest.raises(EndOfStream, match="client gone"):
            stream.write_now([b"a"], {})
        assert not stream.write_now([b"b"], {})
        # the server fails after waiting: the next send says so
        send = GatedSend()
        stream = AsgiStream(never, send, max_message_size=1024)
        send.gate.clear()
        assert stream.write_now([b"a", b"b"], {})
        send.fail = "reset by peer"
        send.gate.set()
        with pytest.raises(EndOfStream, match="reset by peer"):
            await asyncio.wait_for(stream.send(b"c"), TIMEOUT)
        assert send.sent == []
        # a wait that never ends: abort cancels it, and a close after it sends nothing
        send = GatedSend()
        stream = AsgiStream(never, send, max_message_size=1024)
        send.gate.clear()
        assert stream.write_now([b"a"], {})
        stream.abort()
        await asyncio.wait_for(stream.close(CloseReason.NORMAL, "bye"), TIMEOUT)
        send.gate.set()
        await asyncio.sleep(0.01)
        assert send.sent == []

    run(body())


# -- tokens in the ASGI server's logs ------------------------------------------------------

LOG_APP = '''
import os, time
from agenthost_protocol.agent.demo import demo_root_state
from agenthost_protocol.aio import HostServer
from agenthost_protocol.aio.access import AccessPolicy
from agenthost_protocol.aio.redact import redact_server_logs
from agenthost_protocol.asgi import asgi_app
from agenthost_protocol.host import Host

server = HostServer(Host(clock=lambda: int(time.time() * 1000), root=demo_root_state()))
app = asgi_app(server, policy=AccessPolicy(token=os.environ["APP_TOKEN"]))
if os.environ.get("APP_REDACT"):
    redact_server_logs()
'''


def _serve_and_log(tmp_path: Path, command: list[str], port: int, *, redact: bool) -> str:
    """What ``command`` (an ASGI server running ``logapp:app``) writes while a client
    connects with the token in the query, another with a wrong one, and an HTTP
    request carries it as ``tkn=``."""
    from websockets.exceptions import InvalidStatus as SyncInvalidStatus
    from websockets.sync.client import connect as sync_connect

    (tmp_path / "logapp.py").write_text(LOG_APP)
    env = child_env()
    env.update(APP_TOKEN=LOG_TOKEN, APP_REDACT="1" if redact else "")
    out = tmp_path / "server.log"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=sink, stderr=sink,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, out.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, out.read_text()
                time.sleep(0.05)
        with sync_connect(f"ws://127.0.0.1:{port}/?token={LOG_TOKEN}", open_timeout=TIMEOUT,
                          close_timeout=2) as ws:
            ws.send('{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}')
            assert '"id":1' in str(ws.recv(timeout=TIMEOUT))
        with pytest.raises(SyncInvalidStatus), sync_connect(
                f"ws://127.0.0.1:{port}/?token={LOG_TOKEN}x", open_timeout=TIMEOUT):
            pass
        with socket.create_connection(("127.0.0.1", port), TIMEOUT) as raw:
            raw.sendall(f"GET /?tkn={LOG_TOKEN} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        "Connection: close\r\n\r\n".encode())
            assert raw.recv(4096).startswith(b"HTTP/1.1 426")
        time.sleep(0.3)  # the access line follows the response
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return out.read_text()


LOG_TOKEN = "tok-in-the-log-5ecret"


@pytest.mark.parametrize("server", ["uvicorn", "hypercorn"])
def test_redact_server_logs_keeps_the_token_out(tmp_path: Path, server: str) -> None:
    port = free_port()
    if server == "hypercorn":
        # the access log with the query in it (%(R)s; the default %(r)s has none)
        command = [sys.executable, "-m", "hypercorn", "logapp:app", "--bind",
                   f"127.0.0.1:{port}", "--access-logfile", "-",
                   "--access-logformat", '%(h)s "%(R)s" %(s)s %({user-agent}i)s']
        lines: tuple[str, ...] = ('"GET /?token=', '"GET /?tkn=')
    else:
        command = [sys.executable, "-m", "uvicorn", "logapp:app", "--port", str(port),
                   "--no-access-log"]
        lines = ('"WebSocket /?token=',)
    plain = _serve_and_log(tmp_path, command, port, redact=False)
    # as they are: the token in the request targets (uvicorn's WebSocket lines even
    # with --no-access-log)
    assert LOG_TOKEN in plain, plain
    if server != "hypercorn":
        # the access log on again: its lines are redacted, and still formatted
        redacted = _serve_and_log(tmp_path, command[:-1], port, redact=True)
        assert '"GET /?tkn=REDACTED HTTP/1.1" 426' in redacted, redacted
    else:
        redacted = _serve_and_log(tmp_path, command, port, redact=True)
    assert LOG_TOKEN not in redacted, redacted
    for start in lines:
        assert start + "REDACTED" in redacted, redacted
    # every line still formats (uvicorn's access formatter reads the record's arguments)
    assert "Logging error" not in redacted and "Traceback" not in redacted, redacted


def test_redacting_keeps_a_records_arguments() -> None:
    """uvicorn's access formatter unpacks the record's five arguments: a redacted
    record keeps them (redacted), unless only the whole message can be redacted."""
    from agenthost_protocol.aio.redact import RedactSecrets

    hide = RedactSecrets(["s3cret"])
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d', ("127.0.0.1:5", "GET",
                                                           "/?tkn=abc123", "1.1", 426), None)
    assert hide.filter(record)
    assert record.args == ("127.0.0.1:5", "GET", "/?tkn=REDACTED", "1.1", 426)
    assert record.getMessage() == '127.0.0.1:5 - "GET /?tkn=REDACTED HTTP/1.1" 426'
    # a secret cut in two by the format: only the whole message shows it
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s%s", ("s3c", "ret"), None)
    assert hide.filter(record)
    assert record.args == () and record.getMessage() == "REDACTED"
    # arguments of a mapping (hypercorn's access atoms): the message alone
    record = logging.LogRecord("hypercorn.access", logging.INFO, __file__, 1, "%(R)s",
                               ({"R": "GET /?token=abc123 1.1"},), None)
    assert hide.filter(record)
    assert record.getMessage() == "GET /?token=REDACTED 1.1"
