"""Terminals in real pseudo-terminals: :class:`TerminalService` (POSIX).

A :class:`~agenthost_protocol.aio.server.HostService` that answers
``createTerminal`` and ``disposeTerminal`` and runs each terminal's shell in
a pty, in its own session (it is the session leader, the pty its
controlling terminal: job control and Ctrl-C work as in any terminal).

* Output is read without blocking the loop, decoded as UTF-8 with an
  incremental decoder (a character split across reads is never split on the
  wire; bytes that are not UTF-8 become U+FFFD), and dispatched as
  ``terminal/data`` at most every :attr:`TerminalOptions.coalesce_interval`
  seconds (or sooner once :attr:`TerminalOptions.chunk_chars` wait).
* ``terminal/input`` is written to the pty without blocking; at most
  :attr:`TerminalOptions.max_pending_input` bytes wait for a program that
  does not read, what comes beyond is dropped (logged).
* ``terminal/resized`` sets the pty's size (the kernel signals ``SIGWINCH``
  to the program in the foreground).
* Shell integration: bash and zsh are started with a startup file shipped
  here that runs the user's own and then reports each command with OSC 633
  sequences carrying a per-terminal nonce; the service turns them into
  ``terminal/commandExecuted`` / ``terminal/commandFinished`` /
  ``terminal/cwdChanged`` and strips them (and any other OSC 633 or 133
  sequence) from ``terminal/data``, across reads too.  OSC 0/2 (title) and
  OSC 7 (cwd) are followed and left in the data.
* Bounded memory: a terminal's ``content`` holds at most
  :attr:`TerminalOptions.max_content_chars` characters; an append past it
  makes the host dispatch ``terminal/cleared`` and then re-dispatch the
  newest :attr:`TerminalOptions.kept_content_chars` characters as ordinary
  actions (``terminal/data``, ``terminal/commandExecuted``,
  ``terminal/commandFinished``), so every client's reduced state stays equal
  to the host's.  A flood of output is read only as fast as the
  connections take it: while the server's send queues of the connections
  that read hold more than :attr:`TerminalOptions.backpressure_bytes`,
  reading pauses and the program blocks on its writes (a client that stopped
  reading holds it back for the server's ``stall_timeout`` at most, and is
  then left to the server's budgets, which drop it).
* Process lifetime: ``disposeTerminal``, the end of the shell, the host's
  close, the disposal of the claiming session and (after
  :attr:`TerminalOptions.client_grace` seconds) the disconnection of the
  claiming client all end every process of the terminal's session:
  ``SIGHUP`` and ``SIGTERM``, then ``SIGKILL`` after
  :attr:`TerminalOptions.kill_timeout` seconds; the shell is reaped.

:meth:`TerminalService.run_command` runs one command in a new terminal (what
``Turn.run`` of the agent layer uses).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import logging
import os
import secrets
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final
from urllib.parse import quote, unquote, urlsplit

from attrs import field, frozen

from .. import types as t
from ..channels import ChannelKind, channel_kind
from ..errors import LocalProtocolError
from ..host import (
    ClientActionApplied,
    ConnectionClosed,
    Event,
    Initialized,
    Reconnected,
    RequestReceived,
)
from ..host.validation import MAX_TERMINAL_SIZE, MAX_TERMINAL_TITLE
from ..types.error_codes import JsonRpcErrorCode
from .activity import shown
from .server import HostServer

__all__ = [
    "SUPPORTED",
    "CommandRun",
    "OscScanner",
    "TerminalOptions",
    "TerminalService",
    "default_shell",
    "file_uri",
    "path_of_file_uri",
]

if sys.platform != "win32":
    import fcntl
    import termios

log = logging.getLogger(__name__)

SUPPORTED: Final = os.name == "posix"
"""Whether terminals can run here (a POSIX pty)."""

_INTEGRATION: Final = Path(__file__).with_name("shell_integration")
_READ_SIZE: Final = 64 * 1024
_MAX_OSC: Final = 4096
"""The longest OSC sequence looked for; a longer one is passed on as output."""
_MAX_TITLE: Final = MAX_TERMINAL_TITLE
_MAX_SIZE: Final = MAX_TERMINAL_SIZE
_MAX_KEPT_PARTS: Final = 256
"""The most content parts re-sent when a terminal's content is trimmed."""
_DRAIN_TIME: Final = 0.5
"""Seconds the output left after the shell's exit is read for."""
_SPAWN: Final = 'exec 0<>"$1" 1>&0 2>&0; shift; exec "$@"'
"""Run by ``/bin/sh`` in the new session: opening the pty by name makes it the
session's controlling terminal (a session leader's first tty, Linux and
most systems), then the shell replaces it."""


