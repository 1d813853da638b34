"""Fast copies and constructors of frozen model instances, for the reducers.

``attrs.evolve`` looks the fields up, builds a keyword dict and re-runs
``__init__`` with its converters, and a frozen ``__init__`` stores every field
through ``object.__setattr__``: about 3 µs for a ``ChatState`` or a
``SessionState`` on the benchmark machine, while a streamed delta has to copy
three objects.  The functions generated here copy a frozen, slotted model
instance in a few hundred nanoseconds: they build the copy as an instance of
a private subclass whose ``__setattr__`` is the plain slot store, then retype
it to the model class (allowed because the subclass adds no slots, so the
layouts are identical).  The result is an ordinary, frozen instance of the
model class.

Every generator refuses a class that is not slotted or that has validators
or ``__attrs_post_init__``: for those, a plain copy of the slots would not be
what ``__init__`` makes.  :func:`evolver` and :func:`builder` run the
fields' converters on the values they are given, as ``__init__`` does;
:func:`replacer` and the copies of :func:`copy_code` do not, so their
callers pass values of the stored type (a ``TextBuffer`` for a text slot).

The generated functions and their private subclasses are made once, at the
import of the module that asks for them, or (:func:`evolve`, for the
reducers that copy many classes a little) at the first copy of a class, in a
bounded cache of a pure function of the class.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Final, ParamSpec, TypeVar, cast

import attrs
from attrs import AttrsInstance

__all__ = [
    "KEEP",
    "builder",
    "copier",
    "copy_code",
    "evolve",
    "evolver",
    "generate",
    "maker",
    "replacer",
]

_T = TypeVar("_T", bound=AttrsInstance)
_P = ParamSpec("_P")

KEEP: Final[Any] = object()
"""The default of an :func:`evolver` argument: keep the old value."""


def _check(cls: type) -> tuple[attrs.Attribute[Any], ...]:
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(cls)
    if (
        "__slots__" not in cls.__dict__
        or hasattr(cls, "__attrs_post_init__")
        or any(field.validator is not None for field in fields)
    ):
        raise TypeError(f"{cls.__name__}: fast copies need a slotted class without validators")
    return fields


def _alias(field: attrs.Attribute[Any]) -> str:
    """The field's ``__init__`` name (attrs sets it on every field of a class)."""
    return field.alias or field.name


def copy_code(
    cls: type, old: str, new: str, values: Mapping[str, str]
) -> tuple[list[str], dict[str, Any]]:
    """The body lines that build ``new`` as a copy of ``old`` (variable names) and their globals.

    Each field gets ``values[field]`` (an expression), else the old value.
    The lines are indented for a function body (four spaces).
    """
    fields = _check(cls)
    # One private subclass per generated function: nothing shared, nothing to
    # register anywhere.  Its ``__init__`` is ``object.__init__``, so that
    # calling it allocates the object faster than ``object.__new__(building)``
    # does; its ``__setattr__`` is ``object.__setattr__``, so that stores
    # specialise to plain slot stores.
    building = type(
        f"_Building{cls.__name__}",
        (cls,),
        {
            "__slots__": (),
            "__init__": object.__init__,
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
        },
    )
    lines = [f"    {new} = _building_{new}()"]
    for field in fields:
        lines.append(f"    {new}.{field.name} = {values.get(field.name, f'{old}.{field.name}')}")
    lines.append(f"    {new}.__class__ = _class_{new}")
    return lines, {f"_building_{new}": building, f"_class_{new}": cls}


def generate(name: str, params: str, body: list[str], namespace: dict[str, Any]) -> Any:
    """Compile ``def name(params): body`` with ``namespace`` as its globals."""
    namespace.update(_KEEP=KEEP)
    exec("\n".join([f"def {name}({params}):", *body]), namespace)
    return namespace[name]


def copier(cls: type[_T], name: str, params: str, values: dict[str, str]) -> Callable[..., _T]:
    """Generate ``def name(__old, <params>)`` storing ``values[field]`` (else the old value)."""
    body, namespace = copy_code(cls, "__old", "__new", values)
    function: Callable[..., _T] = generate(
        name, f"__old, {params}", [*body, "    return __new"], namespace
    )
    return function


def evolver(cls: type[_T]) -> Callable[..., _T]:
    """A fast ``attrs.evolve(old, **changes)`` for ``cls``: the same keyword arguments.

    Arguments are named by their ``__init__`` names (aliases) and go through
    the field's converter, as with ``attrs.evolve``.
    """
    fields = _check(cls)
    namespace: dict[str, Any] = {}
    values: dict[str, str] = {}
    for field in fields:
        name = _alias(field)
        value = name
        if field.converter is not None:
            namespace[f"_convert_{name}"] = field.converter
            value = f"_convert_{name}({name})"
        values[field.name] = f"__old.{field.name} if {name} is _KEEP else {value}"
    body, names = copy_code(cls, "__old", "__new", values)
    params = ", ".join(f"{_alias(field)}=_KEEP" for field in fields)
    function: Callable[..., _T] = generate(
        f"_evolve_{cls.__name__}",
        f"__old, *, {params}",
        [*body, "    return __new"],
        {**namespace, **names},
    )
    return function


