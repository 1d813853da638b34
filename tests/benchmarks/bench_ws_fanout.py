"""Benchmark (issue 21): a host fanning chat deltas out over WebSocket, beside bare websockets.

One run per K (``--clients 1 10 100``): a server process streams ``--deltas``
``chat/delta`` envelopes to K WebSocket clients spread over ``--processes``
client processes, which count the frames.  Two servers, same bytes, same
clients:

* **host**: a :class:`~agenthost_protocol.aio.HostServer` with one chat; the
  clients ``initialize`` subscribed to it; the server dispatches each delta
  and flushes, then yields, as an agent does;
* **bare**: ``websockets.broadcast`` of the same envelope bytes (built
  beforehand) to the same clients, yielding after each: the floor a host on
  this transport can reach.

Prints, per K and server: deltas/s (from the stream's start to the last
frame any client received), the server's CPU per 1,000 frames delivered,
and the host's CPU as a multiple of bare's: the issue's goals are K=100
<= 0.5x, K=10 <= 1.0x, K=1 <= 3x.  Median of ``--rounds``.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_ws_fanout [--clients 1 10 100] [--deltas 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import json
import os
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agenthost_protocol.host import Host

CHAT = "ahp-chat:/bench"
TURN = "turn-0"
PART = "bench-md"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _envelope(seq: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": "action", "params": {
        "channel": CHAT, "serverSeq": seq, "action": {
            "type": "chat/delta", "turnId": TURN, "partId": PART, "content": "eight ch"}}},
        separators=(",", ":"))


# -- servers (each a process of its own) ----------------------------------------------------

def bench_host() -> Host:
    """A host with one chat whose turn streams into one Markdown part (``CHAT``, ``TURN``,
    ``PART``): what every server of the benchmark fans out."""
    from agenthost_protocol import types as t
    from agenthost_protocol.host import Host as HostCore

    from ._stream import initial_state

    host = HostCore(clock=lambda: 1_767_225_600_000, root=t.RootState(agents=()))
    host.add_channel(CHAT, initial_state())
    host.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id=TURN, started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text="bench", origin=t.MessageOrigin(kind=t.MessageKind.USER))))
    host.dispatch(CHAT, t.ChatResponsePartAction(
        turn_id=TURN, part=t.MarkdownResponsePart(id=PART, content="")))
    return host


async def _serve_host(args: argparse.Namespace) -> None:
    from agenthost_protocol import types as t
    from agenthost_protocol.aio.server import HostServer, ServerLimits
    from agenthost_protocol.aio.stdio import serve_streams
    from agenthost_protocol.aio.websocket import serve_websocket
    from agenthost_protocol.host import Initialized


    host = bench_host()
    clients, deltas = args.clients[0], args.deltas
    server = HostServer(host, limits=ServerLimits(
        compression=args.compression, max_connections=max(256, clients + 8)))
    joined = asyncio.Event()
    count = 0

    def handle(event: object) -> None:
        nonlocal count
        if isinstance(event, Initialized):
            count += 1
            if count == clients:
                joined.set()

    server.handler = handle
    if args.transport == "ws":
        endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None)
        print(endpoint.url, flush=True)
    else:
        writers: list[asyncio.StreamWriter] = []

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writers.append(writer)
            await serve_streams(server, reader, writer)

        lines = await asyncio.start_server(connected, "127.0.0.1", 0)
        print(f"tcp://127.0.0.1:{lines.sockets[0].getsockname()[1]}", flush=True)
    await joined.wait()
    transports: list[asyncio.WriteTransport]
    if args.transport == "ws":
        transports = [ws.transport for ws in endpoint.endpoint.connections]
    else:
        transports = [writer.transport for writer in writers]
    delta = t.ChatDeltaAction(turn_id=TURN, part_id=PART, content="eight ch")
    sent = []
    start_wall, start_cpu = time.time(), _cpu()
    for _ in range(deltas):
        sent.append(time.time())
        host.dispatch(CHAT, delta)
        server.flush()
        await _pace(args.rate, start_wall, len(sent))
    _write_times(args.times, sent)
    await asyncio.sleep(0.01)  # the last deltas wait for the send interval
    await _drained(lambda: server.queued_bytes == 0
                   and all(tr.get_write_buffer_size() == 0 for tr in transports))
    print(json.dumps({"start": start_wall, "cpu": _cpu() - start_cpu}), flush=True)
    await server.wait_idle()
    if args.transport == "ws":
        await endpoint.close()
    else:
        lines.close()


async def _serve_bare(args: argparse.Namespace) -> None:
    if args.transport == "jsonl":
        await _serve_bare_lines(args)
        return
    from websockets.asyncio.server import ServerConnection, broadcast, serve

    clients, deltas, compression = args.clients[0], args.deltas, args.compression

    connections: set[ServerConnection] = set()
    joined = asyncio.Event()
    done = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        connections.add(ws)
        if len(connections) == clients:
            joined.set()
        try:
            await done.wait()
            await ws.wait_closed()
        finally:
            connections.discard(ws)

    frames = [_envelope(seq) for seq in range(3, deltas + 3)]
    async with serve(handler, "127.0.0.1", 0, ping_interval=None, max_queue=4,
                     compression="deflate" if compression == "deflate" else None) as srv:
        port = next(iter(srv.sockets)).getsockname()[1]
        print(f"ws://127.0.0.1:{port}", flush=True)
        await joined.wait()
        sent = []
        start_wall, start_cpu = time.time(), _cpu()
        for frame in frames:
            sent.append(time.time())
            broadcast(connections, frame)
            await _pace(args.rate, start_wall, len(sent))
        _write_times(args.times, sent)

        def empty() -> bool:
            return all(ws.transport.get_write_buffer_size() == 0 for ws in connections)

        await _drained(empty)
        print(json.dumps({"start": start_wall, "cpu": _cpu() - start_cpu}), flush=True)
        done.set()
        while connections:
            await asyncio.sleep(0.01)


async def _serve_bare_lines(args: argparse.Namespace) -> None:
    """JSON Lines over TCP: each line written to every client's stream, as it comes."""
    clients = args.clients[0]
    writers: list[asyncio.StreamWriter] = []
    joined = asyncio.Event()
    done = asyncio.Event()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        if len(writers) == clients:
            joined.set()
        await done.wait()
        writer.close()

    lines = [(_envelope(seq) + "\n").encode() for seq in range(3, args.deltas + 3)]
    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    print(f"tcp://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    await joined.wait()
    sent = []
    start_wall, start_cpu = time.time(), _cpu()
    for line in lines:
        sent.append(time.time())
        for writer in writers:
            writer.write(line)
        await _pace(args.rate, start_wall, len(sent))
    _write_times(args.times, sent)
    await _drained(lambda: all(w.transport.get_write_buffer_size() == 0 for w in writers))
    print(json.dumps({"start": start_wall, "cpu": _cpu() - start_cpu}), flush=True)
    done.set()
    server.close()


async def _pace(rate: float, start: float, done: int) -> None:
    """Yield, as an agent does between deltas; with ``--rate``, until the next one is due."""
    delay = start + done / rate - time.time() if rate else 0.0
    await asyncio.sleep(max(0.0, delay))


def _write_times(path: str, sent: list[float]) -> None:
    """When each delta was dispatched (``sent[i]``: serverSeq ``i + 3``), for the clients."""
    with open(path + ".tmp", "w") as out:
        json.dump(sent, out)
    os.replace(path + ".tmp", path)


def _read_times(path: str) -> list[float]:
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no dispatch times in {path}")
        time.sleep(0.01)
    with open(path) as f:
        times: list[float] = json.load(f)
    return times


async def _drained(empty: object) -> None:
    assert callable(empty)
    while not empty():
        await asyncio.sleep(0.001)


# -- clients --------------------------------------------------------------------------------

_SEQ = re.compile(r'"serverSeq":(\d+)')


async def _clients(url: str, count: int, deltas: int, mode: str, *, times: str,
                   window: int) -> None:
    from websockets.asyncio.client import connect

    last = 0.0

    def hello(number: int) -> list[str]:
        if mode != "host":
            return []
        out = [json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                           "params": {"protocolVersions": ["0.7.0"],
                                      "clientId": f"c{os.getpid()}-{number}",
                                      "initialSubscriptions": [CHAT]}})]
        if window:
            out.append(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "subscribe", "params": {
                "channel": CHAT, "delivery": {"maxLatencyMs": window}}}))
        return out

    async def one(number: int) -> list[tuple[int, float]]:
        nonlocal last
        arrivals: list[tuple[int, float]] = []
        final = deltas + 2
        seen = 0
        if url.startswith("tcp://"):
            host, port = url[len("tcp://"):].rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port), limit=2**24)
            for line in hello(number):
                writer.write(line.encode() + b"\n")
            while seen < final:
                text = (await reader.readline()).decode()
                if "chat/delta" in text:
                    match = _SEQ.search(text)
                    assert match is not None
                    seen = int(match[1])
                    arrivals.append((seen, time.time()))
            writer.close()
        else:
            async with connect(url, max_size=None, ping_interval=None) as ws:
                for line in hello(number):
                    await ws.send(line)
                while seen < final:
                    data = await ws.recv()
                    assert isinstance(data, str)
                    if "chat/delta" in data:
                        match = _SEQ.search(data)
                        assert match is not None
                        seen = int(match[1])
                        arrivals.append((seen, time.time()))
        last = max(last, time.time())
        return arrivals

    received = await asyncio.gather(*(one(n) for n in range(count)))
    sent = _read_times(times)
    latencies: list[float] = []
    for arrivals in received:
        # a frame carries every delta after the one the frame before ended with
        previous = 2
        for seq, arrived in arrivals:
            latencies.extend(arrived - sent[k - 3] for k in range(previous + 1, seq + 1))
            previous = seq
    latencies.sort()
    step = max(1, len(latencies) // 20_000)
    print(json.dumps({"last": last, "frames": sum(map(len, received)),
                      "latencies": latencies[::step]}), flush=True)


# -- the run --------------------------------------------------------------------------------

def _round(args: argparse.Namespace, mode: str, clients: int) -> dict[str, float]:
    return run_round(
        args, clients, module="tests.benchmarks.bench_ws_fanout",
        server_args=[f"--serve-{mode}", "--compression", args.compression,
                     "--transport", args.transport, "--rate", str(args.rate),
                     *(["--profile", args.profile] if args.profile and mode == "host" else [])],
        client_args=["--mode", mode, "--window", str(args.window)])


def run_round(args: argparse.Namespace, clients: int, *, module: str, server_args: list[str],
              client_args: list[str]) -> dict[str, float]:
    """One round: ``python -m module SERVER_ARGS`` serving ``clients`` readers spread
    over ``args.processes`` processes of this module's ``--client`` (with
    ``client_args``), ``args.deltas`` deltas; the figures per 1,000 frames."""
    processes = min(args.processes, clients)
    with tempfile.TemporaryDirectory() as scratch:
        times = os.path.join(scratch, "sent.json")
        common = ["--deltas", str(args.deltas), "--times", times]
        server = subprocess.Popen(
            [sys.executable, "-m", module, *server_args, "--clients", str(clients), *common],
            stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        shares = [clients // processes + (1 if i < clients % processes else 0)
                  for i in range(processes)]
        readers = [subprocess.Popen(
            [sys.executable, "-m", "tests.benchmarks.bench_ws_fanout", "--client", url,
             "--count", str(share), *client_args, *common],
            stdout=subprocess.PIPE, text=True) for share in shares if share]
        try:
            figures = json.loads(server.stdout.readline())
            outputs = [json.loads(proc.communicate(timeout=600)[0]) for proc in readers]
            server.wait(60)
        finally:
            for proc in (server, *readers):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    last = max(out["last"] for out in outputs)
    latencies = sorted(x for out in outputs for x in out["latencies"])
    return {
        "rate": args.deltas / max(last - figures["start"], 1e-9),
        "cpu": figures["cpu"] / (args.deltas * clients / 1000) * 1000,
        "p50": latencies[len(latencies) // 2] * 1000,
        "p99": latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)] * 1000,
        "frames": sum(out["frames"] for out in outputs) / clients,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compression", choices=("none", "deflate"), default="none")
    parser.add_argument("--transport", choices=("ws", "jsonl"), default="ws",
                        help="WebSocket, or JSON Lines over TCP (bare: each line written "
                        "to every client's stream)")
    parser.add_argument("--rate", type=float, default=0, metavar="N",
                        help="dispatch N deltas a second (default: as fast as the server can)")
    parser.add_argument("--window", type=int, default=0, metavar="MS",
                        help="host clients subscribe with delivery.maxLatencyMs=MS")
    parser.add_argument("--profile", metavar="FILE",
                        help="profile the host server, its statistics written to FILE")
    parser.add_argument("--serve-host", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="host", help=argparse.SUPPRESS)
    parser.add_argument("--times", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_host or args.serve_bare:
        serve = _serve_host if args.serve_host else _serve_bare
        run = functools.partial(asyncio.run, serve(args))
        if not args.profile:
            run()
            return
        profile = cProfile.Profile()
        profile.runcall(run)
        with open(args.profile, "w") as out:
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(40)
        return
    if args.client:
        asyncio.run(_clients(args.client, args.count, args.deltas, args.mode,
                             times=args.times, window=args.window))
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.deltas:,} deltas, "
          f"{args.transport}, rate {args.rate or 'max'}, compression {args.compression}, "
          f"window {args.window} ms, clients in {args.processes} processes, median of "
          f"{args.rounds}")
    print(f"{'K':>4} {'server':>6} {'deltas/s':>10} {'CPU ms/1k delivered':>20} "
          f"{'host / bare':>12} {'p50 ms':>8} {'p99 ms':>8} {'frames/client':>14}")
    for clients in args.clients:
        cpu: dict[str, float] = {}
        for mode in ("bare", "host"):
            results = [_round(args, mode, clients) for _ in range(args.rounds)]

            def median(key: str, results: list[dict[str, float]] = results) -> float:
                return statistics.median(r[key] for r in results)

            cpu[mode] = median("cpu")
            ratio = f"{cpu['host'] / cpu['bare']:.2f}x" if mode == "host" else ""
            print(f"{clients:>4} {mode:>6} {median('rate'):>10,.0f} {cpu[mode]:>20.1f} "
                  f"{ratio:>12} {median('p50'):>8.2f} {median('p99'):>8.2f} "
                  f"{median('frames'):>14,.0f}", flush=True)


if __name__ == "__main__":
    main()