@frozen(kw_only=True)
class TerminalOptions:
    """How a :class:`TerminalService` runs terminals (``serve``'s terminal flags)."""

    shell: tuple[str, ...] = ()
    """The command of an interactive terminal (``()``: the user's shell,
    :func:`default_shell`).  bash and zsh given as a bare program get shell
    integration (command detection)."""
    shell_integration: bool = True
    """Inject the bash/zsh integration (``False``: the shell as it is)."""
    env: Mapping[str, str] | None = field(default=None, hash=False)
    """The terminals' environment (``None``: the host's own), plus ``TERM``."""
    coalesce_interval: float = 0.004
    """Seconds output is gathered before one ``terminal/data`` is dispatched."""
    chunk_chars: int = 256 * 1024
    """Characters after which gathered output is dispatched at once."""
    max_content_chars: int = 1024 * 1024
    """The most characters a terminal's ``content`` holds (see the module)."""
    kept_content_chars: int = 256 * 1024
    """What is kept of it when it is trimmed: its newest characters."""
    max_pending_input: int = 1024 * 1024
    """Input bytes waiting for a program that does not read; beyond, input is dropped."""
    backpressure_bytes: int = 16 * 1024 * 1024
    """Bytes in the send queues of the connections that read
    (:meth:`HostServer.reading_queued_bytes`) above which terminals stop reading output."""
    kill_timeout: float = 2.0
    """Seconds between ``SIGHUP``/``SIGTERM`` and ``SIGKILL`` when a terminal is ended."""
    client_grace: float = 10.0
    """Seconds a terminal claimed by a client outlives the client's last connection
    (a reconnect within it keeps the terminal)."""

    def __attrs_post_init__(self) -> None:
        if min(self.chunk_chars, self.max_content_chars, self.kept_content_chars,
               self.max_pending_input, self.backpressure_bytes) < 1:
            raise LocalProtocolError("the terminal sizes must be positive")
        if self.kept_content_chars > self.max_content_chars:
            raise LocalProtocolError("kept_content_chars must not exceed max_content_chars")
        if min(self.coalesce_interval, self.kill_timeout, self.client_grace) < 0:
            raise LocalProtocolError("the terminal intervals must not be negative")


