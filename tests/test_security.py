"""Issue 17's attacks on a served host, run as an attacker would: real loopback sockets.

Each test is one attack that used to work: a web page driving the agent
(no token, a foreign Origin, DNS rebinding), a client taking another's
clientId or writing another's active-client entry, throwaway handshakes
evicting reconnect memory, small requests with huge answers, stalled
subscribers exhausting memory, idle handshakes, repeated reconnects.
Every wait is bounded; every subprocess is killed and reaped.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.aio import ServerLimits
from agenthost_protocol.aio.access import AccessPolicy, is_loopback, url_with_token
from agenthost_protocol.client import (
    ActionReceived,
    Reconnected,
    RequestFailed,
    ResponseReceived,
)
from agenthost_protocol.host import Host
from agenthost_protocol.types.error_codes import AhpErrorCode, JsonRpcErrorCode

from ._aio_hosts import demo_host, run
from ._aio_peer import ROOT, TIMEOUT, serve_command, serving, spawn, ws_peer
from ._raw_ws import masked_text_frame

TOKEN = "s3cr3t-token-for-tests"


async def handshake(port: int, path: str = "/", headers: dict[str, str] | None = None,
                    *, host: str | None = None) -> int:
    """Send a WebSocket upgrade request by hand, as a browser or a script would; the status."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT)
    try:
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host if host is not None else f'127.0.0.1:{port}'}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13",
            *(f"{k}: {v}" for k, v in (headers or {}).items()),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), TIMEOUT)
        return int(status.split()[1])
    finally:
        writer.close()


