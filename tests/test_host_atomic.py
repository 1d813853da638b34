"""Issue 18, item 1: one bad value never bricks the host.

A dispatch that cannot be encoded changes nothing (state, ``serverSeq``,
replay buffer, what is sent) and raises ``LocalProtocolError`` naming the
field; agents' values are repaired; no exception kills a transport task
silently.
"""

from __future__ import annotations

import asyncio
import logging
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.agent.dispatch import dispatch_agent_action
from agenthost_protocol.client import ClientConnection
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.host import Event as HostEvent
from agenthost_protocol.host import Host
from agenthost_protocol.testing.network import Network

from ._aio_hosts import DemoHost, demo_host, run
from ._aio_peer import ws_peer

SESSION = "ahp-session:/s"
NOW = 1_767_225_600_000


def session_state() -> t.SessionState:
    return t.SessionState(provider="demo", title="", status=t.SessionStatus.IDLE,
                          lifecycle=t.SessionLifecycle.READY, active_clients=(), chats=())


def host_with_session() -> Host:
    host = Host(clock=lambda: NOW)
    host.add_channel(SESSION, session_state())
    return host


def tools_with(schema: dict[str, object], name: str = "tool") -> t.StateAction:
    return t.SessionActiveClientSetAction(active_client=t.SessionActiveClient(
        client_id="agent", tools=(t.ToolDefinition(name=name, input_schema=schema),)))


HOSTILE: list[tuple[t.StateAction, str]] = [
    (t.SessionTitleChangedAction(title="cut in an emoji \ud83d"), "title"),
    (tools_with({"weight": math.nan}), "weight"),
    (tools_with({"limit": [1, math.inf]}), "limit"),
    (tools_with({"key\udc00": 1}), "input_schema"),
    (tools_with({}, name="\udfff"), "name"),
]


@pytest.mark.parametrize(("action", "field"), HOSTILE)
def test_an_unencodable_dispatch_changes_nothing(action: t.StateAction, field: str) -> None:
    host = host_with_session()
    net = Network(host)
    client = ClientConnection("watcher", clock=lambda: NOW)
    link = net.connect(client)
    link.send(client.initialize(initial_subscriptions=[SESSION]))
    net.run_until_quiet()
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="before"))
    net.run_until_quiet()
    seq, state = host.server_seq, host.state(SESSION)
    replayed = len(tuple(host.replay.after(0)))
    with pytest.raises(LocalProtocolError) as refused:
        host.dispatch(SESSION, action)
    assert field in str(refused.value) or field in (refused.value.path or "")
    assert host.server_seq == seq
    assert host.state(SESSION) is state
    assert len(tuple(host.replay.after(0))) == replayed
    assert link.connection.data_to_send() == []
    # and the host goes on: the next dispatch follows the last good one
    envelope = host.dispatch(SESSION, t.SessionTitleChangedAction(title="after"))
    assert envelope.server_seq == seq + 1
    net.run_until_quiet()
    assert client.confirmed(SESSION) == host.state(SESSION)


VALID_TITLES = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)


@given(st.lists(st.one_of(
    st.tuples(st.just("valid"), VALID_TITLES),
    st.tuples(st.just("hostile"), st.integers(0, len(HOSTILE) - 1)),
    st.tuples(st.just("deliver"), st.just(0)),
), max_size=25))
def test_hostile_dispatches_never_change_what_a_subscriber_sees(
    steps: list[tuple[str, object]],
) -> None:
    host = host_with_session()
    net = Network(host)
    old = ClientConnection("old", clock=lambda: NOW)
    net.connect(old).send(old.initialize(initial_subscriptions=[SESSION]))
    net.run_until_quiet()
    expected = host.state(SESSION)
    seq = host.server_seq
    for kind, value in steps:
        if kind == "valid":
            action = t.SessionTitleChangedAction(title=str(value))
            host.dispatch(SESSION, action)
            seq += 1
            expected = host.state(SESSION)
        elif kind == "hostile":
            assert isinstance(value, int)
            with pytest.raises(LocalProtocolError):
                host.dispatch(SESSION, HOSTILE[value][0])
        else:
            net.run_until_quiet()
        assert host.server_seq == seq
        assert host.state(SESSION) == expected
    net.run_until_quiet()
    fresh = ClientConnection("fresh", clock=lambda: NOW)
    net.connect(fresh).send(fresh.initialize(initial_subscriptions=[SESSION]))
    net.run_until_quiet()
    assert fresh.confirmed(SESSION) == old.confirmed(SESSION) == expected