def default_shell(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The user's shell: ``$SHELL``, else the password database's, else ``/bin/sh``."""
    environ = os.environ if env is None else env
    shell = environ.get("SHELL", "")
    if not shell:
        with contextlib.suppress(KeyError, ImportError, AttributeError):
            import pwd  # noqa: PLC0415  # POSIX only

            shell = pwd.getpwuid(os.getuid()).pw_shell
    return (shell or "/bin/sh",)


def file_uri(path: str | Path) -> str:
    """``file://`` URI of an absolute path."""
    return "file://" + quote(str(path), safe="/")


def path_of_file_uri(uri: str) -> Path | None:
    """The absolute path of a local ``file:`` URI, or ``None`` (another scheme, a
    remote host, a relative or malformed path)."""
    try:
        parts = urlsplit(uri)
        path = unquote(parts.path, errors="strict")
    except ValueError:  # UnicodeDecodeError too
        return None
    if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
        return None
    if parts.query or parts.fragment:
        return None
    if not path.startswith("/") or "\x00" in path:
        return None
    return Path(path)


class OscScanner:
    """Finds OSC sequences in a terminal's decoded output, across chunks.

    :meth:`feed` returns the items of a chunk in order: ``str`` output to pass
    on, and ``(code, body)`` for each OSC sequence whose code is in ``watched``;
    those of codes in ``stripped`` are left out of the output (the others are
    passed on as well).  A sequence cut by the end of a chunk waits for the
    next; one longer than :data:`_MAX_OSC` is passed on as output.
    """

    def __init__(self, watched: frozenset[str], stripped: frozenset[str]) -> None:
        self._watched = watched
        self._stripped = stripped
        self._pending = ""

    def feed(self, text: str) -> list[str | tuple[str, str]]:
        if self._pending:
            text, self._pending = self._pending + text, ""
        if "\x1b" not in text:
            return [text] if text else []
        out: list[str | tuple[str, str]] = []
        i, n = 0, len(text)
        while i < n:
            j = text.find("\x1b", i)
            if j < 0:
                out.append(text[i:])
                break
            if j + 1 >= n:
                if j > i:
                    out.append(text[i:j])
                self._pending = text[j:]
                break
            if text[j + 1] != "]":
                out.append(text[i:j + 1])
                i = j + 1
                continue
            end, stop = self._terminator(text, j + 2)
            if end < 0:
                if n - j > _MAX_OSC:
                    out.append(text[i:])
                else:
                    if j > i:
                        out.append(text[i:j])
                    self._pending = text[j:]
                break
            if stop < 0:
                # another escape cancelled the sequence: it is passed on as it is
                out.append(text[i:end])
                i = end
                continue
            body = text[j + 2:end]
            code = body.split(";", 1)[0]
            if j > i:
                out.append(text[i:j])
            if code in self._watched:
                out.append((code, body[len(code) + 1:]))
            if code not in self._stripped:
                out.append(text[j:stop])
            i = stop
        return [item for item in out if item != ""]

    @staticmethod
    def _terminator(text: str, start: int) -> tuple[int, int]:
        """``(end of the body, end of the sequence)``; ``(-1, -1)``: not there yet;
        ``(end, -1)``: cancelled by another escape at ``end``."""
        bel = text.find("\x07", start, start + _MAX_OSC)
        esc = text.find("\x1b", start, start + _MAX_OSC)
        if bel >= 0 and (esc < 0 or bel < esc):
            return bel, bel + 1
        if esc >= 0:
            if esc + 1 >= len(text):
                return -1, -1
            if text[esc + 1] == "\\":
                return esc, esc + 2
            return esc, -1
        return -1, -1


def _unescape(value: str) -> str:
    """The integration's escaping undone: ``\\\\`` and ``\\xHH``."""
    if "\\" not in value:
        return value
    out: list[str] = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "\\" and value.startswith("\\", i + 1):
            out.append("\\")
            i += 2
        elif c == "\\" and value.startswith("x", i + 1) and i + 4 <= len(value):
            try:
                out.append(chr(int(value[i + 2:i + 4], 16)))
                i += 4
            except ValueError:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` (Linux ``/proc``; elsewhere only ``sid`` itself)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return [sid]
    members = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 3 and fields[3] == str(sid).encode():
            members.append(int(name))
    return members


def _signal_session(sid: int, signum: int) -> int:
    """Send ``signum`` to every process of session ``sid``; how many there were."""
    members = _session_members(sid)
    with contextlib.suppress(OSError):
        os.killpg(sid, signum)
    for pid in members:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)
    return len(members)


class _Terminal:
    """One terminal's process and pty."""

    def __init__(self, service: TerminalService, uri: str, *, integration: bool,
                 record: int = 0) -> None:
        self.service = service
        self.uri = uri
        self.proc: asyncio.subprocess.Process | None = None
        self.master = -1
        self.sid = 0
        self.nonce = secrets.token_hex(8)
        self.integration = integration
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._scanner = OscScanner(frozenset({"0", "2", "7", "633", "133"}),
                                   frozenset({"633", "133"}))
        self._out: list[str] = []
        self._out_chars = 0
        self._timer: asyncio.TimerHandle | None = None
        self._input = bytearray()
        self._writing = False
        self.reading = False
        self.paused = False
        self.eof = False
        self.exit_code: int | None = None
        self.exited = asyncio.get_running_loop().create_future()
        self.ended = False
        """The host's state no longer changes (disposed, or the host closes)."""
        self.detection = False
        self._own_sequences = False
        self._command: tuple[str, float] | None = None
        self._command_line = ""
        self._commands = 0
        self.content_chars = 0
        self.record = record
        """The most output characters :attr:`output` keeps (``0``: none)."""
        self.output: deque[str] = deque()
        self.output_chars = 0
        self.output_cut = False
        self.run_by_agent = False
        self._dropping = False

    # -- starting --

    def spawn(self, argv: Sequence[str], cwd: Path, cols: int, rows: int,
              env: dict[str, str]) -> None:
        master, slave = os.openpty()
        try:
            os.set_blocking(master, False)
            fcntl.fcntl(master, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
            _set_size(master, cols, rows)
            name = os.ttyname(slave)
            # a subprocess made in C (no Python runs in the child), in a new session
            popen = subprocess.Popen(
                ["/bin/sh", "-c", _SPAWN, "sh", name, *argv],
                stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                start_new_session=True, close_fds=True,
            )
        except BaseException:
            os.close(master)
            os.close(slave)
            raise
        os.close(slave)
        self.master = master
        self.sid = popen.pid
        self.service._watch(self, popen)
        loop = asyncio.get_running_loop()
        loop.add_reader(master, self._readable)
        self.reading = True

    # -- output --

    def _readable(self) -> None:
        try:
            chunk = os.read(self.master, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno != errno.EIO:
                log.warning("terminal %s: reading failed: %s", shown(self.uri), e)
            chunk = b""
        if not chunk:
            self._stop_reading()
            self.eof = True
            self._take(self._decoder.decode(b"", final=True))
            self.flush()
            return
        self._take(self._decoder.decode(chunk))
        if self._out_chars >= self.service.chunk_chars:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                self.service.options.coalesce_interval, self.flush)

    def _take(self, text: str) -> None:
        if text:
            self._out.append(text)
            self._out_chars += len(text)

    def _stop_reading(self) -> None:
        if self.reading:
            self.reading = False
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(self.master)

    def pause(self) -> None:
        if self.reading and not self.paused:
            self.paused = True
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(self.master)

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            if self.reading and self.master >= 0:
                asyncio.get_running_loop().add_reader(self.master, self._readable)

    def drain(self) -> None:
        """Read what the pty still holds (after the shell's exit), without waiting."""
        if self.master < 0 or self.eof:
            return
        while True:
            try:
                chunk = os.read(self.master, _READ_SIZE)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                self._take(self._decoder.decode(b"", final=True))
                break
            self._take(self._decoder.decode(chunk))
            if self._out_chars >= self.service.chunk_chars:
                self.flush()

    def flush(self) -> None:
        """Dispatch the output gathered (and what its sequences say), in order."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._out:
            return
        text = "".join(self._out)
        self._out.clear()
        self._out_chars = 0
        if self.ended:
            return
        data: list[str] = []
        for item in self._scanner.feed(text):
            if isinstance(item, str):
                data.append(item)
                continue
            action = self._sequence(*item)
            if action is not None:
                self._data("".join(data))
                data.clear()
                self.service._dispatch(self, action)
        self._data("".join(data))
        self.service._sent()

    def _data(self, text: str) -> None:
        if not text:
            return
        if self.record:
            self.output.append(text)
            self.output_chars += len(text)
            while self.output_chars > self.record and self.output:
                extra = self.output_chars - self.record
                head = self.output[0]
                if len(head) <= extra:
                    self.output.popleft()
                    self.output_chars -= len(head)
                else:
                    self.output[0] = head[extra:]
                    self.output_chars -= extra
                self.output_cut = True
        self.service._append(self, text)

    def _sequence(self, code: str, body: str) -> t.StateAction | None:
        """The action an OSC sequence gives, if any."""
        if code in ("0", "2"):
            title = body[:_MAX_TITLE]
            if self.service.current(self.uri, "title") == title:
                return None
            return t.TerminalTitleChangedAction(title=title)
        if code == "7":
            # the shell's own report: its host part names this machine, whatever it says
            try:
                parts = urlsplit(body)
                path = unquote(parts.path, errors="strict")
            except ValueError:  # UnicodeDecodeError too
                return None
            if parts.scheme.lower() != "file" or not path.startswith("/") or "\x00" in path:
                return None
            return self._cwd_action(path)
        if code == "633":
            fields = body.split(";")
            if not self.integration or len(fields) < 2 or fields[-1] != self.nonce:
                return None  # not ours: stripped, not believed
            self._own_sequences = True
            kind, args = fields[0], fields[1:-1]
            action = self._command_action(kind, args)
            if action is None and not self.detection:
                self.detection = True
                return t.TerminalCommandDetectionAvailableAction()
            return action
        if code == "133" and not self._own_sequences:
            fields = body.split(";")
            return self._command_action(fields[0], fields[1:])
        return None

    def _command_action(self, kind: str, args: list[str]) -> t.StateAction | None:
        if kind == "E":
            self._command_line = _unescape(args[0])[:_MAX_TITLE * 4] if args else ""
            return None
        if kind == "C":
            return self.start_command(self._command_line)
        if kind == "D":
            code: int | None = None
            if args:
                with contextlib.suppress(ValueError):
                    code = int(args[0])
            return self.finish_command(code)
        if kind == "P" and args and args[0].startswith("Cwd="):
            path = _unescape(args[0][4:])
            if path.startswith("/") and "\x00" not in path:
                return self._cwd_action(path)
        return None

    def _cwd_action(self, path: str) -> t.StateAction | None:
        cwd = file_uri(path)
        if self.service.current(self.uri, "cwd") == cwd:
            return None
        return t.TerminalCwdChangedAction(cwd=cwd)

    def start_command(self, line: str) -> t.StateAction:
        self._commands += 1
        command_id = f"cmd-{self._commands}"
        self._command = (command_id, time.monotonic())
        self._command_line = ""
        self.detection = True
        return t.TerminalCommandExecutedAction(
            command_id=command_id, command_line=line, timestamp=self.service.now())

    def finish_command(self, code: int | None) -> t.StateAction | None:
        if self._command is None:
            return None
        command_id, started = self._command
        self._command = None
        return t.TerminalCommandFinishedAction(
            command_id=command_id, exit_code=code,
            duration_ms=int((time.monotonic() - started) * 1000))

    # -- input --

    def write(self, data: bytes) -> None:
        if self.master < 0 or self.exited.done():
            return
        room = self.service.options.max_pending_input - len(self._input)
        if len(data) > room:
            if not self._dropping:  # once per terminal: a peer cannot flood the log
                self._dropping = True
                log.warning("terminal %s: its program does not read its input; input "
                            "beyond %d bytes waiting is dropped", shown(self.uri),
                            self.service.options.max_pending_input)
            data = data[:max(room, 0)]
        if not data:
            return
        self._input += data
        self._write()

    def _write(self) -> None:
        loop = asyncio.get_running_loop()
        while self._input and self.master >= 0:
            try:
                n = os.write(self.master, self._input[:_READ_SIZE])
            except BlockingIOError:
                break
            except OSError:
                self._input.clear()
                break
            del self._input[:n]
        if self._input and self.master >= 0:
            if not self._writing:
                self._writing = True
                loop.add_writer(self.master, self._write)
        elif self._writing:
            self._writing = False
            with contextlib.suppress(ValueError, OSError):
                loop.remove_writer(self.master)

    def resize(self, cols: int, rows: int) -> None:
        if self.master >= 0:
            with contextlib.suppress(OSError):
                _set_size(self.master, cols, rows)

    # -- the end --

    def close_pty(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.master >= 0:
            loop = asyncio.get_running_loop()
            self._stop_reading()
            if self._writing:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_writer(self.master)
                self._writing = False
            os.close(self.master)
            self.master = -1

    async def kill(self, first: int = signal.SIGHUP) -> None:
        """End every process of the terminal's session: ``first`` and ``SIGTERM``,
        ``SIGKILL`` after the kill timeout; bounded."""
        if self.sid <= 0:
            return
        if first != signal.SIGTERM:
            _signal_session(self.sid, first)
        _signal_session(self.sid, signal.SIGTERM)
        deadline = time.monotonic() + self.service.options.kill_timeout
        while time.monotonic() < deadline:
            if self.exited.done() and len(_session_members(self.sid)) == 0:
                return
            await asyncio.sleep(0.05)  # a scan of /proc each time: not too often
        _signal_session(self.sid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), 2.0)


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class CommandRun:
    """A command run by :meth:`TerminalService.run_command` in a terminal of its own."""

    def __init__(self, terminal: _Terminal) -> None:
        self._terminal = terminal
        self.uri = terminal.uri
        """The terminal's URI (clients subscribe to it to watch)."""

    async def wait(self) -> int | None:
        """The command's exit code, once it ended (``128 + N``: killed by signal ``N``;
        ``None``: the terminal was disposed before it could be known)."""
        return await asyncio.shield(self._terminal.exited)

    @property
    def done(self) -> bool:
        return self._terminal.exited.done()

    def output(self) -> tuple[str, bool]:
        """The newest output (as much as was asked for) and whether older output was cut."""
        return "".join(self._terminal.output), self._terminal.output_cut

    def interrupt(self, grace: float = 2.0) -> None:
        """``SIGINT`` to the command (Ctrl-C), then, if it has not ended within
        ``grace`` seconds, every process of its terminal is killed."""
        terminal = self._terminal
        if terminal.exited.done() or terminal.sid <= 0:
            return
        _signal_session(terminal.sid, signal.SIGINT)
        terminal.service._track(self._kill_later(grace))

    async def _kill_later(self, grace: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._terminal.exited), grace)
        if not self._terminal.exited.done():
            await self._terminal.kill(signal.SIGTERM)


class TerminalService:
    """Terminals for a :class:`~agenthost_protocol.aio.server.HostServer` (add it with
    :meth:`~agenthost_protocol.aio.server.HostServer.add_service`).

    ``roots``: the directories a terminal may start in (a ``cwd`` must be one
    of them or below, symbolic links resolved); default: the working
    directory.  A terminal with no ``cwd`` starts in the first root.
    ``allowed_cwd`` (given the resolved path) replaces that check: an
    embedder's own rule (the file service's roots, say).
    ``max_terminals`` (default: the server's ``limits.max_terminals``) bounds
    the terminals alive at once.
    """

    def __init__(self, server: HostServer, *, options: TerminalOptions | None = None,
                 roots: Sequence[str | Path] | None = None,
                 allowed_cwd: Callable[[Path], bool] | None = None,
                 max_terminals: int | None = None) -> None:
        self.server = server
        self.host = server.host
        self.options = options if options is not None else TerminalOptions()
        given = list(roots) if roots is not None else [os.getcwd()]
        if not given:
            raise LocalProtocolError("a terminal service needs at least one root")
        self.roots = tuple(Path(os.path.realpath(root)) for root in given)
        self._allowed_cwd = allowed_cwd
        self.max_terminals = (max_terminals if max_terminals is not None
                              else server.limits.max_terminals)
        # what one message carries: a character may take 6 bytes of JSON (\u001b)
        room = max(4096, server.limits.max_message_size - 64 * 1024) // 6
        self.chunk_chars = max(1024, min(self.options.chunk_chars, room // 2))
        """Characters after which gathered output is dispatched (the option, less
        for a server whose messages are small)."""
        self.max_content_chars = max(2048, min(self.options.max_content_chars, room))
        """The bound of a terminal's content (the option, less when a snapshot of it
        would not fit the server's messages)."""
        self.kept_content_chars = min(self.options.kept_content_chars,
                                      self.max_content_chars // 2)
        self._terminals: dict[str, _Terminal] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._online: dict[str, int] = {}
        self._orphans: dict[str, asyncio.TimerHandle] = {}
        self._backpressure: asyncio.TimerHandle | None = None
        self._closing = False

    # -- what the service holds --

    @property
    def terminals(self) -> tuple[str, ...]:
        """The URIs of the terminals alive (not disposed), oldest first."""
        return tuple(self._terminals)

    def process_id(self, uri: str) -> int | None:
        """The pid of terminal ``uri``'s shell (its session id), if it was started."""
        terminal = self._terminals.get(uri)
        return None if terminal is None or terminal.sid <= 0 else terminal.sid

    def now(self) -> int:
        return self.host.now()

    def current(self, uri: str, name: str) -> object:
        """Field ``name`` of terminal ``uri``'s state (``None`` when it is gone)."""
        state = self.host.state(uri) if self.host.has_channel(uri) else None
        return getattr(state, name, None) if isinstance(state, t.TerminalState) else None

    def allowed(self, path: Path) -> bool:
        """Whether ``path`` (resolved) may be a terminal's cwd: ``allowed_cwd`` says, or
        else whether it is one of the roots or below one."""
        real = Path(os.path.realpath(path))
        if self._allowed_cwd is not None:
            return self._allowed_cwd(real)
        return any(real == root or root in real.parents for root in self.roots)

    # -- the HostService protocol --

    def handle(self, event: Event) -> bool:
        if isinstance(event, RequestReceived):
            if event.method == "createTerminal":
                self._create(event)
                return True
            if event.method == "disposeTerminal":
                self._dispose_request(event)
                return True
            if event.method == "disposeSession":
                # after the agent's handler disposed it (or refused to)
                asyncio.get_running_loop().call_soon(self._sweep_sessions)
            return False
        if isinstance(event, ClientActionApplied):
            envelope = event.envelope
            if channel_kind(envelope.channel) is not ChannelKind.TERMINAL:
                return False
            self._client_action(envelope.channel, envelope.action)
            return True
        if isinstance(event, Initialized | Reconnected):
            self._online[event.client_id] = self._online.get(event.client_id, 0) + 1
            timer = self._orphans.pop(event.client_id, None)
            if timer is not None:
                timer.cancel()
        elif isinstance(event, ConnectionClosed):
            client = event.connection.client_id
            if client is not None and client in self._online:
                self._online[client] -= 1
                if self._online[client] <= 0:
                    del self._online[client]
                    self._client_left(client)
        return False

    async def close(self) -> None:
        """End every terminal's processes (bounded: twice the kill timeout and a bit)."""
        self._closing = True
        for timer in self._orphans.values():
            timer.cancel()
        self._orphans.clear()
        if self._backpressure is not None:
            self._backpressure.cancel()
        ending = [self._end(terminal, dispose=False) for terminal in self._terminals.values()]
        self._terminals.clear()
        if ending:
            await asyncio.gather(*ending, return_exceptions=True)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.options.kill_timeout + 3)

    # -- requests --

    def _create(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.CreateTerminalParams):
            raise LocalProtocolError(f"{event.method} is not createTerminal")
        if not SUPPORTED:
            event.responder.error(JsonRpcErrorCode.METHOD_NOT_FOUND,
                                  f"this host cannot run terminals: they need a POSIX pty, "
                                  f"and it runs on {sys.platform}")
            return
        refusal = self._refusal(params.cwd, params.cols, params.rows)
        if refusal is not None:
            event.responder.error(*refusal)
            return
        if self._closing:
            event.responder.error(JsonRpcErrorCode.INTERNAL_ERROR, "the host is shutting down")
            return
        if len(self._terminals) >= self.max_terminals and not self._evict():
            event.responder.error(
                JsonRpcErrorCode.INVALID_REQUEST,
                f"too many terminals: this host runs at most {self.max_terminals}; dispose "
                "of terminals first")
            return
        cwd = self._cwd(params.cwd)
        cols, rows = params.cols or 80, params.rows or 24
        title = params.name or ""
        state = self.host.answer_create_terminal(event)
        if state is None:
            return
        if state.cols is None or state.rows is None:
            self.host.dispatch(params.channel, t.TerminalResizedAction(cols=cols, rows=rows))
        if state.cwd is None:
            self.host.dispatch(params.channel, t.TerminalCwdChangedAction(cwd=file_uri(cwd)))
        argv, env, integration = self._shell_command()
        terminal = _Terminal(self, params.channel, integration=integration)
        self._terminals[params.channel] = terminal
        self._start(terminal, argv, cwd, cols=cols, rows=rows, env=env, title=title)

    def _refusal(self, cwd: str | None, cols: int | None,
                 rows: int | None) -> tuple[int, str] | None:
        for name, value in (("cols", cols), ("rows", rows)):
            if value is not None and not 1 <= value <= _MAX_SIZE:
                return (JsonRpcErrorCode.INVALID_PARAMS,
                        f"{name} must be from 1 to {_MAX_SIZE}")
        if cwd is not None:
            path = path_of_file_uri(cwd)
            if path is None:
                return (JsonRpcErrorCode.INVALID_PARAMS,
                        "cwd must be a file: URI of an absolute path on this host")
            if not self.allowed(path):
                return (JsonRpcErrorCode.INVALID_PARAMS,
                        "cwd is outside the directories this host serves")
            if not path.is_dir():
                return (JsonRpcErrorCode.INVALID_PARAMS, "cwd is not a directory")
        return None

    def _cwd(self, cwd: str | None) -> Path:
        path = path_of_file_uri(cwd) if cwd is not None else None
        return Path(os.path.realpath(path if path is not None else self.roots[0]))

    def _shell_command(self) -> tuple[list[str], dict[str, str], bool]:
        env = self._env()
        argv = list(self.options.shell or default_shell(env))
        name = os.path.basename(argv[0])
        if not self.options.shell_integration or len(argv) != 1:
            return argv, env, False
        if name == "bash":
            return [argv[0], "--rcfile", str(_INTEGRATION / "bash.sh"), "-i"], env, True
        if name == "zsh":
            if "ZDOTDIR" in env:
                env["AHP_USER_ZDOTDIR"] = env["ZDOTDIR"]
            env["ZDOTDIR"] = str(_INTEGRATION / "zsh")
            return [argv[0], "-i"], env, True
        return argv, env, False

    def _env(self) -> dict[str, str]:
        env = dict(os.environ if self.options.env is None else self.options.env)
        env["TERM"] = "xterm-256color"
        env.setdefault("COLORTERM", "truecolor")
        env.pop("AHP_USER_ZDOTDIR", None)
        env.pop("AHP_TOKEN", None)  # the host's access token is not the shell's business
        return env

    def _start(self, terminal: _Terminal, argv: Sequence[str], cwd: Path, *, cols: int,
               rows: int, env: dict[str, str], title: str) -> None:
        if terminal.integration:
            env["AHP_SHELL_NONCE"] = terminal.nonce
        try:
            terminal.spawn(argv, cwd, cols, rows, env)
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("terminal %s: cannot start %s: %s", shown(terminal.uri), shown(argv[0]), e)
            self._dispatch(terminal, t.TerminalDataAction(
                data=f"agenthost-protocol: cannot start {argv[0]}: {e}\r\n"))
            self._dispatch(terminal, t.TerminalExitedAction(exit_code=127))
            terminal.exited.set_result(127)
            self._sent()
            return
        if not title:
            self._dispatch(terminal, t.TerminalTitleChangedAction(
                title=os.path.basename(argv[0])))
        log.info("terminal %s: %s started (pid %d)", shown(terminal.uri),
                 os.path.basename(argv[0]), terminal.sid)
        self._sent()

    def _dispose_request(self, event: RequestReceived) -> None:
        params = event.params
        if not isinstance(params, t.DisposeTerminalParams):
            raise LocalProtocolError(f"{event.method} is not disposeTerminal")
        if not self.host.answer_dispose_terminal(event):
            return
        terminal = self._terminals.pop(params.channel, None)
        if terminal is not None:
            self._track(self._end(terminal, dispose=False))

    # -- client actions --

    def _client_action(self, uri: str, action: t.StateAction) -> None:
        terminal = self._terminals.get(uri)
        match action:
            case t.TerminalInputAction(data=data):
                if terminal is not None:
                    terminal.write(data.encode("utf-8", "surrogatepass"))
            case t.TerminalResizedAction(cols=cols, rows=rows):
                if terminal is not None and 1 <= cols <= _MAX_SIZE and 1 <= rows <= _MAX_SIZE:
                    terminal.resize(cols, rows)
            case t.TerminalClearedAction():
                if terminal is not None:
                    terminal.content_chars = 0
            case _:
                pass

    # -- claims --

    def _client_left(self, client: str) -> None:
        if self._closing or not any(self._claimed_by_client(client)):
            return
        old = self._orphans.pop(client, None)
        if old is not None:
            old.cancel()
        self._orphans[client] = asyncio.get_running_loop().call_later(
            self.options.client_grace, self._orphaned, client)

    def _claimed_by_client(self, client: str) -> Iterator[str]:
        for uri in self._terminals:
            state = self.host.state(uri) if self.host.has_channel(uri) else None
            if (isinstance(state, t.TerminalState)
                    and isinstance(state.claim, t.TerminalClientClaim)
                    and state.claim.client_id == client):
                yield uri

    def _orphaned(self, client: str) -> None:
        self._orphans.pop(client, None)
        if client in self._online:
            return
        for uri in list(self._claimed_by_client(client)):
            log.info("terminal %s: disposed, its client %s left", shown(uri), shown(client))
            self.dispose(uri)
        self.server.flush()

    def _sweep_sessions(self) -> None:
        for uri in list(self._terminals):
            state = self.host.state(uri) if self.host.has_channel(uri) else None
            if isinstance(state, t.TerminalState) and isinstance(
                    state.claim, t.TerminalSessionClaim) and not self.host.has_channel(
                    state.claim.session):
                log.info("terminal %s: disposed with its session", shown(uri))
                self.dispose(uri)
        self.server.flush()

    def dispose(self, uri: str) -> None:
        """Dispose terminal ``uri`` as ``disposeTerminal`` does (its processes end in
        the background; :meth:`close` waits for them)."""
        terminal = self._terminals.pop(uri, None)
        if self.host.has_channel(uri) and isinstance(self.host.state(uri), t.TerminalState):
            self.host.dispose_terminal(uri)
        if terminal is not None:
            self._track(self._end(terminal, dispose=False))

    def _evict(self) -> bool:
        """Make room by disposing of the oldest exited terminal a command ran in."""
        for uri, terminal in self._terminals.items():
            if terminal.run_by_agent and terminal.exited.done():
                self.dispose(uri)
                return True
        return False

    # -- commands of the agent --

    def new_uri(self) -> str:
        return f"ahp-terminal:/{uuid.uuid4()}"

    def run_command(self, command: str, *, claim: t.TerminalClaim, cwd: str | None = None,
                    title: str | None = None, max_output: int = 64 * 1024,
                    cols: int = 120, rows: int = 30) -> CommandRun:
        """Run ``command`` (with the shell's ``-c``) in a new terminal claimed by ``claim``.

        The terminal shows ``$ command``, then the command as a command part
        (``terminal/commandExecuted``, its output, ``terminal/commandFinished``
        with its exit code), then ``terminal/exited``; it stays listed until
        disposed (its session's disposal disposes it; when the budget is full,
        the oldest such terminal that has exited makes room).  Raises
        ``ValueError`` for a ``cwd`` outside the roots, ``RuntimeError`` when
        terminals cannot run or too many do.
        """
        if not SUPPORTED:
            raise RuntimeError(f"terminals need a POSIX pty; this host runs on {sys.platform}")
        if self._closing:
            raise RuntimeError("the host is shutting down")
        refusal = self._refusal(cwd, cols, rows)
        if refusal is not None:
            raise ValueError(refusal[1])
        if len(self._terminals) >= self.max_terminals and not self._evict():
            raise RuntimeError(f"too many terminals: this host runs at most "
                               f"{self.max_terminals}")
        path = self._cwd(cwd)
        uri = self.new_uri()
        shown = title if title is not None else command
        self.host.create_terminal(uri, claim=claim, title=shown[:_MAX_TITLE],
                                  cwd=file_uri(path), cols=cols, rows=rows)
        terminal = _Terminal(self, uri, integration=False, record=max(0, max_output))
        terminal.run_by_agent = True
        self._terminals[uri] = terminal
        self._dispatch(terminal, t.TerminalDataAction(data=f"$ {command}\r\n"))
        self._dispatch(terminal, terminal.start_command(command))
        env = self._env()
        program = (self.options.shell or default_shell(env))[0]
        self._start(terminal, [program, "-c", command], path, cols=cols, rows=rows, env=env,
                    title=shown)
        return CommandRun(terminal)

    def release(self, uri: str, session: str) -> None:
        """Narrow terminal ``uri``'s claim to ``session`` alone (the tool call that
        used it is done: the terminal is in the background)."""
        terminal = self._terminals.get(uri)
        if terminal is not None:
            self._dispatch(terminal, t.TerminalClaimedAction(
                claim=t.TerminalSessionClaim(session=session)))
            self.server.flush()

    # -- dispatching --

    def _dispatch(self, terminal: _Terminal, action: t.StateAction) -> None:
        if terminal.ended or not self.host.has_channel(terminal.uri):
            return
        try:
            self.host.dispatch(terminal.uri, action)
        except LocalProtocolError:
            log.exception("terminal %s: could not dispatch %s", shown(terminal.uri), action.type)

    def _append(self, terminal: _Terminal, text: str) -> None:
        limit = self.max_content_chars
        if terminal.content_chars + len(text) > limit:
            self._trim(terminal, text)
            return
        terminal.content_chars += len(text)
        self._dispatch(terminal, t.TerminalDataAction(data=text))

    def _trim(self, terminal: _Terminal, text: str) -> None:
        """Keep the newest ``kept_content_chars`` of the content with ``text``: cleared,
        then the kept parts re-sent as the actions that make them."""
        keep = self.kept_content_chars
        if len(text) > keep:
            text = text[-keep:]
        state = self.host.state(terminal.uri) if self.host.has_channel(terminal.uri) else None
        if not isinstance(state, t.TerminalState):
            return
        room = keep - len(text)
        kept: list[tuple[t.TerminalContentPart, str]] = []
        for part in reversed(state.content):
            # the last part is kept even with no room: the text may belong to its command
            if kept and (room <= 0 or len(kept) >= _MAX_KEPT_PARTS):
                break
            if isinstance(part, t.TerminalCommandPart):
                value = part.output
            elif isinstance(part, t.TerminalUnclassifiedPart):
                value = part.value
            else:
                continue
            tail = "" if room <= 0 else value[-room:] if len(value) > room else value
            room -= len(tail)
            kept.append((part, tail))
        self._dispatch(terminal, t.TerminalClearedAction())
        total = 0
        for part, tail in reversed(kept):
            if isinstance(part, t.TerminalCommandPart):
                self._dispatch(terminal, t.TerminalCommandExecutedAction(
                    command_id=part.command_id, command_line=part.command_line,
                    timestamp=part.timestamp))
                if tail:
                    self._dispatch(terminal, t.TerminalDataAction(data=tail))
                if part.is_complete:
                    self._dispatch(terminal, t.TerminalCommandFinishedAction(
                        command_id=part.command_id, exit_code=part.exit_code,
                        duration_ms=part.duration_ms))
            elif tail:
                self._dispatch(terminal, t.TerminalDataAction(data=tail))
            total += len(tail)
        terminal.content_chars = total + len(text)
        self._dispatch(terminal, t.TerminalDataAction(data=text))

    def _sent(self) -> None:
        """Send what was dispatched; stop reading output while the connections lag."""
        self.server.flush()
        if self.server.reading_queued_bytes() > self.options.backpressure_bytes:
            for terminal in self._terminals.values():
                terminal.pause()
            if self._backpressure is None:
                self._backpressure = asyncio.get_running_loop().call_later(
                    0.01, self._check_backpressure)

    def _check_backpressure(self) -> None:
        self._backpressure = None
        if self.server.reading_queued_bytes() > self.options.backpressure_bytes // 2:
            self._backpressure = asyncio.get_running_loop().call_later(
                0.01, self._check_backpressure)
            return
        for terminal in self._terminals.values():
            terminal.resume()

    # -- processes --

    def _watch(self, terminal: _Terminal, popen: subprocess.Popen[bytes]) -> None:
        self._track(self._reap(terminal, popen))

    async def _reap(self, terminal: _Terminal, popen: subprocess.Popen[bytes]) -> None:
        code = await _wait_process(popen)
        # what the pty still holds goes out before the exit
        if not terminal.exited.done():
            deadline = time.monotonic() + _DRAIN_TIME
            _signal_session(terminal.sid, signal.SIGHUP)
            while not terminal.eof and time.monotonic() < deadline and terminal.master >= 0:
                terminal.drain()
                await asyncio.sleep(0.01)
            terminal.flush()
            # killed by signal N: 128 + N, as shells report it (an absent exitCode
            # would leave the state as it was: nobody could tell it ended)
            exit_code = code if code >= 0 else 128 - code
            finished = terminal.finish_command(exit_code)
            if finished is not None:
                self._dispatch(terminal, finished)
            self._dispatch(terminal, t.TerminalExitedAction(exit_code=exit_code))
            self._sent()
            terminal.exit_code = exit_code
            terminal.exited.set_result(exit_code)
            log.info("terminal %s: its process exited (%s)", shown(terminal.uri),
                     f"status {code}" if code >= 0 else f"signal {-code}")
        terminal.close_pty()
        # nothing of the terminal's session outlives its shell
        if len(_session_members(terminal.sid)) > 0:
            await terminal.kill(signal.SIGHUP)

    async def _end(self, terminal: _Terminal, *, dispose: bool) -> None:
        terminal.ended = True
        if dispose and self.host.has_channel(terminal.uri):
            self.host.dispose_terminal(terminal.uri)
        if terminal.master >= 0 or not terminal.exited.done():
            await terminal.kill(signal.SIGHUP)
        terminal.close_pty()
        if not terminal.exited.done():
            terminal.exited.set_result(None)

    def _track(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _wait_process(popen: subprocess.Popen[bytes]) -> int:
    """``popen``'s exit status, polled (no child watcher thread); reaped."""
    delay = 0.005
    while True:
        code = popen.poll()
        if code is not None:
            return code
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)

