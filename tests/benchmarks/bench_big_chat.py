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

``--messages N`` (issue 29) measures a chat of big *messages* instead: N
turns of a 3.5 MB user message and a 3 MB markdown reply streamed in 512 KB
deltas (70 MB at N = 10).  It prints the host's traced memory for it, then
what opening it costs the host alone (a sans-I/O connection: ``initialize``,
``subscribe`` without a view, every ``fetchTurns`` page): the peak of traced
memory over what the chat holds, and the largest message sent.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_big_chat [--turns 200] [--messages 10]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import time
import tracemalloc

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.aio.client import connect
from agenthost_protocol.host import Host

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


def _big_messages(turns: int) -> None:
    user = t.MessageOrigin(kind=t.MessageKind.USER)
    host = Host(clock=lambda: 1_767_225_600_000)
    host.add_channel(CHAT, t.ChatState(resource=CHAT, title="big", status=t.SessionStatus.IDLE,
                                       modified_at="2026-01-01T00:00:00.000Z", turns=()))
    gc.collect()
    tracemalloc.start()
    for n in range(turns):
        turn = f"t{n}"
        host.dispatch(CHAT, t.ChatTurnStartedAction(
            turn_id=turn, started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=f"{n} " + "m" * 3_500_000, origin=user)))
        host.dispatch(CHAT, t.ChatResponsePartAction(
            turn_id=turn, part=t.MarkdownResponsePart(id="md", content="")))
        for _ in range(6):
            host.dispatch(CHAT, t.ChatDeltaAction(turn_id=turn, part_id="md",
                                                  content="r" * 500_000))
        host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id=turn, duration=1))
    content = turns * 6_500_000
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    replay = host.replay.size_bytes
    print(f"chat: {turns} turns, {content / 1e6:,.0f} MB of text; host memory "
          f"{held / 2**20:,.1f} MiB traced (the replay buffer counts {replay / 2**20:,.1f} MiB "
          "of envelopes against its bound, holding the actions, which share their texts "
          "with the state)")
    tracemalloc.reset_peak()
    conn = host.connect()
    largest = 0
    started = time.perf_counter()

    def send(number: int, method: str, params: object) -> list[bytes]:
        nonlocal largest
        conn.receive_data(json.dumps({"jsonrpc": "2.0", "id": number, "method": method,
                                      "params": params}))
        out = conn.data_to_send()
        largest = max([largest, *map(len, out)])
        return out

    send(1, "initialize", {"protocolVersions": ["0.7.0"], "clientId": "bench"})
    (answer,) = send(2, "subscribe", {"channel": CHAT})
    state = json.loads(answer)["result"]["snapshot"]["state"]
    first, cursor = len(state["turns"]), state.get("turnsNextCursor")
    del answer, state
    number = 3
    while cursor is not None:
        out = send(number, "fetchTurns", {"channel": CHAT, "cursor": cursor})
        number += 1
        loaded = json.loads(out[0])["params"]["action"]
        cursor = loaded.get("turnsNextCursor")
        del out, loaded
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"open: snapshot of {first} turns, {number - 3} pages, largest message "
          f"{largest / 2**20:,.1f} MiB, {(time.perf_counter() - started) * 1000:,.0f} ms; "
          f"peak traced memory while opening {(peak - held) / 2**20:,.1f} MiB over the "
          f"chat's ({(peak - held) / largest:.1f} x the largest message)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--messages", type=int, default=None,
                        help="measure a chat of this many turns of big messages instead")
    args = parser.parse_args()
    if args.messages is not None:
        _big_messages(args.messages)
        return
    asyncio.run(_run(args.turns))


if __name__ == "__main__":
    main()
