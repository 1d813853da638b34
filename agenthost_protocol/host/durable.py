"""The durable half of the host: what it does with a store.

:class:`Durable` is a base of :class:`~agenthost_protocol.host.Host`: the
restore at construction, lazy loading and unloading of stored channels, the
commit of each batch (and taking a batch back when its commit fails), the
replay of a ``reconnect`` from the stored log, ``listSessions`` of stored
sessions.  What it writes and reads is described in ``store.py``; the
channel table and the journal are in ``persistence.py``; the promise is in
``docs/host.md`` ("Persistence: a store").  Without a store none of it runs
but the few checks that say so.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, cast

from .. import types as t
from .. import wire
from ..channels import ROOT_CHANNEL
from ..errors import ProtocolError
from ..types.error_codes import JsonRpcErrorCode
from . import sessions
from .coalescing import Coalescer
from .connection import HostConnection
from .content import ContentStore, StoredContent
from .events import ClientActionApplied, Event, StoreFailed
from .persistence import ABSENT, ChannelTable, Journal, encode_state, is_persisted, load_channel
from .replay import ReplayBuffer, ReplayEntry
from .store import (
    Batch,
    ChannelRecord,
    ContentRecord,
    HostStore,
    SessionRecord,
    StoreError,
)

__all__ = ["Durable"]

WRITES: Final = frozenset({
    "createSession", "disposeSession", "createChat", "disposeChat", "createTerminal",
    "disposeTerminal", "fetchTurns", "invokeChangesetOperation",
})
"""Requests whose success answer says the state changed: refused with a failed commit."""

SNAPSHOT_MIN_BYTES: Final = 64 * 1024
"""A channel is snapshot again when its log since the last one outgrows this and twice
the snapshot: loading replays at most that much, and encoding snapshots costs at most
half what encoding the log did."""


_SWEEP_EVERY: Final = 64
"""Commits between two looks for idle channels to unload."""


def _json_bytes(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class Durable:
    """The store's side of a host (a base of :class:`~agenthost_protocol.host.Host`,
    which sets these attributes up)."""

    _store: HostStore | None
    _states: ChannelTable
    _journal: Journal | None
    _seq: int
    _replay: ReplayBuffer
    _sessions: sessions.SessionBook
    _clients: sessions.ClientBook
    _listed: set[str]
    _written: dict[str, t.SessionSummary]
    _log_bytes: dict[str, int]
    _snap_bytes: dict[str, int]
    _failed_snapshots: list[str]
    _seen: set[str]
    _cut: list[tuple[str, str]]
    _subscribers: dict[str, dict[HostConnection, None]]
    _connections: dict[HostConnection, None]
    _coalescer: Coalescer
    _events: deque[Event]
    _grace: int | None
    _clock: Callable[[], int]
    _loaded_cap: int
    _unload_after: int
    _used: dict[str, int]
    """Stored channel to when it was last loaded or changed (host clock)."""
    _commits: int
    content: ContentStore
    _replay_base: int = 0
    """The replay buffer's floor when it started (the ``serverSeq`` restored): above it,
    the buffer's floor says what no reconnect can be replayed from any more."""

    if TYPE_CHECKING:
        # the host's own, which this half uses
        def dispatch(self, channel: str, action: t.StateAction) -> t.ActionEnvelope: ...
        def session_summary(self, uri: str) -> t.SessionSummary: ...
        def _root(self) -> t.RootState: ...
        def _connected(self, client_id: str, channel: str | None = None) -> bool: ...
        def _is_ready(self, uri: str) -> bool: ...
        def _sequence(self, channel: str, action: t.StateAction,
                      origin: t.ActionOrigin | None, rejection: str | None,
                      only_to: str | None, *, ms: int = 0) -> t.ActionEnvelope: ...

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
        self._replay_base = self._seq
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
        self._journal.added[ROOT_CHANNEL] = None  # stored as given, what no action says too

    def _load(self, uri: str) -> t.SnapshotState | None:
        assert self._store is not None
        state, snap, replayed = load_channel(self._store, uri)
        self._used[uri] = self._clock()
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

    def _stored_content_owners(self, uri: str) -> tuple[str, ...]:
        """The channels the store says reference content ``uri`` (none: unknown or unowned)."""
        if self._store is None:
            return ()
        try:
            record = self._store.content(uri)
        except StoreError as e:
            self._events.append(StoreFailed(message=str(e)))
            return ()
        if record is None:
            return ()
        return record.owners or ((record.owner,) if record.owner is not None else ())

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
        if self._journal is not None and method in WRITES:
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
        self._coalescer.committed()
        for record in batch.content:
            self.content.forget(record.uri)  # on disk now; read back from there
        self._listed.update(row.uri for row in batch.sessions if row.summary is not None)
        self._evict()
        return True

    def _batch(self, journal: Journal) -> Batch:
        snapshots = []
        # a channel that only logged records addressed to one client (rejections) is
        # snapshot too once its log since the last snapshot is long: else those records,
        # which loading it skips, would stay as its tail, uncompacted (a client sending
        # refused actions would grow the store)
        touched = dict.fromkeys([*journal.added, *journal.pre,
                                 *(record.channel for record in journal.log
                                   if record.only_to is not None)])
        sessions_touched: dict[str, None] = {}
        now = self._clock()
        for uri in touched:
            if uri in journal.removed or not self._states.is_loaded(uri):
                continue
            self._used[uri] = now
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
            if uri in journal.added or since >= max(SNAPSHOT_MIN_BYTES,
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
                                      summary=summary, owner=self._sessions.owned_by(uri))
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
            log_floor=self._log_floor(),
        )

    def _log_floor(self) -> int:
        """The highest seq no reconnect will be replayed from the log: the replay window
        by count, and by bytes once the buffer evicted by them in this run (a reconnect
        from before its floor would need more than ``replay_max_bytes``)."""
        floor = self._seq - self._replay.max_envelopes
        if self._replay.floor > self._replay_base:
            floor = max(floor, self._replay.floor)
        return max(0, floor)

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
            self._log_bytes[uri] = SNAPSHOT_MIN_BYTES + 2 * self._snap_bytes.get(uri, 0)
        self._seq = journal.first_seq
        self._replay.truncate(journal.first_seq)
        dropped = {id(record.data) for record in journal.log}
        dropped.update(id(data) for data in journal.sent)
        # merged deltas already queued lose the parts taken back (None: all of them)
        replaced = self._coalescer.rolled_back(dropped)
        for _conn, request_id, data in journal.answers:
            replaced[id(data)] = _json_bytes({
                "jsonrpc": "2.0", "id": request_id,
                "error": {"code": int(JsonRpcErrorCode.INTERNAL_ERROR),
                          "message": f"the host could not store the change: {error}"},
            })
        if dropped or replaced:
            for conn in self._connections:
                if conn._outbox:
                    kept = (replaced.get(id(data), data) if id(data) in replaced else data
                            for data in conn._outbox if id(data) not in dropped)
                    conn._outbox = [data for data in kept if data is not None]
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
        """Unload the stored channels nobody is subscribed to: those idle for
        ``unload_after_ms`` (looked for every ``_SWEEP_EVERY`` commits), and the
        oldest loaded beyond ``loaded_channels``, idle or not."""
        self._commits += 1
        excess = self._states.loaded_count - self._loaded_cap
        sweep = self._commits % _SWEEP_EVERY == 0
        if excess <= 0 and not sweep:
            return
        idle_since = self._clock() - self._unload_after
        for uri in self._states.loaded:
            if excess <= 0 and not sweep:
                return
            if uri == ROOT_CHANNEL or self._subscribers.get(uri):
                continue
            if excess <= 0 and self._used.get(uri, 0) > idle_since:
                continue  # in use (an agent writing to it unwatched): kept while it is
            state = self._states.get(uri)
            if not is_persisted(uri, state) or (
                isinstance(state, t.SessionState) and state.active_clients
            ):
                continue
            self._states.unload(uri)
            self._subscribers.pop(uri, None)
            for table in (self._log_bytes, self._snap_bytes, self._written, self._used):
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
        if sum(len(record.data) for record in records) + self._replay.size_bytes > (
            self._replay.max_bytes
        ):
            return None  # the same byte bound as in memory (what _log_floor relies on)
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
