"""The model's classes are what ``@frozen(kw_only=True)`` makes, without attrs building them.

The generated modules (and the hand-written ``types.messages``) carry the
methods attrs would write at the end of each class body, for run time, and
the attrs declaration above them for type checkers (``types/_model.py``).
These tests hold every class to a reference: the same modules with those
run-time blocks cut out, so that attrs itself builds each class from its
declaration.  The fields (``attrs.fields``, every property of each
``Attribute``), ``attrs.inspect``, ``__slots__``, the ``__init__``
signature, and the behaviour of instances (repr, equality as JSON sees it,
hashing, frozenness, pickling, ``evolve``) must be the same.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pickle
import re
import shutil
import subprocess
import sys
import threading
import typing
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.testing.strategies import from_type
from agenthost_protocol.types import _model
from agenthost_protocol.types._text import TextBuffer

TYPES = Path(t.__file__).parent
REFERENCE = "agenthost_protocol._first_use_reference"

# The end of a class body, for run time only: up to the next top-level line.
RUNTIME_BLOCK = re.compile(r"\n    if not TYPE_CHECKING:  # what @frozen.*?(?=\n\S|\Z)", re.S)
RUNTIME_IMPORTS = re.compile(r"\nelse:\n    from \._model import \(\n.*?\n    \)\n", re.S)


def _attrs_only(source: str) -> str:
    """``source`` as attrs alone would build it: the run-time blocks cut out."""
    source, blocks = RUNTIME_BLOCK.subn("", source)
    if blocks:
        source, imports = RUNTIME_IMPORTS.subn("\n", source)
        assert imports == 1
        source = source.replace(
            "from __future__ import annotations\n",
            "from __future__ import annotations\n\nfrom attrs import evolve, field, frozen\n", 1,
        )
    return source


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The model built by attrs: ``agenthost_protocol.types`` without the run-time blocks."""
    folder = tmp_path_factory.mktemp("reference")
    for path in TYPES.glob("*.py"):
        if path.name == "_text.py":
            shutil.copy(path, folder / path.name)
        else:
            (folder / path.name).write_text(_attrs_only(path.read_text()))
    spec = importlib.util.spec_from_file_location(
        REFERENCE, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[REFERENCE] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        for name in [n for n in sys.modules if n == REFERENCE or n.startswith(REFERENCE + ".")]:
            del sys.modules[name]


CLASSES = sorted(
    (name for name in t.__all__ if isinstance(getattr(t, name), type)
     and attrs.has(getattr(t, name))),
)


def test_every_model_class_is_built_from_its_body() -> None:
    assert len(CLASSES) > 300
    for name in CLASSES:
        cls = getattr(t, name)
        assert _model.plain_init(cls), name
        assert not cls.__init__.__code__.co_filename.startswith("<attrs"), name


def test_the_reference_is_built_by_attrs(ref: ModuleType) -> None:
    for name in CLASSES:
        init = getattr(ref, name).__init__
        assert init.__code__.co_filename.startswith("<attrs generated"), name


def _attribute(a: attrs.Attribute[Any]) -> dict[str, Any]:
    slots: tuple[str, ...] = type(a).__slots__  # type: ignore[attr-defined]
    out = {slot: getattr(a, slot) for slot in slots}
    del out["type"]  # compared on its own: ours is evaluated, attrs keeps the text
    out["metadata"] = dict(a.metadata)
    for key in ("converter", "eq_key", "order_key"):  # the reference's own copies
        out[key] = getattr(out[key], "__qualname__", out[key])
    default = out.pop("default")
    out["default"] = (type(default).__name__, repr(default))
    return out


@pytest.mark.parametrize("name", CLASSES)
def test_class_is_what_attrs_builds(ref: ModuleType, name: str) -> None:
    cls, reference = getattr(t, name), getattr(ref, name)
    ours, theirs = attrs.fields(cls), attrs.fields(reference)
    assert [_attribute(a) for a in ours] == [_attribute(a) for a in theirs]
    # the annotations, evaluated as attrs.resolve_types would (and marked so)
    assert [a.type for a in ours] == list(typing.get_type_hints(cls).values())
    assert cls.__attrs_types_resolved__ is cls
    assert [a.type for a in theirs] == list(reference.__annotations__.values())
    assert type(ours).__name__ == type(theirs).__name__
    for a in ours:
        assert getattr(ours, a.name) is a
    assert attrs.fields_dict(cls).keys() == attrs.fields_dict(reference).keys()
    assert attrs.inspect(cls) == attrs.inspect(reference)
    assert cls.__slots__ == reference.__slots__
    assert cls.__match_args__ == reference.__match_args__
    # left by attrs.resolve_types; made on first read by Python when there is none
    resolved = {"__attrs_types_resolved__", "__annotations__"}
    assert sorted(vars(cls).keys() - resolved) == sorted(vars(reference).keys() - resolved)
    assert cls.__bases__ == tuple(
        getattr(t, b.__name__, b) if b.__module__.startswith(REFERENCE) else b
        for b in reference.__bases__
    )
    assert cls.__qualname__ == reference.__qualname__
    assert cls.__doc__ == reference.__doc__
    assert cls.__annotations__ == reference.__annotations__
    ours_init, their_init = inspect.signature(cls), inspect.signature(reference)
    assert ours_init.parameters == their_init.parameters
    # attrs annotates the return with None itself; the source says "None"
    assert (their_init.return_annotation, ours_init.return_annotation) == (None, "None")
    assert cls.__setattr__ is reference.__setattr__  # attrs's frozen __setattr__
    assert cls.__delattr__ is reference.__delattr__
    for method in ("__init__", "__repr__", "__eq__", "__hash__"):
        assert getattr(cls, method).__qualname__ == f"{cls.__qualname__}.{method}"
        assert getattr(cls, method).__module__ == cls.__module__


def _to_ref(value: Any, ref: ModuleType) -> Any:
    """``value`` rebuilt from the reference's classes (and enums)."""
    if attrs.has(type(value)):
        cls = getattr(ref, type(value).__name__)
        return cls(**{a.alias: _to_ref(getattr(value, a.name), ref)
                      for a in attrs.fields(type(value))})
    if isinstance(value, TextBuffer):
        return value.value  # the converter makes the reference's own buffer
    if isinstance(value, Enum):
        enum_cls = getattr(ref, type(value).__name__)
        return enum_cls(value.value)
    if isinstance(value, tuple):
        return tuple(_to_ref(v, ref) for v in value)
    if isinstance(value, dict):
        return {k: _to_ref(v, ref) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_ref(v, ref) for v in value]
    return value


def _swap_bool(value: Any) -> Any:
    """``value`` with every ``True``/``False`` inside written as ``1``/``0``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict):
        return {k: _swap_bool(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_swap_bool(v) for v in value)
    return value


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_instances_behave_as_attrs_built_ones(ref: ModuleType, data: st.DataObject) -> None:
    cls = getattr(t, data.draw(st.sampled_from(CLASSES), label="class"))
    if cls.__parameters__ if hasattr(cls, "__parameters__") else False:
        cls = cls[Any]
    x = data.draw(from_type(cls, max_depth=2), label="x")
    y = data.draw(from_type(cls, max_depth=2), label="y")
    rx, ry = _to_ref(x, ref), _to_ref(y, ref)
    assert repr(x) == repr(rx)
    assert (x == y) == (rx == ry)
    assert (x != y) == (rx != ry)
    assert x == _to_ref_back(x) and hash(x) == hash(_to_ref_back(x))
    assert (x == 1) is False and x != 1
    if x == y:
        assert hash(x) == hash(y)
    # JSON equality: the open JSON fields tell true from 1 (the others do not)
    for a in attrs.fields(type(x)):
        value = getattr(x, a.name)
        swapped = _swap_bool(value)
        if repr(swapped) != repr(value):  # it held a bool
            changed = attrs.evolve(x, **{a.alias: swapped})
            ref_changed = attrs.evolve(rx, **{a.alias: _to_ref(swapped, ref)})
            assert (changed == x) == (ref_changed == rx)
    assert pickle.loads(pickle.dumps(x)) == x
    assert copy.deepcopy(x) == x and copy.copy(x) == x
    assert x.__getstate__() == {a.name: getattr(x, a.name) for a in attrs.fields(type(x))}
    assert attrs.evolve(x) == x
    assert attrs.asdict(x, recurse=False).keys() == attrs.asdict(rx, recurse=False).keys()
    if sys.version_info >= (3, 13):
        assert copy.replace(x) == x  # type: ignore[attr-defined]
    name = attrs.fields(type(x))[0].name if attrs.fields(type(x)) else "anything"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(x, name, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        delattr(x, name)
    assert not hasattr(x, "__dict__") and not hasattr(rx, "__dict__")


def _to_ref_back(x: Any) -> Any:
    """A new instance equal to ``x``, through ``__init__``."""
    return type(x)(**{a.alias: getattr(x, a.name) for a in attrs.fields(type(x))})


def test_json_equality_of_open_fields() -> None:
    flag = t.ToolDefinition(name="x", input_schema={"flag": True})
    one = t.ToolDefinition(name="x", input_schema={"flag": 1})
    assert flag != one
    assert t.UnknownAction(type="x/y", raw={"a": True}) != t.UnknownAction(type="x/y", raw={"a": 1})
    assert t.UnknownAction(type="x/y", raw={"a": 1.0}) == t.UnknownAction(type="x/y", raw={"a": 1})


def test_a_repr_that_contains_itself() -> None:
    meta: dict[str, Any] = {}
    usage = t.UsageInfo(input_tokens=1, output_tokens=2, meta=meta)
    meta["self"] = usage
    assert repr(usage) == (
        "UsageInfo(input_tokens=1, output_tokens=2, model=None, cache_read_tokens=None, "
        "meta={'self': ...})"
    )


def test_fields_are_built_once_across_threads() -> None:
    class Probe:
        __slots__ = ("__weakref__", "a")
        __annotations__ = {"a": "int"}
        __attrs_attrs__ = _model._fields(lambda: (_model._field("a", int),))

    probe: Any = Probe
    barrier = threading.Barrier(8)
    seen: list[object] = []

    def read() -> None:
        barrier.wait()
        seen.append(attrs.fields(probe))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(s) for s in seen}) == 1
    assert vars(Probe)["__attrs_attrs__"] is seen[0]
    assert attrs.fields(probe).a.type is int


def test_importing_the_model_compiles_nothing() -> None:
    """No class of the model is built by attrs (which ``compile``s each one's methods)."""
    code = (
        "import builtins\n"
        "import attrs\n"
        "compiled = []\n"
        "original = builtins.compile\n"
        "def spy(source, filename, *args, **kwargs):\n"
        "    if str(filename).startswith('<attrs generated'):\n"
        "        compiled.append(filename)\n"
        "    return original(source, filename, *args, **kwargs)\n"
        "builtins.compile = spy\n"
        "import agenthost_protocol.types\n"
        "print(len(compiled), compiled[:3])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split()[0] == "0", done.stdout
