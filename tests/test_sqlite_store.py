"""SQLiteStore: the contract MemoryStore models, on disk, and the file's safety.

The contract tests run over both stores.  The property test applies random
batches to both and compares all that can be observed (before and after
reopening the file).  The rest is SQLite's own: durability across a reopen
and a killed process, a failing disk, the lock, the refusals (which leave
the refused file as they found it), migrations.

A :class:`SQLiteStore` in these tests compacts on every commit
(``compact_every = 0``), as MemoryStore does; its own cadence has a test.
"""

from __future__ import annotations

import gc
import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenthost_protocol import sqlite_store
from agenthost_protocol.host.store import (
    Batch,
    ChannelRecord,
    ClientRecord,
    ContentRecord,
    HostStore,
    LogRecord,
    MemoryStore,
    Restored,
    SessionRecord,
    StoreError,
)
from agenthost_protocol.sqlite_store import (
    APPLICATION_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    SQLiteStore,
    default_store_path,
)

ROOT = Path(__file__).resolve().parents[1]

# hypothesis: the profile tests/conftest.py loaded, with this file's example count;
# AHP_LONG_TESTS=1 (or the ``long`` profile) runs ten times more
LONG = os.environ.get("AHP_LONG_TESTS") == "1" or os.environ.get("HYPOTHESIS_PROFILE") == "long"
EXAMPLES = 300 if LONG else 30


def open_sqlite(path: Path) -> SQLiteStore:
    store = SQLiteStore(path)
    store.compact_every = 0
    return store


def log(seq: int, channel: str = "c", data: bytes = b"{}", **kw: Any) -> LogRecord:
    return LogRecord(seq=seq, channel=channel, data=data, **kw)


def db_of(store: SQLiteStore) -> sqlite3.Connection:
    db = store._db
    assert db is not None
    return db


def assert_one_line(error: pytest.ExceptionInfo[StoreError], path: Path | str) -> str:
    message = str(error.value)
    assert "\n" not in message and "\r" not in message
    assert "Traceback" not in message
    assert str(path) in message
    return message


# --- the contract, over both stores ---------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HostStore]:
    made: HostStore = MemoryStore() if request.param == "memory" else open_sqlite(
        tmp_path / "store.sqlite3")
    yield made
    made.close()


def test_an_empty_store(store: HostStore) -> None:
    assert store.restore() == Restored()
    assert store.load_channel("c") is None
    assert store.log_after(0, 10) == ()
    assert store.summaries(["s"]) == {}
    assert store.content("b") is None


def test_a_batch_round_trip(store: HostStore) -> None:
    store.commit(Batch(
        server_seq=4,
        log=(log(1, "s"), log(2, "c", only_to="k1", ms=7), log(3, "c"), log(4, "s")),
        snapshots=(ChannelRecord(uri="s", state=b'{"s":1}', seq=1),
                   ChannelRecord(uri="c", state=b'{"c":1}', seq=2),
                   ChannelRecord(uri="t", state=None, seq=0)),
        sessions=(SessionRecord(uri="s", ordinal=1, created_at="t1", summary=b'{"title":"s"}'),
                  SessionRecord(uri="r", ordinal=0, created_at="t0")),
        owners=(("c", "s"),),
        clients=(ClientRecord(client_id="k1", version="0.7.0", touched=10, keep=True),
                 ClientRecord(client_id="k2", version="0.6.0", touched=11)),
        content=(ContentRecord(uri="b1", content_type="text/plain", data=b"one", owner="c"),
                 ContentRecord(uri="b2", content_type="image/png", data=b"\x89PNG"),),
    ))
    assert store.restore() == Restored(
        server_seq=4,
        channels=("s", "c", "t"),
        sessions=(SessionRecord(uri="r", ordinal=0, created_at="t0"),
                  SessionRecord(uri="s", ordinal=1, created_at="t1")),
        listed=frozenset({"s"}),
        owners=(("c", "s"),),
        clients=(ClientRecord(client_id="k1", version="0.7.0", touched=10, keep=True),
                 ClientRecord(client_id="k2", version="0.6.0", touched=11)),
    )
    assert store.load_channel("c") == (ChannelRecord(uri="c", state=b'{"c":1}', seq=2),
                                       (log(3, "c"),))
    assert store.load_channel("t") == (ChannelRecord(uri="t", state=None, seq=0), ())
    assert store.summaries(["s", "r", "x"]) == {"s": b'{"title":"s"}'}
    assert store.content("b1") == ContentRecord(uri="b1", content_type="text/plain",
                                                data=b"one", owner="c", owners=("c",))
    assert store.log_after(0, 10) == (log(1, "s"), log(2, "c", only_to="k1", ms=7),
                                      log(3, "c"), log(4, "s"))

    # a fork shares c's blobs; c goes; a client is forgotten; the floor drops what the
    # snapshots cover, and what the removed channel logged
    store.commit(Batch(
        server_seq=6,
        log=(log(5, "d"), log(6, "s")),
        snapshots=(ChannelRecord(uri="d", state=b'{"d":1}', seq=5),),
        shared=(("c", "d"),),
        removed=("c",),
        forgotten_clients=("k1", "nobody"),
        log_floor=5,
    ))
    restored = store.restore()
    assert restored.server_seq == 6
    assert restored.channels == ("s", "t", "d")
    assert restored.owners == ()
    assert restored.clients == (ClientRecord(client_id="k2", version="0.6.0", touched=11),)
    assert store.load_channel("c") is None
    assert store.content("b1") is not None  # d owns it now too
    # s's snapshot is at 1: its record 4 stays until a snapshot covers it
    assert [r.seq for r in store.log_after(0, 10)] == [4, 6]

    store.commit(Batch(server_seq=2, removed=("d",)))
    assert store.content("b1") is None  # its last owner went
    assert store.content("b2") is not None  # stored with no owner: kept
    assert store.restore().server_seq == 6  # never goes back


