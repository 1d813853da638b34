"""The client's receive path made cheaper, and still the same.

* ``ClientConnection._receive_batch`` gives the events, and leaves the state,
  that ``receive_data`` of each message gives, whatever the messages and
  however they are cut into batches; ``ClientReconciler._receive_many``
  likewise for ``receive`` (a run of streamed text is one reduction);
* the transport's ``_FrameReader`` splits whole text frames off the socket
  itself and gives ``websockets`` everything else exactly as it came (a
  ping, a pong, whole and at a frame boundary; from a close, a fragment or
  a frame it refuses on, the rest of the stream), keeps the order, bounds
  what it holds and decodes text as ``websockets`` does;
* over real sockets: the frames ``websockets`` answers (pings, keepalive
  pongs, fragments, a close, an oversized message) still behave as they did,
  and an ``AsyncClient`` reading a long stream ends with the host's state,
  every action an event, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.aio.client_events import EventsDropped, EventStream
from agenthost_protocol.aio.client_transport import (
    TransportClosed,
    WebSocketTransport,
    _FrameReader,
    open_websocket,
)
from agenthost_protocol.client import (
    ActionReceived,
    ClientConnection,
    ClientState,
    Event,
    ProtocolViolation,
    _action_envelope,
)
from agenthost_protocol.errors import LocalProtocolError, RemoteProtocolError
from agenthost_protocol.reconciler import ClientReconciler, Received, ReceiveKind

CHAT = "ahp-chat:/perf"
OTHER_CHAT = "ahp-chat:/other"
ME = "perf-client"
NOW = 1_767_225_600_000
STARTED_AT = "2026-01-01T00:00:00.000Z"
USER = t.MessageOrigin(kind=t.MessageKind.USER)


def clock() -> int:
    return NOW


def chat_state(resource: str = CHAT) -> t.ChatState:
    return t.ChatState(resource=resource, title="perf", status=t.SessionStatus.IDLE,
                       modified_at=STARTED_AT, turns=())


def started(turn_id: str) -> t.ChatTurnStartedAction:
    return t.ChatTurnStartedAction(turn_id=turn_id, started_at=STARTED_AT,
                                   message=t.Message(text="go", origin=USER))


def markdown(turn_id: str, part_id: str) -> t.ChatResponsePartAction:
    return t.ChatResponsePartAction(turn_id=turn_id,
                                    part=t.MarkdownResponsePart(id=part_id, content=""))


def reasoning(turn_id: str, part_id: str) -> t.ChatResponsePartAction:
    return t.ChatResponsePartAction(turn_id=turn_id,
                                    part=t.ReasoningResponsePart(id=part_id, content=""))


def draft(text: str) -> t.ChatDraftChangedAction:
    return t.ChatDraftChangedAction(draft=t.Message(text=text, origin=USER))


def notification(envelope: t.ActionEnvelope) -> bytes:
    return wire.dumps(t.JsonRpcNotification(method="action", params=envelope)).encode()


def envelope(action: t.StateAction, seq: int, *, channel: str = CHAT,
             origin: tuple[str, int] | None = None, rejection: str | None = None
             ) -> t.ActionEnvelope:
    return t.ActionEnvelope(
        channel=channel, action=action, server_seq=seq,
        origin=None if origin is None else t.ActionOrigin(client_id=origin[0],
                                                          client_seq=origin[1]),
        rejection_reason=rejection,
    )


def opened(*channels: str) -> ClientConnection:
    """A connection initialized with a snapshot (``serverSeq`` 2) of each channel."""
    conn = ClientConnection(ME, clock=clock)
    request = json.loads(conn.initialize(initial_subscriptions=channels))
    result = t.InitializeResult(
        protocol_version=request["params"]["protocolVersions"][0], server_seq=2,
        snapshots=tuple(t.Snapshot(resource=c, state=chat_state(c), from_seq=2)
                        for c in channels),
    )
    (event,) = conn.receive_data(
        wire.dumps(t.JsonRpcSuccessResponse(id=request["id"], result=result)).encode())
    assert conn.connection_state is ClientState.OPEN, event
    return conn


def comparable(events: Sequence[Event]) -> list[object]:
    """Events as values: a violation's error by its class and text (exceptions compare
    by identity)."""
    out: list[object] = []
    for event in events:
        if isinstance(event, ProtocolViolation):
            out.append(("violation", type(event.error), str(event.error), event.fatal,
                        event.reply))
        else:
            out.append(event)
    return out


def snapshot_of(conn: ClientConnection) -> object:
    """What the connection holds, as a value."""
    if conn._reconciler is None:
        return (conn.connection_state,)
    rec = conn.reconciler
    return (
        conn.connection_state,
        rec.last_seen_server_seq,
        tuple((c, rec.confirmed(c), rec.pending(c), rec.optimistic(c)) for c in rec.channels),
    )


# -- a stream of messages, as a host (and a misbehaving one) sends them ------------------------


class Script:
    """Messages to feed two twin connections: a chat streamed by the host, with our own
    actions echoed, duplicates, other notifications and answers mixed in."""

    def __init__(self, rng: random.Random, conns: Sequence[ClientConnection]) -> None:
        self.rng = rng
        self.conns = conns
        self.seq = 2
        self.messages: list[bytes] = []
        self.sent: list[bytes] = []  # what was already sent, to send again (duplicates)
        self.turn = 0
        self.parts: list[tuple[str, str, bool]] = []  # (turn, part, markdown?)
        self.pending: list[int] = []  # our clientSeqs the host has not answered yet
        self.dispatched: dict[int, t.StateAction] = {}

    def add(self, data: bytes) -> None:
        self.messages.append(data)

    def host(self, action: t.StateAction, *, channel: str = CHAT,
             origin: tuple[str, int] | None = None, rejection: str | None = None) -> None:
        self.seq += 1
        data = notification(envelope(action, self.seq, channel=channel, origin=origin,
                                     rejection=rejection))
        self.sent.append(data)
        self.add(data)

    def new_turn(self) -> None:
        self.turn += 1
        turn = f"turn-{self.turn}"
        self.host(started(turn))
        self.parts = []

    def new_part(self) -> None:
        turn = f"turn-{self.turn}"
        part = f"part-{len(self.parts)}"
        is_markdown = self.rng.random() < 0.7
        self.host(markdown(turn, part) if is_markdown else reasoning(turn, part))
        self.parts.append((turn, part, is_markdown))

    def text(self) -> None:
        rng = self.rng
        if not self.parts or rng.random() < 0.05:
            turn, part, is_markdown = f"turn-{self.turn}", "nowhere", True
        else:
            turn, part, is_markdown = self.parts[-1] if rng.random() < 0.9 else rng.choice(
                self.parts)
        if rng.random() < 0.03:
            turn = "an-old-turn"
        content = rng.choice(["eight ch", "", "é", "🙂 text", "x" * 40, "\n"])
        cls = t.ChatDeltaAction if (is_markdown or rng.random() < 0.1) else t.ChatReasoningAction
        origin = (rng.choice(["someone", "else"]), rng.randrange(1, 99)) if (
            rng.random() < 0.2) else None
        self.host(cls(turn_id=turn, part_id=part, content=content), origin=origin)

    def dispatch(self) -> None:
        """Both connections dispatch the same action of ours (their clientSeqs agree)."""
        action = draft(f"draft {self.rng.random()}")
        for conn in self.conns:
            conn.dispatch(CHAT, action)
        client_seq = len(self.dispatched) + 1
        self.dispatched[client_seq] = action
        self.pending.append(client_seq)

    def answer(self) -> None:
        """The host answers one of our pending actions: an echo, or a rejection."""
        if not self.pending:
            return
        client_seq = self.pending.pop(0 if self.rng.random() < 0.8 else -1)
        action = self.dispatched[client_seq]
        rejection = "no" if self.rng.random() < 0.2 else None
        self.host(action, origin=(ME, client_seq), rejection=rejection)

    def other(self) -> None:
        rng = self.rng
        pick = rng.random()
        if pick < 0.3 and self.sent:
            self.add(rng.choice(self.sent))  # a duplicate
        elif pick < 0.5:
            self.add(json.dumps({"jsonrpc": "2.0", "method": "root/progress", "params": {
                "channel": CHAT, "progressToken": "p", "progress": 1}}).encode())
        elif pick < 0.65:
            self.host(t.ChatUsageAction(turn_id=f"turn-{self.turn}",
                                        usage=t.UsageInfo(input_tokens=1, output_tokens=2)))
        elif pick < 0.8:
            self.host(draft("theirs"), channel=OTHER_CHAT)
        elif pick < 0.9:
            # a request of the host this client does not serve: answered, not fatal
            self.add(json.dumps({"jsonrpc": "2.0", "id": "r1", "method": "nonsense",
                                 "params": {}}).encode())
        else:
            self.host(t.ChatTurnCompleteAction(turn_id=f"turn-{self.turn}", duration=5))

    def fatal(self) -> None:
        rng = self.rng
        pick = rng.random()
        if pick < 0.3:
            self.add(b"{not json")
        elif pick < 0.6:
            self.host(t.ChatDeltaAction(turn_id="t", part_id="p", content="x"),
                      channel="ahp-chat:/never-subscribed")
        elif pick < 0.8:
            self.add(json.dumps({"jsonrpc": "2.0", "method": "action", "params": {
                "channel": CHAT, "serverSeq": "three", "action": {"type": "chat/delta"}}}
            ).encode())
        else:
            self.host(t.ChatDeltaAction(turn_id="t", part_id="p", content="x"),
                      origin=(ME, 10_000))  # an echo of nothing we sent

    def build(self, length: int, *, fatal: bool) -> list[bytes]:
        rng = self.rng
        self.new_turn()
        self.new_part()
        for _ in range(length):
            pick = rng.random()
            if pick < 0.75:
                self.text()
            elif pick < 0.8:
                self.new_part()
            elif pick < 0.82:
                self.new_turn()
            elif pick < 0.87:
                self.dispatch()
            elif pick < 0.92:
                self.answer()
            else:
                self.other()
        if fatal:
            at = rng.randrange(len(self.messages) + 1)
            tail = self.messages[at:]
            del self.messages[at:]
            self.fatal()
            self.messages.extend(tail)
        return self.messages


def batches(rng: random.Random, messages: Sequence[bytes]) -> Iterator[Sequence[bytes]]:
    at = 0
    while at < len(messages):
        size = rng.choice([1, 2, 3, 7, 40, 300])
        yield messages[at:at + size]
        at += size


@pytest.mark.parametrize("seed", range(40))
def test_receive_batch_is_receive_data_of_each(seed: int) -> None:
    rng = random.Random(seed)
    one, many = opened(CHAT, OTHER_CHAT), opened(CHAT, OTHER_CHAT)
    # the script dispatches through both as it goes, as the messages come in between
    script = Script(rng, [one, many])
    messages = script.build(rng.randrange(50, 400), fatal=rng.random() < 0.4)
    expected: list[Event] = []
    for data in messages:
        if one.connection_state is ClientState.CLOSED:
            with pytest.raises(LocalProtocolError):
                one.receive_data(data)
            break
        expected.extend(one.receive_data(data))
    got: list[Event] = []
    for batch in batches(rng, messages):
        if many.connection_state is ClientState.CLOSED:
            with pytest.raises(LocalProtocolError):
                many._receive_batch(batch)
            break
        got.extend(many._receive_batch(batch))
    assert comparable(got) == comparable(expected)
    assert snapshot_of(many) == snapshot_of(one)


def test_receive_batch_refuses_what_receive_data_refuses_before_reading() -> None:
    conn = opened(CHAT)
    good = notification(envelope(started("a"), 3))
    with pytest.raises(LocalProtocolError):
        conn._receive_batch([good, cast("bytes", 42)])
    assert conn.reconciler.last_seen_server_seq == 2  # nothing read
    assert conn._receive_batch([]) == []


def test_a_stream_of_text_is_one_reduction(monkeypatch: pytest.MonkeyPatch) -> None:
    from agenthost_protocol import reconciler as module

    conn = opened(CHAT)
    conn._receive_batch([notification(envelope(started("a"), 3)),
                         notification(envelope(markdown("a", "m"), 4))])
    calls: list[str] = []
    reduce = module.reduce  # type: ignore[attr-defined]

    def counting(channel: str, state: t.SnapshotState, action: t.StateAction,
                 **kw: Any) -> Any:
        calls.append(str(action.type))
        return reduce(channel, state, action, **kw)

    monkeypatch.setattr(module, "reduce", counting)
    texts = [f"{n} " for n in range(500)]
    events = conn._receive_batch([
        notification(envelope(t.ChatDeltaAction(turn_id="a", part_id="m", content=text), 5 + n))
        for n, text in enumerate(texts)
    ])
    assert len(calls) == 1
    assert [e.received.envelope.server_seq for e in events  # type: ignore[union-attr]
            ] == list(range(5, 505))
    assert all(isinstance(e, ActionReceived) and e.received.kind is ReceiveKind.FOREIGN
               for e in events)
    state = conn.confirmed(CHAT)
    assert isinstance(state, t.ChatState) and state.active_turn is not None
    assert state.active_turn.response_parts[0].content == "".join(texts)  # type: ignore[union-attr]


# -- the reconciler's runs ---------------------------------------------------------------------


def reconciler() -> ClientReconciler:
    rec = ClientReconciler(ME, now=clock, server_seq=2)
    rec.subscribe(t.Snapshot(resource=CHAT, state=chat_state(), from_seq=2))
    rec.receive(envelope(started("a"), 3))
    rec.receive(envelope(markdown("a", "m"), 4))
    return rec


def delta(seq: int, text: str = "ab", **kw: Any) -> t.ActionEnvelope:
    return envelope(t.ChatDeltaAction(turn_id="a", part_id="m", content=text), seq, **kw)


@pytest.mark.parametrize("bad", [
    delta(9, channel="ahp-chat:/never-subscribed"),  # not subscribed
    delta(9, origin=(ME, 77)),  # an echo of nothing pending
    delta(cast("int", "9")),  # ill-typed (hand-built: a decoded one never is)
])
def test_receive_many_stops_where_receive_does(bad: t.ActionEnvelope) -> None:
    run = [delta(5), delta(6), delta(7, "é"), delta(8), bad, delta(10), delta(11)]
    one, many = reconciler(), reconciler()
    expected: list[Received] = []
    with pytest.raises(RemoteProtocolError) as refused:
        for item in run:
            expected.append(one.receive(item))
    got: list[Received] = []
    with pytest.raises(RemoteProtocolError) as too:
        many._receive_many(run, got)
    assert str(too.value) == str(refused.value)
    assert got == expected
    assert many.confirmed(CHAT) == one.confirmed(CHAT)
    assert many.last_seen_server_seq == one.last_seen_server_seq == 8


def test_receive_many_keeps_duplicates_echoes_and_pending_apart() -> None:
    one, many = reconciler(), reconciler()
    for rec in (one, many):
        rec.dispatch(CHAT, draft("mine"))
    run = [
        delta(5), delta(5), delta(6, origin=("other", 1)),  # a duplicate inside a run
        delta(7), envelope(draft("mine"), 8, origin=(ME, 1)),  # our echo ends the pending
        delta(9), delta(10, rejection="refused"), delta(11),  # a foreign rejection
        envelope(t.ChatReasoningAction(turn_id="a", part_id="m", content="r"), 12),
        delta(13), delta(14, "", origin=("other", 2)), delta(15),
    ]
    expected = [one.receive(item) for item in run]
    got: list[Received] = []
    many._receive_many(run, got)
    assert got == expected
    assert many.confirmed(CHAT) == one.confirmed(CHAT)
    assert many.optimistic(CHAT) == one.optimistic(CHAT)
    assert many.pending(CHAT) == one.pending(CHAT) == ()


def test_receive_many_while_actions_are_pending_is_receive_of_each() -> None:
    one, many = reconciler(), reconciler()
    for rec in (one, many):
        rec.dispatch(CHAT, draft("mine"))
        rec.optimistic(CHAT)
    run = [delta(n) for n in range(5, 40)]
    expected = [one.receive(item) for item in run]
    got: list[Received] = []
    many._receive_many(run, got)
    assert got == expected
    assert many.optimistic(CHAT) == one.optimistic(CHAT)
    assert many.confirmed(CHAT) == one.confirmed(CHAT)


# -- the streaming path builds what the general one builds -------------------------------------


@pytest.mark.parametrize("params", [
    {"channel": CHAT, "serverSeq": 3, "action": {
        "type": "chat/delta", "turnId": "a", "partId": "m", "content": "x"}},
    {"channel": CHAT, "serverSeq": 3, "origin": {"clientId": "c", "clientSeq": 4},
     "action": {"type": "chat/reasoning", "turnId": "a", "partId": "m", "content": "é"}},
    {"channel": CHAT, "serverSeq": 3, "rejectionReason": "no", "origin": None,
     "action": {"type": "chat/delta", "turnId": "a", "partId": "m", "content": "x",
                "_meta": {"k": [1]}}},
    {"channel": CHAT, "serverSeq": 3, "action": {"type": "chat/newThing", "x": 1}},
])
def test_action_envelope_is_what_parse_message_decodes(params: dict[str, Any]) -> None:
    obj = {"jsonrpc": "2.0", "method": "action", "params": params}
    message = wire.parse_message(json.loads(json.dumps(obj)))
    assert isinstance(message, t.JsonRpcNotification)
    fast = _action_envelope(json.loads(json.dumps(obj)))
    assert fast == message.params
    assert type(fast) is t.ActionEnvelope


@pytest.mark.parametrize("seed", range(5))
def test_action_envelope_agrees_with_parse_message_on_a_stream(seed: int) -> None:
    rng = random.Random(seed)
    script = Script(rng, [opened(CHAT, OTHER_CHAT)])
    extra = (b'{"jsonrpc":"2.0","method":"action","x":1,"params":{"channel":"c","serverSeq":1,'
             b'"action":{"type":"chat/delta","turnId":"t","partId":"p","content":"c"}}}')
    for data in [*script.build(300, fatal=False), extra]:
        obj = wire.parse_json(data)
        fast = _action_envelope(obj)
        try:
            message = wire.parse_message(obj)
        except RemoteProtocolError:
            assert fast is None
            continue
        if isinstance(message, t.JsonRpcNotification) and message.method == "action":
            assert fast == message.params and type(fast) is type(message.params)
        else:
            assert fast is None


@pytest.mark.parametrize("obj", [
    {"jsonrpc": "2.0", "method": "action", "params": {"channel": CHAT, "serverSeq": "x",
                                                      "action": {"type": "chat/delta"}}},
    {"jsonrpc": "2.0", "method": "action", "id": 1, "params": {}},
    {"jsonrpc": "1.0", "method": "action", "params": {}},
    {"jsonrpc": "2.0", "method": "action"},
    {"jsonrpc": "2.0", "method": "root/progress", "params": {}},
    [1, 2],
])
def test_action_envelope_leaves_the_rest_to_parse_message(obj: object) -> None:
    assert _action_envelope(obj) is None


def test_fast_events_equal_the_built_ones() -> None:
    conn = opened(CHAT)
    (event,) = conn.receive_data(notification(envelope(started("a"), 3)))
    assert isinstance(event, ActionReceived)
    built = ActionReceived(channel=CHAT, received=Received(
        kind=ReceiveKind.FOREIGN, envelope=envelope(started("a"), 3)))
    assert event == built
    assert repr(event) == repr(built)
    assert hash(event.received.kind) == hash(built.received.kind)


def test_put_many_is_put_of_each() -> None:
    rng = random.Random(7)
    for _ in range(50):
        size = rng.randrange(1, 8)
        one, many = EventStream(size), EventStream(size)
        for _ in range(rng.randrange(1, 6)):
            events: list[Any] = [EventsDropped(count=rng.randrange(100))
                                 for _ in range(rng.randrange(0, 12))]
            for event in events:
                one._put(event)
            many._put_many(events)
            assert list(many._buffer) == list(one._buffer)
            assert (many._lost, many.dropped) == (one._lost, one.dropped)


# -- the frame reader, on its own --------------------------------------------------------------


def frame(payload: bytes, opcode: int = 1, *, fin: bool = True, rsv: int = 0,
          mask: bool = False) -> bytes:
    first = (0x80 if fin else 0) | rsv | opcode
    size = len(payload)
    bit = 0x80 if mask else 0
    if size < 126:
        head = bytes((first, bit | size))
    elif size < 65536:
        head = bytes((first, bit | 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((first, bit | 127)) + size.to_bytes(8, "big")
    if mask:
        key = b"\x01\x02\x03\x04"
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        head += key
    return head + payload


class FakeConnection:
    """What the reader hands on, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def data_received(self, data: bytes) -> None:
        self.calls.append(("data", bytes(data)))

    def eof_received(self) -> None:
        self.calls.append(("eof", None))

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.append(("lost", exc))

    def pause_writing(self) -> None:
        self.calls.append(("pause_writing", None))

    def resume_writing(self) -> None:
        self.calls.append(("resume_writing", None))

    def handed(self) -> bytes:
        return b"".join(cast("bytes", data) for kind, data in self.calls if kind == "data")


