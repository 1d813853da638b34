"""Terminals over real ptys and a real loopback WebSocket (aio/terminals.py).

Each test starts a host with a TerminalService confined to its tmp_path, a
client (or two) that opens terminals, and checks what a person at a
terminal sees: echo, size, exit codes, Ctrl-C, command detection, disposal
of every process, budgets.  Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from agenthost_protocol import methods
from agenthost_protocol import types as t
from agenthost_protocol.aio.client import ActionRejected, RequestError, connect
from agenthost_protocol.aio.terminals import OscScanner, TerminalOptions, file_uri
from agenthost_protocol.versions import SUPPORTED_PROTOCOL_VERSIONS

from ._aio_hosts import clock, run
from ._raw_ws import masked_text_frame
from ._terminals import (
    ROOT,
    alive,
    create,
    require_shell,
    shell_options,
    terminal_host,
    text_of,
    type_in,
    until,
)

pytestmark = pytest.mark.skipif(os.name != "posix", reason="terminals need a POSIX pty")

URI = "ahp-terminal:/one"


def _finished(line: str | None, output: str = "") -> Callable[[t.TerminalState], bool]:
    """Whether a finished command part has ``line`` (any, for ``None``) and ``output``."""
    def check(state: t.TerminalState) -> bool:
        return any(isinstance(p, t.TerminalCommandPart) and p.is_complete
                   and (line is None or p.command_line == line) and output in p.output
                   for p in state.content)
    return check


def test_echo_exit_code_and_the_catalogue(tmp_path: Path) -> None:
    async def body() -> None:
        async with terminal_host(tmp_path, options=shell_options("bash", tmp_path)) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI, tmp_path)
            root = client.state(ROOT)
            assert isinstance(root, t.RootState)
            assert [info.resource for info in root.terminals or ()] == [URI]
            pid = th.service.process_id(URI)
            assert pid is not None and alive(pid)
            await type_in(client, URI, "echo hi-$((40+2))\r")
            await until(client, URI, lambda s: "hi-42" in text_of(s))
            await type_in(client, URI, "exit 7\r")
            state = await until(client, URI, lambda s: s.exit_code is not None)
            assert state.exit_code == 7
            await client.wait_for_state(
                ROOT, lambda r: isinstance(r, t.RootState)
                and [i.exit_code for i in r.terminals or ()] == [7], confirmed=True, timeout=5)
            assert not alive(pid)  # reaped, not a zombie
            assert state.cwd == file_uri(os.path.realpath(tmp_path))

    run(body())


def test_a_resize_reaches_the_program(tmp_path: Path) -> None:
    async def body() -> None:
        async with terminal_host(tmp_path, options=shell_options("bash", tmp_path)) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            state = await create(client, URI, cols=100, rows=40)
            assert (state.cols, state.rows) == (100, 40)
            await type_in(client, URI, "stty size\r")
            await until(client, URI, lambda s: "40 100" in text_of(s))
            # a size no pty takes is refused, and changes nothing
            for cols, rows in ((0, 10), (10, 100_000)):
                refused = await client.dispatch(URI, t.TerminalResizedAction(cols=cols,
                                                                             rows=rows))
                with pytest.raises(ActionRejected, match="columns and rows"):
                    await refused.wait()
            await client.dispatch(URI, t.TerminalResizedAction(cols=57, rows=13))
            await type_in(client, URI, "stty size\r")
            state = await until(client, URI, lambda s: "13 57" in text_of(s))
            assert (state.cols, state.rows) == (57, 13)

    run(body())


def test_ctrl_c_interrupts_the_foreground_program(tmp_path: Path) -> None:
    async def body() -> None:
        async with terminal_host(tmp_path, options=shell_options("bash", tmp_path)) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI)
            await type_in(client, URI, "sleep 30; echo not-interrupted\r")
            await until(client, URI, lambda s: s.content != () and any(
                isinstance(p, t.TerminalCommandPart) for p in s.content))
            await asyncio.sleep(0.2)
            await type_in(client, URI, "\x03")
            await type_in(client, URI, "echo status-$?\r")
            state = await until(client, URI, lambda s: "status-130" in text_of(s))
            first = next(p for p in state.content if isinstance(p, t.TerminalCommandPart))
            assert first.exit_code == 130 and "not-interrupted" not in first.output

    run(body())


def test_dispose_kills_the_whole_terminal_with_grandchildren(tmp_path: Path) -> None:
    async def body() -> None:
        options = shell_options("bash", tmp_path, kill_timeout=0.5)
        async with terminal_host(tmp_path, options=options) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI)
            # a job in its own process group, whose child ignores SIGHUP and SIGTERM
            await type_in(client, URI, "bash -c 'trap \"\" HUP TERM; sleep 300 & "
                          "echo GRAND=$!; wait' & echo CHILD=$!\r")
            state = await until(client, URI, lambda s: len(re.findall(
                r"(?:GRAND|CHILD)=\d+\r", text_of(s))) == 2)
            pids = [int(n) for n in re.findall(r"(?:GRAND|CHILD)=(\d+)", text_of(state))]
            assert len(pids) == 2
            shell = th.service.process_id(URI)
            assert shell is not None
            pids.append(shell)
            assert all(alive(pid) for pid in pids)
            await client.request(methods.DISPOSE_TERMINAL, t.DisposeTerminalParams(channel=URI))
            root = client.state(ROOT)
            await client.wait_for_state(ROOT, lambda r: isinstance(r, t.RootState)
                                        and not r.terminals, confirmed=True, timeout=5)
            for _ in range(100):
                if not any(alive(pid) for pid in pids):
                    break
                await asyncio.sleep(0.05)
            assert [pid for pid in pids if alive(pid)] == []
            assert isinstance(root, t.RootState)

    run(body())


def test_a_character_split_across_reads_arrives_whole(tmp_path: Path) -> None:
    async def body() -> None:
        async with terminal_host(tmp_path, options=shell_options("bash", tmp_path)) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI)
            # the first byte of é, a pause far longer than the coalescing, the second
            await type_in(client, URI, "printf 'A\\303'; sleep 0.3; printf '\\251B\\n'\r")
            state = await until(client, URI, lambda s: "A\u00e9B" in text_of(s))
            assert "\ufffd" not in text_of(state)

    run(body())


def test_title_and_cwd_follow_the_shell(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()

    async def body() -> None:
        async with terminal_host(tmp_path, options=shell_options("bash", tmp_path)) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI, tmp_path)
            await type_in(client, URI, "printf '\\033]0;my title\\007'; cd sub\r")
            sub = file_uri(os.path.realpath(tmp_path / "sub"))
            state = await until(client, URI, lambda s: s.title == "my title" and s.cwd == sub)
            assert state.title == "my title"

    run(body())

    async def plain() -> None:
        # a shell without the integration that reports its directory itself (OSC 7)
        options = shell_options("bash", tmp_path, shell_integration=False)
        async with terminal_host(tmp_path, options=options) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI, tmp_path)
            await type_in(client, URI, "printf '\\033]7;file://some-host/srv/a%%20b\\007'\r")
            state = await until(client, URI, lambda s: s.cwd == "file:///srv/a%20b")
            assert not state.supports_command_detection
            assert "\x1b]7;" in text_of(state)  # OSC 7 is not the integration's: kept

    run(plain())


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_command_detection(tmp_path: Path, shell: str) -> None:
    require_shell(shell)
    # the user's own startup file still runs
    (tmp_path / f".{shell}rc").write_text("alias hello='echo from-the-rc'\n")

    async def body() -> None:
        async with terminal_host(tmp_path, options=shell_options(shell, tmp_path)) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI, tmp_path)
            await until(client, URI, lambda s: bool(s.supports_command_detection))
            for line in ("true", "false", "echo 'semi;colon'; : 'back\\slash'", "hello"):
                await type_in(client, URI, line + "\r")
                await until(client, URI, _finished(line))
            state = client.state(URI)
            assert isinstance(state, t.TerminalState)
            commands = [p for p in state.content if isinstance(p, t.TerminalCommandPart)]
            assert [(p.command_line, p.exit_code) for p in commands] == [
                ("true", 0), ("false", 1), ("echo 'semi;colon'; : 'back\\slash'", 0), ("hello", 0)]
            assert "semi;colon" in commands[2].output
            assert "from-the-rc" in commands[3].output
            assert all(p.duration_ms is not None and p.duration_ms >= 0 for p in commands)
            # the integration's sequences never reach the data
            whole = text_of(state)
            assert "\x1b]633" not in whole and th.service.terminals == (URI,)
            assert "633;" not in whole

    run(body(), 40)


def test_a_client_claimed_terminal_goes_with_its_client(tmp_path: Path) -> None:
    async def body() -> None:
        options = shell_options("bash", tmp_path, client_grace=0.2, kill_timeout=0.5)
        async with terminal_host(tmp_path, options=options) as th, \
                connect(th.url, clock=clock) as watcher:
            await watcher.initialize([ROOT])
            async with connect(th.url, clock=clock) as owner:
                await owner.initialize([ROOT])
                await create(owner, URI)
                pid = th.service.process_id(URI)
                assert pid is not None
                await watcher.wait_for_state(ROOT, lambda r: isinstance(r, t.RootState)
                                             and bool(r.terminals), confirmed=True, timeout=5)
            await watcher.wait_for_state(ROOT, lambda r: isinstance(r, t.RootState)
                                         and not r.terminals, confirmed=True, timeout=5)
            for _ in range(100):
                if not alive(pid):
                    break
                await asyncio.sleep(0.05)
            assert not alive(pid)

    run(body())


def test_the_budget_and_the_roots(tmp_path: Path) -> None:
    outside = tmp_path.parent / (tmp_path.name + "-outside")
    outside.mkdir()
    (tmp_path / "link").symlink_to(outside)

    async def body() -> None:
        async with terminal_host(tmp_path, options=shell_options("bash", tmp_path),
                                 max_terminals=2) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            for cwd, why in ((outside, "outside"), (tmp_path / "link", "outside"),
                             (tmp_path / "missing", "outside|not a directory")):
                with pytest.raises(RequestError, match=why) as refused:
                    await create(client, "ahp-terminal:/x", cwd)
                assert refused.value.code == -32602
            for uri in ("file:///%ff", "file://elsewhere" + file_uri(tmp_path)[7:],
                        "relative/dir", file_uri(tmp_path) + "/../" + outside.name):
                with pytest.raises(RequestError) as refused:
                    await client.request(methods.CREATE_TERMINAL, t.CreateTerminalParams(
                        channel="ahp-terminal:/x", cwd=uri,
                        claim=t.TerminalClientClaim(client_id=client.client_id)))
                assert refused.value.code == -32602, uri
            await create(client, "ahp-terminal:/a")
            await create(client, "ahp-terminal:/b")
            with pytest.raises(RequestError, match="too many terminals") as refused:
                await create(client, "ahp-terminal:/c")
            assert refused.value.code == -32600
            await client.request(methods.DISPOSE_TERMINAL,
                                 t.DisposeTerminalParams(channel="ahp-terminal:/a"))
            await create(client, "ahp-terminal:/c")
            assert th.service.terminals == ("ahp-terminal:/b", "ahp-terminal:/c")

    run(body())


def test_content_is_bounded_and_every_client_reduces_the_same(tmp_path: Path) -> None:
    async def body() -> None:
        options = shell_options("bash", tmp_path, max_content_chars=8000, kept_content_chars=2000)
        async with terminal_host(tmp_path, options=options) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI)
            await until(client, URI, lambda s: bool(s.supports_command_detection))
            for n in range(3):
                await type_in(client, URI, f"seq 1 3000; echo done-{n}\r")
                await until(client, URI, _finished(None, f"done-{n}"))
            await type_in(client, URI, "echo end-mark\r")
            await until(client, URI, lambda s: any(
                isinstance(p, t.TerminalCommandPart) and p.is_complete
                and "end-mark" in p.output for p in s.content))
            await client.ping()
            host_state = th.server.host.state(URI)
            assert isinstance(host_state, t.TerminalState)
            assert len(text_of(host_state)) <= 8000
            assert client.confirmed(URI) == host_state
            # a late subscriber's snapshot is the same state
            async with connect(th.url, clock=clock) as late:
                await late.initialize([URI])
                assert late.confirmed(URI) == host_state

    run(body(), 40)


def test_input_a_program_does_not_read_is_bounded(tmp_path: Path) -> None:
    async def body() -> None:
        options = shell_options("bash", tmp_path, max_pending_input=64 * 1024)
        async with terminal_host(tmp_path, options=options) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI)
            await type_in(client, URI, "stty -icanon -echo; sleep 30\r")
            await asyncio.sleep(0.3)
            chunk = "x" * (256 * 1024)
            for _ in range(8):  # 2 MiB into a terminal whose program does not read
                await type_in(client, URI, chunk)
            await client.ping()
            terminal = th.service._terminals[URI]
            assert len(terminal._input) <= 64 * 1024
            await client.request(methods.DISPOSE_TERMINAL, t.DisposeTerminalParams(channel=URI))

    run(body())


def test_the_scanner_finds_sequences_cut_anywhere() -> None:
    text = "a\x1b]633;C;n\x07b\x1b]0;T\x1b\\c\x1b[1md\x1b]133;D;0\x07e"
    for cut in range(len(text) + 1):
        scanner = OscScanner(frozenset({"0", "633", "133"}), frozenset({"633", "133"}))
        items = scanner.feed(text[:cut]) + scanner.feed(text[cut:])
        data = "".join(i for i in items if isinstance(i, str))
        seen = [i for i in items if isinstance(i, tuple)]
        assert data == "ab\x1b]0;T\x1b\\c\x1b[1mde", cut
        assert seen == [("633", "C;n"), ("0", "T"), ("133", "D;0")], cut


def test_a_shell_that_cannot_start_exits_with_a_message(tmp_path: Path) -> None:
    async def body() -> None:
        options = TerminalOptions(shell=(str(tmp_path / "no-such-shell"),))
        async with terminal_host(tmp_path, options=options) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI)
            state = await until(client, URI, lambda s: s.exit_code is not None)
            assert state.exit_code == 127
            assert "no-such-shell" in text_of(state)
            assert th.service.terminals == (URI,)

    run(body())


def _stuck_client(port: int, subscriptions: list[str]) -> socket.socket:
    """A WebSocket client that initializes subscribed to ``subscriptions``, then never
    reads again (a tiny receive buffer, so the host sees it stop at once)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 b"Sec-WebSocket-Version: 13\r\n\r\n")
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "channel": ROOT, "protocolVersions": list(SUPPORTED_PROTOCOL_VERSIONS),
        "clientId": "stuck", "initialSubscriptions": subscriptions}}
    sock.sendall(masked_text_frame(json.dumps(initialize)))
    return sock


