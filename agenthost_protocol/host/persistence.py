"""The host's side of a store: the channel table that loads from it, the journal for it.

:class:`ChannelTable` is where the host keeps channel states.  Without a
store it is a dict.  With one, a channel may be *stored*: known, on disk,
not in memory; reading it loads it (its snapshot, then its log replayed
through the reducers with the clock each record saw, which gives the state
it had, byte for byte).  After a commit the host unloads what nobody
watches, so memory follows the subscribed channels, not the history.

:class:`Journal` is what changed since the last commit: the records a
:class:`~agenthost_protocol.host.store.Batch` is built from, and what
putting the host back needs when the commit fails (each channel's state
before the batch, the data queued for peers, the answers given, the client
actions applied, undo steps for the books).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from .. import types as t
from .. import wire
from ..channels import STATE_TYPES, ChannelKind, channel_kind
from ..errors import ProtocolError
from ..reducers import reduce
from .connection import HostConnection
from .store import ClientRecord, ContentRecord, HostStore, LogRecord, StoreError

__all__ = ["ABSENT", "ChannelTable", "Journal", "decode_state", "decode_summary", "encode_state",
           "is_persisted", "load_channel"]

ABSENT: Final = object()
"""A channel's state before the batch, when it did not exist."""

_EPHEMERAL: Final = frozenset({ChannelKind.TERMINAL, ChannelKind.RESOURCE_WATCH})
"""Channels tied to a live process or watch: gone with it, never stored."""


def is_persisted(uri: str, state: t.SnapshotState | None) -> bool:
    """Whether channel ``uri`` survives a restart: stateful and not tied to a live resource."""
    kind = channel_kind(uri)
    return state is not None and kind is not None and kind not in _EPHEMERAL


def encode_state(state: t.SnapshotState) -> bytes:
    return wire.dumps(state).encode("utf-8")


def decode_state(uri: str, data: bytes) -> t.SnapshotState:
    kind = channel_kind(uri)
    if kind is None or kind not in STATE_TYPES:
        raise StoreError(f"the store holds {uri!r}, which is no stateful channel")
    try:
        state: t.SnapshotState = wire.structure(wire.parse_json(data), STATE_TYPES[kind])
    except (ProtocolError, ValueError) as e:
        raise StoreError(f"the stored state of {uri} is unreadable: {e}") from None
    return state


def decode_summary(data: bytes) -> t.SessionSummary | None:
    """A stored ``SessionSummary``, or ``None`` if it cannot be read (it is then not listed)."""
    try:
        return wire.structure(wire.parse_json(data), t.SessionSummary)
    except (ProtocolError, ValueError):
        return None


def _fixed(ms: int) -> Callable[[], int]:
    return lambda: ms


def load_channel(store: HostStore, uri: str) -> tuple[t.SnapshotState, int, int]:
    """Channel ``uri`` as it was: its snapshot with the log after it applied.

    Returns the state, the bytes of the snapshot and the bytes of the log
    replayed (what decides when to snapshot it again).  A record addressed
    to one client (a rejection, a page of a view) changed no state and is
    skipped, as it was when it went out.
    """
    found = store.load_channel(uri)
    if found is None or found[0].state is None:
        raise StoreError(f"{uri} is not in the store")
    record, tail = found
    assert record.state is not None
    state = decode_state(uri, record.state)
    replayed = 0
    for entry in tail:
        replayed += len(entry.data)
        if entry.only_to is not None:
            continue
        try:
            envelope = wire.parse_envelope(wire.parse_json(entry.data)["params"])
        except (ProtocolError, ValueError, KeyError, TypeError) as e:
            raise StoreError(f"log record {entry.seq} of {uri} is unreadable: {e}") from None
        if envelope.rejection_reason is not None:
            continue
        state = reduce(uri, state, envelope.action, now=_fixed(entry.ms))
    return state, len(record.state), replayed


