"""Issue 29, defect 3 and its "Also": the store stays bounded whatever a token holder
sends, refuses changes past its budget, and refuses files it cannot use at start.

Real ``serve`` processes over loopback WebSockets; each is killed on the way out.
The sizes measured are printed (``pytest -s``) for the record.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import types as t
from agenthost_protocol.client import ActionReceived, RequestFailed, ResponseReceived
from agenthost_protocol.reconciler import ReceiveKind

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
        try:
            total += os.path.getsize(name)
        except FileNotFoundError:
            pass
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
    """400 × 1 MiB titles on one session: the store stays within its 48 MiB budget (the
    old store grew to 427 MB).  Then titles that each stay (one per new session) fill
    it: refused with a rejection that says so, and the host goes on; disposing of
    sessions works over budget, and the file shrinks once compacted."""
    store = tmp_path / "host.sqlite3"
    budget = 48 * MIB

    async def main() -> None:
        async with serving(["--store", str(store), "--max-store-bytes", "48M"],
                           tmp_path / "serve.err") as (proc, url):
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

            # titles that stay: one per session, until the budget refuses
            refused: str | None = None
            made = 1
            for n in range(1, 200):
                refused = await create(alice, n)
                if refused is not None:
                    break
                made += 1
                refused = await retitle(alice, f"ahp-session:/s{n}", n, MIB)
                if refused is not None:
                    break
                peak = max(peak, on_disk(store))
            print(f"refused after {made} sessions of a 1 MiB title, file+wal peak "
                  f"{peak / MIB:.1f} MiB: {refused}")
            assert refused is not None and "the store is full" in refused, refused
            assert "dispose of sessions" in refused and "--max-store-bytes" in refused
            assert peak <= budget + 16 * MIB  # the write-ahead log may hold a bit more
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

            # disposing frees space, over budget too
            full = on_disk(store)
            for n in range(1, made):
                answer = await alice.request("disposeSession", t.DisposeSessionParams(
                    channel=f"ahp-session:/s{n}"))
                assert isinstance(answer, ResponseReceived), answer
            # the log keeps the replay window: more titles push the disposed out of it
            for n in range(30):
                assert await retitle(alice, "ahp-session:/s0", 20_000 + n, MIB) is None, n
            after = on_disk(store)
            print(f"disposed {made - 1} sessions: {full / MIB:.1f} MiB -> "
                  f"{after / MIB:.1f} MiB")
            assert after < full - 8 * MIB
            await conn.close()
            assert await stop(proc) == 0
        stopped = on_disk(store)
        print(f"after a stop: {stopped / MIB:.1f} MiB")
        assert stopped <= after

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
