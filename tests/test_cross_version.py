"""What an older supported peer sends still decodes: the round-trip corpora of 0.6.0, 0.5.2, 0.5.1.

Every round-trip fixture of each older supported release (bundled from the
upstream release commits under ``tests/data/releases/<v>/round-trips``) is
decoded with the 0.7.0 model and re-encoded, and must give the fixture's
``acceptableOutputs[0]``.  A fixture that cannot pass is listed in
``KNOWN_WIRE_DIFFERENCES`` with the wire difference that breaks it (inventory
§7, "What an older supported peer actually sends") and runs as a strict
``xfail``, so it is reported, never skipped, and flips to an error the day it
passes.  Today the list is empty: all 76 older fixtures pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agenthost_protocol import conformance
from agenthost_protocol.versions import SUPPORTED_PROTOCOL_VERSIONS

RELEASES = Path(__file__).parent / "data" / "releases"
OLDER = SUPPORTED_PROTOCOL_VERSIONS[1:]

# (version, fixture file) -> the wire difference that makes it fail under 0.7.0.
KNOWN_WIRE_DIFFERENCES: dict[tuple[str, str], str] = {}

EXPECTED_COUNTS = {"0.6.0": 26, "0.5.2": 26, "0.5.1": 24}


def cases() -> list[Any]:
    params = []
    for version in OLDER:
        for file in sorted((RELEASES / version / "round-trips").glob("*.json")):
            reason = KNOWN_WIRE_DIFFERENCES.get((version, file.name))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(version, file, id=f"{version}/{file.stem}", marks=marks))
    return params


def test_every_older_supported_release_is_bundled() -> None:
    assert set(OLDER) == set(EXPECTED_COUNTS)
    for version, count in EXPECTED_COUNTS.items():
        assert len(list((RELEASES / version / "round-trips").glob("*.json"))) == count, version
        assert (RELEASES / version / "UPSTREAM.md").is_file()


@pytest.mark.parametrize(("version", "file"), cases())
def test_older_round_trip_decodes_and_re_encodes(version: str, file: Path) -> None:
    case = json.loads(file.read_text(encoding="utf-8"))
    result = conformance.run_round_trip_case(file.name, case)
    assert result.passed, f"{version} {file.name}: {result.message}"
