"""The asyncio layer: transports for the sans-I/O host and client (optional).

The pure package never imports this one, and this one imports its modules
only when one of their names is first used, so ``agenthost-protocol chat``
does not load the host and ``serve`` does not load the client.  The adapters
only move bytes between a transport and the sans-I/O objects: everything the
protocol decides stays in :mod:`agenthost_protocol.host` and
:mod:`agenthost_protocol.client`.  See ``docs/serve.md`` and ``docs/client.md``.

* :class:`HostServer`: a host, its event handler and its connections, with
  per-connection limits (:class:`ServerLimits`);
* :func:`serve_websocket` / :class:`WebSocketServer`: WebSocket, one
  JSON-RPC message per text frame (imports ``websockets``, extra ``ws``);
* :func:`serve_stdio`, :func:`serve_streams`: JSON Lines on stdin/stdout or
  any reader/writer pair;
* :class:`AsyncClient`, :func:`connect`, :func:`connect_stdio`: the asyncio
  client (typed awaitable requests, events, a reconnect supervisor);
* :func:`connected_client`, :class:`MemoryOpener`, :class:`MemoryLink`: a
  host and a client in one process, no sockets, links a test can break;
* :class:`ActivityLog`: what the host does, as log lines (``HostServer``
  installs one); :class:`RedactSecrets`, :func:`redact_url`: access tokens
  kept out of log lines and messages;
* :class:`AuthenticationRefused`, :data:`Authenticate`: the embedder's own
  authentication of a handshake (``serve_websocket(..., authenticate=...)``,
  ``asgi_app(..., authenticate=...)``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._limits import DEFAULT_MAX_MESSAGE_SIZE
    from .activity import ActivityLog
    from .authn import Authenticate, AuthenticationRefused, websocket_scope
    from .client import (
        AsyncClient,
        ClientError,
        ConnectError,
        ConnectionClosedError,
        HandshakeRefused,
        ReconnectPolicy,
        RequestError,
        RequestTimeout,
        VersionMismatch,
        connect,
        connect_stdio,
    )
    from .memory import MemoryLink, MemoryOpener, connected_client
    from .redact import RedactSecrets, redact_url
    from .server import (
        CloseReason,
        DirectStream,
        EndOfStream,
        EventHandler,
        FrameCache,
        HostServer,
        HostService,
        MessageRefused,
        MessageStream,
        ServerLimits,
    )
    from .stdio import LineStream, serve_stdio, serve_streams
    from .websocket import WebSocketServer, WebSocketStream, serve_websocket

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ActivityLog",
    "AsyncClient",
    "Authenticate",
    "AuthenticationRefused",
    "ClientError",
    "CloseReason",
    "ConnectError",
    "ConnectionClosedError",
    "DirectStream",
    "EndOfStream",
    "EventHandler",
    "FrameCache",
    "HandshakeRefused",
    "HostServer",
    "HostService",
    "LineStream",
    "MemoryLink",
    "MemoryOpener",
    "MessageRefused",
    "MessageStream",
    "ReconnectPolicy",
    "RedactSecrets",
    "RequestError",
    "RequestTimeout",
    "ServerLimits",
    "VersionMismatch",
    "WebSocketServer",
    "WebSocketStream",
    "connect",
    "connect_stdio",
    "connected_client",
    "redact_url",
    "serve_stdio",
    "serve_streams",
    "serve_websocket",
    "websocket_scope",
]

_MODULE_OF = {
    "DEFAULT_MAX_MESSAGE_SIZE": "._limits",
    "ActivityLog": ".activity",
    **dict.fromkeys(("Authenticate", "AuthenticationRefused", "websocket_scope"), ".authn"),
    **dict.fromkeys(("RedactSecrets", "redact_url"), ".redact"),
    **dict.fromkeys(
        ("AsyncClient", "ClientError", "ConnectError", "ConnectionClosedError",
         "HandshakeRefused", "ReconnectPolicy", "RequestError", "RequestTimeout", "VersionMismatch",
         "connect", "connect_stdio"),
        ".client",
    ),
    **dict.fromkeys(("MemoryLink", "MemoryOpener", "connected_client"), ".memory"),
    **dict.fromkeys(
        ("CloseReason", "DirectStream", "EndOfStream", "EventHandler", "FrameCache",
         "HostServer", "HostService", "MessageRefused", "MessageStream", "ServerLimits"),
        ".server",
    ),
    **dict.fromkeys(("LineStream", "serve_stdio", "serve_streams"), ".stdio"),
    **dict.fromkeys(("WebSocketServer", "WebSocketStream", "serve_websocket"), ".websocket"),
}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # looked up once per name
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
