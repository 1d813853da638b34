"""The host: authoritative channel state, sequencing, fan-out, the protocol commands.

Sans-I/O in the h11 sense: the :class:`Host` owns no socket, thread, timer
or wall clock.  Every input (a message on a :class:`HostConnection`, a call
such as :meth:`Host.dispatch`) runs to completion inside the call, queues
what each connection must be sent (``connection.data_to_send()``) and what
the embedder must handle (:meth:`Host.next_event`), and returns.  The same
inputs in the same order give the same outputs.

Policies the spec leaves open (see ``docs/host.md``):

* **Rejections** consume a ``serverSeq``, are sent only to the connection
  that dispatched the action (if it is subscribed to the channel and its
  version knows the action), are recorded in the replay buffer addressed to
  that ``clientId`` (a reconnect of that client replays them, of nobody else)
  and never reach a reducer.
* An action for a channel that does not exist, or for a stateless channel,
  is ignored: no echo, no ``serverSeq``.
* A valid client action goes to the embedder's ``review`` hook, if any,
  before it is sequenced: applied (possibly rewritten), rejected, or held
  until the embedder settles it (:meth:`Host.accept_held`,
  :meth:`Host.reject_held`).
* A ``subscribe`` with ``view.turns`` gets a chat snapshot trimmed to the
  last turns; the host pages the rest to that client alone (``fetchTurns``
  answered by the core), and sends it the hidden turns before any broadcast
  that would need them.
* Active clients that unsubscribe, reconnect without the session, or stay
  away longer than ``active_client_grace_ms`` are removed when the embedder
  calls :meth:`Host.expire_clients` (the core has no timer).
* A ``clientId`` is held by at most one open connection: a handshake that
  names one held by another connection waits for the embedder's probe of
  the holder (:class:`ClientIdClaimed`, :meth:`Host.settle_claim`).  A
  client sets and removes only its own ``activeClients`` entry.
* Per-connection budgets (:class:`HostLimits`): distinct subscriptions, and
  ``reconnect`` requests per minute.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from typing import Final, Literal, TypeAlias, cast

from attrs import evolve, frozen

from .. import types as t
from .. import wire
from ..channels import ROOT_CHANNEL, STATE_TYPES, ChannelKind, channel_kind
from ..errors import InvalidParams, LocalProtocolError, ProtocolError
from ..methods import METHODS, Direction, MessageKind
from ..reducers import Clock, reduce
from ..types.error_codes import AhpErrorCode, JsonRpcErrorCode
from ..versions import (
    SUPPORTED_PROTOCOL_VERSIONS,
    VersionNegotiationFailed,
    filter_notification_for_version,
    is_action_known_to_version,
    negotiate_protocol_version,
)
from . import sessions
from .connection import Claim, ConnectionState, HostConnection
from .content import CONTENT_SCHEME, ContentStore, StoredContent, by_reference
from .events import (
    ClientActionApplied,
    ClientIdClaimed,
    ClientRequestParams,
    ClientRequestResult,
    ConnectionClosed,
    ErrorReceived,
    Event,
    Initialized,
    Reconnected,
    RequestReceived,
    Responder,
    ResponseReceived,
    ServerRequestResult,
    StoreFailed,
)
from .limits import HostLimits
from .persistence import (
    ABSENT,
    ChannelTable,
    Journal,
    decode_summary,
    encode_state,
    is_persisted,
    load_channel,
)
from .replay import ReplayBuffer, ReplayEntry
from .store import (
    Batch,
    ChannelRecord,
    ClientRecord,
    ContentRecord,
    HostStore,
    LogRecord,
    SessionRecord,
    StoreError,
)
from .validation import ValidationContext, check_chat_source, check_family, validate

__all__ = [
    "HOLD",
    "ClientAction",
    "Hold",
    "Host",
    "ProtocolNotificationParams",
    "Reject",
    "Review",
    "ReviewVerdict",
]

_WRITES: Final = frozenset({
    "createSession", "disposeSession", "createChat", "disposeChat", "createTerminal",
    "disposeTerminal", "fetchTurns", "invokeChangesetOperation",
})
"""Requests whose success answer says the state changed: refused with a failed commit."""

_SNAPSHOT_MIN_BYTES: Final = 64 * 1024
"""A channel is snapshot again when its log since the last one outgrows this and twice
the snapshot: loading replays at most that much, and encoding snapshots costs at most
half what encoding the log did."""


def _json_bytes(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


ProtocolNotificationParams: TypeAlias = (
    t.SessionAddedParams
    | t.SessionRemovedParams
    | t.SessionSummaryChangedParams
    | t.ProgressParams
    | t.AuthRequiredParams
    | t.OtlpExportLogsParams
    | t.OtlpExportTracesParams
    | t.OtlpExportMetricsParams
)
"""The params of the protocol notifications sent with :meth:`Host.notify`."""


def encode_envelope(envelope: t.ActionEnvelope) -> bytes:
    """The ``action`` notification carrying ``envelope``, as sent on the wire.

    A module function so that tests can count encodings.
    """
    msg = t.JsonRpcNotification(method="action", params=envelope)
    return wire.dumps(msg).encode("utf-8")


def encode_notification(method: str, params: ProtocolNotificationParams) -> bytes:
    """A protocol notification as sent on the wire."""
    return wire.dumps(t.JsonRpcNotification(method=method, params=params)).encode("utf-8")


@frozen(kw_only=True)
class ClientAction:
    """A client's ``dispatchAction`` that passed the host's validation, not yet sequenced.

    What the ``review`` hook sees, and what :meth:`Host.accept_held` and
    :meth:`Host.reject_held` take back.
    """

    number: int
    """Unique within the host, in order of arrival: tells apart two held actions
    that look the same (a client that started afresh reuses its ``clientSeq``\\ s)."""
    client_id: str
    protocol_version: str
    """The dispatching connection's negotiated version."""
    channel: str
    client_seq: int
    action: t.StateAction

    @property
    def origin(self) -> t.ActionOrigin:
        """The ``origin`` its envelope carries."""
        return t.ActionOrigin(client_id=self.client_id, client_seq=self.client_seq)


class Hold(Enum):
    """The type of :data:`HOLD`."""

    HOLD = "hold"


HOLD: Final = Hold.HOLD
"""A ``review`` verdict: the embedder keeps the action and settles it later."""


@frozen
class Reject:
    """A ``review`` verdict: reject the action with ``reason`` (its ``rejectionReason``)."""

    reason: str


ReviewVerdict: TypeAlias = t.StateAction | Reject | Literal[Hold.HOLD]
"""What ``review`` returns: the action to apply (the client's, or a rewrite of it),
a :class:`Reject`, or :data:`HOLD`."""

Review: TypeAlias = Callable[[ClientAction], ReviewVerdict]
"""The embedder's hook on valid client actions (``Host(review=...)``)."""

_TOOL_CALLS_IN_FLIGHT = (
    t.ToolCallRunningState,
    t.ToolCallAuthRequiredState,
    t.ToolCallPendingConfirmationState,
)
"""The states of a client tool call a removed client can no longer finish
(and that ``chat/toolCallComplete`` can end)."""


