"""Benchmark (issue 32): terminal output through the host to one client, beside the bare pty.

``yes | head -c BYTES`` runs in a pseudo-terminal twice:

* **pty**: the command's pty read directly (non-blocking reads on the event
  loop until the end): the floor;
* **host**: a :class:`~agenthost_protocol.aio.terminals.TerminalService` on a
  :class:`~agenthost_protocol.aio.HostServer` served over loopback WebSocket,
  and one :class:`~agenthost_protocol.aio.client.AsyncClient` (same process)
  that creates the terminal, subscribes to it and waits for
  ``terminal/exited``: output read, decoded, coalesced, dispatched as
  ``terminal/data``, the content trimmed to its bound, sent, received and
  reduced by the client.  The host dispatches ``terminal/exited`` only after
  the last output, so the time to it covers every byte.

Prints MB/s and CPU seconds of this process for each, best of ``--rounds``.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_terminal [--bytes 100000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from agenthost_protocol import methods
from agenthost_protocol import types as t
from agenthost_protocol.aio import HostServer
from agenthost_protocol.aio.client import connect
from agenthost_protocol.aio.terminals import TerminalOptions, TerminalService
from agenthost_protocol.aio.websocket import serve_websocket
from agenthost_protocol.host import Host


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _command(size: int) -> list[str]:
    return ["/bin/sh", "-c", f"yes | head -c {size}"]


async def bare_pty(size: int) -> tuple[float, float, int]:
    """Seconds, CPU seconds and bytes of reading the command's pty directly."""
    master, slave = os.openpty()
    os.set_blocking(master, False)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    total = 0

    def readable() -> None:
        nonlocal total
        try:
            chunk = os.read(master, 64 * 1024)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            loop.remove_reader(master)
            done.set_result(None)
            return
        total += len(chunk)

    start, cpu = time.perf_counter(), _cpu()
    proc = subprocess.Popen(_command(size), stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    loop.add_reader(master, readable)
    await asyncio.wait_for(done, 300)
    elapsed, used = time.perf_counter() - start, _cpu() - cpu
    os.close(master)
    proc.wait(10)
    return elapsed, used, total


async def through_host(size: int) -> tuple[float, float]:
    """Seconds and CPU seconds of the same output reaching one client through a host."""
    host = Host(clock=lambda: time.time_ns() // 1_000_000, root=t.RootState(agents=()))
    server = HostServer(host)
    with tempfile.TemporaryDirectory() as root:
        service = TerminalService(server, roots=[root],
                                  options=TerminalOptions(shell=tuple(_command(size))))
        server.add_service(service)
        endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None)
        try:
            async with connect(endpoint.url) as client:
                await client.initialize(["ahp-root://"])
                uri = "ahp-terminal:/bench"
                start, cpu = time.perf_counter(), _cpu()
                await client.request(methods.CREATE_TERMINAL, t.CreateTerminalParams(
                    channel=uri, claim=t.TerminalClientClaim(client_id=client.client_id),
                    cwd=Path(root).as_uri()))
                await client.subscribe(uri)
                await client.wait_for_state(
                    uri, lambda s: isinstance(s, t.TerminalState) and s.exit_code is not None,
                    confirmed=True, timeout=300)
                return time.perf_counter() - start, _cpu() - cpu
        finally:
            await endpoint.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=100_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    mb = args.bytes / 1e6
    bare = min(asyncio.run(bare_pty(args.bytes)) for _ in range(args.rounds))
    assert bare[2] >= args.bytes, bare  # the pty turns each "\n" into "\r\n"
    hosted = min(asyncio.run(through_host(args.bytes)) for _ in range(args.rounds))
    print(f"{mb:g} MB of `yes` output, best of {args.rounds}")
    print(f"  pty read directly : {mb / bare[0]:8.1f} MB/s  {bare[0]:6.2f} s  "
          f"CPU {bare[1]:6.2f} s")
    print(f"  host -> 1 client  : {mb / hosted[0]:8.1f} MB/s  {hosted[0]:6.2f} s  "
          f"CPU {hosted[1]:6.2f} s  ({hosted[0] / bare[0]:.1f}x the time)")


if __name__ == "__main__":
    main()
