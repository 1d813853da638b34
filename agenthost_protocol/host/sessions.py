"""Session, chat, client and view bookkeeping for the host.

Pure pieces: new session, chat and terminal states, summaries, and the books
that remember what the channel states do not hold: :class:`SessionBook`
(when a session was created, which session owns a chat, the order in which
``listSessions`` pages them), :class:`ClientBook` (the version each client
negotiated, for ``reconnect``, and when an active client's removal is due)
and :class:`ViewBook` (the chat turns a ``subscribe`` view left out of a
client's snapshot).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, cast

import attrs
from attrs import frozen

from .. import types as t
from ..errors import InvalidParams
from ..reducers._clock import iso_timestamp
from ..types import SessionStatus
from ..types.enums import ACTIVITY_MASK
from .store import SessionRecord

__all__ = [
    "ClientBook",
    "CursorSeal",
    "SessionBook",
    "View",
    "ViewBook",
    "chat_summary",
    "chat_summary_changes",
    "iso",
    "new_chat",
    "new_session",
    "new_terminal",
    "session_summary_changes",
    "summary_of",
    "terminal_info",
]


def iso(ms: int) -> str:
    """``new Date(ms).toISOString()``."""
    return iso_timestamp(ms)


def new_session(
    provider: str,
    title: str,
    working_directories: tuple[str, ...] | None,
    config: t.SessionConfigState | None,
) -> t.SessionState:
    """A session in lifecycle ``creating``, with no chats yet."""
    return t.SessionState(
        provider=provider,
        title=title,
        status=t.SessionStatus.IDLE,
        working_directories=working_directories,
        lifecycle=t.SessionLifecycle.CREATING,
        active_clients=(),
        chats=(),
        config=config,
    )


def new_chat(uri: str, title: str, modified_at: str) -> t.ChatState:
    """An idle chat with no turns."""
    return t.ChatState(
        resource=uri, title=title, status=t.SessionStatus.IDLE, modified_at=modified_at, turns=()
    )


def new_terminal(
    claim: t.TerminalClaim,
    title: str,
    cwd: str | None,
    cols: int | None,
    rows: int | None,
) -> t.TerminalState:
    """A terminal with no output yet."""
    return t.TerminalState(title=title, cwd=cwd, cols=cols, rows=rows, content=(), claim=claim)


def terminal_info(uri: str, state: t.TerminalState) -> t.TerminalInfo:
    """The root catalogue entry of terminal ``uri``."""
    return t.TerminalInfo(
        resource=uri, title=state.title, claim=state.claim, exit_code=state.exit_code
    )


def chat_summary(chat: t.ChatState) -> t.ChatSummary:
    """The catalogue entry of ``chat``."""
    return t.ChatSummary(
        resource=chat.resource,
        title=chat.title,
        status=chat.status,
        activity=chat.activity,
        modified_at=chat.modified_at,
        origin=chat.origin,
        interactivity=chat.interactivity,
        working_directories=chat.working_directories,
    )


_CHAT_SUMMARY_FIELDS: Final = tuple(
    f.name for f in attrs.fields(t.PartialChatSummary) if f.name != "resource"
)
# what identifies a session never changes, so a partial summary never carries it
_SESSION_SUMMARY_FIELDS: Final = tuple(
    f.name
    for f in attrs.fields(t.PartialSessionSummary)
    if f.name not in ("resource", "provider", "created_at")
    and f.name in attrs.fields_dict(t.SessionSummary)
)


def _changed(old: object, new: object, names: tuple[str, ...]) -> dict[str, Any]:
    # a partial summary cannot say "now absent": absent new values are skipped
    return {name: value for name in names
            if (value := getattr(new, name)) is not None and value != getattr(old, name)}


def chat_summary_changes(entry: t.ChatSummary, chat: t.ChatState) -> t.PartialChatSummary | None:
    """What ``session/chatUpdated`` must say so that the catalogue ``entry``
    matches ``chat``'s state, or ``None`` when it already does."""
    changes = _changed(entry, chat_summary(chat), _CHAT_SUMMARY_FIELDS)
    return attrs.evolve(t.PartialChatSummary(), **changes) if changes else None


