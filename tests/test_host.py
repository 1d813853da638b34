"""The host core driven with raw JSON-RPC lines, as a transport would feed it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.host import (
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
