"""asyncio transports for the sans-I/O host: WebSocket (extra ``ws``) and JSON Lines.

The pure package never imports this one.  The adapters only move bytes
between a transport and :class:`~agenthost_protocol.host.Host`: everything
the protocol decides stays in the host core.  See ``docs/serve.md``.

* :class:`HostServer`: a host, its event handler and its connections, with
  per-connection limits (:class:`ServerLimits`);
* :func:`serve_websocket` / :class:`WebSocketServer`: WebSocket, one
  JSON-RPC message per text frame (imports ``websockets``, on first use);
* :func:`serve_stdio`, :func:`serve_streams`: JSON Lines on stdin/stdout or
  any reader/writer pair;
* :class:`DemoPacer`: the demo agent's turns played on the event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .demo import DemoPacer
from .server import (
    DEFAULT_MAX_MESSAGE_SIZE,
    CloseReason,
    EndOfStream,
    EventHandler,
    HostServer,
    MessageRefused,
    MessageStream,
    ServerLimits,
)
from .stdio import LineStream, serve_stdio, serve_streams

if TYPE_CHECKING:
    from .websocket import WebSocketServer, WebSocketStream, serve_websocket

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "CloseReason",
    "DemoPacer",
    "EndOfStream",
    "EventHandler",
    "HostServer",
    "LineStream",
    "MessageRefused",
    "MessageStream",
    "ServerLimits",
    "WebSocketServer",
    "WebSocketStream",
    "serve_stdio",
    "serve_streams",
    "serve_websocket",
]

_WEBSOCKET_NAMES = frozenset({"WebSocketServer", "WebSocketStream", "serve_websocket"})


def __getattr__(name: str) -> Any:
    # websockets is an optional dependency: imported when a WebSocket name is first used
    if name in _WEBSOCKET_NAMES:
        from . import websocket  # noqa: PLC0415

        return getattr(websocket, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
