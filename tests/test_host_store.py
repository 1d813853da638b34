"""Issue 20: a host with a store keeps everything across a restart (sans-I/O).

Mostly on the in-memory model of a store, so every interleaving is the
test's and runs in microseconds; the restart and the failing disk also on
the real SQLite store.  ``test_serve_store.py`` does it to ``serve``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.client import (
    ActionReceived,
    ClientConnection,
    Initialized,
    Reconnected,
    RequestFailed,
)
from agenthost_protocol.host import Host, RequestReceived, StoreFailed
from agenthost_protocol.host.store import ChannelRecord, HostStore, MemoryStore
from agenthost_protocol.methods import CREATE_CHAT
from agenthost_protocol.sqlite_store import SQLiteStore
from agenthost_protocol.testing.network import Link, Network

NOW = 1_767_225_600_000
ROOT = "ahp-root://"
USER = t.MessageOrigin(kind=t.MessageKind.USER)


class Clock:
    """A clock that moves on every read: modifiedAt differs per action."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        self.now += 7
        return self.now


class Steps(Clock):
    """A clock the test moves."""

    def __call__(self) -> int:
        return self.now


def new_host(store: HostStore | None, clock: Clock, **kw: object) -> Host:
    return Host(clock=clock, store=store, root=t.RootState(agents=()), **kw)  # type: ignore[arg-type]


def session(host: Host, n: int) -> tuple[str, str]:
    uri, chat = f"ahp-session:/s{n}", f"ahp-chat:/s{n}/c"
    host.create_session(uri, provider="demo", title=f"session {n}")
    host.ready_session(uri, default_chat=chat)
    return uri, chat


def turn(host: Host, chat: str, turn_id: str, words: list[str]) -> None:
    host.dispatch(chat, t.ChatTurnStartedAction(
        turn_id=turn_id, started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text="hi", origin=USER)))
    host.dispatch(chat, t.ChatResponsePartAction(
        turn_id=turn_id, part=t.MarkdownResponsePart(id=f"{turn_id}-md", content="")))
    for word in words:
        host.dispatch(chat, t.ChatDeltaAction(turn_id=turn_id, part_id=f"{turn_id}-md",
                                              content=word))
    host.dispatch(chat, t.ChatTurnCompleteAction(turn_id=turn_id, duration=5))


def dump(host: Host) -> dict[str, str]:
    """Every stored channel, as JSON (what a byte-equal restore must reproduce)."""
    return {uri: wire.dumps(host.state(uri)) for uri in host.channels}


def join(net: Network, client_id: str, *channels: str, clock: Clock) -> tuple[ClientConnection,
                                                                               Link]:
    client = ClientConnection(client_id, clock=clock)
    link = net.connect(client)
    link.send(client.initialize(initial_subscriptions=channels))
    net.run_until_quiet()
    assert any(isinstance(e, Initialized) for e in link.take_events())
    return client, link


def reconnect_to(host: Host, client: ClientConnection) -> Reconnected:
    """``client`` (disconnected) reconnects to ``host``; its ``Reconnected``."""
    net = Network(host)
    link = net.connect(client)
    link.send(client.reconnect())
    net.run_until_quiet()
    (event,) = [e for e in link.take_events() if isinstance(e, Reconnected)]
    return event


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_restarted_host_has_every_channel_byte_equal_and_continues_the_sequence(
    kind: str, tmp_path: Path,
) -> None:
    clock = Clock()
    path = tmp_path / "host.sqlite3"
    store: HostStore = MemoryStore() if kind == "memory" else SQLiteStore(path)
    host = new_host(store, clock)
    for n in range(3):
        uri, chat = session(host, n)
        turn(host, chat, "t1", ["one ", "two ", "three"])
        host.add_chat(uri, f"{chat}2", title="side")
    host.dispose_chat("ahp-chat:/s1/c2")
    assert host.commit()
    before, seq = dump(host), host.server_seq
    listed = host.list_sessions(t.ListSessionsParams())
    if isinstance(store, SQLiteStore):
        store.close()
        store = SQLiteStore(path)

    again = new_host(store, clock)
    assert again.server_seq == seq
    assert set(again.channels) == set(before)
    # nothing but the root is read until asked for
    assert again._states.loaded == (ROOT,)
    assert again.list_sessions(t.ListSessionsParams()) == listed
    assert again._states.loaded == (ROOT,)
    assert dump(again) == before
    envelope = again.dispatch("ahp-session:/s0", t.SessionTitleChangedAction(title="after"))
    assert envelope.server_seq == seq + 1
    store.close()


