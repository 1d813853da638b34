"""JSON values as AHP carries them: validated deep copies and JSON equality.

Open JSON fields (``_meta``, config values, JSON Schema documents, the raw
payload of ``Unknown…`` variants) hold plain ``dict``/``list`` values inside
frozen model objects.  Two rules keep them honest:

* **No aliasing.**  Decoding copies what the caller passed in, and encoding
  copies what the model holds, so nobody can edit a frozen value through a
  reference it handed out or received (:func:`copy_json`).
* **Strict JSON.**  Only ``dict`` (string keys), ``list``, ``str`` without lone
  surrogates (they cannot be written as UTF-8), ``int``, finite ``float``,
  ``bool`` and ``None`` are JSON; anything else is reported with its path.
* **JSON equality.**  ``True == 1`` in Python but not in JSON; reducers and the
  reconciler decide "did anything change" with :func:`json_equal`.

Everything is iterative: a 100,000-deep value is copied or compared without
recursion.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, TypeAlias

__all__ = [
    "JsonEq",
    "JsonValueError",
    "copy_json",
    "json_equal",
    "lone_surrogate_at",
    "repair_json",
]


class JsonValueError(ValueError):
    """A value that is not JSON, at ``path`` (segments from the value's root)."""

    def __init__(self, message: str, path: tuple[str | int, ...]) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def lone_surrogate_at(text: str) -> int:
    """The index of the first lone surrogate in ``text``, or -1."""
    if text.isascii():
        return -1
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return -1


# A path is built only when an error is reported: each stack entry keeps a
# link to its parent's (key, link) instead of a growing tuple, so copying a
# deep value stays linear.
_Link = tuple[str | int, "Any"] | None


def _path(link: _Link) -> tuple[str | int, ...]:
    out: list[str | int] = []
    while link is not None:
        key, link = link
        out.append(key)
    return tuple(reversed(out))


def _scalar(value: object, link: _Link) -> object:
    if value is None or value is True or value is False:
        return value
    tp = type(value)
    if tp is str:
        if lone_surrogate_at(value) >= 0:  # type: ignore[arg-type]
            raise JsonValueError("a string holds a lone surrogate", _path(link))
        return value
    if tp is int:
        return value
    if tp is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise JsonValueError(f"{value!r} is not a JSON number", _path(link))
        return value
    # Subclasses (an IntEnum, a str subclass) are written as their base value.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _scalar(float(value), link)
    if isinstance(value, str):
        return _scalar(str(value), link)
    raise JsonValueError(f"a {tp.__name__} is not a JSON value", _path(link))


def copy_json(value: object) -> Any:
    """A validated deep copy of the JSON value ``value``.

    Objects become ``dict`` (keys must be strings), arrays ``list`` (tuples are
    accepted as arrays).  Raises :class:`JsonValueError` with the path of the
    first value that is not JSON.
    """
    if not isinstance(value, (Mapping, list, tuple)):
        return _scalar(value, None)
    root: list[Any] = [None]
    stack: list[tuple[object, Any, str | int, _Link]] = [(value, root, 0, None)]
    while stack:
        item, parent, key, link = stack.pop()
        if isinstance(item, Mapping):
            new: dict[str, Any] = {}
            parent[key] = new
            for k, v in item.items():
                if type(k) is not str:
                    raise JsonValueError(f"object key {k!r} is not a string", _path(link))
                if lone_surrogate_at(k) >= 0:
                    raise JsonValueError("an object key holds a lone surrogate", _path(link))
                new[k] = None  # keeps the key order of the source
                stack.append((v, new, k, (k, link)))
        elif isinstance(item, (list, tuple)):
            items: list[Any] = [None] * len(item)
            parent[key] = items
            for i, v in enumerate(item):
                stack.append((v, items, i, (i, link)))
        else:
            parent[key] = _scalar(item, link)
    return root[0]


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


Repair: TypeAlias = tuple[tuple[str | int, ...], str]
"""Where a value was repaired (path segments from the root) and what was done."""


def _repair_text(text: str, path: tuple[str | int, ...], repaired: list[Repair]) -> str:
    if text.isascii() or lone_surrogate_at(text) < 0:
        return text
    repaired.append((path, "lone surrogate replaced by U+FFFD"))
    return _LONE_SURROGATE.sub("\ufffd", text)


def repair_json(value: object) -> tuple[Any, tuple[Repair, ...]]:
    """``value`` made JSON: a copy with every lone surrogate (in strings and keys)
    replaced by U+FFFD and every non-finite number (NaN, an infinity) dropped
    from its object or array; and each repair (path, what).

    What an agent written in JavaScript produces when it cuts a string inside
    an emoji, or a model's NaN: the rest of the value is worth keeping.
    Anything that is not JSON at all (a set, an object) still raises
    :class:`JsonValueError`.
    """
    repaired: list[Repair] = []
    root: list[Any] = [None]
    stack: list[tuple[object, Any, str | int, tuple[str | int, ...]]] = [(value, root, 0, ())]
    drop = object()
    while stack:
        item, parent, key, path = stack.pop()
        if isinstance(item, Mapping):
            new: dict[str, Any] = {}
            parent[key] = new
            for k, v in item.items():
                if type(k) is not str:
                    raise JsonValueError(f"object key {k!r} is not a string", path)
                clean = _repair_text(k, path, repaired)
                new[clean] = drop
                stack.append((v, new, clean, (*path, clean)))
        elif isinstance(item, (list, tuple)):
            items: list[Any] = [drop] * len(item)
            parent[key] = items
            for i, v in enumerate(item):
                stack.append((v, items, i, (*path, i)))
        elif isinstance(item, float) and not math.isfinite(item):
            repaired.append((path, f"{item!r} dropped"))
        elif isinstance(item, str):
            parent[key] = _repair_text(str(item), path, repaired)
        else:
            parent[key] = _scalar(item, None)
    if not repaired:
        return root[0], ()
    # a dropped number left its placeholder: take it out of its object or array
    stack2: list[Any] = [root]
    while stack2:
        node = stack2.pop()
        if isinstance(node, dict):
            for k in [k for k, v in node.items() if v is drop]:
                del node[k]
            stack2.extend(node.values())
        elif isinstance(node, list):
            node[:] = [v for v in node if v is not drop]
            stack2.extend(node)
    return root[0], tuple(reversed(repaired))


def json_equal(a: object, b: object) -> bool:
    """Equality as JSON sees it: ``true`` is not ``1``, ``1`` equals ``1.0``.

    Objects compare by key set and values (key order does not matter), arrays
    element by element; tuples count as arrays.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if isinstance(x, bool) or isinstance(y, bool):
            if not (isinstance(x, bool) and isinstance(y, bool) and x == y):
                return False
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if x != y:
                return False
        elif isinstance(x, str) or isinstance(y, str):
            if not (isinstance(x, str) and isinstance(y, str) and x == y):
                return False
        elif isinstance(x, Mapping) and isinstance(y, Mapping):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:  # None, or values of other types: Python's equality is all there is
            return False
    return True


class JsonEq:
    """The comparison key of an open JSON field: ``==`` and ``hash`` as JSON sees them.

    The generated model passes it as the attrs ``eq`` key of every field that
    holds arbitrary JSON (``_meta``, config values, ``JsonPrimitive``
    defaults, the ``raw`` payload of ``Unknown…`` variants), so model values
    compare as JSON does: ``{"flag": true}`` is not ``{"flag": 1}``.
    """

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonEq) and json_equal(self.value, other.value)

    def __hash__(self) -> int:
        return _json_hash(self.value)

    def __repr__(self) -> str:
        return f"JsonEq({self.value!r})"


def _json_hash(value: object) -> int:
    # Consistent with json_equal: bools apart from numbers, 1 and 1.0 alike,
    # key order ignored.  Only the hashable fields (scalars and arrays of
    # them) are ever hashed; objects hash by their keys alone.
    if isinstance(value, bool):
        return hash(("bool", value))
    if isinstance(value, (int, float, str)) or value is None:
        return hash(value)
    if isinstance(value, (list, tuple)):
        return hash(tuple(_json_hash(item) for item in value))
    if isinstance(value, Mapping):
        return hash(frozenset(value.keys()))
    return hash(value)
