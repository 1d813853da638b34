"""The embedder's own authentication (``authenticate``) and the subprotocol token, under
``serve_websocket`` and under ``asgi_app`` run by uvicorn, over real loopback sockets.

One ``authenticate`` function serves both transports: it reads the ``x-user``
header of the ASGI scope it is given.  A small agent records the principal
each session and turn came with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("uvicorn")
pytest.importorskip("hypercorn")

from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidMessage, InvalidStatus
from websockets.typing import Subprotocol

from agenthost_protocol import types as t
from agenthost_protocol.agent import Agent, AgentDriver, NewSession, Turn
from agenthost_protocol.agent.demo import demo_root_state
from agenthost_protocol.aio import HostServer, ServerLimits
from agenthost_protocol.aio.access import (
    MAX_PROTOCOL_HEADER,
    AccessPolicy,
    offered_subprotocols,
    subprotocol_token,
    token_subprotocol,
)
from agenthost_protocol.aio.authn import AuthenticationRefused, Scope, websocket_scope
from agenthost_protocol.aio.client import connect
from agenthost_protocol.aio.websocket import serve_websocket
from agenthost_protocol.asgi import asgi_app
from agenthost_protocol.host import Event, Host

from ._aio_hosts import ROOT, TIMEOUT, USER, clock, free_port, run, turn_started, turns_done
from ._asgi_run import run_server

Transport = Literal["websocket", "uvicorn", "hypercorn"]
TRANSPORTS: tuple[Transport, ...] = ("websocket", "uvicorn")
TOKEN = "s3cret-token"
SECRET = "the-password-of-boom"
"""What the failing authenticate puts in its error's text: never logged."""


def user_of(scope: Scope) -> str | None:
    headers = scope.get("headers")
    assert isinstance(headers, list)
    for name, value in headers:
        if name == b"x-user":
            return str(value.decode("latin-1"))
    return None


def authenticate_sync(scope: Scope) -> object:
    assert scope.get("type") == "websocket"
    user = user_of(scope)
    if user == "banned":
        raise AuthenticationRefused("you are banned", status=403)
    if user == "boom":
        raise RuntimeError(f"the database said no to {SECRET}")
    if user in (None, "nobody"):
        return None
    return f"user:{user}"


async def authenticate_async(scope: Scope) -> object:
    if user_of(scope) == "slow":
        await asyncio.sleep(60)
    await asyncio.sleep(0)
    return authenticate_sync(scope)


class Recorder(Agent):
    """Records who created each session and who started each turn."""

    provider = "demo"

    def __init__(self) -> None:
        self.sessions: list[object] = []
        self.turns: list[tuple[str, object]] = []
        self.gate = asyncio.Event()
        self.actions: list[tuple[str, object]] = []
        """What a turn whose message is ``wait`` waits for."""

    def client_action_by(self, channel: str, action: t.StateAction, principal: object) -> None:
        if isinstance(action, t.ChatPendingMessageSetAction):
            self.actions.append((action.type, principal))

    def refuse_session(self, session: NewSession) -> str | None:
        self.sessions.append(session.principal)
        return None

    async def turn(self, turn: Turn) -> None:
        self.turns.append((turn.text, turn.principal))
        if turn.text == "wait":
            await self.gate.wait()
        await turn.stream("ok")


class Hosted:
    def __init__(self, server: HostServer, agent: Recorder, url: str) -> None:
        self.server = server
        self.agent = agent
        self.url = url
        self.principals: list[object] = []
        """The principal of every request's connection, as the host core sees it."""


