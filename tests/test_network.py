"""The in-memory network: a real host and real clients, converging without sockets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.client import (
    ActionReceived,
    ClientConnection,
    ClientState,
    Event,
    FailureReason,
    Initialized,
    Reconnected,
    RequestFailed,
    ResponseReceived,
    ServerRequestReceived,
)
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.host import Event as HostEvent
from agenthost_protocol.host import Host, RequestReceived
from agenthost_protocol.host import ResponseReceived as HostResponseReceived
from agenthost_protocol.reconciler import ReceiveKind
from agenthost_protocol.testing.network import Link, Network

NOW = 1_767_225_600_000
ROOT = "ahp-root://"
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/c1"
CHANNELS = (ROOT, SESSION, CHAT)


def clock() -> int:
    return NOW


def make_host(replay_max_envelopes: int = 10_000) -> Host:
    host = Host(clock=clock, replay_max_envelopes=replay_max_envelopes)
    host.create_session(SESSION, provider="test", title="untitled")
    host.ready_session(SESSION, default_chat=CHAT)
    return host


def join(net: Network, client_id: str) -> tuple[ClientConnection, Link]:
    client = ClientConnection(client_id, clock=clock)
    link = net.connect(client)
    link.send(client.initialize(initial_subscriptions=CHANNELS))
    net.run_until_quiet()
    (event,) = link.take_events()
    assert isinstance(event, Initialized)
    return client, link


def assert_converged(host: Host, *clients: ClientConnection) -> None:
    for channel in CHANNELS:
        expected = wire.dumps(host.state(channel))
        for client in clients:
            assert wire.dumps(client.confirmed(channel)) == expected, (client.client_id, channel)
            assert client.reconciler.pending(channel) == ()


def title(client: ClientConnection) -> str:
    state = client.optimistic(SESSION)
    assert isinstance(state, t.SessionState)
    return state.title


def test_two_clients_and_the_host_converge() -> None:
    host = make_host()
    net = Network(host)
    a, link_a = join(net, "a")
    b, link_b = join(net, "b")
    link_a.send(a.dispatch(SESSION, t.SessionTitleChangedAction(title="from a")))
    link_b.send(b.dispatch(SESSION, t.SessionTitleChangedAction(title="from b")))
    link_b.send(b.dispatch(CHAT, t.ChatDraftChangedAction(draft=None)))
    host.dispatch(SESSION, t.SessionIsReadChangedAction(is_read=True))
    assert title(a) == "from a" and title(b) == "from b"  # optimistic, before delivery
    net.run_until_quiet()
    assert_converged(host, a, b)
    kinds_a = [e.received.kind for e in link_a.take_events() if isinstance(e, ActionReceived)]
    assert ReceiveKind.ECHO in kinds_a and ReceiveKind.FOREIGN in kinds_a
    assert title(a) == title(b)


def test_a_rejected_action_rolls_back_on_its_client_only() -> None:
    host = make_host()
    net = Network(host)
    a, link_a = join(net, "a")
    b, link_b = join(net, "b")
    # no active turn: the host MUST reject a cancellation
    link_a.send(a.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="nope", duration=0)))
    net.run_until_quiet()
    (event,) = link_a.take_events()
    assert isinstance(event, ActionReceived) and event.received.rejection is not None
    assert link_b.take_events() == []
    assert_converged(host, a, b)


def test_a_dropped_client_reconnects_with_a_replay() -> None:
    host = make_host()
    net = Network(host)
    a, link_a = join(net, "a")
    b, link_b = join(net, "b")
    link_a.send(a.dispatch(SESSION, t.SessionTitleChangedAction(title="lost")))
    link_a.drop()  # in flight: never reaches the host
    assert a.connection_state is ClientState.DISCONNECTED
    link_b.send(b.dispatch(SESSION, t.SessionTitleChangedAction(title="while away")))
    net.run_until_quiet()
    link_a = net.reconnect(a)
    net.run_until_quiet()
    (event,) = link_a.take_events()
    assert isinstance(event, Reconnected)
    assert event.outcome.kind is t.ReconnectResultType.REPLAY
    assert [p.action for p in event.outcome.dropped] == [
        t.SessionTitleChangedAction(title="lost")]
    assert_converged(host, a, b)
    assert title(a) == "while away"
    # and the link works again
    link_a.send(a.dispatch(SESSION, t.SessionTitleChangedAction(title="back")))
    net.run_until_quiet()
    assert_converged(host, a, b)
    assert title(b) == "back"


def test_a_long_absence_reconnects_with_snapshots() -> None:
    host = make_host(replay_max_envelopes=1)
    net = Network(host)
    a, link_a = join(net, "a")
    b, link_b = join(net, "b")
    link_a.drop()
    for index in range(3):
        link_b.send(b.dispatch(SESSION, t.SessionTitleChangedAction(title=f"t{index}")))
    net.run_until_quiet()
    link_a = net.reconnect(a)
    net.run_until_quiet()
    (event,) = link_a.take_events()
    assert isinstance(event, Reconnected)
    assert event.outcome.kind is t.ReconnectResultType.SNAPSHOT
    assert_converged(host, a, b)


def test_dropping_fails_pending_requests_on_the_client() -> None:
    host = make_host()
    net = Network(host)
    a, link_a = join(net, "a")
    link_a.send(a.ping())
    link_a.drop()
    (event,) = link_a.take_events()
    assert isinstance(event, RequestFailed) and event.reason is FailureReason.CONNECTION_LOST
    with pytest.raises(LocalProtocolError):
        link_a.send(a.ping())
    assert host.connections == ()


def test_an_unsupported_version_ends_the_link_after_the_answer() -> None:
    net = Network(make_host())
    client = ClientConnection("old", clock=clock, protocol_versions=["0.1.0"])
    link = net.connect(client)
    link.send(client.initialize())
    net.run_until_quiet()
    (event,) = link.take_events()
    assert isinstance(event, RequestFailed) and event.error is not None
    assert isinstance(event.error.data, t.UnsupportedProtocolVersionErrorData)
    assert not link.open and client.connection_state is ClientState.IDLE


def test_requests_both_ways() -> None:
    host = make_host()
    net = Network(host)
    a, link_a = join(net, "a")

    seen_by_host: list[HostEvent] = []

    def host_side(event: HostEvent) -> None:
        seen_by_host.append(event)
        if isinstance(event, RequestReceived) and event.method == "listSessions":
            host.answer_list_sessions(event)

    def client_side(link: Link, event: Event) -> None:
        if isinstance(event, ServerRequestReceived):
            link.send(event.responder.respond(t.ResourceReadResult(data="hi", encoding="utf-8")))

    request_id, data = a.request("listSessions", t.ListSessionsParams())
    link_a.send(data)
    host_request = link_a.connection.send_request(
        "resourceRead", t.ResourceReadParams(uri="virtual://a/x"))
    net.run_until_quiet(host_side, client_side)
    responses = [e for e in link_a.take_events() if isinstance(e, ResponseReceived)]
    assert [r.id for r in responses] == [request_id]
    assert isinstance(responses[0].result, t.ListSessionsResult)
    assert [item.resource for item in responses[0].result.items] == [SESSION]
    answers = [e for e in seen_by_host if isinstance(e, HostResponseReceived)]
    assert [(r.request_id, r.result) for r in answers] == [
        (host_request, t.ResourceReadResult(data="hi", encoding="utf-8"))]


def test_the_docs_example_runs() -> None:
    docs = Path(__file__).parent.parent / "docs" / "client.md"
    blocks = re.findall(r"```python\n(.*?)```", docs.read_text(), re.S)
    assert len(blocks) == 2
    exec(compile(blocks[1], "docs/client.md", "exec"), {})
