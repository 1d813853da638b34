"""The codec: AHP's wire rules, as one private cattrs converter and typed helpers.

The model (:mod:`agenthost_protocol.types`) says *what* the protocol's values
are; this module says how they look as JSON:

* Python fields are snake_case, wire keys camelCase (or the spec's own name,
  recorded in the field's ``metadata["wire"]``, e.g. ``_meta``).
* Optional fields decode an absent key (or ``null``) to ``None`` and encode
  ``None`` as an absent key, never ``null``.
* Tagged unions pick their variant by the discriminator (``type``, ``kind``,
  ``status``, ``state`` or ``approved``); an open union keeps an unknown
  discriminator as ``Unknown<Union>(tag, raw)`` and encodes ``raw`` verbatim.
* Open string enums (``Enum | str``) keep unknown strings; ``SessionStatus``
  keeps unknown bits; integers are never narrowed (int64 sequence numbers).
* Unknown keys on known structs are dropped.
* ``Snapshot.state`` is decoded by the channel kind of ``Snapshot.resource``,
  else by shape.
* Values are checked strictly: a string is not an int, a bool is not a
  number, a list is not a string.

Decoding errors are :class:`~agenthost_protocol.errors.RemoteProtocolError`
subclasses carrying the JSON-RPC error code and the path of the offending
value: :class:`~agenthost_protocol.errors.ParseError` (-32700),
:class:`~agenthost_protocol.errors.InvalidRequest` (-32600),
:class:`~agenthost_protocol.errors.MethodNotFound` (-32601) and
:class:`~agenthost_protocol.errors.InvalidParams` (-32602).  Nothing else
escapes, whatever the input.

Speed (docs/performance.md): each model class is decoded and encoded by a
function generated for it on first use, equivalent to cattrs' own generated
functions (the tests compare the two on generated and mutated values); JSON
text is parsed with orjson when the ``fast`` extra is installed, falling back
to the standard library for every text orjson would read differently, so the
values and the errors are the same either way (:data:`JSON_BACKEND` names the
parser in use).
"""

from __future__ import annotations

import importlib
import json
import math
import re
import sys
import types as _pytypes
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from enum import Enum, IntFlag
from typing import Any, Final, Literal, TypeVar, Union, cast, get_args, get_origin, overload

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    IterableValidationNote,
)
from cattrs.fns import identity
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.gen._consts import already_generating
from cattrs.gen._shared import find_structure_handler

from . import types as t
from ._json import JsonValueError, copy_json, lone_surrogate_at, repair_json
from .channels import STATE_TYPES, channel_kind
from .errors import (
    InvalidParams,
    InvalidRequest,
    LocalProtocolError,
    MethodNotFound,
    ParseError,
    ProtocolError,
)
from .methods import METHODS, AnyMessage, MessageKind
from .types._tags import ACTION_CLASSES, TAGGED_UNIONS
from .types._text import TextBuffer, as_text, optional_text

_model_plain_init: Callable[[type], bool] | None
try:
    # The generated model writes the methods attrs would (``types/_model.py``).
    from .types._model import plain_init as _model_plain_init
except ImportError:  # pragma: no cover - a model whose classes attrs builds
    _model_plain_init = None

__all__ = [
    "JSON_BACKEND",
    "converter",
    "dump",
    "dumps",
    "parse_action",
    "parse_envelope",
    "parse_json",
    "parse_message",
    "repair",
    "structure",
    "unstructure",
]

T = TypeVar("T")
_NoneType = type(None)


