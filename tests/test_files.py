"""Files confined to roots: the pure URI checks, then every operation and escape over a
real loopback socket on real files (``docs/files.md``)."""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol.aio import ServerLimits
from agenthost_protocol.aio.files import (
    FileAccessError,
    Root,
    Roots,
    file_uri,
    locate,
    parse_file_uri,
    parse_root,
)

from ._files_peer import make_server, serving

NOT_FOUND, DENIED, EXISTS, CONFLICT = -32008, -32009, -32010, -32011
INVALID_PARAMS, INVALID_REQUEST = -32602, -32600


def run(coro: Coroutine[Any, Any, None], timeout: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


# -- pure ---------------------------------------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_characters="/\x00"),
                min_size=1, max_size=20).filter(lambda n: n not in (".", ".."))


@given(st.lists(names, max_size=6))
def test_a_file_uri_names_the_path_it_was_made_from(parts: list[str]) -> None:
    path = "/" + "/".join(parts)
    assert parse_file_uri(file_uri(path)) == tuple(parts)
    assert parse_file_uri("file://localhost" + file_uri(path)[7:]) == tuple(parts)


@given(st.lists(names, max_size=4), st.lists(names, max_size=4),
       st.sampled_from(["..", "%2e%2e", "%2E%2e", ".%2e"]))
def test_a_dot_dot_anywhere_is_refused(before: list[str], after: list[str], dots: str) -> None:
    uri = file_uri("/" + "/".join(before)).rstrip("/") + "/" + dots + (
        file_uri("/" + "/".join(after))[7:] if after else "")
    with pytest.raises(FileAccessError) as refused:
        parse_file_uri(uri)
    assert refused.value.code == DENIED


@pytest.mark.parametrize(("uri", "code"), [
    ("file://evil.example/etc/passwd", DENIED),
    ("file://127.0.0.1/etc/passwd", DENIED),
    ("file:///a%2fb", INVALID_PARAMS),
    ("file:///a%2Fb", INVALID_PARAMS),
    ("file:///a%00b", INVALID_PARAMS),
    ("file:///a\x00b", INVALID_PARAMS),
    ("file:///a%zz", INVALID_PARAMS),
    ("file:///a?x=1", INVALID_PARAMS),
    ("file:///a#x", INVALID_PARAMS),
    ("file:relative/path", INVALID_PARAMS),
    ("http://localhost/etc", INVALID_PARAMS),
    ("file:///" + "a/" * 3000, INVALID_PARAMS),
])
def test_malformed_or_foreign_uris_are_refused(uri: str, code: int) -> None:
    with pytest.raises(FileAccessError) as refused:
        parse_file_uri(uri)
    assert refused.value.code == code


@given(st.lists(st.lists(names, max_size=3), max_size=4), st.lists(names, max_size=5))
def test_locate_picks_the_longest_root_holding_the_path(
        roots: list[list[str]], parts: list[str]) -> None:
    found = locate([tuple(r) for r in roots], tuple(parts))
    holders = [i for i, r in enumerate(roots) if tuple(parts[: len(r)]) == tuple(r)]
    if not holders:
        assert found is None
    else:
        assert found is not None and found in holders
        assert len(roots[found]) == max(len(roots[i]) for i in holders)


def test_root_specs() -> None:
    assert parse_root("/x:rw") == Root(path="/x", writable=True)
    assert parse_root("/x:ro") == Root(path="/x")
    assert parse_root("/x") == Root(path="/x")
    assert parse_root("C:stuff") == Root(path="C:stuff")


