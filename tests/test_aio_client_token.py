"""The asyncio client's access tokens (issue 17), over real loopback sockets.

The host here is the real one (:class:`HostServer` over :class:`WebSocketStream`)
behind a ``process_request`` hook that checks the token the way ``serve``
does: the ``token`` query parameter or an ``Authorization: Bearer`` header,
else HTTP 401.  Each test runs its own event loop under a time bound; the
spawned children are reaped by the client that spawned them.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import random
import sys
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from http import HTTPStatus
from pathlib import Path

import pytest

pytest.importorskip("websockets")

from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from agenthost_protocol import types as t
from agenthost_protocol.agent import AgentDriver
from agenthost_protocol.agent.demo import DemoAgent, demo_root_state
from agenthost_protocol.aio import HostServer
from agenthost_protocol.aio.client import (
    TOKEN_ENV,
    Closed,
    ConnectError,
    HandshakeRefused,
    Reconnecting,
    ReconnectPolicy,
    Resumed,
    SubprocessTransport,
    WebSocketTransport,
    connect,
    connect_stdio,
    open_websocket,
    redact_url,
    url_token,
)
from agenthost_protocol.aio.websocket import WebSocketServer, WebSocketStream
from agenthost_protocol.cli.chat import EXIT_CONNECT, EXIT_USAGE, run_chat
from agenthost_protocol.host import Host

from ._aio_hosts import ROOT, TIMEOUT, clock, next_of, run

TOKEN = "s3cret-Token_0123456789"
WRONG = "wrong-Token_9876543210"

FAST = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, rng=random.Random(7),
                       connect_timeout=TIMEOUT, handshake_timeout=TIMEOUT)

REFUSED_401 = ("the host refused the access token (HTTP 401): it is not the host's token "
               "(serve --new-token replaces it); use the URL serve printed last, with its "
               "?token=, or set AHP_TOKEN to its token")
WANTED_401 = ("the host wants an access token (HTTP 401): pass the URL serve printed, with its "
              "?token=, or set AHP_TOKEN")


class TokenHost:
    """A real host that wants ``token``; it records every upgrade request it gets.

    ``token`` may be changed while it serves (a restart with ``serve --new-token``)."""

    def __init__(self, endpoint: WebSocketServer, token: str) -> None:
        self.endpoint = endpoint
        self.token = token
        self.requests: list[Request] = []

    @property
    def url(self) -> str:
        """The URL without a token (``ws://127.0.0.1:PORT/``)."""
        return f"ws://127.0.0.1:{self.endpoint.port}/"

    def url_with(self, token: str) -> str:
        return f"{self.url}?token={token}"

    @property
    def paths(self) -> list[str]:
        return [request.path for request in self.requests]

    @property
    def authorizations(self) -> list[str | None]:
        return [request.headers.get("Authorization") for request in self.requests]


def _given_token(request: Request) -> str | None:
    query = urllib.parse.urlsplit(request.path).query
    for key, value in urllib.parse.parse_qsl(query):
        if key in ("token", "tkn"):
            return value
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return credentials if scheme.lower() == "bearer" else None


@contextlib.asynccontextmanager
async def token_host(token: str = TOKEN, *, refuse_with: HTTPStatus | None = None,
                     demo_step: float | None = None) -> AsyncIterator[TokenHost]:
    """The host on a loopback port; ``refuse_with`` refuses every handshake with that status.
    With ``demo_step`` the demo agent plays turns, that many seconds a step."""
    server = HostServer(Host(clock=clock, root=demo_root_state(),
                             server_info=t.Implementation(name="token-host")))
    driver = None
    if demo_step is not None:
        driver = AgentDriver(DemoAgent(step_delay=demo_step), server.host, server.flush)
        server.handler = driver.handle
    recorded: list[Request] = []
    made: list[TokenHost] = []  # the host, whose token a test may change

    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        recorded.append(request)
        if refuse_with is not None:
            return connection.respond(refuse_with, f"{refuse_with.phrase}\n")
        if _given_token(request) != (made[0].token if made else token):
            return connection.respond(HTTPStatus.UNAUTHORIZED, "a valid token is required\n")
        return None

    async def handler(websocket: ServerConnection) -> None:
        await server.serve_connection(WebSocketStream(websocket))

    endpoint = await serve(handler, "127.0.0.1", 0, process_request=process_request,
                           ping_interval=None)
    host = TokenHost(WebSocketServer(server, endpoint, "127.0.0.1"), token)
    host.requests = recorded
    made.append(host)
    try:
        async with host.endpoint:
            yield host
    finally:
        if driver is not None:
            await driver.close()


@pytest.fixture(autouse=True)
def _no_ambient_token(monkeypatch: pytest.MonkeyPatch) -> None:
    # a token in the environment of whoever runs the tests must not change them
    monkeypatch.delenv(TOKEN_ENV, raising=False)


# -- where the token comes from ------------------------------------------------------------


def test_a_token_argument_goes_as_a_bearer_header() -> None:
    async def body() -> None:
        async with token_host() as host, connect(host.url, token=TOKEN) as client:
            await client.initialize([ROOT])
            assert host.authorizations == [f"Bearer {TOKEN}"]
            assert host.paths == ["/"]
            assert TOKEN not in client.target

    run(body())


def test_a_token_in_the_url_goes_as_a_bearer_header_too() -> None:
    """Issue 28: the request target, which servers and proxies log, never holds the token."""
    async def body() -> None:
        async with token_host() as host:
            async with connect(host.url_with(TOKEN)) as client:
                await client.initialize([ROOT])
                assert client.target == f"{host.url}?token=REDACTED"
            # tkn= (VS Code's name) is a token too, and both leave the request target
            for url in (f"{host.url}?tkn={TOKEN}", f"{host.url}?a=1&tkn={TOKEN}&token={TOKEN}",
                        f"{host.url}?token={TOKEN}&tkn={WRONG}&b=2"):
                async with connect(url) as client:
                    await client.ping()
            assert host.authorizations == [f"Bearer {TOKEN}"] * 4
            assert host.paths == ["/", "/", "/?a=1", "/?b=2"]
            # open_websocket does the same
            transport = await open_websocket(f"{host.url}?tkn={TOKEN}", ping_interval=None)
            await transport.close()
            assert host.paths[-1] == "/" and host.authorizations[-1] == f"Bearer {TOKEN}"
            assert not [path for path in host.paths if TOKEN in path or WRONG in path]

    run(body())


def test_ahp_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        async with token_host() as host:
            monkeypatch.setenv(TOKEN_ENV, TOKEN)
            async with connect(host.url) as client:
                await client.ping()
            # a token in the URL needs nothing from the environment
            monkeypatch.setenv(TOKEN_ENV, WRONG)
            async with connect(host.url_with(TOKEN)) as client:
                await client.ping()
            # an empty AHP_TOKEN is no token
            monkeypatch.setenv(TOKEN_ENV, "")
            with pytest.raises(ConnectError) as refused:
                await connect(host.url, reconnect=False)
            assert refused.value.status == 401
            assert host.authorizations == [f"Bearer {TOKEN}", f"Bearer {TOKEN}", None]
            assert host.paths == ["/", "/", "/"]

    run(body())


def test_the_argument_beats_the_environment_and_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        monkeypatch.setenv(TOKEN_ENV, WRONG)
        async with token_host() as host:
            async with connect(host.url, token=TOKEN) as client:
                await client.ping()
            # the stale token of the URL is left out: the host sees one token only
            async with connect(f"{host.url}?a=1&token={WRONG}", token=TOKEN) as client:
                await client.ping()
            assert host.authorizations == [f"Bearer {TOKEN}"] * 2
            assert host.paths == ["/", "/?a=1"]

    run(body())


def test_the_callers_authorization_header(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        monkeypatch.setenv(TOKEN_ENV, WRONG)
        async with token_host() as host:
            # the caller's own header is its authentication: AHP_TOKEN stays out of it
            async with connect(host.url, headers={"authorization": f"Bearer {TOKEN}",
                                                  "X-Extra": "1"}) as client:
                await client.ping()
            assert host.authorizations == [f"Bearer {TOKEN}"]
            assert host.requests[0].headers.get("X-Extra") == "1"
            # ... and a token argument besides it is a contradiction
            with pytest.raises(ValueError, match="not both"):
                connect(host.url, token=TOKEN, headers={"Authorization": "Bearer x"})
            # ... and so is a token in the URL besides it (which of the two would count?)
            with pytest.raises(ValueError, match="not both"):
                connect(f"{host.url}?tkn={TOKEN}", headers={"Authorization": "Bearer x"})
            # merged with the other headers
            async with connect(host.url, token=TOKEN, headers={"X-Extra": "2"}) as client:
                await client.ping()
            assert host.requests[-1].headers.get("X-Extra") == "2"
            assert host.authorizations[-1] == f"Bearer {TOKEN}"

    run(body())


def test_tokens_a_header_cannot_carry_are_refused_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bad = "abc\r\nX-Injected: 1"
    with pytest.raises(ValueError, match="token argument is empty"):
        connect("ws://127.0.0.1:9/", token="")
    with pytest.raises(ValueError, match="token argument is not a valid") as invalid:
        connect("ws://127.0.0.1:9/", token=bad)
    assert bad not in str(invalid.value)
    monkeypatch.setenv(TOKEN_ENV, "has space")
    with pytest.raises(ValueError, match="AHP_TOKEN is not a valid") as invalid:
        connect("ws://127.0.0.1:9/")
    assert "has space" not in str(invalid.value)


def test_reconnects_send_the_token_again() -> None:
    async def body() -> None:
        async with token_host() as host, connect(host.url, token=TOKEN,
                                                 reconnect=FAST) as client:
            await client.initialize([ROOT])
            with client.events() as events:
                transport = client.transport
                assert isinstance(transport, WebSocketTransport)
                transport.abort()
                await next_of(events, Resumed)
            await client.ping()
            assert host.authorizations == [f"Bearer {TOKEN}"] * 2

    run(body())


def test_open_websocket_takes_a_token_too() -> None:
    async def body() -> None:
        async with token_host() as host:
            transport = await open_websocket(host.url_with(WRONG), token=TOKEN,
                                             ping_interval=None)
            await transport.close()
            assert host.paths == ["/"] and host.authorizations == [f"Bearer {TOKEN}"]

    run(body())


# -- refusals ------------------------------------------------------------------------------


def test_a_wrong_token_is_a_clear_connect_error_that_never_shows_it() -> None:
    async def body() -> None:
        async with token_host() as host:
            # reconnect on (the default): a refused handshake is final all the same
            for attempt in (connect(host.url, token=WRONG),
                            connect(host.url_with(WRONG)),
                            connect(f"{host.url}?tkn={WRONG}")):
                before = len(host.requests)
                with pytest.raises(HandshakeRefused) as refused:
                    await attempt
                error = refused.value
                assert isinstance(error, ConnectError)
                assert (error.check, error.status, error.token_sent) == ("token", 401, True)
                assert error.reason == REFUSED_401
                assert str(error) == f"cannot connect to {host.url}: {REFUSED_401}"
                assert WRONG not in str(error) and WRONG not in repr(error)
                assert WRONG not in error.target  # the URL went without its token
                assert len(host.requests) == before + 1  # one handshake, no retry
            # no token at all: what to give
            with pytest.raises(HandshakeRefused) as refused:
                await connect(host.url)
            assert refused.value.reason == WANTED_401 and not refused.value.token_sent

    run(body())


@pytest.mark.parametrize(("status", "reason"), [
    (HTTPStatus.SERVICE_UNAVAILABLE, "the host is at its connection limit (HTTP 503)"),
    (HTTPStatus.IM_A_TEAPOT, "the host refused the WebSocket handshake (HTTP 418 I'm a Teapot)"),
])
def test_other_refusals(status: HTTPStatus, reason: str) -> None:
    async def body() -> None:
        async with token_host(refuse_with=status) as host:
            with pytest.raises(ConnectError) as refused:
                await connect(host.url_with(TOKEN))
            # a busy host may have room later: not a final refusal
            assert not isinstance(refused.value, HandshakeRefused)
            assert refused.value.status == status
            assert refused.value.reason == reason
            assert TOKEN not in str(refused.value)

    run(body())


def test_a_403_names_the_origin_or_host_check_and_quotes_the_host() -> None:
    async def body() -> None:
        async with token_host(refuse_with=HTTPStatus.FORBIDDEN) as host:
            with pytest.raises(HandshakeRefused) as refused:
                await connect(host.url_with(TOKEN))
            error = refused.value
            assert (error.check, error.status) == ("origin-or-host", 403)
            assert error.detail == "Forbidden"
            assert error.reason == (
                'the host refused this connection\'s Origin or Host header (HTTP 403) (the '
                'host says: "Forbidden"): a browser page\'s origin needs serve --allow-origin, '
                "a host name other than localhost or an IP address needs serve --allow-host")
            assert TOKEN not in str(error)

    run(body())


def test_chat_exits_3_with_the_reason_and_without_the_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def chat(target: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        status = await run_chat(target, "hello", out=out, err=err, timeout=TIMEOUT,
                                input_fn=lambda prompt: "n")
        return status, err.getvalue()

    async def body() -> None:
        async with token_host() as host:
            status, err = await chat(host.url_with(WRONG))
            assert status == EXIT_CONNECT
            assert REFUSED_401 in err and WRONG not in err
            status, err = await chat(f"{host.url}?tkn={WRONG}")
            assert status == EXIT_CONNECT and REFUSED_401 in err and WRONG not in err
            monkeypatch.setenv(TOKEN_ENV, WRONG)
            status, err = await chat(host.url)
            assert status == EXIT_CONNECT and REFUSED_401 in err and WRONG not in err
            monkeypatch.setenv(TOKEN_ENV, f"{WRONG} x")
            status, err = await chat(host.url)
            assert status == EXIT_USAGE and "AHP_TOKEN is not a valid" in err
            assert WRONG not in err
        status, err = await chat(f"http://127.0.0.1:9/?token={WRONG}")
        assert status == EXIT_USAGE and "token=REDACTED" in err and WRONG not in err

    run(body())


def test_chat_exits_3_when_its_reconnect_is_refused() -> None:
    """The host restarts with a new token in the middle of a turn: chat says so and exits."""
    async def body() -> None:
        async with token_host(demo_step=1.0) as host:
            out, err = io.StringIO(), io.StringIO()
            # a slow demo turn: chat waits for it until the drop
            chat = asyncio.ensure_future(run_chat(host.url_with(TOKEN), "hello", out=out,
                                                  err=err, timeout=TIMEOUT,
                                                  input_fn=lambda prompt: "n"))
            endpoint = host.endpoint.endpoint
            while not endpoint.connections:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # the session made and the turn sent
            host.token = "replaced-Token_0123456789"
            before = len(host.requests)
            for connection in list(endpoint.connections):
                connection.transport.abort()
            started = asyncio.get_running_loop().time()
            status = await asyncio.wait_for(chat, TIMEOUT)
            took = asyncio.get_running_loop().time() - started
            assert status == EXIT_CONNECT, err.getvalue()
            assert REFUSED_401 in err.getvalue() and TOKEN not in err.getvalue()
            assert "[connection lost" in err.getvalue()  # it was under way
            assert len(host.requests) == before + 1 and took < TIMEOUT / 2

    run(body())


def test_a_refused_reconnect_ends_the_client_at_once() -> None:
    """Issue 28: the host restarted with a new token; no retry loop with growing delays."""
    # a pause before the attempt, for the waiters to be waiting when the refusal comes
    pause = ReconnectPolicy(initial_delay=0.3, max_delay=0.3, jitter=0.0,
                            connect_timeout=TIMEOUT, handshake_timeout=TIMEOUT)

    async def body() -> None:
        async with token_host() as host, connect(host.url, token=TOKEN,
                                                 reconnect=pause) as client:
            await client.initialize([ROOT])
            with client.events() as events:
                host.token = "replaced-Token_0123456789"  # serve --new-token, restarted
                before = len(host.requests)
                transport = client.transport
                assert isinstance(transport, WebSocketTransport)
                transport.abort()
                await next_of(events, Reconnecting)
                request = asyncio.ensure_future(client.ping())
                state = asyncio.ensure_future(client.wait_for_state(ROOT, lambda _s: False,
                                                                    timeout=TIMEOUT))
                closed = await next_of(events, Closed)
                assert isinstance(closed.error, HandshakeRefused)
                assert closed.error.check == "token" and closed.error.reason == REFUSED_401
                assert await events.next(TIMEOUT) is None  # the stream ended
                for waiter in (request, state):
                    with pytest.raises(HandshakeRefused, match="refused the access token"):
                        await waiter
                with pytest.raises(HandshakeRefused):
                    await client.ping()
                assert client.closed and isinstance(client.close_error, HandshakeRefused)
                await asyncio.sleep(1.0)  # long enough for several more attempts
                assert len(host.requests) == before + 1  # one: refused, never again

    run(body())


def test_a_hostile_refusal_body_is_bounded_made_safe_and_never_echoes_the_token() -> None:
    """A raw socket host: it records the request as sent, and answers 403 with a body that
    carries terminal escapes, a bidi override, the caller's own token and 100 kB more."""
    async def body() -> None:
        heads: list[bytes] = []

        async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            echoed = next((line.split(b" ", 2)[2] for line in head.split(b"\r\n")
                           if line.lower().startswith(b"authorization:")), b"")
            payload = (b"Origin \x1b[31mred\x1b]0;title\x07 \xe2\x80\xae evil\r\nline2 "
                       + echoed + b" " + b"A" * 100_000)
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n"
                         % len(payload) + payload)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(refuse, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            url = f"ws://127.0.0.1:{port}/path?a=1&token={TOKEN}&tkn={WRONG}"
            with pytest.raises(HandshakeRefused) as refused:
                await connect(url)
        finally:
            server.close()
            await server.wait_closed()
        error = refused.value
        assert error.check == "origin-or-host" and error.status == 403
        text = str(error)
        assert TOKEN not in text and WRONG not in text and "REDACTED" in error.detail
        assert "\x1b" not in text and "\u202e" not in text and "\n" not in text
        assert text.isprintable() and len(error.detail) <= 200
        assert error.detail.startswith("Origin ?[31mred?]0;title? ? evil line2 REDACTED AAA")
        # the server side: one request, its target without the token, which went as Bearer
        (head,) = heads
        request_line = head.split(b"\r\n")[0]
        assert request_line == b"GET /path?a=1 HTTP/1.1"
        assert f"Authorization: Bearer {TOKEN}".encode() in head
        assert WRONG.encode() not in head

    run(body())


# -- log lines -----------------------------------------------------------------------------


def test_the_websockets_debug_log_never_shows_the_token(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="websockets.client")
    caplog.set_level(logging.DEBUG, logger="agenthost_protocol.aio")

    async def body() -> None:
        async with token_host() as host:
            async with connect(host.url, token=TOKEN) as client:
                await client.ping()
            async with connect(host.url_with(TOKEN)) as client:
                await client.ping()
            with pytest.raises(ConnectError):
                await connect(host.url_with(TOKEN + "x"), reconnect=False)

    run(body())
    client_lines = [record.getMessage() for record in caplog.records
                    if not record.name.startswith("websockets.server")]
    assert "> Authorization: Bearer REDACTED" in client_lines
    # the token of the URL went in the header too
    assert "> GET / HTTP/1.1" in client_lines
    assert not [line for line in client_lines if "token=" in line and "> GET" in line]
    assert not [line for line in client_lines if TOKEN in line]


# -- stdio ---------------------------------------------------------------------------------

# the child writes the AHP_TOKEN it got, then waits for the end of its input (the client's
# close), so it is reaped as any host process is
REPORT_TOKEN = ("import os, sys; "
                "open(sys.argv[1], 'w').write(os.environ.get('AHP_TOKEN', '<unset>')); "
                "sys.stdin.read()")


async def child_token(path: Path, *, token: str | None = None,
                      env: Mapping[str, str] | None = None) -> str:
    command = [sys.executable, "-c", REPORT_TOKEN, str(path)]
    async with connect_stdio(command, token=token, env=env, close_timeout=TIMEOUT) as client:
        transport = client.transport
    assert isinstance(transport, SubprocessTransport)
    assert transport.process.returncode == 0
    return path.read_text()


def test_connect_stdio_hands_the_token_to_the_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        report = tmp_path / "token"
        assert await child_token(report) == "<unset>"
        assert await child_token(report, token=TOKEN) == TOKEN
        monkeypatch.setenv(TOKEN_ENV, WRONG)
        assert await child_token(report) == WRONG  # inherited
        assert await child_token(report, token=TOKEN) == TOKEN  # the argument wins
        # a replaced environment still gets ours, unless it has its own
        assert await child_token(report, env={"LC_ALL": "C"}) == WRONG
        assert await child_token(report, env={TOKEN_ENV: "own"}) == "own"
        assert await child_token(report, env={TOKEN_ENV: "own"}, token=TOKEN) == TOKEN

    run(body())


# -- the helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "redacted"), [
    ("ws://127.0.0.1:8765/?token=abc", "ws://127.0.0.1:8765/?token=REDACTED"),
    ("ws://h/?a=1&token=abc&b=2#x", "ws://h/?a=1&token=REDACTED&b=2#x"),
    ("ws://h/?TOKEN=abc", "ws://h/?TOKEN=REDACTED"),
    ("ws://h/?token=", "ws://h/?token="),
    ("pass the URL, with its ?token=, or", "pass the URL, with its ?token=, or"),
    ("see ws://h/?token=a,b.", "see ws://h/?token=REDACTED."),
    ("(ws://h/?token=abc)", "(ws://h/?token=REDACTED)"),
    ("ws://h/?tokens=abc&mytoken=abc", "ws://h/?tokens=abc&mytoken=abc"),
    ("wss://user:pw@h:1/x", "wss://user:REDACTED@h:1/x"),
    ("cannot connect to ws://h/?token=abc: refused", "cannot connect to ws://h/?token=REDACTED: "
                                                      "refused"),
    ("chat ws://h/?token=a%2Fb hello", "chat ws://h/?token=REDACTED hello"),
    ("ws://127.0.0.1:8765", "ws://127.0.0.1:8765"),
])
def test_redact_url(text: str, redacted: str) -> None:
    assert redact_url(text) == redacted


def test_url_token() -> None:
    assert url_token("ws://h/?token=abc") == "abc"
    assert url_token("ws://h/?tkn=abc") == "abc"
    assert url_token("ws://h/?tkn=x&token=abc") == "abc"  # token= first
    assert url_token("ws://h/?tkn=&token=") is None
    assert url_token("ws://h/?a=1&token=a%2Fb") == "a/b"
    assert url_token("ws://h/?token=") is None
    assert url_token("ws://h/") is None
    assert url_token("ws://[bad/?token=x") is None


def test_a_quoted_host_reason_is_bounded_and_never_shows_a_secret() -> None:
    from agenthost_protocol.aio.client_errors import _safe_detail

    long_token = "T" * 1000  # longer than what is kept before the cut
    for body in ((b"x" * 100 + long_token.encode()), ("\u00e9" * 50 + long_token).encode()):
        shown = _safe_detail(body, (long_token,))
        assert "TTTT" not in shown and "REDACTED" in shown and len(shown) <= 200
    assert _safe_detail(b"\x00\x1b[2J  two\n\tlines \xff") == "??[2J two lines \ufffd"
    assert _safe_detail(b"see ws://h/?token=abc") == "see ws://h/?token=REDACTED"
    assert len(_safe_detail(b"y" * 10**6)) == 200


def test_connect_error_redacts_whatever_it_is_given() -> None:
    error = ConnectError("ws://h/?token=abc", "WebSocket handshake failed: "
                         "redirect to ws://h/?token=abc")
    assert "abc" not in str(error) and "abc" not in repr(error)
    assert error.target == "ws://h/?token=REDACTED" and error.status is None