class _Fail(Exception):
    """A decoding failure at ``path`` (segments relative to the current value)."""

    def __init__(self, message: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _expected(what: str, value: Any) -> _Fail:
    return _Fail(f"expected {what}, got {_kind(value)}")


# ---------------------------------------------------------------------------
# Field names
# ---------------------------------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.lstrip("_").rstrip("_").split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def wire_name(a: attrs.Attribute[Any]) -> str:
    """The wire key of an attrs field."""
    return cast(str, a.metadata.get("wire") or _camel(a.name))


# ---------------------------------------------------------------------------
# Scalars
# ---------------------------------------------------------------------------


def _s_str(value: Any, _: Any) -> str:
    if type(value) is str:
        if not value.isascii() and lone_surrogate_at(value) >= 0:
            raise _Fail("a string holds a lone surrogate")
        return value
    if isinstance(value, str):
        return _s_str(str(value), _)
    raise _expected("a string", value)


def _s_int(value: Any, _: Any) -> int:
    if type(value) is int:
        return value
    if isinstance(value, float) and not isinstance(value, bool):
        # JavaScript peers have one number type: an integral float is an int;
        # a fractional one is kept rather than silently truncated.
        if value.is_integer():
            return int(value)
        if math.isfinite(value):
            return value  # type: ignore[return-value]
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise _expected("an integer", value)


def _s_float(value: Any, _: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise _expected("a number", value)


def _s_bool(value: Any, _: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise _expected("a boolean", value)


def _json_copy(value: Any) -> Any:
    """A validated deep copy of a JSON value: model values never alias the caller's."""
    try:
        return copy_json(value)
    except JsonValueError as e:
        raise _Fail(e.message, e.path) from None


def _s_any(value: Any, _: Any) -> Any:
    return _json_copy(value)


def _s_text(value: Any, _: Any) -> TextBuffer:
    if isinstance(value, str):
        return TextBuffer.of(_s_str(value, _))
    raise _expected("a string", value)


def _s_status(value: Any, _: Any) -> t.SessionStatus:
    if type(value) is int and value >= 0:
        return t.SessionStatus(value)
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return t.SessionStatus(int(value))
    raise _expected("a non-negative integer bitset", value)


# ---------------------------------------------------------------------------
# Hook factories
# ---------------------------------------------------------------------------


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, _pytypes.UnionType)


def _union_members(tp: Any) -> tuple[Any, ...]:
    return tuple(a for a in get_args(tp) if a is not _NoneType)


_TAGGED: dict[frozenset[Any], tuple[str, dict[Any, Any], type | None]] = {}
for _alias, (_key, _tags, _unknown) in TAGGED_UNIONS.items():
    _plain = {(tag.value if isinstance(tag, Enum) else tag): cls for tag, cls in _tags.items()}
    _TAGGED[frozenset(get_args(_alias))] = (_key, _plain, _unknown)
_ACTION_TAGS: dict[str, Any] = {
    (k.value if isinstance(k, Enum) else k): v for k, v in ACTION_CLASSES.items()
}
_STATE_ACTION_MEMBERS = frozenset(get_args(t.StateAction))
_SNAPSHOT_STATES = frozenset(get_args(t.SnapshotState))
_JSON_PRIMITIVE = frozenset(get_args(t.JsonPrimitive)) - {_NoneType}

# Shape detection order of the Rust SDK: the most specific required keys first.
_SHAPE_ORDER = (
    t.SessionState, t.ChatState, t.TerminalState, t.ChangesetState,
    t.ResourceWatchState, t.AnnotationsState, t.RootState,
)


_PROTOCOL_NOTIFICATION = frozenset(get_args(t.ProtocolNotification))
# Most required keys first; the three OTLP params share one shape.
_NOTIFICATION_SHAPES = (
    t.SessionSummaryChangedParams, t.ProgressParams, t.SessionAddedParams,
    t.SessionRemovedParams, t.AuthRequiredParams,
)


def _required_keys(cls: type) -> frozenset[str]:
    return frozenset(
        wire_name(a) for a in attrs.fields(cls) if a.default is attrs.NOTHING
    )


class _Codec:
    """Builds and registers every hook on one converter."""

    def __init__(self, conv: cattrs.Converter, *, generated: bool = True) -> None:
        self.c = conv
        self.generated = generated
        """Class hooks are this module's generated functions (``False``: cattrs' own)."""
        self.required: dict[type, frozenset[str]] = {
            cls: _required_keys(cls) for cls in (*_SHAPE_ORDER, *_NOTIFICATION_SHAPES)
        }
        # Per-converter hook tables, filled on first use of each key.
        self.action_hooks: dict[str, tuple[type, Callable[[Any, Any], Any]]] = {}
        self.params_hooks: dict[str, tuple[Any, Callable[[Any, Any], Any], bool]] = {}
        self.unstructure_hooks: dict[type, Callable[[Any], Any]] = {}
        plain = _constructor if generated else (lambda cls: cls)
        self.new_request: Callable[..., Any] = plain(t.JsonRpcRequest)
        self.new_notification: Callable[..., Any] = plain(t.JsonRpcNotification)

    def params_hook(self, method: str) -> tuple[Any, Callable[[Any, Any], Any], bool]:
        """The params type and structure hook of a known method, and whether it is a request."""
        hit = self.params_hooks.get(method)
        if hit is None:
            info = METHODS[method]
            hit = self.params_hooks[method] = (
                info.params, self.c.get_structure_hook(info.params),
                info.kind is MessageKind.REQUEST,
            )
        return hit

    def unstructure_as_runtime_type(self, value: Any) -> Any:
        """``converter.unstructure(value, unstructure_as=type(value))``, its hook looked up once."""
        tp = type(value)
        hook = self.unstructure_hooks.get(tp)
        if hook is None:
            hook = self.unstructure_hooks[tp] = self.c.get_unstructure_hook(tp)
        return hook(value)

    # -- unions ---------------------------------------------------------------
    def union_structure(self, tp: Any) -> Callable[[Any, Any], Any]:
        members = _union_members(tp)
        optional = len(members) != len(get_args(tp))
        inner = self._union_inner(frozenset(members), members)

        if not optional:
            return inner

        def optional_hook(value: Any, _: Any) -> Any:
            return None if value is None else inner(value, _)

        return optional_hook

    def _union_inner(
        self, key: frozenset[Any], members: tuple[Any, ...]
    ) -> Callable[[Any, Any], Any]:
        c = self.c
        if len(members) == 1:
            (only,) = members
            hook = c.get_structure_hook(only)
            return lambda value, _: hook(value, only)
        if key == _STATE_ACTION_MEMBERS:
            return self.structure_action
        if t.UnknownAction in key and key <= _STATE_ACTION_MEMBERS:
            # A channel's action union (ChatAction ...): any action, of that channel.
            allowed = tuple(key)

            def channel_action(value: Any, _: Any) -> Any:
                action = self.structure_action(value, None)
                if not isinstance(action, allowed):
                    kind = _tag_text(action.type)
                    raise _Fail(f"action {kind!r} does not belong here", ("type",))
                return action

            return channel_action
        if key == _PROTOCOL_NOTIFICATION:
            return self.structure_notification_params
        if key in _TAGGED:
            tag_key, tags, unknown = _TAGGED[key]
            return self._tagged(tag_key, tags, unknown)
        if key == _SNAPSHOT_STATES:
            return lambda value, _: self.structure_state_by_shape(value)
        structs = [m for m in members if attrs.has(m)]
        if len(members) == 2 and str in members and len(structs) == 1:
            # ``StringOrMarkdown``, ``ToolInput``: told apart by JSON type.
            (struct_cls,) = structs
            struct_hook = c.get_structure_hook(struct_cls)
            what = "a string or {markdown}" if struct_cls is t.MarkdownString else (
                f"a string or a {struct_cls.__name__} object"
            )

            def string_or_struct(value: Any, _: Any) -> Any:
                if isinstance(value, str):
                    return value
                if isinstance(value, dict):
                    return struct_hook(value, struct_cls)
                raise _expected(what, value)

            return string_or_struct
        if key == _JSON_PRIMITIVE:

            def primitive(value: Any, _: Any) -> Any:
                if value is None or isinstance(value, (str, int, float, bool)):
                    return value
                raise _expected("a string, number, boolean or null", value)

            return primitive
        enums = [m for m in members if isinstance(m, type) and issubclass(m, Enum)]
        if len(members) == 2 and len(enums) == 1 and str in members:
            enum_cls = enums[0]

            def open_enum(value: Any, _: Any) -> Any:
                if not isinstance(value, str):
                    raise _expected("a string", value)
                try:
                    return enum_cls(value)
                except ValueError:
                    return value

            return open_enum
        if set(members) <= {int, str}:
            def id_like(value: Any, _: Any) -> Any:
                if isinstance(value, (int, str)) and not isinstance(value, bool):
                    return value
                raise _expected("a number or string", value)

            return id_like
        raise TypeError(f"no wire rule for union {members!r}")  # a bug in the model

    def _tagged(
        self, tag_key: str, tags: dict[Any, Any], unknown: type | None
    ) -> Callable[[Any, Any], Any]:
        c = self.c
        # each variant's hook is built the first time its tag is seen: a session's
        # snapshot names a few variants of many unions (the first decode of one built
        # some 170 hooks, most never used)
        hooks: dict[Any, tuple[Any, Callable[[Any, Any], Any]]] = {}

        def tagged(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise _expected("an object", value)
            if tag_key not in value:
                raise _Fail("required field missing", (tag_key,))
            tag = value[tag_key]
            if tag_key == "approved":
                known = isinstance(tag, bool)
            elif type(tag) is str:
                known = True
            else:
                # Tags are strings: a number, null or array is a malformed value,
                # not a variant from a newer peer.
                raise _Fail(f"the {tag_key!r} discriminator must be a string", (tag_key,))
            hit = hooks.get(tag) if known else None
            if hit is None and known:
                cls = tags.get(tag)
                if cls is not None:
                    hit = hooks[tag] = (cls, c.get_structure_hook(cls))
            if hit is not None:
                cls, hook = hit
                return hook(value, cls)
            if unknown is None:
                raise _Fail(f"unknown {tag_key} {tag!r}", (tag_key,))
            # Each Unknown<Union> names its tag field after the wire key.
            return unknown(**{tag_key: _s_str(tag, None), "raw": _json_copy(value)})

        return tagged

    def structure_action(self, value: Any, _: Any) -> Any:
        if type(value) is not dict:
            raise _expected("an object", value)
        tag = value.get("type", _MISSING)
        if tag is _MISSING:
            raise _Fail("required field missing", ("type",))
        if type(tag) is not str:
            raise _Fail("the 'type' discriminator must be a string", ("type",))
        hit = self.action_hooks.get(tag)
        if hit is None:
            target = _ACTION_TAGS.get(tag)
            if target is None:
                return t.UnknownAction(type=_s_str(tag, None), raw=_json_copy(value))
            # Resolved lazily: the hooks of the action classes are built on first use.
            hit = self.action_hooks[tag] = (target, self.c.get_structure_hook(target))
        cls, hook = hit
        return hook(value, cls)

    def by_shape(self, value: Any, candidates: tuple[type, ...]) -> Any:
        """Decode ``value`` as the first of ``candidates`` whose required keys it has."""
        if type(value) is not dict:
            raise _expected("an object", value)
        keys = value.keys()
        for cls in candidates:
            if self.required[cls] <= keys:
                return self.c.structure(value, cls)
        return None

    def structure_notification_params(self, value: Any, _: Any) -> Any:
        """``ProtocolNotification`` by shape (its members carry no tag)."""
        params = self.by_shape(value, _NOTIFICATION_SHAPES)
        if params is not None:
            return params
        if "payload" in value:
            raise _Fail(
                "OTLP export params look alike; decode the notification with parse_message, "
                "which picks the type by method"
            )
        raise _Fail("not the params of any protocol notification")

    def structure_state_by_shape(self, value: Any) -> Any:
        state = self.by_shape(value, _SHAPE_ORDER)
        if state is None:
            raise _Fail("not the state of any channel kind")
        return state

    # -- containers -----------------------------------------------------------
    def tuple_structure(self, tp: Any) -> Callable[[Any, Any], Any]:
        (item,) = get_args(tp)[:1]
        hook = self.c.get_structure_hook(item)

        def seq(value: Any, _: Any) -> tuple[Any, ...]:
            if type(value) is not list:
                raise _expected("an array", value)
            try:
                return tuple([hook(v, item) for v in value])
            except Exception:  # again, one by one, for the index of the failure
                pass
            out = []
            for i, v in enumerate(value):
                try:
                    out.append(hook(v, item))
                except Exception as e:
                    raise _nest(e, i) from None
            return tuple(out)

        return seq

    def mapping_structure(self, tp: Any) -> Callable[[Any, Any], Any]:
        args = get_args(tp)
        item = args[1] if len(args) == 2 else Any
        if item is Any:

            def obj(value: Any, _: Any) -> dict[str, Any]:
                if type(value) is not dict:
                    raise _expected("an object", value)
                copied: dict[str, Any] = _json_copy(value)
                return copied

            return obj
        hook = self.c.get_structure_hook(item)

        def mapping(value: Any, _: Any) -> dict[str, Any]:
            if type(value) is not dict:
                raise _expected("an object", value)
            out = {}
            for k, v in value.items():
                try:
                    out[k] = hook(v, item)
                except Exception as e:
                    raise _nest(e, k) from None
            return out

        return mapping

    def literal_structure(self, tp: Any) -> Callable[[Any, Any], Any]:
        allowed = get_args(tp)

        def literal(value: Any, _: Any) -> Any:
            for a in allowed:
                if value == a and type(value is True) is type(a is True) and (
                    isinstance(a, bool) == isinstance(value, bool)
                ):
                    return a
            raise _Fail(f"expected one of {[getattr(a, 'value', a) for a in allowed]!r}")

        return literal

    # -- classes ----------------------------------------------------------------
    def class_structure(self, cls: type) -> Callable[[Any, Any], Any]:
        if cls is t.Snapshot:
            return self.snapshot_structure()
        if cls in _UNKNOWN_TAG_KEYS:
            # An Unknown<Union> on its own: its wire form is the raw object.
            tag_key = _UNKNOWN_TAG_KEYS[cls]

            def unknown(value: Any, _: Any) -> Any:
                if type(value) is not dict:
                    raise _expected("an object", value)
                if tag_key not in value:
                    raise _Fail("required field missing", (tag_key,))
                tag = value[tag_key]
                if type(tag) is not str:
                    raise _Fail(f"the {tag_key!r} discriminator must be a string", (tag_key,))
                return cls(**{tag_key: _s_str(tag, None), "raw": _json_copy(value)})

            return unknown
        if self.generated:
            generated = _generate_structure(self.c, cls)
            if generated is not None:
                return generated
        fields = attrs.fields(cls)
        overrides = {a.name: override(rename=wire_name(a)) for a in fields}
        inner: Callable[[Any, Any], Any] = make_dict_structure_fn(
            cls, self.c, _cattrs_use_alias=True, **overrides  # type: ignore[arg-type]
        )

        def struct(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise _expected("an object", value)
            return inner(value, cls)

        return struct

    def snapshot_structure(self) -> Callable[[Any, Any], Any]:
        c = self.c

        def snapshot(value: Any, _: Any) -> t.Snapshot:
            if type(value) is not dict:
                raise _expected("an object", value)
            for key in ("resource", "state", "fromSeq"):
                if key not in value:
                    raise _Fail("required field missing", (key,))
            resource = _field(_s_str, value, "resource")
            from_seq = _field(_s_int, value, "fromSeq")
            kind = channel_kind(resource)
            state_cls = STATE_TYPES.get(kind) if kind is not None else None
            try:
                if state_cls is None:
                    state = self.structure_state_by_shape(value["state"])
                else:
                    state = c.structure(value["state"], state_cls)
            except Exception as e:
                raise _nest(e, "state") from None
            return t.Snapshot(resource=resource, state=state, from_seq=from_seq)

        return snapshot

    def class_unstructure(self, cls: type) -> Callable[[Any], Any]:
        if cls in _UNKNOWN_CLASSES:
            # A copy: encoding never hands out the model's own objects.
            return lambda obj: copy_json(obj.raw)
        if self.generated:
            generated = _generate_unstructure(self, cls)
            if generated is not None:
                return generated
        fields = attrs.fields(cls)
        overrides = {
            a.name: override(rename=wire_name(a), omit_if_default=a.default is None)
            for a in fields
        }
        return make_dict_unstructure_fn(cls, self.c, _cattrs_use_alias=True, **overrides)  # type: ignore[arg-type]

    # -- messages ---------------------------------------------------------------
    def parse_message(
        self,
        data: bytes | bytearray | memoryview | str | Mapping[str, Any],
        result_method: Callable[[Any], str | None] | Mapping[Any, str] | None,
    ) -> AnyMessage:
        """:func:`parse_message` with this codec's converter."""
        obj = _JSON.loads(data) if isinstance(data, (bytes, str, bytearray, memoryview)) else data
        if type(obj) is not dict and not isinstance(obj, Mapping):
            raise InvalidRequest(f"expected a JSON-RPC object, got {_kind(obj)}", path="$")
        if obj.get("jsonrpc") != "2.0":
            raise InvalidRequest('"jsonrpc" must be "2.0"', path="$.jsonrpc")
        has_id = "id" in obj
        msg_id = obj.get("id")
        if has_id and not (
            msg_id is None or (isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool))
        ):
            raise InvalidRequest("id must be a number or a string", path="$.id")
        if "method" in obj:
            method = obj["method"]
            known = self.params_hooks.get(method) if type(method) is str else None
            if known is not None and known[2] is has_id and "params" in obj:
                # A method seen before, of the right kind, with params: the checks
                # below would all pass.
                params_type, hook, is_request = known
                try:
                    params = hook(obj["params"], params_type)
                except Exception as e:
                    raise _raise(e, ("params",), request_id=msg_id, respond=is_request) from None
                if not is_request:
                    return cast("AnyMessage", self.new_notification(method=method, params=params))
                if msg_id is None:
                    raise InvalidRequest("a request id must not be null", path="$.id")
                return cast("AnyMessage", self.new_request(id=msg_id, method=method, params=params))
            if not isinstance(method, str):
                raise InvalidRequest("method must be a string", path="$.method")
            info = METHODS.get(method)
            is_request = has_id
            # A notification is never answered, whatever is wrong with it (§5).
            if info is None or (info.kind is MessageKind.REQUEST) != is_request:
                what = "request" if is_request else "notification"
                raise MethodNotFound(f"unknown {what} method {method!r}", path="$.method",
                                     request_id=msg_id, respond=is_request)
            if "params" not in obj:
                raise InvalidParams("params missing", path="$.params", request_id=msg_id,
                                    respond=is_request)
            params_type, hook, _ = self.params_hook(method)
            try:
                params = hook(obj["params"], params_type)
            except Exception as e:
                raise _raise(e, ("params",), request_id=msg_id, respond=is_request) from None
            if is_request:
                if msg_id is None:
                    raise InvalidRequest("a request id must not be null", path="$.id")
                return cast("AnyMessage", self.new_request(id=msg_id, method=method, params=params))
            return cast("AnyMessage", self.new_notification(method=method, params=params))
        if not has_id:
            raise InvalidRequest("neither a request, a notification nor a response", path="$")
        if "result" in obj and "error" not in obj:
            if msg_id is None:
                raise InvalidRequest("a success response id must not be null", path="$.id",
                                     respond=False)
            result = obj["result"]
            method_name: str | None = None
            if result_method is not None:
                method_name = (
                    result_method.get(msg_id) if isinstance(result_method, Mapping)
                    else result_method(msg_id)
                )
            info = METHODS.get(method_name) if method_name is not None else None
            if info is not None and info.kind is MessageKind.REQUEST:
                if info.result is None:
                    if result is not None:
                        raise InvalidParams("expected a null result", path="$.result",
                                            request_id=msg_id, respond=False)
                else:
                    try:
                        result = self.c.structure(result, info.result)
                    except Exception as e:
                        # A response is never answered: report it, send nothing.
                        raise _raise(e, ("result",), request_id=msg_id, respond=False) from None
            return t.JsonRpcSuccessResponse(id=msg_id, result=result)
        if "error" in obj and "result" not in obj:
            try:
                error = self.c.structure(obj["error"], t.JsonRpcError)
            except Exception as e:
                raise _raise(
                    e, ("error",), InvalidRequest, request_id=msg_id, respond=False
                ) from None
            return t.JsonRpcErrorResponse(id=msg_id, error=error)
        raise InvalidRequest("a response has exactly one of result and error", path="$",
                             request_id=msg_id, respond=False)

    def structure_raw_message(self, value: Any, _: Any) -> t.JsonRpcMessage:
        """``JsonRpcMessage`` with raw params and results (the round-trip corpus' type)."""
        if type(value) is not dict:
            raise _expected("an object", value)
        if value.get("jsonrpc") != "2.0":
            raise _Fail('must be "2.0"', ("jsonrpc",))
        if "method" in value:
            method = _field(_s_str, value, "method")
            params = value.get("params")
            if "id" in value:
                return t.JsonRpcRequest(
                    id=_field(_s_id, value, "id"), method=method, params=params
                )
            return t.JsonRpcNotification(method=method, params=params)
        if "result" in value:
            return t.JsonRpcSuccessResponse(id=_field(_s_id, value, "id"), result=value["result"])
        if "error" in value:
            error = self.c.structure(value["error"], t.JsonRpcError)
            msg_id = value.get("id")
            return t.JsonRpcErrorResponse(
                id=None if msg_id is None else _field(_s_id, value, "id"), error=error
            )
        raise _Fail("neither a request, a notification nor a response")

    def structure_raw_message_as(self, value: Any, tp: Any) -> t.JsonRpcMessage:
        """A JSON-RPC message with raw params and result, of the kind ``tp`` names."""
        msg = self.structure_raw_message(value, tp)
        expected: type = get_origin(tp) or tp
        if tp != t.JsonRpcMessage and type(msg) is not expected:
            raise _Fail(f"not a {expected.__name__}")
        return msg

    def unstructure_message(self, msg: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"jsonrpc": "2.0"}
        if isinstance(msg, t.JsonRpcNotification):
            out["method"] = msg.method
            if msg.params is not None:
                out["params"] = self.c.unstructure(msg.params)
        elif isinstance(msg, t.JsonRpcRequest):
            out["id"] = msg.id
            out["method"] = msg.method
            if msg.params is not None:
                out["params"] = self.c.unstructure(msg.params)
        elif isinstance(msg, t.JsonRpcSuccessResponse):
            out["id"] = msg.id
            out["result"] = self.c.unstructure(msg.result)
        else:
            out["id"] = msg.id
            out["error"] = self.c.unstructure(msg.error, t.JsonRpcError)
        return out


# ---------------------------------------------------------------------------
# Generated class hooks
# ---------------------------------------------------------------------------
#
# One straight-line function per model class, written on the first use of the
# class, in place of cattrs' ``make_dict_structure_fn`` /
# ``make_dict_unstructure_fn``.  They do what those do (the same field hooks,
# the same first error in field order, the same key order when encoding) and
# skip their per-field bookkeeping; common leaf types (``str``, ``int``,
# ``bool``, a string tag, an open string enum) are checked inline and fall back
# to the field's own hook for anything the inline test does not accept.
# ``_make_converter(generated=False)`` builds the cattrs-based converter the
# tests compare these functions with.


def _literal_str(tp: Any) -> Any:
    """The one string value of ``Literal[x]`` (a ``str`` or ``str`` enum member), or ``None``."""
    if not _is_literal(tp):
        return None
    args = get_args(tp)
    if len(args) != 1 or not isinstance(args[0], str):
        return None
    return args[0]


def _open_enum(tp: Any) -> type[Enum] | None:
    """``E`` for an open string enum field type ``E | str`` (``None`` dropped)."""
    if not _is_union(tp):
        return None
    members = _union_members(tp)
    if len(members) != 2 or str not in members:
        return None
    (other,) = (m for m in members if m is not str)
    if not (isinstance(other, type) and issubclass(other, str) and issubclass(other, Enum)):
        return None
    if "_missing_" in vars(other):
        return None  # a lookup that is not the value table
    return other


# Names that recur across a chat, each tool call and message carrying its own
# copy: the decoder hands out one string per value instead (``sys.intern``,
# whose table holds a string only while something else does), so a long chat
# keeps one ``"grep"``, not one per call.  Ids and text are left alone: they
# do not repeat.
_SHARED_STRINGS: Final = frozenset({"tool_name", "display_name", "client_id", "customization_id"})


def _structure_check(
    tp: Any, conv: cattrs.Converter, ns: dict[str, Any], i: int, converter: Any = None
) -> str | None:
    """An inline test for the common values of ``tp`` and the expression of their result.

    Returns ``"test\\0result"`` (both in terms of ``v``), or ``None`` when ``tp``
    has no inline form.  Each form returns exactly what the type's hook
    returns for the values it accepts.
    """
    if tp is str and conv.get_structure_hook(str) is _s_str:
        return "type(v) is str and v.isascii()\0v"
    if tp is int and conv.get_structure_hook(int) is _s_int:
        return "type(v) is int\0v"
    if tp is bool and conv.get_structure_hook(bool) is _s_bool:
        return "v is True or v is False\0v"
    if tp is float and conv.get_structure_hook(float) is _s_float:
        return "type(v) is float or type(v) is int\0v"
    if tp is TextBuffer and conv.get_structure_hook(TextBuffer) is _s_text and converter in (
        as_text, optional_text
    ):
        # ``_s_text`` wraps the string in a buffer, which the converter keeps; the
        # converter wraps the string itself just the same.
        return "type(v) is str and v.isascii()\0v"
    literal = _literal_str(tp)
    if literal is not None:
        ns[f"l{i}"] = literal
        ns[f"lv{i}"] = str.__str__(literal)
        return f"type(v) is str and v == lv{i}\0l{i}"
    enum_cls = _open_enum(tp)
    if enum_cls is not None:
        ns[f"m{i}"] = dict(enum_cls._value2member_map_)
        return f"type(v) is str\0m{i}.get(v, v)"
    if _string_or_struct(tp):
        return "type(v) is str\0v"  # the hook keeps any string as it is
    return None


def _string_or_struct(tp: Any) -> bool:
    """``str | S`` told apart by JSON type (``StringOrMarkdown``, ``ToolInput``)."""
    if not _is_union(tp):
        return False
    members = _union_members(tp)
    key = frozenset(members)
    return (
        len(members) == 2 and str in members
        and sum(1 for m in members if attrs.has(m)) == 1
        and key not in _TAGGED and key not in (_SNAPSHOT_STATES, _PROTOCOL_NOTIFICATION)
        and t.UnknownAction not in key
    )


@contextmanager
def _generating(cls: type) -> Iterator[None]:
    """Mark ``cls`` as being generated, as cattrs does: a nested request for it is a cycle.

    A field whose type leads back to a class being generated gets a late-bound
    hook (``converter.structure`` / ``converter.unstructure``), as in cattrs.
    """
    try:
        working_set = already_generating.working_set
    except AttributeError:
        working_set = already_generating.working_set = set()
    if cls in working_set:
        raise RecursionError
    working_set.add(cls)
    try:
        yield
    finally:
        working_set.remove(cls)
        if not working_set:
            del already_generating.working_set


def _generate_structure(conv: cattrs.Converter, cls: type) -> Callable[[Any, Any], Any] | None:
    """The structure hook of an attrs class, or ``None`` for a class it does not handle."""
    if not _plain_class(cls):
        return None
    with _generating(cls):
        return _structure_function(conv, cls)


def _structure_function(conv: cattrs.Converter, cls: type) -> Callable[[Any, Any], Any] | None:
    if any(isinstance(a.type, str) for a in attrs.fields(cls)):
        attrs.resolve_types(cls)
    fields = attrs.fields(cls)
    if any(
        not a.init or isinstance(a.default, attrs.Factory)  # type: ignore[arg-type]
        for a in fields
    ):
        return None
    ns: dict[str, Any] = {
        "_Fail": _Fail, "_nest": _nest, "_to_fail": _to_fail, "_expected": _expected,
    }
    lines = [
        "def structure(value, _):",
        "    if type(value) is not dict:",
        "        raise _expected('an object', value)",
    ]
    for i, a in enumerate(fields):
        key = wire_name(a)
        tp = a.type
        hook = find_structure_handler(a, tp, conv)
        ns[f"h{i}"], ns[f"t{i}"] = hook, tp
        out = f"a{i}"
        if hook is None:
            call = [f"{out} = v"]
        else:
            call = [
                "try:",
                f"    {out} = h{i}(v, t{i})",
                "except Exception as e:",
                f"    raise _nest(e, {key!r}) from None",
            ]
        # The union hook of ``X | None`` (or a late-bound ``converter.structure``,
        # which reaches it) maps null to None and anything else to X's hook.
        optional = (
            a.default is None and _is_union(tp) and _NoneType in get_args(tp)
            and hook is not None and not _is_raw_message(tp)
        )
        inner = _union_members(tp) if optional else (tp,)
        if optional and len(inner) == 1 and attrs.has(inner[0]):
            with suppress(RecursionError):  # X is being generated: keep the late-bound hook
                ns[f"h{i}"], ns[f"t{i}"] = conv.get_structure_hook(inner[0]), inner[0]
        check = _structure_check(
            inner[0] if len(inner) == 1 else _drop_none(tp), conv, ns, i, a.converter
        )
        body = call if check is None else [
            f"if {check.split(chr(0))[0]}:",
            f"    {out} = {check.split(chr(0))[1]}",
            "else:",
            *(f"    {line}" for line in call),
        ]
        if a.name in _SHARED_STRINGS and tp is str:
            ns["_intern"] = sys.intern
            body.append(f"{out} = _intern({out})")
        if a.default is attrs.NOTHING:
            lines += [
                "    try:",
                f"        v = value[{key!r}]",
                "    except KeyError:",
                f"        raise _Fail('required field missing', ({key!r},)) from None",
                *(f"    {line}" for line in body),
            ]
        elif optional:
            # Absent and null are both ``None``: the hook maps null to None.
            lines += [
                f"    v = value.get({key!r})",
                "    if v is None:",
                f"        {out} = None",
                "    else:",
                *(f"        {line}" for line in body),
            ]
        else:
            ns[f"d{i}"] = a.default
            lines += [
                f"    if {key!r} in value:",
                f"        v = value[{key!r}]",
                *(f"        {line}" for line in body),
                "    else:",
                f"        {out} = d{i}",
            ]
    lines += [f"    {line}" for line in _construct(cls, [f"a{i}" for i in range(len(fields))], ns)]
    return cast(
        "Callable[[Any, Any], Any]", _compile(lines, ns, f"structure {cls.__qualname__}")
    )


def _plain_init(cls: type) -> bool:
    """Whether ``cls.__init__`` only stores its arguments (converted) in the slots.

    True for an attrs class whose ``__init__`` attrs wrote (or the generated
    model wrote in its place, ``types/_model.py``), with slots that are
    exactly its fields, no validators, no pre- or post-init hook and plain
    converter functions: then storing the slots directly builds the very
    object ``__init__`` would, without its cost (a frozen class stores each
    field through ``object.__setattr__`` behind a bound-method lookup).
    """
    init = getattr(vars(cls).get("__init__"), "__code__", None)
    if init is None:
        return False
    # attrs's own ``__init__``, or the one ``tools/gen_model.py`` writes in its place.
    if not init.co_filename.startswith("<attrs generated") and not (
        _model_plain_init is not None and _model_plain_init(cls)
    ):
        return False
    if hasattr(cls, "__attrs_pre_init__") or hasattr(cls, "__attrs_post_init__"):
        return False
    fields = attrs.fields(cls)
    slots = {
        name
        for klass in cls.__mro__
        for name in ((klass.__dict__.get("__slots__") or ()) if klass is not object else ())
    }
    if slots - {"__weakref__"} != {a.name for a in fields}:
        return False
    return all(
        a.init and a.validator is None and not isinstance(a.converter, attrs.Converter)
        for a in fields
    )


def _construct(cls: type, values: list[str], ns: dict[str, Any]) -> list[str]:
    """Lines returning an instance of ``cls`` built from ``values`` (one per field, in order).

    A failure (a converter that raises) is reported as ``__init__`` failures are.
    """
    fields = attrs.fields(cls)
    ns["cls"] = cls
    if not _plain_init(cls):
        kwargs = ", ".join(f"{a.alias}={v}" for a, v in zip(fields, values, strict=True))
        return [
            "try:",
            f"    return cls({kwargs})",
            "except Exception as e:",
            "    raise _to_fail(e) from None",
        ]
    # The object is made as an instance of a private subclass whose stores are
    # plain slot stores (the frozen class's ``__setattr__`` raises), then given
    # its class: the subclass adds no slots, so the layouts are the same.  A
    # store costs a few nanoseconds instead of a call of ``object.__setattr__``.
    ns["_building"] = type(
        f"_Building{cls.__name__}",
        (cls,),
        {
            "__slots__": (),
            "__init__": object.__init__,  # calling the class allocates faster than ``__new__``
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
        },
    )
    stores = []
    for i, (a, v) in enumerate(zip(fields, values, strict=True)):
        if a.converter is not None:
            ns[f"c{i}"] = a.converter
        value = v if a.converter is None else f"c{i}({v})"
        stores.append(f"inst.{a.name} = {value}")
    lines = ["inst = _building()"]
    if any(a.converter is not None for a in fields):
        lines += ["try:", *(f"    {s}" for s in stores), "except Exception as e:",
                  "    raise _to_fail(e) from None"]
    else:
        lines += stores
    return [*lines, "inst.__class__ = cls", "return inst"]


def _constructor(cls: type) -> Callable[..., Any]:
    """``cls(**kwargs)``, made cheaper when ``cls`` has a plain ``__init__`` (``_plain_init``)."""
    fields = attrs.fields(cls)
    ns: dict[str, Any] = {"_to_fail": _to_fail}
    params = []
    for i, a in enumerate(fields):
        if a.default is attrs.NOTHING:
            params.append(a.alias)
        else:
            ns[f"d{i}"] = a.default
            params.append(f"{a.alias}=d{i}")
    lines = [f"def construct(*, {', '.join(params)}):"]
    lines += [f"    {line}" for line in _construct(cls, [a.alias for a in fields], ns)]
    return _compile(lines, ns, f"construct {cls.__qualname__}")


def _plain_class(cls: Any) -> bool:
    """A class that is not generic: its field types are all concrete."""
    return isinstance(cls, type) and get_origin(cls) is None and not getattr(
        cls, "__parameters__", ()
    )


def _drop_none(tp: Any) -> Any:
    """``tp`` without ``None``: the open-enum test looks at ``E | str``."""
    members = _union_members(tp)
    return Union[members] if len(members) > 1 else members[0]  # noqa: UP007


def _compile(lines: list[str], ns: dict[str, Any], name: str) -> Callable[..., Any]:
    code = compile("\n".join(lines), f"<agenthost_protocol.wire {name}>", "exec")
    exec(code, ns)
    fn = ns[lines[0][4:lines[0].index("(")]]
    return cast("Callable[..., Any]", fn)


def _unstructure_expr(
    codec: _Codec,
    tp: Any,
    handler: Callable[[Any], Any],
    var: str,
    *,
    ns: dict[str, Any],
    i: int,
    nonnull: bool,
) -> str:
    """The expression encoding the value ``var`` (known not to be ``None`` if ``nonnull``)."""
    conv = codec.c
    if handler is identity:
        return var
    ns[f"u{i}"] = handler
    if _is_union(tp) and not _is_message(tp):
        members = _union_members(tp)
        if len(members) == 1:
            if not nonnull:
                return f"u{i}({var})"
            try:
                inner = conv.get_unstructure_hook(members[0])
            except RecursionError:
                inner = conv.unstructure  # late-bound: X is being generated
            if inner is identity:
                return var
            ns[f"u{i}"] = inner
            return f"u{i}({var})"
        # Other unions encode by the runtime class of the value.
        enum_cls = _open_enum(tp)
        if enum_cls is not None and conv.get_unstructure_hook(enum_cls) is _enum_value and (
            conv.get_unstructure_hook(str) is identity
        ):
            ns[f"e{i}"] = enum_cls
            return (
                f"({var}._value_ if type({var}) is e{i} "
                f"else {var} if type({var}) is str else _rt({var}))"
            )
        return f"_rt({var})"
    if _is_literal(tp):
        literal = _literal_str(tp)
        if isinstance(literal, Enum):
            ns[f"e{i}"] = type(literal)
            return f"({var}._value_ if type({var}) is e{i} else u{i}({var}))"
        return f"u{i}({var})"
    if _is_tuple(tp) and not _is_message(tp) and conv.get_unstructure_hook(str) is identity:
        return f"[x if type(x) is str else _rt(x) for x in {var}]"
    return f"u{i}({var})"


def _generate_unstructure(codec: _Codec, cls: type) -> Callable[[Any], Any] | None:
    """The unstructure hook of an attrs class, or ``None`` for a class it does not handle."""
    if not _plain_class(cls):
        return None
    with _generating(cls):
        return _unstructure_function(codec, cls)


def _unstructure_function(codec: _Codec, cls: type) -> Callable[[Any], Any] | None:
    conv = codec.c
    if any(isinstance(a.type, str) for a in attrs.fields(cls)):
        attrs.resolve_types(cls)
    fields = attrs.fields(cls)
    if any(not a.init or isinstance(a.default, attrs.Factory) for a in fields):  # type: ignore[arg-type]
        return None
    ns: dict[str, Any] = {"_rt": codec.unstructure_as_runtime_type}
    always: list[str] = []
    omitted: list[str] = []
    for i, a in enumerate(fields):
        key = wire_name(a)
        try:
            handler = conv.get_unstructure_hook(a.type, cache_result=False)
        except RecursionError:
            handler = conv.unstructure  # late-bound, as cattrs does in a cycle
        if a.default is None:
            # Omitted when absent (``None``); ``is not None`` is what ``!= None`` is
            # for every value a field can hold.
            expr = _unstructure_expr(codec, a.type, handler, "v", ns=ns, i=i, nonnull=True)
            omitted += [
                f"    v = instance.{a.name}",
                "    if v is not None:",
                f"        res[{key!r}] = {expr}",
            ]
        else:
            expr = _unstructure_expr(
                codec, a.type, handler, f"instance.{a.name}", ns=ns, i=i, nonnull=False
            )
            always.append(f"{key!r}: {expr}")
    lines = [
        "def unstructure(instance):",
        f"    res = {{{', '.join(always)}}}",
        *omitted,
        "    return res",
    ]
    return cast("Callable[[Any], Any]", _compile(lines, ns, f"unstructure {cls.__qualname__}"))


_MISSING = object()
_UNKNOWN_TAG_KEYS: dict[type, str] = {
    u: key for (key, _, u) in TAGGED_UNIONS.values() if u is not None
} | {t.UnknownAction: "type"}
_UNKNOWN_CLASSES = frozenset(_UNKNOWN_TAG_KEYS)


def _field(hook: Callable[[Any, Any], T], value: dict[str, Any], key: str) -> T:
    try:
        return hook(value[key], None)
    except _Fail as e:
        raise _Fail(e.message, (key, *e.path)) from None


def _nest(e: Exception, segment: str | int) -> _Fail:
    """Prefix the path of a failure raised below ``segment``."""
    inner = _to_fail(e)
    return _Fail(inner.message, (segment, *inner.path))


def _to_fail(e: BaseException) -> _Fail:
    """Reduce a failure (ours or a cattrs exception group) to one message and path."""
    path: list[str | int] = []
    while True:
        if isinstance(e, _Fail):
            return _Fail(e.message, (*path, *e.path))
        if isinstance(e, BaseValidationError) and e.exceptions:
            sub = e.exceptions[0]
            for note in getattr(sub, "__notes__", ()):
                if isinstance(note, AttributeValidationNote):
                    cls = getattr(e, "cl", None)
                    path.append(_wire_of(cls, note.name))
                    break
                if isinstance(note, IterableValidationNote):
                    path.append(note.index)
                    break
            e = sub
            continue
        if isinstance(e, KeyError):
            return _Fail("required field missing", tuple(path))
        if isinstance(e, RecursionError):
            return _Fail("value nested too deeply", tuple(path))
        if isinstance(e, ProtocolError):
            return _Fail(e.message, tuple(path))
        return _Fail(f"invalid value ({type(e).__name__}: {e})", tuple(path))


def _wire_of(cls: Any, name: str) -> str:
    if cls is not None and attrs.has(cls):
        for a in attrs.fields(cls):
            if a.name == name:
                return wire_name(a)
    return _camel(name)


def _tag_text(tag: Any) -> Any:
    return tag.value if isinstance(tag, Enum) else tag


def _enum_value(member: Enum) -> Any:
    return member.value


def _enum_structure(enum_cls: type[Enum]) -> Callable[[Any, Any], Any]:
    """A closed enum on its own (model fields use ``Enum | str`` and stay open)."""
    base = str if issubclass(enum_cls, str) else int

    def structure_enum(value: Any, _: Any) -> Any:
        if not isinstance(value, base) or isinstance(value, bool):
            raise _expected("a string" if base is str else "an integer", value)
        try:
            return enum_cls(value)
        except ValueError:
            raise _Fail(f"unknown {enum_cls.__name__} value {value!r}") from None

    return structure_enum


def _is_any(tp: Any) -> bool:
    return tp is Any


def _is_tuple(tp: Any) -> bool:
    return tp is tuple or get_origin(tp) is tuple


def _is_mapping(tp: Any) -> bool:
    return tp in (Mapping, dict) or get_origin(tp) in (Mapping, dict)


def _is_json_mapping(tp: Any) -> bool:
    """``Mapping[str, Any]``: an open JSON object (``_meta``, config values, schemas)."""
    return _is_mapping(tp) and get_args(tp)[1:] == (Any,)


def _is_literal(tp: Any) -> bool:
    return get_origin(tp) is Literal


def _is_message(tp: Any) -> bool:
    return tp in _MESSAGE_CLASSES or get_origin(tp) in _MESSAGE_CLASSES or tp == t.JsonRpcMessage


def _is_raw_message(tp: Any) -> bool:
    return bool(tp == t.JsonRpcMessage) or tp in _MESSAGE_CLASSES or (
        get_origin(tp) in _MESSAGE_CLASSES and get_args(tp) == (Any,)
    )


def _s_id(value: Any, _: Any) -> int | str:
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return value
    raise _expected("a number or string", value)


_MESSAGE_CLASSES = (
    t.JsonRpcRequest, t.JsonRpcNotification, t.JsonRpcSuccessResponse, t.JsonRpcErrorResponse,
)


def _make_converter(*, generated: bool = True) -> tuple[cattrs.Converter, _Codec]:
    """A converter with every wire rule, and the codec that builds its hooks.

    ``generated=False`` builds the class hooks with cattrs' own
    ``make_dict_structure_fn`` and ``make_dict_unstructure_fn`` instead of
    this module's generated functions: the reference the tests compare them
    with.
    """
    conv = cattrs.Converter(detailed_validation=True, forbid_extra_keys=False)
    codec = _Codec(conv, generated=generated)

    conv.register_structure_hook(str, _s_str)
    conv.register_structure_hook(int, _s_int)
    conv.register_structure_hook(float, _s_float)
    conv.register_structure_hook(bool, _s_bool)
    conv.register_structure_hook(TextBuffer, _s_text)
    conv.register_structure_hook(t.SessionStatus, _s_status)
    conv.register_structure_hook_func(_is_any, _s_any)
    conv.register_unstructure_hook(TextBuffer, lambda b: b.value)
    def unstructure_any(value: Any) -> Any:
        # An ``Any`` field may hold a model value (generic JSON-RPC params);
        # otherwise it is JSON, copied so the model's own objects stay private.
        if attrs.has(type(value)) or isinstance(value, (Enum, TextBuffer)):
            return conv.unstructure(value)
        return copy_json(value)

    conv.register_unstructure_hook_func(_is_any, unstructure_any)
    conv.register_unstructure_hook_func(_is_json_mapping, copy_json)
    for name in (*t.enums.__all__, *t.error_codes.__all__):
        enum_cls = getattr(t.enums, name, None) or getattr(t.error_codes, name)
        if (isinstance(enum_cls, type) and issubclass(enum_cls, Enum)
                and not issubclass(enum_cls, IntFlag)):
            conv.register_structure_hook(enum_cls, _enum_structure(enum_cls))
    # Per class: cattrs' singledispatch would otherwise pick its ``str``
    # identity hook for these ``str`` enums and leak enum members into JSON.
    for name in (*t.enums.__all__, *t.error_codes.__all__):
        enum_cls = getattr(t.enums, name, None) or getattr(t.error_codes, name)
        if isinstance(enum_cls, type) and issubclass(enum_cls, Enum):
            if issubclass(enum_cls, IntFlag):
                conv.register_unstructure_hook(enum_cls, int)
            else:
                conv.register_unstructure_hook(enum_cls, _enum_value)

    conv.register_structure_hook_factory(_is_union, codec.union_structure)
    conv.register_structure_hook_factory(_is_tuple, codec.tuple_structure)
    conv.register_structure_hook_factory(_is_mapping, codec.mapping_structure)
    conv.register_structure_hook_factory(_is_literal, codec.literal_structure)
    conv.register_structure_hook_factory(attrs.has, codec.class_structure)
    conv.register_unstructure_hook_factory(
        lambda tp: isinstance(tp, type) and attrs.has(tp), codec.class_unstructure
    )
    def union_unstructure(tp: Any) -> Callable[[Any], Any]:
        members = _union_members(tp)
        if len(members) == 1:
            # ``X | None``: encode as ``X`` (``Mapping[str, Any]`` stays JSON, copied).
            hook = conv.get_unstructure_hook(members[0])
            return lambda v: None if v is None else hook(v)
        # Other unions unstructure by the runtime class of the value.
        if generated:
            return codec.unstructure_as_runtime_type
        return lambda v: conv.unstructure(v, unstructure_as=type(v))

    conv.register_unstructure_hook_factory(_is_union, union_unstructure)
    conv.register_unstructure_hook_func(
        _is_tuple, lambda v: [conv.unstructure(x) for x in v]
    )
    conv.register_structure_hook_func(_is_raw_message, codec.structure_raw_message_as)
    conv.register_unstructure_hook_func(_is_message, codec.unstructure_message)
    conv.register_unstructure_hook(
        t.JsonRpcError,
        lambda e: {"code": e.code, "message": e.message}
        | ({} if e.data is None else {"data": conv.unstructure(e.data)}),
    )
    conv.register_unstructure_hook_func(
        _is_literal, lambda v: v.value if isinstance(v, Enum) else v
    )
    return conv, codec


converter: cattrs.Converter
_CODEC: _Codec
converter, _CODEC = _make_converter()
"""The library's converter.  Use it as any cattrs converter, e.g.
``converter.structure(data, SessionSummary)``; its errors are cattrs' own, so
prefer :func:`structure`, which raises the library's documented errors."""


# ---------------------------------------------------------------------------
# Typed helpers
# ---------------------------------------------------------------------------


def _raise(
    e: BaseException,
    prefix: tuple[str | int, ...],
    error: type[ProtocolError] = InvalidParams,
    request_id: Any = None,
    respond: bool = True,
) -> ProtocolError:
    fail = _to_fail(e)
    path = _format_path((*prefix, *fail.path))
    return error(fail.message, path=path, request_id=request_id, respond=respond)


def _format_path(segments: tuple[str | int, ...]) -> str:
    out = "$"
    for s in segments:
        if isinstance(s, int):
            out += f"[{s}]"
        elif s.isidentifier():
            out += f".{s}"
        else:
            out += f"[{json.dumps(s)}]"
    return out


@overload
def structure(data: object, tp: type[T], *, path: tuple[str | int, ...] = ()) -> T: ...
@overload
def structure(data: object, tp: object, *, path: tuple[str | int, ...] = ()) -> Any: ...
def structure(data: object, tp: object, *, path: tuple[str | int, ...] = ()) -> Any:
    """Decode JSON-compatible ``data`` as ``tp`` (a model class, union alias or field type).

    Typed for a class: ``structure(obj, SessionState)`` is a ``SessionState``
    to the type checker, so ``state.titel`` is an error.  A union alias
    (``StateAction``) or a field type gives ``Any``; narrow it with
    ``isinstance`` or ``match``.

    Raises :class:`~agenthost_protocol.errors.InvalidParams` with the path of the
    offending value.  ``path`` prefixes the reported path.
    """
    try:
        return converter.structure(data, tp)  # type: ignore[arg-type]  # any type form
    except Exception as e:
        raise _raise(e, path) from None


def unstructure(obj: Any) -> Any:
    """Encode a model value as JSON-compatible data (dicts, lists, str, int, float, bool)."""
    return converter.unstructure(obj)


dump = unstructure
"""Alias of :func:`unstructure`."""


def repair(obj: T) -> tuple[T, tuple[str, ...]]:
    """``obj`` made encodable, and one line per repair (``path: what``).

    For values an agent produced: every lone surrogate (in any string, open
    JSON keys included) becomes U+FFFD, every non-finite number is dropped
    (from open JSON; a float field becomes ``None``).  Returns ``obj`` itself
    and ``()`` when nothing needed repair.  What :func:`dumps` refuses for
    another reason (a value that is not JSON at all) still raises there.
    """
    notes: list[tuple[tuple[str | int, ...], str]] = []
    fixed = _repaired(obj, (), notes)
    return fixed, tuple(f"{_format_path(path)}: {what}" for path, what in notes)


def _repaired(
    value: Any, path: tuple[str | int, ...], notes: list[tuple[tuple[str | int, ...], str]]
) -> Any:
    if attrs.has(type(value)):
        changes = {}
        for f in attrs.fields(type(value)):
            old = getattr(value, f.name)
            new = _repaired(old, (*path, f.name), notes)
            if new is not old:
                changes[f.alias or f.name] = new
        return attrs.evolve(value, **changes) if changes else value
    if isinstance(value, str):
        if value.isascii() or lone_surrogate_at(value) < 0:
            return value
        notes.append((path, "lone surrogate replaced by U+FFFD"))
        return repair_json(str(value))[0]
    if isinstance(value, float) and not math.isfinite(value):
        notes.append((path, f"{value!r} dropped"))
        return None
    if isinstance(value, tuple):
        items = [_repaired(v, (*path, i), notes) for i, v in enumerate(value)]
        return tuple(items) if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, Mapping):
        fixed, repaired = repair_json(value)
        if not repaired:
            return value
        notes.extend(((*path, *where), what) for where, what in repaired)
        return fixed
    return value


def dumps(obj: Any) -> str:
    """Encode a model value (or a JSON-RPC message) as a compact JSON string.

    Never writes what is not JSON: a non-finite float (``NaN``, ``Infinity``)
    or a string with a lone surrogate in a value the caller built raises
    :class:`~agenthost_protocol.errors.LocalProtocolError`.
    """
    try:
        data = converter.unstructure(obj)
        return _JSON.dumps(data)
    except JsonValueError as e:
        where = e.path
        if not where:
            # raised inside an open JSON field, which does not know its own place
            found: list[tuple[tuple[str | int, ...], str]] = []
            _repaired(obj, (), found)
            where = found[0][0] if found else ()
        raise LocalProtocolError(e.message, path=_format_path(where)) from None
    except ValueError as e:  # allow_nan=False: a float field holding NaN or an infinity
        raise LocalProtocolError(f"not representable in JSON: {e}") from None


# ---------------------------------------------------------------------------
# JSON text
# ---------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a JSON number this library can represent")
    return value


# ``\ud800``-``\udfff`` escapes: the only way lone surrogates get into decoded text.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # json.decoder.WHITESPACE


def _skip_whitespace(text: str, idx: int) -> int:
    match = _WHITESPACE.match(text, idx)
    return idx if match is None else match.end()

_JSON_WHITESPACE = " \t\n\r"


class _StdlibJson:
    """Strict JSON with the standard library: the reference every backend must match.

    The decoder and the encoder are built once (``json.loads`` with hooks, or
    ``json.dumps`` with options, builds new ones on every call); neither holds
    state between calls.
    """

    name = "json"

    def __init__(self) -> None:
        self.decoder: Final = json.JSONDecoder(
            parse_constant=_reject_constant, parse_float=_finite_float
        )
        # The scanner ``decode`` calls (the C one when the interpreter has it).
        self.scan: Final[Callable[[str, int], tuple[Any, int]]] = cast(
            Any, self.decoder
        ).scan_once
        encoder = json.JSONEncoder(
            separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False
        )
        self.encode: Callable[[Any], str] = encoder.encode
        c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
        try:
            # What ``encoder.encode`` runs for a dict or a list, made once.
            chunks = c_make_encoder(  # type: ignore[misc]
                None, encoder.default, json.encoder.encode_basestring, None,
                ":", ",", False, False, False,
            )
            sample = {"a": [1, 2.5, None, True, "é\n"], "b": {}}
            if "".join(chunks(sample, 0)) != encoder.encode(sample):
                raise ValueError("not the encoder expected")  # another interpreter's
        except Exception:  # no C encoder, or one that takes other arguments
            return

        def encode(data: Any) -> str:
            return "".join(chunks(data, 0))

        self.encode = encode

    def decode(self, text: str) -> Any:
        """``JSONDecoder.decode``, inlined."""
        idx = _skip_whitespace(text, 0) if text[:1] in _JSON_WHITESPACE else 0
        try:
            value, end = self.scan(text, idx)
        except StopIteration as err:
            raise json.JSONDecodeError("Expecting value", text, err.value) from None
        if end != len(text):
            end = _skip_whitespace(text, end)
            if end != len(text):
                raise json.JSONDecodeError("Extra data", text, end)
        return value

    def loads(self, data: bytes | bytearray | memoryview | str) -> Any:
        try:
            if isinstance(data, (bytes, bytearray, memoryview)):
                data = bytes(data).decode("utf-8")
            elif not data.isascii() and lone_surrogate_at(data) >= 0:
                raise ParseError(f"a lone surrogate at index {lone_surrogate_at(data)}")
            value = self.decode(data)
        except UnicodeDecodeError as e:
            raise ParseError(f"not UTF-8: {e.reason}") from None
        except json.JSONDecodeError as e:
            raise ParseError(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        except RecursionError:
            raise ParseError("JSON nested too deeply") from None
        except (ValueError, TypeError) as e:
            raise ParseError(f"not JSON: {e}") from None
        if "\\u" in data and _SURROGATE_ESCAPE.search(data):
            try:
                copy_json(value)  # finds the string and its path
            except JsonValueError as e:
                raise ParseError(e.message, path=_format_path(e.path)) from None
        return value

    def dumps(self, data: Any) -> str:
        """Compact JSON text; ``ValueError`` or ``JsonValueError`` for what is not JSON."""
        text = json.encoder.encode_basestring(data) if type(data) is str else self.encode(data)
        if not text.isascii() and lone_surrogate_at(text) >= 0:
            copy_json(data)  # raises JsonValueError with the path of the string
            raise JsonValueError("a string holds a lone surrogate", ())
        return text


# A run of 19 digits may be an integer beyond 64 bits, which orjson reads as a
# float; such texts are parsed by the standard library, which keeps them exact.
_DIGIT_CLASSES = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_NUMBER = b"0" * 19
_DEEP = 256
"""Texts that nest this deep are parsed by the standard library (its limit
depends on the caller's stack; orjson's is 1024)."""


def _depth_at_least(value: Any, limit: int) -> bool:
    """Whether the JSON value ``value`` nests ``limit`` arrays or objects deep."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth >= limit:
            return True
        children = item.values() if type(item) is dict else item
        stack.extend((c, depth + 1) for c in children if type(c) in (dict, list))
    return False


class _OrjsonJson(_StdlibJson):
    """The ``orjson`` parser, falling back to the standard library for anything it cannot do alike.

    orjson rejects every text the standard library path rejects, except
    integers beyond 64 bits (it reads them as floats) and nesting between the
    standard library's limit and its own: texts that may hold either are
    parsed by the standard library.  Whatever orjson rejects is parsed again
    by the standard library, so errors (message, path, code) are the same.
    """

    name = "orjson"

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.orjson_loads: Final[Callable[[bytes], Any]] = module.loads
        self.orjson_error: Final[type[Exception]] = module.JSONDecodeError

    def loads(self, data: bytes | bytearray | memoryview | str) -> Any:
        if type(data) is bytes:
            raw = data
        elif type(data) is str:
            try:
                raw = data.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate
                return _StdlibJson.loads(self, data)
        elif isinstance(data, (bytearray, memoryview)):
            raw = bytes(data)
        else:
            return _StdlibJson.loads(self, data)
        try:
            value = self.orjson_loads(raw)
        except self.orjson_error:
            return _StdlibJson.loads(self, data)
        if _LONG_NUMBER in raw.translate(_DIGIT_CLASSES) or (
            len(raw) > 2 * _DEEP
            and raw.count(b"[") + raw.count(b"{") >= _DEEP
            and _depth_at_least(value, _DEEP)
        ):
            return _StdlibJson.loads(self, data)
        return value


def _json_backend() -> _StdlibJson:
    """orjson when it is installed (the ``fast`` extra), else the standard library."""
    try:
        module = importlib.import_module("orjson")
    except ImportError:
        return _StdlibJson()
    return _OrjsonJson(module)


_JSON: Final = _json_backend()
JSON_BACKEND: Final[str] = _JSON.name
"""The JSON parser in use: ``"orjson"`` (the ``fast`` extra is installed) or ``"json"``."""


def parse_json(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse strict JSON text; raises :class:`~agenthost_protocol.errors.ParseError` (-32700).

    Stricter than :func:`json.loads`: ``NaN``, ``Infinity`` and numbers that
    overflow a float (``1e999``) are rejected, and so is a string holding a
    lone surrogate (an unpaired ``\\ud800`` escape cannot be written back as
    UTF-8); the error names the path of that string.  With orjson installed
    the result and the errors are the same, only faster.
    """
    return _JSON.loads(data)


def parse_action(data: Any) -> t.StateAction:
    """Decode one action (``StateAction``); unknown ``type`` values give ``UnknownAction``."""
    return cast("t.StateAction", structure(data, t.StateAction))


def parse_envelope(data: Any) -> t.ActionEnvelope:
    """Decode an ``ActionEnvelope`` (the params of an ``action`` notification)."""
    return structure(data, t.ActionEnvelope)


def parse_message(
    data: bytes | bytearray | memoryview | str | Mapping[str, Any],
    *,
    result_method: Callable[[Any], str | None] | Mapping[Any, str] | None = None,
) -> AnyMessage:
    """Decode a whole JSON-RPC message, typing its params (and result) by method.

    ``data`` is JSON text (``bytes`` or ``str``) or an already parsed object.
    Requests and notifications get their params decoded as the method's params
    class (``action`` notifications as ``ActionEnvelope``).  Responses carry no
    method; pass ``result_method`` (a mapping or function from request id to
    the method name of the request you sent) to have results typed too,
    otherwise results stay raw JSON.

    Raises :class:`~agenthost_protocol.errors.ParseError`,
    :class:`~agenthost_protocol.errors.InvalidRequest`,
    :class:`~agenthost_protocol.errors.MethodNotFound` or
    :class:`~agenthost_protocol.errors.InvalidParams`; each has ``code``,
    ``path``, ``request_id`` (the id when one could be read) and ``respond``:
    ``False`` for a malformed notification or response (JSON-RPC never
    answers those), ``True`` otherwise, with ``request_id`` ``None`` when the
    answer must carry ``"id": null``.  ``error.response()`` builds it.
    """
    return _CODEC.parse_message(data, result_method)