class ChannelTable:
    """Channel URI to state (``None``: stateless), some of them possibly on disk.

    Reading a stored channel (``get``, ``[]``, ``in``) loads it through
    ``load``; a channel that cannot be loaded is dropped from the table
    (it stays on disk) and reads as absent, after ``on_error`` heard why.
    ``items``/``values`` see the loaded channels only.
    """

    def __init__(
        self,
        load: Callable[[str], t.SnapshotState | None] | None = None,
        on_error: Callable[[str, StoreError], None] | None = None,
    ) -> None:
        self._loaded: dict[str, t.SnapshotState | None] = {}
        self._stored: set[str] = set()
        self._order: dict[str, None] = {}
        self._load = load
        self._on_error = on_error

    def restore(self, uris: tuple[str, ...]) -> None:
        """Know ``uris`` as stored (not loaded), after the ones known already."""
        for uri in uris:
            if uri not in self._order:
                self._order[uri] = None
                self._stored.add(uri)

    def _fetch(self, uri: str) -> bool:
        assert self._load is not None
        try:
            state = self._load(uri)
        except StoreError as e:
            self._stored.discard(uri)
            self._order.pop(uri, None)
            if self._on_error is not None:
                self._on_error(uri, e)
            return False
        self._stored.discard(uri)
        self._loaded[uri] = state
        return True

    def get(self, uri: str, default: t.SnapshotState | None = None) -> t.SnapshotState | None:
        try:
            return self._loaded[uri]
        except KeyError:
            if uri in self._stored and self._fetch(uri):
                return self._loaded[uri]
            return default

    def __getitem__(self, uri: str) -> t.SnapshotState | None:
        try:
            return self._loaded[uri]
        except KeyError:
            if uri in self._stored and self._fetch(uri):
                return self._loaded[uri]
            raise

    def __contains__(self, uri: object) -> bool:
        if uri in self._loaded:
            return True
        return isinstance(uri, str) and uri in self._stored and self._fetch(uri)

    def __setitem__(self, uri: str, state: t.SnapshotState | None) -> None:
        self._loaded[uri] = state
        self._stored.discard(uri)
        self._order[uri] = None

    def __delitem__(self, uri: str) -> None:
        if uri not in self._order:
            raise KeyError(uri)
        self._loaded.pop(uri, None)
        self._stored.discard(uri)
        del self._order[uri]

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def items(self) -> Iterator[tuple[str, t.SnapshotState | None]]:
        """The loaded channels (a stored one is not read for a scan)."""
        return iter(tuple(self._loaded.items()))

    def values(self) -> Iterator[t.SnapshotState | None]:
        return iter(tuple(self._loaded.values()))

    def is_loaded(self, uri: str) -> bool:
        return uri in self._loaded

    def is_stored(self, uri: str) -> bool:
        """Known, on disk and not in memory."""
        return uri in self._stored

    @property
    def loaded_count(self) -> int:
        return len(self._loaded)

    @property
    def loaded(self) -> tuple[str, ...]:
        """The channels in memory, oldest loaded first."""
        return tuple(self._loaded)

    def unload(self, uri: str) -> None:
        """Forget ``uri``'s state in memory; it is read from the store when needed."""
        if uri in self._loaded:
            del self._loaded[uri]
            self._stored.add(uri)


class Journal:
    """What changed since the last commit (see the module's docstring)."""

    def __init__(self, first_seq: int, kept: tuple[LogRecord, ...] = ()) -> None:
        self.first_seq = first_seq
        """The ``serverSeq`` a failed commit puts the host back to."""
        self.kept = kept
        """Envelopes sent although no commit stored them (rejections for a failing
        disk): written with the next commit, never taken back."""
        self.log: list[LogRecord] = []
        self.pre: dict[str, object] = {}
        """Channel to its state before the batch (:data:`ABSENT`: it did not exist)."""
        self.added: dict[str, None] = {}
        self.removed: dict[str, None] = {}
        self.owners: list[tuple[str, str]] = []
        self.new_sessions: dict[str, None] = {}
        self.clients: dict[str, ClientRecord] = {}
        self.forgotten: dict[str, None] = {}
        self.content: list[ContentRecord] = []
        self.shared: list[tuple[str, str]] = []
        self.sent: list[bytes] = []
        """Notifications queued in the batch (envelopes are in ``log``)."""
        self.answers: list[tuple[HostConnection, object, bytes]] = []
        """Successful answers to requests that change state: undone with the batch."""
        self.applied: list[tuple[t.ActionEnvelope, str]] = []
        """Client actions applied (envelope, clientId): refused if the batch fails."""
        self.undo: list[Callable[[], None]] = []

    def __bool__(self) -> bool:
        # not the kept records alone: retrying them on every flush while the disk
        # fails would spin; they go with the next batch of changes
        return bool(self.log or self.pre or self.added or self.removed or self.owners
                    or self.new_sessions or self.clients or self.forgotten or self.content
                    or self.shared)

    def touch(self, uri: str, before: object) -> None:
        """Record ``uri``'s state before its first change in the batch."""
        if uri not in self.pre:
            self.pre[uri] = before
