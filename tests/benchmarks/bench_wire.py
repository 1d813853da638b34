"""Benchmark (c): the stream of ``bench_stream`` as JSON-RPC lines, decoded and reduced.

The 227,000 actions of the realistic stream (1,000 turns) are encoded once as
``action`` notifications, one JSON text per line as a transport would
deliver them::

    {"jsonrpc":"2.0","method":"action","params":<ActionEnvelope wire JSON>}

The timed loop decodes each line with :func:`agenthost_protocol.wire.parse_message`
(JSON parse plus typed decode of the envelope) and reduces its action with
``chat_reducer``.  A second loop times the decoding alone.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_wire
"""

from __future__ import annotations

import argparse
import gc
import json
from collections.abc import Callable

from agenthost_protocol import wire
from agenthost_protocol.reducers.chat import chat_reducer
from agenthost_protocol.types import ActionEnvelope, ChatAction, JsonRpcNotification

from ._stream import (
    CHANNEL,
    add_timer_option,
    check_final,
    clock,
    initial_state,
    stream,
    timer,
    timer_name,
)


def encode(actions: list[ChatAction]) -> list[bytes]:
    """One ``action`` notification per action, as UTF-8 JSON lines."""
    lines = []
    for seq, action in enumerate(actions, start=1):
        envelope = ActionEnvelope(channel=CHANNEL, action=action, server_seq=seq)
        notification = {"jsonrpc": "2.0", "method": "action", "params": wire.dump(envelope)}
        lines.append(json.dumps(notification, separators=(",", ":")).encode())
    return lines


def decode_and_reduce(lines: list[bytes], turns: int, now: Callable[[], float]) -> float:
    state = initial_state()
    parse = wire.parse_message
    reducer = chat_reducer
    gc.collect()
    start = now()
    for line in lines:
        message = parse(line)
        assert isinstance(message, JsonRpcNotification)
        assert isinstance(message.params, ActionEnvelope)
        state = reducer(state, message.params.action, now=clock)
    elapsed = now() - start
    check_final(state, turns)
    return elapsed


def decode_only(lines: list[bytes], now: Callable[[], float]) -> float:
    parse = wire.parse_message
    gc.collect()
    start = now()
    for line in lines:
        parse(line)
    return now() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is kept")
    add_timer_option(parser)
    args = parser.parse_args()
    now = timer(args)
    actions = stream(args.turns)
    lines = encode(actions)
    # The encoding is lossless: the decoded actions equal the originals.
    for line, action in zip(lines[:300], actions[:300], strict=True):
        message = wire.parse_message(line)
        assert isinstance(message, JsonRpcNotification)
        assert isinstance(message.params, ActionEnvelope)
        assert message.params.action == action
    del actions  # keep only the lines alive: a large live heap slows every full GC pass
    count = len(lines)
    size = sum(map(len, lines))
    print(f"{count:,} lines, {size / 1e6:.1f} MB of JSON ({size / count:.0f} bytes/line)")
    both: list[float] = []
    decode: list[float] = []
    for _ in range(args.repeat):
        both.append(decode_and_reduce(lines, args.turns, now))
        decode.append(decode_only(lines, now))
    best, best_decode = min(both), min(decode)
    print(
        f"decode + reduce: {best * 1e3:.0f} ms ({timer_name(args)}), "
        f"{count / best:,.0f} actions/s, {best / count * 1e9:.0f} ns/action"
    )
    print(
        f"decode only:     {best_decode * 1e3:.0f} ms, {count / best_decode:,.0f} actions/s, "
        f"{best_decode / count * 1e9:.0f} ns/action"
    )


if __name__ == "__main__":
    main()
