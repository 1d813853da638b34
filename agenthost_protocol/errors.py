"""The library's exceptions.

Every error the library raises on purpose is a :class:`ProtocolError`.  The
split follows h11: :class:`LocalProtocolError` means *you* (the caller) did
something the protocol forbids, :class:`RemoteProtocolError` means the *peer*
sent something malformed.  Each error carries

* ``code``: the JSON-RPC error code the peer should be answered with
  (``-32700`` parse error, ``-32600`` invalid request, ``-32601`` method not
  found, ``-32602`` invalid params, or an AHP code such as ``-32005``);
* ``path``: where the offending value sits, as a JSONPath-like string such as
  ``$.params.action.turnId`` (``None`` when the whole input is at fault);
* ``data``: optional JSON-RPC error ``data``;
* ``request_id``: the id of the request at fault, when it could be read, so
  that a host can answer it;
* ``respond``: whether the peer must get an error response at all.  JSON-RPC
  2.0 §5 answers a request (with its ``id``) and a message whose ``id`` could
  not be read (with ``id: null``), but never a notification or a response.
  :meth:`ProtocolError.response` builds the answer, or gives ``None``.

Any other exception escaping the library (``KeyError``, ``TypeError``, ...)
is a bug in the library, never the expected reaction to bad input.
"""

from __future__ import annotations

from typing import Any

from .types.error_codes import AhpErrorCode, JsonRpcErrorCode

__all__ = [
    "InvalidParams",
    "InvalidRequest",
    "LocalProtocolError",
    "MethodNotFound",
    "ParseError",
    "ProtocolError",
    "RemoteProtocolError",
    "UnsupportedProtocolVersion",
]


class ProtocolError(Exception):
    """Base of every error the library raises on purpose.  Not raised itself."""

    code: int = JsonRpcErrorCode.INTERNAL_ERROR

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        code: int | None = None,
        data: Any = None,
        request_id: Any = None,
        respond: bool = True,
    ) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.respond = respond
        self.message = message
        self.path = path
        if code is not None:
            self.code = code
        self.data = data

    def __str__(self) -> str:
        return self.message if self.path is None else f"{self.message} @ {self.path}"

    def to_error(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object to answer a peer with."""
        error: dict[str, Any] = {"code": int(self.code), "message": str(self)}
        if self.data is not None:
            error["data"] = self.data
        return error

    def response(self) -> dict[str, Any] | None:
        """The whole JSON-RPC error response to send, or ``None`` when nothing is sent.

        ``None`` for an error in a notification or in a peer's response;
        otherwise ``{"jsonrpc": "2.0", "id": request_id, "error": ...}``, with
        ``"id": null`` when the id could not be read.
        """
        if not self.respond:
            return None
        return {"jsonrpc": "2.0", "id": self.request_id, "error": self.to_error()}


class LocalProtocolError(ProtocolError):
    """The caller asked for something the protocol or this object's state forbids."""

    code: int = JsonRpcErrorCode.INVALID_PARAMS


class RemoteProtocolError(ProtocolError):
    """The peer sent something malformed or out of protocol."""

    code: int = JsonRpcErrorCode.INVALID_REQUEST


class ParseError(RemoteProtocolError):
    """The input is not JSON (JSON-RPC ``-32700``)."""

    code: int = JsonRpcErrorCode.PARSE_ERROR


class InvalidRequest(RemoteProtocolError):
    """The JSON is not a valid JSON-RPC message (``-32600``)."""

    code: int = JsonRpcErrorCode.INVALID_REQUEST


class MethodNotFound(RemoteProtocolError):
    """The method is not an AHP method in this direction (``-32601``)."""

    code: int = JsonRpcErrorCode.METHOD_NOT_FOUND


class InvalidParams(RemoteProtocolError):
    """A value does not match the AHP types (``-32602``): a wrong type, a missing field."""

    code: int = JsonRpcErrorCode.INVALID_PARAMS


class UnsupportedProtocolVersion(RemoteProtocolError):
    """No offered protocol version is supported (AHP ``-32005``).

    ``data`` holds the ``UnsupportedProtocolVersionErrorData`` wire object
    (``{"supportedVersions": [...]}``); per the spec, the host closes the
    connection after answering with it.
    """

    code: int = AhpErrorCode.UNSUPPORTED_PROTOCOL_VERSION
