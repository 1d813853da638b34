"""Benchmark: the durable store (issue 20).

Prints three figures:

1. **Streaming throughput** with the SQLite store and without: a host with
   one subscribed connection takes the realistic agent stream of
   ``_stream.py`` (227 actions a turn), one action at a time, and after each
   one does what ``HostServer.flush`` does (commit, then the connection's
   ``data_to_send``): the worst case, a commit per action, as an agent that
   flushes after every delta causes.  Also with a flush every 10 actions.
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


def _throughput(store: HostStore | None, actions: list[t.ChatAction], every: int) -> float:
    host = Host(clock=_clock, store=store, root=t.RootState(agents=()))
    host.add_channel(CHANNEL, initial_state())
    conn = host.connect()
    client = ClientConnection("bench", clock=_clock)
    conn.receive_data(client.initialize(initial_subscriptions=(CHANNEL,)))
    conn.data_to_send()
    start = time.perf_counter()
    for i, action in enumerate(actions, 1):
        host.dispatch(CHANNEL, action)
        if i % every == 0:
            host.commit()
            conn.data_to_send()
    host.commit()
    conn.data_to_send()
    return len(actions) / (time.perf_counter() - start)


def throughput(turns: int) -> None:
    actions = stream(turns)
    print(f"streaming {len(actions):,} actions, one connection subscribed (actions/s, "
          "best of 3)")
    for every in (1, 10):
        rates: dict[str, float] = {}
        for name in ("memory only", "SQLite store"):
            best = 0.0
            for _ in range(3):
                with tempfile.TemporaryDirectory() as tmp:
                    store = None if name == "memory only" else SQLiteStore(
                        Path(tmp) / "host.sqlite3")
                    try:
                        best = max(best, _throughput(store, actions, every))
                    finally:
                        if store is not None:
                            store.close()
            rates[name] = best
        ratio = rates["SQLite store"] / rates["memory only"]
        print(f"  flush every {every:>2}: memory only {rates['memory only']:>9,.0f}   "
              f"SQLite {rates['SQLite store']:>9,.0f}   = {ratio:.0%} of memory only")


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
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    throughput(args.stream_turns)
    startup(args.sessions, args.turns, args.repeat)


if __name__ == "__main__":
    main()
