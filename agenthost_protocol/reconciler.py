"""The client-side write-ahead reconciler.

AHP clients apply their own actions optimistically and reconcile when the
host's :class:`~agenthost_protocol.types.ActionEnvelope`\\ s come back
(``docs/guide/reconciliation.md`` of the spec).  A :class:`ClientReconciler`
does that bookkeeping for one connection, without any I/O: the application
feeds it what it received and sends what it returns.

For every subscribed channel it keeps

* ``confirmed``: the state the host has acknowledged, built only from
  snapshots and accepted envelopes with the library's own reducers, so it
  equals the host's state as of the last envelope seen;
* ``pending``: the client's own dispatched actions not yet echoed, in
  dispatch order;
* ``optimistic``: ``confirmed`` with ``pending`` replayed on top, what the UI
  renders.  It is cached: reading it again costs nothing, a dispatch extends
  it by one reduction, an in-order echo of an unchanged action or a foreign
  action that changes nothing keeps it, and anything else marks it stale, to
  be rebuilt on the next read from ``confirmed`` by replaying ``pending``
  only (never the history).

Errors follow the h11 model (see :mod:`agenthost_protocol.errors`): a
:class:`~agenthost_protocol.errors.LocalProtocolError` means the caller asked
for something the protocol forbids, a
:class:`~agenthost_protocol.errors.RemoteProtocolError` means the host sent
something out of protocol.  Both are raised *before* anything is changed, so
the reconciler is exactly as it was before the failed call and stays usable
(no sticky error state: whether to reconnect is the application's call).
Any other exception escaping is a bug in the library.

A reconciler is not thread-safe; drive it from one task or thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Final

from attrs import frozen
from typing_extensions import assert_never

from .channels import channel_kind
from .errors import LocalProtocolError, RemoteProtocolError
from .reducers import STATE_TYPES, Clock, reduce
from .types import (
    ActionEnvelope,
    AnnotationsState,
    ChangesetState,
    ChatState,
    DispatchActionParams,
    ReconnectParams,
    ReconnectReplayResult,
    ReconnectResult,
    ReconnectResultType,
    ReconnectSnapshotResult,
    ResourceWatchState,
    RootState,
    SessionState,
    Snapshot,
    SnapshotState,
    StateAction,
    TerminalState,
    UnknownAction,
)
from .versions import IS_CLIENT_DISPATCHABLE

__all__ = [
    "ORPHAN_LIMIT",
    "ClientReconciler",
    "PendingAction",
    "ReceiveKind",
    "Received",
    "ReconnectOutcome",
    "Rejection",
]

ORPHAN_LIMIT: Final = 1024
"""How many dropped pending actions are remembered for late echoes (oldest forgotten first)."""

_ACTION_FAMILY: Final[dict[type, str]] = {
    RootState: "root/",
    SessionState: "session/",
    ChatState: "chat/",
    TerminalState: "terminal/",
    ChangesetState: "changeset/",
    AnnotationsState: "annotations/",
    ResourceWatchState: "resourceWatch/",
}
"""The action ``type`` prefix each kind of channel state accepts."""


@frozen(kw_only=True)
class PendingAction:
    """One of the client's own actions, dispatched and not yet echoed."""

    channel: str
    """The channel it was dispatched to."""
    client_seq: int
    """The ``clientSeq`` it was sent with; the host echoes it as ``origin.clientSeq``."""
    action: StateAction
    """The action as dispatched."""


@frozen(kw_only=True)
class Rejection:
    """The host refused one of the client's actions (``rejectionReason`` was set)."""

    channel: str
    client_seq: int
    action: StateAction
    """The action as the client dispatched it."""
    reason: str
    """The host's ``rejectionReason``, fit to show to the user."""
    server_seq: int
    """The ``serverSeq`` of the rejecting envelope."""


class ReceiveKind(str, Enum):
    """What :meth:`ClientReconciler.receive` did with an envelope."""

    ECHO = "echo"
    """Our own action came back: removed from pending, applied to confirmed."""
    FOREIGN = "foreign"
    """Another client's or the host's action: applied to confirmed, pending rebased."""
    REJECTED = "rejected"
    """Our own action was rejected: removed from pending, confirmed untouched."""
    FOREIGN_REJECTED = "foreign-rejected"
    """Another client's rejected action, broadcast by the host: nothing applied."""
    LATE_ECHO = "late-echo"
    """Our own action, already reported as dropped by a reconnect or an
    unsubscribe, was applied by the host after all: applied to confirmed like
    a foreign action.  The application should not re-send it."""
    DUPLICATE = "duplicate"
    """``serverSeq`` at or below what the channel has already seen: ignored."""
    UNSUBSCRIBED = "unsubscribed"
    """For a channel released by :meth:`ClientReconciler.unsubscribe` or a
    reconnect; such envelopes may still be in flight.  Ignored."""


