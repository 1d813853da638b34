"""A durable :class:`~agenthost_protocol.host.store.HostStore`: one SQLite file.

:class:`SQLiteStore` does what :class:`~agenthost_protocol.host.store.MemoryStore`
does (that class is the model, and the tests hold the two to the same
observable results), on the standard library's :mod:`sqlite3`, so a host
keeps its sessions, channels, log and clients across restarts with no
dependency.

Durability.  The file is in WAL mode with ``synchronous=NORMAL``: once
:meth:`SQLiteStore.commit` returns, the batch is in the write-ahead log in
the operating system's hands, so it survives the process being killed
(``kill -9`` included) and is found again by the next open.  What
``NORMAL`` does not promise is the last commits before a power loss or an
operating system crash (the file stays consistent; it may be a few commits
older).  ``synchronous="FULL"`` promises those too, for an fsync per commit.
A commit is one SQLite transaction: all of a :class:`Batch` or none of it.

Locking.  The store takes SQLite's exclusive lock when it opens and keeps
it until :meth:`SQLiteStore.close`: two hosts writing one file would each
believe their own ``serverSeq``, so a second opener (another process, or a
second :class:`SQLiteStore` in this one) is refused ("... is in use by
another process") rather than waited for.  The lock is the operating
system's, so it goes with the process however the process ends.  (On POSIX
a process loses its locks on a file when it closes *any* descriptor of it:
nothing else in the process should open the store's file while it is open;
a second :class:`SQLiteStore` is refused before it opens it.)

Refusals.  Pointed at the wrong file, the store refuses to open rather
than "repair" it, and leaves it byte for byte as it was: a file that is
not SQLite, another application's SQLite file (its ``application_id`` is
not :data:`APPLICATION_ID`), a corrupt or truncated store, a store written
by a newer version of this library (schema above :data:`SCHEMA_VERSION`).
The checks that decide this read the file's header with plain file I/O
before SQLite ever opens it: SQLite itself may write on open (a journal
mode, a ``-wal`` file).  One case needs SQLite: a file whose ``-wal`` still
holds transactions (its writer was killed before a checkpoint), as its
header may predate them; refusing it, SQLite may checkpoint them into the
file, which then holds the same database in other bytes.  Every failure is
a :class:`StoreError` whose message is one line naming the file.

Reading a store from an older schema runs the missing :data:`MIGRATIONS`,
all in one transaction, at open.

The log (schema 2).  A host streaming an agent's output commits some
hundred envelopes at a time, nearly all on one channel: a table row, and
an index entry, per envelope would cost more than the rest of the host.  So
a row of ``log`` holds a run of one channel's records: one row per channel
a commit logged to, packed (see :func:`_pack`), keyed by its smallest seq
(``first``) and carrying its largest (``last``).  Rows of different
channels interleave in seq (a batch of seq 10 on ``a``, 11 on ``s``, 12 on
``a`` writes rows {10, 12} and {11}); rows of one channel never overlap, so
a channel's log is its rows in ``last`` order; and no row spans more than
``log_span`` seqs (``meta``), so the rows that hold the records after any
seq start at most that far before it.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import stat
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from agenthost_protocol._user_dirs import LIBRARY, user_dir
from agenthost_protocol.host.store import (
    Batch,
    ChannelRecord,
    ClientRecord,
    ContentRecord,
    LogRecord,
    Restored,
    SessionRecord,
    StoreError,
)

__all__ = ["SQLiteStore", "StoreFull", "StoreInUse", "default_store_dir", "default_store_path",
           "SCHEMA_VERSION", "APPLICATION_ID", "MIGRATIONS", "DEFAULT_MAX_BYTES"]

APPLICATION_ID = 0x41485031
"""``PRAGMA application_id`` of every store ("AHP1"): how a store tells its own
files from other SQLite files (``file(1)`` reads it too)."""

SCHEMA_VERSION = 3
"""``PRAGMA user_version`` of a store this version writes; it reads any up to it."""

_LIBRARY = LIBRARY

_MAGIC = b"SQLite format 3\x00"
_HEADER = 100
_BUSY_MS = 200
_IN_CHUNK = 500  # under SQLITE_MAX_VARIABLE_NUMBER (999 before SQLite 3.32)
_MAX_INT = 2**63 - 1
_JOURNAL_LIMIT = 16 * 1024 * 1024
_SYNCHRONOUS = ("NORMAL", "FULL", "EXTRA")
_OPENING = threading.Lock()
_HELD: set[tuple[int, int]] = set()
"""The files (device, inode) this process' open stores hold: see _check_file."""
_LOG_SPAN = 1024
"""The most a log row written now may span (``last - first``); a store keeps the value
it was created with in ``meta`` (``log_span``), as readers rely on it."""
_MIN_INT = -(2**63)
DEFAULT_MAX_BYTES = 1024**3
"""The store budget ``serve`` gives a store unless told otherwise (1 GiB)."""
_VACUUM_PAGES = 256
"""Free pages (1 MiB at SQLite's default page size) worth giving back to the file system
after a compaction: fewer are left for the next writes to reuse."""
_TABLES = frozenset(
    {"meta", "log", "channels", "sessions", "owners", "clients", "content", "content_owners"}
)


# --- schema and migrations ------------------------------------------------------------

