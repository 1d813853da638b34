"""Benchmark: how big the store grows under a token holder's big writes (issue 29).

Prints figures, asserts nothing:

1. **Titles that replace each other**: ``--titles`` (default 10,000)
   ``session/titleChanged`` of ``--size`` bytes (default 1 MiB) from a client on one
   session, through the sans-I/O host with the SQLite store (every title committed
   before its echo, as ``HostServer`` does): the store's file and write-ahead log
   every tenth of the way, the largest seen, after closing and after reopening.
   Before issue 29 the log was compacted every 1,000 seqs whatever their bytes, and
   freed pages stayed in the file: 400 such titles made a 427 MB file.
2. **Titles that stay**: one new session per title until the store's budget
   (``--budget``, default 1 GiB as ``serve``) refuses: how many went in, the store's
   size then, the rejection's text, and the size once they are disposed of.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_store_growth [--titles 10000] [--budget 1G]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path

from agenthost_protocol import types as t
from agenthost_protocol.cli._args import byte_size
from agenthost_protocol.client import ActionReceived, ClientConnection
from agenthost_protocol.host import Host
from agenthost_protocol.sqlite_store import DEFAULT_MAX_BYTES, SQLiteStore

NOW = 1_767_225_600_000
MIB = 1024 * 1024


def _clock() -> int:
    return NOW


def _on_disk(path: Path) -> int:
    total = 0
    for name in (str(path), f"{path}-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += os.path.getsize(name)
    return total


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f} MiB"


class Bench:
    """A host on ``path`` and one client, wired in memory."""

    def __init__(self, path: Path, budget: int) -> None:
        self.store = SQLiteStore(path, max_bytes=budget)
        self.host = Host(clock=_clock, store=self.store, root=t.RootState(agents=()))
        self.conn = self.host.connect()
        self.client = ClientConnection("bench", clock=_clock)
        self._send(self.client.initialize(initial_subscriptions=()))

    def _send(self, data: bytes) -> list[ActionReceived]:
        self.conn.receive_data(data)
        received = []
        for message in self.conn.data_to_send():  # commits first
            received += [e for e in self.client.receive_data(message)
                         if isinstance(e, ActionReceived)]
        return received

    def session(self, n: int) -> str:
        uri = f"ahp-session:/b{n}"
        self.host.create_session(uri, provider="bench")
        self.host.ready_session(uri, default_chat=f"ahp-chat:/b{n}")
        self._send(self.client.subscribe(uri))
        return uri

    def title(self, uri: str, n: int, size: int) -> str | None:
        """Send one title; the rejection's reason, or ``None`` when it was applied."""
        title = f"{n:08d}" + "t" * (size - 8)
        for event in self._send(self.client.dispatch(
                uri, t.SessionTitleChangedAction(title=title))):
            if event.received.rejection is not None:
                return event.received.rejection.reason
        return None

    def dispose(self, uri: str) -> None:
        self.host.dispose_session(uri)
        self.conn.data_to_send()


def replacing(titles: int, size: int, budget: int) -> None:
    print(f"1. {titles:,} titles of {_mib(size)} on one session (budget {_mib(budget)})")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "host.sqlite3"
        bench = Bench(path, budget)
        uri = bench.session(0)
        peak = refused = 0
        start = time.perf_counter()
        step = max(1, titles // 10)
        for n in range(1, titles + 1):
            if bench.title(uri, n, size) is not None:
                refused += 1
            peak = max(peak, _on_disk(path))
            if n % step == 0:
                print(f"   {n:>7,} titles  {time.perf_counter() - start:7.1f} s  "
                      f"file+wal {_mib(_on_disk(path)):>12}  in use "
                      f"{_mib(bench.store.size_bytes):>12}  refused {refused:,}")
        bench.store.close()
        closed = _on_disk(path)
        SQLiteStore(path).close()
        print(f"   largest file+wal seen {_mib(peak)}; after closing {_mib(closed)}; after "
              f"reopening {_mib(_on_disk(path))}; {titles * size / MIB:,.0f} MiB sent")


def staying(size: int, budget: int) -> None:
    print(f"2. one new session per title of {_mib(size)} until the budget "
          f"({_mib(budget)}) refuses")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "host.sqlite3"
        bench = Bench(path, budget)
        uris: list[str] = []
        reason = None
        start = time.perf_counter()
        while reason is None:
            uri = bench.session(len(uris))
            uris.append(uri)
            reason = bench.title(uri, len(uris), size)
        print(f"   {len(uris) - 1:,} sessions titled in {time.perf_counter() - start:.1f} s; "
              f"file+wal {_mib(_on_disk(path))}, in use {_mib(bench.store.size_bytes)}")
        print(f"   refused: {reason}")
        for uri in uris:
            bench.dispose(uri)
        bench.store.compact()
        print(f"   all disposed of: in use {_mib(bench.store.size_bytes)}, file+wal "
              f"{_mib(_on_disk(path))}")
        bench.store.close()
        print(f"   after closing: {_mib(_on_disk(path))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--titles", type=int, default=10_000)
    parser.add_argument("--size", type=byte_size, default=MIB)
    parser.add_argument("--budget", type=byte_size, default=DEFAULT_MAX_BYTES)
    parser.add_argument("--skip-staying", action="store_true")
    args = parser.parse_args()
    replacing(args.titles, args.size, args.budget)
    if not args.skip_staying:
        staying(args.size, args.budget)


if __name__ == "__main__":
    main()
