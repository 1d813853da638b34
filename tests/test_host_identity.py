"""One open connection per clientId, own active-client entries only, reconnect
memory that throwaways cannot evict, and the per-connection budgets: the
sans-I/O host core driven with raw JSON-RPC messages (and, where a real
client helps, the in-memory network)."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.client import ClientConnection
from agenthost_protocol.client import Initialized as ClientInitialized
from agenthost_protocol.client import Reconnected as ClientReconnected
from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.host import (
    HOLD,
    ClientAction,
    ClientActionApplied,
    ClientIdClaimed,
    ConnectionClosed,
    ConnectionState,
    Event,
    Host,
    HostConnection,
    HostLimits,
    Initialized,
    Reconnected,
    ReviewVerdict,
)
from agenthost_protocol.host.sessions import ClientBook
from agenthost_protocol.testing.network import Network
from agenthost_protocol.types.error_codes import AhpErrorCode, JsonRpcErrorCode

NOW = 1_767_225_600_000
ROOT = "ahp-root://"
SESSION = "ahp-session:/s1"
CHAT = "ahp-chat:/c1"
NOWHERE = "ahp-session:/nowhere"
VERSION = "0.7.0"

ALREADY_EXISTS = int(AhpErrorCode.ALREADY_EXISTS)
INVALID_REQUEST = int(JsonRpcErrorCode.INVALID_REQUEST)
INVALID_PARAMS = int(JsonRpcErrorCode.INVALID_PARAMS)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.ms = NOW

    def __call__(self) -> int:
        return self.ms


def make_host(clock: Clock | None = None, *, session: bool = True, **kwargs: Any) -> Host:
    host = Host(clock=clock if clock is not None else Clock(), **kwargs)
    if session:
        host.create_session(SESSION, provider="test", title="untitled")
        host.ready_session(SESSION, default_chat=CHAT)
    return host


def request(id_: Any, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def note(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def init_params(client_id: str, subs: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"protocolVersions": [VERSION], "clientId": client_id,
            "initialSubscriptions": list(subs)}


def reconnect_params(client_id: str, seen: int, subs: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"clientId": client_id, "lastSeenServerSeq": seen, "subscriptions": list(subs)}


def send(conn: HostConnection, obj: Any) -> list[Any]:
    """Feed one message, return what the connection must send (decoded)."""
    conn.receive_data(json.dumps(obj).encode())
    return drain(conn)


def drain(conn: HostConnection) -> list[Any]:
    return [json.loads(x) for x in conn.data_to_send()]


def initialize(host: Host, client_id: str, subs: tuple[str, ...] = ()) -> HostConnection:
    conn = host.connect()
    [answer] = send(conn, request(1, "initialize", init_params(client_id, subs)))
    assert "result" in answer, answer
    return conn


def events(host: Host) -> list[Event]:
    return list(host.events())


def title_changed(title: str) -> dict[str, Any]:
    return {"type": "session/titleChanged", "title": title}


def dispatch(conn: HostConnection, channel: str, seq: int, action: dict[str, Any]) -> list[Any]:
    return send(conn, note("dispatchAction",
                           {"channel": channel, "clientSeq": seq, "action": action}))


def error_of(answer: dict[str, Any], id_: Any) -> tuple[int, str]:
    assert answer["id"] == id_, answer
    assert "error" in answer, answer
    return answer["error"]["code"], answer["error"]["message"]


def holding(host: Host, client_id: str) -> list[HostConnection]:
    return [c for c in host.connections
            if c.client_id == client_id and c.state is ConnectionState.OPEN]


def claim(host: Host, holder: HostConnection, client_id: str, *, method: str = "initialize",
          params: dict[str, Any] | None = None, id_: Any = 1) -> HostConnection:
    """A new connection whose handshake names ``client_id``, held by ``holder``: parked."""
    events(host)
    claimant = host.connect()
    if params is None:
        params = init_params(client_id)
    assert send(claimant, request(id_, method, params)) == []
    [event] = events(host)
    assert isinstance(event, ClientIdClaimed)
    assert event.connection is claimant and event.holder is holder
    assert event.client_id == client_id
    assert claimant.state is ConnectionState.AWAITING_INITIALIZE
    return claimant


# ── one open connection per clientId ────────────────────────────────────────


def test_a_claim_on_a_live_holder_is_refused_and_the_holder_is_untouched() -> None:
    held: list[ClientAction] = []

    def review(action: ClientAction) -> ReviewVerdict:
        held.append(action)
        return HOLD

    host = make_host(review=review)
    holder = initialize(host, "x", subs=(ROOT, SESSION))
    dispatch(holder, SESSION, 1, title_changed("held"))
    assert len(host.held_actions) == 1
    claimant = claim(host, holder, "x", id_="c-1")
    host.settle_claim(claimant, holder_alive=True)
    [answer] = drain(claimant)
    code, message = error_of(answer, "c-1")
    assert code == ALREADY_EXISTS == -32010
    assert "'x'" in message
    assert claimant.state is ConnectionState.AWAITING_INITIALIZE and claimant.client_id is None
    assert events(host) == []
    # the holder: still open, subscribed, its held action still pending, still served
    assert holder.state is ConnectionState.OPEN and holder.client_id == "x"
    assert holder.subscriptions == (ROOT, SESSION)
    assert host.held_actions == tuple(held)
    assert drain(holder) == []
    envelope = host.accept_held(held[0])
    assert envelope is not None
    [applied] = events(host)
    assert isinstance(applied, ClientActionApplied) and applied.connection is holder
    [echo] = drain(holder)
    assert echo["params"]["serverSeq"] == envelope.server_seq
    assert echo["params"]["origin"] == {"clientId": "x", "clientSeq": 1}
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="from the host"))
    [env] = drain(holder)
    assert env["params"]["action"]["title"] == "from the host"
    assert [send(holder, request(9, "ping", {}))[0]["result"]] == [None]
    # a second settle of a settled claim does nothing
    host.settle_claim(claimant, holder_alive=False)
    assert holder.state is ConnectionState.OPEN and drain(claimant) == []
    assert events(host) == []
    # the refused connection may still handshake as someone else
    [answer] = send(claimant, request(2, "initialize", init_params("y")))
    assert "result" in answer
    assert holding(host, "x") == [holder] and holding(host, "y") == [claimant]


def test_a_claim_on_a_dead_holder_closes_it_and_the_handshake_proceeds() -> None:
    host = make_host()
    holder = initialize(host, "x", subs=(ROOT, SESSION))
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="queued for the holder"))
    claimant = claim(host, holder, "x", params=init_params("x", (SESSION,)), id_=7)
    assert drain(claimant) == []
    host.settle_claim(claimant, holder_alive=False)
    # what was queued for the dead holder is dropped, and it is closed
    assert holder.closed and holder.data_to_send() == []
    assert holder not in host.connections
    closed, initialized = events(host)
    assert isinstance(closed, ConnectionClosed) and closed.connection is holder
    assert isinstance(initialized, Initialized) and initialized.connection is claimant
    assert initialized.client_id == "x"
    [answer] = drain(claimant)
    assert answer["id"] == 7
    assert [s["resource"] for s in answer["result"]["snapshots"]] == [SESSION]
    assert claimant.state is ConnectionState.OPEN and claimant.subscriptions == (SESSION,)
    assert holding(host, "x") == [claimant]
    # the new connection is the one served now
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="after"))
    assert len(drain(claimant)) == 1 and holder.data_to_send() == []
    # settling again does nothing
    host.settle_claim(claimant, holder_alive=False)
    assert claimant.state is ConnectionState.OPEN and events(host) == []


def test_a_first_reconnect_is_a_claim_too_and_gets_its_replay_when_the_holder_is_dead() -> None:
    host = make_host()
    holder = initialize(host, "x", subs=(SESSION,))
    seen = host.server_seq
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="missed"))
    claimant = claim(host, holder, "x", method="reconnect",
                     params=reconnect_params("x", seen, (SESSION, NOWHERE)))
    host.settle_claim(claimant, holder_alive=False)
    [answer] = drain(claimant)
    result = answer["result"]
    assert result["type"] == "replay"
    assert [(e["serverSeq"], e["action"]["title"]) for e in result["actions"]] == [
        (seen + 1, "missed")]
    assert result["missing"] == [NOWHERE]
    closed, reconnected = events(host)
    assert isinstance(closed, ConnectionClosed) and closed.connection is holder
    assert isinstance(reconnected, Reconnected) and reconnected.connection is claimant
    assert reconnected.replayed and reconnected.protocol_version == VERSION
    assert holding(host, "x") == [claimant] and claimant.subscriptions == (SESSION,)


def test_a_first_reconnect_on_a_live_holder_is_refused() -> None:
    host = make_host()
    holder = initialize(host, "x", subs=(SESSION,))
    claimant = claim(host, holder, "x", method="reconnect",
                     params=reconnect_params("x", 0, (SESSION,)), id_=3)
    host.settle_claim(claimant, holder_alive=True)
    [answer] = drain(claimant)
    assert error_of(answer, 3)[0] == ALREADY_EXISTS
    assert holding(host, "x") == [holder] and holder.subscriptions == (SESSION,)
    assert claimant.subscriptions == () and events(host) == []


def test_a_half_open_client_reconnects_through_a_claim_on_the_network() -> None:
    """A real client whose old transport the host still thinks open: its
    reconnect waits for the probe, then replays what it missed."""
    clock = Clock()
    host = make_host(clock)
    net = Network(host)
    client = ClientConnection("x", clock=clock)
    old = net.connect(client)
    old.send(client.initialize(initial_subscriptions=(SESSION,)))
    net.run_until_quiet()
    [event] = old.take_events()
    assert isinstance(event, ClientInitialized)
    events(host)
    # the transport breaks on the client's side only: the host keeps its end open
    old.open = False
    client.connection_lost()
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="while half-open"))
    new = net.connect(client)
    new.send(client.reconnect())
    net.run_until_quiet()
    assert new.take_events() == []  # parked
    [claimed] = events(host)
    assert isinstance(claimed, ClientIdClaimed)
    assert claimed.connection is new.connection and claimed.holder is old.connection
    host.settle_claim(new.connection, holder_alive=False)
    net.run_until_quiet()
    [event] = new.take_events()
    assert isinstance(event, ClientReconnected)
    assert event.outcome.kind is t.ReconnectResultType.REPLAY
    state = client.confirmed(SESSION)
    assert isinstance(state, t.SessionState) and state.title == "while half-open"
    assert old.connection.closed and holding(host, "x") == [new.connection]


@pytest.mark.parametrize("how", ["connection_lost", "close"])
def test_a_holder_that_closes_on_its_own_resumes_the_claim(how: str) -> None:
    host = make_host()
    holder = initialize(host, "x", subs=(SESSION,))
    claimant = claim(host, holder, "x", params=init_params("x", (ROOT,)), id_=5)
    if how == "connection_lost":
        holder.connection_lost()
    else:
        holder.close("bye")
    closed, initialized = events(host)
    assert isinstance(closed, ConnectionClosed) and closed.connection is holder
    assert isinstance(initialized, Initialized) and initialized.connection is claimant
    [answer] = drain(claimant)
    assert answer["id"] == 5 and answer["result"]["protocolVersion"] == VERSION
    assert holding(host, "x") == [claimant]
    # the probe's late verdict, whichever, changes nothing
    for alive in (True, False):
        host.settle_claim(claimant, holder_alive=alive)
        assert claimant.state is ConnectionState.OPEN
        assert drain(claimant) == [] and events(host) == []


def test_requests_while_parked_are_refused_but_ping_is_answered() -> None:
    host = make_host()
    holder = initialize(host, "x")
    claimant = claim(host, holder, "x", id_=1)
    for id_, method, params in (
        (2, "subscribe", {"channel": SESSION}),
        (3, "initialize", init_params("x")),
        (4, "initialize", init_params("someone-else")),
        (5, "reconnect", reconnect_params("x", 0)),
        (6, "listSessions", {}),
    ):
        [answer] = send(claimant, request(id_, method, params))
        code, message = error_of(answer, id_)
        assert code == INVALID_REQUEST == -32600
        assert "still in progress" in message
    [pong] = send(claimant, request(7, "ping", {}))
    assert pong == {"jsonrpc": "2.0", "id": 7, "result": None}
    # notifications before the handshake are dropped, as always
    assert dispatch(claimant, SESSION, 1, title_changed("no")) == []
    assert events(host) == [] and host.held_actions == ()
    # the parked handshake is still the one settled
    host.settle_claim(claimant, holder_alive=True)
    [answer] = drain(claimant)
    assert error_of(answer, 1)[0] == ALREADY_EXISTS


@pytest.mark.parametrize("how", ["connection_lost", "close"])
def test_a_claimant_that_closes_while_parked_is_forgotten(how: str) -> None:
    host = make_host()
    holder = initialize(host, "x", subs=(SESSION,))
    claimant = claim(host, holder, "x")
    if how == "connection_lost":
        claimant.connection_lost()
    else:
        claimant.close()
    [closed] = events(host)
    assert isinstance(closed, ConnectionClosed) and closed.connection is claimant
    for alive in (False, True):
        host.settle_claim(claimant, holder_alive=alive)
        assert holder.state is ConnectionState.OPEN and holder.subscriptions == (SESSION,)
        assert claimant.data_to_send() == [] and events(host) == []
    # and the holder closing later resumes nothing
    holder.connection_lost()
    assert [type(e) for e in events(host)] == [ConnectionClosed]
    assert claimant.closed and claimant.client_id is None


def test_several_claimants_of_one_dead_holder_take_turns() -> None:
    host = make_host()
    holder = initialize(host, "x")
    first = host.connect()
    second = host.connect()
    assert send(first, request(1, "initialize", init_params("x"))) == []
    assert send(second, request(1, "initialize", init_params("x"))) == []
    claims = events(host)
    assert [(e.connection, e.holder) for e in claims if isinstance(e, ClientIdClaimed)] == [
        (first, holder), (second, holder)]
    host.settle_claim(first, holder_alive=False)
    # the first goes through; the second now claims from the first
    closed, initialized, claimed = events(host)
    assert isinstance(closed, ConnectionClosed) and closed.connection is holder
    assert isinstance(initialized, Initialized) and initialized.connection is first
    assert isinstance(claimed, ClientIdClaimed)
    assert claimed.connection is second and claimed.holder is first
    assert "result" in drain(first)[0] and drain(second) == []
    assert holding(host, "x") == [first]
    host.settle_claim(second, holder_alive=True)
    [answer] = drain(second)
    assert error_of(answer, 1)[0] == ALREADY_EXISTS
    assert holding(host, "x") == [first] and events(host) == []


def test_a_live_refusal_of_one_claimant_leaves_the_others_parked() -> None:
    host = make_host()
    holder = initialize(host, "x")
    first = claim(host, holder, "x")
    second = claim(host, holder, "x")
    host.settle_claim(first, holder_alive=True)
    assert error_of(drain(first)[0], 1)[0] == ALREADY_EXISTS
    assert drain(second) == [] and events(host) == []
    holder.connection_lost()
    closed, initialized = events(host)
    assert isinstance(closed, ConnectionClosed) and closed.connection is holder
    assert isinstance(initialized, Initialized) and initialized.connection is second
    assert holding(host, "x") == [second]


def test_claims_are_per_client_id() -> None:
    host = make_host()
    x = initialize(host, "x")
    y = initialize(host, "y")
    claimant = claim(host, x, "x")
    # a handshake naming a clientId nobody holds goes straight through
    free = host.connect()
    [answer] = send(free, request(1, "initialize", init_params("z")))
    assert "result" in answer
    # a client closed earlier does not hold its id
    y.connection_lost()
    events(host)
    again = host.connect()
    [answer] = send(again, request(1, "reconnect", reconnect_params("y", 0)))
    assert answer["result"]["type"] == "replay"
    assert holding(host, "x") == [x] and claimant.state is ConnectionState.AWAITING_INITIALIZE


def test_a_stale_verdict_about_a_closed_holder_does_not_close_the_next_holder() -> None:
    """An embedder that settles each ``ClientIdClaimed`` with the probe of *its*
    holder (as ``aio.server`` does) must not close a connection nobody probed.

    A holds "x" and is dead; B and C claim it, each probe is of A.  B's verdict
    (dead) closes A, B opens, and C now claims from B (a new event, a new probe
    due).  C's first probe, of A, then ends (dead): that verdict is about A, a
    claim already settled when A closed, and must not close B, which is alive
    and was never probed.
    """
    host = make_host()
    a = initialize(host, "x", subs=(SESSION,))
    b = host.connect()
    c = host.connect()
    send(b, request(1, "reconnect", reconnect_params("x", host.server_seq, (SESSION,))))
    send(c, request(1, "initialize", init_params("x")))
    alive = {a: False, b: True}
    queue = [e for e in events(host) if isinstance(e, ClientIdClaimed)]
    assert [(e.connection, e.holder) for e in queue] == [(b, a), (c, a)]
    # the embedder: for each claim, probe its holder and settle with the verdict
    while queue:
        event = queue.pop(0)
        host.settle_claim(event.connection, holder_alive=alive[event.holder],
                          holder=event.holder)
        queue.extend(e for e in events(host) if isinstance(e, ClientIdClaimed))
    assert b.state is ConnectionState.OPEN, "B was closed on a verdict about A"
    assert holding(host, "x") == [b]
    assert error_of(drain(c)[0], 1)[0] == ALREADY_EXISTS


# ── own active-client entries only ──────────────────────────────────────────


def active_clients(host: Host) -> list[str]:
    state = host.state(SESSION)
    assert isinstance(state, t.SessionState)
    return [entry.client_id for entry in state.active_clients]


def entry_of(client_id: str, tool: str = "run") -> dict[str, Any]:
    return {"clientId": client_id, "tools": [{"name": tool}]}


def test_a_client_sets_and_removes_only_its_own_active_client_entry() -> None:
    host = make_host()
    a = initialize(host, "a", subs=(SESSION,))
    b = initialize(host, "b", subs=(SESSION,))

    def outcome(conn: HostConnection, seq: int, action: dict[str, Any]) -> str | None:
        """The dispatcher's echo: ``None`` if applied, else the rejection reason."""
        seq_before = host.server_seq
        [echo] = dispatch(conn, SESSION, seq, action)
        assert echo["params"]["serverSeq"] == seq_before + 1
        assert echo["params"]["origin"]["clientSeq"] == seq
        reason: str | None = echo["params"].get("rejectionReason")
        return reason

    assert outcome(a, 1, {"type": "session/activeClientSet",
                          "activeClient": entry_of("a")}) is None
    assert [m["params"]["origin"]["clientId"] for m in drain(b)] == ["a"]
    assert active_clients(host) == ["a"]
    # b writes a's entry: rejected, to b alone, and the state keeps a's tools
    before = host.state(SESSION)
    forged: list[dict[str, Any]] = [
        {"type": "session/activeClientSet", "activeClient": entry_of("a", "forged")},
        {"type": "session/activeClientRemoved", "clientId": "a"},
        {"type": "session/activeClientSet", "activeClient": entry_of("nobody")},
        {"type": "session/activeClientRemoved", "clientId": "nobody"},
    ]
    for seq, action in enumerate(forged, start=1):
        reason = outcome(b, seq, action)
        assert reason is not None and "its own active-client entry" in reason, reason
        assert drain(a) == []
    assert host.state(SESSION) == before
    # its own entry: applied
    assert outcome(b, 5, {"type": "session/activeClientSet",
                          "activeClient": entry_of("b")}) is None
    drain(a)
    assert active_clients(host) == ["a", "b"]
    assert outcome(b, 6, {"type": "session/activeClientRemoved", "clientId": "b"}) is None
    drain(a)
    assert active_clients(host) == ["a"]
    assert outcome(a, 2, {"type": "session/activeClientRemoved", "clientId": "a"}) is None
    assert active_clients(host) == []


