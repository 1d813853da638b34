"""The README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_readme_example_runs(capsys: object) -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    assert len(code.group(1).splitlines()) <= 15
    exec(compile(code.group(1), "README.md", "exec"), {})
