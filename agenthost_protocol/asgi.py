"""A :class:`~agenthost_protocol.aio.HostServer` as an ASGI 3 application (the ``asgi`` extra).

``asgi_app(server, policy=..., authenticate=...)`` is an application any ASGI server runs
(uvicorn, hypercorn, ...), alone or mounted under a path of another one
(``Starlette(routes=[Mount("/ahp", app=...)])``); it needs nothing beyond the
standard library, since the ASGI server brings the WebSocket implementation.

* **WebSocket** scopes at the application's root path (``/`` under its
  ``root_path``) are served as :func:`~agenthost_protocol.aio.websocket.serve_websocket`
  serves its connections: one JSON-RPC message per text frame, through the same
  :class:`~agenthost_protocol.aio.HostServer` (its budgets, send queues and
  slow-consumer drop, delta coalescing, commit before send).  A binary frame
  closes the connection with 1003, a message over ``max_message_size`` with
  1009, a client that stops reading with 1008 once its send queue overflows,
  the server's shutdown with 1001.  A WebSocket at any other path is refused
  with 404.
* **Access.**  Before the WebSocket is accepted the handshake is checked
  against ``policy`` (an :class:`~agenthost_protocol.aio.access.AccessPolicy`;
  ``None`` means the default one, as for ``serve_websocket``: no token,
  loopback names or IP addresses as ``Host``, no browser ``Origin``).  The
  token may come as ``?token=``, ``?tkn=``, ``Authorization: Bearer`` or the
  subprotocol ``ahp.token.*`` a browser offers next to ``ahp`` (``ahp`` is
  then selected on accept, never the token's).  A
  refusal is answered as ``serve_websocket`` answers it (401 with
  ``WWW-Authenticate: Bearer`` for the token, 403 for Host or Origin, 503 when
  ``max_connections`` are served, the one-line reason as the body) when the
  ASGI server offers the WebSocket denial response extension
  (``websocket.http.response``); without it, the connection is closed before
  it is accepted (``websocket.close`` with 1008, which servers turn into an
  HTTP 403).
* **Authentication.**  Then ``authenticate(scope)``, if given, says who the
  client is, from the ASGI scope itself (a session middleware's
  ``scope["session"]`` or ``scope["user"]``, cookies, headers): the principal
  it returns goes with the connection; ``None`` refuses with 401,
  :class:`~agenthost_protocol.aio.authn.AuthenticationRefused` with its
  status, any other error with 500, taking longer than ``handshake_timeout``
  with 503 (see :mod:`agenthost_protocol.aio.authn`; the same function works
  under ``serve_websocket``).
* **HTTP** scopes get ``426 Upgrade Required`` (with ``Upgrade: websocket``)
  at the root path and 404 elsewhere.
* **Lifespan** scopes are answered: startup completes at once; shutdown
  closes the host's connections (:meth:`HostServer.close`) first.  A mounted
  application gets no lifespan events from Starlette: the embedding
  application's own lifespan should ``await server.close()``.

What ASGI does not give, and what is done instead:

* **No WebSocket ping.**  ASGI has no way to send one, so the stream is not a
  :class:`~agenthost_protocol.aio.ProbeableStream`: when a second connection
  claims the ``clientId`` of an open one, the holder counts as alive while its
  connection is open and the claim is refused (``HostServer``'s rule for
  streams that cannot probe).  A holder that vanished is noticed by the ASGI
  server's own keepalive (uvicorn's ``--ws-ping-interval``, hypercorn's
  ``websocket_ping_interval``), which ends its connection; the claim then
  succeeds.
* **No abort.**  Dropping a connection (a stuck slow consumer, a close that
  timed out) ends the application's handling of it; the ASGI server then
  closes the socket its own way.
* **Frames arrive whole.**  The ASGI server reads a whole message before the
  application sees it, so ``max_message_size`` is checked after the server
  buffered the message: set the server's own limit to the same size
  (uvicorn ``--ws-max-size``, hypercorn ``websocket_max_message_size``; both
  16 MiB by default, the same as ``ServerLimits``'s default).
* **A send may wait.**  An ASGI ``send`` is a coroutine that waits while
  the server's flow control holds the connection.  While the client reads,
  the stream runs the server's ``send`` up to its first wait straight from
  the host's flush (uvicorn's and hypercorn's then write the frame and
  return: no task, no queue); one that does wait goes on in a task, and
  what comes meanwhile goes through the connection's bounded queue and the
  server's send budget, as a ``serve_websocket`` connection's does while its
  client is slow.  Each message is one ``send``: the ASGI server writes each
  frame to the socket by itself, where ``serve_websocket`` writes all of a
  flush's frames for a connection at once (docs/performance.md, "ASGI
  fan-out").
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Mapping,
    MutableMapping,
    Sequence,
)
from http import HTTPStatus
from types import CoroutineType
from typing import Final, TypeAlias

from .aio.access import AccessPolicy, Refusal, offered_subprotocols, select_subprotocol
from .aio.authn import (
    AUTHENTICATE_TIMEOUT,
    Admitted,
    Authenticate,
    AuthenticationRefused,
    HandshakeAuthenticator,
)
from .aio.log_quota import LogQuota
from .aio.server import CloseReason, EndOfStream, FrameCache, HostServer, MessageRefused

__all__ = [
    "ASGIMessage",
    "ASGIReceive",
    "ASGIScope",
    "ASGISend",
    "AsgiApp",
    "AsgiStream",
    "Authenticate",
    "AuthenticationRefused",
    "asgi_app",
]

log = logging.getLogger(__name__)

ASGIScope: TypeAlias = Mapping[str, object]
"""An ASGI connection scope (``type``, ``path``, ``headers``, ...)."""
ASGIMessage: TypeAlias = MutableMapping[str, object]
"""An ASGI event or message (``{"type": "websocket.send", "text": ...}``)."""
ASGIReceive: TypeAlias = Callable[[], Awaitable[Mapping[str, object]]]
"""The ASGI server's ``receive`` callable."""
ASGISend: TypeAlias = Callable[[ASGIMessage], Awaitable[None]]
"""The ASGI server's ``send`` callable."""