def test_a_client_that_stops_reading_holds_a_flood_back_only_for_a_while(
        tmp_path: Path) -> None:
    async def body() -> None:
        options = TerminalOptions(shell=("/bin/sh", "-c", "yes"), env={"PATH": os.defpath},
                                  backpressure_bytes=256 * 1024)
        limits = {"max_queue_bytes": 1024 * 1024, "stall_timeout": 0.5}
        async with terminal_host(tmp_path, options=options, limits=limits) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI)
            port = int(th.url.rsplit(":", 1)[1].strip("/"))
            stuck = _stuck_client(port, [URI])
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 20
                while not any(conn.client_id == "stuck" for conn in th.server.host.connections):
                    assert loop.time() < deadline, "the stuck client never initialized"
                    await asyncio.sleep(0.01)
                while th.server.connection_count > 1 and loop.time() < deadline:
                    # the host's memory stays within its budgets meanwhile
                    assert th.server.queued_bytes <= 4 * 1024 * 1024
                    await asyncio.sleep(0.05)
                assert th.server.connection_count == 1, "the stuck client was never dropped"
                # the reading client still gets the flood
                before = client.state(URI)
                await until(client, URI, lambda s: s != before)
            finally:
                stuck.close()
            await client.request(methods.DISPOSE_TERMINAL, t.DisposeTerminalParams(channel=URI))

    run(body(), 40)


