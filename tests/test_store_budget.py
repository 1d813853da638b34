"""Issue 29, defect 3 and its "Also": the store stays bounded whatever a token holder
sends, refuses changes past its budget, and refuses files it cannot use at start.

Real ``serve`` processes over loopback WebSockets; each is killed on the way out.
The sizes measured are printed (``pytest -s``) for the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.client import ActionReceived, RequestFailed, ResponseReceived
from agenthost_protocol.host.store import Batch, ChannelRecord, LogRecord
from agenthost_protocol.reconciler import ReceiveKind
from agenthost_protocol.sqlite_store import SQLiteStore, StoreFull

from ._aio_peer import ROOT, TIMEOUT, Peer, child_env, serve_command, serving, stop, ws_peer

pytest.importorskip("websockets")
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX files and signals")

MIB = 1024 * 1024


def run(coro: Coroutine[Any, Any, None], timeout: float = 600.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


def on_disk(path: Path) -> int:
    """The store's bytes on disk: the file and its write-ahead log."""
    total = 0
    for name in (str(path), f"{path}-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += os.path.getsize(name)
    return total


async def create(peer: Peer, n: int) -> str | None:
    """Create session ``n`` and subscribe to it; the refusal's message, if refused."""
    uri = f"ahp-session:/s{n}"
    answer = await peer.request("createSession", t.CreateSessionParams(channel=uri))
    if isinstance(answer, RequestFailed):
        assert answer.error is not None
        return answer.error.message
    assert isinstance(answer, ResponseReceived), answer
    await peer.subscribe(uri)
    return None


async def retitle(peer: Peer, uri: str, n: int, size: int) -> str | None:
    """Give ``uri`` a title of ``size`` bytes; the rejection's reason, if refused."""
    title = f"{n:06d}" + "t" * (size - 6)
    await peer.dispatch(uri, t.SessionTitleChangedAction(title=title))
    event = await peer.until(lambda e: isinstance(e, ActionReceived) and e.channel == uri
                             and e.received.kind in (ReceiveKind.ECHO, ReceiveKind.REJECTED),
                             timeout=TIMEOUT * 2)
    assert isinstance(event, ActionReceived)
    if event.received.rejection is not None:
        return event.received.rejection.reason
    return None


@posix_only
def test_titles_of_a_mib_stay_within_the_budget_then_are_refused_and_space_comes_back(
    tmp_path: Path,
) -> None:
    """400 titles of 1 MiB on one session: the store stays within its 48 MiB budget (the
    old store grew to 427 MB).  Then, served with a budget 8 MiB above what the file
    holds, titles that each stay (one per new session) fill it: refused with a rejection
    that says so, reads go on; disposing of sessions works over budget and makes room
    for a new title; the file is smaller after a restart than when full."""
    store = tmp_path / "host.sqlite3"
    budget = 48 * MIB

    async def main() -> None:
        async with serving(["--store", str(store), "--max-store-bytes", "48M"],
                           tmp_path / "a.err") as (proc, url):
            alice, conn = await ws_peer(url, "alice")
            await alice.initialize([ROOT])
            assert await create(alice, 0) is None
            peak = 0
            for n in range(400):
                assert await retitle(alice, "ahp-session:/s0", n, MIB) is None, n
                peak = max(peak, on_disk(store))
            print(f"\n400 x 1 MiB titles: file+wal peak {peak / MIB:.1f} MiB, "
                  f"end {on_disk(store) / MIB:.1f} MiB (budget {budget / MIB:.0f} MiB)")
            assert peak <= budget
            await conn.close()
            assert await stop(proc) == 0
        tight = os.path.getsize(store) + 8 * MIB
        args = ["--store", str(store), "--max-store-bytes", str(tight)]
        async with serving(args, tmp_path / "b.err") as (proc, url):
            alice, conn = await ws_peer(url, "alice")
            await alice.initialize([ROOT])
            await alice.subscribe("ahp-session:/s0")
            # titles that stay: one per session, until the budget refuses
            refused: str | None = None
            made: list[str] = []
            for n in range(1, 400):
                refused = await create(alice, n)
                if refused is not None:
                    break
                made.append(f"ahp-session:/s{n}")
                refused = await retitle(alice, made[-1], n, MIB)
                if refused is not None:
                    break
            full = on_disk(store)
            print(f"budget {tight / MIB:.1f} MiB: refused after {len(made)} sessions of a "
                  f"1 MiB title, file+wal {full / MIB:.1f} MiB: {refused}")
            assert refused is not None and "the store is full" in refused, refused
            assert "dispose of sessions" in refused and "--max-store-bytes" in refused
            assert full <= tight + 16 * MIB  # the write-ahead log may hold a bit more
            # a refused change changed nothing; reads go on
            again = await retitle(alice, "ahp-session:/s0", 10_000, MIB)
            assert again is not None and "the store is full" in again
            bob, bob_conn = await ws_peer(url, "bob")
            await bob.initialize([])
            snapshot = (await bob.subscribe("ahp-session:/s0")).result
            assert isinstance(snapshot, t.SubscribeResult) and snapshot.snapshot is not None
            state = snapshot.snapshot.state
            assert isinstance(state, t.SessionState) and state.title.startswith("000399")
            await bob_conn.close()
            # disposing is never refused by the budget, and makes room
            for uri in made:
                answer = await alice.request("disposeSession", t.DisposeSessionParams(
                    channel=uri))
                assert isinstance(answer, ResponseReceived), answer
            assert await retitle(alice, "ahp-session:/s0", 20_000, 64 * 1024) is None
            await conn.close()
            assert await stop(proc) == 0
        stopped = on_disk(store)
        async with serving(args, tmp_path / "c.err") as (proc, url):
            assert await stop(proc) == 0
        reopened = on_disk(store)
        print(f"disposed of {len(made)} sessions: full {full / MIB:.1f} MiB, after a stop "
              f"{stopped / MIB:.1f} MiB, after a restart {reopened / MIB:.1f} MiB")
        assert reopened < full

    run(main())


@posix_only
@pytest.mark.parametrize("kind", ["fifo", "directory", "dangling-link", "wal-fifo",
                                  "journal-fifo", "wal-directory"])
def test_serve_refuses_a_store_it_cannot_use_at_once_in_one_line(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO would block SQLite's open (or take its log into a pipe): refused at start
    with one line naming the file, never a hang or a traceback."""
    store = tmp_path / "host.sqlite3"
    if kind == "fifo":
        os.mkfifo(store)
    elif kind == "directory":
        store.mkdir()
    elif kind == "dangling-link":
        store.symlink_to(tmp_path / "gone" / "host.sqlite3")
    else:
        suffix, what = kind.split("-")
        sibling = Path(f"{store}-{suffix}")
        if what == "fifo":
            os.mkfifo(sibling)
        else:
            sibling.mkdir()
    done = subprocess.run(serve_command("--port", "0", "--store", str(store)),
                          capture_output=True, env=child_env(), timeout=TIMEOUT,
                          check=False)
    assert done.returncode == 1, done
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agenthost-protocol serve: "), lines
    assert str(store) in lines[0]
    assert done.stdout == b""


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A real file system of ``size`` mounted at ``path`` (a tmpfs: needs root or
    CAP_SYS_ADMIN; skipped with the reason otherwise), unmounted on the way out."""
    if not sys.platform.startswith("linux"):
        pytest.skip("a tmpfs mount is Linux's")
    path.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                        str(path)], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", b"") or b""
        pytest.skip(f"cannot mount a {size} tmpfs here (needs root or CAP_SYS_ADMIN): "
                    f"{e} {detail.decode(errors='replace').strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True,
                       timeout=30)


@posix_only
def test_a_full_file_system_refuses_changes_keeps_what_was_acknowledged_and_serves_reads(
    tmp_path: Path,
) -> None:
    """``serve`` on a real 2 MiB file system, filled by titles of 64 KiB: the changes
    the disk cannot take are refused (rejections naming it), reads go on, the host
    stops cleanly, and every acknowledged title is in the store (read back by a new
    ``serve`` from a copy of the files)."""
    with small_filesystem(tmp_path / "small", "2m") as small:
        store = small / "host.sqlite3"

        async def main() -> None:
            async with serving(["--store", str(store)], tmp_path / "a.err") as (proc, url):
                alice, conn = await ws_peer(url, "alice")
                await alice.initialize([ROOT])
                assert await create(alice, 0) is None
                acknowledged = None
                refused: list[str] = []
                for n in range(200):
                    reason = await retitle(alice, "ahp-session:/s0", n, 64 * 1024)
                    if reason is None:
                        assert not refused, "a title accepted after the disk filled"
                        acknowledged = n
                    else:
                        refused.append(reason)
                        if len(refused) == 3:
                            break
                print(f"\n2 MiB tmpfs: {acknowledged} titles of 64 KiB acknowledged, then "
                      f"refused: {refused[0]}")
                assert acknowledged is not None and refused
                assert all("full" in reason for reason in refused), refused
                # reads go on: a new client gets the acknowledged state
                bob, bob_conn = await ws_peer(url, "bob")
                await bob.initialize([])
                result = (await bob.subscribe("ahp-session:/s0")).result
                assert isinstance(result, t.SubscribeResult) and result.snapshot is not None
                state = result.snapshot.state
                assert isinstance(state, t.SessionState)
                assert state.title.startswith(f"{acknowledged:06d}")
                assert isinstance(await bob.request("ping", t.PingParams()), ResponseReceived)
                await bob_conn.close()
                await conn.close()
                assert await stop(proc) == 0
            # what was acknowledged is stored: read back from a copy with room to spare
            copy = tmp_path / "copy.sqlite3"
            for suffix in ("", "-wal"):
                if os.path.exists(f"{store}{suffix}"):
                    shutil.copyfile(f"{store}{suffix}", f"{copy}{suffix}")
            async with serving(["--store", str(copy)], tmp_path / "b.err") as (proc, url):
                carol, conn = await ws_peer(url, "carol")
                await carol.initialize([])
                result = (await carol.subscribe("ahp-session:/s0")).result
                assert isinstance(result, t.SubscribeResult) and result.snapshot is not None
                state = result.snapshot.state
                assert isinstance(state, t.SessionState)
                assert state.title.startswith(f"{acknowledged:06d}")
                await conn.close()
                assert await stop(proc) == 0

        run(main(), timeout=300)


def test_a_store_at_sqlites_page_limit_refuses_then_recovers_by_disposal(
    tmp_path: Path,
) -> None:
    """The emulation that runs anywhere: SQLite's own ``max_page_count`` makes the file
    "full" (SQLITE_FULL, as a full disk).  Over a real socket: titles refused, reads
    served, a disposal goes through and makes room for new titles; after a restart of
    the host every acknowledged title is there."""
    from ._aio_hosts import demo_host

    path = tmp_path / "host.sqlite3"

    async def main() -> None:
        store = SQLiteStore(path)
        store.compact_every = 0  # as small a log as can be: the limit is what fills
        try:
            async with demo_host(store=store) as demo:
                alice, conn = await ws_peer(demo.url, "alice")
                await alice.initialize([ROOT])
                for n in range(3):
                    assert await create(alice, n) is None
                pages = store._conn().execute("PRAGMA page_count").fetchone()[0]
                # room for a few titles of 64 KiB (4 KiB pages) and no more
                store._conn().execute(f"PRAGMA max_page_count = {pages + 240}")
                acknowledged: dict[int, int] = {}
                refused = None
                for n in range(60):
                    s = n % 3
                    reason = await retitle(alice, f"ahp-session:/s{s}", n, 64 * 1024)
                    if reason is not None:
                        refused = reason
                        break
                    acknowledged[s] = n
                assert refused is not None and "full" in refused, refused
                print(f"\nmax_page_count: {len(acknowledged)} sessions titled, then: {refused}")
                assert isinstance(await alice.request("ping", t.PingParams()), ResponseReceived)
                answer = await alice.request("disposeSession", t.DisposeSessionParams(
                    channel="ahp-session:/s2"))
                assert isinstance(answer, ResponseReceived), answer
                acknowledged.pop(2, None)
                store.compact()
                # the disposed session's pages serve the next title
                assert await retitle(alice, "ahp-session:/s0", 1000, 16 * 1024) is None
                acknowledged[0] = 1000
                await conn.close()
        finally:
            store.close()
        store = SQLiteStore(path)
        try:
            async with demo_host(store=store) as demo:
                for s, n in acknowledged.items():
                    state = demo.host.state(f"ahp-session:/s{s}")
                    assert isinstance(state, t.SessionState)
                    assert state.title.startswith(f"{n:06d}"), (s, n)
                assert not demo.host.has_channel("ahp-session:/s2")
        finally:
            store.close()

    run(main(), timeout=120)


@posix_only
def test_sessions_and_chats_are_bounded_per_host_stored_ones_included(tmp_path: Path) -> None:
    """``serve --max-sessions 4 --max-chats-per-session 3``: the fifth session and the
    fourth chat are refused with -32600 naming the limit, nothing is created; disposing
    makes room; after a restart the stored sessions still count."""
    store = tmp_path / "host.sqlite3"
    args = ["--store", str(store), "--max-sessions", "4", "--max-chats-per-session", "3"]

    async def refused_create(peer: Peer, n: int) -> RequestFailed:
        answer = await peer.request("createSession", t.CreateSessionParams(
            channel=f"ahp-session:/s{n}"))
        assert isinstance(answer, RequestFailed) and answer.error is not None, answer
        assert answer.error.code == -32600, answer.error
        assert "too many sessions" in answer.error.message
        assert "at most 4" in answer.error.message
        return answer

    async def main() -> None:
        async with serving(args, tmp_path / "a.err") as (proc, url):
            alice, conn = await ws_peer(url, "alice")
            await alice.initialize([ROOT])
            for n in range(4):
                assert await create(alice, n) is None
            await refused_create(alice, 4)
            # chats: the default one and two more, then refused
            for k in (1, 2):
                answer = await alice.request("createChat", t.CreateChatParams(
                    channel="ahp-session:/s0", chat=f"ahp-chat:/s0/extra{k}"))
                assert isinstance(answer, ResponseReceived), answer
            answer = await alice.request("createChat", t.CreateChatParams(
                channel="ahp-session:/s0", chat="ahp-chat:/s0/extra3"))
            assert isinstance(answer, RequestFailed) and answer.error is not None, answer
            assert answer.error.code == -32600 and "too many chats" in answer.error.message
            state = alice.client.confirmed("ahp-session:/s0")
            assert isinstance(state, t.SessionState) and len(state.chats) == 3
            # room again once disposed of
            answer = await alice.request("disposeChat", t.DisposeChatParams(
                channel="ahp-chat:/s0/extra1"))
            assert isinstance(answer, ResponseReceived), answer
            answer = await alice.request("createChat", t.CreateChatParams(
                channel="ahp-session:/s0", chat="ahp-chat:/s0/extra3"))
            assert isinstance(answer, ResponseReceived), answer
            answer = await alice.request("disposeSession", t.DisposeSessionParams(
                channel="ahp-session:/s3"))
            assert isinstance(answer, ResponseReceived), answer
            assert await create(alice, 5) is None
            await refused_create(alice, 6)
            await conn.close()
            assert await stop(proc) == 0
        async with serving(args, tmp_path / "b.err") as (proc, url):
            bob, conn = await ws_peer(url, "bob")
            await bob.initialize([ROOT])
            await refused_create(bob, 7)
            await conn.close()
            assert await stop(proc) == 0

    run(main(), timeout=120)


# -- the store by itself ------------------------------------------------------------------


def _title(seq: int, size: int = MIB) -> LogRecord:
    return LogRecord(seq=seq, channel="ahp-session:/a", data=b"t" * size)


def test_the_log_is_compacted_by_bytes_and_the_file_gives_them_back(tmp_path: Path) -> None:
    """200 envelopes of 1 MiB with a floor 20 behind: compacted every few megabytes, not
    every 1,000 seqs (which let 1,000 MiB pile up), and the file does not keep the
    pages it freed."""
    path = tmp_path / "s.sqlite3"
    with SQLiteStore(path) as store:
        peak = 0
        for seq in range(1, 201):
            store.commit(Batch(server_seq=seq, log=(_title(seq),), snapshots=(
                ChannelRecord(uri="ahp-session:/a", state=b"{}", seq=seq),),
                log_floor=max(0, seq - 20)))
            peak = max(peak, on_disk(path))
        assert store.size_bytes < 32 * MIB
    assert peak < 48 * MIB, peak
    assert os.path.getsize(path) < 32 * MIB


def test_a_store_from_before_auto_vacuum_is_converted_and_shrinks_at_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.sqlite3"
    with SQLiteStore(path) as store:
        store.commit(Batch(server_seq=40, log=tuple(_title(seq) for seq in range(1, 41))))
    # as earlier versions made them: no auto-vacuum, and 40 MiB of free pages
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = DELETE")
    db.execute("PRAGMA auto_vacuum = NONE")
    db.execute("VACUUM")
    db.execute("DELETE FROM log")
    assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    db.close()
    before = os.path.getsize(path)
    assert before > 40 * MIB
    with SQLiteStore(path) as store:
        assert store.restore().server_seq == 40
        assert store._conn().execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    assert os.path.getsize(path) < MIB, (before, os.path.getsize(path))


def test_a_budget_refuses_growth_and_lets_removals_and_rejections_through(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.sqlite3"
    with SQLiteStore(path, max_bytes=16 * MIB) as store:
        seq = 0
        full = None
        for n in range(40):
            seq += 1
            uri = f"ahp-session:/s{n}"
            try:
                store.commit(Batch(server_seq=seq, log=(
                    LogRecord(seq=seq, channel=uri, data=b"x" * MIB),), snapshots=(
                    ChannelRecord(uri=uri, state=b"s" * MIB, seq=seq),)))
            except StoreFull as e:
                full = str(e)
                break
        assert full is not None and "the store is full" in full and str(path) in full
        assert store.size_bytes <= 16 * MIB
        assert store.load_channel(f"ahp-session:/s{n}") is None  # all or nothing
        seq += 1  # a rejection (addressed to one client) is written all the same
        store.commit(Batch(server_seq=seq, log=(
            LogRecord(seq=seq, channel="ahp-session:/s0", data=b"r" * 1000, only_to="c"),)))
        seq += 1  # and a removal, which frees the snapshots' pages at once
        store.commit(Batch(server_seq=seq, log=(
            LogRecord(seq=seq, channel="ahp-root:", data=b"gone"),),
            removed=tuple(f"ahp-session:/s{k}" for k in range(n)), log_floor=seq))
        assert store.size_bytes < 4 * MIB
        seq += 1
        store.commit(Batch(server_seq=seq, log=(
            LogRecord(seq=seq, channel="ahp-session:/new", data=b"x" * MIB),)))
    with pytest.raises(ValueError, match="max_bytes"):
        SQLiteStore(path, max_bytes=0)
