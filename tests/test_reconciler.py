"""Unit tests of :mod:`agenthost_protocol.reconciler`: each rule on a hand-made sequence."""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from attrs import evolve

import agenthost_protocol.reconciler as reconciler_module
from agenthost_protocol import wire
from agenthost_protocol.errors import LocalProtocolError, RemoteProtocolError
from agenthost_protocol.reconciler import (
    ClientReconciler,
    PendingAction,
    ReceiveKind,
)
from agenthost_protocol.reducers import reduce
from agenthost_protocol.reducers._clock import iso_timestamp
from agenthost_protocol.types import (
    ActionEnvelope,
    ActionOrigin,
    ActiveTurn,
    ChangesetFileRemovedAction,
    ChangesetFilesReviewChangedAction,
    ChangesetState,
    ChatDeltaAction,
    ChatDraftChangedAction,
    ChatInputAnswered,
    ChatInputAnswerState,
    ChatInputCompletedAction,
    ChatInputRequest,
    ChatInputResponseKind,
    ChatInputTextAnswerValue,
    ChatInputTextQuestion,
    ChatPendingMessageSetAction,
    ChatResponsePartAction,
    ChatState,
    ChatTruncatedAction,
    ChatTurnCancelledAction,
    ChatTurnCompleteAction,
    ChatTurnsLoadedAction,
    ChatTurnStartedAction,
    DispatchActionParams,
    InputRequestResponsePart,
    JsonRpcErrorCode,
    MarkdownResponsePart,
    Message,
    MessageKind,
    MessageOrigin,
    ModelSelection,
    PendingMessageKind,
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

from ._fixtures import (
    CHANGESET,
    CHAT_A,
    FIXED_NOW,
    SESSION,
    Ticker,
    changeset_state,
    chat_state,
    clock,
    message,
    session_state,
    stopped_at,
)

ME = "me"
STARTED_AT = "2026-01-01T00:00:00.000Z"
OTHER = "other"


def title(state: SnapshotState) -> str:
    assert isinstance(state, SessionState)
    return state.title


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


def ill(make: Callable[..., object], *args: Any, **fields: Any) -> Any:
    """``make(*args, **fields)`` with fields of the wrong type: what only a hand-built value
    (or a bug) can hold, never a decoded one."""
    return make(*args, **fields)


def retitle(text: str) -> SessionTitleChangedAction:
    return SessionTitleChangedAction(title=text)


def start(turn_id: str) -> ChatTurnStartedAction:
    return ChatTurnStartedAction(turn_id=turn_id, started_at=STARTED_AT, message=message("hi"))


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
    second = rec.dispatch(CHAT_A, start("t1"))
    assert first == DispatchActionParams(channel=SESSION, client_seq=1, action=retitle("mine"))
    assert second.client_seq == 2  # one counter for all channels
    assert title(rec.confirmed(SESSION)) == "untitled"
    assert title(rec.optimistic(SESSION)) == "mine"
    assert rec.pending(SESSION) == (
        PendingAction(
            channel=SESSION, client_seq=1, action=retitle("mine"), dispatched_at=FIXED_NOW
        ),
    )
    chat = rec.optimistic(CHAT_A)
    assert isinstance(chat, ChatState) and chat.active_turn is not None


@pytest.mark.parametrize(
    ("channel", "action", "match"),
    [
        ("ahp-session:/nope", retitle("x"), "not subscribed"),
        (CHAT_A, ChatDeltaAction(turn_id="t", part_id="p", content="x"), "not a client-dispatch"),
        (SESSION, UnknownAction(type="session/fromTheFuture", raw={}), "not a client-dispatch"),
        (SESSION, start("t"), "cannot be dispatch"),
        (CHAT_A, retitle("x"), "cannot be dispatched"),
        # the API misused: wrong types, ill-typed actions
        ([SESSION], retitle("x"), "not subscribed"),
        (SESSION, {"type": "session/titleChanged", "title": "x"}, "not a dict"),
        (SESSION, None, "not a null"),
        (SESSION, ill(SessionTitleChangedAction, title=None), "expected a string"),
        (SESSION, ill(SessionIsReadChangedAction, is_read="yes"), "expected a boolean"),
        (CHAT_A, ill(ChatTurnStartedAction, turn_id="t", started_at="", message=None), "encoded"),
        (CHAT_A, ill(ChatTurnCancelledAction, turn_id="t", duration="1"), "expected an integer"),
    ],
)
def test_dispatch_refuses_caller_mistakes(
    rec: ClientReconciler, channel: Any, action: Any, match: str
) -> None:
    before = frozen_view(rec)
    with pytest.raises(LocalProtocolError, match=match):
        rec.dispatch(channel, action)
    assert frozen_view(rec) == before
    assert rec.dispatch(SESSION, retitle("ok")).client_seq == 1  # no clientSeq was used up


def test_changeset_review_is_the_one_changeset_action_a_client_dispatches() -> None:
    r = ClientReconciler(ME, now=clock)
    r.subscribe(Snapshot(resource=CHANGESET, state=changeset_state(), from_seq=1))
    r.dispatch(CHANGESET, ChangesetFilesReviewChangedAction(files=("f1", "f3"), reviewed=True))
    state = r.optimistic(CHANGESET)
    assert isinstance(state, ChangesetState)
    assert [file.reviewed for file in state.files] == [True, None, True]
    assert r.confirmed(CHANGESET) == changeset_state()
    with pytest.raises(LocalProtocolError, match="not a client-dispatchable"):
        r.dispatch(CHANGESET, ChangesetFileRemovedAction(file_id="f1"))


def test_model_and_agent_changes_are_gone_from_0_7_0() -> None:
    """``session/modelChanged`` decodes as an unknown action: refused, and ignored if received."""
    seen: list[UnknownAction] = []
    r = ClientReconciler(ME, now=clock, on_unknown=seen.append)
    r.subscribe(snapshot(SESSION, 10))
    model_changed = wire.parse_action({"type": "session/modelChanged", "model": {"id": "m2"}})
    assert isinstance(model_changed, UnknownAction)
    with pytest.raises(LocalProtocolError, match="not a client-dispatchable"):
        r.dispatch(SESSION, model_changed)
    assert r.receive(envelope(model_changed, 11, origin=(OTHER, 1))).kind is ReceiveKind.FOREIGN
    assert r.confirmed(SESSION) == session_state() and seen == [model_changed]
    # the model is chosen per message now
    r.subscribe(snapshot(CHAT_A, 10))
    selected = Message(
        text="hi", origin=MessageOrigin(kind=MessageKind.USER), model=ModelSelection(id="m2")
    )
    r.dispatch(CHAT_A, ChatTurnStartedAction(turn_id="t1", started_at=STARTED_AT, message=selected))
    chat = r.optimistic(CHAT_A)
    assert isinstance(chat, ChatState) and chat.active_turn is not None
    assert chat.active_turn.message.model == ModelSelection(id="m2")


def test_answering_an_input_request_applies_optimistically_in_the_active_turn() -> None:
    question = ChatInputTextQuestion(id="name", message="Branch?", required=True)
    request = ChatInputRequest(id="r1", questions=(question,))
    turn = ActiveTurn(
        id="t1",
        started_at=STARTED_AT,
        message=message("hi"),
        response_parts=(InputRequestResponsePart(request=request),),
    )
    waiting = evolve(chat_state(CHAT_A), active_turn=turn, status=SessionStatus.INPUT_NEEDED)
    r = ClientReconciler(ME, now=clock)
    r.subscribe(Snapshot(resource=CHAT_A, state=waiting, from_seq=10))
    answer = ChatInputAnswered(
        state=ChatInputAnswerState.SUBMITTED, value=ChatInputTextAnswerValue(value="main")
    )
    r.dispatch(
        CHAT_A,
        ChatInputCompletedAction(
            request_id="r1", response=ChatInputResponseKind.ACCEPT, answers={"name": answer}
        ),
    )
    chat = r.optimistic(CHAT_A)
    assert isinstance(chat, ChatState) and chat.active_turn is not None
    (part,) = chat.active_turn.response_parts
    assert isinstance(part, InputRequestResponsePart)
    assert part.response == ChatInputResponseKind.ACCEPT
    assert part.request.answers == {"name": answer}
    assert chat.status == SessionStatus.IN_PROGRESS  # no longer waiting for the user
    assert r.confirmed(CHAT_A) is waiting


# ── receiving ────────────────────────────────────────────────────────────────


def test_own_echo_pops_pending_and_confirms(rec: ClientReconciler) -> None:
    rec.dispatch(SESSION, retitle("mine"))
    received = rec.receive(envelope(retitle("mine"), 11, origin=(ME, 1)))
    assert received.kind is ReceiveKind.ECHO and received.applied
    assert received.echo_of == PendingAction(
        channel=SESSION, client_seq=1, action=retitle("mine"), dispatched_at=FIXED_NOW
    )
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
    assert optimistic.title == "theirs"  # the foreign change shows through
    assert int(optimistic.status) & SessionStatus.IS_READ  # and ours stays on top
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
    assert rec.receive(envelope(start("t1"), 11, channel=CHAT_A)).kind is ReceiveKind.FOREIGN
    assert rec.last_seen_server_seq == 12


def test_an_echo_may_overtake_earlier_pending_actions(rec: ClientReconciler) -> None:
    # AHP 0.7.0 defers nothing, but a host that applies some actions later is tolerated
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


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("channel", None, "$.params.channel"),
        ("channel", [SESSION], "$.params.channel"),
        ("server_seq", "12", "$.params.serverSeq"),
        ("server_seq", None, "$.params.serverSeq"),
        ("server_seq", True, "$.params.serverSeq"),
        ("server_seq", 12.0, "$.params.serverSeq"),
        ("action", None, "$.params.action"),
        ("action", {"type": "session/titleChanged", "title": "x"}, "$.params.action"),
        ("origin", {"clientId": ME, "clientSeq": 1}, "$.params.origin"),
        ("origin", ill(ActionOrigin, client_id=None, client_seq=1), "$.params.origin.clientId"),
        ("origin", ill(ActionOrigin, client_id=ME, client_seq="1"), "$.params.origin.clientSeq"),
        ("origin", ill(ActionOrigin, client_id=ME, client_seq=[1]), "$.params.origin.clientSeq"),
        ("rejection_reason", 404, "$.params.rejectionReason"),
    ],
)
def test_malformed_envelopes_raise_remote_errors_and_change_nothing(
    rec: ClientReconciler, field: str, value: Any, path: str
) -> None:
    rec.dispatch(SESSION, retitle("mine"))
    before = frozen_view(rec)
    bad = evolve(envelope(retitle("mine"), 11, origin=(ME, 1)), **{field: value})
    with pytest.raises(RemoteProtocolError) as info:
        rec.receive(bad)
    assert info.value.path == path
    assert frozen_view(rec) == before
    assert rec.receive(envelope(retitle("mine"), 12, origin=(ME, 1))).kind is ReceiveKind.ECHO