def test_the_host_itself_may_still_write_any_active_client_entry() -> None:
    host = make_host()
    entry = t.SessionActiveClient(client_id="somebody", tools=())
    host.dispatch(SESSION, t.SessionActiveClientSetAction(active_client=entry))
    assert active_clients(host) == ["somebody"]
    host.remove_active_client(SESSION, "somebody")
    assert active_clients(host) == []


# ── reconnect memory that throwaways cannot evict ───────────────────────────


def throwaway(host: Host, client_id: str) -> None:
    """A handshake with nothing a reconnect would resume: no subscription, no action."""
    initialize(host, client_id).connection_lost()


@pytest.mark.parametrize("pending", ["subscriptions", "an action", "an active-client entry"])
def test_throwaway_handshakes_never_evict_a_client_with_pending_state(pending: str) -> None:
    capacity = 3
    host = make_host(remembered_clients=capacity)
    if pending == "an active-client entry":
        # set by the host, so that the client itself has no subscription nor action
        host.dispatch(SESSION, t.SessionActiveClientSetAction(
            active_client=t.SessionActiveClient(client_id="victim", tools=())))
        victim = initialize(host, "victim")
    elif pending == "an action":
        victim = initialize(host, "victim")
        dispatch(victim, SESSION, 1, title_changed("mine"))
    else:
        victim = initialize(host, "victim", subs=(ROOT,))
    seen = host.server_seq
    victim.connection_lost()
    for n in range(capacity + 100):
        throwaway(host, f"throwaway-{n}")
        assert host.remembered_version("victim") == VERSION, n
    # the throwaways displaced each other, oldest first
    assert host.remembered_version("throwaway-0") is None
    assert host.remembered_version(f"throwaway-{capacity + 99}") == VERSION
    back = host.connect()
    [answer] = send(back, request(1, "reconnect", reconnect_params("victim", seen, (ROOT,))))
    assert answer["result"]["type"] == "replay"


