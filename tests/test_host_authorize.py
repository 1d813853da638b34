"""Users kept apart: ``Host(authorize=...)`` and the ready-made ``OwnershipPolicy``.

Two principals (``alice``, ``bob``) and an admin on one host, sans I/O:
neither sees, subscribes to, dispatches into, pages, forks, disposes or
reads the content of the other's session; the admin sees both; every
refusal looks like the answer about a session that does not exist.  Also
with the SQLite store across a restart, and a store from before owners were
kept (migrated: its sessions are nobody's).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.channels import ROOT_CHANNEL
from agenthost_protocol.host import Host
from agenthost_protocol.host.authorize import Operation, OwnershipPolicy
from agenthost_protocol.host.sessions import CursorSeal
from agenthost_protocol.sqlite_store import SCHEMA_VERSION, SQLiteStore
from agenthost_protocol.types.error_codes import AhpErrorCode, JsonRpcErrorCode

from ._authz import (
    ADMIN,
    Embedder,
    Peer,
    chat_uri,
    complete_turn,
    error_code,
    make_host,
    session_uri,
)

ALICE_S, ALICE_C = session_uri("alice-1"), chat_uri("alice-1")
BOB_S = session_uri("bob-1")
NOT_FOUND = int(AhpErrorCode.NOT_FOUND)
SESSION_NOT_FOUND = int(AhpErrorCode.SESSION_NOT_FOUND)


def peers(host: Host) -> tuple[Peer, Peer, Peer]:
    embedder = Embedder(host)
    alice = Peer(host, embedder, "alice", "client-alice")
    bob = Peer(host, embedder, "bob", "client-bob")
    admin = Peer(host, embedder, ADMIN, "client-admin")
    for peer in (alice, bob, admin):
        assert "result" in peer.initialize()
    return alice, bob, admin


def root_count(peer: Peer) -> int | None:
    """``activeSessions`` as the peer's root holds it: its snapshot, then the actions."""
    count = None
    for message in peer.inbox:
        result = message.get("result")
        if isinstance(result, dict):
            for snapshot in result.get("snapshots", ()):
                if snapshot["resource"] == ROOT_CHANNEL:
                    count = snapshot["state"].get("activeSessions")
        params = message.get("params") or {}
        if message.get("method") == "action" and params["channel"] == ROOT_CHANNEL:
            action = params["action"]
            if action["type"] == "root/activeSessionsChanged":
                count = action["activeSessions"]
    return count


def leaked(peer: Peer, foreign: str) -> list[dict[str, Any]]:
    """What ``peer`` received that names ``foreign`` (errors echo what it asked for:
    they are checked for their code instead)."""
    return [m for m in peer.inbox if "error" not in m and foreign in json.dumps(m)]


def with_two_sessions() -> tuple[Host, Peer, Peer, Peer]:
    host = make_host()
    alice, bob, admin = peers(host)
    assert "result" in alice.create_session("alice-1")
    assert "result" in bob.create_session("bob-1")
    complete_turn(host, ALICE_C, text="alice's secret")
    for peer in (alice, bob, admin):
        peer.pull()
    return host, alice, bob, admin


def test_each_principal_lists_and_hears_of_its_own_sessions_only() -> None:
    host, alice, bob, admin = with_two_sessions()
    assert alice.listed() == [ALICE_S]
    assert bob.listed() == [BOB_S]
    assert admin.listed() == [ALICE_S, BOB_S]
    # the root's notifications and counts, as each one's root holds them
    assert root_count(alice) == 1 and root_count(bob) == 1 and root_count(admin) == 2
    assert [m["params"]["summary"]["resource"] for m in admin.inbox
            if m.get("method") == "root/sessionAdded"] == [ALICE_S, BOB_S]
    assert leaked(bob, "alice-") == [] and leaked(alice, "bob-") == []
    # a fresh subscription to the root says what the actions said
    late = Peer(host, alice.embedder, "bob", "client-bob-2")
    snapshot = late.initialize()["result"]["snapshots"][0]
    assert snapshot["state"]["activeSessions"] == 1
    # a session of bob's going away is news to bob and the admin only: alice's count
    # did not change, so she is not even told that something did
    assert "result" in bob.request("disposeSession", {"channel": BOB_S})
    assert alice.pull() == []
    assert [m["params"]["session"] for m in admin.pull()
            if m.get("method") == "root/sessionRemoved"] == [BOB_S]
    assert root_count(bob) == 0 and root_count(admin) == 1 and root_count(alice) == 1