def replacer(cls: type[_T], *names: str) -> Callable[..., _T]:
    """A copy of ``cls`` with the fields ``names`` replaced (positional arguments, in order).

    Faster than :func:`evolver` (no defaults, no tests, no converters): for
    the streaming path.
    """
    known = attrs.fields_dict(cls)
    assert all(name in known for name in names), names
    return copier(
        cls,
        f"_{cls.__name__}_with_{'_'.join(name.strip('_') for name in names)}",
        ", ".join(names),
        {name: name for name in names},
    )


def builder(cls: Callable[_P, _T]) -> Callable[_P, _T]:
    """A fast constructor of ``cls``: the same keyword arguments, defaults and converters.

    The attrs ``__init__`` of a frozen class stores each field through a call
    of ``object.__setattr__``; this one stores them as a copy does.
    """
    model = cast("type[_T]", cls)
    params: list[str] = []
    values: dict[str, str] = {}
    namespace: dict[str, Any] = {}
    for field in _check(model):
        name = _alias(field)
        if field.default is attrs.NOTHING:
            params.append(name)
        elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            raise TypeError(f"{model.__name__}.{field.name}: a factory default")
        else:
            namespace[f"_default_{name}"] = field.default
            params.append(f"{name}=_default_{name}")
        if field.converter is None:
            values[field.name] = name
        else:
            namespace[f"_convert_{name}"] = field.converter
            values[field.name] = f"_convert_{name}({name})"
    body, names = copy_code(model, "", "__new", values)
    function: Callable[_P, _T] = generate(
        f"_new_{model.__name__}",
        "*, " + ", ".join(params),
        [*body, "    return __new"],
        {**namespace, **names},
    )
    return function


def maker(cls: type[_T], *names: str) -> Callable[..., _T]:
    """A fast constructor of ``cls`` taking the fields ``names`` (``__init__`` names) in order.

    Every other field gets its default; the given values go through their
    converters.  Positional, for the paths that build the same class again
    and again (a keyword call costs more than the stores).
    """
    fields = _check(cls)
    by_alias = {_alias(field): field for field in fields}
    assert all(name in by_alias for name in names), names
    namespace: dict[str, Any] = {}
    values: dict[str, str] = {}
    for field in fields:
        name = _alias(field)
        if name in names:
            value = name
            if field.converter is not None:
                namespace[f"_convert_{name}"] = field.converter
                value = f"_convert_{name}({name})"
        elif field.default is attrs.NOTHING or isinstance(
            field.default, attrs.Factory  # type: ignore[arg-type]
        ):
            raise TypeError(f"{cls.__name__}.{field.name}: no plain default")
        else:
            namespace[f"_default_{name}"] = field.default
            value = f"_default_{name}"
        values[field.name] = value
    body, copies = copy_code(cls, "", "__new", values)
    function: Callable[..., _T] = generate(
        f"_make_{cls.__name__}", ", ".join(names), [*body, "    return __new"],
        {**namespace, **copies},
    )
    return function


@functools.lru_cache(maxsize=512)
def _changer(cls: type, names: tuple[str, ...]) -> Callable[..., Any]:
    """A copy of ``cls`` with the fields ``names`` (``__init__`` names) given positionally.

    Made once per class and set of names (the reducers use a few dozen), so
    that :func:`evolve` stores only what it must and runs only the
    converters of the fields it changes.
    """
    try:
        fields = _check(cls)
    except TypeError:  # not slotted, or with validators: only ``attrs.evolve`` is right

        def slow(inst: Any, *values: Any) -> Any:
            return attrs.evolve(inst, **dict(zip(names, values, strict=True)))

        return slow
    by_alias = {_alias(field): field for field in fields}
    unknown = [name for name in names if name not in by_alias]
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    params = [f"__v{i}" for i in range(len(names))]
    namespace: dict[str, Any] = {}
    values: dict[str, str] = {}
    for name, param in zip(names, params, strict=True):
        field = by_alias[name]
        values[field.name] = param
        if field.converter is not None:
            namespace[f"_convert_{name}"] = field.converter
            values[field.name] = f"_convert_{name}({param})"
    body, copies = copy_code(cls, "__old", "__new", values)
    changer: Callable[..., Any] = generate(
        f"_change_{cls.__name__}", ", ".join(["__old", *params]),
        [*body, "    return __new"], {**namespace, **copies},
    )
    return changer


def evolve(inst: _T, **changes: Any) -> _T:
    """``attrs.evolve(inst, **changes)``, by a generated copy where the class allows one."""
    new: _T = _changer(type(inst), tuple(changes))(inst, *changes.values())
    return new
