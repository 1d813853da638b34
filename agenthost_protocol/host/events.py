"""What the host hands the embedder: events, and responders that answer requests.

Events are frozen values, queued on the :class:`~agenthost_protocol.host.Host`
in the order their causes happened and read with ``host.next_event()``.  A
:class:`RequestReceived` carries a :class:`Responder`: call exactly one of
``respond`` and ``error`` on it, now or later; the answer is queued on the
connection that asked (and dropped if that connection has closed since).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Generic, TypeAlias, TypeVar, cast

from attrs import field, frozen

from .. import types as t
from ..errors import LocalProtocolError
from ..methods import (
    METHODS,
    CommandParams,
    CommandResult,
    Method,
    ServerRequestParams,
    ServerRequestResult,
)
from ..types.error_codes import (
    AhpErrorCode,
    AuthRequiredErrorData,
    JsonRpcErrorCode,
    PermissionDeniedErrorData,
    UnsupportedProtocolVersionErrorData,
)
from .connection import ErrorData, HostConnection

__all__ = [
    "ClientActionApplied",
    "ClientIdClaimed",
    "ClientRequestParams",
    "ClientRequestResult",
    "ConnectionClosed",
    "ErrorData",
    "ErrorReceived",
    "Event",
    "ProtocolNotificationParams",
    "Initialized",
    "Reconnected",
    "RequestReceived",
    "Responder",
    "ResponseReceived",
    "ServerRequestParams",
    "ServerRequestResult",
    "StoreFailed",
    "TypedRequest",
    "Unsubscribed",
]

P = TypeVar("P")
R = TypeVar("R")

ProtocolNotificationParams: TypeAlias = (
    t.SessionAddedParams
    | t.SessionRemovedParams
    | t.SessionSummaryChangedParams
    | t.ProgressParams
    | t.AuthRequiredParams
    | t.OtlpExportLogsParams
    | t.OtlpExportTracesParams
    | t.OtlpExportMetricsParams
)
"""The params of the protocol notifications sent with
:meth:`~agenthost_protocol.host.Host.notify`."""

ClientRequestParams: TypeAlias = CommandParams
"""The params of every command the core leaves to the embedder."""

ClientRequestResult: TypeAlias = CommandResult
"""The results of those commands (``None`` for the commands whose result is ``null``)."""

_DATA_OF_CODE: Mapping[int, type] = MappingProxyType({
    AhpErrorCode.AUTH_REQUIRED: AuthRequiredErrorData,
    AhpErrorCode.PERMISSION_DENIED: PermissionDeniedErrorData,
    AhpErrorCode.UNSUPPORTED_PROTOCOL_VERSION: UnsupportedProtocolVersionErrorData,
})
_CODES = frozenset(int(c) for c in (*JsonRpcErrorCode, *AhpErrorCode))


class Responder(Generic[R]):
    """Answers one request of one connection, once.

    Made by the host; the embedder calls :meth:`respond` or :meth:`error`.
    Answering twice, a result of the wrong type, an error code AHP does not
    define or ``data`` of the wrong type for the code raise
    :class:`~agenthost_protocol.errors.LocalProtocolError`.  ``R`` is the
    result type: a union for a :class:`RequestReceived`'s responder, the
    method's own result class once narrowed (:meth:`RequestReceived.narrow`).
    """

    # weakly referable: an I/O layer answers a request whose responder was dropped unanswered
    __slots__ = ("__weakref__", "_answered", "_connection", "method", "request_id")

    def __init__(self, connection: HostConnection, request_id: t.JsonRpcId, method: str) -> None:
        self._connection = connection
        self.request_id = request_id
        self.method = method
        self._answered = False

    @property
    def answered(self) -> bool:
        """Whether :meth:`respond` or :meth:`error` was called."""
        return self._answered

    def _claim(self) -> None:
        if self._answered:
            raise LocalProtocolError(f"request {self.request_id!r} was already answered")
        self._answered = True

    def respond(self, result: R) -> None:
        """Answer with ``result``: the method's result class, or ``None`` for a ``null`` result."""
        METHODS[self.method].check_result(result)
        self._claim()
        self._connection._send_result(self.request_id, result, method=self.method)

    def error(self, code: int, message: str, *, data: ErrorData | None = None) -> None:
        """Answer with a JSON-RPC or AHP error (one of the 16 codes).

        ``AuthRequired`` (-32007) needs its ``AuthRequiredErrorData``; the
        codes with typed data accept only that type, the others no ``data``.
        """
        if int(code) not in _CODES:
            raise LocalProtocolError(f"{code} is not a JSON-RPC or AHP error code")
        want = _DATA_OF_CODE.get(int(code))
        if data is not None and (want is None or not isinstance(data, want)):
            raise LocalProtocolError(f"error {code} does not carry {type(data).__name__}")
        if int(code) == AhpErrorCode.AUTH_REQUIRED and data is None:
            raise LocalProtocolError("AuthRequired (-32007) must carry AuthRequiredErrorData")
        self._claim()
        self._connection._send_error(self.request_id, int(code), message, data)