# -- a tree to attack ---------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """``rw`` (writable) and ``ro`` roots, an ``outside`` directory with a secret, and
    links from the roots leading in and out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    rw = tmp_path / "rw"
    (rw / "sub").mkdir(parents=True)
    (rw / "hello.txt").write_text("hello world\n")
    (rw / "sub" / "deep.txt").write_text("deep")
    (rw / "bin.dat").write_bytes(bytes(range(256)))
    (rw / "out-abs").symlink_to(outside / "secret.txt")
    (rw / "out-rel").symlink_to("../outside/secret.txt")
    (rw / "out-dir").symlink_to(outside)
    (rw / "in-rel").symlink_to("sub/deep.txt")
    (rw / "in-dir").symlink_to("sub")
    (rw / "in-abs").symlink_to(rw / "hello.txt")
    (rw / "loop").symlink_to("loop")
    (rw / "sub" / "up").symlink_to("../../outside/secret.txt")
    os.link(outside / "secret.txt", rw / "hardlink.txt")
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "readme.txt").write_text("read me")
    return {"tmp": tmp_path, "rw": rw, "ro": ro, "outside": outside}


def uri(path: Path | str) -> str:
    return file_uri(str(path))


def test_roots_public_check(tree: dict[str, Path]) -> None:
    roots = Roots([Root(path=str(tree["rw"]), writable=True), Root(path=str(tree["ro"]))])
    assert roots.resolve_directory(str(tree["rw"] / "in-dir")) == str(tree["rw"] / "sub")
    assert roots.resolve_directory(uri(tree["ro"])) == str(tree["ro"])
    assert roots.contains(str(tree["rw"] / "hello.txt"))
    assert not roots.contains(str(tree["outside"]))
    assert not roots.contains(str(tree["rw"] / "out-dir"))
    for path, code in ((tree["outside"], DENIED), (tree["rw"] / "out-dir", DENIED),
                       (tree["rw"] / "nope", NOT_FOUND), (tree["rw"] / "hello.txt",
                                                          INVALID_PARAMS)):
        with pytest.raises(FileAccessError) as refused:
            roots.resolve_directory(str(path))
        assert refused.value.code == code, path
    assert roots.writable(str(tree["rw"] / "x")) and not roots.writable(str(tree["ro"]))
    with pytest.raises(ValueError, match="not a directory"):
        Roots([Root(path=str(tree["rw"] / "hello.txt"))])


def _server(tree: dict[str, Path], **kwargs: Any) -> Any:
    return make_server([Root(path=str(tree["rw"]), writable=True),
                        Root(path=str(tree["ro"]))], **kwargs)


def test_reads_lists_and_resolves_within_the_roots(tree: dict[str, Path]) -> None:
    rw = tree["rw"]

    async def main() -> None:
        async with serving(_server(tree)) as connect:
            peer = await connect()
            read = await peer.ok("resourceRead", uri=uri(rw / "hello.txt"))
            assert read == {"data": "hello world\n", "encoding": "utf-8",
                            "contentType": "text/plain"}
            read = await peer.ok("resourceRead", uri=uri(rw / "hello.txt"), encoding="base64")
            assert base64.b64decode(read["data"]) == b"hello world\n"
            binary = await peer.ok("resourceRead", uri=uri(rw / "bin.dat"))
            assert binary["encoding"] == "base64"
            assert base64.b64decode(binary["data"]) == bytes(range(256))
            # links that stay inside are followed
            assert (await peer.ok("resourceRead", uri=uri(rw / "in-rel")))["data"] == "deep"
            assert (await peer.ok("resourceRead", uri=uri(rw / "in-abs")))["data"].startswith(
                "hello")
            assert (await peer.ok("resourceRead",
                                  uri=uri(rw / "in-dir" / "deep.txt")))["data"] == "deep"
            # percent-encoded names are names
            (rw / "a b%.txt").write_text("spaced")
            assert (await peer.ok("resourceRead", uri=uri(rw / "a b%.txt")))["data"] == "spaced"
            listing = await peer.ok("resourceList", uri=uri(rw))
            entries = {e["name"]: e["type"] for e in listing["entries"]}
            # links that lead out (or nowhere) are not listed
            assert entries == {"a b%.txt": "file", "bin.dat": "file", "hello.txt": "file",
                               "hardlink.txt": "file", "in-abs": "file", "in-dir": "directory",
                               "in-rel": "file", "sub": "directory"}
            assert (await peer.ok("resourceList", uri=uri(tree["ro"])))["entries"] == [
                {"name": "readme.txt", "type": "file"}]
            resolved = await peer.ok("resourceResolve", uri=uri(rw / "in-rel"))
            assert resolved["uri"] == uri(rw / "sub" / "deep.txt")
            assert resolved["type"] == "file" and resolved["size"] == 4
            assert resolved["etag"] and resolved["mtime"].endswith("Z")
            link = await peer.ok("resourceResolve", uri=uri(rw / "in-rel"),
                                 followSymlinks=False)
            assert link["type"] == "symlink" and link["uri"] == uri(rw / "in-rel")
            assert (await peer.ok("resourceResolve", uri=uri(rw / "sub")))["type"] == (
                "directory")
            assert await peer.code("resourceResolve", uri=uri(rw / "missing")) == NOT_FOUND
            assert await peer.code("resourceRead", uri=uri(rw / "missing")) == NOT_FOUND
            assert await peer.code("resourceList", uri=uri(rw / "hello.txt")) == INVALID_PARAMS
            assert await peer.code("resourceRead", uri=uri(rw / "sub")) == INVALID_PARAMS

    run(main())


