"""The WebSocket transport in-process, over real loopback sockets.

Each test runs an event loop of its own (``asyncio.run``) under a global
time bound, with a demo host listening on an ephemeral port of 127.0.0.1,
and drives it with sans-I/O clients over raw ``websockets`` connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

pytest.importorskip("websockets")

from websockets.asyncio.client import ClientConnection as WsClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.agent import AgentService
from agenthost_protocol.agent.hosting import ServeOptions, build_demo_server
from agenthost_protocol.aio import HostServer, ServerLimits, serve_websocket
from agenthost_protocol.aio.websocket import WebSocketServer
from agenthost_protocol.client import Reconnected, RequestFailed, ResponseReceived
from agenthost_protocol.host import Host

from ._aio_peer import ROOT, TIMEOUT, USER, Peer, rebind, ws_peer

SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/s1"
NOW = 1_767_225_600_000
_ISO = "2026-01-01T00:00:00.000Z"


def clock() -> int:
    # host and clients share it, so that reducer timestamps agree
    return NOW


def run(coro: Coroutine[Any, Any, None], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def demo_host(
    *, limits: ServerLimits | None = None, step_delay: float = 0.0, replay_window: int = 10_000,
) -> AsyncIterator[tuple[HostServer, WebSocketServer, AgentService]]:
    options = ServeOptions(port=0, step_delay=step_delay, replay_window=replay_window,
                           limits=limits if limits is not None else ServerLimits())
    server, service = build_demo_server(options, clock=clock)
    endpoint = await serve_websocket(server, "127.0.0.1", 0)
    try:
        yield server, endpoint, service
    finally:
        await service.close()
        await endpoint.close()


async def raw(url: str, **options: Any) -> WsClient:
    return await asyncio.wait_for(connect(url, max_size=None, **options), TIMEOUT)


async def recv_json(ws: WsClient) -> Any:
    return json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))


async def closed_with(ws: WsClient) -> tuple[int | None, str]:
    """Read until the connection closes; the close code and reason the server sent."""
    with contextlib.suppress(ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), TIMEOUT)
    await asyncio.wait_for(ws.wait_closed(), TIMEOUT)
    rcvd = ws.protocol.close_rcvd
    return (rcvd.code, rcvd.reason) if rcvd is not None else (None, "")


async def start_turn(peer: Peer, turn_id: str = "t1", text: str = "hello over a socket") -> None:
    await peer.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text=text, origin=USER),
    ))


def has_pending_call(state: t.SnapshotState) -> bool:
    assert isinstance(state, t.ChatState)
    turn = state.active_turn
    return turn is not None and any(
        isinstance(p, t.ToolCallResponsePart)
        and isinstance(p.tool_call, t.ToolCallPendingConfirmationState)
        for p in turn.response_parts
    )


def turns_done(n: int) -> Any:
    def done(state: t.SnapshotState) -> bool:
        assert isinstance(state, t.ChatState)
        return len(state.turns) >= n and state.active_turn is None
    return done


def approve(turn_id: str = "t1") -> t.ChatToolCallApprovedAction:
    return t.ChatToolCallApprovedAction(
        turn_id=turn_id, tool_call_id=f"{turn_id}.echo",
        confirmed=t.ToolCallConfirmationReason.USER_ACTION,
    )


async def joined(url: str, client_id: str, *, create: bool = False) -> tuple[Peer, WsClient]:
    peer, ws = await ws_peer(url, client_id, clock=clock)
    await peer.initialize([ROOT])
    if create:
        answer = await peer.request("createSession", t.CreateSessionParams(channel=SESSION))
        assert isinstance(answer, ResponseReceived), answer
    await peer.subscribe(SESSION)
    await peer.subscribe(CHAT)
    return peer, ws


def assert_matches_host(server: HostServer, *peers: Peer) -> None:
    for peer in peers:
        for channel in (ROOT, SESSION, CHAT):
            assert wire.dumps(peer.client.confirmed(channel)) == wire.dumps(
                server.host.state(channel)
            ), (peer.client.client_id, channel)


# -- what the official TypeScript client insists on ------------------------------------


def test_raw_framing_as_clients_expect() -> None:
    async def main() -> None:
        async with demo_host() as (_, endpoint, _service):
            ws = await raw(endpoint.url)
            # ping before initialize; the id echoed exactly; "result": null present
            await ws.send('{"jsonrpc":"2.0","id":"abc","method":"ping","params":{}}')
            assert await asyncio.wait_for(ws.recv(), TIMEOUT) == (
                '{"jsonrpc":"2.0","id":"abc","result":null}'
            )
            await ws.send('{"jsonrpc":"2.0","id":18446744073709551617,"method":"ping","params":{}}')
            assert (await recv_json(ws))["id"] == 18446744073709551617
            # clientInfo and capabilities are optional
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                      "params": {"protocolVersions": ["0.7.0"],
                                                 "clientId": "raw",
                                                 "initialSubscriptions": [ROOT]}}))
            init = await recv_json(ws)
            assert init["result"]["serverInfo"]["name"] == "agenthost-protocol"
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "listSessions",
                                      "params": {}}))
            assert (await recv_json(ws))["result"] == {"items": []}
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "createSession",
                                      "params": {"channel": SESSION}}))
            seen = []
            while True:
                msg = await recv_json(ws)
                seen.append(msg)
                if msg.get("method") == "action":
                    break
            assert seen[0] == {"jsonrpc": "2.0", "id": 3, "result": None}
            for msg in seen[1:]:
                assert msg["params"]["channel"] == ROOT  # every notification names its channel
            assert "origin" not in seen[-1]["params"]  # a server action has no origin
            await ws.close()

    run(main())


def test_a_new_client_instance_restarts_client_seq_on_a_new_connection() -> None:
    async def main() -> None:
        async with demo_host() as (server, endpoint, _service):
            first, ws1 = await joined(endpoint.url, "same-id", create=True)
            await first.dispatch(SESSION, t.SessionTitleChangedAction(title="one"))
            await first.until_state(SESSION, lambda s: isinstance(s, t.SessionState)
                                    and s.title == "one")
            await ws1.close()
            # a fresh ClientConnection with the same clientId starts at clientSeq 1 again
            second, ws2 = await joined(endpoint.url, "same-id")
            await second.dispatch(SESSION, t.SessionTitleChangedAction(title="two"))
            state = await second.until_state(
                SESSION, lambda s: isinstance(s, t.SessionState) and s.title == "two"
            )
            assert second.client.reconciler.pending(SESSION) == ()
            assert wire.dumps(state) == wire.dumps(server.host.state(SESSION))
            await ws2.close()

    run(main())


def test_reconnect_as_the_first_request_of_a_connection() -> None:
    async def main() -> None:
        async with demo_host() as (_, endpoint, _service):
            peer, ws = await joined(endpoint.url, "r1", create=True)
            await ws.close()
            peer.client.connection_lost()
            fresh, ws2 = await ws_peer(endpoint.url, "ignored")
            again = rebind(peer, fresh)
            await again.send(peer.client.reconnect())
            event = await again.until(lambda e: isinstance(e, (Reconnected, RequestFailed)))
            assert isinstance(event, Reconnected)
            listing = await again.request("listSessions", t.ListSessionsParams())
            assert isinstance(listing, ResponseReceived)
            await ws2.close()

    run(main())


# -- a turn over sockets ---------------------------------------------------------------


def test_two_clients_converge_with_the_host() -> None:
    async def main() -> None:
        async with demo_host(step_delay=0.001) as (server, endpoint, _service):
            alice, ws_a = await joined(endpoint.url, "alice", create=True)
            bob, ws_b = await joined(endpoint.url, "bob")
            await start_turn(alice)
            await bob.until_state(CHAT, has_pending_call)
            await bob.dispatch(CHAT, approve())
            for peer in (alice, bob):
                await peer.until_state(CHAT, turns_done(1))
            # the server has nothing in flight any more: a ping round trip flushes
            for peer in (alice, bob):
                assert isinstance(await peer.request("ping", t.PingParams()), ResponseReceived)
            assert_matches_host(server, alice, bob)
            for ws in (ws_a, ws_b):
                await ws.close()

    run(main())


@pytest.mark.parametrize("replay_window", [10_000, 4])
def test_a_killed_socket_reconnects(replay_window: int) -> None:
    """Mid-stream, one client's socket dies; it reconnects by replay or, past the window,
    by snapshots, and converges."""

    async def main() -> None:
        async with demo_host(step_delay=0.002, replay_window=replay_window) as (
            server, endpoint, _pacer
        ):
            alice, ws_a = await joined(endpoint.url, "alice", create=True)
            bob, ws_b = await joined(endpoint.url, "bob")
            await start_turn(alice)

            def streaming(state: t.SnapshotState) -> bool:
                assert isinstance(state, t.ChatState)
                turn = state.active_turn
                return turn is not None and any(
                    isinstance(p, t.MarkdownResponsePart) and p.content for p in
                    turn.response_parts
                )

            await alice.until_state(CHAT, streaming)
            ws_a.transport.abort()  # the socket dies mid-stream, no close frame
            alice.client.connection_lost()
            seen = bob.client.reconciler.last_seen_server_seq
            await bob.until_state(CHAT, has_pending_call)
            if replay_window < 10_000:
                assert bob.client.reconciler.last_seen_server_seq - seen > replay_window
            fresh, ws_a2 = await ws_peer(endpoint.url, "alice", clock=clock)
            alice = rebind(alice, fresh)
            await alice.send(alice.client.reconnect())
            event = await alice.until(lambda e: isinstance(e, (Reconnected, RequestFailed)))
            assert isinstance(event, Reconnected), event
            expected = (t.ReconnectResultType.REPLAY if replay_window == 10_000
                        else t.ReconnectResultType.SNAPSHOT)
            assert event.outcome.kind == expected
            await alice.until_state(CHAT, has_pending_call)
            await alice.dispatch(CHAT, approve())
            for peer in (alice, bob):
                await peer.until_state(CHAT, turns_done(1))
                assert isinstance(await peer.request("ping", t.PingParams()), ResponseReceived)
            assert_matches_host(server, alice, bob)
            await ws_b.close()
            await ws_a2.close()

    run(main())


# -- limits and bad input ----------------------------------------------------------------


def test_a_slow_consumer_is_disconnected_and_others_are_not() -> None:
    limits = ServerLimits(max_queue_messages=64, max_queue_bytes=512 * 1024, close_timeout=0.5)

    async def main() -> None:
        async with demo_host(limits=limits) as (server, endpoint, _service):
            bob, ws_b = await joined(endpoint.url, "bob", create=True)
            # _meta, not a title: the host cuts a long title (issue 29)
            blob = "x" * 64 * 1024
            server.host.dispatch(SESSION, t.SessionMetaChangedAction(meta={"blob": blob}))
            server.flush()
            await bob.until_state(SESSION, lambda s: isinstance(s, t.SessionState)
                                  and (s.meta or {}).get("blob") == blob)

            async def keep_reading() -> None:
                with contextlib.suppress(asyncio.CancelledError):
                    while True:
                        await bob.pump(TIMEOUT)

            reader = asyncio.create_task(keep_reading())
            # the slow client reads nothing (websockets stops reading its socket after a
            # frame) and asks again and again for a snapshot of 64 KiB
            slow = await raw(endpoint.url, max_queue=1)
            await slow.send(json.dumps({
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersions": ["0.7.0"], "clientId": "slow"},
            }))
            sent = 0
            with contextlib.suppress(ConnectionClosed):
                for request_id in range(1, 5001):
                    await slow.send(json.dumps({
                        "jsonrpc": "2.0", "id": request_id, "method": "subscribe",
                        "params": {"channel": SESSION},
                    }))
                    sent += 1
                    if server.connection_count == 1:
                        break
                    if request_id % 50 == 0:
                        await asyncio.sleep(0)
            deadline = asyncio.get_running_loop().time() + TIMEOUT
            while server.connection_count != 1:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            assert sent < 5000  # dropped long before: memory stayed bounded
            assert not reader.done()  # bob was never cut off
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            assert isinstance(await bob.request("ping", t.PingParams()), ResponseReceived)
            assert_matches_host(server, bob)
            slow.transport.abort()
            await ws_b.close()

    run(main(), timeout=60)


def test_an_oversize_message_closes_only_that_connection() -> None:
    async def main() -> None:
        async with demo_host(limits=ServerLimits(max_message_size=1024)) as (
            server, endpoint, _pacer
        ):
            bob, ws_b = await joined(endpoint.url, "bob", create=True)
            big = await raw(endpoint.url)
            await big.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping",
                                       "params": {"pad": "x" * 2000}}))
            code, reason = await closed_with(big)
            assert code == 1009 and "1024" in reason
            # the server and the other connection go on
            assert isinstance(await bob.request("ping", t.PingParams()), ResponseReceived)
            other = await raw(endpoint.url)
            await other.send('{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}')
            assert (await recv_json(other))["result"] is None
            assert server.connection_count == 2
            await other.close()
            await ws_b.close()

    run(main())


def test_malformed_frames() -> None:
    async def main() -> None:
        async with demo_host() as (server, endpoint, _service):
            ws = await raw(endpoint.url)
            # not JSON: -32700 with a null id; the connection stays
            await ws.send("{not json")
            answer = await recv_json(ws)
            assert answer["id"] is None and answer["error"]["code"] == -32700
            # JSON but not JSON-RPC: -32600
            for text in ("[1, 2]", '{"hello": "world"}', "42"):
                await ws.send(text)
                answer = await recv_json(ws)
                assert answer["error"]["code"] == -32600, text
            await ws.send('{"jsonrpc":"2.0","id":9,"method":"ping","params":{}}')
            assert (await recv_json(ws)) == {"jsonrpc": "2.0", "id": 9, "result": None}
            # a binary frame: closed with 1003, a reason, and nothing else
            await ws.send(b'{"jsonrpc":"2.0","id":10,"method":"ping"}')
            code, reason = await closed_with(ws)
            assert code == 1003 and "binary" in reason
            deadline = asyncio.get_running_loop().time() + TIMEOUT
            while server.connection_count:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)

    run(main())


def test_a_failed_negotiation_closes_after_the_answer() -> None:
    async def main() -> None:
        async with demo_host() as (_, endpoint, _service):
            ws = await raw(endpoint.url)
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                      "params": {"protocolVersions": ["99.0.0"],
                                                 "clientId": "future"}}))
            answer = await recv_json(ws)
            assert answer["error"]["code"] == -32005
            code, _ = await closed_with(ws)
            assert code == 1000

    run(main())


def test_shutdown_flushes_then_closes_with_1001() -> None:
    async def main() -> None:
        options = ServeOptions(port=0, step_delay=0.0)
        server, service = build_demo_server(options, clock=clock)
        endpoint = await serve_websocket(server, "127.0.0.1", 0)
        url = endpoint.url
        try:
            peer, ws = await joined(url, "alice", create=True)
            await ws.send('{"jsonrpc":"2.0","id":"last","method":"ping","params":{}}')
            await asyncio.sleep(0.05)
        finally:
            await service.close()
            await endpoint.close()
        code, reason = await closed_with(ws)
        assert code == 1001 and "shutting down" in reason
        assert server.connection_count == 0
        assert peer.client.pending_requests == {}
        with pytest.raises((OSError, asyncio.TimeoutError)):
            await raw(url)

    run(main())


@pytest.mark.parametrize(("setting", "negotiated"), [
    ("auto", False), ("none", False), ("deflate", True),
])
def test_compression_is_configurable_and_off_on_loopback_by_default(
    setting: str, negotiated: bool,
) -> None:
    from websockets.asyncio.client import connect as ws_connect

    from agenthost_protocol.aio.server import HostServer, ServerLimits
    from agenthost_protocol.aio.websocket import serve_websocket
    from agenthost_protocol.host import Host

    async def main() -> None:
        server = HostServer(Host(clock=lambda: 0),
                            limits=ServerLimits(compression=setting))  # type: ignore[arg-type]
        endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None)
        try:
            # the client offers permessage-deflate, as browsers and websockets do
            async with ws_connect(endpoint.url) as ws:
                assert bool(ws.protocol.extensions) is negotiated
        finally:
            await endpoint.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_subscription_with_a_delivery_window_gets_deltas_merged_over_a_socket() -> None:
    # the host's clock stands still (``clock``): the server's own timer releases them
    async def main() -> None:
        host = Host(clock=clock, root=t.RootState(agents=()))
        host.add_channel(CHAT, t.ChatState(
            resource=CHAT, title="c", status=t.SessionStatus.IDLE, modified_at=_ISO,
            turns=()))
        host.dispatch(CHAT, t.ChatTurnStartedAction(
            turn_id="t1", started_at=_ISO, message=t.Message(text="hi", origin=USER)))
        host.dispatch(CHAT, t.ChatResponsePartAction(
            turn_id="t1", part=t.MarkdownResponsePart(id="md", content="")))
        server = HostServer(host)
        endpoint = await serve_websocket(server, "127.0.0.1", 0)
        try:
            windowed, plain = await raw(endpoint.url), await raw(endpoint.url)
            for n, ws in enumerate((windowed, plain)):
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                          "params": {"protocolVersions": ["0.7.0"],
                                                     "clientId": f"c{n}"}}))
                await recv_json(ws)
                delivery = {"delivery": {"maxLatencyMs": 30}} if ws is windowed else {}
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "subscribe",
                                          "params": {"channel": CHAT, **delivery}}))
                assert "snapshot" in (await recv_json(ws))["result"]
            words = [f"w{n} " for n in range(50)]
            for word in words:
                host.dispatch(CHAT, t.ChatDeltaAction(turn_id="t1", part_id="md",
                                                      content=word))
                server.flush()
                await asyncio.sleep(0.001)
            host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id="t1", duration=1))
            server.flush()
            for ws, most in ((windowed, 25), (plain, 51)):
                texts: list[str] = []
                while True:
                    params = (await recv_json(ws))["params"]
                    if params["action"]["type"] == "chat/turnComplete":
                        break
                    texts.append(params["action"]["content"])
                assert "".join(texts) == "".join(words)
                assert len(texts) <= most
            assert host.next_delivery() is None
            for ws in (windowed, plain):
                await ws.close()
        finally:
            await endpoint.close()

    run(main())