class Host:
    """The authoritative state of every channel and one :class:`HostConnection` per transport.

    ``clock`` returns epoch milliseconds; it stamps chat ``modifiedAt`` in the
    reducers and the timestamps the session helpers write.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        server_info: t.Implementation | None = None,
        supported_versions: Sequence[str] = SUPPORTED_PROTOCOL_VERSIONS,
        root: t.RootState | None = None,
        replay_max_envelopes: int = 10_000,
        replay_max_bytes: int = 16 * 1024 * 1024,
        remembered_clients: int = 1024,
        remembered_clients_max_age_ms: int | None = 24 * 60 * 60 * 1000,
        active_client_grace_ms: int | None = 60_000,
        review: Review | None = None,
        list_page_size: int = 100,
        default_directory: str | None = None,
        completion_trigger_characters: tuple[str, ...] | None = None,
        terminal_command_prefix: str | None = None,
        telemetry: t.TelemetryCapabilities | None = None,
        limits: HostLimits | None = None,
        store: HostStore | None = None,
        loaded_channels: int = 512,
    ) -> None:
        if remembered_clients < 0 or list_page_size < 1 or loaded_channels < 1:
            raise LocalProtocolError(
                "remembered_clients >= 0, list_page_size >= 1 and loaded_channels >= 1 please")
        for name, value in (
            ("remembered_clients_max_age_ms", remembered_clients_max_age_ms),
            ("active_client_grace_ms", active_client_grace_ms),
        ):
            if value is not None and value < 0:
                raise LocalProtocolError(f"{name} must not be negative")
        # fail now, not at the first initialize, on a malformed supported list
        with contextlib.suppress(VersionNegotiationFailed):
            negotiate_protocol_version(["0.0.0"], supported_versions)
        self._clock = clock
        self.server_info = server_info
        self.supported_versions = tuple(supported_versions)
        self._seq = 0
        self._store = store
        self._states = ChannelTable(
            self._load if store is not None else None, self._load_failed
        )
        self._states[ROOT_CHANNEL] = root if root is not None else t.RootState(agents=())
        self._journal: Journal | None = None
        self._loaded_cap = loaded_channels
        self._log_bytes: dict[str, int] = {}
        """Per stored channel: log bytes since its last snapshot (when to take the next)."""
        self._snap_bytes: dict[str, int] = {}
        self._listed: set[str] = set()
        """Stored sessions ``listSessions`` lists (those in memory are asked directly)."""
        self._written: dict[str, t.SessionSummary] = {}
        self._failed_snapshots: list[str] = []
        self._seen: set[str] = set()
        """Stored channels loaded at least once in this run (so not cut by a restart)."""
        self._cut: list[tuple[str, str]] = []
        self._subscribers: dict[str, dict[HostConnection, None]] = {ROOT_CHANNEL: {}}
        self._connections: dict[HostConnection, None] = {}
        self._online: dict[str, int] = {}
        """clientId to its open connections (at most one, but during a claim's settling)."""
        self._events: deque[Event] = deque()
        self._replay = ReplayBuffer(
            max_envelopes=replay_max_envelopes, max_bytes=replay_max_bytes
        )
        self._clients = sessions.ClientBook(remembered_clients, remembered_clients_max_age_ms)
        self._grace = active_client_grace_ms
        self._review = review
        self._held: dict[int, tuple[ClientAction, HostConnection]] = {}
        self._actions = 0
        self._views = sessions.ViewBook()
        self._numbers = 0
        self._default_directory = default_directory
        self._completion_trigger_characters = completion_trigger_characters
        self._terminal_command_prefix = terminal_command_prefix
        self._telemetry = telemetry
        self._sessions = sessions.SessionBook(list_page_size)
        self._limits = limits if limits is not None else HostLimits()
        self.content = ContentStore(max_item_bytes=self._item_limit(self._limits))
        """Large content served by reference (:meth:`by_reference`, ``resourceRead``)."""
        if store is not None:
            self.content.fallback = self._stored_content
            self.content.on_put = self._content_put
            self.content.on_share = self._content_shared
            self._restore(store)

    @property
    def limits(self) -> HostLimits:
        """The per-connection budgets; may be replaced (an I/O layer applies its own)."""
        return self._limits

    @limits.setter
    def limits(self, limits: HostLimits) -> None:
        self._limits = limits
        self.content.max_item_bytes = self._item_limit(limits)

    @staticmethod
    def _item_limit(limits: HostLimits) -> int:
        # a stored item must fit one resourceRead answer, base64 and framing included
        return max(1, (limits.max_message_size - 4096) * 3 // 4)

    def by_reference(self, action: t.StateAction, channel: str | None = None) -> t.StateAction:
        """``action`` with every tool-result block over ``limits.inline_content_bytes``
        stored in :attr:`content` and sent as a ``ToolResultResourceContent``
        reference, which clients read with ``resourceRead`` (the core answers
        it).  For what an agent produced: a chat of any size stays openable.
        ``channel`` (the chat it goes to) owns what is stored: it is forgotten
        with the chat (and the forks that copied it)."""
        return by_reference(action, self.content, self._limits.inline_content_bytes, channel)

    # -- persistence (see store.py and persistence.py) --

    @property
    def store(self) -> HostStore | None:
        """The store the host keeps its channels in (``None``: memory only)."""
        return self._store

    def _restore(self, store: HostStore) -> None:
        restored = store.restore()
        self._seq = restored.server_seq
        # a reconnect from before the restart is replayed from the store's log
        self._replay = ReplayBuffer(max_envelopes=self._replay.max_envelopes,
                                    max_bytes=self._replay.max_bytes, floor=self._seq)
        self._journal = Journal(self._seq)
        self._states.restore(tuple(uri for uri in restored.channels if uri != ROOT_CHANNEL))
        self._sessions.restore(restored.sessions, restored.owners)
        self._listed = set(restored.listed)
        for client in sorted(restored.clients, key=lambda c: c.touched):
            self._clients.remember(client.client_id, client.version, client.touched,
                                   keep=client.keep)
        given = self._root()
        if ROOT_CHANNEL not in restored.channels:
            self._journal.added[ROOT_CHANNEL] = None
            self._journal.touch(ROOT_CHANNEL, ABSENT)
            return
        try:
            stored, snap, replayed = load_channel(store, ROOT_CHANNEL)
        except StoreError as e:
            self._events.append(StoreFailed(message=str(e)))
            self._journal.added[ROOT_CHANNEL] = None
            return
        self._snap_bytes[ROOT_CHANNEL] = snap
        self._log_bytes[ROOT_CHANNEL] = replayed
        if stored == given or not isinstance(stored, t.RootState):
            return
        # the embedder's root wins; said with actions, so that a client
        # replayed across the restart arrives at it too
        self._states[ROOT_CHANNEL] = stored
        if stored.agents != given.agents:
            self.dispatch(ROOT_CHANNEL, t.RootAgentsChangedAction(agents=given.agents))
        if given.active_sessions is not None and stored.active_sessions != given.active_sessions:
            self.dispatch(ROOT_CHANNEL, t.RootActiveSessionsChangedAction(
                active_sessions=given.active_sessions))
        if (stored.terminals or ()) != (given.terminals or ()):
            self.dispatch(ROOT_CHANNEL, t.RootTerminalsChangedAction(
                terminals=given.terminals or ()))
        self._states[ROOT_CHANNEL] = given

    def _load(self, uri: str) -> t.SnapshotState | None:
        assert self._store is not None
        state, snap, replayed = load_channel(self._store, uri)
        self._snap_bytes[uri] = snap
        self._log_bytes[uri] = replayed
        self._subscribers.setdefault(uri, {})
        if uri not in self._seen:
            self._seen.add(uri)
            if isinstance(state, t.ChatState) and state.active_turn is not None:
                # ended at the next commit: not from inside a read of the table
                self._cut.append((uri, state.active_turn.id))
        if isinstance(state, t.SessionState) and self._grace is not None:
            # entries from before a restart: their clients get the grace period to come back
            due = self._clock() + self._grace
            for active in state.active_clients:
                if not self._connected(active.client_id):
                    self._clients.due_at(active.client_id, None, due)
        return state

    def owner_of(self, chat: str) -> str | None:
        """The session that owns ``chat`` (as :meth:`create_session`, :meth:`add_chat` and
        ``createChat`` recorded it), loaded or stored."""
        return self._sessions.owner_of(chat)

    def chats_of(self, session: str) -> tuple[str, ...]:
        """The chats recorded for ``session``, loaded or stored."""
        return self._sessions.chats_of(session)

    def listed_sessions(self) -> tuple[str, ...]:
        """Every session ``listSessions`` lists (ready), stored ones included, oldest first."""
        return tuple(uri for uri in self._sessions.uris() if self._is_listed(uri))

    def _interrupt(self) -> None:
        """End the turns a restart cut: the chats first loaded in this run with a turn
        under way (no agent of this run plays it)."""
        while self._cut:
            chat, turn_id = self._cut.pop()
            state = self._states.get(chat)
            if isinstance(state, t.ChatState) and state.active_turn is not None and (
                state.active_turn.id == turn_id
            ):
                self.dispatch(chat, t.ChatErrorAction(
                    turn_id=turn_id, duration=0, error=t.ErrorInfo(
                        error_type="HostRestarted",
                        message="the host restarted while this turn was under way")))

    def _load_failed(self, uri: str, error: StoreError) -> None:
        self._events.append(StoreFailed(message=f"could not load {uri}: {error}"))

    def _stored_content(self, uri: str) -> StoredContent | None:
        assert self._store is not None
        try:
            record = self._store.content(uri)
        except StoreError as e:
            self._events.append(StoreFailed(message=str(e)))
            return None
        if record is None:
            return None
        return StoredContent(data=record.data, content_type=record.content_type)

    def _content_put(self, uri: str, item: StoredContent, owner: str | None) -> None:
        if self._journal is not None:
            self._journal.content.append(ContentRecord(
                uri=uri, content_type=item.content_type, data=item.data, owner=owner))

    def _content_shared(self, source: str, channel: str) -> None:
        if self._journal is not None:
            self._journal.shared.append((source, channel))

    def _chat_added(self, chat: str, session: str) -> None:
        self._sessions.chat_added(chat, session)
        if self._journal is not None:
            self._journal.owners.append((chat, session))
            self._journal.undo.append(lambda: self._sessions.forget_channel(chat))

    def _is_listed(self, uri: str) -> bool:
        if self._states.is_loaded(uri) or self._store is None:
            return self._is_ready(uri)
        return uri in self._listed

    def _answered(
        self, conn: HostConnection, request_id: t.JsonRpcId, method: str, data: bytes
    ) -> None:
        if self._journal is not None and method in _WRITES:
            self._journal.answers.append((conn, request_id, data))

    @property
    def uncommitted(self) -> bool:
        """Whether changes wait for :meth:`commit` (never without a store)."""
        return bool(self._journal) or bool(self._cut)

    def _before_send(self) -> None:
        if self._journal or self._cut:
            self.commit()

    def commit(self, *, retry: bool = False) -> bool:
        """Write what changed since the last commit to the store; ``True`` when it is stored.

        Without a store, or with nothing to write, does nothing.  Every
        connection's ``data_to_send`` calls it first, so an I/O layer need
        not (``HostServer.flush`` does, before it hands the embedder the
        events of client actions: an agent acts on what is stored).

        When the store fails, the host puts back what the batch changed
        (states, ``serverSeq``, the replay buffer, the books), drops the
        data the batch queued, answers the batch's client actions with
        rejections and its state-changing requests with ``InternalError``,
        and queues :class:`StoreFailed`.  Returns ``False`` then.  Rejections
        that could not be stored either were sent all the same; they are
        written with the next batch of changes, or by ``commit(retry=True)``
        (``serve`` does it when it stops): until then a crash could give
        their ``serverSeq`` again.
        """
        if self._cut:
            self._interrupt()
        journal = self._journal
        store = self._store
        if journal is None or store is None or not (journal or (retry and journal.kept)):
            return True
        batch = self._batch(journal)
        try:
            store.commit(batch)
        except StoreError as e:
            self._failed_snapshots = [record.uri for record in batch.snapshots]
            self._rollback(journal, e)
            return False
        self._journal = Journal(self._seq)
        for record in batch.content:
            self.content.forget(record.uri)  # on disk now; read back from there
        self._listed.update(row.uri for row in batch.sessions if row.summary is not None)
        self._evict()
        return True

    def _batch(self, journal: Journal) -> Batch:
        snapshots = []
        touched = dict.fromkeys([*journal.added, *journal.pre])
        sessions_touched: dict[str, None] = {}
        for uri in touched:
            if uri in journal.removed or not self._states.is_loaded(uri):
                continue
            state = self._states.get(uri)
            if not is_persisted(uri, state):
                continue
            assert state is not None
            if isinstance(state, t.SessionState):
                sessions_touched[uri] = None
            elif isinstance(state, t.ChatState):
                owner = self._sessions.owner_of(uri)
                if owner is not None:
                    sessions_touched[owner] = None
            since = self._log_bytes.get(uri, 0)
            if uri in journal.added or since >= max(_SNAPSHOT_MIN_BYTES,
                                                    2 * self._snap_bytes.get(uri, 0)):
                data = encode_state(state)
                snapshots.append(ChannelRecord(uri=uri, state=data, seq=self._seq))
                self._snap_bytes[uri] = len(data)
                self._log_bytes[uri] = 0
        rows: dict[str, SessionRecord] = {}
        for uri in dict.fromkeys([*journal.new_sessions, *sessions_touched]):
            row = self._sessions.row(uri)
            if row is None or uri in journal.removed or not self._states.is_loaded(uri):
                continue
            summary: bytes | None = None
            if self._is_ready(uri):
                current = self.session_summary(uri)
                if current == self._written.get(uri) and uri not in journal.new_sessions:
                    continue
                self._written[uri] = current
                summary = wire.dumps(current).encode("utf-8")
            elif uri not in journal.new_sessions:
                continue
            rows[uri] = SessionRecord(uri=uri, ordinal=row[0], created_at=row[1],
                                      summary=summary)
        return Batch(
            server_seq=self._seq,
            log=(*journal.kept, *journal.log),
            snapshots=tuple(snapshots),
            removed=tuple(journal.removed),
            sessions=tuple(rows.values()),
            owners=tuple(journal.owners),
            clients=tuple(journal.clients.values()),
            forgotten_clients=tuple(journal.forgotten),
            content=tuple(journal.content),
            shared=tuple(journal.shared),
            log_floor=max(0, self._seq - self._replay.max_envelopes),
        )

    def _rollback(self, journal: Journal, error: StoreError) -> None:
        for uri, before in journal.pre.items():
            if before is ABSENT:
                if uri in self._states.loaded or self._states.is_stored(uri):
                    del self._states[uri]
                for conn in self._subscribers.pop(uri, {}):
                    conn._subscriptions.pop(uri, None)
            else:
                self._states[uri] = cast("t.SnapshotState | None", before)
                self._subscribers.setdefault(uri, {})
        for step in reversed(journal.undo):
            step()
        for record in journal.content:
            self.content.forget(record.uri)
        # what _batch took as written was not: summaries are written again, snapshots
        # taken again soon (the store's older ones and its log still give the state)
        self._written.clear()
        for uri in self._failed_snapshots:
            self._log_bytes[uri] = _SNAPSHOT_MIN_BYTES + 2 * self._snap_bytes.get(uri, 0)
        self._seq = journal.first_seq
        self._replay.truncate(journal.first_seq)
        dropped = {id(record.data) for record in journal.log}
        dropped.update(id(data) for data in journal.sent)
        refused_answers: dict[int, bytes] = {}
        for _conn, request_id, data in journal.answers:
            refused_answers[id(data)] = _json_bytes({
                "jsonrpc": "2.0", "id": request_id,
                "error": {"code": int(JsonRpcErrorCode.INTERNAL_ERROR),
                          "message": f"the host could not store the change: {error}"},
            })
        if dropped or refused_answers:
            for conn in self._connections:
                if conn._outbox:
                    conn._outbox = [refused_answers.get(id(data), data)
                                    for data in conn._outbox if id(data) not in dropped]
        self._events = deque(
            event for event in self._events
            if not (isinstance(event, ClientActionApplied)
                    and event.envelope.server_seq > journal.first_seq)
        )
        self._journal = Journal(self._seq, journal.kept)
        reason = f"the host could not store this action: {error}"
        refused = 0
        for envelope, client_id in journal.applied:
            if envelope.channel in self._states:
                refused += 1
                # the rejection carries what the client sent: its reconciler matches on it
                self._sequence(envelope.channel, envelope.action, envelope.origin, reason,
                               client_id)
        self._events.append(StoreFailed(message=str(error), refused=refused))
        if refused:
            rejections = self._journal
            store = self._store
            assert store is not None
            unstored = (*rejections.kept, *rejections.log)
            try:
                store.commit(Batch(server_seq=self._seq, log=unstored))
            except StoreError:
                # sent all the same, changing no state: a client must not wait
                # forever for an answer the disk cannot keep; they are written
                # with the next commit that succeeds, their serverSeq kept
                self._journal = Journal(self._seq, unstored)
            else:
                self._journal = Journal(self._seq)

    def _evict(self) -> None:
        """Unload the stored channels nobody is subscribed to, oldest loaded first,
        down to ``loaded_channels`` in memory."""
        excess = self._states.loaded_count - self._loaded_cap
        if excess <= 0:
            return
        for uri in self._states.loaded:
            if excess <= 0:
                return
            if uri == ROOT_CHANNEL or self._subscribers.get(uri):
                continue
            state = self._states.get(uri)
            if not is_persisted(uri, state) or (
                isinstance(state, t.SessionState) and state.active_clients
            ):
                continue
            self._states.unload(uri)
            self._subscribers.pop(uri, None)
            for table in (self._log_bytes, self._snap_bytes, self._written):
                table.pop(uri, None)
            excess -= 1

    def _replay_entries(self, last: int) -> list[ReplayEntry] | None:
        """The envelopes after ``last`` for a reconnect, or ``None``: snapshots then."""
        if self._replay.can_replay_after(last):
            return list(self._replay.after(last))
        floor = self._replay.floor
        if self._store is None or last < 0 or last >= floor:
            return None
        if self._seq - last > self._replay.max_envelopes:
            return None  # the same window as in memory: further behind gets snapshots
        try:
            records = self._store.log_after(last, floor - last)
        except StoreError:
            return None
        if [record.seq for record in records] != list(range(last + 1, floor + 1)):
            return None  # compacted away
        if sum(len(record.data) for record in records) > self._replay.max_bytes:
            return None  # the same byte bound as in memory
        entries = []
        for record in records:
            try:
                envelope = wire.parse_envelope(wire.parse_json(record.data)["params"])
            except (ProtocolError, ValueError, KeyError, TypeError):
                return None
            entries.append(ReplayEntry(envelope=envelope, only_to=record.only_to,
                                       size=len(record.data)))
        entries.extend(self._replay.after(floor))
        return entries

    # -- reading the state --

    @property
    def server_seq(self) -> int:
        """The last ``serverSeq`` given out (0 before the first envelope)."""
        return self._seq

    @property
    def replay(self) -> ReplayBuffer:
        """The replay buffer (read it; the host appends)."""
        return self._replay

    @property
    def connections(self) -> tuple[HostConnection, ...]:
        """The connections not closed yet, in connection order."""
        return tuple(self._connections)

    @property
    def channels(self) -> tuple[str, ...]:
        """Every channel the host holds, stateless ones included, in creation order."""
        return tuple(self._states)

    def has_channel(self, uri: str) -> bool:
        return uri in self._states

    def state(self, uri: str) -> t.SnapshotState | None:
        """The state of channel ``uri`` (``None`` for a stateless one); ``KeyError`` if absent."""
        return self._states[uri]

    def remembered_version(self, client_id: str) -> str | None:
        """The version ``client_id`` negotiated, if it is still remembered for ``reconnect``.

        An entry past ``remembered_clients_max_age_ms`` is forgotten on the way.
        """
        return self._clients.version(
            client_id, self._clock(), connected=self._connected(client_id)
        )

    @property
    def held_actions(self) -> tuple[ClientAction, ...]:
        """The client actions ``review`` held and the embedder has not settled, oldest first."""
        return tuple(held for held, _ in self._held.values())

    def now(self) -> int:
        """The injected clock."""
        return self._clock()

    # -- events --

    def next_event(self) -> Event | None:
        """The oldest event not read yet, or ``None``."""
        return self._events.popleft() if self._events else None

    def events(self) -> Iterator[Event]:
        """Drain the events, oldest first (events queued while iterating are included)."""
        while self._events:
            yield self._events.popleft()

    # -- connections --

    def connect(self) -> HostConnection:
        """A new connection, waiting for ``initialize`` (or ``reconnect``)."""
        self._numbers += 1
        conn = HostConnection(self, self._numbers)
        self._connections[conn] = None
        return conn

    def _close(self, conn: HostConnection, reason: str) -> None:
        if conn.state is ConnectionState.CLOSED:
            return
        was_open = conn.state is ConnectionState.OPEN
        conn.state = ConnectionState.CLOSED
        conn._claim = None
        # what a reconnect would resume: such a client is not displaced by throwaways
        keep = bool(conn._subscriptions) or conn._dispatched
        for uri in conn.subscriptions:
            self._subscribers.get(uri, {}).pop(conn, None)
        conn._subscriptions.clear()
        conn._pending.clear()
        self._connections.pop(conn, None)
        client_id, version = conn.client_id, conn.protocol_version
        if was_open and client_id is not None:
            left = self._online.get(client_id, 0) - 1
            if left > 0:
                self._online[client_id] = left
            else:
                self._online.pop(client_id, None)
        if was_open and client_id is not None and version is not None:
            now = self._clock()
            # the reconnect window opens when the client goes away, not when it came
            self._remember(client_id, version, now,
                           keep=keep or self._clients.kept(client_id)
                           or bool(self._active_in(client_id)))
            if (
                self._grace is not None
                and not self._connected(client_id)
                and self._active_in(client_id)
            ):
                self._clients.due_at(client_id, None, now + self._grace)
        self._events.append(ConnectionClosed(connection=conn, reason=reason))
        for claimant in [c for c in self._connections
                         if c._claim is not None and c._claim.holder is conn]:
            # the holder is gone: the claim needs no probe any more
            self._resume_claim(claimant)

    def _connected(self, client_id: str, channel: str | None = None) -> bool:
        """Whether ``client_id`` has an open connection (subscribed to ``channel``, if given)."""
        return any(
            conn.client_id == client_id
            and conn.state is ConnectionState.OPEN
            and (channel is None or channel in conn._subscriptions)
            for conn in self._connections
        )

    def _active_in(self, client_id: str) -> list[str]:
        """The sessions whose ``activeClients`` list ``client_id``."""
        return [
            uri
            for uri, state in self._states.items()
            if isinstance(state, t.SessionState)
            and any(active.client_id == client_id for active in state.active_clients)
        ]

    # -- channels --

    def add_channel(self, uri: str, state: t.SnapshotState | None = None) -> None:
        """Create channel ``uri`` with ``state`` (``None``: a stateless channel such as OTLP)."""
        if uri in self._states:
            raise LocalProtocolError(f"channel {uri!r} already exists")
        kind = channel_kind(uri)
        if state is None:
            if kind is not None and kind.is_stateful:
                raise LocalProtocolError(f"{uri!r} is a {kind.value} channel: give its state")
        elif kind is not None and not isinstance(state, STATE_TYPES.get(kind, ())):
            raise LocalProtocolError(f"{uri!r} does not hold a {type(state).__name__}")
        self._states[uri] = state
        self._subscribers[uri] = {}
        journal = self._journal
        if journal is not None:
            journal.touch(uri, ABSENT)
            journal.added[uri] = None
            journal.removed.pop(uri, None)
            self._seen.add(uri)  # made in this run: a turn under way in it is live

    def remove_channel(self, uri: str) -> None:
        """Remove channel ``uri``; its subscribers stop hearing of it, actions to it are ignored."""
        if uri == ROOT_CHANNEL:
            raise LocalProtocolError("the root channel cannot be removed")
        if uri not in self._states:
            raise LocalProtocolError(f"no channel {uri!r}")
        journal = self._journal
        if journal is not None:
            journal.touch(uri, self._states[uri])
            journal.removed[uri] = None
            journal.added.pop(uri, None)
            entry = self._sessions.export(uri)
            journal.undo.append(lambda: self._sessions.reimport(uri, entry))
            if uri in self._listed:
                self._listed.discard(uri)
                journal.undo.append(lambda: self._listed.add(uri))
            for table in (self._log_bytes, self._snap_bytes, self._written):
                table.pop(uri, None)
        del self._states[uri]
        self.content.release(uri)
        for conn in self._subscribers.pop(uri, {}):
            conn._subscriptions.pop(uri, None)
        self._sessions.forget_channel(uri)
        self._views.drop_chat(uri)

    def snapshot(self, uri: str) -> t.Snapshot | None:
        """A snapshot of stateful channel ``uri`` as of now (``None`` if stateless)."""
        state = self._states[uri]
        if state is None:
            return None
        return t.Snapshot(resource=uri, state=state, from_seq=self._seq)

    # -- sequencing --

    def dispatch(self, channel: str, action: t.StateAction) -> t.ActionEnvelope:
        """Apply a server action to ``channel``, sequence it and send it to the subscribers.

        Atomic: an action that cannot be encoded (a lone surrogate, a NaN or
        an infinity in a value the caller built) raises
        :class:`~agenthost_protocol.errors.LocalProtocolError` naming the
        field, and changes nothing: not the state, not ``serverSeq``, not the
        replay buffer, nothing is sent.
        """
        state = self._states.get(channel)
        if state is None:
            raise LocalProtocolError(f"no stateful channel {channel!r}")
        return self._apply(channel, state, action, None)

    def _apply(
        self,
        channel: str,
        state: t.SnapshotState,
        action: t.StateAction,
        origin: t.ActionOrigin | None,
    ) -> t.ActionEnvelope:
        if isinstance(state, t.ChatState) and isinstance(
            action, t.ChatTurnsLoadedAction | t.ChatTruncatedAction
        ):
            # what _unhide sends first must not go out for an action that then fails
            wire.dumps(action)
            self._unhide(channel, state, action)
        journal = self._journal
        if journal is None:
            new = reduce(channel, state, action, now=self._clock)
            # sequenced (encoded) before the state changes: a failure leaves both as they were
            envelope = self._sequence(channel, action, origin, None, None)
        else:
            # the clock is read once and stored with the record: loading the
            # channel replays it to the same state (modifiedAt included)
            ms = self._clock()
            new = reduce(channel, state, action, now=lambda: ms)
            envelope = self._sequence(channel, action, origin, None, None, ms=ms)
            journal.touch(channel, state)
        self._states[channel] = new
        if isinstance(new, t.ChatState) and not new.turns:
            # nothing is left to hide (``chat/truncated`` without a turn)
            self._views.drop_chat(channel)
        elif isinstance(new, t.TerminalState) and new is not state:
            self._sync_terminal(channel, new)
        return envelope

    def _sequence(
        self,
        channel: str,
        action: t.StateAction,
        origin: t.ActionOrigin | None,
        rejection: str | None,
        only_to: str | None,
        *,
        ms: int = 0,
    ) -> t.ActionEnvelope:
        """Give ``action`` the next ``serverSeq``, record it and send it.

        ``only_to`` addresses the envelope to one client (a rejection, a page
        of a view): its subscribed connections get it, a reconnect of that
        client replays it, nobody else hears of it.
        """
        envelope = t.ActionEnvelope(
            channel=channel,
            action=action,
            server_seq=self._seq + 1,
            origin=origin,
            rejection_reason=rejection,
        )
        data = encode_envelope(envelope)  # may raise: nothing is taken before it succeeds
        if len(data) > self._limits.max_message_size:
            raise LocalProtocolError(
                f"{action.type} on {channel} would be a {len(data)}-byte message, over the "
                f"{self._limits.max_message_size}-byte limit no client could take "
                "(large tool results go by reference: Host.by_reference)"
            )
        self._seq += 1
        self._replay.append(envelope, size=len(data), only_to=only_to)
        journal = self._journal
        if journal is not None:
            journal.log.append(LogRecord(seq=self._seq, channel=channel, data=data,
                                         only_to=only_to, ms=ms))
            self._log_bytes[channel] = self._log_bytes.get(channel, 0) + len(data)
        subscribers = self._subscribers.get(channel, {})
        if only_to is None:
            recipients: tuple[HostConnection, ...] = tuple(subscribers)
        else:
            # a client's reconciler refuses envelopes of channels it does not
            # track, so a dispatcher that is not subscribed learns nothing
            recipients = tuple(conn for conn in subscribers if conn.client_id == only_to)
        known: dict[str | None, bool] = {}
        for conn in recipients:
            version = conn.protocol_version
            if version not in known:
                # filtering never rewrites an envelope, so the one encoding
                # above serves every version that knows the action
                known[version] = version is not None and is_action_known_to_version(
                    action, version
                )
            if known[version]:
                conn._queue(data)
        return envelope

    def notify(self, method: str, params: ProtocolNotificationParams) -> None:
        """Send a protocol notification to the subscribers of ``params.channel``.

        Each connection gets it only if its version knows ``method``; it is
        never replayed.
        """
        info = METHODS.get(method)
        if (
            method == "action"
            or info is None
            or info.kind is not MessageKind.NOTIFICATION
            or Direction.SERVER_TO_CLIENT not in info.directions
        ):
            raise LocalProtocolError(f"{method!r} is not a protocol notification")
        if not isinstance(params, info.params):
            raise LocalProtocolError(f"{method} takes {info.params.__name__}")
        data: bytes | None = None
        known: dict[str | None, bool] = {}
        for conn in tuple(self._subscribers.get(params.channel, ())):
            version = conn.protocol_version
            if version not in known:
                known[version] = version is not None and (
                    filter_notification_for_version(method, params, version) is not None
                )
            if known[version]:
                if data is None:
                    data = encode_notification(method, params)
                    if self._journal is not None:
                        self._journal.sent.append(data)
                conn._queue(data)

    # -- input --

    def _receive(self, conn: HostConnection, data: bytes | str) -> None:
        if conn.state is ConnectionState.CLOSED:
            return
        try:
            msg = wire.parse_message(data, result_method=conn._pending.get)
        except ProtocolError as e:
            response = e.response()
            if response is not None:
                conn._send_json(response)
            elif isinstance(e.request_id, int) and e.request_id in conn._pending:
                # a client's answer to our request that does not decode
                method = conn._pending.pop(e.request_id)
                error = t.JsonRpcError(code=e.code, message=str(e))
                self._events.append(ErrorReceived(
                    connection=conn, request_id=e.request_id, method=method, error=error
                ))
            return
        match msg:
            case t.JsonRpcRequest(id=request_id, method=method, params=params):
                self._request(conn, request_id, method, params)
            case t.JsonRpcNotification(method=method, params=params):
                self._notification(conn, method, params)
            case t.JsonRpcSuccessResponse(id=int() as request_id, result=result):
                asked = conn._pending.pop(request_id, None)
                if asked is not None:
                    # parse_message typed the result by the method we asked
                    typed = cast(ServerRequestResult, result)
                    self._events.append(ResponseReceived(
                        connection=conn, request_id=request_id, method=asked, result=typed
                    ))
            case t.JsonRpcErrorResponse(id=int() as request_id, error=error):
                asked = conn._pending.pop(request_id, None)
                if asked is not None:
                    self._events.append(ErrorReceived(
                        connection=conn, request_id=request_id, method=asked, error=error
                    ))
            case _:
                pass  # an answer to nothing we asked: JSON-RPC never answers a response

    def _request(
        self, conn: HostConnection, request_id: t.JsonRpcId, method: str, params: object
    ) -> None:
        if Direction.CLIENT_TO_SERVER not in METHODS[method].directions:
            conn._send_error(request_id, JsonRpcErrorCode.METHOD_NOT_FOUND,
                             f"{method} is not a client-to-server request", None)
            return
        if method == "ping":
            conn._send_result(request_id, None)
            return
        if conn.state is ConnectionState.AWAITING_INITIALIZE:
            if conn._claim is not None:
                conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                                 "the handshake of this connection is still in progress", None)
            elif isinstance(params, t.InitializeParams | t.ReconnectParams):
                self._handshake(conn, request_id, params)
            else:
                conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                                 "initialize must be the first request", None)
            return
        if isinstance(params, t.InitializeParams):
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                             "the connection is already initialized", None)
        elif isinstance(params, t.ReconnectParams):
            self._reconnect(conn, request_id, params)
        elif isinstance(params, t.SubscribeParams):
            self._subscribe(conn, request_id, params)
        elif isinstance(params, t.FetchTurnsParams) and self._page_view(conn, request_id, params):
            pass  # a page of the turns a view hid: the core's own cursor, the core's answer
        elif isinstance(params, t.ResourceReadParams) and params.uri.startswith(CONTENT_SCHEME):
            stored = self.content.read(params.uri, params.encoding)
            if stored is None:
                conn._send_error(request_id, AhpErrorCode.CONTENT_NOT_FOUND,
                                 f"no content {params.uri!r}", None)
            else:
                conn._send_result(request_id, stored)
        else:
            responder: Responder[ClientRequestResult | None] = Responder(
                conn, request_id, method
            )
            conn._unanswered.add(request_id)
            self._events.append(RequestReceived(
                connection=conn, request_id=request_id, method=method,
                # parse_message typed the params by method; every method left
                # here is one of ClientRequestParams
                params=cast("ClientRequestParams", params),
                responder=responder,
            ))

    def _notification(self, conn: HostConnection, method: str, params: object) -> None:
        # a server-to-client method from a client, or anything before the handshake:
        # notifications are never answered, so they are dropped
        if conn.state is not ConnectionState.OPEN:
            return
        if isinstance(params, t.UnsubscribeParams):
            conn._subscriptions.pop(params.channel, None)
            self._subscribers.get(params.channel, {}).pop(conn, None)
            client_id = conn.client_id
            session = self._states.get(params.channel)
            if client_id is not None and not self._connected(client_id, params.channel):
                self._views.drop(client_id, params.channel)
                if isinstance(session, t.SessionState) and any(
                    active.client_id == client_id for active in session.active_clients
                ):
                    # leaving the session's channel is leaving the session (the
                    # customizations guide); due at once, done by expire_clients
                    self._clients.due_at(client_id, params.channel, self._clock())
        elif isinstance(params, t.DispatchActionParams):
            self._client_action(conn, params)

    # -- the core commands --

    def _handshake(
        self,
        conn: HostConnection,
        request_id: t.JsonRpcId,
        params: t.InitializeParams | t.ReconnectParams,
        *,
        counted: bool = False,
    ) -> None:
        """``initialize`` or a first ``reconnect``, unless another open connection
        holds the clientId: then the embedder probes it first."""
        holder = next(
            (
                other
                for other in self._connections
                if other is not conn
                and other.client_id == params.client_id
                and other.state is ConnectionState.OPEN
            ),
            None,
        )
        if isinstance(params, t.ReconnectParams) and not counted and not self._count_reconnect(
            conn, request_id
        ):
            return
        if holder is not None:
            conn._claim = Claim(request_id=request_id, params=params, holder=holder)
            self._events.append(ClientIdClaimed(
                connection=conn, holder=holder, client_id=params.client_id
            ))
        elif isinstance(params, t.InitializeParams):
            self._initialize(conn, request_id, params)
        else:
            self._reconnect(conn, request_id, params, counted=True)

    def settle_claim(
        self,
        claimant: HostConnection,
        *,
        holder_alive: bool,
        holder: HostConnection | None = None,
    ) -> None:
        """Settle a :class:`ClientIdClaimed`: the embedder probed the holder.

        ``holder`` is the connection that was probed (the event's
        ``holder``): a verdict about another one is stale (that holder
        closed, and the claimant now claims from its successor, a new event)
        and is ignored.  Pass it whenever probes may overlap.

        ``holder_alive``: the claim is refused with ``AlreadyExists``
        (``-32010``) and the holder keeps its clientId, its subscriptions
        and its pending actions.  Otherwise the holder is closed (as if its
        transport were lost: what was queued for it is dropped) and the
        claimant's handshake proceeds.  Nothing happens if the claim was
        settled meanwhile (the holder or the claimant closed).
        """
        claim = claimant._claim
        if claim is None or (holder is not None and claim.holder is not holder):
            return
        if not holder_alive:
            # its close resumes every claim on it, this one included
            claim.holder._outbox.clear()
            self._close(claim.holder, "its clientId was claimed by a new connection "
                        "and it did not answer a ping")
            return
        claimant._claim = None
        claimant._send_error(
            claim.request_id, AhpErrorCode.ALREADY_EXISTS,
            f"clientId {claim.params.client_id!r} is held by another open connection", None,
        )

    def _resume_claim(self, claimant: HostConnection) -> None:
        claim = claimant._claim
        if claim is None or claimant.state is not ConnectionState.AWAITING_INITIALIZE:
            return
        claimant._claim = None
        # a parked reconnect was counted when it came
        self._handshake(claimant, claim.request_id, claim.params, counted=True)

    def _unique_subscriptions(
        self, conn: HostConnection, request_id: t.JsonRpcId, uris: Sequence[str]
    ) -> list[str] | None:
        """``uris`` without duplicates, or ``None`` (answered) when over the budget."""
        unique = list(dict.fromkeys(uris))
        cap = self.limits.max_subscriptions
        if len(unique) > cap:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             f"too many subscriptions: {len(unique)} channels, at most "
                             f"{cap} per connection", None)
            return None
        return unique

    def _initialize(
        self, conn: HostConnection, request_id: t.JsonRpcId, params: t.InitializeParams
    ) -> None:
        try:
            version = negotiate_protocol_version(params.protocol_versions, self.supported_versions)
        except VersionNegotiationFailed as e:
            conn._send_error(request_id, e.code, str(e), e.error_data)
            self._close(conn, "unsupported protocol version")
            return
        wanted = self._unique_subscriptions(conn, request_id, params.initial_subscriptions or ())
        if wanted is None:
            return
        self._open(conn, params.client_id, version)
        # a fresh start: whatever views the client had are gone with its state
        self._views.drop_client(params.client_id)
        snapshots = []
        for uri in wanted:
            if uri in self._states:
                self._subscribe_to(conn, uri)
                snapshot = self.snapshot(uri)
                if snapshot is not None:
                    snapshots.append(snapshot)
        result = t.InitializeResult(
            protocol_version=version,
            server_seq=self._seq,
            server_info=self.server_info,
            snapshots=tuple(snapshots),
            default_directory=self._default_directory,
            completion_trigger_characters=self._completion_trigger_characters,
            terminal_command_prefix=self._terminal_command_prefix,
            telemetry=self._telemetry,
        )
        if not conn._send_result(request_id, result):
            self._close(conn, "the initialize answer was over the message limit")
            return
        self._events.append(Initialized(
            connection=conn, client_id=params.client_id, protocol_version=version
        ))

    def _has_live_views(self, client_id: str) -> bool:
        return client_id in self._online and self._views.has_client(client_id)

    def _open(self, conn: HostConnection, client_id: str, version: str) -> None:
        if conn.state is not ConnectionState.OPEN:
            self._online[client_id] = self._online.get(client_id, 0) + 1
        conn.state = ConnectionState.OPEN
        conn.client_id = client_id
        conn.protocol_version = version
        self._remember(client_id, version, self._clock())
        self._clients.cancel(client_id, None)

    def _remember(
        self, client_id: str, version: str, now: int, *, keep: bool | None = None
    ) -> None:
        evicted = self._clients.remember(client_id, version, now, keep=keep,
                                         live=self._has_live_views)
        for forgotten in evicted:
            # it can only initialize afresh now, which would drop them anyway
            self._views.drop_client(forgotten)
        journal = self._journal
        if journal is not None:
            for gone in evicted:
                journal.clients.pop(gone, None)
                journal.forgotten[gone] = None
            if client_id not in evicted:
                journal.forgotten.pop(client_id, None)
                journal.clients[client_id] = ClientRecord(
                    client_id=client_id, version=version, touched=now,
                    keep=self._clients.kept(client_id))

    def _subscribe_to(self, conn: HostConnection, uri: str) -> None:
        conn._subscriptions[uri] = None
        self._subscribers.setdefault(uri, {})[conn] = None

    def _count_reconnect(self, conn: HostConnection, request_id: t.JsonRpcId) -> bool:
        """Count a ``reconnect`` against the budget; ``False`` (answered) when over it."""
        now = self._clock()
        window = conn._reconnects
        while window and now - window[0] >= 60_000:
            window.popleft()
        if len(window) >= self.limits.max_reconnects_per_minute:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_REQUEST,
                             f"too many reconnects: at most "
                             f"{self.limits.max_reconnects_per_minute} per minute on a "
                             "connection", None)
            return False
        window.append(now)
        return True

    def _reconnect(
        self,
        conn: HostConnection,
        request_id: t.JsonRpcId,
        params: t.ReconnectParams,
        *,
        counted: bool = False,
    ) -> None:
        if conn.state is ConnectionState.OPEN and params.client_id != conn.client_id:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             "clientId differs from this connection's", None)
            return
        if not counted and not self._count_reconnect(conn, request_id):
            return
        now = self._clock()
        wanted = self._unique_subscriptions(conn, request_id, params.subscriptions)
        if wanted is None:
            return
        if conn.state is ConnectionState.OPEN:
            version = conn.protocol_version
        else:
            version = self._clients.version(
                params.client_id, self._clock(), connected=self._connected(params.client_id)
            )
        if version is None:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             f"unknown clientId {params.client_id!r}: send initialize", None)
            return
        self._open(conn, params.client_id, version)
        for uri in conn.subscriptions:
            self._subscribers.get(uri, {}).pop(conn, None)
        conn._subscriptions.clear()
        live = [uri for uri in wanted if uri in self._states]
        last = params.last_seen_server_seq
        result: t.ReconnectReplayResult | t.ReconnectSnapshotResult
        entries = self._replay_entries(last)
        replayed = entries is not None
        if entries is not None:
            for uri in live:
                self._subscribe_to(conn, uri)
            actions = tuple(
                entry.envelope
                for entry in entries
                if entry.envelope.channel in conn._subscriptions
                and entry.only_to in (None, params.client_id)
                and is_action_known_to_version(entry.envelope.action, version)
            )
            missing = tuple(uri for uri in wanted if uri not in self._states)
            result = t.ReconnectReplayResult(actions=actions, missing=missing)
            # the client keeps its trimmed chats (and gets the pages sent meanwhile)
            self._views.drop_client(params.client_id, keep=conn._subscriptions.__contains__)
        else:
            self._views.drop_client(params.client_id)
            snapshots = []
            for uri in live:
                snapshot = self.snapshot(uri)
                if snapshot is not None:
                    # a stateless channel gets no snapshot: the client drops it
                    # and subscribes again from the live edge
                    self._subscribe_to(conn, uri)
                    snapshots.append(snapshot)
            result = t.ReconnectSnapshotResult(snapshots=tuple(snapshots))
        if not conn._send_result(request_id, result):
            self._close(conn, "the reconnect answer was over the message limit")
            return
        listed = set(wanted)
        for session in self._active_in(params.client_id):
            if session not in listed:
                # back, but not in this session: it left it (the customizations guide)
                self._clients.due_at(params.client_id, session, now)
        self._events.append(Reconnected(
            connection=conn, client_id=params.client_id, protocol_version=version,
            replayed=replayed,
        ))

    def _subscribe(
        self, conn: HostConnection, request_id: t.JsonRpcId, params: t.SubscribeParams
    ) -> None:
        uri = params.channel
        if uri not in self._states:
            conn._send_error(request_id, AhpErrorCode.NOT_FOUND, f"no channel {uri!r}", None)
            return
        cap = self.limits.max_subscriptions
        if uri not in conn._subscriptions and len(conn._subscriptions) >= cap:
            conn._send_error(request_id, JsonRpcErrorCode.INVALID_PARAMS,
                             f"too many subscriptions: at most {cap} per connection", None)
            return
        snapshot = self.snapshot(uri)
        client_id = conn.client_id
        if client_id is not None:
            self._views.drop(client_id, uri)
            if snapshot is not None and params.view is not None:
                snapshot = self._trimmed(client_id, snapshot, params.view)
        if conn._send_result(request_id, t.SubscribeResult(snapshot=snapshot)):
            self._subscribe_to(conn, uri)
        elif client_id is not None:
            self._views.drop(client_id, uri)

    def _trimmed(self, client_id: str, snapshot: t.Snapshot, view: t.SubscribeView) -> t.Snapshot:
        """``snapshot`` of a chat cut to the last ``view.turns`` turns, the cut recorded.

        The spec's view is advisory: other channels, and chats no longer than
        asked, are snapshotted whole.
        """
        state, keep = snapshot.state, view.turns
        if not isinstance(state, t.ChatState) or keep is None or not 0 <= keep < len(state.turns):
            return snapshot
        hidden = len(state.turns) - keep
        recorded = self._views.set(
            client_id, snapshot.resource, hidden=hidden, page=max(keep, 1)
        )
        trimmed = evolve(state, turns=state.turns[hidden:], turns_next_cursor=recorded.cursor)
        return evolve(snapshot, state=trimmed)

    def _page_view(
        self, conn: HostConnection, request_id: t.JsonRpcId, params: t.FetchTurnsParams
    ) -> bool:
        """Answer a ``fetchTurns`` of turns a view hid from this client; ``False`` if not one."""
        client_id = conn.client_id
        view = None if client_id is None else self._views.get(client_id, params.channel)
        state = self._states.get(params.channel)
        if (
            client_id is None
            or view is None
            or params.cursor not in (None, view.cursor)
            or not isinstance(state, t.ChatState)
        ):
            return False
        try:
            self._send_hidden(params.channel, state, client_id, view,
                              min(view.page, view.hidden))
        except LocalProtocolError as e:
            conn._send_error(request_id, JsonRpcErrorCode.INTERNAL_ERROR, str(e), None)
            return True
        conn._send_result(request_id, t.FetchTurnsResult())
        return True

    def _send_hidden(
        self, chat: str, state: t.ChatState, client_id: str, view: sessions.View, count: int
    ) -> None:
        """Send ``client_id`` the ``count`` newest of the turns its view hides, as its own
        ``chat/turnsLoaded``: the host's state has them already, so it is not reduced.

        Pages too large for one message are sent in smaller ones; a single turn
        too large raises :class:`LocalProtocolError` (nothing sent)."""
        while count > 1:
            turns = state.turns[view.hidden - count : view.hidden]
            probe = t.ChatTurnsLoadedAction(turns=turns, turns_next_cursor=None)
            if len(wire.dumps(probe)) < self._limits.max_message_size - 4096:
                break
            count //= 2
        left = view.hidden - count
        turns = state.turns[left : view.hidden]
        if left:
            cursor: str | None = self._views.set(
                client_id, chat, hidden=left, page=view.page
            ).cursor
        else:
            self._views.drop(client_id, chat)
            cursor = state.turns_next_cursor
        loaded = t.ChatTurnsLoadedAction(turns=turns, turns_next_cursor=cursor)
        self._sequence(chat, loaded, None, None, client_id)

    def _unhide(
        self,
        chat: str,
        state: t.ChatState,
        action: t.ChatTurnsLoadedAction | t.ChatTruncatedAction,
    ) -> None:
        """Before ``action`` goes to everyone, give each trimmed client the turns it needs.

        ``chat/turnsLoaded`` prepends to the turns a client holds, and
        ``chat/truncated`` of a turn the client does not hold would do nothing
        there: either would leave its state apart from the host's.
        """
        for client_id, view in self._views.of_chat(chat):
            if isinstance(action, t.ChatTruncatedAction) and not any(
                turn.id == action.turn_id for turn in state.turns[: view.hidden]
            ):
                continue
            left: sessions.View | None = view
            while left is not None:  # in pages when all of them would not fit one message
                self._send_hidden(chat, state, client_id, left, left.hidden)
                left = self._views.get(client_id, chat)

    def _client_action(self, conn: HostConnection, params: t.DispatchActionParams) -> None:
        state = self._states.get(params.channel)
        if state is None or conn.client_id is None or conn.protocol_version is None:
            return
        conn._dispatched = True
        self._actions += 1
        pending = ClientAction(
            number=self._actions,
            client_id=conn.client_id,
            protocol_version=conn.protocol_version,
            channel=params.channel,
            client_seq=params.client_seq,
            action=params.action,
        )
        self._settle(conn, pending, state, None, review=True)

    def _settle(
        self,
        conn: HostConnection,
        pending: ClientAction,
        state: t.SnapshotState,
        rewrite: t.StateAction | None,
        *,
        review: bool,
    ) -> t.ActionEnvelope | None:
        """Validate ``pending`` against ``state``, ask ``review`` if asked to, then reject,
        hold or apply it (as ``rewrite``, if given).  ``None``: held."""
        channel = pending.channel
        session = self._session_of(channel, state)
        ctx = ValidationContext(
            client_id=pending.client_id,
            version=pending.protocol_version,
            session=session,
            capabilities=self._capabilities(session),
        )
        reason = validate(channel, state, pending.action, ctx)
        action = pending.action if rewrite is None else rewrite
        if reason is None and review and self._review is not None:
            verdict = self._review(pending)
            current = self._states.get(channel)
            if current is None:
                return None  # the hook removed the channel: ignored, as for any gone channel
            # read again: the hook may have dispatched on this channel meanwhile
            state = current
            if verdict is HOLD:
                self._held[pending.number] = (pending, conn)
                return None
            if isinstance(verdict, Reject):
                reason = verdict.reason
            else:
                action = verdict
        if reason is not None:
            # the rejection carries what the client sent: its reconciler matches on it
            return self._sequence(channel, pending.action, pending.origin, reason,
                                  pending.client_id)
        if action is not pending.action and check_family(channel, state, action) is not None:
            raise LocalProtocolError(f"{action.type} is not an action of {channel!r}")
        envelope = self._apply(channel, state, action, pending.origin)
        if self._journal is not None:
            self._journal.applied.append((envelope, pending.client_id))
        # the embedder's agent reacts to client actions (a turn started, a
        # tool call confirmed) after they are applied, in sequence order
        self._events.append(ClientActionApplied(connection=conn, envelope=envelope))
        return envelope

    def accept_held(
        self, held: ClientAction, action: t.StateAction | None = None
    ) -> t.ActionEnvelope | None:
        """Settle an action ``review`` held: apply it (or ``action``, a rewrite of it).

        The host's rules run again first, on the state as it is now: if they
        reject the client's action, the returned envelope is its rejection.
        Returns ``None`` when the channel is gone meanwhile (ignored, no
        echo).  Raises ``LocalProtocolError`` for an action not held (or
        already settled) and for a rewrite of another channel's family.
        """
        state = self._states.get(held.channel)
        if state is not None and action is not None and check_family(
            held.channel, state, action
        ) is not None:
            raise LocalProtocolError(f"{action.type} is not an action of {held.channel!r}")
        conn = self._take_held(held)
        if state is None:
            return None
        return self._settle(conn, held, state, action, review=False)

    def reject_held(self, held: ClientAction, reason: str) -> t.ActionEnvelope | None:
        """Settle an action ``review`` held by rejecting it with ``reason``.

        The rejection goes to that client's connections subscribed to the
        channel, now or (replayed) at its reconnect.  ``None`` when the
        channel is gone; ``LocalProtocolError`` for an action not held.
        """
        self._take_held(held)
        if self._states.get(held.channel) is None:
            return None
        return self._sequence(held.channel, held.action, held.origin, reason, held.client_id)

    def _take_held(self, held: ClientAction) -> HostConnection:
        entry = self._held.get(held.number)
        if entry is None or entry[0] != held:
            raise LocalProtocolError(f"action #{held.number} is not held (or already settled)")
        del self._held[held.number]
        return entry[1]

    def _session_of(self, uri: str, state: t.SnapshotState) -> t.SessionState | None:
        if isinstance(state, t.SessionState):
            return state
        if not isinstance(state, t.ChatState):
            return None
        owner = self._sessions.owner_of(uri)
        if owner is None:
            # a chat the helpers did not create: find the session listing it
            for candidate in self._states.values():
                if isinstance(candidate, t.SessionState) and any(
                    chat.resource == uri for chat in candidate.chats
                ):
                    return candidate
            return None
        found = self._states.get(owner)
        return found if isinstance(found, t.SessionState) else None

    def _capabilities(self, session: t.SessionState | None) -> t.AgentCapabilities | None:
        root = self._states[ROOT_CHANNEL]
        if session is None or not isinstance(root, t.RootState):
            return None
        for agent in root.agents:
            if agent.provider == session.provider:
                return agent.capabilities
        return None

    # -- session and chat bookkeeping (see sessions.py) --

    def create_session(
        self,
        uri: str,
        *,
        provider: str,
        title: str = "",
        working_directories: tuple[str, ...] | None = None,
        config: t.SessionConfigState | None = None,
    ) -> t.SessionState:
        """Add session ``uri`` in lifecycle ``creating`` (answer ``createSession`` after this)."""
        state = sessions.new_session(provider, title, working_directories, config)
        self.add_channel(uri, state)
        self._sessions.created(uri, wire_time(self._clock()))
        if self._journal is not None:
            self._journal.new_sessions[uri] = None
            self._journal.undo.append(lambda: self._sessions.forget_channel(uri))
        return state

    def ready_session(
        self, uri: str, *, default_chat: str, chat_title: str = ""
    ) -> t.SessionSummary:
        """Give session ``uri`` its default chat, make it ``ready`` and announce it.

        Creates the chat channel, dispatches ``session/chatAdded``,
        ``session/defaultChatChanged`` and ``session/ready``, then sends
        ``root/sessionAdded`` to the root's subscribers.  Returns the summary.
        """
        self._session_state(uri)
        now = wire_time(self._clock())
        chat = sessions.new_chat(default_chat, chat_title, now)
        self.add_channel(default_chat, chat)
        self._chat_added(default_chat, uri)
        self.dispatch(uri, t.SessionChatAddedAction(summary=sessions.chat_summary(chat)))
        self.dispatch(uri, t.SessionDefaultChatChangedAction(default_chat=default_chat))
        self.dispatch(uri, t.SessionReadyAction())
        summary = self.session_summary(uri)
        added = t.SessionAddedParams(channel=ROOT_CHANNEL, summary=summary)
        self.notify("root/sessionAdded", added)
        return summary

    def fail_session(self, uri: str, error: t.ErrorInfo) -> t.ActionEnvelope:
        """Dispatch ``session/creationFailed`` on session ``uri``."""
        self._session_state(uri)
        return self.dispatch(uri, t.SessionCreationFailedAction(error=error))

    def add_chat(self, session: str, chat: str, *, title: str = "") -> t.ChatState:
        """Add chat ``chat`` to ``session``: its channel and ``session/chatAdded``."""
        self._session_state(session)
        state = sessions.new_chat(chat, title, wire_time(self._clock()))
        self.add_channel(chat, state)
        self._chat_added(chat, session)
        self.dispatch(session, t.SessionChatAddedAction(summary=sessions.chat_summary(state)))
        return state

    def answer_create_chat(self, event: RequestReceived) -> t.ChatState | None:
        """Answer a ``createChat`` request: check it, create the chat, ``session/chatAdded``.

        Errors: ``SessionNotFound`` (-32001) for an unknown session,
        ``AlreadyExists`` (-32010) for a taken URI, ``InvalidParams`` for a URI
        that is not a chat's or a source or working directories that
        :func:`~agenthost_protocol.host.validation.check_chat_source` refuses.
        A fork copies the source's turns up to the named one and its working
        directories; a side chat records its origin.  Returns the new chat's
        state, or ``None`` when the request was refused; starting a turn for
        ``initialMessage`` is the agent's business.

        The spec has the host load older turns before a source names a turn
        outside the loaded window; the core cannot read the embedder's
        storage, so while :meth:`older_turns_to_load` names a cursor for this
        request this raises ``LocalProtocolError``: load that page
        (``chat/turnsLoaded`` with :meth:`dispatch`), then call again.
        """
        params = event.params
        if not isinstance(params, t.CreateChatParams):
            raise LocalProtocolError(f"{event.method} is not createChat")
        session = self._states.get(params.channel)
        if not isinstance(session, t.SessionState):
            event.responder.error(AhpErrorCode.SESSION_NOT_FOUND, f"no session {params.channel!r}")
            return None
        if params.chat in self._states:
            event.responder.error(AhpErrorCode.ALREADY_EXISTS, f"{params.chat!r} exists")
            return None
        if channel_kind(params.chat) is not ChannelKind.CHAT:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "not a chat URI")
            return None
        chats = {chat.resource: chat for chat in self._chat_states(session)}
        source = params.source
        needed = self.older_turns_to_load(event)
        if needed is not None:
            raise LocalProtocolError(
                f"load the turns of {needed[0]!r} before cursor {needed[1]!r} first "
                "(chat/turnsLoaded), then answer createChat"
            )
        reason = check_chat_source(
            session, params.chat, source, chats, self._capabilities(session),
            working_directories=params.working_directories,
        )
        if reason is not None:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, reason)
            return None
        state = sessions.new_chat(params.chat, "", wire_time(self._clock()))
        if isinstance(source, t.ForkChatSource):
            origin = chats[source.chat]
            kept = [turn.id for turn in origin.turns].index(source.turn_id) + 1
            state = evolve(
                state,
                origin=t.ForkChatOrigin(chat=source.chat, turn_id=source.turn_id),
                turns=origin.turns[:kept],
                working_directories=origin.working_directories,
            )
        else:
            if isinstance(source, t.SideChatSource):
                state = evolve(state, origin=t.SideChatOrigin(
                    chat=source.chat, turn_id=source.turn_id, selection=source.selection
                ))
            state = evolve(state, working_directories=params.working_directories)
        self.add_channel(params.chat, state)
        if isinstance(source, t.ForkChatSource):
            self.content.share(source.chat, params.chat)  # the copied turns reference it
        self._chat_added(params.chat, params.channel)
        added = t.SessionChatAddedAction(summary=sessions.chat_summary(state))
        self.dispatch(params.channel, added)
        event.responder.respond(None)
        return state

    def dispose_session(self, uri: str) -> None:
        """Remove session ``uri``, its chats and annotations channel.

        Then sends ``root/sessionRemoved`` to the root's subscribers.
        """
        state = self._session_state(uri)
        for chat in [c.resource for c in state.chats] + list(self._sessions.chats_of(uri)):
            if chat in self._states:
                self.remove_channel(chat)
        annotations = uri + "/annotations"
        if annotations in self._states:
            self.remove_channel(annotations)
        self.remove_channel(uri)
        removed = t.SessionRemovedParams(channel=ROOT_CHANNEL, session=uri)
        self.notify("root/sessionRemoved", removed)

    def session_summary(self, uri: str) -> t.SessionSummary:
        """The ``SessionSummary`` of session ``uri`` from its current state."""
        state = self._session_state(uri)
        created = self._sessions.created_at(uri) or wire_time(self._clock())
        return sessions.summary_of(uri, state, created, self._chat_states(state))

    def mirror_chat(self, session: str, chat: str) -> t.ActionEnvelope | None:
        """Bring ``session``'s catalogue entry for ``chat`` up to the chat's state.

        A chat's summary fields (title, status, ``modifiedAt`` ...) live in
        the chat and again in its session's ``chats``; the reducers keep
        them apart, so after changing a chat the agent side calls this.
        Dispatches ``session/chatUpdated`` with what differs and returns its
        envelope, or ``None`` when nothing differs (or either is unknown).
        """
        chat_state = self._states.get(chat)
        session_state = self._states.get(session)
        if not isinstance(chat_state, t.ChatState) or not isinstance(
            session_state, t.SessionState
        ):
            return None
        entry = next((c for c in session_state.chats if c.resource == chat), None)
        changes = None if entry is None else sessions.chat_summary_changes(entry, chat_state)
        if changes is None:
            return None
        return self.dispatch(session, t.SessionChatUpdatedAction(chat=chat, changes=changes))

    def announce_summary(self, session: str, since: t.SessionSummary) -> t.SessionSummary:
        """Send ``root/sessionSummaryChanged`` with what changed in ``session``'s
        summary since ``since`` (nothing when nothing did); returns the current
        summary, the ``since`` of the next call."""
        summary = self.session_summary(session)
        changes = sessions.session_summary_changes(since, summary)
        if changes is None:
            return since
        self.notify("root/sessionSummaryChanged", t.SessionSummaryChangedParams(
            channel=ROOT_CHANNEL, session=session, changes=changes))
        return summary

    def list_sessions(self, params: t.ListSessionsParams) -> t.ListSessionsResult:
        """One page of the ready sessions made by :meth:`create_session`, oldest first.

        Sessions still ``creating`` (or whose creation failed) are not listed:
        they have not been announced with ``root/sessionAdded`` either.
        Raises :class:`~agenthost_protocol.errors.InvalidParams` for an
        unknown cursor or a ``limit`` below 1.
        """
        uris, next_cursor = self._sessions.page(params.cursor, params.limit, self._is_listed)
        stored: dict[str, bytes] = {}
        unloaded = [uri for uri in uris if not self._states.is_loaded(uri)]
        if unloaded and self._store is not None:
            # a page of sessions nobody has open is read from the store, not loaded
            try:
                stored = self._store.summaries(unloaded)
            except StoreError as e:
                self._events.append(StoreFailed(message=str(e), refused=0))
        items = []
        for uri in uris:
            if self._states.is_loaded(uri):
                items.append(self.session_summary(uri))
            elif uri in stored:
                summary = decode_summary(stored[uri])
                if summary is not None:
                    items.append(summary)
        return t.ListSessionsResult(items=tuple(items), next_cursor=next_cursor)

    def answer_list_sessions(self, event: RequestReceived) -> None:
        """Answer a ``listSessions`` request with :meth:`list_sessions` (or its error)."""
        if not isinstance(event.params, t.ListSessionsParams):
            raise LocalProtocolError(f"{event.method} is not listSessions")
        try:
            result = self.list_sessions(event.params)
        except InvalidParams as e:
            event.responder.error(e.code, str(e))
            return
        event.responder.respond(result)

    def fetch_turns(
        self,
        event: RequestReceived,
        turns: tuple[t.Turn, ...],
        next_cursor: str | None = None,
    ) -> None:
        """Answer ``fetchTurns``: dispatch ``chat/turnsLoaded`` with ``turns``, then ``{}``
        (nothing is dispatched when there is nothing to load and nothing was).

        A ``cursor`` that is not the chat's ``turnsNextCursor`` is answered
        with ``InvalidParams`` and nothing is dispatched; so is a chat that
        does not exist (``NotFound``).
        """
        params = event.params
        if not isinstance(params, t.FetchTurnsParams):
            raise LocalProtocolError(f"{event.method} is not fetchTurns")
        state = self._states.get(params.channel)
        if not isinstance(state, t.ChatState):
            event.responder.error(AhpErrorCode.NOT_FOUND, f"no chat {params.channel!r}")
            return
        if params.cursor is not None and params.cursor != state.turns_next_cursor:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "unknown cursor")
            return
        if turns or next_cursor is not None or state.turns_next_cursor is not None:
            # with every turn loaded already, a chat/turnsLoaded of nothing is a no-op:
            # not worth a serverSeq
            self.dispatch(
                params.channel, t.ChatTurnsLoadedAction(turns=turns, turns_next_cursor=next_cursor)
            )
        event.responder.respond(t.FetchTurnsResult())

    def older_turns_cursor(self, chat: str, turn_id: str | None = None) -> str | None:
        """The ``turnsNextCursor`` to load from before an operation on ``turn_id`` of ``chat``.

        ``None`` when nothing needs loading: ``turn_id`` is loaded (or active),
        or the chat has no older turns.  Without ``turn_id``: whenever older
        turns remain (what a fork, which copies the whole history, needs).
        The spec has the host load them eagerly before a fork, a side-chat
        source or a truncation names a turn outside the loaded window; only
        the embedder can read them (then :meth:`dispatch` ``chat/turnsLoaded``).
        Raises ``LocalProtocolError`` if ``chat`` is not a chat.
        """
        state = self._states.get(chat)
        if not isinstance(state, t.ChatState):
            raise LocalProtocolError(f"no chat {chat!r}")
        cursor = state.turns_next_cursor
        if cursor is None or turn_id is None:
            return cursor
        if any(turn.id == turn_id for turn in state.turns) or (
            state.active_turn is not None and state.active_turn.id == turn_id
        ):
            return None
        return cursor

    def older_turns_to_load(self, event: RequestReceived) -> tuple[str, str] | None:
        """``(chat, cursor)`` to load before answering ``event``, or ``None``.

        For ``createChat``: a fork needs its source's whole history (the
        copy would silently lack the unloaded turns), a side chat its source
        turn.  Other requests need nothing.
        """
        params = event.params
        if not isinstance(params, t.CreateChatParams) or params.source is None:
            return None
        source = params.source
        if not isinstance(self._states.get(source.chat), t.ChatState):
            return None  # answer_create_chat refuses an unknown source
        turn = None if isinstance(source, t.ForkChatSource) else source.turn_id
        cursor = self.older_turns_cursor(source.chat, turn)
        return None if cursor is None else (source.chat, cursor)

    # -- chats and terminals --

    def dispose_chat(self, uri: str) -> None:
        """Remove chat ``uri`` and its channel; ``session/chatRemoved`` on its session."""
        state = self._states.get(uri)
        if not isinstance(state, t.ChatState):
            raise LocalProtocolError(f"no chat {uri!r}")
        # the helpers' record first; a chat added by hand is found in a catalogue
        owner = self._sessions.owner_of(uri) or next(
            (
                session
                for session, candidate in self._states.items()
                if isinstance(candidate, t.SessionState)
                and any(chat.resource == uri for chat in candidate.chats)
            ),
            None,
        )
        self.remove_channel(uri)
        if isinstance(self._states.get(owner or ""), t.SessionState):
            assert owner is not None
            self.dispatch(owner, t.SessionChatRemovedAction(chat=uri))

    def answer_dispose_chat(self, event: RequestReceived) -> bool:
        """Answer ``disposeChat``: :meth:`dispose_chat`, or ``NotFound`` (-32008).

        Returns whether the chat was disposed (stopping its agent is the embedder's).
        """
        params = event.params
        if not isinstance(params, t.DisposeChatParams):
            raise LocalProtocolError(f"{event.method} is not disposeChat")
        if not isinstance(self._states.get(params.channel), t.ChatState):
            event.responder.error(AhpErrorCode.NOT_FOUND, f"no chat {params.channel!r}")
            return False
        self.dispose_chat(params.channel)
        event.responder.respond(None)
        return True

    def create_terminal(
        self,
        uri: str,
        *,
        claim: t.TerminalClaim,
        title: str = "",
        cwd: str | None = None,
        cols: int | None = None,
        rows: int | None = None,
    ) -> t.TerminalState:
        """Add terminal ``uri`` with no output yet and list it in the root's ``terminals``.

        The root's subscribers get ``root/terminalsChanged``; from then on the
        host keeps the catalogue entry in step with the terminal's title,
        claim and exit code.  Starting the pty is the embedder's business.
        """
        state = sessions.new_terminal(claim, title, cwd, cols, rows)
        self.add_channel(uri, state)
        root = self._root()
        listed = tuple(info for info in root.terminals or () if info.resource != uri)
        entry = sessions.terminal_info(uri, state)
        self.dispatch(ROOT_CHANNEL, t.RootTerminalsChangedAction(terminals=(*listed, entry)))
        return state

    def dispose_terminal(self, uri: str) -> None:
        """Remove terminal ``uri`` and its catalogue entry (``root/terminalsChanged``)."""
        if not isinstance(self._states.get(uri), t.TerminalState):
            raise LocalProtocolError(f"no terminal {uri!r}")
        self.remove_channel(uri)
        root = self._root()
        listed = tuple(info for info in root.terminals or () if info.resource != uri)
        if listed != (root.terminals or ()):
            self.dispatch(ROOT_CHANNEL, t.RootTerminalsChangedAction(terminals=listed))

    def answer_create_terminal(self, event: RequestReceived) -> t.TerminalState | None:
        """Answer ``createTerminal``: check it, :meth:`create_terminal`, answer ``null``.

        Errors: ``AlreadyExists`` (-32010) for a URI in use, ``InvalidParams``
        for a URI that is not a terminal's, a client claim naming another
        client, or a claim of an unknown kind; ``SessionNotFound`` (-32001)
        for a session claim of an unknown session.  Returns the terminal's
        state (start its pty from it), or ``None`` when refused.
        """
        params = event.params
        if not isinstance(params, t.CreateTerminalParams):
            raise LocalProtocolError(f"{event.method} is not createTerminal")
        uri, claim = params.channel, params.claim
        if uri in self._states:
            event.responder.error(AhpErrorCode.ALREADY_EXISTS, f"{uri!r} exists")
            return None
        if channel_kind(uri) is not ChannelKind.TERMINAL:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "not a terminal URI")
            return None
        if isinstance(claim, t.TerminalClientClaim):
            if claim.client_id != event.connection.client_id:
                event.responder.error(
                    JsonRpcErrorCode.INVALID_PARAMS, "a client claims terminals for itself only"
                )
                return None
        elif isinstance(claim, t.TerminalSessionClaim):
            if not isinstance(self._states.get(claim.session), t.SessionState):
                event.responder.error(
                    AhpErrorCode.SESSION_NOT_FOUND, f"no session {claim.session!r}"
                )
                return None
        else:
            event.responder.error(JsonRpcErrorCode.INVALID_PARAMS, "unknown claim kind")
            return None
        state = self.create_terminal(
            uri, claim=claim, title=params.name or "", cwd=params.cwd,
            cols=params.cols, rows=params.rows,
        )
        event.responder.respond(None)
        return state

    def answer_dispose_terminal(self, event: RequestReceived) -> bool:
        """Answer ``disposeTerminal``: :meth:`dispose_terminal`, or ``NotFound`` (-32008).

        Returns whether it was disposed (killing the pty is the embedder's).
        """
        params = event.params
        if not isinstance(params, t.DisposeTerminalParams):
            raise LocalProtocolError(f"{event.method} is not disposeTerminal")
        if not isinstance(self._states.get(params.channel), t.TerminalState):
            event.responder.error(AhpErrorCode.NOT_FOUND, f"no terminal {params.channel!r}")
            return False
        self.dispose_terminal(params.channel)
        event.responder.respond(None)
        return True

    def _root(self) -> t.RootState:
        root = self._states[ROOT_CHANNEL]
        assert isinstance(root, t.RootState)  # add_channel never replaces the root
        return root

    def _sync_terminal(self, uri: str, state: t.TerminalState) -> None:
        """Keep the root catalogue entry of terminal ``uri`` in step with its state."""
        root = self._root()
        listed = root.terminals or ()
        entry = sessions.terminal_info(uri, state)
        index = next((i for i, info in enumerate(listed) if info.resource == uri), None)
        if index is None or listed[index] == entry:
            return
        terminals = (*listed[:index], entry, *listed[index + 1 :])
        self.dispatch(ROOT_CHANNEL, t.RootTerminalsChangedAction(terminals=terminals))

    # -- active clients and remembered clients --

    def remove_active_client(
        self, session: str, client_id: str, *, message: str = "the client left the session"
    ) -> tuple[t.ActionEnvelope, ...]:
        """Remove ``client_id`` from session ``session``'s active clients, and what was its.

        In this order: its unfinished client tool calls in the session's chats
        end with ``chat/toolCallComplete`` (``success: false``, ``message``),
        the session's ``inputNeeded`` entries asking it to execute a tool go
        (``session/inputNeededRemoved``), the customizations it contributed go
        (``session/customizationRemoved``), then ``session/activeClientRemoved``.
        Returns the envelopes, so the embedder's agent learns of the failed
        calls.  Raises ``LocalProtocolError`` if ``session`` is not a session.
        """
        state = self._session_state(session)
        out: list[t.ActionEnvelope] = []
        chats = dict.fromkeys([c.resource for c in state.chats]
                              + list(self._sessions.chats_of(session)))
        for chat in chats:
            chat_state = self._states.get(chat)
            turn = chat_state.active_turn if isinstance(chat_state, t.ChatState) else None
            if turn is None:
                continue
            for part in turn.response_parts:
                call = part.tool_call if isinstance(part, t.ToolCallResponsePart) else None
                contributor = getattr(call, "contributor", None)
                if (
                    isinstance(call, _TOOL_CALLS_IN_FLIGHT)
                    and isinstance(contributor, t.ToolCallClientContributor)
                    and contributor.client_id == client_id
                ):
                    result = t.ToolCallResult(success=False, past_tense_message=message)
                    out.append(self.dispatch(chat, t.ChatToolCallCompleteAction(
                        turn_id=turn.id, tool_call_id=call.tool_call_id, result=result,
                    )))
        for request in self._session_state(session).input_needed or ():
            if (
                isinstance(request, t.SessionToolClientExecutionRequest)
                and request.client_id == client_id
            ):
                out.append(self.dispatch(
                    session, t.SessionInputNeededRemovedAction(id=request.id)
                ))
        for customization in self._session_state(session).customizations or ():
            if getattr(customization, "client_id", None) == client_id:
                out.append(self.dispatch(session, t.SessionCustomizationRemovedAction(
                    id=getattr(customization, "id", ""),
                )))
        out.append(self.dispatch(session, t.SessionActiveClientRemovedAction(client_id=client_id)))
        return tuple(out)

    def expire_clients(self) -> tuple[t.ActionEnvelope, ...]:
        """Do what is due by the clock: the core has no timer, so call this on yours.

        * An active client (in a session's ``activeClients``) is removed with
          :meth:`remove_active_client` when it unsubscribed from the session,
          reconnected without it, or has had no open connection for
          ``active_client_grace_ms`` (the spec's grace period; ``None``: never
          for that reason).  Each condition is checked again now, so a client
          that came back in time stays.
        * Remembered clients idle for longer than
          ``remembered_clients_max_age_ms`` are forgotten (with their views).

        Returns the envelopes dispatched.  :meth:`next_deadline` says when
        there will next be something to do.
        """
        now = self._clock()
        out: list[t.ActionEnvelope] = []
        for client_id, session in self._clients.take_due(now):
            targets = self._active_in(client_id)
            if session is not None:
                targets = [uri for uri in targets if uri == session]
            for uri in targets:
                if not self._connected(client_id, uri if session is not None else None):
                    out.extend(self.remove_active_client(uri, client_id))
        for client_id in self._clients.prune(now, self._connected):
            self._views.drop_client(client_id)
        return tuple(out)

    def next_deadline(self) -> int | None:
        """The earliest epoch ms at which :meth:`expire_clients` may have work, or ``None``."""
        times = [x for x in (self._clients.next_due(), self._clients.oldest_expiry())
                 if x is not None]
        return min(times, default=None)

    def _is_ready(self, uri: str) -> bool:
        state = self._states.get(uri)
        return isinstance(state, t.SessionState) and state.lifecycle == t.SessionLifecycle.READY

    def _session_state(self, uri: str) -> t.SessionState:
        state = self._states.get(uri)
        if not isinstance(state, t.SessionState):
            raise LocalProtocolError(f"no session {uri!r}")
        return state

    def _chat_states(self, session: t.SessionState) -> list[t.ChatState]:
        chats = []
        for summary in session.chats:
            state = self._states.get(summary.resource)
            if isinstance(state, t.ChatState):
                chats.append(state)
        return chats


def wire_time(ms: int) -> str:
    """Epoch milliseconds as the spec's ISO timestamps."""
    return sessions.iso(ms)
