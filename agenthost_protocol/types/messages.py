"""JSON-RPC 2.0 message shapes, generic in their params and result.

``JsonRpcRequest[InitializeParams]`` is what :func:`agenthost_protocol.wire.parse_message`
returns for an ``initialize`` request; ``JsonRpcRequest[Any]`` (or decoding the
``JsonRpcMessage`` union) keeps params as raw JSON.  Hand-written: the spec's
schemas do not describe the envelopes.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeAlias, TypeVar, Union

from attrs import field, frozen

__all__ = [
    "AhpErrorResponse",
    "JsonRpcError",
    "JsonRpcErrorResponse",
    "JsonRpcId",
    "JsonRpcMessage",
    "JsonRpcNotification",
    "JsonRpcRequest",
    "JsonRpcSuccessResponse",
]

P = TypeVar("P")
R = TypeVar("R")

JsonRpcId: TypeAlias = int | str
"""A request id.  AHP uses numbers; strings are accepted as JSON-RPC allows them."""


@frozen(kw_only=True)
class JsonRpcRequest(Generic[P]):
    """A request: ``method`` and ``id``; the peer must answer with a response."""

    jsonrpc: Literal["2.0"] = "2.0"
    id: JsonRpcId
    method: str
    params: P = field(default=None, hash=False)
    """The params; for AHP methods, the method's params class."""


@frozen(kw_only=True)
class JsonRpcNotification(Generic[P]):
    """A notification: ``method`` without ``id``; never answered."""

    jsonrpc: Literal["2.0"] = "2.0"
    method: str
    params: P = field(default=None, hash=False)
    """The params; for AHP methods, the method's params class (``ActionEnvelope`` for ``action``)."""


@frozen(kw_only=True)
class JsonRpcSuccessResponse(Generic[R]):
    """A successful response to the request with the same ``id``."""

    jsonrpc: Literal["2.0"] = "2.0"
    id: JsonRpcId
    result: R = field(hash=False)
    """The result; typed when the request's method is known, else raw JSON."""


@frozen(kw_only=True)
class JsonRpcError:
    """The ``error`` member of an error response."""

    code: int
    """A JSON-RPC (``JsonRpcErrorCode``) or AHP (``AhpErrorCode``) error code."""
    message: str
    data: Any = field(default=None, hash=False)
    """Extra information; for some AHP codes a typed structure (see ``AHP_ERROR_DATA``)."""


@frozen(kw_only=True)
class JsonRpcErrorResponse:
    """An error response; ``id`` is ``None`` when the request's id could not be read."""

    jsonrpc: Literal["2.0"] = "2.0"
    id: JsonRpcId | None
    error: JsonRpcError


AhpErrorResponse: TypeAlias = JsonRpcErrorResponse
"""An error response carrying an AHP error code (same shape as ``JsonRpcErrorResponse``)."""

JsonRpcMessage: TypeAlias = JsonRpcRequest[Any] | JsonRpcNotification[Any] | JsonRpcSuccessResponse[Any] | JsonRpcErrorResponse
"""Any JSON-RPC message, told apart by its members (``method``/``id``/``result``/``error``)."""
