"""``agenthost-protocol sessions``: list, show and rm against a real ``serve``.

``serve`` (the demo agent, its own store file) and the command run as
subprocesses on real loopback sockets; every process is bounded in time and
killed on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.aio.client import AsyncClient, connect
from agenthost_protocol.cli import main

from ._aio_peer import REPO, TIMEOUT, child_env, serving, stop

pytest.importorskip("websockets")

ROOT = "ahp-root://"
USER = t.MessageOrigin(kind=t.MessageKind.USER)
HOSTILE = "\x1b]0;pwned\x07evil\ttab\nnew line\u202eeliforp\x9b2J"


def run(coro: Coroutine[Any, Any, None], timeout: float = 120.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


async def cli(*args: str, timeout: float = TIMEOUT, env: dict[str, str] | None = None
              ) -> tuple[int, str, str]:
    """``agenthost-protocol ARGS`` in a subprocess: its status, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthost_protocol.cli", *args, cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env if env is not None else child_env())
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def demo(tmp_path: Path) -> AsyncIterator[tuple[str, AsyncClient]]:
    """``serve`` with the demo on a store of its own, and a client of it."""
    async with serving(["--store", str(tmp_path / "demo.sqlite3"), "--step-delay", "0"],
                       tmp_path / "serve.err") as (proc, url):
        async with connect(url, reconnect=False, request_timeout=TIMEOUT) as client:
            await client.initialize([ROOT])
            yield url, client
        assert await stop(proc) == 0
    assert "Traceback" not in (tmp_path / "serve.err").read_text()


async def new_session(client: AsyncClient, name: str, *, title: str | None = None,
                      turns: int = 0) -> str:
    session = await client.create_session(f"ahp-session:/{name}")
    await add_turns(client, session, turns)
    if title is not None:
        await set_title(client, session, title)
    return session


async def add_turns(client: AsyncClient, session: str, count: int,
                    text: str = "hello {n}\nsecond line") -> None:
    """``count`` more turns in ``session``'s default chat, each cancelled once the demo
    is under way (it would wait for a confirmation)."""
    if not client.is_tracked(session):
        await client.subscribe(session)
    state = client.confirmed(session)
    assert isinstance(state, t.SessionState) and state.default_chat is not None
    chat = state.default_chat
    if not client.is_tracked(chat):
        await client.subscribe(chat)
    snapshot = client.confirmed(chat)
    assert isinstance(snapshot, t.ChatState)
    first = len(snapshot.turns)
    for n in range(first, first + count):
        turn_id = f"t{n}"
        await client.dispatch(chat, t.ChatTurnStartedAction(
            turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=text.format(n=n), origin=USER)))
        await client.wait_for_state(
            chat, lambda s: isinstance(s, t.ChatState) and s.active_turn is not None
            and len(s.active_turn.response_parts) > 0, confirmed=True, timeout=TIMEOUT)
        await client.dispatch(chat, t.ChatTurnCancelledAction(turn_id=turn_id, duration=0))
        await client.wait_for_state(chat, ended_turns(n + 1), confirmed=True,
                                    timeout=TIMEOUT)
    await asyncio.sleep(0.01)  # a later modifiedAt than anything before


def ended_turns(count: int) -> Callable[[t.SnapshotState], bool]:
    def ended(state: t.SnapshotState) -> bool:
        return (isinstance(state, t.ChatState) and state.active_turn is None
                and len(state.turns) == count)

    return ended


async def set_title(client: AsyncClient, session: str, title: str) -> None:
    handle = await client.dispatch(session, t.SessionTitleChangedAction(title=title))
    await handle.wait()
    await asyncio.sleep(0.01)  # a later modifiedAt than anything before


def columns(out: str) -> list[list[str]]:
    lines = out.splitlines()
    rows = [line.split("\t") for line in lines]
    assert all(len(row) == 6 for row in rows), lines
    return rows


