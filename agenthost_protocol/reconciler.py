"""The client-side write-ahead reconciler.

AHP clients apply their own actions optimistically and reconcile when the
host's :class:`~agenthost_protocol.types.ActionEnvelope`\\ s come back
(``docs/guide/reconciliation.md`` of the spec).  A :class:`ClientReconciler`
does that bookkeeping for one connection, without any I/O: the application
feeds it what it received and sends what it returns.

For every subscribed channel it keeps

* ``confirmed``: the state the host has acknowledged, built only from
  snapshots and accepted envelopes with the library's own reducers, so it
  equals the host's state as of the last envelope seen (but for the chat
  ``modifiedAt``, stamped from this client's clock);
* ``pending``: the client's own dispatched actions not yet echoed, in
  dispatch order;
* ``optimistic``: ``confirmed`` with ``pending`` replayed on top, what the UI
  renders.  It is cached: reading it again costs nothing, a dispatch extends
  it by one reduction, an in-order echo of an unchanged action (unless the
  echo is stamped at another instant than the dispatch was) or a foreign
  action that changes nothing keeps it, and anything else marks it stale, to
  be rebuilt on the next read from ``confirmed`` by replaying ``pending``
  only (never the history).

**Clock policy.**  In AHP 0.7.0 only the chat reducer reads the clock, to
stamp ``modifiedAt``.  The reconciler reads its ``now`` exactly once per
:meth:`~ClientReconciler.dispatch` and keeps the reading as
:attr:`PendingAction.dispatched_at`: the action is reduced at that instant
whenever it is replayed, so a rebase never restamps it.  A received envelope
is reduced at a reading taken when it is applied (at most one reading per
envelope, none if the reducer needs none).  Reading the states never reads
the clock.  So, for *any* clock, monotonic or not, ``optimistic`` is exactly
``confirmed`` with each pending action reduced at its ``dispatched_at``.

Errors follow the h11 model (see :mod:`agenthost_protocol.errors`): a
:class:`~agenthost_protocol.errors.LocalProtocolError` means the caller asked
for something the protocol forbids or misused the API (an argument of the
wrong type, an ill-typed action to dispatch, a clock that does not return
milliseconds), a :class:`~agenthost_protocol.errors.RemoteProtocolError`
means the host sent something out of protocol or malformed (a field of the
wrong type in an envelope, a snapshot or a reconnect result; a state or an
action the reducers cannot apply, which only a hand-built, ill-typed value
can cause: the codec checks types).  Both are raised *before* anything is
changed, so the reconciler is exactly as it was before the failed call and
stays usable (no sticky error state: whether to reconnect is the
application's call).  An exception raised by the application's own ``now``
or ``on_unknown`` goes through unchanged.  Any other exception escaping is a
bug in the library.

A reconciler is not thread-safe; drive it from one task or thread.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any, Final, get_args

from attrs import frozen

from . import wire
from .channels import channel_kind
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .reducers import STATE_TYPES, Clock, reduce
from .reducers._clock import clamp_ms, now_ms
from .types import (
    ActionEnvelope,
    ActionOrigin,
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

_ACTION_TYPES: Final[tuple[type, ...]] = get_args(StateAction)
"""Every class of the ``StateAction`` union, ``UnknownAction`` included."""
_ACTION_TYPE_SET: Final = frozenset(_ACTION_TYPES)


@frozen(kw_only=True)
class PendingAction:
    """One of the client's own actions, dispatched and not yet echoed."""

    channel: str
    """The channel it was dispatched to."""
    client_seq: int
    """The ``clientSeq`` it was sent with; the host echoes it as ``origin.clientSeq``."""
    action: StateAction
    """The action as dispatched."""
    dispatched_at: int
    """The reconciler's clock when it was dispatched, in epoch milliseconds: the
    instant it is reduced at whenever the optimistic state is rebuilt."""


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
        pending: OrderedDict[int, PendingAction] | None = None,
        cache: SnapshotState | None = None,
    ) -> None:
        self.confirmed = confirmed
        self.last_seen = last_seen
        # by clientSeq, in dispatch order: an echo finds its action, and the
        # head, in O(1) wherever the host answers (a deque scan was quadratic
        # for a host answering newest first)
        self.pending: OrderedDict[int, PendingAction] = (
            OrderedDict() if pending is None else pending
        )
        # optimistic state when pending is non-empty; None = stale, rebuild on read
        self.cache = cache

    def copy(self) -> _Channel:
        return _Channel(self.confirmed, self.last_seen, self.pending.copy(), self.cache)


