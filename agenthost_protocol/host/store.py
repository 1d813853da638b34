"""What a host keeps across restarts: the store interface and an in-memory store.

The host core never does I/O.  What must survive a restart it writes down
in a :class:`Batch` as it goes (every sequenced envelope as sent, the
channels added and removed, snapshots of channels whose log grew, the
session book, the clients a ``reconnect`` may resume, stored content), and
:meth:`~agenthost_protocol.host.Host.commit` hands the batch to a
:class:`HostStore` before any of it may be sent: a connection's
``data_to_send`` commits first, so an envelope a client received is always
stored.  One commit per flush, not per envelope, so a stream stays fast.

A store deals in bytes (JSON the host encoded) and plain records only: the
host does all the modelling, and a store is a few tables.  A commit is all
or nothing; when it fails (:class:`StoreError`) the host puts itself back
as it was before the batch (``docs/host.md``, "Persistence").

Reads are lazy: at start the host asks for the little it always needs
(:meth:`HostStore.restore`); a channel's state is read when a client
subscribes to it or an action reaches it (:meth:`HostStore.load_channel`:
its last snapshot and the log after it), ``listSessions`` pages stored
summaries, a ``reconnect`` from before the restart is replayed from the
stored log.

:class:`MemoryStore` keeps the records in dicts: for tests, and a model of
what a durable store must do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from attrs import evolve, field, frozen

__all__ = [
    "Batch",
    "ChannelRecord",
    "ClientRecord",
    "ContentRecord",
    "HostStore",
    "LogRecord",
    "MemoryStore",
    "Restored",
    "SessionRecord",
    "StoreError",
]


class StoreError(Exception):
    """A store could not be opened, read or written.

    Its message is one line a person can act on ("disk full", "not an
    agenthost-protocol store: ...", "written by a newer version ...").
    """


@frozen(kw_only=True)
class LogRecord:
    """One sequenced envelope, as it went out."""

    seq: int
    channel: str
    data: bytes
    """The ``action`` notification as sent (JSON, UTF-8)."""
    only_to: str | None = None
    """The ``clientId`` a rejection (or a page of a view) was addressed to."""
    ms: int = 0
    """The clock the reducers read when it was applied: replaying it gives the same state."""


@frozen(kw_only=True)
class ChannelRecord:
    """A channel's state as of ``seq`` (after every envelope up to it)."""

    uri: str
    state: bytes | None
    """JSON of the state; ``None`` for a stateless channel."""
    seq: int


@frozen(kw_only=True)
class SessionRecord:
    """A session the host's session book knows (``listSessions`` order and stamps)."""

    uri: str
    ordinal: int
    created_at: str
    summary: bytes | None = None
    """JSON of its ``SessionSummary`` once it is listed (``ready``); ``None`` before."""
    owner: str | None = None
    """The owner key of the principal that created it (``Host(authorize=...)``);
    ``None``: nobody's (created without a principal, or stored before owners were kept)."""


@frozen(kw_only=True)
class ClientRecord:
    """A client a ``reconnect`` may resume: the version it negotiated."""

    client_id: str
    version: str
    touched: int
    """Epoch ms it was last seen (its reconnect window runs from here)."""
    keep: bool = False


@frozen(kw_only=True)
class ContentRecord:
    """A stored blob (``agenthost-content:`` URI) and the channel that owns it."""

    uri: str
    content_type: str
    data: bytes
    owner: str | None = None
    owners: tuple[str, ...] = ()
    """Every channel that references it now (as :meth:`HostStore.content` reads it;
    ignored in a :class:`Batch`, which says them with ``owner`` and ``shared``)."""


@frozen(kw_only=True)
class Batch:
    """What one commit writes, in this order: everything or nothing."""

    server_seq: int
    """The last ``serverSeq`` given out: a restarted host continues after it."""
    log: tuple[LogRecord, ...] = ()
    snapshots: tuple[ChannelRecord, ...] = ()
    """Channels added, or whose log since their last snapshot grew long (upserts)."""
    removed: tuple[str, ...] = ()
    """Channels gone: their snapshot, session row, owner rows (as chat or as session),
    content owners.
    Their log records stay until compacted (a ``reconnect`` may replay them)."""
    sessions: tuple[SessionRecord, ...] = ()
    """Upserts of session rows (a new session, a summary that changed)."""
    owners: tuple[tuple[str, str], ...] = ()
    """``(chat, session)``: chats the session book gave an owner."""
    clients: tuple[ClientRecord, ...] = ()
    forgotten_clients: tuple[str, ...] = ()
    content: tuple[ContentRecord, ...] = ()
    shared: tuple[tuple[str, str], ...] = ()
    """``(source, channel)``: ``channel`` now owns every blob ``source`` owns (a fork)."""
    log_floor: int = 0
    """Log records at or below it may be dropped once their channel's snapshot covers
    them (or the channel is gone): older than any ``reconnect`` will be replayed."""

    def __bool__(self) -> bool:
        return bool(self.log or self.snapshots or self.removed or self.sessions
                    or self.owners or self.clients or self.forgotten_clients
                    or self.content or self.shared)


@frozen(kw_only=True)
class Restored:
    """What a host reads at start: little, however much is stored."""

    server_seq: int = 0
    channels: tuple[str, ...] = ()
    """Every stored channel, in creation order (their states stay on disk)."""
    sessions: tuple[SessionRecord, ...] = ()
    """In ordinal order, without their summaries (:meth:`HostStore.summaries`)."""
    listed: frozenset[str] = field(factory=frozenset)
    """The sessions that have a summary (listed by ``listSessions``)."""
    owners: tuple[tuple[str, str], ...] = ()
    clients: tuple[ClientRecord, ...] = ()


class HostStore(Protocol):
    """Where a :class:`~agenthost_protocol.host.Host` keeps what must survive it.

    Every method raises :class:`StoreError` (and nothing else) when the
    store cannot do it.  Implementations: :class:`MemoryStore`,
    :class:`agenthost_protocol.sqlite_store.SQLiteStore`.
    """

    def restore(self) -> Restored: ...

    def load_channel(self, uri: str) -> tuple[ChannelRecord, tuple[LogRecord, ...]] | None:
        """Channel ``uri``'s last snapshot and its log records after it, in order."""
        ...

    def log_after(self, seq: int, limit: int) -> tuple[LogRecord, ...]:
        """The log records after ``seq``, oldest first, at most ``limit`` of them;
        a record no longer held leaves a gap (the caller checks)."""
        ...

    def summaries(self, uris: Sequence[str]) -> dict[str, bytes]:
        """The stored summaries of the listed sessions among ``uris``."""
        ...

    def content(self, uri: str) -> ContentRecord | None:
        """A stored blob, or ``None``; its ``owners`` are the channels referencing it."""
        ...

    def commit(self, batch: Batch) -> None:
        """Write ``batch`` atomically and durably (against a crash of the process)."""
        ...

    def close(self) -> None: ...


class MemoryStore:
    """A :class:`HostStore` in dicts: survives a :class:`~agenthost_protocol.host.Host`,
    not the process.  ``fail`` makes the next commits raise (for tests of a
    failing disk)."""

    def __init__(self) -> None:
        self.server_seq = 0
        self.log: dict[int, LogRecord] = {}
        self.channels: dict[str, ChannelRecord] = {}
        self.sessions: dict[str, SessionRecord] = {}
        self.owners: dict[str, str] = {}
        self.clients: dict[str, ClientRecord] = {}
        self.blobs: dict[str, ContentRecord] = {}
        self.blob_owners: dict[str, set[str]] = {}
        self.commits = 0
        self.fail: str | None = None
        """When set, every commit raises ``StoreError(fail)`` and writes nothing."""

    def restore(self) -> Restored:
        return Restored(
            server_seq=self.server_seq,
            channels=tuple(self.channels),
            sessions=tuple(sorted(
                (SessionRecord(uri=r.uri, ordinal=r.ordinal, created_at=r.created_at,
                               owner=r.owner)
                 for r in self.sessions.values()), key=lambda r: r.ordinal)),
            listed=frozenset(uri for uri, r in self.sessions.items() if r.summary is not None),
            owners=tuple(self.owners.items()),
            clients=tuple(self.clients.values()),
        )

    def load_channel(self, uri: str) -> tuple[ChannelRecord, tuple[LogRecord, ...]] | None:
        record = self.channels.get(uri)
        if record is None:
            return None
        tail = tuple(r for seq, r in sorted(self.log.items())
                     if r.channel == uri and seq > record.seq)
        return record, tail

    def log_after(self, seq: int, limit: int) -> tuple[LogRecord, ...]:
        return tuple(r for s, r in sorted(self.log.items()) if s > seq)[:limit]

    def summaries(self, uris: Sequence[str]) -> dict[str, bytes]:
        out = {}
        for uri in uris:
            record = self.sessions.get(uri)
            if record is not None and record.summary is not None:
                out[uri] = record.summary
        return out

    def content(self, uri: str) -> ContentRecord | None:
        record = self.blobs.get(uri)
        if record is None:
            return None
        return evolve(record, owners=tuple(sorted(self.blob_owners.get(uri, ()))))

    def commit(self, batch: Batch) -> None:
        if self.fail is not None:
            raise StoreError(self.fail)
        self.commits += 1
        self.server_seq = max(self.server_seq, batch.server_seq)
        for record in batch.log:
            self.log[record.seq] = record
        for snapshot in batch.snapshots:
            self.channels[snapshot.uri] = snapshot
        for chat, owner in batch.owners:
            self.owners[chat] = owner
        for row in batch.sessions:
            self.sessions[row.uri] = row
        for client in batch.clients:
            self.clients[client.client_id] = client
        for client_id in batch.forgotten_clients:
            self.clients.pop(client_id, None)
        for blob in batch.content:
            self.blobs.setdefault(blob.uri, blob)
            if blob.owner is not None:
                self.blob_owners.setdefault(blob.uri, set()).add(blob.owner)
        for source, channel in batch.shared:
            for owners in self.blob_owners.values():
                if source in owners:
                    owners.add(channel)
        self._remove(batch.removed)
        self._compact(batch.log_floor)

    def _remove(self, uris: Iterable[str]) -> None:
        for uri in uris:
            self.channels.pop(uri, None)
            self.sessions.pop(uri, None)
            self.owners.pop(uri, None)
            for chat in [c for c, session in self.owners.items() if session == uri]:
                del self.owners[chat]
            for blob, owners in list(self.blob_owners.items()):
                owners.discard(uri)
                if not owners:
                    del self.blob_owners[blob]
                    self.blobs.pop(blob, None)

    def _compact(self, floor: int) -> None:
        for seq in [s for s in self.log if s <= floor]:
            record = self.log[seq]
            snapshot = self.channels.get(record.channel)
            if snapshot is None or snapshot.seq >= seq:
                del self.log[seq]

    def close(self) -> None:
        pass