def test_every_escape_is_refused(tree: dict[str, Path]) -> None:
    rw, outside = tree["rw"], tree["outside"]
    secret = outside / "secret.txt"
    escapes = [
        (uri(secret), DENIED),  # an absolute path elsewhere
        (uri(outside), DENIED),
        (uri(rw) + "/../outside/secret.txt", DENIED),
        (uri(rw) + "/sub/%2e%2e/%2E%2E/outside/secret.txt", DENIED),
        (uri(rw) + "/..%2foutside%2fsecret.txt", INVALID_PARAMS),
        (uri(rw) + "/hello.txt%00.png", INVALID_PARAMS),
        ("file://otherhost" + uri(rw / "hello.txt")[7:], DENIED),
        (uri(rw / "out-abs"), DENIED),
        (uri(rw / "out-rel"), DENIED),
        (uri(rw / "out-dir"), DENIED),
        (uri(rw / "out-dir" / "secret.txt"), DENIED),
        (uri(rw / "loop"), DENIED),
        (uri(rw / "sub" / "up"), DENIED),
        (uri(rw / "in-dir" / "up"), DENIED),
        (uri(rw / "hardlink.txt"), DENIED),
        # a case variant of a root is another path: outside
        (uri(str(rw).upper() + "/hello.txt"), DENIED),
        # names, not escapes: overlong UTF-8 dots, a double-encoded one, a backslash
        (uri(rw) + "/%c0%ae%c0%ae/outside/secret.txt", NOT_FOUND),
        (uri(rw) + "/%252e%252e/outside/secret.txt", NOT_FOUND),
        (uri(rw) + "/..%5coutside%5csecret.txt", NOT_FOUND),
        ("/etc/passwd", INVALID_PARAMS),
        ("http://example.com/x", INVALID_PARAMS),
    ]

    async def main() -> None:
        async with serving(_server(tree)) as connect:
            peer = await connect()
            for target, code in escapes:
                assert await peer.code("resourceRead", uri=target) == code, target
                if code == DENIED and "hardlink" not in target:
                    assert await peer.code("resourceList", uri=target) == DENIED, target
            for method, params in [
                ("resourceWrite", {"uri": uri(rw / "out-dir" / "new.txt"), "data": "x",
                                   "encoding": "utf-8"}),
                ("resourceWrite", {"uri": uri(rw / "out-abs"), "data": "x",
                                   "encoding": "utf-8"}),
                ("resourceWrite", {"uri": uri(rw / "hardlink.txt"), "data": "x",
                                   "encoding": "utf-8"}),
                ("resourceMkdir", {"uri": uri(rw / "out-dir" / "made")}),
                ("resourceCopy", {"source": uri(secret), "destination": uri(rw / "c.txt")}),
                ("resourceCopy", {"source": uri(rw / "hardlink.txt"),
                                  "destination": uri(rw / "c.txt")}),
                ("resourceCopy", {"source": uri(rw / "hello.txt"),
                                  "destination": uri(outside / "c.txt")}),
                ("resourceMove", {"source": uri(rw / "hello.txt"),
                                  "destination": uri(outside / "moved.txt")}),
                ("resourceDelete", {"uri": uri(rw / "out-dir" / "secret.txt")}),
                ("resourceDelete", {"uri": uri(rw)}),
                ("createResourceWatch", {"uri": uri(outside)}),
                ("createResourceWatch", {"uri": uri(rw / "out-dir")}),
            ]:
                assert await peer.code(method, **params) == DENIED, (method, params)
            # nothing changed outside, and the links are still there
            assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
            assert secret.read_text() == "top secret"
            assert not (rw / "c.txt").exists()

    run(main())