class FakeSocket:
    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0
        self.resumes = 0

    def pause_reading(self) -> None:
        assert not self.paused
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        assert self.paused
        self.paused = False
        self.resumes += 1


def reader(max_size: int | None = 1 << 20) -> tuple[_FrameReader, FakeConnection, FakeSocket]:
    ws, sock = FakeConnection(), FakeSocket()
    return _FrameReader(cast("Any", ws), cast("Any", sock), max_size), ws, sock


def feed(frames: _FrameReader, data: bytes, sizes: Sequence[int]) -> None:
    at = 0
    n = 0
    while at < len(data):
        size = sizes[n % len(sizes)]
        frames.data_received(data[at:at + size])
        at += size
        n += 1


def take_all(frames: _FrameReader) -> list[bytes]:
    out: list[bytes] = []
    while frames.queue:
        out.extend(frames.take(3))
    return out


PAYLOADS = [b"", b"{}", b"a" * 125, b"b" * 126, b"c" * 65535, b"d" * 65536, b"e" * 70_000,
            "é🙂".encode()]


@pytest.mark.parametrize("sizes", [[1], [2, 3], [7], [125, 1], [4096], [1 << 20]])
def test_frames_of_every_length_split_however_they_come(sizes: list[int]) -> None:
    frames, ws, sock = reader()
    feed(frames, b"".join(frame(p) for p in PAYLOADS), sizes)
    assert take_all(frames) == PAYLOADS
    assert ws.calls == [] and not frames.passthrough
    assert frames._queued == 0 and not sock.paused


