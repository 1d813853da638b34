"""Import time: fresh interpreters importing the package, and ``agenthost-protocol --help``.

Each figure is the median of ``--runs`` fresh processes (after one warm-up, so
the bytecode caches exist), run one after another:

* ``python -X importtime -c 'import X'``: the cumulative time the interpreter
  reports for the package's modules (``agenthost_protocol``, then the modules a
  program uses next: ``wire``, ``types``, the chat reducer), which includes
  what they import (``attrs``, ``cattrs``, ``typing``...);
* ``agenthost-protocol --help``: the wall-clock time of the whole process.

Goal 3 of the performance issue: ``import agenthost_protocol`` at most 150 ms
(``-X importtime`` cumulative), ``agenthost-protocol --help`` at most 200 ms.

``--baseline DIR`` runs the same with an older copy of the package first on
``PYTHONPATH`` (``DIR`` holds its ``agenthost_protocol`` folder); the
processes of the two alternate.  Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_import [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULES = (
    "agenthost_protocol",
    "agenthost_protocol.wire",
    "agenthost_protocol.types",
    "agenthost_protocol.reducers.chat",
)


# A line of ``-X importtime`` for a module imported at the top level (not nested).
TOP_LEVEL = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| (agenthost_protocol\S*)$", re.M)


def import_us(module: str, env: dict[str, str], cwd: str) -> int:
    """``-X importtime`` cumulative microseconds of ``import module`` in a fresh interpreter.

    The sum of the top-level lines of the package's modules: ``import a.b``
    imports ``a`` and then ``a.b``, each reported with what it imported.
    """
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        check=True, capture_output=True, text=True, env=env, cwd=cwd,
    ).stderr
    return sum(int(m.group(1)) for m in TOP_LEVEL.finditer(err))


def help_seconds(env: dict[str, str], cwd: str) -> float:
    command = shutil.which("agenthost-protocol", path=str(Path(sys.executable).parent))
    argv = [command, "--help"] if command else [
        sys.executable, "-c", "import sys; from agenthost_protocol.cli import main; "
        "sys.exit(main(['--help']))",
    ]
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=env, cwd=cwd)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="processes per figure (median)")
    parser.add_argument("--baseline", metavar="DIR", help="also time the package copy in DIR")
    args = parser.parse_args()
    variants = {"now": dict(os.environ)}
    if args.baseline:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(args.baseline).resolve()), *filter(None, [env.get("PYTHONPATH")])]
        )
        variants["baseline"] = env
    figures: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as cwd:  # not the repository: ``-c`` puts cwd first
        for _ in range(1 + args.runs):
            for name, env in variants.items():
                for module in MODULES:
                    figures.setdefault((name, module), []).append(
                        import_us(module, env, cwd) / 1e3
                    )
                figures.setdefault((name, "--help"), []).append(help_seconds(env, cwd) * 1e3)
    print(f"median of {args.runs} fresh processes (after a warm-up one), milliseconds; "
          "[min-max]")
    for (name, what), values in figures.items():
        counted = values[1:]
        label = "agenthost-protocol --help (wall)" if what == "--help" else f"import {what}"
        print(f"  {name:<8} {label:<45} {statistics.median(counted):>7.1f}  "
              f"[{min(counted):.1f}-{max(counted):.1f}]")
    print("goals: import agenthost_protocol at most 150 ms; agenthost-protocol --help at most "
          "200 ms")


if __name__ == "__main__":
    main()