def test_a_crashed_shell_leaves_no_process(tmp_path: Path) -> None:
    async def body() -> None:
        options = shell_options("bash", tmp_path, kill_timeout=0.5)
        async with terminal_host(tmp_path, options=options) as th, \
                connect(th.url, clock=clock) as client:
            await client.initialize([ROOT])
            await create(client, URI)
            await type_in(client, URI, "nohup sleep 300 >/dev/null 2>&1 & echo JOB=$!\r")
            state = await until(client, URI, lambda s: re.search(r"JOB=\d", text_of(s))
                                is not None)
            (job,) = [int(n) for n in re.findall(r"JOB=(\d+)", text_of(state))]
            shell = th.service.process_id(URI)
            assert shell is not None and alive(job)
            os.kill(shell, signal.SIGKILL)
            state = await until(client, URI, lambda s: s.exit_code is not None)
            assert state.exit_code == 128 + signal.SIGKILL
            for _ in range(100):
                if not alive(job):
                    break
                await asyncio.sleep(0.05)
            assert not alive(job) and not alive(shell)
            # the terminal stays listed until disposed; its state says it exited
            assert th.service.terminals == (URI,)

    run(body())


def test_an_embedder_rule_replaces_the_roots(tmp_path: Path) -> None:
    from agenthost_protocol.aio import HostServer
    from agenthost_protocol.aio.terminals import TerminalService
    from agenthost_protocol.host import Host

    server = HostServer(Host(clock=clock))
    (tmp_path / "ok").mkdir()
    service = TerminalService(server, roots=[tmp_path],
                              allowed_cwd=lambda path: path.name == "ok")
    assert service.allowed(tmp_path / "ok") and not service.allowed(tmp_path)
    plain = TerminalService(server, roots=[tmp_path])
    assert plain.allowed(tmp_path / "ok") and not plain.allowed(tmp_path.parent)