def session_summary_changes(
    old: t.SessionSummary, new: t.SessionSummary
) -> t.PartialSessionSummary | None:
    """What ``root/sessionSummaryChanged`` must say to turn ``old`` into ``new``,
    or ``None`` when nothing a client sees changed."""
    changes = _changed(old, new, _SESSION_SUMMARY_FIELDS)
    return attrs.evolve(t.PartialSessionSummary(), **changes) if changes else None


def summary_of(
    uri: str, state: t.SessionState, created_at: str, chats: list[t.ChatState]
) -> t.SessionSummary:
    """The ``SessionSummary`` of a session, aggregated over its chats as the spec says.

    ``modifiedAt`` is the latest of its chats'.  The activity bits (and the
    ``activity`` text) come from the default chat, else the most recently
    modified one; ``InputNeeded``, then ``Error``, is promoted if any chat
    (or the session itself) has it, so a list shows a session that waits for
    a confirmation as waiting.  ``IsRead``/``IsArchived`` stay the session's.
    """
    # ISO strings of one precision and format compare as the times they name
    modified = max((chat.modified_at for chat in chats), default=created_at)
    status, activity = state.status, state.activity
    if chats:
        source = next((c for c in chats if c.resource == state.default_chat), None)
        if source is None:
            source = max(chats, key=lambda chat: chat.modified_at)
        bits, activity = int(source.status) & ACTIVITY_MASK, source.activity
        for wanted in (SessionStatus.INPUT_NEEDED, SessionStatus.ERROR):
            if bits == wanted:
                break
            promoted = next((c for c in chats if int(c.status) & ACTIVITY_MASK == wanted), None)
            if promoted is not None:
                bits, activity = int(wanted), promoted.activity
                break
            if wanted is SessionStatus.INPUT_NEEDED and (
                int(state.status) & ACTIVITY_MASK == wanted
            ):
                bits, activity = int(wanted), state.activity
                break
        value = (int(state.status) & ~ACTIVITY_MASK) | bits
        if value != int(status):
            status = SessionStatus(value)
    return t.SessionSummary(
        resource=uri,
        provider=state.provider,
        title=state.title,
        status=status,
        activity=activity,
        project=state.project,
        working_directories=state.working_directories,
        created_at=created_at,
        modified_at=max(modified, created_at),
    )


