"""A :class:`~agenthost_protocol.aio.HostServer` over JSON Lines: stdin/stdout or any stream pair.

One JSON-RPC message per line, each line ended by ``\\n`` (a ``\\r`` before
it is ignored, and so are blank lines).  The host writes compact JSON, which
never holds a raw newline.  A line over the size limit is answered with a
JSON-RPC error (``-32600``, ``"id": null``) and the connection closed; the
end of the input closes the connection once what is queued was written.

Nothing here needs a package beyond the standard library.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import IO, Protocol

from .server import CloseReason, EndOfStream, FrameCache, HostServer, MessageRefused

__all__ = ["ByteSink", "ByteSource", "LineStream", "serve_stdio", "serve_streams"]

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class ByteSource(Protocol):
    """Where lines come from: ``asyncio.StreamReader`` is one."""

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes; ``b""`` at the end."""
        ...


class ByteSink(Protocol):
    """Where lines go: ``asyncio.StreamWriter`` is one."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


class LineStream:
    """A JSON Lines connection as a :class:`~agenthost_protocol.aio.MessageStream`.

    The size limit is enforced here, whatever the reader's own buffer limit.
    """

    peer = "stdio"
    """Who is at the other end (for log lines)."""

    def __init__(self, reader: ByteSource, writer: ByteSink, *, max_message_size: int) -> None:
        self._reader = reader
        self._writer = writer
        self._max = max_message_size
        self._buffer = bytearray()
        self._scanned = 0
        self._eof = False

    async def receive(self) -> bytes | str:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                self._scanned = 0
                if line.endswith(b"\r"):
                    line = line[:-1]
                if len(line) > self._max:
                    raise self._refuse()
                if line.strip():
                    return line
                continue
            self._scanned = len(self._buffer)
            if self._eof:
                raise EndOfStream("end of input", drain=True)
            if self._scanned > self._max + 1:
                # no need to read the rest of a line that is refused anyway
                raise self._refuse()
            try:
                chunk = await self._reader.read(_CHUNK)
            except (ConnectionError, OSError) as e:
                raise EndOfStream(f"input failed: {e}") from None
            if not chunk:
                self._eof = True
                rest = bytes(self._buffer).strip()
                self._buffer.clear()
                self._scanned = 0
                if rest:
                    # a last line without its newline is still a message
                    if len(rest) > self._max:
                        raise self._refuse()
                    return rest
                raise EndOfStream("end of input", drain=True)
            self._buffer += chunk

    def _refuse(self) -> MessageRefused:
        self._buffer.clear()
        self._scanned = 0
        return MessageRefused(f"message larger than {self._max} bytes")

    def write_now(self, messages: Sequence[bytes], frames: FrameCache) -> bool:
        """All of ``messages`` in one write, unless the output's flow control holds it
        (see :class:`~agenthost_protocol.aio.DirectStream`); a sink without a
        transport to ask is always written through :meth:`send`."""
        transport = getattr(self._writer, "transport", None)
        if not isinstance(transport, asyncio.WriteTransport) or transport.is_closing():
            return False
        if transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]:
            return False  # paused: send() waits for it to drain
        out = []
        for message in messages:
            hit = frames.get(id(message))
            if hit is None or hit[0] is not message:
                line = message + b"\n"
                frames[id(message)] = (message, line)
            else:
                line = hit[1]
            out.append(line)
        try:
            self._writer.write(out[0] if len(out) == 1 else b"".join(out))
        except RuntimeError as e:
            raise EndOfStream(f"output failed: {e}") from None
        return True

    async def send(self, data: bytes) -> None:
        try:
            self._writer.write(data + b"\n")
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as e:
            raise EndOfStream(f"output failed: {e}") from None

    async def close(self, reason: CloseReason, message: str) -> None:
        if reason in (CloseReason.REFUSED, CloseReason.POLICY, CloseReason.INTERNAL):
            # the only way to tell a JSON Lines peer why: an error with a null id
            error = {"jsonrpc": "2.0", "id": None,
                     "error": {"code": -32600, "message": f"{message}; closing"}}
            with contextlib.suppress(ConnectionError, RuntimeError):
                self._writer.write(json.dumps(error).encode("utf-8") + b"\n")
                await self._writer.drain()
        self._writer.close()
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._writer.wait_closed()

    def abort(self) -> None:
        transport = getattr(self._writer, "transport", None)
        if isinstance(transport, asyncio.WriteTransport):
            transport.abort()
        else:
            self._writer.close()


async def serve_streams(server: HostServer, reader: ByteSource, writer: ByteSink) -> None:
    """Serve one JSON Lines connection on ``reader`` / ``writer`` until it ends."""
    stream = LineStream(reader, writer, max_message_size=server.limits.max_message_size)
    await server.serve_connection(stream)


# -- stdin and stdout -----------------------------------------------------------------


class _PipeSink(asyncio.Protocol):
    """A write pipe with flow control (what ``StreamWriter`` does, without a reader)."""

    def __init__(self) -> None:
        self._transport: asyncio.WriteTransport | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = asyncio.Event()
        self._lost: Exception | None = None

    @property
    def transport(self) -> asyncio.WriteTransport | None:
        return self._transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self._transport = transport

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc if exc is not None else ConnectionResetError("output closed")
        self._writable.set()
        self._closed.set()

    def write(self, data: bytes) -> None:
        if self._lost is not None or self._transport is None:
            raise ConnectionResetError("output closed")
        self._transport.write(data)

    async def drain(self) -> None:
        await self._writable.wait()
        if self._lost is not None:
            raise ConnectionResetError("output closed")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def wait_closed(self) -> None:
        await self._closed.wait()


class _FileSink:
    """Output to a regular file (or where pipes are not supported): plain blocking writes."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None

    async def wait_closed(self) -> None:
        return None


