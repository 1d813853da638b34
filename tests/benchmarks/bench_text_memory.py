"""Benchmark (d): the memory that streamed text holds.

Two figures, both measured with ``tracemalloc`` (every Python allocation that
is still alive, so the chunks, the lists holding them, the buffers and the
states):

1. **One million one-character deltas** into one markdown part, made one at a
   time as a decoder makes them and dropped after reducing, so only the final
   state keeps anything.  Printed as the memory held by the final state
   against the size of its text (``sys.getsizeof`` of ``part.content``),
   measured before the text is first read.  Two alphabets: ASCII (CPython
   shares one object per Latin-1 character, so a delta costs only its place
   in the chunk list) and CJK (every delta is a 76-byte string of its own,
   and the text takes 2 bytes per character).
2. **4,000 branches off an older text of 100 kB**: a state whose text a newer
   state has already extended is extended 4,000 times (each a new branch,
   as when a client rebases its optimistic states), and every branch is
   kept.  Printed as the memory the branches hold beyond the text they
   branch from.  A second line branches each of the 4,000 off a different
   older state.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_text_memory [--deltas N] [--branches N]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc

from agenthost_protocol.reducers.chat import chat_reducer
from agenthost_protocol.types import ChatDeltaAction, ChatState, MarkdownResponsePart

from .bench_deltas import initial_state

MB = 1e6
ALPHABETS = {
    "ASCII": range(ord("a"), ord("z") + 1),
    "CJK": range(0x4E00, 0x4E00 + 1000),
}


def _content(state: ChatState) -> str:
    turn = state.active_turn
    assert turn is not None
    part = turn.response_parts[0]
    assert isinstance(part, MarkdownResponsePart)
    return part.content


def _held(start: int) -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - start


def one_char_deltas(count: int, alphabet: range) -> tuple[int, int, int]:
    """Memory held after ``count`` one-character deltas, the text's size, and the peak."""
    size = len(alphabet)
    # Each delta is a fresh string (``chr`` of a non-Latin-1 code point makes
    # a new one; a Latin-1 one is CPython's shared object, as a decoder's is).
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    start = tracemalloc.get_traced_memory()[0]
    state = initial_state()
    for i in range(count):
        delta = ChatDeltaAction(turn_id="turn-1", part_id="md-1", content=chr(alphabet[i % size]))
        state = chat_reducer(state, delta, now=lambda: 9999)
    del delta
    held = _held(start)
    peak = tracemalloc.get_traced_memory()[1] - start
    tracemalloc.stop()
    text = _content(state)
    assert len(text) == count and text[-1] == chr(alphabet[(count - 1) % size])
    return held, sys.getsizeof(text), peak


def _build(text_size: int) -> list[ChatState]:
    """The states of a stream of 8-character deltas up to ``text_size`` characters."""
    states = [initial_state()]
    for i in range(text_size // 8):
        delta = ChatDeltaAction(turn_id="turn-1", part_id="md-1", content=f"{i:08d}")
        states.append(chat_reducer(states[-1], delta))
    return states


def branches(count: int, text_size: int, *, different: bool) -> tuple[int, int]:
    """Memory held by ``count`` branches off older states of a ``text_size`` text."""
    states = _build(text_size)
    # One newer state, so every state of ``states`` is an older one.
    newer = ChatDeltaAction(turn_id="turn-1", part_id="md-1", content="!")
    states.append(chat_reducer(states[-1], newer))
    older = states[-2]
    text_bytes = sys.getsizeof(_content(older))
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    kept = []
    for i in range(count):
        base = states[-2 - i] if different else older
        delta = ChatDeltaAction(turn_id="turn-1", part_id="md-1", content=f"<{i}>")
        kept.append(chat_reducer(base, delta))
    held = _held(start)
    tracemalloc.stop()
    # Every branch holds its own text, and the older states kept theirs.
    for i in (0, count // 2, count - 1):
        base = states[-2 - i] if different else older
        assert _content(kept[i]) == _content(base) + f"<{i}>"
    assert _content(states[-1]).endswith("!")
    return held, text_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=1_000_000)
    parser.add_argument("--branches", type=int, default=4_000)
    parser.add_argument("--text", type=int, default=100_000, help="characters of the older text")
    args = parser.parse_args()
    print(f"{args.deltas:,} one-character deltas into one part (memory held by the final state):")
    for name, alphabet in ALPHABETS.items():
        held, text, peak = one_char_deltas(args.deltas, alphabet)
        print(
            f"  {name:5}: {held / MB:6.1f} MB held for {text / MB:.1f} MB of text "
            f"({held / text:.2f}x, goal at most 3x; peak {peak / MB:.1f} MB)"
        )
    print(f"{args.branches:,} branches off an older text of {args.text / 1000:.0f} kB:")
    held, text = branches(args.branches, args.text, different=False)
    print(
        f"  off one older state:        {held / MB:7.1f} MB held "
        f"({held / args.branches:,.0f} bytes a branch, goal at most 10 MB in all; "
        f"the text is {text / MB:.2f} MB)"
    )
    held, text = branches(args.branches, args.text, different=True)
    print(
        f"  each off another old state: {held / MB:7.1f} MB held "
        f"({held / args.branches:,.0f} bytes a branch)"
    )


if __name__ == "__main__":
    main()
