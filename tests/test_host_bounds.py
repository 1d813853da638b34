"""Issue 29, defect 8, in the sans-I/O core: the fields that make a chat big are
bounded where they are applied, so every turn and every envelope fits a message.

A host with a 1 MiB message limit: its snapshot budget is 1 MiB - 64 KiB, a
message text or part is kept whole up to a quarter of it, the parts of one turn
together up to half of it.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.host import Host, HostLimits
from agenthost_protocol.host.bounds import PART_CUT_NOTE, Bounds, cut_text
from agenthost_protocol.host.validation import MAX_QUEUED_MESSAGES
from agenthost_protocol.sqlite_store import SQLiteStore

SESSION = "ahp-session:/s"
CHAT = "ahp-chat:/c"
USER = t.MessageOrigin(kind=t.MessageKind.USER)
STARTED = "2026-01-01T00:00:00.000Z"
LIMIT = 1024 * 1024
BOUNDS = Bounds.for_message_size(LIMIT)


def make_host(limit: int = LIMIT) -> Host:
    host = Host(clock=lambda: 1_767_225_600_000, limits=HostLimits(max_message_size=limit))
    host.add_channel(SESSION, t.SessionState(
        provider="p", title="", status=t.SessionStatus.IDLE,
        lifecycle=t.SessionLifecycle.READY, active_clients=(), chats=()))
    host.add_chat(SESSION, CHAT)
    return host


def chat(host: Host) -> t.ChatState:
    state = host.state(CHAT)
    assert isinstance(state, t.ChatState)
    return state


def start(host: Host, turn: str = "t1", text: str = "hi") -> t.ActionEnvelope:
    return host.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id=turn, started_at=STARTED, message=t.Message(text=text, origin=USER)))


def test_the_bounds_follow_the_message_limit() -> None:
    assert BOUNDS.field_bytes == (LIMIT - 64 * 1024) // 4
    assert BOUNDS.turn_bytes == (LIMIT - 64 * 1024) // 2
    big = Bounds.for_message_size(16 * 1024 * 1024)
    assert big.field_bytes > 4_000_000  # a 3.5 MB message stays whole under the default


def test_a_part_grown_by_deltas_is_cut_once_with_the_marker() -> None:
    host = make_host()
    start(host)
    host.dispatch(CHAT, t.ChatResponsePartAction(
        turn_id="t1", part=t.MarkdownResponsePart(id="p", content="")))
    sent = []
    for _ in range(40):  # 40 x 10 KB: over the 240 KB part limit
        envelope = host.dispatch(CHAT, t.ChatDeltaAction(turn_id="t1", part_id="p",
                                                         content="é" * 5000))
        assert isinstance(envelope.action, t.ChatDeltaAction)
        sent.append(envelope.action.content)
        assert len(wire.dumps(envelope)) < LIMIT
    content = "".join(sent)
    assert content.endswith(PART_CUT_NOTE) and content.count(PART_CUT_NOTE) == 1
    assert len(content.encode()) <= BOUNDS.field_bytes
    assert sent[-1] == ""  # appends after the cut carry nothing
    active = chat(host).active_turn
    assert active is not None
    (part,) = active.response_parts
    assert isinstance(part, t.MarkdownResponsePart) and part.content == content


def test_the_parts_of_one_turn_are_bounded_together() -> None:
    host = make_host()
    start(host)
    for n in range(4):  # four parts just under the part limit: over the turn's
        host.dispatch(CHAT, t.ChatResponsePartAction(turn_id="t1", part=t.ReasoningResponsePart(
            id=f"p{n}", content="r" * (BOUNDS.field_bytes - 10))))
    host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id="t1", duration=1))
    (turn,) = chat(host).turns
    texts = [p.content for p in turn.response_parts if isinstance(p, t.ReasoningResponsePart)]
    assert len(texts) == 4
    # each part after the turn's limit is only the marker
    assert sum(len(text) for text in texts) <= BOUNDS.turn_bytes + 2 * len(PART_CUT_NOTE)
    assert not texts[0].endswith(PART_CUT_NOTE) and texts[2].endswith(PART_CUT_NOTE)
    assert texts[3] == PART_CUT_NOTE.lstrip("\n") or texts[3].endswith(PART_CUT_NOTE)
    assert len(wire.dumps(turn)) < LIMIT


def test_a_restored_turn_is_measured_once_and_still_bounded() -> None:
    host = make_host()
    start(host)
    host.dispatch(CHAT, t.ChatResponsePartAction(
        turn_id="t1", part=t.MarkdownResponsePart(id="p", content="a" * (BOUNDS.field_bytes - 5))))
    host._parts.drop_channel(CHAT)  # what a host restored from its store starts with
    envelope = host.dispatch(CHAT, t.ChatDeltaAction(turn_id="t1", part_id="p",
                                                     content="b" * 1000))
    assert isinstance(envelope.action, t.ChatDeltaAction)
    assert envelope.action.content.endswith(PART_CUT_NOTE)


def test_titles_are_cut_with_a_marker() -> None:
    host = make_host()
    envelope = host.dispatch(SESSION, t.SessionTitleChangedAction(title="T" * 500_000))
    assert isinstance(envelope.action, t.SessionTitleChangedAction)
    title = envelope.action.title
    assert len(title.encode()) <= BOUNDS.title_bytes and "[title cut: 500000 bytes" in title
    envelope = host.dispatch(SESSION, t.SessionChatUpdatedAction(
        chat=CHAT, changes=t.PartialChatSummary(title="C" * 500_000)))
    assert isinstance(envelope.action, t.SessionChatUpdatedAction)
    assert envelope.action.changes.title is not None
    assert len(envelope.action.changes.title) <= BOUNDS.title_bytes
    short = t.SessionTitleChangedAction(title="a title")
    assert host.dispatch(SESSION, short).action is short


def test_queued_and_draft_messages_go_by_reference_sooner() -> None:
    host = make_host(16 * 1024 * 1024)  # the default limit: a field may be 4 MB
    text = "q" * (64 * 1024 + 1)
    envelope = host.dispatch(CHAT, t.ChatDraftChangedAction(
        draft=t.Message(text=text, origin=USER)))
    assert isinstance(envelope.action, t.ChatDraftChangedAction)
    draft = envelope.action.draft
    assert draft is not None and len(draft.text) < len(text)
    (attachment,) = draft.attachments or ()
    assert isinstance(attachment, t.MessageResourceAttachment)
    stored = host.content.get(attachment.uri)
    assert stored is not None and stored.data == text.encode()
    # a turn's own message of that size stays whole
    assert isinstance(start(host, text=text).action, t.ChatTurnStartedAction)
    active = chat(host).active_turn
    assert active is not None and active.message.text == text


def test_a_clients_huge_tool_result_goes_by_reference() -> None:
    host = make_host()
    start(host)
    host.dispatch(CHAT, t.ChatToolCallStartAction(turn_id="t1", tool_call_id="c",
                                                  tool_name="cat", display_name="Cat"))
    host.dispatch(CHAT, t.ChatToolCallReadyAction(
        turn_id="t1", tool_call_id="c", invocation_message="cat",
        confirmed=t.ToolCallConfirmationReason.NOT_NEEDED))
    envelope = host.dispatch(CHAT, t.ChatToolCallCompleteAction(
        turn_id="t1", tool_call_id="c", result=t.ToolCallResult(
            success=True, past_tense_message="read",
            content=(t.ToolResultTextContent(text="o" * 600_000),))))
    assert isinstance(envelope.action, t.ChatToolCallCompleteAction)
    (block,) = envelope.action.result.content or ()
    assert isinstance(block, t.ToolResultResourceContent)


def test_a_snapshot_without_a_view_is_trimmed_to_fit_and_pages() -> None:
    host = make_host()
    for n in range(8):  # 8 x 200 KB: 1.6 MB, over the 1 MiB limit
        start(host, f"t{n}", f"{n} " + "m" * 200_000)
        host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id=f"t{n}", duration=1))
    conn = host.connect()
    conn.receive_data(wire.dumps(t.JsonRpcRequest(id=1, method="initialize", params=(
        t.InitializeParams(protocol_versions=("0.7.0",), client_id="c",
                           initial_subscriptions=(CHAT,))))))
    (answer,) = conn.data_to_send()
    assert len(answer) < LIMIT
    result = json.loads(answer)
    state = result["result"]["snapshots"][0]["state"]
    assert 0 < len(state["turns"]) < 8 and state["turnsNextCursor"]
    turns = state["turns"]
    cursor = state["turnsNextCursor"]
    number = 2
    while cursor:
        conn.receive_data(wire.dumps(t.JsonRpcRequest(id=number, method="fetchTurns", params=(
            t.FetchTurnsParams(channel=CHAT, cursor=cursor)))))
        number += 1
        sent = [json.loads(data) for data in conn.data_to_send()]
        (loaded,) = [m["params"]["action"] for m in sent if m.get("method") == "action"]
        turns = loaded["turns"] + turns
        cursor = loaded.get("turnsNextCursor")
    assert turns == json.loads(wire.dumps(chat(host)))["turns"]


@given(st.text(), st.integers(min_value=0, max_value=64))
def test_a_cut_text_is_a_prefix_and_the_note_within_the_bytes(text: str, room: int) -> None:
    note = " [cut]"
    cut = cut_text(text, room + len(note), note)
    assert cut.endswith(note) and text.startswith(cut[: -len(note)])
    assert len(cut.encode("utf-8", "surrogatepass")) <= room + len(note)
    assert len(text.encode("utf-8", "surrogatepass")) - len(
        cut[: -len(note)].encode("utf-8", "surrogatepass")) in range(
            max(0, len(text.encode("utf-8", "surrogatepass")) - room),
            max(0, len(text.encode("utf-8", "surrogatepass")) - room) + 4)


def test_a_client_cannot_queue_without_end() -> None:
    host = make_host()
    conn = host.connect()
    conn.receive_data(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersions": ["0.7.0"], "clientId": "c", "initialSubscriptions": [CHAT]}}))
    conn.data_to_send()

    def queue(n: int, message_id: str) -> dict[str, object]:
        conn.receive_data(json.dumps({"jsonrpc": "2.0", "method": "dispatchAction", "params": {
            "channel": CHAT, "clientSeq": n, "action": wire.unstructure(
                t.ChatPendingMessageSetAction(kind=t.PendingMessageKind.QUEUED, id=message_id,
                                              message=t.Message(text="q", origin=USER)))}}))
        (sent,) = conn.data_to_send()
        envelope: dict[str, object] = json.loads(sent)["params"]
        return envelope

    for n in range(MAX_QUEUED_MESSAGES):
        assert "rejectionReason" not in queue(n + 1, f"q{n}")
    refused = queue(MAX_QUEUED_MESSAGES + 1, "one more")
    assert refused["rejectionReason"] == (
        f"the queue is full: at most {MAX_QUEUED_MESSAGES} queued messages")
    assert "rejectionReason" not in queue(MAX_QUEUED_MESSAGES + 2, "q0")  # an update is fine
    assert len(chat(host).queued_messages or ()) == MAX_QUEUED_MESSAGES


def test_a_big_chat_stored_and_restarted_opens_trimmed_and_stays_bounded(
    tmp_path: Path,
) -> None:
    """A host with its SQLite store holds a chat over the limit and a turn whose
    part is near its limit; after a restart the chat opens on the turns that fit
    and the part is still cut where its limit is."""
    path = tmp_path / "host.sqlite3"
    store = SQLiteStore(path)
    host = Host(clock=lambda: 1_767_225_600_000, limits=HostLimits(max_message_size=LIMIT),
                store=store)
    host.create_session(SESSION, provider="p")
    host.ready_session(SESSION, default_chat=CHAT)
    for n in range(6):  # 6 x 200 KB messages: 1.2 MB, over the 1 MiB limit
        start(host, f"t{n}", f"{n} " + "m" * 200_000)
        host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id=f"t{n}", duration=1))
    start(host, "live")
    near = "a" * (BOUNDS.field_bytes - 5)
    host.dispatch(CHAT, t.ChatResponsePartAction(
        turn_id="live", part=t.MarkdownResponsePart(id="p", content=near)))
    assert host.commit()
    before = wire.dumps(chat(host))
    store.close()

    store = SQLiteStore(path)
    again = Host(clock=lambda: 1_767_225_600_000, limits=HostLimits(max_message_size=LIMIT),
                 store=store)
    assert wire.dumps(chat(again)) == before
    envelope = again.dispatch(CHAT, t.ChatDeltaAction(turn_id="live", part_id="p",
                                                      content="b" * 1000))
    assert isinstance(envelope.action, t.ChatDeltaAction)
    assert envelope.action.content.endswith(PART_CUT_NOTE)
    conn = again.connect()
    conn.receive_data(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersions": ["0.7.0"], "clientId": "c"}}))
    conn.receive_data(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "subscribe",
                                  "params": {"channel": CHAT}}))
    sent = conn.data_to_send()
    assert max(map(len, sent)) < LIMIT
    (answer,) = [m for m in map(json.loads, sent) if m.get("id") == 2]
    state = answer["result"]["snapshot"]["state"]
    assert 0 < len(state["turns"]) < 6 and state["turnsNextCursor"]
    store.close()
