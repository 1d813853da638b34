"""Hypothesis strategies for every AHP type, derived from the model.

Needs the ``testing`` extra (``pip install 'agenthost-protocol[testing]'``)::

    from hypothesis import given
    from agenthost_protocol.testing import strategies as ahst
    from agenthost_protocol.types import ChatState

    @given(ahst.from_type(ChatState))
    def test_chat_state(state: ChatState) -> None: ...

Nothing here is written per class: :func:`from_type` reads the attrs fields of
the model (:mod:`agenthost_protocol.types`) and the tag registry, so a
regenerated model is covered as it stands.  The values are valid on the wire:

* strings are any Unicode without lone surrogates, integers fit in int64,
  floats are finite (``float`` fields also get integers, as JavaScript peers
  send them), ``Any`` is any JSON value;
* open string enums (``Enum | str``) are mostly members and sometimes an
  unknown string; ``SessionStatus`` is mostly a known activity plus flags and
  sometimes carries unknown bits (always below ``2**32``);
* open unions include their ``Unknown<Name>`` variant, whose tag is never a
  known tag and whose ``raw`` object holds that tag, so it round-trips verbatim;
* ``Snapshot.state`` matches the channel kind of ``Snapshot.resource``, and an
  ``ActionEnvelope``'s channel matches its action's channel;
* fields typed ``URI`` get URIs; optional fields shrink to absent (``None``),
  collections to empty, unions to their first variant.

Nesting is bounded: below ``max_depth`` levels of objects, optional fields are
absent and collections empty, so recursive types (``ConfigPropertySchema``)
terminate and examples stay small.  Strategies are cached per type and depth.
"""

from __future__ import annotations

import enum
import functools
import types as _pytypes
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, overload
from urllib.parse import quote

import attrs

try:
    from hypothesis import strategies as st
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agenthost_protocol.testing.strategies needs Hypothesis: "
        "pip install 'agenthost-protocol[testing]'"
    ) from _exc

from .. import types as t
from ..channels import ACTION_UNIONS, ROOT_CHANNEL, STATE_TYPES, ChannelKind
from ..methods import METHODS, MessageKind, Method
from ..types._tags import ACTION_CLASSES, TAGGED_UNIONS
from ..types._text import TextBuffer
from ..wire import unstructure

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "INT64_MAX",
    "INT64_MIN",
    "STATEFUL_CHANNELS",
    "actions",
    "channel_uris",
    "envelopes",
    "from_type",
    "json_objects",
    "json_values",
    "messages",
    "register_type_strategies",
    "snapshots",
    "states",
    "unknown_strings",
    "wire_values",
]

T = TypeVar("T")
SearchStrategy = st.SearchStrategy

DEFAULT_MAX_DEPTH = 4
"""Levels of nested objects that may carry optional fields and non-empty collections."""

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_MAX_SAFE_INTEGER = 2**53  # the largest integers a float field holds exactly
_MAX_COLLECTION = 3
_NoneType = type(None)


# ---------------------------------------------------------------------------
# JSON values
# ---------------------------------------------------------------------------

_TEXT: SearchStrategy[str] = st.text()
_INTS: SearchStrategy[int] = st.integers(INT64_MIN, INT64_MAX)
_FLOATS: SearchStrategy[float] = st.floats(allow_nan=False, allow_infinity=False)
_NUMBERS: SearchStrategy[float] = st.one_of(
    st.integers(-_MAX_SAFE_INTEGER, _MAX_SAFE_INTEGER), _FLOATS
)
_JSON_SCALARS_NOT_NULL: SearchStrategy[Any] = st.one_of(st.booleans(), _INTS, _FLOATS, _TEXT)


def _json_containers(children: SearchStrategy[Any]) -> SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_TEXT, children, max_size=4),
    )