def test_load_channel_is_the_snapshot_and_the_tail_after_it(store: HostStore) -> None:
    store.commit(Batch(
        server_seq=7,
        log=tuple(log(seq, "c" if seq % 2 else "o") for seq in range(1, 8)),
        snapshots=(ChannelRecord(uri="c", state=b"3", seq=3),),
    ))
    loaded = store.load_channel("c")
    assert loaded is not None
    assert loaded[0] == ChannelRecord(uri="c", state=b"3", seq=3)
    assert [r.seq for r in loaded[1]] == [5, 7]
    assert {r.channel for r in loaded[1]} == {"c"}
    assert store.load_channel("o") is None  # logged, never snapshotted


def test_log_after_orders_limits_and_leaves_gaps(store: HostStore) -> None:
    store.commit(Batch(server_seq=9, log=tuple(log(seq, f"c{seq % 3}") for seq in (9, 3, 1, 7, 5))))
    assert [r.seq for r in store.log_after(0, 100)] == [1, 3, 5, 7, 9]
    assert [r.seq for r in store.log_after(3, 2)] == [5, 7]
    assert [r.seq for r in store.log_after(4, 100)] == [5, 7, 9]
    assert store.log_after(9, 100) == ()
    assert store.log_after(0, 0) == ()
    # the same seq again replaces the record, as a dict would
    store.commit(Batch(server_seq=9, log=(log(5, "x", b"again"),)))
    assert store.log_after(4, 1) == (log(5, "x", b"again"),)


def test_summaries_of_many_sessions(store: HostStore) -> None:
    # more than one chunk of the IN list
    sessions = tuple(SessionRecord(uri=f"s{i}", ordinal=i, created_at="t",
                                   summary=None if i % 3 == 0 else f"{i}".encode())
                     for i in range(1300))
    store.commit(Batch(server_seq=0, sessions=sessions))
    wanted = [f"s{i}" for i in range(1300, -5, -1)]
    got = store.summaries(wanted)
    assert got == {f"s{i}": f"{i}".encode() for i in range(1300) if i % 3}
    assert store.summaries([]) == {}
    assert store.restore().listed == frozenset(got)
    # a summary cleared is no longer listed
    cleared = SessionRecord(uri="s1", ordinal=1, created_at="t")
    store.commit(Batch(server_seq=0, sessions=(cleared,)))
    assert "s1" not in store.restore().listed
    assert store.summaries(["s1", "s2"]) == {"s2": b"2"}


def test_creation_order_survives_upserts(store: HostStore) -> None:
    def snap(uri: str, seq: int) -> ChannelRecord:
        return ChannelRecord(uri=uri, state=b"{}", seq=seq)

    store.commit(Batch(server_seq=0, snapshots=(snap("b", 0), snap("a", 0), snap("c", 0)),
                       owners=(("x", "1"), ("y", "2")),
                       clients=(ClientRecord(client_id="k2", version="v", touched=1),
                                ClientRecord(client_id="k1", version="v", touched=1))))
    store.commit(Batch(server_seq=0, snapshots=(snap("c", 5), snap("a", 6), snap("d", 0)),
                       owners=(("x", "3"),),
                       clients=(ClientRecord(client_id="k2", version="w", touched=2),)))
    restored = store.restore()
    assert restored.channels == ("b", "a", "c", "d")
    assert restored.owners == (("x", "3"), ("y", "2"))
    assert [c.client_id for c in restored.clients] == ["k2", "k1"]
    # gone and back: at the end
    store.commit(Batch(server_seq=0, removed=("a",), forgotten_clients=("k2",)))
    store.commit(Batch(server_seq=0, snapshots=(snap("a", 9),),
                       clients=(ClientRecord(client_id="k2", version="v", touched=3),)))
    restored = store.restore()
    assert restored.channels == ("b", "c", "d", "a")
    assert [c.client_id for c in restored.clients] == ["k1", "k2"]


def test_sessions_come_in_ordinal_order(store: HostStore) -> None:
    store.commit(Batch(server_seq=0, sessions=tuple(
        SessionRecord(uri=f"s{o}", ordinal=o, created_at=f"t{o}", summary=b"{}")
        for o in (3, 1, 2))))
    assert [s.ordinal for s in store.restore().sessions] == [1, 2, 3]
    assert all(s.summary is None for s in store.restore().sessions)


def test_content_goes_with_the_last_of_its_owners(store: HostStore) -> None:
    store.commit(Batch(server_seq=0, content=(
        ContentRecord(uri="b", content_type="t", data=b"1", owner="c1"),
        ContentRecord(uri="b", content_type="t", data=b"other", owner="c2"),  # same blob
        ContentRecord(uri="free", content_type="t", data=b"f"),
    )))
    assert store.content("b") == ContentRecord(uri="b", content_type="t", data=b"1", owner="c1",
                                               owners=("c1", "c2"))
    store.commit(Batch(server_seq=0, removed=("c1",)))
    assert store.content("b") is not None
    store.commit(Batch(server_seq=0, shared=(("c2", "c3"), ("c3", "c4"))))  # a fork of a fork
    stored = store.content("b")
    assert stored is not None and stored.owners == ("c2", "c3", "c4")
    store.commit(Batch(server_seq=0, removed=("c2", "c3")))  # two owners in one batch
    assert store.content("b") is not None
    store.commit(Batch(server_seq=0, removed=("c4",)))
    assert store.content("b") is None
    assert store.content("free") is not None


def test_removed_takes_snapshot_session_and_owner(store: HostStore) -> None:
    store.commit(Batch(
        server_seq=2,
        log=(log(1, "s"), log(2, "s")),
        snapshots=(ChannelRecord(uri="s", state=b"{}", seq=0),),
        sessions=(SessionRecord(uri="s", ordinal=0, created_at="t", summary=b"{}"),),
        owners=(("s", "p"), ("q", "s")),
    ))
    store.commit(Batch(server_seq=2, removed=("s",)))
    restored = store.restore()
    assert restored.channels == () and restored.sessions == () and restored.listed == frozenset()
    assert restored.owners == ()  # gone as a chat and as the owner of one
    assert [r.seq for r in store.log_after(0, 10)] == [1, 2]  # until compacted
    store.commit(Batch(server_seq=2, log_floor=2))
    assert store.log_after(0, 10) == ()