class SessionBook:
    """What the helpers remember per session, with ``listSessions`` cursors.

    Sessions get an ordinal in creation order; a cursor is the ordinal of
    the last session of the page it ends, so deleting sessions never
    invalidates a cursor, and a cursor this host never issued is unknown.
    """

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self._ordinal = 0
        self._sessions: dict[str, tuple[int, str]] = {}
        self._owner: dict[str, str] = {}
        self._chats: dict[str, dict[str, None]] = {}
        self._owned_by: dict[str, str] = {}
        """session -> the owner key of the principal that created it (when it had one)."""

    def created(self, uri: str, created_at: str, owned_by: str | None = None) -> None:
        self._ordinal += 1
        self._sessions[uri] = (self._ordinal, created_at)
        self._chats[uri] = {}
        if owned_by is not None:
            self._owned_by[uri] = owned_by

    def owned_by(self, session: str) -> str | None:
        """The owner key recorded for ``session`` (``None``: nobody's)."""
        return self._owned_by.get(session)

    def __len__(self) -> int:
        """The sessions known, stored ones included."""
        return len(self._sessions)

    def row(self, uri: str) -> tuple[int, str] | None:
        """Session ``uri``'s ordinal and creation stamp."""
        return self._sessions.get(uri)

    def restore(
        self, rows: Iterable[SessionRecord], owners: Iterable[tuple[str, str]]
    ) -> None:
        """Know the sessions and chat owners a store kept."""
        for row in rows:
            self._sessions[row.uri] = (row.ordinal, row.created_at)
            self._chats.setdefault(row.uri, {})
            if row.owner is not None:
                self._owned_by[row.uri] = row.owner
            self._ordinal = max(self._ordinal, row.ordinal)
        for chat, session in owners:
            self.chat_added(chat, session)

    def export(self, uri: str) -> tuple[object, ...]:
        """What the book holds of ``uri``, for :meth:`reimport` (undoing a forget)."""
        return (self._sessions.get(uri), tuple(self._chats.get(uri, ())),
                uri in self._chats, self._owner.get(uri), self._owned_by.get(uri))

    def reimport(self, uri: str, entry: tuple[object, ...]) -> None:
        row, chats, has_chats, owner, owned_by = entry
        if isinstance(owned_by, str):
            self._owned_by[uri] = owned_by
        if isinstance(row, tuple):
            self._sessions[uri] = row
        if has_chats:
            for chat in cast("tuple[str, ...]", chats):
                self.chat_added(chat, uri)
            self._chats.setdefault(uri, {})
        if isinstance(owner, str):
            self.chat_added(uri, owner)

    def created_at(self, uri: str) -> str | None:
        entry = self._sessions.get(uri)
        return None if entry is None else entry[1]

    def chat_added(self, chat: str, session: str) -> None:
        self._owner[chat] = session
        self._chats.setdefault(session, {})[chat] = None

    def owner_of(self, chat: str) -> str | None:
        return self._owner.get(chat)

    def uris(self) -> tuple[str, ...]:
        """Every session known, in creation order."""
        return tuple(self._sessions)

    def chats_of(self, session: str) -> tuple[str, ...]:
        return tuple(self._chats.get(session, ()))

    def forget_channel(self, uri: str) -> None:
        self._sessions.pop(uri, None)
        self._owned_by.pop(uri, None)
        for chat in self._chats.pop(uri, ()):
            self._owner.pop(chat, None)
        owner = self._owner.pop(uri, None)
        if owner is not None:
            self._chats.get(owner, {}).pop(uri, None)

    def page(
        self,
        cursor: str | None,
        limit: int | None,
        listed: Callable[[str], bool],
        seal: CursorSeal | None = None,
    ) -> tuple[list[str], str | None]:
        """The URIs of one page of the sessions ``listed`` admits, and the next cursor.

        The cursor is ``None`` at the end.  With ``seal`` cursors are opaque
        (:class:`CursorSeal`): they do not say how many sessions the host holds.
        """
        if limit is not None and limit < 1:
            raise InvalidParams("limit must be at least 1", path="$.params.limit")
        size = min(limit or self.page_size, self.page_size)
        after = 0
        if cursor is not None:
            opened = (seal.open(cursor) if seal is not None
                      else int(cursor) if cursor.isascii() and cursor.isdigit() else None)
            if opened is None or opened > self._ordinal:
                raise InvalidParams("unknown cursor", path="$.params.cursor")
            after = opened
        # dict order is creation order, so ordinals ascend
        rest = [(n, uri) for uri, (n, _) in self._sessions.items() if n > after and listed(uri)]
        page = rest[:size]
        next_cursor = None
        if len(rest) > size:
            last = page[-1][0]
            next_cursor = seal.seal(last) if seal is not None else str(last)
        return [uri for _, uri in page], next_cursor


class CursorSeal:
    """``listSessions`` cursors that say nothing of the sessions a principal may not see.

    A cursor is a session's ordinal in creation order, which would tell a
    principal how many sessions were made between two of its own (and a
    forged one, whether an ordinal exists).  Sealed, it is the ordinal
    through a keyed permutation of 64-bit numbers (a four-round Feistel
    network, BLAKE2b as its round function): opaque, stable for the host's
    life, and a forged one opens to a number no session has.
    """

    _MASK: Final = 0xFFFF_FFFF

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _round(self, n: int, half: int) -> int:
        digest = hashlib.blake2b(half.to_bytes(4, "big"), digest_size=4, key=self._key,
                                 salt=n.to_bytes(16, "big"))
        return int.from_bytes(digest.digest(), "big")

    def seal(self, ordinal: int) -> str:
        left, right = ordinal >> 32 & self._MASK, ordinal & self._MASK
        for n in range(4):
            left, right = right, left ^ self._round(n, right)
        return f"{left:08x}{right:08x}"

    def open(self, cursor: str) -> int | None:
        """The ordinal sealed in ``cursor``; ``None`` if it is not a sealed cursor."""
        if len(cursor) != 16 or not all(c in "0123456789abcdef" for c in cursor):
            return None
        left, right = int(cursor[:8], 16), int(cursor[8:], 16)
        for n in reversed(range(4)):
            left, right = right ^ self._round(n, left), left
        return left << 32 | right


