"""Property: every AHP type survives the codec.

For every class, union alias and enum exported by ``agenthost_protocol.types``,
values drawn from :mod:`agenthost_protocol.testing.strategies` satisfy:

* ``unstructure(x)`` is plain JSON (``dict``/``list``/``str``/``int``/``float``/
  ``bool``/``None``, no subclasses) that ``json.dumps`` accepts and
  ``json.loads`` gives back unchanged;
* ``structure(json.loads(json.dumps(unstructure(x))), T) == x``, of the same class;
* encoding the decoded value gives the same JSON again (strictly: a bool is not
  a number, though ``1`` and ``1.0`` are the same JSON number);
* ``dumps(x)`` is that JSON.

``Unknown<Union>`` variants are decoded through their union (decoding picks
them by tag), generic message classes as ``Cls[Any]``.  Per-type example
counts are the active hypothesis profile's ``max_examples`` (``tests/conftest.py``)
divided by ``EXAMPLES_DIVISOR``, so ``HYPOTHESIS_PROFILE=long`` runs 20 times
as many.
"""

from __future__ import annotations

import enum
import json
import types
from typing import Any, Literal, Union, get_origin

import attrs
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.conformance import json_equal
from agenthost_protocol.errors import InvalidParams
from agenthost_protocol.methods import METHODS
from agenthost_protocol.testing import strategies as ahst
from agenthost_protocol.types._tags import TAGGED_UNIONS

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

EXAMPLES_DIVISOR = 5
EXAMPLES = max(3, settings().max_examples // EXAMPLES_DIVISOR)  # from the loaded profile
PER_TYPE = settings(
    max_examples=EXAMPLES,
    deadline=None,
    # Explaining a failure re-runs it many times; on a large state that takes minutes.
    phases=[p for p in Phase if p is not Phase.explain],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Unknown variant -> the union it is decoded through.
UNKNOWN_VIA: dict[Any, Any] = {
    unknown: alias for alias, (_, _, unknown) in TAGGED_UNIONS.items() if unknown is not None
}
UNKNOWN_VIA[t.UnknownAction] = t.StateAction

# ``ProtocolNotification`` is untagged and its three OTLP members share one
# shape, so only the other four round-trip through it; OTLP params are decoded
# by method (``parse_message``), see test_otlp_params_need_the_method.
SHAPE_DECODABLE_NOTIFICATION = Union[  # noqa: UP007 - a runtime value, like the model's
    t.SessionSummaryChangedParams, t.SessionAddedParams, t.SessionRemovedParams,
    t.AuthRequiredParams,
]


def _targets() -> list[Any]:
    params = []
    for name in t.__all__:
        obj = getattr(t, name)
        if isinstance(obj, type) and attrs.has(obj):
            arity = len(getattr(obj, "__parameters__", ()))
            if arity:
                obj = wire_type = obj[(Any,) * arity]  # type: ignore[index]
            else:
                wire_type = UNKNOWN_VIA.get(obj, obj)
        elif get_origin(obj) in (Union, types.UnionType, Literal) or (
            isinstance(obj, type) and issubclass(obj, enum.Enum)
        ):
            wire_type = obj
        else:
            continue  # ``URI`` (= str) and constants
        if name == "ProtocolNotification":
            obj = SHAPE_DECODABLE_NOTIFICATION
        params.append(pytest.param(obj, wire_type, id=name))
    return params


TARGETS = _targets()


def test_every_export_is_a_target() -> None:
    """Classes, union aliases and enums: none left out."""
    classes = [n for n in t.__all__ if isinstance(getattr(t, n), type) and attrs.has(getattr(t, n))]
    unions = [n for n in t.__all__ if get_origin(getattr(t, n)) in (Union, types.UnionType)]
    ids = {p.id for p in TARGETS}
    assert set(classes) <= ids
    assert set(unions) <= ids
    assert len(classes) >= 280
    assert len(unions) >= 25


def assert_plain_json(value: Any, path: str = "$") -> None:
    """Only the exact types ``json.loads`` produces (no enums, tuples or ``TextBuffer``)."""
    kind = type(value)
    if kind is dict:
        for k, v in value.items():
            assert type(k) is str, f"{path}: key {k!r}"
            assert_plain_json(v, f"{path}.{k}")
    elif kind is list:
        for i, v in enumerate(value):
            assert_plain_json(v, f"{path}[{i}]")
    else:
        assert kind in (str, int, float, bool, type(None)), f"{path}: {kind.__name__}"


def assert_round_trips(value: Any, wire_type: Any) -> None:
    data = wire.unstructure(value)
    assert_plain_json(data)
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    parsed = json.loads(text)
    assert json_equal(parsed, data)
    assert json_equal(json.loads(wire.dumps(value)), data)

    back = wire.structure(parsed, wire_type)
    assert back == value
    assert type(back) is type(value)
    again = wire.unstructure(back)
    assert json_equal(again, data), f"re-encoded {again!r}, first encoded {data!r}"


@pytest.mark.parametrize(("tp", "wire_type"), TARGETS)
@PER_TYPE
@given(data=st.data())
def test_round_trip(tp: Any, wire_type: Any, data: st.DataObject) -> None:
    assert_round_trips(data.draw(ahst.from_type(tp)), wire_type)


@pytest.mark.parametrize(
    "kind", ahst.STATEFUL_CHANNELS, ids=[k.value for k in ahst.STATEFUL_CHANNELS]
)
@PER_TYPE
@given(data=st.data())
def test_actions_and_envelopes_parse_back(kind: Any, data: st.DataObject) -> None:
    action = data.draw(ahst.actions(kind), label="action")
    assert wire.parse_action(wire.unstructure(action)) == action
    envelope = data.draw(ahst.envelopes(kind), label="envelope")
    assert wire.parse_envelope(json.loads(wire.dumps(envelope))) == envelope


@pytest.mark.parametrize("method", sorted(METHODS))
@PER_TYPE
@given(data=st.data())
def test_messages_parse_back(method: str, data: st.DataObject) -> None:
    message = data.draw(ahst.messages(method), label="message")
    text = wire.dumps(message)
    assert_plain_json(json.loads(text))
    assert wire.parse_message(text, result_method=lambda _id: method) == message


@pytest.mark.parametrize(
    "cls", [t.OtlpExportLogsParams, t.OtlpExportTracesParams, t.OtlpExportMetricsParams]
)
def test_otlp_params_need_the_method(cls: Any) -> None:
    data = wire.unstructure(cls(channel="ahp-otlp://logs", payload={}))
    with pytest.raises(InvalidParams, match="parse_message"):
        wire.structure(data, t.ProtocolNotification)
    assert wire.structure(data, cls) == cls(channel="ahp-otlp://logs", payload={})
