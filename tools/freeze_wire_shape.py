"""Freeze the wire shapes of the supported AHP releases from their upstream
JSON Schemas, and generate the compatibility tables of ``docs/versioning.md``.

Usage::

    python tools/freeze_wire_shape.py SPEC_DIR                  # every supported version
    python tools/freeze_wire_shape.py SPEC_DIR --version 0.6.0  # one (repeatable)
    python tools/freeze_wire_shape.py SPEC_DIR --check          # compare, write nothing
    python tools/freeze_wire_shape.py SPEC_DIR --version 0.7.0 --stdout
    python tools/freeze_wire_shape.py --doc                     # rewrite the docs tables
    python tools/freeze_wire_shape.py --doc --check             # are they current?

``SPEC_DIR`` is laid out like ``../shared/ahp-spec``: the current release's
``schema/`` (with ``registry.json`` and ``UPSTREAM.md`` beside it) and
``releases/<version>/schema/`` (with ``UPSTREAM.md``) for older releases.  It
may also be a single folder of the five ``*.schema.json`` files, with exactly
one ``--version``.  A shape is derived from that release's own schemas
(``compat.derive_wire_shape``), never from this library's model, and records
the upstream commit read from ``UPSTREAM.md`` (or ``PROVENANCE.md``).

The shapes go to ``agenthost_protocol/_wire_shapes/<version>.json`` and ship
in the package.  Upstream releases do not change, so neither should their
shapes: the tool refuses to overwrite a differing shape without ``--force``
(the derivation itself changed: review the difference first).

``--doc`` rewrites, from the committed shapes alone (no spec needed), the
generated blocks of ``docs/versioning.md``: the exceptions of the living-model
check and the wire differences of every older supported version;
``tests/test_compat.py`` fails when they are stale.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agenthost_protocol.compat import (  # noqa: E402
    EXCLUDED_TYPES,
    MODEL_WIDENINGS,
    SCHEMA_FILES,
    ShapeSource,
    WireShape,
    compare_wire_shapes,
    derive_wire_shape,
    dumps_wire_shape,
    render_markdown_report,
)
from agenthost_protocol.semver import parse_version  # noqa: E402
from agenthost_protocol.versions import SUPPORTED_PROTOCOL_VERSIONS  # noqa: E402

SNAPSHOT_DIR = ROOT / "agenthost_protocol" / "_wire_shapes"
DOC = ROOT / "docs" / "versioning.md"
REPOSITORY = "microsoft/agent-host-protocol"
_COMMIT = re.compile(r"\b[0-9a-f]{40}\b")


class ToolError(Exception):
    """A problem with the arguments or the spec folder."""


# -- finding a release's schemas ----------------------------------------------------


def _is_schema_dir(path: Path) -> bool:
    return all((path / f"{stem}.schema.json").is_file() for stem in SCHEMA_FILES)


def _registry_version(folder: Path) -> str | None:
    registry = folder / "registry.json"
    if not registry.is_file():
        return None
    version = json.loads(registry.read_text("utf-8")).get("protocolVersion")
    return version if isinstance(version, str) else None


def schema_dir_for(spec_dir: Path, version: str) -> Path:
    """The folder holding ``version``'s schemas inside ``spec_dir``."""
    if _is_schema_dir(spec_dir):
        return spec_dir
    release = spec_dir / "releases" / version / "schema"
    if _is_schema_dir(release):
        return release
    if _registry_version(spec_dir) == version and _is_schema_dir(spec_dir / "schema"):
        return spec_dir / "schema"
    raise ToolError(f"{spec_dir}: no schemas for {version}")


def upstream_commit(schema_dir: Path) -> str:
    """The upstream commit named first in the ``UPSTREAM.md`` or ``PROVENANCE.md``
    next to (or in) ``schema_dir``."""
    for folder in (schema_dir.parent, schema_dir):
        for name in ("UPSTREAM.md", "PROVENANCE.md"):
            note = folder / name
            if note.is_file():
                found = _COMMIT.search(note.read_text("utf-8"))
                if found:
                    return found.group(0)
    raise ToolError(f"{schema_dir}: no UPSTREAM.md or PROVENANCE.md naming the upstream commit")


def donor_for(spec_dir: Path, version: str) -> tuple[Path, str] | None:
    """The oldest release newer than ``version`` with the same MAJOR.MINOR
    (wire-compatible by SemVer) whose schemas ``spec_dir`` holds."""
    v = parse_version(version)
    newer = [
        s
        for s in SUPPORTED_PROTOCOL_VERSIONS
        if (p := parse_version(s)) > v and (p.major, p.minor) == (v.major, v.minor)
    ]
    for candidate in sorted(newer, key=parse_version):
        try:
            return schema_dir_for(spec_dir, candidate), candidate
        except ToolError:
            continue
    return None


def derive(spec_dir: Path, version: str) -> WireShape:
    """``version``'s wire shape, from its schemas in ``spec_dir``."""
    schema_dir = schema_dir_for(spec_dir, version)
    registered = _registry_version(schema_dir.parent)
    if registered is not None and registered != version:
        raise ToolError(f"{schema_dir} holds the schemas of {registered}, not {version}")
    source: ShapeSource = {
        "repository": REPOSITORY,
        "commit": upstream_commit(schema_dir),
        "path": "schema/",
        "licence": "MIT",
    }
    donor = None if _is_schema_dir(spec_dir) else donor_for(spec_dir, version)
    return derive_wire_shape(
        schema_dir,
        version,
        source=source,
        donor_dir=donor[0] if donor else None,
        donor_version=donor[1] if donor else None,
    )