class ClientBook:
    """The clients a host remembers, and the active-client removals it owes.

    *Remembered clients*: ``clientId`` to the negotiated version and the
    time it was last touched (a handshake, or the close of one of its
    connections), in two tables, each least recently touched first:

    * *plain* entries, clients that left nothing a ``reconnect`` would
      resume: at most ``capacity``; a new one displaces the oldest plain
      entry, never a kept one, so throwaway handshakes only displace each
      other (or themselves).
    * *kept* entries, clients that left something to resume (``keep``:
      subscriptions, actions, an active-client entry): bounded by time, not
      by other clients' handshakes.  A kept entry is never displaced while
      it is younger than ``kept_min_age_ms``; past that it is displaced only
      when ``kept_capacity`` kept entries exist (the hard cap that bounds
      memory) and a newer kept client needs the room, oldest first.  When
      the cap is full of entries still within ``kept_min_age_ms``, the
      newcomer is remembered as a plain entry instead: whoever makes kept
      entries fast enough to fill the cap delays only later clients, never
      those already remembered.

    With ``max_age_ms``, any entry older than that is forgotten when it is
    looked up or pruned.  ``capacity`` 0 remembers nobody.  A client
    forgotten must ``initialize`` again.

    *Due removals*: ``(clientId, session)`` to the time from which the host
    should remove that client from the session's ``activeClients``
    (``session`` ``None``: from every session it is active in).  The host
    checks the condition again when the time comes, so an entry is only a
    candidate; each entry names a client that was active somewhere when it
    was recorded, which bounds the table by the sessions' own state.
    """

    def __init__(
        self,
        capacity: int,
        max_age_ms: int | None,
        *,
        kept_capacity: int | None = None,
        kept_min_age_ms: int = 0,
    ) -> None:
        self.capacity = capacity
        self.max_age_ms = max_age_ms
        self.kept_capacity = capacity if kept_capacity is None else kept_capacity
        self.kept_min_age_ms = kept_min_age_ms
        self._plain: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._kept: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._due: dict[tuple[str, str | None], int] = {}

    def __len__(self) -> int:
        return len(self._plain) + len(self._kept)

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._plain or client_id in self._kept

    @property
    def kept_count(self) -> int:
        return len(self._kept)

    def remember(
        self,
        client_id: str,
        version: str,
        now: int,
        *,
        keep: bool | None = None,
        live: Callable[[str], bool] | None = None,
    ) -> list[str]:
        """Record (or refresh) ``client_id``'s version as of ``now``.

        ``keep``: whether it has state a reconnect would resume (``None``:
        as recorded before, else no).  ``live``: whether a client holds state
        that forgetting it would take now (a connected client's chat views):
        such entries go last.  Returns the clients evicted to stay within
        the bounds, oldest first.
        """
        if self.capacity == 0:
            return [client_id]
        if keep is None:
            keep = client_id in self._kept
        self._plain.pop(client_id, None)
        self._kept.pop(client_id, None)
        evicted: list[str] = []
        if keep and len(self._kept) >= self.kept_capacity:
            victim = self._kept_victim(now, live)
            if victim is None:
                keep = False
            else:
                del self._kept[victim]
                evicted.append(victim)
        if keep:
            self._kept[client_id] = (version, now)
            return evicted
        self._plain[client_id] = (version, now)
        while len(self._plain) > self.capacity:
            victim = next((other for other in self._plain
                           if not (live is not None and live(other))), None)
            if victim is None:
                victim = next(iter(self._plain))
            del self._plain[victim]
            evicted.append(victim)
        return evicted

    def _kept_victim(self, now: int, live: Callable[[str], bool] | None) -> str | None:
        """The oldest kept entry past ``kept_min_age_ms`` (``None``: all are younger)."""
        for other, (_, touched) in self._kept.items():
            if now - touched < self.kept_min_age_ms:
                # least recently touched first: the rest are younger still (with an
                # embedder's clock that went back, later ones are kept a little longer)
                return None
            if live is None or not live(other):
                return other
        return None

    def kept(self, client_id: str) -> bool:
        """Whether ``client_id`` is remembered with state a reconnect would resume."""
        return client_id in self._kept

    def _expired(self, touched: int, now: int) -> bool:
        return self.max_age_ms is not None and now - touched > self.max_age_ms

    def _entry(self, client_id: str) -> tuple[str, int] | None:
        entry = self._kept.get(client_id)
        return entry if entry is not None else self._plain.get(client_id)

    def version(self, client_id: str, now: int, *, connected: bool = False) -> str | None:
        """The version ``client_id`` negotiated, or ``None`` if unknown or too old.

        An entry too old is forgotten here, unless the client is ``connected``
        (its age then counts from the close of that connection).
        """
        entry = self._entry(client_id)
        if entry is None:
            return None
        if not connected and self._expired(entry[1], now):
            self.forget(client_id)
            return None
        return entry[0]

    def prune(self, now: int, connected: Callable[[str], bool]) -> list[str]:
        """Forget every entry too old whose client is not ``connected``; return their ids."""
        if self.max_age_ms is None:
            return []
        old = [
            client_id
            for table in (self._plain, self._kept)
            for client_id, (_, touched) in table.items()
            if self._expired(touched, now) and not connected(client_id)
        ]
        for client_id in old:
            self.forget(client_id)
        return old

    def forget(self, client_id: str) -> None:
        self._plain.pop(client_id, None)
        self._kept.pop(client_id, None)

    def oldest_expiry(self) -> int | None:
        """When the first entry will be too old (``None`` without an age limit)."""
        if self.max_age_ms is None or not (self._plain or self._kept):
            return None
        # touches need not be monotonic (the clock is the embedder's), so look at all
        touched = min(entry[1] for table in (self._plain, self._kept)
                      for entry in table.values())
        return touched + self.max_age_ms + 1

    # -- active-client removals --

    def due_at(self, client_id: str, session: str | None, when: int) -> None:
        """Make removing ``client_id`` from ``session`` due at ``when`` (the earliest wins)."""
        key = (client_id, session)
        self._due[key] = min(when, self._due.get(key, when))

    def cancel(self, client_id: str, session: str | None) -> None:
        self._due.pop((client_id, session), None)

    def take_due(self, now: int) -> list[tuple[str, str | None]]:
        """The removals due at ``now``, oldest deadline first; they leave the table."""
        ready = sorted(
            ((when, key) for key, when in self._due.items() if when <= now),
            key=lambda item: item[0],
        )
        for _, key in ready:
            del self._due[key]
        return [key for _, key in ready]

    def next_due(self) -> int | None:
        return min(self._due.values(), default=None)


