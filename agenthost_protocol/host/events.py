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
from typing import TYPE_CHECKING, TypeAlias

from attrs import field, frozen

from .. import types as t
from ..errors import LocalProtocolError
from ..methods import (
    METHODS,
    CommandParams,
    CommandResult,
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

if TYPE_CHECKING:
    from .connection import HostConnection

__all__ = [
    "ClientRequestParams",
    "ClientRequestResult",
    "ConnectionClosed",
    "ErrorData",
    "ErrorReceived",
    "Event",
    "Initialized",
    "Reconnected",
    "RequestReceived",
    "Responder",
    "ResponseReceived",
    "ServerRequestParams",
    "ServerRequestResult",
]

ClientRequestParams: TypeAlias = CommandParams
"""The params of every command the core leaves to the embedder."""

ClientRequestResult: TypeAlias = CommandResult
"""The results of those commands (``None`` for the commands whose result is ``null``)."""

ErrorData: TypeAlias = (
    AuthRequiredErrorData | PermissionDeniedErrorData | UnsupportedProtocolVersionErrorData
)
"""The typed ``data`` of the AHP errors that have one."""

_DATA_OF_CODE: Mapping[int, type] = MappingProxyType({
    AhpErrorCode.AUTH_REQUIRED: AuthRequiredErrorData,
    AhpErrorCode.PERMISSION_DENIED: PermissionDeniedErrorData,
    AhpErrorCode.UNSUPPORTED_PROTOCOL_VERSION: UnsupportedProtocolVersionErrorData,
})
_CODES = frozenset(int(c) for c in (*JsonRpcErrorCode, *AhpErrorCode))


class Responder:
    """Answers one request of one connection, once.

    Made by the host; the embedder calls :meth:`respond` or :meth:`error`.
    Answering twice, a result of the wrong type, an error code AHP does not
    define or ``data`` of the wrong type for the code raise
    :class:`~agenthost_protocol.errors.LocalProtocolError`.
    """

    __slots__ = ("_answered", "_connection", "method", "request_id")

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

    def respond(self, result: ClientRequestResult | None = None) -> None:
        """Answer with ``result``: the method's result class, or ``None`` for a ``null`` result."""
        expected = METHODS[self.method].result
        if expected is None:
            if result is not None:
                raise LocalProtocolError(f"{self.method} answers null, not {result!r}")
        elif not isinstance(result, expected):
            raise LocalProtocolError(
                f"{self.method} answers {expected.__name__}, not {type(result).__name__}"
            )
        self._claim()
        self._connection._send_result(self.request_id, result)

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
    """A command the core does not answer itself; answer it through ``responder``."""

    connection: HostConnection = field(eq=False)
    request_id: t.JsonRpcId
    method: str
    params: ClientRequestParams = field(eq=False)
    responder: Responder = field(eq=False)


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


@frozen(kw_only=True)
class ErrorReceived:
    """A client answered such a request with an error (or an undecodable result)."""

    connection: HostConnection = field(eq=False)
    request_id: int
    method: str
    error: t.JsonRpcError


@frozen(kw_only=True)
class ConnectionClosed:
    """A connection is closed: flush ``data_to_send()`` once more, then close the transport."""

    connection: HostConnection = field(eq=False)
    reason: str


Event: TypeAlias = (
    RequestReceived
    | Initialized
    | Reconnected
    | ResponseReceived
    | ErrorReceived
    | ConnectionClosed
)
"""Everything ``host.next_event()`` returns."""