# --- the property: SQLiteStore is MemoryStore, observably -----------------------------

NAMES = ("c0", "c1", "c2", "c3")
BLOBS = ("b0", "b1", "b2")
names = st.sampled_from(NAMES)
small = st.binary(max_size=6)
batches = st.builds(
    Batch,
    server_seq=st.integers(0, 40),
    log=st.lists(st.builds(LogRecord, seq=st.integers(1, 40), channel=names, data=small,
                           only_to=st.none() | st.sampled_from(["k0", "k1"]),
                           ms=st.integers(0, 3)), max_size=6).map(tuple),
    snapshots=st.lists(st.builds(ChannelRecord, uri=names, state=st.none() | small,
                                 seq=st.integers(0, 40)), max_size=3).map(tuple),
    removed=st.lists(names, max_size=2).map(tuple),
    sessions=st.lists(st.builds(SessionRecord, uri=names, ordinal=st.integers(0, 3),
                                created_at=st.sampled_from(["t0", "t1"]),
                                summary=st.none() | small), max_size=3).map(tuple),
    owners=st.lists(st.tuples(names, names), max_size=2).map(tuple),
    clients=st.lists(st.builds(ClientRecord, client_id=st.sampled_from(["k0", "k1", "k2"]),
                               version=st.sampled_from(["0.6.0", "0.7.0"]),
                               touched=st.integers(0, 9), keep=st.booleans()),
                     max_size=2).map(tuple),
    forgotten_clients=st.lists(st.sampled_from(["k0", "k1", "k2"]), max_size=2).map(tuple),
    content=st.lists(st.builds(ContentRecord, uri=st.sampled_from(BLOBS),
                               content_type=st.sampled_from(["text/plain", "image/png"]),
                               data=small, owner=st.none() | names), max_size=3).map(tuple),
    shared=st.lists(st.tuples(names, names), max_size=2).map(tuple),
    log_floor=st.integers(0, 40),
)


def observe(store: HostStore) -> tuple[object, ...]:
    return (
        store.restore(),
        {uri: store.load_channel(uri) for uri in NAMES},
        store.log_after(0, 1000),
        store.log_after(10, 3),
        # small pages across rows of interleaved channels
        [store.log_after(seq, limit) for seq in (-1, 4, 17, 29) for limit in (1, 2, 5)],
        store.summaries([*NAMES, "nobody"]),
        {uri: store.content(uri) for uri in BLOBS},
    )


def check_rows(store: SQLiteStore) -> None:
    """The log's rows as schema 2 has them: ``first``/``last`` the smallest/largest seq
    of the records packed in ``data`` (in order, all of its channel), no row longer than
    the file's ``log_span``, a channel's rows not overlapping."""
    db = db_of(store)
    span = int(db.execute("SELECT value FROM meta WHERE key = 'log_span'").fetchone()[0])
    ends: dict[str, int] = {}
    for first, last, channel, data in db.execute(
            "SELECT first, last, channel, data FROM log ORDER BY first"):
        records: list[LogRecord] = []
        sqlite_store._unpack(channel, data, -(2**64), None, records)
        seqs = [r.seq for r in records]
        assert seqs == sorted(set(seqs)) and seqs[0] == first and seqs[-1] == last
        assert last - first <= span
        assert ends.get(channel, -(2**64)) < first
        ends[channel] = last


def host_like(batches: list[Batch], top: int = 0) -> list[Batch]:
    """The batches with their records renumbered as a host numbers them: increasing
    across the batches, with gaps (the channels, data and everything else as drawn)."""
    out = []
    for batch in batches:
        renumbered = []
        for record in batch.log:
            top += 1 + record.seq % 3
            renumbered.append(LogRecord(seq=top, channel=record.channel, data=record.data,
                                        only_to=record.only_to, ms=record.ms))
        out.append(attrs.evolve(batch, log=tuple(renumbered)))
    return out


def same_as_memory(before: list[Batch], after: list[Batch], span: int | None = None) -> None:
    """Apply the batches to a MemoryStore and to a SQLiteStore (whose rows span at most
    ``span`` seqs) and compare all that can be observed, before and after a reopen."""
    model = MemoryStore()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.sqlite3"
        default = sqlite_store._LOG_SPAN
        sqlite_store._LOG_SPAN = default if span is None else span
        try:
            store = open_sqlite(path)
        finally:
            sqlite_store._LOG_SPAN = default
        try:
            for batch in before:
                model.commit(batch)
                store.commit(batch)
                assert observe(store) == observe(model)
            check_rows(store)
        finally:
            store.close()
        with open_sqlite(path) as reopened:  # the file's log_span holds, not the default
            assert observe(reopened) == observe(model)
            for batch in after:
                model.commit(batch)
                reopened.commit(batch)
                assert observe(reopened) == observe(model)
            check_rows(reopened)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(batches, min_size=1, max_size=6), st.lists(batches, max_size=2))
def test_sqlite_store_is_memory_store(before: list[Batch], after: list[Batch]) -> None:
    same_as_memory(before, after)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from([0, 1, 3, 8]), st.booleans(),
       st.lists(batches, min_size=1, max_size=6), st.lists(batches, max_size=2))
def test_sqlite_store_is_memory_store_with_short_rows(
        span: int, ordered: bool, before: list[Batch], after: list[Batch]) -> None:
    # rows of at most ``span`` seqs: more rows per batch, rows split, log_after starting
    # from rows that begin before its seq; ``ordered``: the host's numbering, where every
    # batch only appends rows (random seqs reach into the rows already written)
    if ordered:
        both = host_like(before + after)
        before, after = both[:len(before)], both[len(before):]
    same_as_memory(before, after, span)


# --- the log's rows -------------------------------------------------------------------

