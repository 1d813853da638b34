"""Frozen wire shapes and the bidirectional compatibility check.

A *wire shape* is a JSON description of every AHP type as it appears on the
wire: for each structure its fields by wire name, each with its type and
whether it is required; for each enum its values; for each union its members.
:func:`describe_wire_shape` computes it from the living model
(``agenthost_protocol.types``); ``tools/freeze_wire_shape.py`` writes it to
``agenthost_protocol/_wire_shapes/<version>.json`` when a version is frozen.

:func:`compare_wire_shapes` then checks a frozen shape against the living one
in both directions, like the spec's former ``AssertCompatible<Frozen, Current>``:

* the living model must still carry every frozen field, with the same type
  and the same required-ness (removing or retyping a field breaks older peers
  that send or expect it);
* a field the frozen shape lacks must be optional (older peers never send it);
* enum values and union members may be added (older peers ignore or preserve
  what they do not know) but not removed;
* new types may appear freely: they are only reachable through new fields or
  new union members, which the rules above already check.

:func:`check_wire_compatibility` runs the comparison against every bundled
snapshot whose version is SemVer-compatible with
:data:`~agenthost_protocol.versions.PROTOCOL_VERSION` (same ``0.MINOR`` before
1.0); ``python -m agenthost_protocol.compat`` does the same from a shell.

Type notation in a shape: ``string``, ``integer``, ``number``, ``boolean``,
``null``, ``any``; a JSON literal such as ``"root/agentsChanged"`` or
``true``; ``array<T>``; ``map<T>`` (an object with arbitrary keys); the name
of a described type; alternatives joined by ``" | "`` in sorted order.
JSON-RPC framing (``types.messages``) is JSON-RPC 2.0, not AHP, and is left
out, as are the library's ``Unknown*`` placeholder classes (a union holding
one is marked ``"open"``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types as _pytypes
import typing
from collections.abc import Mapping, Sequence
from enum import Enum
from importlib import resources
from typing import Any, Final, Literal, Union

import attrs
from attrs import frozen

from .semver import is_valid_version, parse_version
from .types._tags import TAGGED_UNIONS
from .types._text import TextBuffer
from .versions import PROTOCOL_VERSION, are_compatible

__all__ = [
    "FORMAT",
    "Incompatibility",
    "IncompatibilityKind",
    "WireShape",
    "check_wire_compatibility",
    "compare_wire_shapes",
    "describe_wire_shape",
    "dumps_wire_shape",
    "frozen_versions",
    "load_wire_shape",
    "main",
]

FORMAT: Final = 1
"""Version of the snapshot file format."""

WireShape = dict[str, Any]
"""A wire shape: ``{"format", "protocolVersion", "types": {name: description}}``."""

_SNAPSHOT_DIR: Final = "_wire_shapes"
_TYPES_PACKAGE: Final = "agenthost_protocol.types"
_FRAMING_MODULES: Final = ("agenthost_protocol.types.messages",)
"""Modules whose exports are JSON-RPC framing, not versioned AHP types."""

_TAG_CANDIDATES: Final = ("type", "kind", "status", "state")
"""Field names that serve as union discriminators in AHP."""

_PRIMITIVES: Final[dict[Any, str]] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


class IncompatibilityKind(str, Enum):
    """How the living model breaks a frozen shape."""

    TYPE_REMOVED = "type-removed"
    KIND_CHANGED = "kind-changed"
    FIELD_REMOVED = "field-removed"
    FIELD_TYPE_CHANGED = "field-type-changed"
    FIELD_NOW_REQUIRED = "field-now-required"
    FIELD_NOW_OPTIONAL = "field-now-optional"
    REQUIRED_FIELD_ADDED = "required-field-added"
    ENUM_VALUE_REMOVED = "enum-value-removed"
    UNION_MEMBER_REMOVED = "union-member-removed"
    UNION_TAG_CHANGED = "union-tag-changed"
    UNION_CLOSED = "union-closed"


@frozen
class Incompatibility:
    """One way the living model breaks a frozen wire shape."""

    snapshot: str
    """Protocol version of the frozen shape."""
    type_name: str
    """The type concerned."""
    field: str | None
    """The wire name of the field concerned, if any."""
    kind: IncompatibilityKind
    message: str
    """A sentence naming the type and the field."""

    def __str__(self) -> str:
        return f"[{self.snapshot}] {self.message}"


# -- describing the living model -----------------------------------------------


def _types_namespace() -> dict[str, object]:
    package = importlib.import_module(_TYPES_PACKAGE)
    return {name: getattr(package, name) for name in package.__all__}


def _framing_names() -> set[str]:
    names: set[str] = set()
    for module_name in _FRAMING_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # pragma: no cover - the framing module is optional
            continue
        names.update(getattr(module, "__all__", ()))
    return names


def _is_union(obj: object) -> bool:
    return typing.get_origin(obj) in (Union, _pytypes.UnionType)


def _is_placeholder(cls: type) -> bool:
    """The library's ``Unknown*`` classes: they preserve, they are not wire types."""
    return cls.__name__.startswith("Unknown") and any(f.name == "raw" for f in attrs.fields(cls))