def test_pings_and_pongs_go_to_websockets_whole_in_their_place() -> None:
    frames, ws, _ = reader()
    ping, pong = frame(b"p1", 9), frame(b"", 10)
    feed(frames, frame(b"A") + ping + frame(b"B" * 300) + pong + frame(b"C"), [1])
    assert ws.calls == [("data", ping), ("data", pong)]
    assert take_all(frames) == [b"A", b"B" * 300, b"C"]
    assert not frames.passthrough


@pytest.mark.parametrize("odd", [
    frame(b"\x03\xe8bye", 8),  # a close
    frame(b"part", 1, fin=False) + frame(b"rest", 0),  # a fragmented message
    frame(b"x", 0),  # a continuation out of place
    frame(b"masked", 1, mask=True),
    frame(b"compressed?", 1, rsv=0x40),
    frame(b"x" * 126, 9),  # a ping too long to be one
    frame(b"x", 9, fin=False),  # a fragmented ping
    frame(b"x", 3),  # a reserved opcode
])
def test_anything_else_hands_websockets_the_rest(odd: bytes) -> None:
    frames, ws, _ = reader()
    after = frame(b"later") + frame(b"ping?", 9)
    feed(frames, frame(b"A") + frame(b"B") + odd + after, [5])
    assert frames.passthrough
    assert take_all(frames) == [b"A", b"B"]
    assert ws.handed() == odd + after  # exactly as it came, nothing lost or repeated