@contextlib.asynccontextmanager
async def hosted(transport: Transport, authenticate: Callable[[Scope], object] | None, *,
                 limits: ServerLimits | None = None,
                 time_limit: float = 1.0) -> AsyncIterator[Hosted]:
    """A host of a :class:`Recorder` behind ``transport``, with the token and
    ``authenticate``; ``time_limit`` bounds a handshake (``open_timeout`` /
    ``handshake_timeout``)."""
    host = Host(clock=clock, root=demo_root_state(), server_info=t.Implementation(name="h"))
    server = HostServer(host, limits=limits)
    agent = Recorder()
    driver = AgentDriver(agent, host, server.flush)
    policy = AccessPolicy(token=TOKEN)
    try:
        if transport == "websocket":
            endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None,
                                             access=policy, authenticate=authenticate,
                                             open_timeout=time_limit)
            assert endpoint.authenticate is authenticate
            h = Hosted(server, agent, endpoint.url + "/")
            try:
                yield _install(h, driver)
            finally:
                await endpoint.close()
        else:
            port = free_port()
            app = asgi_app(server, policy=policy, authenticate=authenticate,
                           handshake_timeout=time_limit)
            h = Hosted(server, agent, f"ws://127.0.0.1:{port}/")
            async with run_server("uvicorn" if transport == "uvicorn" else "hypercorn", app,
                                  port, lifespan="off"):
                yield _install(h, driver)
            await server.close()
    finally:
        await driver.close()


def _install(h: Hosted, driver: AgentDriver) -> Hosted:
    def handle(event: Event) -> None:
        connection = getattr(event, "connection", None)
        if connection is not None:
            h.principals.append(connection.principal)
        driver.handle(event)

    h.server.handler = handle
    return h


async def refused(url: str, **kwargs: object) -> tuple[int, str, str | None]:
    """The status, body and ``WWW-Authenticate`` of a handshake that must be refused."""
    with pytest.raises(InvalidStatus) as info:
        async with ws_connect(url, ping_interval=None, open_timeout=TIMEOUT,
                              **kwargs):  # type: ignore[arg-type]
            pass
    response = info.value.response
    return (response.status_code, response.body.decode("utf-8", "replace") if response.body
            else "", response.headers.get("WWW-Authenticate"))


async def ping_over(url: str, **kwargs: object) -> str | None:
    """A JSON-RPC ping through a raw client; the subprotocol the host selected."""
    async with ws_connect(url, ping_interval=None, open_timeout=TIMEOUT,
                          **kwargs) as ws:  # type: ignore[arg-type]
        await ws.send('{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}')
        answer = await asyncio.wait_for(ws.recv(), TIMEOUT)
        assert '"id":1' in str(answer) and '"result"' in str(answer)
        return ws.subprotocol


async def one_turn(url: str, user: str, text: str, session: str | None = None) -> str:
    """As ``user``: create a session (unless given) and play one turn in its chat."""
    async with connect(url, token=TOKEN, clock=clock, reconnect=False,
                       headers={"X-User": user}) as client:
        await client.initialize([ROOT])
        if session is None:
            session = await client.create_session(provider="demo")
        snapshot = await client.subscribe(session)
        assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
        chat = snapshot.state.default_chat
        assert chat is not None
        chat_snapshot = await client.subscribe(chat)
        assert chat_snapshot is not None and isinstance(chat_snapshot.state, t.ChatState)
        done = len(chat_snapshot.state.turns)
        await client.dispatch(chat, turn_started(f"t-{user}", text))
        await client.wait_for_state(chat, turns_done(done + 1), confirmed=True,
                                    timeout=TIMEOUT)
        return session


