"""Benchmark: ``agenthost-protocol reduce`` over 100,000 input lines.

Feeds the command 100,000 JSON Lines (the chat fixtures' inputs, repeated)
through a pipe and prints the throughput of each tenth of the run, to show
the batch reducer does not slow down as it goes (no state accumulates
between lines).

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_reduce_cli [--lines N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from itertools import cycle, islice

from agenthost_protocol.conformance import bundled_corpus


def _inputs(n: int) -> list[bytes]:
    cases = []
    for path in sorted((bundled_corpus() / "reducers").glob("*.json")):
        case = json.loads(path.read_text())
        line = {"reducer": case["reducer"], "initial": case["initial"],
                "actions": case["actions"]}
        cases.append((json.dumps(line) + "\n").encode())
    return list(islice(cycle(cases), n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    lines = _inputs(args.lines)
    proc = subprocess.Popen(
        [sys.executable, "-m", "agenthost_protocol.cli", "reduce"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    tenth = max(1, args.lines // 10)
    start = last = time.perf_counter()
    errors = 0
    for i, line in enumerate(lines, 1):
        proc.stdin.write(line)
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        errors += "error" in answer
        if i % tenth == 0:
            now = time.perf_counter()
            print(f"lines {i - tenth + 1:>7,}-{i:>7,}: {tenth / (now - last):8,.0f} lines/s")
            last = now
    proc.stdin.close()
    proc.wait()
    total = time.perf_counter() - start
    print(f"{args.lines:,} lines in {total:.1f} s ({args.lines / total:,.0f} lines/s), "
          f"{errors} error answers")


if __name__ == "__main__":
    main()