def test_an_oversized_frame_is_handed_over_at_its_header() -> None:
    frames, ws, _ = reader(max_size=1000)
    big = frame(b"x" * 1001)
    frames.data_received(frame(b"ok") + big[:10])  # the payload has not come yet
    assert frames.passthrough
    assert ws.handed() == big[:10]
    frames.data_received(big[10:])
    assert ws.handed() == big
    assert take_all(frames) == [b"ok"]


def test_no_limit() -> None:
    frames, _, _ = reader(max_size=None)
    feed(frames, frame(b"z" * 200_000), [65536])
    assert take_all(frames) == [b"z" * 200_000]


def test_text_and_binary_as_websockets_gives_them() -> None:
    frames, _, _ = reader()
    feed(frames, frame("é".encode()) + frame(b"\x00\xff", 2) + frame(b"t"), [3])
    assert frames.pop() == "é"
    assert frames.pop() == b"\x00\xff"
    assert frames.pop() == "t"
    feed(frames, frame(b"\x00\xff", 2) + frame("é".encode()), [64])
    taken = frames.take(10)
    assert taken == [b"\x00\xff", "é".encode()]
    assert [type(item) for item in taken] == [bytes, bytes]
    assert frames._queued == 0


def test_text_that_is_not_utf8_raises_where_websockets_raises() -> None:
    frames, _, _ = reader()
    bad = b"\xff\xfe"
    feed(frames, frame(b"A") + frame(bad) + frame(b"B"), [100])
    assert frames.take(10) == [b"A"]
    with pytest.raises(UnicodeDecodeError):
        frames.take(10)
    assert frames.take(10) == [b"B"]
    feed(frames, frame(bad), [100])
    with pytest.raises(UnicodeDecodeError):
        frames.pop()
    assert frames._queued == 0


