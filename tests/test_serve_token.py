"""Issue 28, item 1: an identity that survives a restart, and refusals that are final.

``serve`` keeps its token in a settings file (0600 in a 0700 directory of the
user's config directory), so a restarted host prints the same URL and a
connected client resumes; ``--new-token`` replaces it, and a client holding
the old one is told so at once, not retried forever.  Real ``serve``
processes on loopback ports, real clients; every process is killed and
reaped on the way out, every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.agent.settings import (
    SettingsError,
    config_dir,
    load_token,
    replace_token,
    saved_token,
    settings_path,
)
from agenthost_protocol.aio.client import (
    TOKEN_ENV,
    Closed,
    HandshakeRefused,
    ReconnectPolicy,
    Resumed,
    connect,
)

from ._aio_peer import TIMEOUT, child_env, serve_command, serving, spawn, stop

pytest.importorskip("websockets")
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX modes and signals")

# what "at once" must stay under on a loaded 2-core machine: the point is "not a retry
# loop", which would take tens of seconds (the times measured are printed)
AT_ONCE = 8.0


def run(coro: Coroutine[Any, Any, None], timeout: float = 120.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(autouse=True)
def _no_ambient_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def token_of(url: str) -> str:
    match = re.search(r"/\?token=([A-Za-z0-9_-]+)$", url)
    assert match is not None, url
    return match.group(1)


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def handshake(port: int, path: str = "/", headers: dict[str, str] | None = None,
                    *, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """A WebSocket upgrade request by hand; the status, the headers and the body."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT)
    try:
        lines = [f"GET {path} HTTP/1.1",
                 f"Host: {host if host is not None else f'127.0.0.1:{port}'}",
                 "Upgrade: websocket", "Connection: Upgrade",
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
                 *(f"{k}: {v}" for k, v in (headers or {}).items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        found = {}
        for line in header_lines:
            if ":" in line:
                name, _, value = line.partition(":")
                found[name.strip().lower()] = value.strip()
        length = int(found.get("content-length", "0"))
        content = await asyncio.wait_for(reader.readexactly(length), TIMEOUT) if length else b""
        return int(status_line.split()[1]), found, content
    finally:
        writer.close()


# -- the settings file, in-process -----------------------------------------------------------


@posix_only
def test_the_settings_file_is_made_private_and_kept(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    old_umask = os.umask(0)  # the widest a user could have: the modes must not depend on it
    try:
        first = saved_token()
    finally:
        os.umask(old_umask)
    assert first.created and first.path == home / "agenthost-protocol" / "settings.json"
    assert settings_path() == first.path and config_dir() == first.path.parent
    assert mode(first.path.parent) == 0o700 and mode(first.path) == 0o600
    assert json.loads(first.path.read_text()) == {"token": first.token}
    again = saved_token()
    assert (again.token, again.created) == (first.token, False)
    assert load_token() == first.token
    # no temporary file left behind
    assert [p.name for p in first.path.parent.iterdir()] == ["settings.json"]
    # a directory others may enter is narrowed (ours, nothing lost)
    os.chmod(first.path.parent, 0o755)
    assert saved_token().token == first.token and mode(first.path.parent) == 0o700
    # other settings survive a new token
    first.path.write_text(json.dumps({"token": first.token, "other": [1]}))
    new = replace_token()
    assert new.token != first.token and new.created
    assert json.loads(new.path.read_text()) == {"token": new.token, "other": [1]}
    assert mode(new.path) == 0o600


def test_a_relative_xdg_config_home_is_ignored(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    if sys.platform in ("win32", "darwin"):
        pytest.skip("XDG is the Linux/BSD convention")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    assert config_dir() == tmp_path / ".config" / "agenthost-protocol"


@posix_only
@pytest.mark.parametrize(("content", "reason"), [
    (b"not json\n", "corrupt (not JSON)"),
    (b"\xff\xfe\x00", "corrupt (not UTF-8)"),
    (b"[1, 2]", "corrupt (not a JSON object)"),
    (b'{"token": "has space"}', "holds no valid access token"),
    (b'{"token": 12}', "holds no valid access token"),
    (b'{"token": ""}', "holds no valid access token"),
    (b" " * (64 * 1024 + 1), "larger than 64 KiB"),
])
def test_a_bad_settings_file_is_one_line_that_names_it_and_the_way_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, reason: str) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = settings_path()
    path.parent.mkdir(mode=0o700)
    path.write_bytes(content)
    os.chmod(path, 0o600)
    with pytest.raises(SettingsError) as refused:
        saved_token()
    message = str(refused.value)
    assert str(path) in message and reason in message and "\n" not in message
    assert "serve --new-token" in message
    assert path.read_bytes() == content  # left alone
    # the way out: a new token, in a new file
    new = replace_token()
    assert load_token() == new.token and mode(path) == 0o600


@posix_only
def test_a_file_others_can_read_is_refused_not_trusted(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    first = saved_token()
    os.chmod(first.path, 0o644)
    with pytest.raises(SettingsError, match=r"open to other users \(mode 0644\)"):
        saved_token()
    new = replace_token()  # --new-token: a new token nobody else saw
    assert new.token != first.token and mode(new.path) == 0o600
    assert saved_token().token == new.token


@posix_only
def test_a_settings_path_that_is_not_a_file_or_directory(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "agenthost-protocol").write_text("a file where the directory goes")
    with pytest.raises(SettingsError, match="settings directory"):
        saved_token()
    (tmp_path / "agenthost-protocol").unlink()
    settings_path().mkdir(parents=True)  # a directory where the file goes
    with pytest.raises(SettingsError, match="is not a regular file"):
        saved_token()
    settings_path().rmdir()
    os.mkfifo(settings_path(), 0o600)  # nobody writes to it: reading must not wait
    with pytest.raises(SettingsError, match="is not a regular file"):
        saved_token()


# -- serve, restarted ------------------------------------------------------------------------


@posix_only
def test_a_restarted_serve_prints_the_same_url_and_a_client_resumes_by_replay(
        tmp_path: Path) -> None:
    async def main() -> None:
        async with serving([], tmp_path / "a.err") as (proc, url):
            port = port_of(url)
            path = settings_path()
            assert mode(path) == 0o600 and mode(path.parent) == 0o700
            assert load_token() == token_of(url)
            client = await connect(url, reconnect=ReconnectPolicy(
                initial_delay=0.05, max_delay=0.2, connect_timeout=TIMEOUT,
                handshake_timeout=TIMEOUT))
            try:
                await client.initialize(["ahp-root://"])
                session = await client.create_session(provider="demo")
                await client.subscribe(session)
                with client.events() as events:
                    assert await stop(proc) == 0
                    # the same URL, port included, from the same settings and store
                    async with spawn(["--port", str(port)], tmp_path / "b.err") as again:
                        assert again.stdout is not None
                        line = await asyncio.wait_for(again.stdout.readline(), TIMEOUT)
                        assert line.decode().split()[1] == url
                        resumed = None
                        while resumed is None:
                            event = await events.next(TIMEOUT)
                            assert event is not None and not isinstance(event, Closed), event
                            resumed = event if isinstance(event, Resumed) else None
                        assert resumed.outcome.kind is t.ReconnectResultType.REPLAY
                        assert client.is_tracked(session)
                        assert await stop(again) == 0
            finally:
                await client.close()
        for name in ("a.err", "b.err"):
            assert token_of(url) not in (tmp_path / name).read_text()

    run(main())


@posix_only
def test_run_agent_serves_the_same_saved_token(tmp_path: Path) -> None:
    script = ("from agenthost_protocol.agent import run; "
              "from agenthost_protocol.agent.demo import DemoAgent; "
              "raise SystemExit(run(DemoAgent(), port=0, no_store=True))")

    async def main() -> None:
        async with serving(["--no-store"], tmp_path / "a.err") as (proc, url):
            assert await stop(proc) == 0
        with open(tmp_path / "b.err", "wb") as err:
            agent = await asyncio.create_subprocess_exec(
                sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE, stderr=err,
                env=child_env())
            try:
                assert agent.stdout is not None
                line = await asyncio.wait_for(agent.stdout.readline(), TIMEOUT)
                assert token_of(line.decode().split()[1]) == token_of(url)
                assert await stop(agent) == 0
            finally:
                if agent.returncode is None:
                    agent.kill()
                await asyncio.wait_for(agent.wait(), TIMEOUT)

    run(main())


@posix_only
def test_new_token_changes_the_url_and_a_client_with_the_old_one_stops_at_once(
        tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(["--no-store"], tmp_path / "a.err") as (proc, url):
            port = port_of(url)
            # the default policy: retry forever, with growing delays
            client = await connect(url)
            try:
                await client.initialize(["ahp-root://"])
                with client.events() as events:
                    assert await stop(proc) == 0
                    async with spawn(["--port", str(port), "--no-store", "--new-token"],
                                     tmp_path / "b.err") as again:
                        assert again.stdout is not None
                        line = await asyncio.wait_for(again.stdout.readline(), TIMEOUT)
                        started = time.monotonic()
                        new_url = line.decode().split()[1]
                        assert port_of(new_url) == port and token_of(new_url) != token_of(url)
                        assert load_token() == token_of(new_url)
                        while True:
                            event = await events.next(AT_ONCE)
                            assert event is not None
                            if isinstance(event, Closed):
                                break
                        took = time.monotonic() - started
                        print(f"\nrefused reconnect after --new-token: closed in {took:.3f} s")
                        assert took < AT_ONCE
                        error = event.error
                        assert isinstance(error, HandshakeRefused)
                        assert error.check == "token" and error.status == 401
                        assert "serve --new-token" in str(error)
                        assert token_of(url) not in str(error)
                        with pytest.raises(HandshakeRefused):
                            await client.list_sessions()
                        await asyncio.sleep(1.0)
                        assert await stop(again) == 0
            finally:
                await client.close()
        # the new host saw one refused handshake from it, not a retry loop
        log = (tmp_path / "b.err").read_text()
        assert log.count("refused a WebSocket handshake") == 1, log
        assert "a new access token replaced the saved one" in log
        assert token_of(new_url) not in log and token_of(url) not in log

    run(main())


# -- refusals, told apart --------------------------------------------------------------------


@posix_only
def test_a_wrong_token_stops_the_client_and_chat_at_once_with_the_cause(tmp_path: Path) -> None:
    wrong = "wrong-Token_0123456789abcdef"

    async def main() -> None:
        async with serving(["--no-store"], tmp_path / "serve.err") as (_proc, url):
            bad = url.replace(token_of(url), wrong)
            started = time.monotonic()
            with pytest.raises(HandshakeRefused) as refused:
                await connect(bad)  # reconnect on: still one attempt
            took = time.monotonic() - started
            assert refused.value.check == "token" and wrong not in str(refused.value)
            started = time.monotonic()
            done = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "agenthost_protocol.cli", "chat", bad, "hello",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=child_env())
            out, err = await asyncio.wait_for(done.communicate(), 3 * AT_ONCE)
            chat_took = time.monotonic() - started
            print(f"\nwrong token: AsyncClient refused in {took:.3f} s, "
                  f"chat exited in {chat_took:.3f} s")
            assert took < AT_ONCE and chat_took < 2 * AT_ONCE
            assert done.returncode == 3, err
            text = err.decode()
            assert "the host refused the access token (HTTP 401)" in text
            assert wrong not in text and token_of(url) not in text
            assert "Traceback" not in text and out == b""

    run(main())


@posix_only
def test_tkn_initializes_and_refusals_are_told_apart(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(["--no-store"], tmp_path / "serve.err") as (_proc, url):
            token, port = token_of(url), port_of(url)
            status, headers, content = await handshake(port, f"/?tkn={token}")
            assert status == 101
            status, headers, content = await handshake(port, "/?tkn=wrong")
            assert status == 401 and headers.get("www-authenticate", "").startswith("Bearer")
            assert b"token" in content and content.count(b"\n") == 1
            # ... the same over the library's client, which sends it as Bearer
            async with connect(f"ws://127.0.0.1:{port}/?tkn={token}") as client:
                await client.initialize(["ahp-root://"])
            # the Origin check: 403, without WWW-Authenticate, a one-line reason
            status, headers, content = await handshake(
                port, f"/?token={token}", {"Origin": "https://evil.example"})
            assert status == 403 and "www-authenticate" not in headers
            assert content.startswith(b"Origin 'https://evil.example' is not allowed")
            assert content.count(b"\n") == 1
            status, headers, content = await handshake(port, f"/?token={token}",
                                                       host="evil.example")
            assert status == 403 and content.startswith(b"Host 'evil.example'")
            # the client's error says which check refused
            with pytest.raises(HandshakeRefused) as origin:
                await connect(url, headers={"Origin": "https://evil.example"})
            assert (origin.value.check, origin.value.status) == ("origin-or-host", 403)
            assert "Origin 'https://evil.example' is not allowed" in origin.value.detail
            assert "--allow-origin" in str(origin.value) and token not in str(origin.value)
            with pytest.raises(HandshakeRefused) as host:
                await connect(url, headers={"Host": "evil.example"})
            assert (host.value.check, host.value.status) == ("origin-or-host", 403)
            assert "Host" in host.value.detail
            with pytest.raises(HandshakeRefused) as wrong:
                await connect(f"ws://127.0.0.1:{port}/?token=wrong-token")
            assert (wrong.value.check, wrong.value.status) == ("token", 401)

    run(main())


# -- precedence ------------------------------------------------------------------------------


def first_url(*args: str, env: dict[str, str] | None = None) -> str:
    """The URL ``serve --port 0 ARGS`` prints (then SIGTERM)."""
    process = subprocess.Popen(serve_command("--port", "0", "--no-store", *args),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               env={**child_env(), **(env or {})})
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        assert line.startswith("serving "), line
        return line.split()[1]
    finally:
        process.terminate()
        try:
            process.wait(TIMEOUT)
        finally:
            if process.returncode is None:
                process.kill()
                process.wait(TIMEOUT)
            if process.stdout is not None:
                process.stdout.close()


@posix_only
def test_ahp_token_and_token_file_win_over_the_saved_token(tmp_path: Path) -> None:
    saved = token_of(first_url())
    assert load_token() == saved
    assert token_of(first_url(env={TOKEN_ENV: "from-the-env"})) == "from-the-env"
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    assert token_of(first_url("--token-file", str(token_file),
                              env={TOKEN_ENV: "from-the-env"})) == "from-a-file"
    assert "token" not in first_url("--no-token")
    assert load_token() == saved  # none of them touched it
    assert token_of(first_url()) == saved


def test_stdio_and_no_token_neither_read_nor_make_the_settings_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    settings_path().parent.mkdir(parents=True)
    settings_path().write_text("corrupt")
    done = subprocess.run(serve_command("--stdio", "--no-store"), input=b"", env=child_env(),
                          capture_output=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0, done.stderr
    assert settings_path().read_text() == "corrupt"
    url = first_url("--no-token")
    assert "token" not in url and settings_path().read_text() == "corrupt"


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--new-token", "--no-token"], {}, "--new-token and --no-token contradict"),
    (["--new-token", "--token-file", "x"], {}, "--new-token and --token-file contradict"),
    (["--new-token", "--stdio"], {}, "--new-token with --stdio"),
    (["--new-token"], {TOKEN_ENV: "set"}, "AHP_TOKEN is set"),
])
def test_new_token_contradictions_are_usage_errors(args: list[str], env: dict[str, str],
                                                   message: str) -> None:
    done = subprocess.run(serve_command("--port", "0", *args), env={**child_env(), **env},
                          capture_output=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 2 and message in done.stderr.decode()
    assert not settings_path().exists()


@posix_only
def test_serve_with_a_bad_settings_file_exits_1_in_one_line_and_new_token_recovers(
        tmp_path: Path) -> None:
    path = settings_path()
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_text("{broken")
    os.chmod(path, 0o600)
    done = subprocess.run(serve_command("--port", "0", "--no-store", "--log-level", "warning"),
                          env=child_env(), capture_output=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 1 and done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert line == (f"agenthost-protocol serve: the settings file {path} is corrupt (not "
                    f"JSON); run serve --new-token to write a new one, or remove {path}")
    url = first_url("--new-token")
    assert load_token() == token_of(url) and mode(path) == 0o600
    assert token_of(first_url()) == token_of(url)


def test_a_config_directory_that_cannot_be_made_says_what_else_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a file"  # no directory can be made under it, not even by root
    blocker.write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocker))
    with pytest.raises(SettingsError, match="--token-file or AHP_TOKEN") as refused:
        saved_token()
    assert str(blocker / "agenthost-protocol") in str(refused.value)
    # serve: exit 1, that line; with AHP_TOKEN it serves (the file is never needed)
    done = subprocess.run(serve_command("--port", "0", "--no-store", "--log-level", "warning"),
                          env=child_env(), capture_output=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [f"agenthost-protocol serve: {refused.value}"]
    assert token_of(first_url(env={TOKEN_ENV: "given"})) == "given"
