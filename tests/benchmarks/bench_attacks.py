"""Benchmark: issue 17's memory attacks on ``agenthost-protocol serve``, from outside.

Each attack runs against a fresh ``agenthost-protocol serve --port 0
--step-delay 0 --max-message-size 33554432`` subprocess (the demo agent),
connected to on the URL it prints (with its access token when it has one).
Two figures each:

* the **peak resident memory** of the serve process (``VmHWM`` of
  ``/proc/PID/status``; "MB" is MiB here, as ``ru_maxrss`` in the other
  scripts), next to its resident memory before the attack (``idle``);
* the **longest ping gap**: a bystander client, in a process of its own so
  this script's work does not count, sends an AHP ``ping`` every 50 ms and
  records the longest time between two of its answers, the time the
  server's event loop was blocked for everybody else (50 ms when it never
  was).  When pings are still unanswered 1 s after the attack's end (the
  serve process still blocked), the time since the last answer counts too,
  printed as ``>=``.

The attacks:

1. **Amplification**: one client (``websockets``, its defaults: permessage-deflate
  is negotiated) sends ``initialize`` whose ``initialSubscriptions`` repeats
  the root channel ``ahp-root://`` until the request is 1.5 MB (1,500,000
  bytes), then, on a new server, 15 MB.  Printed: the size of the answer in
  bytes.  The answer is awaited at most ``--timeout`` seconds (120); the
  serve process is then killed and the line says so.
2. **Stalled subscribers**: a reader creates ``ahp-session:/bench`` and
  subscribes to it; 100 attackers (``--attackers``) then each open a raw TCP
  socket with a 16 KiB receive buffer (``SO_RCVBUF``, set before connecting:
  loopback autotuning would otherwise let the kernel absorb tens of MB),
  handshake by hand, send ``initialize`` subscribing to the session, read
  its answer and never read again.  The reader dispatches 4 actions
  ``session/titleChanged`` with a 15 MB title (15,000,000 ``x``) and keeps
  reading its echoes; memory is then watched until it settles (3 s without
  change, at most 15 s after the last echo).  Printed: the echoes the reader
  got and when, the peak and the settled resident memory, and how many
  attackers the server still holds (its ESTABLISHED sockets to their ports,
  from ``/proc/net/tcp``).

``--baseline DIR`` runs the same attacks against an older copy of the package
(``DIR`` holds its ``agenthost_protocol`` folder), after the current one; each
serve process gets ``PYTHONPATH`` set to the package root it measures and runs
in a scratch directory (``-m`` would put the current directory first).  Run
from the repository root::

    .venv/bin/python -m tests.benchmarks.bench_attacks [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .._raw_ws import masked_text_frame

REPO: Final = Path(__file__).resolve().parents[2]
MAX_MESSAGE_SIZE: Final = 32 * 1024 * 1024
ROOT_CHANNEL: Final = "ahp-root://"
SESSION: Final = "ahp-session:/bench"
PING_EVERY: Final = 0.05
ANSWER_GRACE: Final = 1.0
"""How long the bystander, told to stop, waits for the answers to its pings in flight."""
STEP_TIMEOUT: Final = 30.0
"""Bound of every wait but the attacks' own (a start, a handshake, a small answer)."""
SETTLE_STABLE: Final = 3.0
SETTLE_MAX: Final = 15.0


def connect_ws(url: str) -> connect:
    # no keepalive of our own: a ping unanswered while the server's loop is
    # blocked would close the connection before the answer
    return connect(url, max_size=None, ping_interval=None, proxy=None)


def request(id_: int, method: str, params: dict[str, object]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params},
                      separators=(",", ":"))


def initialize(client_id: str, subscriptions: list[str]) -> str:
    return request(1, "initialize", {"protocolVersions": ["0.7.0"], "clientId": client_id,
                                     "initialSubscriptions": subscriptions})


def is_answer(message: bytes, id_: int) -> bool:
    """Whether ``message`` (compact JSON, as the server writes it) answers request ``id_``."""
    head = message[:64]
    return f'"id":{id_},'.encode() in head and b'"method"' not in head


async def answer_to(ws: ClientConnection, id_: int, timeout: float = STEP_TIMEOUT) -> bytes:
    """The answer to request ``id_`` (what comes before it is skipped)."""
    async def wait() -> bytes:
        while True:
            message = await ws.recv(decode=False)
            assert isinstance(message, bytes)
            if is_answer(message, id_):
                return message

    return await asyncio.wait_for(wait(), timeout)


# -- the serve process ----------------------------------------------------------------------