def test_a_throwaway_client_is_itself_evictable() -> None:
    host = make_host(remembered_clients=2)
    throwaway(host, "plain")
    throwaway(host, "t1")
    throwaway(host, "t2")
    assert host.remembered_version("plain") is None
    conn = host.connect()
    [answer] = send(conn, request(1, "reconnect", reconnect_params("plain", 0)))
    assert error_of(answer, 1)[0] == INVALID_PARAMS


def subscriber(host: Host, client_id: str) -> None:
    """A throwaway that subscribes, so the host keeps what a reconnect would resume."""
    initialize(host, client_id, subs=(ROOT,)).connection_lost()


def test_subscribing_throwaways_never_evict_a_kept_client_within_its_age() -> None:
    """Defect 9 of issue 29: 1,025 fresh clientIds that subscribed evicted a
    client that had dropped with subscriptions; its reconnect was refused."""
    clock = Clock()
    host = make_host(clock)
    victim = initialize(host, "victim", subs=(ROOT,))
    seen = host.server_seq
    victim.connection_lost()
    for n in range(1_100):
        clock.ms += 1
        subscriber(host, f"throwaway-{n}")
    assert host.remembered_version("victim") == VERSION
    back = host.connect()
    [answer] = send(back, request(1, "reconnect", reconnect_params("victim", seen, (ROOT,))))
    assert answer["result"]["type"] == "replay"