class _ThreadSource:
    """Input from a regular file (or where pipes are not supported): a daemon thread reads.

    A daemon thread, not the loop's executor: a read blocked on a pipe must
    not keep the process alive at exit.
    """

    def __init__(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)
        self._eof = False

        def pump() -> None:
            while True:
                try:
                    chunk = os.read(fd, _CHUNK)
                except OSError:
                    chunk = b""
                try:
                    asyncio.run_coroutine_threadsafe(self._queue.put(chunk), loop).result()
                except Exception:  # the loop is gone
                    return
                if not chunk:
                    return

        threading.Thread(target=pump, name="agenthost-stdin", daemon=True).start()

    async def read(self, n: int = -1) -> bytes:
        if self._eof:
            return b""
        chunk = await self._queue.get()
        self._eof = not chunk
        return chunk


async def _stdin_source(stdin: IO[bytes]) -> tuple[ByteSource, asyncio.BaseTransport | None]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_CHUNK)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), stdin
        )
    except (ValueError, NotImplementedError, OSError):
        return _ThreadSource(stdin.fileno()), None
    return reader, transport


async def _stdout_sink(stdout: IO[bytes]) -> ByteSink:
    loop = asyncio.get_running_loop()
    try:
        _, protocol = await loop.connect_write_pipe(_PipeSink, stdout)
    except (ValueError, NotImplementedError, OSError):
        return _FileSink(stdout.fileno())
    return protocol


async def serve_stdio(
    server: HostServer,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
) -> None:
    """Serve one JSON Lines connection on stdin/stdout until it ends.

    Pipes, sockets and terminals are read and written asynchronously; a
    regular file (``serve --stdio < script.jsonl``) is read by a thread.
    Nothing else may write to stdout meanwhile: log to stderr.
    """
    stdin = stdin if stdin is not None else sys.stdin.buffer
    stdout = stdout if stdout is not None else sys.stdout.buffer
    blocking = {fd: os.get_blocking(fd) for fd in {stdin.fileno(), stdout.fileno()}}
    source, in_transport = await _stdin_source(stdin)
    sink = await _stdout_sink(stdout)
    try:
        await serve_streams(server, source, sink)
    finally:
        if in_transport is not None:
            in_transport.close()
        # the pipe transports made the descriptors non-blocking, and a terminal
        # shares them with the shell
        for fd, was_blocking in blocking.items():
            with contextlib.suppress(OSError):
                os.set_blocking(fd, was_blocking)
