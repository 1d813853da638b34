"""The codec: the round-trip corpus, typed JSON-RPC decoding, and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.conformance import bundled_corpus, run_round_trip_case
from agenthost_protocol.errors import (
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    ProtocolError,
    RemoteProtocolError,
)
from agenthost_protocol.methods import METHODS

ROUND_TRIPS = sorted((bundled_corpus() / "round-trips").glob("*.json"))
REDUCER_CASES = sorted((bundled_corpus() / "reducers").glob("*.json"))


def test_corpus_is_complete() -> None:
    assert len(ROUND_TRIPS) == 39
    assert len(REDUCER_CASES) == 247


@pytest.mark.parametrize("path", ROUND_TRIPS, ids=lambda p: p.stem)
def test_round_trip_fixture(path: Path) -> None:
    result = run_round_trip_case(path.name, json.loads(path.read_text()))
    assert result.passed, result.message


# -- typed JSON-RPC -----------------------------------------------------------

TITLE_ENVELOPE = {
    "channel": "ahp-session:/s1",
    "action": {"type": "session/titleChanged", "title": "Hi"},
    "serverSeq": 2148131814,
    "origin": {"clientId": "c1", "clientSeq": 3},
}


def test_action_notification_is_typed() -> None:
    msg = wire.parse_message(
        json.dumps({"jsonrpc": "2.0", "method": "action", "params": TITLE_ENVELOPE}).encode()
    )
    assert isinstance(msg, t.JsonRpcNotification)
    env = msg.params
    assert isinstance(env, t.ActionEnvelope)
    assert env.server_seq == 2148131814
    assert env.origin == t.ActionOrigin(client_id="c1", client_seq=3)
    assert env.action == t.SessionTitleChangedAction(title="Hi")
    assert wire.unstructure(msg) == {"jsonrpc": "2.0", "method": "action", "params": TITLE_ENVELOPE}


def test_request_params_and_result_are_typed() -> None:
    req = wire.parse_message(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "initialize",
            "params": {"channel": "ahp-root://", "protocolVersions": ["0.5.0"], "clientId": "c"},
        }
    )
    assert isinstance(req, t.JsonRpcRequest)
    assert req.params == t.InitializeParams(protocol_versions=("0.5.0",), client_id="c")
    result = {
        "protocolVersion": "0.5.0",
        "serverSeq": 4,
        "snapshots": [
            {"resource": "ahp-root://", "state": {"agents": []}, "fromSeq": 4},
            {
                "resource": "ahp-session:/s1/annotations",
                "state": {"annotations": []},
                "fromSeq": 4,
            },
        ],
    }
    resp = wire.parse_message(
        {"jsonrpc": "2.0", "id": 7, "result": result}, result_method={7: "initialize"}
    )
    assert isinstance(resp, t.JsonRpcSuccessResponse)
    assert isinstance(resp.result, t.InitializeResult)
    assert isinstance(resp.result.snapshots[0].state, t.RootState)
    assert isinstance(resp.result.snapshots[1].state, t.AnnotationsState)
    assert wire.unstructure(resp.result) == result
    raw = wire.parse_message({"jsonrpc": "2.0", "id": 7, "result": result})
    assert isinstance(raw, t.JsonRpcSuccessResponse)
    assert raw.result == result


def test_null_result_methods() -> None:
    resp = wire.parse_message(
        {"jsonrpc": "2.0", "id": 1, "result": None}, result_method=lambda _: "createSession"
    )
    assert isinstance(resp, t.JsonRpcSuccessResponse)
    assert resp.result is None


def test_error_response() -> None:
    msg = wire.parse_message(
        '{"jsonrpc":"2.0","id":3,"error":{"code":-32005,"message":"no",'
        '"data":{"supportedVersions":["^0.2.0"]}}}'
    )
    assert isinstance(msg, t.JsonRpcErrorResponse)
    assert msg.error.code == -32005
    assert msg.error.data == {"supportedVersions": ["^0.2.0"]}


def test_snapshot_state_by_channel_and_by_shape() -> None:
    chat_state = {
        "resource": "ahp-chat:/c",
        "title": "t",
        "status": 1,
        "modifiedAt": "1970-01-01T00:00:00.000Z",
        "turns": [],
    }
    snap = wire.structure(
        {"resource": "ahp-chat:/c", "state": chat_state, "fromSeq": 1}, t.Snapshot
    )
    assert isinstance(snap.state, t.ChatState)
    # A server-defined URI: decided by shape.
    term = {"title": "sh", "content": [], "claim": {"kind": "client", "clientId": "c"}}
    snap = wire.structure({"resource": "x-term:/1", "state": term, "fromSeq": 1}, t.Snapshot)
    assert isinstance(snap.state, t.TerminalState)
    assert wire.unstructure(snap.state) == term


def test_absent_optionals_stay_absent_and_unknown_keys_are_dropped() -> None:
    env = wire.parse_envelope({**TITLE_ENVELOPE, "origin": None, "future": 1})
    assert env.origin is None
    assert "origin" not in wire.unstructure(env)
    assert "future" not in wire.unstructure(env)


def test_unknown_variants_and_values_survive() -> None:
    part = {"kind": "hologram", "id": "p", "depth": [1, {"x": None}]}
    decoded = wire.structure(part, t.ResponsePart)
    assert isinstance(decoded, t.UnknownResponsePart)
    assert decoded.kind == "hologram"
    assert wire.unstructure(decoded) == part
    action = wire.parse_action({"type": "future/thing", "n": 1})
    assert isinstance(action, t.UnknownAction)
    assert wire.unstructure(action) == {"type": "future/thing", "n": 1}
    option = wire.structure({"id": "o", "label": "L", "kind": "maybe"}, t.ConfirmationOption)
    assert option.kind == "maybe"
    assert wire.unstructure(option)["kind"] == "maybe"
    status = wire.structure(2**31 | 64 | 8, t.SessionStatus)
    assert t.SessionStatus.IS_ARCHIVED in status
    assert wire.unstructure(status) == 2147483720


def test_tool_call_confirmed_variants() -> None:
    approved = wire.parse_action(
        {
            "type": "chat/toolCallConfirmed",
            "turnId": "t",
            "toolCallId": "c",
            "approved": True,
            "confirmed": "user-action",
        }
    )
    assert isinstance(approved, t.ChatToolCallApprovedAction)
    denied = wire.parse_action(
        {
            "type": "chat/toolCallConfirmed",
            "turnId": "t",
            "toolCallId": "c",
            "approved": False,
            "reason": "denied",
        }
    )
    assert isinstance(denied, t.ChatToolCallDeniedAction)
    with pytest.raises(InvalidParams) as e:
        wire.parse_action(
            {"type": "chat/toolCallConfirmed", "turnId": "t", "toolCallId": "c", "approved": 1}
        )
    assert e.value.path == "$.approved"


def test_streamed_text_reads_as_str() -> None:
    part = wire.structure({"kind": "markdown", "id": "p", "content": "ab"}, t.ResponsePart)
    assert isinstance(part, t.MarkdownResponsePart)
    assert part.content == "ab"
    longer = part.with_content_appended("cd")
    assert (part.content, longer.content) == ("ab", "abcd")
    assert wire.unstructure(longer) == {"kind": "markdown", "id": "p", "content": "abcd"}


# -- bad input ------------------------------------------------------------------


def _envelope_message(**changes: Any) -> dict[str, Any]:
    params = {**TITLE_ENVELOPE, **changes}
    return {"jsonrpc": "2.0", "method": "action", "params": params}


@pytest.mark.parametrize(
    ("data", "error", "code", "path"),
    [
        (b"{not json", ParseError, -32700, None),
        (b"\xff\xfe", ParseError, -32700, None),
        ("", ParseError, -32700, None),
        ("[1, 2]", InvalidRequest, -32600, "$"),
        ('{"method": "ping", "id": 1, "params": {}}', InvalidRequest, -32600, "$.jsonrpc"),
        ('{"jsonrpc": "2.0", "id": [1], "method": "ping"}', InvalidRequest, -32600, "$.id"),
        ('{"jsonrpc": "2.0", "id": 1, "method": 5}', InvalidRequest, -32600, "$.method"),
        ('{"jsonrpc": "2.0", "id": 1}', InvalidRequest, -32600, "$"),
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "teleport", "params": {}}',
            MethodNotFound,
            -32601,
            "$.method",
        ),
        (
            '{"jsonrpc": "2.0", "method": "initialize", "params": {}}',
            MethodNotFound,
            -32601,
            "$.method",
        ),
        ('{"jsonrpc": "2.0", "id": 1, "method": "ping"}', InvalidParams, -32602, "$.params"),
        (_envelope_message(serverSeq="1"), InvalidParams, -32602, "$.params.serverSeq"),
        (_envelope_message(serverSeq=True), InvalidParams, -32602, "$.params.serverSeq"),
        (
            _envelope_message(action={"type": "session/titleChanged", "title": 5}),
            InvalidParams,
            -32602,
            "$.params.action.title",
        ),
        (
            _envelope_message(action={"type": "session/titleChanged"}),
            InvalidParams,
            -32602,
            "$.params.action.title",
        ),
        (_envelope_message(action={"title": "x"}), InvalidParams, -32602, "$.params.action.type"),
        (_envelope_message(action=[]), InvalidParams, -32602, "$.params.action"),
        (
            _envelope_message(origin={"clientId": "c"}),
            InvalidParams,
            -32602,
            "$.params.origin.clientSeq",
        ),
        (
            _envelope_message(action={"type": "root/agentsChanged", "agents": "abc"}),
            InvalidParams,
            -32602,
            "$.params.action.agents",
        ),
        (
            _envelope_message(
                action={
                    "type": "root/agentsChanged",
                    "agents": [
                        {"provider": "p", "displayName": "d", "description": "x", "models": []},
                        {"provider": 1},
                    ],
                }
            ),
            InvalidParams,
            -32602,
            "$.params.action.agents[1].provider",
        ),
        (
            _envelope_message(
                action={
                    "type": "chat/responsePart",
                    "turnId": "t",
                    "part": {"id": "p", "content": "x"},
                }
            ),
            InvalidParams,
            -32602,
            "$.params.action.part.kind",
        ),
    ],
)
def test_bad_input_raises_documented_errors(
    data: Any, error: type[ProtocolError], code: int, path: str | None
) -> None:
    with pytest.raises(error) as e:
        wire.parse_message(data)
    assert e.value.code == code
    assert e.value.path == path
    assert isinstance(e.value, RemoteProtocolError)
    assert e.value.to_error()["code"] == code


def test_errors_carry_the_request_id() -> None:
    with pytest.raises(MethodNotFound) as e:
        wire.parse_message('{"jsonrpc": "2.0", "id": 42, "method": "nope", "params": {}}')
    assert e.value.request_id == 42
    with pytest.raises(InvalidParams) as e2:
        wire.parse_message('{"jsonrpc": "2.0", "id": 43, "method": "subscribe", "params": {}}')
    assert e2.value.request_id == 43
    assert e2.value.path == "$.params.channel"


def test_ten_megabyte_message() -> None:
    text = "x" * (10 * 1024 * 1024)
    msg = wire.parse_message(
        json.dumps(_envelope_message(action={"type": "session/titleChanged", "title": text}))
    )
    assert isinstance(msg, t.JsonRpcNotification)
    assert isinstance(msg.params, t.ActionEnvelope)
    assert isinstance(msg.params.action, t.SessionTitleChangedAction)
    assert msg.params.action.title == text
    with pytest.raises(ParseError):
        wire.parse_message("[" * (10 * 1024 * 1024))


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_nesting_fails_cleanly_or_succeeds(depth: int) -> None:
    meta = "{" + '"a":{' * depth + "}" * depth + "}"
    text = (
        '{"jsonrpc":"2.0","method":"action","params":{"channel":"ahp-session:/s",'
        '"serverSeq":1,"action":{"type":"session/metaChanged","_meta":' + meta + "}}}"
    )
    try:
        msg = wire.parse_message(text)
    except ProtocolError as e:
        assert e.code in (-32700, -32602)
    else:
        assert isinstance(msg, t.JsonRpcNotification)
    schema: dict[str, Any] = {"type": "string", "title": "leaf"}
    for _ in range(depth if depth <= 1_000 else 5_000):
        schema = {"type": "array", "title": "t", "items": schema}
    try:
        wire.structure(schema, t.ConfigPropertySchema)
    except ProtocolError as e:
        assert e.code == -32602


# -- fuzzing: nothing but ProtocolError ever escapes ------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def _mutate(value: Any, data: st.DataObject) -> Any:
    """Replace one randomly chosen node of ``value`` by an arbitrary JSON value."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: _mutate(value[key], data)}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], _mutate(value[i], data), *value[i + 1 :]]
    return data.draw(json_values)


