"""``agenthost-protocol serve`` end to end: a subprocess, real sockets and pipes, real clients.

Every test is bounded in time and kills its subprocess on the way out,
whatever happens (``_aio_peer.spawn``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.client import (
    Initialized,
    NotificationReceived,
    Reconnected,
    RequestFailed,
    ResponseReceived,
)

from ._aio_peer import (
    ROOT,
    TIMEOUT,
    USER,
    Peer,
    child_env,
    rebind,
    serve_command,
    serving,
    spawn,
    stdio_peer,
    stop,
    without_clock,
    ws_peer,
)

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection as WsClient

SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/s1"
TEXT = "Echo this, please."

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX signals")


def run(coro: Coroutine[Any, Any, None], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


def turn_started(turn_id: str = "t1", text: str = TEXT) -> t.ChatTurnStartedAction:
    return t.ChatTurnStartedAction(turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
                                   message=t.Message(text=text, origin=USER))


def approve(turn_id: str = "t1") -> t.ChatToolCallApprovedAction:
    return t.ChatToolCallApprovedAction(
        turn_id=turn_id, tool_call_id=f"{turn_id}.echo",
        confirmed=t.ToolCallConfirmationReason.USER_ACTION,
    )


def pending_call(state: t.SnapshotState) -> bool:
    assert isinstance(state, t.ChatState)
    turn = state.active_turn
    return turn is not None and any(
        isinstance(p, t.ToolCallResponsePart)
        and isinstance(p.tool_call, t.ToolCallPendingConfirmationState)
        for p in turn.response_parts
    )


def streaming(state: t.SnapshotState) -> bool:
    assert isinstance(state, t.ChatState)
    turn = state.active_turn
    return turn is not None and any(
        isinstance(p, t.MarkdownResponsePart) and p.content for p in turn.response_parts
    )


def finished(state: t.SnapshotState) -> bool:
    assert isinstance(state, t.ChatState)
    return state.active_turn is None and len(state.turns) == 1


async def join(peer: Peer, *, create: bool) -> None:
    await peer.initialize([ROOT])
    if create:
        answer = await peer.request("createSession", t.CreateSessionParams(channel=SESSION))
        assert isinstance(answer, ResponseReceived), answer
    await peer.subscribe(SESSION)
    await peer.subscribe(CHAT)


async def ws(url: str, client_id: str) -> tuple[Peer, WsClient]:
    return await ws_peer(url, client_id)


def assert_same(a: Peer, b: Peer) -> None:
    for channel in (ROOT, SESSION, CHAT):
        assert without_clock(a.client.confirmed(channel)) == without_clock(
            b.client.confirmed(channel)
        ), channel


def completed_turn(peer: Peer) -> t.Turn:
    chat = peer.client.confirmed(CHAT)
    assert isinstance(chat, t.ChatState)
    (turn,) = chat.turns
    return turn


# -- WebSocket ---------------------------------------------------------------------------


@posix_only
def test_two_clients_on_one_chat_converge_then_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("websockets")

    async def main() -> None:
        async with serving(["--step-delay", "0.002"], tmp_path / "serve.err") as (proc, url):
            alice, ws_a = await ws(url, "alice")
            bob, ws_b = await ws(url, "bob")
            await join(alice, create=True)
            await join(bob, create=False)
            await alice.dispatch(CHAT, turn_started())
            await bob.until_state(CHAT, pending_call)
            await bob.dispatch(CHAT, approve())
            for peer in (alice, bob):
                await peer.until_state(CHAT, finished)
                assert isinstance(await peer.request("ping", t.PingParams()), ResponseReceived)
            assert_same(alice, bob)
            turn = completed_turn(alice)
            assert turn.state == t.TurnState.COMPLETE and (turn.duration or 0) > 0
            listing = await bob.request("listSessions", t.ListSessionsParams())
            assert isinstance(listing, ResponseReceived)
            assert isinstance(listing.result, t.ListSessionsResult)
            assert [s.title for s in listing.result.items] == [TEXT]
            assert await stop(proc) == 0
            for conn in (ws_a, ws_b):
                await asyncio.wait_for(conn.wait_closed(), TIMEOUT)
                rcvd = conn.protocol.close_rcvd
                assert rcvd is not None and rcvd.code == 1001
        log = (tmp_path / "serve.err").read_text()
        assert "SIGTERM" in log and "Traceback" not in log

    run(main())


@posix_only
@pytest.mark.parametrize(("window", "kind"), [
    ("10000", t.ReconnectResultType.REPLAY), ("4", t.ReconnectResultType.SNAPSHOT),
])
def test_a_client_killed_mid_stream_reconnects(
    tmp_path: Path, window: str, kind: t.ReconnectResultType
) -> None:
    pytest.importorskip("websockets")

    async def main() -> None:
        async with serving(["--step-delay", "0.005", "--replay-window", window],
                           tmp_path / "serve.err") as (proc, url):
            alice, ws_a = await ws(url, "alice")
            bob, _ = await ws(url, "bob")
            await join(alice, create=True)
            await join(bob, create=False)
            await alice.dispatch(CHAT, turn_started())
            await alice.until_state(CHAT, streaming)
            ws_a.transport.abort()
            alice.client.connection_lost()
            if kind is t.ReconnectResultType.SNAPSHOT:
                # let more actions pass than the replay window holds
                await bob.until_state(CHAT, pending_call)
            fresh, _ = await ws(url, "alice")
            alice = rebind(alice, fresh)
            await alice.send(alice.client.reconnect())
            event = await alice.until(lambda e: isinstance(e, (Reconnected, RequestFailed)))
            assert isinstance(event, Reconnected) and event.outcome.kind == kind
            await alice.until_state(CHAT, pending_call)
            await alice.dispatch(CHAT, approve())
            for peer in (alice, bob):
                await peer.until_state(CHAT, finished)
                assert isinstance(await peer.request("ping", t.PingParams()), ResponseReceived)
            assert_same(alice, bob)
            assert await stop(proc) == 0

    run(main())


@posix_only
def test_sigint_with_no_client_exits_0(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving([], tmp_path / "serve.err") as (proc, _url):
            assert await stop(proc, signal.SIGINT) == 0

    run(main())


def test_missing_websockets_is_a_clear_error(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['websockets'] = None; "
            "from agenthost_protocol.cli import main; sys.exit(main(['serve', '--port', '0']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=child_env(),
                          timeout=TIMEOUT, check=False)
    assert done.returncode == 1
    assert done.stdout == b""
    assert b"agenthost-protocol[ws]" in done.stderr


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("websockets")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(serve_command("--port", str(port)), capture_output=True,
                              env=child_env(), timeout=TIMEOUT, check=False)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}".encode() in done.stderr


def test_the_pure_package_imports_no_transport() -> None:
    code = (
        "import sys\n"
        "import agenthost_protocol, agenthost_protocol.host, agenthost_protocol.client\n"
        "import agenthost_protocol.cli\n"
        "assert 'websockets' not in sys.modules, 'websockets'\n"
        "assert 'asyncio' not in sys.modules, 'asyncio'\n"
        "assert not any(m.startswith('agenthost_protocol.aio') for m in sys.modules)\n"
        "import agenthost_protocol.aio\n"
        "assert 'websockets' not in sys.modules, 'aio imports websockets'\n"
        # the built-in agents are written on the agent layer (asyncio), not on a transport
        "import agenthost_protocol.agent.demo\n"
        "assert 'websockets' not in sys.modules, 'the agents import websockets'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=child_env(),
                          timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr.decode()


# -- stdio -----------------------------------------------------------------------------


def test_stdio_end_to_end(tmp_path: Path) -> None:
    async def main() -> None:
        async with spawn(["--stdio", "--step-delay", "0"], tmp_path / "serve.err",
                         stdin=asyncio.subprocess.PIPE) as proc:
            peer = stdio_peer(proc, "stdio-client")
            # ping before initialize
            assert isinstance(await peer.request("ping", t.PingParams()), ResponseReceived)
            await join(peer, create=True)
            await peer.dispatch(CHAT, turn_started())
            await peer.until_state(CHAT, pending_call)
            await peer.dispatch(CHAT, approve())
            await peer.until_state(CHAT, finished)
            turn = completed_turn(peer)
            assert turn.state == t.TurnState.COMPLETE
            notes = [e for e in peer.backlog if isinstance(e, NotificationReceived)]
            assert all(n.params.channel == ROOT for n in notes)
            # the end of the input ends the connection, after what is queued was written
            ping_id, data = peer.client.request("ping", t.PingParams())
            await peer.send(data)
            assert proc.stdin is not None
            proc.stdin.close()
            answer = await peer.answer(ping_id)
            assert isinstance(answer, ResponseReceived)
            assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0
            assert proc.stdout is not None
            assert await proc.stdout.read() == b""
        assert "Traceback" not in (tmp_path / "serve.err").read_text()

    run(main())


@posix_only
def test_stdio_sigterm(tmp_path: Path) -> None:
    async def main() -> None:
        async with spawn(["--stdio"], tmp_path / "serve.err",
                         stdin=asyncio.subprocess.PIPE) as proc:
            peer = stdio_peer(proc, "c")
            event = await peer.initialize([ROOT])
            assert isinstance(event, Initialized)
            assert await stop(proc) == 0
            assert proc.stdout is not None
            assert await proc.stdout.read() == b""

    run(main())


def test_stdio_oversize_line_and_malformed_lines(tmp_path: Path) -> None:
    async def main() -> None:
        async with spawn(["--stdio", "--max-message-size", "1000"], tmp_path / "serve.err",
                         stdin=asyncio.subprocess.PIPE) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b"{not json\n\n   \n[1]\r\n")
            await proc.stdin.drain()
            first = json.loads(await asyncio.wait_for(proc.stdout.readline(), TIMEOUT))
            second = json.loads(await asyncio.wait_for(proc.stdout.readline(), TIMEOUT))
            assert (first["error"]["code"], second["error"]["code"]) == (-32700, -32600)
            proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"'
                             + b"x" * 2000 + b'"}}\n')
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
            refusal = json.loads(await asyncio.wait_for(proc.stdout.readline(), TIMEOUT))
            assert refusal["id"] is None and refusal["error"]["code"] == -32600
            assert "1000 bytes" in refusal["error"]["message"]
            assert await asyncio.wait_for(proc.stdout.read(), TIMEOUT) == b""
            assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0

    run(main())


def test_stdio_from_a_regular_file(tmp_path: Path) -> None:
    script = tmp_path / "in.jsonl"
    script.write_text(
        '{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}\n'
        '{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersions":["0.7.0"],'
        '"clientId":"file"}}\n'
        '{"jsonrpc":"2.0","id":3,"method":"listSessions","params":{}}'  # no final newline
    )
    out = tmp_path / "out.jsonl"
    with open(script, "rb") as stdin, open(out, "wb") as stdout:
        done = subprocess.run(serve_command("--stdio", "--log-level", "warning"), stdin=stdin,
                              stdout=stdout, stderr=subprocess.PIPE, env=child_env(),
                              timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr.decode()
    answers = [json.loads(line) for line in out.read_text().splitlines()]
    assert [a["id"] for a in answers] == [1, 2, 3]
    assert answers[0]["result"] is None and answers[2]["result"] == {"items": []}