_APPLIED: Final = frozenset({ReceiveKind.ECHO, ReceiveKind.FOREIGN, ReceiveKind.LATE_ECHO})


@frozen(kw_only=True)
class Received:
    """The result of :meth:`ClientReconciler.receive`: what one envelope did."""

    kind: ReceiveKind
    envelope: ActionEnvelope
    echo_of: PendingAction | None = None
    """For ``ECHO``, ``LATE_ECHO`` and ``REJECTED``: the action of ours it answers."""
    rejection: Rejection | None = None
    """For ``REJECTED``: the rejection to surface to the user."""

    @property
    def channel(self) -> str:
        """The envelope's channel."""
        return self.envelope.channel

    @property
    def applied(self) -> bool:
        """Whether the envelope's action was applied to the confirmed state."""
        return self.kind in _APPLIED


@frozen(kw_only=True)
class ReconnectOutcome:
    """The result of :meth:`ClientReconciler.apply_reconnect`."""

    kind: ReconnectResultType
    """``replay`` or ``snapshot``, as the host chose."""
    received: tuple[Received, ...]
    """For a replay: what each replayed envelope did, in order.  Empty for snapshots."""
    dropped: tuple[PendingAction, ...]
    """Pending actions cleared without an answer, in dispatch order.

    After a replay these are the actions the host had not echoed: it most
    likely never received them.  After a snapshot the host may or may not
    have applied them; the new confirmed state tells.  Either way the
    application may offer to re-send them (with :meth:`ClientReconciler.dispatch`,
    which gives them new ``clientSeq``\\ s).  Should the host echo one later
    after all, :meth:`ClientReconciler.receive` reports it as ``LATE_ECHO``.
    """
    removed: tuple[str, ...]
    """Channels no longer tracked: the replay's ``missing`` ones, or for a
    snapshot result the tracked channels the host sent no snapshot for."""

    @property
    def rejections(self) -> tuple[Rejection, ...]:
        """The rejections of our own actions found in a replay."""
        return tuple(r.rejection for r in self.received if r.rejection is not None)


class _Channel:
    """The mutable bookkeeping of one subscribed channel."""

    __slots__ = ("cache", "confirmed", "last_seen", "pending")

    def __init__(
        self,
        confirmed: SnapshotState,
        last_seen: int,
        pending: deque[PendingAction] | None = None,
        cache: SnapshotState | None = None,
    ) -> None:
        self.confirmed = confirmed
        self.last_seen = last_seen
        self.pending: deque[PendingAction] = deque() if pending is None else pending
        # optimistic state when pending is non-empty; None = stale, rebuild on read
        self.cache = cache

    def copy(self) -> _Channel:
        return _Channel(self.confirmed, self.last_seen, deque(self.pending), self.cache)


def _wire_type(action: StateAction) -> str:
    """The action's wire ``type`` as a plain string."""
    value = action.type
    if isinstance(value, Enum):
        value = value.value
    return value if isinstance(value, str) else repr(value)


def _find(pending: deque[PendingAction], client_seq: int) -> int | None:
    """The index of the pending action sent with ``client_seq``, head first."""
    for index, entry in enumerate(pending):
        if entry.client_seq == client_seq:
            return index
    return None