def test_what_it_holds_is_bounded() -> None:
    frames, _, sock = reader()
    message = frame(b"m" * 1000)
    for _ in range(1100):  # over a megabyte
        frames.data_received(message)
    assert (sock.paused, sock.pauses) == (True, 1)
    while frames.queue:
        frames.take(100)
        if frames._queued > 300_000:
            assert sock.paused
    assert (sock.paused, sock.resumes) == (False, 1)
    assert frames._queued == 0


def test_the_end_of_the_stream_hands_over_what_is_partial() -> None:
    frames, ws, _ = reader()
    second = frame(b"B" * 500)
    frames.data_received(frame(b"A") + second[:100])
    frames.connection_lost(None)
    assert ws.calls == [("data", second[:100]), ("lost", None)]
    assert frames.passthrough and take_all(frames) == [b"A"]
    frames2, ws2, _ = reader()
    frames2.data_received(frame(b"A")[:1])
    frames2.eof_received()
    assert ws2.calls == [("data", frame(b"A")[:1]), ("eof", None)]


def test_flow_control_of_writing_is_the_connections() -> None:
    frames, ws, _ = reader()
    frames.pause_writing()
    frames.resume_writing()
    assert ws.calls == [("pause_writing", None), ("resume_writing", None)]


class FakeProtocol:
    def __init__(self, parser: Iterator[None]) -> None:
        self.state = type("State", (), {"name": "OPEN"})()
        self.extensions: list[object] = []
        self.reader = type("Reader", (), {"buffer": bytearray()})()
        self.parser = parser
        self.max_size: int | None = 1 << 20