def test_a_foreign_session_looks_like_one_that_does_not_exist() -> None:
    host, _alice, bob, _admin = with_two_sessions()

    def same_as_missing(method: str, params: dict[str, Any], missing: dict[str, Any]) -> int:
        refused, absent = bob.request(method, params), bob.request(method, missing)
        assert error_code(refused) == error_code(absent) is not None, (refused, absent)
        # the message names what was asked, nothing more
        assert refused["error"]["message"] == absent["error"]["message"].replace(
            "nobody", "alice-1")
        return int(refused["error"]["code"])

    nobody_s, nobody_c = session_uri("nobody"), chat_uri("nobody")
    assert same_as_missing("subscribe", {"channel": ALICE_S}, {"channel": nobody_s}) == NOT_FOUND
    assert same_as_missing("subscribe", {"channel": ALICE_C}, {"channel": nobody_c}) == NOT_FOUND
    assert same_as_missing("subscribe", {"channel": ALICE_S + "/annotations"},
                           {"channel": nobody_s + "/annotations"}) == NOT_FOUND
    assert same_as_missing("fetchTurns", {"channel": ALICE_C},
                           {"channel": nobody_c}) == NOT_FOUND
    fork = {"kind": "fork", "chat": ALICE_C, "turnId": "t1"}
    assert same_as_missing(
        "createChat", {"channel": ALICE_S, "chat": chat_uri("bobs-fork"), "source": fork},
        {"channel": nobody_s, "chat": chat_uri("bobs-fork"), "source": fork},
    ) == SESSION_NOT_FOUND
    assert same_as_missing("disposeSession", {"channel": ALICE_S},
                           {"channel": nobody_s}) == SESSION_NOT_FOUND
    assert same_as_missing("disposeChat", {"channel": ALICE_C},
                           {"channel": nobody_c}) == NOT_FOUND
    # a fork into bob's own session from alice's chat: the source is not in his session
    answer = bob.request("createChat", {"channel": BOB_S, "chat": chat_uri("bobs-fork"),
                                        "source": fork})
    assert error_code(answer) == int(JsonRpcErrorCode.INVALID_PARAMS)
    # nothing of alice's changed
    assert host.has_channel(ALICE_S) and host.has_channel(ALICE_C)
    assert not host.has_channel(chat_uri("bobs-fork"))
    assert [summary.resource for summary in host.state(ALICE_S).chats] == [ALICE_C]  # type: ignore[union-attr]
    assert leaked(bob, "alice's secret") == []


def test_a_foreign_chat_ignores_actions_as_a_missing_one_does() -> None:
    host, alice, bob, _admin = with_two_sessions()
    assert "result" in alice.request("subscribe", {"channel": ALICE_C})
    before, seq = host.state(ALICE_C), host.server_seq
    draft = {"type": "chat/draftChanged", "draft": {"text": "bob was here",
                                                    "origin": {"kind": "user"}}}
    bob.dispatch(ALICE_C, draft)
    bob.dispatch(ALICE_S, {"type": "session/titleChanged", "title": "bob was here"})
    assert host.state(ALICE_C) == before and host.server_seq == seq
    assert bob.pull() == [] and alice.pull() == []
    # alice's own go through
    alice.dispatch(ALICE_S, {"type": "session/titleChanged", "title": "mine"})
    alice.dispatch(ALICE_C, draft, seq=2)
    assert host.state(ALICE_S).title == "mine"  # type: ignore[union-attr]
    assert host.state(ALICE_C).draft is not None  # type: ignore[union-attr]
    assert leaked(bob, "alice-") == []


