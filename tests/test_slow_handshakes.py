"""Slow WebSocket handshakes from someone without the token (issue 29, "Also").

A local user who does not hold the token can still open TCP connections to
``serve``'s port and send half an upgrade request.  Each such connection
holds a file descriptor and a little memory in the server until the
handshake deadline; reopened faster than that deadline they used to pile up
without bound.  These tests play that attacker over real loopback sockets
against a real ``serve`` process and read its descriptors in /proc.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agenthost_protocol.aio import connect

from ._aio_hosts import run
from ._aio_peer import serving

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc/PID/fd")

MAX_CONNECTIONS = 64
"""``serve --max-connections``: also the bound on handshakes in progress."""


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def stall(port: int, count: int) -> list[asyncio.StreamWriter]:
    """``count`` connections that send half a request line and then nothing."""
    writers = []
    for _ in range(count):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /?tok")
        writers.append(writer)
    # the server may have closed the first ones already: that is the point
    await asyncio.gather(*(w.drain() for w in writers), return_exceptions=True)
    return writers


def close_all(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.transport.abort()


async def settled(pid: int, at_most: int, within: float) -> int:
    """The fd count, once it is at most ``at_most`` (or when ``within`` s ran out)."""
    deadline = time.monotonic() + within
    count = fds(pid)
    while count > at_most and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        count = fds(pid)
    return count


def test_stalled_handshakes_keep_the_servers_descriptors_bounded(tmp_path: Path) -> None:
    async def body() -> None:
        async with serving(["--no-store", "--max-connections", str(MAX_CONNECTIONS)],
                           tmp_path / "serve.err") as (proc, url):
            port = urlsplit(url).port
            assert port is not None
            async with connect(url, reconnect=False) as client:
                await client.ping()
            baseline = await settled(proc.pid, 0, 0.5)
            rss_before = rss_kib(proc.pid)
            peak = baseline
            held: list[asyncio.StreamWriter] = []
            started = time.monotonic()
            # five waves of 300, each opened well within the 10 s open timeout and
            # the previous wave closed only after the next one is open
            for _ in range(5):
                wave = await stall(port, 300)
                await asyncio.sleep(0.2)
                peak = max(peak, fds(proc.pid))
                close_all(held)
                held = wave
            flood = time.monotonic() - started
            # a legitimate client gets through while the last wave still stalls
            async def legitimate() -> None:
                async with connect(url, reconnect=False) as client:
                    await client.ping()

            await asyncio.wait_for(legitimate(), 10)
            peak = max(peak, fds(proc.pid))
            rss_flood = rss_kib(proc.pid)
            close_all(held)
            after = await settled(proc.pid, baseline, 5)
            print(f"\nfds: baseline {baseline}, peak {peak} under 1,500 stalled "
                  f"handshakes in {flood:.1f} s, {after} after; RSS {rss_before} KiB "
                  f"before, {rss_flood} KiB during")
            # served connections and handshakes in progress, max_connections each
            assert peak <= baseline + 2 * MAX_CONNECTIONS + 8, (baseline, peak)
            assert after <= baseline, (baseline, after)
            # said in the log once, not once per connection of the flood
            said = [line for line in (tmp_path / "serve.err").read_text().splitlines()
                    if "had not sent their upgrade request" in line]
            assert len(said) == 1, said
            # websockets' "connection closed" only for the two that opened
            assert len(log_lines(tmp_path / "serve.err", "connection closed")) == 2

    run(body(), 60)


def log_lines(path: Path, text: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if text in line]


def test_a_flood_of_refused_handshakes_writes_a_bounded_log(tmp_path: Path) -> None:
    """Each handshake without the token used to cost two log lines at the default
    level (the refusal and websockets' own "connection closed"): someone without
    the token could grow the log without bound."""
    async def body() -> None:
        err = tmp_path / "serve.err"
        async with serving(["--no-store"], err) as (proc, url):
            port = urlsplit(url).port
            assert port is not None
            baseline = await settled(proc.pid, 0, 0.5)
            request = (f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       "Sec-WebSocket-Version: 13\r\n\r\n").encode()

            async def refused() -> bytes:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(request)
                try:
                    return await reader.readline()
                finally:
                    writer.close()

            statuses = []
            for _ in range(10):
                statuses += await asyncio.gather(*(refused() for _ in range(50)))
            assert all(s.startswith(b"HTTP/1.1 401") for s in statuses), set(statuses)
            # a legitimate client still gets through, and its lines are all there
            async def legitimate() -> None:
                async with connect(url, reconnect=False) as client:
                    await client.ping()

            await asyncio.wait_for(legitimate(), 10)
            after = await settled(proc.pid, baseline, 5)
            assert after <= baseline, (baseline, after)
            await asyncio.sleep(0.2)
            refusals = log_lines(err, "refused a WebSocket handshake")
            closed = log_lines(err, "connection closed")
            print(f"\n500 refused handshakes: {len(refusals)} refusal lines, "
                  f"{len(closed)} 'connection closed' lines")
            assert 1 <= len(refusals) <= 20, len(refusals)
            assert len(closed) == 1, closed  # the legitimate client's
            assert log_lines(err, "HTTP response sent") == []
            assert len(log_lines(err, "connection open")) == 1

    run(body(), 60)


def test_the_log_quota_counts_what_it_leaves_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agenthost_protocol.aio import websocket
    from agenthost_protocol.aio.log_quota import LogQuota

    now = [100.0]
    monkeypatch.setattr("agenthost_protocol.aio.websocket.time.monotonic", lambda: now[0])
    quota = LogQuota("refused things", websocket.log, burst=3, period=10.0)
    with caplog.at_level("WARNING", logger="agenthost_protocol.aio.websocket"):
        assert [quota.allow() for _ in range(5)] == [True, True, True, False, False]
        now[0] += 9.9
        assert not quota.allow()
        assert caplog.messages == []
        now[0] += 0.1
        assert quota.allow()
    assert caplog.messages == ["3 more refused things in the last 10 s (not logged one by one)"]


def test_stalled_handshakes_do_not_hold_up_a_shutdown(tmp_path: Path) -> None:
    """Stalled handshakes used to hold ``serve`` at SIGTERM for the whole open
    timeout (10 s): the server waited for every accepted connection."""
    async def body() -> None:
        async with serving(["--no-store"], tmp_path / "serve.err") as (proc, url):
            port = urlsplit(url).port
            assert port is not None
            held = await stall(port, 50)
            await asyncio.sleep(0.3)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            status = await asyncio.wait_for(proc.wait(), 30)
            took = time.monotonic() - started
            close_all(held)
            print(f"\nSIGTERM with 50 stalled handshakes: exit {status} after {took:.2f} s")
            assert status == 0
            assert took < 5, took

    run(body(), 60)


def test_long_unfinished_requests_keep_the_servers_memory_bounded(tmp_path: Path) -> None:
    """websockets buffers up to 128 header lines of 8 KiB while a request is
    unfinished: 300 such connections used to cost the server about 300 MB."""
    async def body() -> None:
        async with serving(["--no-store"], tmp_path / "serve.err") as (proc, url):
            port = urlsplit(url).port
            assert port is not None
            before = rss_kib(proc.pid)
            baseline = fds(proc.pid)
            head = b"GET / HTTP/1.1\r\n" + b"".join(
                b"X-%d: %s\r\n" % (n, b"a" * 8000) for n in range(127))
            held = []
            for _ in range(6):
                wave = []
                for _ in range(50):
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.write(head)
                    wave.append(writer)
                await asyncio.gather(*(w.drain() for w in wave), return_exceptions=True)
                held += wave
            await asyncio.sleep(0.5)
            during = rss_kib(proc.pid)

            async def legitimate() -> None:
                async with connect(url, reconnect=False) as client:
                    await client.ping()

            await asyncio.wait_for(legitimate(), 10)
            close_all(held)
            after = await settled(proc.pid, baseline, 5)
            print(f"\n300 unfinished requests of {len(head) // 1024} KiB: RSS {before} KiB "
                  f"before, {during} KiB with them; fds {baseline} before, {after} after")
            assert during - before < 48 * 1024, (before, during)
            assert after <= baseline
            said = log_lines(tmp_path / "serve.err", "whose upgrade request was longer than")
            assert len(said) == 1, said

    run(body(), 60)