def test_a_link_swapped_in_after_the_check_is_not_followed(tree: dict[str, Path]) -> None:
    """A directory on the path replaced by a link to the outside, again and again, while
    reads go on: no read ever returns the secret (the walk opens with O_NOFOLLOW)."""
    rw, outside = tree["rw"], tree["outside"]
    (rw / "flip").mkdir()
    (rw / "flip" / "secret.txt").write_text("harmless")
    stop = threading.Event()

    def flipper() -> None:
        while not stop.is_set():
            os.rename(rw / "flip", rw / "flip.d")
            os.symlink(outside, rw / "flip")
            os.unlink(rw / "flip")
            os.rename(rw / "flip.d", rw / "flip")

    async def main() -> None:
        async with serving(_server(tree)) as connect:
            peer = await connect()
            thread = threading.Thread(target=flipper)
            thread.start()
            try:
                seen = set()
                for _ in range(300):
                    answer = await peer.call("resourceRead", uri=uri(rw / "flip" / "secret.txt"))
                    if "result" in answer:
                        seen.add(answer["result"]["data"])
                    else:
                        seen.add(answer["error"]["code"])
            finally:
                stop.set()
                thread.join(10)
            assert "top secret" not in seen
            assert "harmless" in seen

    run(main())


def test_writes_within_a_writable_root(tree: dict[str, Path]) -> None:
    rw = tree["rw"]

    async def main() -> None:
        async with serving(_server(tree)) as connect:
            peer = await connect()
            target = uri(rw / "new.txt")
            await peer.ok("resourceWrite", uri=target, data="abc", encoding="utf-8")
            assert (rw / "new.txt").read_text() == "abc"
            assert await peer.code("resourceWrite", uri=target, data="x", encoding="utf-8",
                                   createOnly=True) == EXISTS
            await peer.ok("resourceWrite", uri=target, data="XY", encoding="utf-8",
                          mode="append", position=1)
            assert (rw / "new.txt").read_text() == "abXYc"
            await peer.ok("resourceWrite", uri=target, data=base64.b64encode(b"--").decode(),
                          encoding="base64", mode="insert", position=1)
            assert (rw / "new.txt").read_text() == "a--bXYc"
            await peer.ok("resourceWrite", uri=target, data="!", encoding="utf-8",
                          position=3)
            assert (rw / "new.txt").read_text() == "a--!"
            etag = (await peer.ok("resourceResolve", uri=target))["etag"]
            assert await peer.code("resourceWrite", uri=target, data="z", encoding="utf-8",
                                   ifMatch="stale") == CONFLICT
            await peer.ok("resourceWrite", uri=target, data="fresh", encoding="utf-8",
                          ifMatch=etag)
            assert (rw / "new.txt").read_text() == "fresh"
            assert await peer.code("resourceWrite", uri=target, data="!", encoding="base64"
                                   ) == INVALID_PARAMS
            assert await peer.code("resourceWrite", uri=uri(rw / "nodir" / "f"), data="",
                                   encoding="utf-8") == NOT_FOUND
            await peer.ok("resourceMkdir", uri=uri(rw / "a" / "b" / "c"))
            await peer.ok("resourceMkdir", uri=uri(rw / "a" / "b"))  # exists: a success
            assert (rw / "a" / "b" / "c").is_dir()
            assert await peer.code("resourceMkdir", uri=uri(rw / "hello.txt")) == EXISTS
            await peer.ok("resourceCopy", source=target, destination=uri(rw / "a" / "copy.txt"))
            assert (rw / "a" / "copy.txt").read_text() == "fresh"
            assert await peer.code("resourceCopy", source=target,
                                   destination=uri(rw / "a" / "copy.txt"),
                                   failIfExists=True) == EXISTS
            await peer.ok("resourceCopy", source=uri(rw / "a"), destination=uri(rw / "a2"))
            assert (rw / "a2" / "copy.txt").read_text() == "fresh"
            assert (rw / "a2" / "b" / "c").is_dir()
            assert await peer.code("resourceCopy", source=uri(rw / "a"),
                                   destination=uri(rw / "a" / "b" / "inside")) == INVALID_PARAMS
            # a copy from a read-only root into a writable one is a read there
            await peer.ok("resourceCopy", source=uri(tree["ro"] / "readme.txt"),
                          destination=uri(rw / "readme.txt"))
            await peer.ok("resourceMove", source=uri(rw / "a2"), destination=uri(rw / "a3"))
            assert not (rw / "a2").exists() and (rw / "a3" / "copy.txt").exists()
            assert await peer.code("resourceMove", source=uri(rw / "a3" / "copy.txt"),
                                   destination=target, failIfExists=True) == EXISTS
            # moving a link moves the link; reads through it are still checked
            await peer.ok("resourceMove", source=uri(rw / "out-rel"),
                          destination=uri(rw / "sub" / "moved-link"))
            assert os.readlink(rw / "sub" / "moved-link") == "../outside/secret.txt"
            # from sub/ it names rw/outside/secret.txt, which does not exist
            assert await peer.code("resourceRead", uri=uri(rw / "sub" / "moved-link")) == (
                NOT_FOUND)
            assert await peer.code("resourceDelete", uri=uri(rw / "a")) == INVALID_PARAMS
            await peer.ok("resourceDelete", uri=uri(rw / "a"), recursive=True)
            assert not (rw / "a").exists()
            # deleting a link to the outside deletes the link, not what it names
            await peer.ok("resourceDelete", uri=uri(rw / "out-dir"), recursive=True)
            assert not (rw / "out-dir").exists() and (tree["outside"] / "secret.txt").exists()
            assert await peer.code("resourceDelete", uri=uri(rw / "gone")) == NOT_FOUND

    run(main())


