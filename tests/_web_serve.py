"""``agenthost-protocol serve --port 0`` as a subprocess, for the web client's tests (sync:
Playwright's sync API must not run inside an asyncio loop).  Always reaped: SIGTERM, a
bounded wait, then SIGKILL."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 20.0


class Served:
    """A running ``serve``: its process and the three lines it printed."""

    def __init__(self, proc: subprocess.Popen[bytes], lines: list[str]) -> None:
        self.proc = proc
        self.ws_url = lines[0].split()[1]
        self.web_url = lines[1].split()[1]
        self.store_line = lines[2]
        parts = urlsplit(self.web_url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.host, _, port = parts.netloc.rpartition(":")
        self.port = int(port)
        fragment = parts.fragment
        self.token = unquote(fragment.removeprefix("token=")) if fragment else None


def _readline(proc: subprocess.Popen[bytes], deadline: float) -> str:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError(f"serve printed {line!r} only")
        chunk = os.read(fd, 1)
        if not chunk:
            raise EOFError(f"serve exited after {line!r}")
        line += chunk
    return line.decode()


def stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM, then SIGKILL after a bounded wait: the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(TIMEOUT)


@contextlib.contextmanager
def serve(args: Sequence[str], tmp: Path, *, port: int = 0,
          token: str = "web-test-token-0123456789") -> Iterator[Served]:
    """``serve --port PORT --token-file ... ARGS``; stderr in ``tmp/serve-*.err``."""
    token_file = tmp / "token"
    token_file.write_text(token + "\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("AHP_TOKEN", None)
    err_path = tmp / f"serve-{time.monotonic_ns()}.err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agenthost_protocol.cli", "serve", "--port", str(port),
             "--token-file", str(token_file), "--log-level", "warning", *args],
            stdout=subprocess.PIPE, stderr=err, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + TIMEOUT
        try:
            lines = [_readline(proc, deadline) for _ in range(3)]
        except (TimeoutError, EOFError) as e:
            raise AssertionError(f"{e}; stderr: {err_path.read_text()[-2000:]}") from None
        yield Served(proc, lines)
    finally:
        stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()
