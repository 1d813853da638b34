"""Hostile input: what a malicious peer or a careless caller sends never breaks a promise.

Each test names the class of defect it guards against; where the class is
open-ended (JSON values, tags), a property test covers it, not only the
example that first showed it.
"""

from __future__ import annotations

import copy
import importlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol._json import copy_json, json_equal
from agenthost_protocol.errors import (
    InvalidParams,
    LocalProtocolError,
    ParseError,
    ProtocolError,
    RemoteProtocolError,
)
from agenthost_protocol.reducers import reduce
from agenthost_protocol.versions import select_version_from_supported

orjson: Any
try:
    orjson = importlib.import_module("orjson")
except ImportError:  # the ``fast`` extra is not installed
    orjson = None


@pytest.fixture(scope="module", autouse=True, params=["json", "orjson"])
def json_backend(request: pytest.FixtureRequest) -> Any:
    """Every rule here holds under each JSON parser: the standard library's and orjson's."""
    if request.param == "orjson":
        if orjson is None:
            pytest.skip("the fast extra (orjson) is not installed")
        backend: Any = wire._OrjsonJson(orjson)
    else:
        backend = wire._StdlibJson()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wire, "_JSON", backend)
        yield backend.name


def test_the_backend_is_in_use(json_backend: str) -> None:
    assert wire._JSON.name == json_backend


json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
    allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


# -- strict JSON (items 8, 9) --------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["NaN", "[Infinity]", '{"a": -Infinity}', "1e999", "[-1e400]", '{"x": 1E+99999}'],
)
def test_non_finite_numbers_are_not_json(text: str) -> None:
    with pytest.raises(ParseError) as info:
        wire.parse_json(text)
    assert info.value.code == -32700


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('"\\ud800"', "$"),
        ('{"a": ["ok", "\\udfff"]}', "$.a[1]"),
        ('{"\\ud800": 1}', "$"),
        ('["\\udc00\\ud800"]', "$[0]"),  # reversed pair: two lone halves
    ],
)
def test_lone_surrogate_escapes_are_rejected_with_a_path(text: str, path: str) -> None:
    with pytest.raises(ParseError) as info:
        wire.parse_json(text)
    assert info.value.path == path
    with pytest.raises(ProtocolError):
        wire.parse_json(text.encode())


def test_surrogate_pairs_and_raw_surrogates() -> None:
    assert wire.parse_json('"\\ud83d\\ude00"') == "\U0001f600"
    with pytest.raises(ParseError):
        wire.parse_json('"\ud800"')  # a raw lone surrogate in a str
    with pytest.raises(ParseError):
        wire.parse_json(b'"\xed\xa0\x80"')  # CESU-8 is not UTF-8


def test_structure_rejects_lone_surrogates_anywhere_with_the_path() -> None:
    value = {"type": "session/titleChanged", "title": "ok\ud800"}
    with pytest.raises(InvalidParams) as info:
        wire.parse_action(value)
    assert info.value.path == "$.title"
    meta = {"type": "session/metaChanged", "_meta": {"k": ["\udfff"]}}
    with pytest.raises(InvalidParams) as info:
        wire.parse_action(meta)
    assert info.value.path == "$._meta.k[0]"


def test_dumps_never_writes_what_is_not_json() -> None:
    nan = t.ToolCallRiskAssessmentCompleteState(reason="r", safety=float("nan"))
    with pytest.raises(LocalProtocolError):
        wire.dumps(nan)
    inf_meta = t.SessionMetaChangedAction(meta={"x": float("inf")})
    with pytest.raises(LocalProtocolError) as info:
        wire.dumps(inf_meta)
    assert info.value.path == "$.x"


