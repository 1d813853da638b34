"""What ``agenthost-protocol serve`` logs, read from real ``serve`` processes on real sockets.

At ``info``: sessions, turns (outcome, duration), tool calls and their statuses, input
requests, connections; at ``debug``: every action's type and channel too.  Never what a
user or an agent wrote, never the access token, at any level, the websockets library's
own lines (request line, headers, frames) included.  Every process is bounded in time
and killed on the way out (``_aio_peer.spawn``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.aio import ConnectError, connect

from ._aio_peer import TIMEOUT, child_env, serving, stop
from .asking_agent import QUESTION

pytest.importorskip("websockets")

TOKEN = "LogTok-" + "k9Zq" * 8
WRONG = "WrongTok-" + "p3Xv" * 8
MESSAGE = "Please echo the secret-heron-lake phrase"
USER = t.MessageOrigin(kind=t.MessageKind.USER)


def run(coro: Coroutine[Any, Any, None], timeout: float = 90.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


def token_file(tmp_path: Path) -> str:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n", encoding="utf-8")
    return str(path)


def base_url(url: str) -> str:
    return url.split("?", 1)[0].rstrip("/")


async def chat(url: str, *args: str) -> tuple[int, str]:
    """``agenthost-protocol chat URL ARGS``, bounded; its exit status and output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthost_protocol.cli", "chat", url, *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env=child_env())
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await asyncio.wait_for(proc.wait(), TIMEOUT)
    assert proc.returncode is not None
    return proc.returncode, out.decode("utf-8", "replace")


def messages(err: Path) -> list[str]:
    """The log's lines without their time stamps: ``LEVEL LOGGER: MESSAGE``."""
    return [line.split(" ", 2)[2] for line in err.read_text("utf-8").splitlines()
            if line[:2] == "20"]


def find(lines: Sequence[str], pattern: str) -> list[re.Match[str]]:
    found = [m for m in map(re.compile(pattern).fullmatch, lines) if m is not None]
    assert found, f"no line matches {pattern!r} in:\n" + "\n".join(lines)
    return found


def test_info_tells_a_demo_turn_and_its_tool_call_without_its_text(tmp_path: Path) -> None:
    err = tmp_path / "serve.err"

    async def main() -> None:
        async with serving(["--no-store", "--log-level", "info", "--step-delay", "0",
                            "--token-file", token_file(tmp_path)], err) as (proc, url):
            status, out = await chat(url, "--yes", MESSAGE)
            assert status == 0, out
            # the token in the Authorization header this time
            async with connect(base_url(url), token=TOKEN, reconnect=False) as client:
                await client.initialize()
                listed = await client.list_sessions()
                (summary,) = listed.items
                await client.dispose_session(summary.resource)
            assert await stop(proc) == 0

    run(main())
    lines = messages(err)
    act = "INFO agenthost_protocol.aio.activity: "
    srv = "INFO agenthost_protocol.aio.server: "
    opened = find(lines, srv + r"connection #(\d+): open from 127\.0\.0\.1:\d+")
    assert len(opened) == 2
    client_id = find(lines, srv + r"connection #1: client (\S+) initialized "
                     r"\(protocol 0\.7\.0\)")[0][1]
    session = find(lines, act + r"session (ahp-session:/\S+): created \(provider demo\)")[0][1]
    s = re.escape(session)
    turn = find(lines, act + rf"session {s}: turn (\S+) started by client "
                + re.escape(client_id))[0][1]
    where = rf"session {s} turn {re.escape(turn)}: tool call \S+ "
    find(lines, act + where + r"started \(tool echo\)")
    find(lines, act + where + "needs confirmation")
    find(lines, act + where + r"approved \(\S+\), running")
    find(lines, act + where + "completed")
    find(lines, act + rf"session {s}: turn {re.escape(turn)} ended: completed after "
         r"\d+\.\d\d s")
    find(lines, act + rf"session {s}: disposed")
    find(lines, srv + rf"connection #1 \(client {re.escape(client_id)}\): closed \(.*\)")
    find(lines, srv + r"connection #2 \(client \S+\): closed \(.*\)")
    # in the order it happened
    order = [next(i for i, line in enumerate(lines) if key in line) for key in (
        "connection #1: open", "created (provider", "started by client", "needs confirmation",
        "ended: completed", "disposed", "connection #2 (client")]
    assert order == sorted(order)
    text = err.read_text("utf-8")
    assert "secret-heron-lake" not in text and TOKEN not in text
    assert not [line for line in lines if line.startswith("DEBUG")]


