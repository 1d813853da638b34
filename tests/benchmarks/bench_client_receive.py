"""Benchmark: what an :class:`~agenthost_protocol.aio.client.AsyncClient` costs to keep up.

A host server in another process (a :class:`~agenthost_protocol.aio.HostServer`
with one chat over WebSocket, as in ``bench_ws_fanout``) streams ``--deltas``
``chat/delta`` actions, dispatch and flush per delta, yielding after each,
as an agent does.  The clients run in this process: each an ``AsyncClient``
subscribed to the chat, with an application task reading its
:meth:`~agenthost_protocol.aio.client.AsyncClient.events` (every
``ActionReceived`` comes after its action was decoded and reduced into the
client's state).  Two figures, median of ``--rounds``:

* **one client**: this process's CPU time (``getrusage``, user + system) per
  1,000 actions received and reduced, from the first dispatch to the last
  event (the goal: <= 10 ms);
* **ten clients** in this one process: the latency of each action, from the
  host's dispatch (the server process records ``time.time()`` before each
  ``dispatch``) to the client's application seeing it reduced (its
  ``ActionReceived`` event; same machine, same clock); p50 and p99 over
  every client and action (the goal: p99 <= 50 ms), and this process's CPU
  per 1,000 actions received.

The last state of every client is checked (the whole streamed text).
``--rate N`` paces the host at N deltas a second (default: as fast as it
can, dispatch, flush and yield per delta, which a Python client process
following ten subscriptions cannot match).  ``--replay`` adds a third
figure: one client fed the same frames in-process, put straight into its
socket's protocol 64 KiB at a time while the host is idle, so nothing else
competes for the CPU (on a shared machine the first figure moves with the
load).  ``--max-latency-ms`` subscribes with
``SubscriptionDeliveryOptions(max_latency_ms=...)`` (above 0 the host may
then coalesce; the goals are for every action delivered separately: 0, the
default; -1 leaves the client's own default, ``DEFAULT_CHAT_DELIVERY_MS``).
``--profile FILE`` writes a cProfile of the first one-client
round of this process (the client's receive path).

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_client_receive [--deltas 20000] [--rounds 3] \
        [--rate N] [--replay]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from typing import Any

CHAT = "ahp-chat:/bench"
TURN = "turn-0"
PART = "bench-md"
TEXT = "eight ch"
_TIMEOUT = 300.0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the host (a process of its own) --------------------------------------------------------

async def _serve(deltas: int, times_path: str) -> None:
    from agenthost_protocol import types as t
    from agenthost_protocol.aio.server import HostServer, ServerLimits
    from agenthost_protocol.aio.websocket import serve_websocket
    from agenthost_protocol.host import Host

    from ._stream import initial_state

    host = Host(clock=lambda: 1_767_225_600_000, root=t.RootState(agents=()))
    host.add_channel(CHAT, initial_state())
    host.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id=TURN, started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text="bench", origin=t.MessageOrigin(kind=t.MessageKind.USER))))
    host.dispatch(CHAT, t.ChatResponsePartAction(
        turn_id=TURN, part=t.MarkdownResponsePart(id=PART, content="")))
    server = HostServer(host, limits=ServerLimits(compression="none"))
    endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None)
    print(endpoint.url, flush=True)
    loop = asyncio.get_running_loop()
    while True:
        # a line per round: "go RATE" streams the deltas, anything else (or the end) stops
        line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not line or line[0] != "go":
            break
        rate = float(line[1])
        delta = t.ChatDeltaAction(turn_id=TURN, part_id=PART, content=TEXT)
        first = host.dispatch(CHAT, delta).server_seq  # a warm-up delta, not timed
        server.flush()
        await asyncio.sleep(0.05)
        stamps = [0.0] * deltas
        start_cpu = _cpu()
        start = time.time()
        for i in range(deltas):
            now = time.time()
            if rate:  # paced: delta i is due at start + i / rate
                due = start + i / rate
                if due > now:
                    await asyncio.sleep(due - now)
                    now = time.time()
            stamps[i] = now
            host.dispatch(CHAT, delta)
            server.flush()
            await asyncio.sleep(0)
        while server.queued_bytes:
            await asyncio.sleep(0.001)
        cpu = _cpu() - start_cpu
        with open(times_path, "w") as out:
            json.dump({"first": first + 1, "stamps": stamps}, out)
        print(json.dumps({"cpu": cpu, "first": first + 1}), flush=True)
    await endpoint.close()


# -- the clients (this process) ---------------------------------------------------------------

class _Reader:
    """One client and its application task, which stamps every action it sees reduced."""

    def __init__(self, client: Any, deltas: int) -> None:
        self.client = client
        self.deltas = deltas
        self.stream = client.events(buffer=4 * deltas + 1024)
        self.seen: dict[int, float] = {}
        self.first = 0
        self.done = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.dropped = 0

    def start(self, first: int) -> None:
        self.first = first
        self.seen = {}
        self.done = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        from agenthost_protocol.aio.client import ActionReceived, EventsDropped

        last = self.first + self.deltas - 1
        seen = self.seen
        clock = time.time
        async for event in self.stream:
            if type(event) is ActionReceived:
                seq = event.received.envelope.server_seq
                seen[seq] = clock()
                if seq >= last:
                    break
            elif isinstance(event, EventsDropped):
                self.dropped += event.count
        self.done.set()


async def _open(url: str, number: int, max_latency_ms: int | None) -> Any:
    from agenthost_protocol import types as t
    from agenthost_protocol.aio.client import connect

    client = await connect(url, client_id=f"bench-{os.getpid()}-{number}", reconnect=False,
                           ping_interval=None)
    await client.initialize()
    delivery = (None if max_latency_ms is None or max_latency_ms < 0
                else t.SubscriptionDeliveryOptions(max_latency_ms=max_latency_ms))
    await client.subscribe(CHAT, delivery=delivery)
    return client


def _text(state: Any) -> str:
    turn = state.active_turn
    assert turn is not None
    part = turn.response_parts[0]
    return str(part.content)


async def _round(server: asyncio.subprocess.Process, url: str, clients: int,
                 args: argparse.Namespace, *, times_path: str, profile: str | None
                 ) -> dict[str, float]:
    assert server.stdin is not None and server.stdout is not None
    deltas = args.deltas
    opened = [await _open(url, n, args.max_latency_ms) for n in range(clients)]
    try:
        readers = [_Reader(c, deltas) for c in opened]
        # the first serverSeq to time is the one after the warm-up delta
        base = opened[0].confirmed(CHAT)
        before = len(_text(base))
        server.stdin.write(f"go {args.rate}\n".encode())
        await server.stdin.drain()
        profiler = None
        if profile is not None:
            import cProfile

            profiler = cProfile.Profile()
        # the warm-up delta's serverSeq: the next after every client's snapshot
        warm = await _wait_warm(opened, before)
        for reader in readers:
            reader.start(warm + 1)
        start_cpu = _cpu()
        if profiler is not None:
            profiler.enable()
        await _bounded(asyncio.gather(*(r.done.wait() for r in readers)),
                       "the clients to see every delta", readers)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(profile))
        cpu = _cpu() - start_cpu
        figures = json.loads(await _bounded(server.stdout.readline(),
                                            "the host to drain its queues", readers))
        assert figures["first"] == warm + 1, (figures, warm)
        with open(times_path) as f:
            stamps = json.load(f)["stamps"]
        latencies: list[float] = []
        for reader in readers:
            assert not reader.dropped, "the event stream dropped events"
            for i, sent in enumerate(stamps):
                got = reader.seen.get(warm + 1 + i)
                if got is not None:  # coalesced deltas (max_latency_ms) are not seen apart
                    latencies.append(got - sent)
        for client in opened:
            assert _text(client.state(CHAT)) == _text(base) + TEXT * (deltas + 1)
        latencies.sort()
        return {
            "cpu_per_k": cpu / (deltas * clients / 1000) * 1000,
            "p50": latencies[len(latencies) // 2] * 1000,
            "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            "max": latencies[-1] * 1000,
            "server_cpu_per_k": figures["cpu"] / (deltas * clients / 1000) * 1000,
        }
    finally:
        for client in opened:
            await client.close()


def _frame(message: bytes) -> bytes:
    """``message`` as the unmasked text frame a host sends."""
    size = len(message)
    if size < 126:
        return bytes((0x81, size)) + message
    if size < 65536:
        return b"\x81\x7e" + size.to_bytes(2, "big") + message
    return b"\x81\x7f" + size.to_bytes(8, "big") + message


async def _replayed(url: str, args: argparse.Namespace) -> float:
    """One client, the deltas put straight into its socket's protocol (what reading the
    socket would have delivered, 64 KiB at a time) while the host is idle: this
    process's CPU per 1,000 actions, nothing else competing for the CPU."""
    from agenthost_protocol import types as t
    from agenthost_protocol import wire

    client = await _open(url, 0, None)
    try:
        first = client.connection.reconciler.last_seen_server_seq + 1
        before = len(_text(client.confirmed(CHAT)))
        delta = t.ChatDeltaAction(turn_id=TURN, part_id=PART, content=TEXT)
        data = b"".join(
            _frame(wire.dumps(t.JsonRpcNotification(method="action", params=t.ActionEnvelope(
                channel=CHAT, action=delta, server_seq=seq))).encode())
            for seq in range(first, first + args.deltas))
        protocol = client.transport.websocket.transport.get_protocol()
        reader = _Reader(client, args.deltas)
        reader.start(first)
        start_cpu = _cpu()
        for at in range(0, len(data), 65536):
            protocol.data_received(data[at:at + 65536])
            await asyncio.sleep(0)
        await _bounded(reader.done.wait(), "the client to see every delta", [reader])
        cpu = _cpu() - start_cpu
        assert len(_text(client.confirmed(CHAT))) == before + len(TEXT) * args.deltas
        return float(cpu / (args.deltas / 1000) * 1000)
    finally:
        await client.close()


