"""What ``@frozen(kw_only=True)`` builds for a model class, for the generated class bodies.

attrs builds a class's methods when the class is created: it writes their
source and ``compile``s it, about half a millisecond a class, most of the
time it takes to import the model.  The generated modules carry those
methods as source instead (``tools/gen_model.py`` writes them at the end of
each class body, under ``if not TYPE_CHECKING:``), so a class costs only its
body; type checkers still read the ``@frozen(kw_only=True)`` declaration
above them.  The classes stay attrs classes (``attrs.fields``, ``attrs.has``,
``attrs.evolve``, ``attrs.inspect``, cattrs); what they share is here:

* ``frozen`` and ``field``, the run-time stand-ins of attrs's: the class body
  is the class;
* the ``attrs.Attribute`` tuple of ``__attrs_attrs__``, built on first use
  (:class:`_fields`: a program reads the fields of few of the classes);
* the methods that are the same for every class (attrs's frozen
  ``__setattr__``, ``__ne__``, pickling).

Written by hand, beside the generated modules (``tools/gen_model.py`` imports
its names into each of them).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from operator import itemgetter
from typing import Any, TypeVar

import attrs
from attrs import NOTHING

__all__ = ["field", "frozen", "plain_init"]

T = TypeVar("T")


def frozen(*, kw_only: bool) -> Callable[[type[T]], type[T]]:
    """The run-time ``@frozen(kw_only=True)`` of the generated modules: the body is the class."""
    return _as_written


def _as_written(cls: type[T]) -> type[T]:
    return cls


def field(**_: object) -> None:
    """The run-time ``field(...)``: the class body drops the attribute (the slot replaces it)."""
    return None


def plain_init(cls: type) -> bool:
    """Whether ``cls`` is a class of the generated model, whose ``__init__`` only stores
    its arguments (converted) in the slots, as an ``__init__`` written by attrs does."""
    return cls.__dict__.get("__attrs_props__") is _PROPS


# -- the shared pieces ---------------------------------------------------------

# attrs's own frozen ``__setattr__``: attrs tells a frozen base class by it.
try:
    from attr._make import _frozen_delattrs, _frozen_setattrs
except ImportError:  # pragma: no cover - an attrs that moved them

    def _frozen_setattrs(self: Any, name: Any, value: Any) -> Any:
        raise attrs.exceptions.FrozenInstanceError

    def _frozen_delattrs(self: Any, name: Any) -> Any:
        raise attrs.exceptions.FrozenInstanceError


_setattr_of: Any = object.__setattr__.__get__
"""``object.__setattr__`` bound to an instance: how a frozen ``__init__`` stores."""

_evolve = attrs.evolve
_REPLACE = sys.version_info >= (3, 13)
"""attrs gives ``copy.replace`` a ``__replace__`` from Python 3.13 on."""

_ClassProps: Any = attrs.ClassProps
_PROPS = _ClassProps(
    is_exception=False, is_slotted=True, has_weakref_slot=True, is_frozen=True,
    kw_only=_ClassProps.KeywordOnly.YES, collected_fields_by_mro=True, added_init=True,
    added_repr=True, added_eq=True, added_ordering=False,
    hashability=_ClassProps.Hashability.HASHABLE, added_match_args=True, added_str=False,
    added_pickling=True, on_setattr_hook=None, field_transformer=None,
)
"""``attrs.inspect`` of every model class: what ``@frozen(kw_only=True)`` records."""


def _ne(self: Any, other: object) -> Any:
    result = self.__eq__(other)
    if result is NotImplemented:
        return NotImplemented
    return not result


def _getstate(self: Any) -> dict[str, Any]:
    return {a.name: getattr(self, a.name) for a in attrs.fields(type(self))}


def _setstate(self: Any, state: Any) -> None:
    store = _setattr_of(self)
    names = [a.name for a in attrs.fields(type(self))]
    if isinstance(state, tuple):  # as attrs before 22.2 pickled
        for name, value in zip(names, state, strict=False):
            store(name, value)
    else:
        for name in names:
            if name in state:
                store(name, state[name])


_repr_context = threading.local()


def _repr_enter(obj: object) -> set[int] | None:
    """The ids of the objects being repr'd in this thread, ``obj``'s added; ``None`` when
    ``obj`` is one of them already (attrs then writes ``...``)."""
    try:
        seen: set[int] = _repr_context.seen
    except AttributeError:
        seen = _repr_context.seen = set()
    if id(obj) in seen:
        return None
    seen.add(id(obj))
    return seen


# -- attrs.fields ------------------------------------------------------------

_Spec = tuple[str, Any, Any, "str | None", Any, "bool | None", Any, "dict[str, Any] | None"]
_Attribute: Any = attrs.Attribute
_ALIAS_IS_DEFAULT = "alias_is_default" in _Attribute.__slots__  # attrs 26.1
_BUILDING = threading.RLock()


def _field(
    name: str,
    type: Any,
    default: Any = NOTHING,
    *,
    alias: str | None = None,
    converter: Any = None,
    hash: bool | None = None,
    eq_key: Any = None,
    metadata: dict[str, Any] | None = None,
) -> _Spec:
    """A field as ``field()`` declares it, with its annotation evaluated.

    attrs keeps an annotation as its text (``from __future__ import
    annotations``) until ``attrs.resolve_types`` evaluates it, one ``compile``
    each; the generated class passes the evaluated type instead, what
    ``resolve_types`` would set (so the class is marked resolved).
    """
    return (name, type, default, alias, converter, hash, eq_key, metadata)


class _fields:
    """A class's ``__attrs_attrs__`` until it is first read, then replaced by the
    tuple of ``attrs.Attribute`` attrs would have made (with its name accessors).

    ``specs`` runs then, once the whole model is imported: the annotations it
    evaluates name classes of other modules, bound by ``types/__init__``.
    """

    __slots__ = ("_owner", "_specs")

    def __init__(self, specs: Callable[[], tuple[_Spec, ...]]) -> None:
        self._specs = specs
        self._owner: type | None = None

    def __set_name__(self, owner: type, name: str) -> None:
        self._owner = owner

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        cls = self._owner
        assert cls is not None
        with _BUILDING:
            built = cls.__dict__["__attrs_attrs__"]
            if built is self:  # not built by another thread meanwhile
                built = _attributes(cls, self._specs())
                type.__setattr__(cls, "__attrs_attrs__", built)
                type.__setattr__(cls, "__attrs_types_resolved__", cls)
        return built


def _attributes(cls: type, specs: tuple[_Spec, ...]) -> tuple[Any, ...]:
    made = []
    for name, type_, default, alias, converter, hash_, eq_key, metadata in specs:
        options = {}
        if _ALIAS_IS_DEFAULT:
            options["alias_is_default"] = alias is None
        made.append(_Attribute(
            name=name, default=default, validator=None, repr=True, cmp=None, hash=hash_,
            init=True, inherited=False, metadata=metadata, type=type_,
            converter=converter, kw_only=True, eq=True, eq_key=eq_key, order=True,
            order_key=eq_key, on_setattr=None,
            alias=alias if alias is not None else name.lstrip("_"), **options,
        ))
    holder = type(f"{cls.__name__}Attributes", (tuple,), {
        spec[0]: property(itemgetter(i)) for i, spec in enumerate(specs)
    })
    return holder(made)  # type: ignore[no-any-return]