class FakeTransport:
    def __init__(self) -> None:
        self.protocol: object = None

    def get_protocol(self) -> object:
        return self.protocol

    def set_protocol(self, protocol: object) -> None:
        self.protocol = protocol


def at_eof() -> Iterator[None]:
    while True:
        yield


def read_exact() -> Iterator[None]:
    while True:
        yield


def parser(inner: Callable[[], Iterator[None]]) -> Iterator[None]:
    def parse() -> Iterator[None]:
        yield from inner()

    def client_parse() -> Iterator[None]:
        yield from parse()

    generator = client_parse()
    next(generator)
    return generator


def fake_ws(inner: Callable[[], Iterator[None]] = at_eof) -> Any:
    ws = FakeConnection()
    transport = FakeTransport()
    transport.protocol = ws
    ws.transport = transport  # type: ignore[attr-defined]
    ws.protocol = FakeProtocol(parser(inner))  # type: ignore[attr-defined]
    ws.recv_messages = type("Assembler", (), {"frames": []})()  # type: ignore[attr-defined]
    return ws


def test_install_takes_over_only_at_a_frame_boundary() -> None:
    ws = fake_ws()
    installed = _FrameReader.install(ws, 100)
    assert installed is not None and ws.transport.protocol is installed
    refusals: list[Callable[[Any], None]] = [
        lambda ws: setattr(ws.protocol, "parser", parser(read_exact)),  # in a frame
        lambda ws: ws.protocol.reader.buffer.extend(b"\x81"),  # part of a frame buffered
        lambda ws: ws.recv_messages.frames.append(object()),  # a message not read yet
        lambda ws: ws.protocol.extensions.append(object()),  # compression
        lambda ws: setattr(ws.protocol.state, "name", "CLOSING"),
        lambda ws: setattr(ws.transport, "protocol", object()),  # someone else's
        lambda ws: delattr(ws, "recv_messages"),  # another websockets
    ]
    for refuse in refusals:
        ws = fake_ws()
        refuse(ws)
        assert _FrameReader.install(ws, 100) is None
        assert ws.transport.protocol is not None and not isinstance(
            ws.transport.protocol, _FrameReader)


