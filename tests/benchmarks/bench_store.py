"""Benchmark: the durable store (issue 20).

Prints three figures:

1. **Streaming throughput** with the SQLite store and without.  Sans-I/O: a
   host with one subscribed connection takes the realistic agent stream of
   ``_stream.py`` (227 actions a turn) and the connection is drained after
   each action: with a commit per action (the worst case), and with a
   commit at most every 2 ms, as ``HostServer`` groups them.  End to end: a
   host process streams chat deltas to a WebSocket client on loopback, an
   agent's way (dispatch, ``flush``, yield per delta).
2. **Start-up** with ``--sessions`` sessions (default 10,000) of one chat of
   ``--turns`` turns (default 20) stored: the time from starting
   ``agenthost-protocol serve --store FILE`` to its URL line, against the same
   with an empty store and with ``--no-store``, median of ``--repeat`` runs.
3. **Memory** of that host with none of them subscribed (RSS after start),
   then after one client read the first page of ``listSessions``.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_store [--sessions 10000] [--turns 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.client import ClientConnection
from agenthost_protocol.host import Host, HostStore
from agenthost_protocol.host.sessions import chat_summary, summary_of
from agenthost_protocol.host.store import Batch, ChannelRecord, SessionRecord
from agenthost_protocol.sqlite_store import SQLiteStore

from ._stream import CHANNEL, initial_state, stream

NOW = 1_767_225_600_000
ROOT = "ahp-root://"


def _clock() -> int:
    return NOW


def _throughput(store: HostStore | None, actions: list[t.ChatAction],
                interval: float) -> float:
    """Actions/s through ``Host.dispatch`` with the connection drained after each one,
    committing when ``interval`` seconds passed since the last commit (0: every time)."""
    host = Host(clock=_clock, store=store, root=t.RootState(agents=()))
    host.add_channel(CHANNEL, initial_state())
    conn = host.connect()
    client = ClientConnection("bench", clock=_clock)
    conn.receive_data(client.initialize(initial_subscriptions=(CHANNEL,)))
    conn.data_to_send()
    now = time.perf_counter
    start = last = now()
    for action in actions:
        host.dispatch(CHANNEL, action)
        if now() - last >= interval:
            conn.data_to_send()  # commits first
            last = now()
    conn.data_to_send()
    return len(actions) / (now() - start)


def throughput(turns: int) -> None:
    actions = stream(turns)
    print(f"sans-I/O: {len(actions):,} actions of the agent stream through Host.dispatch, one "
          "connection drained as they come (actions/s, best of 3)")
    for interval, what in ((0.0, "a commit per action"),
                           (0.002, "group commit, 2 ms (HostServer)")):
        rates: dict[str, float] = {}
        for name in ("memory only", "SQLite store"):
            best = 0.0
            for _ in range(3):
                with tempfile.TemporaryDirectory() as tmp:
                    store = None if name == "memory only" else SQLiteStore(
                        Path(tmp) / "host.sqlite3")
                    try:
                        best = max(best, _throughput(store, actions, interval))
                    finally:
                        if store is not None:
                            store.close()
            rates[name] = best
        ratio = rates["SQLite store"] / rates["memory only"]
        print(f"  {what:>32}: memory only {rates['memory only']:>8,.0f}   SQLite "
              f"{rates['SQLite store']:>8,.0f}   = {ratio:.0%}")


# -- end to end: a host process streaming to a client over loopback -------------------------

async def _serve_stream(deltas: int, store_path: str | None, compression: str = "auto") -> None:
    """The host side: serve on a loopback port, print the URL, stream ``deltas`` chat
    deltas as an agent does (dispatch, flush, yield) once a client has subscribed,
    then print the process's CPU seconds and exit when the client leaves."""
    import resource

    from agenthost_protocol.aio.server import HostServer, ServerLimits
    from agenthost_protocol.aio.websocket import serve_websocket
    from agenthost_protocol.host import Initialized

    store = SQLiteStore(store_path) if store_path else None
    host = Host(clock=_clock, store=store, root=t.RootState(agents=()))
    host.add_channel(CHANNEL, initial_state())
    server = HostServer(host, limits=ServerLimits(compression=compression))  # type: ignore[arg-type]
    started = asyncio.Event()

    def handle(event: object) -> None:
        if isinstance(event, Initialized):
            started.set()

    server.handler = handle
    endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None)
    print(endpoint.url, flush=True)
    await started.wait()
    turn = stream(1)[0]
    host.dispatch(CHANNEL, turn)
    host.dispatch(CHANNEL, t.ChatResponsePartAction(
        turn_id="turn-0", part=t.MarkdownResponsePart(id="bench-md", content="")))
    server.flush()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(deltas):
        host.dispatch(CHANNEL, t.ChatDeltaAction(turn_id="turn-0", part_id="bench-md",
                                                 content="eight ch"))
        server.flush()
        await asyncio.sleep(0)
    server.flush()
    await server.wait_idle()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{cpu:.6f}", flush=True)
    await endpoint.close()
    if store is not None:
        host.commit()
        store.close()