_JSON: SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), _JSON_SCALARS_NOT_NULL), _json_containers, max_leaves=8
)
_JSON_NOT_NULL: SearchStrategy[Any] = st.one_of(_JSON_SCALARS_NOT_NULL, _json_containers(_JSON))
_JSON_OBJECTS: SearchStrategy[dict[str, Any]] = st.dictionaries(_TEXT, _JSON, max_size=4)


def json_values(*, allow_null: bool = True) -> SearchStrategy[Any]:
    """Any JSON value: ``None``, ``bool``, int64 ``int``, finite ``float``, ``str``,
    ``list`` or ``dict`` (small, nested a few levels)."""
    return _JSON if allow_null else _JSON_NOT_NULL


def json_objects() -> SearchStrategy[dict[str, Any]]:
    """A JSON object (``dict`` with ``str`` keys and JSON values)."""
    return _JSON_OBJECTS


# ---------------------------------------------------------------------------
# Small building blocks
# ---------------------------------------------------------------------------


@st.composite
def _mostly(draw: st.DrawFn, usual: SearchStrategy[T], rare: SearchStrategy[T], one_in: int) -> T:
    """``usual``, and ``rare`` once in ``one_in`` draws; shrinks towards ``usual``."""
    if draw(st.integers(0, one_in - 1)) == one_in - 1:
        return draw(rare)
    return draw(usual)


_IDENTIFIERS: SearchStrategy[str] = st.from_regex(r"[a-z][a-zA-Z0-9]{0,15}", fullmatch=True)


# Identifier-like (``futureKind``), sometimes followed by any text; shrinks to ``"a"``.
_NAMES: SearchStrategy[str] = st.builds(
    lambda head, tail: head + tail, _IDENTIFIERS, _mostly(st.just(""), _TEXT, 4)
)


def unknown_strings(known: typing.Iterable[str] = ()) -> SearchStrategy[str]:
    """Strings outside ``known``: an identifier (``futureKind``), sometimes followed by
    any text."""
    excluded = frozenset(known)
    return _NAMES.filter(lambda s: s not in excluded)


_CHANNEL_IDS: SearchStrategy[str] = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,11}", fullmatch=True), st.uuids().map(str)
)

STATEFUL_CHANNELS: tuple[ChannelKind, ...] = tuple(k for k in ChannelKind if k.is_stateful)
"""Channel kinds with a state: the kinds of ``Snapshot.resource`` and ``ActionEnvelope.channel``."""

_URI_PREFIXES: dict[ChannelKind, str] = {
    ChannelKind.SESSION: "ahp-session:/",
    ChannelKind.CHAT: "ahp-chat:/",
    ChannelKind.TERMINAL: "ahp-terminal:/",
    ChannelKind.CHANGESET: "ahp-changeset:/",
    ChannelKind.RESOURCE_WATCH: "ahp-resource-watch:/",
    ChannelKind.OTLP: "ahp-otlp://",
    ChannelKind.MCP: "mcp:/",
}


def _channel_kind(kind: ChannelKind | str) -> ChannelKind:
    try:
        return ChannelKind(kind)
    except ValueError:
        raise ValueError(
            f"unknown channel kind {kind!r}; expected one of {[k.value for k in ChannelKind]}"
        ) from None


@functools.cache
def channel_uris(kind: ChannelKind | str | None = None) -> SearchStrategy[str]:
    """URIs of channels of ``kind`` (a :class:`~agenthost_protocol.channels.ChannelKind`
    or its value, e.g. ``"chat"``), or of any stateful kind; each is recognised by
    :func:`~agenthost_protocol.channels.channel_kind` as that kind."""
    if kind is None:
        return st.one_of([channel_uris(k) for k in STATEFUL_CHANNELS])
    kind = _channel_kind(kind)
    if kind is ChannelKind.ROOT:
        return st.just(ROOT_CHANNEL)
    if kind is ChannelKind.ANNOTATIONS:
        return _CHANNEL_IDS.map(lambda i: f"ahp-session:/{i}/annotations")
    prefix = _URI_PREFIXES[kind]
    return _CHANNEL_IDS.map(lambda i: prefix + i)