@frozen(kw_only=True)
class View:
    """What a ``subscribe`` view left out of one client's copy of one chat.

    The client holds the host's chat but for its first ``hidden`` completed
    turns; its ``turnsNextCursor`` is ``cursor`` (which only this host
    understands), and ``fetchTurns`` pages ``page`` turns at a time.
    """

    hidden: int
    page: int
    cursor: str


class ViewBook:
    """The views of every ``(clientId, chat)`` whose snapshot was trimmed."""

    def __init__(self) -> None:
        self._views: dict[tuple[str, str], View] = {}
        self._issued = 0

    def __len__(self) -> int:
        return len(self._views)

    def get(self, client_id: str, chat: str) -> View | None:
        return self._views.get((client_id, chat))

    def set(self, client_id: str, chat: str, *, hidden: int, page: int) -> View:
        """Record a view with ``hidden`` turns left out, under a fresh cursor."""
        self._issued += 1
        view = View(hidden=hidden, page=page, cursor=f"view-{self._issued}")
        self._views[(client_id, chat)] = view
        return view

    def drop(self, client_id: str, chat: str) -> None:
        self._views.pop((client_id, chat), None)

    def has_client(self, client_id: str) -> bool:
        return any(key[0] == client_id for key in self._views)

    def of_chat(self, chat: str) -> Iterator[tuple[str, View]]:
        """The clients holding a view of ``chat`` (a copy: the book may change meanwhile)."""
        return iter([(c, v) for (c, uri), v in self._views.items() if uri == chat])

    def drop_client(self, client_id: str, keep: Callable[[str], bool] = lambda _: False) -> None:
        """Drop ``client_id``'s views but those of the chats ``keep`` admits."""
        for key in [k for k in self._views if k[0] == client_id and not keep(k[1])]:
            del self._views[key]

    def drop_chat(self, chat: str) -> None:
        for key in [k for k in self._views if k[1] == chat]:
            del self._views[key]