def test_a_read_only_root_refuses_every_write(tree: dict[str, Path]) -> None:
    ro = tree["ro"]

    async def main() -> None:
        async with serving(_server(tree)) as connect:
            peer = await connect()
            writes: list[tuple[str, dict[str, Any]]] = [
                ("resourceWrite", {"uri": uri(ro / "readme.txt"), "data": "x",
                                   "encoding": "utf-8"}),
                ("resourceWrite", {"uri": uri(ro / "new.txt"), "data": "x",
                                   "encoding": "utf-8"}),
                ("resourceMkdir", {"uri": uri(ro / "d")}),
                ("resourceDelete", {"uri": uri(ro / "readme.txt")}),
                ("resourceMove", {"source": uri(ro / "readme.txt"),
                                  "destination": uri(tree["rw"] / "r.txt")}),
                ("resourceCopy", {"source": uri(tree["rw"] / "hello.txt"),
                                  "destination": uri(ro / "h.txt")}),
                ("resourceRequest", {"uri": uri(ro / "readme.txt"), "write": True}),
            ]
            for method, params in writes:
                answer = await peer.call(method, **params)
                assert answer["error"]["code"] == DENIED, (method, answer)
            answer = await peer.call("resourceWrite", uri=uri(ro / "readme.txt"), data="x",
                                     encoding="utf-8")
            assert answer["error"]["data"] == {"request": {
                "channel": "ahp-root://", "uri": uri(ro / "readme.txt"), "write": True}}
            assert await peer.ok("resourceRequest", uri=uri(ro / "readme.txt"),
                                 read=True) == {}
            assert sorted(p.name for p in ro.iterdir()) == ["readme.txt"]
            assert (ro / "readme.txt").read_text() == "read me"

    run(main())


