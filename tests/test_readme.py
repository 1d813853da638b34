"""The README's example runs as written, and it and the docs examples type-check strictly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"


def test_readme_example_runs(capsys: object) -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    assert len(code.group(1).splitlines()) <= 15
    exec(compile(code.group(1), "README.md", "exec"), {})


def _mypy(tmp_path: Path, name: str, code: str) -> subprocess.CompletedProcess[str]:
    target = tmp_path / name
    target.write_text(code, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", str(tmp_path / ".mypy"), str(target)],
        capture_output=True, text=True, check=False, timeout=300,
        cwd=Path(__file__).parent.parent,
    )


def test_readme_example_type_checks_strictly(tmp_path: Path) -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    done = _mypy(tmp_path, "readme_example.py", code.group(1))
    assert done.returncode == 0, done.stdout
    # The check has teeth: a misspelt field of a decoded state is an error.
    typo = code.group(1) + "session.titel\n"
    done = _mypy(tmp_path, "readme_typo.py", typo)
    assert done.returncode == 1 and '"SessionState" has no attribute "titel"' in done.stdout


DOCS = Path(__file__).parent.parent / "docs"


@pytest.mark.parametrize(("page", "index"), [("host.md", 0), ("client.md", 0), ("client.md", 1)])
def test_docs_examples_type_check_strictly(tmp_path: Path, page: str, index: int) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    done = _mypy(tmp_path, f"{page[:-3]}_{index}.py", blocks[index])
    assert done.returncode == 0, done.stdout


def test_client_results_are_typed_for_narrowing(tmp_path: Path) -> None:
    code = (
        "from agenthost_protocol import types as t\n"
        "from agenthost_protocol.client import ResponseReceived, ServerRequestReceived\n"
        "def title(event: ResponseReceived) -> int:\n"
        "    match event.result:\n"
        "        case t.ListSessionsResult(items=items):\n"
        "            return len(items)\n"
        "    return 0\n"
        "def uri(event: ServerRequestReceived) -> str:\n"
        "    return event.params.uri if isinstance(event.params, t.ResourceReadParams) else ''\n"
        "def wrong(event: ResponseReceived) -> int:\n"
        "    return len(event.result.items)\n"
    )
    done = _mypy(tmp_path, "client_typing.py", code)
    # ``event.result`` is a union of the result classes: narrowing works, and
    # using a field without narrowing is an error, not ``Any``.
    assert done.returncode == 1
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert errors and all("client_typing.py:11:" in line for line in errors), done.stdout