def test_info_tells_an_input_request_without_its_question(tmp_path: Path) -> None:
    err = tmp_path / "serve.err"
    session, chat_uri = "ahp-session:/asked", "ahp-chat:/asked"

    def answered(state: t.SnapshotState) -> bool:
        assert isinstance(state, t.ChatState)
        return state.active_turn is None and len(state.turns) == 1

    def asked(state: t.SnapshotState) -> bool:
        return "t1.ask1" in json.dumps(wire.dump(state))

    async def main() -> None:
        async with serving(["--no-store", "--log-level", "info", "--agent",
                            "tests.asking_agent:agent", "--token-file", token_file(tmp_path)],
                           err) as (proc, url):
            async with connect(url, reconnect=False) as client:
                await client.initialize()
                await client.create_session(session)
                await client.subscribe(session)
                await client.wait_for_state(session, lambda s: isinstance(s, t.SessionState)
                                            and s.lifecycle == t.SessionLifecycle.READY,
                                            timeout=TIMEOUT)
                await client.subscribe(chat_uri)
                await client.dispatch(chat_uri, t.ChatTurnStartedAction(
                    turn_id="t1", started_at="2026-01-01T00:00:00.000Z",
                    message=t.Message(text=MESSAGE, origin=USER)))
                await client.wait_for_state(chat_uri, asked, timeout=TIMEOUT)
                await client.dispatch(chat_uri, t.ChatInputCompletedAction(
                    request_id="t1.ask1", response=t.ChatInputResponseKind.DECLINE))
                await client.wait_for_state(chat_uri, answered, confirmed=True,
                                            timeout=TIMEOUT)
                await client.dispose_session(session)
            assert await stop(proc) == 0

    run(main())
    lines = messages(err)
    act = "INFO agenthost_protocol.aio.activity: "
    find(lines, act + rf"session {session}: created \(provider asking\)")
    find(lines, act + rf"session {session}: turn t1 started by client \S+")
    find(lines, act + rf"session {session} turn t1: input request t1\.ask1 asked "
         r"\(1 question\)")
    find(lines, act + rf"session {session} turn t1: input request t1\.ask1 declined")
    find(lines, act + rf"session {session}: turn t1 ended: completed after \d+\.\d\d s")
    find(lines, act + rf"session {session}: disposed")
    text = err.read_text("utf-8")
    assert "private-owl-phrase" not in text and QUESTION not in text
    assert "secret-heron-lake" not in text and "you chose" not in text


async def handshake(url: str, headers: dict[str, str] | None = None) -> str:
    """A bare websockets handshake; ``"open"`` or the HTTP status it was refused with."""
    from websockets.asyncio.client import connect as ws_connect
    from websockets.exceptions import InvalidStatus

    try:
        async with ws_connect(url, additional_headers=headers, open_timeout=TIMEOUT):
            return "open"
    except InvalidStatus as e:
        return str(e.response.status_code)


