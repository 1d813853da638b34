"""Unit tests of :mod:`agenthost_protocol.client`, driven by scripted host lines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import versions, wire
from agenthost_protocol.client import (
    ActionReceived,
    ClientConnection,
    ClientState,
    Event,
    FailureReason,
    Initialized,
    NotificationReceived,
    ProtocolViolation,
    Reconnected,
    RequestFailed,
    ResponseReceived,
    ServerRequestReceived,
)
from agenthost_protocol.errors import (
    InvalidParams,
    LocalProtocolError,
    MethodNotFound,
    ParseError,
    RemoteProtocolError,
)
from agenthost_protocol.reconciler import ReceiveKind
from agenthost_protocol.types import (
    AuthRequiredErrorData,
    Implementation,
    ListSessionsParams,
    ListSessionsResult,
    ProgressParams,
    ReconnectResultType,
    ResourceReadParams,
    ResourceReadResult,
    SessionState,
    SessionTitleChangedAction,
    UnsupportedProtocolVersionErrorData,
)

from ._fixtures import FIXED_NOW, SESSION

SESSION_STATE = {
    "provider": "test", "title": "untitled", "status": 1, "lifecycle": "ready",
    "activeClients": [], "chats": [],
}


def sent(data: bytes) -> dict[str, Any]:
    value = json.loads(data)
    assert isinstance(value, dict)
    return value


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **obj}).encode()


def result(request_id: int, value: Any) -> bytes:
    return line({"id": request_id, "result": value})


def error(request_id: int | None, code: int, message: str = "no", data: Any = None) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return line({"id": request_id, "error": err})


def envelope(seq: int, title: str, origin: tuple[str, int] | None = None,
             rejection: str | None = None) -> bytes:
    params: dict[str, Any] = {
        "channel": SESSION, "serverSeq": seq,
        "action": {"type": "session/titleChanged", "title": title},
    }
    if origin is not None:
        params["origin"] = {"clientId": origin[0], "clientSeq": origin[1]}
    if rejection is not None:
        params["rejectionReason"] = rejection
    return line({"method": "action", "params": params})


def snapshot(seq: int, title: str = "untitled") -> dict[str, Any]:
    return {"resource": SESSION, "state": {**SESSION_STATE, "title": title}, "fromSeq": seq}


def only(events: list[Event]) -> Event:
    assert len(events) == 1, events
    return events[0]


def new_client() -> ClientConnection:
    return ClientConnection("c1", clock=lambda: FIXED_NOW,
                            client_info=Implementation(name="test-client", version="1"))


def open_client(subscribed: bool = True) -> ClientConnection:
    """A client initialized at serverSeq 10, subscribed to SESSION (fromSeq 10)."""
    client = new_client()
    request = sent(client.initialize(initial_subscriptions=[SESSION] if subscribed else []))
    snaps = [snapshot(10)] if subscribed else []
    event = only(client.receive_data(result(request["id"], {
        "protocolVersion": "0.7.0", "serverSeq": 10, "snapshots": snaps,
    })))
    assert isinstance(event, Initialized)
    return client


def state(client: ClientConnection) -> ClientState:
    # a function call, so that mypy does not narrow the property across calls
    return client.connection_state


def title(client: ClientConnection, confirmed: bool = False) -> str:
    state = client.confirmed(SESSION) if confirmed else client.optimistic(SESSION)
    assert isinstance(state, SessionState)
    return state.title


# -- initialize ----------------------------------------------------------------------


def test_initialize_sends_the_offer_and_opens() -> None:
    client = new_client()
    request = sent(client.initialize(initial_subscriptions=[SESSION]))
    assert request == {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "channel": "ahp-root://",
            "protocolVersions": list(versions.SUPPORTED_PROTOCOL_VERSIONS),
            "clientId": "c1", "clientInfo": {"name": "test-client", "version": "1"},
            "initialSubscriptions": [SESSION],
        },
    }
    assert state(client) is ClientState.INITIALIZING
    event = only(client.receive_data(result(1, {
        "protocolVersion": "0.6.0", "serverSeq": 10, "snapshots": [snapshot(10)],
        "serverInfo": {"name": "host"},
    })))
    assert isinstance(event, Initialized)
    assert event.protocol_version == "0.6.0" == client.negotiated_version
    assert event.server_info == Implementation(name="host")
    assert event.server_seq == 10
    assert state(client) is ClientState.OPEN
    assert client.subscriptions == {SESSION}
    assert title(client) == "untitled"
    assert client.reconciler.last_seen_server_seq == 10


def test_unsupported_version_carries_typed_data_and_the_client_can_retry() -> None:
    client = new_client()
    client.initialize()
    event = only(client.receive_data(error(1, -32005, "unsupported",
                                           {"supportedVersions": [">=0.5.0 <0.6.0"]})))
    assert isinstance(event, RequestFailed)
    assert event.reason is FailureReason.ERROR_RESPONSE and event.method == "initialize"
    assert event.error is not None and event.error.code == -32005
    assert event.error.data == UnsupportedProtocolVersionErrorData(
        supported_versions=(">=0.5.0 <0.6.0",))
    assert state(client) is ClientState.IDLE
    choice = versions.select_version_from_supported(event.error.data, client.protocol_versions)
    assert choice == "0.5.2"
    # the host closes the transport after -32005; a new one starts afresh
    assert client.connection_lost() == []
    request = sent(client.initialize(protocol_versions=[choice]))
    assert request["id"] == 2 and request["params"]["protocolVersions"] == ["0.5.2"]
    event = only(client.receive_data(result(2, {
        "protocolVersion": "0.5.2", "serverSeq": 0, "snapshots": []})))
    assert isinstance(event, Initialized) and client.negotiated_version == "0.5.2"


def test_a_version_that_was_not_offered_is_a_fatal_violation() -> None:
    client = new_client()
    client.initialize(protocol_versions=["0.7.0"])
    events = client.receive_data(result(1, {
        "protocolVersion": "0.6.0", "serverSeq": 0, "snapshots": []}))
    violation, failed = events
    assert isinstance(violation, ProtocolViolation) and violation.fatal
    assert violation.error.path == "$.result.protocolVersion"
    assert isinstance(failed, RequestFailed)
    assert failed.reason is FailureReason.PROTOCOL_VIOLATION
    assert state(client) is ClientState.CLOSED
    assert client.negotiated_version is None


# -- requests and responses ------------------------------------------------------------


def test_requests_are_numbered_and_results_typed() -> None:
    client = open_client()
    request_id, data = client.request("listSessions", ListSessionsParams())
    assert request_id == 2 and sent(data)["method"] == "listSessions"
    ping = sent(client.ping())
    assert ping["id"] == 3 and ping["method"] == "ping"
    assert client.pending_requests == {2: "listSessions", 3: "ping"}
    # answered out of order: correlation is by id
    event = only(client.receive_data(result(3, None)))
    assert isinstance(event, ResponseReceived)
    assert (event.id, event.method, event.result) == (3, "ping", None)
    event = only(client.receive_data(result(2, {"items": []})))
    assert isinstance(event, ResponseReceived)
    assert event.result == ListSessionsResult(items=())
    assert isinstance(event.params, ListSessionsParams)
    assert client.pending_requests == {}


def test_error_responses_carry_typed_ahp_data() -> None:
    client = open_client()
    request_id, _ = client.request("resourceRead", ResourceReadParams(uri="file:///x"))
    data = {"resources": [{"resource": "https://api.example"}]}
    event = only(client.receive_data(error(request_id, -32007, "auth", data)))
    assert isinstance(event, RequestFailed) and event.error is not None
    assert isinstance(event.error.data, AuthRequiredErrorData)
    assert event.error.data.resources[0].resource == "https://api.example"
    # a code without a typed shape, and typed data that does not fit: kept raw
    request_id, _ = client.request("resourceRead", ResourceReadParams(uri="file:///x"))
    event = only(client.receive_data(error(request_id, -32008, "gone", {"why": 1})))
    assert isinstance(event, RequestFailed) and event.error is not None
    assert event.error.data == {"why": 1}
    request_id, _ = client.request("resourceRead", ResourceReadParams(uri="file:///x"))
    event = only(client.receive_data(error(request_id, -32007, "auth", {"resources": 5})))
    assert isinstance(event, RequestFailed) and event.error is not None
    assert event.error.data == {"resources": 5}
    assert state(client) is ClientState.OPEN


def test_a_malformed_result_fails_its_request_and_closes() -> None:
    client = open_client()
    first, _ = client.request("listSessions", ListSessionsParams())
    second, _ = client.request("listSessions", ListSessionsParams())
    events = client.receive_data(result(first, {"items": 5}))
    assert isinstance(events[0], ProtocolViolation) and events[0].fatal
    assert isinstance(events[0].error, InvalidParams)
    assert [(e.id, e.reason) for e in events[1:] if isinstance(e, RequestFailed)] == [
        (first, FailureReason.PROTOCOL_VIOLATION), (second, FailureReason.PROTOCOL_VIOLATION)]
    assert state(client) is ClientState.CLOSED
    with pytest.raises(LocalProtocolError):
        client.receive_data(result(second, {"items": []}))
    with pytest.raises(LocalProtocolError):
        client.ping()


@pytest.mark.parametrize("data", [
    result(99, None),                       # no such request
    line({"id": "x", "result": None}),      # AHP ids are ours: numbers
    error(None, -32700, "unreadable"),      # the host could not read us
    b"[1, 2]",                              # not a JSON-RPC object
])
def test_unmatched_or_unreadable_responses_are_fatal(data: bytes) -> None:
    client = open_client()
    violation = only(client.receive_data(data))
    assert isinstance(violation, ProtocolViolation) and violation.fatal
    assert isinstance(violation.error, RemoteProtocolError)
    assert state(client) is ClientState.CLOSED


def test_not_json_is_fatal_and_answered_with_a_null_id() -> None:
    client = open_client()
    violation = only(client.receive_data(b"{nope"))
    assert isinstance(violation, ProtocolViolation) and violation.fatal
    assert isinstance(violation.error, ParseError)
    assert violation.reply is not None
    assert sent(violation.reply)["id"] is None and sent(violation.reply)["error"]["code"] == -32700


# -- subscribe, dispatch, actions ----------------------------------------------------


def test_subscribe_tracks_the_snapshot() -> None:
    client = open_client(subscribed=False)
    request = sent(client.subscribe(SESSION))
    assert request["method"] == "subscribe" and request["params"] == {"channel": SESSION}
    with pytest.raises(LocalProtocolError):
        client.subscribe(SESSION)  # already asked for
    event = only(client.receive_data(result(request["id"], {"snapshot": snapshot(12, "hi")})))
    assert isinstance(event, ResponseReceived) and event.method == "subscribe"
    assert title(client) == "hi"
    assert client.reconciler.last_seen_server_seq == 12
    # a stateless channel: no snapshot, still a subscription
    request = sent(client.subscribe("ahp-otlp:/logs"))
    only(client.receive_data(result(request["id"], {})))
    assert client.subscriptions == {SESSION, "ahp-otlp:/logs"}
    assert client.reconciler.channels == (SESSION,)
    notification = sent(client.unsubscribe("ahp-otlp:/logs"))
    assert notification == {"jsonrpc": "2.0", "method": "unsubscribe",
                            "params": {"channel": "ahp-otlp:/logs"}}
    assert client.subscriptions == {SESSION}


def test_a_snapshot_of_another_channel_is_fatal() -> None:
    client = open_client(subscribed=False)
    request = sent(client.subscribe(SESSION))
    other = {**snapshot(12), "resource": "ahp-session:/other"}
    events = client.receive_data(result(request["id"], {"snapshot": other}))
    assert isinstance(events[0], ProtocolViolation) and events[0].fatal
    assert isinstance(events[1], RequestFailed) and events[1].method == "subscribe"


def test_dispatch_is_optimistic_and_the_echo_confirms() -> None:
    client = open_client()
    data = sent(client.dispatch(SESSION, SessionTitleChangedAction(title="mine")))
    assert data == {"jsonrpc": "2.0", "method": "dispatchAction", "params": {
        "channel": SESSION, "clientSeq": 1,
        "action": {"type": "session/titleChanged", "title": "mine"}}}
    assert title(client) == "mine" and title(client, confirmed=True) == "untitled"
    event = only(client.receive_data(envelope(11, "mine", origin=("c1", 1))))
    assert isinstance(event, ActionReceived) and event.channel == SESSION
    assert event.received.kind is ReceiveKind.ECHO
    assert title(client, confirmed=True) == "mine"
    assert client.reconciler.pending(SESSION) == ()


def test_a_rejection_rolls_back() -> None:
    client = open_client()
    client.dispatch(SESSION, SessionTitleChangedAction(title="mine"))
    event = only(client.receive_data(envelope(11, "mine", ("c1", 1), rejection="read-only")))
    assert isinstance(event, ActionReceived)
    assert event.received.rejection is not None
    assert event.received.rejection.reason == "read-only"
    assert title(client) == "untitled"


def test_foreign_actions_rebase_pending() -> None:
    client = open_client()
    client.dispatch(SESSION, SessionTitleChangedAction(title="mine"))
    event = only(client.receive_data(envelope(11, "theirs", origin=("c2", 7))))
    assert isinstance(event, ActionReceived) and event.received.kind is ReceiveKind.FOREIGN
    assert title(client, confirmed=True) == "theirs"
    assert title(client) == "mine"  # ours is still pending on top


def test_an_envelope_the_reconciler_refuses_is_fatal() -> None:
    client = open_client()
    # an echo of a clientSeq we never dispatched
    violation, = client.receive_data(envelope(11, "x", origin=("c1", 42)))
    assert isinstance(violation, ProtocolViolation) and violation.fatal
    assert title(client, confirmed=True) == "untitled"  # nothing half-applied


def test_a_malformed_action_notification_is_fatal() -> None:
    client = open_client()
    data = line({"method": "action", "params": {"channel": SESSION, "serverSeq": "11",
                                                "action": {"type": "session/titleChanged",
                                                           "title": "x"}}})
    violation = only(client.receive_data(data))
    assert isinstance(violation, ProtocolViolation) and violation.fatal
    assert violation.reply is None  # notifications are never answered


def test_caller_mistakes_raise_local_errors() -> None:
    client = new_client()
    with pytest.raises(LocalProtocolError):
        client.dispatch(SESSION, SessionTitleChangedAction(title="x"))  # before initialize
    with pytest.raises(LocalProtocolError):
        client.subscribe(SESSION)
    with pytest.raises(LocalProtocolError):
        client.reconnect()
    with pytest.raises(LocalProtocolError):
        ClientConnection("c1", protocol_versions="0.7.0")
    client = open_client()
    with pytest.raises(LocalProtocolError):
        client.dispatch("ahp-session:/unknown", SessionTitleChangedAction(title="x"))
    with pytest.raises(LocalProtocolError):
        client.request("listSessions", ResourceReadParams(uri="file:///x"))  # wrong params
    with pytest.raises(LocalProtocolError):
        client.request("subscribe", ListSessionsParams())  # has its own method
    with pytest.raises(LocalProtocolError):
        client.request("action", ListSessionsParams())  # not a request
    with pytest.raises(LocalProtocolError):
        client.initialize()  # already open
    with pytest.raises(LocalProtocolError):
        client.unsubscribe("ahp-session:/unknown")
    with pytest.raises(LocalProtocolError):
        client.receive_data(42)  # type: ignore[arg-type]
    assert client.pending_requests == {}
    assert state(client) is ClientState.OPEN


# -- notifications and server requests ------------------------------------------------


def test_notifications_have_typed_params() -> None:
    client = open_client()
    data = line({"method": "root/progress", "params": {
        "channel": "ahp-root://", "progressToken": "t", "progress": 3, "total": 4}})
    event = only(client.receive_data(data))
    assert event == NotificationReceived(method="root/progress", params=ProgressParams(
        channel="ahp-root://", progress_token="t", progress=3, total=4))


def test_malformed_or_misdirected_notifications_are_dropped_not_answered() -> None:
    client = open_client()
    for data in (
        line({"method": "root/progress", "params": {"channel": "ahp-root://"}}),
        line({"method": "no/such", "params": {}}),
        line({"method": "dispatchAction", "params": {
            "channel": SESSION, "clientSeq": 1,
            "action": {"type": "session/titleChanged", "title": "x"}}}),
    ):
        violation = only(client.receive_data(data))
        assert isinstance(violation, ProtocolViolation)
        assert not violation.fatal and violation.reply is None
    assert state(client) is ClientState.OPEN


def test_server_requests_are_answered_through_the_responder() -> None:
    client = open_client()
    data = line({"id": 7, "method": "resourceRead", "params": {
        "channel": "ahp-root://", "uri": "virtual://c1/a.txt"}})
    event = only(client.receive_data(data))
    assert isinstance(event, ServerRequestReceived)
    assert event.params == ResourceReadParams(uri="virtual://c1/a.txt")
    with pytest.raises(LocalProtocolError):
        event.responder.respond(ListSessionsResult(items=()))  # type: ignore[arg-type]  # wrong method
    answer = sent(event.responder.respond(ResourceReadResult(data="hi", encoding="utf-8")))
    assert answer == {"jsonrpc": "2.0", "id": 7,
                      "result": {"data": "hi", "encoding": "utf-8"}}
    with pytest.raises(LocalProtocolError):
        event.responder.error(-32008, "twice")  # answered already
    event = only(client.receive_data(line({"id": 8, "method": "resourceDelete", "params": {
        "channel": "ahp-root://", "uri": "virtual://c1/a.txt"}})))
    assert isinstance(event, ServerRequestReceived)
    answer = sent(event.responder.error(-32009, "denied", {"why": "no"}))
    assert answer["error"] == {"code": -32009, "message": "denied", "data": {"why": "no"}}


def test_malformed_server_requests_are_answered_and_not_fatal() -> None:
    client = open_client()
    cases = (
        (line({"id": 5, "method": "resourceRead", "params": {"uri": 3}}), InvalidParams, -32602),
        (line({"id": 6, "method": "listSessions", "params": {}}), MethodNotFound, -32601),
        (line({"id": 7, "method": "no/such", "params": {}}), MethodNotFound, -32601),
    )
    for data, kind, code in cases:
        violation = only(client.receive_data(data))
        assert isinstance(violation, ProtocolViolation) and not violation.fatal
        assert isinstance(violation.error, kind)
        assert violation.reply is not None
        assert sent(violation.reply)["error"]["code"] == code
        assert sent(violation.reply)["id"] == sent(data)["id"]
    assert state(client) is ClientState.OPEN


# -- connection loss and reconnect ------------------------------------------------------


def test_connection_lost_fails_every_pending_request() -> None:
    client = open_client()
    first, _ = client.request("listSessions", ListSessionsParams())
    client.ping()
    events = client.connection_lost()
    assert [(e.id, e.method, e.reason) for e in events if isinstance(e, RequestFailed)] == [
        (first, "listSessions", FailureReason.CONNECTION_LOST),
        (first + 1, "ping", FailureReason.CONNECTION_LOST),
    ]
    assert state(client) is ClientState.DISCONNECTED
    assert client.pending_requests == {}
    with pytest.raises(LocalProtocolError):
        client.dispatch(SESSION, SessionTitleChangedAction(title="x"))
    assert title(client) == "untitled"  # the state outlives the transport


def test_connection_lost_during_initialize_returns_to_idle() -> None:
    client = new_client()
    client.initialize()
    event = only(client.connection_lost())
    assert isinstance(event, RequestFailed) and event.method == "initialize"
    assert state(client) is ClientState.IDLE


def test_reconnect_with_a_replay() -> None:
    client = open_client()
    client.dispatch(SESSION, SessionTitleChangedAction(title="mine"))       # clientSeq 1
    client.dispatch(SESSION, SessionTitleChangedAction(title="lost"))       # clientSeq 2
    client.connection_lost()
    request = sent(client.reconnect())
    assert request["method"] == "reconnect" and request["params"] == {
        "channel": "ahp-root://", "clientId": "c1", "lastSeenServerSeq": 10,
        "subscriptions": [SESSION]}
    assert state(client) is ClientState.RECONNECTING
    replay = {"type": "replay", "missing": [], "actions": [
        sent(envelope(11, "theirs", ("c2", 1)))["params"],
        sent(envelope(12, "mine", ("c1", 1)))["params"],
    ]}
    event = only(client.receive_data(result(request["id"], replay)))
    assert isinstance(event, Reconnected)
    assert event.outcome.kind is ReconnectResultType.REPLAY
    assert [p.client_seq for p in event.outcome.dropped] == [2]
    assert title(client) == "mine" == title(client, confirmed=True)
    assert state(client) is ClientState.OPEN and client.negotiated_version == "0.7.0"
    assert client.reconciler.last_seen_server_seq == 12


def test_reconnect_with_snapshots() -> None:
    client = open_client()
    request = sent(client.subscribe("ahp-otlp:/logs"))
    client.receive_data(result(request["id"], {}))
    client.connection_lost()
    request = sent(client.reconnect())
    assert request["params"]["subscriptions"] == [SESSION]  # stateless ones are not resumed
    event = only(client.receive_data(result(request["id"], {
        "type": "snapshot", "snapshots": [snapshot(50, "fresh")]})))
    assert isinstance(event, Reconnected)
    assert event.outcome.kind is ReconnectResultType.SNAPSHOT
    assert title(client) == "fresh"
    assert client.subscriptions == {SESSION}
    assert client.reconciler.last_seen_server_seq == 50


def test_a_failed_reconnect_leaves_the_client_disconnected() -> None:
    client = open_client()
    client.connection_lost()
    request = sent(client.reconnect())
    event = only(client.receive_data(error(request["id"], -32602, "who are you")))
    assert isinstance(event, RequestFailed) and event.method == "reconnect"
    assert state(client) is ClientState.DISCONNECTED
    # start afresh on the same transport
    request = sent(client.initialize())
    event = only(client.receive_data(result(request["id"], {
        "protocolVersion": "0.7.0", "serverSeq": 70, "snapshots": []})))
    assert isinstance(event, Initialized)
    assert client.reconciler.channels == ()


def test_after_a_violation_the_client_can_reconnect() -> None:
    client = open_client()
    client.receive_data(b"garbage")
    assert state(client) is ClientState.CLOSED
    assert client.connection_lost() == []
    assert state(client) is ClientState.DISCONNECTED
    request = sent(client.reconnect())
    event = only(client.receive_data(result(request["id"], {
        "type": "replay", "actions": [], "missing": [SESSION]})))
    assert isinstance(event, Reconnected) and event.outcome.removed == (SESSION,)
    assert client.subscriptions == frozenset()


def test_request_ids_are_never_reused() -> None:
    client = open_client()
    client.ping()  # id 2, lost with the transport
    client.connection_lost()
    request = sent(client.reconnect())
    assert request["id"] == 3
    violation, failed = client.receive_data(result(2, None))  # a late answer on the old line
    assert isinstance(violation, ProtocolViolation) and violation.fatal
    assert isinstance(failed, RequestFailed) and failed.method == "reconnect"


def test_ping_is_allowed_before_initialize() -> None:
    client = new_client()
    assert sent(client.ping())["id"] == 1
    event = only(client.receive_data(result(1, None)))
    assert isinstance(event, ResponseReceived) and event.method == "ping"


def test_messages_are_valid_wire_messages() -> None:
    client = open_client()
    for data in (client.dispatch(SESSION, SessionTitleChangedAction(title="x")),
                 client.request("listSessions", ListSessionsParams())[1],
                 client.unsubscribe(SESSION)):
        wire.parse_message(data)  # decodes as what a host receives


def test_a_reused_server_request_id_is_fatal() -> None:
    client = open_client()
    data = line({"id": 7, "method": "resourceRead", "params": {
        "channel": "ahp-root://", "uri": "virtual://c1/a.txt"}})
    event = only(client.receive_data(data))
    assert isinstance(event, ServerRequestReceived)
    violation = only(client.receive_data(data))
    assert isinstance(violation, ProtocolViolation) and violation.fatal
    with pytest.raises(LocalProtocolError):
        event.responder.respond(ResourceReadResult(data="x", encoding="utf-8"))


def test_the_docs_example_runs() -> None:
    docs = Path(__file__).parent.parent / "docs" / "client.md"
    blocks = re.findall(r"```python\n(.*?)```", docs.read_text(), re.S)
    # the first block is the client's; tests/test_network.py runs the network's
    exec(compile(blocks[0], "docs/client.md", "exec"), {})


def test_state_is_the_optimistic_state() -> None:
    client = open_client()
    client.dispatch(SESSION, SessionTitleChangedAction(title="mine"))
    assert client.state(SESSION) is client.optimistic(SESSION)
    assert client.state(SESSION) != client.confirmed(SESSION)


@pytest.mark.parametrize("snapshots", [
    [snapshot(10), snapshot(10)],                                   # two of one channel
    [{**snapshot(10), "resource": "ahp-session:/other"}],          # not asked for
])
def test_bad_initialize_snapshots_are_fatal(snapshots: list[dict[str, Any]]) -> None:
    client = new_client()
    client.initialize(initial_subscriptions=[SESSION])
    events = client.receive_data(result(1, {
        "protocolVersion": "0.7.0", "serverSeq": 10, "snapshots": snapshots}))
    assert isinstance(events[0], ProtocolViolation) and events[0].fatal
    assert isinstance(events[1], RequestFailed) and events[1].method == "initialize"
    assert client.connection_lost() == []
    assert state(client) is ClientState.IDLE  # never initialized


def test_an_action_before_initialize_is_fatal() -> None:
    client = new_client()
    violation = only(client.receive_data(envelope(1, "x")))
    assert isinstance(violation, ProtocolViolation) and violation.fatal
