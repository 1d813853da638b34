"""Users kept apart, as a property: random operations by random principals, and no
connection ever receives a message about a session its principal may not see.

Every session is named after its owner (``alice-3``), so a leak is a foreign
name in anything a connection received: envelopes, notifications,
``listSessions`` answers, snapshots, replays (errors echo what the
connection itself asked for, and are checked for their code instead; so is
a replay's ``missing``).  And each connection's root, reduced from what it
received, holds the ``activeSessions`` a snapshot would give it now.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.channels import ROOT_CHANNEL
from agenthost_protocol.host import Host
from agenthost_protocol.types.error_codes import AhpErrorCode, JsonRpcErrorCode

from ._authz import ADMIN, Embedder, Peer, chat_uri, complete_turn, make_host, session_uri

USERS = ("alice", "bob", "carol")
PRINCIPALS = (*USERS, ADMIN)
CLIENTS = ("alice-a", "alice-b", "bob-a", "carol-a", "admin-a")
"""Two clients of alice's, one of each other principal."""
REFUSALS = {int(AhpErrorCode.NOT_FOUND), int(AhpErrorCode.SESSION_NOT_FOUND),
            int(AhpErrorCode.CONTENT_NOT_FOUND), int(AhpErrorCode.SESSION_ALREADY_EXISTS),
            int(AhpErrorCode.ALREADY_EXISTS), int(JsonRpcErrorCode.INVALID_PARAMS)}


class Client:
    """One client (its clientId kept across reconnects) and the root count it holds."""

    def __init__(self, host: Host, embedder: Embedder, name: str) -> None:
        self.name = name
        self.principal = name.split("-", maxsplit=1)[0]
        self.host, self.embedder = host, embedder
        self.peer = Peer(host, embedder, self.principal, name)
        self.count: int | None = None
        self.last_seq = 0
        self.seen = 0
        """How much of the peer's inbox was taken in."""
        self.away: list[str] | None = None
        """The subscriptions it left with, while its connection is lost."""
        self.absorb(self.peer.initialize())

    def foreign(self) -> tuple[str, ...]:
        return () if self.principal == ADMIN else tuple(
            f"{user}-" for user in PRINCIPALS if user != self.principal)

    def absorb(self, *_: object) -> None:
        """Check and reduce what the peer received since the last call."""
        if self.away is not None:
            return
        self.peer.pull()
        for message in self.peer.inbox[self.seen:]:
            self.check(message)
            self.reduce(message)
        self.seen = len(self.peer.inbox)

    def check(self, message: dict[str, Any]) -> None:
        error = message.get("error")
        if error is not None:
            assert error["code"] in REFUSALS, message
            return
        result = message.get("result")
        if isinstance(result, dict) and "missing" in result:
            message = {**message, "result": {**result, "missing": []}}
        text = json.dumps(message)
        for name in self.foreign():
            assert name not in text, (self.name, message)

    def reduce(self, message: dict[str, Any]) -> None:
        result = message.get("result")
        if isinstance(result, dict):
            if "serverSeq" in result:
                self.last_seq = max(self.last_seq, result["serverSeq"])
            for snapshot in [*result.get("snapshots", ()),
                             *([result["snapshot"]] if result.get("snapshot") else [])]:
                self.last_seq = max(self.last_seq, snapshot["fromSeq"])
                if snapshot["resource"] == ROOT_CHANNEL:
                    self.count = snapshot["state"].get("activeSessions")
            for envelope in result.get("actions", ()):
                self.apply(envelope)
        if message.get("method") == "action":
            self.apply(message["params"])

    def apply(self, envelope: dict[str, Any]) -> None:
        self.last_seq = max(self.last_seq, envelope["serverSeq"])
        action = envelope["action"]
        if envelope["channel"] == ROOT_CHANNEL and action["type"] == (
            "root/activeSessionsChanged"
        ):
            self.count = action["activeSessions"]

    def drop(self) -> None:
        """The connection is lost: the client is away until :meth:`reconnect`."""
        if self.away is None:
            self.away = list(self.peer.conn.subscriptions)
            self.peer.conn.connection_lost()

    def reconnect(self, replay: bool) -> None:
        self.drop()
        subscriptions, self.away = self.away or [], None
        self.peer = Peer(self.host, self.embedder, self.principal, self.name)
        self.seen = 0
        answer = self.peer.request("reconnect", {
            "clientId": self.name, "lastSeenServerSeq": self.last_seq if replay else -1,
            "subscriptions": [ROOT_CHANNEL, *subscriptions]})
        if answer.get("error"):  # forgotten: a fresh start
            self.seen = len(self.peer.inbox)
            self.count = None
            self.absorb(self.peer.initialize())
            return
        self.absorb()