def test_kept_entries_are_capped_and_the_oldest_past_its_minimum_age_goes() -> None:
    clock = Clock()
    host = make_host(clock, remembered_clients=3, remembered_clients_with_state=5,
                     remembered_clients_min_age_ms=1_000)
    for n in range(5):
        subscriber(host, f"kept-{n}")
    for n in range(100):
        throwaway(host, f"throwaway-{n}")
    assert all(host.remembered_version(f"kept-{n}") == VERSION for n in range(5))
    # the cap is full of entries within their minimum age: the newcomer is remembered
    # as a plain entry, and the others stay
    subscriber(host, "early")
    assert host.remembered_version("early") == VERSION
    assert all(host.remembered_version(f"kept-{n}") == VERSION for n in range(5))
    for n in range(3):
        throwaway(host, f"later-{n}")
    assert host.remembered_version("early") is None
    # past the minimum age, a newer kept client takes the oldest kept entry's place
    clock.ms += 1_000
    subscriber(host, "kept-new")
    assert host.remembered_version("kept-0") is None
    assert all(host.remembered_version(f"kept-{n}") == VERSION for n in range(1, 5))
    assert host.remembered_version("kept-new") == VERSION


# three times the caps below, or, in the long profile, fifty times
THROWAWAYS = 100_000 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 10_000