def test_a_read_only_sqlite_store_refuses_the_action_and_changes_nothing(
    tmp_path: Path,
) -> None:
    store, clock = SQLiteStore(tmp_path / "host.sqlite3"), Steps()
    host = new_host(store, clock)
    uri, _ = session(host, 0)
    net = Network(host)
    a, link = join(net, "a", ROOT, uri, clock=clock)
    before = dump(host)
    store._conn().execute("PRAGMA query_only = ON")  # what a read-only file does to writes
    link.send(a.dispatch(uri, t.SessionTitleChangedAction(title="lost")))
    net.run_until_quiet()
    (event,) = link.take_events()
    assert isinstance(event, ActionReceived)
    rejection = event.received.rejection
    assert rejection is not None and "readonly" in rejection.reason
    assert dump(host) == before
    store._conn().execute("PRAGMA query_only = OFF")
    link.send(a.dispatch(uri, t.SessionTitleChangedAction(title="kept")))
    net.run_until_quiet()
    assert wire.dumps(a.confirmed(uri)) == wire.dumps(host.state(uri))
    store.close()


def test_nothing_is_sent_before_it_is_stored() -> None:
    store, clock = MemoryStore(), Steps()  # clients stamp with their own clock
    host = new_host(store, clock)
    uri, chat = session(host, 0)
    net = Network(host)
    client, link = join(net, "a", ROOT, uri, chat, clock=clock)
    for i in range(20):
        host.dispatch(chat, t.ChatActivityChangedAction(activity=f"t{i}"))
        net.run_until_quiet()
        seqs = [e.received.envelope.server_seq for e in link.take_events()
                if isinstance(e, ActionReceived)]
        assert seqs and all(seq in store.log for seq in seqs)
        assert store.server_seq == host.server_seq
    assert wire.dumps(client.confirmed(chat)) == wire.dumps(host.state(chat))


def test_a_failing_store_refuses_the_client_action_and_changes_nothing() -> None:
    store, clock = MemoryStore(), Steps()  # clients stamp with their own clock
    host = new_host(store, clock)
    uri, chat = session(host, 0)
    net = Network(host)
    a, link_a = join(net, "a", ROOT, uri, chat, clock=clock)
    b, link_b = join(net, "b", ROOT, uri, chat, clock=clock)
    before, seq = dump(host), host.server_seq
    store.fail = "database or disk is full"
    link_a.send(a.dispatch(uri, t.SessionTitleChangedAction(title="lost")))
    net.run_until_quiet()
    assert dump(host) == before
    (event,) = link_a.take_events()
    assert isinstance(event, ActionReceived)
    rejection = event.received.rejection
    assert rejection is not None and "disk is full" in rejection.reason
    assert link_b.take_events() == []  # b never heard of it
    failed = [e for e in host.events() if isinstance(e, StoreFailed)]
    assert failed and failed[0].refused == 1 and "disk is full" in failed[0].message
    assert host.server_seq == seq + 1  # the rejection's
    # the disk is back: the next action goes through, everyone converges
    store.fail = None
    link_a.send(a.dispatch(uri, t.SessionTitleChangedAction(title="kept")))
    net.run_until_quiet()
    for client in (a, b):
        assert wire.dumps(client.confirmed(uri)) == wire.dumps(host.state(uri))
    assert json.loads(wire.dumps(host.state(uri)))["title"] == "kept"
    restarted = new_host(store, clock)
    assert json.loads(wire.dumps(restarted.state(uri)))["title"] == "kept"


