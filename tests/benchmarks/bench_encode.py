"""Encoding envelopes: ``wire.dumps`` against ``json.dumps`` of the equivalent dict.

The 227 actions a turn of ``bench_stream``, each as the ``action`` notification
a host sends (``JsonRpcNotification(method="action", params=ActionEnvelope(...))``).
Timed per message, CPU time of this process (``--wall`` for the wall clock),
the median of ``--repeat`` rounds, every variant run in turn within each round:

* ``json.dumps(d)`` of the message's dict ``d`` (built beforehand with
  ``wire.dump``), with the default arguments, and with the arguments that give
  ``wire.dumps``' compact text;
* ``wire.dumps(message)``: the model value to JSON text (``dump`` + the text);
* ``wire.dump(message)``: the model value to the dict alone.

Goal 2 of the performance issue: ``dumps`` of an envelope at most 2 times
``json.dumps`` of the equivalent dict.  (The host encodes each envelope once
and queues the same bytes to every connection that may see it, whatever its
protocol version: ``bench_fanout`` counts the encodes.)

``--baseline DIR`` also times an older copy of the package (see
``bench_decode``).  Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_encode [--turns 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
from collections.abc import Callable
from typing import Any

from agenthost_protocol import types as t
from agenthost_protocol import wire

from ._stream import CHANNEL, add_timer_option, stream, timer
from .bench_decode import load_baseline, measure


def each(fn: Callable[[Any], Any]) -> Callable[[list[Any]], None]:
    def run(items: list[Any]) -> None:
        for item in items:
            fn(item)

    return run


def compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100, help="turns of 227 actions")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the median is reported")
    parser.add_argument("--baseline", metavar="DIR", help="also time the package copy in DIR")
    add_timer_option(parser)
    args = parser.parse_args()
    now = timer(args)
    messages = [
        t.JsonRpcNotification(
            method="action",
            params=t.ActionEnvelope(channel=CHANNEL, action=action, server_seq=seq),
        )
        for seq, action in enumerate(stream(args.turns), start=1)
    ]
    dicts = [wire.dump(m) for m in messages]
    # The codec writes exactly the compact JSON of the dict.
    assert all(wire.dumps(m) == compact(d) for m, d in zip(messages, dicts, strict=True))
    loops: dict[str, tuple[Any, list[Any]]] = {
        "json.dumps(d)": (each(json.dumps), dicts),
        "json.dumps(d, compact)": (each(compact), dicts),
        "wire.dumps(message)": (each(wire.dumps), messages),
        "wire.dump(message)": (each(wire.dump), messages),
    }
    if args.baseline:
        base = load_baseline(args.baseline)
        base_wire = importlib.import_module(f"{base.__name__}.wire")
        base_messages = [base_wire.parse_message(d) for d in dicts]
        assert all(
            base_wire.dumps(m) == compact(d) for m, d in zip(base_messages, dicts, strict=True)
        )
        loops["baseline wire.dumps(message)"] = (each(base_wire.dumps), base_messages)
        loops["baseline wire.dump(message)"] = (each(base_wire.dump), base_messages)
    measure(loops, 1, now)  # warm-up round
    times = measure(loops, args.repeat, now)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    size = sum(len(wire.dumps(m)) for m in messages) / len(messages)
    print(f"{len(messages):,} action notifications, {size:.0f} bytes each on average; "
          f"{'wall-clock' if args.wall else 'CPU'} time, median of {args.repeat} rounds "
          "(best in brackets)")
    for name, ts in times.items():
        print(f"  {name:<32} {med[name] * 1e9:>8,.0f} ns/message  ({min(ts) * 1e9:,.0f})")
    print("ratios (medians):")
    print(f"  wire.dumps / json.dumps(d):          "
          f"{med['wire.dumps(message)'] / med['json.dumps(d)']:.2f}  (goal: at most 2)")
    print(f"  wire.dumps / json.dumps(d, compact): "
          f"{med['wire.dumps(message)'] / med['json.dumps(d, compact)']:.2f}")
    if args.baseline:
        print(f"  baseline wire.dumps / json.dumps(d): "
              f"{med['baseline wire.dumps(message)'] / med['json.dumps(d)']:.2f}")


if __name__ == "__main__":
    main()
