"""JSON-RPC 2.0 message shapes, generic in their params and result.

``JsonRpcRequest[InitializeParams]`` is what :func:`agenthost_protocol.wire.parse_message`
returns for an ``initialize`` request; ``JsonRpcRequest[Any]`` (or decoding the
``JsonRpcMessage`` union) keeps params as raw JSON.  Hand-written: the spec's
schemas do not describe the envelopes.  As in the generated modules, each
class ends with what ``@frozen(kw_only=True)`` would build, written out (see
``_model``): type checkers read the declaration, the class costs only its body.
"""

from __future__ import annotations

# ruff: noqa: RUF023 - each __slots__ lists the fields in their order, as attrs does

from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, TypeVar, Union

if TYPE_CHECKING:
    from attrs import field, frozen
else:
    from ._model import (
        _PROPS,
        _REPLACE,
        _evolve,
        _field,
        _fields,
        _frozen_delattrs,
        _frozen_setattrs,
        _getstate,
        _ne,
        _repr_enter,
        _setattr_of,
        _setstate,
        field,
        frozen,
    )

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
    if not TYPE_CHECKING:  # what @frozen(kw_only=True) builds (see types/_model.py)
        del jsonrpc, params
        __slots__ = ("jsonrpc", "id", "method", "params", "__weakref__")
        __attrs_attrs__ = _fields(lambda: (
            _field("jsonrpc", Literal["2.0"], "2.0"),
            _field("id", JsonRpcId),
            _field("method", str),
            _field("params", P, None, hash=False),
        ))
        __attrs_props__ = _PROPS
        __match_args__ = ()
        __setattr__ = _frozen_setattrs
        __delattr__ = _frozen_delattrs
        __ne__ = _ne
        __getstate__ = _getstate
        __setstate__ = _setstate
        if _REPLACE:
            __replace__ = _evolve

        def __init__(self, *, jsonrpc: Literal["2.0"] = "2.0", id: JsonRpcId, method: str, params: P = None) -> None:
            _setattr = _setattr_of(self)
            _setattr("jsonrpc", jsonrpc)
            _setattr("id", id)
            _setattr("method", method)
            _setattr("params", params)

        def __repr__(self):
            seen = _repr_enter(self)
            if seen is None:
                return "..."
            try:
                return f'{self.__class__.__qualname__.rsplit(">.", 1)[-1]}(jsonrpc={self.jsonrpc!r}, id={self.id!r}, method={self.method!r}, params={self.params!r})'
            finally:
                seen.remove(id(self))

        def __eq__(self, other):
            if other.__class__ is not self.__class__:
                return NotImplemented
            return (
                self.jsonrpc == other.jsonrpc
                and self.id == other.id
                and self.method == other.method
                and self.params == other.params
            )

        def __hash__(self):
            return hash((2838080285406204528, self.jsonrpc, self.id, self.method))


@frozen(kw_only=True)
class JsonRpcNotification(Generic[P]):
    """A notification: ``method`` without ``id``; never answered."""

    jsonrpc: Literal["2.0"] = "2.0"
    method: str
    params: P = field(default=None, hash=False)
    """The params; for AHP methods, the method's params class (``ActionEnvelope`` for ``action``)."""
    if not TYPE_CHECKING:  # what @frozen(kw_only=True) builds (see types/_model.py)
        del jsonrpc, params
        __slots__ = ("jsonrpc", "method", "params", "__weakref__")
        __attrs_attrs__ = _fields(lambda: (
            _field("jsonrpc", Literal["2.0"], "2.0"),
            _field("method", str),
            _field("params", P, None, hash=False),
        ))
        __attrs_props__ = _PROPS
        __match_args__ = ()
        __setattr__ = _frozen_setattrs
        __delattr__ = _frozen_delattrs
        __ne__ = _ne
        __getstate__ = _getstate
        __setstate__ = _setstate
        if _REPLACE:
            __replace__ = _evolve

        def __init__(self, *, jsonrpc: Literal["2.0"] = "2.0", method: str, params: P = None) -> None:
            _setattr = _setattr_of(self)
            _setattr("jsonrpc", jsonrpc)
            _setattr("method", method)
            _setattr("params", params)

        def __repr__(self):
            seen = _repr_enter(self)
            if seen is None:
                return "..."
            try:
                return f'{self.__class__.__qualname__.rsplit(">.", 1)[-1]}(jsonrpc={self.jsonrpc!r}, method={self.method!r}, params={self.params!r})'
            finally:
                seen.remove(id(self))

        def __eq__(self, other):
            if other.__class__ is not self.__class__:
                return NotImplemented
            return (
                self.jsonrpc == other.jsonrpc
                and self.method == other.method
                and self.params == other.params
            )

        def __hash__(self):
            return hash((-1246695280861872145, self.jsonrpc, self.method))