_SCHEMA_1 = (
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE log(seq INTEGER PRIMARY KEY, channel TEXT NOT NULL, only_to TEXT,"
    " ms INTEGER NOT NULL, data BLOB NOT NULL)",
    # (channel) is (channel, seq): seq is the rowid, which every index entry ends with
    "CREATE INDEX log_by_channel ON log(channel)",
    # ``n`` is the order of first insertion (the order MemoryStore's dicts keep):
    # an upsert keeps it, a VACUUM cannot renumber it, and (n, uri) lets restore()
    # read the channel list without walking the states.
    "CREATE TABLE channels(n INTEGER PRIMARY KEY, uri TEXT NOT NULL UNIQUE,"
    " seq INTEGER NOT NULL, state BLOB)",
    "CREATE INDEX channels_in_order ON channels(n, uri)",
    "CREATE TABLE sessions(n INTEGER PRIMARY KEY, uri TEXT NOT NULL UNIQUE,"
    " ordinal INTEGER NOT NULL, created_at TEXT NOT NULL, summary BLOB)",
    "CREATE TABLE owners(n INTEGER PRIMARY KEY, chat TEXT NOT NULL UNIQUE, session TEXT NOT NULL)",
    "CREATE TABLE clients(n INTEGER PRIMARY KEY, client_id TEXT NOT NULL UNIQUE,"
    " version TEXT NOT NULL, touched INTEGER NOT NULL, keep INTEGER NOT NULL)",
    # ``owner`` is the owner the blob was first stored with: what content() returns,
    # as MemoryStore does; who owns it now is content_owners.
    "CREATE TABLE content(uri TEXT PRIMARY KEY, content_type TEXT NOT NULL, owner TEXT,"
    " data BLOB NOT NULL)",
    "CREATE TABLE content_owners(uri TEXT NOT NULL, channel TEXT NOT NULL,"
    " PRIMARY KEY(uri, channel)) WITHOUT ROWID",
    "CREATE INDEX content_owners_by_channel ON content_owners(channel, uri)",
    f"INSERT INTO meta(key, value) VALUES ('library', '{_LIBRARY}'), ('server_seq', '0')",
)


def _create_schema_1(db: sqlite3.Connection) -> None:
    # execute(), not executescript(): executescript commits first, and a migration
    # must stay inside the one transaction that moves the file between versions
    for statement in _SCHEMA_1:
        db.execute(statement)


# A log row's ``data``: the number of its records (uint32), their headers (_RECORD),
# then their bodies, in seq order.  A header is little-endian seq (int64), ms (int64),
# length of only_to (int32; -1: None), length of data (uint32): 24 bytes; a body is
# its only_to (UTF-8; nothing when None) then its data.  The headers read in one call
# (iter_unpack), and a row cut at a record is three slices (see _cut).
_COUNT = struct.Struct("<I")
_RECORD = struct.Struct("<qqiI")


def _pack(channel: str, records: Sequence[LogRecord]) -> tuple[int, int, str, bytes]:
    """One log row (first, last, channel, data) of ``records``: one channel's, in
    increasing seq order."""
    heads = [_COUNT.pack(len(records))]
    bodies: list[bytes] = []
    head = heads.append
    body = bodies.append
    pack = _RECORD.pack
    for record in records:
        data = record.data
        only_to = record.only_to
        if only_to is None:
            head(pack(record.seq, record.ms, -1, len(data)))
        else:
            to = only_to.encode()
            head(pack(record.seq, record.ms, len(to), len(data)))
            body(to)
        body(data)
    heads += bodies
    return records[0].seq, records[-1].seq, channel, b"".join(heads)


def _heads(data: bytes) -> tuple[int, Iterator[tuple[Any, ...]]]:
    """Where a row's bodies start, and an iterator over its headers."""
    (count,) = _COUNT.unpack_from(data)
    start = _COUNT.size + count * _RECORD.size
    if start > len(data):
        raise ValueError("a log row shorter than its headers")
    return start, _RECORD.iter_unpack(memoryview(data)[_COUNT.size:start])


def _unpack(channel: str, data: bytes, after: int, upto: int | None,
            out: list[LogRecord]) -> None:
    """Append to ``out`` the records of a row (``data``) with ``after < seq <= upto``."""
    pos, heads = _heads(data)
    append = out.append
    for seq, ms, n_to, n_data in heads:
        if upto is not None and seq > upto:
            return
        if n_to < 0:
            end = pos + n_data
            if seq > after:
                append(LogRecord(seq=seq, channel=channel, data=data[pos:end], ms=ms))
        else:
            to = pos + n_to
            end = to + n_data
            if seq > after:
                append(LogRecord(seq=seq, channel=channel, data=data[to:end],
                                 only_to=str(data[pos:to], "utf-8"), ms=ms))
        pos = end
    if pos != len(data):
        raise ValueError("a log row's records do not fill it")


def _cut(data: bytes, upto: int) -> tuple[int, bytes]:
    """A row without its records at or below ``upto`` (it holds one after): the seq of
    its first record then, and its data."""
    start, heads = _heads(data)
    count = (start - _COUNT.size) // _RECORD.size
    pos = start  # where the body of record i starts
    for i, (seq, _, n_to, n_data) in enumerate(heads):
        if seq > upto:
            view = memoryview(data)
            return seq, b"".join((_COUNT.pack(count - i),
                                  view[_COUNT.size + i * _RECORD.size:start], view[pos:]))
        pos += max(n_to, 0) + n_data
    raise ValueError("a log row holds nothing after the cut")


def _pack_rows(records: Sequence[LogRecord], span: int) -> list[tuple[int, int, str, bytes]]:
    """The log rows of ``records`` (increasing seq, each seq once): a row per channel,
    more where a channel's records span more than ``span`` seqs."""
    groups: dict[str, list[LogRecord]] = {}
    for record in records:
        group = groups.get(record.channel)
        if group is None:
            groups[record.channel] = [record]
        else:
            group.append(record)
    rows = []
    for channel, group in groups.items():
        if group[-1].seq - group[0].seq <= span:
            rows.append(_pack(channel, group))
            continue
        start = 0
        for i, record in enumerate(group):
            if record.seq - group[start].seq > span:
                rows.append(_pack(channel, group[start:i]))
                start = i
        rows.append(_pack(channel, group[start:]))
    return rows


_INSERT_ROW = "INSERT INTO log(first, last, channel, data) VALUES (?, ?, ?, ?)"


def _migrate_1_to_2(db: sqlite3.Connection) -> None:
    # a row per record becomes a row per run of records: the records in seq order, a
    # thousand at a time, packed as a commit of them would be (rows of one channel in
    # different thousands do not overlap: the thousands do not)
    db.execute("DROP INDEX log_by_channel")  # its name is the new table's
    db.execute("ALTER TABLE log RENAME TO log_1")
    db.execute("CREATE TABLE log(first INTEGER PRIMARY KEY, last INTEGER NOT NULL,"
               " channel TEXT NOT NULL, data BLOB NOT NULL)")
    db.execute("CREATE INDEX log_by_channel ON log(channel, last)")
    db.execute("INSERT INTO meta(key, value) VALUES ('log_span', ?)", (str(_LOG_SPAN),))
    cursor = db.execute("SELECT seq, channel, only_to, ms, data FROM log_1 ORDER BY seq")
    try:
        while True:
            chunk = cursor.fetchmany(1000)
            if not chunk:
                break
            records = [LogRecord(seq=seq, channel=channel, data=bytes(data), only_to=only_to,
                                 ms=ms) for seq, channel, only_to, ms, data in chunk]
            db.executemany(_INSERT_ROW, _pack_rows(records, _LOG_SPAN))
    finally:
        cursor.close()
    db.execute("DROP TABLE log_1")


def _migrate_2_to_3(db: sqlite3.Connection) -> None:
    # each session's owner (Host(authorize=...)); the sessions stored before have none,
    # which the ownership policy shows to admins only
    db.execute("ALTER TABLE sessions ADD COLUMN owner TEXT")


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _create_schema_1, _migrate_1_to_2, _migrate_2_to_3)
"""``MIGRATIONS[i]`` takes a store from schema ``i`` to ``i + 1`` (0: a new file)."""


