"""Unit tests of :mod:`agenthost_protocol.reconciler`: each rule on a hand-made sequence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from attrs import evolve

import agenthost_protocol.reconciler as reconciler_module
from agenthost_protocol.errors import LocalProtocolError, RemoteProtocolError
from agenthost_protocol.reconciler import (
    ClientReconciler,
    PendingAction,
    ReceiveKind,
)
from agenthost_protocol.reducers import reduce
from agenthost_protocol.types import (
    ActionEnvelope,
    ActionOrigin,
    ChatDeltaAction,
    ChatState,
    ChatTurnStartedAction,
    DispatchActionParams,
    JsonRpcErrorCode,
    ReconnectParams,
    ReconnectReplayResult,
    ReconnectResultType,
    ReconnectSnapshotResult,
    SessionIsReadChangedAction,
    SessionState,
    SessionStatus,
    SessionTitleChangedAction,
    Snapshot,
    SnapshotState,
    StateAction,
    UnknownAction,
)

from ._harness import CHAT_A, SESSION, chat_state, clock, message, session_state

ME = "me"
OTHER = "other"


def title(state: SnapshotState) -> str:
    assert isinstance(state, SessionState)
    return state.summary.title


def snapshot(uri: str = SESSION, from_seq: int = 10) -> Snapshot:
    state: SnapshotState = session_state(uri) if uri == SESSION else chat_state(uri)
    return Snapshot(resource=uri, state=state, from_seq=from_seq)


def envelope(
    action: StateAction,
    seq: int,
    *,
    channel: str = SESSION,
    origin: tuple[str, int] | None = None,
    rejection: str | None = None,
) -> ActionEnvelope:
    return ActionEnvelope(
        channel=channel,
        action=action,
        server_seq=seq,
        origin=None if origin is None else ActionOrigin(client_id=origin[0], client_seq=origin[1]),
        rejection_reason=rejection,
    )


def retitle(text: str) -> SessionTitleChangedAction:
    return SessionTitleChangedAction(title=text)


@pytest.fixture
def rec() -> ClientReconciler:
    r = ClientReconciler(ME, now=clock)
    r.subscribe(snapshot(SESSION, 10))
    r.subscribe(snapshot(CHAT_A, 10))
    return r


def frozen_view(r: ClientReconciler) -> Any:
    """Everything observable, to check that a refused call changed nothing."""
    return (
        r.last_seen_server_seq,
        r.channels,
        r.reconnect_params(),
        {c: (r.confirmed(c), r.pending(c), r.optimistic(c)) for c in r.channels},
    )


# ── dispatching ──────────────────────────────────────────────────────────────


def test_dispatch_applies_optimistically_and_numbers_per_connection(rec: ClientReconciler) -> None:
    first = rec.dispatch(SESSION, retitle("mine"))
    second = rec.dispatch(CHAT_A, ChatTurnStartedAction(turn_id="t1", message=message("hi")))
    assert first == DispatchActionParams(channel=SESSION, client_seq=1, action=retitle("mine"))
    assert second.client_seq == 2  # one counter for all channels
    assert title(rec.confirmed(SESSION)) == "untitled"
    assert title(rec.optimistic(SESSION)) == "mine"
    assert rec.pending(SESSION) == (
        PendingAction(channel=SESSION, client_seq=1, action=retitle("mine")),
    )
    chat = rec.optimistic(CHAT_A)
    assert isinstance(chat, ChatState) and chat.active_turn is not None


@pytest.mark.parametrize(
    ("channel", "action", "match"),
    [
        ("ahp-session:/nope", retitle("x"), "not subscribed"),
        (CHAT_A, ChatDeltaAction(turn_id="t", part_id="p", content="x"), "not a client-dispatch"),
        (SESSION, UnknownAction(type="session/fromTheFuture", raw={}), "not a client-dispatch"),
        (SESSION, ChatTurnStartedAction(turn_id="t", message=message("x")), "cannot be dispatch"),
        (CHAT_A, retitle("x"), "cannot be dispatched"),
    ],
)
def test_dispatch_refuses_caller_mistakes(
    rec: ClientReconciler, channel: str, action: StateAction, match: str
) -> None:
    before = frozen_view(rec)
    with pytest.raises(LocalProtocolError, match=match):
        rec.dispatch(channel, action)
    assert frozen_view(rec) == before
    assert rec.dispatch(SESSION, retitle("ok")).client_seq == 1  # no clientSeq was used up


# ── receiving ────────────────────────────────────────────────────────────────


def test_own_echo_pops_pending_and_confirms(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle("mine"))
    received = rec.receive(envelope(retitle("mine"), 11, origin=(ME, 1)))
    assert received.kind is ReceiveKind.ECHO and received.applied
    assert received.echo_of == PendingAction(channel=SESSION, client_seq=1, action=retitle("mine"))
    assert received.channel == SESSION and received.rejection is None
    assert rec.pending(SESSION) == ()
    assert title(rec.confirmed(SESSION)) == "mine"
    assert rec.optimistic(SESSION) is rec.confirmed(SESSION)
    assert rec.last_seen_server_seq == 11


def test_foreign_action_applies_to_confirmed_and_rebases_pending(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, SessionIsReadChangedAction(is_read=True))
    received = rec.receive(envelope(retitle("theirs"), 11, origin=(OTHER, 1)))
    assert received.kind is ReceiveKind.FOREIGN and received.applied
    assert received.echo_of is None
    assert title(rec.confirmed(SESSION)) == "theirs"
    optimistic = rec.optimistic(SESSION)
    assert isinstance(optimistic, SessionState)
    assert optimistic.summary.title == "theirs"  # the foreign change shows through
    assert int(optimistic.summary.status) & SessionStatus.IS_READ  # and ours stays on top
    # a server-originated action (no origin) is foreign too
    assert rec.receive(envelope(retitle("server"), 12)).kind is ReceiveKind.FOREIGN


def test_server_wins_when_the_echo_comes_back(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle("mine"))
    rec.receive(envelope(retitle("theirs"), 11, origin=(OTHER, 1)))
    assert title(rec.optimistic(SESSION)) == "mine"
    rec.receive(envelope(retitle("mine"), 12, origin=(ME, 1)))
    assert title(rec.confirmed(SESSION)) == "mine"
    # the other client's later change wins over ours
    rec.receive(envelope(retitle("theirs again"), 13, origin=(OTHER, 2)))
    assert title(rec.optimistic(SESSION)) == "theirs again"


def test_rejection_drops_pending_without_applying_it(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle("first"))
    rec.dispatch(SESSION, retitle(""))
    received = rec.receive(
        envelope(retitle(""), 11, origin=(ME, 2), rejection="title must not be empty")
    )
    assert received.kind is ReceiveKind.REJECTED and not received.applied
    assert received.rejection is not None
    assert received.rejection.reason == "title must not be empty"
    assert (received.rejection.client_seq, received.rejection.server_seq) == (2, 11)
    assert received.rejection.action == retitle("")
    assert received.echo_of is not None and received.echo_of.client_seq == 2
    assert title(rec.confirmed(SESSION)) == "untitled"
    assert [p.client_seq for p in rec.pending(SESSION)] == [1]
    assert title(rec.optimistic(SESSION)) == "first"  # the rejected effect is reverted


def test_foreign_rejection_is_ignored(rec: ClientReconciler) -> None:
    received = rec.receive(envelope(retitle(""), 11, origin=(OTHER, 4), rejection="no"))
    assert received.kind is ReceiveKind.FOREIGN_REJECTED and received.rejection is None
    assert title(rec.confirmed(SESSION)) == "untitled"
    assert rec.last_seen_server_seq == 11


def test_duplicates_and_stale_envelopes_are_ignored(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle("mine"))
    echo = envelope(retitle("mine"), 11, origin=(ME, 1))
    assert rec.receive(echo).kind is ReceiveKind.ECHO
    before = frozen_view(rec)
    assert rec.receive(echo).kind is ReceiveKind.DUPLICATE
    # at or below the snapshot's fromSeq: already in the snapshot
    assert rec.receive(envelope(retitle("old"), 10)).kind is ReceiveKind.DUPLICATE
    assert rec.receive(envelope(retitle("old"), 3, channel=CHAT_A)).kind is ReceiveKind.DUPLICATE
    assert frozen_view(rec) == before


def test_sequence_numbers_are_per_channel_for_duplicates(rec: ClientReconciler) -> None:
    # serverSeq is global: seq 12 on the session does not make seq 11 on the chat stale
    rec.receive(envelope(retitle("x"), 12))
    start = ChatTurnStartedAction(turn_id="t1", message=message("hi"))
    assert rec.receive(envelope(start, 11, channel=CHAT_A)).kind is ReceiveKind.FOREIGN
    assert rec.last_seen_server_seq == 12


def test_an_echo_may_overtake_earlier_pending_actions(rec: ClientReconciler) -> None:
    # a host may defer an action (session/modelChanged waits for active turns)
    rec.dispatch(SESSION, retitle("a"))
    rec.dispatch(SESSION, retitle("b"))
    assert title(rec.optimistic(SESSION)) == "b"
    received = rec.receive(envelope(retitle("b"), 11, origin=(ME, 2)))
    assert received.kind is ReceiveKind.ECHO
    assert received.echo_of is not None and received.echo_of.client_seq == 2
    assert title(rec.confirmed(SESSION)) == "b"
    assert [p.client_seq for p in rec.pending(SESSION)] == [1]
    # "a" is now replayed on top of the confirmed "b"
    assert title(rec.optimistic(SESSION)) == "a"


def test_an_echo_that_differs_from_the_dispatch_wins(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle(" padded "))
    rec.dispatch(SESSION, SessionIsReadChangedAction(is_read=True))
    rec.receive(envelope(retitle("padded"), 11, origin=(ME, 1)))
    assert title(rec.confirmed(SESSION)) == "padded"
    assert title(rec.optimistic(SESSION)) == "padded"


# ── protocol violations by the host ──────────────────────────────────────────


@pytest.mark.parametrize(
    ("bad", "path"),
    [
        (envelope(retitle("x"), 11, channel="ahp-session:/never"), "$.params.channel"),
        (envelope(retitle("x"), 11, origin=(ME, 7)), "$.params.origin.clientSeq"),
        (envelope(retitle("x"), 11, origin=(ME, 7), rejection="no"), "$.params.origin.clientSeq"),
        # the pending action with clientSeq 1 is on the session, not on the chat
        (envelope(retitle("x"), 11, channel=CHAT_A, origin=(ME, 1)), "$.params.origin.clientSeq"),
    ],
)
def test_host_violations_raise_and_change_nothing(
    rec: ClientReconciler, bad: ActionEnvelope, path: str
) -> None:
    rec.dispatch(SESSION, retitle("mine"))
    before = frozen_view(rec)
    with pytest.raises(RemoteProtocolError) as info:
        rec.receive(bad)
    assert info.value.path == path
    assert info.value.code == JsonRpcErrorCode.INVALID_REQUEST
    assert frozen_view(rec) == before
    # and the reconciler carries on
    assert rec.receive(envelope(retitle("mine"), 12, origin=(ME, 1))).kind is ReceiveKind.ECHO


def test_snapshot_state_must_match_the_channel() -> None:
    r = ClientReconciler(ME, now=clock)
    with pytest.raises(RemoteProtocolError, match="chat channel"):
        r.subscribe(Snapshot(resource=CHAT_A, state=session_state(), from_seq=1))
    assert r.channels == ()


# ── subscriptions ────────────────────────────────────────────────────────────


def test_unsubscribe_drops_pending_and_ignores_in_flight_envelopes(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle("mine"))
    dropped = rec.unsubscribe(SESSION)
    assert [p.client_seq for p in dropped] == [1]
    assert rec.channels == (CHAT_A,)
    in_flight = rec.receive(envelope(retitle("theirs"), 11))
    assert in_flight.kind is ReceiveKind.UNSUBSCRIBED and not in_flight.applied
    with pytest.raises(LocalProtocolError):
        rec.unsubscribe(SESSION)
    with pytest.raises(LocalProtocolError):
        rec.confirmed(SESSION)
    # subscribing again starts over from the new snapshot
    rec.subscribe(snapshot(SESSION, 20))
    assert rec.receive(envelope(retitle("old"), 15)).kind is ReceiveKind.DUPLICATE
    with pytest.raises(LocalProtocolError, match="already subscribed"):
        rec.subscribe(snapshot(SESSION, 21))


def test_subscribe_advances_last_seen(rec: ClientReconciler) -> None:
    rec.subscribe(snapshot("ahp-chat:/b", 30))
    assert rec.last_seen_server_seq == 30
    assert ClientReconciler(ME, server_seq=7).last_seen_server_seq == 7


def test_reconnect_params(rec: ClientReconciler) -> None:
    rec.receive(envelope(retitle("x"), 14))
    assert rec.reconnect_params() == ReconnectParams(
        client_id=ME, last_seen_server_seq=14, subscriptions=(SESSION, CHAT_A)
    )


# ── reconnecting ─────────────────────────────────────────────────────────────


def test_replay_reconciles_then_clears_pending(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle("accepted"))  # 1: echoed in the replay
    rec.dispatch(SESSION, retitle(""))  # 2: rejected in the replay
    rec.dispatch(CHAT_A, ChatTurnStartedAction(turn_id="t1", message=message("hi")))  # 3: lost
    rec.dispatch(SESSION, SessionIsReadChangedAction(is_read=True))  # 4: lost
    rec.subscribe(snapshot("ahp-chat:/gone", 10))
    rec.dispatch("ahp-chat:/gone", ChatTurnStartedAction(turn_id="t9", message=message("x")))
    result = ReconnectReplayResult(
        actions=(
            envelope(retitle("accepted"), 11, origin=(ME, 1)),
            envelope(retitle(""), 12, origin=(ME, 2), rejection="empty"),
            envelope(retitle("theirs"), 13, origin=(OTHER, 1)),
        ),
        missing=("ahp-chat:/gone",),
    )
    outcome = rec.apply_reconnect(result)
    assert outcome.kind is ReconnectResultType.REPLAY
    assert [r.kind for r in outcome.received] == [
        ReceiveKind.ECHO,
        ReceiveKind.REJECTED,
        ReceiveKind.FOREIGN,
    ]
    assert [r.client_seq for r in outcome.rejections] == [2]
    assert [p.client_seq for p in outcome.dropped] == [3, 4, 5]  # dispatch order
    assert outcome.removed == ("ahp-chat:/gone",)
    assert rec.channels == (SESSION, CHAT_A)
    assert rec.pending(SESSION) == rec.pending(CHAT_A) == ()
    assert title(rec.confirmed(SESSION)) == "theirs"
    assert rec.optimistic(SESSION) is rec.confirmed(SESSION)
    assert rec.last_seen_server_seq == 13
    assert rec.dispatch(SESSION, retitle("again")).client_seq == 6  # the counter goes on
    # the removed channel's in-flight envelopes are ignored
    late = envelope(retitle("x"), 14, channel="ahp-chat:/gone")
    assert rec.receive(late).kind is ReceiveKind.UNSUBSCRIBED


def test_snapshot_reconnect_resets_everything(rec: ClientReconciler) -> None:
    rec.receive(envelope(retitle("seen"), 40))
    rec.dispatch(SESSION, retitle("mine"))
    rec.dispatch(CHAT_A, ChatTurnStartedAction(turn_id="t1", message=message("hi")))
    base = session_state()
    fresh_state = evolve(base, summary=evolve(base.summary, title="fresh"))
    fresh = Snapshot(resource=SESSION, state=fresh_state, from_seq=5)
    outcome = rec.apply_reconnect(ReconnectSnapshotResult(snapshots=(fresh,)))
    assert outcome.kind is ReconnectResultType.SNAPSHOT and outcome.received == ()
    assert [p.client_seq for p in outcome.dropped] == [1, 2]
    assert outcome.removed == (CHAT_A,)  # no snapshot: the host cannot resume it
    assert rec.channels == (SESSION,)
    assert rec.confirmed(SESSION) == fresh.state and rec.pending(SESSION) == ()
    # a restarted host counts from a lower serverSeq: last seen follows it down
    assert rec.last_seen_server_seq == 5
    assert rec.receive(envelope(retitle("new"), 6)).kind is ReceiveKind.FOREIGN


@pytest.mark.parametrize(
    "result",
    [
        ReconnectReplayResult(
            actions=(
                envelope(retitle("ok"), 11),
                envelope(retitle("x"), 12, channel="ahp-session:/never"),
            ),
            missing=(),
        ),
        ReconnectReplayResult(actions=(envelope(retitle("x"), 11, origin=(ME, 9)),), missing=()),
        ReconnectSnapshotResult(snapshots=(snapshot("ahp-session:/never", 50),)),
        ReconnectSnapshotResult(snapshots=(snapshot(SESSION, 50), snapshot(SESSION, 50))),
        ReconnectSnapshotResult(
            snapshots=(Snapshot(resource=SESSION, state=chat_state(CHAT_A), from_seq=50),)
        ),
    ],
)
def test_bad_reconnect_results_raise_and_change_nothing(
    rec: ClientReconciler, result: ReconnectReplayResult | ReconnectSnapshotResult
) -> None:
    rec.dispatch(SESSION, retitle("mine"))
    before = frozen_view(rec)
    with pytest.raises(RemoteProtocolError):
        rec.apply_reconnect(result)
    assert frozen_view(rec) == before


def test_late_echo_after_a_reconnect(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle("deferred"))
    rec.dispatch(SESSION, retitle("doomed"))
    outcome = rec.apply_reconnect(ReconnectReplayResult(actions=(), missing=()))
    assert [p.client_seq for p in outcome.dropped] == [1, 2]
    # the host had deferred action 1 and applies it after all
    received = rec.receive(envelope(retitle("deferred"), 11, origin=(ME, 1)))
    assert received.kind is ReceiveKind.LATE_ECHO and received.applied
    assert received.echo_of == outcome.dropped[0]
    assert title(rec.confirmed(SESSION)) == "deferred"
    # and rejects action 2 late
    late = rec.receive(envelope(retitle("doomed"), 12, origin=(ME, 2), rejection="too late"))
    assert late.kind is ReceiveKind.REJECTED and late.rejection is not None
    assert late.echo_of == outcome.dropped[1]
    # each late answer is accepted once
    with pytest.raises(RemoteProtocolError):
        rec.receive(envelope(retitle("deferred"), 13, origin=(ME, 1)))


def test_late_echo_after_unsubscribe_and_resubscribe(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle("deferred"))
    rec.unsubscribe(SESSION)
    rec.subscribe(snapshot(SESSION, 20))
    received = rec.receive(envelope(retitle("deferred"), 21, origin=(ME, 1)))
    assert received.kind is ReceiveKind.LATE_ECHO


def test_orphans_are_bounded(rec: ClientReconciler, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reconciler_module, "ORPHAN_LIMIT", 2)
    for text in ("a", "b", "c"):
        rec.dispatch(SESSION, retitle(text))
    rec.apply_reconnect(ReconnectReplayResult(actions=(), missing=()))
    with pytest.raises(RemoteProtocolError):  # the oldest was forgotten
        rec.receive(envelope(retitle("a"), 11, origin=(ME, 1)))
    assert rec.receive(envelope(retitle("c"), 11, origin=(ME, 3))).kind is ReceiveKind.LATE_ECHO


# ── unknown actions and the clock ────────────────────────────────────────────


def test_unknown_actions_reach_on_unknown_once() -> None:
    seen: list[UnknownAction] = []
    r = ClientReconciler(ME, now=clock, on_unknown=seen.append)
    r.subscribe(snapshot(SESSION, 10))
    r.dispatch(SESSION, retitle("pending"))
    unknown = UnknownAction(type="session/fromTheFuture", raw={"type": "session/fromTheFuture"})
    received = r.receive(envelope(unknown, 11))
    assert received.kind is ReceiveKind.FOREIGN
    assert title(r.optimistic(SESSION)) == "pending"
    assert seen == [unknown]


def test_wall_clock_by_default() -> None:
    r = ClientReconciler(ME)
    r.subscribe(snapshot(SESSION, 1))
    r.dispatch(SESSION, retitle("now"))
    state = r.optimistic(SESSION)
    assert isinstance(state, SessionState) and state.summary.modified_at > 1_600_000_000_000


# ── the optimistic cache: cost proportional to pending, not history ──────────


@pytest.fixture
def reductions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every reduction the reconciler performs, by action type."""
    calls: list[str] = []

    def counting(channel: str, state: SnapshotState, action: StateAction, **kw: Any) -> Any:
        calls.append(str(action.type))
        return reduce(channel, state, action, **kw)

    monkeypatch.setattr("agenthost_protocol.reconciler.reduce", counting)
    yield calls


