"""Benchmark: opening a 100 MB chat (issue 18) with the library's client.

A host on a loopback WebSocket holds one chat of ``--turns`` turns, each a
long reply (100 KB, inline) and a big tool output (400 KB, stored and sent
by reference, as ``Host.by_reference`` does for every agent).  The library's
client then opens it as an application would (``subscribe`` with its
default view), and pages every older turn with ``fetchTurns``.  Prints the
content held, the host's memory for it (traced Python memory and the growth
of the process's maximum RSS; "chat memory ÷ text" is the traced memory over
the content's characters), the time to open, the bytes of the first message,
and the time to page the whole chat.  ``bench_text_memory`` measures a
200-turn chat of short replies, where the per-turn overhead shows.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_big_chat [--turns 200]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import time
import tracemalloc

from agenthost_protocol import wire
from agenthost_protocol.aio.client import connect

from .._aio_hosts import demo_host
from ..test_big_chat import CHAT, build_big_chat


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _run(turns: int) -> None:
    async with demo_host() as demo:
        gc.collect()
        rss0 = _rss_mb()
        tracemalloc.start()
        content = build_big_chat(demo.host, turns)
        held, _peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"chat: {turns} turns, {content / 1e6:,.1f} MB of content; host memory "
              f"{held / 2**20:,.1f} MiB traced ({demo.host.content.total_bytes / 2**20:,.1f} MiB "
              f"of it stored by reference), max RSS +{_rss_mb() - rss0:,.0f} MB; "
              f"chat memory ÷ text {held / content:.2f}")
        async with connect(demo.url, reconnect=False) as client:
            await client.initialize()
            started = time.perf_counter()
            snapshot = await client.subscribe(CHAT)
            opened = time.perf_counter() - started
            first = len(wire.dumps(snapshot))
            print(f"open: {opened * 1000:,.0f} ms to the snapshot; first message "
                  f"{first / 1e6:,.2f} MB ({len(snapshot.state.turns)} turns)"  # type: ignore[union-attr]
                  if snapshot is not None else "open: no snapshot")
            started = time.perf_counter()
            pages = 0
            while await client.fetch_older_turns(CHAT):
                pages += 1
            print(f"paging: {pages} pages in {(time.perf_counter() - started) * 1000:,.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(_run(args.turns))


if __name__ == "__main__":
    main()
