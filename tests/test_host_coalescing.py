"""Issue 21: delta coalescing for subscriptions with ``delivery.maxLatencyMs`` (sans-I/O).

The host merges consecutive ``chat/delta`` / ``chat/reasoning`` actions of
one part for a client that allows a window, and the merged action must
reduce to exactly the state the separate ones give: the property test runs
random streams through a coalescing client and a plain one, and both must
end where the host is.  The rest pins the rules: nothing is reordered, a
newcomer never gets what its snapshot holds, a failed commit takes merged
parts back, a reconnect keeps the window.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.client import ClientConnection
from agenthost_protocol.host import Host, HostLimits
from agenthost_protocol.host.store import MemoryStore
from agenthost_protocol.testing.network import Link, Network

NOW = 1_767_225_600_000
CHAT = "ahp-chat:/s/c"
USER = t.MessageOrigin(kind=t.MessageKind.USER)
FOREVER = 2**62


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def new_host(clock: Clock, **kw: object) -> Host:
    host = Host(clock=clock, root=t.RootState(agents=()), **kw)  # type: ignore[arg-type]
    host.create_session("ahp-session:/s", provider="demo", title="s")
    host.ready_session("ahp-session:/s", default_chat=CHAT)
    return host


def start_turn(host: Host, turn: str = "t1") -> None:
    host.dispatch(CHAT, t.ChatTurnStartedAction(
        turn_id=turn, started_at="2026-01-01T00:00:00.000Z",
        message=t.Message(text="hi", origin=USER)))
    host.dispatch(CHAT, t.ChatResponsePartAction(
        turn_id=turn, part=t.MarkdownResponsePart(id="md", content="")))
    host.dispatch(CHAT, t.ChatResponsePartAction(
        turn_id=turn, part=t.ReasoningResponsePart(id="rs", content="")))


def delta(text: str, part: str = "md", turn: str = "t1") -> t.ChatDeltaAction:
    return t.ChatDeltaAction(turn_id=turn, part_id=part, content=text)


def join(net: Network, name: str, window: int | None, clock: Clock) -> tuple[ClientConnection,
                                                                              Link]:
    client = ClientConnection(name, clock=clock)
    link = net.connect(client)
    link.send(client.initialize())
    net.run_until_quiet()
    delivery = None if window is None else t.SubscriptionDeliveryOptions(max_latency_ms=window)
    link.send(client.subscribe(CHAT, delivery=delivery))
    net.run_until_quiet()
    link.take_events()
    return client, link


def frames(link: Link) -> list[dict[str, object]]:
    """What the host queued for ``link`` (taken off it, not delivered)."""
    out = [json.loads(data) for data in link.connection.data_to_send()]
    link.to_client.clear()
    return out


def actions(messages: list[dict[str, object]]) -> list[tuple[int, str, str]]:
    found = []
    for message in messages:
        if message.get("method") == "action":
            params = message["params"]
            assert isinstance(params, dict)
            action = params["action"]
            found.append((params["serverSeq"], action["type"], action.get("content")))
    return found


def test_a_windowed_client_gets_a_burst_as_one_delta_and_a_plain_one_gets_each() -> None:
    clock = Clock()
    host = new_host(clock)
    start_turn(host)
    net = Network(host)
    _, windowed = join(net, "w", 50, clock)
    _, plain = join(net, "p", None, clock)
    first = host.server_seq
    for word in ("one ", "two ", "three"):
        host.dispatch(CHAT, delta(word))
    assert actions(frames(windowed)) == []  # held
    assert [a[2] for a in actions(frames(plain))] == ["one ", "two ", "three"]
    assert host.next_delivery() == NOW + 50
    clock.now += 49
    host.deliver_due()
    assert actions(frames(windowed)) == []
    clock.now += 1
    host.deliver_due()
    assert actions(frames(windowed)) == [(first + 3, "chat/delta", "one two three")]
    assert host.next_delivery() is None


def test_anything_else_for_the_client_releases_what_is_held_first() -> None:
    clock = Clock()
    host = new_host(clock)
    start_turn(host)
    net = Network(host)
    client, link = join(net, "w", 1000, clock)
    host.dispatch(CHAT, delta("a"))
    host.dispatch(CHAT, delta("b"))
    link.connection.receive_data(client.ping())
    out = frames(link)
    assert actions(out) == [(host.server_seq, "chat/delta", "ab")]
    assert out[-1].get("result", "absent") is None  # the ping's answer, after the deltas
    # another part, another action, a reasoning delta: each ends the merge before it
    host.dispatch(CHAT, delta("c"))
    host.dispatch(CHAT, t.ChatReasoningAction(turn_id="t1", part_id="rs", content="r1"))
    host.dispatch(CHAT, t.ChatReasoningAction(turn_id="t1", part_id="rs", content="r2"))
    host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id="t1", duration=1))
    got = actions(frames(link))
    assert [(kind, text) for _, kind, text in got] == [
        ("chat/delta", "c"), ("chat/reasoning", "r1r2"), ("chat/turnComplete", None)]


def test_a_delta_with_meta_is_never_merged() -> None:
    clock = Clock()
    host = new_host(clock)
    start_turn(host)
    net = Network(host)
    _, link = join(net, "w", 1000, clock)
    host.dispatch(CHAT, delta("a"))
    host.dispatch(CHAT, t.ChatDeltaAction(turn_id="t1", part_id="md", content="b",
                                          meta={"agent": "sub"}))
    host.dispatch(CHAT, delta("c"))
    host.deliver_due(until=FOREVER)
    assert [a[2] for a in actions(frames(link))] == ["a", "b", "c"]


def test_a_newcomer_never_gets_the_deltas_its_snapshot_holds() -> None:
    clock = Clock()
    host = new_host(clock)
    start_turn(host)
    net = Network(host)
    first, _ = join(net, "first", 100, clock)
    host.dispatch(CHAT, delta("held "))
    late, _ = join(net, "late", 100, clock)
    host.dispatch(CHAT, delta("after"))
    clock.now += 100
    host.deliver_due()
    net.run_until_quiet()
    for client in (first, late):
        assert wire.dumps(client.state(CHAT)) == wire.dumps(host.state(CHAT))


def test_unsubscribing_and_closing_release_what_is_held() -> None:
    clock = Clock()
    host = new_host(clock)
    start_turn(host)
    net = Network(host)
    client, link = join(net, "a", 1000, clock)
    _, other = join(net, "b", 1000, clock)
    host.dispatch(CHAT, delta("x"))
    link.connection.receive_data(client.unsubscribe(CHAT))
    assert [a[2] for a in actions(frames(other))] == ["x"]  # released for every member
    host.dispatch(CHAT, delta("y"))
    assert actions(frames(other)) == []
    other.connection.close("bye")
    assert [a[2] for a in actions(frames(other))] == ["y"]  # sent before the close
    assert host.next_delivery() is None


def test_the_window_is_cut_to_the_hosts_limit_and_zero_means_none() -> None:
    clock = Clock()
    host = new_host(clock, limits=HostLimits(max_delivery_latency_ms=20))
    start_turn(host)
    net = Network(host)
    _, link = join(net, "w", 10_000, clock)
    _, zero = join(net, "z", 0, clock)
    host.dispatch(CHAT, delta("a"))
    assert host.next_delivery() == NOW + 20
    assert [a[2] for a in actions(frames(zero))] == ["a"]
    clock.now += 20
    host.deliver_due()
    assert [a[2] for a in actions(frames(link))] == ["a"]


def test_a_reconnect_keeps_the_window() -> None:
    clock = Clock()
    host = new_host(clock)
    start_turn(host)
    net = Network(host)
    client, link = join(net, "w", 100, clock)
    link.drop()
    link = net.reconnect(client)
    net.run_until_quiet()
    host.dispatch(CHAT, delta("a"))
    host.dispatch(CHAT, delta("b"))
    assert actions(frames(link)) == []
    host.deliver_due(until=FOREVER)
    assert [a[2] for a in actions(frames(link))] == ["ab"]


def test_a_failed_commit_takes_back_the_parts_of_a_merged_delta() -> None:
    clock = Clock()
    store = MemoryStore()
    host = new_host(clock, store=store)
    start_turn(host)
    net = Network(host)
    client, link = join(net, "w", 1000, clock)
    host.dispatch(CHAT, delta("kept "))
    assert host.commit()
    host.dispatch(CHAT, delta("lost "))
    host.dispatch(CHAT, delta("lost"))
    link.connection.receive_data(client.ping())  # releases the merge of all three
    store.fail = "disk full"
    out = frames(link)  # commits first: fails, and takes back the last two
    assert [a[2] for a in actions(out)] == ["kept "]
    assert host.state(CHAT).active_turn.response_parts[0].content == "kept "  # type: ignore[union-attr]


def test_a_failed_commit_forgets_held_parts() -> None:
    clock = Clock()
    store = MemoryStore()
    host = new_host(clock, store=store)
    start_turn(host)
    net = Network(host)
    _, link = join(net, "w", 1000, clock)
    host.dispatch(CHAT, delta("kept "))
    assert host.commit()
    host.dispatch(CHAT, delta("lost"))
    store.fail = "disk full"
    assert not host.commit()
    store.fail = None
    host.deliver_due(until=FOREVER)
    assert [a[2] for a in actions(frames(link))] == ["kept "]


# -- the property: merged or not, every client ends where the host is ---------------------

_STEP = st.one_of(
    st.tuples(st.just("delta"), st.sampled_from(["md", "rs", "gone"]), st.text(max_size=4)),
    st.tuples(st.just("reasoning"), st.sampled_from(["md", "rs"]), st.text(max_size=4)),
    st.tuples(st.just("part"), st.sampled_from(["md2", "rs2"]), st.just("")),
    st.tuples(st.just("tick"), st.just(""), st.integers(0, 60).map(str)),
    st.tuples(st.just("ping"), st.just(""), st.just("")),
    st.tuples(st.just("title"), st.just(""), st.text(min_size=1, max_size=3)),
    st.tuples(st.just("turn"), st.just(""), st.just("")),
)


@settings(deadline=None)
@given(steps=st.lists(_STEP, max_size=60), windows=st.lists(
    st.sampled_from([None, 0, 10, 50]), min_size=1, max_size=3))
def test_coalesced_and_plain_clients_reduce_to_the_hosts_state(
    steps: list[tuple[str, str, str]], windows: list[int | None],
) -> None:
    clock = Clock()
    host = new_host(clock)
    start_turn(host)
    net = Network(host)
    clients = [join(net, f"c{n}", window, clock) for n, window in enumerate(windows)]
    turn = 1
    for kind, part, text in steps:
        turn_id = f"t{turn}"
        if kind == "delta":
            host.dispatch(CHAT, delta(text, part, turn_id))
        elif kind == "reasoning":
            host.dispatch(CHAT, t.ChatReasoningAction(turn_id=turn_id, part_id=part,
                                                      content=text))
        elif kind == "part":
            made = (t.MarkdownResponsePart(id=part, content="") if part == "md2"
                    else t.ReasoningResponsePart(id=part, content=""))
            host.dispatch(CHAT, t.ChatResponsePartAction(turn_id=turn_id, part=made))
        elif kind == "tick":
            clock.now += int(text)
            host.deliver_due()
        elif kind == "ping":
            client, link = clients[0]
            link.send(client.ping())
        elif kind == "title":
            host.dispatch(CHAT, t.ChatActivityChangedAction(activity=text))
        else:
            host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id=turn_id, duration=1))
            turn += 1
            start_turn(host, f"t{turn}")
        net.run_until_quiet()
    host.deliver_due(until=FOREVER)
    net.run_until_quiet()
    expected = wire.dumps(host.state(CHAT))
    for client, _ in clients:
        assert wire.dumps(client.state(CHAT)) == expected
    assert host.next_delivery() is None