def test_stored_content_is_read_through_its_chats_only() -> None:
    host, alice, bob, admin = with_two_sessions()
    ref = host.content.put(b"alice's tool output", "text/plain", owner=ALICE_C)
    unowned = host.content.put(b"anyone's", "text/plain")
    refused = bob.request("resourceRead", {"uri": ref.uri})
    absent = bob.request("resourceRead", {"uri": "agenthost-content:/" + "0" * 64})
    assert error_code(refused) == error_code(absent) == int(AhpErrorCode.CONTENT_NOT_FOUND)
    assert alice.request("resourceRead", {"uri": ref.uri})["result"]["data"] == (
        "alice's tool output")
    assert "result" in admin.request("resourceRead", {"uri": ref.uri})
    assert "result" in bob.request("resourceRead", {"uri": unowned.uri})
    # a fork shares its source's content: bob still cannot read it through alice's fork
    answer = alice.request("createChat", {
        "channel": ALICE_S, "chat": chat_uri("alice-fork"),
        "source": {"kind": "fork", "chat": ALICE_C, "turnId": "t1"}})
    assert "result" in answer
    assert error_code(bob.request("resourceRead", {"uri": ref.uri})) == int(
        AhpErrorCode.CONTENT_NOT_FOUND)


def test_the_owner_does_everything_and_the_admin_too() -> None:
    host, alice, bob, admin = with_two_sessions()
    assert "result" in alice.request("subscribe", {"channel": ALICE_S})
    assert "result" in alice.request("fetchTurns", {"channel": ALICE_C})
    assert "result" in alice.request("createChat", {
        "channel": ALICE_S, "chat": chat_uri("alice-fork"),
        "source": {"kind": "fork", "chat": ALICE_C, "turnId": "t1"}})
    assert "result" in alice.request("disposeChat", {"channel": chat_uri("alice-fork")})
    assert "result" in admin.request("subscribe", {"channel": BOB_S})
    assert "result" in admin.request("subscribe", {"channel": ALICE_C})
    assert "result" in admin.request("disposeSession", {"channel": BOB_S})
    assert not host.has_channel(BOB_S)
    assert bob.listed() == [] and admin.listed() == [ALICE_S]


def test_reconnect_replays_and_snapshots_only_what_the_principal_may_see() -> None:
    host, alice, bob, _admin = with_two_sessions()
    seen = host.server_seq
    bob.conn.connection_lost()
    assert "result" in alice.create_session("alice-2")
    complete_turn(host, chat_uri("alice-2"), text="more of alice")
    for last in (seen, -1):  # a replay, then snapshots (too far behind to replay)
        again = Peer(host, bob.embedder, "bob", "client-bob")
        answer = again.request("reconnect", {
            "clientId": "client-bob", "lastSeenServerSeq": last,
            "subscriptions": [ROOT_CHANNEL, ALICE_S, ALICE_C, BOB_S]})
        result = answer["result"]
        # what it asked for is echoed in ``missing``, as for channels that do not exist
        assert "alice-" not in json.dumps({**result, "missing": []})
        if result["type"] == "replay":
            assert set(result["missing"]) == {ALICE_S, ALICE_C}
            counts = [a["action"]["activeSessions"] for a in result["actions"]
                      if a["action"]["type"] == "root/activeSessionsChanged"]
            assert counts in ([], [1])
        else:
            assert {s["resource"] for s in result["snapshots"]} == {ROOT_CHANNEL, BOB_S}
            root = next(s for s in result["snapshots"] if s["resource"] == ROOT_CHANNEL)
            assert root["state"]["activeSessions"] == 1
        assert set(again.conn.subscriptions) == {ROOT_CHANNEL, BOB_S}
        again.conn.connection_lost()