async def _bounded(awaitable: Any, what: str, readers: list[_Reader]) -> Any:
    """``await awaitable``, but fail (saying who waits for what) after ``_TIMEOUT`` s."""
    try:
        return await asyncio.wait_for(awaitable, _TIMEOUT)
    except asyncio.TimeoutError:
        seen = [f"{len(r.seen)}/{r.deltas}" for r in readers]
        raise SystemExit(f"gave up waiting for {what} after {_TIMEOUT:g} s "
                         f"(deltas seen per client: {', '.join(seen)})") from None


async def _wait_warm(opened: list[Any], before: int) -> int:
    """Wait until every client has the warm-up delta; its serverSeq."""
    for client in opened:
        await client.wait_for_state(CHAT, lambda s: len(_text(s)) > before, confirmed=True,
                                    timeout=30)
    return int(opened[0].connection.reconciler.last_seen_server_seq)


async def _run(args: argparse.Namespace) -> None:
    fd, times_path = tempfile.mkstemp(prefix="bench-client-", suffix=".json")
    os.close(fd)
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.benchmarks.bench_client_receive", "--serve",
        "--deltas", str(args.deltas), "--times", times_path,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    try:
        assert server.stdout is not None and server.stdin is not None
        url = (await server.stdout.readline()).decode().strip()
        delivery = ("the client's default" if args.max_latency_ms < 0
                    else f"max_latency_ms={args.max_latency_ms}")
        pace = f"{args.rate:,.0f} deltas/s" if args.rate else "as fast as the host can"
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.deltas:,} "
              f"chat/delta per round ({pace}), median of {args.rounds}; delivery {delivery}",
              flush=True)
        print(f"{'clients':>7} {'client CPU ms/1k':>17} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'max ms':>8} {'host CPU ms/1k':>15}", flush=True)
        for clients in args.clients:
            results = [await _round(server, url, clients, args, times_path=times_path,
                                    profile=args.profile if clients == 1 and r == 0 else None)
                       for r in range(args.rounds)]

            def med(key: str, results: list[dict[str, float]] = results) -> float:
                return statistics.median(r[key] for r in results)

            print(f"{clients:>7} {med('cpu_per_k'):>17.2f} {med('p50'):>8.1f} "
                  f"{med('p99'):>8.1f} {med('max'):>8.1f} {med('server_cpu_per_k'):>15.2f}",
                  flush=True)
        if args.replay:
            replayed = [await _replayed(url, args) for _ in range(args.rounds)]
            print(f"{'1':>7} {statistics.median(replayed):>17.2f}  (replayed in-process, "
                  "the host idle)", flush=True)
        server.stdin.write(b"stop\n")
        await server.stdin.drain()
        server.stdin.close()
        await asyncio.wait_for(server.wait(), 30)
    finally:
        if server.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                server.kill()
            await server.wait()
        with contextlib.suppress(OSError):
            os.unlink(times_path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="deltas per second the host streams (default: as fast as it can)")
    parser.add_argument("--max-latency-ms", type=int, default=0,
                        help="delivery.maxLatencyMs of the subscription (-1: the client's "
                        "default; 0, the default: every action as dispatched)")
    parser.add_argument("--replay", action="store_true",
                        help="also: one client fed the frames in-process, the host idle")
    parser.add_argument("--profile", help="write a cProfile of the first one-client round here")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--times", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.deltas, args.times))
        return
    asyncio.run(_run(args))


if __name__ == "__main__":
    main()