def test_reconnect_memory_stays_bounded_under_subscribing_throwaways() -> None:
    clock = Clock()
    cap, plain = 2_000, 1024
    host = make_host(clock, remembered_clients_with_state=cap)
    victim = initialize(host, "victim", subs=(ROOT,))
    victim.connection_lost()
    for n in range(THROWAWAYS):
        clock.ms += 1  # 100 s at most, well within the hour a kept entry is protected
        subscriber(host, f"throwaway-{n}")
        if n % 1_000 == 0:
            assert len(host._clients) <= cap + plain
    assert len(host._clients) <= cap + plain
    assert host._clients.kept_count == cap
    assert host.remembered_version("victim") == VERSION
    assert len(host._connections) == 0 and len(host._online) == 0


def test_a_client_id_longer_than_the_limit_is_refused_and_not_remembered() -> None:
    """Each remembered clientId costs its length: an unbounded one multiplied
    the bounded number of entries into an unbounded memory."""
    host = make_host(limits=HostLimits(max_client_id_length=8))
    for method, params in (("initialize", init_params("x" * 9, (ROOT,))),
                           ("reconnect", reconnect_params("x" * 9, 0, (ROOT,)))):
        conn = host.connect()
        [answer] = send(conn, request(1, method, params))
        code, message = error_of(answer, 1)
        assert code == INVALID_PARAMS and "clientId too long: at most 8" in message
        # the connection still waits for a handshake, and nothing was remembered
        [answer] = send(conn, request(2, "initialize", init_params("x" * 8)))
        assert "result" in answer, answer
        conn.connection_lost()
    assert host.remembered_version("x" * 9) is None
    assert host.remembered_version("x" * 8) == VERSION
    assert HostLimits().max_client_id_length == 256


def test_a_kept_client_stays_kept_across_a_plain_reconnect() -> None:
    host = make_host(remembered_clients=2)
    initialize(host, "victim", subs=(ROOT,)).connection_lost()
    back = host.connect()
    send(back, request(1, "reconnect", reconnect_params("victim", 0)))
    back.connection_lost()  # this time with nothing subscribed
    for n in range(10):
        throwaway(host, f"throwaway-{n}")
    assert host.remembered_version("victim") == VERSION


def completed_turns(host: Host, count: int) -> None:
    for n in range(1, count + 1):
        host.dispatch(CHAT, t.ChatTurnStartedAction(
            turn_id=f"t{n}", started_at="2026-01-01T00:00:00.000Z",
            message=t.Message(text=f"m{n}", origin=t.MessageOrigin(kind=t.MessageKind.USER))))
        host.dispatch(CHAT, t.ChatTurnCompleteAction(turn_id=f"t{n}", duration=1))


def test_throwaway_handshakes_leave_a_connected_clients_views_alone() -> None:
    """A connected client with a trimmed chat view has pending state right now;
    throwaway handshakes evicting its (not yet kept) entry must not take its
    view: the core would stop answering its own cursor and stop sending it the
    hidden turns a broadcast needs."""
    host = make_host(remembered_clients=2)
    completed_turns(host, 5)
    trimmed = initialize(host, "trimmed")
    [answer] = send(trimmed, request(2, "subscribe", {"channel": CHAT, "view": {"turns": 2}}))
    cursor = answer["result"]["snapshot"]["state"]["turnsNextCursor"]
    assert cursor is not None
    for n in range(3):
        throwaway(host, f"throwaway-{n}")
    events(host)
    out = send(trimmed, request(3, "fetchTurns", {"channel": CHAT, "cursor": cursor}))
    assert events(host) == [], "the core forgot the view: the embedder got fetchTurns"
    loaded, answer = out
    assert loaded["params"]["action"]["type"] == "chat/turnsLoaded"
    assert answer == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_client_book_remember_with_keep() -> None:
    book = ClientBook(3, None, kept_capacity=3, kept_min_age_ms=100)
    assert book.remember("kept", VERSION, 1, keep=True) == []
    evicted: list[str] = []
    for n in range(3 + 100):
        evicted += book.remember(f"t{n}", VERSION, 2 + n, keep=False)
        assert "kept" in book and len(book) == min(n + 2, 4)
    assert evicted == [f"t{n}" for n in range(100)]
    # keep=None keeps what was recorded
    book.remember("kept", VERSION, 500)
    assert book.kept("kept")
    book.remember("t102", VERSION, 501)
    assert not book.kept("t102")
    # kept entries never displace plain ones, nor plain ones kept ones
    assert book.remember("k2", VERSION, 600, keep=True) == []
    assert book.remember("k3", VERSION, 601, keep=True) == []
    assert book.kept_count == 3 and len(book) == 6
    # a fourth kept one: "kept" (touched at 500) is not 100 ms old yet, so the
    # newcomer is remembered as plain, displacing the oldest plain entry
    assert book.remember("k4", VERSION, 599, keep=True) == ["t100"]
    assert not book.kept("k4") and book.kept("kept")
    # past its minimum age, the oldest kept entry makes room
    assert book.remember("k5", VERSION, 602, keep=True) == ["kept"]
    assert sorted(book._kept) == ["k2", "k3", "k5"]
    assert ClientBook(0, None).remember("late", VERSION, 603, keep=False) == ["late"]


@given(st.lists(st.tuples(st.integers(0, 9), st.sampled_from([True, False, None]),
                          st.integers(0, 3)),
                max_size=60),
       st.integers(1, 4), st.integers(0, 4), st.integers(0, 5))
def test_client_book_never_evicts_kept_for_a_throwaway(
    ops: list[tuple[int, bool | None, int]], capacity: int, kept_capacity: int, min_age: int
) -> None:
    book = ClientBook(capacity, None, kept_capacity=kept_capacity, kept_min_age_ms=min_age)
    # the model: id -> (keep, touched), each table least recently touched first
    plain: dict[str, int] = {}
    kept: dict[str, int] = {}
    now = 0
    for n, keep, step in ops:
        now += step
        client_id = f"c{n}"
        wanted = (client_id in kept) if keep is None else keep
        plain.pop(client_id, None)
        kept.pop(client_id, None)
        evicted = book.remember(client_id, VERSION, now, keep=keep)
        for victim in evicted:
            if victim in kept:
                # a kept entry goes only for a kept newcomer, and only past its minimum age
                assert wanted and now - kept.pop(victim) >= min_age
                assert victim == evicted[0]
            else:
                del plain[victim]
        if wanted and book.kept(client_id):
            kept[client_id] = now
        else:
            # demoted only when the cap is full of entries within their minimum age
            assert not wanted or (len(kept) >= kept_capacity and all(
                now - touched < min_age for touched in kept.values()))
            plain[client_id] = now
        assert len(kept) <= kept_capacity and len(plain) <= capacity
        assert book.kept_count == len(kept) and len(book) == len(kept) + len(plain)
        assert all(book.kept(c) for c in kept) and all(c in book for c in plain)
        assert not any(book.kept(c) for c in plain)