async def _read_stream(url: str, deltas: int) -> float:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None) as ws:
        await ws.send(wire.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersions": ["0.7.0"], "clientId": "bench",
            "initialSubscriptions": [CHANNEL]}}))
        seen = 0
        first = 0.0
        while seen < deltas:
            data = await ws.recv()
            if '"chat/delta"' in data:
                if seen == 0:
                    first = time.perf_counter()
                seen += 1
        return (deltas - 1) / (time.perf_counter() - first)


def end_to_end(deltas: int, repeat: int, compression: str = "auto") -> None:
    print(f"\nend to end: a host process streams {deltas:,} chat/delta to one WebSocket "
          f"client (dispatch, flush, yield per delta, as an agent does; compression "
          f"{compression}); best of {repeat}")
    rates: dict[str, tuple[float, float]] = {}
    for name in ("memory only", "SQLite store"):
        best = (0.0, 0.0)
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as tmp:
                args = ["--compression", compression]
                if name != "memory only":
                    args += ["--store", str(Path(tmp) / "h.db")]
                proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.benchmarks.bench_store", "--serve-stream",
                     str(deltas), *args], stdout=subprocess.PIPE, text=True)
                assert proc.stdout is not None
                url = proc.stdout.readline().strip()
                rate = asyncio.run(_read_stream(url, deltas))
                cpu = float(proc.stdout.readline())
                proc.wait(60)
                if rate > best[0]:
                    best = (rate, cpu / deltas * 1e6)
        rates[name] = best
        print(f"  {name:>13}: {best[0]:>9,.0f} deltas/s, host CPU {best[1]:5.1f} us per delta")
    print(f"  the store keeps {rates['SQLite store'][0] / rates['memory only'][0]:.0%} of the "
          "in-memory rate")


def _chat(uri: str, turns: int) -> t.ChatState:
    done = []
    for n in range(turns):
        text = f"turn {n}: " + "lorem ipsum dolor sit amet " * 8
        done.append(t.Turn(
            id=f"t{n}", message=t.Message(text=f"question {n}", origin=t.MessageOrigin(
                kind=t.MessageKind.USER)),
            response_parts=(t.MarkdownResponsePart(id=f"t{n}-md", content=text),),
            state=t.TurnState.COMPLETE, started_at="2026-01-01T00:00:00.000Z", duration=5))
    return t.ChatState(resource=uri, title="a chat", status=t.SessionStatus.IDLE,
                       modified_at="2026-01-01T00:00:00.000Z", turns=tuple(done))


