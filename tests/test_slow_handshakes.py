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

    run(body(), 60)