async def stalled_subscriber(port: int, client_id: str, channel: str) -> asyncio.StreamWriter:
    """A raw socket with a tiny receive buffer that handshakes, subscribes and stops reading."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # fixed small: loopback autotuning would let the kernel absorb tens of MB
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port)),
                           TIMEOUT)
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write((f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    initialize = wire.dumps(t.JsonRpcRequest(id=1, method="initialize", params=t.InitializeParams(
        protocol_versions=("0.7.0",), client_id=client_id, initial_subscriptions=(channel,))))
    writer.write(masked_text_frame(initialize))
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), TIMEOUT)
    assert b" 101 " in status, status
    return writer


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


# -- the access policy, pure -------------------------------------------------------------


def headers_of(**values: str) -> Any:
    lowered = {k.lower().replace("_", "-"): v for k, v in values.items()}
    return lambda name: lowered.get(name.lower())


def test_policy_checks_host_then_origin_then_token() -> None:
    policy = AccessPolicy(token=TOKEN, allowed_origins=("https://App.example/",),
                          allowed_hosts=("box.lan",))
    ok = headers_of(host="127.0.0.1:8765")
    assert policy.check(f"/?token={TOKEN}", ok) is None
    assert policy.check("/", headers_of(host="localhost:1", authorization=f"Bearer {TOKEN}")) \
        is None
    assert policy.check(f"/?token={TOKEN}", headers_of(host="[::1]:8765")) is None
    assert policy.check(f"/?token={TOKEN}", headers_of(host="box.lan")) is None
    refused = policy.check(f"/?token={TOKEN}", headers_of(host="evil.example:8765"))
    assert refused is not None and refused.status == 403 and "Host" in refused.reason
    refused = policy.check(f"/?token={TOKEN}", headers_of(host="127.0.0.1",
                                                         origin="https://evil.example"))
    assert refused is not None and refused.status == 403 and "Origin" in refused.reason
    assert policy.check(f"/?token={TOKEN}", headers_of(host="127.0.0.1",
                                                      origin="https://app.example")) is None
    # tkn= (VS Code's name) too; any one right candidate among wrong ones admits
    assert policy.check(f"/?tkn={TOKEN}", ok) is None
    assert policy.check(f"/?token=wrong&tkn={TOKEN}", ok) is None
    assert policy.check("/?tkn=wrong", headers_of(host="127.0.0.1",
                                                  authorization=f"Bearer {TOKEN}")) is None
    for path, auth in (("/", None), ("/?token=wrong", None), ("/?token=", None),
                       ("/?tkn=wrong", None), ("/?tkn=", None), (f"/?tokn={TOKEN}", None),
                       ("/", "Bearer wrong"), ("/", f"Basic {TOKEN}"),
                       (f"/?token={TOKEN[:-1]}", None)):
        values = {"host": "127.0.0.1"} | ({"authorization": auth} if auth else {})
        refused = policy.check(path, headers_of(**values))
        assert refused is not None and refused.status == 401, (path, auth)
        assert TOKEN not in refused.reason
    assert policy.check("/", headers_of()) is not None  # no Host at all


def test_token_urls_and_loopback() -> None:
    assert url_with_token("ws://127.0.0.1:1", "a b/c") == "ws://127.0.0.1:1/?token=a%20b%2Fc"
    assert url_with_token("ws://127.0.0.1:1", None) == "ws://127.0.0.1:1"
    policy = AccessPolicy(token="a b/c")
    assert policy.check("/?token=a%20b%2Fc", headers_of(host="127.0.0.1")) is None
    assert [is_loopback(h) for h in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost",
                                     "0.0.0.0", "::", "192.168.1.2", "example.com")] == [
        True, True, True, True, True, False, False, False, False]
    with pytest.raises(ValueError):
        AccessPolicy(token="")


# -- serve: token, Origin, Host, binding -------------------------------------------------


def test_serve_prints_a_token_url_and_refuses_handshakes_without_it(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving([], tmp_path / "serve.err") as (_proc, url):
            token_match = re.search(r"/\?token=([A-Za-z0-9_-]+)$", url)
            assert token_match is not None, url
            token = token_match.group(1)
            assert len(token) >= 22  # >= 128 bits in URL-safe base64
            port = port_of(url)
            assert await handshake(port) == 401
            assert await handshake(port, "/?token=wrong") == 401
            assert await handshake(port, headers={"Authorization": "Bearer nope"}) == 401
            assert await handshake(port, f"/?token={token}") == 101
            assert await handshake(port, headers={"Authorization": f"Bearer {token}"}) == 101
            # a web page: the browser adds its Origin, whatever the page knows
            assert await handshake(port, f"/?token={token}",
                                   {"Origin": "https://evil.example"}) == 403
            assert await handshake(port, "/", {"Origin": "null"}) == 403
            # DNS rebinding: the page's own name, resolved to 127.0.0.1
            assert await handshake(port, f"/?token={token}",
                                   host=f"evil.example:{port}") == 403
            # the URL as printed is all a client needs
            peer, ws = await ws_peer(url, "good")
            await peer.initialize()
            await ws.close()
        err = (tmp_path / "serve.err").read_text()
        assert token not in err  # never logged

    run(body(), 60)


def test_serve_takes_the_token_from_a_file_or_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")

    async def body() -> None:
        async with serving(["--token-file", str(token_file)], tmp_path / "a.err") as (_p, url):
            assert url.endswith("/?token=from-a-file")
            assert await handshake(port_of(url), "/?token=from-a-file") == 101
            assert await handshake(port_of(url), "/?token=other") == 401

    run(body(), 60)


def test_serve_no_token_is_loopback_only_and_warns(tmp_path: Path) -> None:
    import subprocess

    from ._aio_peer import child_env

    done = subprocess.run(serve_command("--host", "0.0.0.0", "--no-token", "--port", "0"),
                          check=False, capture_output=True, env=child_env(), timeout=TIMEOUT)
    assert done.returncode == 2
    assert b"--no-token is refused for --host 0.0.0.0" in done.stderr

    async def body() -> None:
        async with spawn(["--port", "0", "--no-token"], tmp_path / "serve.err") as proc:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)
            url = line.split()[1].decode()
            assert "token" not in url
            assert await handshake(port_of(url)) == 101
            # still no browser page and no rebinding without a token
            assert await handshake(port_of(url), "/", {"Origin": "http://localhost:3000"}) == 403
        assert "warning: --no-token" in (tmp_path / "serve.err").read_text()

    run(body(), 60)


def test_serve_allows_a_named_origin_and_host(tmp_path: Path) -> None:
    async def body() -> None:
        args = ["--allow-origin", "https://app.example", "--allow-host", "box.lan"]
        async with serving(args, tmp_path / "serve.err") as (_proc, url):
            path = "/?" + url.split("?", 1)[1]
            port = port_of(url)
            assert await handshake(port, path, {"Origin": "https://app.example"}) == 101
            assert await handshake(port, path, {"Origin": "https://app.example.evil"}) == 403
            assert await handshake(port, path, host="box.lan:1") == 101

    run(body(), 60)


TLS = Path(__file__).parent / "data" / "tls"


def test_serve_offers_tls(tmp_path: Path) -> None:
    import ssl

    from agenthost_protocol.aio.client import ConnectError, connect

    async def body() -> None:
        args = ["--certfile", str(TLS / "cert.pem"), "--keyfile", str(TLS / "key.pem")]
        async with spawn(["--port", "0", *args], tmp_path / "serve.err") as proc:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)
            url = line.split()[1].decode()
            assert url.startswith("wss://127.0.0.1:") and "?token=" in url, line
            trusted = ssl.create_default_context(cafile=str(TLS / "cert.pem"))
            async with connect(url, ssl=trusted, reconnect=False) as client:
                await client.initialize()
                sessions = await client.list_sessions()
                assert sessions.items == ()
            # the system's trust store does not know this certificate
            with pytest.raises(ConnectError):
                await connect(url, reconnect=False, open_timeout=5)
            # plain ws:// to a TLS port is no way around it
            with pytest.raises(ConnectError):
                await connect(url.replace("wss://", "ws://"), reconnect=False, open_timeout=5)

    run(body(), 60)


# -- client identity ----------------------------------------------------------------------


def test_a_live_clients_id_cannot_be_claimed() -> None:
    async def body() -> None:
        async with demo_host() as demo:
            victim, victim_ws = await ws_peer(demo.url, "victim")
            await victim.initialize()
            attacker, attacker_ws = await ws_peer(demo.url, "victim")
            await attacker.send(attacker.client.initialize(initial_subscriptions=[ROOT]))
            refused = await attacker.until(lambda e: isinstance(e, RequestFailed))
            assert isinstance(refused, RequestFailed)
            assert refused.error is not None
            assert refused.error.code == AhpErrorCode.ALREADY_EXISTS, refused
            # the victim is untouched: still open, still answered
            answered = await victim.request("ping", t.PingParams())
            assert isinstance(answered, ResponseReceived)
            assert [c.client_id for c in demo.host.connections if not c.closed].count(
                "victim") == 1
            await victim_ws.close()
            await attacker_ws.close()

    run(body())


def test_a_dead_holder_is_replaced_within_the_probe_deadline() -> None:
    async def body() -> None:
        limits = ServerLimits(claim_probe_timeout=0.5)
        async with demo_host(limits=limits) as demo:
            ghost, ghost_ws = await ws_peer(demo.url, "ghost")
            await ghost.initialize()
            # a half-open socket: nothing it is sent is read, pings go unanswered
            ghost_ws.transport.pause_reading()
            back, back_ws = await ws_peer(demo.url, "ghost")
            loop = asyncio.get_running_loop()
            started = loop.time()
            await back.send(back.client.initialize(initial_subscriptions=[ROOT]))
            event = await back.until(lambda e: not isinstance(e, ResponseReceived), 10)
            assert type(event).__name__ == "Initialized", event
            assert loop.time() - started < 5
            alive = [c for c in demo.host.connections if c.client_id == "ghost"]
            assert len(alive) == 1
            ghost_ws.transport.abort()
            await back_ws.close()

    run(body())


def test_a_client_writes_only_its_own_active_client_entry() -> None:
    async def body() -> None:
        async with demo_host() as demo:
            ide, ide_ws = await ws_peer(demo.url, "ide")
            await ide.initialize()
            other, other_ws = await ws_peer(demo.url, "other")
            await other.initialize()
            session = "ahp-session:/s1"
            created = await ide.request("createSession", t.CreateSessionParams(
                channel=session, provider="demo"))
            assert isinstance(created, ResponseReceived), created
            await ide.subscribe(session)
            await other.subscribe(session)
            mine = t.SessionActiveClient(client_id="ide", tools=(t.ToolDefinition(
                name="deploy", description="the IDE's tool", input_schema={"type": "object"}),))
            await ide.dispatch(session, t.SessionActiveClientSetAction(active_client=mine))
            await ide.until_state(session, lambda s: isinstance(s, t.SessionState)
                                  and len(s.active_clients) == 1)
            forged = t.SessionActiveClient(client_id="ide", tools=())
            for action in (t.SessionActiveClientSetAction(active_client=forged),
                           t.SessionActiveClientRemovedAction(client_id="ide")):
                await other.dispatch(session, action)
                await other.until(lambda e: isinstance(e, ActionReceived)
                                  and "its own active-client entry" in repr(e))
            state = demo.host.state(session)
            assert isinstance(state, t.SessionState)
            assert state.active_clients == (mine,)
            await ide_ws.close()
            await other_ws.close()

    run(body())


@pytest.mark.parametrize("subscribing", [False, True], ids=["plain", "subscribing"])
def test_throwaway_handshakes_do_not_evict_a_client_with_pending_state(subscribing: bool) -> None:
    """With ``subscribing``, defect 9 of issue 29: 1,025 fresh clientIds that
    subscribed made the host forget a client that had dropped with subscriptions."""
    async def body() -> None:
        async with demo_host(remembered_clients=1024) as demo:
            victim, victim_ws = await ws_peer(demo.url, "victim")
            await victim.initialize()
            await victim_ws.close()
            await asyncio.sleep(0.05)
            port = port_of(demo.url)
            line = wire.dumps(t.JsonRpcRequest(id=1, method="initialize", params=t.InitializeParams(
                protocol_versions=("0.7.0",), client_id="x",
                initial_subscriptions=(ROOT,) if subscribing else ()))).encode()

            async def throwaway(n: int) -> None:
                from websockets.asyncio.client import connect

                async with connect(f"ws://127.0.0.1:{port}") as ws:
                    await ws.send(line.replace(b'"x"', f'"throwaway-{n}"'.encode()).decode())
                    await ws.recv()

            for start in range(0, 1100, 50):
                await asyncio.gather(*(throwaway(n) for n in range(start, start + 50)))
            assert demo.host.remembered_version("victim") == "0.7.0"
            # plain throwaways displace each other; subscribing ones are each kept
            # for their own time, within the documented cap
            assert (demo.host.remembered_version("throwaway-0") is not None) is subscribing
            back, back_ws = await ws_peer(demo.url, "victim")
            back.client = victim.client
            victim.client.connection_lost()
            await back.send(victim.client.reconnect())
            event = await back.until(lambda e: type(e).__name__ in ("Reconnected",
                                                                     "Reinitialized",
                                                                     "RequestFailed"))
            assert isinstance(event, Reconnected), event
            assert event.outcome.kind == t.ReconnectResultType.REPLAY, event
            await back_ws.close()

    run(body(), 120)


# -- budgets ------------------------------------------------------------------------------


def test_duplicate_subscriptions_are_answered_once() -> None:
    async def body() -> None:
        async with demo_host() as demo:
            peer, ws = await ws_peer(demo.url, "amplifier")
            request = wire.dumps(t.JsonRpcRequest(id=1, method="initialize",
                                                  params=t.InitializeParams(
                protocol_versions=("0.7.0",), client_id="amplifier",
                initial_subscriptions=(ROOT,) * 120_000)))
            assert len(request) > 1_500_000
            await ws.send(request)
            answer = await asyncio.wait_for(ws.recv(), TIMEOUT)
            assert len(answer) < 10_000, len(answer)
            assert len(json.loads(answer)["result"]["snapshots"]) == 1
            reconnect = wire.dumps(t.JsonRpcRequest(id=2, method="reconnect",
                                                    params=t.ReconnectParams(
                client_id="amplifier", last_seen_server_seq=0,
                subscriptions=(ROOT, "ahp-session:/none") * 60_000)))
            await ws.send(reconnect)
            answer = await asyncio.wait_for(ws.recv(), TIMEOUT)
            assert len(answer) < 10_000, len(answer)
            del peer
            await ws.close()

    run(body())


def test_subscription_and_reconnect_budgets() -> None:
    async def body() -> None:
        limits = ServerLimits(max_subscriptions=3, max_reconnects_per_minute=2)
        async with demo_host(limits=limits) as demo:
            for n in range(4):
                demo.host.add_channel(f"ahp-session:/s{n}", t.SessionState(
                    provider="demo", title="", status=t.SessionStatus.IDLE,
                    lifecycle=t.SessionLifecycle.READY, active_clients=(), chats=()))
            peer, ws = await ws_peer(demo.url, "greedy")
            await peer.send(peer.client.initialize(
                initial_subscriptions=[ROOT] + [f"ahp-session:/s{n}" for n in range(3)]))
            failed = await peer.until(lambda e: isinstance(e, RequestFailed))
            assert isinstance(failed, RequestFailed) and failed.error is not None
            assert failed.error.code == JsonRpcErrorCode.INVALID_PARAMS
            assert "too many subscriptions" in failed.error.message
            await ws.close()
            peer, ws = await ws_peer(demo.url, "greedy")
            await peer.initialize([ROOT, "ahp-session:/s0"])
            await peer.subscribe("ahp-session:/s1")
            await peer.send(peer.client.subscribe("ahp-session:/s2"))
            failed = await peer.until(lambda e: isinstance(e, RequestFailed))
            assert isinstance(failed, RequestFailed) and failed.error is not None
            assert "at most 3" in failed.error.message
            raw = wire.dumps(t.JsonRpcRequest(id=99, method="reconnect", params=t.ReconnectParams(
                client_id="greedy", last_seen_server_seq=0, subscriptions=(ROOT,))))
            codes = []
            for _ in range(3):
                await ws.send(raw)
                while True:
                    answer = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
                    if answer.get("id") == 99:
                        break
                codes.append(answer.get("error", {}).get("code"))
            assert codes == [None, None, JsonRpcErrorCode.INVALID_REQUEST]
            await ws.close()

    run(body())


def test_a_connection_that_never_initializes_is_closed() -> None:
    async def body() -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        async with demo_host(limits=ServerLimits(initialize_timeout=0.3)) as demo:
            async with connect(demo.url) as ws:
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 5)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
                assert "no initialize within" in closed.value.rcvd.reason
            for _ in range(100):
                if demo.server.connection_count == 0:
                    break
                await asyncio.sleep(0.02)
            assert demo.server.connection_count == 0

    run(body())


def test_connections_beyond_the_cap_get_503() -> None:
    async def body() -> None:
        async with demo_host(limits=ServerLimits(max_connections=2)) as demo:
            first, ws1 = await ws_peer(demo.url, "one")
            second, ws2 = await ws_peer(demo.url, "two")
            await first.initialize()
            await second.initialize()
            assert await handshake(port_of(demo.url)) == 503
            await ws1.close()
            for _ in range(100):
                if demo.server.connection_count < 2:
                    break
                await asyncio.sleep(0.02)
            assert await handshake(port_of(demo.url)) == 101
            await ws2.close()

    run(body())


def test_stalled_subscribers_are_dropped_to_keep_the_server_budget() -> None:
    budget = 8 * 1024 * 1024
    title = "x" * (4 * 1024 * 1024)

    async def body() -> None:
        limits = ServerLimits(max_total_queue_bytes=budget, stall_timeout=0.2)
        async with demo_host(limits=limits) as demo:
            session = "ahp-session:/big"
            demo.host.add_channel(session, t.SessionState(
                provider="demo", title="", status=t.SessionStatus.IDLE,
                lifecycle=t.SessionLifecycle.READY, active_clients=(), chats=()))
            reader, reader_ws = await ws_peer(demo.url, "reader")
            await reader.initialize([session])
            port = port_of(demo.url)
            stalled = []
            for n in range(12):
                # an attacker that subscribes, then never reads a byte again
                stalled.append(await stalled_subscriber(port, f"stalled-{n}", session))
            peak = 0
            for n in range(4):
                # _meta, not a title: the host cuts a title of megabytes (issue 29)
                demo.host.dispatch(session, t.SessionMetaChangedAction(
                    meta={"n": n, "blob": title}))
                demo.server.flush()
                peak = max(peak, demo.server.queued_bytes)
                await asyncio.sleep(0.05)
            state = await reader.until_state(session, lambda s: isinstance(s, t.SessionState)
                                             and (s.meta or {}).get("n") == 3, 20)
            assert isinstance(state, t.SessionState)
            for _ in range(200):
                if demo.server.queued_bytes <= budget:
                    break
                await asyncio.sleep(0.05)
            assert demo.server.queued_bytes <= budget
            # stalled subscribers went until what is left fits the budget (a stalled
            # one whose queue fits may stay); the reader stayed and got every title
            assert demo.server.connection_count <= 1 + budget // len(title)
            answered = await reader.request("ping", t.PingParams())
            assert isinstance(answered, ResponseReceived)
            assert peak > budget
            for writer in stalled:
                writer.transport.abort()
            await reader_ws.close()

    run(body(), 60)


def test_limits_are_validated_and_the_cli_defaults_match() -> None:
    from agenthost_protocol.cli.serve import _ServerLimitDefaults

    defaults = ServerLimits()
    for name, value in vars(_ServerLimitDefaults).items():
        if not name.startswith("_"):
            assert getattr(defaults, name) == value, name
    bad_limits: tuple[dict[str, Any], ...] = (
        {"max_connections": 0}, {"max_total_queue_bytes": 0}, {"initialize_timeout": 0},
        {"claim_probe_timeout": -1}, {"max_subscriptions": 0}, {"stall_timeout": -1},
        {"compression": "gzip"})
    for bad in bad_limits:
        with pytest.raises(Exception, match=r"must|compression"):
            ServerLimits(**bad)
    host = Host(clock=lambda: 0)
    assert host.limits.max_subscriptions == 1024