# -- the generated blocks of docs/versioning.md ----------------------------------------

BLOCKS = ("wire-check-exceptions", "wire-differences")


def _begin(block: str) -> str:
    return f"<!-- BEGIN {block}: generated by tools/freeze_wire_shape.py --doc; do not edit -->"


def _end(block: str) -> str:
    return f"<!-- END {block} -->"


def render_block(block: str) -> str:
    """The Markdown of one generated block."""
    if block == "wire-differences":
        return render_markdown_report()
    lines = ["| schema type | why the living-model check skips it |", "|---|---|"]
    lines += [f"| `{name}` | {reason} |" for name, reason in sorted(EXCLUDED_TYPES.items())]
    lines += [
        "",
        "| field | 0.7.0 schema | living model | why |",
        "|---|---|---|---|",
    ]
    for (owner, wire), (schema, model, reason) in sorted(MODEL_WIDENINGS.items()):
        field = f"`{wire}` (every type)" if owner == "*" else f"`{owner}.{wire}`"
        cells = [f"`{t}`".replace("|", "\\|") for t in (schema, model)]
        lines.append(f"| {field} | {cells[0]} | {cells[1]} | {reason} |")
    return "\n".join(lines) + "\n"


def splice_doc(text: str) -> str:
    """``text`` (the docs page) with every generated block rewritten."""
    for block in BLOCKS:
        begin, end = _begin(block), _end(block)
        start, stop = text.find(begin), text.find(end)
        if start < 0 or stop < start:
            raise ToolError(f"the docs page has no {begin!r} ... {end!r} block")
        text = f"{text[: start + len(begin)]}\n\n{render_block(block)}\n{text[stop:]}"
    return text


# -- command line ---------------------------------------------------------------------


def _write_shapes(args: argparse.Namespace) -> int:
    versions: list[str] = args.version or list(SUPPORTED_PROTOCOL_VERSIONS)
    if _is_schema_dir(args.spec_dir) and len(versions) != 1:
        raise ToolError("a single schema folder needs exactly one --version")
    if args.stdout and len(versions) != 1:
        raise ToolError("--stdout needs exactly one --version")
    failed = 0
    for version in versions:
        shape = derive(args.spec_dir, version)
        text = dumps_wire_shape(shape)
        if args.stdout:
            sys.stdout.write(text)
            continue
        target: Path = args.output_dir / f"{version}.json"
        old = target.read_text("utf-8") if target.exists() else None
        if old == text:
            print(f"{target} is up to date")
            continue
        if args.check or (old is not None and not args.force):
            if old is None:
                print(f"{target} is missing", file=sys.stderr)
            else:
                before = json.loads(old)
                changes = compare_wire_shapes(before, shape) + compare_wire_shapes(shape, before)
                print(
                    f"{target} differs from what the schemas give ({len(changes)} changes)"
                    + ("" if args.check else "; re-run with --force if that is intended"),
                    file=sys.stderr,
                )
                for change in changes[:20]:
                    print(f"  {change}", file=sys.stderr)
            failed += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target} ({len(shape['types'])} types)")
    if not args.stdout and args.output_dir.is_dir():
        for stale in sorted(args.output_dir.glob("*.json")):
            if stale.stem not in SUPPORTED_PROTOCOL_VERSIONS:
                print(f"{stale} is not a supported version: delete it", file=sys.stderr)
                failed += 1
    return 1 if failed else 0


def _write_doc(args: argparse.Namespace) -> int:
    doc: Path = args.doc_file
    text = doc.read_text("utf-8")
    new = splice_doc(text)
    if new == text:
        print(f"{doc} is up to date")
        return 0
    if args.check:
        print(
            f"{doc}: the generated blocks are stale; run tools/freeze_wire_shape.py --doc",
            file=sys.stderr,
        )
        return 1
    doc.write_text(new, encoding="utf-8")
    print(f"rewrote the generated blocks of {doc}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See docs/versioning.md, 'The compatibility guard'.",
    )
    parser.add_argument(
        "spec_dir", nargs="?", type=Path, metavar="SPEC_DIR", help="the AHP spec data (see above)"
    )
    parser.add_argument(
        "--version", action="append", help="a version to freeze (default: every supported one)"
    )
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    parser.add_argument("--stdout", action="store_true", help="print the shape, write nothing")
    parser.add_argument("--force", action="store_true", help="overwrite a differing shape")
    parser.add_argument(
        "--output-dir", type=Path, default=SNAPSHOT_DIR, help="where the shapes live"
    )
    parser.add_argument(
        "--doc", action="store_true", help="rewrite the generated blocks of docs/versioning.md"
    )
    parser.add_argument("--doc-file", type=Path, default=DOC, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.doc == (args.spec_dir is not None):
        parser.error("give either SPEC_DIR or --doc")
    try:
        return _write_doc(args) if args.doc else _write_shapes(args)
    except ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
