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
"""

from __future__ import annotations

import json
import math
import re
import types as _pytypes
from collections.abc import Callable, Mapping
from enum import Enum, IntFlag
from typing import Any, Final, Literal, TypeVar, Union, cast, get_args, get_origin, overload

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from . import types as t
from ._json import JsonValueError, copy_json, lone_surrogate_at
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
from .types._text import TextBuffer

__all__ = [
    "converter",
    "dump",
    "dumps",
    "parse_action",
    "parse_envelope",
    "parse_json",
    "parse_message",
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

    def __init__(self, conv: cattrs.Converter) -> None:
        self.c = conv
        self.required: dict[type, frozenset[str]] = {
            cls: _required_keys(cls) for cls in (*_SHAPE_ORDER, *_NOTIFICATION_SHAPES)
        }
        self.action_hooks: dict[Any, Callable[[Any, Any], Any]] = {}

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
            return lambda value, _: self.structure_action(value)
        if t.UnknownAction in key and key <= _STATE_ACTION_MEMBERS:
            # A channel's action union (ChatAction ...): any action, of that channel.
            allowed = tuple(key)

            def channel_action(value: Any, _: Any) -> Any:
                action = self.structure_action(value)
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
        hooks = {tag: (cls, c.get_structure_hook(cls)) for tag, cls in tags.items()}

        def tagged(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise _expected("an object", value)
            if tag_key not in value:
                raise _Fail("required field missing", (tag_key,))
            tag = value[tag_key]
            if tag_key == "approved":
                hit = hooks.get(tag) if isinstance(tag, bool) else None
            elif type(tag) is str:
                hit = hooks.get(tag)
            else:
                # Tags are strings: a number, null or array is a malformed value,
                # not a variant from a newer peer.
                raise _Fail(f"the {tag_key!r} discriminator must be a string", (tag_key,))
            if hit is not None:
                cls, hook = hit
                return hook(value, cls)
            if unknown is None:
                raise _Fail(f"unknown {tag_key} {tag!r}", (tag_key,))
            # Each Unknown<Union> names its tag field after the wire key.
            return unknown(**{tag_key: _s_str(tag, None), "raw": _json_copy(value)})

        return tagged

    def structure_action(self, value: Any) -> Any:
        if type(value) is not dict:
            raise _expected("an object", value)
        tag = value.get("type", _MISSING)
        if tag is _MISSING:
            raise _Fail("required field missing", ("type",))
        if type(tag) is not str:
            raise _Fail("the 'type' discriminator must be a string", ("type",))
        target = _ACTION_TAGS.get(tag)
        if target is None:
            return t.UnknownAction(type=_s_str(tag, None), raw=_json_copy(value))
        hook = self.action_hooks.get(target)
        if hook is None:
            # Resolved lazily: the hooks of the action classes are built on first use.
            hook = self.action_hooks[target] = self.c.get_structure_hook(target)
        return hook(value, target)

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
        fields = attrs.fields(cls)
        overrides = {
            a.name: override(rename=wire_name(a), omit_if_default=a.default is None)
            for a in fields
        }
        return make_dict_unstructure_fn(cls, self.c, _cattrs_use_alias=True, **overrides)  # type: ignore[arg-type]


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


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(detailed_validation=True, forbid_extra_keys=False)
    codec = _Codec(conv)

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
        return lambda v: conv.unstructure(v, unstructure_as=type(v))

    conv.register_unstructure_hook_factory(_is_union, union_unstructure)
    conv.register_unstructure_hook_func(
        _is_tuple, lambda v: [conv.unstructure(x) for x in v]
    )
    conv.register_unstructure_hook_func(
        _is_literal, lambda v: v.value if isinstance(v, Enum) else v
    )
    return conv


converter: cattrs.Converter = _make_converter()
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


def dumps(obj: Any) -> str:
    """Encode a model value (or a JSON-RPC message) as a compact JSON string.

    Never writes what is not JSON: a non-finite float (``NaN``, ``Infinity``)
    or a string with a lone surrogate in a value the caller built raises
    :class:`~agenthost_protocol.errors.LocalProtocolError`.
    """
    try:
        data = unstructure(obj)
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except JsonValueError as e:
        raise LocalProtocolError(e.message, path=_format_path(e.path)) from None
    except ValueError as e:  # allow_nan=False: a float field holding NaN or an infinity
        raise LocalProtocolError(f"not representable in JSON: {e}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a JSON number this library can represent")
    return value


# ``\ud800``-``\udfff`` escapes: the only way lone surrogates get into decoded text.
# Built once: ``json.loads`` with hooks would build a decoder (and its scanner)
# on every call.  It holds no state between calls.
_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse strict JSON text; raises :class:`~agenthost_protocol.errors.ParseError` (-32700).

    Stricter than :func:`json.loads`: ``NaN``, ``Infinity`` and numbers that
    overflow a float (``1e999``) are rejected, and so is a string holding a
    lone surrogate (an unpaired ``\\ud800`` escape cannot be written back as
    UTF-8); the error names the path of that string.
    """
    try:
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = bytes(data).decode("utf-8")
        elif not data.isascii() and lone_surrogate_at(data) >= 0:
            raise ParseError(f"a lone surrogate at index {lone_surrogate_at(data)}")
        value = _DECODER.decode(data)
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


