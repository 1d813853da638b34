"""Write the version registry of ``agenthost_protocol/versions.py`` from a spec's ``registry.json``.

Usage::

    python tools/gen_registry.py [SPEC_DIR] [--check]

SPEC_DIR holds ``registry.json`` (the values of the spec's
``types/version/registry.ts`` and ``types/action-origin.generated.ts``,
extracted as data); it defaults to the bundled ``tests/data/ahp-spec``.  The
tool rewrites the block between the ``BEGIN GENERATED REGISTRY`` and ``END
GENERATED REGISTRY`` markers of ``versions.py``: ``PROTOCOL_VERSION``,
``SUPPORTED_PROTOCOL_VERSIONS`` and the three maps.  ``--check`` writes
nothing and exits 1 when the block is stale (``tests/test_versions.py`` runs
it, so the registry cannot drift from the bundled data).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ROOT / "agenthost_protocol" / "versions.py"
BUNDLED_SPEC = ROOT / "tests" / "data" / "ahp-spec"
BEGIN = "# BEGIN GENERATED REGISTRY (tools/gen_registry.py; do not edit)\n"
END = "# END GENERATED REGISTRY\n"


def render(registry: dict[str, Any]) -> str:
    actions: dict[str, str] = registry["actionIntroducedIn"]
    dispatchable: dict[str, bool] = registry["isClientDispatchable"]
    notifications: dict[str, str] = registry["notificationIntroducedIn"]
    if set(actions) != set(dispatchable):
        raise SystemExit("registry.json: the two action maps name different actions")
    supported = ", ".join(f'"{v}"' for v in registry["supportedProtocolVersions"])
    n_client = sum(dispatchable.values())
    lines = [
        BEGIN,
        f'PROTOCOL_VERSION: Final = "{registry["protocolVersion"]}"\n',
        '"""The AHP version this library implements."""\n',
        "\n",
        f"SUPPORTED_PROTOCOL_VERSIONS: Final[tuple[str, ...]] = ({supported})\n",
        '"""Versions this library can speak, most preferred first."""\n',
        "\n",
        "ACTION_INTRODUCED_IN: Final[Mapping[str, str]] = MappingProxyType({\n",
        *(f'    "{k}": "{v}",\n' for k, v in actions.items()),
        "})\n",
        '"""Action ``type`` -> the protocol version that introduced it '
        f'(all {len(actions)})."""\n',
        "\n",
        "NOTIFICATION_INTRODUCED_IN: Final[Mapping[str, str]] = MappingProxyType({\n",
        *(f'    "{k}": "{v}",\n' for k, v in notifications.items()),
        "})\n",
        '"""Notification method -> introducing version '
        '(``action`` is versioned per action type)."""\n',
        "\n",
        "IS_CLIENT_DISPATCHABLE: Final[Mapping[str, bool]] = MappingProxyType({\n",
        *(f'    "{k}": {v},\n' for k, v in dispatchable.items()),
        "})\n",
        '"""Action ``type`` -> whether a client may dispatch it '
        f'({n_client} of {len(actions)} may)."""\n',
        END,
    ]
    return "".join(lines)


def updated_source(source: str, registry: dict[str, Any]) -> str:
    start, end = source.index(BEGIN), source.index(END) + len(END)
    return source[:start] + render(registry) + source[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gen_registry.py",
        description="Write the registry block of agenthost_protocol/versions.py "
                    "from registry.json.",
    )
    parser.add_argument("spec", type=Path, nargs="?", default=BUNDLED_SPEC,
                        help="a spec folder holding registry.json (default: tests/data/ahp-spec)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if versions.py is stale")
    args = parser.parse_args(argv)
    path = args.spec / "registry.json"
    if not path.is_file():
        parser.error(f"{path} does not exist: SPEC must be a spec folder")
    registry = json.loads(path.read_text(encoding="utf-8"))
    source = VERSIONS.read_text(encoding="utf-8")
    new = updated_source(source, registry)
    if args.check:
        if new != source:
            print(f"{VERSIONS} is stale: run python tools/gen_registry.py")
            return 1
        return 0
    VERSIONS.write_text(new, encoding="utf-8")
    print(f"wrote the registry of {registry['protocolVersion']} into {VERSIONS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
