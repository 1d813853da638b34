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

3. **A 200-turn chat**: each turn a user message and one markdown
   reply of 2,048 characters streamed in 8-character deltas (about 2.2 kB of
   text a turn, 423 kB in all), the actions decoded from ``action``
   notification lines as a client or host receives them, then dropped.
   Printed as the memory the chat state holds (the codec warmed up first, so
   its hooks are not counted) against its text: the UTF-8 bytes of every
   string in the state, counted where it occurs (ids and timestamps too).
   The goal is at most 1.5 times.  A second line does the same for the
   realistic agent stream of ``bench_stream`` (five replies and five tool
   calls a turn), where a turn holds many small strings and objects.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_text_memory [--deltas N] [--branches N] [--turns N]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from agenthost_protocol import wire
from agenthost_protocol.reducers.chat import chat_reducer
from agenthost_protocol.types import (
    ChatAction,
    ChatDeltaAction,
    ChatResponsePartAction,
    ChatState,
    ChatTurnCompleteAction,
    ChatTurnStartedAction,
    MarkdownResponsePart,
    Message,
    MessageKind,
    MessageOrigin,
)
from agenthost_protocol.types._text import TextBuffer

from . import _stream
from .bench_deltas import initial_state
from .bench_wire import encode

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


REPLY = 2048
"""Characters of each reply of the 200-turn chat."""


def chat_turns(turns: int) -> list[ChatAction]:
    """``turns`` turns of a user message and one reply streamed in 8-character deltas."""
    user = MessageOrigin(kind=MessageKind.USER)
    actions: list[ChatAction] = []
    for n in range(turns):
        turn_id, part_id = f"turn-{n}", f"md-{n}"
        actions.append(ChatTurnStartedAction(
            turn_id=turn_id, started_at=_stream.STARTED_AT,
            message=Message(text=f"Question {n}", origin=user)))
        actions.append(ChatResponsePartAction(
            turn_id=turn_id, part=MarkdownResponsePart(id=part_id, content="")))
        actions.extend(
            ChatDeltaAction(turn_id=turn_id, part_id=part_id, content=f"{n:04d}{i:04d}")
            for i in range(REPLY // 8)
        )
        actions.append(ChatTurnCompleteAction(turn_id=turn_id, duration=_stream.TURN_MS))
    return actions


def _strings(value: object) -> Iterator[str]:
    """Every string a model value holds, where it occurs (shared or not)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, TextBuffer):
            yield item.value
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif attrs.has(type(item)):
            cls: Any = type(item)
            stack.extend(getattr(item, field.name) for field in attrs.fields(cls))


def chat_memory(build: Callable[[], list[ChatAction]]) -> tuple[int, int]:
    """Memory held by the chat that ``build``'s actions make, decoded from lines; its text."""
    lines = encode(build())
    parse: Callable[[bytes], Any] = wire.parse_message
    warm = _stream.initial_state()
    for line in encode(build()[:300]):  # every hook of the codec built before measuring
        warm = chat_reducer(warm, parse(line).params.action, now=_stream.clock)
    del warm
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    state = _stream.initial_state()
    for line in lines:
        state = chat_reducer(state, parse(line).params.action, now=_stream.clock)
    del line
    held = _held(start)
    tracemalloc.stop()
    assert state.active_turn is None
    text = sum(len(string.encode("utf-8", "surrogatepass")) for string in _strings(state))
    return held, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=1_000_000)
    parser.add_argument("--branches", type=int, default=4_000)
    parser.add_argument("--text", type=int, default=100_000, help="characters of the older text")
    parser.add_argument("--turns", type=int, default=200, help="turns of the chat of figure 3")
    args = parser.parse_args()
    print(f"a {args.turns}-turn chat decoded from action lines (memory held by the state):")
    held, text = chat_memory(lambda: chat_turns(args.turns))
    print(f"  a message and a {REPLY:,}-character reply a turn: {held / 1e3:,.0f} kB held for "
          f"{text / 1e3:,.0f} kB of text: chat memory ÷ text {held / text:.2f} (goal at most 1.5)")
    held, text = chat_memory(lambda: _stream.stream(args.turns))
    print(f"  the agent stream of bench_stream (5 replies, 5 tool calls a turn): "
          f"{held / 1e3:,.0f} kB held for {text / 1e3:,.0f} kB of text: "
          f"chat memory ÷ text {held / text:.2f}")
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
