"""``serve --capture DIR``: each connection's traffic in a transcript file, over real transports.

The WebSocket tests run ``serve_host`` in this process (a real socket on
loopback, a real client); the stdio and start-failure tests run the
command.  Every wait is bounded; no process outlives its test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import subprocess
from collections.abc import AsyncIterator, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import pytest

from agenthost_protocol.agent.hosting import ServeOptions, serve_host
from agenthost_protocol.aio.capture import DEFAULT_MAX_BYTES, CaptureDir, CaptureStream
from agenthost_protocol.aio.server import (
    CloseReason,
    DirectStream,
    FrameCache,
    ProbeableStream,
)
from agenthost_protocol.hostcheck.transcript import Direction, Record, Transcript

from ._aio_peer import child_env, serve_command

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection as WsClient

TIMEOUT = 5.0
INITIALIZE: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersions": ["0.7.0"], "clientId": "c1"}}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}
BAD = '{"jsonrpc": "2.0", "id": 3, "method":'


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 4 * TIMEOUT))


def initialize(client_id: str) -> dict[str, Any]:
    return {**INITIALIZE, "params": {**INITIALIZE["params"], "clientId": client_id}}


@contextlib.asynccontextmanager
async def serving(capture: Path, **options: Any) -> AsyncIterator[str]:
    """``serve_host`` with ``--capture`` in this process; yields its ``ws://`` URL.

    On the way out it is stopped and waited for: every connection is closed,
    and so is every capture file.
    """
    loop = asyncio.get_running_loop()
    url: asyncio.Future[str] = loop.create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(serve_host(
        ServeOptions(port=0, no_token=True, no_store=True, step_delay=0.0,
                     capture=str(capture), **options),
        ready=url.set_result, stop=stop, handle_signals=False,
    ))
    try:
        either: set[asyncio.Future[Any]] = {task, url}
        await asyncio.wait(either, timeout=TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        yield url.result()
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT)


async def connect(url: str) -> WsClient:
    from websockets.asyncio.client import connect as ws_connect

    return await asyncio.wait_for(ws_connect(url), TIMEOUT)


async def call(ws: WsClient, message: dict[str, Any] | str) -> dict[str, Any]:
    """Send ``message``, return the host's answer (the next message it sends)."""
    await ws.send(message if isinstance(message, str) else json.dumps(message))
    answer: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
    return answer


def read(path: Path) -> Transcript:
    with path.open(encoding="utf-8") as lines:
        return Transcript.from_lines(lines)