@frozen(kw_only=True)
class RequestReceived:
    """A command the core does not answer itself; answer it through ``responder``.

    ``params`` and the responder are typed by unions; :meth:`narrow` types
    them by one method::

        if (request := event.narrow(methods.LIST_SESSIONS)) is not None:
            request.respond(ListSessionsResult(items=...))  # checked statically
    """

    connection: HostConnection = field(eq=False)
    request_id: t.JsonRpcId
    method: str
    params: ClientRequestParams = field(eq=False)
    responder: Responder[ClientRequestResult | None] = field(eq=False)

    def narrow(self, method: Method[P, R]) -> TypedRequest[P, R] | None:
        """This request typed as ``method``'s, or ``None`` if it is another method's."""
        if method.name != self.method or not isinstance(self.params, method.params):
            return None
        return TypedRequest(
            connection=self.connection, request_id=self.request_id, method=method,
            params=self.params, responder=cast("Responder[R]", self.responder),
        )


@frozen(kw_only=True)
class TypedRequest(Generic[P, R]):
    """A :class:`RequestReceived` narrowed to one method: ``params`` is ``P``
    and :meth:`respond` takes ``R`` (``None`` for a ``null`` result)."""

    connection: HostConnection = field(eq=False)
    request_id: t.JsonRpcId
    method: Method[P, R]
    params: P = field(eq=False)
    responder: Responder[R] = field(eq=False, repr=False)

    def respond(self, result: R) -> None:
        """Answer with ``result`` (see :meth:`Responder.respond`)."""
        self.responder.respond(result)

    def error(self, code: int, message: str, *, data: ErrorData | None = None) -> None:
        """Answer with an error (see :meth:`Responder.error`)."""
        self.responder.error(code, message, data=data)


@frozen(kw_only=True)
class Initialized:
    """A connection completed ``initialize``."""

    connection: HostConnection = field(eq=False)
    client_id: str
    protocol_version: str


@frozen(kw_only=True)
class Reconnected:
    """A connection resumed a client with ``reconnect``."""

    connection: HostConnection = field(eq=False)
    client_id: str
    protocol_version: str
    replayed: bool
    """``True``: answered with a replay; ``False``: with snapshots."""


@frozen(kw_only=True)
class ResponseReceived:
    """A client answered a request the host sent with ``connection.send_request``."""

    connection: HostConnection = field(eq=False)
    request_id: int
    method: str
    result: ServerRequestResult = field(eq=False)

    def result_for(self, method: Method[P, R]) -> R:
        """``result`` typed as ``method``'s; raises
        :class:`~agenthost_protocol.errors.LocalProtocolError` if this is the
        answer to another method."""
        if method.name != self.method:
            raise LocalProtocolError(f"this answers {self.method!r}, not {method.name!r}")
        return method.check_result(self.result)


@frozen(kw_only=True)
class ErrorReceived:
    """A client answered such a request with an error (or an undecodable result)."""

    connection: HostConnection = field(eq=False)
    request_id: int
    method: str
    error: t.JsonRpcError


@frozen(kw_only=True)
class ClientActionApplied:
    """A client's action passed validation and was applied and sequenced.

    The agent side reacts here (``chat/turnStarted`` starts a turn,
    ``chat/toolCallConfirmed`` resumes a tool call ...); ``envelope`` is what
    the subscribers received, with its ``origin`` and ``serverSeq``.
    Rejected actions raise no event: the host's state did not change.
    """

    connection: HostConnection = field(eq=False)
    envelope: t.ActionEnvelope


@frozen(kw_only=True)
class ConnectionClosed:
    """A connection is closed: flush ``data_to_send()`` once more, then close the transport."""

    connection: HostConnection = field(eq=False)
    reason: str
    subscriptions: tuple[str, ...] = ()
    """The channels it was subscribed to when it closed (what a service that holds a
    resource while a channel has subscribers, a watch, checks again)."""


@frozen(kw_only=True)
class Unsubscribed:
    """An open connection stopped listening to ``channel``: its ``unsubscribe``, or a
    ``reconnect`` that no longer names the channel.

    :meth:`Host.subscribers <agenthost_protocol.host.Host.subscribers>` says who is
    left; a connection that closes says so with :class:`ConnectionClosed` instead.
    """

    connection: HostConnection = field(eq=False)
    channel: str


@frozen(kw_only=True)
class ClientIdClaimed:
    """A new connection's ``initialize``/``reconnect`` names a ``clientId`` that
    ``holder``, an open connection, holds.

    ``clientId`` is public (every envelope's ``origin``, ``activeClients``),
    so the claim is not granted on its own: the embedder probes ``holder``
    (a WebSocket ping with a short deadline) and calls
    :meth:`Host.settle_claim <agenthost_protocol.host.Host.settle_claim>`.
    Alive, the claim is refused (``-32010``) and the holder is untouched;
    dead, the holder is closed and the handshake goes on.  Until then the
    request waits (a holder that closes on its own settles it too).
    """

    connection: HostConnection = field(eq=False)
    """The claimant."""
    holder: HostConnection = field(eq=False)
    client_id: str


@frozen(kw_only=True)
class StoreFailed:
    """The host's store could not read or write; the host went on without it.

    After a failed commit the host is as it was before the batch: the
    batch's envelopes were not sent, its state changes are undone, its
    client actions were answered with rejections (``refused`` of them) and
    its answers to requests that change state became ``InternalError``.
    What the embedder dispatched in it is lost: log ``message``, stop the
    agent's work or retry.  A read that failed (a channel that cannot be
    loaded) reads as absent.
    """

    message: str
    refused: int = 0


Event: TypeAlias = (
    RequestReceived
    | ClientIdClaimed
    | Initialized
    | Reconnected
    | ResponseReceived
    | ErrorReceived
    | ClientActionApplied
    | ConnectionClosed
    | Unsubscribed
    | StoreFailed
)
"""Everything ``host.next_event()`` returns."""
