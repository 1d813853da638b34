"""The host core driven with raw JSON-RPC lines, as a transport would feed it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.client import ActionReceived, ClientConnection
from agenthost_protocol.client import Reconnected as ClientReconnected
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.host import (
    ClientActionApplied,
    ConnectionClosed,
    ConnectionState,
    ErrorReceived,
    Host,
    HostConnection,
    Initialized,
    Reconnected,
    ReplayBuffer,
    RequestReceived,
    ResponseReceived,
)
from agenthost_protocol.host import core as host_core
from agenthost_protocol.reconciler import ReceiveKind
from agenthost_protocol.testing.network import Network

NOW = 1_767_225_600_000
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/c1"
ROOT = "ahp-root://"

ROOT_STATE = t.RootState(
    agents=(
        t.AgentInfo(
            provider="demo",
            display_name="Demo",
            description="a demo agent",
            models=(),
            capabilities=t.AgentCapabilities(
                multiple_working_directories=t.MultipleWorkingDirectoriesCapability(
                    immutable_primary=True
                )
            ),
        ),
        t.AgentInfo(provider="plain", display_name="Plain", description="", models=()),
    )
)


def make_host(**kwargs: Any) -> Host:
    kwargs.setdefault("clock", lambda: NOW)
    kwargs.setdefault("root", ROOT_STATE)
    kwargs.setdefault("server_info", t.Implementation(name="test-host", version="1"))
    return Host(**kwargs)


def with_session(host: Host, provider: str = "demo") -> None:
    host.create_session(
        SESSION, provider=provider, working_directories=("file:///a", "file:///b")
    )
    host.ready_session(SESSION, default_chat=CHAT)


def send(conn: HostConnection, obj: Any) -> list[Any]:
    """Feed one message, return what the connection must send (decoded)."""
    conn.receive_data(json.dumps(obj))
    return [json.loads(x) for x in conn.data_to_send()]


def request(id_: Any, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def note(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def initialize(
    host: Host, client_id: str = "c1", versions: tuple[str, ...] = ("0.7.0",),
    subs: tuple[str, ...] = (),
) -> HostConnection:
    conn = host.connect()
    params = {"protocolVersions": list(versions), "clientId": client_id,
              "initialSubscriptions": list(subs)}
    [answer] = send(conn, request(1, "initialize", params))
    assert "result" in answer, answer
    return conn


def dispatch(conn: HostConnection, channel: str, seq: int, action: dict[str, Any]) -> list[Any]:
    return send(conn, note("dispatchAction",
                           {"channel": channel, "clientSeq": seq, "action": action}))


def drain(conn: HostConnection) -> list[Any]:
    return [json.loads(x) for x in conn.data_to_send()]


def user(text: str = "hi", kind: str = "user") -> dict[str, Any]:
    return {"text": text, "origin": {"kind": kind}}


# ── handshake ───────────────────────────────────────────────────────────────


def test_initialize_answers_version_seq_server_info_and_snapshots() -> None:
    host = make_host()
    with_session(host)
    conn = host.connect()
    [answer] = send(conn, request(7, "initialize", {
        "protocolVersions": ["0.9.0", "0.6.0", "0.7.0"], "clientId": "c1",
        "initialSubscriptions": [ROOT, SESSION, "ahp-session:/nope"]}))
    result = answer["result"]
    assert answer["id"] == 7
    assert result["protocolVersion"] == "0.6.0"  # the client's order wins
    assert result["serverSeq"] == host.server_seq == 3
    assert result["serverInfo"] == {"name": "test-host", "version": "1"}
    assert [s["resource"] for s in result["snapshots"]] == [ROOT, SESSION]
    assert all(s["fromSeq"] == 3 for s in result["snapshots"])
    assert conn.state is ConnectionState.OPEN and conn.protocol_version == "0.6.0"
    event = host.next_event()
    assert isinstance(event, Initialized) and event.client_id == "c1"
    assert conn.subscriptions == (ROOT, SESSION)


def test_failed_negotiation_answers_32005_and_closes_for_good() -> None:
    host = make_host()
    conn = host.connect()
    [answer] = send(conn, request(1, "initialize",
                                  {"protocolVersions": ["9.9.9"], "clientId": "c1"}))
    assert answer["id"] == 1
    assert answer["error"]["code"] == -32005
    assert answer["error"]["data"] == {"supportedVersions": ["0.7.0", "0.6.0", "0.5.2", "0.5.1"]}
    assert conn.closed
    event = host.next_event()
    assert isinstance(event, ConnectionClosed) and event.connection is conn
    # sticky: nothing is answered any more, not even ping or a fresh initialize
    assert send(conn, request(2, "ping", {})) == []
    assert send(conn, request(3, "initialize",
                              {"protocolVersions": ["0.7.0"], "clientId": "c1"})) == []
    assert conn not in host.connections
    assert host.next_event() is None


def test_ping_before_initialize_and_result_null_on_the_wire() -> None:
    host = make_host()
    conn = host.connect()
    conn.receive_data(b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{}}')
    assert conn.data_to_send() == [b'{"jsonrpc":"2.0","id":5,"result":null}']
    assert conn.state is ConnectionState.AWAITING_INITIALIZE


def test_requests_before_initialize_are_refused_notifications_dropped() -> None:
    host = make_host()
    with_session(host)
    conn = host.connect()
    [answer] = send(conn, request("x", "subscribe", {"channel": SESSION}))
    assert answer["id"] == "x" and answer["error"]["code"] == -32600
    assert dispatch(conn, SESSION, 1, {"type": "session/titleChanged", "title": "t"}) == []
    assert host.server_seq == 3
    [answer] = send(conn, request(2, "listSessions", {}))
    assert answer["error"]["code"] == -32600
    assert host.next_event() is None


def test_second_initialize_is_refused() -> None:
    host = make_host()
    conn = initialize(host)
    [answer] = send(conn, request(2, "initialize",
                                  {"protocolVersions": ["0.7.0"], "clientId": "c1"}))
    assert answer["error"]["code"] == -32600
    assert conn.state is ConnectionState.OPEN


# ── subscriptions and fan-out ────────────────────────────────────────────────


def test_subscribe_snapshot_stateless_unknown_and_unsubscribe() -> None:
    host = make_host()
    with_session(host)
    host.add_channel("ahp-otlp:/logs")
    conn = initialize(host)
    [answer] = send(conn, request(2, "subscribe", {"channel": CHAT}))
    snapshot = answer["result"]["snapshot"]
    assert snapshot["resource"] == CHAT and snapshot["fromSeq"] == host.server_seq
    [answer] = send(conn, request(3, "subscribe", {"channel": "ahp-otlp:/logs"}))
    assert answer["result"] == {}
    [answer] = send(conn, request(4, "subscribe", {"channel": "ahp-chat:/nope"}))
    assert answer["error"]["code"] == -32008
    host.dispatch(CHAT, t.ChatActivityChangedAction(activity="one"))
    [env] = drain(conn)
    assert env["params"]["action"]["activity"] == "one"
    assert send(conn, note("unsubscribe", {"channel": CHAT})) == []
    host.dispatch(CHAT, t.ChatActivityChangedAction(activity="two"))
    assert drain(conn) == []
    assert conn.subscriptions == ("ahp-otlp:/logs",)


def test_actions_go_only_to_subscribers_with_origin() -> None:
    host = make_host()
    with_session(host)
    a = initialize(host, "a", subs=(SESSION,))
    b = initialize(host, "b", subs=(SESSION,))
    c = initialize(host, "c", subs=(ROOT,))
    [echo] = dispatch(a, SESSION, 1, {"type": "session/titleChanged", "title": "T"})
    assert echo["method"] == "action"
    assert echo["params"]["origin"] == {"clientId": "a", "clientSeq": 1}
    assert echo["params"]["serverSeq"] == 4
    assert drain(b) == [echo]
    assert drain(c) == []
    state = host.state(SESSION)
    assert isinstance(state, t.SessionState) and state.title == "T"


def test_server_seq_is_global_and_monotonic_across_channels() -> None:
    host = make_host()
    with_session(host)
    conn = initialize(host, subs=(SESSION, CHAT))
    seqs = []
    for i in range(6):
        if i % 2:
            env = host.dispatch(CHAT, t.ChatActivityChangedAction(activity=str(i)))
        else:
            env = host.dispatch(SESSION, t.SessionTitleChangedAction(title=str(i)))
        seqs.append(env.server_seq)
    assert seqs == list(range(4, 10))
    assert [m["params"]["serverSeq"] for m in drain(conn)] == seqs


def test_a_051_connection_never_receives_working_directory_actions() -> None:
    host = make_host()
    with_session(host)
    old = initialize(host, "old", versions=("0.5.1",), subs=(CHAT,))
    new = initialize(host, "new", subs=(CHAT,))
    host.dispatch(CHAT, t.ChatWorkingDirectorySetAction(directory="file:///a"))
    host.dispatch(CHAT, t.ChatActivityChangedAction(activity="x"))
    assert [m["params"]["action"]["type"] for m in drain(new)] == [
        "chat/workingDirectorySet", "chat/activityChanged"]
    assert [m["params"]["action"]["type"] for m in drain(old)] == ["chat/activityChanged"]
    # nor may it dispatch one: rejected (a seq consumed), but the rejection
    # carries an action that version does not know, so it is not sent either
    before = host.server_seq
    assert dispatch(old, CHAT, 1, {"type": "chat/workingDirectorySet",
                                   "directory": "file:///b"}) == []
    assert host.server_seq == before + 1
    entry = host.replay.get(host.server_seq)
    assert entry is not None and entry.only_to == "old"
    assert entry.envelope.rejection_reason == "unknown to protocol version 0.5.1"


def test_notifications_fan_out_to_channel_subscribers_filtered_by_version() -> None:
    host = make_host()
    root = initialize(host, "r", subs=(ROOT,))
    old = initialize(host, "o", versions=("0.5.1",), subs=(ROOT,))
    other = initialize(host, "x")
    host.notify("root/progress", t.ProgressParams(channel=ROOT, progress_token="p", progress=1))
    assert [m["method"] for m in drain(root)] == ["root/progress"]
    assert [m["method"] for m in drain(old)] == ["root/progress"]  # 0.5.0 and later
    assert drain(other) == []
    with pytest.raises(LocalProtocolError):
        host.notify("action", t.ProgressParams(channel=ROOT, progress_token="p", progress=1))


def test_an_envelope_is_encoded_once_whatever_the_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = make_host()
    with_session(host)
    conns = [initialize(host, f"c{i}", versions=(v,), subs=(SESSION,))
             for i, v in enumerate(["0.7.0", "0.6.0", "0.5.1", "0.7.0", "0.6.0"] * 4)]
    calls = []
    real = host_core.encode_envelope

    def counting(envelope: t.ActionEnvelope) -> bytes:
        calls.append(envelope.server_seq)
        return real(envelope)

    monkeypatch.setattr(host_core, "encode_envelope", counting)
    env = host.dispatch(SESSION, t.SessionTitleChangedAction(title="fan"))
    assert calls == [env.server_seq]
    outputs = {tuple(c.data_to_send()) for c in conns}
    assert len(outputs) == 1  # the very same bytes for every connection


# ── validation (inventory §8) ────────────────────────────────────────────────


def test_rejection_consumes_a_seq_and_goes_only_to_the_dispatcher() -> None:
    host = make_host()
    with_session(host)
    a = initialize(host, "a", subs=(CHAT,))
    b = initialize(host, "b", subs=(CHAT,))
    [rej] = dispatch(a, CHAT, 9, {"type": "chat/turnCancelled", "turnId": "t", "duration": 1})
    params = rej["params"]
    assert params["rejectionReason"] == "no such active turn"
    assert params["origin"] == {"clientId": "a", "clientSeq": 9}
    assert params["serverSeq"] == host.server_seq == 4
    assert drain(b) == []
    # server-only actions are rejected too
    [rej] = dispatch(a, CHAT, 10, {"type": "chat/activityChanged", "activity": "x"})
    assert rej["params"]["rejectionReason"] == "not client-dispatchable"


def test_a_dispatcher_not_subscribed_hears_nothing_of_its_rejection() -> None:
    host = make_host()
    with_session(host)
    conn = initialize(host)
    before = host.server_seq
    assert dispatch(conn, CHAT, 1, {"type": "chat/turnCancelled", "turnId": "t",
                                    "duration": 1}) == []
    assert host.server_seq == before + 1


def test_action_for_a_missing_channel_is_ignored() -> None:
    host = make_host()
    conn = initialize(host)
    assert dispatch(conn, "ahp-chat:/gone", 1,
                    {"type": "chat/draftChanged", "draft": user()}) == []
    assert host.server_seq == 0


def _start_turn(conn: HostConnection, host: Host, seq: int = 1) -> None:
    [echo] = dispatch(conn, CHAT, seq, {"type": "chat/turnStarted", "turnId": "t1",
                                        "startedAt": "2026-01-01T00:00:00.000Z",
                                        "message": user()})
    assert "rejectionReason" not in echo["params"], echo


def test_chat_rules() -> None:
    host = make_host()
    with_session(host)
    conn = initialize(host, "c1", subs=(CHAT,))

    def reason(action: dict[str, Any]) -> str | None:
        [out] = dispatch(conn, CHAT, 100, action)
        found: str | None = out["params"].get("rejectionReason")
        return found

    assert reason({"type": "chat/turnStarted", "turnId": "t0", "startedAt": "x",
                   "message": user(kind="agent")}) == "clients send user messages only"
    assert reason({"type": "chat/draftChanged", "draft": user(kind="tool")}) is not None
    assert reason({"type": "chat/pendingMessageSet", "kind": "steering", "id": "m",
                   "message": user(kind="systemNotification")}) is not None
    assert reason({"type": "chat/pendingMessageRemoved", "kind": "queued", "id": "m"}) == (
        "no such pending message")
    _start_turn(conn, host)
    host.dispatch(CHAT, wire.parse_action({
        "type": "chat/toolCallStart", "turnId": "t1", "toolCallId": "call",
        "toolName": "run", "displayName": "Run",
        "contributor": {"kind": "client", "clientId": "owner"}}))
    drain(conn)
    assert reason({"type": "chat/toolCallConfirmed", "turnId": "t1", "toolCallId": "call",
                   "approved": True, "confirmed": "user-action"}) == (
        "no such tool call pending confirmation")
    assert reason({"type": "chat/toolCallContentChanged", "turnId": "t1",
                   "toolCallId": "call", "content": []}) is not None
    assert reason({"type": "chat/toolCallComplete", "turnId": "t1", "toolCallId": "call",
                   "result": {"success": True, "pastTenseMessage": "done"}}) == (
        "only the contributing client completes this tool call")
    assert reason({"type": "chat/inputCompleted", "turnId": "t1", "requestId": "r",
                   "response": "accept"}) == "no such open input request"
    # working directories: a subset of the session's, with the capability
    assert reason({"type": "chat/workingDirectorySet", "directory": "file:///c"}) == (
        "not a working directory of the session")
    assert reason({"type": "chat/workingDirectorySet", "directory": "file:///b"}) is None


def test_tool_call_ready_keeps_the_executor_and_owner_may_complete() -> None:
    host = make_host()
    with_session(host)
    owner = initialize(host, "owner", subs=(CHAT,))
    _start_turn(owner, host)
    host.dispatch(CHAT, wire.parse_action({
        "type": "chat/toolCallStart", "turnId": "t1", "toolCallId": "call",
        "toolName": "run", "displayName": "Run",
        "contributor": {"kind": "client", "clientId": "owner"}}))
    host.dispatch(CHAT, wire.parse_action({
        "type": "chat/toolCallReady", "turnId": "t1", "toolCallId": "call",
        "invocationMessage": "run", "confirmed": "not-needed"}))
    drain(owner)
    from agenthost_protocol.host.validation import ValidationContext, check_chat

    state = host.state(CHAT)
    assert isinstance(state, t.ChatState)
    ctx = ValidationContext(client_id="owner", version="0.7.0")
    ready = wire.parse_action({
        "type": "chat/toolCallReady", "turnId": "t1", "toolCallId": "call",
        "invocationMessage": "again", "contributor": {"kind": "client", "clientId": "other"}})
    assert check_chat(state, ready, ctx) == "toolCallReady must not change who executes the call"
    [echo] = dispatch(owner, CHAT, 2, {
        "type": "chat/toolCallComplete", "turnId": "t1", "toolCallId": "call",
        "result": {"success": True, "pastTenseMessage": "ran"}})
    assert "rejectionReason" not in echo["params"]


def test_session_rules() -> None:
    host = make_host()
    with_session(host)
    conn = initialize(host, subs=(SESSION,))

    def reason(action: dict[str, Any]) -> str | None:
        [out] = dispatch(conn, SESSION, 1, action)
        found: str | None = out["params"].get("rejectionReason")
        return found

    # server-only in 0.7.0, so a client's is refused before the catalogue rule
    assert reason({"type": "session/defaultChatChanged", "defaultChat": CHAT}) == (
        "not client-dispatchable")
    from agenthost_protocol.host.validation import ValidationContext, check_session

    state = host.state(SESSION)
    assert isinstance(state, t.SessionState)
    ctx = ValidationContext(client_id="c1", version="0.7.0")
    unknown = t.SessionDefaultChatChangedAction(default_chat="ahp-chat:/x")
    assert check_session(state, unknown, ctx) == "not a chat of this session"
    known = t.SessionDefaultChatChangedAction(default_chat=CHAT)
    assert check_session(state, known, ctx) is None
    assert reason({"type": "session/workingDirectoryRemoved", "directory": "file:///a"}) == (
        "the primary working directory cannot be removed")
    assert reason({"type": "session/workingDirectoryRemoved", "directory": "file:///b"}) is None
    assert reason({"type": "session/configChanged", "config": {"x": 1}}) is not None


def test_config_changes_only_for_session_mutable_properties() -> None:
    from agenthost_protocol.host.validation import ValidationContext, check_session

    schema = t.SessionConfigSchema(properties={
        "mode": t.SessionConfigPropertySchema(type="string", title="Mode", session_mutable=True),
        "fixed": t.SessionConfigPropertySchema(type="string", title="Fixed"),
    })
    state = t.SessionState(
        provider="demo", title="", status=t.SessionStatus.IDLE, lifecycle="ready",
        active_clients=(), chats=(),
        config=t.SessionConfigState(schema=schema, values={"mode": "a", "fixed": "b"}),
    )
    ctx = ValidationContext(client_id="c", version="0.7.0")
    ok = t.SessionConfigChangedAction(config={"mode": "b"})
    bad = t.SessionConfigChangedAction(config={"fixed": "c"})
    replace = t.SessionConfigChangedAction(config={"mode": "b"}, replace=True)
    assert check_session(state, ok, ctx) is None
    assert check_session(state, bad, ctx) is not None
    assert check_session(state, replace, ctx) is not None  # it would drop "fixed"


def test_working_directory_actions_need_the_capability() -> None:
    host = make_host()
    with_session(host, provider="plain")
    conn = initialize(host, subs=(SESSION, CHAT))
    [out] = dispatch(conn, SESSION, 1, {"type": "session/workingDirectorySet",
                                        "directory": "file:///z"})
    assert out["params"]["rejectionReason"].startswith("the agent does not support")
    [out] = dispatch(conn, CHAT, 2, {"type": "chat/workingDirectorySet",
                                     "directory": "file:///a"})
    assert out["params"]["rejectionReason"].startswith("the agent does not support")


def test_terminal_claimed_only_from_the_claim_holder() -> None:
    host = make_host()
    term = "ahp-terminal:/t1"
    host.add_channel(term, t.TerminalState(
        title="sh", content=(), claim=t.TerminalClientClaim(client_id="holder")))
    holder = initialize(host, "holder", subs=(term,))
    other = initialize(host, "other", subs=(term,))
    claim = {"type": "terminal/claimed", "claim": {"kind": "client", "clientId": "other"}}
    [out] = dispatch(other, term, 1, claim)
    assert out["params"]["rejectionReason"] == "only the claim holder transfers the terminal"
    [out] = dispatch(holder, term, 1, claim)
    assert "rejectionReason" not in out["params"]
    assert drain(other) == [out]
    [out] = dispatch(other, term, 2, {"type": "terminal/claimed",
                                      "claim": {"kind": "client", "clientId": "holder"}})
    assert "rejectionReason" not in out["params"]


def test_chat_source_checks() -> None:
    from agenthost_protocol.host.validation import check_chat_source

    host = make_host()
    with_session(host)
    conn = initialize(host, subs=(CHAT,))
    _start_turn(conn, host)
    session = host.state(SESSION)
    chat = host.state(CHAT)
    assert isinstance(session, t.SessionState) and isinstance(chat, t.ChatState)
    chats = {CHAT: chat}
    no_caps = None
    caps = t.AgentCapabilities(multiple_chats=t.MultipleChatsCapability(fork=True, side_chat=True))
    fork = t.ForkChatSource(chat=CHAT, turn_id="t1")
    side = t.SideChatSource(chat=CHAT, turn_id="t1",
                            selection=t.SideChatSelection(text=""))
    assert check_chat_source(session, "ahp-chat:/n", fork, chats, no_caps) is not None
    assert check_chat_source(session, "ahp-chat:/n", fork, chats, caps) == (
        "a fork must name a completed turn")  # t1 is still active
    assert check_chat_source(session, CHAT, fork, chats, caps) == (
        "a chat cannot be its own source")
    assert check_chat_source(session, "ahp-chat:/n", side, chats, caps) == (
        "a side-chat selection must not be empty")
    assert check_chat_source(session, "ahp-chat:/n", None, chats, caps,
                             working_directories=("file:///q",)) is not None
    assert check_chat_source(session, "ahp-chat:/n", None, chats, caps,
                             working_directories=("file:///a",)) is None


# ── replay and reconnect ─────────────────────────────────────────────────────


def test_reconnect_replays_missed_envelopes_and_own_rejections() -> None:
    host = make_host()
    with_session(host)
    a = initialize(host, "a", subs=(SESSION, CHAT))
    b = initialize(host, "b", subs=(SESSION,))
    seen = host.server_seq
    a.connection_lost()
    dispatch(b, SESSION, 1, {"type": "session/titleChanged", "title": "while away"})
    dispatch(b, CHAT, 2, {"type": "chat/turnCancelled", "turnId": "x", "duration": 1})
    host.dispatch(CHAT, t.ChatActivityChangedAction(activity="c"))
    host.remove_channel(CHAT)
    again = host.connect()
    [answer] = send(again, request(1, "reconnect", {
        "clientId": "a", "lastSeenServerSeq": seen, "subscriptions": [SESSION, CHAT]}))
    result = answer["result"]
    assert result["type"] == "replay"
    assert [e["serverSeq"] for e in result["actions"]] == [seen + 1]  # not b's rejection
    assert result["missing"] == [CHAT]
    assert again.protocol_version == "0.7.0" and again.subscriptions == (SESSION,)
    events = list(host.events())
    assert isinstance(events[-1], Reconnected) and events[-1].replayed
    # b's own rejection is replayed to b
    b.connection_lost()
    b2 = host.connect()
    [answer] = send(b2, request(1, "reconnect", {
        "clientId": "b", "lastSeenServerSeq": seen, "subscriptions": [SESSION]}))
    assert [e.get("rejectionReason") for e in answer["result"]["actions"]] == [None]
    b2.connection_lost()
    b3 = host.connect()
    send(b3, request(1, "reconnect", {"clientId": "b", "lastSeenServerSeq": seen,
                                      "subscriptions": [SESSION, "ahp-chat:/c1"]}))


def test_reconnect_replays_rejections_addressed_to_that_client() -> None:
    host = make_host()
    with_session(host)
    a = initialize(host, "a", subs=(CHAT,))
    seen = host.server_seq
    dispatch(a, CHAT, 1, {"type": "chat/turnCancelled", "turnId": "x", "duration": 1})
    a.connection_lost()
    again = host.connect()
    [answer] = send(again, request(1, "reconnect", {
        "clientId": "a", "lastSeenServerSeq": seen, "subscriptions": [CHAT]}))
    [env] = answer["result"]["actions"]
    assert env["rejectionReason"] == "no such active turn"


def test_reconnect_snapshot_when_the_gap_is_older_than_the_buffer() -> None:
    host = make_host(replay_max_envelopes=2)
    with_session(host)
    host.add_channel("ahp-otlp:/logs")
    a = initialize(host, "a", subs=(SESSION, "ahp-otlp:/logs"))
    seen = host.server_seq
    a.connection_lost()
    for i in range(3):
        host.dispatch(SESSION, t.SessionTitleChangedAction(title=str(i)))
    again = host.connect()
    [answer] = send(again, request(1, "reconnect", {
        "clientId": "a", "lastSeenServerSeq": seen,
        "subscriptions": [SESSION, "ahp-otlp:/logs"]}))
    result = answer["result"]
    assert result["type"] == "snapshot"
    [snap] = result["snapshots"]
    assert snap["resource"] == SESSION and snap["state"]["title"] == "2"
    assert snap["fromSeq"] == host.server_seq
    assert again.subscriptions == (SESSION,)
    # a client claiming a future seq (a restarted host) gets snapshots too
    again.connection_lost()
    third = host.connect()
    [answer] = send(third, request(1, "reconnect", {
        "clientId": "a", "lastSeenServerSeq": 10**6, "subscriptions": [SESSION]}))
    assert answer["result"]["type"] == "snapshot"


def test_reconnect_filters_the_replay_by_the_remembered_version() -> None:
    host = make_host()
    with_session(host)
    a = initialize(host, "a", versions=("0.5.1",), subs=(CHAT,))
    seen = host.server_seq
    a.connection_lost()
    host.dispatch(CHAT, t.ChatWorkingDirectorySetAction(directory="file:///a"))
    host.dispatch(CHAT, t.ChatActivityChangedAction(activity="t"))
    again = host.connect()
    [answer] = send(again, request(1, "reconnect", {
        "clientId": "a", "lastSeenServerSeq": seen, "subscriptions": [CHAT]}))
    assert [e["action"]["type"] for e in answer["result"]["actions"]] == ["chat/activityChanged"]
    assert again.protocol_version == "0.5.1"


def test_reconnect_of_an_unknown_or_forgotten_client() -> None:
    host = make_host(remembered_clients=2)
    for name in ("a", "b", "c"):
        initialize(host, name).connection_lost()
    assert host.remembered_version("a") is None
    assert host.remembered_version("c") == "0.7.0"
    conn = host.connect()
    [answer] = send(conn, request(1, "reconnect", {
        "clientId": "a", "lastSeenServerSeq": 0, "subscriptions": []}))
    assert answer["error"]["code"] == -32602
    assert conn.state is ConnectionState.AWAITING_INITIALIZE
    [answer] = send(conn, request(2, "initialize", {"protocolVersions": ["0.7.0"],
                                                    "clientId": "a"}))
    assert "result" in answer


def test_replay_buffer_bounds_and_lookup() -> None:
    buf = ReplayBuffer(max_envelopes=3, max_bytes=100)
    for seq in range(1, 6):
        env = t.ActionEnvelope(channel=SESSION, action=t.SessionReadyAction(), server_seq=seq)
        buf.append(env, size=30)
    assert len(buf) == 3 and buf.size_bytes == 90 and buf.floor == 2
    assert buf.get(2) is None
    entry = buf.get(4)
    assert entry is not None and entry.envelope.server_seq == 4
    assert [e.envelope.server_seq for e in buf.after(3)] == [4, 5]
    assert buf.can_replay_after(2) and not buf.can_replay_after(1)
    big = t.ActionEnvelope(channel=SESSION, action=t.SessionReadyAction(), server_seq=6)
    buf.append(big, size=80)  # the byte bound evicts all but it
    assert len(buf) == 1 and buf.size_bytes == 80 and buf.floor == 5
    huge = t.ActionEnvelope(channel=SESSION, action=t.SessionReadyAction(), server_seq=7)
    buf.append(huge, size=101)  # larger than the bound: not kept at all
    assert len(buf) == 0 and buf.floor == 7 and buf.can_replay_after(7)
    with pytest.raises(LocalProtocolError):
        buf.append(big, size=1)  # not the next seq


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=300), max_size=60),
       st.integers(min_value=0, max_value=10), st.integers(min_value=0, max_value=1000))
def test_replay_buffer_stays_bounded(sizes: list[int], count: int, limit: int) -> None:
    buf = ReplayBuffer(max_envelopes=count, max_bytes=limit)
    for seq, size in enumerate(sizes, start=1):
        env = t.ActionEnvelope(channel=SESSION, action=t.SessionReadyAction(), server_seq=seq)
        buf.append(env, size=size)
        assert len(buf) <= count and buf.size_bytes <= limit
        held = [e.envelope.server_seq for e in buf.after(buf.floor)]
        assert held == list(range(buf.floor + 1, seq + 1))


def test_host_replay_memory_is_bounded_by_bytes() -> None:
    host = make_host(replay_max_envelopes=10_000, replay_max_bytes=2_000)
    with_session(host)
    for i in range(200):
        host.dispatch(SESSION, t.SessionTitleChangedAction(title="x" * (i % 50)))
    assert host.replay.size_bytes <= 2_000
    assert host.replay.floor > 0


# ── malformed input ──────────────────────────────────────────────────────────


def test_parse_error_and_invalid_request_answer_with_id_null() -> None:
    host = make_host()
    conn = initialize(host)
    conn.receive_data(b"{not json")
    [answer] = drain(conn)
    assert answer == {"jsonrpc": "2.0", "id": None,
                      "error": answer["error"]} and answer["error"]["code"] == -32700
    conn.receive_data(b"[1, 2]")
    [answer] = drain(conn)
    assert answer["id"] is None and answer["error"]["code"] == -32600
    conn.receive_data(b'{"jsonrpc":"2.0","id":3,"method":"nope","params":{}}')
    [answer] = drain(conn)
    assert answer["id"] == 3 and answer["error"]["code"] == -32601
    conn.receive_data(b'{"jsonrpc":"2.0","id":4,"method":"subscribe","params":{}}')
    [answer] = drain(conn)
    assert answer["id"] == 4 and answer["error"]["code"] == -32602


def test_notifications_are_never_answered() -> None:
    host = make_host()
    conn = initialize(host)
    for raw in (
        b'{"jsonrpc":"2.0","method":"nope","params":{}}',
        b'{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":1}}',
        b'{"jsonrpc":"2.0","method":"unsubscribe"}',
        b'{"jsonrpc":"2.0","method":"action","params":{}}',
        b'{"jsonrpc":"2.0","method":"root/sessionAdded","params":{"channel":"x"}}',
        b'{"jsonrpc":"2.0","method":"ping","params":{}}',
        b'{"jsonrpc":"2.0","id":99,"result":{}}',
        b'{"jsonrpc":"2.0","id":98,"error":{"code":1,"message":"m"}}',
    ):
        conn.receive_data(raw)
        assert conn.data_to_send() == [], raw


def test_ids_are_echoed_exactly() -> None:
    host = make_host()
    conn = host.connect()
    big = 2**63 + 12345
    conn.receive_data(f'{{"jsonrpc":"2.0","id":{big},"method":"ping","params":{{}}}}')
    assert conn.data_to_send() == [f'{{"jsonrpc":"2.0","id":{big},"result":null}}'.encode()]
    conn.receive_data('{"jsonrpc":"2.0","id":"é\\u00e9 x","method":"ping","params":{}}')
    [raw] = conn.data_to_send()
    assert json.loads(raw)["id"] == "éé x"


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.text(max_size=20)))
def test_any_id_is_echoed(id_: int | str) -> None:
    host = make_host()
    conn = host.connect()
    [answer] = send(conn, request(id_, "ping", {}))
    assert answer == {"jsonrpc": "2.0", "id": id_, "result": None}
    [answer] = send(conn, request(id_, "subscribe", {"channel": ROOT}))
    assert answer["id"] == id_ and answer["error"]["code"] == -32600


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)
_methods = st.sampled_from(["initialize", "ping", "subscribe", "dispatchAction",
                            "unsubscribe", "listSessions", "reconnect", "action", "nope"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    _json_values,
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "method": _methods,
                           "params": _json_values}),
    st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": st.integers() | st.text(max_size=4),
                           "method": _methods, "params": _json_values}),
), max_size=8))
def test_arbitrary_input_never_raises_and_answers_requests_at_most_once(
    messages: list[Any],
) -> None:
    host = make_host()
    with_session(host)
    conn = host.connect()
    initialize(host, "other", subs=(ROOT, SESSION, CHAT))
    for msg in messages:
        conn.receive_data(json.dumps(msg))
        out = [json.loads(x) for x in conn.data_to_send()]
        responses = [m for m in out if "method" not in m]
        if isinstance(msg, dict) and "id" in msg:
            assert len(responses) <= 1
            if responses:
                assert responses[0]["id"] == msg["id"]
        elif isinstance(msg, dict) and "method" in msg:
            assert responses == []  # notifications are never answered
        else:
            assert len(responses) == 1 and responses[0]["id"] is None
        for event in host.events():
            if isinstance(event, RequestReceived):
                event.responder.error(-32603, "not implemented")


# ── embedder requests ────────────────────────────────────────────────────────


def test_embedder_requests_get_typed_params_and_responders() -> None:
    host = make_host()
    conn = initialize(host)
    host.next_event()
    assert send(conn, request(2, "createSession",
                              {"channel": "ahp-session:/new", "provider": "demo"})) == []
    event = host.next_event()
    assert isinstance(event, RequestReceived)
    assert isinstance(event.params, t.CreateSessionParams)
    assert event.params.provider == "demo"
    event.responder.respond(None)
    assert conn.data_to_send() == [b'{"jsonrpc":"2.0","id":2,"result":null}']
    with pytest.raises(LocalProtocolError):
        event.responder.respond(None)

    send(conn, request("r", "resourceRead", {"uri": "file:///x"}))
    event = host.next_event()
    assert isinstance(event, RequestReceived)
    with pytest.raises(LocalProtocolError):
        event.responder.respond(t.ResourceWriteResult())  # the wrong result type
    event.responder.respond(t.ResourceReadResult(data="aGk=", encoding="base64"))
    [answer] = drain(conn)
    assert answer == {"jsonrpc": "2.0", "id": "r",
                      "result": {"data": "aGk=", "encoding": "base64"}}


def test_embedder_errors_carry_typed_data() -> None:
    host = make_host()
    conn = initialize(host)
    send(conn, request(3, "authenticate", {"resource": "https://r", "token": "t"}))
    send(conn, request(4, "resourceWrite", {"uri": "file:///x", "data": "", "encoding": "utf-8"}))
    send(conn, request(5, "disposeSession", {"channel": "ahp-session:/nope"}))
    events = [e for e in host.events() if isinstance(e, RequestReceived)]
    auth, write, dispose = events
    with pytest.raises(LocalProtocolError):
        auth.responder.error(-32007, "auth")  # AuthRequired must carry its data
    with pytest.raises(LocalProtocolError):
        auth.responder.error(-31999, "not an AHP code")
    auth.responder.error(-32007, "auth", data=t.AuthRequiredErrorData(
        resources=(t.ProtectedResourceMetadata(resource="https://r"),)))
    with pytest.raises(LocalProtocolError):
        write.responder.error(-32011, "conflict", data=t.PermissionDeniedErrorData())
    write.responder.error(-32009, "denied", data=t.PermissionDeniedErrorData(
        request=t.ResourceRequestParams(uri="file:///x", write=True)))
    dispose.responder.error(-32001, "no such session")
    answers = drain(conn)
    assert answers[0]["error"] == {"code": -32007, "message": "auth",
                                   "data": {"resources": [{"resource": "https://r"}]}}
    assert answers[1]["error"]["data"] == {
        "request": {"channel": ROOT, "uri": "file:///x", "write": True}}
    assert answers[2] == {"jsonrpc": "2.0", "id": 5,
                          "error": {"code": -32001, "message": "no such session"}}


def test_answers_to_a_closed_connection_are_dropped() -> None:
    host = make_host()
    conn = initialize(host)
    send(conn, request(2, "completions", {"channel": CHAT, "kind": "userMessage",
                                          "text": "", "offset": 0}))
    event = next(e for e in host.events() if isinstance(e, RequestReceived))
    conn.close()
    event.responder.respond(t.CompletionsResult(items=()))
    assert conn.data_to_send() == []
    assert isinstance(host.next_event(), ConnectionClosed)


# ── server-to-client requests ────────────────────────────────────────────────


def test_server_requests_and_typed_answers() -> None:
    host = make_host()
    conn = initialize(host)
    host.next_event()
    rid = conn.send_request("resourceRead", t.ResourceReadParams(uri="file:///y"))
    [sent] = drain(conn)
    assert sent == {"jsonrpc": "2.0", "id": rid, "method": "resourceRead",
                    "params": {"channel": ROOT, "uri": "file:///y"}}
    assert send(conn, {"jsonrpc": "2.0", "id": rid,
                       "result": {"data": "x", "encoding": "utf-8"}}) == []
    event = host.next_event()
    assert isinstance(event, ResponseReceived) and event.method == "resourceRead"
    assert event.result == t.ResourceReadResult(data="x", encoding="utf-8")

    rid = conn.send_request("createResourceWatch",
                            t.CreateResourceWatchParams(uri="file:///w"))
    drain(conn)
    send(conn, {"jsonrpc": "2.0", "id": rid, "error": {"code": -32008, "message": "gone"}})
    event = host.next_event()
    assert isinstance(event, ErrorReceived) and event.error.code == -32008

    rid = conn.send_request("resourceList", t.ResourceListParams(uri="file:///"))
    drain(conn)
    assert send(conn, {"jsonrpc": "2.0", "id": rid, "result": {"entries": 5}}) == []
    event = host.next_event()
    assert isinstance(event, ErrorReceived) and event.error.code == -32602
    # an answer to nothing is ignored
    assert send(conn, {"jsonrpc": "2.0", "id": rid, "result": {}}) == []
    assert host.next_event() is None
    with pytest.raises(LocalProtocolError):
        conn.send_request("listSessions", t.ResourceListParams(uri="file:///"))


# ── session helpers ──────────────────────────────────────────────────────────


def test_session_lifecycle_helpers() -> None:
    host = make_host()
    watcher = initialize(host, "w", subs=(ROOT,))
    state = host.create_session(SESSION, provider="demo")
    assert state.lifecycle == t.SessionLifecycle.CREATING
    conn = initialize(host, "c", subs=(SESSION,))
    summary = host.ready_session(SESSION, default_chat=CHAT, chat_title="Main")
    assert summary.resource == SESSION and summary.created_at == "2026-01-01T00:00:00.000Z"
    types = [m["params"]["action"]["type"] for m in drain(conn)]
    assert types == ["session/chatAdded", "session/defaultChatChanged", "session/ready"]
    [added] = drain(watcher)
    assert added["method"] == "root/sessionAdded"
    assert added["params"]["summary"]["resource"] == SESSION
    session = host.state(SESSION)
    assert isinstance(session, t.SessionState)
    assert session.default_chat == CHAT and [c.resource for c in session.chats] == [CHAT]
    host.add_chat(SESSION, "ahp-chat:/c2", title="Second")
    host.dispose_session(SESSION)
    assert not host.has_channel(SESSION) and not host.has_channel(CHAT)
    assert not host.has_channel("ahp-chat:/c2")
    [removed] = drain(watcher)
    assert removed == {"jsonrpc": "2.0", "method": "root/sessionRemoved",
                       "params": {"channel": ROOT, "session": SESSION}}
    assert conn.subscriptions == ()


def test_list_sessions_paginates_with_opaque_cursors() -> None:
    host = make_host(list_page_size=2)
    for i in range(6):
        host.create_session(f"ahp-session:/s{i}", provider="demo")
        if i != 5:  # s5 is still creating: not listed
            host.ready_session(f"ahp-session:/s{i}", default_chat=f"ahp-chat:/c{i}")
    host.dispose_session("ahp-session:/s1")
    conn = initialize(host)
    host.next_event()
    seen = []
    cursor = None
    for _ in range(5):
        params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        send(conn, request(1, "listSessions", params))
        event = host.next_event()
        assert isinstance(event, RequestReceived)
        host.answer_list_sessions(event)
        [answer] = drain(conn)
        seen += [s["resource"] for s in answer["result"]["items"]]
        cursor = answer["result"].get("nextCursor")
        if cursor is None:
            break
    assert seen == ["ahp-session:/s0", "ahp-session:/s2", "ahp-session:/s3", "ahp-session:/s4"]
    send(conn, request(2, "listSessions", {"cursor": "bogus"}))
    event = host.next_event()
    assert isinstance(event, RequestReceived)
    host.answer_list_sessions(event)
    [answer] = drain(conn)
    assert answer["error"]["code"] == -32602


def test_fetch_turns_dispatches_turns_loaded_before_answering() -> None:
    host = make_host()
    with_session(host)
    host.dispatch(CHAT, t.ChatTurnsLoadedAction(turns=(), turns_next_cursor="older"))
    conn = initialize(host, subs=(CHAT,))
    host.next_event()
    send(conn, request(2, "fetchTurns", {"channel": CHAT, "cursor": "wrong"}))
    event = host.next_event()
    assert isinstance(event, RequestReceived)
    host.fetch_turns(event, ())
    [answer] = drain(conn)
    assert answer["error"]["code"] == -32602
    send(conn, request(3, "fetchTurns", {"channel": CHAT, "cursor": "older"}))
    event = host.next_event()
    assert isinstance(event, RequestReceived)
    host.fetch_turns(event, (), next_cursor=None)
    loaded, answer = drain(conn)
    assert loaded["params"]["action"]["type"] == "chat/turnsLoaded"
    assert answer == {"jsonrpc": "2.0", "id": 3, "result": {}}
    chat = host.state(CHAT)
    assert isinstance(chat, t.ChatState) and chat.turns_next_cursor is None


def test_channel_management_errors() -> None:
    host = make_host()
    with pytest.raises(LocalProtocolError):
        host.add_channel(ROOT, t.RootState(agents=()))
    with pytest.raises(LocalProtocolError):
        host.add_channel("ahp-chat:/x")  # a chat has state
    with pytest.raises(LocalProtocolError):
        host.add_channel("ahp-chat:/x", t.RootState(agents=()))
    with pytest.raises(LocalProtocolError):
        host.remove_channel(ROOT)
    with pytest.raises(LocalProtocolError):
        host.dispatch("ahp-chat:/x", t.ChatActivityChangedAction(activity="x"))


def test_determinism() -> None:
    def run() -> list[bytes]:
        host = make_host()
        with_session(host)
        a = initialize(host, "a", subs=(SESSION, CHAT))
        b = initialize(host, "b", versions=("0.5.1",), subs=(CHAT,))
        out: list[bytes] = []
        dispatch(a, SESSION, 1, {"type": "session/titleChanged", "title": "x"})
        host.dispatch(CHAT, t.ChatWorkingDirectorySetAction(directory="file:///a"))
        dispatch(b, CHAT, 1, {"type": "chat/turnCancelled", "turnId": "x", "duration": 1})
        for conn in (a, b):
            out += conn.data_to_send()
        return out

    assert run() == run()


def test_the_docs_example_runs() -> None:
    import re
    from pathlib import Path

    docs = Path(__file__).parent.parent / "docs" / "host.md"
    blocks = re.findall(r"```python\n(.*?)```", docs.read_text(), re.S)
    exec(compile(blocks[0], "docs/host.md", "exec"), {})


def test_create_chat_helper_checks_sources_and_forks() -> None:
    root = t.RootState(agents=(t.AgentInfo(
        provider="demo", display_name="D", description="", models=(),
        capabilities=t.AgentCapabilities(
            multiple_chats=t.MultipleChatsCapability(fork=True, side_chat=True))),))
    host = make_host(root=root)
    with_session(host)
    conn = initialize(host, subs=(SESSION, CHAT))
    _start_turn(conn, host)
    host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id="t1", duration=1))
    drain(conn)
    list(host.events())

    def create(params: dict[str, Any]) -> list[Any]:
        send(conn, request(9, "createChat", {"channel": SESSION, **params}))
        event = host.next_event()
        assert isinstance(event, RequestReceived)
        host.answer_create_chat(event)
        return drain(conn)

    [answer] = create({"chat": CHAT})
    assert answer["error"]["code"] == -32010
    [answer] = create({"chat": "ahp-chat:/f", "source": {"kind": "fork", "chat": CHAT,
                                                          "turnId": "nope"}})
    assert answer["error"] == {"code": -32602, "message": "a fork must name a completed turn"}
    added, answer = create({"chat": "ahp-chat:/f",
                            "source": {"kind": "fork", "chat": CHAT, "turnId": "t1"}})
    assert answer == {"jsonrpc": "2.0", "id": 9, "result": None}
    assert added["params"]["action"]["type"] == "session/chatAdded"
    fork = host.state("ahp-chat:/f")
    assert isinstance(fork, t.ChatState) and [turn.id for turn in fork.turns] == ["t1"]
    assert fork.origin == t.ForkChatOrigin(chat=CHAT, turn_id="t1")
    send(conn, request(10, "createChat", {"channel": "ahp-session:/x", "chat": "ahp-chat:/y"}))
    event = host.next_event()
    assert isinstance(event, RequestReceived)
    host.answer_create_chat(event)
    [answer] = drain(conn)
    assert answer["error"]["code"] == -32001


def test_input_request_rules() -> None:
    host = make_host()
    with_session(host)
    conn = initialize(host, subs=(CHAT,))
    _start_turn(conn, host)
    host.dispatch(CHAT, t.ChatInputRequestedAction(request=t.ChatInputRequest(
        id="r1", message="Which branch?", questions=(
            t.ChatInputTextQuestion(id="name", message="Name", required=True),
            t.ChatInputBooleanQuestion(id="push", message="Push?"),
        ))))
    drain(conn)

    def reason(action: t.StateAction) -> str | None:
        params = t.DispatchActionParams(channel=CHAT, client_seq=5, action=action)
        conn.receive_data(wire.dumps(t.JsonRpcNotification(method="dispatchAction",
                                                           params=params)))
        [out] = drain(conn)
        found: str | None = out["params"].get("rejectionReason")
        return found

    text = t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED,
                               value=t.ChatInputTextAnswerValue(value="main"))
    wrong = t.ChatInputAnswered(state=t.ChatInputAnswerState.SUBMITTED,
                                value=t.ChatInputBooleanAnswerValue(value=True))
    assert reason(t.ChatInputAnswerChangedAction(
        request_id="r1", question_id="nope", answer=text)) == "no question 'nope'"
    assert reason(t.ChatInputAnswerChangedAction(
        request_id="r1", question_id="name", answer=wrong)) == (
        "wrong kind of answer to 'name'")
    assert reason(t.ChatInputCompletedAction(
        request_id="r1", response=t.ChatInputResponseKind.ACCEPT)) == (
        "question 'name' needs a submitted answer")
    assert reason(t.ChatInputCompletedAction(
        request_id="r1", response=t.ChatInputResponseKind.DECLINE)) is None
    assert reason(t.ChatInputCompletedAction(
        request_id="r1", response=t.ChatInputResponseKind.ACCEPT,
        answers={"name": text})) == "no such open input request"  # declined just before


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_validation_never_raises_on_any_state_and_action(data: st.DataObject) -> None:
    from agenthost_protocol.host.validation import ValidationContext, validate
    from agenthost_protocol.testing import strategies as ahp

    kind = data.draw(st.sampled_from(["session", "chat", "terminal", "changeset"]))
    state_type = {"session": t.SessionState, "chat": t.ChatState,
                  "terminal": t.TerminalState, "changeset": t.ChangesetState}[kind]
    state = data.draw(ahp.states(state_type, max_depth=3))
    action = data.draw(ahp.actions(kind, max_depth=3))
    session = data.draw(st.none() | ahp.states(t.SessionState, max_depth=2))
    caps = data.draw(st.none() | ahp.from_type(t.AgentCapabilities))
    uri = data.draw(ahp.channel_uris(kind))
    ctx = ValidationContext(client_id="c", version=data.draw(
        st.sampled_from(["0.7.0", "0.6.0", "0.5.1"])), session=session, capabilities=caps)
    reason = validate(uri, state, action, ctx)
    assert reason is None or (isinstance(reason, str) and reason)


def test_notifications_are_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    host = make_host()
    conns = [initialize(host, f"c{i}", versions=(v,), subs=(ROOT,))
             for i, v in enumerate(["0.7.0", "0.6.0", "0.5.1"] * 3)]
    calls: list[str] = []
    real = host_core.encode_notification

    def counting(method: str, params: host_core.ProtocolNotificationParams) -> bytes:
        calls.append(method)
        return real(method, params)

    monkeypatch.setattr(host_core, "encode_notification", counting)
    host.notify("root/sessionRemoved", t.SessionRemovedParams(channel=ROOT, session=SESSION))
    assert calls == ["root/sessionRemoved"]
    assert all(len(c.data_to_send()) == 1 for c in conns)


def test_close_keeps_what_is_queued_then_nothing_more() -> None:
    host = make_host()
    with_session(host)
    conn = initialize(host, subs=(SESSION,))
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="before"))
    conn.close("bye")
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="after"))
    [env] = drain(conn)
    assert env["params"]["action"]["title"] == "before"
    assert send(conn, request(1, "ping", {})) == []
    events = list(host.events())
    assert isinstance(events[-1], ConnectionClosed) and events[-1].reason == "bye"
    with pytest.raises(LocalProtocolError):
        conn.send_request("resourceRead", t.ResourceReadParams(uri="file:///x"))
    conn.close()  # idempotent: no second event
    assert host.next_event() is None


# ── the review hook ─────────────────────────────────────────────────────────


def test_review_rewrites_rejects_and_holds_valid_client_actions() -> None:
    seen: list[host_core.ClientAction] = []

    def review(pending: host_core.ClientAction) -> host_core.ReviewVerdict:
        seen.append(pending)
        action = pending.action
        if isinstance(action, t.SessionTitleChangedAction):
            if not action.title.strip():
                return host_core.Reject("title must not be empty")
            return t.SessionTitleChangedAction(title=action.title.strip())
        if isinstance(action, t.SessionIsReadChangedAction):
            return host_core.HOLD
        return action

    host = make_host(review=review)
    with_session(host)
    a = initialize(host, "a", subs=(SESSION, CHAT))
    b = initialize(host, "b", subs=(SESSION,))
    list(host.events())
    # invalid actions never reach the hook
    [refused] = dispatch(a, CHAT, 1, {"type": "chat/turnCancelled", "turnId": "x",
                                      "duration": 1})
    assert seen == [] and refused["params"]["rejectionReason"] == "no such active turn"
    # a rewrite: everyone gets the host's version, with the client's origin
    [echo] = dispatch(a, SESSION, 2, {"type": "session/titleChanged", "title": "  Fix  "})
    assert echo["params"]["action"]["title"] == "Fix"
    assert echo["params"]["origin"] == {"clientId": "a", "clientSeq": 2}
    assert drain(b) == [echo]
    assert seen[-1].client_seq == 2 and seen[-1].origin == t.ActionOrigin(client_id="a",
                                                                         client_seq=2)
    [applied] = [e for e in host.events() if isinstance(e, ClientActionApplied)]
    assert applied.envelope.action == t.SessionTitleChangedAction(title="Fix")
    # a rejection of the embedder's: only the dispatcher hears, with what it sent
    [rejected] = dispatch(a, SESSION, 3, {"type": "session/titleChanged", "title": " "})
    assert rejected["params"]["rejectionReason"] == "title must not be empty"
    assert rejected["params"]["action"]["title"] == " " and drain(b) == []
    # held: nothing is sequenced until the embedder settles it
    seq = host.server_seq
    assert dispatch(a, SESSION, 4, {"type": "session/isReadChanged", "isRead": True}) == []
    assert dispatch(a, SESSION, 5, {"type": "session/isReadChanged", "isRead": False}) == []
    assert host.server_seq == seq and not list(host.events())
    first, second = host.held_actions
    assert (first.client_seq, second.client_seq) == (4, 5) and first.number < second.number
    envelope = host.accept_held(second)
    assert envelope is not None and envelope.origin == second.origin
    assert [m["params"]["serverSeq"] for m in drain(b)] == [seq + 1]
    assert [type(e) for e in host.events()] == [ClientActionApplied]
    drain(a)
    rejection = host.reject_held(first, "too late")
    assert rejection is not None and rejection.rejection_reason == "too late"
    [late] = drain(a)
    assert late["params"]["rejectionReason"] == "too late" and drain(b) == []
    assert host.held_actions == ()
    with pytest.raises(LocalProtocolError, match="not held"):
        host.accept_held(first)


def test_held_actions_are_validated_again_and_ignored_once_the_channel_is_gone() -> None:
    host = make_host(review=lambda pending: host_core.HOLD)
    with_session(host)
    a = initialize(host, "a", subs=(CHAT, SESSION))
    assert dispatch(a, CHAT, 1, {"type": "chat/turnStarted", "turnId": "t1",
                                 "startedAt": "2026-01-01T00:00:00.000Z", "message": user()}) == []
    [held] = host.held_actions
    host.accept_held(held)
    list(host.events())
    drain(a)
    dispatch(a, CHAT, 2, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 1})
    [cancel] = host.held_actions
    host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id="t1", duration=1))
    # the turn ended meanwhile: the rules now reject what they accepted then
    envelope = host.accept_held(cancel)
    assert envelope is not None and envelope.rejection_reason == "no such active turn"
    dispatch(a, SESSION, 3, {"type": "session/titleChanged", "title": "x"})
    [title] = host.held_actions
    with pytest.raises(LocalProtocolError, match="not an action of"):
        host.accept_held(title, t.ChatActivityChangedAction(activity="x"))
    assert host.held_actions == (title,)  # a refused rewrite settles nothing
    host.reject_held(title, "no")
    dispatch(a, CHAT, 4, {"type": "chat/draftChanged"})
    [draft] = list(host.held_actions)  # (mypy narrowed the property above)
    host.remove_channel(CHAT)
    seq = host.server_seq
    assert host.accept_held(draft) is None and host.server_seq == seq


def test_a_held_echo_after_a_reconnect_is_a_late_echo() -> None:
    host = make_host(review=lambda p: host_core.HOLD if p.client_seq == 1 else p.action)
    with_session(host)
    net = Network(host)
    client = ClientConnection("c", clock=lambda: NOW)
    net.connect(client).send(client.initialize(initial_subscriptions=[SESSION]))
    net.run_until_quiet()
    net.link(client).send(client.dispatch(SESSION, t.SessionTitleChangedAction(title="held")))
    net.run_until_quiet()
    net.reconnect(client)
    net.run_until_quiet()
    [reconnected] = [e for e in net.link(client).take_events() if isinstance(e, ClientReconnected)]
    assert [p.client_seq for p in reconnected.outcome.dropped] == [1]
    [held] = host.held_actions
    host.accept_held(held)
    net.run_until_quiet()
    [late] = net.link(client).take_events()
    assert isinstance(late, ActionReceived) and late.received.kind is ReceiveKind.LATE_ECHO
    assert client.confirmed(SESSION) == host.state(SESSION)


# ── remembered clients and active clients ──────────────────────────────────


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.ms = NOW

    def __call__(self) -> int:
        return self.ms


def test_remembered_clients_are_forgotten_by_count_and_by_age() -> None:
    clock = Clock()
    host = make_host(clock=clock, remembered_clients=2, remembered_clients_max_age_ms=1_000)
    gone = initialize(host, "gone")
    stays = initialize(host, "stays")
    gone.connection_lost()
    assert host.next_deadline() == NOW + 1_001
    clock.ms += 1_001
    # an open connection keeps its client, however old the handshake
    assert host.remembered_version("stays") == "0.7.0"
    assert host.remembered_version("gone") is None
    conn = host.connect()
    [answer] = send(conn, request(1, "reconnect", {
        "clientId": "gone", "lastSeenServerSeq": 0, "subscriptions": []}))
    assert answer["error"]["code"] == -32602
    # the window opens when the connection closes
    stays.connection_lost()
    clock.ms += 1_000
    again = host.connect()
    [answer] = send(again, request(1, "reconnect", {
        "clientId": "stays", "lastSeenServerSeq": 0, "subscriptions": []}))
    assert answer["result"]["type"] == "replay"
    again.connection_lost()
    clock.ms += 1_001
    assert host.expire_clients() == ()
    assert host.remembered_version("stays") is None and host.next_deadline() is None
    # by count: the least recently touched goes first
    for name in ("x", "y", "z"):
        initialize(host, name)
    assert [host.remembered_version(n) for n in ("x", "y", "z")] == [None, "0.7.0", "0.7.0"]
    with pytest.raises(LocalProtocolError):
        make_host(remembered_clients_max_age_ms=-1)
    with pytest.raises(LocalProtocolError):
        make_host(active_client_grace_ms=-1)


def _active_session(host: Host, conn: HostConnection, client_id: str) -> None:
    """``client_id`` active in SESSION, with a running client tool call in CHAT,
    its inputNeeded entry and a customization it contributed."""
    dispatch(conn, SESSION, 1, {"type": "session/activeClientSet", "activeClient": {
        "clientId": client_id, "tools": [{"name": "run"}]}})
    host.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id="t1", started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text="go", origin=t.MessageOrigin(kind=t.MessageKind.USER))))
    contributor = t.ToolCallClientContributor(client_id=client_id)
    host.dispatch(CHAT, t.ChatToolCallStartAction(
        turn_id="t1", tool_call_id="tc1", tool_name="run", display_name="Run",
        contributor=contributor))
    host.dispatch(CHAT, t.ChatToolCallReadyAction(
        turn_id="t1", tool_call_id="tc1", invocation_message="Running",
        confirmed=t.ToolCallConfirmationReason.NOT_NEEDED))
    chat = host.state(CHAT)
    assert isinstance(chat, t.ChatState) and chat.active_turn is not None
    part = chat.active_turn.response_parts[0]
    assert isinstance(part, t.ToolCallResponsePart)
    assert isinstance(part.tool_call, t.ToolCallRunningState)
    execution = t.SessionToolClientExecutionRequest(
        id="run-tc1", chat=CHAT, turn_id="t1", client_id=client_id, tool_call=part.tool_call)
    host.dispatch(SESSION, t.SessionInputNeededSetAction(request=execution))
    plugin = t.PluginCustomization(
        id="plug", uri="virtual://x", name="X", enabled=True, client_id=client_id)
    host.dispatch(SESSION, t.SessionCustomizationUpdatedAction(customization=plugin))


def _types(envelopes: tuple[t.ActionEnvelope, ...]) -> list[str]:
    return [str(getattr(e.action.type, "value", e.action.type)) for e in envelopes]


def test_an_active_client_that_stays_away_is_removed_after_the_grace_period() -> None:
    clock = Clock()
    host = make_host(clock=clock, active_client_grace_ms=5_000)
    with_session(host)
    conn = initialize(host, "ide", subs=(SESSION,))
    watcher = initialize(host, "w", subs=(SESSION, CHAT))
    _active_session(host, conn, "ide")
    drain(watcher)
    conn.connection_lost()
    assert host.next_deadline() == NOW + 5_000
    clock.ms += 4_999
    assert host.expire_clients() == ()
    clock.ms += 1
    removed = host.expire_clients()
    assert _types(removed) == ["chat/toolCallComplete", "session/inputNeededRemoved",
                               "session/customizationRemoved", "session/activeClientRemoved"]
    complete = removed[0].action
    assert isinstance(complete, t.ChatToolCallCompleteAction) and not complete.result.success
    assert [m["params"]["action"]["type"] for m in drain(watcher)] == _types(removed)
    session = host.state(SESSION)
    assert isinstance(session, t.SessionState)
    assert session.active_clients == () and not session.customizations
    assert not session.input_needed
    assert host.expire_clients() == ()


def test_an_active_client_back_in_time_stays_one_back_without_the_session_leaves() -> None:
    clock = Clock()
    host = make_host(clock=clock, active_client_grace_ms=5_000)
    with_session(host)
    conn = initialize(host, "ide", subs=(SESSION,))
    _active_session(host, conn, "ide")
    conn.connection_lost()
    clock.ms += 1_000
    back = host.connect()
    send(back, request(1, "reconnect", {"clientId": "ide", "lastSeenServerSeq": 0,
                                        "subscriptions": [SESSION]}))
    clock.ms += 10_000
    assert host.expire_clients() == ()
    # reconnecting without the session is leaving it: due at once
    back.connection_lost()
    other = host.connect()
    send(other, request(1, "reconnect", {"clientId": "ide", "lastSeenServerSeq": 0,
                                         "subscriptions": []}))
    assert host.next_deadline() == clock.ms
    assert _types(host.expire_clients())[-1] == "session/activeClientRemoved"


def test_unsubscribing_from_the_session_leaves_it() -> None:
    host = make_host(active_client_grace_ms=None, remembered_clients_max_age_ms=None)
    with_session(host)
    conn = initialize(host, "ide", subs=(SESSION,))
    _active_session(host, conn, "ide")
    conn.connection_lost()
    assert host.next_deadline() is None  # no grace period: a drop alone removes nobody
    conn = host.connect()
    send(conn, request(1, "reconnect", {"clientId": "ide", "lastSeenServerSeq": 0,
                                        "subscriptions": [SESSION]}))
    send(conn, note("unsubscribe", {"channel": SESSION}))
    assert _types(host.expire_clients())[-1] == "session/activeClientRemoved"
    with pytest.raises(LocalProtocolError):
        host.remove_active_client(CHAT, "ide")


# ── terminals and chat disposal ─────────────────────────────────────────────


TERMINAL = "ahp-terminal:/t1"


def test_create_terminal_keeps_the_root_catalogue_in_step() -> None:
    host = make_host()
    root_watcher = initialize(host, "w", subs=(ROOT,))
    claim = t.TerminalClientClaim(client_id="c1")
    state = host.create_terminal(TERMINAL, claim=claim, title="build", cwd="file:///w",
                                 cols=80, rows=24)
    assert state == t.TerminalState(title="build", cwd="file:///w", cols=80, rows=24,
                                    content=(), claim=claim)
    assert host.state(TERMINAL) == state
    [changed] = drain(root_watcher)
    assert changed["params"]["action"] == {"type": "root/terminalsChanged", "terminals": [
        {"resource": TERMINAL, "title": "build", "claim": {"kind": "client", "clientId": "c1"}}]}
    conn = initialize(host, "c1", subs=(TERMINAL,))
    dispatch(conn, TERMINAL, 1, {"type": "terminal/titleChanged", "title": "tests"})
    host.dispatch(TERMINAL, t.TerminalExitedAction(exit_code=3))
    host.dispatch(TERMINAL, t.TerminalDataAction(data="output"))  # the catalogue is unchanged
    root = host.state(ROOT)
    assert isinstance(root, t.RootState) and root.terminals == (
        t.TerminalInfo(resource=TERMINAL, title="tests", claim=claim, exit_code=3),)
    assert len(drain(root_watcher)) == 2
    host.dispose_terminal(TERMINAL)
    assert not host.has_channel(TERMINAL) and conn.subscriptions == ()
    [changed] = drain(root_watcher)
    assert changed["params"]["action"]["terminals"] == []
    with pytest.raises(LocalProtocolError):
        host.dispose_terminal(TERMINAL)


def test_answer_create_and_dispose_terminal() -> None:
    host = make_host()
    with_session(host)
    conn = initialize(host, "c1", subs=(ROOT,))
    list(host.events())

    def ask(method: str, params: dict[str, Any]) -> tuple[Any, list[Any]]:
        send(conn, request(7, method, params))
        event = host.next_event()
        assert isinstance(event, RequestReceived)
        if method == "createTerminal":
            result: Any = host.answer_create_terminal(event)
        else:
            result = host.answer_dispose_terminal(event)
        return result, drain(conn)

    mine = {"kind": "client", "clientId": "c1"}
    _, [answer] = ask("createTerminal", {"channel": "ahp-chat:/x", "claim": mine})
    assert answer["error"]["code"] == -32602
    _, [answer] = ask("createTerminal", {"channel": TERMINAL,
                                         "claim": {"kind": "client", "clientId": "other"}})
    assert answer["error"]["code"] == -32602
    _, [answer] = ask("createTerminal", {"channel": TERMINAL,
                                         "claim": {"kind": "session", "session": "ahp-session:/x"}})
    assert answer["error"]["code"] == -32001
    state, [changed, answer] = ask("createTerminal", {
        "channel": TERMINAL, "claim": {"kind": "session", "session": SESSION}, "name": "dev",
        "cols": 100})
    assert isinstance(state, t.TerminalState) and state.title == "dev" and state.cols == 100
    assert changed["params"]["action"]["type"] == "root/terminalsChanged"
    assert answer == {"jsonrpc": "2.0", "id": 7, "result": None}
    _, [answer] = ask("createTerminal", {"channel": TERMINAL, "claim": mine})
    assert answer["error"]["code"] == -32010
    done, [changed, answer] = ask("disposeTerminal", {"channel": TERMINAL})
    assert done and answer["result"] is None and changed["params"]["action"]["terminals"] == []
    done, [answer] = ask("disposeTerminal", {"channel": TERMINAL})
    assert not done and answer["error"]["code"] == -32008
    send(conn, request(8, "listSessions", {}))
    event = host.next_event()
    assert isinstance(event, RequestReceived)
    with pytest.raises(LocalProtocolError):
        host.answer_create_terminal(event)
    with pytest.raises(LocalProtocolError):
        host.answer_dispose_terminal(event)


def test_dispose_chat_removes_it_from_its_session() -> None:
    host = make_host()
    with_session(host)
    host.add_chat(SESSION, "ahp-chat:/c2")
    conn = initialize(host, "c1", subs=(SESSION,))
    list(host.events())
    send(conn, request(3, "disposeChat", {"channel": "ahp-chat:/c2"}))
    event = host.next_event()
    assert isinstance(event, RequestReceived) and host.answer_dispose_chat(event)
    removed, answer = drain(conn)
    assert removed["params"]["action"] == {"type": "session/chatRemoved", "chat": "ahp-chat:/c2"}
    assert answer["result"] is None and not host.has_channel("ahp-chat:/c2")
    send(conn, request(4, "disposeChat", {"channel": "ahp-chat:/c2"}))
    event = host.next_event()
    assert isinstance(event, RequestReceived) and not host.answer_dispose_chat(event)
    assert drain(conn)[0]["error"]["code"] == -32008
    with pytest.raises(LocalProtocolError):
        host.dispose_chat("ahp-chat:/c2")


# ── subscribe views ──────────────────────────────────────────────────────────


def _completed_turns(host: Host, count: int, chat: str = CHAT, first: int = 1) -> None:
    for n in range(first, first + count):
        host.dispatch(chat, t.ChatTurnStartedAction(
            turn_id=f"t{n}", started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=f"m{n}", origin=t.MessageOrigin(kind=t.MessageKind.USER))))
        host.dispatch(chat, t.ChatTurnCompleteAction(turn_id=f"t{n}", duration=1))


def _turn_ids(state: t.SnapshotState | None) -> list[str]:
    assert isinstance(state, t.ChatState)
    return [turn.id for turn in state.turns]


def _view_net(host: Host) -> tuple[Network, ClientConnection, ClientConnection]:
    net = Network(host)
    trimmed = ClientConnection("trimmed", clock=lambda: NOW)
    whole = ClientConnection("whole", clock=lambda: NOW)
    for client in (trimmed, whole):
        net.connect(client).send(client.initialize())
    net.run_until_quiet()
    net.link(trimmed).send(trimmed.subscribe(CHAT, view=t.SubscribeView(turns=2)))
    net.link(whole).send(whole.subscribe(CHAT, delivery=t.SubscriptionDeliveryOptions(
        max_latency_ms=50)))
    net.run_until_quiet()
    return net, trimmed, whole


def test_a_view_trims_the_snapshot_and_the_core_pages_the_rest_to_that_client() -> None:
    host = make_host()
    with_session(host)
    _completed_turns(host, 5)
    net, trimmed, whole = _view_net(host)
    snap = trimmed.confirmed(CHAT)
    assert _turn_ids(snap) == ["t4", "t5"]
    assert isinstance(snap, t.ChatState) and snap.turns_next_cursor is not None
    assert whole.confirmed(CHAT) == host.state(CHAT)  # delivery hints change nothing
    for _ in host.events():
        pass
    for expected in (["t2", "t3", "t4", "t5"], ["t1", "t2", "t3", "t4", "t5"]):
        state = trimmed.confirmed(CHAT)
        assert isinstance(state, t.ChatState)
        _, data = trimmed.request("fetchTurns", t.FetchTurnsParams(
            channel=CHAT, cursor=state.turns_next_cursor))
        net.link(trimmed).send(data)
        net.run_until_quiet()
        assert host.next_event() is None  # the core answered its own cursor
        assert _turn_ids(trimmed.confirmed(CHAT)) == expected
    assert trimmed.confirmed(CHAT) == host.state(CHAT)
    assert all(not isinstance(e, ActionReceived) for e in net.link(whole).take_events())
    # now a cursor the core does not know: the embedder's, as before
    _, data = trimmed.request("fetchTurns", t.FetchTurnsParams(channel=CHAT, cursor="older"))
    net.link(trimmed).send(data)
    net.run_until_quiet()
    assert isinstance(host.next_event(), RequestReceived)


def test_a_view_gets_its_hidden_turns_before_a_broadcast_needs_them() -> None:
    host = make_host()
    with_session(host)
    _completed_turns(host, 4, first=3)
    host.dispatch(CHAT, t.ChatTurnsLoadedAction(turns=(), turns_next_cursor="older"))
    net, trimmed, whole = _view_net(host)
    assert _turn_ids(trimmed.confirmed(CHAT)) == ["t5", "t6"]
    # the embedder pages its storage in for someone else: the view is filled first
    older = (t.Turn(id="t1", message=t.Message(text="m1", origin=t.MessageOrigin(
        kind=t.MessageKind.USER)), response_parts=(), state=t.TurnState.COMPLETE),)
    _, data = whole.request("fetchTurns", t.FetchTurnsParams(channel=CHAT, cursor="older"))
    net.link(whole).send(data)
    net.run_until_quiet(on_host_event=lambda e: host.fetch_turns(e, older) if isinstance(
        e, RequestReceived) and e.method == "fetchTurns" else None)
    for client in (trimmed, whole):
        assert client.confirmed(CHAT) == host.state(CHAT)
        assert _turn_ids(client.confirmed(CHAT)) == ["t1", "t3", "t4", "t5", "t6"]


def test_truncating_to_a_hidden_turn_fills_the_view_first() -> None:
    host = make_host()
    with_session(host)
    _completed_turns(host, 5)
    net, trimmed, whole = _view_net(host)
    net.link(whole).send(whole.dispatch(CHAT, t.ChatTruncatedAction(turn_id="t2")))
    net.run_until_quiet()
    for client in (trimmed, whole):
        assert _turn_ids(client.confirmed(CHAT)) == ["t1", "t2"]
        assert client.confirmed(CHAT) == host.state(CHAT)
    # truncating a visible turn needs nothing
    _completed_turns(host, 3, first=6)
    net.link(trimmed).send(trimmed.unsubscribe(CHAT))
    net.link(trimmed).send(trimmed.subscribe(CHAT, view=t.SubscribeView(turns=3)))
    net.run_until_quiet()
    seq = host.server_seq
    net.link(whole).send(whole.dispatch(CHAT, t.ChatTruncatedAction(turn_id="t7")))
    net.run_until_quiet()
    assert host.server_seq == seq + 1
    assert _turn_ids(trimmed.confirmed(CHAT)) == ["t6", "t7"]
    net.link(whole).send(whole.dispatch(CHAT, t.ChatTruncatedAction()))
    net.run_until_quiet()
    assert trimmed.confirmed(CHAT) == host.state(CHAT) == whole.confirmed(CHAT)


def test_a_view_survives_a_replay_reconnect_not_a_snapshot_one() -> None:
    host = make_host(replay_max_envelopes=6)
    with_session(host)
    _completed_turns(host, 4)
    net, trimmed, _ = _view_net(host)
    net.link(trimmed).drop()
    host.dispatch(CHAT, t.ChatTurnsLoadedAction(turns=(), turns_next_cursor="older"))
    net.reconnect(trimmed)
    net.run_until_quiet()
    # the turns sent to it alone while it was away came with the replay
    assert trimmed.confirmed(CHAT) == host.state(CHAT)
    net.link(trimmed).send(trimmed.unsubscribe(CHAT))
    net.link(trimmed).send(trimmed.subscribe(CHAT, view=t.SubscribeView(turns=1)))
    net.run_until_quiet()
    net.link(trimmed).drop()
    _completed_turns(host, 4, first=5)  # past the replay buffer
    net.reconnect(trimmed)
    net.run_until_quiet()
    assert trimmed.confirmed(CHAT) == host.state(CHAT)  # a whole snapshot, no view
    list(host.events())
    _, data = trimmed.request("fetchTurns", t.FetchTurnsParams(channel=CHAT))
    net.link(trimmed).send(data)
    net.run_until_quiet()
    assert isinstance(host.next_event(), RequestReceived)


def test_views_are_advisory() -> None:
    host = make_host()
    with_session(host)
    _completed_turns(host, 2)
    conn = initialize(host, "c", subs=())
    for channel, view in ((CHAT, {"turns": 2}), (CHAT, {"turns": -1}), (CHAT, {}),
                          (SESSION, {"turns": 0})):
        [answer] = send(conn, request(1, "subscribe", {"channel": channel, "view": view}))
        assert answer["result"]["snapshot"]["state"] == wire.dump(host.state(channel))
    [answer] = send(conn, request(2, "subscribe", {"channel": CHAT, "view": {"turns": 0}}))
    state = answer["result"]["snapshot"]["state"]
    assert state["turns"] == [] and "turnsNextCursor" in state


# ── older turns before a fork ────────────────────────────────────────────────


def test_forks_and_side_chats_need_older_turns_loaded_first() -> None:
    root = t.RootState(agents=(t.AgentInfo(
        provider="demo", display_name="D", description="", models=(),
        capabilities=t.AgentCapabilities(
            multiple_chats=t.MultipleChatsCapability(fork=True, side_chat=True))),))
    host = make_host(root=root)
    with_session(host)
    _completed_turns(host, 1, first=3)
    host.dispatch(CHAT, t.ChatTurnsLoadedAction(turns=(), turns_next_cursor="page-1"))
    conn = initialize(host, subs=(SESSION,))
    list(host.events())
    assert host.older_turns_cursor(CHAT, "t3") is None
    assert host.older_turns_cursor(CHAT, "t1") == "page-1"
    assert host.older_turns_cursor(CHAT) == "page-1"
    with pytest.raises(LocalProtocolError):
        host.older_turns_cursor(SESSION)

    def ask(source: dict[str, Any]) -> RequestReceived:
        send(conn, request(5, "createChat", {"channel": SESSION, "chat": "ahp-chat:/n",
                                             "source": source}))
        event = host.next_event()
        assert isinstance(event, RequestReceived)
        return event

    # a side chat of a loaded turn needs nothing more
    side = ask({"kind": "sideChat", "chat": CHAT, "turnId": "t3"})
    assert host.older_turns_to_load(side) is None
    # a side chat of an older turn, or any fork, needs loading first
    side = ask({"kind": "sideChat", "chat": CHAT, "turnId": "t1"})
    assert host.older_turns_to_load(side) == (CHAT, "page-1")
    with pytest.raises(LocalProtocolError, match="page-1"):
        host.answer_create_chat(side)
    fork = ask({"kind": "fork", "chat": CHAT, "turnId": "t3"})
    pages = {"page-1": ("t2", "page-2"), "page-2": ("t1", None)}
    while (needed := host.older_turns_to_load(fork)) is not None:
        turn_id, cursor = pages[needed[1]]
        host.dispatch(needed[0], t.ChatTurnsLoadedAction(turns=(t.Turn(
            id=turn_id, message=t.Message(text="old", origin=t.MessageOrigin(
                kind=t.MessageKind.USER)), response_parts=(), state=t.TurnState.COMPLETE),),
            turns_next_cursor=cursor))
    state = host.answer_create_chat(fork)
    assert _turn_ids(state) == ["t1", "t2", "t3"]


def test_mirror_chat_and_announce_summary_send_only_what_changed() -> None:
    host = make_host()
    with_session(host)
    conn = initialize(host, subs=("ahp-root://", SESSION))
    assert host.mirror_chat(SESSION, CHAT) is None  # the catalogue matches the chat
    since = host.session_summary(SESSION)
    assert host.announce_summary(SESSION, since) is since
    assert conn.data_to_send() == []

    host.dispatch(CHAT, t.ChatActivityChangedAction(activity="reading"))
    envelope = host.mirror_chat(SESSION, CHAT)
    assert envelope is not None and isinstance(envelope.action, t.SessionChatUpdatedAction)
    assert envelope.action.changes == t.PartialChatSummary(activity="reading")
    assert host.mirror_chat(SESSION, CHAT) is None  # once is enough
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="New title"))
    now = host.announce_summary(SESSION, since)
    assert now.title == "New title"
    notes = [json.loads(x) for x in conn.data_to_send()]
    [summary] = [n for n in notes if n.get("method") == "root/sessionSummaryChanged"]
    assert summary["params"]["session"] == SESSION
    assert summary["params"]["changes"]["title"] == "New title"
    assert "provider" not in summary["params"]["changes"]  # identity never changes
    assert host.mirror_chat(SESSION, "ahp-chat:/missing") is None