def parse_action(data: Any) -> t.StateAction:
    """Decode one action (``StateAction``); unknown ``type`` values give ``UnknownAction``."""
    return cast("t.StateAction", structure(data, t.StateAction))


def parse_envelope(data: Any) -> t.ActionEnvelope:
    """Decode an ``ActionEnvelope`` (the params of an ``action`` notification)."""
    return structure(data, t.ActionEnvelope)


_PARAMS_HOOKS: dict[str, Callable[[Any, Any], Any]] = {}


def _params_hook(method: str) -> Callable[[Any, Any], Any]:
    """The structure hook of a method's params, looked up once per method."""
    hook = _PARAMS_HOOKS.get(method)
    if hook is None:
        hook = _PARAMS_HOOKS[method] = converter.get_structure_hook(METHODS[method].params)
    return hook


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
    obj = parse_json(data) if isinstance(data, (bytes, bytearray, memoryview, str)) else data
    if not isinstance(obj, Mapping):
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
        try:
            params = _params_hook(method)(obj["params"], info.params)
        except Exception as e:
            raise _raise(e, ("params",), request_id=msg_id, respond=is_request) from None
        if is_request:
            if msg_id is None:
                raise InvalidRequest("a request id must not be null", path="$.id")
            return t.JsonRpcRequest(id=msg_id, method=method, params=params)
        return t.JsonRpcNotification(method=method, params=params)
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
                    result = converter.structure(result, info.result)
                except Exception as e:
                    # A response is never answered: report it, send nothing.
                    raise _raise(e, ("result",), request_id=msg_id, respond=False) from None
        return t.JsonRpcSuccessResponse(id=msg_id, result=result)
    if "error" in obj and "result" not in obj:
        try:
            error = converter.structure(obj["error"], t.JsonRpcError)
        except Exception as e:
            raise _raise(
                e, ("error",), InvalidRequest, request_id=msg_id, respond=False
            ) from None
        return t.JsonRpcErrorResponse(id=msg_id, error=error)
    raise InvalidRequest("a response has exactly one of result and error", path="$",
                         request_id=msg_id, respond=False)


def _structure_raw_message(value: Any, _: Any) -> t.JsonRpcMessage:
    """``JsonRpcMessage`` with raw params and results (the round-trip corpus' type)."""
    if type(value) is not dict:
        raise _expected("an object", value)
    if value.get("jsonrpc") != "2.0":
        raise _Fail('must be "2.0"', ("jsonrpc",))
    if "method" in value:
        method = _field(_s_str, value, "method")
        params = value.get("params")
        if "id" in value:
            return t.JsonRpcRequest(id=_field(_s_id, value, "id"), method=method, params=params)
        return t.JsonRpcNotification(method=method, params=params)
    if "result" in value:
        return t.JsonRpcSuccessResponse(id=_field(_s_id, value, "id"), result=value["result"])
    if "error" in value:
        error = converter.structure(value["error"], t.JsonRpcError)
        msg_id = value.get("id")
        return t.JsonRpcErrorResponse(id=None if msg_id is None else _field(_s_id, value, "id"),
                                      error=error)
    raise _Fail("neither a request, a notification nor a response")


def _is_raw_message(tp: Any) -> bool:
    return bool(tp == t.JsonRpcMessage) or tp in _MESSAGE_CLASSES or (
        get_origin(tp) in _MESSAGE_CLASSES and get_args(tp) == (Any,)
    )


def _s_id(value: Any, _: Any) -> int | str:
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return value
    raise _expected("a number or string", value)


def _unstructure_message(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0"}
    if isinstance(msg, t.JsonRpcRequest):
        out["id"] = msg.id
        out["method"] = msg.method
        if msg.params is not None:
            out["params"] = converter.unstructure(msg.params)
    elif isinstance(msg, t.JsonRpcNotification):
        out["method"] = msg.method
        if msg.params is not None:
            out["params"] = converter.unstructure(msg.params)
    elif isinstance(msg, t.JsonRpcSuccessResponse):
        out["id"] = msg.id
        out["result"] = converter.unstructure(msg.result)
    else:
        out["id"] = msg.id
        out["error"] = converter.unstructure(msg.error, t.JsonRpcError)
    return out


_MESSAGE_CLASSES = (
    t.JsonRpcRequest, t.JsonRpcNotification, t.JsonRpcSuccessResponse, t.JsonRpcErrorResponse,
)


def _structure_raw_message_as(value: Any, tp: Any) -> t.JsonRpcMessage:
    """A JSON-RPC message with raw params and result, of the kind ``tp`` names."""
    msg = _structure_raw_message(value, tp)
    expected: type = get_origin(tp) or tp
    if tp != t.JsonRpcMessage and type(msg) is not expected:
        raise _Fail(f"not a {expected.__name__}")
    return msg


converter.register_structure_hook_func(_is_raw_message, _structure_raw_message_as)
converter.register_unstructure_hook_func(_is_message, _unstructure_message)
converter.register_unstructure_hook(
    t.JsonRpcError,
    lambda e: {"code": e.code, "message": e.message}
    | ({} if e.data is None else {"data": converter.unstructure(e.data)}),
)