@given(st.data())
def test_mutated_fixture_actions_raise_only_protocol_errors(data: st.DataObject) -> None:
    case = json.loads(data.draw(st.sampled_from(REDUCER_CASES)).read_text())
    if not case["actions"]:
        return
    action = data.draw(st.sampled_from(case["actions"]))
    envelope = {"channel": "ahp-chat:/c", "serverSeq": 1, "action": _mutate(action, data)}
    try:
        msg = wire.parse_message({"jsonrpc": "2.0", "method": "action", "params": envelope})
    except ProtocolError as e:
        assert e.code in (-32600, -32601, -32602)
        assert e.path is None or e.path.startswith("$")
    else:
        assert isinstance(msg, t.JsonRpcNotification)
        # What decodes re-encodes, and decodes again to the same value.
        again = wire.parse_envelope(json.loads(wire.dumps(msg.params)))
        assert again == msg.params


@given(st.sampled_from(sorted(METHODS)), json_values, st.booleans())
def test_arbitrary_params_raise_only_protocol_errors(
    method: str, params: Any, with_id: bool
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if with_id:
        message["id"] = 1
    try:
        wire.parse_message(message)
    except ProtocolError as e:
        assert e.code in (-32600, -32601, -32602)


@given(st.data())
def test_mutated_fixture_states_raise_only_protocol_errors(data: st.DataObject) -> None:
    from agenthost_protocol.conformance import STATE_TYPES

    case = json.loads(data.draw(st.sampled_from(REDUCER_CASES)).read_text())
    tp = STATE_TYPES[case["reducer"]]
    try:
        state: Any = wire.structure(_mutate(case["initial"], data), tp)
    except ProtocolError as e:
        assert e.code == -32602
    else:
        assert wire.structure(wire.unstructure(state), tp) == state


def _assert_plain_json(value: Any, path: str = "$") -> None:
    if isinstance(value, dict):
        assert type(value) is dict, path
        for k, v in value.items():
            assert type(k) is str, path
            _assert_plain_json(v, f"{path}.{k}")
    elif isinstance(value, list):
        assert type(value) is list, path
        for i, v in enumerate(value):
            _assert_plain_json(v, f"{path}[{i}]")
    else:
        assert type(value) in (str, int, float, bool, type(None)), (path, type(value))


@pytest.mark.parametrize("path", REDUCER_CASES[::10], ids=lambda p: p.stem)
def test_encoding_yields_plain_json_types(path: Path) -> None:
    from agenthost_protocol.conformance import STATE_TYPES

    case = json.loads(path.read_text())
    state: Any = wire.structure(case["expected"], STATE_TYPES[case["reducer"]])
    _assert_plain_json(wire.unstructure(state))
    for action in case["actions"]:
        _assert_plain_json(wire.unstructure(wire.parse_action(action)))


def test_closed_enums_channel_unions_unknowns_and_bare_generics() -> None:
    assert wire.structure("complete", t.TurnState) is t.TurnState.COMPLETE
    assert wire.structure(-32005, t.AhpErrorCode) is t.AhpErrorCode.UNSUPPORTED_PROTOCOL_VERSION
    with pytest.raises(InvalidParams, match="unknown TurnState"):
        wire.structure("later", t.TurnState)
    delta = {"type": "chat/delta", "turnId": "t", "partId": "p", "content": "x"}
    assert isinstance(wire.structure(delta, t.ChatAction), t.ChatDeltaAction)
    with pytest.raises(InvalidParams) as e:
        wire.structure({"type": "session/ready"}, t.ChatAction)
    assert e.value.path == "$.type"
    raw = {"kind": "hologram", "depth": 3}
    assert wire.structure(raw, t.UnknownResponsePart) == t.UnknownResponsePart(
        kind="hologram", raw=raw
    )
    request = wire.structure({"jsonrpc": "2.0", "id": 1, "method": "m"}, t.JsonRpcRequest)
    assert request == t.JsonRpcRequest(id=1, method="m")
    with pytest.raises(InvalidParams):
        wire.structure({"jsonrpc": "2.0", "method": "m"}, t.JsonRpcRequest)


# -- 0.7.0 additions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"chat": "ahp-chat:/a", "turnId": "t"}, "required field missing @ $.kind"),
        ({"kind": "future", "chat": "ahp-chat:/a", "turnId": "t"}, "unknown kind 'future'"),
        ({"kind": 1, "chat": "ahp-chat:/a", "turnId": "t"}, "discriminator must be a string"),
    ],
)
def test_chat_source_is_a_closed_union(value: dict[str, object], message: str) -> None:
    # The spec: a createChat source with a missing or unknown kind MUST be rejected.
    with pytest.raises(InvalidParams) as info:
        wire.structure(value, t.ChatSource)
    assert message in str(info.value)
    fork = wire.structure({"kind": "fork", "chat": "ahp-chat:/a", "turnId": "t"}, t.ChatSource)
    assert isinstance(fork, t.ForkChatSource)