def test_list_is_newest_first_paged_with_turns_and_hostile_titles_safe(tmp_path: Path) -> None:
    async def main() -> None:
        async with demo(tmp_path) as (url, client):
            one = await new_session(client, "s-one", title="one", turns=1)
            two = await new_session(client, "s-two", title=HOSTILE)
            three = await new_session(client, "s-three", title="x" * 5000, turns=1)
            await set_title(client, one, "one again")
            await add_turns(client, one, 1)  # now the most recently changed
            for page in (["--page-size", "1"], ["--page-size", "2"], []):
                status, out, err = await cli("sessions", url, *page)
                assert (status, err) == (0, ""), err
                rows = columns(out)
                assert [r[0] for r in rows] == [one, three, two], out
                assert [r[3] for r in rows] == ["2", "1", "0"]
                assert {r[4] for r in rows} == {"demo"}
                assert [r[2] for r in rows] == ["idle", "idle", "idle"]
                assert rows[0][1] > rows[1][1] > rows[2][1]  # ISO 8601: sorts as text
                assert rows[0][5] == "one again"
                assert len(rows[1][5]) == 200
            # the hostile title: one line, one column, nothing a terminal acts on
            hostile = rows[2][5]
            for raw in ("\x1b", "\x07", "\u202e", "\x9b", "\r"):
                assert raw not in out
            assert out.count("\n") == 3 and out.count("\t") == 3 * 5
            assert hostile == "\\x1b]0;pwned\\x07evil tab new line\\u202eeliforp\\x9b2J"

            status, out, err = await cli("sessions", "list", url, "--json", "--page-size", "2")
            assert status == 0, err
            records = [json.loads(line) for line in out.splitlines()]
            assert [r["session"] for r in records] == [one, three, two]
            assert records[2]["title"] == HOSTILE and out.isascii()
            assert [r["turns"] for r in records] == [2, 1, 0]

            status, out, err = await cli("sessions", url, "--limit", "1", "--no-turns")
            assert status == 0, err
            assert [r[0] for r in columns(out)] == [one] and columns(out)[0][3] == "-"

    run(main())


def test_show_prints_the_default_chat_and_rm_disposes(tmp_path: Path) -> None:
    async def main() -> None:
        async with demo(tmp_path) as (url, client):
            shown = await new_session(client, "abcdef-1", turns=2)
            other = await new_session(client, "abcxyz-2", title=HOSTILE, turns=0)
            third = await new_session(client, "zzz-3")
            await add_turns(client, third, 1, text=HOSTILE.replace("{", "{{"))
            status, out, err = await cli("sessions", "show", url, third)
            assert status == 0, err
            assert "\x1b" not in out and "\u202e" not in out and "\x9b" not in out
            assert out.startswith("> \\x1b]0;pwned\\x07evil\ttab\n> new line\\u202e")

            status, out, err = await cli("sessions", "show", url, "abcd")  # a prefix
            assert status == 0, err
            # the user's message first (the demo's reply quotes it too)
            assert out.startswith("> hello 0\n> second line\n\n")
            assert "[the turn was cancelled]\n\n> hello 1\n> second line\n\n" in out
            assert out.count("[the turn was cancelled]") == 2
            assert "thinking: " in out
            assert "\n\n\n" not in out  # one blank line between two blocks
            status, quiet, err = await cli("sessions", "show", url, shown, "--no-reasoning")
            assert status == 0 and "thinking: " not in quiet and "> hello 0" in quiet

            # a prefix naming two sessions, or too short, or none: refused, nothing shown
            status, out, err = await cli("sessions", "show", url, "abcx")
            assert status == 0
            status, out, err = await cli("sessions", "show", url, "abc")
            assert status == 1 and out == "" and "names 2 sessions" in err
            status, out, err = await cli("sessions", "show", url, "z")  # as chat --session
            assert status == 0 and out.startswith("> "), err
            # rm: a prefix of 4 characters at least (it cannot be undone)
            status, out, err = await cli("sessions", "rm", url, "zzz")
            assert status == 2 and out == "" and "too short" in err
            status, out, err = await cli("sessions", "rm", url, "abcdef", "abcx", "nope")
            assert status == 1
            assert out.splitlines() == [f"disposed {shown}", f"disposed {other}"]
            assert "'nope'" in err
            status, out, err = await cli("sessions", url)
            assert status == 0 and [r[0] for r in columns(out)] == [third]
            # a URI the host does not know
            status, out, err = await cli("sessions", "rm", url, "ahp-session:/gone")
            assert status == 1 and "no such session" in err and out == ""
            status, out, err = await cli("sessions", "show", url, "ahp-session:/gone")
            assert status == 1 and out == "" and "ahp-session:/gone" in err

    run(main())