class ClientReconciler:
    """The write-ahead reconciler of one client connection.

    ``client_id`` is the id the client sent in ``initialize``; echoes whose
    ``origin.clientId`` equals it are ours.  ``now`` is the reducers' clock
    (``None``: the wall clock) and ``on_unknown`` is called with every
    :class:`~agenthost_protocol.types.UnknownAction` applied to a confirmed
    state.  ``server_seq`` is ``InitializeResult.serverSeq``, the starting
    point of :attr:`last_seen_server_seq`.

    The ``clientSeq`` counter starts at 1, is shared by all channels and is
    never reset, not even by a reconnect, so a ``clientSeq`` names one
    dispatch for the life of the object.
    """

    def __init__(
        self,
        client_id: str,
        *,
        now: Clock | None = None,
        on_unknown: Callable[[UnknownAction], None] | None = None,
        server_seq: int = 0,
    ) -> None:
        self._client_id = client_id
        self._now = now
        self._on_unknown = on_unknown
        self._next_client_seq = 1
        self._last_seen = server_seq
        self._channels: dict[str, _Channel] = {}
        # channels we stopped tracking; envelopes for them may still be in flight
        self._released: set[str] = set()
        # dropped pending actions by clientSeq, for late echoes (insertion-ordered)
        self._orphans: dict[int, PendingAction] = {}

    # -- reading ---------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """The connection's client id."""
        return self._client_id

    @property
    def last_seen_server_seq(self) -> int:
        """The highest ``serverSeq`` seen (envelopes and snapshots), for ``reconnect``."""
        return self._last_seen

    @property
    def channels(self) -> tuple[str, ...]:
        """The tracked channels, in subscription order."""
        return tuple(self._channels)

    def confirmed(self, channel: str) -> SnapshotState:
        """The host-acknowledged state of ``channel``."""
        return self._get(channel).confirmed

    def pending(self, channel: str) -> tuple[PendingAction, ...]:
        """Our dispatched, not yet echoed actions on ``channel``, oldest first."""
        return tuple(self._get(channel).pending)

    def optimistic(self, channel: str) -> SnapshotState:
        """``confirmed`` with ``pending`` replayed on top: the state to render.

        Cached; a rebuild replays the pending actions only.
        """
        ch = self._get(channel)
        if not ch.pending:
            return ch.confirmed
        if ch.cache is None:
            state = ch.confirmed
            for entry in ch.pending:
                state = self._reduce(channel, state, entry.action)
            ch.cache = state
        return ch.cache

    def reconnect_params(self) -> ReconnectParams:
        """The ``reconnect`` request's params for the tracked channels."""
        return ReconnectParams(
            client_id=self._client_id,
            last_seen_server_seq=self._last_seen,
            subscriptions=tuple(self._channels),
        )

    # -- subscriptions ---------------------------------------------------------

    def subscribe(self, snapshot: Snapshot) -> None:
        """Start tracking ``snapshot.resource`` from a ``subscribe``/``initialize`` snapshot.

        Raises :class:`LocalProtocolError` if the channel is already tracked.
        """
        channel = snapshot.resource
        if channel in self._channels:
            raise LocalProtocolError(
                f"channel {channel!r} is already subscribed", path="$.params.channel"
            )
        _check_snapshot(snapshot, "$.result.snapshot")
        self._channels[channel] = _Channel(snapshot.state, snapshot.from_seq)
        self._released.discard(channel)
        self._last_seen = max(self._last_seen, snapshot.from_seq)

    def unsubscribe(self, channel: str) -> tuple[PendingAction, ...]:
        """Stop tracking ``channel``; returns its pending actions, which are dropped.

        Envelopes for it that are still in flight are then reported as
        ``UNSUBSCRIBED``.  Raises :class:`LocalProtocolError` if it is not tracked.
        """
        dropped = tuple(self._get(channel).pending)
        del self._channels[channel]
        self._released.add(channel)
        _remember_orphans(self._orphans, dropped)
        return dropped

    # -- sending ---------------------------------------------------------------

    def dispatch(self, channel: str, action: StateAction) -> DispatchActionParams:
        """Apply ``action`` optimistically and return the ``dispatchAction`` params to send.

        Raises :class:`LocalProtocolError`, changing nothing, if ``channel`` is
        not tracked, if ``action`` is not client-dispatchable (38 of AHP
        0.7.0's 85 action types are, see
        :data:`~agenthost_protocol.versions.IS_CLIENT_DISPATCHABLE`; unknown
        actions never are; on a changeset only ``changeset/filesReviewChanged``
        is) or if it belongs to another kind of channel.
        """
        ch = self._get(channel)
        wire_type = _wire_type(action)
        if isinstance(action, UnknownAction) or not IS_CLIENT_DISPATCHABLE.get(wire_type, False):
            raise LocalProtocolError(
                f"{wire_type!r} is not a client-dispatchable action", path="$.params.action.type"
            )
        family = _ACTION_FAMILY.get(type(ch.confirmed))
        if family is not None and not wire_type.startswith(family):
            raise LocalProtocolError(
                f"{wire_type!r} cannot be dispatched to {channel!r} "
                f"(a {type(ch.confirmed).__name__} channel)",
                path="$.params.action.type",
            )
        if not ch.pending:
            cache: SnapshotState | None = self._reduce(channel, ch.confirmed, action)
        elif ch.cache is not None:
            cache = self._reduce(channel, ch.cache, action)
        else:
            cache = None  # stale already; rebuilt on the next read
        client_seq = self._next_client_seq
        self._next_client_seq += 1
        ch.pending.append(PendingAction(channel=channel, client_seq=client_seq, action=action))
        ch.cache = cache
        return DispatchActionParams(channel=channel, client_seq=client_seq, action=action)

    # -- receiving -------------------------------------------------------------

    def receive(self, envelope: ActionEnvelope) -> Received:
        """Reconcile one ``action`` notification from the host.

        Raises :class:`RemoteProtocolError`, changing nothing, for an envelope
        on a channel that was never tracked, or an echo of ours (a rejected
        one included) whose ``clientSeq`` matches no pending action on that
        channel.  See :class:`ReceiveKind` for the outcomes.

        An echo normally answers the head of the channel's pending actions:
        the transport is ordered and AHP 0.7.0 makes no host defer a client's
        action.  One that answers a later pending action (a host that applies
        some actions later than others) is accepted all the same: it is
        removed from wherever it is in pending and applied to confirmed, and
        the remaining pending actions are rebased.
        """
        received = self._receive_into(self._channels, self._orphans, self._released, envelope)
        self._last_seen = max(self._last_seen, envelope.server_seq)
        return received

    def apply_reconnect(self, result: ReconnectResult) -> ReconnectOutcome:
        """Apply the host's answer to ``reconnect``.

        *Replay*: the channels in ``missing`` are dropped, the replayed
        envelopes are reconciled as by :meth:`receive` (so our actions they
        echo or reject are not reported as dropped), then every remaining
        pending action is cleared.  *Snapshot*: every tracked channel is reset
        to its fresh snapshot, channels without one are dropped, and all
        pending actions are cleared.  Raises :class:`RemoteProtocolError`,
        changing nothing, for a replayed envelope :meth:`receive` would refuse,
        a snapshot of a channel that is not tracked, or two snapshots of one
        channel.
        """
        match result:
            case ReconnectReplayResult():
                return self._apply_replay(result)
            case ReconnectSnapshotResult():
                return self._apply_snapshots(result)
            case _:
                assert_never(result)

    # -- internals -------------------------------------------------------------

    def _get(self, channel: str) -> _Channel:
        ch = self._channels.get(channel)
        if ch is None:
            raise LocalProtocolError(f"channel {channel!r} is not subscribed", path="$.channel")
        return ch

    def _reduce(self, channel: str, state: SnapshotState, action: StateAction) -> SnapshotState:
        return reduce(channel, state, action, now=self._now, on_unknown=self._on_unknown)

    def _receive_into(
        self,
        channels: dict[str, _Channel],
        orphans: dict[int, PendingAction],
        released: set[str] | frozenset[str],
        envelope: ActionEnvelope,
    ) -> Received:
        """Reconcile ``envelope`` into ``channels``/``orphans``; validates before mutating."""
        channel = envelope.channel
        ch = channels.get(channel)
        if ch is None:
            if channel in released:
                return Received(kind=ReceiveKind.UNSUBSCRIBED, envelope=envelope)
            raise RemoteProtocolError(
                f"action envelope for channel {channel!r}, which is not subscribed",
                path="$.params.channel",
            )
        seq = envelope.server_seq
        if seq <= ch.last_seen:
            return Received(kind=ReceiveKind.DUPLICATE, envelope=envelope)
        origin = envelope.origin
        reason = envelope.rejection_reason
        if origin is None or origin.client_id != self._client_id:
            if reason is not None:
                ch.last_seen = seq
                return Received(kind=ReceiveKind.FOREIGN_REJECTED, envelope=envelope)
            new = self._reduce(channel, ch.confirmed, envelope.action)
            if new is not ch.confirmed:
                ch.cache = None  # rebase on the next read
            ch.confirmed = new
            ch.last_seen = seq
            return Received(kind=ReceiveKind.FOREIGN, envelope=envelope)

        client_seq = origin.client_seq
        index = _find(ch.pending, client_seq)
        if index is None:
            orphan = orphans.get(client_seq)
            if orphan is None or orphan.channel != channel:
                raise RemoteProtocolError(
                    f"echo of clientSeq {client_seq} on {channel!r} matches no pending action",
                    path="$.params.origin.clientSeq",
                )
            if reason is not None:
                del orphans[client_seq]
                ch.last_seen = seq
                return Received(
                    kind=ReceiveKind.REJECTED,
                    envelope=envelope,
                    echo_of=orphan,
                    rejection=_rejection(orphan, reason, seq),
                )
            new = self._reduce(channel, ch.confirmed, envelope.action)
            del orphans[client_seq]
            if new is not ch.confirmed:
                ch.cache = None
            ch.confirmed = new
            ch.last_seen = seq
            return Received(kind=ReceiveKind.LATE_ECHO, envelope=envelope, echo_of=orphan)

        entry = ch.pending[index]
        if reason is not None:
            del ch.pending[index]
            ch.cache = None
            ch.last_seen = seq
            return Received(
                kind=ReceiveKind.REJECTED,
                envelope=envelope,
                echo_of=entry,
                rejection=_rejection(entry, reason, seq),
            )
        new = self._reduce(channel, ch.confirmed, envelope.action)
        del ch.pending[index]
        # confirmed + pending[0] + rest == the old optimistic state when the
        # head came back unchanged; otherwise the rest must be rebased.
        if index != 0 or envelope.action != entry.action or not ch.pending:
            ch.cache = None
        ch.confirmed = new
        ch.last_seen = seq
        return Received(kind=ReceiveKind.ECHO, envelope=envelope, echo_of=entry)

    def _apply_replay(self, result: ReconnectReplayResult) -> ReconnectOutcome:
        missing = frozenset(result.missing)
        removed = tuple(uri for uri in self._channels if uri in missing)
        channels = {uri: ch.copy() for uri, ch in self._channels.items() if uri not in missing}
        orphans = dict(self._orphans)
        released = self._released | missing
        last_seen = self._last_seen
        received: list[Received] = []
        for envelope in result.actions:
            received.append(self._receive_into(channels, orphans, released, envelope))
            last_seen = max(last_seen, envelope.server_seq)
        # nothing raised: commit
        dropped = _all_pending(self._channels[uri] for uri in removed) + _all_pending(
            channels.values()
        )
        for ch in channels.values():
            ch.pending.clear()
            ch.cache = None
        dropped = tuple(sorted(dropped, key=lambda p: p.client_seq))
        _remember_orphans(orphans, dropped)
        self._channels = channels
        self._orphans = orphans
        self._released.update(removed)
        self._last_seen = last_seen
        return ReconnectOutcome(
            kind=ReconnectResultType.REPLAY,
            received=tuple(received),
            dropped=dropped,
            removed=removed,
        )

    def _apply_snapshots(self, result: ReconnectSnapshotResult) -> ReconnectOutcome:
        fresh: dict[str, Snapshot] = {}
        for index, snapshot in enumerate(result.snapshots):
            uri = snapshot.resource
            path = f"$.result.snapshots[{index}].resource"
            if uri not in self._channels:
                raise RemoteProtocolError(
                    f"reconnect snapshot for channel {uri!r}, which is not subscribed", path=path
                )
            if uri in fresh:
                raise RemoteProtocolError(f"two reconnect snapshots for {uri!r}", path=path)
            _check_snapshot(snapshot, f"$.result.snapshots[{index}]")
            fresh[uri] = snapshot
        # nothing raised: commit
        removed = tuple(uri for uri in self._channels if uri not in fresh)
        dropped = tuple(sorted(_all_pending(self._channels.values()), key=lambda p: p.client_seq))
        _remember_orphans(self._orphans, dropped)
        self._channels = {uri: _Channel(s.state, s.from_seq) for uri, s in fresh.items()}
        self._released.update(removed)
        if fresh:
            # set, not raise: a restarted host may count from a lower serverSeq
            self._last_seen = max(s.from_seq for s in fresh.values())
        return ReconnectOutcome(
            kind=ReconnectResultType.SNAPSHOT, received=(), dropped=dropped, removed=removed
        )