@pytest.mark.parametrize(("ours", "theirs", "limit"), [
    (100, {"max_size": 50}, 50),
    (100, {"max_size": None}, 100),
    (None, {"max_size": None}, None),
    (None, {"max_message_size": 70, "max_fragment_size": None}, 70),
    (100, {"max_message_size": None, "max_fragment_size": 30}, 30),
])
def test_the_reader_holds_frames_to_the_tightest_limit(
    ours: int | None, theirs: dict[str, int | None], limit: int | None
) -> None:
    ws = fake_ws()
    del ws.protocol.max_size
    for name, value in theirs.items():
        setattr(ws.protocol, name, value)
    installed = _FrameReader.install(ws, ours)
    assert installed is not None
    if limit is None:
        installed.data_received(frame(b"x" * 100_000))
        assert take_all(installed) == [b"x" * 100_000]
    else:
        installed.data_received(frame(b"x" * limit) + frame(b"y" * (limit + 1)))
        assert take_all(installed) == [b"x" * limit]
        assert installed.passthrough


# -- over real sockets -------------------------------------------------------------------------


def run(coro: Any, timeout: float = 30.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


TLS = Path(__file__).parent / "data" / "tls"


@contextlib.asynccontextmanager
async def ws_server(handler: Callable[[Any], Any], *, compression: str | None = None,
                    tls: bool = False) -> AsyncIterator[str]:
    pytest.importorskip("websockets")
    from websockets.asyncio.server import serve

    context = None
    if tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(TLS / "cert.pem", TLS / "key.pem")
    server = await serve(handler, "127.0.0.1", 0, ping_interval=None, compression=compression,
                         ssl=context)
    port = next(iter(server.sockets)).getsockname()[1]
    try:
        yield f"{'wss' if tls else 'ws'}://127.0.0.1:{port}"
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), 10)


async def read_until_closed(transport: WebSocketTransport, batch: bool) -> tuple[list[Any], str]:
    got: list[Any] = []
    try:
        while True:
            if batch:
                got.extend(await transport.receive_batch(7))
            else:
                got.append(await transport.receive())
    except TransportClosed as e:
        return got, e.reason


@pytest.mark.parametrize(("batch", "tls"), [(False, False), (True, False), (True, True)])
def test_websockets_still_answers_pings_assembles_fragments_and_closes(batch: bool, tls: bool
                                                                      ) -> None:
    async def body() -> None:
        pongs: list[float] = []

        async def handler(ws: Any) -> None:
            await ws.recv()
            for n in range(300):
                await ws.send(json.dumps({"n": n}))
            pongs.append(await asyncio.wait_for(await ws.ping(), 5))  # the client answers
            await ws.send([f"frag{n}" for n in range(5)])  # one message in five frames
            for n in range(300, 600):
                await ws.send(json.dumps({"n": n}))
            await ws.send(b"\x01binary")
            await ws.close(4000, "done here")

        async with ws_server(handler, tls=tls) as url:
            trusted = ssl.create_default_context(cafile=str(TLS / "cert.pem")) if tls else None
            transport = await open_websocket(url, ping_interval=None, ssl=trusted)
            assert transport._frames is not None  # reading frames itself
            await transport.send(b"go")
            got, reason = await read_until_closed(transport, batch)
            await transport.close()
        texts = [item.decode() if isinstance(item, bytes) and item.startswith(b"{") else item
                 for item in got]
        assert texts[:300] == [json.dumps({"n": n}) for n in range(300)]
        assert texts[300] in ("frag0frag1frag2frag3frag4", b"frag0frag1frag2frag3frag4")
        assert texts[301:601] == [json.dumps({"n": n}) for n in range(300, 600)]
        assert texts[601:] == [b"\x01binary"]
        assert reason == "the host closed the connection (4000 done here)"
        assert len(pongs) == 1

    run(body())