def test_ambiguous_prefix_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with demo(tmp_path) as (url, client):
            await new_session(client, "same-1")
            await new_session(client, "same-2")
            status, out, err = await cli("sessions", "show", url, "same")
            assert status == 1 and out == "" and "names 2 sessions" in err

    run(main())


def test_exit_statuses_usage_connect_token_and_timeout(tmp_path: Path) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(60)  # accepts, never answers the WebSocket handshake
        writer.close()

    async def main() -> None:
        status, _out, err = await cli("sessions", "http://x")
        assert status == 2 and "not a ws://" in err
        status, _out, err = await cli("sessions", "show", "ws://127.0.0.1:9")
        assert status == 2  # SESSION missing: argparse's usage error
        status, _out, err = await cli("sessions", "ws://127.0.0.1:9", "--timeout", "5")
        assert status == 3, err
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            status, _out, err = await cli("sessions", f"ws://127.0.0.1:{port}",
                                          "--timeout", "1")
            assert status in (3, 5), err  # the handshake timed out: cannot connect
            assert "agenthost-protocol sessions: " in err and "Traceback" not in err
        finally:
            server.close()
        async with demo(tmp_path) as (url, _client):
            wrong = url.split("?")[0] + "?token=wrong"
            env = child_env()
            env.pop("AHP_TOKEN", None)
            started = time.monotonic()
            status, _out, err = await cli("sessions", wrong, "--timeout", "5", env=env)
            assert status == 3, err
            assert time.monotonic() - started < 10  # refused: not retried until a timeout
            assert err.startswith("agenthost-protocol sessions: ") and "Traceback" not in err
            # the token from the environment
            env["AHP_TOKEN"] = url.split("token=")[1]
            status, out, err = await cli("sessions", url.split("?")[0], env=env)
            assert (status, out) == (0, ""), err

    run(main())


def test_stdio_and_help_without_asyncio(tmp_path: Path) -> None:
    async def main() -> None:
        store = tmp_path / "s.sqlite3"
        host = f"{sys.executable} -m agenthost_protocol.cli serve --stdio --store {store}"
        status, out, err = await cli("sessions", "--stdio", host)
        assert (status, out) == (0, ""), err

    run(main())
    code = ("import sys; from agenthost_protocol.cli import main\n"
            "try:\n    main(['sessions', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'asyncio' not in sys.modules, 'asyncio imported'")
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    assert "{list,show,rm}" in done.stdout


def test_the_verb_defaults_to_list() -> None:
    from agenthost_protocol.cli import _sessions_argv

    assert _sessions_argv(["sessions", "ws://h"]) == ["sessions", "list", "ws://h"]
    assert _sessions_argv(["sessions", "--json", "ws://h"]) == [
        "sessions", "list", "--json", "ws://h"]
    assert _sessions_argv(["sessions", "rm", "ws://h", "x"]) == ["sessions", "rm", "ws://h", "x"]
    assert _sessions_argv(["sessions", "--help"]) == ["sessions", "--help"]
    assert _sessions_argv(["chat", "ws://h", "hi"]) == ["chat", "ws://h", "hi"]
    with pytest.raises(SystemExit) as exit_:
        main(["sessions", "list"])
    assert exit_.value.code == 2
    assert os.environ.get("XDG_DATA_HOME")  # conftest: never the real home
