"""One transport connection as the host sees it: bytes in, messages out.

A :class:`HostConnection` is made by :meth:`Host.connect
<agenthost_protocol.host.Host.connect>` and does no I/O: the embedder feeds
it each received message with :meth:`receive_data` and sends what
:meth:`data_to_send` returns.  Everything it decides is the host's business,
so ``receive_data`` hands the message to the host that owns it.
"""

from __future__ import annotations

import json
from collections import deque
from enum import Enum
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar, overload

from attrs import field, frozen

from .. import types as t
from .. import wire
from ..errors import LocalProtocolError
from ..methods import Direction, Method, ServerRequestParams, request_method
from ..types.error_codes import (
    AuthRequiredErrorData,
    PermissionDeniedErrorData,
    UnsupportedProtocolVersionErrorData,
)
from .limits import HostLimits

if TYPE_CHECKING:
    from .coalescing import Held

__all__ = ["ConnectionState", "ErrorData", "HostConnection", "HostSide"]

ErrorData: TypeAlias = (
    AuthRequiredErrorData | PermissionDeniedErrorData | UnsupportedProtocolVersionErrorData
)
"""The typed ``data`` an AHP error may carry."""

P = TypeVar("P")
R = TypeVar("R")


class ConnectionState(str, Enum):
    """Where a connection is in its life."""

    AWAITING_INITIALIZE = "awaiting-initialize"
    """Only ``initialize``, ``reconnect`` and ``ping`` are answered."""
    OPEN = "open"
    CLOSED = "closed"
    """Sticky: input is ignored, nothing more is queued."""


def _json(obj: object) -> bytes:
    try:
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text.encode("utf-8")
    except (ValueError, UnicodeEncodeError) as e:  # NaN, or a lone surrogate the caller built
        raise LocalProtocolError(f"not representable in JSON: {e}") from None


def _alike(principal: object) -> object:
    """Equal principals are judged alike (a policy is asked once per principal, not
    once per connection); one that cannot be hashed stands for itself."""
    try:
        hash(principal)
    except TypeError:
        return ("unhashable", id(principal))
    return principal


@frozen(kw_only=True)
class Claim:
    """A handshake naming a clientId that ``holder`` holds, parked until settled."""

    request_id: t.JsonRpcId
    params: t.InitializeParams | t.ReconnectParams
    holder: HostConnection = field(eq=False)


class HostSide(Protocol):
    """What a connection needs of its host (the :class:`~agenthost_protocol.host.Host`):
    a protocol, so that this module and the host's do not import each other."""

    @property
    def limits(self) -> HostLimits: ...

    def _receive(self, conn: HostConnection, data: bytes | str) -> None: ...

    def _close(self, conn: HostConnection, reason: str) -> None: ...

    def _before_send(self) -> None: ...

    def _unhold(self, group: Held) -> None: ...

    def _answered(
        self, conn: HostConnection, request_id: t.JsonRpcId, method: str, data: bytes
    ) -> None: ...


