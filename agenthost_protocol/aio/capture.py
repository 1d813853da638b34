"""Every connection's traffic, written to a file as it crosses: ``serve --capture DIR``.

A capture is what :mod:`agenthost_protocol.hostcheck` reads: one file per
connection in the transcript format
(:class:`~agenthost_protocol.hostcheck.transcript.Transcript`, JSON Lines of
``{"from", "t", "message"}``), so a session a user had with a host can be
checked afterwards, or attached to a bug report.

It is a wrapper around the connection's
:class:`~agenthost_protocol.aio.server.MessageStream`: the server and the
transports do not know about it, and a server that captures nothing runs
exactly as before (no wrapper, no check per message).  A message is
recorded where it crosses the stream: what the client sent when
``receive`` returns it, what the host sends when it is handed to the
transport.  A frame from the client that is not JSON is kept as its text
(a JSON string), since it is exactly what a check should see.

A capture must never cost the host its connection: a file that cannot be
written (disk full, removed) is logged once and that connection is no
longer captured, and a connection's file stops growing at a byte cap (no
marker line is written then: it would not be a record).  Each line is
flushed as it is written, so a capture can be read while its connection
is open and survives a crash of the host.

Capturing costs a parse and a write per message and connection: it is for
debugging and evidence, not for a host under load.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, Final

from ..hostcheck.transcript import Direction, Record
from .server import CloseReason, DirectStream, FrameCache, MessageStream, ProbeableStream

__all__ = ["DEFAULT_MAX_BYTES", "CaptureDir", "CaptureError", "CaptureStream"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
"""64 MiB: the most one connection's capture file grows to."""

_NAME: Final = re.compile(r"(\d+)-.*\.jsonl")
_OPEN_FLAGS: Final = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
                      | getattr(os, "O_CLOEXEC", 0))
_OPEN_ATTEMPTS: Final = 100


class CaptureError(Exception):
    """The capture directory cannot be used: ``serve`` refuses to start (exit 1) rather
    than serve connections it was asked to capture and cannot."""