class _Reading:
    """The reconciler's clock for one reduction: read at most once, and only if asked."""

    __slots__ = ("_clock", "ms")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.ms: int | None = None

    def __call__(self) -> int:
        if self.ms is None:
            self.ms = self._clock()
        return self.ms


def _at(ms: int) -> Clock:
    """A clock stopped at ``ms``."""
    return lambda: ms


def _wire_type(action: StateAction) -> str:
    """The action's wire ``type`` as a plain string."""
    value = action.type
    if isinstance(value, Enum):
        value = value.value
    return value if isinstance(value, str) else repr(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind_of(value: object) -> str:
    return "null" if value is None else type(value).__name__


class ClientReconciler:
    """The write-ahead reconciler of one client connection.

    ``client_id`` is the id the client sent in ``initialize``; echoes whose
    ``origin.clientId`` equals it are ours.  ``now`` is the reducers' clock
    (``None``: the wall clock; see the module's clock policy) and
    ``on_unknown`` is called with every
    :class:`~agenthost_protocol.types.UnknownAction` applied to a confirmed
    state.  ``server_seq`` is ``InitializeResult.serverSeq``, the starting
    point of :attr:`last_seen_server_seq`.  Raises :class:`LocalProtocolError`
    for arguments of the wrong type.

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
        if not isinstance(client_id, str):
            raise LocalProtocolError(f"client_id is a {_kind_of(client_id)}, not a string")
        if now is not None and not callable(now):
            raise LocalProtocolError("now is not callable")
        if on_unknown is not None and not callable(on_unknown):
            raise LocalProtocolError("on_unknown is not callable")
        if not _is_int(server_seq):
            raise LocalProtocolError(f"server_seq is a {_kind_of(server_seq)}, not an integer")
        self._client_id = client_id
        self._now = now
        self._user_on_unknown = on_unknown
        self._on_unknown = None if on_unknown is None else self._call_on_unknown
        self._reducer_clock: Clock = self._clock_in_reducer
        # set when ``now`` or ``on_unknown`` raised inside a reduction: their
        # exceptions are the application's, not the reducer tripping on peer data
        self._callback_raised = False
        self._next_client_seq = 1
        self._last_seen = server_seq
        self._channels: dict[str, _Channel] = {}
        # channels we stopped tracking; envelopes for them may still be in flight
        self._released: set[str] = set()
        # the last ORPHAN_LIMIT dropped pending actions by clientSeq, oldest
        # first, for late echoes; an OrderedDict forgets its oldest in O(1)
        self._orphans: OrderedDict[int, PendingAction] = OrderedDict()

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
        return tuple(self._get(channel).pending.values())

    def optimistic(self, channel: str) -> SnapshotState:
        """``confirmed`` with ``pending`` replayed on top: the state to render.

        Cached; a rebuild replays the pending actions only, each at its
        ``dispatched_at``.  Raises :class:`RemoteProtocolError`, changing
        nothing, if the confirmed state cannot take a pending action (an
        ill-typed state from the host: the pending actions were checked when
        dispatched).
        """
        ch = self._get(channel)
        if not ch.pending:
            return ch.confirmed
        if ch.cache is None:
            state = ch.confirmed
            for entry in ch.pending.values():
                state = self._replay(channel, state, entry.action, entry.dispatched_at)
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

        Raises :class:`LocalProtocolError` if ``snapshot`` is not a
        :class:`~agenthost_protocol.types.Snapshot` or the channel is already
        tracked, :class:`RemoteProtocolError` if the snapshot is malformed.
        """
        if not isinstance(snapshot, Snapshot):
            raise LocalProtocolError(f"subscribe takes a Snapshot, not a {_kind_of(snapshot)}")
        _check_snapshot(snapshot, "$.result.snapshot")
        channel = snapshot.resource
        if channel in self._channels:
            raise LocalProtocolError(
                f"channel {channel!r} is already subscribed", path="$.params.channel"
            )
        self._channels[channel] = _Channel(snapshot.state, snapshot.from_seq)
        self._released.discard(channel)
        self._last_seen = max(self._last_seen, snapshot.from_seq)

    def unsubscribe(self, channel: str) -> tuple[PendingAction, ...]:
        """Stop tracking ``channel``; returns its pending actions, which are dropped.

        Envelopes for it that are still in flight are then reported as
        ``UNSUBSCRIBED``.  Raises :class:`LocalProtocolError` if it is not tracked.
        """
        dropped = tuple(self._get(channel).pending.values())
        del self._channels[channel]
        self._released.add(channel)
        _remember_orphans(self._orphans, dropped)
        return dropped

    # -- sending ---------------------------------------------------------------

    def dispatch(self, channel: str, action: StateAction) -> DispatchActionParams:
        """Apply ``action`` optimistically and return the ``dispatchAction`` params to send.

        Reads the clock once (the action's ``dispatched_at``).  Raises
        :class:`LocalProtocolError`, changing nothing, if ``channel`` is not
        tracked, if ``action`` is not a well-typed state action (it must
        encode and decode as itself), if it is not client-dispatchable (38
        of AHP 0.7.0's 85 action types are, see
        :data:`~agenthost_protocol.versions.IS_CLIENT_DISPATCHABLE`; unknown
        actions never are; on a changeset only ``changeset/filesReviewChanged``
        is) or if it belongs to another kind of channel; raises
        :class:`RemoteProtocolError`, changing nothing, if the optimistic
        state cannot take it (see :meth:`optimistic`).
        """
        ch = self._get(channel)
        if not isinstance(action, _ACTION_TYPES):
            raise LocalProtocolError(
                f"dispatch takes a state action, not a {_kind_of(action)}", path="$.params.action"
            )
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
        _check_dispatchable(action)
        dispatched_at = self._read_clock()
        if not ch.pending:
            cache: SnapshotState | None = self._replay(channel, ch.confirmed, action, dispatched_at)
        elif ch.cache is not None:
            cache = self._replay(channel, ch.cache, action, dispatched_at)
        else:
            cache = None  # stale already; rebuilt on the next read
        client_seq = self._next_client_seq
        self._next_client_seq += 1
        ch.pending[client_seq] = PendingAction(
            channel=channel, client_seq=client_seq, action=action, dispatched_at=dispatched_at
        )
        ch.cache = cache
        return DispatchActionParams(channel=channel, client_seq=client_seq, action=action)

    # -- receiving -------------------------------------------------------------

    def receive(self, envelope: ActionEnvelope) -> Received:
        """Reconcile one ``action`` notification from the host.

        Raises :class:`LocalProtocolError` if ``envelope`` is not an
        :class:`~agenthost_protocol.types.ActionEnvelope`.  Raises
        :class:`RemoteProtocolError`, changing nothing, for a malformed
        envelope (a field of the wrong type, an action the confirmed state
        cannot take), an envelope on a channel that was never tracked, or an
        echo of ours (a rejected one included) whose ``clientSeq`` matches no
        pending action on that channel.  See :class:`ReceiveKind` for the
        outcomes.

        An echo normally answers the head of the channel's pending actions:
        the transport is ordered and AHP 0.7.0 makes no host defer a client's
        action.  One that answers a later pending action (a host that applies
        some actions later than others) is accepted all the same: it is
        removed from wherever it is in pending and applied to confirmed, and
        the remaining pending actions are rebased.
        """
        if not isinstance(envelope, ActionEnvelope):
            raise LocalProtocolError(f"receive takes an ActionEnvelope, not a {_kind_of(envelope)}")
        received = self._receive_into(
            self._channels, self._orphans, self._released, envelope, "$.params"
        )
        self._last_seen = max(self._last_seen, envelope.server_seq)
        return received

    def apply_reconnect(self, result: ReconnectResult) -> ReconnectOutcome:
        """Apply the host's answer to ``reconnect``.

        *Replay*: the channels in ``missing`` are dropped, the replayed
        envelopes are reconciled as by :meth:`receive` (so our actions they
        echo or reject are not reported as dropped), then every remaining
        pending action is cleared.  *Snapshot*: every tracked channel is reset
        to its fresh snapshot, channels without one are dropped, and all
        pending actions are cleared.  Raises :class:`LocalProtocolError` if
        ``result`` is neither result type; raises :class:`RemoteProtocolError`,
        changing nothing, for a malformed result, a replayed envelope
        :meth:`receive` would refuse, a snapshot of a channel that is not
        tracked, or two snapshots of one channel.
        """
        if isinstance(result, ReconnectReplayResult):
            return self._apply_replay(result)
        if isinstance(result, ReconnectSnapshotResult):
            return self._apply_snapshots(result)
        raise LocalProtocolError(
            f"apply_reconnect takes a reconnect result, not a {_kind_of(result)}"
        )

    # -- internals -------------------------------------------------------------

    def _get(self, channel: str) -> _Channel:
        ch = self._channels.get(channel) if isinstance(channel, str) else None
        if ch is None:
            raise LocalProtocolError(f"channel {channel!r} is not subscribed", path="$.channel")
        return ch

    def _read_clock(self) -> int:
        """One reading of ``now`` (or the wall clock) as integer epoch milliseconds."""
        value: object = now_ms(self._now)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise LocalProtocolError(
                f"the clock returned a {_kind_of(value)}, not epoch milliseconds"
            )
        return clamp_ms(value)

    def _clock_in_reducer(self) -> int:
        try:
            return self._read_clock()
        except ProtocolError:
            raise
        except Exception:
            self._callback_raised = True
            raise

    def _call_on_unknown(self, action: UnknownAction) -> None:
        assert self._user_on_unknown is not None
        try:
            self._user_on_unknown(action)
        except Exception:
            self._callback_raised = True
            raise

    def _reduce(
        self,
        channel: str,
        state: SnapshotState,
        action: StateAction,
        now: Clock,
        path: str | None,
    ) -> SnapshotState:
        """Reduce ``action`` (received at ``path``, or ours when ``None``) into ``state``.

        A reducer only trips on ill-typed values, which only the host can have
        sent: our own actions were checked when dispatched.
        """
        try:
            return reduce(channel, state, action, now=now, on_unknown=self._on_unknown)
        except ProtocolError:
            self._callback_raised = False
            raise
        except Exception as e:
            if self._callback_raised:
                self._callback_raised = False
                raise
            cause = f"{type(e).__name__}: {e}"
            if path is None:
                message = (
                    f"the state of {channel!r} from the host cannot take "
                    f"{_wire_type(action)!r}: {cause}"
                )
                raise RemoteProtocolError(message) from e
            message = f"cannot apply {_wire_type(action)!r} to {channel!r}: {cause}"
            raise RemoteProtocolError(message, path=f"{path}.action") from e

    def _replay(
        self, channel: str, state: SnapshotState, action: StateAction, at: int
    ) -> SnapshotState:
        """Reduce one of our own actions at the instant it was dispatched."""
        return self._reduce(channel, state, action, _at(at), None)

    def _receive_into(
        self,
        channels: dict[str, _Channel],
        orphans: OrderedDict[int, PendingAction],
        released: set[str] | frozenset[str],
        envelope: ActionEnvelope,
        path: str,
    ) -> Received:
        """Reconcile ``envelope`` into ``channels``/``orphans``; validates before mutating.

        ``path`` locates the envelope in what the host sent, for errors.
        """
        # the well-typed envelope in a few identity tests: this is the streaming path
        origin = envelope.origin
        if not (
            type(envelope.channel) is str
            and type(envelope.server_seq) is int
            and type(envelope.action) in _ACTION_TYPE_SET
            and (envelope.rejection_reason is None or type(envelope.rejection_reason) is str)
            and (
                origin is None
                or (
                    type(origin) is ActionOrigin
                    and type(origin.client_id) is str
                    and type(origin.client_seq) is int
                )
            )
        ):
            _check_envelope(envelope, path)
        channel = envelope.channel
        ch = channels.get(channel)
        if ch is None:
            if channel in released:
                return Received(kind=ReceiveKind.UNSUBSCRIBED, envelope=envelope)
            raise RemoteProtocolError(
                f"action envelope for channel {channel!r}, which is not subscribed",
                path=f"{path}.channel",
            )
        seq = envelope.server_seq
        if seq <= ch.last_seen:
            return Received(kind=ReceiveKind.DUPLICATE, envelope=envelope)
        reason = envelope.rejection_reason
        if origin is None or origin.client_id != self._client_id:
            if reason is not None:
                ch.last_seen = seq
                return Received(kind=ReceiveKind.FOREIGN_REJECTED, envelope=envelope)
            new = self._reduce(channel, ch.confirmed, envelope.action, self._reducer_clock, path)
            if new is not ch.confirmed:
                ch.cache = None  # rebase on the next read
            ch.confirmed = new
            ch.last_seen = seq
            return Received(kind=ReceiveKind.FOREIGN, envelope=envelope)

        client_seq = origin.client_seq
        entry = ch.pending.get(client_seq)
        if entry is None:
            orphan = orphans.get(client_seq)
            if orphan is None or orphan.channel != channel:
                raise RemoteProtocolError(
                    f"echo of clientSeq {client_seq} on {channel!r} matches no pending action",
                    path=f"{path}.origin.clientSeq",
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
            new = self._reduce(channel, ch.confirmed, envelope.action, self._reducer_clock, path)
            del orphans[client_seq]
            if new is not ch.confirmed:
                ch.cache = None
            ch.confirmed = new
            ch.last_seen = seq
            return Received(kind=ReceiveKind.LATE_ECHO, envelope=envelope, echo_of=orphan)

        if reason is not None:
            del ch.pending[client_seq]
            ch.cache = None
            ch.last_seen = seq
            return Received(
                kind=ReceiveKind.REJECTED,
                envelope=envelope,
                echo_of=entry,
                rejection=_rejection(entry, reason, seq),
            )
        reading = _Reading(self._reducer_clock)
        new = self._reduce(channel, ch.confirmed, envelope.action, reading, path)
        head = next(iter(ch.pending))
        del ch.pending[client_seq]
        # The cache is confirmed + head + rest, the head reduced at its
        # dispatched_at.  It stays right only if the echo is the head, unchanged,
        # and reduced to the same state: at the same instant, or without
        # reading the clock (a reducer reads it, or not, whatever it returns).
        keep = (
            head == client_seq
            and envelope.action == entry.action
            and (reading.ms is None or reading.ms == entry.dispatched_at)
            and bool(ch.pending)
        )
        if not keep:
            ch.cache = None
        ch.confirmed = new
        ch.last_seen = seq
        return Received(kind=ReceiveKind.ECHO, envelope=envelope, echo_of=entry)

    def _apply_replay(self, result: ReconnectReplayResult) -> ReconnectOutcome:
        actions = _sequence(result.actions, "$.result.actions")
        missing_uris = _sequence(result.missing, "$.result.missing")
        for index, uri in enumerate(missing_uris):
            if not isinstance(uri, str):
                raise RemoteProtocolError(
                    f"a missing channel is a {_kind_of(uri)}, not a URI",
                    path=f"$.result.missing[{index}]",
                )
        missing = frozenset(missing_uris)
        removed = tuple(uri for uri in self._channels if uri in missing)
        channels = {uri: ch.copy() for uri, ch in self._channels.items() if uri not in missing}
        orphans = self._orphans.copy()
        released = self._released | missing
        last_seen = self._last_seen
        received: list[Received] = []
        for index, envelope in enumerate(actions):
            path = f"$.result.actions[{index}]"
            if not isinstance(envelope, ActionEnvelope):
                raise RemoteProtocolError(
                    f"a replayed action is a {_kind_of(envelope)}, not an envelope", path=path
                )
            received.append(self._receive_into(channels, orphans, released, envelope, path))
            last_seen = max(last_seen, envelope.server_seq)
        # nothing raised: commit
        dropped = _all_pending(self._channels[uri] for uri in removed) + _all_pending(
            channels.values()
        )
        for ch in channels.values():
            ch.pending.clear()
            ch.cache = None
        dropped = tuple(sorted(dropped, key=_by_client_seq))
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
        for index, snapshot in enumerate(_sequence(result.snapshots, "$.result.snapshots")):
            path = f"$.result.snapshots[{index}]"
            if not isinstance(snapshot, Snapshot):
                raise RemoteProtocolError(
                    f"a reconnect snapshot is a {_kind_of(snapshot)}, not a Snapshot", path=path
                )
            _check_snapshot(snapshot, path)
            uri = snapshot.resource
            if uri not in self._channels:
                raise RemoteProtocolError(
                    f"reconnect snapshot for channel {uri!r}, which is not subscribed",
                    path=f"{path}.resource",
                )
            if uri in fresh:
                raise RemoteProtocolError(
                    f"two reconnect snapshots for {uri!r}", path=f"{path}.resource"
                )
            fresh[uri] = snapshot
        # nothing raised: commit
        removed = tuple(uri for uri in self._channels if uri not in fresh)
        dropped = tuple(sorted(_all_pending(self._channels.values()), key=_by_client_seq))
        _remember_orphans(self._orphans, dropped)
        self._channels = {uri: _Channel(s.state, s.from_seq) for uri, s in fresh.items()}
        self._released.update(removed)
        if fresh:
            # set, not raise: a restarted host may count from a lower serverSeq
            self._last_seen = max(s.from_seq for s in fresh.values())
        return ReconnectOutcome(
            kind=ReconnectResultType.SNAPSHOT, received=(), dropped=dropped, removed=removed
        )


def _check_dispatchable(action: StateAction) -> None:
    """Refuse an ill-typed action: it must encode, and decode as itself.

    Checked once, here, so that every later reduction of a pending action
    can only trip on the state the host sent.
    """
    try:
        encoded = wire.unstructure(action)
    except Exception as e:
        raise LocalProtocolError(
            f"the action cannot be encoded: {type(e).__name__}: {e}", path="$.params.action"
        ) from None
    try:
        decoded = wire.structure(encoded, StateAction)
    except ProtocolError as e:
        where = "$.params.action" + (e.path or "$")[1:]
        raise LocalProtocolError(f"ill-typed action: {e.message}", path=where) from None
    if type(decoded) is not type(action):
        raise LocalProtocolError(
            f"a {type(action).__name__} that decodes as a {type(decoded).__name__}",
            path="$.params.action",
        )


def _check_envelope(envelope: ActionEnvelope, path: str) -> None:
    """Refuse an envelope whose fields the reconciler reads are of the wrong type."""
    origin = envelope.origin
    if not isinstance(envelope.channel, str):
        raise RemoteProtocolError(
            f"channel is a {_kind_of(envelope.channel)}, not a URI", path=f"{path}.channel"
        )
    if not _is_int(envelope.server_seq):
        raise RemoteProtocolError(
            f"serverSeq is a {_kind_of(envelope.server_seq)}, not an integer",
            path=f"{path}.serverSeq",
        )
    if not isinstance(envelope.action, _ACTION_TYPES):
        raise RemoteProtocolError(
            f"action is a {_kind_of(envelope.action)}, not a state action", path=f"{path}.action"
        )
    if origin is not None:
        if not isinstance(origin, ActionOrigin):
            raise RemoteProtocolError(
                f"origin is a {_kind_of(origin)}, not an ActionOrigin", path=f"{path}.origin"
            )
        if not isinstance(origin.client_id, str):
            raise RemoteProtocolError(
                f"clientId is a {_kind_of(origin.client_id)}, not a string",
                path=f"{path}.origin.clientId",
            )
        if not _is_int(origin.client_seq):
            raise RemoteProtocolError(
                f"clientSeq is a {_kind_of(origin.client_seq)}, not an integer",
                path=f"{path}.origin.clientSeq",
            )
    reason = envelope.rejection_reason
    if reason is not None and not isinstance(reason, str):
        raise RemoteProtocolError(
            f"rejectionReason is a {_kind_of(reason)}, not a string",
            path=f"{path}.rejectionReason",
        )


def _check_snapshot(snapshot: Snapshot, path: str) -> None:
    """Refuse a malformed snapshot, or one whose state is not its channel's kind's."""
    if not isinstance(snapshot.resource, str):
        raise RemoteProtocolError(
            f"resource is a {_kind_of(snapshot.resource)}, not a URI", path=f"{path}.resource"
        )
    if not _is_int(snapshot.from_seq):
        raise RemoteProtocolError(
            f"fromSeq is a {_kind_of(snapshot.from_seq)}, not an integer", path=f"{path}.fromSeq"
        )
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


def _sequence(value: object, path: str) -> tuple[Any, ...]:
    """A list field of a reconnect result as a tuple; refused if it is not a list."""
    if not isinstance(value, tuple | list):
        raise RemoteProtocolError(f"a {_kind_of(value)}, not a list", path=path)
    return tuple(value)


def _rejection(entry: PendingAction, reason: str, server_seq: int) -> Rejection:
    return Rejection(
        channel=entry.channel,
        client_seq=entry.client_seq,
        action=entry.action,
        reason=reason,
        server_seq=server_seq,
    )


def _by_client_seq(entry: PendingAction) -> int:
    return entry.client_seq


def _all_pending(channels: Iterable[_Channel]) -> tuple[PendingAction, ...]:
    return tuple(entry for ch in channels for entry in ch.pending.values())


def _remember_orphans(
    orphans: OrderedDict[int, PendingAction], dropped: tuple[PendingAction, ...]
) -> None:
    # Only the newest ORPHAN_LIMIT of what is dropped can be kept, so only
    # they are added; each addition beyond the limit forgets the oldest in
    # O(1).  Adding all and trimming with `del d[next(iter(d))]` was quadratic:
    # a dict scans past every slot deleted from its front.
    limit = ORPHAN_LIMIT
    for entry in dropped[max(0, len(dropped) - limit) :]:
        orphans[entry.client_seq] = entry
    while len(orphans) > limit:
        orphans.popitem(last=False)