def proc_status_kb(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of process ``pid``, in kB."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(value.split()[0])
    return values


@dataclass
class Serve:
    pid: int
    url: str
    port: int

    def rss_mb(self) -> float:
        return proc_status_kb(self.pid)["VmRSS"] / 1024

    def peak_mb(self) -> float:
        return proc_status_kb(self.pid)["VmHWM"] / 1024


async def reap(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with suppress(ProcessLookupError):
            proc.kill()
    await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)


async def drain(stream: asyncio.StreamReader | None) -> None:
    """Read a pipe to its end, so a child writing to it never blocks."""
    if stream is not None:
        while await stream.read(65536):
            pass


@asynccontextmanager
async def serving(package_root: Path, scratch: Path, name: str) -> AsyncIterator[Serve]:
    """An ``agenthost-protocol serve`` of the package in ``package_root``; killed at the end."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(package_root)
    env["XDG_CONFIG_HOME"] = str(scratch / "config")  # serve's token: not the user's
    with (scratch / f"{name}.stderr").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agenthost_protocol.cli", "serve", "--port", "0",
            "--step-delay", "0", "--max-message-size", str(MAX_MESSAGE_SIZE),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=log,
            env=env, cwd=scratch,
        )
    drainer: asyncio.Task[None] | None = None
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), STEP_TIMEOUT)).decode()
        if not first.startswith("serving "):
            raise RuntimeError(f"serve printed {first!r}; see {scratch / name}.stderr")
        url = first.split()[1]
        port = urlsplit(url).port
        assert port is not None
        drainer = asyncio.create_task(drain(proc.stdout))
        yield Serve(proc.pid, url, port)
    finally:
        await reap(proc)
        if drainer is not None:
            drainer.cancel()
            with suppress(asyncio.CancelledError):
                await drainer


# -- the bystander, a process of its own -----------------------------------------------------


async def bystander_main(url: str) -> None:
    """Ping every 50 ms until a line on stdin; then print the longest gap between answers."""
    loop = asyncio.get_running_loop()
    async with connect_ws(url) as ws:
        await ws.send(initialize("bystander", []))
        await answer_to(ws, 1)
        pending: set[int] = set()
        last = loop.time()
        longest = 0.0
        answers = 0

        async def read() -> None:
            nonlocal last, longest, answers
            while True:
                message = json.loads(await ws.recv())
                if message.get("id") in pending:
                    pending.discard(message["id"])
                    now = loop.time()
                    longest = max(longest, now - last)
                    last = now
                    answers += 1

        stopping = False

        async def ping() -> None:
            id_ = 2
            while not stopping:
                pending.add(id_)
                await ws.send(request(id_, "ping", {}))
                id_ += 1
                await asyncio.sleep(PING_EVERY)

        print("ready", flush=True)
        reader, pinger = asyncio.create_task(read()), asyncio.create_task(ping())
        stop = asyncio.create_task(asyncio.to_thread(sys.stdin.readline))
        try:
            done, _ = await asyncio.wait([stop, reader, pinger],
                                         return_when=asyncio.FIRST_COMPLETED)
            stopping = True  # not a cancel: a ping is in ``pending`` only once sent
            deadline = loop.time() + ANSWER_GRACE
            await asyncio.wait([pinger], timeout=ANSWER_GRACE)
            # the pings in flight: a server that is not blocked answers them at once
            while pending and not reader.done() and loop.time() < deadline:
                await asyncio.sleep(0.005)
        finally:
            pinger.cancel()
            reader.cancel()
        tasks = [reader, pinger]
        unanswered = bool(pending)
        if unanswered:
            longest = max(longest, loop.time() - last)
        failed = [str(task.exception()) for task in tasks
                  if task in done and task.exception() is not None]
        print(json.dumps({"longest": longest, "answers": answers, "unanswered": unanswered,
                          "error": failed[0] if failed else None}), flush=True)
        ws.transport.abort()


@dataclass
class Gap:
    seconds: float
    unanswered: bool
    error: str | None

    def __str__(self) -> str:
        text = f"longest ping gap {'>= ' if self.unanswered else ''}{self.seconds * 1000:,.0f} ms"
        return text + (f" (bystander: {self.error})" if self.error else "")


class Bystander:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.gap: Gap | None = None

    async def stop(self) -> Gap:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), STEP_TIMEOUT)
        result = json.loads(line)
        self.gap = Gap(result["longest"], result["unanswered"], result["error"])
        return self.gap


@asynccontextmanager
async def bystander(url: str) -> AsyncIterator[Bystander]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.benchmarks.bench_attacks", "--bystander", url,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        ready = await asyncio.wait_for(proc.stdout.readline(), STEP_TIMEOUT)
        if ready.strip() != b"ready":
            raise RuntimeError(f"the bystander printed {ready!r}")
        yield Bystander(proc)
    finally:
        await reap(proc)


# -- attack 1: amplification ------------------------------------------------------------------


def amplifying_initialize(client_id: str, size: int) -> str:
    """``initialize`` repeating the root channel until the request is ``size`` bytes or more."""
    base = initialize(client_id, [])
    entry = len(json.dumps(ROOT_CHANNEL)) + 1  # a string and its comma
    count = max(1, (size - len(base)) // entry + 1)
    text = initialize(client_id, [ROOT_CHANNEL] * count)
    assert len(text) >= size
    return text


async def amplification(package_root: Path, scratch: Path, label: str, size: int,
                        timeout: float) -> str:
    async with serving(package_root, scratch, f"{label}-amplification-{size}") as serve, \
            bystander(serve.url) as watcher:
        idle = serve.rss_mb()
        text = amplifying_initialize(f"amp-{size}", size)
        async with connect_ws(serve.url) as ws:
            start = time.perf_counter()
            await ws.send(text)
            del text
            try:
                answer = await answer_to(ws, 1, timeout)
                result = f"answer {len(answer):,} B in {time.perf_counter() - start:.1f} s"
            except asyncio.TimeoutError:
                result = f"answer timed out after {timeout:.0f} s (serve killed)"
            except ConnectionClosed as e:
                # e.g. the answer overflowed the connection's send queue
                close = e.rcvd or e.sent
                why = f"{close.code} {close.reason!r}" if close is not None else "no close frame"
                result = (f"no answer: closed ({why}) after "
                          f"{time.perf_counter() - start:.1f} s")
            peak = serve.peak_mb()
            gap = await watcher.stop()
            ws.transport.abort()
    return (f"amplification {size / 1e6:g} MB   {result}   peak RSS {peak:,.0f} MB "
            f"(idle {idle:,.0f} MB)   {gap}   [{label}]")


# -- attack 2: stalled subscribers ------------------------------------------------------------


def first_frame_end(data: bytes, start: int) -> int | None:
    """Where the first whole server frame after ``start`` ends in ``data`` (None: not yet)."""
    if len(data) < start + 2:
        return None
    length = data[start + 1] & 0x7F
    at = start + 2
    if length == 126:
        if len(data) < at + 2:
            return None
        length, at = int.from_bytes(data[at:at + 2], "big"), at + 2
    elif length == 127:
        if len(data) < at + 8:
            return None
        length, at = int.from_bytes(data[at:at + 8], "big"), at + 8
    end = at + length
    return end if len(data) >= end else None


async def stalled_attacker(serve: Serve, number: int) -> socket.socket:
    """A raw socket, 16 KiB receive buffer, subscribed to the session; it never reads again."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.setblocking(False)
        await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", serve.port)),
                               STEP_TIMEOUT)
        parts = urlsplit(serve.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        key = base64.b64encode(os.urandom(16)).decode()
        handshake = (f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{serve.port}\r\n"
                     "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        await loop.sock_sendall(sock, handshake.encode()
                                + masked_text_frame(initialize(f"stalled-{number}", [SESSION])))

        async def until_answered() -> None:
            # the 101 response, then one whole frame: the answer to initialize
            data = b""
            while True:
                chunk = await loop.sock_recv(sock, 65536)
                if not chunk:
                    raise ConnectionError(f"attacker {number}: closed during the handshake")
                data += chunk
                head_end = data.find(b"\r\n\r\n")
                if head_end < 0:
                    continue
                if b" 101 " not in data[:data.find(b"\r\n")]:
                    raise ConnectionError(f"attacker {number}: {data[:head_end]!r}")
                if first_frame_end(data, head_end + 4) is not None:
                    return

        await asyncio.wait_for(until_answered(), STEP_TIMEOUT)
    except BaseException:
        sock.close()
        raise
    return sock


def established_to(port: int, peers: set[int]) -> int:
    """The server's sockets on ``port`` still ESTABLISHED to one of the ``peers`` ports."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        if (state == "01" and int(local.rsplit(":", 1)[1], 16) == port
                and int(remote.rsplit(":", 1)[1], 16) in peers):
            count += 1
    return count


def is_echo(message: bytes) -> bool:
    return (message.startswith(b'{"jsonrpc":"2.0","method":"action"')
            and b'"type":"session/titleChanged"' in message[:200]
            and b'"clientId":"reader"' in message[-200:])


async def stalled_subscribers(package_root: Path, scratch: Path, label: str, *, attackers: int,
                              title_size: int, actions: int, timeout: float) -> str:
    sockets: list[socket.socket] = []
    async with serving(package_root, scratch, f"{label}-stalled") as serve, \
            bystander(serve.url) as watcher, connect_ws(serve.url) as reader:
        try:
            await reader.send(initialize("reader", []))
            await answer_to(reader, 1)
            await reader.send(request(2, "createSession", {"channel": SESSION,
                                                           "provider": "demo"}))
            await answer_to(reader, 2)
            await reader.send(request(3, "subscribe", {"channel": SESSION}))
            await answer_to(reader, 3)
            for number in range(attackers):
                sockets.append(await stalled_attacker(serve, number))
            peers = {sock.getsockname()[1] for sock in sockets}
            idle = serve.rss_mb()
            title = "x" * title_size
            echoes = 0

            async def read_echoes() -> None:
                nonlocal echoes
                while echoes < actions:
                    message = await reader.recv(decode=False)
                    assert isinstance(message, bytes)
                    if is_echo(message):
                        echoes += 1

            start = time.perf_counter()
            for seq in range(1, actions + 1):
                await reader.send(json.dumps({
                    "jsonrpc": "2.0", "method": "dispatchAction",
                    "params": {"channel": SESSION, "clientSeq": seq,
                               "action": {"type": "session/titleChanged", "title": title}},
                }, separators=(",", ":")))
            del title
            timed_out = False
            try:
                await asyncio.wait_for(read_echoes(), timeout)
            except asyncio.TimeoutError:
                timed_out = True
            echoed_after = time.perf_counter() - start
            # let the server settle: memory unchanged for SETTLE_STABLE s, at most SETTLE_MAX s
            settle_start = stable_since = time.perf_counter()
            rss = serve.rss_mb()
            held = established_to(serve.port, peers)
            while time.perf_counter() - settle_start < SETTLE_MAX:
                await asyncio.sleep(0.25)
                now_rss, now_held = serve.rss_mb(), established_to(serve.port, peers)
                if abs(now_rss - rss) > 1 or now_held != held:
                    stable_since = time.perf_counter()
                rss, held = now_rss, now_held
                if time.perf_counter() - stable_since >= SETTLE_STABLE:
                    break
            peak = serve.peak_mb()
            gap = await watcher.stop()
        finally:
            for sock in sockets:
                sock.close()
    got = (f"echoes {echoes}/{actions} in {echoed_after:.1f} s" if not timed_out else
           f"echoes {echoes}/{actions} (timed out after {timeout:.0f} s)")
    return (f"stalled subscribers {attackers} x {actions} x {title_size / 1e6:g} MB   {got}   "
            f"peak RSS {peak:,.0f} MB (idle {idle:,.0f} MB, settled {rss:,.0f} MB)   "
            f"attackers still connected {held}/{attackers}   {gap}   [{label}]")


# -- main -------------------------------------------------------------------------------------


async def run_all(args: argparse.Namespace) -> None:
    variants = [("new", REPO)]
    if args.baseline:
        variants.append(("before", Path(args.baseline).resolve()))
    with tempfile.TemporaryDirectory(prefix="bench-attacks-") as tmp:
        scratch = Path(tmp)
        for label, root in variants:
            if not (root / "agenthost_protocol" / "__init__.py").is_file():
                raise SystemExit(f"{root} holds no agenthost_protocol package")
            for size in (1_500_000, 15_000_000):
                try:
                    line = await amplification(root, scratch, label, size, args.timeout)
                except Exception as e:
                    line = f"amplification {size / 1e6:g} MB   failed: {e!r}   [{label}]"
                print(line, flush=True)
            try:
                line = await stalled_subscribers(
                    root, scratch, label, attackers=args.attackers, title_size=15_000_000,
                    actions=4, timeout=args.timeout)
            except Exception as e:
                line = f"stalled subscribers   failed: {e!r}   [{label}]"
            print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="DIR",
                        help="also attack the package copy in DIR, side by side")
    parser.add_argument("--attackers", type=int, default=100,
                        help="stalled subscribers (default 100)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                        help="longest wait for an attack's answer or echoes (default 120)")
    parser.add_argument("--bystander", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bystander:
        asyncio.run(bystander_main(args.bystander))
        return
    asyncio.run(run_all(args))


if __name__ == "__main__":
    main()
