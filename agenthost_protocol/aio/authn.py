"""The embedder's own authentication of a WebSocket handshake: ``authenticate(scope)``.

Both transports take the same function (``serve_websocket(...,
authenticate=...)`` and ``asgi_app(..., authenticate=...)``) and run it the
same way, here: after the :class:`~.access.AccessPolicy` check, before the
WebSocket is accepted.  It gets an ASGI ``websocket`` scope (under ASGI the
server's own, with whatever a middleware put in it, ``scope["session"]``,
``scope["user"]``; under ``serve_websocket`` one built from the request by
:func:`websocket_scope`) and returns the **principal**, any object that says
who the client is, which the connection carries
(:attr:`~agenthost_protocol.host.HostConnection.principal`) and the agent
layer shows (:attr:`~agenthost_protocol.agent.NewSession.principal`,
:attr:`~agenthost_protocol.agent.Turn.principal`).

* ``None`` refuses the handshake with 401 (``WWW-Authenticate: Bearer``).
* Raising :class:`AuthenticationRefused` refuses it with its status (403 by
  default) and reason.
* Raising anything else refuses it with 500; the error is logged by its
  class and the place it was raised, never its text (it may quote the
  token), at most a few lines per period however many come.
* It may be a coroutine function (or return any awaitable): the result is
  awaited at most the handshake's time limit, then the handshake is refused
  with 503.  A plain function runs on the event loop: keep it quick.
* At most ``max_connections`` handshakes are authenticated at once; one
  more is refused with 503 at once, so slow authentications cannot pile up.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Final, TypeAlias
from urllib.parse import unquote

from attrs import frozen

from .access import Refusal
from .log_quota import LogQuota

__all__ = [
    "AUTHENTICATE_TIMEOUT",
    "Admitted",
    "Authenticate",
    "AuthenticationRefused",
    "HandshakeAuthenticator",
    "Scope",
    "websocket_scope",
]

Scope: TypeAlias = Mapping[str, object]
"""An ASGI connection scope (``type``, ``path``, ``headers``, ...)."""

Authenticate: TypeAlias = Callable[[Scope], object | Awaitable[object]]
"""``authenticate(scope) -> principal | None``, or an awaitable of it."""

AUTHENTICATE_TIMEOUT: Final = 10.0
"""Seconds an ``authenticate`` may take under ASGI by default (``asgi_app``'s
``handshake_timeout``); under ``serve_websocket`` its ``open_timeout`` bounds it."""

_MAX_REASON: Final = 200
"""The most characters of an :class:`AuthenticationRefused` reason sent back."""


class AuthenticationRefused(Exception):
    """Raised by ``authenticate`` to refuse a handshake with ``status`` (an HTTP 4xx
    status; 403 by default, anything else becomes 403) and ``reason`` (the
    response's one-line body, cut to 200 characters)."""

    def __init__(self, reason: str = "not allowed", *, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@frozen(kw_only=True)
class Admitted:
    """A handshake ``authenticate`` let through, with its principal."""

    principal: object


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 3] + "..."


def _where(error: BaseException) -> str:
    """Where ``error`` was raised (file, line, function): what the log says of it
    besides its class, since its text may quote the token."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "an unknown place"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


class HandshakeAuthenticator:
    """Runs an ``authenticate`` function on handshakes (see the module's text)."""

    def __init__(self, authenticate: Authenticate, *, timeout: float, limit: int,
                 logger: logging.Logger) -> None:
        self.authenticate = authenticate
        self.timeout = timeout
        self.limit = limit
        self._log = logger
        self._errors = LogQuota("failed authentications", logger)
        self._running = 0

    @property
    def running(self) -> int:
        """Handshakes being authenticated now."""
        return self._running

    async def __call__(self, scope: Scope, peer: str | None) -> Admitted | Refusal:
        """The principal of the handshake of ``scope``, or why it is refused."""
        if self._running >= self.limit:
            return Refusal(status=503, reason="too many handshakes being authenticated")
        self._running += 1
        try:
            result = self.authenticate(scope)
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(_awaited(result), self.timeout)
        except AuthenticationRefused as e:
            status = e.status if _client_error(e.status) else 403
            return Refusal(status=status, reason=_one_line(e.reason) or "not allowed")
        except asyncio.TimeoutError:
            if self._errors.allow():
                self._log.warning("authenticate took more than %g s for a handshake from "
                                  "%s: refused", self.timeout, peer or "an unknown address")
            return Refusal(status=503, reason="authentication took too long")
        except Exception as e:
            if self._errors.allow():
                self._log.error("authenticate raised %s (at %s) for a handshake from %s: "
                                "refused with 500", type(e).__name__, _where(e),
                                peer or "an unknown address")
            return Refusal(status=500, reason="authentication failed on the server")
        finally:
            self._running -= 1
        if result is None:
            return Refusal(status=401, reason="not authenticated")
        return Admitted(principal=result)


def _client_error(status: object) -> bool:
    """Whether ``status`` is an HTTP 4xx status ``http.HTTPStatus`` knows."""
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status < 500:
        return False
    try:
        HTTPStatus(status)
    except ValueError:
        return False
    return True


async def _awaited(awaitable: Awaitable[object]) -> object:
    return await awaitable


def _latin1(value: str) -> bytes:
    return value.encode("latin-1", "replace")


def websocket_scope(
    *,
    target: str,
    headers: Sequence[tuple[str, str]],
    client: tuple[str, int] | None,
    server: tuple[str, int] | None,
    secure: bool,
    subprotocols: Sequence[str] = (),
) -> dict[str, object]:
    """The ASGI ``websocket`` scope of a handshake that did not come through ASGI
    (``serve_websocket``'s): ``target`` is the request target (``/path?query``),
    ``headers`` its headers as they came.  The same function then authenticates
    under both transports."""
    raw_path, _, query = target.partition("?")
    raw_path = raw_path or "/"
    return {
        "type": "websocket",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "scheme": "wss" if secure else "ws",
        "path": unquote(raw_path),
        "raw_path": _latin1(raw_path),
        "query_string": _latin1(query),
        "root_path": "",
        "headers": [(_latin1(name.lower()), _latin1(value)) for name, value in headers],
        "client": list(client) if client is not None else None,
        "server": list(server) if server is not None else None,
        "subprotocols": list(subprotocols),
        "extensions": {},
        "state": {},
    }