def _is_wire_type(obj: object) -> bool:
    """Unions, enums and model classes; not constants, plain aliases or placeholders."""
    if _is_union(obj):
        return True
    if not isinstance(obj, type):
        return False
    return issubclass(obj, Enum) or (attrs.has(obj) and not _is_placeholder(obj))


def _literal_json(value: object) -> str:
    if isinstance(value, Enum):
        value = value.value
    return json.dumps(value)


class _Describer:
    def __init__(self, namespace: Mapping[str, object]) -> None:
        self.namespace = namespace
        self.globals = {**_types_namespace(), **namespace}
        self.framing = _framing_names()
        self.union_names: dict[frozenset[Any], str] = {}
        for name in sorted(namespace, reverse=True):  # the first name wins
            obj = namespace[name]
            if _is_union(obj) and name not in self.framing:
                self.union_names[frozenset(typing.get_args(obj))] = name
        self.types: dict[str, dict[str, Any]] = {}
        self.pending: list[tuple[str, object]] = []

    # rendering -------------------------------------------------------------

    def render(self, tp: object) -> str:
        return " | ".join(sorted(set(self.atoms(tp))))

    def union_atoms(self, args: Sequence[object]) -> list[str]:
        name = self.union_names.get(frozenset(args))
        if name is not None:
            self.want(name, self.namespace[name])
            return [name]
        out: list[str] = []
        for arg in args:
            out += self.atoms(arg)
        return out

    def atoms(self, tp: object) -> list[str]:
        if tp in _PRIMITIVES:
            return [_PRIMITIVES[tp]]
        if tp is Any:
            return ["any"]
        if tp is TextBuffer:
            return ["string"]  # streamed text: a plain string on the wire
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is Literal:
            return [_literal_json(a) for a in args]
        if origin in (Union, _pytypes.UnionType):
            return self.union_atoms(args)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return [f"array<{self.render(args[0])}>"]
        if origin in (Mapping, dict) and len(args) == 2:
            return [f"map<{self.render(args[1])}>"]
        if isinstance(tp, type) and attrs.has(tp):
            if _is_placeholder(tp):
                return ["unknown"]
            self.want(tp.__name__, tp)
            return [tp.__name__]
        if isinstance(tp, type) and issubclass(tp, Enum):
            self.want(tp.__name__, tp)
            return [tp.__name__]
        raise TypeError(f"cannot describe the wire type {tp!r}")

    # describing ------------------------------------------------------------

    def want(self, name: str, obj: object) -> None:
        if name not in self.types:
            self.types[name] = {}  # reserve: also breaks recursion
            self.pending.append((name, obj))

    def hints(self, cls: type) -> dict[str, Any]:
        module = sys.modules.get(cls.__module__)
        globalns = {**self.globals, **(vars(module) if module is not None else {})}
        try:
            return typing.get_type_hints(cls, globalns=globalns)
        except (NameError, TypeError):
            return {}

    def struct(self, cls: type) -> dict[str, Any]:
        hints = self.hints(cls)
        fields: dict[str, dict[str, Any]] = {}
        for f in attrs.fields(cls):
            tp = hints.get(f.name, f.type)
            if isinstance(tp, str):
                raise TypeError(f"{cls.__name__}.{f.name}: unresolved annotation {tp!r}")
            wire = f.metadata.get("wire") or _camel(f.alias or f.name)
            # A None default means "may be absent"; any other default (a
            # discriminator, a fixed channel) is always written.
            optional = f.default is None
            if optional and _is_union(tp):
                args = typing.get_args(tp)
                if frozenset(args) not in self.union_names:
                    tp = Union[tuple(a for a in args if a is not type(None))]  # noqa: UP007
            fields[wire] = {
                "attribute": f.name.lstrip("_"),
                "required": not optional,
                "type": self.render(tp),
            }
        return {"kind": "struct", "fields": dict(sorted(fields.items()))}

    def union(self, obj: object) -> dict[str, Any]:
        args = typing.get_args(obj)
        members: set[str] = set()
        is_open = False
        for arg in args:
            if isinstance(arg, type) and attrs.has(arg) and _is_placeholder(arg):
                is_open = True
                continue
            members.update(self.atoms(arg))
        tagged = TAGGED_UNIONS.get(obj)
        return {
            "kind": "union",
            "members": sorted(members),
            "open": is_open,
            "tag": self.common_tag(args) if tagged is None else tagged[0],
        }

    def common_tag(self, members: Sequence[object]) -> str | None:
        """The discriminator of an untagged union: a field every member fixes to literals."""
        classes = [m for m in members if isinstance(m, type) and attrs.has(m)]
        classes = [c for c in classes if not _is_placeholder(c)]
        if not classes or len(classes) < len(members) - 1:
            return None
        for key in _TAG_CANDIDATES:
            if all(typing.get_origin(self.hints(c).get(key)) is Literal for c in classes):
                return key
        return None

    def describe(self, name: str, obj: object) -> dict[str, Any]:
        if _is_union(obj):
            return self.union(obj)
        if isinstance(obj, type) and issubclass(obj, Enum):
            values = {m.value for m in obj.__members__.values()}
            return {"kind": "enum", "values": sorted(values, key=lambda v: (type(v).__name__, v))}
        assert isinstance(obj, type)
        return self.struct(obj)

    def run(self) -> dict[str, dict[str, Any]]:
        for name in sorted(self.namespace):
            obj = self.namespace[name]
            if name not in self.framing and _is_wire_type(obj):
                self.want(name, obj)
        while self.pending:
            name, obj = self.pending.pop()
            self.types[name] = self.describe(name, obj)
        return dict(sorted(self.types.items()))


