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
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agenthost_protocol.cli import main
from agenthost_protocol.hostcheck import Transcript, check
from agenthost_protocol.hostcheck.driver import StdioTarget, WebSocketTarget
from agenthost_protocol.hostcheck.machine import check_host, replay

from ._aio_peer import child_env, serve_command
from .hostcheck_faults import FAULTS, Fault, FaultyHost, NullResultOmitted

LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"
EXAMPLES = 500 if LONG else 50
"""Examples against our serve: the CI profile, and the long one."""
FAULT_EXAMPLES = 500
"""At most this many to find a fault (the run stops at the first failure)."""
SHRINK_SECONDS = 60.0 if LONG else 4.0


@contextlib.contextmanager
def _serve(tmp: Path, *args: str) -> Iterator[str]:
    env = child_env()
    env["XDG_DATA_HOME"] = str(tmp)
    with open(tmp / "serve.err", "wb") as err:
        proc = subprocess.Popen(serve_command("--port", "0", "--no-store", *args),
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