# ── budgets ──────────────────────────────────────────────────────────────────


def resources(answer: dict[str, Any]) -> list[str]:
    return [s["resource"] for s in answer["result"]["snapshots"]]


def test_duplicate_initial_subscriptions_are_answered_once() -> None:
    host = make_host(limits=HostLimits(max_subscriptions=3))
    conn = host.connect()
    subs = [ROOT, SESSION, ROOT, NOWHERE, SESSION, ROOT, NOWHERE] * 50
    [answer] = send(conn, request(1, "initialize", {
        "protocolVersions": [VERSION], "clientId": "c", "initialSubscriptions": subs}))
    assert resources(answer) == [ROOT, SESSION]
    assert conn.subscriptions == (ROOT, SESSION)
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="once"))
    assert len(drain(conn)) == 1


def test_duplicate_reconnect_subscriptions_are_answered_once() -> None:
    host = make_host(limits=HostLimits(max_subscriptions=3), replay_max_envelopes=3)
    conn = initialize(host, "c", subs=(SESSION,))
    seen = host.server_seq
    conn.connection_lost()
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="missed"))
    subs = (SESSION, NOWHERE, SESSION, ROOT, NOWHERE, ROOT) * 40
    back = host.connect()
    [answer] = send(back, request(1, "reconnect", reconnect_params("c", seen, subs)))
    result = answer["result"]
    assert result["type"] == "replay"
    assert [e["serverSeq"] for e in result["actions"]] == [seen + 1]
    assert result["missing"] == [NOWHERE]
    assert back.subscriptions == (SESSION, ROOT)
    # the snapshot path: one snapshot per channel
    back.connection_lost()
    for n in range(4):
        host.dispatch(SESSION, t.SessionTitleChangedAction(title=str(n)))
    again = host.connect()
    [answer] = send(again, request(1, "reconnect", reconnect_params("c", seen, subs)))
    assert answer["result"]["type"] == "snapshot"
    assert resources(answer) == [SESSION, ROOT]
    assert again.subscriptions == (SESSION, ROOT)


def test_an_initialize_over_the_subscription_budget_changes_nothing() -> None:
    host = make_host(limits=HostLimits(max_subscriptions=2))
    watcher = initialize(host, "w")
    events(host)
    conn = host.connect()
    # three distinct channels, one of them unknown: over the budget of 2
    [answer] = send(conn, request(1, "initialize", init_params(
        "greedy", (ROOT, SESSION, ROOT, NOWHERE))))
    code, message = error_of(answer, 1)
    assert code == INVALID_PARAMS == -32602
    assert "too many subscriptions" in message
    assert conn.state is ConnectionState.AWAITING_INITIALIZE
    assert conn.client_id is None and conn.subscriptions == ()
    assert host.remembered_version("greedy") is None
    assert events(host) == [] and not conn.closed
    host.dispatch(SESSION, t.SessionTitleChangedAction(title="unheard"))
    assert drain(conn) == [] and drain(watcher) == []
    # within the budget (duplicates count once), the same connection initializes
    [answer] = send(conn, request(2, "initialize", init_params(
        "greedy", (ROOT, SESSION, ROOT, SESSION))))
    assert resources(answer) == [ROOT, SESSION]
    assert holding(host, "greedy") == [conn]


def test_subscribe_beyond_the_budget_is_refused() -> None:
    host = make_host(limits=HostLimits(max_subscriptions=2))
    conn = initialize(host, "c", subs=(ROOT, SESSION))
    [answer] = send(conn, request(2, "subscribe", {"channel": CHAT}))
    code, message = error_of(answer, 2)
    assert code == INVALID_PARAMS and "too many subscriptions" in message
    assert "at most 2" in message
    assert conn.subscriptions == (ROOT, SESSION)
    # subscribing again to a channel it has is no new channel
    [answer] = send(conn, request(3, "subscribe", {"channel": SESSION}))
    assert answer["result"]["snapshot"]["resource"] == SESSION
    # an unknown channel is still NotFound
    [answer] = send(conn, request(4, "subscribe", {"channel": NOWHERE}))
    assert error_of(answer, 4)[0] == int(AhpErrorCode.NOT_FOUND)
    # making room makes it possible
    send(conn, note("unsubscribe", {"channel": ROOT}))
    [answer] = send(conn, request(5, "subscribe", {"channel": CHAT}))
    assert answer["result"]["snapshot"]["resource"] == CHAT
    assert conn.subscriptions == (SESSION, CHAT)


def test_a_reconnect_over_the_subscription_budget_changes_nothing() -> None:
    host = make_host(limits=HostLimits(max_subscriptions=2))
    conn = initialize(host, "c", subs=(SESSION,))
    events(host)
    [answer] = send(conn, request(2, "reconnect", reconnect_params(
        "c", 0, (ROOT, SESSION, CHAT, ROOT))))
    code, message = error_of(answer, 2)
    assert code == INVALID_PARAMS and "too many subscriptions" in message
    assert conn.subscriptions == (SESSION,) and conn.state is ConnectionState.OPEN
    assert events(host) == []
    # a first reconnect over the budget leaves the connection un-initialized
    conn.connection_lost()
    events(host)
    back = host.connect()
    [answer] = send(back, request(1, "reconnect", reconnect_params(
        "c", 0, (ROOT, SESSION, CHAT))))
    assert error_of(answer, 1)[0] == INVALID_PARAMS
    assert back.state is ConnectionState.AWAITING_INITIALIZE and events(host) == []


