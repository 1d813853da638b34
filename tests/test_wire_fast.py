"""The codec's fast paths are the general paths, only faster.

* **Generated class hooks.**  ``wire.converter`` decodes and encodes model
  classes with functions ``wire`` generates (inline checks of common leaf
  values, direct slot stores); ``wire._make_converter(generated=False)`` builds
  the same converter on cattrs' own ``make_dict_structure_fn`` /
  ``make_dict_unstructure_fn``.  For every type, on valid wire values and on
  mutated (mostly invalid) ones, both give the same value (same class, same
  JSON text when encoded again) or the same error (class, message, path,
  JSON-RPC code); both encode model values to the same JSON text.
* **JSON backends.**  With orjson installed (the ``fast`` extra) ``parse_json``
  uses it and falls back to the standard library for whatever orjson does
  differently; on arbitrary texts and bytes both give the same value (same
  types: ``1`` is not ``1.0``) or the same ``ParseError`` (message, path).
  ``tests/test_hostile.py`` runs its tests under both backends.
"""

from __future__ import annotations

import enum
import importlib
import json
import math
import types
from collections import OrderedDict
from typing import Any, Literal, Union, get_origin

import attrs
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.errors import ProtocolError
from agenthost_protocol.methods import METHODS
from agenthost_protocol.testing import strategies as ahst
from agenthost_protocol.types._tags import TAGGED_UNIONS

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