def test_a_file_past_the_message_limit_is_refused_clearly(tree: dict[str, Path]) -> None:
    limit = 64 * 1024
    (tree["rw"] / "big.bin").write_bytes(os.urandom(limit))
    (tree["rw"] / "fits.txt").write_text("x" * (limit // 2))

    async def main() -> None:
        async with serving(_server(tree, limits=ServerLimits(max_message_size=limit))
                           ) as connect:
            peer = await connect()
            answer = await peer.call("resourceRead", uri=uri(tree["rw"] / "big.bin"))
            assert answer["error"]["code"] == INVALID_REQUEST
            assert "65536 bytes" in answer["error"]["message"]
            assert "message limit" in answer["error"]["message"]
            fits = await peer.ok("resourceRead", uri=uri(tree["rw"] / "fits.txt"))
            assert len(fits["data"]) == limit // 2
            # the connection is still fine
            assert await peer.ok("resourceList", uri=uri(tree["ro"]))

    run(main())


def test_content_references_still_work_beside_files(tree: dict[str, Path]) -> None:
    async def main() -> None:
        server = _server(tree)
        ref = server.host.content.put_text("stored by the host")
        async with serving(server) as connect:
            peer = await connect()
            read = await peer.ok("resourceRead", uri=ref.uri)
            assert read["data"] == "stored by the host"
            assert await peer.code("resourceRead", uri="agenthost-content:/nope") == -32006
            assert (await peer.ok("resourceRead", uri=uri(tree["ro"] / "readme.txt")))[
                "data"] == "read me"

    run(main())


def test_serve_wires_files_for_every_agent_kind(tree: dict[str, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from agenthost_protocol.agent.hosting import ServeOptions, build_server
    from agenthost_protocol.aio.files import FileService
    from agenthost_protocol.aio.watches import WatchService

    monkeypatch.chdir(tree["ro"])
    server, _ = build_server(ServeOptions(no_store=True))
    kinds = [type(s) for s in server.services]
    assert FileService in kinds and WatchService in kinds
    files = next(s for s in server.services if isinstance(s, FileService))
    assert files.roots.roots == (Root(path=str(tree["ro"])),)
    server, _ = build_server(ServeOptions(no_store=True, roots=()))
    assert not server.services
    server, _ = build_server(ServeOptions(
        no_store=True, agent="pi", agent_command=("true",),
        roots=(Root(path=str(tree["rw"]), writable=True),)))
    files = next(s for s in server.services if isinstance(s, FileService))
    assert files.roots.roots == (Root(path=str(tree["rw"]), writable=True),)
    with pytest.raises(ValueError, match="not a directory"):
        build_server(ServeOptions(no_store=True, roots=(Root(path=str(tree["tmp"] / "x")),)))


def test_serve_root_from_the_command_line(tree: dict[str, Path]) -> None:
    """``serve --stdio --root DIR:rw --root DIR`` as a person runs it: a write in the
    writable root, a refused one in the other, a read, an escape refused."""
    import json
    import subprocess
    import sys

    from ._aio_peer import child_env

    rw, ro = tree["rw"], tree["ro"]
    lines = [
        {"id": 1, "method": "initialize", "params": {"protocolVersions": ["0.7.0"],
                                                      "clientId": "cli"}},
        {"id": 2, "method": "resourceWrite", "params": {
            "channel": "ahp-root://", "uri": uri(rw / "from-cli.txt"), "data": "written",
            "encoding": "utf-8"}},
        {"id": 3, "method": "resourceWrite", "params": {
            "channel": "ahp-root://", "uri": uri(ro / "no.txt"), "data": "x",
            "encoding": "utf-8"}},
        {"id": 4, "method": "resourceRead", "params": {
            "channel": "ahp-root://", "uri": uri(ro / "readme.txt")}},
        {"id": 5, "method": "resourceRead", "params": {
            "channel": "ahp-root://", "uri": uri(tree["outside"] / "secret.txt")}},
    ]
    stdin = "".join(json.dumps({"jsonrpc": "2.0", **line}) + "\n" for line in lines)
    answers: dict[Any, Any] = {}

    async def main() -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agenthost_protocol.cli", "serve", "--stdio", "--no-store",
            "--root", f"{rw}:rw", "--root", str(ro), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env())
        assert process.stdin is not None and process.stdout is not None
        output = process.stdout
        try:
            process.stdin.write(stdin.encode())

            async def answer(request_id: int) -> Any:
                while request_id not in answers:
                    message = json.loads(await asyncio.wait_for(output.readline(), 30))
                    if "id" in message:
                        answers[message["id"]] = message
                    elif message.get("method") == "action":
                        changes.append(message["params"])
                return answers[request_id]

            changes: list[Any] = []
            for line in lines:
                await answer(int(str(line["id"])))
            # a watch, as VS Code opens them on connecting
            process.stdin.write(json.dumps({
                "jsonrpc": "2.0", "id": 6, "method": "createResourceWatch",
                "params": {"channel": "ahp-root://", "uri": uri(rw), "recursive": True},
            }).encode() + b"\n")
            channel = (await answer(6))["result"]["channel"]
            process.stdin.write(json.dumps({
                "jsonrpc": "2.0", "id": 7, "method": "subscribe", "params": {"channel": channel},
            }).encode() + b"\n")
            await answer(7)
            await asyncio.sleep(0.3)
            (rw / "sub" / "watched.txt").write_text("new")
            request_id = 8
            while not any(item["uri"] == uri(rw / "sub" / "watched.txt")
                          for change in changes for item in change["action"]["changes"]["items"]):
                process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": request_id,
                                                "method": "ping", "params": {}}).encode()
                                    + b"\n")
                await answer(request_id)
                request_id += 1
                await asyncio.sleep(0.05)
                assert request_id < 400, changes
            process.stdin.close()  # the end of input stops serve
            assert await asyncio.wait_for(process.wait(), 30) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()

    run(main())
    assert answers[2]["result"] == {}
    assert (rw / "from-cli.txt").read_text() == "written"
    assert answers[3]["error"]["code"] == DENIED
    assert answers[4]["result"]["data"] == "read me"
    assert answers[5]["error"]["code"] == DENIED
    missing = subprocess.run(
        [sys.executable, "-m", "agenthost_protocol.cli", "serve", "--stdio", "--no-store",
         "--root", str(tree["tmp"] / "nope")],
        input="", capture_output=True, text=True, timeout=60, env=child_env(), check=False)
    assert missing.returncode == 2 and "is not a directory" in missing.stderr


