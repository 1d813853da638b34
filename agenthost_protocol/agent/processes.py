"""Agent processes in a process group of their own, and their bounded stop.

Every agent process starts in a process group of its own (a new session),
because agents start processes too (pi's tool commands, Codex's native
binary under its Node wrapper): signalling the direct child alone leaves
them running, reparented to init, and holding the stdout pipe open, which
an asyncio process's ``wait()`` waits for.  :class:`AgentProcess` is that
process and its bounded stopping; :func:`spawn_agent_process` starts one.
Both runners (pi, ACP) use them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

__all__ = ["AgentProcess", "LogThrottle", "spawn_agent_process", "until"]

log = logging.getLogger(__name__)


_POLL: Final = 0.02
_STREAM_LIMIT: Final = 64 * 1024
"""The stdout reader's buffer limit: asyncio's default (both runners read in chunks)."""
if sys.platform == "win32":
    _STOP_SIGNALS: Final = (signal.SIGTERM,)
else:
    _STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGKILL)


async def until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` for at most ``timeout`` seconds; whether it came true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL)
    return True


class LogThrottle:
    """A log line at most once every ``interval`` seconds; the next says how many were left out.

    An agent can write millions of bad lines a second: one log line for each
    would flood the host's own output and spend its time formatting them.
    """

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING,
                 interval: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._level = level
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self._skipped = 0

    @property
    def skipped(self) -> int:
        """The warnings left out since the last one logged."""
        return self._skipped

    def log(self, message: str, *args: object) -> None:
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            self._skipped += 1
            return
        if self._skipped:
            message += f" ({self._skipped} more like it not logged)"
        self._last, self._skipped = now, 0
        self._log.log(self._level, message, *args)


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The stock protocol, telling when the process itself exited.

    ``Process.wait()`` (3.11 to 3.13) also waits for every pipe to close, which
    a grandchild that inherited stdout may never do.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class AgentProcess:
    """An agent process started in a process group of its own, and its bounded stop.

    :meth:`stop` closes stdin, gives the process ``step`` seconds to exit, then
    signals the whole group (SIGTERM, then SIGKILL, ``step`` seconds each)
    until no process of it is left, and closes the pipes, so a process that
    left the group cannot hold the runner either.  Every wait is bounded, and
    the process is reaped by asyncio's child watcher.
    """

    def __init__(self, process: asyncio.subprocess.Process,
                 transport: asyncio.SubprocessTransport, protocol: _ExitProtocol) -> None:
        self.process = process
        self._transport = transport
        self._protocol = protocol
        self._stopping: asyncio.Future[int | None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def wait_exit(self, timeout: float | None = None) -> bool:
        """Wait until the process exited (not its pipes); whether it did in ``timeout``."""
        if self.process.returncode is not None:
            return True
        try:
            await asyncio.wait_for(self._protocol.exited.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def group_alive(self) -> bool:
        """Whether a process of the group runs (zombies do not: a container's init
        may never reap them)."""
        if sys.platform == "win32":
            return self.process.returncode is None
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return _group_has_live_member(self.pid)

    async def stop(self, step: float) -> int | None:
        """Stop the process and its group (at most about ``4 * step`` seconds); its status.

        Safe to call more than once and from several tasks: they share one stop,
        which goes on if a caller is cancelled.
        """
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(step))
        return await asyncio.shield(self._stopping)

    async def _stop(self, step: float) -> int | None:
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()
        await self.wait_exit(step)  # agents that end at EOF stop their own tools first
        for signum in _STOP_SIGNALS:
            if not self.group_alive():
                break
            self._signal(signum)
            await until(lambda: not self.group_alive(), step)
        # a process that left the group may still hold a pipe: it no longer holds us
        self._transport.close()
        await self.wait_exit(step)
        if self.group_alive():
            log.warning("agent process group %s still has processes after SIGKILL", self.pid)
        return self.process.returncode

    def _signal(self, signum: int) -> None:
        if sys.platform == "win32":  # no process groups to signal: the process itself
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            return
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass
        except PermissionError:  # a member changed its user: the leader at least
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)


def _group_has_live_member(pgid: int) -> bool:
    """Whether ``/proc`` shows a process of group ``pgid`` that is not a zombie.

    Without ``/proc`` the answer is yes: ``killpg(pgid, 0)`` already found one.
    """
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    wanted = str(pgid)
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # after the command name (which may hold spaces and parentheses): state ppid pgrp
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 2 and fields[2].decode() == wanted and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def spawn_agent_process(
    command: str,
    args: Sequence[str],
    *,
    cwd: str | None,
    env: Mapping[str, str] | None,
    stderr: int | None,
) -> AgentProcess:
    """``command args...`` with piped stdin and stdout, leading a new session (its group).

    Raises ``OSError`` when it cannot be started.
    """
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitProtocol(_STREAM_LIMIT, loop), command, *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr,
        cwd=cwd, env=dict(env) if env is not None else None, start_new_session=True,
    )
    return AgentProcess(asyncio.subprocess.Process(transport, protocol, loop), transport,
                        protocol)