CLOSE_CODES: Final = {
    CloseReason.NORMAL: 1000,
    CloseReason.SHUTDOWN: 1001,
    CloseReason.OVERFLOW: 1008,
    CloseReason.REFUSED: 1003,
    CloseReason.POLICY: 1008,
    CloseReason.INTERNAL: 1011,
}
"""The WebSocket close code for each :class:`CloseReason` (the same as ``serve_websocket``'s)."""
MESSAGE_TOO_BIG: Final = 1009
POLICY_VIOLATION: Final = 1008
INTERNAL_ERROR: Final = 1011
_MAX_REASON_BYTES: Final = 123  # RFC 6455: a close frame's payload is at most 125 bytes
DENIAL_EXTENSION: Final = "websocket.http.response"
_TEXT_PLAIN: Final = (b"content-type", b"text/plain; charset=utf-8")


def _reason(text: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= _MAX_REASON_BYTES:
        return text
    return data[: _MAX_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else ""


def route_path(scope: ASGIScope) -> str:
    """The path under the application's mount point (``root_path``): ``/`` at its root.

    Servers and frameworks differ on whether ``path`` includes ``root_path``
    (the ASGI spec now says it does; older ones strip it): both are taken."""
    path = _text(scope.get("path")) or "/"
    root = _text(scope.get("root_path")).rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    return path or "/"


def _at_root(scope: ASGIScope) -> bool:
    return route_path(scope) == "/"


def _header_getter(scope: ASGIScope) -> Callable[[str], str | None]:
    found: dict[str, list[str]] = {}
    headers = scope.get("headers")
    if isinstance(headers, list | tuple):
        for pair in headers:
            if isinstance(pair, list | tuple) and len(pair) == 2:
                name, value = pair
                if isinstance(name, bytes) and isinstance(value, bytes):
                    found.setdefault(name.decode("latin-1").lower(), []).append(
                        value.decode("latin-1"))

    if "sec-websocket-protocol" not in found:
        # a server that keeps the offered subprotocols only in the scope
        offered = scope.get("subprotocols")
        if isinstance(offered, list | tuple) and offered:
            found["sec-websocket-protocol"] = [
                ", ".join(p for p in offered[:16] if isinstance(p, str))]

    def header(name: str) -> str | None:
        values = found.get(name.lower())
        # a repeated Host, Origin or Authorization is not one to trust
        return None if not values else values[0] if len(values) == 1 else "\x00repeated"

    return header


def _request_target(scope: ASGIScope) -> str:
    query = _text(scope.get("query_string"))
    path = _text(scope.get("path")) or "/"
    return f"{path}?{query}" if query else path


def _peer(scope: ASGIScope) -> str | None:
    client = scope.get("client")
    if isinstance(client, list | tuple) and len(client) >= 2:
        host = str(client[0])
        return f"[{host}]:{client[1]}" if ":" in host else f"{host}:{client[1]}"
    return None


class AsgiStream:
    """One accepted ASGI WebSocket as a :class:`~agenthost_protocol.aio.MessageStream`."""

    def __init__(self, receive: ASGIReceive, send: ASGISend, *, max_message_size: int,
                 peer: str | None = None) -> None:
        self._receive = receive
        self._send = send
        self._max = max_message_size
        self._closed = False
        self._too_big = False
        self._pending: asyncio.Future[None] | None = None
        """The sends :meth:`write_now` left waiting on the server, if any."""
        self._failure: str | None = None
        self._direct = inspect.iscoroutinefunction(send) or (
            callable(send) and inspect.iscoroutinefunction(type(send).__call__))
        """Whether ``send`` makes a coroutine, which :meth:`write_now` can run up to its
        first wait (anything else goes through the send queue)."""
        self.peer = peer
        """The client's address, ``HOST:PORT`` (for log lines), if the server said."""

    async def receive(self) -> bytes | str:
        while True:
            try:
                message = await self._receive()
            except Exception as e:  # the server's own error for a gone client
                self._closed = True
                raise EndOfStream(f"the ASGI server failed to receive: {e}") from None
            kind = message.get("type")
            if kind == "websocket.disconnect":
                self._closed = True
                code = message.get("code")
                raise EndOfStream(f"closed by the client ({code})" if code is not None
                                  else "closed by the client")
            if kind != "websocket.receive":
                continue  # nothing else is defined after accept
            text = message.get("text")
            if isinstance(text, str):
                # a character is 1 to 4 bytes: the exact size only when it is in doubt
                if len(text) > self._max or (
                        len(text) * 4 > self._max and len(text.encode("utf-8")) > self._max):
                    self._too_big = True
                    raise MessageRefused(f"message too big (over {self._max} bytes)")
                return text
            if message.get("bytes") is not None:
                raise MessageRefused("binary frame refused: AHP messages are text frames")

    async def send(self, data: bytes) -> None:
        await self._settle()
        if self._closed:
            raise EndOfStream("the connection is closed")
        try:
            await self._send({"type": "websocket.send", "text": data.decode("utf-8")})
        except Exception as e:  # servers raise their own kinds (ClientDisconnected, ...)
            self._closed = True
            raise EndOfStream(f"the ASGI server failed to send: {e}") from None

    def write_now(self, messages: Sequence[bytes], frames: FrameCache) -> bool:
        """Each of ``messages`` handed to the ASGI server's ``send`` at once, unless a
        send of an earlier call is still waiting (``False``, nothing taken).

        The server's ``send`` coroutine is run up to its first wait: uvicorn's and
        hypercorn's write the frame and return without waiting while the client
        reads (no task, no queue for the message).  When one does wait (the
        server's own flow control: the client is slow), it and the rest of
        ``messages`` go on in a task, and until that task ends this returns
        ``False``, so what comes meanwhile goes through the connection's send
        queue and its budgets (:meth:`send` waits for the task first)."""
        pending = self._pending
        if pending is not None:
            if not pending.done():
                return False
            self._pending = None
        if self._closed or self._failure is not None or not self._direct:
            return False
        for number, data in enumerate(messages):
            step = self._send({"type": "websocket.send", "text": data.decode("utf-8")})
            if not isinstance(step, CoroutineType):
                # an awaitable of another kind: awaited in the task, with the rest
                self._pending = asyncio.ensure_future(
                    self._send_rest(_awaited(step), messages[number + 1:]))
                return True
            try:
                waits_on = step.send(None)
            except StopIteration:
                continue
            except Exception as e:
                self._closed = True
                raise EndOfStream(f"the ASGI server failed to send: {e}") from None
            self._pending = asyncio.ensure_future(
                self._send_rest(_Resumed(step, waits_on), messages[number + 1:]))
            return True
        return True

    async def _send_rest(self, first: Awaitable[None], rest: Sequence[bytes]) -> None:
        try:
            await first
            for data in rest:
                await self._send({"type": "websocket.send", "text": data.decode("utf-8")})
        except asyncio.CancelledError:
            self._closed = True
            raise
        except Exception as e:
            self._closed = True
            self._failure = f"the ASGI server failed to send: {e}"

    async def _settle(self) -> None:
        """Wait for the sends :meth:`write_now` left waiting (they come first)."""
        pending = self._pending
        if pending is not None:
            # wait() neither raises what the task raised nor cancels it if we are
            await asyncio.wait({pending})
            self._pending = None
        if self._failure is not None:
            raise EndOfStream(self._failure)

    async def close(self, reason: CloseReason, message: str) -> None:
        await self._settle()
        if self._closed:
            return
        self._closed = True
        code = MESSAGE_TOO_BIG if self._too_big else CLOSE_CODES[reason]
        try:
            await self._send({"type": "websocket.close", "code": code,
                              "reason": _reason(message)})
        except Exception as e:
            raise EndOfStream(f"the ASGI server failed to close: {e}") from None

    def abort(self) -> None:
        # ASGI has no abort: the application returns, and the server closes the socket
        self._closed = True
        if self._pending is not None:
            self._pending.cancel()


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


class _Resumed:
    """A coroutine that ran synchronously up to a wait, as an awaitable that goes on
    from there: awaiting it (in a task) hands the task what the coroutine waits on
    (``waits_on``, the value its first step yielded), and each value or exception
    the task sends back to the coroutine, as ``await coroutine`` would have."""

    def __init__(self, coroutine: Coroutine[object, object, object], waits_on: object) -> None:
        self._coroutine = coroutine
        self._waits_on = waits_on

    def __await__(self) -> Generator[object, object, None]:
        coroutine, waits_on = self._coroutine, self._waits_on
        while True:
            try:
                sent = yield waits_on
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as e:
                try:
                    waits_on = coroutine.throw(e)
                except StopIteration:
                    return
            else:
                try:
                    waits_on = coroutine.send(sent)
                except StopIteration:
                    return


class AsgiApp:
    """The ASGI 3 application :func:`asgi_app` makes."""

    def __init__(self, server: HostServer, policy: AccessPolicy | None = None,
                 authenticate: Authenticate | None = None, *,
                 handshake_timeout: float = AUTHENTICATE_TIMEOUT) -> None:
        self.server = server
        self.policy = policy if policy is not None else AccessPolicy()
        self.authenticate = authenticate
        self._refusals = LogQuota("refused WebSocket handshakes", log)
        self._authenticator = None if authenticate is None else HandshakeAuthenticator(
            authenticate, timeout=handshake_timeout, limit=server.limits.max_connections,
            logger=log)

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        kind = scope.get("type")
        if kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "http":
            await self._http(scope, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:
            raise ValueError(f"agenthost_protocol.asgi does not serve {kind!r} scopes")

    async def _http(self, scope: ASGIScope, send: ASGISend) -> None:
        if _at_root(scope):
            status = HTTPStatus.UPGRADE_REQUIRED
            body = b"an Agent Host Protocol endpoint: open a WebSocket here\n"
            headers = [_TEXT_PLAIN, (b"upgrade", b"websocket"), (b"connection", b"Upgrade")]
        else:
            status, body, headers = HTTPStatus.NOT_FOUND, b"not found\n", [_TEXT_PLAIN]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": int(status), "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: ASGIReceive, send: ASGISend) -> None:
        while True:
            message = await receive()
            kind = message.get("type")
            if kind == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif kind == "lifespan.shutdown":
                try:
                    await self.server.close()
                except Exception as e:
                    log.exception("closing the host's connections failed")
                    await send({"type": "lifespan.shutdown.failed", "message": str(e)})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                return

    def _check(self, scope: ASGIScope) -> Refusal | None:
        if not _at_root(scope):
            return Refusal(status=404, reason="not found: the host is served at "
                           f"{_text(scope.get('root_path')).rstrip('/')}/")
        refusal = self.policy.check(_request_target(scope), _header_getter(scope))
        if refusal is None and self.server.closing:
            return Refusal(status=503, reason="the host is shutting down")
        if refusal is None and self.server.at_capacity:
            return Refusal(status=503, reason="too many connections")
        return refusal

    async def _websocket(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        first = await receive()
        if first.get("type") != "websocket.connect":
            return  # the client left before its handshake was answered
        refusal = self._check(scope)
        principal: object = None
        if refusal is None and self._authenticator is not None:
            outcome = await self._authenticator(scope, _peer(scope))
            if isinstance(outcome, Admitted):
                principal = outcome.principal
            else:
                refusal = outcome
        if refusal is None and self.server.closing:
            refusal = Refusal(status=503, reason="the host is shutting down")
        if refusal is not None:
            await self._refuse(scope, send, refusal)
            return
        accept: ASGIMessage = {"type": "websocket.accept"}
        subprotocol = select_subprotocol(_offered(scope))
        if subprotocol is not None:
            accept["subprotocol"] = subprotocol
        await send(accept)
        stream = AsgiStream(receive, send, max_message_size=self.server.limits.max_message_size,
                            peer=_peer(scope))
        await self.server.serve_connection(stream, principal=principal)

    async def _refuse(self, scope: ASGIScope, send: ASGISend, refusal: Refusal) -> None:
        if self._refusals.allow():
            # the path may carry a token: never logged
            log.warning("refused a WebSocket handshake from %s: %d %s",
                        _peer(scope) or "an unknown address", refusal.status, refusal.reason)
        extensions = scope.get("extensions")
        if isinstance(extensions, Mapping) and DENIAL_EXTENSION in extensions:
            body = (refusal.reason + "\n").encode("utf-8")
            headers = [_TEXT_PLAIN, (b"content-length", str(len(body)).encode())]
            if refusal.status == HTTPStatus.UNAUTHORIZED:
                headers.append((b"www-authenticate", b'Bearer realm="agenthost-protocol"'))
            await send({"type": "websocket.http.response.start", "status": refusal.status,
                        "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            code = INTERNAL_ERROR if refusal.status == HTTPStatus.INTERNAL_SERVER_ERROR \
                else POLICY_VIOLATION
            await send({"type": "websocket.close", "code": code,
                        "reason": _reason(refusal.reason)})


def _offered(scope: ASGIScope) -> tuple[str, ...]:
    offered = scope.get("subprotocols")
    if isinstance(offered, list | tuple):
        return tuple(p for p in offered[:16] if isinstance(p, str))
    return offered_subprotocols(_header_getter(scope)("sec-websocket-protocol"))


def asgi_app(server: HostServer, *, policy: AccessPolicy | None = None,
             authenticate: Authenticate | None = None,
             handshake_timeout: float = AUTHENTICATE_TIMEOUT) -> AsgiApp:
    """An ASGI 3 application serving ``server`` to WebSocket clients (see the module's text).

    ``policy`` is what a handshake must show (``None``: the default
    :class:`~agenthost_protocol.aio.access.AccessPolicy`, as for ``serve_websocket``).
    ``authenticate(scope) -> principal | None`` (sync or async) says who the
    client is, from the ASGI scope, before the WebSocket is accepted; the
    principal goes with the connection
    (:attr:`~agenthost_protocol.host.HostConnection.principal`).  ``None``
    refuses with 401, :class:`~agenthost_protocol.aio.authn.AuthenticationRefused`
    with its status, another error with 500, taking more than
    ``handshake_timeout`` seconds with 503.
    """
    return AsgiApp(server, policy, authenticate, handshake_timeout=handshake_timeout)