def test_special_files_and_a_flood_of_requests(tree: dict[str, Path]) -> None:
    """A FIFO is refused without being opened (a read would block a worker for ever);
    500 pipelined requests are each answered, served or refused for the queue's bound."""
    import json

    rw = tree["rw"]
    os.mkfifo(rw / "fifo")

    async def main() -> None:
        async with serving(_server(tree)) as connect:
            peer = await connect()
            assert await peer.code("resourceRead", uri=uri(rw / "fifo")) == INVALID_PARAMS
            assert await peer.code("resourceWrite", uri=uri(rw / "fifo"), data="x",
                                   encoding="utf-8") == INVALID_PARAMS
            for i in range(500):
                peer.writer.write(json.dumps({
                    "jsonrpc": "2.0", "id": 10_000 + i, "method": "resourceRead",
                    "params": {"channel": "ahp-root://", "uri": uri(rw / "hello.txt")},
                }).encode() + b"\n")
            answers: dict[int, Any] = {}
            while len(answers) < 500:
                message = await peer.message()
                answers[message["id"]] = message
            served = [a for a in answers.values() if "result" in a]
            refused = [a for a in answers.values() if "error" in a]
            assert served and all(a["result"]["data"] == "hello world\n" for a in served)
            assert all(a["error"]["code"] == INVALID_REQUEST for a in refused)
            assert (await peer.ok("resourceList", uri=uri(tree["ro"])))["entries"]

    run(main())