def reconnect_answer(conn: HostConnection, id_: int) -> dict[str, Any]:
    [answer] = send(conn, request(id_, "reconnect", reconnect_params("c", 0, (ROOT,))))
    assert answer["id"] == id_
    typed: dict[str, Any] = answer
    return typed


def test_too_many_reconnects_on_one_connection() -> None:
    clock = Clock()
    host = make_host(clock, limits=HostLimits(max_reconnects_per_minute=2))
    initialize(host, "c").connection_lost()
    conn = host.connect()
    # the first reconnect of a new connection counts too
    assert "result" in reconnect_answer(conn, 1)
    clock.ms += 30_000
    assert "result" in reconnect_answer(conn, 2)
    clock.ms += 29_999
    answer = reconnect_answer(conn, 3)
    code, message = error_of(answer, 3)
    assert code == INVALID_REQUEST and "too many reconnects" in message
    assert conn.state is ConnectionState.OPEN and conn.subscriptions == (ROOT,)
    # another connection has its own budget
    conn.connection_lost()
    other = host.connect()
    assert "result" in reconnect_answer(other, 1)
    assert "result" in reconnect_answer(other, 2)
    assert "error" in reconnect_answer(other, 3)
    # 60 s after the first, one slot is free again; refusals used none
    clock.ms += 60_000
    assert "result" in reconnect_answer(other, 4)
    assert "result" in reconnect_answer(other, 5)
    assert "error" in reconnect_answer(other, 6)


def test_the_reconnect_window_slides() -> None:
    clock = Clock()
    host = make_host(clock, limits=HostLimits(max_reconnects_per_minute=2))
    initialize(host, "c").connection_lost()
    conn = host.connect()
    start = clock.ms
    assert "result" in reconnect_answer(conn, 1)
    clock.ms = start + 30_000
    assert "result" in reconnect_answer(conn, 2)
    clock.ms = start + 59_999
    assert "error" in reconnect_answer(conn, 3)
    clock.ms = start + 60_000
    assert "result" in reconnect_answer(conn, 4)
    clock.ms = start + 89_999
    assert "error" in reconnect_answer(conn, 5)
    clock.ms = start + 90_000
    assert "result" in reconnect_answer(conn, 6)


@given(st.lists(st.integers(0, 40_000), min_size=1, max_size=25), st.integers(1, 3))
def test_reconnects_are_refused_exactly_beyond_the_budget_of_any_60_s(
    gaps: list[int], budget: int
) -> None:
    clock = Clock()
    host = make_host(clock, session=False,
                     limits=HostLimits(max_reconnects_per_minute=budget))
    initialize(host, "c").connection_lost()
    conn = host.connect()
    accepted: list[int] = []
    for id_, gap in enumerate(gaps, start=1):
        clock.ms += gap
        recent = [at for at in accepted if clock.ms - at < 60_000]
        answer = reconnect_answer(conn, id_)
        if len(recent) < budget:
            assert "result" in answer, (id_, accepted, clock.ms)
            accepted.append(clock.ms)
        else:
            assert error_of(answer, id_)[0] == INVALID_REQUEST


def test_reconnect_claims_count_against_the_reconnect_budget() -> None:
    host = make_host(limits=HostLimits(max_reconnects_per_minute=2))
    initialize(host, "x")
    events(host)
    conn = host.connect()
    for id_ in (1, 2):
        assert send(conn, request(id_, "reconnect", reconnect_params("x", 0))) == []
        [claimed] = events(host)
        assert isinstance(claimed, ClientIdClaimed)
        host.settle_claim(conn, holder_alive=True)
        assert error_of(drain(conn)[0], id_)[0] == ALREADY_EXISTS
    # the third reconnect within the minute on this connection
    answers = send(conn, request(3, "reconnect", reconnect_params("x", 0)))
    assert events(host) == [], "parked again: the holder is probed once more"
    [answer] = answers
    code, message = error_of(answer, 3)
    assert code == INVALID_REQUEST and "too many reconnects" in message


def test_host_limits_are_validated() -> None:
    assert HostLimits() == HostLimits(max_subscriptions=1024, max_reconnects_per_minute=30)
    for bad in ({"max_subscriptions": 0}, {"max_reconnects_per_minute": 0}):
        with pytest.raises(LocalProtocolError):
            HostLimits(**bad)
    host = make_host(session=False)
    assert host.limits == HostLimits()
    host.limits = HostLimits(max_subscriptions=1)
    conn = host.connect()
    [answer] = send(conn, request(1, "initialize", init_params("c", (ROOT, SESSION))))
    assert error_of(answer, 1)[0] == INVALID_PARAMS


# ── the property: one holder per clientId, one answer per request ───────────

CLIENT_IDS = ("x", "y")
HANDSHAKES = ("initialize", "reconnect")

Op = tuple[str, int, int]
OPS: st.SearchStrategy[Op] = st.tuples(
    st.sampled_from([
        "initialize", "initialize", "initialize", "reconnect", "reconnect",
        "settle_alive", "settle_dead", "settle_dead", "connection_lost", "close",
        "fresh", "fresh", "ping", "subscribe",
    ]),
    st.integers(0, 3),
    st.integers(0, len(CLIENT_IDS) - 1),
)


class Tracked:
    """What the test sent on one connection and what came back."""

    def __init__(self, conn: HostConnection) -> None:
        self.conn = conn
        self.next_id = 0
        self.sent: dict[int, tuple[str, str | None]] = {}
        """Request id -> (method, clientId named) for requests sent while not closed."""
        self.answers: Counter[int] = Counter()
        self.last_claim: ClientIdClaimed | None = None

    def unanswered(self) -> list[int]:
        return [id_ for id_ in self.sent if not self.answers[id_]]

    def parked(self) -> bool:
        return not self.conn.closed and bool(self.unanswered())


def collect(everyone: dict[HostConnection, Tracked]) -> list[tuple[HostConnection, Any]]:
    """Drain every connection's output, count the answers; return the answers."""
    out = []
    for item in everyone.values():
        for message in drain(item.conn):
            assert "id" in message, message  # no subscription here ever gets an action
            assert isinstance(message["id"], int) and message["id"] in item.sent, message
            item.answers[message["id"]] += 1
            out.append((item.conn, message))
    return out