def _camel(name: str) -> str:
    head, *rest = name.lstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def describe_wire_shape(namespace: Mapping[str, object] | None = None) -> WireShape:
    """The wire shape of the living model.

    ``namespace`` maps exported names to types; it defaults to everything
    ``agenthost_protocol.types`` exports.  Pass a modified copy to see what a
    change would do (the tests do exactly that).
    """
    ns = _types_namespace() if namespace is None else dict(namespace)
    return {
        "format": FORMAT,
        "protocolVersion": PROTOCOL_VERSION,
        "types": _Describer(ns).run(),
    }


def _dump_type(name: str, desc: dict[str, Any], last: bool) -> list[str]:
    comma = "" if last else ","
    collections = [k for k, v in desc.items() if isinstance(v, (list, dict))]
    if len(collections) != 1:
        return [f"    {json.dumps(name)}: {json.dumps(desc, sort_keys=True)}{comma}"]
    key = collections[0]
    scalars = sorted((k, v) for k, v in desc.items() if k != key)
    scalars.sort(key=lambda kv: kv[0] != "kind")
    head = "".join(f"{json.dumps(k)}: {json.dumps(v)}, " for k, v in scalars)
    body = desc[key]
    if not body:
        return [f"    {json.dumps(name)}: {{{head}{json.dumps(key)}: {json.dumps(body)}}}{comma}"]
    if isinstance(body, dict):
        items = [
            f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(body.items())
        ]
        opening, closing = "{", "}"
    else:
        items = [json.dumps(v) for v in body]
        opening, closing = "[", "]"
    lines = [f"    {json.dumps(name)}: {{{head}{json.dumps(key)}: {opening}"]
    lines += [f"      {item}{',' if i < len(items) - 1 else ''}" for i, item in enumerate(items)]
    lines.append(f"    {closing}}}{comma}")
    return lines


def dumps_wire_shape(shape: WireShape) -> str:
    """The canonical snapshot text: sorted, one line per field, enum value or
    union member, newline-terminated.  ``json.loads`` reads it back."""
    lines = ["{", f'  "format": {json.dumps(shape["format"])},']
    lines.append(f'  "protocolVersion": {json.dumps(shape["protocolVersion"])},')
    lines.append('  "types": {')
    entries = sorted(shape["types"].items())
    for i, (name, desc) in enumerate(entries):
        lines += _dump_type(name, desc, i == len(entries) - 1)
    lines += ["  }", "}", ""]
    return "\n".join(lines)


# -- bundled snapshots ---------------------------------------------------------


def frozen_versions() -> tuple[str, ...]:
    """The versions with a bundled snapshot, newest first."""
    directory = resources.files("agenthost_protocol").joinpath(_SNAPSHOT_DIR)
    found = [
        entry.name[: -len(".json")]
        for entry in directory.iterdir()
        if entry.name.endswith(".json") and is_valid_version(entry.name[: -len(".json")])
    ]
    return tuple(sorted(found, key=parse_version, reverse=True))


def load_wire_shape(version: str) -> WireShape:
    """The bundled snapshot of ``version``; ``FileNotFoundError`` if there is none."""
    parse_version(version)  # a malformed name (or a path) raises InvalidVersion
    directory = resources.files("agenthost_protocol").joinpath(_SNAPSHOT_DIR)
    path = directory.joinpath(f"{version}.json")
    shape: WireShape = json.loads(path.read_text(encoding="utf-8"))
    return shape


# -- comparison ----------------------------------------------------------------


