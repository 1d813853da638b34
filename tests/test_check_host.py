"""Issue 22: ``check-host`` passes our ``serve`` and catches each fault of a broken host.

Our ``serve`` (the demo agent) runs as a subprocess on loopback.  The broken
hosts are :mod:`hostcheck_faults`' proxy in front of it, one fault each; every
fault must be reported as the property it breaks, and the shrunk program must
break it again when replayed.  ``HYPOTHESIS_PROFILE=long`` runs more examples.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol.cli import main
from agenthost_protocol.hostcheck import Transcript, check
from agenthost_protocol.hostcheck.driver import Cleanup, StdioTarget, WebSocketTarget
from agenthost_protocol.hostcheck.machine import check_host, replay

from ._aio_peer import child_env, serve_command
from .hostcheck_faults import FAULTS, Conn, Fault, FaultyHost, Message, NullResultOmitted

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
EXAMPLES = 500 if LONG else 50
"""Examples against our serve: the CI profile, and the long one."""
FAULT_EXAMPLES = 500
"""At most this many to find a fault (the run stops at the first failure)."""
SHRINK_SECONDS = 60.0 if LONG else 4.0


@contextlib.contextmanager
def _serve(tmp: Path, *args: str, store: Path | None = None) -> Iterator[str]:
    env = child_env()
    env["XDG_DATA_HOME"] = str(tmp)
    where = ("--store", str(store)) if store is not None else ("--no-store",)
    with open(tmp / "serve.err", "wb") as err:
        proc = subprocess.Popen(serve_command("--port", "0", *where, *args),
                                stdout=subprocess.PIPE, stderr=err, env=env,
                                start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("serving ws://127.0.0.1:"), (line, (tmp / "serve.err").read_text())
        yield line.split()[1]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _serve(tmp_path_factory.mktemp("serve")) as url:
        yield url


def test_our_serve_passes(served: str) -> None:
    outcome = check_host(WebSocketTarget(url=served), examples=EXAMPLES, seed=0)
    assert outcome.error is None
    assert outcome.failed == [], [str(v) for vs in outcome.violations.values() for v in vs]
    assert outcome.examples >= EXAMPLES


def test_our_serve_over_stdio_passes() -> None:
    command = " ".join([sys.executable, "-m", "agenthost_protocol.cli", "serve", "--stdio",
                        "--no-store"])
    outcome = check_host(StdioTarget(command=command), examples=20 if LONG else 3, steps=15,
                         seed=0)
    assert outcome.error is None
    assert outcome.failed == [], [str(v) for vs in outcome.violations.values() for v in vs]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
def test_each_fault_is_caught(tmp_path: Path, fault: type[Fault]) -> None:
    broken = fault()
    # a host of its own: each example adds sessions, and a host with fewer is quicker
    with _serve(tmp_path) as served, FaultyHost(served, broken) as proxy:
        target = WebSocketTarget(url=proxy.url)
        outcome = check_host(target, examples=FAULT_EXAMPLES, seed=0,
                             shrink_budget=SHRINK_SECONDS)
        assert broken.count > 0, "the fault never fired"
        assert broken.breaks in outcome.failed, outcome.failed
        # the shrunk program is replayable: it breaks the same property again (a live
        # host's timing differs from run to run: three tries)
        assert any(broken.breaks in replay(target, outcome.steps).failed for _ in range(3))
    print(f"{broken.name} -> {broken.breaks}: {len(outcome.steps)} steps, "
          f"{len(outcome.transcript)} messages, {outcome.examples} examples, "
          f"{outcome.seconds:.1f} s")


def test_the_command_passes_our_serve(served: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.jsonl"
    code = main(["check-host", served, "--examples", "3", "--seed", "1", "--report",
                 str(report)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    assert len(out) == 14 and out[-1].startswith("12 passed, 0 failed")
    assert out[0].startswith("check-host creates sessions on ws://127.0.0.1:")
    assert "token" not in out[0]
    assert all(line.startswith("ok   ") for line in out[1:-1])
    head = json.loads(report.read_text().splitlines()[0])["report"]
    assert [p["passed"] for p in head["properties"]] == [True] * 12


def test_a_failure_prints_a_transcript_that_replays(served: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "failed.jsonl"
    with FaultyHost(served, NullResultOmitted()) as proxy:
        code = main(["check-host", proxy.url, "--examples", "5", "--seed", "1", "--report",
                     str(report), "--shrink-time", "5"])
        out = capsys.readouterr().out.splitlines()
        assert code == 1
        assert "FAIL well-formed-response" in "\n".join(out)
        assert any(line.startswith("11 passed, 1 failed") for line in out)
        printed = [line for line in out if line.startswith("{")]
        assert printed == report.read_text().splitlines()[1:]
        # --replay runs the program of the report; check-traffic checks its messages
        assert main(["check-host", proxy.url, "--replay", str(report)]) == 1
        assert "FAIL well-formed-response" in capsys.readouterr().out
    assert main(["check-traffic", str(report)]) == 1
    assert "FAIL well-formed-response" in capsys.readouterr().out
    # the same program against the host without the fault passes
    assert main(["check-host", served, "--replay", str(report)]) == 0


def test_check_traffic_reads_a_capture_of_serve(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    captures = tmp_path / "captures"
    with _serve(tmp_path, "--capture", str(captures)) as url:
        assert main(["check-host", url, "--examples", "2", "--steps", "10", "--seed", "3"]) == 0
    capsys.readouterr()
    files = sorted(captures.iterdir())
    assert len(files) >= 3
    for file in files:
        assert main(["check-traffic", str(file)]) == 0, capsys.readouterr().out
        out = capsys.readouterr().out
        assert "12 passed, 0 failed" in out


def test_check_traffic_refuses_what_is_not_a_transcript(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"from": "host", "t": 0, "message": {}}\n{"from": "me"}\n')
    assert main(["check-traffic", str(bad)]) == 2
    assert "line 2" in capsys.readouterr().err
    assert main(["check-traffic", str(tmp_path / "missing.jsonl")]) == 2


def test_check_host_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-host"]) == 2
    assert main(["check-host", "ws://127.0.0.1:1", "--stdio", "x"]) == 2
    assert "one of them" in capsys.readouterr().err
    for wrong in (["--timeout", "0"], ["--timeout", "nan"], ["--examples", "0"]):
        with pytest.raises(SystemExit) as exited:
            main(["check-host", "ws://127.0.0.1:1", *wrong])
        assert exited.value.code == 2


def test_a_host_that_cannot_be_reached_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check-host", "ws://127.0.0.1:9", "--examples", "1", "--timeout", "1"])
    assert code == 2
    assert "cannot connect" in capsys.readouterr().err


def test_a_host_that_never_answers_fails_in_bounded_time(tmp_path: Path) -> None:
    # a host that reads and says nothing: every request goes unanswered
    silent = tmp_path / "silent.py"
    silent.write_text("import sys\nfor line in sys.stdin:\n    pass\n")
    outcome = check_host(StdioTarget(command=f"{sys.executable} {silent}"), examples=1,
                         steps=3, seed=0, timeout=0.2, shrink_budget=2)
    assert "one-response-per-request" in outcome.failed
    assert any("never answered" in v.message
               for v in outcome.violations["one-response-per-request"])


def test_a_transcript_of_several_connections_round_trips(served: str) -> None:
    outcome = replay(WebSocketTarget(url=served), [
        {"op": "connect", "versions": ["0.7.0"]}, {"op": "connect", "versions": ["0.5.1"]},
        {"op": "createSession", "client": 0}, {"op": "subscribe", "client": 1, "channel": 1},
        {"op": "dispatch", "client": 0, "channel": 0, "action": "session/titleChanged",
         "text": "t"},
    ])
    assert outcome.failed == []
    lines = list(outcome.transcript.to_lines())
    again = Transcript.from_lines(lines)
    assert again == outcome.transcript
    assert len(again.connections()) >= 3  # two clients and an observer a version
    assert check(again) == outcome.violations


def test_a_host_that_sends_too_much_fails_the_run_and_nothing_else(tmp_path: Path) -> None:
    # a hostile host: one message over the checker's limit, then a flood on the next
    from websockets.sync.server import serve

    from agenthost_protocol.hostcheck.driver import MAX_MESSAGE_BYTES

    def handle(socket: object) -> None:
        with contextlib.suppress(Exception):
            for _ in socket:  # type: ignore[attr-defined]
                socket.send("x" * (MAX_MESSAGE_BYTES + 1))  # type: ignore[attr-defined]

    with serve(handle, "127.0.0.1", 0, max_size=None) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
            outcome = check_host(WebSocketTarget(url=url), examples=1, steps=2, seed=0,
                                 timeout=1, shrink_budget=2)
        finally:
            server.shutdown()
            thread.join(10)
    assert "one-response-per-request" in outcome.failed
    assert all(len(json.dumps(r.message)) < 1000 for r in outcome.transcript)


def test_our_serve_passes_on_the_snapshot_path(tmp_path: Path) -> None:
    # a replay window of three envelopes: a client that missed more is sent snapshots
    with _serve(tmp_path, "--replay-window", "3") as url:
        target = WebSocketTarget(url=url)
        outcome = replay(target, [
            {"op": "connect", "versions": ["0.7.0"]}, {"op": "createSession", "client": 0},
            {"op": "subscribe", "client": 0, "channel": 1},
            {"op": "connect", "versions": ["0.6.0"]},
            {"op": "subscribe", "client": 1, "channel": 1}, {"op": "drop", "client": 1},
            *({"op": "dispatch", "client": 0, "channel": 0, "action": "session/titleChanged",
               "text": str(n)} for n in range(6)),
            {"op": "reconnect", "client": 0},
        ])
        assert outcome.failed == []
        kinds = [r.message["result"].get("type") for r in outcome.transcript
                 if isinstance(r.message, dict) and isinstance(r.message.get("result"), dict)]
        assert "snapshot" in kinds
        # and generated runs on that path keep every property too
        generated = check_host(target, examples=10 if not LONG else 100, seed=0)
    assert generated.failed == [], generated.violations


# -- issue 28: check-host leaves the host as it found it ---------------------------------


def _ask(url: str, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``initialize`` then one request, on a connection of its own (a user's client):
    both answers."""
    from websockets.sync.client import connect

    def answer(socket: Any, number: int) -> dict[str, Any]:
        while True:
            message = json.loads(socket.recv(timeout=10))
            if message.get("id") == number:
                return message  # type: ignore[no-any-return]

    with connect(url, open_timeout=10, close_timeout=1) as socket:
        socket.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersions": ["0.7.0"], "clientId": f"user-{uuid.uuid4().hex[:8]}",
            "initialSubscriptions": ["ahp-root://"]}}))
        first = answer(socket, 1)
        socket.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": method,
                                "params": params}))
        return first, answer(socket, 2)