def captures(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl"))


def assert_in_time_order(transcript: Transcript) -> None:
    times = [record.time for record in transcript]
    assert times == sorted(times)
    assert all(time > 1.6e12 for time in times)  # epoch milliseconds


# -- WebSocket -------------------------------------------------------------------------


def test_a_websocket_connection_is_captured_as_it_goes(tmp_path: Path) -> None:
    pytest.importorskip("websockets")
    directory = tmp_path / "new" / "captures"

    async def main() -> None:
        async with serving(directory) as url:
            ws = await connect(url)
            answer = await call(ws, INITIALIZE)
            assert answer["result"]["protocolVersion"] == "0.7.0"
            (path,) = captures(directory)
            # flushed line by line: readable while the connection is open
            assert [r.sender for r in read(path)] == [Direction.CLIENT, Direction.HOST]
            assert (await call(ws, PING))["id"] == 2
            assert (await call(ws, BAD))["error"]["code"] == -32700
            await ws.close()

        transcript = read(path)
        assert [(r.sender, r.message) for r in transcript] == [
            (Direction.CLIENT, INITIALIZE),
            (Direction.HOST, answer),
            (Direction.CLIENT, PING),
            (Direction.HOST, {"jsonrpc": "2.0", "id": 2, "result": None}),
            (Direction.CLIENT, BAD),  # not JSON: kept as the text sent
            (Direction.HOST, transcript.records[5].message),
        ]
        error = transcript.records[5].message
        assert isinstance(error, dict) and error["id"] is None
        assert_in_time_order(transcript)
        if os.name == "posix":  # captures hold what the users wrote
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
            assert stat.S_IMODE(path.stat().st_mode) == 0o600

    run(main())


def test_two_connections_give_two_files_in_the_order_they_opened(tmp_path: Path) -> None:
    pytest.importorskip("websockets")

    async def main() -> None:
        async with serving(tmp_path) as url:
            first = await connect(url)
            second = await connect(url)
            # the second speaks first: the order of the files is that of the connections
            await call(second, initialize("c2"))
            await call(first, initialize("c1"))
            await first.close()
            await second.close()

    run(main())
    files = captures(tmp_path)
    assert [path.name[:7] for path in files] == ["000001-", "000002-"]
    sent = [next(iter(read(path))).message for path in files]
    assert sent == [initialize("c1"), initialize("c2")]


def test_the_byte_cap_stops_the_capture_not_the_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("websockets")
    cap = 400
    caplog.set_level(logging.WARNING, logger="agenthost_protocol.aio.capture")

    async def main() -> None:
        async with serving(tmp_path, capture_max_bytes=cap) as url:
            ws = await connect(url)
            await call(ws, INITIALIZE)
            for n in range(10, 20):
                assert (await call(ws, {**PING, "id": n}))["id"] == n
            await ws.close()

    run(main())
    (path,) = captures(tmp_path)
    assert 0 < path.stat().st_size <= cap
    transcript = read(path)  # every line written is a whole record
    assert 2 <= len(transcript) < 22
    warnings = [r for r in caplog.records if "its cap" in r.getMessage()]
    assert len(warnings) == 1


def test_the_default_cap_is_the_capture_module_s() -> None:
    assert ServeOptions().capture_max_bytes == DEFAULT_MAX_BYTES
    with pytest.raises(ValueError, match="capture_max_bytes"):
        ServeOptions(capture_max_bytes=0)


# -- stdio and the command -------------------------------------------------------------


def test_stdio_is_captured(tmp_path: Path) -> None:
    lines = [json.dumps(INITIALIZE), json.dumps(PING), BAD]
    done = subprocess.run(
        serve_command("--stdio", "--no-store", "--capture", str(tmp_path)),
        input="\n".join(lines).encode() + b"\n", capture_output=True, env=child_env(),
        timeout=4 * TIMEOUT, check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    (path,) = captures(tmp_path)
    transcript = read(path)
    client = [r.message for r in transcript if r.sender is Direction.CLIENT]
    host = [r.message for r in transcript if r.sender is Direction.HOST]
    assert client == [INITIALIZE, PING, BAD]
    assert host == answers
    assert len(answers) == 3
    assert_in_time_order(transcript)


def test_a_capture_dir_that_cannot_be_written_stops_serve_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory\n")
    done = subprocess.run(
        serve_command("--port", "0", "--no-store", "--capture", str(blocker / "captures")),
        capture_output=True, env=child_env(), timeout=4 * TIMEOUT, check=False,
    )
    assert done.returncode == 1
    assert done.stdout == b""  # never served
    assert done.stderr.decode().startswith(
        f"agenthost-protocol serve: cannot write captures to {blocker / 'captures'}: ")


# -- the wrapper -----------------------------------------------------------------------


class FakeStream:
    """A stream whose transport takes messages at once (``write_now``) while ``open``."""

    def __init__(self, incoming: Sequence[bytes | str] = ()) -> None:
        self.incoming = list(incoming)
        self.written: list[bytes] = []
        self.open = True

    async def receive(self) -> bytes | str:
        return self.incoming.pop(0)

    async def send(self, data: bytes) -> None:
        self.written.append(data)

    def write_now(self, messages: Sequence[bytes], frames: FrameCache) -> bool:
        if not self.open:
            return False
        self.written.extend(messages)
        return True

    async def close(self, reason: CloseReason, message: str) -> None:
        pass

    def abort(self) -> None:
        pass


class PlainStream:
    async def receive(self) -> bytes | str:
        raise AssertionError

    async def send(self, data: bytes) -> None:
        pass

    async def close(self, reason: CloseReason, message: str) -> None:
        pass

    def abort(self) -> None:
        pass


def test_the_wrapper_keeps_the_server_s_paths(tmp_path: Path) -> None:
    capture = CaptureDir(tmp_path)
    plain = capture.wrap(PlainStream())
    assert not isinstance(plain, DirectStream) and not isinstance(plain, ProbeableStream)
    fake = FakeStream()
    direct = capture.wrap(fake)
    assert isinstance(direct, DirectStream) and not isinstance(direct, ProbeableStream)

    message = json.dumps(PING).encode()
    assert direct.write_now([message, message], {})
    fake.open = False
    assert not direct.write_now([b'{"not": "written"}'], {})  # comes again through send()
    assert fake.written == [message, message]
    direct.close_capture()
    plain.close_capture()
    assert [r.message for r in read(cast(Path, direct.path))] == [PING, PING]


def test_numbers_go_on_after_the_files_already_there(tmp_path: Path) -> None:
    # a restarted serve: its files sort after the last one's
    (tmp_path / "000041-20260101T000000Z.jsonl").write_text("")
    (tmp_path / "notes.txt").write_text("")
    first = CaptureDir(tmp_path)
    streams = [first.wrap(PlainStream()) for _ in range(2)]
    streams.append(CaptureDir(tmp_path).wrap(PlainStream()))
    for stream in streams:
        stream.close_capture()
    names = [cast(Path, s.path).name for s in streams]
    assert [name[:7] for name in names] == ["000042-", "000043-", "000044-"]
    assert len(captures(tmp_path)) == 4


class FullFile:
    """A file on a full disk."""

    def write(self, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_write_error_stops_the_capture_not_the_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="agenthost_protocol.aio.capture")
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    fake = FakeStream([ping, ping])
    stream = CaptureStream(fake, CaptureDir(tmp_path), tmp_path / "full.jsonl",
                           cast(BinaryIO, FullFile()))

    async def main() -> None:
        assert await stream.receive() == ping
        assert not stream.capturing
        assert await stream.receive() == ping
        await stream.send(b"{}")

    run(main())
    assert fake.written == [b"{}"]
    assert len([r for r in caplog.records if "cannot write" in r.getMessage()]) == 1


def test_a_record_is_what_the_transcript_reads(tmp_path: Path) -> None:
    # the line format is the transcript's own, byte for byte
    stream = CaptureDir(tmp_path).wrap(FakeStream(['{"a": "\u00e9"}']))
    run(_receive(stream))
    stream.close_capture()
    path = cast(Path, stream.path)
    (record,) = read(path)
    line = path.read_text(encoding="utf-8").rstrip("\n")
    expected = Transcript(records=[Record(sender=Direction.CLIENT, message={"a": "\u00e9"},
                                          time=record.time)])
    assert [line] == list(expected.to_lines())


async def _receive(stream: CaptureStream) -> None:
    await stream.receive()
