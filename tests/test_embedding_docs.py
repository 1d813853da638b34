"""Issue 30: docs/embedding.md's examples run as written, the way its commands run them.

Each ``python`` block of the page is written to the file its docstring names
(``app.py``, ``host.py``) and served with ``uvicorn MODULE:app`` as a
subprocess, with ``AHP_TOKEN`` set: the library's client runs a turn of the
demo agent through it; the server is stopped with SIGINT and started again,
and the session is still there (the SQLite store); the token never shows in
what the server logged.  ``check-host`` (the command) passes the FastAPI one,
and the three type-check strictly.  Every server is stopped (SIGINT, then
SIGKILL) and every wait bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

from agenthost_protocol import types as t
from agenthost_protocol.aio.client import connect

from ._aio_hosts import clock, free_port, run
from ._aio_peer import child_env
from .test_asgi import turn_round_trip

PAGE = Path(__file__).resolve().parent.parent / "docs" / "embedding.md"
TOKEN = "embedding-docs-t0ken"
_FILE = re.compile(r'^"""(\w+)\.py: ')
BLOCKS = [code for code in re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"),
                                      re.S) if _FILE.match(code)]
"""The page's whole programs: the blocks whose docstring names the file they are."""


def _module(code: str) -> str:
    match = _FILE.match(code)
    assert match
    return match[1]


def test_the_page_has_its_three_examples() -> None:
    names = [_module(code) for code in BLOCKS]
    assert names[:3] == ["app", "app", "host"]
    assert "FastAPI(" in BLOCKS[0] and "Starlette(" in BLOCKS[1]
    text = PAGE.read_text(encoding="utf-8")
    # the commands the page gives are the ones run below
    assert "AHP_TOKEN=change-me uvicorn app:app --port 8000" in text
    assert "AHP_TOKEN=change-me uvicorn host:app --port 8000" in text


@contextlib.contextmanager
def uvicorn_serving(where: Path, module: str, port: int, log: Path) -> Iterator[None]:
    """``uvicorn MODULE:app --port PORT`` in ``where``, as the page runs it."""
    env = child_env()
    env["AHP_TOKEN"] = TOKEN
    with open(log, "ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", f"{module}:app", "--port", str(port)],
            cwd=where, env=env, stdout=sink, stderr=sink, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            raise AssertionError("uvicorn did not stop on SIGINT") from None
        assert code == 0, log.read_text()


async def _a_turn(url: str) -> str:
    async with connect(url, token=TOKEN, clock=clock, reconnect=False) as client:
        await turn_round_trip(client)
        listed = await client.list_sessions()
        assert len(listed.items) == 1
        return listed.items[0].resource


async def _still_there(url: str, session: str) -> None:
    async with connect(url, token=TOKEN, clock=clock, reconnect=False) as client:
        await client.initialize([])
        listed = await client.list_sessions()
        assert [s.resource for s in listed.items] == [session]
        snapshot = await client.subscribe(session)
        assert snapshot is not None and isinstance(snapshot.state, t.SessionState)
        chat = snapshot.state.default_chat
        assert chat is not None
        history = await client.subscribe(chat)
        assert history is not None and isinstance(history.state, t.ChatState)
        assert len(history.state.turns) == 1


def _http_get(port: int, target: str) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), 10) as raw:
        raw.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Connection: close\r\n\r\n".encode())
        raw.settimeout(10)
        data = b""
        while chunk := raw.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize("index", range(3), ids=["fastapi", "starlette", "plain-uvicorn"])
def test_an_example_serves_keeps_its_sessions_and_hides_its_token(
        tmp_path: Path, index: int) -> None:
    code = BLOCKS[index]
    module = _module(code)
    (tmp_path / f"{module}.py").write_text(code, encoding="utf-8")
    prefix = "/ahp/" if '"/ahp"' in code else "/"
    port = free_port()
    url = f"ws://127.0.0.1:{port}{prefix}"
    log = tmp_path / "uvicorn.log"
    with uvicorn_serving(tmp_path, module, port, log):
        session = asyncio.run(asyncio.wait_for(_a_turn(url), 30))
        # the token in the URL, as a browser sends it: the log shows it REDACTED
        status, _ = _http_get(port, f"{prefix}?token={TOKEN}")
        assert status == 426
        if index == 0:
            assert _http_get(port, "/") == (200, b'{"ahp":"/ahp/"}')
    # the store: the session, its chat and its turn after a restart
    with uvicorn_serving(tmp_path, module, port, log):
        run(_still_there(url, session))
    logged = log.read_text()
    assert TOKEN not in logged, logged
    assert "?token=REDACTED" in logged, logged


def test_check_host_passes_the_fastapi_example(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(BLOCKS[0], encoding="utf-8")
    port = free_port()
    env = child_env()
    env["AHP_TOKEN"] = TOKEN
    with uvicorn_serving(tmp_path, "app", port, tmp_path / "uvicorn.log"):
        done = subprocess.run(
            [sys.executable, "-m", "agenthost_protocol.cli", "check-host",
             f"ws://127.0.0.1:{port}/ahp/", "--examples", "5", "--seed", "0"],
            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("12 passed, 0 failed"), done.stdout


def test_the_examples_type_check_strictly(tmp_path: Path) -> None:
    paths = []
    for index, code in enumerate(BLOCKS):
        path = tmp_path / f"embedding_{index}.py"
        path.write_text(code, encoding="utf-8")
        paths.append(str(path))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
         str(tmp_path / ".mypy"), *paths],
        capture_output=True, text=True, timeout=300, check=False,
        cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stdout