names = st.builds(lambda user, n: f"{user}-{n}", st.sampled_from(PRINCIPALS),
                  st.integers(1, 3))
operations = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(CLIENTS), st.integers(1, 3)),
    st.tuples(st.just("dispose"), st.sampled_from(CLIENTS), names),
    st.tuples(st.just("subscribe"), st.sampled_from(CLIENTS), names, st.booleans()),
    st.tuples(st.just("dispatch"), st.sampled_from(CLIENTS), names),
    st.tuples(st.just("fetch"), st.sampled_from(CLIENTS), names),
    st.tuples(st.just("fork"), st.sampled_from(CLIENTS), names),
    st.tuples(st.just("list"), st.sampled_from(CLIENTS)),
    st.tuples(st.just("turn"), names),
    st.tuples(st.just("terminal"), names),
    st.tuples(st.just("drop"), st.sampled_from(CLIENTS)),
    st.tuples(st.just("reconnect"), st.sampled_from(CLIENTS), st.booleans()),
)


def run(host: Host, clients: dict[str, Client], op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "turn":
        chat = chat_uri(op[1])
        if host.has_channel(chat):
            turns = host.state(chat).turns  # type: ignore[union-attr]
            complete_turn(host, chat, turn_id=f"t{len(turns) + 1}", text=f"in {op[1]}")
        return
    if kind == "terminal":
        if host.has_channel(session_uri(op[1])):
            uri = f"ahp-terminal:/{op[1]}-{host.server_seq}"
            host.create_terminal(uri, claim=t.TerminalSessionClaim(session=session_uri(op[1])))
        return
    client = clients[op[1]]
    peer = client.peer
    if kind == "drop":
        client.drop()
    elif kind == "reconnect":
        client.reconnect(op[2])
    elif client.away is not None:
        pass  # away: it does nothing until it is back
    elif kind == "create":
        peer.create_session(f"{client.principal}-{op[2]}")
    elif kind == "dispose":
        peer.request("disposeSession", {"channel": session_uri(op[2])})
    elif kind == "subscribe":
        uri = (session_uri if op[3] else chat_uri)(op[2])
        peer.request("subscribe", {"channel": uri})
    elif kind == "dispatch":
        peer.dispatch(session_uri(op[2]), {"type": "session/titleChanged",
                                           "title": f"title by {client.name}"})
    elif kind == "fetch":
        peer.request("fetchTurns", {"channel": chat_uri(op[2])})
    elif kind == "fork":
        chat = chat_uri(op[2])
        state = host.state(chat) if host.has_channel(chat) else None
        turns = state.turns if isinstance(state, t.ChatState) else ()
        if turns:
            fork = f"{chat}-fork-{host.server_seq}"
            peer.request("createChat", {"channel": session_uri(op[2]), "chat": fork,
                                        "source": {"kind": "fork", "chat": chat,
                                                   "turnId": turns[-1].id}})
    elif kind == "list":
        peer.listed()


@given(st.lists(operations, max_size=30))
def test_no_connection_hears_of_a_session_it_may_not_see(ops: list[tuple[Any, ...]]) -> None:
    host = make_host()
    embedder = Embedder(host)
    clients = {name: Client(host, embedder, name) for name in CLIENTS}
    for op in ops:
        run(host, clients, op)
        listed = host.listed_sessions()
        for client in clients.values():
            client.absorb()
            if client.away is not None:
                continue
            # at every step, the root it reduced holds what a snapshot would give it
            assert client.count == sum(
                1 for uri in listed if client.principal == ADMIN
                or uri.startswith(session_uri(client.principal + "-"))), (client.name, op)
    for client in clients.values():
        client.reconnect(True)
        # the root each one reduced is the root a snapshot would give it now
        fresh = Peer(host, embedder, client.principal, f"{client.name}-check")
        snapshot = fresh.initialize()["result"]["snapshots"][0]
        assert client.count == snapshot["state"]["activeSessions"], client.name
        assert fresh.listed() == [uri for uri in host.listed_sessions()
                                  if client.principal == ADMIN
                                  or uri.startswith(session_uri(client.principal + "-"))]
        fresh.conn.connection_lost()