_URI_PATHS: SearchStrategy[str] = st.text(max_size=20).map(lambda s: quote(s, safe="/"))
_URIS: SearchStrategy[str] = st.one_of(
    _URI_PATHS.map(lambda p: "file:///" + p.lstrip("/")),
    channel_uris(),
    _URI_PATHS.map(lambda p: "https://example.com/" + p.lstrip("/")),
    st.builds(lambda mime, data: f"data:{mime};base64,{data}",
              st.sampled_from(["text/plain", "image/png"]),
              st.from_regex(r"[A-Za-z0-9+/]{0,12}={0,2}", fullmatch=True)),
)


class _URI(str):
    """Marker for fields annotated ``URI`` (which resolves to plain ``str``)."""

    __slots__ = ()


# ---------------------------------------------------------------------------
# The model's registries, read once
# ---------------------------------------------------------------------------


def _tag_value(tag: Any) -> Any:
    return tag.value if isinstance(tag, enum.Enum) else tag


# Unknown variant class -> (wire tag key, known tag values of its union).
_UNKNOWN: dict[type, tuple[str, frozenset[Any]]] = {
    unknown: (key, frozenset(_tag_value(tag) for tag in tags))
    for key, tags, unknown in TAGGED_UNIONS.values()
    if unknown is not None
}
_ACTION_TYPES: frozenset[str] = frozenset(_tag_value(tag) for tag in ACTION_CLASSES)
_UNKNOWN[t.UnknownAction] = ("type", _ACTION_TYPES)

_ACTION_UNIONS = ACTION_UNIONS
_STATES = STATE_TYPES
_ACTION_CHANNEL: dict[type, ChannelKind] = {
    cls: kind
    for kind, union in _ACTION_UNIONS.items()
    for cls in get_args(union)
    if cls is not t.UnknownAction
}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # ``URI`` is an alias of ``str``; resolve it to a marker so its fields get URIs.
    return typing.get_type_hints(cls, localns={"URI": _URI})


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, _pytypes.UnionType)


def _without_none(tp: Any) -> Any:
    if not _is_union(tp):
        return tp
    members = tuple(a for a in get_args(tp) if a is not _NoneType)
    return members[0] if len(members) == 1 else Union[members]  # noqa: UP007


def _subst(tp: Any, typevars: Mapping[Any, Any]) -> Any:
    """``tp`` with the type variables of a parameterised generic class replaced."""
    if not typevars:
        return tp
    if isinstance(tp, TypeVar):
        return typevars.get(tp, Any)
    args = get_args(tp)
    if not args or get_origin(tp) is Literal:
        return tp
    new = tuple(_subst(a, typevars) for a in args)
    if new == args:
        return tp
    if _is_union(tp):
        return Union[new]  # noqa: UP007
    origin = get_origin(tp)
    return origin[new]


# ---------------------------------------------------------------------------
# Building strategies from types
# ---------------------------------------------------------------------------

_CACHE: dict[tuple[Any, int, int], SearchStrategy[Any]] = {}


