"""The ``agenthost-protocol`` command: ``conformance`` and ``reduce``."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import cli
from agenthost_protocol.conformance import bundled_corpus


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = cli.main(argv)
    return code, capsys.readouterr().out.splitlines()


def test_conformance_on_the_bundled_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(["conformance"], capsys)
    assert out == ["286 passed, 0 failed"]
    assert code == 0


def test_conformance_runs_user_cases_and_reports_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "round-trips").mkdir()
    shutil.copy(bundled_corpus() / "round-trips" / "004-session-status-bitset-flags.json",
                tmp_path / "round-trips")
    (tmp_path / "round-trips" / "900-mine.json").write_text(json.dumps({
        "name": "mine", "type": "SessionStatus", "input": 3, "acceptableOutputs": [4]}))
    (tmp_path / "round-trips" / "901-unknown-type.json").write_text(json.dumps({
        "name": "bad", "type": "NoSuchType", "input": 3, "acceptableOutputs": [3]}))
    (tmp_path / "round-trips" / "902-broken.json").write_text("{")
    code, out = _run(["conformance", str(tmp_path)], capsys)
    assert code == 1
    assert out[-1] == "1 passed, 3 failed"
    assert [line.split(":")[0] for line in out[:-1]] == [
        "FAIL round-trip 900-mine.json",
        "FAIL round-trip 901-unknown-type.json",
        "FAIL round-trip 902-broken.json",
    ]


def test_conformance_reducer_failure_names_the_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "reducers").mkdir()
    case = json.loads((bundled_corpus() / "reducers" / "003-session-ready.json").read_text())
    case["expected"]["lifecycle"] = "creating"
    (tmp_path / "reducers" / "x.json").write_text(json.dumps(case))
    code, out = _run(["conformance", str(tmp_path)], capsys)
    assert code == 1
    assert "$.lifecycle" in out[0]
    assert out[-1] == "0 passed, 1 failed"


def test_reduce_lines() -> None:
    initial = {"title": "t", "content": [], "claim": {"kind": "client", "clientId": "c"}}
    lines = [
        {"reducer": "terminal", "initial": initial,
         "actions": [{"type": "terminal/data", "data": "ab"},
                     {"type": "terminal/data", "data": "cd"}], "trace": True},
        {"reducer": "terminal", "initial": initial, "actions": [{"type": "terminal/nope"}]},
        {"reducer": "terminal", "initial": {"title": 1}, "actions": []},
        {"reducer": "galaxy", "initial": {}, "actions": []},
        "not json",
    ]
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
    inp = io.BytesIO(text.encode("utf-8"))
    out = io.BytesIO()
    cli._reduce(None, inp, out)  # type: ignore[arg-type]
    answers = [json.loads(line) for line in out.getvalue().decode("utf-8").splitlines()]
    assert len(answers) == 5
    assert answers[0]["state"]["content"] == [{"type": "unclassified", "value": "abcd"}]
    assert [s["content"][0]["value"] for s in answers[0]["trace"]] == ["ab", "abcd"]
    assert answers[1] == {"state": initial}
    assert answers[2]["error"].endswith("@ $.initial.title")
    assert "unknown reducer" in answers[3]["error"]
    assert answers[4]["error"].startswith("not JSON")


def test_reduce_uses_the_given_clock() -> None:
    line = json.dumps({
        "reducer": "chat", "now": 123456,
        "initial": {"resource": "ahp-chat:/c", "title": "a", "status": 1,
                    "modifiedAt": "1970-01-01T00:00:00.000Z", "turns": []},
        "actions": [{"type": "chat/turnStarted", "turnId": "t1",
                     "startedAt": "1970-01-01T00:00:01.000Z",
                     "message": {"text": "hi", "origin": {"kind": "user"}}}]})
    assert cli.reduce_line(line)["state"]["modifiedAt"] == "1970-01-01T00:02:03.456Z"


def test_console_script_module_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agenthost_protocol.cli", "conformance"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == "286 passed, 0 failed"


def test_compat_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(["compat"], capsys)
    assert code == 0
    assert out[0] == "wire shape of 0.7.0 is compatible with: 0.7.0"
    for version in ("0.6.0", "0.5.2", "0.5.1"):
        assert any(line.startswith(f"{version} -> 0.7.0: ") for line in out), version
    assert "  ChatForkSource: type removed: struct, 2 fields" in out


# -- hostile input to the commands ------------------------------------------------------------


@pytest.mark.parametrize("make", ["missing", "empty", "unrelated"])
def test_conformance_without_a_corpus_is_an_error(
    make: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "corpus"
    if make != "missing":
        path.mkdir()
    if make == "unrelated":
        (path / "reducers").mkdir()
        (path / "reducers" / "notes.txt").write_text("x")
    code = cli.main(["conformance", str(path)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and str(path) in captured.err


def test_conformance_reports_malformed_cases_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reducers = tmp_path / "reducers"
    reducers.mkdir()
    good = bundled_corpus() / "reducers" / "001-root-agentschanged.json"
    shutil.copy(good, reducers / "000-good.json")
    base = json.loads(good.read_text())
    cases = {
        "101-actions-not-array": {**base, "actions": 5},
        "102-type-array": {**base, "actions": [{"type": [1]}]},
        "103-reducer-array": {**base, "reducer": ["root"]},
        "104-initial-string": {**base, "initial": "x"},
        "105-no-expected": {k: v for k, v in base.items() if k != "expected"},
    }
    for name, case in cases.items():
        (reducers / f"{name}.json").write_text(json.dumps(case))
    deep = "[" * 100_000 + "]" * 100_000
    (reducers / "106-deep.json").write_text(f'{{"reducer": "root", "initial": {deep}}}')
    code = cli.main(["conformance", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    failed = sorted(line.split(":")[0] for line in out if line.startswith("FAIL"))
    assert failed == [f"FAIL reducer {name}.json" for name in sorted([*cases, "106-deep"])]
    assert out[-1] == "1 passed, 6 failed"


def run_reduce(data: bytes) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "agenthost_protocol.cli", "reduce"],
        input=data, capture_output=True, check=False, timeout=60,
        env={**os.environ, "LC_ALL": "C", "PYTHONIOENCODING": "ascii"},
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]


def test_reduce_reads_bytes_and_answers_every_bad_line() -> None:
    initial = {"title": "t", "content": [], "claim": {"kind": "client", "clientId": "c"}}
    good = json.dumps({"reducer": "terminal", "initial": initial,
                       "actions": [{"type": "terminal/data", "data": "h\u00e9llo"}]},
                      ensure_ascii=False).encode("utf-8")
    lines = [
        good,
        b'{"reducer": "terminal", "initial": \xff\xfe}',
        good.replace("h\u00e9llo".encode(), b"\\ud800"),
        json.dumps({"reducer": "chat", "now": 10**16, "initial": {}, "actions": []}).encode(),
        good,
    ]
    results = run_reduce(b"\n".join(lines) + b"\n")
    assert len(results) == 5
    assert results[0]["state"]["content"][0]["value"] == "h\u00e9llo"
    assert "not UTF-8" in results[1]["error"]
    assert "lone surrogate" in results[2]["error"]
    assert "within" in results[3]["error"]
    assert results[4] == results[0]


def test_the_help_texts_show_how_to_reach_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listing = " ".join(capsys.readouterr().out.split())
    # the line `serve` has in the command list shows the URL with its token
    assert "serve run an AHP 0.7.0 host at ws://HOST:PORT/?token=TOKEN" in listing
    assert "sessions" in listing
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = capsys.readouterr().out
    usage = text.split("\n\n", 1)[0]
    assert "MODULE:ATTR" in usage
    description = " ".join(text.split("\n\n", 2)[1].split())
    assert description.startswith("Run a real AHP 0.7.0 host; it prints "
                                  "'serving ws://HOST:PORT/?token=TOKEN' first")
    assert "--new-token" in text