@pytest.mark.parametrize("style", ["sync", "async"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_principal_reaches_the_connection_the_session_and_the_turn(
        transport: Transport, style: str) -> None:
    authenticate = authenticate_sync if style == "sync" else authenticate_async

    async def body() -> None:
        async with hosted(transport, authenticate) as h:
            session = await one_turn(h.url, "alice", "from alice")
            # another user writes in alice's session: the turn is bob's
            await one_turn(h.url, "bob", "from bob", session)
            assert h.agent.sessions == ["user:alice"]
            assert h.agent.turns == [("from alice", "user:alice"), ("from bob", "user:bob")]
            assert set(h.principals) == {"user:alice", "user:bob"}

    run(body())


async def until(condition: Callable[[], bool]) -> None:
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not in time"
        await asyncio.sleep(0.01)


def test_queued_and_initial_messages_carry_their_senders_principal() -> None:
    async def body() -> None:
        async with hosted("websocket", authenticate_sync) as h:
            async with connect(h.url, token=TOKEN, clock=clock, reconnect=False,
                               headers={"X-User": "alice"}) as alice:
                await alice.initialize([ROOT])
                session = await alice.create_session(provider="demo")
                snapshot = await alice.subscribe(session)
                assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
                chat = snapshot.state.default_chat
                assert chat is not None
                await alice.subscribe(chat)
                await alice.dispatch(chat, turn_started("t-a", "wait"))
                await until(lambda: len(h.agent.turns) == 1)
                async with connect(h.url, token=TOKEN, clock=clock, reconnect=False,
                                   headers={"X-User": "bob"}) as bob:
                    await bob.initialize([ROOT])
                    await bob.subscribe(chat)
                    await bob.dispatch(chat, t.ChatPendingMessageSetAction(
                        kind=t.PendingMessageKind.QUEUED, id="q1",
                        message=t.Message(text="queued by bob", origin=USER)))
                    await bob.wait_for_state(
                        chat, lambda s: isinstance(s, t.ChatState) and bool(
                            s.queued_messages), confirmed=True, timeout=TIMEOUT)
                # bob has gone when his message's turn starts: it is still his
                h.agent.gate.set()
                await until(lambda: len(h.agent.turns) == 2)
                await alice.create_chat(session, initial_message="a side chat by alice")
                await until(lambda: len(h.agent.turns) == 3)
            assert h.agent.turns == [("wait", "user:alice"), ("queued by bob", "user:bob"),
                                     ("a side chat by alice", "user:alice")]
            assert h.agent.actions == [("chat/pendingMessageSet", "user:bob")]

    run(body())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_authenticate_refusals(transport: Transport, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)

    async def body() -> None:
        async with hosted(transport, authenticate_async, time_limit=1.0) as h:
            url = f"{h.url}?token={TOKEN}"
            # the access check comes first: no token is 401 before authenticate runs
            status, _, challenge = await refused(h.url, additional_headers={"X-User": "alice"})
            assert status == 401 and challenge is not None
            status, _, challenge = await refused(url)
            assert status == 401 and challenge is not None and challenge.startswith("Bearer")
            status, text, _ = await refused(url, additional_headers={"X-User": "banned"})
            assert status == 403 and "you are banned" in text
            status, text, _ = await refused(url, additional_headers={"X-User": "boom"})
            assert status == 500 and SECRET not in text
            # slow: cut off by the handshake's time limit, not after its 60 s
            start = asyncio.get_running_loop().time()
            if transport == "uvicorn":
                status, text, _ = await refused(url, additional_headers={"X-User": "slow"})
                assert status == 503 and "too long" in text
            else:
                # websockets' open_timeout ends the handshake: no response, or a 503
                with pytest.raises((InvalidStatus, InvalidMessage)):
                    async with ws_connect(url, ping_interval=None, open_timeout=TIMEOUT,
                                          additional_headers={"X-User": "slow"}):
                        pass
            assert asyncio.get_running_loop().time() - start < 8.0
            # the server still serves, and nobody refused reached the host
            await one_turn(h.url, "carol", "still here")
            assert set(h.principals) == {"user:carol"}
            assert h.agent.sessions == ["user:carol"]

    run(body())
    logged = caplog.text
    assert SECRET not in logged and TOKEN not in logged
    assert "RuntimeError" in logged  # the failure is logged, by its class and place


def test_many_refused_handshakes_log_a_bounded_number_of_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agenthost_protocol")

    async def body() -> None:
        async with hosted("websocket", authenticate_sync) as h:
            url = f"{h.url}?token={TOKEN}"
            for user in ("boom", "nobody") * 30:
                status, _, _ = await refused(url, additional_headers={"X-User": user})
                assert status in (401, 500)
            await one_turn(h.url, "dave", "after the flood")

    run(body())
    lines = [r for r in caplog.records if r.name.startswith("agenthost_protocol")]
    # 20 a period for the refusals, 20 for authenticate's own failures
    assert len(lines) <= 42, len(lines)


def test_slow_authentications_in_flight_are_bounded() -> None:
    async def body() -> None:
        limits = ServerLimits(max_connections=2)
        async with hosted("uvicorn", authenticate_async, limits=limits, time_limit=1.5) as h:
            url = f"{h.url}?token={TOKEN}"

            async def slow() -> None:
                with contextlib.suppress(Exception):
                    async with ws_connect(url, ping_interval=None, open_timeout=TIMEOUT,
                                          additional_headers={"X-User": "slow"}):
                        pass

            waiting = [asyncio.create_task(slow()) for _ in range(2)]
            try:
                await asyncio.sleep(0.5)
                status, text, _ = await refused(url, additional_headers={"X-User": "erin"})
                assert status == 503 and "authenticated" in text
            finally:
                for task in waiting:
                    task.cancel()
                await asyncio.gather(*waiting, return_exceptions=True)

    run(body())


@pytest.mark.parametrize("authenticated", [False, True], ids=["token-only", "authenticate"])
@pytest.mark.parametrize("transport", (*TRANSPORTS, "hypercorn"))
def test_the_token_as_a_subprotocol(transport: Transport, authenticated: bool) -> None:
    async def body() -> None:
        async with hosted(transport, authenticate_sync if authenticated else None) as h:
            user = {"X-User": "frank"} if authenticated else {}
            offered = [Subprotocol("ahp"), Subprotocol(token_subprotocol(TOKEN))]
            assert await ping_over(h.url, subprotocols=offered,
                                   additional_headers=user) == "ahp"
            # no subprotocol: served as before, none selected
            assert await ping_over(f"{h.url}?token={TOKEN}", additional_headers=user) is None
            # "ahp" offered with the token elsewhere: selected all the same
            assert await ping_over(f"{h.url}?token={TOKEN}", subprotocols=[Subprotocol("ahp")],
                                   additional_headers=user) == "ahp"
            wrong = token_subprotocol("not-the-token")
            for bad in (wrong, "ahp.token.!!not*base64", "ahp.token.", "ahp.token.//5n",
                        "ahp.token.__8",  # not UTF-8
                        # (hypercorn's own parser fails on a non-ASCII one, before us)
                        *(() if transport == "hypercorn" else ("ahp.token.\u00ff\u00fe",)),
                        "ahp.token." + "QUFB" * (MAX_PROTOCOL_HEADER // 4 + 1)):
                # the header as a hostile client writes it (not one websockets would)
                status, _, challenge = await refused(h.url, additional_headers={
                    **user, "Sec-WebSocket-Protocol": f"ahp, {bad}"})
                # the ASGI server itself answers 400 to a header it cannot parse
                assert (status, challenge is not None) == (401, True) or (
                    transport != "websocket" and status == 400), (bad, status)
            # repeated, the token's header is not trusted
            status, _, _ = await refused(h.url, additional_headers=[
                *user.items(), ("Sec-WebSocket-Protocol", "ahp"),
                ("Sec-WebSocket-Protocol", token_subprotocol(TOKEN))])
            assert status == 401

    run(body())


@given(st.text(min_size=1, max_size=200))
def test_a_token_round_trips_through_its_subprotocol(token: str) -> None:
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate is no token anyone can send
    protocol = token_subprotocol(token)
    assert "=" not in protocol and protocol.isascii()
    header = f"ahp, {protocol}"
    assert subprotocol_token(offered_subprotocols(header)) == token
    policy = AccessPolicy(token=token)
    headers = {"host": "127.0.0.1:1", "sec-websocket-protocol": header}
    assert policy.check("/", lambda name: headers.get(name.lower())) is None


@given(st.text(max_size=300))
def test_any_protocol_header_is_refused_or_accepted_never_raises(header: str) -> None:
    policy = AccessPolicy(token=TOKEN)
    headers = {"host": "127.0.0.1:1", "sec-websocket-protocol": header}
    refusal = policy.check("/", lambda name: headers.get(name.lower()))
    assert refusal is not None and refusal.status == 401


def test_websocket_scope_is_shaped_as_asgi_s() -> None:
    scope = websocket_scope(target="/a%20b?token=x&u=1",
                            headers=[("Host", "h:1"), ("X-User", "zoe")],
                            client=("127.0.0.1", 5), server=("127.0.0.1", 6), secure=False,
                            subprotocols=["ahp"])
    assert scope["type"] == "websocket" and scope["scheme"] == "ws"
    assert scope["path"] == "/a b" and scope["raw_path"] == b"/a%20b"
    assert scope["query_string"] == b"token=x&u=1" and scope["root_path"] == ""
    assert scope["headers"] == [(b"host", b"h:1"), (b"x-user", b"zoe")]
    assert scope["client"] == ["127.0.0.1", 5] and scope["subprotocols"] == ["ahp"]
    assert user_of(scope) == "zoe"