def test_tool_input_is_a_string_or_a_content_ref() -> None:
    assert wire.structure("ls -la", t.ToolInput) == "ls -la"
    ref = wire.structure({"uri": "file:///tool-inputs/1", "nonce": "n"}, t.ToolInput)
    assert ref == t.ContentRef(uri="file:///tool-inputs/1", nonce="n")
    assert wire.unstructure(ref) == {"uri": "file:///tool-inputs/1", "nonce": "n"}
    with pytest.raises(InvalidParams) as info:
        wire.structure(5, t.ToolInput)
    assert "a string or a ContentRef object" in str(info.value)
    with pytest.raises(InvalidParams) as info:
        wire.structure({"nonce": "n"}, t.ToolInput)
    assert info.value.path == "$.uri"


def test_root_progress_notification_is_typed() -> None:
    line = json.dumps({"jsonrpc": "2.0", "method": "root/progress", "params": {
        "channel": "ahp-root://", "progressToken": "p1", "progress": 3, "total": 3}})
    message = wire.parse_message(line)
    assert isinstance(message, t.JsonRpcNotification)
    assert message.params == t.ProgressParams(
        channel="ahp-root://", progress_token="p1", progress=3, total=3
    )


def test_flat_session_state_is_recognised_by_shape() -> None:
    snapshot = wire.structure({"resource": "copilot:/x", "fromSeq": 1, "state": {
        "provider": "p", "title": "t", "status": 1, "lifecycle": "ready",
        "activeClients": [], "chats": []}}, t.Snapshot)
    assert isinstance(snapshot.state, t.SessionState)


def test_request_unions_match_the_method_table() -> None:
    import typing

    from agenthost_protocol import methods as m

    def members(alias: object) -> set[object]:
        return set(typing.get_args(alias))

    def of(direction: m.Direction) -> list[m.Method[object, object]]:
        return [info for info in METHODS.values()
                if m.request_method(info.name, direction) is not None]

    core = {"initialize", "ping", "reconnect", "subscribe"}
    to_host = [info for info in of(m.Direction.CLIENT_TO_SERVER) if info.name not in core]
    assert members(m.CommandParams) == {info.params for info in to_host}
    assert members(m.CommandResult) == {info.result for info in to_host if info.result}
    to_client = of(m.Direction.SERVER_TO_CLIENT)
    assert members(m.ServerRequestParams) == {info.params for info in to_client}
    assert members(m.ServerRequestResult) == {info.result for info in to_client}
    assert m.request_method("action", m.Direction.SERVER_TO_CLIENT) is None  # a notification
    assert m.request_method("createSession", m.Direction.SERVER_TO_CLIENT) is None
    assert m.request_method("nope", m.Direction.CLIENT_TO_SERVER) is None