@overload
def from_type(tp: type[T], *, max_depth: int = DEFAULT_MAX_DEPTH) -> SearchStrategy[T]: ...
@overload
def from_type(tp: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> SearchStrategy[Any]: ...
def from_type(tp: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> SearchStrategy[Any]:
    """A strategy for values of ``tp``: a model class, a union alias
    (``ResponsePart``, ``StateAction``, ...), an enum, or any field type
    (``tuple[X, ...]``, ``Mapping[str, X]``, ``X | None``, ``Literal[...]``,
    ``Any``, ...).  ``max_depth`` bounds the nesting of objects with optional
    fields and non-empty collections."""
    if max_depth < 0:
        raise ValueError(f"max_depth must be >= 0, not {max_depth}")
    return _strategy(tp, 0, max_depth)


def _strategy(tp: Any, depth: int, max_depth: int) -> SearchStrategy[Any]:
    depth = min(depth, max_depth + 1)
    key = (tp, depth, max_depth)
    try:
        return _CACHE[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable type form: build it afresh
        return _build(tp, depth, max_depth)
    strategy = _build(tp, depth, max_depth)
    _CACHE[key] = strategy
    return strategy


def _build(tp: Any, depth: int, max_depth: int) -> SearchStrategy[Any]:
    try:
        special = _SPECIAL.get(tp)
        scalar = _SCALARS.get(tp)
    except TypeError:  # unhashable
        special = scalar = None
    if special is not None:
        return special(depth, max_depth)
    if scalar is not None:
        return scalar
    if tp is Any or tp is object or isinstance(tp, TypeVar):
        return _JSON
    if tp is None or tp is _NoneType:
        return st.none()
    origin = get_origin(tp)
    if origin is Literal:
        return st.sampled_from(get_args(tp))
    if _is_union(tp):
        return _union(tp, depth, max_depth)
    if origin is tuple:
        return _tuple(tp, depth, max_depth)
    if origin in (list, Sequence):
        (element,) = get_args(tp) or (Any,)
        return _tuple(tuple[element, ...], depth, max_depth).map(list)  # type: ignore[valid-type]
    if origin in (Mapping, dict, typing.Mapping):
        return _mapping(tp, depth, max_depth)
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return st.sampled_from(list(tp))
        if tp in _UNKNOWN:
            key, known = _UNKNOWN[tp]
            tags = _action_types() if tp is t.UnknownAction else unknown_strings(known)
            return _unknown_variant(tp, key, tags, depth, max_depth)
        if attrs.has(tp):
            return st.deferred(lambda: _class(tp, {}, depth, max_depth, {}))
    if origin is not None and isinstance(origin, type) and attrs.has(origin):
        # A parameterised generic class, e.g. ``JsonRpcRequest[InitializeParams]``.
        typevars = dict(zip(getattr(origin, "__parameters__", ()), get_args(tp), strict=False))
        return st.deferred(lambda: _class(origin, typevars, depth, max_depth, {}))
    raise TypeError(f"no strategy for {tp!r}")


_SCALARS: dict[Any, SearchStrategy[Any]] = {
    str: _TEXT,
    int: _INTS,
    float: _NUMBERS,
    bool: st.booleans(),
    _URI: _URIS,
    TextBuffer: _TEXT.map(TextBuffer.of),
}


def _union(tp: Any, depth: int, max_depth: int) -> SearchStrategy[Any]:
    args = get_args(tp)
    members = [a for a in args if a is not _NoneType]
    enums = [a for a in members if isinstance(a, type) and issubclass(a, enum.Enum)]
    if len(enums) == 1 and str in members and len(members) == 2:
        inner = _open_enum(enums[0])
    else:
        inner = st.one_of([_strategy(a, depth, max_depth) for a in members])
    if len(members) < len(args):
        return st.one_of(st.none(), inner)
    return inner


def _open_enum(cls: type[enum.Enum]) -> SearchStrategy[Any]:
    members = list(cls)
    known = [m.value for m in members if isinstance(m.value, str)]
    return _mostly(st.sampled_from(members), unknown_strings(known), 5)


def _tuple(tp: Any, depth: int, max_depth: int) -> SearchStrategy[Any]:
    args = get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        if depth > max_depth:
            return st.just(())
        elements = _strategy(args[0], depth, max_depth)
        return st.lists(elements, max_size=_MAX_COLLECTION).map(tuple)
    if args == ((),):
        return st.just(())
    return st.tuples(*[_strategy(a, depth, max_depth) for a in args])


def _mapping(tp: Any, depth: int, max_depth: int) -> SearchStrategy[Any]:
    args = get_args(tp) or (str, Any)
    if depth > max_depth:
        return st.just({})
    if args[1] is Any:
        return _JSON_OBJECTS
    keys = _strategy(args[0], depth, max_depth)
    return st.dictionaries(keys, _strategy(args[1], depth, max_depth), max_size=_MAX_COLLECTION)


def _class(
    cls: type,
    typevars: Mapping[Any, Any],
    depth: int,
    max_depth: int,
    overrides: Mapping[str, SearchStrategy[Any]],
) -> SearchStrategy[Any]:
    """``st.builds`` over every ``__init__`` argument of an attrs class."""
    hints = _hints(cls)
    kwargs: dict[str, SearchStrategy[Any]] = {}
    for a in attrs.fields(cls):
        if not a.init:
            continue
        if a.alias in overrides:
            kwargs[a.alias] = overrides[a.alias]
            continue
        tp = _subst(hints.get(a.name, a.type), typevars)
        kwargs[a.alias] = _field(a, tp, depth + 1, max_depth)
    return st.builds(cls, **kwargs)


def _field(a: attrs.Attribute[Any], tp: Any, depth: int, max_depth: int) -> SearchStrategy[Any]:
    if a.converter is not None:
        # Streamed text (``TextBuffer``) is passed as ``str`` through the init alias.
        tp = _replace_textbuffer(tp)
    if get_origin(tp) is Literal:
        return st.sampled_from(get_args(tp))
    default = a.default
    if default is not attrs.NOTHING and default is not None:
        return st.just(default)  # e.g. ``channel = "ahp-root://"`` of root-scoped params
    if default is None:
        # ``None`` is the field's absence on the wire.
        if depth > max_depth:
            return st.none()
        inner_tp = _without_none(tp)
        if inner_tp is Any or isinstance(inner_tp, TypeVar):
            inner = _JSON_NOT_NULL  # a JSON ``null`` would read back as absent
        else:
            inner = _strategy(inner_tp, depth, max_depth)
        return st.one_of(st.none(), inner)
    return _strategy(tp, depth, max_depth)


def _replace_textbuffer(tp: Any) -> Any:
    if tp is TextBuffer:
        return str
    if _is_union(tp) and TextBuffer in get_args(tp):
        return Union[tuple(str if a is TextBuffer else a for a in get_args(tp))]  # noqa: UP007
    return tp


def _unknown_variant(
    cls: type, key: str, tags: SearchStrategy[Any], depth: int, max_depth: int
) -> SearchStrategy[Any]:
    """``Unknown<Name>(tag, raw)`` with ``raw[key] == tag``, as a decoder would keep it."""
    (tag_field,) = (a for a in attrs.fields(cls) if a.name != "raw")
    rest = _JSON_OBJECTS if depth <= max_depth else st.just({})

    def make(tag: Any, extra: dict[str, Any]) -> Any:
        raw = {k: v for k, v in extra.items() if k != key}
        raw[key] = tag
        return cls(**{tag_field.alias: tag, "raw": raw})

    return st.builds(make, tags, rest)


# ---------------------------------------------------------------------------
# Types with rules beyond their annotations
# ---------------------------------------------------------------------------


def _action_types(kind: ChannelKind | None = None) -> SearchStrategy[str]:
    """Unknown action ``type`` values, ``<channel>/<name>`` like the known ones."""
    prefixes = [kind.value] if kind is not None else [k.value for k in _ACTION_UNIONS]
    shaped = st.builds(lambda p, n: f"{p}/{n}", st.sampled_from(prefixes), _NAMES)
    return shaped.filter(lambda s: s not in _ACTION_TYPES)


def _actions(kind: ChannelKind | None, unknown: bool, depth: int, max_depth: int
             ) -> SearchStrategy[Any]:
    union = t.StateAction if kind is None else _ACTION_UNIONS[kind]
    known = st.one_of(
        [_strategy(cls, depth, max_depth) for cls in get_args(union) if cls is not t.UnknownAction]
    )
    if not unknown:
        return known
    key, _ = _UNKNOWN[t.UnknownAction]
    rare = _unknown_variant(t.UnknownAction, key, _action_types(kind), depth, max_depth)
    return _mostly(known, rare, 8)


def _envelopes(kind: ChannelKind | None, unknown: bool, depth: int, max_depth: int
               ) -> SearchStrategy[Any]:
    kinds = list(_ACTION_UNIONS) if kind is None else [kind]
    return st.one_of([
        st.deferred(lambda k=k: _class(  # type: ignore[misc]
            t.ActionEnvelope, {}, depth, max_depth,
            {"channel": channel_uris(k), "action": _actions(k, unknown, depth + 1, max_depth)},
        ))
        for k in kinds
    ])


def _snapshots(kind: ChannelKind | None, depth: int, max_depth: int) -> SearchStrategy[Any]:
    kinds = list(_STATES) if kind is None else [kind]
    return st.one_of([
        st.deferred(lambda k=k: _class(  # type: ignore[misc]
            t.Snapshot, {}, depth, max_depth,
            {"resource": channel_uris(k), "state": _strategy(_STATES[k], depth + 1, max_depth)},
        ))
        for k in kinds
    ])


# One activity value plus any of the flags, in one choice so that it shrinks to ``IDLE``.
_KNOWN_STATUS: SearchStrategy[t.SessionStatus] = st.sampled_from([
    t.SessionStatus(activity | flags)
    for flags in (0, t.SessionStatus.IS_READ, t.SessionStatus.IS_ARCHIVED,
                  t.SessionStatus.IS_READ | t.SessionStatus.IS_ARCHIVED)
    for activity in (t.SessionStatus.IDLE, t.SessionStatus.IN_PROGRESS,
                     t.SessionStatus.INPUT_NEEDED, t.SessionStatus.ERROR)
])
_SESSION_STATUS: SearchStrategy[t.SessionStatus] = _mostly(
    _KNOWN_STATUS,
    st.one_of(
        # A known activity with flags this library does not know (bits 7-31).
        st.builds(lambda known, high: t.SessionStatus(known | (high << 7)),
                  _KNOWN_STATUS, st.integers(1, 2**25 - 1)),
        # Any 32-bit pattern, unknown activity values included.
        st.integers(0, 2**32 - 1).map(t.SessionStatus),
    ),
    5,
)

_Builder = Callable[[int, int], SearchStrategy[Any]]
_SPECIAL: dict[Any, _Builder] = {
    t.SessionStatus: lambda depth, max_depth: _SESSION_STATUS,
    t.Snapshot: lambda depth, max_depth: _snapshots(None, depth, max_depth),
    t.ActionEnvelope: lambda depth, max_depth: _envelopes(None, True, depth, max_depth),
    t.StateAction: lambda depth, max_depth: _actions(None, True, depth, max_depth),
    **{union: functools.partial(_actions, kind, True) for kind, union in _ACTION_UNIONS.items()},
}


# ---------------------------------------------------------------------------
# Conveniences
# ---------------------------------------------------------------------------


def actions(
    channel: ChannelKind | str | None = None,
    *,
    unknown: bool = True,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> SearchStrategy[Any]:
    """State actions (``StateAction``), of one channel kind if ``channel`` is given
    (``actions(channel="chat")``).  About one in eight is an ``UnknownAction`` whose
    ``type`` looks like ``<channel>/<name>`` but is not a known type; pass
    ``unknown=False`` for known actions only."""
    kind = None if channel is None else _channel_kind(channel)
    if kind is not None and kind not in _ACTION_UNIONS:
        raise ValueError(f"channel kind {kind.value!r} has no actions")
    return _actions(kind, unknown, 0, max_depth)


def envelopes(
    channel: ChannelKind | str | None = None,
    *,
    unknown: bool = True,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> SearchStrategy[t.ActionEnvelope]:
    """``ActionEnvelope``s whose ``channel`` URI is of the kind its action belongs to."""
    kind = None if channel is None else _channel_kind(channel)
    if kind is not None and kind not in _ACTION_UNIONS:
        raise ValueError(f"channel kind {kind.value!r} has no actions")
    return _envelopes(kind, unknown, 0, max_depth)


def snapshots(
    channel: ChannelKind | str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH
) -> SearchStrategy[t.Snapshot]:
    """``Snapshot``s whose ``state`` is the state type of the ``resource`` URI's kind."""
    kind = None if channel is None else _channel_kind(channel)
    if kind is not None and kind not in _STATES:
        raise ValueError(f"channel kind {kind.value!r} has no state")
    return _snapshots(kind, 0, max_depth)


def states(
    cls: type[T] | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH
) -> SearchStrategy[T]:
    """Channel states: of ``cls`` (``states(ChatState)``), or of any channel."""
    if cls is None:
        return st.one_of([from_type(c, max_depth=max_depth) for c in _STATES.values()])
    if cls not in _STATES.values():
        expected = ", ".join(c.__name__ for c in _STATES.values())
        raise TypeError(f"{cls!r} is not a channel state; expected one of {expected}")
    return from_type(cls, max_depth=max_depth)


_ERROR_CODES: SearchStrategy[int] = _mostly(
    st.sampled_from([int(c) for c in (*t.JsonRpcErrorCode, *t.AhpErrorCode)]), _INTS, 5
)
_REQUEST_IDS: SearchStrategy[int | str] = st.one_of(_INTS, _TEXT)


@functools.cache
def _method_messages(info: Method[object, object], max_depth: int) -> SearchStrategy[Any]:
    params = _strategy(info.params, 1, max_depth)
    if info.kind is MessageKind.NOTIFICATION:
        return st.builds(t.JsonRpcNotification, method=st.just(info.name), params=params)
    result = st.none() if info.result is None else _strategy(info.result, 1, max_depth)
    error = st.builds(
        t.JsonRpcError, code=_ERROR_CODES, message=_TEXT,
        data=st.one_of(st.none(), _JSON_NOT_NULL),
    )
    return st.one_of(
        st.builds(t.JsonRpcRequest, id=_REQUEST_IDS, method=st.just(info.name), params=params),
        st.builds(t.JsonRpcSuccessResponse, id=_REQUEST_IDS, result=result),
        st.builds(t.JsonRpcErrorResponse, id=st.one_of(st.none(), _REQUEST_IDS), error=error),
    )


def messages(
    method: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH
) -> SearchStrategy[t.JsonRpcMessage]:
    """JSON-RPC messages of the AHP methods (:data:`agenthost_protocol.methods.METHODS`),
    of ``method`` only if given: requests and notifications with the method's params,
    and, for requests, success responses with its result and error responses.
    Decode responses with ``parse_message(data, result_method=...)`` naming the method."""
    if method is None:
        infos = list(METHODS.values())
    elif method in METHODS:
        infos = [METHODS[method]]
    else:
        raise ValueError(f"{method!r} is not an AHP method")
    return st.one_of([_method_messages(info, max_depth) for info in infos])


def wire_values(tp: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> SearchStrategy[Any]:
    """The wire (JSON-compatible) form of values of ``tp``, as encoded by
    :func:`agenthost_protocol.wire.unstructure`: input for decoders under test."""
    return from_type(tp, max_depth=max_depth).map(unstructure)


def register_type_strategies() -> None:
    """Register :func:`from_type` with Hypothesis for every model class, so that
    ``st.from_type(ChatState)`` and ``st.builds(f)`` with AHP-typed parameters work."""
    for name in t.__all__:
        obj = getattr(t, name)
        if isinstance(obj, type) and (attrs.has(obj) or obj is t.SessionStatus):
            if getattr(obj, "__parameters__", ()):
                continue  # generic: Hypothesis would pass the parameters
            st.register_type_strategy(obj, from_type(obj))
    st.register_type_strategy(TextBuffer, _SCALARS[TextBuffer])