def test_a_failing_store_turns_a_state_changing_answer_into_an_error() -> None:
    store, clock = MemoryStore(), Steps()  # clients stamp with their own clock
    host = new_host(store, clock)
    uri, _chat = session(host, 0)
    net = Network(host)
    a, link = join(net, "a", ROOT, uri, clock=clock)
    store.fail = "attempt to write a readonly database"

    def answer(event: object) -> None:
        if isinstance(event, RequestReceived):
            host.answer_create_chat(event)

    _, data = a.request(CREATE_CHAT, t.CreateChatParams(channel=uri, chat="ahp-chat:/s0/new"))
    link.send(data)
    net.run_until_quiet(on_host_event=answer)
    failed = [e for e in link.take_events() if isinstance(e, RequestFailed)]
    error = failed[0].error if failed else None
    assert error is not None and "readonly" in error.message
    assert not host.has_channel("ahp-chat:/s0/new")
    assert wire.dumps(a.confirmed(uri)) == wire.dumps(host.state(uri))


def test_a_client_reconnects_across_a_restart_with_a_replay_from_the_store() -> None:
    store, clock = MemoryStore(), Steps()  # clients stamp with their own clock
    host = new_host(store, clock)
    uri, chat = session(host, 0)
    net = Network(host)
    a, link = join(net, "a", ROOT, uri, chat, clock=clock)
    turn(host, chat, "t1", ["a", "b"])
    net.run_until_quiet()
    link.drop()
    turn(host, chat, "t2", ["c", "d", "e"])  # a misses these
    assert host.commit()

    restarted = new_host(store, clock)
    event = reconnect_to(restarted, a)
    assert event.outcome.kind is t.ReconnectResultType.REPLAY
    for channel in (ROOT, uri, chat):
        assert wire.dumps(a.confirmed(channel)) == wire.dumps(restarted.state(channel))


def test_a_client_too_far_behind_gets_snapshots_after_a_restart() -> None:
    store, clock = MemoryStore(), Steps()  # clients stamp with their own clock
    host = new_host(store, clock, replay_max_envelopes=4)
    uri, chat = session(host, 0)
    net = Network(host)
    a, link = join(net, "a", ROOT, uri, chat, clock=clock)
    link.drop()
    turn(host, chat, "t1", ["x"] * 30)
    assert host.commit()
    restarted = new_host(store, clock, replay_max_envelopes=4)
    event = reconnect_to(restarted, a)
    assert event.outcome.kind is t.ReconnectResultType.SNAPSHOT
    assert wire.dumps(a.confirmed(chat)) == wire.dumps(restarted.state(chat))


def test_chats_nobody_watches_are_unloaded_and_come_back_equal() -> None:
    store, clock = MemoryStore(), Clock()
    host = new_host(store, clock, loaded_channels=4)
    chats = []
    for n in range(10):
        _, chat = session(host, n)
        turn(host, chat, "t1", [f"w{n}"] * 3)
        chats.append(chat)
    before = {chat: wire.dumps(host.state(chat)) for chat in chats}
    assert host.commit()
    assert len(host._states.loaded) <= 4
    for chat in chats:
        assert wire.dumps(host.state(chat)) == before[chat]
        host.commit()
    # a subscribed chat stays in memory
    net = Network(host)
    join(net, "a", chats[0], clock=clock)
    for chat in chats[1:]:
        host.state(chat)
    host.dispatch(chats[1], t.ChatActivityChangedAction(activity="x"))
    assert host.commit()
    assert host._states.is_loaded(chats[0])


def test_stored_content_survives_a_restart() -> None:
    store, clock = MemoryStore(), Clock()
    host = new_host(store, clock)
    uri, chat = session(host, 0)
    ref = host.content.put_text("x" * 300_000, owner=chat)
    assert host.commit()
    restarted = new_host(store, clock)
    read = restarted.content.read(ref.uri, None)
    assert read is not None and read.data == "x" * 300_000
    restarted.dispose_session(uri)
    assert restarted.commit()
    assert restarted.content.read(ref.uri, None) is None


def test_active_clients_from_before_a_restart_get_the_grace_period() -> None:
    store, clock = MemoryStore(), Clock()
    host = new_host(store, clock, active_client_grace_ms=1000)
    uri, _ = session(host, 0)
    host.dispatch(uri, t.SessionActiveClientSetAction(
        active_client=t.SessionActiveClient(client_id="gone", tools=())))
    assert host.commit()
    restarted = new_host(store, clock, active_client_grace_ms=1000)
    state = restarted.state(uri)
    assert isinstance(state, t.SessionState) and state.active_clients
    clock.now += 5000
    restarted.expire_clients()
    state = restarted.state(uri)
    assert isinstance(state, t.SessionState) and not state.active_clients