def test_keepalive_pongs_reach_websockets() -> None:
    async def body() -> None:
        async def handler(ws: Any) -> None:
            await ws.recv()
            for n in range(100):  # a second: pings every 50 ms, pongs in time or it fails
                await ws.send(f'"{n}"')
                await asyncio.sleep(0.01)
            await ws.close()

        async with ws_server(handler) as url:
            # pings every 50 ms, each failing the connection unless its pong comes in 50 ms
            transport = await open_websocket(url, ping_interval=0.05, ping_timeout=0.5)
            assert transport._frames is not None
            await transport.send(b"go")
            got, reason = await read_until_closed(transport, True)
            await transport.close()
        assert got == [f'"{n}"'.encode() for n in range(100)]
        assert reason == "the host closed the connection (1000)"

    run(body())


def test_an_oversized_message_fails_the_connection_as_before() -> None:
    async def body() -> None:
        async def handler(ws: Any) -> None:
            await ws.recv()
            await ws.send('"small"')
            await ws.send('"' + "x" * 2000 + '"')
            await asyncio.sleep(5)

        async with ws_server(handler) as url:
            transport = await open_websocket(url, ping_interval=None, max_message_size=1000)
            assert transport._frames is not None
            await transport.send(b"go")
            got, reason = await read_until_closed(transport, True)
            await transport.close()
        assert got == [b'"small"']
        assert "1009" in reason

    run(body())


def test_a_host_that_speaks_first_is_read_by_websockets_when_it_must() -> None:
    async def body() -> None:
        async def handler(ws: Any) -> None:
            for n in range(20):
                await ws.send(f'"{n}"')
            await ws.close()

        async with ws_server(handler) as url:
            transport = await open_websocket(url, ping_interval=None)
            got, _ = await read_until_closed(transport, True)
            await transport.close()
        # whether the reader took over (at a frame boundary) or not, nothing is lost
        assert [g.encode() if isinstance(g, str) else g for g in got] == [
            f'"{n}"'.encode() for n in range(20)]

    run(body())


def test_compressed_connections_are_websockets_to_read() -> None:
    async def body() -> None:
        async def handler(ws: Any) -> None:
            for n in range(20):
                await ws.send(f'"{n}"')
            await ws.close()

        async with ws_server(handler, compression="deflate") as url:
            transport = await open_websocket(url, ping_interval=None)
            assert transport._frames is None
            got, _ = await read_until_closed(transport, True)
            await transport.close()
        assert got == [f'"{n}"' for n in range(20)]

    run(body())


def test_a_client_reads_a_long_stream_to_the_hosts_state() -> None:
    from agenthost_protocol.aio.client import connect
    from agenthost_protocol.aio.server import HostServer, ServerLimits
    from agenthost_protocol.aio.websocket import serve_websocket
    from agenthost_protocol.host import Host

    async def body() -> None:
        host = Host(clock=clock, root=t.RootState(agents=()))
        host.add_channel(CHAT, chat_state())
        host.dispatch(CHAT, started("a"))
        host.dispatch(CHAT, markdown("a", "m"))
        server = HostServer(host, limits=ServerLimits(compression="none"))
        endpoint = await serve_websocket(server, "127.0.0.1", 0, ping_interval=None)
        try:
            async with connect(endpoint.url, reconnect=False, ping_interval=None,
                               clock=clock) as client:
                transport = client.transport
                assert isinstance(transport, WebSocketTransport) and transport._frames
                await client.initialize()
                # every action apart (the client's default lets the host merge deltas)
                snapshot = await client.subscribe(
                    CHAT, delivery=t.SubscriptionDeliveryOptions(max_latency_ms=0))
                assert snapshot is not None
                stream = client.events(buffer=10_000)
                for n in range(3000):
                    host.dispatch(CHAT, t.ChatDeltaAction(turn_id="a", part_id="m",
                                                          content=f"{n},"))
                    if n % 7 == 0:
                        server.flush()
                    if n % 500 == 0:
                        await asyncio.sleep(0)
                    if n == 1500:  # one of ours, in the middle
                        handle = await client.dispatch(CHAT, draft("mine"))
                host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id="a", duration=5))
                server.flush()
                await handle.wait(10)
                await client.wait_for_state(
                    CHAT, lambda s: isinstance(s, t.ChatState) and s.active_turn is None,
                    confirmed=True, timeout=10)
                assert client.confirmed(CHAT) == host.state(CHAT)
                seqs: list[int] = []
                kinds: list[ReceiveKind] = []
                while len(seqs) < 3002:
                    event = await stream.next(5)
                    if isinstance(event, ActionReceived):
                        seqs.append(event.received.envelope.server_seq)
                        kinds.append(event.received.kind)
                assert seqs == list(range(snapshot.from_seq + 1, snapshot.from_seq + 3003))
                assert kinds.count(ReceiveKind.ECHO) == 1
                state = client.confirmed(CHAT)
                assert isinstance(state, t.ChatState)
                assert state.turns[-1].response_parts[0].content == "".join(  # type: ignore[union-attr]
                    f"{n}," for n in range(3000))
        finally:
            await endpoint.close()

    run(body(), 60)
