"""The host core against the library's own reconciler, over raw JSON-RPC bytes.

Clients are :class:`ClientReconciler`s whose messages go through
``HostConnection.receive_data`` and whose inboxes are fed from
``data_to_send``, delivered late by hypothesis' choice (never reordered, as
on the ordered AHP transport).  Whatever the interleaving of client actions
(valid and invalid), server actions, disconnects and reconnects, every
envelope the host sends must reconcile without error, and once delivery
quiesces each client's confirmed state equals the host's.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol import wire
from agenthost_protocol.host import Host
from agenthost_protocol.reconciler import ClientReconciler

NOW = 1_767_225_600_000
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/c1"
CHANNELS = (SESSION, CHAT)


def clock() -> int:
    return NOW


class Peer:
    def __init__(self, host: Host, client_id: str) -> None:
        self.host = host
        self.id = client_id
        self.rec = ClientReconciler(client_id, now=clock)
        self.inbox: deque[bytes] = deque()
        self.conn = host.connect()
        self.ids = 0
        answer = self.request("initialize", {
            "protocolVersions": ["0.7.0"], "clientId": client_id,
            "initialSubscriptions": list(CHANNELS)})
        assert isinstance(answer, t.InitializeResult)
        for snap in answer.snapshots:
            self.rec.subscribe(snap)

    def request(self, method: str, params: Any) -> Any:
        """A request answered at once: everything queued before it is delivered first."""
        self.ids += 1
        self.conn.receive_data(json.dumps(
            {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}))
        self.collect()
        while self.inbox:
            raw = self.inbox.popleft()
            msg = wire.parse_message(raw, result_method={self.ids: method})
            if isinstance(msg, t.JsonRpcSuccessResponse):
                return msg.result
            self.handle(msg)
        raise AssertionError("no answer")

    def collect(self) -> None:
        self.inbox.extend(self.conn.data_to_send())

    def handle(self, msg: Any) -> None:
        assert isinstance(msg, t.JsonRpcNotification) and msg.method == "action"
        event(f"received {self.rec.receive(msg.params).kind.value}")

    def deliver(self, n: int) -> None:
        self.collect()
        for _ in range(min(n, len(self.inbox))):
            self.handle(wire.parse_message(self.inbox.popleft()))

    def dispatch(self, channel: str, action: t.StateAction) -> None:
        params = self.rec.dispatch(channel, action)
        self.conn.receive_data(wire.dumps(
            t.JsonRpcNotification(method="dispatchAction", params=params)))

    def reconnect(self) -> None:
        self.conn.connection_lost()
        self.inbox.clear()
        self.conn = self.host.connect()
        self.ids = 0
        result = self.request("reconnect", wire.dump(self.rec.reconnect_params()))
        event(f"reconnect {self.rec.apply_reconnect(result).kind.value}")


def _action(kind: int, n: int) -> tuple[str, t.StateAction]:
    msg = t.Message(text=f"m{n}", origin=t.MessageOrigin(kind=t.MessageKind.USER))
    match kind:
        case 0:
            return SESSION, t.SessionTitleChangedAction(title=f"title {n}")
        case 1:
            return CHAT, t.ChatDraftChangedAction(draft=msg)
        case 2:
            return CHAT, t.ChatTurnStartedAction(
                turn_id=f"t{n}", started_at="2026-01-01T00:00:00.000Z", message=msg)
        case 3:
            return CHAT, t.ChatTurnCancelledAction(turn_id=f"t{n % 3}", duration=1)
        case _:
            agent = t.Message(text="x", origin=t.MessageOrigin(kind=t.MessageKind.AGENT))
            return CHAT, t.ChatDraftChangedAction(draft=agent)  # always rejected


steps = st.lists(st.tuples(
    st.sampled_from(["dispatch", "server", "deliver", "reconnect"]),
    st.integers(0, 2), st.integers(0, 4), st.integers(0, 40),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(steps, st.integers(1, 30))
def test_clients_converge_on_the_host_state(
    script: list[tuple[str, int, int, int]], window: int
) -> None:
    host = Host(clock=clock, replay_max_envelopes=window)
    host.create_session(SESSION, provider="demo")
    host.ready_session(SESSION, default_chat=CHAT)
    peers = [Peer(host, f"c{i}") for i in range(3)]
    for n, (what, who, kind, extra) in enumerate(script):
        peer = peers[who]
        if what == "dispatch":
            peer.dispatch(*_action(kind, extra))
        elif what == "server":
            if kind % 2:
                host.dispatch(SESSION, t.SessionTitleChangedAction(title=f"server {n}"))
            else:
                chat = host.state(CHAT)
                assert isinstance(chat, t.ChatState)
                if chat.active_turn is not None:
                    host.dispatch(CHAT, t.ChatTurnCompleteAction(
                        turn_id=chat.active_turn.id, duration=1))
                else:
                    host.dispatch(CHAT, t.ChatActivityChangedAction(activity=f"a{n}"))
        elif what == "deliver":
            peer.deliver(extra)
        else:
            peer.reconnect()
    for peer in peers:
        peer.deliver(10**6)
        for uri in CHANNELS:
            assert peer.rec.confirmed(uri) == host.state(uri), (peer.id, uri)
            assert peer.rec.pending(uri) == ()