# --- paths ----------------------------------------------------------------------------


def default_store_path(name: str = "host.sqlite3") -> Path:
    """``name`` in this user's data directory, where a host keeps its store unless told
    otherwise (per platform convention, so backups and cleaners find it).

    ``serve`` names the file after the agent it serves
    (:meth:`~agenthost_protocol.agent.hosting.ServeOptions.store_path`);
    ``host.sqlite3`` is the one file that earlier versions used for every agent.
    ``name`` must be a plain file name (no directory)."""
    if not name or name != os.path.basename(name) or name in (".", ".."):
        raise ValueError(f"{name!r} is not a plain file name")
    return default_store_dir() / name


def default_store_dir() -> Path:
    """This user's data directory for the library (``agenthost-protocol`` in
    ``$XDG_DATA_HOME``, ``~/Library/Application Support`` or ``%LOCALAPPDATA%``)."""
    return user_dir("data")


# --- errors ---------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(text.split()) if ("\n" in text or "\r" in text) else text


def _code(exc: sqlite3.Error) -> str:
    # sqlite_errorname is Python 3.11+; the message is all 3.10 gives
    name = getattr(exc, "sqlite_errorname", None)
    if isinstance(name, str):
        return name
    message = str(exc)
    if "locked" in message or "busy" in message:
        return "SQLITE_BUSY"
    if "malformed" in message or "corrupt" in message:
        return "SQLITE_CORRUPT"
    if "not a database" in message:
        return "SQLITE_NOTADB"
    return ""


def _is_busy(exc: sqlite3.Error) -> bool:
    return _code(exc).startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


def _is_corrupt(exc: sqlite3.Error) -> bool:
    return _code(exc).startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


# --- the store ------------------------------------------------------------------------

_UPSERT_CHANNEL = (
    "INSERT INTO channels(uri, seq, state) VALUES (?, ?, ?)"
    " ON CONFLICT(uri) DO UPDATE SET seq = excluded.seq, state = excluded.state"
)
_UPSERT_OWNER = (
    "INSERT INTO owners(chat, session) VALUES (?, ?)"
    " ON CONFLICT(chat) DO UPDATE SET session = excluded.session"
)
_UPSERT_SESSION = (
    "INSERT INTO sessions(uri, ordinal, created_at, summary, owner) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT(uri) DO UPDATE SET ordinal = excluded.ordinal,"
    " created_at = excluded.created_at, summary = excluded.summary, owner = excluded.owner"
)
_UPSERT_CLIENT = (
    "INSERT INTO clients(client_id, version, touched, keep) VALUES (?, ?, ?, ?)"
    " ON CONFLICT(client_id) DO UPDATE SET version = excluded.version,"
    " touched = excluded.touched, keep = excluded.keep"
)
_FORGET_CLIENT = "DELETE FROM clients WHERE client_id = ?"
_INSERT_CONTENT = (
    "INSERT OR IGNORE INTO content(uri, content_type, owner, data) VALUES (?, ?, ?, ?)"
)
_INSERT_CONTENT_OWNER = "INSERT OR IGNORE INTO content_owners(uri, channel) VALUES (?, ?)"
_SHARE = (
    "INSERT OR IGNORE INTO content_owners(uri, channel)"
    " SELECT uri, ? FROM content_owners WHERE channel = ?"
)
_REMOVE_CHANNEL = "DELETE FROM channels WHERE uri = ?"
_REMOVE_SESSION = "DELETE FROM sessions WHERE uri = ?"
_REMOVE_OWNER = "DELETE FROM owners WHERE chat = ?1 OR session = ?1"
# a blob goes with the last of its owners (one removed channel at a time, so two
# owners removed in one batch release it); a blob stored with no owner has no rows
# in content_owners and stays
_RELEASE_CONTENT = (
    "DELETE FROM content WHERE uri IN (SELECT uri FROM content_owners WHERE channel = ?1)"
    " AND NOT EXISTS (SELECT 1 FROM content_owners o"
    " WHERE o.uri = content.uri AND o.channel <> ?1)"
)
_REMOVE_CONTENT_OWNER = "DELETE FROM content_owners WHERE channel = ?"
# MemoryStore drops a record at or below the floor whose channel has no snapshot or
# a snapshot at or after it: a row goes whole when its last record may go; a row whose
# first records may go, and not its last, is cut (_COMPACT_CUT finds them once the
# whole ones are gone; there are few: a row at the floor, a row at a snapshot)
_COMPACT = (
    "DELETE FROM log WHERE first <= ?1 AND last <= ?1 AND NOT EXISTS"
    " (SELECT 1 FROM channels c WHERE c.uri = log.channel AND c.seq < log.last)"
)
_COMPACT_CUT = (
    "SELECT log.first, log.data, c.seq FROM log LEFT JOIN channels c ON c.uri = log.channel"
    " WHERE log.first <= ?1 AND (c.seq IS NULL OR log.first <= c.seq)"
)
_CUT = "UPDATE log SET first = ?, data = ? WHERE first = ?"
_LOG_ROWS_AFTER = (
    "SELECT first, channel, data FROM log WHERE first >= ? AND last >= ? ORDER BY first"
)
_LOG_ROWS_IN = (
    "SELECT first, channel, data FROM log WHERE first >= ? AND first <= ? AND last >= ?"
)
_DELETE_ROW = "DELETE FROM log WHERE first = ?"
_IN_USE = (
    "SELECT (p.page_count - f.freelist_count) * s.page_size"
    " FROM pragma_page_count() p, pragma_freelist_count() f, pragma_page_size() s"
)
_SET_SERVER_SEQ = "UPDATE meta SET value = ? WHERE key = 'server_seq'"
_PROBES = tuple(
    [f"SELECT * FROM {table} LIMIT 1" for table in sorted(_TABLES)]
    + [f"SELECT max(rowid) FROM {table}" for table in sorted(_TABLES - {"content_owners"})]
)


