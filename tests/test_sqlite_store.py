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
                                                data=b"one", owner="c")
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
    assert store.content("b") == ContentRecord(uri="b", content_type="t", data=b"1", owner="c1")
    store.commit(Batch(server_seq=0, removed=("c1",)))
    assert store.content("b") is not None
    store.commit(Batch(server_seq=0, shared=(("c2", "c3"), ("c3", "c4"))))  # a fork of a fork
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
        store.summaries([*NAMES, "nobody"]),
        {uri: store.content(uri) for uri in BLOBS},
    )


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(batches, min_size=1, max_size=6), st.lists(batches, max_size=2))
def test_sqlite_store_is_memory_store(before: list[Batch], after: list[Batch]) -> None:
    model = MemoryStore()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "store.sqlite3"
        store = open_sqlite(path)
        try:
            for batch in before:
                model.commit(batch)
                store.commit(batch)
                assert observe(store) == observe(model)
        finally:
            store.close()
        with open_sqlite(path) as reopened:
            assert observe(reopened) == observe(model)
            for batch in after:
                model.commit(batch)
                reopened.commit(batch)
                assert observe(reopened) == observe(model)


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
    (newer_schema, "written by a newer agenthost-protocol (schema 99, this one reads up to 1); "
                   "upgrade it"),
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
        "db.execute('PRAGMA user_version = 2')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert (tmp_path / "store.sqlite3-wal").stat().st_size > 32
    with pytest.raises(StoreError) as error:
        SQLiteStore(path)
    assert "newer agenthost-protocol (schema 2" in assert_one_line(error, path)


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
        {"library": "agenthost-protocol", "ahp_version": "0.7.0", "server_seq": "0"}, "wal")
    if os.name == "posix":
        assert path.parent.stat().st_mode & 0o777 == 0o700
        assert path.stat().st_mode & 0o077 == 0
    with SQLiteStore(path, ahp_version="0.8.0") as store:
        assert store.previous_ahp_version == "0.7.0"
        assert store.ahp_version == "0.8.0"


def test_an_empty_file_gets_schema_1(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    path.touch()
    with SQLiteStore(path) as store:
        store.commit(Batch(server_seq=3))
    identity = read_file_identity(path)
    assert identity[:2] == (APPLICATION_ID, 1)
    assert identity[2]["server_seq"] == "3"
    assert identity[2]["library"] == "agenthost-protocol"


def test_a_store_killed_while_being_created_is_finished(tmp_path: Path) -> None:
    # the first thing written is the application id: then the rest
    path = tmp_path / "store.sqlite3"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.close()
    with SQLiteStore(path) as store:
        assert store.schema_version == 1
        assert store.restore() == Restored()


def test_migrations_run_in_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store.sqlite3"
    with SQLiteStore(path) as store:
        store.commit(Batch(server_seq=5, log=(log(5),)))

    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE extra(x)")
        db.execute("INSERT INTO nowhere VALUES (1)")

    def to_2(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE extra(x)")
        db.execute("INSERT INTO extra VALUES (1)")

    monkeypatch.setattr(sqlite_store, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", (*MIGRATIONS, broken))
    with pytest.raises(StoreError) as error:
        SQLiteStore(path)
    assert "nowhere" in assert_one_line(error, path)
    assert read_file_identity(path)[1] == 1  # nothing of it stayed

    monkeypatch.setattr(sqlite_store, "MIGRATIONS", (*MIGRATIONS, to_2))
    with SQLiteStore(path) as store:
        assert store.schema_version == 2
        assert store.log_after(0, 10) == (log(5),)
        assert db_of(store).execute("SELECT x FROM extra").fetchall() == [(1,)]
    monkeypatch.undo()
    with pytest.raises(StoreError, match="schema 2, this one reads up to 1"):
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
                        "agenthost_protocol.host.store"}
    assert "asyncio" not in source
