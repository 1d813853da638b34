"""The transports of the asyncio client: WebSocket, and JSON Lines to a spawned host process.

A :class:`MessageTransport` carries whole JSON-RPC messages, one per
:meth:`~MessageTransport.send` / :meth:`~MessageTransport.receive`, as AHP's
transport spec asks: ordered, reliable, complete messages.  The client opens
one with a :data:`TransportOpener` (again for every reconnect), so any other
transport (an in-process queue for a test, TCP with a framing layer) plugs in
by implementing these three methods.  One that also has ``receive_batch(limit)``
(the messages received by now, at most ``limit``, at least one; as
:meth:`WebSocketTransport.receive_batch`) is read with it, a batch at a time.

* :func:`open_websocket`: one text frame per message (the ``ws`` extra:
  ``websockets`` is imported on first use), an access token going with the
  upgrade request as ``Authorization: Bearer``;
* :func:`open_subprocess`: JSON Lines on the stdin/stdout of a process it
  spawns, e.g. ``agenthost-protocol serve --stdio``; closing the transport
  ends the process (end of input, then SIGTERM, then SIGKILL) and reaps it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import subprocess
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Final, Protocol, TypeAlias

from .client_errors import (
    ConnectError,
    HandshakeCheck,
    HandshakeRefused,
    _safe_detail,
)
from .redact import RedactSecrets

if TYPE_CHECKING:
    from ssl import SSLContext

    from websockets.asyncio.client import ClientConnection as _WsConnection

from ._limits import DEFAULT_MAX_MESSAGE_SIZE

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "TOKEN_ENV",
    "MessageTransport",
    "SubprocessTransport",
    "TransportClosed",
    "TransportOpener",
    "WebSocketTransport",
    "open_subprocess",
    "open_websocket",
    "url_token",
]

log = logging.getLogger(__name__)


_WS_EXTRA_HINT: Final = (
    "the WebSocket transport needs the websockets package (13 or later): "
    "pip install 'agenthost-protocol[ws]'"
)


TOKEN_ENV: Final = "AHP_TOKEN"
"""The environment variable that holds the host's access token (see :func:`connect
<agenthost_protocol.aio.client.connect>`)."""


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


class _Binary(bytes):
    """A binary frame's payload in :class:`_FrameReader`'s queue (a text frame's is ``bytes``)."""

    __slots__ = ()


_FIN_TEXT: Final = 0x81
"""The first byte of a whole (final, unfragmented) text frame without reserved bits."""
_FIN_BINARY: Final = 0x82
"""... of a whole binary frame."""
_PING_PONG: Final = frozenset({0x89, 0x8A})
"""... of a ping, of a pong (control frames are never fragmented)."""
_QUEUE_HIGH: Final = 1 << 20
"""Bytes of whole messages :class:`_FrameReader` holds before it pauses reading."""
_QUEUE_LOW: Final = _QUEUE_HIGH // 4
"""... and resumes once the reader took them below this."""
_ITEM_COST: Final = 64
"""What a queued message counts for besides its bytes (the object around them)."""
_NO_LIMIT: Final = 1 << 64


class _FrameReader(asyncio.Protocol):
    """Reads the frames of an open ``websockets`` client connection that need no
    more than splitting: a host's messages, each one unmasked text frame.

    ``websockets`` parses every frame with a generator and wakes ``recv`` per
    message, about 9 µs a frame; this stands between the socket and the
    connection (``transport.set_protocol``) and splits those frames off in a
    loop, a fraction of that.  Every other frame goes to the connection
    (``data_received``) exactly as it came: a ping or a pong, each whole, at
    a frame boundary, after which splitting goes on; anything else (a close,
    a fragment, a masked or over-long frame, reserved bits) hands the
    connection the rest of the stream for good (``passthrough``), and
    ``websockets`` answers, assembles or fails it as ever.  Messages split
    off are read before any ``websockets`` queues later, so the order holds.

    It holds at most about :data:`_QUEUE_HIGH` bytes of messages (then pauses
    reading, as ``websockets`` does past its ``max_queue``), plus the frame
    being received, which ``max_size`` bounds as before.
    """

    def __init__(self, ws: _WsConnection, transport: asyncio.Transport, max_size: int | None
                 ) -> None:
        self._ws = ws
        self._transport = transport
        self._max_size = _NO_LIMIT if max_size is None else max_size
        self.queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        # the start of a frame not received whole yet, and how many bytes it needs
        self._partial: list[bytes] = []
        self._have = 0
        self._need = 0
        self.passthrough = False
        self._binary = False  # whether a binary frame was ever queued

    @classmethod
    def install(cls, ws: _WsConnection, max_size: int | None) -> _FrameReader | None:
        """Stand between ``ws`` and its socket; ``None`` where it cannot be sure to
        take over at a frame boundary (then ``websockets`` reads everything)."""
        try:
            transport = ws.transport
            protocol = ws.protocol
            # the generator the parser waits in, innermost (the parser yields from Protocol.parse)
            waiting = protocol.parser
            for _ in range(8):
                inner = getattr(waiting, "gi_yieldfrom", None)
                if inner is None:
                    break
                waiting = inner
            code = getattr(waiting, "gi_code", None)
            if not (
                transport.get_protocol() is ws
                and protocol.state.name == "OPEN"
                and not protocol.extensions
                and not protocol.reader.buffer
                # the parser waits for the first byte of a frame, not in the middle of one
                and code is not None and code.co_name == "at_eof"
                and len(ws.recv_messages.frames) == 0
            ):
                return None
            # the limits websockets holds a frame to (which the caller may have set apart)
            names = (("max_message_size", "max_fragment_size")  # newer: message and frame
                     if hasattr(protocol, "max_message_size") else ("max_size",))
            theirs: list[object] = [getattr(protocol, name) for name in names]
        except Exception:  # another websockets than the ones this knows
            return None
        limits: list[int] = []
        for limit in (max_size, *theirs):
            if limit is None:
                continue
            if type(limit) is not int:
                return None
            limits.append(limit)
        reader = cls(ws, transport, min(limits) if limits else None)
        transport.set_protocol(reader)
        return reader

    # -- the socket's side (asyncio.Protocol) --------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.passthrough:
            self._ws.data_received(data)
            return
        if self._partial:
            self._partial.append(data)
            self._have += len(data)
            if self._have < self._need:
                return
            data = b"".join(self._partial)
            self._partial = []
        size = len(data)
        limit = self._max_size
        messages: list[bytes] = []
        take = messages.append
        at = 0
        need = 0
        while True:
            left = size - at
            if left < 4:
                if left < 2:
                    need = 2
                    break
                if data[at + 1] == 126:
                    need = 4
                    break
            first = data[at]
            length = data[at + 1]  # unmasked: a host never masks
            if length == 126:  # most messages: 126 to 65535 bytes
                length = (data[at + 2] << 8) | data[at + 3]
                start = at + 4
            elif length < 126:
                start = at + 2
            elif length == 127:
                if left < 10:
                    need = 10
                    break
                length = int.from_bytes(data[at + 2:at + 10], "big")
                start = at + 10
            else:
                break  # masked: websockets fails the connection
            end = start + length
            if first == _FIN_TEXT:
                if end > size or length > limit:
                    if length > limit:
                        break  # websockets fails it (1009)
                    need = end - at
                    break
                take(data[start:end])
            elif first == _FIN_BINARY:
                if length > limit:
                    break
                if end > size:
                    need = end - at
                    break
                take(_Binary(data[start:end]))
                self._binary = True
            elif first in _PING_PONG and length <= 125:
                if end > size:
                    need = end - at
                    break
                # websockets answers a ping and resolves a pong's waiter
                self._ws.data_received(data[at:end])
            else:
                break
            at = end
        if messages:
            self.queue.extend(messages)
            self._queued += sum(map(len, messages)) + _ITEM_COST * len(messages)
            self._wake()
            if self._queued > _QUEUE_HIGH and not self._paused:
                self._paused = True
                self._transport.pause_reading()
        if need:
            if at < size:
                self._partial = [data[at:] if at else data]
                self._have = size - at
                self._need = need
        elif at < size:
            self._hand_over(data[at:] if at else data)

    def _hand_over(self, data: bytes) -> None:
        """From here on, websockets reads everything (``data`` first)."""
        self.passthrough = True
        self._wake()
        if data:
            self._ws.data_received(data)

    def _flush(self) -> None:
        if not self.passthrough:
            partial, self._partial = self._partial, []
            self._hand_over(b"".join(partial))

    def eof_received(self) -> None:
        self._flush()
        self._ws.eof_received()  # returns None: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._flush()
        self._ws.connection_lost(exc)
        self._wake()

    def pause_writing(self) -> None:
        self._ws.pause_writing()

    def resume_writing(self) -> None:
        self._ws.resume_writing()

    # -- the reader's side -----------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until a message is queued or ``websockets`` reads the rest."""
        while not self.queue and not self.passthrough:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def take(self, limit: int) -> list[bytes]:
        """Up to ``limit`` queued messages (UTF-8 text as ``bytes``), oldest first.

        Raises ``UnicodeDecodeError``, as ``websockets`` does, for a text frame
        that is not UTF-8, once the messages before it are taken.
        """
        queue = self.queue
        if len(queue) <= limit:
            taken = list(queue)
            queue.clear()
        else:
            taken = [queue.popleft() for _ in range(limit)]
        if self._binary or not all(map(bytes.isascii, taken)):
            queue.extendleft(reversed(taken))
            return self._take_checked(limit)
        self._taken(sum(map(len, taken)) + _ITEM_COST * len(taken))
        return taken

    def _take_checked(self, limit: int) -> list[bytes]:
        """:meth:`take`, message by message: binary ones, and text that is not ASCII."""
        queue = self.queue
        taken: list[bytes] = []
        freed = 0
        try:
            while queue and len(taken) < limit:
                item = queue[0]
                if type(item) is bytes:
                    if not item.isascii():
                        item.decode()  # strict, as websockets decodes a text frame
                else:
                    item = bytes(item)
                queue.popleft()
                freed += len(item) + _ITEM_COST
                taken.append(item)
        except UnicodeDecodeError:
            if taken:
                return taken
            freed += len(queue.popleft()) + _ITEM_COST
            raise
        finally:
            self._taken(freed)
        return taken

    def pop(self) -> bytes | str:
        """The oldest queued message, as ``websockets`` gives it (text as ``str``)."""
        item = self.queue.popleft()
        self._taken(len(item) + _ITEM_COST)
        return item.decode() if type(item) is bytes else bytes(item)

    def _taken(self, freed: int) -> None:
        self._queued -= freed
        if self._paused and self._queued <= _QUEUE_LOW:
            self._paused = False
            self._transport.resume_reading()


class WebSocketTransport:
    """A ``websockets`` client connection as a :class:`MessageTransport` (text frames).

    Whole unmasked text (and binary) frames are split off the socket by the
    transport itself, which costs a fraction of ``websockets``' frame parser;
    every other frame, and everything on a connection with an extension
    (compression) or that had received messages before the transport was
    made, is ``websockets``' to read, as before.  ``max_size``: the largest
    message accepted (``None``: any); ``websockets``' own ``max_size`` holds
    too.  Read messages through the transport, not its :attr:`websocket`.
    """

    def __init__(self, websocket: _WsConnection, max_size: int | None = DEFAULT_MAX_MESSAGE_SIZE
                 ) -> None:
        self._ws = websocket
        self._frames = _FrameReader.install(websocket, max_size)

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
        frames = self._frames
        if frames is not None:
            if not frames.queue:
                await frames.wait()
            if frames.queue:
                return frames.pop()
        return await self._receive()

    async def receive_batch(self, limit: int) -> list[bytes | str]:
        """The messages received by now, at most ``limit`` (at least one: waits for it).

        Text comes as UTF-8 ``bytes`` (checked) where the transport split it
        off itself, else as :meth:`receive` gives it.
        """
        frames = self._frames
        if frames is not None:
            if not frames.queue:
                await frames.wait()
            if frames.queue:
                return frames.take(limit)  # type: ignore[return-value]
        return [await self._receive()]

    async def _receive(self) -> bytes | str:
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


# -- access tokens --------------------------------------------------------------------


_URL_TOKEN_KEYS: Final = ("token", "tkn")
"""The query parameters that carry a host's access token (``tkn``: VS Code's name)."""


def url_token(url: str) -> str | None:
    """The access token a URL carries: its ``token`` query parameter, else its ``tkn``
    one (the name VS Code's agent-host URLs use); ``None`` if none (or empty)."""
    try:
        query = urllib.parse.urlsplit(url).query
    except ValueError:
        return None  # not a URL: open_websocket says so, better than here
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    for name in _URL_TOKEN_KEYS:
        for key, value in pairs:
            if key == name and value:
                return value
    return None


def _without_url_token(url: str) -> str:
    """``url`` without its ``token`` and ``tkn`` query parameters (empty ones too)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    if not any(key in _URL_TOKEN_KEYS for key, _ in pairs):
        return url
    query = [(key, value) for key, value in pairs if key not in _URL_TOKEN_KEYS]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def _check_token(token: str, source: str) -> str:
    """``token``, if an HTTP header can carry it.  The error names ``source``, never the token."""
    if not token:
        raise ValueError(f"{source} is empty")
    # visible ASCII only: a space or a control character (CR LF) would break the header
    if not all("!" <= char <= "~" for char in token):
        raise ValueError(f"{source} is not a valid access token (visible ASCII characters only)")
    return token


def _has_authorization(headers: Mapping[str, str] | None) -> bool:
    return headers is not None and any(key.lower() == "authorization" for key in headers)


def _authorized(url: str, token: str | None, headers: Mapping[str, str] | None,
                source: str = "the token") -> tuple[str, dict[str, str] | None]:
    """The URL and the headers of an upgrade request that carries ``token``, else the
    token of ``url`` (``token=`` or ``tkn=``).

    The token goes in ``Authorization: Bearer`` and every ``token=`` / ``tkn=``
    leaves the URL: the request target, which proxies and servers log, never
    holds it.
    """
    merged = dict(headers) if headers else {}
    if token is None:
        token = url_token(url)
        source = "the token of the URL"
        if token is None:
            return _without_url_token(url), merged or None
    _check_token(token, source)
    if _has_authorization(headers):
        raise ValueError("give the access token either as token= or in an Authorization "
                         "header, not both")
    merged["Authorization"] = f"Bearer {token}"
    # one token reaches the host: a stale one in the URL must not be checked instead
    return _without_url_token(url), merged


# a child of websockets' own logger, so its level and handlers apply unchanged
_WS_LOGGER: Final = logging.getLogger("websockets.client.agenthost_protocol")
_WS_LOGGER.addFilter(RedactSecrets())

_REFUSALS: Final = {
    503: "the host is at its connection limit (HTTP 503)",
}
_FINAL_REFUSALS: Final[dict[int, HandshakeCheck]] = {401: "token", 403: "origin-or-host"}
"""The statuses no retry can mend, and the check each names (:class:`HandshakeRefused`)."""


def _bearer(headers: Mapping[str, str] | None) -> str | None:
    """The credentials of the request's ``Authorization`` header (``None``: none)."""
    for key, value in (headers or {}).items():
        if key.lower() == "authorization":
            scheme, _, credentials = value.strip().partition(" ")
            return credentials.strip() or scheme
    return None


def _refusal(status: int, phrase: str) -> str:
    if status in _REFUSALS:
        return _REFUSALS[status]
    detail = f"{status} {phrase}".rstrip()
    return f"the host refused the WebSocket handshake (HTTP {detail})"


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
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    max_message_size: int | None = DEFAULT_MAX_MESSAGE_SIZE,
    open_timeout: float | None = 10.0,
    close_timeout: float = 5.0,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
    ssl: SSLContext | None = None,
) -> WebSocketTransport:
    """Open a WebSocket to ``url`` (``ws://`` or ``wss://``; ``ssl``: the TLS
    context of a ``wss://`` URL, default the system's trust store).

    ``headers`` go with the HTTP upgrade request (where the transport spec puts
    endpoint authentication).  ``token``, the host's access token, goes there
    as ``Authorization: Bearer <token>`` (``token`` and ``tkn`` query
    parameters of ``url`` are then left out); it raises ``ValueError`` if
    ``headers`` has an ``Authorization`` already.  With ``token=None`` the
    URL's own token (``token=``, else ``tkn=``) goes in that header instead,
    and leaves the URL: the request target never holds a token.
    (:func:`~agenthost_protocol.aio.client.connect`
    also looks at ``AHP_TOKEN``; this function does not.)  ``ping_interval`` /
    ``ping_timeout`` are WebSocket ping frames that notice a vanished host
    (``None``: off).

    Raises :class:`ConnectError` when the connection cannot be made; a
    handshake the host refuses with an HTTP status sets its ``status`` (503:
    the connection limit ...).  A refusal no retry can mend raises its
    subclass :class:`~agenthost_protocol.aio.client_errors.HandshakeRefused`:
    401 (the token) or 403 (the Origin or Host).  Raises
    ``ImportError`` (naming the ``ws`` extra) without ``websockets``.
    Messages and log lines show the URL through :func:`redact_url`.
    """
    url, request_headers = _authorized(url, token, headers)
    try:
        # imported on first use: websockets is an optional dependency (the ws extra)
        from websockets.asyncio.client import connect  # noqa: PLC0415
        from websockets.exceptions import (  # noqa: PLC0415
            InvalidStatus,
            InvalidURI,
            WebSocketException,
        )
    except ImportError as e:  # pragma: no cover - websockets is installed for the tests
        raise ImportError(_WS_EXTRA_HINT) from e
    try:
        websocket = await connect(
            url,
            additional_headers=request_headers,
            max_size=max_message_size,
            open_timeout=open_timeout,
            close_timeout=close_timeout,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            logger=_WS_LOGGER,
            # websockets refuses ssl=None for wss:// (True: its default context)
            # and any ssl for ws://
            ssl=ssl if ssl is not None else (True if url.lower().startswith("wss:") else None),
        )
    except InvalidStatus as e:
        response = e.response
        status = response.status_code
        if status in _FINAL_REFUSALS:
            sent = _bearer(request_headers)
            # a hostile host may echo what it got: the token never reaches the message
            detail = _safe_detail(bytes(response.body or b""), (sent,) if sent else ())
            raise HandshakeRefused(url, check=_FINAL_REFUSALS[status], status=status,
                                   detail=detail, token_sent=sent is not None) from None
        raise ConnectError(url, _refusal(status, response.reason_phrase),
                           status=status) from None
    except InvalidURI as e:
        raise ConnectError(url, f"not a WebSocket URL ({e.msg})") from None
    except (asyncio.TimeoutError, TimeoutError):
        raise ConnectError(url, f"no WebSocket handshake within {open_timeout} s") from None
    except OSError as e:
        raise ConnectError(url, _os_reason(e)) from None
    except WebSocketException as e:
        raise ConnectError(url, f"WebSocket handshake failed: {e}") from None
    return WebSocketTransport(websocket, max_message_size)


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
