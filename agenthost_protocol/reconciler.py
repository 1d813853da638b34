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
  action that changes nothing keeps it, a foreign action that commutes with
  every pending action (their *footprints*, the last section of this module,
  do not overlap) is applied to it on the next read, one reduction, and
  anything else marks it stale, to be rebuilt on the next read from
  ``confirmed`` by replaying ``pending`` only (never the history).

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from types import MappingProxyType
from typing import Any, Final, NamedTuple, cast, get_args

from attrs import frozen

from . import wire
from .channels import channel_kind
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .reducers import STATE_TYPES, Clock, reduce
from .reducers._clock import clamp_ms, now_ms
from .reducers._status import _BLOCKING as _BLOCKING_CALLS
from .types import (
    ActionEnvelope,
    ActionOrigin,
    AnnotationsEntryRemovedAction,
    AnnotationsEntrySetAction,
    AnnotationsRemovedAction,
    AnnotationsSetAction,
    AnnotationsState,
    AnnotationsUpdatedAction,
    ChangesetClearedAction,
    ChangesetContentChangedAction,
    ChangesetFileRemovedAction,
    ChangesetFileSetAction,
    ChangesetFilesReviewChangedAction,
    ChangesetOperationsChangedAction,
    ChangesetOperationStatusChangedAction,
    ChangesetState,
    ChangesetStatusChangedAction,
    ChatActivityChangedAction,
    ChatDeltaAction,
    ChatDraftChangedAction,
    ChatErrorAction,
    ChatInputAnswerChangedAction,
    ChatInputCompletedAction,
    ChatInputRequestedAction,
    ChatPendingMessageRemovedAction,
    ChatPendingMessageSetAction,
    ChatQueuedMessagesReorderedAction,
    ChatReasoningAction,
    ChatResponsePartAction,
    ChatState,
    ChatToolCallApprovedAction,
    ChatToolCallAuthRequiredAction,
    ChatToolCallAuthResolvedAction,
    ChatToolCallCompleteAction,
    ChatToolCallContentChangedAction,
    ChatToolCallDeltaAction,
    ChatToolCallDeniedAction,
    ChatToolCallReadyAction,
    ChatToolCallResultConfirmedAction,
    ChatToolCallStartAction,
    ChatTruncatedAction,
    ChatTurnCancelledAction,
    ChatTurnCompleteAction,
    ChatTurnsLoadedAction,
    ChatTurnStartedAction,
    ChatUsageAction,
    ChatWorkingDirectoryRemovedAction,
    ChatWorkingDirectorySetAction,
    DispatchActionParams,
    InputRequestResponsePart,
    MarkdownResponsePart,
    PendingMessageKind,
    ReasoningResponsePart,
    ReconnectParams,
    ReconnectReplayResult,
    ReconnectResult,
    ReconnectResultType,
    ReconnectSnapshotResult,
    ResourceReponsePart,
    ResourceWatchChangedAction,
    ResourceWatchState,
    RootActiveSessionsChangedAction,
    RootAgentsChangedAction,
    RootConfigChangedAction,
    RootState,
    RootTerminalsChangedAction,
    SessionActiveClientRemovedAction,
    SessionActiveClientSetAction,
    SessionActivityChangedAction,
    SessionChangesetsChangedAction,
    SessionChatAddedAction,
    SessionChatRemovedAction,
    SessionChatUpdatedAction,
    SessionConfigChangedAction,
    SessionCreationFailedAction,
    SessionCustomizationRemovedAction,
    SessionCustomizationsChangedAction,
    SessionCustomizationToggledAction,
    SessionCustomizationUpdatedAction,
    SessionDefaultChatChangedAction,
    SessionInputNeededRemovedAction,
    SessionInputNeededSetAction,
    SessionIsArchivedChangedAction,
    SessionIsReadChangedAction,
    SessionMcpServerStartRequestedAction,
    SessionMcpServerStateChangedAction,
    SessionMcpServerStopRequestedAction,
    SessionMetaChangedAction,
    SessionReadyAction,
    SessionServerToolsChangedAction,
    SessionState,
    SessionTitleChangedAction,
    SessionWorkingDirectoryRemovedAction,
    SessionWorkingDirectorySetAction,
    Snapshot,
    SnapshotState,
    StateAction,
    SystemNotificationResponsePart,
    TerminalClaimedAction,
    TerminalClearedAction,
    TerminalCommandDetectionAvailableAction,
    TerminalCommandExecutedAction,
    TerminalCommandFinishedAction,
    TerminalCwdChangedAction,
    TerminalDataAction,
    TerminalExitedAction,
    TerminalInputAction,
    TerminalResizedAction,
    TerminalState,
    TerminalTitleChangedAction,
    ToolCallResponsePart,
    UnknownAction,
    UnknownToolCallState,
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

_new: Final = object.__new__
_set: Final = object.__setattr__


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


def _foreign(envelope: ActionEnvelope) -> Received:
    """``Received(kind=FOREIGN, envelope=envelope)`` for the streaming path: what its
    frozen attrs ``__init__`` does (four slots stored), without the call."""
    received = _new(Received)
    _set(received, "kind", ReceiveKind.FOREIGN)
    _set(received, "envelope", envelope)
    _set(received, "echo_of", None)
    _set(received, "rejection", None)
    return received


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


_Deferred = tuple[StateAction, int | None]
"""An action still to apply to the cached optimistic state, and the instant to
reduce it at (``None``: the reduction on ``confirmed`` did not read the clock)."""


class _Channel:
    """The mutable bookkeeping of one subscribed channel."""

    __slots__ = ("cache", "confirmed", "deferred", "footprints", "last_seen", "pending")

    def __init__(self, confirmed: SnapshotState, last_seen: int) -> None:
        self.confirmed = confirmed
        self.last_seen = last_seen
        # by clientSeq, in dispatch order: an echo finds its action, and the
        # head, in O(1) wherever the host answers (a deque scan was quadratic
        # for a host answering newest first)
        self.pending: OrderedDict[int, PendingAction] = OrderedDict()
        # When pending is non-empty and cache is not None, the optimistic
        # state is cache with deferred applied in order; None = stale, replay
        # pending on the next read.  deferred holds foreign actions that
        # commute with every pending action (see _Footprints) and the
        # dispatches that came after one: applied on the next read, so a
        # client that reads rarely does not pay for every envelope.  It is
        # never longer than pending, so a read never costs more than a replay.
        self.cache: SnapshotState | None = None
        self.deferred: list[_Deferred] = []
        # the footprints of the pending actions, exactly
        self.footprints = _Footprints()

    def stale(self) -> None:
        """Forget the optimistic state: the next read replays the pending actions."""
        self.cache = None
        self.deferred.clear()

    def copy(self) -> _Channel:
        twin = _Channel(self.confirmed, self.last_seen)
        twin.pending = self.pending.copy()
        twin.cache = self.cache
        twin.deferred = self.deferred.copy()
        twin.footprints = self.footprints.copy()
        return twin


class _Footprints:
    """The union of the footprints of a channel's pending actions, counted by location.

    Counted rather than collected so that an echo or a rejection takes its
    action's footprint out again: the union is always exactly that of what
    is pending, however long the connection lives.
    """

    __slots__ = ("opaque", "touched", "written")

    def __init__(self) -> None:
        self.opaque = 0  # pending actions without a footprint: nothing commutes then
        # How many pending actions write (touch: write or read) each location
        # ``(family, key)``, a whole family being ``(family, None)``, and each
        # family with any key or none, as the bare ``family``.
        self.written: dict[_Loc | str, int] = {}
        self.touched: dict[_Loc | str, int] = {}

    def copy(self) -> _Footprints:
        twin = _Footprints()
        twin.opaque = self.opaque
        twin.written = self.written.copy()
        twin.touched = self.touched.copy()
        return twin

    def count(self, action: StateAction, sign: int) -> None:
        """Add (``sign`` 1) or take out (-1) the footprint of a pending action."""
        footprint = _footprint(action)
        if footprint is None:
            self.opaque += sign
            return
        written, touched = self.written, self.touched
        for loc in footprint.writes:
            _bump(written, loc, sign)
            _bump(written, loc[0], sign)
            _bump(touched, loc, sign)
            _bump(touched, loc[0], sign)
        for loc in footprint.reads:
            _bump(touched, loc, sign)
            _bump(touched, loc[0], sign)

    def admits(self, footprint: _Footprint | None) -> bool:
        """Whether an action of this footprint commutes with every pending action.

        Two locations overlap when their families are equal and their keys
        are, or one of them is the whole family.  The action must write
        nothing a pending action touches, and touch nothing one writes.
        """
        if footprint is None or self.opaque:
            return False
        for counts, locs in (
            (self.touched, footprint.writes),
            (self.written, footprint.writes),
            (self.written, footprint.reads),
        ):
            for loc in locs:
                family, key = loc
                if key is None:
                    if family in counts:  # the whole family meets any of its locations
                        return False
                elif loc in counts or (family, None) in counts:
                    return False
        return True


def _bump(counts: dict[_Loc | str, int], item: _Loc | str, sign: int) -> None:
    count = counts.get(item, 0) + sign
    if count:
        counts[item] = count
    else:
        del counts[item]


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


class _Diverged(Exception):
    """A deferred action did not reduce as it did on ``confirmed``: replay instead."""


def _unread() -> int:
    # The action did not read the clock on confirmed, and its footprint says
    # it reduces alike on the cached state; should it want the clock here
    # all the same, the replay decides (and the clock is not read twice).
    raise _Diverged


def _no_unknown(action: UnknownAction) -> None:
    # An UnknownAction has no footprint, so it is never deferred; were one
    # here, on_unknown must not hear of it twice.
    raise _Diverged


def _catch_up(
    channel: str, state: SnapshotState, deferred: list[_Deferred]
) -> SnapshotState | None:
    """``state`` with the ``deferred`` actions applied in order, each at its instant.

    ``None`` if one of them cannot be applied (it reduced on ``confirmed``,
    and does on a well-formed state, but a replay is the reference): the
    caller replays the pending actions, which reports any error as before.
    """
    try:
        for action, at in deferred:
            now = _unread if at is None else _at(at)
            state = reduce(channel, state, action, now=now, on_unknown=_no_unknown)
    except Exception:
        return None
    return state


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
        # False: every rebase replays the pending actions, as before footprints
        # existed.  Private, for the benchmark and the tests that compare both.
        self._incremental = True

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

        Cached; a foreign action that commutes with every pending action is
        applied to the cached state (see the module's footprints), anything
        else that changes ``confirmed`` makes the next read replay the
        pending actions, each at its ``dispatched_at``.  Raises
        :class:`RemoteProtocolError`, changing nothing, if the confirmed
        state cannot take a pending action (an ill-typed state from the
        host: the pending actions were checked when dispatched).
        """
        ch = self._get(channel)
        if not ch.pending:
            return ch.confirmed
        state = ch.cache
        if state is not None and ch.deferred:
            # None if a deferred action would not reduce as it did on
            # confirmed: then the replay below decides, errors included
            state = _catch_up(channel, state, ch.deferred)
            ch.cache = state
            ch.deferred.clear()
        if state is None:
            state = ch.confirmed
            for entry in ch.pending.values():
                state = self._replay(channel, state, entry.action, entry.dispatched_at)
            ch.cache = state
        return state

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
        defer = False
        if not ch.pending:
            cache: SnapshotState | None = self._replay(channel, ch.confirmed, action, dispatched_at)
        elif ch.cache is not None and not ch.deferred:
            cache = self._replay(channel, ch.cache, action, dispatched_at)
        else:
            # stale already (rebuilt on the next read), or behind: then the
            # action goes after the deferred ones, reduced with them on the read
            cache = ch.cache
            defer = cache is not None
        client_seq = self._next_client_seq
        self._next_client_seq += 1
        ch.pending[client_seq] = PendingAction(
            channel=channel, client_seq=client_seq, action=action, dispatched_at=dispatched_at
        )
        ch.footprints.count(action, 1)
        ch.cache = cache
        if defer:
            ch.deferred.append((action, dispatched_at))
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

    def _receive_many(self, envelopes: Sequence[ActionEnvelope], out: list[Received]) -> None:
        """:meth:`receive` of each of ``envelopes`` in order, what each did appended to ``out``.

        Exactly what receiving them one by one does, and raises what
        :meth:`receive` raises for the first it refuses (those before it
        received, their results in ``out``), but for the cost: a run of
        streamed text from others (``chat/delta``, or ``chat/reasoning``, to
        one part of a channel without pending actions) is one reduction, of
        the run's text appended at once.  A text append reads no clock and
        cannot tell one append from several, so the confirmed state is the
        same (the run is received one by one should it ever be otherwise).
        """
        count = len(envelopes)
        at = 0
        while at < count:
            end = self._text_run(envelopes, at)
            if end - at < 2:
                out.append(self.receive(envelopes[at]))
                at += 1
            else:
                self._receive_text_run(envelopes[at:end], out)
                at = end

    def _text_run(self, envelopes: Sequence[ActionEnvelope], at: int) -> int:
        """The end of the run of streamed text that starts at ``envelopes[at]`` (``at + 1``
        when none does): well-typed envelopes from others, new ``serverSeq``\\ s in order,
        of one action class, turn and part, on a tracked channel without pending actions."""
        first = envelopes[at]
        head: Any = first.action
        kind = type(head)
        if kind is not ChatDeltaAction and kind is not ChatReasoningAction:
            return at + 1
        channel = first.channel
        ch = self._channels.get(channel) if type(channel) is str else None
        if ch is None or ch.pending:
            return at + 1
        turn_id = head.turn_id
        part_id = head.part_id
        if type(turn_id) is not str or type(part_id) is not str:
            return at + 1
        client_id = self._client_id
        last = ch.last_seen
        end = at
        count = len(envelopes)
        while end < count:
            envelope = envelopes[end]
            action: Any = envelope.action
            origin = envelope.origin
            seq = envelope.server_seq
            if not (
                type(envelope) is ActionEnvelope
                and type(action) is kind
                and envelope.channel == channel
                and type(envelope.channel) is str
                and type(seq) is int
                and seq > last
                and envelope.rejection_reason is None
                and (
                    origin is None
                    or (
                        type(origin) is ActionOrigin
                        and type(origin.client_id) is str
                        and type(origin.client_seq) is int
                        and origin.client_id != client_id
                    )
                )
                and action.turn_id == turn_id
                and action.part_id == part_id
                and type(action.content) is str
            ):
                break
            last = seq
            end += 1
        return max(end, at + 1)

    def _receive_text_run(self, run: Sequence[ActionEnvelope], out: list[Received]) -> None:
        """Receive a run :meth:`_text_run` found, in one reduction."""
        first: Any = run[0].action
        channel = run[0].channel
        ch = self._channels[channel]
        text = "".join([cast("Any", envelope.action).content for envelope in run])
        whole: ChatDeltaAction | ChatReasoningAction = type(first)(
            turn_id=first.turn_id, part_id=first.part_id, content=text
        )
        confirmed = ch.confirmed
        try:
            # a text append reads no clock and meets no unknown action: should it
            # ever, _unread and _no_unknown stop it, and the run goes one by one
            new = reduce(channel, confirmed, whole, now=_unread, on_unknown=_no_unknown)
        except Exception:
            for envelope in run:
                out.append(self.receive(envelope))
            return
        if new is not confirmed and (ch.cache is not None or ch.deferred):
            ch.stale()  # what a rebase does without pending actions
        ch.confirmed = new
        seq = run[-1].server_seq
        ch.last_seen = seq
        self._last_seen = max(self._last_seen, seq)
        for envelope in run:
            out.append(_foreign(envelope))

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
            # the streaming path
            reading = _Reading(self._reducer_clock)
            action = envelope.action
            confirmed = ch.confirmed
            new = self._reduce(channel, confirmed, action, reading, path)
            if new is not confirmed:
                if ch.pending:
                    self._rebase(ch, action, reading.ms)
                elif ch.cache is not None or ch.deferred:
                    ch.stale()  # what _rebase does without pending actions
            ch.confirmed = new
            ch.last_seen = seq
            return _foreign(envelope)

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
            reading = _Reading(self._reducer_clock)
            new = self._reduce(channel, ch.confirmed, envelope.action, reading, path)
            del orphans[client_seq]
            if new is not ch.confirmed:
                self._rebase(ch, envelope.action, reading.ms)
            ch.confirmed = new
            ch.last_seen = seq
            return Received(kind=ReceiveKind.LATE_ECHO, envelope=envelope, echo_of=orphan)

        if reason is not None:
            del ch.pending[client_seq]
            ch.footprints.count(entry.action, -1)
            ch.stale()
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
        ch.footprints.count(entry.action, -1)
        # The cache is confirmed + head + rest, the head reduced at its
        # dispatched_at (then the deferred actions).  It stays right only if
        # the echo is the head, unchanged, and reduced to the same state: at
        # the same instant, or without reading the clock (a reducer reads it,
        # or not, whatever it returns).  And it is worth keeping only while
        # catching up with the deferred actions costs no more than a replay.
        keep = (
            head == client_seq
            and envelope.action == entry.action
            and (reading.ms is None or reading.ms == entry.dispatched_at)
            and len(ch.deferred) <= len(ch.pending)
            and bool(ch.pending)
        )
        if not keep:
            ch.stale()
        ch.confirmed = new
        ch.last_seen = seq
        return Received(kind=ReceiveKind.ECHO, envelope=envelope, echo_of=entry)

    def _rebase(self, ch: _Channel, action: StateAction, at: int | None) -> None:
        """Rebase the pending actions after a foreign ``action`` changed ``confirmed``.

        ``at`` is the clock reading it was reduced at (``None``: none was
        taken).  When it commutes with every pending action (their
        footprints), the optimistic state is the cached one with ``action``
        applied at ``at``: deferred to the next read, one reduction.  Else,
        and once as many actions are deferred as are pending (a replay would
        cost no more), the next read replays the pending actions.
        """
        if (
            ch.cache is not None
            and self._incremental
            and len(ch.deferred) < len(ch.pending)
            and ch.footprints.admits(_footprint(action))
        ):
            ch.deferred.append((action, at))
        else:
            ch.stale()

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
            ch.stale()
            ch.footprints = _Footprints()
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


# -- rebasing without a replay: footprints -------------------------------------
#
# A foreign action ``f`` applied to ``confirmed`` must end up under the pending
# actions ``p1..pn``: the optimistic state becomes ``pn(..p1(f(C)))``.  When
# ``f`` commutes with every ``pi`` that is ``f(pn(..p1(C)))``, i.e. ``f``
# applied to the optimistic state already computed: one reduction instead of
# n.  The argument (docs/reconciler.md, "Rebasing without a replay"):
#
# A channel state is cut into *locations*: ``(family, key)`` pairs, where a
# family is a field (``title``) or a keyed collection (``part``, keyed by part
# id) and ``key`` ``None`` stands for every key of the family.  An action's
# footprint names what it may change (``writes``) and what the values it
# writes depend on (``reads``, which with ``writes`` is everything it
# *touches*), and must be sound for every state: outside ``writes`` the
# result equals the state, and inside it the result is a function of the
# touched locations alone (and of the action and its clock reading).  Some
# locations are *views*, values computed from others (``blocking``: whether a
# group of parts waits for the user): an action that may change a view lists
# it in ``writes``.  If ``writes(f)`` is disjoint from ``touches(p)`` and
# ``writes(p)`` from ``touches(f)``, then ``p(f(s)) == f(p(s))`` for every
# ``s``: a location ``f`` writes is computed by ``f`` from what ``p`` leaves
# unchanged (locations it does not write, views it does not list), so ``f``
# computes it alike before or after ``p``, and ``p`` leaves it as ``f`` wrote
# it; symmetrically for ``p``; every other location neither changes.
# Footprints depend on the action only (never on a state), so one check
# against the union of the pending actions' footprints covers every ``pi``
# whatever the states in between.
#
# Footprints may over-approximate (more fall-backs to the replay, never a
# wrong state); an action without a rule (an ``UnknownAction``, a part of an
# unknown kind, a footprint that cannot be computed from an ill-typed action)
# has none, and anything it meets falls back to the replay.
#
# Families are named after the fields (wire names) of the channel's state;
# the chat's active turn is cut finer, since streaming into it while the user
# has actions pending is the spec's own example:
#
# * ``turn``: whether there is an active turn, its id, ``startedAt`` and
#   message (every turn-scoped action reads it: no-op unless ``turnId``
#   names the active turn); ``usage``: its usage;
# * ``order``: the sequence of its parts' keys.  A part's key is ``id:<id>``
#   for markdown and reasoning parts and tool calls (one namespace: a delta
#   looks for the first part with that id among all three), ``input:<id>``
#   for input requests, ``none`` for parts no action addresses (content
#   references, system notifications).  Parts are only appended, or changed
#   in place keeping their key, until the turn ends;
# * ``part``/``<key>``: the parts with that key, but for ``text``/``<key>``,
#   the text of those of them that are markdown or reasoning parts (a delta
#   appends there); every action that finds a part by id or tool-call id
#   finds it among the parts with its key;
# * ``blocking``/``<key>``: the view "one of the parts with that key waits for
#   the user" (a blocking tool call, an input request without response).
#   The chat status is recomputed from the active turn through this view
#   only (``reducers._status.needs_input``);
# * ``status.activity``, ``status.read``, ``status.archived``: the bits of a
#   status the reducers change separately (the activity bits, IS_READ,
#   IS_ARCHIVED); every other bit is kept by every action.

_Loc = tuple[str, str | None]
"""A location of a channel state: ``(family, key)``; key ``None`` is the whole family."""


class _Footprint(NamedTuple):
    writes: tuple[_Loc, ...]
    """What the action may change (views included)."""
    reads: tuple[_Loc, ...]
    """What the values it writes depend on, besides ``writes`` (which it may read too)."""


def _whole(*families: str) -> tuple[_Loc, ...]:
    return tuple((family, None) for family in families)


def _fields(*families: str) -> _Footprint:
    """Writes (and reads) these whole families, nothing else."""
    return _Footprint(_whole(*families), ())


_NOTHING: Final = _Footprint((), ())

# The chat's active turn and the status bits, as locations.
_TURN: Final[_Loc] = ("turn", None)
_USAGE: Final[_Loc] = ("usage", None)
_ORDER: Final[_Loc] = ("order", None)
_ANY_BLOCKING: Final[_Loc] = ("blocking", None)
_ACTIVITY_BITS: Final[_Loc] = ("status.activity", None)
_IS_READ_BIT: Final[_Loc] = ("status.read", None)
_MODIFIED_AT: Final[_Loc] = ("modifiedAt", None)
_WHOLE_TURN: Final[tuple[_Loc, ...]] = (
    _TURN,
    _USAGE,
    _ORDER,
    ("part", None),
    ("text", None),
    _ANY_BLOCKING,
)
"""Everything the active turn holds: what starting, ending or truncating a turn replaces."""


def _chat_text(action: ChatDeltaAction | ChatReasoningAction) -> _Footprint:
    # the first part with that key, if a markdown (reasoning) part, gets the text
    key = "id:" + action.part_id
    return _Footprint((("text", key),), (_TURN, ("part", key)))


def _chat_tool_call_update(
    action: ChatToolCallDeltaAction | ChatToolCallContentChangedAction,
) -> _Footprint:
    # streaming stays streaming, running stays running: never blocking, and
    # these two do not recompute the status
    key = "id:" + action.tool_call_id
    return _Footprint((("part", key),), (_TURN,))


def _chat_tool_call_transition(action: Any) -> _Footprint:
    # the six transitions (and both confirmations): the calls with that id
    # change state, possibly to or from a blocking one, and the activity bits
    # are recomputed from the whole turn, whether or not a call matched
    key = "id:" + action.tool_call_id
    return _Footprint(
        (("part", key), ("blocking", key), _ACTIVITY_BITS), (_TURN, _ANY_BLOCKING)
    )


def _chat_tool_call_start(action: ChatToolCallStartAction) -> _Footprint:
    # appends a streaming call, which does not block
    key = "id:" + action.tool_call_id
    return _Footprint((_ORDER, ("part", key)), (_TURN,))


def _chat_response_part(action: ChatResponsePartAction) -> _Footprint | None:
    part = action.part
    kind = type(part)
    writes: tuple[_Loc, ...]
    if kind is MarkdownResponsePart or kind is ReasoningResponsePart:
        key = "id:" + part.id  # type: ignore[union-attr]
        writes = (_ORDER, ("part", key), ("text", key))
    elif kind is ToolCallResponsePart:
        call = part.tool_call  # type: ignore[union-attr]
        if isinstance(call, UnknownToolCallState):
            return None  # its id is a raw JSON value
        key = "id:" + call.tool_call_id
        writes = (_ORDER, ("part", key))
        if isinstance(call, _BLOCKING_CALLS):
            writes += (("blocking", key),)
    elif kind is InputRequestResponsePart:
        key = "input:" + part.request.id  # type: ignore[union-attr]
        writes = (_ORDER, ("part", key))
        if part.response is None:  # type: ignore[union-attr]
            writes += (("blocking", key),)
    elif kind is ResourceReponsePart or kind is SystemNotificationResponsePart:
        writes = (_ORDER, ("part", "none"))
    else:
        return None  # an unknown kind: its raw id might be anything
    return _Footprint(writes, (_TURN,))


def _chat_turn_started(action: ChatTurnStartedAction) -> _Footprint:
    # a fresh turn: the activity is in-progress whatever was there, IS_READ
    # cleared, and the consumed queued (or steering) message removed
    writes = (*_WHOLE_TURN, _ACTIVITY_BITS, _IS_READ_BIT, _MODIFIED_AT)
    if action.queued_message_id:
        writes += _whole("steeringMessage", "queuedMessages")
    return _Footprint(writes, ())


_CHAT_TURN_END: Final = _Footprint(
    (*_WHOLE_TURN, ("turns", None), _MODIFIED_AT, _ACTIVITY_BITS), ()
)
"""Archives the whole active turn into ``turns``; the activity becomes idle or error."""

_CHAT_TRUNCATED: Final = _Footprint(
    (*_WHOLE_TURN, ("turns", None), ("turnsNextCursor", None), _MODIFIED_AT, _ACTIVITY_BITS), ()
)


def _chat_input_requested(action: ChatInputRequestedAction) -> _Footprint:
    # upserts an open request into the active turn: blocking, the activity
    # recomputed, IS_READ cleared
    key = "input:" + action.request.id
    return _Footprint(
        (_ORDER, ("part", key), ("blocking", key), _ACTIVITY_BITS, _IS_READ_BIT, _MODIFIED_AT),
        (_TURN, _ANY_BLOCKING),
    )


def _chat_input_answer_changed(action: ChatInputAnswerChangedAction) -> _Footprint:
    # a draft answer of the open request: it stays open, the status is not recomputed
    key = "input:" + action.request_id
    return _Footprint((("part", key), _MODIFIED_AT), (_TURN,))


def _chat_input_completed(action: ChatInputCompletedAction) -> _Footprint:
    key = "input:" + action.request_id
    return _Footprint(
        (("part", key), ("blocking", key), _ACTIVITY_BITS, _MODIFIED_AT), (_TURN, _ANY_BLOCKING)
    )


def _chat_pending_message(
    action: ChatPendingMessageSetAction | ChatPendingMessageRemovedAction,
) -> _Footprint:
    # the reducer treats every kind but steering as queued
    if action.kind == PendingMessageKind.STEERING:
        return _fields("steeringMessage")
    return _fields("queuedMessages")


def _keyed(keys: str, family: str, key: str) -> _Footprint:
    """An upsert or removal by id in a list keyed by id: the entries with that id and the order."""
    return _Footprint(((keys, None), (family, key)), ())


def _files_review_changed(action: ChangesetFilesReviewChangedAction) -> _Footprint:
    # changes ``reviewed`` of the files with the listed ids, in place
    return _Footprint(tuple(("file", file_id) for file_id in action.files), ())


def _changeset_content_changed(action: ChangesetContentChangedAction) -> _Footprint:
    if action.operations is None:  # kept as they are
        return _fields("files.order", "file", "error")
    return _fields("files.order", "file", "error", "operations")


_SESSION_INPUT_NEEDED: Final = _fields("inputNeeded", "status.activity")
"""``inputNeededSet``/``Removed``: the list, and the activity bits derived from it."""

_FootprintRule = _Footprint | Callable[[Any], "_Footprint | None"]

_FOOTPRINTS: Final[Mapping[type, _FootprintRule]] = MappingProxyType(
    {
        # root
        RootAgentsChangedAction: _fields("agents"),
        RootActiveSessionsChangedAction: _fields("activeSessions"),
        RootTerminalsChangedAction: _fields("terminals"),
        RootConfigChangedAction: _fields("config"),
        # session: whole fields, but for the status bits
        SessionReadyAction: _fields("lifecycle"),
        SessionCreationFailedAction: _fields("lifecycle", "creationError"),
        SessionChatAddedAction: _fields("chats"),
        SessionChatRemovedAction: _fields("chats", "defaultChat"),
        SessionChatUpdatedAction: _fields("chats"),
        SessionDefaultChatChangedAction: _fields("defaultChat"),
        SessionTitleChangedAction: _fields("title"),
        SessionServerToolsChangedAction: _fields("serverTools"),
        SessionActiveClientSetAction: _fields("activeClients"),
        SessionActiveClientRemovedAction: _fields("activeClients"),
        SessionWorkingDirectorySetAction: _fields("workingDirectories"),
        SessionWorkingDirectoryRemovedAction: _fields("workingDirectories"),
        SessionInputNeededSetAction: _SESSION_INPUT_NEEDED,
        SessionInputNeededRemovedAction: _SESSION_INPUT_NEEDED,
        SessionCustomizationsChangedAction: _fields("customizations"),
        SessionCustomizationToggledAction: _fields("customizations"),
        SessionCustomizationUpdatedAction: _fields("customizations"),
        SessionCustomizationRemovedAction: _fields("customizations"),
        SessionMcpServerStateChangedAction: _fields("customizations"),
        SessionMcpServerStartRequestedAction: _fields("customizations"),
        SessionMcpServerStopRequestedAction: _fields("customizations"),
        SessionIsReadChangedAction: _fields("status.read"),
        SessionIsArchivedChangedAction: _fields("status.archived"),
        SessionActivityChangedAction: _fields("activity"),
        SessionChangesetsChangedAction: _fields("changesets"),
        SessionConfigChangedAction: _fields("config"),
        SessionMetaChangedAction: _fields("_meta"),
        # chat
        ChatTurnStartedAction: _chat_turn_started,
        ChatDeltaAction: _chat_text,
        ChatReasoningAction: _chat_text,
        ChatResponsePartAction: _chat_response_part,
        ChatToolCallStartAction: _chat_tool_call_start,
        ChatToolCallDeltaAction: _chat_tool_call_update,
        ChatToolCallContentChangedAction: _chat_tool_call_update,
        ChatToolCallReadyAction: _chat_tool_call_transition,
        ChatToolCallApprovedAction: _chat_tool_call_transition,
        ChatToolCallDeniedAction: _chat_tool_call_transition,
        ChatToolCallCompleteAction: _chat_tool_call_transition,
        ChatToolCallResultConfirmedAction: _chat_tool_call_transition,
        ChatToolCallAuthRequiredAction: _chat_tool_call_transition,
        ChatToolCallAuthResolvedAction: _chat_tool_call_transition,
        ChatUsageAction: _Footprint((_USAGE,), (_TURN,)),
        ChatTurnCompleteAction: _CHAT_TURN_END,
        ChatTurnCancelledAction: _CHAT_TURN_END,
        ChatErrorAction: _CHAT_TURN_END,
        ChatTruncatedAction: _CHAT_TRUNCATED,
        ChatTurnsLoadedAction: _fields("turns", "turnsNextCursor"),
        ChatActivityChangedAction: _fields("activity"),
        ChatWorkingDirectorySetAction: _fields("workingDirectories"),
        ChatWorkingDirectoryRemovedAction: _fields("workingDirectories"),
        ChatPendingMessageSetAction: _chat_pending_message,
        ChatPendingMessageRemovedAction: _chat_pending_message,
        ChatQueuedMessagesReorderedAction: _fields("queuedMessages"),
        ChatDraftChangedAction: _fields("draft"),
        ChatInputRequestedAction: _chat_input_requested,
        ChatInputAnswerChangedAction: _chat_input_answer_changed,
        ChatInputCompletedAction: _chat_input_completed,
        # terminal
        TerminalDataAction: _fields("content"),
        TerminalInputAction: _NOTHING,  # forwarded to the pty, never changes the state
        TerminalResizedAction: _fields("cols", "rows"),
        TerminalClaimedAction: _fields("claim"),
        TerminalTitleChangedAction: _fields("title"),
        TerminalCwdChangedAction: _fields("cwd"),
        TerminalExitedAction: _fields("exitCode"),
        TerminalClearedAction: _fields("content"),
        TerminalCommandDetectionAvailableAction: _fields("supportsCommandDetection"),
        TerminalCommandExecutedAction: _fields("content", "supportsCommandDetection"),
        TerminalCommandFinishedAction: _fields("content"),
        # changeset: files keyed by id (``files.order`` is their order)
        ChangesetStatusChangedAction: _fields("status", "error"),
        ChangesetFileSetAction: lambda a: _keyed("files.order", "file", a.file.id),
        ChangesetFileRemovedAction: lambda a: _keyed("files.order", "file", a.file_id),
        ChangesetFilesReviewChangedAction: _files_review_changed,
        ChangesetContentChangedAction: _changeset_content_changed,
        ChangesetOperationsChangedAction: _fields("operations"),
        ChangesetOperationStatusChangedAction: _fields("operations"),
        ChangesetClearedAction: _fields("files.order", "file"),
        # annotations: keyed by id (``annotations.order`` is their order)
        AnnotationsSetAction: lambda a: _keyed("annotations.order", "annotation", a.annotation.id),
        AnnotationsUpdatedAction: lambda a: _Footprint((("annotation", a.annotation_id),), ()),
        AnnotationsRemovedAction: lambda a: _keyed(
            "annotations.order", "annotation", a.annotation_id
        ),
        AnnotationsEntrySetAction: lambda a: _Footprint((("annotation", a.annotation_id),), ()),
        AnnotationsEntryRemovedAction: lambda a: _Footprint(
            (("annotation", a.annotation_id),), ()
        ),
        # resource watch: its one action never changes the state
        ResourceWatchChangedAction: _NOTHING,
    }
)
"""The footprint of each action class, or the function computing it from the action."""


def _footprint(action: StateAction) -> _Footprint | None:
    """``action``'s footprint, or ``None`` when it has none (then nothing commutes with it)."""
    rule = _FOOTPRINTS.get(type(action))
    if rule is None or not callable(rule):
        return rule
    try:
        footprint = rule(action)
    except Exception:
        # only an ill-typed action (an id that is not a string) gets here;
        # having no footprint just means a replay
        return None
    if footprint is None:
        return None
    for _, key in footprint.writes + footprint.reads:
        if key is not None and type(key) is not str:
            return None  # an ill-typed id: a list, a number
    return footprint