def test_terminals_of_a_session_are_that_sessions() -> None:
    host, alice, bob, admin = with_two_sessions()
    host.create_terminal("ahp-terminal:/alice-t", claim=t.TerminalSessionClaim(session=ALICE_S))
    host.create_terminal("ahp-terminal:/shared", claim=t.TerminalClientClaim(
        client_id="client-bob"))
    for peer in (alice, bob, admin):
        peer.pull()
    assert leaked(bob, "alice-") == []
    assert error_code(bob.request("subscribe", {"channel": "ahp-terminal:/alice-t"})) == (
        NOT_FOUND)
    assert "result" in alice.request("subscribe", {"channel": "ahp-terminal:/alice-t"})
    terminals = bob.request("subscribe", {"channel": ROOT_CHANNEL})["result"]["snapshot"][
        "state"]["terminals"]
    assert [info["resource"] for info in terminals] == ["ahp-terminal:/shared"]
    terminals = admin.request("subscribe", {"channel": ROOT_CHANNEL})["result"]["snapshot"][
        "state"]["terminals"]
    assert len(terminals) == 2
    assert not host.may("bob", "ahp-terminal:/alice-t", Operation.SUBSCRIBE)
    assert host.may("bob", "ahp-terminal:/shared", Operation.SUBSCRIBE)


def test_a_terminal_a_client_claims_is_its_creators() -> None:
    """A shell is no one else's business: another principal neither lists, subscribes
    to, types into nor disposes a terminal a client of alice's created and claims."""
    host, alice, bob, admin = with_two_sessions()
    mine = "ahp-terminal:/alice-shell"
    claim = {"kind": "client", "clientId": "client-alice"}
    assert "result" in alice.request("createTerminal", {"channel": mine, "claim": claim})
    for peer in (alice, bob, admin):
        peer.pull()
    assert leaked(bob, "alice-shell") == []

    def listed(peer: Peer) -> list[str]:
        root = peer.request("subscribe", {"channel": ROOT_CHANNEL})["result"]["snapshot"]
        return [info["resource"] for info in root["state"]["terminals"] or ()]

    assert listed(alice) == [mine] and listed(admin) == [mine] and listed(bob) == []
    assert error_code(bob.request("subscribe", {"channel": mine})) == NOT_FOUND
    bob.dispatch(mine, {"type": "terminal/input", "data": "rm -rf ~\n"})
    assert error_code(bob.request("disposeTerminal", {"channel": mine})) == NOT_FOUND
    assert host.has_channel(mine)
    assert not host.may("bob", mine, Operation.DISPATCH)
    # another connection of alice's is alice: it may watch her shell
    again = Peer(host, alice.embedder, "alice", "client-alice-2")
    assert "result" in again.initialize()
    assert "result" in again.request("subscribe", {"channel": mine})
    assert "result" in alice.request("disposeTerminal", {"channel": mine})
    assert not host.has_channel(mine)


def test_sessions_of_nobody_are_the_admins_and_nobody_creates() -> None:
    host = make_host()
    alice, _bob, admin = peers(host)
    host.create_session(session_uri("agents-own"), provider="demo")  # no principal
    host.ready_session(session_uri("agents-own"), default_chat=chat_uri("agents-own"))
    assert alice.listed() == [] and admin.listed() == [session_uri("agents-own")]
    assert host.session_owner(session_uri("agents-own")) is None
    stranger = Peer(host, alice.embedder, None, "client-anonymous")
    stranger.initialize()
    answer = stranger.create_session("anonymous-1")
    assert error_code(answer) == int(AhpErrorCode.PERMISSION_DENIED)
    assert not host.has_channel(session_uri("anonymous-1"))
    assert stranger.listed() == []


def test_without_a_policy_everyone_sees_everything() -> None:
    host = make_host(authorize=None)
    alice, bob, _admin = peers(host)
    alice.create_session("alice-1")
    assert bob.listed() == [ALICE_S]
    assert "result" in bob.request("subscribe", {"channel": ALICE_C})
    assert root_count(bob) == 1
    # the owner is recorded all the same: a policy set later finds it
    assert host.session_owner(ALICE_S) == "alice"
    assert host.authorize is None and host.may("bob", ALICE_S, Operation.DISPOSE)