def test_agent_values_are_repaired_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    host = host_with_session()
    log = logging.getLogger("test.agent")
    with caplog.at_level(logging.WARNING, "test.agent"):
        envelope = dispatch_agent_action(
            host, SESSION, t.SessionTitleChangedAction(title="ok \ud83d"), log)
    assert envelope is not None
    state = host.state(SESSION)
    assert isinstance(state, t.SessionState) and state.title == "ok \ufffd"
    assert "repaired" in caplog.text and "title" in caplog.text
    envelope = dispatch_agent_action(host, SESSION, tools_with({"w": math.nan, "k": 1}), log)
    assert envelope is not None
    state = host.state(SESSION)
    assert isinstance(state, t.SessionState)
    assert state.active_clients[0].tools[0].input_schema == {"k": 1}


def test_repair_leaves_valid_values_alone() -> None:
    action = tools_with({"a": [1, 2.5, "x"], "b": {"c": None}})
    assert wire.repair(action) == (action, ())
    repaired, notes = wire.repair(tools_with({"a": [1, math.nan, 2]}))
    assert wire.unstructure(repaired)["activeClient"]["tools"][0]["inputSchema"] == {"a": [1, 2]}
    assert notes == ("$.active_client.tools[0].input_schema.a[1]: nan dropped",)


def test_a_failing_message_closes_its_connection_with_a_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        from websockets.exceptions import ConnectionClosed

        async with demo_host() as demo:
            peer, ws = await ws_peer(demo.url, "victim")
            await peer.initialize()

            def broken(conn: object, data: bytes | str) -> None:
                raise RuntimeError("a bug in the host")

            demo.host._receive = broken  # type: ignore[method-assign]
            await ws.send('{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {}}')
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011

    with caplog.at_level(logging.ERROR, "agenthost_protocol.aio.server"):
        run(body())
    assert "a bug in the host" in caplog.text  # the traceback is in the log


def test_a_request_the_handler_forgets_is_answered(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 18, item 7: a handler that returns without answering, and keeps nothing
    that could answer later, does not leave the client waiting for its timeout."""
    from agenthost_protocol.host import RequestReceived

    kept: list[RequestReceived] = []

    def intercept(demo: DemoHost, event: HostEvent) -> bool:
        if isinstance(event, RequestReceived) and event.method == "listSessions":
            demo.events.remove(event)  # the harness's own record would keep it alive
            return True  # swallowed: neither answered nor kept
        if isinstance(event, RequestReceived) and event.method == "resolveSessionConfig":
            kept.append(event)  # kept: may still be answered later
            return True
        return False

    async def body() -> None:
        async with demo_host(intercept=intercept) as demo:
            peer, ws = await ws_peer(demo.url, "asker")
            await peer.initialize()
            answer = await asyncio.wait_for(peer.request("listSessions", t.ListSessionsParams()),
                                            5)
            from agenthost_protocol.client import RequestFailed

            assert isinstance(answer, RequestFailed) and answer.error is not None
            assert answer.error.code == -32603
            assert "without answering" in answer.error.message
            # one that is kept is not answered behind the handler's back
            request_id, data = peer.client.request(
                "resolveSessionConfig", t.ResolveSessionConfigParams())
            await peer.send(data)
            for _ in range(50):
                if kept:
                    break
                await asyncio.sleep(0.01)
            assert kept and kept[0].connection.is_unanswered(kept[0].request_id)
            kept[0].responder.error(-32601, "not here")
            demo.server.flush()
            failed = await peer.answer(request_id)
            assert isinstance(failed, RequestFailed) and failed.error is not None
            assert failed.error.code == -32601
            await ws.close()

    with caplog.at_level(logging.ERROR, "agenthost_protocol.aio.server"):
        run(body())
    assert "dropped listSessions" in caplog.text