def _compare_struct(
    out: list[Incompatibility], version: str, name: str, old: dict[str, Any], new: dict[str, Any]
) -> None:
    def report(kind: IncompatibilityKind, wire: str, message: str) -> None:
        out.append(Incompatibility(version, name, wire, kind, f"{name}.{wire}: {message}"))

    old_fields: dict[str, Any] = old["fields"]
    new_fields: dict[str, Any] = new["fields"]
    for wire, was in old_fields.items():
        now = new_fields.get(wire)
        if now is None:
            report(
                IncompatibilityKind.FIELD_REMOVED,
                wire,
                f"field removed (it was {'required' if was['required'] else 'optional'}"
                f" {was['type']}; {version} peers send and expect it)",
            )
            continue
        if now["type"] != was["type"]:
            report(
                IncompatibilityKind.FIELD_TYPE_CHANGED,
                wire,
                f"field type changed from {was['type']} to {now['type']}",
            )
        if now["required"] and not was["required"]:
            report(
                IncompatibilityKind.FIELD_NOW_REQUIRED,
                wire,
                f"optional field became required ({version} peers may omit it)",
            )
        elif was["required"] and not now["required"]:
            report(
                IncompatibilityKind.FIELD_NOW_OPTIONAL,
                wire,
                f"required field became optional ({version} peers expect it)",
            )
    for wire, now in new_fields.items():
        if wire not in old_fields and now["required"]:
            report(
                IncompatibilityKind.REQUIRED_FIELD_ADDED,
                wire,
                f"required field added ({now['type']}; {version} peers never send it);"
                " new fields must be optional",
            )


def _compare_type(
    out: list[Incompatibility], version: str, name: str, old: dict[str, Any], new: dict[str, Any]
) -> None:
    def report(kind: IncompatibilityKind, message: str) -> None:
        out.append(Incompatibility(version, name, None, kind, f"{name}: {message}"))

    if old["kind"] != new["kind"]:
        report(IncompatibilityKind.KIND_CHANGED, f"changed from {old['kind']} to {new['kind']}")
    elif old["kind"] == "struct":
        _compare_struct(out, version, name, old, new)
    elif old["kind"] == "enum":
        for value in old["values"]:
            if value not in new["values"]:
                report(IncompatibilityKind.ENUM_VALUE_REMOVED, f"enum value {value!r} removed")
    elif old["kind"] == "union":
        for member in old["members"]:
            if member not in new["members"]:
                report(IncompatibilityKind.UNION_MEMBER_REMOVED, f"union member {member} removed")
        if old["tag"] != new["tag"]:
            report(
                IncompatibilityKind.UNION_TAG_CHANGED,
                f"union tag changed from {old['tag']!r} to {new['tag']!r}",
            )
        if old["open"] and not new["open"]:
            report(IncompatibilityKind.UNION_CLOSED, "union no longer preserves unknown members")


def compare_wire_shapes(frozen: WireShape, current: WireShape) -> list[Incompatibility]:
    """Every way ``current`` breaks ``frozen`` (empty when compatible).

    Both are wire shapes (:func:`describe_wire_shape`, :func:`load_wire_shape`).
    The result is sorted by type and field.
    """
    version = str(frozen.get("protocolVersion", "?"))
    out: list[Incompatibility] = []
    new_types: dict[str, Any] = current["types"]
    for name, old in sorted(frozen["types"].items()):
        new = new_types.get(name)
        if new is None:
            out.append(
                Incompatibility(
                    version,
                    name,
                    None,
                    IncompatibilityKind.TYPE_REMOVED,
                    f"{name}: type removed ({version} peers still use it)",
                )
            )
            continue
        _compare_type(out, version, name, old, new)
    return out


def check_wire_compatibility(current: WireShape | None = None) -> list[Incompatibility]:
    """Compare the living model (or ``current``) with every bundled snapshot
    whose version is SemVer-compatible with ``PROTOCOL_VERSION``."""
    shape = describe_wire_shape() if current is None else current
    out: list[Incompatibility] = []
    for version in frozen_versions():
        if are_compatible(version, PROTOCOL_VERSION):
            out += compare_wire_shapes(load_wire_shape(version), shape)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agenthost_protocol.compat``: run :func:`check_wire_compatibility`.

    Prints one line per incompatibility and returns 1, or a summary and 0.
    """
    argparse.ArgumentParser(
        prog="python -m agenthost_protocol.compat",
        description="Check the wire model against the bundled frozen wire shapes.",
    ).parse_args(argv)
    checked = [v for v in frozen_versions() if are_compatible(v, PROTOCOL_VERSION)]
    problems = check_wire_compatibility()
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} incompatibilities with the frozen wire shape(s)", file=sys.stderr)
        return 1
    print(f"wire shape of {PROTOCOL_VERSION} is compatible with: {', '.join(checked) or 'none'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