def _check_snapshot(snapshot: Snapshot, path: str) -> None:
    """Refuse a snapshot whose state is not the state of its channel's kind."""
    state_type = type(snapshot.state)
    if state_type not in _ACTION_FAMILY:
        raise RemoteProtocolError(
            f"snapshot of {snapshot.resource!r} holds a {state_type.__name__}, not a channel state",
            path=f"{path}.state",
        )
    kind = channel_kind(snapshot.resource)
    if kind is not None and STATE_TYPES.get(kind) is not state_type:
        raise RemoteProtocolError(
            f"snapshot of the {kind.value} channel {snapshot.resource!r} "
            f"holds a {state_type.__name__}",
            path=f"{path}.state",
        )


def _rejection(entry: PendingAction, reason: str, server_seq: int) -> Rejection:
    return Rejection(
        channel=entry.channel,
        client_seq=entry.client_seq,
        action=entry.action,
        reason=reason,
        server_seq=server_seq,
    )


def _all_pending(channels: Iterable[_Channel]) -> tuple[PendingAction, ...]:
    return tuple(entry for ch in channels for entry in ch.pending)


def _remember_orphans(orphans: dict[int, PendingAction], dropped: Iterable[PendingAction]) -> None:
    for entry in dropped:
        orphans[entry.client_seq] = entry
    while len(orphans) > ORPHAN_LIMIT:
        del orphans[next(iter(orphans))]