EXAMPLES = max(3, settings().max_examples // 5)
PER_TYPE = settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[p for p in Phase if p is not Phase.explain],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

REFERENCE, REFERENCE_CODEC = wire._make_converter(generated=False)

orjson: Any
try:
    orjson = importlib.import_module("orjson")
except ImportError:  # the ``fast`` extra is not installed: only the stdlib backend
    orjson = None

STDLIB: Any = wire._StdlibJson()
FAST: Any = None if orjson is None else wire._OrjsonJson(orjson)
BACKENDS = [pytest.param(STDLIB, id="json")]
if FAST is not None:
    BACKENDS.append(pytest.param(FAST, id="orjson"))


# -- helpers ------------------------------------------------------------------------


def same_json(a: Any, b: Any) -> bool:
    """Equal with the same Python types all the way down (``1`` is not ``1.0``, ``-0.0`` is not
    ``0.0``), dict key order included."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float:
        return math.copysign(1.0, a) == math.copysign(1.0, b) and a == b
    return bool(a == b)


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What a decoding call gives: ``("ok", value)`` or the error's identifying fields."""
    try:
        value = fn(*args, **kwargs)
    except ProtocolError as e:
        return ("error", type(e), e.message, e.path, int(e.code), e.request_id, e.respond)
    return ("ok", value)


def encode_with(conv: Any, value: Any) -> str:
    text = json.dumps(
        conv.unstructure(value), separators=(",", ":"), ensure_ascii=False
    )
    return text


def assert_same_outcome(general: tuple[Any, ...], fast: tuple[Any, ...]) -> None:
    if general[0] == "error" or fast[0] == "error":
        assert fast == general
        return
    assert type(fast[1]) is type(general[1])
    # Same JSON, to the key order and the number types.
    text = encode_with(REFERENCE, general[1])
    assert encode_with(REFERENCE, fast[1]) == text
    # a NaN a caller passed in is equal to nothing, itself included: its JSON says enough
    assert fast[1] is general[1] or fast[1] == general[1] or "NaN" in text
    assert encode_with(wire.converter, fast[1]) == encode_with(REFERENCE, general[1])


def structure_with(conv: Any, data: Any, tp: Any) -> Any:
    try:
        return conv.structure(data, tp)
    except Exception as e:
        raise wire._raise(e, ()) from None


# Python values a caller may pass to ``structure`` (not only what JSON gives).
odd_values = st.sampled_from([
    None, True, False, 0, 1, -1, 2**70, 1.0, 2.5, -0.0, float("nan"), float("inf"),
    "", "x", "é", "\ud800", "ok\udfff", "chat/delta", "markdown", "running", "2.0",
    t.ActionType.CHAT_DELTA, t.ToolCallStatus.RUNNING, t.SessionStatus.IDLE,
    [], {}, (), ["x"], {"k": "v"}, OrderedDict(), OrderedDict(kind="markdown"),
    {"type": 1}, {"kind": None}, {"status": ["x"]},
])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


def mutate(value: Any, data: st.DataObject) -> Any:
    """Change one node of ``value``: replace it, drop or add a key, retag it."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(list(value)))
        choice = data.draw(st.integers(0, 3))
        if choice == 0:
            return {k: v for k, v in value.items() if k != key}
        if choice == 1:
            return {**value, data.draw(st.text(max_size=6)): data.draw(json_values)}
        return {**value, key: mutate(value[key], data)}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], mutate(value[i], data), *value[i + 1 :]]
    return data.draw(st.one_of(odd_values, json_values))


def _targets() -> list[Any]:
    unknown_via = {u: alias for alias, (_, _, u) in TAGGED_UNIONS.items() if u is not None}
    unknown_via[t.UnknownAction] = t.StateAction
    params = []
    for name in t.__all__:
        obj = getattr(t, name)
        if isinstance(obj, type) and attrs.has(obj):
            arity = len(getattr(obj, "__parameters__", ()))
            if arity:
                obj = wire_type = obj[(Any,) * arity]  # type: ignore[index]
            else:
                wire_type = unknown_via.get(obj, obj)
        elif get_origin(obj) in (Union, types.UnionType, Literal) or (
            isinstance(obj, type) and issubclass(obj, enum.Enum)
        ):
            wire_type = obj
        else:
            continue
        if name == "ProtocolNotification":
            continue  # untagged: OTLP params are decoded by method (see test_messages_*)
        params.append(pytest.param(obj, wire_type, id=name))
    return params


TARGETS = _targets()


# -- generated hooks against cattrs' -------------------------------------------------


def test_the_generated_converter_uses_generated_hooks() -> None:
    hook = wire.converter.get_structure_hook(t.ChatDeltaAction)
    assert "agenthost_protocol.wire" in hook.__code__.co_filename
    assert wire._CODEC.generated and not REFERENCE_CODEC.generated


@pytest.mark.parametrize(("tp", "wire_type"), TARGETS)
@PER_TYPE
@given(data=st.data())
def test_generated_hooks_equal_cattrs_hooks(tp: Any, wire_type: Any, data: st.DataObject) -> None:
    value = data.draw(ahst.from_type(tp), label="value")
    # Encoding: the same JSON text (key order, number types).
    assert encode_with(wire.converter, value) == encode_with(REFERENCE, value)
    wire_value = REFERENCE.unstructure(value)
    for candidate in (wire_value, mutate(wire_value, data), mutate(wire_value, data)):
        assert_same_outcome(
            outcome(structure_with, REFERENCE, candidate, wire_type),
            outcome(structure_with, wire.converter, candidate, wire_type),
        )


@pytest.mark.parametrize("method", sorted(METHODS))
@PER_TYPE
@given(data=st.data())
def test_messages_decode_alike(method: str, data: st.DataObject) -> None:
    message = data.draw(ahst.messages(method), label="message")
    assert encode_with(wire.converter, message) == encode_with(REFERENCE, message)
    raw = REFERENCE.unstructure(message)
    for candidate in (raw, mutate(raw, data), mutate(raw, data), mutate(raw, data)):
        general = outcome(REFERENCE_CODEC.parse_message, candidate, lambda _id: method)
        fast = outcome(wire._CODEC.parse_message, candidate, lambda _id: method)
        assert_same_outcome(general, fast)


@given(st.data())
@settings(max_examples=EXAMPLES * 4, deadline=None)
def test_envelopes_decode_alike(data: st.DataObject) -> None:
    envelope = data.draw(ahst.envelopes(), label="envelope")
    raw = {"jsonrpc": "2.0", "method": "action", "params": REFERENCE.unstructure(envelope)}
    for candidate in (raw, mutate(raw, data), mutate(raw, data), mutate(raw, data)):
        assert_same_outcome(
            outcome(REFERENCE_CODEC.parse_message, candidate, None),
            outcome(wire._CODEC.parse_message, candidate, None),
        )


@pytest.mark.parametrize(
    "value",
    [
        {"type": "chat/delta", "turnId": "t", "partId": "p", "content": "é\ud800"},
        {"type": "chat/delta", "turnId": 5, "partId": "p", "content": "x"},
        {"type": "chat/delta", "turnId": "t", "content": "x"},
        {"type": "chat/delta", "turnId": "t", "partId": "p", "content": "x", "_meta": [1]},
        {"type": "chat/responsePart", "turnId": "t", "part": {"kind": "markdown", "id": "p"}},
        {"type": "chat/responsePart", "turnId": "t",
         "part": {"kind": "markdown", "id": "p", "content": 5}},
        {"type": "chat/toolCallReady", "turnId": "t", "toolCallId": "c",
         "invocationMessage": "m", "confirmed": 7},
        {"type": "chat/toolCallReady", "turnId": "t", "toolCallId": "c",
         "invocationMessage": "m", "confirmed": "not-a-known-reason"},
        {"type": "session/titleChanged", "title": "ok\udfff"},
        {"type": "root/activeSessionsChanged", "activeSessions": True},
        {"type": "root/activeSessionsChanged", "activeSessions": 2.0},
        {"type": "root/activeSessionsChanged", "activeSessions": 2.5},
    ],
)
def test_hand_picked_actions_decode_alike(value: Any) -> None:
    assert_same_outcome(
        outcome(structure_with, REFERENCE, value, t.StateAction),
        outcome(structure_with, wire.converter, value, t.StateAction),
    )


def test_decoded_values_are_ordinary_instances() -> None:
    """Built by slot stores, they are what ``__init__`` builds: frozen, equal, hashable."""
    action = wire.parse_action(
        {"type": "chat/delta", "turnId": "t", "partId": "p", "content": "x"}
    )
    expected = t.ChatDeltaAction(turn_id="t", part_id="p", content="x")
    assert type(action) is t.ChatDeltaAction
    assert action == expected and hash(action) == hash(expected)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        action.content = "y"  # type: ignore[misc]
    part = wire.structure({"kind": "markdown", "id": "p", "content": "ab"}, t.ResponsePart)
    assert isinstance(part, t.MarkdownResponsePart)
    assert part.content == "ab" and part.with_content_appended("c").content == "abc"


def test_params_hooks_are_per_converter() -> None:
    """No module-level cache: each converter keeps its own table."""
    assert not hasattr(wire, "_PARAMS_HOOKS")
    line = '{"jsonrpc":"2.0","method":"ping","id":1,"params":{}}'
    _, codec = wire._make_converter()
    assert "ping" not in codec.params_hooks
    codec.parse_message(line, None)
    assert "ping" in codec.params_hooks


# -- JSON backends -------------------------------------------------------------------

json_texts = st.one_of(
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
    json_values.map(json.dumps),
    st.text(alphabet=' \t\n\r[]{}:,"\\-+.0123456789eEtrufalsnNIiy\u00e9\ud800x', max_size=30),
    st.integers().map(str),
    st.from_regex(r"-?[0-9]{15,25}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,4})?", fullmatch=True),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)


def _mutate_text(text: str, data: st.DataObject) -> str:
    if not text or data.draw(st.booleans()):
        return text
    i = data.draw(st.integers(0, len(text)))
    piece = data.draw(st.sampled_from(["\\ud800", "\\udc00", "\\u0000", "\x01", "[", "}", ",",
                                       "1e999", "NaN", "\ufeff", " ", "9" * 20, '"']))
    return text[:i] + piece + text[i + data.draw(st.integers(0, 2)):]


@pytest.mark.skipif(orjson is None, reason="the fast extra (orjson) is not installed")
@given(st.data())
@settings(max_examples=max(200, settings().max_examples * 8), deadline=None)
def test_orjson_parses_like_the_standard_library(data: st.DataObject) -> None:
    fast = FAST
    text = _mutate_text(data.draw(json_texts, label="text"), data)
    inputs: list[Any] = [text]
    try:
        inputs.append(text.encode("utf-8"))
    except UnicodeEncodeError:
        inputs.append(text.encode("utf-8", "surrogatepass"))  # CESU-8: not UTF-8
    inputs.append(bytearray(inputs[-1]))
    for item in inputs:
        general = outcome(STDLIB.loads, item)
        quick = outcome(fast.loads, item)
        assert quick[0] == general[0], (item, general, quick)
        if general[0] == "ok":
            assert same_json(quick[1], general[1]), (item, general, quick)
        else:
            assert quick == general


@pytest.mark.skipif(orjson is None, reason="the fast extra (orjson) is not installed")
@given(st.binary(max_size=40))
@settings(max_examples=max(200, settings().max_examples * 4), deadline=None)
def test_orjson_rejects_bytes_like_the_standard_library(raw: bytes) -> None:
    fast = FAST
    for item in (raw, b'"' + raw + b'"', b'{"k":"' + raw + b'"}'):
        general, quick = outcome(STDLIB.loads, item), outcome(fast.loads, item)
        assert quick[0] == general[0]
        if general[0] == "ok":
            assert same_json(quick[1], general[1])
        else:
            assert quick == general


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "text",
    [
        "123456789012345678901234567890", "-9223372036854775809", "18446744073709551616",
        "[18446744073709551615, -9223372036854775808]", '{"serverSeq": 12345678901234567890123}',
        "1e308", "1e309", "-1e400", "2.5e-400", "4.9e-324", "1" * 400 + ".0", "1" * 5000,
        "-0", "-0.0", "0.1", "1E5", "[1,]", "01", "\ufeff{}", '"\\ud83d\\ude00"', '"a\x01"',
        "[" * 300 + "]" * 300, "[" * 1023 + "]" * 1023, "[" * 1100 + "]" * 1100,
        '{"a":1,"a":2,"b":3}', '{"b":1,"a":2,"b":3}', " \t\n\r[1]\r\n", "[1] x", "", "null",
    ],
)
def test_edge_texts(backend: Any, text: str) -> None:
    general = outcome(STDLIB.loads, text)
    for item in (text, text.encode("utf-8")):
        quick = outcome(backend.loads, item)
        assert quick[0] == general[0]
        if general[0] == "ok":
            assert same_json(quick[1], general[1])
        else:
            assert quick == general


def test_big_integers_stay_exact() -> None:
    big = 2**70 + 1
    line = (
        '{"jsonrpc":"2.0","method":"action","params":{"channel":"ahp-session:/s",'
        f'"serverSeq":{big},"action":{{"type":"session/titleChanged","title":"x"}}}}}}'
    )
    for backend in (STDLIB, FAST):
        if backend is not None:
            obj = backend.loads(line.encode())
            assert obj["params"]["serverSeq"] == big and type(obj["params"]["serverSeq"]) is int
    msg = wire.parse_message(line)
    assert isinstance(msg, t.JsonRpcNotification) and isinstance(msg.params, t.ActionEnvelope)
    assert msg.params.server_seq == big


def test_the_backend_in_use_is_named() -> None:
    assert ("orjson" if orjson is not None else "json") == wire.JSON_BACKEND


@pytest.mark.parametrize("backend", BACKENDS)
def test_parse_message_reports_the_same_errors_under_each_backend(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "_JSON", backend)
    bad = [
        b'{"jsonrpc":"2.0","method":"action","params":{"channel":"c","serverSeq":NaN}}',
        b'{"jsonrpc":"2.0","method":"action","params":{"channel":"\\ud800"}}',
        b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
        b'\xff{"jsonrpc":"2.0"}',
    ]
    for line in bad:
        monkeypatch.setattr(wire, "_JSON", STDLIB)
        general = outcome(wire.parse_message, line)
        monkeypatch.setattr(wire, "_JSON", backend)
        assert outcome(wire.parse_message, line) == general
        assert general[0] == "error" and general[4] == -32700


# -- encoding ------------------------------------------------------------------------


def test_dumps_is_compact_json_and_refuses_what_is_not() -> None:
    from agenthost_protocol.errors import LocalProtocolError

    msg = t.JsonRpcNotification(
        method="action",
        params=t.ActionEnvelope(
            channel="ahp-chat:/c", server_seq=1,
            action=t.ChatDeltaAction(turn_id="t", part_id="p", content="é\n\"x\""),
        ),
    )
    data = wire.dump(msg)
    assert wire.dumps(msg) == json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    with pytest.raises(LocalProtocolError) as info:
        wire.dumps(t.SessionTitleChangedAction(title="ok\ud800"))
    assert info.value.path == "$.title"
    with pytest.raises(LocalProtocolError):
        wire.dumps(t.ToolCallRiskAssessmentCompleteState(reason="r", safety=math.inf))
    assert wire.dumps("x\ny") == '"x\\ny"'
