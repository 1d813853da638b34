"""The transports of the asyncio client: WebSocket, and JSON Lines to a spawned host process.

A :class:`MessageTransport` carries whole JSON-RPC messages, one per
:meth:`~MessageTransport.send` / :meth:`~MessageTransport.receive`, as AHP's
transport spec asks: ordered, reliable, complete messages.  The client opens
one with a :data:`TransportOpener` (again for every reconnect), so any other
transport (an in-process queue for a test, TCP with a framing layer) plugs in
by implementing these three methods.

* :func:`open_websocket`: one text frame per message (the ``ws`` extra:
  ``websockets`` is imported on first use);
* :func:`open_subprocess`: JSON Lines on the stdin/stdout of a process it
  spawns, e.g. ``agenthost-protocol serve --stdio``; closing the transport
  ends the process (end of input, then SIGTERM, then SIGKILL) and reaps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Final, Protocol, TypeAlias

from .client_errors import ConnectError

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection as _WsConnection

from ._limits import DEFAULT_MAX_MESSAGE_SIZE

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MessageTransport",
    "SubprocessTransport",
    "TransportClosed",
    "TransportOpener",
    "WebSocketTransport",
    "open_subprocess",
    "open_websocket",
]

log = logging.getLogger(__name__)


_WS_EXTRA_HINT: Final = (
    "the WebSocket transport needs the websockets package (13 or later): "
    "pip install 'agenthost-protocol[ws]'"
)


class TransportClosed(Exception):
    """Raised by :meth:`MessageTransport.send` / :meth:`~MessageTransport.receive`:
    the transport is gone.  ``reason`` says why, for people."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MessageTransport(Protocol):
    """One client connection carrying whole JSON-RPC messages."""

    async def send(self, data: bytes) -> None:
        """Send one message (UTF-8 JSON); raises :class:`TransportClosed` if it is gone."""
        ...

    async def receive(self) -> bytes | str:
        """The next message; raises :class:`TransportClosed` at the end."""
        ...

    async def close(self) -> None:
        """Close the transport and release what it holds; idempotent, bounded in time."""
        ...


TransportOpener: TypeAlias = Callable[[], Awaitable[MessageTransport]]
"""Opens a new transport to the same host: called once to connect and once per
reconnect attempt.  Raises :class:`~agenthost_protocol.aio.client.ConnectError`
when it cannot."""


# -- WebSocket ------------------------------------------------------------------------


class WebSocketTransport:
    """A ``websockets`` client connection as a :class:`MessageTransport` (text frames)."""

    def __init__(self, websocket: _WsConnection) -> None:
        self._ws = websocket

    @property
    def websocket(self) -> _WsConnection:
        """The underlying ``websockets`` connection."""
        return self._ws

    async def send(self, data: bytes) -> None:
        from websockets.exceptions import ConnectionClosed  # noqa: PLC0415

        try:
            # a str goes out as a text frame, as the transport spec asks (bytes: a binary one)
            await self._ws.send(data.decode("utf-8"))
        except ConnectionClosed as e:
            raise TransportClosed(_describe_close(e)) from None

    async def receive(self) -> bytes | str:
        from websockets.exceptions import ConnectionClosed  # noqa: PLC0415

        try:
            return await self._ws.recv()
        except ConnectionClosed as e:
            raise TransportClosed(_describe_close(e)) from None

    async def close(self) -> None:
        # websockets bounds the closing handshake by its close_timeout, then aborts
        with contextlib.suppress(Exception):
            await self._ws.close()

    def abort(self) -> None:
        """Drop the TCP connection at once, without a closing handshake."""
        self._ws.transport.abort()


def _describe_close(error: Exception) -> str:
    rcvd = getattr(error, "rcvd", None)
    sent = getattr(error, "sent", None)
    if rcvd is not None:
        detail = f"{rcvd.code} {rcvd.reason}".rstrip()
        return f"the host closed the connection ({detail})"
    if sent is not None:
        return f"the connection was closed ({sent.code} {sent.reason})".rstrip()
    return "the connection dropped"


