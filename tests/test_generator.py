"""The generated model is exactly what ``tools/gen_model.py`` writes from the bundled schemas."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "gen_model.py"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_model", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_model_is_what_the_generator_writes(tmp_path: Path) -> None:
    tool = load_tool()
    tool.write(tool.BUNDLED_SPEC, tmp_path, quiet=True)
    written = sorted(p.name for p in tmp_path.iterdir())
    committed = ROOT / "agenthost_protocol" / "types"
    differing = [
        name for name in written
        if (committed / name).read_bytes() != (tmp_path / name).read_bytes()
    ]
    assert not differing, f"regenerate with `python tools/gen_model.py`: {differing} drifted"
    hand_written = {"messages.py", "_text.py", "_model.py"}
    assert set(written) | hand_written == {p.name for p in committed.glob("*.py")}


def test_check_mode_reports_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tool = load_tool()
    tool.write(tool.BUNDLED_SPEC, tmp_path, quiet=True)
    assert tool.main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "chat.py").write_text("# edited by hand\n", encoding="utf-8")
    assert tool.main(["--out", str(tmp_path), "--check"]) == 1
    assert "chat.py differs" in capsys.readouterr().out


def test_help_and_a_bad_spec_folder() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "spec folder" in done.stdout
    done = subprocess.run(
        [sys.executable, str(TOOL), "/nonexistent"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and "SPEC must be a spec folder" in done.stderr