def test_a_policy_of_the_embedders_own() -> None:
    asked: list[tuple[object, str, Operation]] = []

    def read_only_for_bob(principal: object, session: str, operation: Operation) -> bool:
        asked.append((principal, session, operation))
        return principal != "bob" or operation in (Operation.SEE, Operation.SUBSCRIBE)

    host = make_host(authorize=read_only_for_bob)
    alice, bob, _admin = peers(host)
    alice.create_session("alice-1")
    assert bob.listed() == [ALICE_S]
    assert "result" in bob.request("subscribe", {"channel": ALICE_C})
    assert error_code(bob.request("disposeSession", {"channel": ALICE_S})) == (
        SESSION_NOT_FOUND)
    # the host resolves the chat to its session before asking
    assert ("bob", ALICE_S, Operation.SUBSCRIBE) in asked


def test_ownership_survives_a_restart_with_the_sqlite_store(tmp_path: Path) -> None:
    path = tmp_path / "host.sqlite3"
    with SQLiteStore(path) as store:
        host, alice, bob, admin = with_two_sessions_on(make_host(store))
        ref = host.content.put(b"alice's output", "text/plain", owner=ALICE_C)
        assert host.commit()
    with SQLiteStore(path) as store:
        host = make_host(store)
        alice, bob, admin = peers(host)
        assert alice.listed() == [ALICE_S] and bob.listed() == [BOB_S]
        assert admin.listed() == [ALICE_S, BOB_S]
        assert host.session_owner(ALICE_S) == "alice"
        assert error_code(bob.request("subscribe", {"channel": ALICE_C})) == NOT_FOUND
        assert error_code(bob.request("resourceRead", {"uri": ref.uri})) == int(
            AhpErrorCode.CONTENT_NOT_FOUND)
        assert "result" in alice.request("resourceRead", {"uri": ref.uri})
        assert "result" in alice.request("subscribe", {"channel": ALICE_C})
        assert leaked(bob, "alice-") == []


def with_two_sessions_on(host: Host) -> tuple[Host, Peer, Peer, Peer]:
    alice, bob, admin = peers(host)
    assert "result" in alice.create_session("alice-1")
    assert "result" in bob.create_session("bob-1")
    complete_turn(host, ALICE_C)
    return host, alice, bob, admin


def test_a_store_from_before_owners_is_migrated_and_its_sessions_are_nobodys(
    tmp_path: Path,
) -> None:
    path = tmp_path / "host.sqlite3"
    with SQLiteStore(path) as store:
        with_two_sessions_on(make_host(store))[0].commit()
    # the file as schema 2 wrote it: no owner column
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE sessions DROP COLUMN owner")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 3
        host = make_host(store)
        alice, bob, admin = peers(host)
        assert alice.listed() == [] and bob.listed() == []
        assert admin.listed() == [ALICE_S, BOB_S]
        assert host.session_owner(ALICE_S) is None
        # new sessions are owned again
        assert "result" in alice.create_session("alice-2")
        assert alice.listed() == [session_uri("alice-2")]


def test_the_policy_is_stateless_and_bound_per_host() -> None:
    shared = OwnershipPolicy(owner_key=lambda p: getattr(p, "name", None))
    first = Host(clock=lambda: 0, root=t.RootState(agents=()), authorize=shared)
    second = Host(clock=lambda: 0, root=t.RootState(agents=()), authorize=shared)

    class User:
        def __init__(self, name: str) -> None:
            self.name = name

    first.create_session(session_uri("a"), provider="demo", principal=User("ann"))
    assert first.session_owner(session_uri("a")) == "ann"
    assert first.may(User("ann"), session_uri("a"), Operation.SEE)
    assert not first.may(User("ben"), session_uri("a"), Operation.SEE)
    assert not second.may(User("ann"), session_uri("a"), Operation.SEE)