def test_an_action_the_reducer_cannot_apply_is_the_hosts_fault(rec: ClientReconciler) -> None:
    rec.receive(envelope(start("t1"), 11, channel=CHAT_A))
    before = frozen_view(rec)
    # ill-typed, as only a hand-built value can be: the codec checks types
    bad = ill(ChatTurnCompleteAction, turn_id="t1", duration="1 s")
    with pytest.raises(RemoteProtocolError) as info:
        rec.receive(envelope(bad, 12, channel=CHAT_A))
    assert info.value.path == "$.params.action"
    assert isinstance(info.value.__cause__, TypeError)
    assert frozen_view(rec) == before


def test_a_state_the_reducer_cannot_use_is_the_hosts_fault() -> None:
    broken = ill(
        evolve, chat_state(CHAT_A), turns=None
    )  # ill-typed, as only a hand-built one can be
    r = ClientReconciler(ME, now=clock)
    r.subscribe(Snapshot(resource=CHAT_A, state=broken, from_seq=10))
    with pytest.raises(RemoteProtocolError, match="cannot take"):
        r.dispatch(CHAT_A, ChatTruncatedAction(turn_id="t0"))
    assert r.pending(CHAT_A) == ()
    # a pending action replayed on it later trips in the read, also the host's fault
    r.dispatch(CHAT_A, draft("a"))
    r.receive(envelope(draft("theirs"), 11, channel=CHAT_A))  # stale: rebuilt on the read
    r.dispatch(CHAT_A, ChatTruncatedAction(turn_id="t0"))
    with pytest.raises(RemoteProtocolError, match="cannot take"):
        r.optimistic(CHAT_A)
    assert len(r.pending(CHAT_A)) == 2


