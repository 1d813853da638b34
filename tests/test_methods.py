"""The typed method constants: params and results tied to their method, both sides."""

from __future__ import annotations

import pytest

from agenthost_protocol import methods, wire
from agenthost_protocol import types as t
from agenthost_protocol.client import (
    ClientConnection,
    Initialized,
    ResponseReceived,
    ServerRequestReceived,
)
from agenthost_protocol.client import Event as ClientEvent
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.host import (
    ClientActionApplied,
    Host,
    RequestReceived,
)
from agenthost_protocol.host import Event as HostEvent
from agenthost_protocol.host import ResponseReceived as HostResponseReceived
from agenthost_protocol.testing.network import Link, Network

NOW = 1_767_225_600_000
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/c1"


def clock() -> int:
    return NOW


def test_the_constants_are_the_table() -> None:
    constants = [v for v in vars(methods).values() if isinstance(v, methods.Method)]
    assert sorted(m.name for m in constants) == sorted(methods.METHODS)
    assert all(methods.METHODS[m.name] is m for m in constants)
    assert len(methods.METHODS) == 38
    exported = {k for k, v in vars(methods).items() if isinstance(v, methods.Method)}
    assert exported <= set(methods.__all__)


def test_params_of_picks_a_method_out_of_a_stream() -> None:
    line = (b'{"jsonrpc":"2.0","method":"action","params":{"channel":"ahp-session:/s1",'
            b'"serverSeq":3,"action":{"type":"session/titleChanged","title":"x"}}}')
    message = wire.parse_message(line)
    envelope = methods.ACTION.params_of(message)
    assert envelope is not None and envelope.server_seq == 3
    assert methods.DISPATCH_ACTION.params_of(message) is None
    request = wire.parse_message(b'{"jsonrpc":"2.0","id":1,"method":"listSessions","params":{}}')
    assert methods.LIST_SESSIONS.params_of(request) == t.ListSessionsParams()
    assert methods.LIST_SESSIONS.params_of(envelope) is None  # not a message at all
    # a notification-shaped message of a request method is not that request
    fake = t.JsonRpcNotification(method="listSessions", params=t.ListSessionsParams())
    assert methods.LIST_SESSIONS.params_of(fake) is None


def test_check_result_and_params() -> None:
    assert methods.CREATE_SESSION.check_result(None) is None
    with pytest.raises(LocalProtocolError, match="null result"):
        methods.CREATE_SESSION.check_result(t.ListSessionsResult(items=()))
    snapshot = t.ReconnectSnapshotResult(snapshots=())
    assert methods.RECONNECT.check_result(snapshot) is snapshot
    with pytest.raises(LocalProtocolError,
                       match=r"ReconnectReplayResult \| ReconnectSnapshotResult"):
        methods.RECONNECT.check_result(None)
    with pytest.raises(LocalProtocolError, match="notification"):
        methods.ACTION.check_result(None)
    with pytest.raises(LocalProtocolError, match="takes ListSessionsParams"):
        methods.LIST_SESSIONS.check_params(t.PingParams())


def _network() -> tuple[Host, Network, ClientConnection, Link]:
    host = Host(clock=clock)
    host.create_session(SESSION, provider="test", title="untitled")
    host.ready_session(SESSION, default_chat=CHAT)
    net = Network(host)
    client = ClientConnection("a", clock=clock)
    link = net.connect(client)
    link.send(client.initialize(initial_subscriptions=(SESSION, CHAT)))
    net.run_until_quiet()
    (event,) = link.take_events()
    assert isinstance(event, Initialized)
    list(host.events())
    return host, net, client, link


def test_a_typed_round_trip_on_both_sides() -> None:
    host, net, client, link = _network()
    host_events: list[HostEvent] = []

    def host_side(event: HostEvent) -> None:
        host_events.append(event)
        if not isinstance(event, RequestReceived):
            return
        assert event.narrow(methods.CREATE_SESSION) is None  # another method's
        request = event.narrow(methods.LIST_SESSIONS)
        assert request is not None and request.params.limit == 1
        with pytest.raises(LocalProtocolError):
            request.respond(t.ResourceReadResult(data="", encoding="utf-8"))  # type: ignore[arg-type]
        request.respond(host.list_sessions(request.params))
        with pytest.raises(LocalProtocolError, match="already answered"):
            request.respond(t.ListSessionsResult(items=()))

    def client_side(link: Link, event: ClientEvent) -> None:
        if isinstance(event, ServerRequestReceived):
            assert event.narrow(methods.RESOURCE_LIST) is None
            request = event.narrow(methods.RESOURCE_READ)
            assert request is not None
            link.send(request.respond(t.ResourceReadResult(data=request.params.uri,
                                                           encoding="utf-8")))

    request_id, data = client.request(methods.LIST_SESSIONS, t.ListSessionsParams(limit=1))
    link.send(data)
    asked = link.connection.send_request(
        methods.RESOURCE_READ, t.ResourceReadParams(uri="virtual://a/x"))
    net.run_until_quiet(host_side, client_side)

    [response] = [e for e in link.take_events() if isinstance(e, ResponseReceived)]
    assert response.id == request_id
    assert [s.resource for s in response.result_for(methods.LIST_SESSIONS).items] == [SESSION]
    with pytest.raises(LocalProtocolError, match="answers 'listSessions'"):
        response.result_for(methods.FETCH_TURNS)
    [answer] = [e for e in host_events if isinstance(e, HostResponseReceived)]
    assert answer.request_id == asked
    assert answer.result_for(methods.RESOURCE_READ).data == "virtual://a/x"
    with pytest.raises(LocalProtocolError):
        answer.result_for(methods.RESOURCE_LIST)


def test_typed_requests_are_checked_at_run_time_too() -> None:
    _host, _net, client, link = _network()
    with pytest.raises(LocalProtocolError, match="takes ListSessionsParams"):
        client.request(methods.LIST_SESSIONS, t.PingParams())  # type: ignore[misc]
    with pytest.raises(LocalProtocolError, match=r"use ClientConnection.subscribe\(\)"):
        client.request(methods.SUBSCRIBE, t.SubscribeParams(channel=SESSION))
    with pytest.raises(LocalProtocolError, match="not a client-to-server request"):
        # the direction is checked at run time only
        client.request(methods.ACTION, t.ActionEnvelope(
            channel=SESSION, server_seq=1, action=t.SessionTitleChangedAction(title="x")))
    with pytest.raises(LocalProtocolError, match="not a server-to-client request"):
        link.connection.send_request(methods.LIST_SESSIONS, t.ListSessionsParams())
    with pytest.raises(LocalProtocolError, match="takes ResourceReadParams"):
        link.connection.send_request(
            methods.RESOURCE_READ, t.ResourceListParams(uri="x"))  # type: ignore[misc]


def test_the_agent_sees_applied_client_actions_not_rejected_ones() -> None:
    host, net, client, link = _network()
    link.send(client.dispatch(SESSION, t.SessionTitleChangedAction(title="mine")))
    net.run_until_quiet()
    [applied] = [e for e in host.events() if isinstance(e, ClientActionApplied)]
    assert applied.connection is link.connection
    assert applied.envelope.origin == t.ActionOrigin(client_id="a", client_seq=1)
    assert applied.envelope.action == t.SessionTitleChangedAction(title="mine")
    assert applied.envelope.server_seq == host.server_seq
    # a turn on a chat with no turn is rejected by the host: no event
    link.send(client.dispatch(CHAT, t.ChatTurnCancelledAction(turn_id="nope", duration=1)))
    net.run_until_quiet()
    assert not [e for e in host.events() if isinstance(e, ClientActionApplied)]
