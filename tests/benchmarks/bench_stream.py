"""Benchmark (b): a realistic agent stream of 1,000 turns (227,000 actions).

Each turn is ``chat/turnStarted``, five sections of [a markdown
``chat/responsePart``, 40 ``chat/delta`` of 8 characters, ``toolCallStart``,
``toolCallDelta``, ``toolCallReady`` (confirmed ``not-needed``),
``toolCallComplete`` with a text result], and ``chat/turnComplete``.  The
actions are built with the model classes beforehand; only ``chat_reducer`` is
timed.  Prints actions/s and ns/action, then the cost of a delta and of the
other actions, from a second run of the stream without its deltas.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_stream [--wall]
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable

from agenthost_protocol.reducers.chat import chat_reducer
from agenthost_protocol.types import ChatAction, ChatDeltaAction

from ._stream import (
    ACTIONS_PER_TURN,
    add_timer_option,
    check_final,
    clock,
    initial_state,
    stream,
    timer,
    timer_name,
)


def run(actions: list[ChatAction], turns: int, now: Callable[[], float]) -> float:
    state = initial_state()
    reducer = chat_reducer
    gc.collect()
    start = now()
    for action in actions:
        state = reducer(state, action, now=clock)
    elapsed = now() - start
    check_final(state, turns, deltas=len(actions) == turns * ACTIONS_PER_TURN)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5, help="runs; the best is kept")
    add_timer_option(parser)
    args = parser.parse_args()
    now = timer(args)
    actions = stream(args.turns)
    assert len(actions) == args.turns * ACTIONS_PER_TURN
    rest = [action for action in actions if type(action) is not ChatDeltaAction]
    full_times: list[float] = []
    rest_times: list[float] = []
    for _ in range(args.repeat):
        full_times.append(run(actions, args.turns, now))
        rest_times.append(run(rest, args.turns, now))
    best, best_rest = min(full_times), min(rest_times)
    count, deltas = len(actions), len(actions) - len(rest)
    print(
        f"{count:,} actions in {best * 1e3:.0f} ms ({timer_name(args)}): "
        f"{count / best:,.0f} actions/s, {best / count * 1e9:.0f} ns/action"
    )
    print(
        f"  the {len(rest):,} other actions alone: {best_rest * 1e3:.0f} ms, "
        f"{best_rest / len(rest) * 1e9:.0f} ns each; so the {deltas:,} deltas: "
        f"{(best - best_rest) / deltas * 1e9:.0f} ns each"
    )


if __name__ == "__main__":
    main()
