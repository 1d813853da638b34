"""mypy --strict enforces that every reducer ``match`` handles every action of its channel.

The reducers end each ``match`` with ``case _: assert_never(action)`` (the chat
reducer routes by a table that its ``_handler_of`` match proves and a test checks).  This
test type-checks two copies of that pattern from ``tests/typing_cases/``: the
complete one must pass, and the one with a case removed must fail exactly at
its ``assert_never`` call, naming the unhandled action class.  One mypy run
per file, with its own config (the project config ignores that folder) and a
throwaway cache.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

CASES = Path(__file__).parent / "typing_cases"
ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def run_mypy(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], tuple[str, int]]:
    workdir = tmp_path_factory.mktemp("mypy")
    config = workdir / "mypy.ini"
    # follow_imports = silent: errors elsewhere in the package are not this test's business.
    config.write_text(
        f"[mypy]\nstrict = True\nfollow_imports = silent\nmypy_path = {ROOT}\n", encoding="utf-8"
    )
    cache = workdir / "cache"

    def run(case: Path) -> tuple[str, int]:
        stdout: str
        stderr: str
        status: int
        stdout, stderr, status = mypy_api.run(
            [
                "--config-file",
                str(config),
                "--cache-dir",
                str(cache),
                "--no-error-summary",
                "--show-error-codes",
                str(case),
            ]
        )
        return stdout + stderr, status

    return run


def test_complete_match_type_checks(run_mypy: Callable[[Path], tuple[str, int]]) -> None:
    output, status = run_mypy(CASES / "exhaustive_complete.py")
    assert status == 0, output


def test_missing_case_is_a_mypy_error_at_assert_never(
    run_mypy: Callable[[Path], tuple[str, int]],
) -> None:
    case = CASES / "exhaustive_missing_case.py"
    line = next(
        number
        for number, text in enumerate(case.read_text(encoding="utf-8").splitlines(), start=1)
        if "assert_never(action)" in text
    )
    output, status = run_mypy(case)
    assert status == 1, output
    errors = [text for text in output.splitlines() if ": error:" in text]
    assert len(errors) == 1, output
    assert f"exhaustive_missing_case.py:{line}: error:" in errors[0]
    assert '"assert_never" has incompatible type "AnnotationsEntryRemovedAction"' in errors[0]
    assert '"Never"' in errors[0]