def _sessions(url: str) -> dict[str, dict[str, Any]]:
    """The host's sessions, as listSessions gives them, by URI."""
    listed = _ask(url, "listSessions", {})[1]["result"]
    assert "nextCursor" not in listed  # a page holds them all here
    return {item["resource"]: item for item in listed["items"]}


def _users_session(url: str) -> str:
    """A session of the host's own user, made before check-host runs."""
    session = f"ahp-session:/users-own-{uuid.uuid4().hex[:8]}"
    init = _ask(url, "ping", {})[0]
    root = next(s for s in init["result"]["snapshots"] if s["resource"] == "ahp-root://")
    provider = root["state"]["agents"][0]["provider"]
    assert "result" in _ask(url, "createSession", {"channel": session,
                                                   "provider": provider})[1]
    return session


def _check_host_process(*args: str, env: dict[str, str] | None = None
                        ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agenthost_protocol.cli", "check-host", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or child_env(),
        start_new_session=True)


def _reap(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)


def _wait_for_check_host_sessions(url: str, proc: subprocess.Popen[str]) -> None:
    """Until check-host has sessions on the host (it is mid-run)."""
    deadline = time.monotonic() + 30
    while not any("/check-host-" in uri for uri in _sessions(url)):
        assert proc.poll() is None, _reap(proc)
        assert time.monotonic() < deadline, "check-host made no session in 30 s"
        time.sleep(0.05)