class CaptureDir:
    """A directory that receives one capture file per connection.

    The directory is created (mode ``0o700``) and a file written and removed
    in it at once, so that a directory that cannot hold captures is reported
    before anything is served (:class:`CaptureError`), not at the first
    connection.  Files are named ``NNNNNN-YYYYMMDDTHHMMSSZ.jsonl`` (mode
    ``0o600``: captures hold the users' content): the number counts the
    connections in the order they opened, continuing after the highest
    number already in the directory, so the names sort in that order across
    restarts too, and a name is never reused (files are created exclusively).

    ``max_bytes`` caps each connection's file.
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self._path = Path(path)
        self.max_bytes = max_bytes
        try:
            self._path.mkdir(mode=0o700, parents=True, exist_ok=True)
            # a file really written, not os.access: root passes that, a read-only
            # file system or a full disk may not
            fd, probe = tempfile.mkstemp(prefix=".capture-probe-", dir=self._path)
            os.close(fd)
            os.unlink(probe)
            names = os.listdir(self._path)
        except OSError as e:
            raise CaptureError(f"cannot write captures to {self._path}: "
                               f"{e.strerror or e}") from e
        numbers = [int(m.group(1)) for m in map(_NAME.fullmatch, names) if m is not None]
        self._count = max(numbers, default=0)
        # epoch ms from a monotonic clock: a record's "t" never goes back within a
        # capture, whatever happens to the wall clock meanwhile
        self._epoch_ms = time.time() * 1000 - time.monotonic() * 1000

    @property
    def path(self) -> Path:
        return self._path

    def now_ms(self) -> float:
        """Epoch milliseconds, never decreasing (a record's ``t``)."""
        return self._epoch_ms + time.monotonic() * 1000

    def done(self, stream: MessageStream) -> None:
        """The connection ``stream`` served ended: its file is closed."""
        if isinstance(stream, CaptureStream):
            stream.close_capture()

    def wrap(self, stream: MessageStream) -> CaptureStream:
        """``stream`` captured to a new file of this directory.

        The wrapper is a :class:`~agenthost_protocol.aio.server.DirectStream`
        or a :class:`~agenthost_protocol.aio.server.ProbeableStream` exactly
        when ``stream`` is one, since the server chooses its paths by
        ``isinstance``.  A file that cannot be created is logged, and the
        connection served uncaptured.  Call :meth:`CaptureStream.close_capture`
        when the connection ended.
        """
        direct = isinstance(stream, DirectStream)
        probe = isinstance(stream, ProbeableStream)
        kind: type[CaptureStream]
        if direct and probe:
            kind = _DirectProbeCapture
        elif direct:
            kind = _DirectCapture
        elif probe:
            kind = _ProbeCapture
        else:
            kind = CaptureStream
        path, file = self._open()
        return kind(stream, self, path, file)

    def _open(self) -> tuple[Path | None, BinaryIO | None]:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for _ in range(_OPEN_ATTEMPTS):
            self._count += 1
            path = self._path / f"{self._count:06d}-{stamp}.jsonl"
            try:
                fd = os.open(path, _OPEN_FLAGS, 0o600)
            except FileExistsError:
                continue  # another serve writes here too: take the next number
            except OSError as e:
                log.error("cannot capture a connection to %s: %s", path, e)
                return None, None
            log.debug("capturing a connection to %s", path)
            return path, os.fdopen(fd, "wb")
        log.error("cannot capture a connection in %s: %d names in a row were taken",
                  self._path, _OPEN_ATTEMPTS)
        return None, None


def _line(sender: Direction, data: bytes | str, when: float) -> bytes:
    """One transcript line (with its newline) for a message as it crossed the stream."""
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    try:
        record = Record(sender=sender, message=json.loads(text), time=when)
        line = json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        # not JSON (or JSON a record cannot hold: NaN, nested too deep): the text as
        # sent (a lone surrogate, which UTF-8 cannot carry, as "?")
        text = text.encode("utf-8", "replace").decode("utf-8")
        record = Record(sender=sender, message=text, time=when)
        line = json.dumps(record.to_json(), separators=(",", ":"), ensure_ascii=False)
    return line.encode("utf-8") + b"\n"


class CaptureStream:
    """A :class:`~agenthost_protocol.aio.server.MessageStream` that writes what crosses it.

    Made by :meth:`CaptureDir.wrap`; everything is passed on to the wrapped
    stream, unchanged, whatever happens to the file.
    """

    def __init__(self, inner: MessageStream, capture: CaptureDir, path: Path | None,
                 file: BinaryIO | None) -> None:
        self._inner = inner
        self._capture = capture
        self._path = path
        self._file = file
        self._written = 0

    @property
    def inner(self) -> MessageStream:
        """The stream captured."""
        return self._inner

    @property
    def path(self) -> Path | None:
        """This connection's capture file (``None``: it could not be created)."""
        return self._path

    @property
    def capturing(self) -> bool:
        """Whether messages are still written (not after the cap, an error, or the end)."""
        return self._file is not None

    async def receive(self) -> bytes | str:
        data = await self._inner.receive()
        if self._file is not None:
            self._record(Direction.CLIENT, (data,))
        return data

    async def send(self, data: bytes) -> None:
        # recorded before the wait: an answer the client sends once it has this
        # message must not be recorded before it
        if self._file is not None:
            self._record(Direction.HOST, (data,))
        await self._inner.send(data)

    async def close(self, reason: CloseReason, message: str) -> None:
        await self._inner.close(reason, message)

    def abort(self) -> None:
        self._inner.abort()

    def close_capture(self) -> None:
        """The connection ended: close the file (what was written stays)."""
        self._stop()

    def _record(self, sender: Direction, messages: Iterable[bytes | str]) -> None:
        file = self._file
        if file is None:
            return
        try:
            when = self._capture.now_ms()
            out: list[bytes] = []
            size = self._written
            for data in messages:
                line = _line(sender, data, when)
                if size + len(line) > self._capture.max_bytes:
                    if out:
                        file.write(b"".join(out))
                        file.flush()
                    log.warning("capture %s: %d bytes, its cap: the rest of this connection "
                                "is not captured", self._path, size)
                    self._stop()
                    return
                out.append(line)
                size += len(line)
            file.write(out[0] if len(out) == 1 else b"".join(out))
            file.flush()
            self._written = size
        except OSError as e:
            log.error("capture %s: cannot write (%s): the rest of this connection is not "
                      "captured", self._path, e)
            self._stop()
        except Exception:
            # a bug of the capture must not cost the host its connection
            log.exception("capture %s: failed: the rest of this connection is not captured",
                          self._path)
            self._stop()

    def _stop(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as e:  # what was buffered could not be written: say so once
                log.error("capture %s: cannot write (%s)", self._path, e)


class _DirectCapture(CaptureStream):
    """The capture of a :class:`~agenthost_protocol.aio.server.DirectStream`: the server's
    one-write path goes on, and what it wrote is recorded."""

    def __init__(self, inner: MessageStream, capture: CaptureDir, path: Path | None,
                 file: BinaryIO | None) -> None:
        super().__init__(inner, capture, path, file)
        assert isinstance(inner, DirectStream)
        self._write_now = inner.write_now

    def write_now(self, messages: Sequence[bytes], frames: FrameCache) -> bool:
        # a cache of its own: ``frames`` is shared by every stream of this class, and
        # the streams wrapped may frame differently (WebSocket, JSON Lines)
        if not self._write_now(messages, {}):
            return False  # nothing was written: they come again through send()
        if self._file is not None:
            self._record(Direction.HOST, messages)
        return True


class _ProbeCapture(CaptureStream):
    """The capture of a :class:`~agenthost_protocol.aio.server.ProbeableStream`."""

    async def probe(self, timeout: float) -> bool:
        assert isinstance(self._inner, ProbeableStream)
        return await self._inner.probe(timeout)


class _DirectProbeCapture(_DirectCapture, _ProbeCapture):
    """The capture of a stream that is both (a WebSocket connection)."""