@pytest.mark.parametrize(
    ("bad", "error", "path"),
    [
        (None, LocalProtocolError, None),
        (
            ill(Snapshot, resource=None, state=session_state(), from_seq=1),
            RemoteProtocolError,
            "$.result.snapshot.resource",
        ),
        (
            ill(Snapshot, resource=[SESSION], state=session_state(), from_seq=1),
            RemoteProtocolError,
            "$.result.snapshot.resource",
        ),
        (
            ill(Snapshot, resource="ahp-session:/x", state=session_state(), from_seq="1"),
            RemoteProtocolError,
            "$.result.snapshot.fromSeq",
        ),
        (
            ill(Snapshot, resource="ahp-session:/x", state=None, from_seq=1),
            RemoteProtocolError,
            "$.result.snapshot.state",
        ),
    ],
)
def test_malformed_snapshots(
    rec: ClientReconciler, bad: Any, error: type[Exception], path: str | None
) -> None:
    before = frozen_view(rec)
    with pytest.raises(error) as info:
        rec.subscribe(bad)
    assert getattr(info.value, "path", None) == path
    assert frozen_view(rec) == before


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.receive({"channel": SESSION}),
        lambda r: r.apply_reconnect(None),
        lambda r: r.apply_reconnect(envelope(retitle("x"), 11)),
        lambda r: r.confirmed(None),
        lambda r: r.pending([SESSION]),
        lambda r: r.optimistic(7),
        lambda r: r.unsubscribe({}),
    ],
)
def test_misused_calls_raise_local_errors(rec: ClientReconciler, call: Any) -> None:
    before = frozen_view(rec)
    with pytest.raises(LocalProtocolError):
        call(rec)
    assert frozen_view(rec) == before


