"""Benchmark (issue 21): the memory of an idle WebSocket connection, host beside bare websockets.

A server process accepts ``--connections`` WebSocket clients, opened by
``--processes`` client processes, which then do nothing.  Two servers:

* **host**: a :class:`~agenthost_protocol.aio.HostServer` (``ServerLimits``
  defaults but ``max_connections``); each client ``initialize``s subscribed
  to the root channel, as a client that only lists sessions does;
* **bare**: a ``websockets`` server whose handler waits: the floor.

Prints, per server, what the connections cost the server process, per
connection: Python's allocations (``tracemalloc``, after a collection) and
the resident set (``ru_maxrss``/``/proc``).  The issue's goal: at most
20 kB per idle connection.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_ws_memory [--connections 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _serve(mode: str, connections: int) -> None:
    from websockets.asyncio.server import ServerConnection, serve

    tracemalloc.start()
    joined = asyncio.Event()
    done = asyncio.Event()
    count = 0
    if mode == "host":
        from agenthost_protocol import types as t
        from agenthost_protocol.aio.server import HostServer, ServerLimits
        from agenthost_protocol.aio.websocket import serve_websocket
        from agenthost_protocol.host import Host, Initialized

        def handle(event: object) -> None:
            nonlocal count
            if isinstance(event, Initialized):
                count += 1
                if count == connections:
                    joined.set()

        server = HostServer(Host(clock=lambda: int(time.time() * 1000),
                                 root=t.RootState(agents=())), handle,
                            limits=ServerLimits(max_connections=connections + 8))
        endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None)
        url = endpoint.url
    else:
        async def handler(ws: ServerConnection) -> None:
            nonlocal count
            count += 1
            if count == connections:
                joined.set()
            await done.wait()

        # no permessage-deflate: the host does not negotiate it on loopback either
        bare = await serve(handler, "127.0.0.1", 0, ping_interval=None, max_queue=4,
                           compression=None)
        url = f"ws://127.0.0.1:{next(iter(bare.sockets)).getsockname()[1]}"
    gc.collect()
    before_py, before_rss = tracemalloc.get_traced_memory()[0], _rss()
    first = tracemalloc.take_snapshot() if os.environ.get("BENCH_TOP") else None
    print(url, flush=True)
    await joined.wait()
    await asyncio.sleep(0.5)  # the last handshakes settle
    gc.collect()
    after_py, after_rss = tracemalloc.get_traced_memory()[0], _rss()
    if first is not None:
        # where a connection's memory goes (BENCH_TOP=N: the N largest sites, to stderr)
        diff = tracemalloc.take_snapshot().compare_to(first, "lineno")
        for stat in diff[: int(os.environ["BENCH_TOP"])]:
            print(f"{stat.size_diff / connections:8.0f} B/conn  {stat.traceback}",
                  file=sys.stderr)
    print(json.dumps({"python": (after_py - before_py) / connections,
                      "rss": (after_rss - before_rss) / connections}), flush=True)
    sys.stdin.readline()  # the clients are done
    done.set()
    if mode == "host":
        await endpoint.close()
    else:
        bare.close()
        await bare.wait_closed()


async def _clients(url: str, count: int, mode: str) -> None:
    from websockets.asyncio.client import ClientConnection, connect

    opened: list[ClientConnection] = []
    for number in range(count):
        ws = await connect(url, ping_interval=None)
        opened.append(ws)
        if mode == "host":
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                      "params": {"protocolVersions": ["0.7.0"],
                                                 "clientId": f"c{os.getpid()}-{number}",
                                                 "initialSubscriptions": ["ahp-root://"]}}))
            await ws.recv()
    print("open", flush=True)
    sys.stdin.readline()
    for ws in opened:
        ws.transport.abort()


def _round(mode: str, connections: int, processes: int) -> dict[str, float]:
    me = [sys.executable, "-m", "tests.benchmarks.bench_ws_memory"]
    server = subprocess.Popen([*me, "--serve", mode, "--connections", str(connections)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    url = server.stdout.readline().strip()
    shares = [connections // processes + (1 if i < connections % processes else 0)
              for i in range(processes)]
    clients = [subprocess.Popen([*me, "--client", url, "--count", str(share), "--mode", mode],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for share in shares if share]
    try:
        figures: dict[str, float] = json.loads(server.stdout.readline())
        for proc in clients:
            assert proc.stdin is not None
            proc.stdin.write("\n")
            proc.stdin.flush()
        server.stdin.write("\n")
        server.stdin.flush()
        for proc in (server, *clients):
            proc.wait(60)
    finally:
        for proc in (server, *clients):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--serve", choices=("host", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="host", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.connections))
        return
    if args.client:
        asyncio.run(_clients(args.client, args.count, args.mode))
        return
    print(f"python {sys.version.split()[0]}; {args.connections:,} idle connections from "
          f"{args.processes} processes")
    print(f"{'server':>6} {'Python kB/connection':>21} {'RSS kB/connection':>18}")
    for mode in ("bare", "host"):
        figures = _round(mode, args.connections, args.processes)
        print(f"{mode:>6} {figures['python'] / 1000:>21.1f} {figures['rss'] / 1000:>18.1f}",
              flush=True)


if __name__ == "__main__":
    main()