INTERLEAVED = (
    # a turn on chat a, its session s between, another chat b, gaps
    log(10, "a", b"a10"), log(11, "s", b"s11"), log(12, "a", b"a12", only_to="k1", ms=5),
    log(13, "b", b"b13"), log(14, "a", b"a14"), log(17, "s", b"s17"), log(18, "a", b""),
)
INTERLEAVED_MORE = (
    log(19, "b", b"b19"), log(20, "a", bytes(range(256))),
    log(21, "s", b"s21", only_to="\u00e9t\u00e9"),
    log(25, "a", b"a25", ms=2**40), log(26, "b", b"b26"),
)


def test_a_batch_of_interleaved_channels(store: HostStore) -> None:
    store.commit(Batch(server_seq=18, log=INTERLEAVED, snapshots=(
        ChannelRecord(uri="a", state=b"a", seq=9), ChannelRecord(uri="s", state=b"s", seq=11),
        ChannelRecord(uri="b", state=b"b", seq=13))))
    store.commit(Batch(server_seq=26, log=INTERLEAVED_MORE))
    every = INTERLEAVED + INTERLEAVED_MORE
    for seq in range(5, 28):
        for limit in (1, 2, 3, 4, 7, 100):
            assert store.log_after(seq, limit) == tuple(r for r in every if r.seq > seq)[:limit]
    assert store.load_channel("a") == (ChannelRecord(uri="a", state=b"a", seq=9),
                                       tuple(r for r in every if r.channel == "a"))
    assert store.load_channel("s") == (ChannelRecord(uri="s", state=b"s", seq=11),
                                       (every[5], every[9]))
    assert store.load_channel("b") == (ChannelRecord(uri="b", state=b"b", seq=13),
                                       (every[7], every[11]))


def test_a_row_per_channel_and_commit(tmp_path: Path) -> None:
    with open_sqlite(tmp_path / "store.sqlite3") as store:
        store.commit(Batch(server_seq=18, log=INTERLEAVED))
        store.commit(Batch(server_seq=26, log=INTERLEAVED_MORE))
        rows = db_of(store).execute(
            "SELECT first, last, channel FROM log ORDER BY first").fetchall()
        assert rows == [(10, 18, "a"), (11, 17, "s"), (13, 13, "b"),
                        (19, 26, "b"), (20, 25, "a"), (21, 21, "s")]
        check_rows(store)
        # load_channel reads its channel's rows by the index
        plan = " ".join(str(row) for row in db_of(store).execute(
            "EXPLAIN QUERY PLAN SELECT data FROM log WHERE channel = ? AND last > ?"
            " ORDER BY last", ("a", 0)))
        assert "log_by_channel" in plan and "TEMP B-TREE" not in plan


def test_a_long_batch_is_split_into_rows(tmp_path: Path) -> None:
    with open_sqlite(tmp_path / "store.sqlite3") as store:
        # a channel's records spanning more than log_span seqs: more than one row
        records = (*(log(seq, "a" if seq % 5 else "s", str(seq).encode())
                     for seq in range(1, 3001)), log(5000, "a"), log(9000, "a"))
        store.commit(Batch(server_seq=9000, log=records))
        check_rows(store)
        rows = db_of(store).execute(
            "SELECT first, last, channel FROM log ORDER BY first").fetchall()
        assert [r for r in rows if r[2] == "a"] == [(1, 1024, "a"), (1026, 2049, "a"),
                                                   (2051, 2999, "a"), (5000, 5000, "a"),
                                                   (9000, 9000, "a")]
        assert store.log_after(0, 10_000) == records
        assert store.log_after(2047, 4) == records[2047:2051]
        assert store.log_after(3000, 4) == records[3000:]
        assert store.log_after(4999, 1) == (log(5000, "a"),)


def test_records_before_the_last_written(store: HostStore) -> None:
    # never from a host, which numbers its batches upward: a record may replace one
    # (of another channel), or land between a channel's rows, or before them all
    store.commit(Batch(server_seq=20, log=(log(10, "a"), log(11, "s"), log(12, "a"),
                                           log(20, "a"))))
    store.commit(Batch(server_seq=30, log=(log(25, "s"), log(30, "a"))))
    store.commit(Batch(server_seq=30, log=(log(15, "a", b"15"), log(11, "b", b"again"),
                                           log(5, "a", b"5"), log(26, "a", b"26"),
                                           log(15, "a", b"last wins"))))
    store.commit(Batch(server_seq=30, snapshots=(ChannelRecord(uri="a", state=None, seq=11),)))
    expected = (log(5, "a", b"5"), log(10, "a"), log(11, "b", b"again"), log(12, "a"),
                log(15, "a", b"last wins"), log(20, "a"), log(25, "s"), log(26, "a", b"26"),
                log(30, "a"))
    assert store.log_after(0, 100) == expected
    for limit in (1, 2, 3):
        assert store.log_after(11, limit) == expected[3:3 + limit]
    loaded = store.load_channel("a")
    assert loaded is not None and loaded[1] == tuple(
        r for r in expected if r.channel == "a" and r.seq > 11)
    if isinstance(store, SQLiteStore):
        check_rows(store)


def test_compaction_cuts_a_row_it_covers_in_part(store: HostStore) -> None:
    store.commit(Batch(server_seq=8, log=tuple(log(seq, "a" if seq < 7 else "s", str(seq).encode())
                                                for seq in range(1, 9)),
                       snapshots=(ChannelRecord(uri="a", state=b"{}", seq=3),)))
    # a's snapshot covers 1..3, the floor 1..5: a keeps 4..6; s (no snapshot) all
    store.commit(Batch(server_seq=8, log_floor=5))
    assert [r.seq for r in store.log_after(0, 100)] == [4, 5, 6, 7, 8]
    # the floor covers s's row in part
    store.commit(Batch(server_seq=8, log_floor=7))
    assert [r.seq for r in store.log_after(0, 100)] == [4, 5, 6, 8]
    store.commit(Batch(server_seq=8, snapshots=(ChannelRecord(uri="a", state=b"{}", seq=5),),
                       log_floor=7))
    assert [r.seq for r in store.log_after(0, 100)] == [6, 8]
    assert store.log_after(0, 1) == (log(6, "a", b"6"),)
    loaded = store.load_channel("a")
    assert loaded is not None and loaded[1] == (log(6, "a", b"6"),)
    if isinstance(store, SQLiteStore):
        assert db_of(store).execute("SELECT first, last, channel FROM log ORDER BY first"
                                    ).fetchall() == [(6, 6, "a"), (8, 8, "s")]
        check_rows(store)