@pytest.mark.parametrize("principal", ["bob", None])
def test_create_chat_in_a_foreign_session_creates_nothing(principal: object) -> None:
    host, alice, _bob, _admin = with_two_sessions()
    stranger = Peer(host, alice.embedder, principal, f"client-{principal}-x")
    stranger.initialize()
    answer = stranger.request("createChat", {"channel": ALICE_S, "chat": chat_uri("x")})
    assert error_code(answer) == SESSION_NOT_FOUND
    assert not host.has_channel(chat_uri("x"))


def test_the_example_of_docs_host_md_runs() -> None:
    text = (Path(__file__).parent.parent / "docs" / "host.md").read_text()
    section = text[text.index("## Users kept apart: `authorize`"):]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, "docs/host.md", "exec"), {})


def test_a_terminal_of_a_foreign_session_cannot_be_disposed() -> None:
    host, _alice, bob, _admin = with_two_sessions()
    host.create_terminal("ahp-terminal:/alice-t", claim=t.TerminalSessionClaim(session=ALICE_S))
    refused = bob.request("disposeTerminal", {"channel": "ahp-terminal:/alice-t"})
    assert refused["error"] == {"code": NOT_FOUND, "message": "no terminal 'ahp-terminal:/alice-t'"}
    assert host.has_channel("ahp-terminal:/alice-t")


def test_list_cursors_under_a_policy_count_nobody_elses_sessions() -> None:
    host = make_host()
    alice, bob, _admin = peers(host)
    for n in range(5):
        alice.create_session(f"alice-{n}")
        for m in range(3):
            bob.create_session(f"bob-{n}-{m}")
    listed, cursor, cursors = [], None, []
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        result = alice.request("listSessions", params)["result"]
        listed += [item["resource"] for item in result["items"]]
        cursor = result.get("nextCursor")
        if cursor is None:
            break
        cursors.append(cursor)
    assert listed == [session_uri(f"alice-{n}") for n in range(5)]
    # opaque: not the ordinals (1, 5, 9 ...), which would count bob's sessions between
    assert all(len(c) == 16 and not c.isdigit() for c in cursors), cursors
    for forged in ("5", "0" * 16, "f" * 16, cursors[0][::-1], "x"):
        answer = alice.request("listSessions", {"cursor": forged})
        assert error_code(answer) == int(JsonRpcErrorCode.INVALID_PARAMS), forged


@given(st.integers(0, 2**64 - 1), st.binary(min_size=16, max_size=16))
def test_a_sealed_cursor_opens_to_its_ordinal(ordinal: int, key: bytes) -> None:
    seal = CursorSeal(key)
    cursor = seal.seal(ordinal)
    assert len(cursor) == 16 and seal.open(cursor) == ordinal


def test_a_policy_that_fails_refuses() -> None:
    def broken(principal: object, session: str, operation: Operation) -> bool:
        if principal == "bob":
            raise RuntimeError("the identity provider is down")
        return True

    host = make_host(authorize=broken)
    alice, bob, _admin = peers(host)
    alice.create_session("alice-1")
    assert bob.listed() == [] and alice.listed() == [ALICE_S]
    assert error_code(bob.request("subscribe", {"channel": ALICE_S})) == NOT_FOUND
    assert error_code(bob.create_session("bob-1")) == int(AhpErrorCode.PERMISSION_DENIED)
    # the ready-made policy with an owner key or admin test of the embedder's that fails
    failing: list[tuple[Any, Any]] = [(lambda p: 1 / 0, lambda p: False),
                                      (lambda p: p, lambda p: 1 / 0),
                                      (lambda p: 42, lambda p: False)]
    for owner_key, is_admin in failing:
        ready = Host(clock=lambda: 0, root=t.RootState(agents=()),
                     authorize=OwnershipPolicy(owner_key=owner_key, is_admin=is_admin))
        ready.create_session(session_uri("x"), provider="demo", principal="ann")
        assert ready.session_owner(session_uri("x")) in (None, "ann")
        assert not ready.may("ann", session_uri("x"), Operation.SEE)