@frozen(kw_only=True)
class JsonRpcSuccessResponse(Generic[R]):
    """A successful response to the request with the same ``id``."""

    jsonrpc: Literal["2.0"] = "2.0"
    id: JsonRpcId
    result: R = field(hash=False)
    """The result; typed when the request's method is known, else raw JSON."""
    if not TYPE_CHECKING:  # what @frozen(kw_only=True) builds (see types/_model.py)
        del jsonrpc, result
        __slots__ = ("jsonrpc", "id", "result", "__weakref__")
        __attrs_attrs__ = _fields(lambda: (
            _field("jsonrpc", Literal["2.0"], "2.0"),
            _field("id", JsonRpcId),
            _field("result", R, hash=False),
        ))
        __attrs_props__ = _PROPS
        __match_args__ = ()
        __setattr__ = _frozen_setattrs
        __delattr__ = _frozen_delattrs
        __ne__ = _ne
        __getstate__ = _getstate
        __setstate__ = _setstate
        if _REPLACE:
            __replace__ = _evolve

        def __init__(self, *, jsonrpc: Literal["2.0"] = "2.0", id: JsonRpcId, result: R) -> None:
            _setattr = _setattr_of(self)
            _setattr("jsonrpc", jsonrpc)
            _setattr("id", id)
            _setattr("result", result)

        def __repr__(self):
            seen = _repr_enter(self)
            if seen is None:
                return "..."
            try:
                return f'{self.__class__.__qualname__.rsplit(">.", 1)[-1]}(jsonrpc={self.jsonrpc!r}, id={self.id!r}, result={self.result!r})'
            finally:
                seen.remove(id(self))

        def __eq__(self, other):
            if other.__class__ is not self.__class__:
                return NotImplemented
            return (
                self.jsonrpc == other.jsonrpc
                and self.id == other.id
                and self.result == other.result
            )

        def __hash__(self):
            return hash((-426590527950699426, self.jsonrpc, self.id))


@frozen(kw_only=True)
class JsonRpcError:
    """The ``error`` member of an error response."""

    code: int
    """A JSON-RPC (``JsonRpcErrorCode``) or AHP (``AhpErrorCode``) error code."""
    message: str
    data: Any = field(default=None, hash=False)
    """Extra information; for some AHP codes a typed structure (see ``AHP_ERROR_DATA``)."""
    if not TYPE_CHECKING:  # what @frozen(kw_only=True) builds (see types/_model.py)
        del data
        __slots__ = ("code", "message", "data", "__weakref__")
        __attrs_attrs__ = _fields(lambda: (
            _field("code", int),
            _field("message", str),
            _field("data", Any, None, hash=False),
        ))
        __attrs_props__ = _PROPS
        __match_args__ = ()
        __setattr__ = _frozen_setattrs
        __delattr__ = _frozen_delattrs
        __ne__ = _ne
        __getstate__ = _getstate
        __setstate__ = _setstate
        if _REPLACE:
            __replace__ = _evolve

        def __init__(self, *, code: int, message: str, data: Any = None) -> None:
            _setattr = _setattr_of(self)
            _setattr("code", code)
            _setattr("message", message)
            _setattr("data", data)

        def __repr__(self):
            seen = _repr_enter(self)
            if seen is None:
                return "..."
            try:
                return f'{self.__class__.__qualname__.rsplit(">.", 1)[-1]}(code={self.code!r}, message={self.message!r}, data={self.data!r})'
            finally:
                seen.remove(id(self))

        def __eq__(self, other):
            if other.__class__ is not self.__class__:
                return NotImplemented
            return (
                self.code == other.code
                and self.message == other.message
                and self.data == other.data
            )

        def __hash__(self):
            return hash((-13413148047968322, self.code, self.message))


@frozen(kw_only=True)
class JsonRpcErrorResponse:
    """An error response; ``id`` is ``None`` when the request's id could not be read."""

    jsonrpc: Literal["2.0"] = "2.0"
    id: JsonRpcId | None
    error: JsonRpcError
    if not TYPE_CHECKING:  # what @frozen(kw_only=True) builds (see types/_model.py)
        del jsonrpc
        __slots__ = ("jsonrpc", "id", "error", "__weakref__")
        __attrs_attrs__ = _fields(lambda: (
            _field("jsonrpc", Literal["2.0"], "2.0"),
            _field("id", JsonRpcId | None),
            _field("error", JsonRpcError),
        ))
        __attrs_props__ = _PROPS
        __match_args__ = ()
        __setattr__ = _frozen_setattrs
        __delattr__ = _frozen_delattrs
        __ne__ = _ne
        __getstate__ = _getstate
        __setstate__ = _setstate
        if _REPLACE:
            __replace__ = _evolve

        def __init__(self, *, jsonrpc: Literal["2.0"] = "2.0", id: JsonRpcId | None, error: JsonRpcError) -> None:
            _setattr = _setattr_of(self)
            _setattr("jsonrpc", jsonrpc)
            _setattr("id", id)
            _setattr("error", error)

        def __repr__(self):
            seen = _repr_enter(self)
            if seen is None:
                return "..."
            try:
                return f'{self.__class__.__qualname__.rsplit(">.", 1)[-1]}(jsonrpc={self.jsonrpc!r}, id={self.id!r}, error={self.error!r})'
            finally:
                seen.remove(id(self))

        def __eq__(self, other):
            if other.__class__ is not self.__class__:
                return NotImplemented
            return (
                self.jsonrpc == other.jsonrpc
                and self.id == other.id
                and self.error == other.error
            )

        def __hash__(self):
            return hash((3441222574158780958, self.jsonrpc, self.id, self.error))


AhpErrorResponse: TypeAlias = JsonRpcErrorResponse
"""An error response carrying an AHP error code (same shape as ``JsonRpcErrorResponse``)."""

JsonRpcMessage: TypeAlias = JsonRpcRequest[Any] | JsonRpcNotification[Any] | JsonRpcSuccessResponse[Any] | JsonRpcErrorResponse
"""Any JSON-RPC message, told apart by its members (``method``/``id``/``result``/``error``)."""
