"""Benchmark (issue 30): the host fanning chat deltas out through ``asgi_app`` under uvicorn.

``bench_ws_fanout``'s run, with a third server beside its two: the same host
(a :class:`~agenthost_protocol.aio.HostServer` with one chat, each delta
dispatched and flushed, then a yield, as an agent does) served by
``asgi_app`` under uvicorn in the same process (``--ws``: uvicorn's WebSocket
implementation, ``auto`` as a user gets it by default), beside

* **ws**: the host under ``serve_websocket`` (``bench_ws_fanout``'s host);
* **bare**: ``websockets.broadcast`` of the same envelope bytes (the floor).

The clients are ``bench_ws_fanout``'s (K clients over ``--processes``
processes, counting frames).  Prints, per K and server, deltas/s, the
server's CPU per 1,000 frames delivered, and each host's CPU as a multiple
of bare's; then asgi's as a multiple of ws's: the issue's goal is at most
1.5x at K=10 and K=100.  Median of ``--rounds``.  ``--profile FILE`` writes
the asgi server's cProfile statistics.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_asgi_fanout [--clients 10 100] [--deltas 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import json
import os
import pstats
import socket
import statistics
import sys
import time
from typing import TYPE_CHECKING

from .bench_ws_fanout import (
    CHAT,
    PART,
    TURN,
    _cpu,
    _drained,
    _envelope,
    _pace,
    _serve_bare,
    _serve_host,
    _write_times,
    bench_host,
    run_round,
)

if TYPE_CHECKING:
    import uvicorn

MODES = ("bare", "ws", "uvicorn", "asgi")


def _uvicorn(app: object, args: argparse.Namespace) -> tuple[uvicorn.Server, socket.socket]:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="off",  # type: ignore[arg-type]
                            log_level="warning", access_log=False, ws=args.ws,
                            ws_ping_interval=None, backlog=1024,
                            ws_per_message_deflate=args.compression == "deflate")
    return uvicorn.Server(config), sock


async def _serve_uvicorn(args: argparse.Namespace) -> None:
    """The floor under uvicorn: a bare ASGI application sending the same envelopes
    (built beforehand) to every client, one ``websocket.send`` each, as it comes."""

    clients, deltas = args.clients[0], args.deltas
    sends: list[object] = []
    joined = asyncio.Event()
    done = asyncio.Event()

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] != "websocket":
            return
        assert callable(receive) and callable(send)
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        sends.append(send)
        if len(sends) == clients:
            joined.set()
        while (await receive())["type"] != "websocket.disconnect":
            pass

    frames = [_envelope(seq) for seq in range(3, deltas + 3)]
    uv, sock = _uvicorn(app, args)
    serving = asyncio.create_task(uv.serve(sockets=[sock]))
    while not uv.started:
        await asyncio.sleep(0.01)
    print(f"ws://127.0.0.1:{sock.getsockname()[1]}/", flush=True)
    await joined.wait()
    transports = [c.transport for c in uv.server_state.connections
                  if c.transport is not None]
    sent = []
    start_wall, start_cpu = time.time(), _cpu()
    for frame in frames:
        sent.append(time.time())
        message = {"type": "websocket.send", "text": frame}
        for send in sends:
            assert callable(send)
            await send(message)
        await _pace(args.rate, start_wall, len(sent))
    _write_times(args.times, sent)
    await _drained(lambda: all(tr.get_write_buffer_size() == 0 for tr in transports))
    print(json.dumps({"start": start_wall, "cpu": _cpu() - start_cpu}), flush=True)
    done.set()
    uv.should_exit = True
    await serving


async def _serve_asgi(args: argparse.Namespace) -> None:

    from agenthost_protocol import types as t
    from agenthost_protocol.aio.access import AccessPolicy
    from agenthost_protocol.aio.server import HostServer, ServerLimits
    from agenthost_protocol.asgi import asgi_app
    from agenthost_protocol.host import Initialized


    host = bench_host()
    clients, deltas = args.clients[0], args.deltas
    server = HostServer(host, limits=ServerLimits(max_connections=max(256, clients + 8)))
    joined = asyncio.Event()
    count = 0

    def handle(event: object) -> None:
        nonlocal count
        if isinstance(event, Initialized):
            count += 1
            if count == clients:
                joined.set()

    server.handler = handle
    uv, sock = _uvicorn(asgi_app(server, policy=AccessPolicy()), args)
    port = sock.getsockname()[1]
    serving = asyncio.create_task(uv.serve(sockets=[sock]))
    while not uv.started:
        await asyncio.sleep(0.01)
    print(f"ws://127.0.0.1:{port}/", flush=True)
    await joined.wait()
    transports = [c.transport for c in uv.server_state.connections
                  if c.transport is not None]
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
    uv.should_exit = True
    await serving


def _round(args: argparse.Namespace, mode: str, clients: int) -> dict[str, float]:
    return run_round(
        args, clients, module="tests.benchmarks.bench_asgi_fanout",
        server_args=[f"--serve-{mode}", "--ws", args.ws, "--compression", args.compression,
                     "--rate", str(args.rate),
                     *(["--profile", args.profile] if args.profile and mode == "asgi" else [])],
        client_args=["--mode", "host" if mode in ("ws", "asgi") else "bare", "--window", "0"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ws", default="auto",
                        choices=("auto", "websockets", "websockets-sansio", "wsproto"),
                        help="uvicorn's WebSocket implementation (default auto)")
    parser.add_argument("--compression", choices=("none", "deflate"), default="none",
                        help="permessage-deflate for all three servers (uvicorn's default is "
                        "deflate; bench_ws_fanout's and this one's none)")
    parser.add_argument("--rate", type=float, default=0, metavar="N",
                        help="dispatch N deltas a second (default: as fast as the server can)")
    parser.add_argument("--profile", metavar="FILE",
                        help="profile the asgi server, its statistics written to FILE")
    for mode in MODES:
        parser.add_argument(f"--serve-{mode}", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--times", help=argparse.SUPPRESS)
    args = parser.parse_args()
    serving = next((mode for mode in MODES if getattr(args, f"serve_{mode}")), None)
    if serving is not None:
        # bench_ws_fanout's servers read these of its own options
        args.transport = "ws"
        serve = {"bare": _serve_bare, "ws": _serve_host, "uvicorn": _serve_uvicorn,
                 "asgi": _serve_asgi}[serving]
        run = functools.partial(asyncio.run, serve(args))
        if not args.profile:
            run()
            return
        profile = cProfile.Profile()
        profile.runcall(run)
        with open(args.profile, "w") as out:
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(40)
        return
    import uvicorn

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; uvicorn "
          f"{uvicorn.__version__} --ws {args.ws}; {args.deltas:,} deltas, compression "
          f"{args.compression}, rate "
          f"{args.rate or 'max'}, clients in {args.processes} processes, median of "
          f"{args.rounds}")
    print(f"{'K':>4} {'server':>6} {'deltas/s':>10} {'CPU ms/1k delivered':>20} "
          f"{'÷ bare':>8} {'÷ ws':>7} {'p50 ms':>8} {'p99 ms':>8} {'frames/client':>14}")
    for clients in args.clients:
        cpu: dict[str, float] = {}
        for mode in MODES:
            results = [_round(args, mode, clients) for _ in range(args.rounds)]

            def median(key: str, results: list[dict[str, float]] = results) -> float:
                return statistics.median(r[key] for r in results)

            cpu[mode] = median("cpu")
            to_bare = f"{cpu[mode] / cpu['bare']:.2f}x" if mode != "bare" else ""
            to_ws = f"{cpu[mode] / cpu['ws']:.2f}x" if mode in ("uvicorn", "asgi") else ""
            print(f"{clients:>4} {mode:>6} {median('rate'):>10,.0f} {cpu[mode]:>20.1f} "
                  f"{to_bare:>8} {to_ws:>7} {median('p50'):>8.2f} {median('p99'):>8.2f} "
                  f"{median('frames'):>14,.0f}", flush=True)


if __name__ == "__main__":
    main()
