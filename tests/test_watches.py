"""File watches: the pure glob matcher, the core's unsubscribe hook, and watches over
real files and a real loopback socket (``docs/files.md``, Watches)."""

from __future__ import annotations

import asyncio
import fnmatch
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol import types as t
from agenthost_protocol.aio import ServerLimits
from agenthost_protocol.aio.files import Root, file_uri
from agenthost_protocol.aio.watches import WatchService, compile_globs, glob_matches
from agenthost_protocol.host import ConnectionClosed, Host, Unsubscribed

from ._files_peer import NOW, Peer, make_server, serving

pytest.importorskip("watchfiles")


def run(coro: Coroutine[Any, Any, None], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


# -- globs (pure) -------------------------------------------------------------------------

segment_chars = st.sampled_from("ab.*?")
plain = st.text(st.sampled_from("ab.x"), min_size=1, max_size=8)


@given(st.text(segment_chars, min_size=1, max_size=8), plain)
def test_one_segment_globs_match_as_fnmatch_does(pattern: str, name: str) -> None:
    if pattern.strip(".") == "" or pattern in (".",):
        return
    assert glob_matches(compile_globs([pattern]), name) == fnmatch.fnmatchcase(name, pattern)


@pytest.mark.parametrize(("pattern", "path", "matches"), [
    ("**/node_modules/**", "node_modules", True),
    ("**/node_modules/**", "a/b/node_modules/x/y.js", True),
    ("**/node_modules/**", "a/node_modulesx/y.js", False),
    ("**/*.ts", "src/deep/a.ts", True),
    ("**/*.ts", "a.ts", True),
    ("**/*.ts", "a.tsx", False),
    ("*.ts", "src/a.ts", False),
    ("src", "src/a/b.txt", True),  # a plain path names its subtree
    ("./src/*.py", "src/a.py", True),
    ("{src,lib}/**/*.{js,ts}", "lib/x/y.ts", True),
    ("{src,lib}/**/*.{js,ts}", "doc/x/y.ts", False),
    ("[a-c]?.txt", "b1.txt", True),
    ("[!a-c]?.txt", "b1.txt", False),
    (".git", ".git/objects/ab", True),
])
def test_glob_examples(pattern: str, path: str, matches: bool) -> None:
    assert glob_matches(compile_globs([pattern]), path) is matches


def test_globs_are_bounded() -> None:
    # would take for ever with a backtracking matcher
    compiled = compile_globs(["*a*a*a*a*a*a*a*a*a*a*a*a*b", "**/**/**/**/**/**/x/**/**/y"])
    assert not glob_matches(compiled, "a" * 4000)
    assert not glob_matches(compiled, "/".join(["x"] * 500))
    with pytest.raises(ValueError, match="alternatives"):
        compile_globs(["{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"])
    with pytest.raises(ValueError):
        compile_globs(["x"] * 65)


# -- the core's hook ----------------------------------------------------------------------


def test_the_core_says_who_left_a_channel() -> None:
    host = Host(clock=lambda: NOW)
    host.add_channel("ahp-resource-watch:/w",
                     t.ResourceWatchState(root="file:///", recursive=False))
    conns = [host.connect(), host.connect()]
    for i, conn in enumerate(conns):
        conn.receive_data(f'{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{'
                          f'"protocolVersions":["0.7.0"],"clientId":"c{i}",'
                          f'"initialSubscriptions":["ahp-resource-watch:/w"]}}}}')
    list(host.events())
    assert host.subscribers("ahp-resource-watch:/w") == tuple(conns)
    conns[0].receive_data('{"jsonrpc":"2.0","method":"unsubscribe","params":'
                          '{"channel":"ahp-resource-watch:/w"}}')
    conns[0].receive_data('{"jsonrpc":"2.0","method":"unsubscribe","params":'
                          '{"channel":"ahp-resource-watch:/w"}}')  # not subscribed: no event
    events = list(host.events())
    assert events == [Unsubscribed(connection=conns[0], channel="ahp-resource-watch:/w")]
    assert host.subscribers("ahp-resource-watch:/w") == (conns[1],)
    # a reconnect that no longer names it leaves it
    conns[1].receive_data('{"jsonrpc":"2.0","id":2,"method":"reconnect","params":{'
                          '"clientId":"c1","lastSeenServerSeq":0,"subscriptions":[]}}')
    events = list(host.events())
    assert Unsubscribed(connection=conns[1], channel="ahp-resource-watch:/w") in events
    assert host.subscribers("ahp-resource-watch:/w") == ()
    conns[1].receive_data('{"jsonrpc":"2.0","id":3,"method":"subscribe","params":'
                          '{"channel":"ahp-resource-watch:/w"}}')
    list(host.events())
    conns[1].connection_lost()
    (closed,) = list(host.events())
    assert isinstance(closed, ConnectionClosed)
    assert closed.subscriptions == ("ahp-resource-watch:/w",)
    assert host.subscribers("ahp-resource-watch:/w") == ()
    assert host.subscribers("ahp-nothing:/x") == ()


# -- watches over real files --------------------------------------------------------------


def watching(service: WatchService) -> list[str]:
    """The running watches (a function: mypy would narrow the property for good)."""
    return list(service.watches)


async def changes_until(peer: Peer, channel: str, want: set[tuple[str, str]],
                        timeout: float = 10.0) -> set[tuple[str, str]]:
    """Every change reported on ``channel`` until ``want`` was seen (or the timeout)."""
    seen: set[tuple[str, str]] = set()
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not want <= seen:
        left = end - loop.time()
        if left <= 0:
            break
        try:
            envelope = await peer.action(channel, timeout=left)
        except asyncio.TimeoutError:
            break
        assert envelope["action"]["type"] == "resourceWatch/changed"
        items = envelope["action"]["changes"]["items"]
        assert items  # never an empty batch
        seen.update((item["uri"], item["type"]) for item in items)
    return seen


async def watch(peer: Peer, target: Path, **params: Any) -> str:
    channel: str = (await peer.ok("createResourceWatch", uri=file_uri(str(target)),
                                  **params))["channel"]
    assert channel.startswith("ahp-resource-watch:/")
    snapshot = (await peer.ok("subscribe", channel=channel))["snapshot"]
    assert snapshot["state"]["root"] == file_uri(str(target))
    return channel


def test_a_watch_sees_creations_changes_and_deletions(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    base = file_uri(str(root))

    async def main() -> None:
        async with serving(make_server([Root(path=str(root))])) as connect:
            peer = await connect()
            flat = await watch(peer, root)
            deep = await watch(peer, root, recursive=True,
                               excludes={"items": ["**/*.log"]})
            only_md = await watch(peer, root, recursive=True, includes={"items": ["*.md"]})
            await asyncio.sleep(0.2)  # the watchers are up
            (root / "a.txt").write_text("one")
            seen = await changes_until(peer, flat, {(f"{base}/a.txt", "added")})
            assert (f"{base}/a.txt", "added") in seen
            (root / "sub" / "deep.txt").write_text("deep")
            (root / "sub" / "noise.log").write_text("noise")
            (root / "b.md").write_text("md")
            seen = await changes_until(peer, deep, {(f"{base}/sub/deep.txt", "added"),
                                                    (f"{base}/b.md", "added")})
            assert {(f"{base}/sub/deep.txt", "added"), (f"{base}/b.md", "added")} <= seen
            assert not any(uri.endswith(".log") for uri, _ in seen)
            seen = await changes_until(peer, only_md, {(f"{base}/b.md", "added")})
            assert {uri for uri, _ in seen} <= {f"{base}/b.md"}
            await asyncio.sleep(0.3)
            (root / "a.txt").write_text("two")
            seen = await changes_until(peer, flat, {(f"{base}/a.txt", "updated")})
            # not recursive: the file in sub/ was never reported there
            assert not any("/sub/" in uri for uri, _ in seen)
            assert (f"{base}/a.txt", "updated") in seen
            (root / "a.txt").unlink()
            seen = await changes_until(peer, flat, {(f"{base}/a.txt", "deleted")})
            assert (f"{base}/a.txt", "deleted") in seen

    run(main())


def test_a_watch_is_released_with_its_last_subscriber(tmp_path: Path) -> None:
    async def main() -> None:
        server = make_server([Root(path=str(tmp_path))])
        service = next(s for s in server.services if isinstance(s, WatchService))
        async with serving(server) as connect:
            first, second = await connect(), await connect()
            channel = await watch(first, tmp_path)
            await second.ok("subscribe", channel=channel)
            first.notify("unsubscribe", channel=channel)
            await first.ok("ping")
            assert watching(service) == [channel]  # the second still listens
            second.writer.close()  # its connection drops
            for _ in range(100):
                if not watching(service):
                    break
                await asyncio.sleep(0.05)
            assert not watching(service)
            assert await first.code("subscribe", channel=channel) == -32008
            # an unsubscribe of the only subscriber releases it at once
            channel = await watch(first, tmp_path)
            first.notify("unsubscribe", channel=channel)
            await first.ok("ping")
            assert not watching(service)
            assert not server.host.has_channel(channel)

    run(main())


def test_a_watch_nobody_subscribes_to_does_not_stay(tmp_path: Path) -> None:
    async def main() -> None:
        server = make_server([Root(path=str(tmp_path))], unclaimed_timeout=0.3)
        service = next(s for s in server.services if isinstance(s, WatchService))
        async with serving(server) as connect:
            peer = await connect()
            await peer.ok("createResourceWatch", uri=file_uri(str(tmp_path)))
            assert len(watching(service)) == 1
            await asyncio.sleep(0.6)
            assert not watching(service)
            other = await connect()
            await other.ok("createResourceWatch", uri=file_uri(str(tmp_path)))
            other.writer.close()  # its maker leaves without subscribing
            for _ in range(100):
                if not watching(service):
                    break
                await asyncio.sleep(0.05)
            assert not watching(service)

    run(main())


def test_the_watch_budget(tmp_path: Path) -> None:
    async def main() -> None:
        server = make_server([Root(path=str(tmp_path))], limits=ServerLimits(max_watches=2))
        async with serving(server) as connect:
            peer = await connect()
            assert await peer.code("createResourceWatch",
                                   uri=file_uri(str(tmp_path / "missing"))) == -32008
            assert await peer.code("createResourceWatch", uri=file_uri(str(tmp_path)),
                                   includes={"items": ["{a,b}" * 10]}) == -32602
            first = await watch(peer, tmp_path)
            await watch(peer, tmp_path)
            answer = await peer.call("createResourceWatch", uri=file_uri(str(tmp_path)))
            assert answer["error"]["code"] == -32600
            assert "at most 2" in answer["error"]["message"]
            peer.notify("unsubscribe", channel=first)
            await watch(peer, tmp_path)  # room again

    run(main())


def test_a_flood_of_changes_is_bounded(tmp_path: Path) -> None:
    async def main() -> None:
        server = make_server([Root(path=str(tmp_path))], debounce_ms=300)
        service = next(s for s in server.services if isinstance(s, WatchService))
        service.max_pending = 20
        async with serving(server) as connect:
            peer = await connect()
            channel = await watch(peer, tmp_path)
            await asyncio.sleep(0.2)
            for i in range(200):
                (tmp_path / f"f{i}").write_text("x")
            root = file_uri(str(tmp_path))
            seen = await changes_until(peer, channel, {(root, "updated")})
            # the overflow says "rescan the watched URI" instead of 200 entries
            assert (root, "updated") in seen
            assert len(seen) < 200

    run(main())


def test_without_watchfiles_a_watch_is_refused_clearly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "watchfiles", None)

    async def main() -> None:
        async with serving(make_server([Root(path=str(tmp_path))])) as connect:
            peer = await connect()
            answer = await peer.call("createResourceWatch", uri=file_uri(str(tmp_path)))
            assert answer["error"]["code"] == -32601
            assert "watchfiles" in answer["error"]["message"]

    run(main())


def test_a_watch_reports_nothing_through_a_link_that_leads_out(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "out").symlink_to(outside)
    (root / "alias").symlink_to("sub")  # the same directory under a second name
    base = file_uri(str(root))

    async def main() -> None:
        async with serving(make_server([Root(path=str(root))])) as connect:
            peer = await connect()
            channel = await watch(peer, root, recursive=True)
            await asyncio.sleep(0.3)
            (outside / "secret.txt").write_text("out there")
            (root / "sub" / "in.txt").write_text("in here")
            seen = await changes_until(peer, channel, {(f"{base}/sub/in.txt", "added")})
            assert (f"{base}/sub/in.txt", "added") in seen
            (root / "marker").write_text("last")
            seen |= await changes_until(peer, channel, {(f"{base}/marker", "added")})
            assert not any("secret" in uri or "/out/" in uri for uri, _ in seen), seen

    run(main())