class StoreFull(StoreError):
    """A commit that would take the store past its budget (``max_bytes``): refused like
    any failed write, so the host refuses the change and keeps serving."""


class StoreInUse(StoreError):
    """The store file is held by another process (or another :class:`SQLiteStore` in this
    one): the refusal a second host of the same file gets."""


class SQLiteStore:
    """A :class:`~agenthost_protocol.host.store.HostStore` in one SQLite file.

    Open it once per process (it holds the file's lock until :meth:`close`); use
    it from one thread at a time.  ``ahp_version`` is the AHP version whose JSON
    the caller writes: the file records it (:attr:`ahp_version`), and
    :attr:`previous_ahp_version` says what it recorded before this open, so a
    host can tell it is reading another version's envelopes.
    """

    compact_every: int = 1000
    """Drop compactable log records once ``log_floor`` has risen this much since the
    last compaction: the scan is over every log row below the floor still held (the
    tails of channels whose snapshot is older), so not on every commit.  ``0``
    compacts on every commit, as :class:`MemoryStore` does (the tests' setting)."""

    compact_bytes: int = 4 * 1024 * 1024
    """Compact also once this many bytes were logged since the last compaction, however
    few seqs they took: a thousand envelopes of a megabyte each are a gigabyte."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ahp_version: str = "0.7.0",
        synchronous: str = "NORMAL",
        max_bytes: int | None = None,
    ) -> None:
        sync = synchronous.upper()
        if max_bytes is not None and max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        self.max_bytes = max_bytes
        """The store budget (``None``: none): a commit that would hold more, and frees
        nothing, is refused with :class:`StoreFull` (see :meth:`commit`)."""
        self._logged = 0
        """Bytes logged since the last compaction."""
        if sync not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, "
                             f"not {synchronous!r}")
        self.path = Path(path)
        self._name = os.fspath(path)
        self._db: sqlite3.Connection | None = None
        self._server_seq = 0
        self._floor = 0
        self._compacted = 0
        self._span = _LOG_SPAN
        self._top: int | None = None
        """The largest seq the log holds, or more (None: it holds none): a batch after
        it only appends rows."""
        self.previous_ahp_version: str | None = None
        """The AHP version the file recorded before this open (``None``: a new store)."""
        self._held: tuple[int, int] | None = None
        with _OPENING:
            fresh = self._check_file()
            siblings = self._siblings()
            try:
                db = sqlite3.connect(
                    self.path.absolute().as_uri() + "?mode=rw",
                    uri=True,
                    isolation_level=None,  # transactions are ours: BEGIN/COMMIT below
                    check_same_thread=False,
                )
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            try:
                self._open(db, fresh, ahp_version, sync)
                info = os.stat(self.path)
            except BaseException:
                db.close()
                self._tidy(siblings)
                raise
            self._held = (info.st_dev, info.st_ino)
            _HELD.add(self._held)
            self._db = db

    # -- opening ----------------------------------------------------------------------

    def _check_file(self) -> bool:
        """Refuse a file that is not ours from its header alone, before SQLite (which may
        write to it) opens it.  True when there is nothing to read: a new or empty file."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return self._create_file()
        except OSError as exc:
            raise self._os_error(exc) from exc
        if (info.st_dev, info.st_ino) in _HELD:
            # refused here, before the file is opened to read its header: closing that
            # descriptor would release the holder's lock (POSIX locks are per process)
            raise StoreInUse(self._line_is(
                "in use by another process (or another SQLiteStore in this one)"))
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(self._line("not a regular file; refusing to use it as a store"))
        self._check_siblings()
        if info.st_size == 0:
            self._check_writable()
            return True
        try:
            with open(self.path, "rb") as file:
                head = file.read(_HEADER)
        except OSError as exc:
            raise self._os_error(exc) from exc
        if not head.startswith(_MAGIC):
            raise StoreError(self._line("not an SQLite file; refusing to use it as a store"))
        if len(head) < _HEADER:
            raise self._corrupt("the file is shorter than an SQLite header")
        (page_size,) = struct.unpack_from(">H", head, 16)
        page_size = 65536 if page_size == 1 else page_size
        if page_size < 512 or page_size & (page_size - 1):
            raise self._corrupt(f"page size {page_size} in its header")
        (application_id,) = struct.unpack_from(">i", head, 68)
        # a store's application_id is written before its first WAL transaction, so the
        # header has it even when the newest transactions are still in the -wal
        self._check_identity(application_id, 0)
        # the rest of the header may predate frames in the -wal (a writer killed before
        # a checkpoint): then SQLite decides, after recovering them
        try:
            wal_frames = os.stat(self._name + "-wal").st_size > 32
        except OSError:
            wal_frames = False
        if wal_frames:
            self._check_writable()
            return False
        (user_version,) = struct.unpack_from(">i", head, 60)
        self._check_identity(application_id, user_version)
        (changes, pages) = struct.unpack_from(">II", head, 24)
        (valid_for,) = struct.unpack_from(">I", head, 92)
        if valid_for == changes and pages and info.st_size < pages * page_size:
            raise self._corrupt(f"truncated: {info.st_size} bytes where its header "
                                f"says {pages * page_size}")
        self._check_writable()
        return False

    def _check_siblings(self) -> None:
        # SQLite opens these by name beside the store: a FIFO would block it (or take
        # its write-ahead log into a pipe), a directory fails it with a vague error
        for suffix in ("-wal", "-journal", "-shm"):
            try:
                info = os.lstat(self._name + suffix)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._os_error(exc) from exc
            if not stat.S_ISREG(info.st_mode):
                raise StoreError(_one_line(
                    f"{self._name}{suffix} (SQLite's file beside the store) is not a regular "
                    "file; move it away to use the store"))

    def _check_writable(self) -> None:
        # SQLite would say "disk I/O error" or "attempt to write a readonly database"
        if not os.access(self.path, os.W_OK):
            raise StoreError(self._line("cannot write to it (read-only); a store writes "
                                        "on every commit"))
        if not os.access(self.path.absolute().parent, os.W_OK | os.X_OK):
            raise StoreError(self._line("cannot write to its directory, where SQLite keeps "
                                        "the store's write-ahead log (-wal)"))

    def _create_file(self) -> bool:
        self._check_siblings()
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # created here, not by SQLite, so the transcripts it will hold are the
            # user's alone (SQLite gives its -wal the file's mode)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            if os.path.islink(self.path) and not os.path.exists(self.path):
                # O_EXCL does not follow it, stat does: asking again would loop forever
                raise StoreError(self._line(
                    "a symbolic link to nothing; refusing to create the store through "
                    "it")) from None
            return self._check_file()  # created by someone else meanwhile: read it then
        except OSError as exc:
            raise self._os_error(exc) from exc
        os.close(fd)
        return True

    def _check_identity(self, application_id: int, user_version: int) -> None:
        if application_id != APPLICATION_ID:
            raise self._not_ours()
        if user_version > SCHEMA_VERSION:
            raise StoreError(self._line(
                f"written by a newer agenthost-protocol (schema {user_version}, "
                f"this one reads up to {SCHEMA_VERSION}); upgrade it"))

    def _open(self, db: sqlite3.Connection, fresh: bool, ahp_version: str, sync: str) -> None:
        try:
            db.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
            # before the first read: in WAL mode the lock is then taken at once and the
            # WAL index lives in this process' memory (no -shm file for others to join)
            db.execute("PRAGMA locking_mode = EXCLUSIVE")
            application_id = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if fresh and application_id == 0 and version == 0 and not tables:
                # the file is ours from its first write, so a store killed while being
                # created is recognised, and migrated from schema 0, when opened again
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                # before the first table: freed pages can then go back to the file system
                # (see _vacuum); an existing store is converted below, once
                db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            else:
                self._check_identity(application_id, version)
                # our id, yet not our tables (schema 0 is the file before its tables)
                if version == 0:
                    foreign = bool(tables)
                else:
                    required = _TABLES if version == SCHEMA_VERSION else {"meta"}
                    foreign = not required.issubset(tables)
                if foreign:
                    raise self._not_ours()
            # nothing was written before here unless the file was empty
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(self._line(f"cannot use write-ahead logging here ({mode})"))
            db.execute(f"PRAGMA synchronous = {sync}")
            db.execute(f"PRAGMA journal_size_limit = {_JOURNAL_LIMIT}")
            db.execute("BEGIN IMMEDIATE")  # the write lock, kept until close
            try:
                for step in range(version, SCHEMA_VERSION):
                    MIGRATIONS[step](db)
                    db.execute(f"PRAGMA user_version = {step + 1}")
                # a store damaged where opening does not otherwise read is refused now,
                # not mid-session: touch each table's first and last pages
                for probe in _PROBES:
                    db.execute(probe).fetchall()
                meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
                if meta.get("library") != _LIBRARY:
                    raise self._not_ours()
                try:
                    self._server_seq = int(meta.get("server_seq") or 0)
                except ValueError as exc:
                    raise self._corrupt(f"server_seq {meta.get('server_seq')!r}") from exc
                try:
                    self._span = int(meta.get("log_span") or "")
                except ValueError as exc:
                    raise self._corrupt(f"log_span {meta.get('log_span')!r}") from exc
                if self._span < 0:
                    raise self._corrupt(f"log_span {self._span}")
                self._top = self._log_top(db)
                self.previous_ahp_version = meta.get("ahp_version")
                if self.previous_ahp_version != ahp_version:
                    db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('ahp_version', ?)",
                               (ahp_version,))
                db.execute("COMMIT")
            except BaseException:
                self._rollback(db)
                raise
            self._reclaim(db)
        except sqlite3.Error as exc:
            if _is_busy(exc):
                raise StoreInUse(self._line_is("in use by another process")) from exc
            raise self._error(exc) from exc

    def _reclaim(self, db: sqlite3.Connection) -> None:
        """Give the free pages back to the file system at open: a store from before
        incremental auto-vacuum is converted (one VACUUM, as long as copying the file
        takes), a store in that mode drops its free list.  Best effort: a store that
        cannot (a full disk) opens as it is."""
        try:
            if db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
                db.execute("PRAGMA auto_vacuum = INCREMENTAL")
                db.execute("VACUUM")  # applies the mode, and drops the free list
            elif db.execute("PRAGMA freelist_count").fetchone()[0]:
                db.executescript("PRAGMA incremental_vacuum")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            if _is_corrupt(exc):
                raise
            self._rollback(db)

    def _log_top(self, db: sqlite3.Connection) -> int | None:
        (first,) = db.execute("SELECT max(first) FROM log").fetchone()
        if first is None:
            return None
        # the row with the largest last starts within log_span of it, so after
        # max(first) - log_span: an index lookup and a few rows, however long the log
        (top,) = db.execute("SELECT max(last) FROM log WHERE first >= ?",
                            (max(first - self._span, _MIN_INT),)).fetchone()
        return int(top)

    def _siblings(self) -> dict[str, bool]:
        return {suffix: os.path.exists(self._name + suffix)
                for suffix in ("-wal", "-shm", "-journal")}

    def _tidy(self, before: dict[str, bool]) -> None:
        # SQLite removes the -wal it made when it closes; should it leave an empty one
        # behind after a refusal, the refused file's directory is left as it was found
        for suffix, existed in before.items():
            name = self._name + suffix
            try:
                if not existed and os.path.getsize(name) == 0:
                    os.remove(name)
            except OSError:
                pass

    # -- errors -----------------------------------------------------------------------

    def _line(self, what: str) -> str:
        return _one_line(f"{self._name}: {what}")

    def _line_is(self, what: str) -> str:
        return _one_line(f"{self._name} is {what}")

    def _not_ours(self) -> StoreError:
        return StoreError(self._line(
            "not an agenthost-protocol store (another application's SQLite file); "
            "refusing to use it"))

    def _corrupt(self, why: str) -> StoreError:
        return StoreError(self._line(
            f"the store is corrupt ({why}); move it away (or restore a backup) to start afresh"))

    def _error(self, exc: sqlite3.Error) -> StoreError:
        if _is_corrupt(exc):
            return self._corrupt(str(exc))
        return StoreError(self._line(str(exc)))

    def _os_error(self, exc: OSError) -> StoreError:
        return StoreError(self._line(exc.strerror or str(exc)))

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(self._line("the store is closed"))
        return self._db

    # -- identity ---------------------------------------------------------------------

    @property
    def ahp_version(self) -> str | None:
        """The AHP version of the store's writer, as the file records it."""
        row = self._read("SELECT value FROM meta WHERE key = 'ahp_version'", ())
        return str(row[0][0]) if row else None

    @property
    def schema_version(self) -> int:
        """``PRAGMA user_version`` of the file (:data:`SCHEMA_VERSION` once open)."""
        return int(self._read("PRAGMA user_version", ())[0][0])

    # -- reads ------------------------------------------------------------------------

    def _read(self, sql: str, params: Sequence[object]) -> list[Any]:
        db = self._conn()
        try:
            return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def restore(self) -> Restored:
        db = self._conn()
        # some 100,000 new objects and none in a cycle: with the collector running it
        # runs again and again while they pile up, near half of the time for 20,000
        # channels (and the host waits for restore() to start)
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._restore(db)
        finally:
            if enabled:
                gc.enable()

    def _restore(self, db: sqlite3.Connection) -> Restored:
        try:
            server_seq = db.execute(
                "SELECT value FROM meta WHERE key = 'server_seq'").fetchone()[0]
            channels = db.execute(
                "SELECT uri FROM channels ORDER BY n").fetchall()
            sessions = db.execute(
                "SELECT uri, ordinal, created_at, summary IS NOT NULL, owner FROM sessions"
                " ORDER BY ordinal, n").fetchall()
            owners = db.execute("SELECT chat, session FROM owners ORDER BY n").fetchall()
            clients = db.execute(
                "SELECT client_id, version, touched, keep FROM clients ORDER BY n").fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        return Restored(
            server_seq=int(server_seq),
            channels=tuple(uri for (uri,) in channels),
            sessions=tuple(SessionRecord(uri=uri, ordinal=ordinal, created_at=created_at,
                                         owner=owner if isinstance(owner, str) else None)
                           for uri, ordinal, created_at, _, owner in sessions),
            listed=frozenset(uri for uri, _, _, listed, _ in sessions if listed),
            owners=tuple(owners),
            clients=tuple(ClientRecord(client_id=client_id, version=version,
                                       touched=touched, keep=bool(keep))
                          for client_id, version, touched, keep in clients),
        )

    def load_channel(self, uri: str) -> tuple[ChannelRecord, tuple[LogRecord, ...]] | None:
        db = self._conn()
        try:
            row = db.execute("SELECT seq, state FROM channels WHERE uri = ?", (uri,)).fetchone()
            if row is None:
                return None
            seq, state = row
            # a channel's rows do not overlap: in last order, their records are in order
            rows = db.execute(
                "SELECT data FROM log WHERE channel = ? AND last > ? ORDER BY last",
                (uri, seq)).fetchall()
            tail: list[LogRecord] = []
            for (data,) in rows:
                _unpack(uri, data, seq, None, tail)
        except UnicodeEncodeError:
            return None  # a name SQLite cannot hold was never stored
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        except (struct.error, ValueError, TypeError) as exc:
            raise self._corrupt(f"a log row of {uri}: {exc}") from exc
        return ChannelRecord(uri=uri, state=state, seq=seq), tuple(tail)

    def log_after(self, seq: int, limit: int) -> tuple[LogRecord, ...]:
        if limit <= 0 or seq >= _MAX_INT:
            return ()
        after = max(seq + 1, _MIN_INT)  # the smallest seq wanted, as SQLite holds it
        db = self._conn()
        found: list[LogRecord] = []
        upto: int | None = None  # once ``limit`` are found: the seq of the limit-th
        try:
            # the rows holding records after ``seq`` start at most log_span before it;
            # in first order, the rows of different channels interleave: once a row
            # starts after the limit-th record found, no later row holds one before it
            cursor = db.execute(_LOG_ROWS_AFTER, (max(after - self._span, _MIN_INT), after))
            try:
                for first, channel, data in cursor:
                    if upto is not None and first > upto:
                        break
                    _unpack(channel, data, seq, upto, found)
                    if len(found) >= limit:
                        found.sort(key=_by_seq)
                        del found[limit:]
                        upto = found[-1].seq
            finally:
                cursor.close()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        except (struct.error, ValueError, TypeError) as exc:
            raise self._corrupt(f"a log row: {exc}") from exc
        found.sort(key=_by_seq)
        return tuple(found)

    def summaries(self, uris: Sequence[str]) -> dict[str, bytes]:
        db = self._conn()
        found: dict[str, bytes] = {}
        wanted = list(dict.fromkeys(uris))
        try:
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start:start + _IN_CHUNK]
                marks = ", ".join("?" * len(chunk))
                found.update(db.execute(
                    f"SELECT uri, summary FROM sessions WHERE uri IN ({marks})"
                    " AND summary IS NOT NULL", chunk).fetchall())
        except UnicodeEncodeError:
            found.update(self.summaries([u for u in wanted if _encodable(u)]))
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        return {uri: found[uri] for uri in uris if uri in found}

    def content(self, uri: str) -> ContentRecord | None:
        if not _encodable(uri):
            return None
        rows = self._read("SELECT content_type, data, owner FROM content WHERE uri = ?", (uri,))
        if not rows:
            return None
        content_type, data, owner = rows[0]
        owners = self._read("SELECT channel FROM content_owners WHERE uri = ? ORDER BY channel",
                            (uri,))
        return ContentRecord(uri=uri, content_type=content_type, data=data, owner=owner,
                             owners=tuple(channel for (channel,) in owners))

    # -- writes -----------------------------------------------------------------------

    def commit(self, batch: Batch) -> None:
        """Write ``batch`` in one transaction.

        With a budget (:attr:`max_bytes`), a batch that changes state (a
        record sent to every subscriber, or stored content) and removes
        nothing is refused with :class:`StoreFull` when the store's pages in
        use and the batch's bytes would pass the budget, after a compaction
        that did not free enough.  What stays allowed keeps the host usable
        and bounded: removals (``disposeSession`` frees space), records
        addressed to one client (rejections, pages of a view: the log is
        compacted behind them) and the snapshots and clients that come with
        them."""
        db = self._conn()
        floor = batch.log_floor
        logged = self._logged + sum(len(record.data) for record in batch.log)
        compact = self.compact_every <= 0 or floor - self._compacted >= self.compact_every or (
            logged >= self.compact_bytes and floor > self._compacted)
        if self.max_bytes is not None and _grows(batch):
            self._check_budget(db, batch, floor)
        server_seq = max(self._server_seq, batch.server_seq)
        top = self._top
        try:
            db.execute("BEGIN")
            if batch.removed:
                # first as well as in its place (_write, which sees what the batch adds):
                # the pages freed serve the rest of the batch, so a disposal goes through
                # on a full disk
                self._remove(db, batch.removed, content=False)
            if batch.log:
                top = self._write_log(db, batch.log)
            self._write(db, batch)
            if compact:
                self._compact(db, floor)
            if server_seq != self._server_seq:
                db.execute(_SET_SERVER_SEQ, (server_seq,))
            db.execute("COMMIT")
        except BaseException as exc:
            self._rollback(db)
            if isinstance(exc, sqlite3.Error):
                raise self._error(exc) from exc
            if isinstance(exc, (OverflowError, UnicodeEncodeError, struct.error)):
                raise StoreError(self._line(f"cannot store this batch ({exc})")) from exc
            raise
        self._top = top
        self._server_seq = server_seq
        self._floor = max(self._floor, floor)
        self._logged = logged
        if compact:
            self._compacted = floor
            self._logged = 0
            self._vacuum(db)

    @property
    def size_bytes(self) -> int:
        """The bytes of the store's pages in use (what :attr:`max_bytes` bounds): the
        file less its free pages, the write-ahead log's newest pages included."""
        return self._in_use(self._conn())

    def _in_use(self, db: sqlite3.Connection) -> int:
        try:
            return int(db.execute(_IN_USE).fetchone()[0])
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def _check_budget(self, db: sqlite3.Connection, batch: Batch, floor: int) -> None:
        assert self.max_bytes is not None
        wanted = _batch_bytes(batch)
        used = self._in_use(db)
        if used + wanted <= self.max_bytes:
            return
        floor = max(floor, self._floor)
        if floor > self._compacted:
            # what the log may drop first: the budget is for what the host keeps
            self._floor = floor
            self.compact()
            used = self._in_use(db)
            if used + wanted <= self.max_bytes:
                return
        raise StoreFull(self._line(
            f"the store is full: {_mib(used)} of its {_mib(self.max_bytes)} budget in use"
            f"{f' and {_mib(wanted)} more asked for' if wanted >= 1 << 20 else ''}; dispose "
            "of sessions to free space (or give serve a larger --max-store-bytes)"))

    def _vacuum(self, db: sqlite3.Connection) -> None:
        """After a compaction's commit: free pages back to the file system, and the file
        shrinks.  Best effort, in a transaction of its own."""
        try:
            if db.execute("PRAGMA freelist_count").fetchone()[0] >= _VACUUM_PAGES:
                # executescript steps it to the end; execute() would free one page only
                db.executescript("PRAGMA incremental_vacuum")
                # the file is cut to its new size when a checkpoint has copied every
                # page back, and the write-ahead log holds the pages moved: both now
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error:
            self._rollback(db)

    def _write_log(self, db: sqlite3.Connection, log: Sequence[LogRecord]) -> int:
        """Write ``log`` as rows; the largest seq the log then holds (or more)."""
        records = log
        last = _MIN_INT - 1
        for record in log:
            if record.seq <= last:  # out of order, or a seq twice: the last one wins
                records = sorted({r.seq: r for r in log}.values(), key=_by_seq)
                break
            last = record.seq
        lo, hi = records[0].seq, records[-1].seq
        if self._top is not None and lo <= self._top:
            # not after all the log holds (never so from a host): the records may replace
            # some, or fall between a channel's rows, which must not overlap; so the rows
            # the batch reaches into are read and written again with it
            held: dict[int, LogRecord] = {}
            gone = []
            rows = db.execute(_LOG_ROWS_IN, (max(lo - self._span, _MIN_INT), hi, lo)).fetchall()
            for first, channel, data in rows:
                found: list[LogRecord] = []
                try:
                    _unpack(channel, data, _MIN_INT - 1, None, found)
                except (struct.error, ValueError) as exc:
                    raise self._corrupt(f"the log row at {first}: {exc}") from exc
                held.update((r.seq, r) for r in found)
                gone.append((first,))
            held.update((r.seq, r) for r in records)
            records = sorted(held.values(), key=_by_seq)
            db.executemany(_DELETE_ROW, gone)
        db.executemany(_INSERT_ROW, _pack_rows(records, self._span))
        return hi if self._top is None else max(self._top, hi)

    @staticmethod
    def _write(db: sqlite3.Connection, batch: Batch) -> None:
        # MemoryStore's order: later parts of a batch see the earlier ones (the log is
        # written first, by _write_log)
        if batch.snapshots:
            db.executemany(_UPSERT_CHANNEL, [(s.uri, s.seq, s.state) for s in batch.snapshots])
        if batch.owners:
            db.executemany(_UPSERT_OWNER, batch.owners)
        if batch.sessions:
            db.executemany(_UPSERT_SESSION, [(s.uri, s.ordinal, s.created_at, s.summary,
                                              s.owner) for s in batch.sessions])
        if batch.clients:
            db.executemany(_UPSERT_CLIENT, [(c.client_id, c.version, c.touched, int(c.keep))
                                            for c in batch.clients])
        if batch.forgotten_clients:
            db.executemany(_FORGET_CLIENT, [(c,) for c in batch.forgotten_clients])
        if batch.content:
            db.executemany(_INSERT_CONTENT, [(b.uri, b.content_type, b.owner, b.data)
                                             for b in batch.content])
            owned = [(b.uri, b.owner) for b in batch.content if b.owner is not None]
            if owned:
                db.executemany(_INSERT_CONTENT_OWNER, owned)
        for source, channel in batch.shared:  # in order: a fork of a fork sees the first
            db.execute(_SHARE, (channel, source))
        if batch.removed:
            SQLiteStore._remove(db, batch.removed, content=True)

    @staticmethod
    def _remove(db: sqlite3.Connection, removed: Sequence[str], *, content: bool) -> None:
        gone = [(uri,) for uri in removed]
        db.executemany(_REMOVE_CHANNEL, gone)
        db.executemany(_REMOVE_SESSION, gone)
        if not content:  # the rest waits for the batch's owners and shares (a fork)
            return
        db.executemany(_REMOVE_OWNER, gone)
        for uri in removed:  # one at a time: see _RELEASE_CONTENT
            db.execute(_RELEASE_CONTENT, (uri,))
            db.execute(_REMOVE_CONTENT_OWNER, (uri,))

    def _rollback(self, db: sqlite3.Connection) -> None:
        try:
            if db.in_transaction:
                db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite rolled back already (as it does on a full disk)

    def compact(self) -> None:
        """Drop now what the highest ``log_floor`` committed so far allows, whatever
        :attr:`compact_every` says (a host shutting down, a test comparing stores)."""
        db = self._conn()
        try:
            db.execute("BEGIN")
            self._compact(db, self._floor)
            db.execute("COMMIT")
        except BaseException as exc:
            self._rollback(db)
            if isinstance(exc, sqlite3.Error):
                raise self._error(exc) from exc
            raise
        self._compacted = self._floor
        self._logged = 0
        self._vacuum(db)

    def _compact(self, db: sqlite3.Connection, floor: int) -> None:
        floor = max(min(floor, _MAX_INT), _MIN_INT)  # as SQLite can hold it: the same here
        db.execute(_COMPACT, (floor,))
        cuts = []
        for first, data, snapshot in db.execute(_COMPACT_CUT, (floor,)).fetchall():
            try:
                seq, rest = _cut(data, floor if snapshot is None else min(floor, snapshot))
            except (struct.error, ValueError) as exc:
                raise self._corrupt(f"the log row at {first}: {exc}") from exc
            cuts.append((seq, rest, first))
        if cuts:
            db.executemany(_CUT, cuts)

    # -- closing ----------------------------------------------------------------------

    def close(self) -> None:
        db, self._db = self._db, None
        if db is None:
            return
        try:
            self._rollback(db)
            db.close()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        finally:
            if self._held is not None:
                with _OPENING:
                    _HELD.discard(self._held)

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._db is None else "open"
        return f"<SQLiteStore {self._name!r} ({state})>"


def _grows(batch: Batch) -> bool:
    """Whether a budget may refuse ``batch`` (see :meth:`SQLiteStore.commit`)."""
    if batch.removed:
        return False
    return bool(batch.content) or any(record.only_to is None for record in batch.log)


def _batch_bytes(batch: Batch) -> int:
    return (sum(len(record.data) for record in batch.log)
            + sum(len(record.state or b"") for record in batch.snapshots)
            + sum(len(record.summary or b"") for record in batch.sessions)
            + sum(len(record.data) for record in batch.content))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _by_seq(record: LogRecord) -> int:
    return record.seq


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