def test_check_host_leaves_the_host_as_it_found_it(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    # a host with a store, as a user's is, with a session of its user's own
    with _serve(tmp_path, store=tmp_path / "host.sqlite3") as url:
        mine = _users_session(url)
        before = _sessions(url)
        assert list(before) == [mine]
        # a run that passes
        assert main(["check-host", url, "--examples", "3", "--steps", "8", "--seed", "1"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("check-host creates sessions on ws://127.0.0.1:")
        assert "disposes of them" in out[0]
        assert _sessions(url) == before
        # a run that fails, shrinking included
        with FaultyHost(url, NullResultOmitted()) as proxy:
            assert main(["check-host", proxy.url, "--examples", "5", "--seed", "1",
                         "--steps", "10", "--shrink-time", "2"]) == 1
            assert "FAIL well-formed-response" in capsys.readouterr().out
        assert _sessions(url) == before
        # a run interrupted mid-way: by Ctrl-C, and by SIGTERM
        for sig in (signal.SIGINT, signal.SIGTERM):
            proc = _check_host_process(url, "--examples", "10000", "--seed", "2")
            _wait_for_check_host_sessions(url, proc)
            proc.send_signal(sig)
            stdout, stderr = _reap(proc)
            assert proc.returncode == 130, (sig, stdout, stderr)
            assert "interrupted" in stdout and "are disposed of" in stdout, stdout
            assert _sessions(url) == before, sig


class _HostGoes(Fault):
    """Answers the first createSession, then the host is gone: the proxy closes and
    refuses every connection from then on."""

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if self.count == 0 and conn.answers(message) == "createSession" \
                and "result" in message:
            self.count += 1
            assert self.proxy is not None
            self.proxy._server.close()  # the listener and every connection
        return [message]


class _DisposalRefused(Fault):
    """Refuses every disposeSession (the host behind disposes of it all the same)."""

    def to_client(self, conn: Conn, message: Message) -> list[Message]:
        if conn.answers(message) == "disposeSession":
            self.count += 1
            return [{"jsonrpc": "2.0", "id": message["id"],
                     "error": {"code": -32603, "message": "not today"}}]
        return [message]


def test_sessions_it_could_not_dispose_of_are_reported(served: str,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    before = _sessions(served)
    # the host goes away mid-run: the session it made is listed, and exists still
    with FaultyHost(served, _HostGoes()) as proxy:
        code = main(["check-host", proxy.url, "--examples", "3", "--timeout", "1"])
    out = capsys.readouterr().out.splitlines()
    assert code == 2
    assert "could not dispose of 1 of the 1 session(s)" in "\n".join(out), out
    session = out[-1].strip()
    assert session.startswith("ahp-session:/check-host-")
    assert set(_sessions(served)) == {*before, session}
    _ask(served, "disposeSession", {"channel": session})
    # a host that refuses to dispose of them: each is listed with its answer
    with FaultyHost(served, _DisposalRefused()) as proxy:
        code = main(["check-host", proxy.url, "--examples", "1", "--steps", "3",
                     "--seed", "0"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "could not dispose of" in printed and "(refused: -32603: not today)" in printed
    assert _sessions(served) == before
    # and one that cannot be reached at all keeps what it was given to dispose of
    cleanup = Cleanup(WebSocketTarget(url="ws://127.0.0.1:9"), timeout=1)
    cleanup.add("ahp-session:/check-host-x-1")
    assert cleanup.dispose() == ["ahp-session:/check-host-x-1"]


def test_a_refused_token_ends_the_run_at_once(served: str) -> None:
    wrong = served.split("?", maxsplit=1)[0] + "?token=not-the-token"
    started = time.monotonic()
    proc = _check_host_process(wrong, "--examples", "1000")
    stdout, stderr = _reap(proc)
    # "at once": not after the example budget (a generous bound for a loaded machine,
    # interpreter start included)
    assert time.monotonic() - started < 15
    assert proc.returncode == 2
    assert "the host refused the access token (HTTP 401)" in stderr, stderr
    assert "not-the-token" not in stdout + stderr
    assert "12 passed" not in stdout


class _Refusing:
    """A host that refuses every handshake with 403 (its Host check), and notes what
    each handshake carried."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.url = ""

    def __enter__(self) -> _Refusing:
        from websockets.sync.server import serve

        def refuse(connection: Any, request: Any) -> Any:
            self.seen.append((request.path, request.headers.get("Authorization")))
            return connection.respond(403, "Host 'x' is not this server's\n")

        self.server = serve(lambda _: None, "127.0.0.1", 0, process_request=refuse)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"ws://127.0.0.1:{self.server.socket.getsockname()[1]}"
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.thread.join(10)


def test_a_refused_host_header_ends_the_run_and_the_token_goes_in_a_header(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-the-file\nsecond line\n")
    with _Refusing() as host:
        started = time.monotonic()
        assert main(["check-host", f"{host.url}/?token=from-the-url&x=1", "--examples",
                     "1000"]) == 2
        assert time.monotonic() - started < 10
        err = capsys.readouterr().err
        assert "refused the connection's Origin or Host header (HTTP 403)" in err, err
        assert "Host 'x' is not this server's" in err
        # the token went in the Authorization header, not in the request target
        assert host.seen[0] == ("/?x=1", "Bearer from-the-url")
        # --token-file wins over the URL's token, which is not sent
        host.seen.clear()
        assert main(["check-host", f"{host.url}/?tkn=from-the-url", "--token-file",
                     str(token_file), "--examples", "1"]) == 2
        assert host.seen[0] == ("/", "Bearer from-the-file")


def test_the_token_from_ahp_token_and_token_file(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text("the-right-token\n")
    wrong.write_text("a-wrong-token\n")
    quick = ["--examples", "1", "--steps", "4", "--seed", "0"]
    with _serve(tmp_path, "--token-file", str(right)) as url:
        bare = url.split("?", maxsplit=1)[0]
        assert main(["check-host", bare, *quick]) == 2  # no token anywhere
        assert "HTTP 401" in capsys.readouterr().err
        monkeypatch.setenv("AHP_TOKEN", "the-right-token")
        assert main(["check-host", bare, *quick]) == 0
        assert main(["check-host", bare, "--token-file", str(wrong), *quick]) == 2
        assert "HTTP 401" in capsys.readouterr().err  # the file wins over AHP_TOKEN
        monkeypatch.setenv("AHP_TOKEN", "a-wrong-token")
        assert main(["check-host", bare, "--token-file", str(right), *quick]) == 0
        assert main(["check-host", url, *quick]) == 0  # the URL's wins over AHP_TOKEN
        assert main(["check-host", url, "--token", "a-wrong-token", *quick]) == 2
        assert main(["check-host", bare, "--token-file", str(tmp_path / "none")]) == 2
        assert "cannot read the token file" in capsys.readouterr().err
        assert main(["check-host", "--stdio", "x", "--token", "t"]) == 2
        assert "for a URL" in capsys.readouterr().err


def test_the_token_is_taken_out_of_the_url(capsys: pytest.CaptureFixture[str]) -> None:
    from agenthost_protocol.hostcheck.driver import url_token

    assert url_token("ws://127.0.0.1:1/?tkn=a&x=1") == ("ws://127.0.0.1:1/?x=1", "a")
    assert url_token("ws://127.0.0.1:1/?token=b") == ("ws://127.0.0.1:1/", "b")
    assert url_token("ws://127.0.0.1:1/?token=") == ("ws://127.0.0.1:1/?token=", None)
    with pytest.raises(ValueError, match="visible ASCII"):
        WebSocketTarget(url="ws://127.0.0.1:1", token="two words")
    assert main(["check-host", "ws://127.0.0.1:1", "--token", "two words"]) == 2
    assert "visible ASCII" in capsys.readouterr().err
    # the first line names the host without its secrets (nothing listens on port 9)
    assert main(["check-host", "ws://me:secret@127.0.0.1:9/?token=t0k", "--examples", "1",
                 "--timeout", "1"]) == 2
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("check-host creates sessions on ws://127.0.0.1:9/ ")


# -- issue 29: bounded memory against a hostile host or file ----------------------------

_MEASURED = """\
import sys
from agenthost_protocol.cli import main
try:
    code = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as status:
        peak = next(line for line in status if line.startswith("VmHWM:"))
    print("peak " + peak.split()[1], file=sys.stderr, flush=True)
sys.exit(code)
"""


def _measured(args: list[str], *, kill_above_mb: int, timeout: float = 120
              ) -> tuple[int, str, str, float]:
    """``agenthost-protocol ARGS`` in a process of its own: its exit status, output and
    peak resident memory in MB (VmHWM, which it reports as it exits).  A process that
    grows past ``kill_above_mb`` is killed (exit -9), so that the old behaviour fails the
    test instead of the machine."""
    proc = subprocess.Popen([sys.executable, "-c", _MEASURED, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env(),
                            start_new_session=True)
    out: dict[str, str] = {}
    readers = [threading.Thread(target=lambda name=name, pipe=pipe: out.__setitem__(
        name, pipe.read()), daemon=True) for name, pipe in (("out", proc.stdout),
                                                            ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    seen = 0.0
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            with contextlib.suppress(OSError, StopIteration):
                with open(f"/proc/{proc.pid}/status") as status:
                    rss = next(line for line in status if line.startswith("VmRSS:"))
                seen = max(seen, int(rss.split()[1]) / 1024)
            if seen > kill_above_mb or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    for reader in readers:
        reader.join(10)
    err = out.get("err", "")
    peaks = [line for line in err.splitlines() if line.startswith("peak ")]
    peak = int(peaks[-1].split()[1]) / 1024 if peaks else seen
    return proc.returncode, out.get("out", ""), err, max(peak, seen)


def test_check_traffic_refuses_a_line_of_gigabytes_in_bounded_memory(tmp_path: Path) -> None:
    size = 3 * 1024**3
    if shutil.disk_usage(tmp_path).free < 2**30:
        pytest.skip("no room for the file's first 64 MiB")
    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as f:
        f.write(b'{"from": "host", "t": 0, "message": {}}\n')
        f.truncate(size)  # sparse: a second line of 3 GB of NULs, with no line end
    try:
        started = time.monotonic()
        code, _, err, peak = _measured(["check-traffic", str(huge)], kill_above_mb=1000)
        seconds = time.monotonic() - started
    finally:
        huge.unlink()
    print(f"check-traffic on a 3 GB line: {peak:.0f} MB peak, {seconds:.1f} s")
    assert code == 2, err
    assert f"line 2: longer than {64 * 1024 * 1024} bytes" in err, err
    assert peak < 400, peak
    assert seconds < 60


class _Flooding:
    """A host that answers ``initialize`` (every other request with null), then sends
    3 MB notifications of ``[{},{},...]`` as fast as the connection takes them.

    Before its first answer it sends ``burst_mb`` of them: however fast the checker
    gets through its examples, the first one holds that much."""

    def __init__(self, burst_mb: int = 0) -> None:
        self.burst = -(-burst_mb * 1024 * 1024 // len(self.NOTIFICATION))

    NOTIFICATION = json.dumps({"jsonrpc": "2.0", "method": "checkHost/flood", "params": {
        "items": [{}] * (1_000_000 - 20)}}, separators=(",", ":"))

    def __enter__(self) -> _Flooding:
        from websockets.sync.server import serve

        def flood(socket: Any) -> None:
            with contextlib.suppress(Exception):  # until the checker goes
                while True:
                    socket.send(self.NOTIFICATION)

        def handle(socket: Any) -> None:
            with contextlib.suppress(Exception):
                for data in socket:
                    request = json.loads(data)
                    if "id" not in request:
                        continue
                    result = None
                    if request.get("method") == "initialize":
                        result = {"protocolVersion": "0.7.0", "serverSeq": 0, "snapshots": []}
                        for _ in range(self.burst):
                            socket.send(self.NOTIFICATION)
                        self.burst = 0
                        threading.Thread(target=flood, args=(socket,), daemon=True).start()
                    socket.send(json.dumps({"jsonrpc": "2.0", "id": request["id"],
                                            "result": result}))

        self.server = serve(handle, "127.0.0.1", 0, max_size=None)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"ws://127.0.0.1:{self.server.socket.getsockname()[1]}"
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.thread.join(10)


@pytest.mark.parametrize("budget_mib", [None, 32])
def test_a_flooding_host_ends_the_run_within_its_byte_budget(budget_mib: int | None) -> None:
    # the default budget (128 MiB), and one given with --max-traffic
    budget = budget_mib or 128
    flag = ["--max-traffic", str(budget_mib)] if budget_mib else []
    # past the budget before the first answer: the run must end whatever the timing
    with _Flooding(burst_mb=budget + 16) as host:
        started = time.monotonic()
        code, out, err, peak = _measured(
            ["check-host", host.url, "--examples", "3", "--seed", "0", *flag],
            kill_above_mb=budget + 1000, timeout=60)
        seconds = time.monotonic() - started
    print(f"check-host against a flooding host, budget {budget} MiB: {peak:.0f} MB peak, "
          f"{seconds:.1f} s")
    assert code == 2, (code, out, err)
    assert ("the host sent more than check-host holds at once: "
            f"{budget * 1024 * 1024} bytes of messages") in err, err
    assert "Traceback" not in err
    # the budget counts the bytes held; a 3 MB message of a million {} is ~100 MB once
    # parsed, and up to three can be alive at once (the one checked, the one read, one
    # the collector has not freed yet on a loaded machine): 334 MB was seen at 128 MiB.
    # Holding the whole burst parsed would be gigabytes.
    assert peak < budget + 350, peak


_CONTROLS = "\x9b\x85\u202e\u2066\u2069\u200e\u200f\u061c\x7f"
"""C1, bidi and DEL: what JSON does not escape and a terminal may act on."""

_STYLING_HOST = f"""\
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue
    result = None
    if request.get("method") == "initialize":
        result = {{"protocolVersion": "0.7.0", "serverSeq": 0, "snapshots": []}}
    print(json.dumps({{"jsonrpc": "2.0", "id": request["id"], "result": result}}), flush=True)
    if request.get("method") == "initialize":
        # a notification no version has (version-filter fails), styled
        print(json.dumps({{"jsonrpc": "2.0", "method": "x{_CONTROLS}y",
                          "params": {{"text": "a{_CONTROLS}b\\ud800"}}}}), flush=True)
"""


def _controls_in(text: str) -> list[str]:
    return sorted({c for c in text if c in _CONTROLS or "\x80" <= c <= "\x9f"})


def test_check_host_prints_a_hosts_controls_escaped(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from agenthost_protocol.cli.check_host import _lines
    from agenthost_protocol.hostcheck import Violation

    host = tmp_path / "styling.py"
    host.write_text(_STYLING_HOST)
    command = f"{sys.executable} {host}"
    report = tmp_path / "report.jsonl"
    code = main(["check-host", "--stdio", command, "--examples", "1", "--steps", "2", "--seed",
                 "0", "--shrink-time", "2", "--report", str(report)])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "FAIL version-filter" in out
    assert _controls_in(out + err) == []
    # the transcript printed is JSON with \uXXXX escapes: the host's text comes back
    printed = [line for line in out.splitlines() if line.startswith("{")]
    messages = [json.loads(line).get("message") for line in printed]
    # a lone surrogate too: JSON can carry it, UTF-8 cannot
    assert {"jsonrpc": "2.0", "method": f"x{_CONTROLS}y",
            "params": {"text": f"a{_CONTROLS}b\ud800"}} in messages
    assert "\\u202e" in out
    # which --replay runs again, and check-traffic reads as the --report file
    again = tmp_path / "printed.jsonl"
    again.write_text("\n".join(printed) + "\n", encoding="utf-8")
    assert main(["check-host", "--stdio", command, "--replay", str(again)]) == 1
    assert main(["check-traffic", str(again)]) == 1
    out, err = capsys.readouterr()
    assert _controls_in(out + err) == []
    # the --report file may stay UTF-8
    assert f"x{_CONTROLS}y" in report.read_text(encoding="utf-8")
    assert main(["check-traffic", str(report)]) == 1
    # a violation's text (a host's channel name, say) is escaped where it is printed
    shown = "\n".join(_lines({"state-agrees": (Violation(
        prop="state-agrees", index=3, message=f"ahp-chat:/{_CONTROLS} at serverSeq 2"),)}))
    assert _controls_in(shown) == []
    assert "ahp-chat:/\\x9b\\x85\\u202e" in shown


def test_a_check_host_process_takes_its_token_from_ahp_token(served: str) -> None:
    # issue 29: the token need not be on the command line, which every local user reads
    bare, token = served.split("?token=", maxsplit=1)
    env = {**child_env(), "AHP_TOKEN": token}
    proc = _check_host_process(bare, "--examples", "1", "--steps", "4", "--seed", "0",
                               env=env)
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    stdout, stderr = _reap(proc)
    assert proc.returncode == 0, stdout + stderr
    assert "12 passed, 0 failed" in stdout
    assert token.encode() not in cmdline
    # and a wrong one is refused with its cause named
    proc = _check_host_process(bare, "--examples", "1", env={**env, "AHP_TOKEN": "wrong"})
    stdout, stderr = _reap(proc)
    assert proc.returncode == 2
    assert "the host refused the access token (HTTP 401)" in stderr, stderr


def test_the_byte_budget_is_what_is_held_not_what_was_sent(served: str) -> None:
    # an example's messages go back to the budget once it is checked: a budget of a
    # few examples' worth lasts a run of many
    from agenthost_protocol.hostcheck.driver import Budget

    budget = Budget(400_000)
    outcome = check_host(WebSocketTarget(url=served), examples=20, seed=1, budget=budget)
    assert outcome.error is None, outcome.error
    assert outcome.failed == []
    assert outcome.examples >= 20
    assert budget.held == 0
