"""Freeze the wire shape of the living model into a snapshot file.

Usage::

    python tools/freeze_wire_shape.py            # write _wire_shapes/<PROTOCOL_VERSION>.json
    python tools/freeze_wire_shape.py --check    # compare the model with the snapshots
    python tools/freeze_wire_shape.py --stdout   # print the shape, write nothing

The snapshot is ``agenthost_protocol/_wire_shapes/<PROTOCOL_VERSION>.json``,
shipped inside the package so installed users can run
``python -m agenthost_protocol.compat``.  A snapshot is frozen: if one already
exists with different content the tool refuses, and says whether the change
is compatible, unless ``--force`` is given (only while that version is still
unreleased).  See ``docs/versioning.md`` for the release procedure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agenthost_protocol.compat import (  # noqa: E402
    check_wire_compatibility,
    compare_wire_shapes,
    describe_wire_shape,
    dumps_wire_shape,
)
from agenthost_protocol.versions import PROTOCOL_VERSION  # noqa: E402

SNAPSHOT_DIR = ROOT / "agenthost_protocol" / "_wire_shapes"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check compatibility, write nothing")
    parser.add_argument("--stdout", action="store_true", help="print the shape, write nothing")
    parser.add_argument("--force", action="store_true", help="overwrite an existing snapshot")
    parser.add_argument(
        "--output-dir", type=Path, default=SNAPSHOT_DIR, help="where snapshots live"
    )
    args = parser.parse_args(argv)

    if args.check:
        problems = check_wire_compatibility()
        for problem in problems:
            print(problem)
        print(f"{len(problems)} incompatibilities", file=sys.stderr)
        return 1 if problems else 0

    shape = describe_wire_shape()
    text = dumps_wire_shape(shape)
    if args.stdout:
        sys.stdout.write(text)
        return 0

    target: Path = args.output_dir / f"{PROTOCOL_VERSION}.json"
    if target.exists():
        old = target.read_text(encoding="utf-8")
        if old == text:
            print(f"{target} is up to date")
            return 0
        if not args.force:
            problems = compare_wire_shapes(json.loads(old), shape)
            verdict = "compatible" if not problems else f"{len(problems)} incompatibilities"
            print(
                f"{target} exists and differs from the model ({verdict}); it is frozen."
                " Re-run with --force only if this version is unreleased.",
                file=sys.stderr,
            )
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return 1
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target} ({len(shape['types'])} types)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