# -- a property: restarts anywhere change nothing a client can see --

OPS = st.lists(st.one_of(
    st.tuples(st.just("session"), st.integers(0, 3)),
    st.tuples(st.just("turn"), st.integers(0, 3), st.lists(st.text(max_size=3), max_size=4)),
    st.tuples(st.just("title"), st.integers(0, 3), st.text(max_size=5)),
    st.tuples(st.just("chat"), st.integers(0, 3)),
    st.tuples(st.just("dispose"), st.integers(0, 3)),
    st.tuples(st.just("restart"), st.just(0)),
), max_size=25)


def _apply(host: Host, op: tuple[object, ...], turns: list[int]) -> None:
    kind, n = op[0], op[1]
    uri, chat = f"ahp-session:/s{n}", f"ahp-chat:/s{n}/c"
    exists = host.has_channel(uri)
    if kind == "session" and not exists:
        session(host, int(n))  # type: ignore[call-overload]
    elif kind == "turn" and exists and host.has_channel(chat):
        turns[0] += 1
        turn(host, chat, f"t{turns[0]}", list(op[2]))  # type: ignore[call-overload]
    elif kind == "title" and exists:
        host.dispatch(uri, t.SessionTitleChangedAction(title=str(op[2])))
    elif kind == "chat" and exists:
        turns[0] += 1
        host.add_chat(uri, f"ahp-chat:/s{n}/x{turns[0]}")
    elif kind == "dispose" and exists:
        host.dispose_session(uri)


@settings(deadline=None)
@given(ops=OPS, loaded=st.integers(1, 6))
def test_restarts_at_any_point_leave_the_same_state_as_no_restart(
    ops: list[tuple[object, ...]], loaded: int,
) -> None:
    # a clock that moves per operation, not per read: the two hosts read it a
    # different number of times, and must still stamp the same times
    clock = Steps()
    reference = new_host(None, clock)
    store = MemoryStore()
    host = new_host(store, clock, loaded_channels=loaded)
    ref_turns, turns = [0], [0]
    for op in ops:
        clock.now += 7
        if op[0] == "restart":
            host = new_host(store, clock, loaded_channels=loaded)
            continue
        _apply(reference, op, ref_turns)
        _apply(host, op, turns)
        assert host.commit()
    assert dump(host) == dump(reference)
    assert host.server_seq == reference.server_seq
    assert host.list_sessions(t.ListSessionsParams()) == reference.list_sessions(
        t.ListSessionsParams())


def test_the_embedders_root_wins_at_a_restart_and_a_replayed_client_follows() -> None:
    store, clock = MemoryStore(), Steps()
    agent = t.AgentInfo(provider="old", display_name="Old", description="", models=())
    host = Host(clock=clock, store=store, root=t.RootState(agents=(agent,)))
    net = Network(host)
    a, link = join(net, "a", ROOT, clock=clock)
    link.drop()
    new_agent = t.AgentInfo(provider="new", display_name="New", description="", models=())
    restarted = Host(clock=clock, store=store, root=t.RootState(agents=(new_agent,)))
    assert restarted.state(ROOT) == t.RootState(agents=(new_agent,))
    event = reconnect_to(restarted, a)
    assert event.outcome.kind is t.ReconnectResultType.REPLAY
    assert a.confirmed(ROOT) == restarted.state(ROOT)


STEPS = st.lists(st.tuples(
    st.sampled_from(["client-title", "server-title", "turn", "chat", "dispose-chat", "session",
                     "restart"]),
    st.integers(0, 2),
    st.booleans(),  # the disk fails for this step
), max_size=20)