LINK_TARGETS = ["..", "../..", "../../outside", "a", "../a", "b/../..", "a/b", "c", ".",
                "{root}", "{root}/a", "{root}/../outside", "{outside}", "{root}/b/../..",
                "l0", "../l1", "a/l2"]


@given(st.lists(st.tuples(st.sampled_from(["", "a/", "a/b/"]), st.sampled_from(LINK_TARGETS)),
                min_size=1, max_size=4),
       st.lists(st.lists(st.sampled_from(["a", "b", "c", "l0", "l1", "l2", "l3", "secret"]),
                         min_size=1, max_size=4), min_size=1, max_size=8))
def test_the_walk_never_ends_outside_its_root(links: list[tuple[str, str]],
                                              queries: list[list[str]]) -> None:
    """Whatever links a tree holds and whatever path is asked for, a walk that succeeds
    ends at a real path (no link left in it) inside the root."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.realpath(tmp)
        root, outside = os.path.join(base, "root"), os.path.join(base, "outside")
        os.makedirs(os.path.join(root, "a", "b"))
        os.makedirs(os.path.join(root, "b"))
        os.makedirs(outside)
        Path(outside, "secret").write_text("s")
        Path(root, "a", "secret").write_text("fine")
        for i, (where, target) in enumerate(links):
            os.symlink(target.format(root=root, outside=outside),
                       os.path.join(root, where + f"l{i}"))
        roots = Roots([Root(path=root)])
        for query in queries:
            try:
                with roots.walk((*roots.roots[0].path.split("/")[1:], *query),
                                follow_last=True) as place:
                    path = place.path
                    exists = place.lstat() is not None
            except FileAccessError as e:
                assert e.code in (DENIED, NOT_FOUND)
                continue
            except OSError:
                continue  # e.g. a file used as a directory on the way
            assert path == root or path.startswith(root + "/"), (links, query, path)
            if exists:
                assert os.path.realpath(path) == path, (links, query, path)


def test_importing_the_package_imports_no_watcher() -> None:
    import subprocess
    import sys

    from ._aio_peer import child_env

    code = ("import sys, agenthost_protocol, agenthost_protocol.aio.files, "
            "agenthost_protocol.aio.watches, agenthost_protocol.agent.hosting; "
            "assert 'watchfiles' not in sys.modules, 'watchfiles imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=child_env(), check=False)
    assert done.returncode == 0, done.stderr


def test_names_that_are_not_utf8(tree: dict[str, Path]) -> None:
    """A file name JSON cannot carry is left out of listings but reachable by its
    percent-encoded URI; an error about such a path is still answered."""
    rw = tree["rw"]
    fd = os.open(os.fsencode(str(rw)) + b"/caf\xe9.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"latin-1 name")
    os.close(fd)

    async def main() -> None:
        async with serving(_server(tree)) as connect:
            peer = await connect()
            names = [e["name"] for e in (await peer.ok("resourceList", uri=uri(rw)))["entries"]]
            assert not any(name.startswith("caf") for name in names)
            read = await peer.ok("resourceRead", uri=uri(rw) + "/caf%E9.txt")
            assert read["data"] == "latin-1 name"
            answer = await peer.call("resourceRead", uri=uri(rw) + "/%c0%ae/x")
            assert answer["error"]["code"] == NOT_FOUND
            answer = await peer.call("createResourceWatch", uri=uri(rw) + "/%ff")
            assert answer["error"]["code"] == NOT_FOUND

    run(main())