def check_invariants(host: Host, everyone: dict[HostConnection, Tracked]) -> None:
    for client_id in CLIENT_IDS:
        assert len(holding(host, client_id)) <= 1, client_id
    for item in everyone.values():
        conn = item.conn
        assert all(n == 1 for n in item.answers.values()), item.answers
        waiting = item.unanswered()
        if conn.closed:
            # a parked handshake dies with its connection; nothing else is left open
            assert len(waiting) <= 1
            assert all(item.sent[id_][0] in HANDSHAKES for id_ in waiting)
            continue
        assert len(waiting) <= 1, (conn, waiting)
        if waiting:
            # parked: a handshake, claimed from the open connection that holds its id
            method, named = item.sent[waiting[0]]
            assert method in HANDSHAKES
            assert conn.state is ConnectionState.AWAITING_INITIALIZE
            [holder] = holding(host, named or "")
            assert holder is not conn
            last = item.last_claim
            assert last is not None and last.holder is holder and last.client_id == named


def run_interleaving(count: int, ops: list[Op]) -> Counter[str]:
    """Run ``ops``, checking each step; return what happened (for coverage)."""
    seen: Counter[str] = Counter()
    host = make_host(session=False)
    slots = [host.connect() for _ in range(count)]
    everyone = {conn: Tracked(conn) for conn in slots}
    position = -1
    for kind, step, which in ops:
        # the next connection by default (``step`` 0), so that simple examples interleave
        position = slot = (position + 1 + step) % count
        conn = slots[slot]
        parked = [c for c in slots if everyone[c].parked()]
        if kind.startswith("settle") and parked and which == 0:
            # as an embedder does, mostly: settle a claim it was told of
            conn = parked[slot % len(parked)]
        item = everyone[conn]
        client_id = CLIENT_IDS[which]
        parked_before = item.parked()
        waiting_before = item.unanswered()
        claimed_from: HostConnection | None = None
        was_closed = conn.closed
        holders_before = {c: c.state for c in host.connections}
        id_: int | None = None
        if kind == "fresh":
            if not conn.closed:
                continue
            conn = slots[slot] = host.connect()
            everyone[conn] = Tracked(conn)
        elif kind in ("settle_alive", "settle_dead"):
            if item.last_claim is not None:
                claimed_from = item.last_claim.holder
            host.settle_claim(conn, holder_alive=kind == "settle_alive")
        elif kind == "connection_lost":
            conn.connection_lost()
        elif kind == "close":
            conn.close()
        else:
            item.next_id += 1
            id_ = item.next_id
            params: dict[str, Any]
            named: str | None = None
            if kind == "initialize":
                params, named = init_params(client_id, (ROOT,)), client_id
            elif kind == "reconnect":
                params, named = reconnect_params(client_id, 0, (ROOT,)), client_id
            elif kind == "subscribe":
                params = {"channel": ROOT}
            else:
                params = {}
            if not was_closed:
                item.sent[id_] = (kind, named)
            conn.receive_data(json.dumps(request(id_, kind, params)))
        answers = collect(everyone)
        new_events = events(host)
        for event in new_events:
            if isinstance(event, ClientIdClaimed):
                everyone[event.connection].last_claim = event
                seen["claimed"] += 1
            elif kind in ("connection_lost", "close") and isinstance(
                event, Initialized | Reconnected
            ):
                seen["resumed by a close"] += 1
        # what each kind of step may do
        if id_ is not None and was_closed:
            assert answers == [] and new_events == []
        elif id_ is not None and parked_before:
            [(_, answer)] = answers
            if kind == "ping":
                assert answer == {"jsonrpc": "2.0", "id": id_, "result": None}
            else:
                assert error_of(answer, id_)[0] == INVALID_REQUEST
            assert new_events == []
            seen["asked while parked"] += 1
        elif kind in ("settle_alive", "settle_dead"):
            if not parked_before:
                assert answers == [] and new_events == []
                assert {c: c.state for c in host.connections} == holders_before
            elif kind == "settle_alive":
                [(answered, answer)] = answers
                assert answered is conn
                assert error_of(answer, waiting_before[0])[0] == ALREADY_EXISTS
                assert new_events == []
                assert {c: c.state for c in host.connections} == holders_before
                seen["refused"] += 1
            else:
                assert claimed_from is not None and claimed_from.closed
                assert isinstance(new_events[0], ConnectionClosed)
                assert new_events[0].connection is claimed_from
                seen["granted"] += 1
        check_invariants(host, everyone)
    return seen


@given(st.integers(2, 4), st.lists(OPS, min_size=10, max_size=40))
def test_one_holder_per_client_id_and_one_answer_per_request(count: int, ops: list[Op]) -> None:
    # two holders to start with: "x" on the first connection, "y" on the second
    prologue: list[Op] = [("initialize", 0, 0), ("initialize", 0, 1)]
    for what in run_interleaving(count, prologue + ops):
        hypothesis.event(what)


def test_the_interleaving_checker_sees_claims() -> None:
    """The property's own sanity: a scripted run through every kind of step."""
    script: list[Op] = [
        ("initialize", 0, 0), ("initialize", 1, 0), ("ping", 1, 0), ("subscribe", 1, 0),
        ("settle_alive", 1, 0), ("reconnect", 1, 0), ("settle_dead", 1, 0),
        ("initialize", 2, 0), ("connection_lost", 1, 0), ("settle_dead", 2, 0),
        ("initialize", 0, 1), ("close", 2, 0), ("fresh", 2, 0), ("reconnect", 2, 0),
        ("fresh", 1, 0), ("reconnect", 1, 1), ("settle_alive", 1, 0),
        ("fresh", 0, 0), ("initialize", 0, 0), ("close", 0, 0), ("settle_dead", 0, 0),
        ("initialize", 1, 0), ("settle_dead", 1, 0), ("close", 1, 0),
    ]
    # the script names connections; the ops step from one to the next
    ops: list[Op] = []
    position = -1
    for kind, slot, which in script:
        ops.append((kind, (slot - position - 1) % 3, which))
        position = slot
    seen = run_interleaving(3, ops)
    assert seen == Counter({"claimed": 5, "asked while parked": 2, "refused": 1,
                            "granted": 2, "resumed by a close": 1})
