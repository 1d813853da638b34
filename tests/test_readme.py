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


def test_methods_type_params_and_results_statically(tmp_path: Path) -> None:
    """The method constants tie params and results to their method, as
    lsprotocol's per-method classes do: right uses check, wrong ones are errors."""
    good = (
        "from agenthost_protocol import methods, types as t, wire\n"
        "from agenthost_protocol.client import ClientConnection, ResponseReceived\n"
        "from agenthost_protocol.host import RequestReceived, ResponseReceived as HostResponse\n"
        "def client_side(client: ClientConnection, event: ResponseReceived) -> str:\n"
        "    client.request(methods.LIST_SESSIONS, t.ListSessionsParams(limit=5))\n"
        "    return event.result_for(methods.LIST_SESSIONS).items[0].title\n"
        "def host_side(event: RequestReceived, answer: HostResponse) -> None:\n"
        "    if (request := event.narrow(methods.LIST_SESSIONS)) is not None:\n"
        "        assert request.params.limit is None or request.params.limit > 0\n"
        "        request.respond(t.ListSessionsResult(items=()))\n"
        "    if (created := event.narrow(methods.CREATE_SESSION)) is not None:\n"
        "        created.respond(None)\n"
        "    print(answer.result_for(methods.RESOURCE_READ).data)\n"
        "def decode(line: bytes) -> str | None:\n"
        "    envelope = methods.ACTION.params_of(wire.parse_message(line))\n"
        "    return None if envelope is None else envelope.channel\n"
    )
    done = _mypy(tmp_path, "methods_good.py", good)
    assert done.returncode == 0, done.stdout
    wrong = {
        # P is invariant, so mypy reports the mismatch as a P it cannot infer
        "client.request(methods.LIST_SESSIONS, t.ResourceReadParams(uri='x'))":
            'Cannot infer value of type parameter "P"',
        "event.result_for(methods.LIST_SESSIONS).items[0].titel":
            'has no attribute "titel"',
        "request.respond(t.ResourceReadResult(data='', encoding='utf-8'))":
            'incompatible type "ResourceReadResult"',
        "created.respond(t.ListSessionsResult(items=()))":
            'incompatible type "ListSessionsResult"',
        "wire.parse_message(line).params.titel":
            'has no attribute "titel"',
    }
    code = (
        "from agenthost_protocol import methods, types as t, wire\n"
        "from agenthost_protocol.client import ClientConnection, ResponseReceived\n"
        "from agenthost_protocol.host import RequestReceived\n"
        "def f(client: ClientConnection, event: ResponseReceived, host_event: RequestReceived,\n"
        "      line: bytes) -> None:\n"
        "    request = host_event.narrow(methods.LIST_SESSIONS)\n"
        "    created = host_event.narrow(methods.CREATE_SESSION)\n"
        "    assert request is not None and created is not None\n"
        + "".join(f"    {statement}\n" for statement in wrong)
    )
    done = _mypy(tmp_path, "methods_wrong.py", code)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    for number, expected in enumerate(wrong.values(), start=9):
        hits = [e for e in errors if f"methods_wrong.py:{number}:" in e]
        assert hits and any(expected in e for e in hits), (number, expected, done.stdout)
