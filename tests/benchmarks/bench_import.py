"""Start-up time: fresh interpreters importing the package, decoding, serving, chatting.

Each figure is the median of ``--runs`` fresh processes (after one warm-up, so
the bytecode caches exist: ``PYTHONDONTWRITEBYTECODE`` is dropped from their
environment), run one after another:

* ``python -X importtime -c 'import X'``: the cumulative time the interpreter
  reports for the package's modules (``agenthost_protocol``, then the modules a
  program uses next: ``wire``, ``types``, the chat reducer), which includes
  what they import (``attrs``, ``cattrs``, ``typing``...);
* ``agenthost-protocol --help``: the wall-clock time of the whole process;
* first use ("instant start"), wall clock of the whole process:

  - ``import agenthost_protocol.wire`` and one ``parse_message`` of an
    ``action`` notification (a ``chat/delta``), until the process has exited;
  - ``agenthost-protocol serve --port 0`` until it prints its URL (the first
    line on stdout), with ``--no-store`` and with the default store (an
    ``XDG_DATA_HOME`` of a temporary folder, the store file made by the
    warm-up run); the process is then stopped with SIGINT;
  - ``agenthost-protocol chat URL MESSAGE --yes`` until it writes its first
    byte (stdout or stderr: the reasoning comes first), against a running
    ``serve --no-store --agent examples.reverse:agent`` of the same package
    copy, warmed up by one chat first.

Goals of the first-use issue: first decode at most 150 ms, serve's URL at most
250 ms, chat's first byte at most 300 ms (and, from the performance issue,
``import agenthost_protocol`` at most 150 ms ``-X importtime`` cumulative,
``agenthost-protocol --help`` at most 200 ms).  Figures are printed, never
judged.

``--baseline DIR`` runs the same with an older copy of the package first on
``PYTHONPATH`` (``DIR`` holds its ``agenthost_protocol`` folder, e.g. from
``git archive REV agenthost_protocol | tar -x -C DIR``); the processes of the
two alternate.  The processes run in a temporary folder (``-c`` and ``-m``
put the current folder first on ``sys.path``), which holds a copy of
``examples/`` for the chat's agent.  Run from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_import [--runs 5] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MODULES = (
    "agenthost_protocol",
    "agenthost_protocol.wire",
    "agenthost_protocol.types",
    "agenthost_protocol.reducers.chat",
)

FIRST_DECODE = (
    "import agenthost_protocol.wire as w; w.parse_message("
    "b'{\"jsonrpc\":\"2.0\",\"method\":\"action\",\"params\":{\"channel\":\"ahp-chat:/x\","
    "\"serverSeq\":3,\"action\":{\"type\":\"chat/delta\",\"turnId\":\"t\",\"partId\":\"p\","
    "\"content\":\"x\"}}}')"
)
CLI = (sys.executable, "-m", "agenthost_protocol.cli")
CHAT_AGENT = "examples.reverse:agent"
TIMEOUT = 60.0

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


def first_decode_seconds(env: dict[str, str], cwd: str) -> float:
    """A fresh process importing the codec and decoding one action, start to exit."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", FIRST_DECODE], check=True, capture_output=True,
                   env=env, cwd=cwd)
    return time.perf_counter() - start


def _start_serve(args: list[str], env: dict[str, str], cwd: str
                 ) -> tuple[float, str, subprocess.Popen[bytes]]:
    """``serve --port 0 ARGS``: the seconds until its first line, the URL, the process."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [*CLI, "serve", "--host", "127.0.0.1", "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd,
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    elapsed = time.perf_counter() - start
    if not line.startswith("serving "):
        _stop(process)
        raise RuntimeError(f"serve printed {line!r} first")
    return elapsed, line.split()[1], process


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def serve_seconds(args: list[str], env: dict[str, str], cwd: str) -> float:
    """``serve`` until it prints its URL; then stopped (SIGINT) and waited for."""
    elapsed, _, process = _start_serve(args, env, cwd)
    _stop(process)
    return elapsed


def chat_seconds(url: str, env: dict[str, str], cwd: str) -> float:
    """``chat URL MESSAGE --yes`` until its first byte on stdout or stderr; then waited for."""
    start = time.perf_counter()
    process = subprocess.Popen([*CLI, "chat", url, "one two three", "--yes"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                               cwd=cwd)
    assert process.stdout is not None and process.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        selector.register(process.stderr, selectors.EVENT_READ)
        ready = selector.select(timeout=TIMEOUT)
    elapsed = time.perf_counter() - start
    _, err = process.communicate(timeout=TIMEOUT)
    if not ready or process.returncode != 0:
        raise RuntimeError(f"chat exited {process.returncode}: {err.decode()[-500:]}")
    return elapsed


def _measures(env: dict[str, str], cwd: str, url: str) -> dict[str, Callable[[], float]]:
    """Each figure's label and what measures it once, in seconds."""
    out: dict[str, Callable[[], float]] = {
        f"import {m}": partial(lambda m: import_us(m, env, cwd) / 1e6, m) for m in MODULES
    }
    out["agenthost-protocol --help (wall)"] = partial(help_seconds, env, cwd)
    out["import wire + first parse_message (wall)"] = partial(first_decode_seconds, env, cwd)
    out["serve --no-store: its URL (wall)"] = partial(serve_seconds, ["--no-store"], env, cwd)
    out["serve, default store: its URL (wall)"] = partial(serve_seconds, [], env, cwd)
    out["chat: its first byte (wall)"] = partial(chat_seconds, url, env, cwd)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="processes per figure (median)")
    parser.add_argument("--baseline", metavar="DIR", help="also time the package copy in DIR")
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    variants = {"now": dict(base)}
    if args.baseline:
        env = dict(base)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(args.baseline).resolve()), *filter(None, [env.get("PYTHONPATH")])]
        )
        variants["baseline"] = env
    figures: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as cwd:  # not the repository: ``-c`` puts cwd first
        shutil.copytree(ROOT / "examples", Path(cwd) / "examples")
        for name, env in variants.items():
            env["XDG_DATA_HOME"] = str(Path(cwd) / f"data-{name}")  # the default store
            # serve's settings file (its token): never the real config directory
            env["XDG_CONFIG_HOME"] = str(Path(cwd) / f"config-{name}")
        chats = {name: _start_serve(["--no-store", "--agent", CHAT_AGENT], env, cwd)
                 for name, env in variants.items()}
        try:
            measures = {name: _measures(env, cwd, chats[name][1])
                        for name, env in variants.items()}
            for _ in range(1 + args.runs):
                for name in variants:
                    for label, measure in measures[name].items():
                        figures.setdefault((name, label), []).append(measure() * 1e3)
        finally:
            for _, _, process in chats.values():
                _stop(process)
    print(f"median of {args.runs} fresh processes (after a warm-up one), milliseconds; "
          "[min-max]")
    for (name, label), values in figures.items():
        counted = values[1:]
        print(f"  {name:<8} {label:<45} {statistics.median(counted):>7.1f}  "
              f"[{min(counted):.1f}-{max(counted):.1f}]")
    print("goals: import agenthost_protocol at most 150 ms; agenthost-protocol --help at most "
          "200 ms; first decode at most 150 ms; serve's URL at most 250 ms; chat's first "
          "byte at most 300 ms")


if __name__ == "__main__":
    main()