def build_store(path: Path, sessions: int, turns: int) -> None:
    """``sessions`` ready sessions of one chat of ``turns`` turns, written as a host would."""
    root = t.RootState(agents=(), active_sessions=sessions)
    batches: list[Batch] = []
    with SQLiteStore(path) as store:
        store.commit(Batch(server_seq=0, snapshots=(ChannelRecord(
            uri=ROOT, state=wire.dumps(root).encode(), seq=0),)))
        snapshots: list[ChannelRecord] = []
        rows: list[SessionRecord] = []
        owners: list[tuple[str, str]] = []
        for n in range(1, sessions + 1):
            uri, chat = f"ahp-session:/s{n}", f"ahp-chat:/s{n}"
            chat_state = _chat(chat, turns)
            session = t.SessionState(
                provider="demo", title=f"session {n}", status=t.SessionStatus.IDLE,
                lifecycle=t.SessionLifecycle.READY, active_clients=(),
                chats=(chat_summary(chat_state),), default_chat=chat)
            created = "2026-01-01T00:00:00.000Z"
            summary = summary_of(uri, session, created, [chat_state])
            snapshots += [ChannelRecord(uri=uri, state=wire.dumps(session).encode(), seq=0),
                          ChannelRecord(uri=chat, state=wire.dumps(chat_state).encode(),
                                        seq=0)]
            rows.append(SessionRecord(uri=uri, ordinal=n, created_at=created,
                                      summary=wire.dumps(summary).encode()))
            owners.append((chat, uri))
            if n % 1000 == 0 or n == sessions:
                batches.append(Batch(server_seq=0, snapshots=tuple(snapshots),
                                     sessions=tuple(rows), owners=tuple(owners)))
                snapshots, rows, owners = [], [], []
        for batch in batches:
            store.commit(batch)


def _serve(args: list[str]) -> tuple[float, subprocess.Popen[bytes], str]:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "agenthost_protocol.cli", "serve",
                             "--port", "0", "--log-level", "warning", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    if not line.startswith(b"serving "):
        proc.kill()
        raise SystemExit(f"serve failed: {line!r}")
    proc.stdout.readline()  # the store line
    return elapsed, proc, line.split()[1].decode()


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


async def _first_page(url: str) -> int:
    from agenthost_protocol.aio.client import connect

    async with connect(url, client_id="bench") as client:
        await client.initialize()
        result = await client.list_sessions()
        return len(result.items)


def startup(sessions: int, turns: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        full, empty = Path(tmp) / "full.sqlite3", Path(tmp) / "empty.sqlite3"
        began = time.perf_counter()
        build_store(full, sessions, turns)
        size = full.stat().st_size / 2**20
        print(f"\nstart-up: {sessions:,} sessions x {turns} turns stored ({size:.0f} MB file, "
              f"built in {time.perf_counter() - began:.1f} s); time to the URL line, median "
              f"of {repeat}")
        for name, args in (("--no-store", ["--no-store"]), ("empty store", ["--store",
                                                                            str(empty)]),
                           (f"{sessions:,} sessions", ["--store", str(full)])):
            times = []
            rss = listed = 0.0
            for i in range(repeat):
                elapsed, proc, url = _serve(args)
                times.append(elapsed)
                try:
                    if i == 0:
                        time.sleep(0.2)
                        rss = _rss_mb(proc.pid)
                        count = asyncio.run(_first_page(url))
                        listed = _rss_mb(proc.pid)
                        print(f"  {name:>18}: {statistics.median(times) * 1000:6.0f} ms "
                              f"(first run), RSS {rss:.0f} MB with none subscribed, "
                              f"{listed:.0f} MB after a listSessions page of {count}")
                finally:
                    _stop(proc)
            print(f"  {name:>18}: {statistics.median(times) * 1000:6.0f} ms median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--stream-turns", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--serve-stream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--compression", default="auto", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_stream is not None:
        asyncio.run(_serve_stream(args.serve_stream, args.store, args.compression))
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    throughput(args.stream_turns)
    end_to_end(args.deltas, min(args.repeat, 3))
    end_to_end(args.deltas, min(args.repeat, 3), "deflate")
    startup(args.sessions, args.turns, args.repeat)


if __name__ == "__main__":
    main()