@given(json_values)
def test_every_json_value_survives_parse_and_dumps(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    assert json_equal(wire.parse_json(text), value)
    assert json_equal(wire.parse_json(text.encode("utf-8")), value)


# -- tags are strings (item 10) -------------------------------------------------------------


@pytest.mark.parametrize("tag", [[1], None, 5, 1.5, True, {"k": "v"}])
def test_non_string_action_type_is_invalid_params(tag: object) -> None:
    with pytest.raises(InvalidParams) as info:
        wire.parse_action({"type": tag})
    assert info.value.path == "$.type"


@pytest.mark.parametrize("tag", [[1], None, 5, False])
@pytest.mark.parametrize(
    ("tp", "key"),
    [(t.ResponsePart, "kind"), (t.ToolCallState, "status"), (t.MessageAttachment, "type"),
     (t.ChatInputAnswer, "state"), (t.SessionInputRequest, "kind"), (t.ChatSource, "kind")],
)
def test_non_string_discriminators_are_invalid_params(tag: object, tp: Any, key: str) -> None:
    with pytest.raises(InvalidParams) as info:
        wire.structure({key: tag}, tp)
    assert info.value.path == f"$.{key}"


@given(st.text(), json_values)
def test_unknown_variants_are_hashable_and_round_trip(tag: str, extra: Any) -> None:
    raw = {"type": f"x/{tag}", "payload": extra}
    try:
        action = wire.parse_action(raw)
    except InvalidParams:
        return  # a lone surrogate in the generated text
    assert isinstance(action, t.UnknownAction)
    hash(action)
    assert json_equal(wire.unstructure(action), raw)


# -- no aliasing (item 3) ---------------------------------------------------------------


def test_decoding_copies_the_callers_json_objects() -> None:
    meta: dict[str, Any] = {"nested": {"list": [1, 2]}}
    action = wire.parse_action({"type": "session/metaChanged", "_meta": meta})
    meta["nested"]["list"].append(3)
    assert action == t.SessionMetaChangedAction(meta={"nested": {"list": [1, 2]}})
    raw: dict[str, Any] = {"type": "future/thing", "deep": {"a": [1]}}
    unknown = wire.parse_action(raw)
    raw["deep"]["a"].append(2)
    assert isinstance(unknown, t.UnknownAction)
    assert unknown.raw == {"type": "future/thing", "deep": {"a": [1]}}


def test_encoding_never_hands_out_the_models_objects() -> None:
    unknown = wire.parse_action({"type": "future/thing", "deep": {"a": [1]}})
    out = wire.unstructure(unknown)
    out["deep"]["a"].append(2)
    assert wire.unstructure(unknown) == {"type": "future/thing", "deep": {"a": [1]}}
    action = wire.parse_action({"type": "session/metaChanged", "_meta": {"n": {"x": 1}}})
    encoded = wire.unstructure(action)
    encoded["_meta"]["n"]["x"] = 2
    assert wire.unstructure(action)["_meta"] == {"n": {"x": 1}}


@given(json_values)
def test_copy_json_is_deep_and_equal(value: Any) -> None:
    copied = copy_json(value)
    assert json_equal(copied, value)
    original = copy.deepcopy(value)
    if isinstance(copied, (dict, list)):
        assert copied is not value
        copied.clear()
        assert json_equal(value, original)


def test_deep_json_is_copied_without_recursion() -> None:
    deep: Any = "leaf"
    for _ in range(100_000):
        deep = [deep]
    copied = copy_json(deep)
    assert json_equal(copied, deep)


# -- peer data versus caller mistakes (item 11) ----------------------------------------------


@pytest.mark.parametrize("supported", [None, 5, "0.7.0", {"x": 1}])
def test_select_version_rejects_peer_data_that_is_not_an_array(supported: Any) -> None:
    with pytest.raises(RemoteProtocolError):
        select_version_from_supported(supported)


def test_select_version_skips_entries_that_are_not_strings() -> None:
    peer_data: list[Any] = [None, 3, ["x"], "0.6.0"]
    assert select_version_from_supported(peer_data) == "0.6.0"


def test_reduce_with_a_channel_that_is_not_a_string_is_a_caller_mistake() -> None:
    state = t.SessionState(provider="p", title="t", status=t.SessionStatus.IDLE,
                           lifecycle="ready", active_clients=(), chats=())
    with pytest.raises(LocalProtocolError):
        reduce(None, state, t.SessionReadyAction())  # type: ignore[call-overload]
    with pytest.raises(LocalProtocolError):
        reduce("ahp-session:/s", None, t.SessionReadyAction())  # type: ignore[call-overload]


# -- equality follows JSON (item 2) and equal no-ops return state (item 4) ------------------


def test_model_equality_follows_json() -> None:
    assert t.SessionMetaChangedAction(meta={"f": True}) != t.SessionMetaChangedAction(meta={"f": 1})
    assert t.SessionMetaChangedAction(meta={"f": 1.0}) == t.SessionMetaChangedAction(meta={"f": 1})
    assert t.UnknownAction(type="x", raw={"v": [True]}) != t.UnknownAction(type="x", raw={"v": [1]})
    assert hash(t.UnknownAction(type="x", raw={"v": 1})) == hash(
        t.UnknownAction(type="x", raw={"v": 1.0})
    )


def session_state(**changes: Any) -> t.SessionState:
    import attrs

    state = t.SessionState(provider="p", title="t", status=t.SessionStatus.IDLE,
                           lifecycle="ready", active_clients=(), chats=())
    return attrs.evolve(state, **changes)


def test_reducers_decide_change_by_json_equality() -> None:
    from agenthost_protocol.reducers import root_reducer, session_reducer

    state = session_state(meta={"flag": 1})
    replaced = session_reducer(state, t.SessionMetaChangedAction(meta={"flag": True}))
    assert replaced is not state and replaced.meta == {"flag": True}
    assert session_reducer(state, t.SessionMetaChangedAction(meta={"flag": 1.0})) is state

    schema = t.SessionConfigSchema(properties={})
    configured = session_state(config=t.SessionConfigState(schema=schema, values={"a": 1}))
    assert session_reducer(configured, t.SessionConfigChangedAction(config={"a": 1})) is configured
    changed = session_reducer(configured, t.SessionConfigChangedAction(config={"a": True}))
    assert changed.config is not None and changed.config.values == {"a": True}

    root = t.RootState(agents=(), config=t.RootConfigState(
        schema=t.ConfigSchema(type="object", properties={}), values={"x": [1]}))
    assert root_reducer(root, t.RootConfigChangedAction(config={"x": [1]})) is root
    assert root_reducer(root, t.RootConfigChangedAction(config={"x": [1]}, replace=True)) is root
    assert root_reducer(root, t.RootConfigChangedAction(config={"x": [True]})) is not root

    chat = t.ChatSummary(resource="ahp-chat:/c", title="c", status=t.SessionStatus.IDLE,
                         modified_at="1970-01-01T00:00:00.000Z")
    with_chat = session_state(chats=(chat,))
    same = t.SessionChatUpdatedAction(chat="ahp-chat:/c", changes=t.PartialChatSummary(title="c"))
    assert session_reducer(with_chat, same) is with_chat


# -- who gets an answer (item 12) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "respond", "request_id"),
    [
        ('{"jsonrpc": "2.0", "method": "dispatchAction", "params": {"channel": 5}}', False, None),
        ('{"jsonrpc": "2.0", "method": "noSuchNotification", "params": {}}', False, None),
        ('{"jsonrpc": "2.0", "method": "unsubscribe"}', False, None),
        ('{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": 5}', True, 7),
        ('{"jsonrpc": "2.0", "id": 7, "method": "noSuchRequest", "params": {}}', True, 7),
        ('{"jsonrpc": "2.0", "id": [1], "method": "ping", "params": {}}', True, None),
        ('{"jsonrpc": "2.0", "id": true, "method": "ping", "params": {}}', True, None),
        ("{not json", True, None),
        ("[]", True, None),
        ('{"jsonrpc": "1.0", "id": 3, "method": "ping", "params": {}}', True, None),
        ('{"jsonrpc": "2.0", "id": 3, "result": 1, "error": {}}', False, 3),
        ('{"jsonrpc": "2.0", "id": 3, "error": {"code": "x"}}', False, 3),
    ],
)
def test_errors_say_whether_and_how_to_answer(
    message: str, respond: bool, request_id: object
) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        wire.parse_message(message)
    error = info.value
    assert error.respond is respond
    assert error.request_id == request_id
    response = error.response()
    if respond:
        assert response == {"jsonrpc": "2.0", "id": request_id, "error": error.to_error()}
    else:
        assert response is None


def test_a_malformed_result_is_never_answered() -> None:
    with pytest.raises(InvalidParams) as info:
        wire.parse_message('{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 5}}',
                           result_method={1: "initialize"})
    assert info.value.respond is False and info.value.request_id == 1