@settings(deadline=None)
@given(steps=STEPS)
def test_memory_and_disk_agree_whatever_fails(steps: list[tuple[str, int, bool]]) -> None:
    """After every step the host's state is what a restart would find, failed
    writes included, and a connected client converges on it."""
    store, clock = MemoryStore(), Steps()
    host = new_host(store, clock)
    session(host, 0)
    assert host.commit()
    net = Network(host)
    client, link = join(net, "a", ROOT, "ahp-session:/s0", clock=clock)
    turns = [0]
    for kind, n, fail in steps:
        clock.now += 11
        uri, chat = f"ahp-session:/s{n}", f"ahp-chat:/s{n}"
        store.fail = "database or disk is full" if fail else None
        if kind == "restart":
            store.fail = None
            link.drop()
            host = new_host(store, clock)
            net = Network(host)
            link = net.connect(client)
            link.send(client.reconnect())
        elif kind == "session" and not host.has_channel(uri):
            session(host, n)
        elif not host.has_channel(uri):
            continue
        elif kind == "client-title" and uri == "ahp-session:/s0":
            link.send(client.dispatch(uri, t.SessionTitleChangedAction(title=f"c{clock.now}")))
        elif kind == "server-title":
            host.dispatch(uri, t.SessionTitleChangedAction(title=f"s{clock.now}"))
        elif kind == "turn" and host.has_channel(chat):
            turns[0] += 1
            turn(host, chat, f"t{turns[0]}", ["x", "y"])
        elif kind == "chat":
            turns[0] += 1
            host.add_chat(uri, f"{chat}/x{turns[0]}")
        elif kind == "dispose-chat":
            extra = [c for c in host.chats_of(uri) if c != chat]
            if extra:
                host.dispose_chat(extra[0])
        net.run_until_quiet()
        store.fail = None
        assert host.commit(retry=True)  # what was sent while the disk failed, too
        net.run_until_quiet()
        disk = new_host(store, clock)
        assert dump(disk) == dump(host)
        assert disk.server_seq == host.server_seq
        for channel in (ROOT, "ahp-session:/s0"):
            assert wire.dumps(client.confirmed(channel)) == wire.dumps(host.state(channel))


def test_a_chat_nobody_watches_is_unloaded_once_idle_and_one_in_use_is_kept() -> None:
    store, clock = MemoryStore(), Steps()
    host = new_host(store, clock, unload_after_ms=10_000)
    chats = [session(host, n)[1] for n in range(4)]
    assert host.commit()
    clock.now += 20_000
    for i in range(70):  # the sweep comes every 64 commits; chats[0] stays in use
        host.dispatch(chats[0], t.ChatActivityChangedAction(activity=f"a{i}"))
        assert host.commit()
    assert host._states.is_loaded(chats[0])
    assert not any(host._states.is_loaded(chat) for chat in chats[1:])
    state = host.state(chats[1])  # read again from the store when needed
    assert isinstance(state, t.ChatState)


def test_a_corrupt_stored_channel_reads_as_absent_and_breaks_nothing_else() -> None:
    store, clock = MemoryStore(), Steps()
    host = new_host(store, clock)
    uri, chat = session(host, 0)
    assert host.commit()
    record = store.channels[chat]
    store.channels[chat] = ChannelRecord(uri=chat, state=b'{"resource": 12', seq=record.seq)
    restarted = new_host(store, clock)
    net = Network(restarted)
    client = ClientConnection("a", clock=clock)
    link = net.connect(client)
    link.send(client.initialize(initial_subscriptions=(ROOT, uri)))
    net.run_until_quiet()
    link.send(client.subscribe(chat))
    net.run_until_quiet()
    failed = [e for e in link.take_events() if isinstance(e, RequestFailed)]
    assert failed and failed[0].error is not None and failed[0].error.code == -32008
    assert any(isinstance(e, StoreFailed) and chat in e.message for e in restarted.events())
    assert isinstance(client.confirmed(uri), t.SessionState)  # the rest is served
    assert not restarted.has_channel(chat)


def test_a_client_forgotten_for_age_stays_forgotten_after_a_restart() -> None:
    store, clock = MemoryStore(), Steps()
    host = new_host(store, clock, remembered_clients_max_age_ms=1000)
    net = Network(host)
    _, link = join(net, "a", ROOT, clock=clock)
    link.drop()
    net.run_until_quiet()
    assert host.commit() and host.remembered_version("a") == "0.7.0"
    assert new_host(store, clock).remembered_version("a") == "0.7.0"
    clock.now += 5000
    host.expire_clients()
    assert host.commit()
    clock.now -= 5000  # a restart with the clock where it was: only the store can tell
    assert new_host(store, clock).remembered_version("a") is None
