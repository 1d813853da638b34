"""Benchmark: the reducers, on their own and beside the TypeScript reference.

Without options: ``agenthost-protocol reduce`` over 100,000 input lines.  Feeds
the command 100,000 JSON Lines (the reducer fixtures' inputs, repeated)
through a pipe and prints the throughput of each tenth of the run, to show
the batch reducer does not slow down as it goes (no state accumulates
between lines).

``--node-reducer FILE``: the reducers side by side with the TypeScript
reference (``FILE`` is the official ``types/reducers.ts`` bundled with
esbuild; see docs/performance.md, "How the TypeScript side was run"), only
the reducer loop timed on both sides:

* **deltas** (``bench_deltas``; ``ts_reference/chat_reduce.mjs deltas``):
  10,000, 100,000 and 400,000 ``chat/delta`` of 8 characters into one
  markdown part, the three sizes interleaved in one process;
* **stream** (``bench_stream``; ``chat_reduce.mjs stream``): the realistic
  agent stream of 1,000 turns, 227,000 chat actions, and the same stream
  without its deltas (the other actions' cost);
* **corpus** (``ts_reference/reduce_corpus.mjs``): every reducer fixture of
  the bundled corpus, all seven reducers, 430 actions a pass.

The goal is at most 1.3 times the reference for 100,000 and
400,000 deltas and for the stream.  Each round runs every workload in a
fresh Python process and a fresh node process (each keeping the best of
``--repeat`` runs) and takes their ratio; the median of ``--rounds`` rounds
is printed, with the range of the rounds' ratios.  CPU time: the Python
process's, and node's main thread's (V8's collector and compiler threads run
beside the loop).  ``--baseline DIR`` also runs an older copy of the package
(``DIR`` holds its ``agenthost_protocol`` folder, e.g. from ``git archive REV
agenthost_protocol``) in the same rounds, and checks that it ends every
workload in the same state.

Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_reduce_cli [--lines N]
    .venv/bin/python -m tests.benchmarks.bench_reduce_cli --node-reducer /tmp/tsref/reducers.mjs
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from itertools import cycle, islice
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
SIZES = (10_000, 100_000, 400_000)
TURNS = 1_000
PASSES = 200
"""Passes over the corpus per run (86,000 actions)."""
WORKLOADS = ("deltas", "stream", "corpus")
GOALS = ("deltas 100,000", "deltas 400,000", "stream")


def _corpus_dir() -> Path:
    from agenthost_protocol.conformance import bundled_corpus

    return bundled_corpus() / "reducers"


def _inputs(n: int) -> list[bytes]:
    cases = []
    for path in sorted(_corpus_dir().glob("*.json")):
        case = json.loads(path.read_text())
        line = {"reducer": case["reducer"], "initial": case["initial"],
                "actions": case["actions"]}
        cases.append((json.dumps(line) + "\n").encode())
    return list(islice(cycle(cases), n))


def run_cli(count: int) -> None:
    lines = _inputs(count)
    proc = subprocess.Popen(
        [sys.executable, "-m", "agenthost_protocol.cli", "reduce"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    tenth = max(1, count // 10)
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
    print(f"{count:,} lines in {total:.1f} s ({count / total:,.0f} lines/s), "
          f"{errors} error answers")


# ─── The Python side: one workload in this (child) process ───────────────────


def _clock() -> int:
    return 1_750_000_000_000


def _fixture_clock() -> int:
    return 9999


def _digest(states: Sequence[Any]) -> str:
    """A digest of the final states as JSON: the same for any package that reduces alike."""
    from agenthost_protocol import wire

    return hashlib.sha256("".join(wire.dumps(state) for state in states).encode()).hexdigest()[:16]


def _timed_reduce(reducer: Callable[..., Any], state: Any, actions: Sequence[Any],
                  now: Callable[[], float]) -> tuple[float, Any]:
    gc.collect()
    start = now()
    for action in actions:
        state = reducer(state, action, now=_clock)
    return now() - start, state


def child(workload: str, repeat: int, now: Callable[[], float]) -> dict[str, Any]:
    """Nanoseconds per action of ``workload`` (best of ``repeat``), and a digest of its ends."""
    from agenthost_protocol.reducers import chat_reducer
    from agenthost_protocol.types import ChatDeltaAction

    from . import _stream, bench_deltas

    times: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    finals: list[Any] = []
    if workload == "deltas":
        streams = {size: bench_deltas.deltas(size) for size in SIZES}
        for _ in range(repeat):  # interleaved, as bench_deltas does
            finals = []
            for size, actions in streams.items():
                elapsed, final = _timed_reduce(
                    chat_reducer, bench_deltas.initial_state(), actions, now)
                times.setdefault(f"deltas {size:,}", []).append(elapsed)
                counts[f"deltas {size:,}"] = size
                finals.append(final)
    elif workload == "stream":
        stream = _stream.stream(TURNS)
        rest = [a for a in stream if type(a) is not ChatDeltaAction]
        for _ in range(repeat):
            finals = []
            for name, run in (("stream", stream), ("stream, other actions", rest)):
                elapsed, final = _timed_reduce(chat_reducer, _stream.initial_state(), run, now)
                _stream.check_final(final, TURNS, deltas=run is stream)
                times.setdefault(name, []).append(elapsed)
                counts[name] = len(run)
                finals.append(final)
    elif workload == "corpus":
        cases = _corpus_cases()
        counts["corpus"] = sum(len(actions) for _, _, actions in cases) * PASSES
        for _ in range(repeat):
            gc.collect()
            start = now()
            for _ in range(PASSES):
                finals = []
                for reducer, initial, case_actions in cases:
                    state = initial
                    for action in case_actions:
                        state = reducer(state, action, now=_fixture_clock)
                    finals.append(state)
            times.setdefault("corpus", []).append(now() - start)
    else:
        raise SystemExit(f"unknown workload {workload!r}")
    result: dict[str, Any] = {name: min(ts) / counts[name] * 1e9 for name, ts in times.items()}
    result["digest"] = _digest(finals)
    result["package"] = str(Path(sys.modules["agenthost_protocol"].__file__ or "").parent)
    return result


def _corpus_cases() -> list[tuple[Callable[..., Any], Any, list[Any]]]:
    from agenthost_protocol import types, wire
    from agenthost_protocol.channels import STATE_TYPES, ChannelKind
    from agenthost_protocol.reducers import REDUCERS

    cases = []
    for path in sorted(_corpus_dir().glob("*.json")):
        case = json.loads(path.read_text())
        kind = ChannelKind(case["reducer"])
        initial = wire.structure(case["initial"], STATE_TYPES[kind])
        actions = [wire.structure(a, types.StateAction) for a in case["actions"]]
        cases.append((REDUCERS[kind], initial, actions))
    return cases


# ─── The driver ──────────────────────────────────────────────────────────────


def _run_json(command: list[str]) -> Any:
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def python_side(workload: str, package: str | None, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.benchmarks.bench_reduce_cli", "--child", workload,
               "--repeat", str(args.repeat)]
    if package:
        command += ["--package", package]
    if args.wall:
        command.append("--wall")
    result: dict[str, Any] = _run_json(command)
    return result


def node_side(workload: str, args: argparse.Namespace) -> dict[str, float]:
    key = "wall_ns" if args.wall else "cpu_ns"
    reducer = str(Path(args.node_reducer).resolve())
    chat = str(HERE / "ts_reference" / "chat_reduce.mjs")
    node = ["node", "--expose-gc"]
    if workload == "deltas":
        out = _run_json([*node, chat, reducer, "deltas", str(args.repeat),
                         ",".join(map(str, SIZES))])
        return {f"deltas {size:,}": out[str(size)][key] for size in SIZES}
    if workload == "stream":
        out = _run_json([*node, chat, reducer, "stream", str(args.repeat), str(TURNS)])
        return {"stream": out["all"][key], "stream, other actions": out["other"][key]}
    out = _run_json([*node, str(HERE / "ts_reference" / "reduce_corpus.mjs"), reducer,
                     str(_corpus_dir()), str(args.repeat), str(PASSES)])
    return {"corpus": out[key]}


def side_by_side(args: argparse.Namespace) -> None:
    sides = ["now"] + (["baseline"] if args.baseline else [])
    ours: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    theirs: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for workload in WORKLOADS:
            digests = set()
            for side in sides:
                result = python_side(workload, args.baseline if side == "baseline" else None,
                                     args)
                digests.add(result.pop("digest"))
                loaded = Path(result.pop("package"))
                if side == "baseline":
                    assert loaded.parent == Path(args.baseline).resolve(), loaded
                for name, ns in result.items():
                    ours[side].setdefault(name, []).append(ns)
            if len(digests) != 1:
                raise SystemExit(f"{workload}: the baseline ends in other states")
            if args.node_reducer:
                for name, ns in node_side(workload, args).items():
                    theirs.setdefault(name, []).append(ns)
    clock = "wall-clock" if args.wall else "CPU"
    print(f"{clock} time per action: median of {args.rounds} rounds, each the best of "
          f"{args.repeat} runs in a fresh process; ratios: median of the rounds' (range)")
    for name in ours["now"]:
        line = f"  {name:<22}"
        for side in sides:
            line += f" {side} {statistics.median(ours[side][name]):6,.0f} ns"
        if name in theirs:
            ref = theirs[name]
            line += f"   reference {statistics.median(ref):6,.0f} ns"
            for side in sides:
                ratios = [a / b for a, b in zip(ours[side][name], ref, strict=True)]
                line += (f"   {side}/ref {statistics.median(ratios):.2f} "
                         f"({min(ratios):.2f}-{max(ratios):.2f})")
            if name in GOALS:
                line += "  (goal: at most 1.30)"
        if args.baseline:
            ratios = [a / b for a, b in zip(ours["now"][name], ours["baseline"][name],
                                            strict=True)]
            line += f"   now/baseline {statistics.median(ratios):.2f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000, help="CLI mode: input lines")
    parser.add_argument("--node-reducer", metavar="FILE",
                        help="side by side with the TypeScript reference (bundled reducers FILE)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="side by side: also run the package copy in DIR")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3, help="runs per process, best kept")
    parser.add_argument("--wall", action="store_true", help="wall-clock instead of CPU time")
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--package", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.package:  # this process imports the copy in DIR as ``agenthost_protocol``
            sys.path.insert(0, str(Path(args.package).resolve()))
        now = time.perf_counter if args.wall else time.process_time
        print(json.dumps(child(args.child, args.repeat, now)))
    elif args.node_reducer or args.baseline:
        side_by_side(args)
    else:
        run_cli(args.lines)


if __name__ == "__main__":
    main()