def test_debug_shows_action_types_and_never_the_token(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    err = tmp_path / "serve.err"
    # the library's client logs at debug too (the websockets client lines included)
    caplog.set_level(logging.DEBUG, logger="websockets.client")
    caplog.set_level(logging.DEBUG, logger="agenthost_protocol")

    async def main() -> None:
        async with serving(["--no-store", "--log-level", "debug", "--step-delay", "0",
                            "--token-file", token_file(tmp_path)], err) as (proc, url):
            base = base_url(url)
            # the token in the URL as ?token= (what serve printed), through chat, whose own
            # log (websockets' client lines included) shows no token either
            status, out = await chat(url, "--yes", "--log-level", "debug", MESSAGE)
            assert status == 0, out
            # the token travels in the URL or (once the client moves it) in the header
            assert ("> GET /?token=REDACTED HTTP/1.1" in out
                    or "> Authorization: Bearer REDACTED" in out), out
            assert TOKEN not in out
            # as ?tkn=, as a bare header, then wrong in each place
            tkn = await handshake(f"{base}/?tkn={TOKEN}")
            assert tkn in ("open", "401")  # accepted once the host takes ?tkn=
            assert await handshake(base, {"Authorization": f"Bearer {TOKEN}"}) == "open"
            assert await handshake(f"{base}/?token={WRONG}") == "401"
            assert await handshake(f"{base}/?tkn={WRONG}") == "401"
            assert await handshake(base, {"Authorization": f"Bearer {WRONG}"}) == "401"
            # the library's client: the header, the query, a refused one
            async with connect(base, token=TOKEN, reconnect=False) as client:
                await client.ping()
            async with connect(url, reconnect=False) as client:
                await client.ping()
            with pytest.raises(ConnectError) as refused:
                await connect(f"{base}/?tkn={WRONG}", reconnect=False)
            assert WRONG not in str(refused.value)
            assert await stop(proc) == 0

    run(main())
    text = err.read_text("utf-8")
    lines = messages(err)
    for secret in (TOKEN, WRONG):
        assert secret not in text
    # websockets' own lines are there, their secrets redacted
    ws = "DEBUG websockets.server.agenthost_protocol: "
    find(lines, ws + r"< GET /\?token=REDACTED HTTP/1\.1")
    find(lines, ws + r"< GET /\?tkn=REDACTED HTTP/1\.1")
    find(lines, ws + r"< Authorization: Bearer REDACTED")
    # every action's type and channel, never its text
    act = "DEBUG agenthost_protocol.aio.activity: "
    find(lines, act + r"session ahp-session:/\S+: action chat/turnStarted "
         r"\(serverSeq \d+, by client \S+\)")
    find(lines, act + r"session ahp-session:/\S+: action chat/delta \(serverSeq \d+, by the host\)")
    find(lines, act + r"root: action root/activeSessionsChanged \(serverSeq \d+, by the host\)")
    assert "secret-heron-lake" not in text
    # the data frames websockets logs at debug show their size, not their payload
    find(lines, ws + r"[<>] TEXT \[\d+ bytes\]")
    # the library's lines (the bare handshakes above log through websockets' own logger)
    client_lines = [r.getMessage() for r in caplog.records if r.name != "websockets.client"]
    # the request line or the Authorization header (wherever the client puts the token)
    # shows it redacted, in each of the three handshakes
    shown_redacted = [line for line in client_lines if line.startswith((
        "> GET /?token=REDACTED", "> GET /?tkn=REDACTED", "> Authorization: Bearer REDACTED"))]
    assert len(shown_redacted) >= 3, client_lines
    assert not [line for line in client_lines if TOKEN in line or WRONG in line]


def test_stdio_logs_the_same_activity(tmp_path: Path) -> None:
    """Another transport, the same lines: the host core tells the log, not the transport."""
    from ._aio_peer import spawn, stdio_peer

    err = tmp_path / "serve.err"

    async def main() -> None:
        async with spawn(["--stdio", "--no-store", "--log-level", "info", "--step-delay", "0"],
                         err, stdin=asyncio.subprocess.PIPE) as proc:
            peer = stdio_peer(proc, "stdio-client")
            await peer.initialize()
            await peer.request("createSession", t.CreateSessionParams(
                channel="ahp-session:/piped"))
            await peer.request("disposeSession", t.DisposeSessionParams(
                channel="ahp-session:/piped"))
            assert proc.stdin is not None
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), TIMEOUT)

    run(main())
    lines = messages(err)
    find(lines, r"INFO agenthost_protocol\.aio\.server: connection #1: open from stdio")
    find(lines, r"INFO agenthost_protocol\.aio\.server: connection #1: client stdio-client "
         r"initialized \(protocol 0\.7\.0\)")
    find(lines, r"INFO agenthost_protocol\.aio\.activity: session ahp-session:/piped: created "
         r"\(provider demo\)")
    find(lines, r"INFO agenthost_protocol\.aio\.activity: session ahp-session:/piped: disposed")


def test_a_hostile_client_cannot_forge_or_flood_a_line(tmp_path: Path) -> None:
    err = tmp_path / "serve.err"
    forged = "\nINFO agenthost_protocol.aio.activity: session forged\x1b[31m"
    session, chat_uri = "ahp-session:/hostile", "ahp-chat:/hostile"

    def ended(state: t.SnapshotState) -> bool:
        assert isinstance(state, t.ChatState)
        return state.active_turn is None and len(state.turns) == 1

    async def main() -> None:
        async with serving(["--no-store", "--log-level", "info", "--step-delay", "0",
                            "--token-file", token_file(tmp_path)], err) as (proc, url):
            async with connect(url, reconnect=False, client_id="evil" + forged) as client:
                await client.initialize()
                await client.create_session(session)
                await client.subscribe(session)
                await client.wait_for_state(session, lambda s: isinstance(s, t.SessionState)
                                            and s.lifecycle == t.SessionLifecycle.READY,
                                            timeout=TIMEOUT)
                await client.subscribe(chat_uri)
                turn = "t" + forged + "x" * 5000
                await client.dispatch(chat_uri, t.ChatTurnStartedAction(
                    turn_id=turn, started_at="2026-01-01T00:00:00.000Z",
                    message=t.Message(text=MESSAGE, origin=USER)))
                await client.wait_for_state(chat_uri, lambda s: isinstance(s, t.ChatState)
                                            and s.active_turn is not None, timeout=TIMEOUT)
                await client.dispatch(chat_uri, t.ChatTurnCancelledAction(turn_id=turn,
                                                                          duration=0))
                await client.wait_for_state(chat_uri, ended, confirmed=True, timeout=TIMEOUT)
            assert await stop(proc) == 0

    run(main())
    text = err.read_text("utf-8")
    assert "\x1b" not in text
    assert not [line for line in text.splitlines() if "session forged" in line
                and not line.startswith("20")]
    assert max(map(len, text.splitlines())) < 1000
    lines = messages(err)
    started = find(lines, r"INFO agenthost_protocol\.aio\.activity: session "
                   rf"{session}: turn '(.*)'\.\.\. started by client '(.*)'")
    assert "\\n" in started[0][1] and "\\x1b" in started[0][2]
    find(lines, rf"INFO agenthost_protocol\.aio\.activity: session {session}: turn '.*'\.\.\. "
         r"ended: cancelled after \d+\.\d\d s")