def test_optimistic_is_cached(rec: ClientReconciler, reductions: list[str]) -> None:
    for n in range(5):
        rec.dispatch(SESSION, retitle(f"t{n}"))
    assert len(reductions) == 5  # each dispatch extends the cached state by one step
    first = rec.optimistic(SESSION)
    for _ in range(10):
        assert rec.optimistic(SESSION) is first
    assert len(reductions) == 5


def test_in_order_echo_and_no_op_foreign_keep_the_cache(
    rec: ClientReconciler, reductions: list[str]
) -> None:
    for n in range(4):
        rec.dispatch(SESSION, retitle(f"t{n}"))
    cached = rec.optimistic(SESSION)
    reductions.clear()
    rec.receive(envelope(retitle("t0"), 11, origin=(ME, 1)))
    assert rec.optimistic(SESSION) is cached
    assert len(reductions) == 1  # applying the echo to confirmed, nothing else
    # an action that changes nothing (a delta for no active turn) costs one reduction
    rec.receive(
        envelope(ChatDeltaAction(turn_id="x", part_id="p", content="."), 12, channel=CHAT_A)
    )
    rec.receive(envelope(SessionIsReadChangedAction(is_read=False), 13))  # already unread
    assert rec.optimistic(SESSION) is cached
    assert len(reductions) == 3


def test_rebase_costs_the_pending_actions_not_the_history(
    rec: ClientReconciler, reductions: list[str]
) -> None:
    for seq in range(11, 1011):  # a long history of foreign actions
        rec.receive(envelope(SessionIsReadChangedAction(is_read=seq % 2 == 0), seq))
    for n in range(3):
        rec.dispatch(SESSION, retitle(f"t{n}"))
    reductions.clear()
    rec.receive(envelope(retitle("theirs"), 2000, origin=(OTHER, 1)))
    assert len(reductions) == 1
    assert title(rec.optimistic(SESSION)) == "t2"
    assert len(reductions) == 1 + 3  # the rebase replays the 3 pending actions
    rec.optimistic(SESSION)
    assert len(reductions) == 4


# ── the documentation's example ──────────────────────────────────────────────


def test_docs_sequence_example_runs() -> None:
    """The sequence example of docs/reconciler.md is runnable and its asserts hold."""
    doc = (Path(__file__).parent.parent / "docs" / "reconciler.md").read_text(encoding="utf-8")
    section = doc.split("## Sequence example", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/reconciler.md", "exec"), namespace)
    assert namespace["a"].confirmed(namespace["SESSION"]).summary.title == "Auth: plan"