@pytest.mark.parametrize(
    "kwargs",
    [
        {"client_id": None},
        {"client_id": ME, "now": 5},
        {"client_id": ME, "on_unknown": "print"},
        {"client_id": ME, "server_seq": "0"},
        {"client_id": ME, "server_seq": None},
    ],
)
def test_misused_constructor_raises_local_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(LocalProtocolError):
        ClientReconciler(**kwargs)


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
    rec.dispatch(CHAT_A, start("t1"))  # 3: lost
    rec.dispatch(SESSION, SessionIsReadChangedAction(is_read=True))  # 4: lost
    rec.subscribe(snapshot("ahp-chat:/gone", 10))
    rec.dispatch("ahp-chat:/gone", start("t9"))
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
    rec.dispatch(CHAT_A, start("t1"))
    base = session_state()
    fresh_state = evolve(base, title="fresh")
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
        # malformed
        ill(ReconnectReplayResult, actions=None, missing=()),
        ill(ReconnectReplayResult, actions=(None,), missing=()),
        ill(ReconnectReplayResult, actions=(), missing=None),
        ill(ReconnectReplayResult, actions=(), missing=([SESSION],)),
        ReconnectReplayResult(
            actions=(ill(evolve, envelope(retitle("x"), 11), server_seq=None),), missing=()
        ),
        ill(ReconnectSnapshotResult, snapshots=None),
        ill(ReconnectSnapshotResult, snapshots=(session_state(),)),
        ReconnectSnapshotResult(
            snapshots=(ill(Snapshot, resource=SESSION, state=session_state(), from_seq=None),)
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
    # the host had held action 1 and applies it after all
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
    r.subscribe(snapshot(CHAT_A, 1))
    r.dispatch(CHAT_A, start("t1"))
    state = r.optimistic(CHAT_A)
    assert isinstance(state, ChatState)
    assert state.modified_at > "2020" and state.modified_at != chat_state(CHAT_A).modified_at


# The clock policy: read once per dispatch, kept as dispatched_at, replayed at
# that instant; a received envelope at a reading taken when it is applied.


def draft(text: str) -> ChatDraftChangedAction:
    return ChatDraftChangedAction(draft=message(text))


def test_own_echo_keeps_optimistic_exact_with_a_moving_clock() -> None:
    """Regression: keeping the cached state on an own echo left ``modifiedAt`` behind."""
    r = ClientReconciler(ME, now=Ticker(step=1_000))
    r.subscribe(snapshot(CHAT_A, 10))
    r.dispatch(CHAT_A, start("t1"))  # stamps modifiedAt
    r.dispatch(CHAT_A, draft("more"))  # reads no clock
    r.optimistic(CHAT_A)
    r.receive(envelope(start("t1"), 11, channel=CHAT_A, origin=(ME, 1)))  # stamped later
    confirmed = r.confirmed(CHAT_A)
    assert r.optimistic(CHAT_A) == reduce(CHAT_A, confirmed, draft("more"), now=clock)


def test_a_rebase_keeps_the_instant_an_action_was_dispatched_at() -> None:
    ticker = Ticker(step=1_000)
    r = ClientReconciler(ME, now=ticker)
    r.subscribe(snapshot(CHAT_A, 10))
    r.dispatch(CHAT_A, start("t1"))
    stamped = r.optimistic(CHAT_A)
    assert isinstance(stamped, ChatState)
    r.receive(envelope(draft("theirs"), 11, channel=CHAT_A, origin=(OTHER, 1)))  # a rebase
    rebased = r.optimistic(CHAT_A)
    assert isinstance(rebased, ChatState) and rebased.draft == message("theirs")
    assert rebased.modified_at == stamped.modified_at
    (pending,) = r.pending(CHAT_A)
    assert iso_timestamp(pending.dispatched_at) == stamped.modified_at


def test_the_clock_is_read_once_per_dispatch_and_per_stamped_envelope() -> None:
    ticker = Ticker(step=1)
    r = ClientReconciler(ME, now=ticker)
    r.subscribe(snapshot(CHAT_A, 10))
    r.dispatch(CHAT_A, start("t1"))
    r.dispatch(CHAT_A, draft("a"))
    r.dispatch(CHAT_A, draft("b"))
    assert ticker.ms == FIXED_NOW + 3
    r.receive(envelope(draft("theirs"), 11, channel=CHAT_A, origin=(OTHER, 1)))  # no stamp
    for _ in range(3):
        r.optimistic(CHAT_A)  # rebuilt once, at the recorded instants
    assert ticker.ms == FIXED_NOW + 3
    r.receive(envelope(start("t1"), 12, channel=CHAT_A, origin=(ME, 1)))  # stamped
    assert ticker.ms == FIXED_NOW + 4
    confirmed = r.confirmed(CHAT_A)
    assert isinstance(confirmed, ChatState)
    assert confirmed.modified_at == iso_timestamp(FIXED_NOW + 4)


def test_own_echo_keeps_the_cache_unless_stamped_at_another_instant(
    reductions: list[str],
) -> None:
    r = ClientReconciler(ME, now=Ticker(step=1_000))
    r.subscribe(snapshot(CHAT_A, 10))
    r.subscribe(snapshot(SESSION, 10))
    for n in range(3):
        r.dispatch(SESSION, retitle(f"t{n}"))
    r.dispatch(CHAT_A, start("t1"))
    r.dispatch(CHAT_A, draft("a"))
    r.dispatch(CHAT_A, draft("b"))
    session, chat = r.optimistic(SESSION), r.optimistic(CHAT_A)
    reductions.clear()
    r.receive(envelope(retitle("t0"), 11, origin=(ME, 1)))  # reads no clock: kept
    assert r.optimistic(SESSION) is session and len(reductions) == 1
    r.receive(envelope(start("t1"), 12, channel=CHAT_A, origin=(ME, 4)))  # stamped: rebuilt
    assert r.optimistic(CHAT_A) != chat
    assert len(reductions) == 2 + 2


def test_a_clock_that_does_not_return_milliseconds_is_a_local_error() -> None:
    readings: list[object] = ["soon"]

    def reading() -> Any:
        return readings[0]

    r = ClientReconciler(ME, now=reading)
    r.subscribe(snapshot(CHAT_A, 10))
    with pytest.raises(LocalProtocolError, match="clock returned a str"):
        r.dispatch(CHAT_A, draft("a"))
    assert r.pending(CHAT_A) == ()
    readings[0] = FIXED_NOW
    r.dispatch(CHAT_A, draft("a"))
    readings[0] = None
    before = frozen_view(r)
    with pytest.raises(LocalProtocolError, match="clock returned a null"):
        r.receive(envelope(start("t1"), 11, channel=CHAT_A))  # a turn start is stamped
    assert frozen_view(r) == before


def test_the_applications_own_exceptions_go_through_unchanged() -> None:
    def broken_clock() -> int:
        raise ValueError("no time") from OSError("clock device")

    def broken_handler(action: UnknownAction) -> None:
        raise KeyError(action.type)

    r = ClientReconciler(ME, now=broken_clock, on_unknown=broken_handler)
    r.subscribe(snapshot(CHAT_A, 10))
    with pytest.raises(ValueError, match="no time"):
        r.dispatch(CHAT_A, draft("a"))
    with pytest.raises(ValueError, match="no time") as info:
        r.receive(envelope(start("t1"), 11, channel=CHAT_A))
    assert isinstance(info.value.__cause__, OSError)
    unknown = UnknownAction(type="chat/fromTheFuture", raw={"type": "chat/fromTheFuture"})
    with pytest.raises(KeyError, match="chat/fromTheFuture"):
        r.receive(envelope(unknown, 11, channel=CHAT_A))
    assert r.confirmed(CHAT_A) == chat_state(CHAT_A) and r.last_seen_server_seq == 10
    # and a reducer tripping afterwards is still the host's fault
    with pytest.raises(RemoteProtocolError):
        r.receive(envelope(ill(ChatTurnsLoadedAction, turns=5), 11, channel=CHAT_A))


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


# ── rebasing without a replay: a foreign action on other data ────────────────


def streaming(r: ClientReconciler) -> int:
    """A turn ``t1`` with a markdown part ``p1`` on CHAT_A, as the agent sent them."""
    r.receive(envelope(start("t1"), 11, channel=CHAT_A))
    part = MarkdownResponsePart(id="p1", content="")
    r.receive(envelope(ChatResponsePartAction(turn_id="t1", part=part), 12, channel=CHAT_A))
    return 13


def delta(text: str = "lorem ") -> ChatDeltaAction:
    return ChatDeltaAction(turn_id="t1", part_id="p1", content=text)


def replayed(r: ClientReconciler, channel: str) -> SnapshotState:
    """``confirmed`` with every pending action reduced on top, at its ``dispatched_at``."""
    state = r.confirmed(channel)
    for entry in r.pending(channel):
        state = reduce(channel, state, entry.action, now=stopped_at(entry.dispatched_at))
    return state


def test_a_foreign_action_on_other_data_costs_one_reduction_per_read(
    reductions: list[str],
) -> None:
    r = ClientReconciler(ME, now=clock)
    r.subscribe(snapshot(CHAT_A, 10))
    seq = streaming(r)
    for n in range(50):  # the user keeps typing while the agent streams
        r.dispatch(CHAT_A, draft(f"draft {n}"))
    r.optimistic(CHAT_A)
    reductions.clear()
    for n in range(10):
        r.receive(envelope(delta(), seq + n, channel=CHAT_A))
        state = r.optimistic(CHAT_A)
        assert state == replayed(r, CHAT_A)
    # on confirmed, then on the cached optimistic state: never the 50 pending
    assert len(reductions) == 2 * 10
    assert isinstance(state, ChatState) and state.draft == message("draft 49")


def test_a_foreign_action_that_meets_a_pending_one_is_replayed_under_it(
    reductions: list[str],
) -> None:
    r = ClientReconciler(ME, now=clock)
    r.subscribe(snapshot(CHAT_A, 10))
    seq = streaming(r)
    r.dispatch(CHAT_A, draft("mine"))
    r.dispatch(CHAT_A, ChatTurnCancelledAction(turn_id="t1", duration=5))
    r.optimistic(CHAT_A)
    reductions.clear()
    # the agent's delta came before our cancel: the archived turn must hold it,
    # which applying the delta to the optimistic state (no turn) would lose
    r.receive(envelope(delta("late"), seq, channel=CHAT_A))
    state = r.optimistic(CHAT_A)
    assert len(reductions) == 1 + 2
    assert state == replayed(r, CHAT_A)
    assert isinstance(state, ChatState) and state.active_turn is None
    archived = state.turns[-1].response_parts[0]
    assert isinstance(archived, MarkdownResponsePart) and archived.content == "late"


def test_foreign_actions_are_applied_on_the_next_read_and_never_cost_more_than_a_replay(
    reductions: list[str],
) -> None:
    r = ClientReconciler(ME, now=clock)
    r.subscribe(snapshot(CHAT_A, 10))
    seq = streaming(r)
    for n in range(3):
        r.dispatch(CHAT_A, draft(f"draft {n}"))
    r.optimistic(CHAT_A)
    reductions.clear()
    r.receive(envelope(delta("a"), seq, channel=CHAT_A))
    r.receive(envelope(delta("b"), seq + 1, channel=CHAT_A))
    assert len(reductions) == 2  # confirmed only: the read applies them
    assert r.optimistic(CHAT_A) == replayed(r, CHAT_A)
    assert len(reductions) == 2 + 2
    reductions.clear()
    for n in range(5):  # more than are pending, unread: a replay is cheaper
        r.receive(envelope(delta(str(n)), seq + 2 + n, channel=CHAT_A))
    assert r.optimistic(CHAT_A) == replayed(r, CHAT_A)
    assert len(reductions) == 5 + 3


def test_a_dispatch_or_an_echo_after_an_unread_foreign_action_keeps_the_order(
    reductions: list[str],
) -> None:
    r = ClientReconciler(ME, now=Ticker(step=1_000))
    r.subscribe(snapshot(CHAT_A, 10))
    seq = streaming(r)
    r.dispatch(CHAT_A, draft("one"))
    r.dispatch(CHAT_A, draft("two"))
    r.optimistic(CHAT_A)
    r.receive(envelope(delta(), seq, channel=CHAT_A))  # deferred
    reductions.clear()
    r.dispatch(CHAT_A, draft("three"))  # goes after the delta, on the next read
    r.receive(envelope(draft("one"), seq + 1, channel=CHAT_A, origin=(ME, 1)))  # head echo
    assert len(reductions) == 1  # the echo on confirmed
    state = r.optimistic(CHAT_A)
    assert len(reductions) == 1 + 2  # the delta and the third draft, not a replay
    assert state == replayed(r, CHAT_A)
    assert isinstance(state, ChatState) and state.draft == message("three")


def test_a_late_echo_on_other_data_is_applied_like_a_foreign_action(
    reductions: list[str],
) -> None:
    r = ClientReconciler(ME, now=clock)
    r.subscribe(snapshot(CHAT_A, 10))
    queued = ChatPendingMessageSetAction(
        kind=PendingMessageKind.QUEUED, id="q", message=message("q")
    )
    r.dispatch(CHAT_A, queued)
    r.apply_reconnect(ReconnectReplayResult(actions=(), missing=()))  # dropped
    r.dispatch(CHAT_A, draft("mine"))
    r.optimistic(CHAT_A)
    reductions.clear()
    late = r.receive(envelope(queued, 11, channel=CHAT_A, origin=(ME, 1)))
    assert late.kind is ReceiveKind.LATE_ECHO
    assert r.optimistic(CHAT_A) == replayed(r, CHAT_A)
    assert len(reductions) == 2


def test_a_foreign_action_on_other_data_is_stamped_when_it_arrives() -> None:
    ticker = Ticker(step=1_000)
    r = ClientReconciler(ME, now=ticker)
    r.subscribe(snapshot(CHAT_A, 10))
    r.dispatch(CHAT_A, draft("mine"))
    r.optimistic(CHAT_A)
    r.receive(envelope(start("t1"), 11, channel=CHAT_A))  # stamps modifiedAt, reads the clock
    readings = ticker.ms
    state = r.optimistic(CHAT_A)
    assert ticker.ms == readings  # the read takes the instant the envelope was reduced at
    assert isinstance(state, ChatState) and state.modified_at == iso_timestamp(readings)
    assert state == replayed(r, CHAT_A)


def test_catching_up_never_takes_a_reading_the_confirmed_state_did_not() -> None:
    state = chat_state(CHAT_A)
    catch_up = reconciler_module._catch_up
    assert catch_up(CHAT_A, state, [(draft("x"), None)]) == reduce(CHAT_A, state, draft("x"))
    # a turn start reads the clock: without a recorded reading, replay instead
    assert catch_up(CHAT_A, state, [(start("t1"), None)]) is None
    stamped = catch_up(CHAT_A, state, [(start("t1"), FIXED_NOW + 5)])
    assert isinstance(stamped, ChatState) and stamped.modified_at == iso_timestamp(FIXED_NOW + 5)


# ── scale: work linear in the pending actions (counted, not timed) ───────────


def lines_run(call: Callable[[], object]) -> int:
    """How many lines of the reconciler module ``call`` executes: work, deterministically."""
    target = reconciler_module.__file__
    count = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if frame.f_code.co_filename != target:
            return None
        if event == "line":
            count += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(previous)
    return count


def with_pending(count: int) -> ClientReconciler:
    r = ClientReconciler(ME, now=clock)
    r.subscribe(snapshot(SESSION, 10))
    for n in range(count):
        r.dispatch(SESSION, SessionIsReadChangedAction(is_read=n % 2 == 0))
    return r


def newest_first_echoes(count: int) -> int:
    r = with_pending(count)
    echoes = [
        envelope(entry.action, 11 + n, origin=(ME, entry.client_seq))
        for n, entry in enumerate(reversed(r.pending(SESSION)))
    ]

    def answer() -> None:
        for echo in echoes:
            assert r.receive(echo).kind is ReceiveKind.ECHO

    return lines_run(answer)


def test_echoes_answered_newest_first_cost_linear_work() -> None:
    # a scan of pending from the head made this quadratic (ratio ~16 for 4x)
    small, large = newest_first_echoes(100), newest_first_echoes(400)
    assert large <= 4.2 * small, (small, large)


class CountingOrderedDict(OrderedDict[int, PendingAction]):
    """Counts the entries added to the remembered dropped actions (each is removed once)."""

    added = 0

    def __setitem__(self, key: int, value: PendingAction) -> None:
        CountingOrderedDict.added += 1
        super().__setitem__(key, value)


@pytest.mark.parametrize("how", ["unsubscribe", "reconnect"])
def test_dropping_many_pending_actions_touches_only_what_is_remembered(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # adding every dropped action and trimming from the front was quadratic
    monkeypatch.setattr(reconciler_module, "ORPHAN_LIMIT", 8)
    monkeypatch.setattr(CountingOrderedDict, "added", 0)
    r = with_pending(8)
    r.unsubscribe(SESSION)  # the store is full
    r.subscribe(snapshot(SESSION, 10))
    for n in range(1000):
        r.dispatch(SESSION, SessionIsReadChangedAction(is_read=n % 2 == 0))
    r._orphans = CountingOrderedDict(r._orphans)
    CountingOrderedDict.added = 0
    if how == "unsubscribe":
        dropped = r.unsubscribe(SESSION)
        assert CountingOrderedDict.added == 8
    else:
        dropped = r.apply_reconnect(ReconnectReplayResult(actions=(), missing=())).dropped
        assert CountingOrderedDict.added == 8 + 8  # a replay is applied to a copy
    assert len(dropped) == 1000
    assert sorted(r._orphans) == [p.client_seq for p in dropped[-8:]]


# ── the documentation's example ──────────────────────────────────────────────


def test_docs_sequence_example_runs() -> None:
    """The sequence example of docs/reconciler.md is runnable and its asserts hold."""
    doc = (Path(__file__).parent.parent / "docs" / "reconciler.md").read_text(encoding="utf-8")
    section = doc.split("## Sequence example", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/reconciler.md", "exec"), namespace)
    assert namespace["a"].confirmed(namespace["SESSION"]).title == "Auth: plan"