async def open_websocket(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    max_message_size: int | None = DEFAULT_MAX_MESSAGE_SIZE,
    open_timeout: float | None = 10.0,
    close_timeout: float = 5.0,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
) -> WebSocketTransport:
    """Open a WebSocket to ``url`` (``ws://`` or ``wss://``).

    ``headers`` go with the HTTP upgrade request (where the transport spec puts
    endpoint authentication).  ``ping_interval`` / ``ping_timeout`` are
    WebSocket ping frames that notice a vanished host (``None``: off).
    Raises :class:`ConnectError` when the connection cannot be made, and
    ``ImportError`` (naming the ``ws`` extra) without ``websockets``.
    """
    try:
        # imported on first use: websockets is an optional dependency (the ws extra)
        from websockets.asyncio.client import connect  # noqa: PLC0415
        from websockets.exceptions import InvalidURI, WebSocketException  # noqa: PLC0415
    except ImportError as e:  # pragma: no cover - websockets is installed for the tests
        raise ImportError(_WS_EXTRA_HINT) from e
    try:
        websocket = await connect(
            url,
            additional_headers=dict(headers) if headers else None,
            max_size=max_message_size,
            open_timeout=open_timeout,
            close_timeout=close_timeout,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
        )
    except InvalidURI as e:
        raise ConnectError(url, f"not a WebSocket URL ({e.msg})") from None
    except (asyncio.TimeoutError, TimeoutError):
        raise ConnectError(url, f"no WebSocket handshake within {open_timeout} s") from None
    except OSError as e:
        raise ConnectError(url, _os_reason(e)) from None
    except WebSocketException as e:
        raise ConnectError(url, f"WebSocket handshake failed: {e}") from None
    return WebSocketTransport(websocket)


def _os_reason(error: OSError) -> str:
    text = error.strerror or str(error) or type(error).__name__
    # asyncio says "Connect call failed", once per address it tried
    if isinstance(error, ConnectionRefusedError) or "Connect call failed" in text:
        return f"connection refused ({text})"
    return text


# -- JSON Lines to a subprocess ---------------------------------------------------------


class SubprocessTransport:
    """JSON Lines on a spawned process's stdin (to the host) and stdout (from it).

    One message per line; blank lines are skipped and a ``\\r`` before the
    ``\\n`` ignored.  :meth:`close` closes the process's stdin (a host such as
    ``serve --stdio`` then finishes and exits), waits ``close_timeout``
    seconds, then terminates, then kills it; the process is always reaped.
    """

    def __init__(
        self, process: asyncio.subprocess.Process, command: Sequence[str], *,
        close_timeout: float = 5.0,
    ) -> None:
        if process.stdin is None or process.stdout is None:
            raise ValueError("the process needs piped stdin and stdout")
        self._process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._command = tuple(command)
        self._close_timeout = close_timeout
        self._send_lock = asyncio.Lock()
        self._closed = False

    @property
    def process(self) -> asyncio.subprocess.Process:
        return self._process

    def _ended(self, what: str) -> TransportClosed:
        status = self._process.returncode
        suffix = "" if status is None else f", exit status {status}"
        return TransportClosed(f"the host process {what}{suffix}")

    async def send(self, data: bytes) -> None:
        if self._closed or self._stdin.is_closing():
            raise self._ended("input is closed")
        async with self._send_lock:  # drain() must not be awaited by two tasks at once
            try:
                self._stdin.write(data + b"\n")
                await self._stdin.drain()
            except (ConnectionError, RuntimeError) as e:
                raise self._ended(f"stopped reading its input ({e})") from None

    async def receive(self) -> bytes | str:
        while True:
            try:
                line = await self._stdout.readline()
            except ValueError:
                # the line is longer than the reader's limit: framing is lost
                raise TransportClosed("the host sent a message over the size limit") from None
            except (ConnectionError, OSError) as e:
                raise self._ended(f"output failed ({e})") from None
            if not line:
                with contextlib.suppress(asyncio.TimeoutError):
                    # a moment for the exit status, which makes a better message
                    await asyncio.wait_for(self._process.wait(), 0.2)
                raise self._ended("closed its output")
            line = line.rstrip(b"\r\n")
            if line.strip():
                return line

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        process = self._process
        try:
            if process.returncode is None:
                with contextlib.suppress(Exception):
                    self._stdin.close()
                if await self._waited(self._close_timeout):
                    return
                log.info("host process %d did not exit after its input closed: terminating",
                         process.pid)
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
                if await self._waited(self._close_timeout):
                    return
                log.warning("host process %d ignored SIGTERM: killing it", process.pid)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        finally:
            # cancelled half-way: never leave the process running
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()

    async def _waited(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._process.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def abort(self) -> None:
        """Kill the process at once (reaped by a later :meth:`close`)."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()


async def open_subprocess(
    command: Sequence[str],
    *,
    stderr: int | IO[bytes] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    close_timeout: float = 5.0,
) -> SubprocessTransport:
    """Spawn ``command`` (no shell) and speak JSON Lines on its stdin/stdout.

    ``stderr``: where the process's stderr goes (``None``: this process's
    stderr; ``subprocess.DEVNULL``; a file).  Raises :class:`ConnectError`
    when the command cannot be started.
    """
    argv = [os.fspath(part) for part in command]
    if not argv:
        raise ValueError("the command is empty")
    target = subprocess.list2cmdline(argv)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            # the reader's line limit: a longer line loses the framing
            limit=max_message_size + 2,
        )
    except OSError as e:
        raise ConnectError(target, e.strerror or str(e)) from None
    return SubprocessTransport(process, argv, close_timeout=close_timeout)