class HostConnection:
    """The host's end of one transport connection."""

    def __init__(self, host: HostSide, number: int, *, principal: object = None) -> None:
        self._host = host
        self.number = number
        """A number unique within the host, in order of :meth:`Host.connect` calls."""
        self.principal = principal
        """Who the embedder authenticated on this connection's handshake
        (:meth:`Host.connect`); ``None``: nobody in particular.  Never changes."""
        self._alike: object = _alike(principal)
        """What connections whose principals an ``authorize`` policy judges alike share."""
        self.state = ConnectionState.AWAITING_INITIALIZE
        self.client_id: str | None = None
        self.protocol_version: str | None = None
        """The negotiated version (``None`` before ``initialize`` or ``reconnect``)."""
        self._subscriptions: dict[str, None] = {}
        self._claim: Claim | None = None
        """The handshake waiting while another connection's hold on its clientId is probed."""
        self._reconnects: deque[int] | None = None
        """When the recent ``reconnect`` requests came (host clock), for the rate budget."""
        self._unanswered: set[t.JsonRpcId] = set()
        """The ids of the requests handed to the embedder and not answered yet."""
        self._dispatched = False
        """Whether any action came on this connection (a reason to remember the client)."""
        self._outbox: list[bytes] = []
        self._windows: dict[str, int] = {}
        """Per subscribed channel, the ``delivery.maxLatencyMs`` asked for (when over 0)."""
        self._held: Held | None = None
        """The deltas held for this connection to merge, newer than all of its outbox."""
        self._pending: dict[int, str] = {}
        self._next_id = 0
        self._root_view: dict[str, object] = {}
        """Under an ``authorize`` policy: what this connection's root state holds of the
        fields the policy narrows (``activeSessions``, ``terminals``), as last sent
        (absent: not known, after a replay)."""

    def __repr__(self) -> str:
        return f"<HostConnection #{self.number} {self.state.value} client={self.client_id!r}>"

    @property
    def subscriptions(self) -> tuple[str, ...]:
        """The channels this connection is subscribed to, in subscription order."""
        return tuple(self._subscriptions)

    @property
    def closed(self) -> bool:
        return self.state is ConnectionState.CLOSED

    def is_unanswered(self, request_id: t.JsonRpcId) -> bool:
        """Whether request ``request_id`` reached the embedder and is not answered yet."""
        return request_id in self._unanswered

    # -- the embedder's side --

    def receive_data(self, data: bytes | str) -> None:
        """Feed one whole JSON-RPC message (a WebSocket text frame, a JSON line).

        Malformed input is answered on this connection as JSON-RPC says; it
        never raises for what the peer sent.  Ignored once closed.
        """
        self._host._receive(self, data)

    def data_to_send(self) -> list[bytes]:
        """Drain the messages queued for this connection, each one JSON-RPC message.

        With a store, what changed is committed first: nothing leaves the
        host before it is stored.
        """
        self._host._before_send()
        out, self._outbox = self._outbox, []
        return out

    @overload
    def send_request(self, method: Method[P, R], params: P) -> int: ...
    @overload
    def send_request(self, method: str, params: ServerRequestParams) -> int: ...
    def send_request(self, method: Method[P, R] | str, params: object) -> int:
        """Send a server-to-client request (``resource*``, ``createResourceWatch``).

        ``method`` is a :mod:`~agenthost_protocol.methods` constant (then
        ``params`` is checked statically too) or a method name.  Returns the
        request id; the answer comes back as a
        :class:`~agenthost_protocol.host.ResponseReceived` (see its
        ``result_for``) or :class:`~agenthost_protocol.host.ErrorReceived` event.
        """
        name = method if isinstance(method, str) else method.name
        info = request_method(name, Direction.SERVER_TO_CLIENT)
        if info is None:
            raise LocalProtocolError(f"{name!r} is not a server-to-client request")
        info.check_params(params)
        if self.state is not ConnectionState.OPEN:
            raise LocalProtocolError(f"connection is {self.state.value}")
        self._next_id += 1
        request_id = self._next_id
        self._pending[request_id] = name
        msg = t.JsonRpcRequest(id=request_id, method=name, params=params)
        self._queue(wire.dumps(msg).encode("utf-8"))
        return request_id

    def close(self, reason: str = "closed by the host") -> None:
        """Close from the host side: queue nothing more; ``ConnectionClosed`` follows."""
        self._host._close(self, reason)

    def connection_lost(self) -> None:
        """The transport is gone: what is queued is dropped."""
        self._host._close(self, "connection lost")
        self._outbox.clear()

    # -- the host's side --

    def _queue(self, data: bytes) -> None:
        if self._held is not None:
            # what is held goes first: coalescing never reorders
            self._host._unhold(self._held)
        if self.state is not ConnectionState.CLOSED:
            self._outbox.append(data)

    def _send_json(self, obj: object) -> None:
        self._queue(_json(obj))

    def _send_result(
        self, request_id: t.JsonRpcId, result: object, *, method: str | None = None
    ) -> bool:
        """Queue the answer; ``False`` when it was too large (an error went instead)."""
        self._unanswered.discard(request_id)
        # built by hand so that a ``None`` result is written ``"result": null``
        data = _json({"jsonrpc": "2.0", "id": request_id, "result": wire.dump(result)})
        limit = self._host.limits.max_message_size
        if len(data) > limit:
            # never half-sent, never the cause of the client's disconnection
            self._send_error(request_id, -32603, f"the answer would be a {len(data)}-byte "
                             f"message, over the {limit}-byte limit (a chat: subscribe "
                             "with view.turns and page with fetchTurns)", None)
            return False
        self._queue(data)
        if method is not None:
            self._host._answered(self, request_id, method, data)
        return True

    def _send_error(
        self, request_id: t.JsonRpcId | None, code: int, message: str, data: ErrorData | None
    ) -> None:
        if request_id is not None:
            self._unanswered.discard(request_id)
        error: dict[str, object] = {"code": code, "message": message}
        if data is not None:
            error["data"] = wire.dump(data)
        self._send_json({"jsonrpc": "2.0", "id": request_id, "error": error})