def test_a_damaged_log_row_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with SQLiteStore(path) as store:
        store.commit(Batch(server_seq=3, log=(log(1, "a"), log(2, "a"), log(3, "a")),
                           snapshots=(ChannelRecord(uri="a", state=None, seq=0),)))
        for damaged in (b"\x01\x02", bytes(30), b"\xff" * 24):
            db_of(store).execute("UPDATE log SET data = ?", (damaged,))
            for read in (lambda: store.log_after(0, 10), lambda: store.load_channel("a")):
                with pytest.raises(StoreError) as error:
                    read()
                assert "corrupt" in assert_one_line(error, path)


# --- schema 1: a row per record --------------------------------------------------------

SCHEMA_1 = (  # as version 1 of this library created its stores
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE log(seq INTEGER PRIMARY KEY, channel TEXT NOT NULL, only_to TEXT,"
    " ms INTEGER NOT NULL, data BLOB NOT NULL)",
    "CREATE INDEX log_by_channel ON log(channel)",
    "CREATE TABLE channels(n INTEGER PRIMARY KEY, uri TEXT NOT NULL UNIQUE,"
    " seq INTEGER NOT NULL, state BLOB)",
    "CREATE INDEX channels_in_order ON channels(n, uri)",
    "CREATE TABLE sessions(n INTEGER PRIMARY KEY, uri TEXT NOT NULL UNIQUE,"
    " ordinal INTEGER NOT NULL, created_at TEXT NOT NULL, summary BLOB)",
    "CREATE TABLE owners(n INTEGER PRIMARY KEY, chat TEXT NOT NULL UNIQUE, session TEXT NOT NULL)",
    "CREATE TABLE clients(n INTEGER PRIMARY KEY, client_id TEXT NOT NULL UNIQUE,"
    " version TEXT NOT NULL, touched INTEGER NOT NULL, keep INTEGER NOT NULL)",
    "CREATE TABLE content(uri TEXT PRIMARY KEY, content_type TEXT NOT NULL, owner TEXT,"
    " data BLOB NOT NULL)",
    "CREATE TABLE content_owners(uri TEXT NOT NULL, channel TEXT NOT NULL,"
    " PRIMARY KEY(uri, channel)) WITHOUT ROWID",
    "CREATE INDEX content_owners_by_channel ON content_owners(channel, uri)",
    "INSERT INTO meta(key, value) VALUES ('library', 'agenthost-protocol'), ('server_seq', '0')",
)


def schema_1_store(path: Path, batch: Batch) -> None:
    """A store as version 1 wrote it, holding ``batch`` (its log, snapshots, sessions)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("BEGIN")
    for statement in SCHEMA_1:
        db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO meta(key, value) VALUES ('ahp_version', '0.7.0')")
    db.execute("UPDATE meta SET value = ? WHERE key = 'server_seq'", (str(batch.server_seq),))
    db.executemany("INSERT INTO log(seq, channel, only_to, ms, data) VALUES (?, ?, ?, ?, ?)",
                   [(r.seq, r.channel, r.only_to, r.ms, r.data) for r in batch.log])
    db.executemany("INSERT INTO channels(uri, seq, state) VALUES (?, ?, ?)",
                   [(c.uri, c.seq, c.state) for c in batch.snapshots])
    db.executemany("INSERT INTO sessions(uri, ordinal, created_at, summary) VALUES (?, ?, ?, ?)",
                   [(r.uri, r.ordinal, r.created_at, r.summary) for r in batch.sessions])
    db.execute("COMMIT")
    db.close()


def test_a_schema_1_store_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    rng = random.Random(5)
    records, seq = [], 0
    for _ in range(2500):  # interleaved, gaps, runs longer than a row may span
        seq += rng.choice((1, 1, 1, 2, 7))
        records.append(LogRecord(seq=seq, channel=rng.choice(NAMES), data=rng.randbytes(
            rng.randrange(0, 40)), only_to=rng.choice((None, None, "k0", "kl\u00e9")),
            ms=rng.randrange(2**41)))
    batch = Batch(
        server_seq=seq,
        log=tuple(records),
        snapshots=(ChannelRecord(uri="c0", state=b"{}", seq=0),
                   ChannelRecord(uri="c1", state=b"1", seq=1500),
                   ChannelRecord(uri="c2", state=None, seq=seq)),
        sessions=(SessionRecord(uri="c0", ordinal=0, created_at="t", summary=b"{}"),),
    )
    schema_1_store(path, batch)
    model = MemoryStore()
    model.commit(batch)

    def same(migrated: SQLiteStore) -> None:
        assert observe(migrated) == observe(model)
        for after in (0, 1, 999, 1500, 2047, 3000, seq - 3, seq):
            for limit in (1, 3, 100, 5000):
                assert migrated.log_after(after, limit) == model.log_after(after, limit)
        check_rows(migrated)

    with SQLiteStore(path) as migrated:
        migrated.compact_every = 0
        assert migrated.schema_version == SCHEMA_VERSION == 3
        assert migrated.previous_ahp_version == "0.7.0"
        same(migrated)
        db = db_of(migrated)
        assert db.execute("SELECT count(*) FROM log").fetchone()[0] < len(records)
        tables = {row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
        assert "log_1" not in tables and "log_by_channel" in tables
        # and on as any store: a commit, compaction
        more = Batch(server_seq=seq + 2, log=(log(seq + 1, "c1"), log(seq + 2, "c3")),
                     snapshots=(ChannelRecord(uri="c1", state=b"2", seq=2600),),
                     log_floor=2700)
        model.commit(more)
        migrated.commit(more)
        same(migrated)
    with SQLiteStore(path) as migrated:
        same(migrated)
    assert read_file_identity(path)[:2] == (APPLICATION_ID, SCHEMA_VERSION)


def test_an_empty_schema_1_store_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    schema_1_store(path, Batch(server_seq=0))
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.restore() == Restored()
        assert store.log_after(0, 10) == ()
        store.commit(Batch(server_seq=1, log=(log(1),)))
        assert store.log_after(0, 10) == (log(1),)


# --- durability -----------------------------------------------------------------------


def test_everything_is_there_after_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    batch = Batch(
        server_seq=12,
        log=(log(11, "c"), log(12, "c", b"\x00\xff binary")),
        snapshots=(ChannelRecord(uri="c", state=b'{"x":1}', seq=10),),
        sessions=(SessionRecord(uri="c", ordinal=0, created_at="t", summary=b"{}"),),
        owners=(("c", "s"),),
        clients=(ClientRecord(client_id="k", version="0.7.0", touched=5, keep=True),),
        content=(ContentRecord(uri="b", content_type="t", data=b"\x00" * 100_000, owner="c"),),
    )
    model = MemoryStore()
    model.commit(batch)
    with SQLiteStore(path) as store:
        store.commit(batch)
    assert sorted(os.listdir(tmp_path)) == ["store.sqlite3"]  # checkpointed, WAL gone
    with SQLiteStore(path) as store:
        assert observe(store) == observe(model)
        assert store.restore().server_seq == 12
        store.commit(Batch(server_seq=13, log=(log(13, "c"),)))
    with SQLiteStore(path) as store:
        assert store.restore().server_seq == 13


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="no SIGKILL here")
def test_a_commit_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    code = (
        "import os, signal, sys\n"
        "from agenthost_protocol.host.store import Batch, LogRecord\n"
        "from agenthost_protocol.sqlite_store import SQLiteStore\n"
        "store = SQLiteStore(sys.argv[1])\n"
        "store.commit(Batch(server_seq=7, log=(LogRecord(seq=7, channel='c', data=b'kept'),)))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert (tmp_path / "store.sqlite3-wal").exists()  # never checkpointed: read from the WAL
    with SQLiteStore(path) as store:
        assert store.log_after(0, 10) == (log(7, "c", b"kept"),)
        assert store.restore().server_seq == 7
        assert store.schema_version == SCHEMA_VERSION


def test_compaction_waits_for_the_floor_to_move(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "store.sqlite3") as store:
        assert store.compact_every == 1000
        store.commit(Batch(server_seq=600, log=tuple(log(seq, "gone") for seq in range(1, 601)),
                           log_floor=500))
        assert len(store.log_after(0, 10_000)) == 600  # may be dropped, not yet
        store.compact()
        assert [r.seq for r in store.log_after(0, 10_000)] == list(range(501, 601))
        store.commit(Batch(server_seq=1200, log=tuple(log(seq, "gone") for seq in range(601, 1201)),
                           log_floor=1100))
        assert len(store.log_after(0, 10_000)) == 700
        store.commit(Batch(server_seq=1600, log_floor=1500))  # 1000 past the last compaction
        assert store.log_after(0, 10_000) == ()


# --- failures: one line, nothing of the batch, the store still usable ------------------


def big_batch() -> Batch:
    return Batch(
        server_seq=5000,
        log=tuple(log(seq, "c", os.urandom(1000)) for seq in range(100, 2100)),
        snapshots=(ChannelRecord(uri="new", state=b"{}", seq=0),),
        sessions=(SessionRecord(uri="new", ordinal=9, created_at="t", summary=b"{}"),),
        content=(ContentRecord(uri="b", content_type="t", data=b"x" * 500_000, owner="new"),),
        removed=("c",),
    )


def test_a_full_disk_fails_the_whole_batch(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with SQLiteStore(path) as store:
        store.commit(Batch(server_seq=3, log=(log(1, "c"), log(3, "c")),
                           snapshots=(ChannelRecord(uri="c", state=b"{}", seq=1),)))
        before = observe(store)
        db = db_of(store)
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages + 20}")
        with pytest.raises(StoreError) as error:
            store.commit(big_batch())
        assert "database or disk is full" in assert_one_line(error, path)
        assert observe(store) == before
        store.commit(Batch(server_seq=4, log=(log(4, "c"),)))
        assert [r.seq for r in store.log_after(0, 10)] == [1, 3, 4]
        assert store.restore().server_seq == 4
    with SQLiteStore(path) as store:
        assert [r.seq for r in store.log_after(0, 10)] == [1, 3, 4]


def test_a_read_only_connection_fails_commits(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with SQLiteStore(path) as store:
        store.commit(Batch(server_seq=1, log=(log(1),)))
        db_of(store).execute("PRAGMA query_only = ON")
        with pytest.raises(StoreError) as error:
            store.commit(Batch(server_seq=2, log=(log(2),)))
        assert "readonly" in assert_one_line(error, path)
        assert store.restore().server_seq == 1
        db_of(store).execute("PRAGMA query_only = OFF")
        store.commit(Batch(server_seq=2, log=(log(2),)))
        assert store.restore().server_seq == 2


def test_a_read_only_file(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    path = directory / "store.sqlite3"
    SQLiteStore(path).close()
    path.chmod(0o444)
    directory.chmod(0o555)
    try:
        try:
            with open(path, "r+b"):
                writable = True
        except OSError:
            writable = False
        if writable:
            pytest.skip("permissions do not bind this user (root)")
        with pytest.raises(StoreError) as error:
            SQLiteStore(path)
        assert_one_line(error, path)
    finally:
        directory.chmod(0o755)
        path.chmod(0o644)


def test_read_errors_are_store_errors(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = SQLiteStore(path)
    db_of(store).close()  # behind the store's back
    for read in (store.restore, lambda: store.load_channel("c"), lambda: store.log_after(0, 1),
                 lambda: store.summaries(["s"]), lambda: store.content("b"),
                 lambda: store.commit(Batch(server_seq=1))):
        with pytest.raises(StoreError) as error:
            read()
        assert_one_line(error, path)
    store.close()


def test_what_sqlite_cannot_hold(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with SQLiteStore(path) as store:
        with pytest.raises(StoreError) as error:
            store.commit(Batch(server_seq=1, log=(log(1, "bad\ud800"),)))
        assert_one_line(error, path)
        with pytest.raises(StoreError):
            store.commit(Batch(server_seq=2**70))
        assert store.load_channel("bad\ud800") is None
        assert store.content("bad\ud800") is None
        assert store.summaries(["bad\ud800"]) == {}
        assert store.log_after(2**70, 5) == ()
        assert store.log_after(0, 2**70) == ()
        store.commit(Batch(server_seq=1, log=(log(1),)))  # usable still
        assert store.log_after(-(2**70), 2**70) == (log(1),)


def test_restore_leaves_the_collector_as_it_found_it(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "store.sqlite3") as store:
        assert gc.isenabled()
        store.restore()
        assert gc.isenabled()
        gc.disable()
        try:
            store.restore()
            assert not gc.isenabled()
        finally:
            gc.enable()


def test_closed(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = SQLiteStore(path)
    store.close()
    store.close()
    assert "closed" in repr(store)
    with pytest.raises(StoreError) as error:
        store.restore()
    assert "closed" in assert_one_line(error, path)


# --- the lock -------------------------------------------------------------------------

OPEN_IN_A_PROCESS = (
    "import sys\n"
    "from agenthost_protocol.host.store import StoreError\n"
    "from agenthost_protocol.sqlite_store import SQLiteStore\n"
    "try:\n"
    "    SQLiteStore(sys.argv[1]).close()\n"
    "except StoreError as e:\n"
    "    print(e)\n"
    "    sys.exit(3)\n"
    "print('opened')\n"
)


def open_elsewhere(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", OPEN_IN_A_PROCESS, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=False)


def test_one_store_per_file(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    first = SQLiteStore(path)
    with pytest.raises(StoreError) as error:
        SQLiteStore(path)
    assert "in use by another process" in assert_one_line(error, path)
    elsewhere = open_elsewhere(path)
    assert elsewhere.returncode == 3, elsewhere.stderr
    assert "in use by another process" in elsewhere.stdout
    assert str(path) in elsewhere.stdout
    first.commit(Batch(server_seq=1, log=(log(1),)))  # the first is unharmed
    first.close()
    assert open_elsewhere(path).stdout.strip() == "opened"
    with SQLiteStore(path) as second:
        assert second.restore().server_seq == 1


# --- refusals -------------------------------------------------------------------------


def real_store(path: Path) -> None:
    with SQLiteStore(path) as store:
        store.commit(Batch(
            server_seq=200,
            log=tuple(log(seq, f"c{seq % 5}", bytes(300)) for seq in range(1, 201)),
            snapshots=tuple(ChannelRecord(uri=f"c{i}", state=bytes(2000), seq=0) for i in range(5)),
            sessions=tuple(SessionRecord(uri=f"c{i}", ordinal=i, created_at="t", summary=b"{}")
                           for i in range(5)),
        ))


def random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(1).randbytes(8192))


def text_file(path: Path) -> None:
    path.write_text("these are notes\nnot a store\n")


def short_header(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + bytes(20))


def truncated_to_half(path: Path) -> None:
    real_store(path)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def header_and_a_little_garbage(path: Path) -> None:
    real_store(path)
    path.write_bytes(path.read_bytes()[:100] + random.Random(2).randbytes(300))


def header_and_garbage(path: Path) -> None:
    real_store(path)
    data = path.read_bytes()
    path.write_bytes(data[:100] + random.Random(3).randbytes(len(data) - 100))


def a_table_page_of_garbage(path: Path) -> None:
    real_store(path)
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'log'").fetchone()
    db.close()
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    data[start:start + page_size] = random.Random(4).randbytes(page_size)
    path.write_bytes(bytes(data))


def another_application(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE foo(x)")
    db.execute("INSERT INTO foo VALUES (1)")
    db.commit()
    db.close()


def another_application_in_wal_mode(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE foo(x)")
    db.commit()
    db.close()


def our_id_not_our_tables(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 1")
    db.execute("CREATE TABLE foo(x)")
    db.commit()
    db.close()


def our_id_not_our_tables_in_wal_mode(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("CREATE TABLE foo(x)")
    db.commit()
    db.close()


def our_id_schema_0_with_tables(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("CREATE TABLE meta(key, value)")
    db.commit()
    db.close()


def our_tables_another_library(path: Path) -> None:
    real_store(path)
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = 'something-else' WHERE key = 'library'")
    db.commit()
    db.close()


def newer_schema(path: Path) -> None:
    real_store(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()


def next_schema(path: Path) -> None:
    real_store(path)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()


REFUSED: list[tuple[Callable[[Path], None], str]] = [
    (random_bytes, "not an SQLite file; refusing to use it as a store"),
    (text_file, "not an SQLite file; refusing to use it as a store"),
    (short_header, "the store is corrupt"),
    (truncated_to_half, "the store is corrupt (truncated"),
    (header_and_a_little_garbage, "the store is corrupt"),
    (header_and_garbage, "the store is corrupt"),
    (a_table_page_of_garbage, "the store is corrupt"),
    (another_application, "not an agenthost-protocol store (another application's SQLite file)"),
    (another_application_in_wal_mode, "not an agenthost-protocol store"),
    (our_id_not_our_tables, "not an agenthost-protocol store"),
    (our_id_not_our_tables_in_wal_mode, "not an agenthost-protocol store"),
    (our_id_schema_0_with_tables, "not an agenthost-protocol store"),
    (our_tables_another_library, "not an agenthost-protocol store"),
    (newer_schema, "written by a newer agenthost-protocol (schema 99, this one reads up to "
                   f"{SCHEMA_VERSION}); upgrade it"),
    (next_schema, f"written by a newer agenthost-protocol (schema {SCHEMA_VERSION + 1}, this "
                  f"one reads up to {SCHEMA_VERSION}); upgrade it"),
]


@pytest.mark.parametrize(("make", "expected"), REFUSED, ids=[m.__name__ for m, _ in REFUSED])
def test_refused_and_left_as_it_was(tmp_path: Path, make: Callable[[Path], None],
                                    expected: str) -> None:
    path = tmp_path / "store.sqlite3"
    make(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    files = sorted(os.listdir(tmp_path))
    for _ in range(2):  # and again: the first refusal changed nothing
        with pytest.raises(StoreError) as error:
            SQLiteStore(path)
        message = assert_one_line(error, path)
        assert message.startswith(str(path))
        assert expected in message
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
        assert sorted(os.listdir(tmp_path)) == files


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="no SIGKILL here")
def test_a_newer_writer_killed_before_its_checkpoint(tmp_path: Path) -> None:
    # its schema is in the -wal, not yet in the header: SQLite reads it, the store refuses
    path = tmp_path / "store.sqlite3"
    real_store(path)
    code = (
        "import os, signal, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1])\n"
        f"db.execute('PRAGMA user_version = {SCHEMA_VERSION + 1}')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert (tmp_path / "store.sqlite3-wal").stat().st_size > 32
    with pytest.raises(StoreError) as error:
        SQLiteStore(path)
    assert f"newer agenthost-protocol (schema {SCHEMA_VERSION + 1}" in assert_one_line(
        error, path)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as error:
        SQLiteStore(tmp_path)
    assert_one_line(error, tmp_path)


def test_synchronous_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(tmp_path / "s", synchronous="sometimes")
    with SQLiteStore(tmp_path / "s", synchronous="full") as store:
        assert db_of(store).execute("PRAGMA synchronous").fetchone()[0] == 2


# --- creation, identity, migrations ---------------------------------------------------


def read_file_identity(path: Path) -> tuple[int, int, dict[str, str], str]:
    db = sqlite3.connect(path)
    try:
        return (db.execute("PRAGMA application_id").fetchone()[0],
                db.execute("PRAGMA user_version").fetchone()[0],
                dict(db.execute("SELECT key, value FROM meta").fetchall()),
                db.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        db.close()


def test_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "store.sqlite3"
    with SQLiteStore(path, ahp_version="0.7.0") as store:
        assert store.path == path
        assert store.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
        assert store.ahp_version == "0.7.0"
        assert store.previous_ahp_version is None
    assert read_file_identity(path) == (
        APPLICATION_ID, SCHEMA_VERSION,
        {"library": "agenthost-protocol", "ahp_version": "0.7.0", "server_seq": "0",
         "log_span": "1024"}, "wal")
    if os.name == "posix":
        assert path.parent.stat().st_mode & 0o777 == 0o700
        assert path.stat().st_mode & 0o077 == 0
    with SQLiteStore(path, ahp_version="0.8.0") as store:
        assert store.previous_ahp_version == "0.7.0"
        assert store.ahp_version == "0.8.0"


def test_an_empty_file_gets_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    path.touch()
    with SQLiteStore(path) as store:
        store.commit(Batch(server_seq=3))
    identity = read_file_identity(path)
    assert identity[:2] == (APPLICATION_ID, SCHEMA_VERSION)
    assert identity[2]["server_seq"] == "3"
    assert identity[2]["library"] == "agenthost-protocol"


def test_a_store_killed_while_being_created_is_finished(tmp_path: Path) -> None:
    # the first thing written is the application id: then the rest
    path = tmp_path / "store.sqlite3"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.close()
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.restore() == Restored()


def test_migrations_run_in_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store.sqlite3"
    with SQLiteStore(path) as store:
        store.commit(Batch(server_seq=5, log=(log(5),)))

    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE extra(x)")
        db.execute("INSERT INTO nowhere VALUES (1)")

    def to_next(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE extra(x)")
        db.execute("INSERT INTO extra VALUES (1)")

    monkeypatch.setattr(sqlite_store, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", (*MIGRATIONS, broken))
    with pytest.raises(StoreError) as error:
        SQLiteStore(path)
    assert "nowhere" in assert_one_line(error, path)
    assert read_file_identity(path)[1] == SCHEMA_VERSION  # nothing of it stayed

    monkeypatch.setattr(sqlite_store, "MIGRATIONS", (*MIGRATIONS, to_next))
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION + 1
        assert store.log_after(0, 10) == (log(5),)
        assert db_of(store).execute("SELECT x FROM extra").fetchall() == [(1,)]
    monkeypatch.undo()
    newer = f"schema {SCHEMA_VERSION + 1}, this one reads up to {SCHEMA_VERSION}"
    with pytest.raises(StoreError, match=newer):
        SQLiteStore(path)


# --- where it lives -------------------------------------------------------------------


def test_default_store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_store_path() == tmp_path / "data" / "agenthost-protocol" / "host.sqlite3"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    assert default_store_path() == (
        tmp_path / "home" / ".local" / "share" / "agenthost-protocol" / "host.sqlite3")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_store_path() == (
        tmp_path / "home" / ".local" / "share" / "agenthost-protocol" / "host.sqlite3")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert default_store_path() == (
        tmp_path / "home" / "Library" / "Application Support" / "agenthost-protocol"
        / "host.sqlite3")
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert default_store_path() == tmp_path / "local" / "agenthost-protocol" / "host.sqlite3"


def test_the_module_imports_no_more_than_it_says() -> None:
    source = Path(sqlite_store.__file__).read_text()
    imported = {line.split()[1] for line in source.splitlines()
                if line.startswith(("import ", "from "))}
    assert imported <= {"__future__", "gc", "os", "sqlite3", "stat", "struct", "sys", "threading",
                        "collections.abc", "pathlib", "types", "typing",
                        "agenthost_protocol.host.store", "agenthost_protocol._user_dirs"}
    assert "asyncio" not in source
