"""Issue 28: every relative link of the docs, and every doc `check-host` names, exists.

A link of ``docs/*.md`` that is no URL must name a file of this repository
(and, for a Markdown file, one of its headings when it has an anchor);
``check-host`` and ``check-traffic`` name this repository's docs by path
and the AHP specification's sections by page and heading, never a file the
repository does not have (they once pointed at ``docs/specification/...``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agenthost_protocol.cli import main
from agenthost_protocol.hostcheck.verdict import PROPERTIES

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted((REPO / "docs").glob("*.md"))

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_DOC_PATH = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.md)(#[\w-]+)?")


def _prose(text: str) -> list[str]:
    """The lines of a Markdown file outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation but - and _ left
    out, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose(path.read_text(encoding="utf-8")):
        found.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = _slug(heading.group(2))
        # a repeated heading gets -1, -2 ... as GitHub numbers them
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def _broken(target: str, base: Path) -> str | None:
    """Why the relative link ``target`` of a file in ``base`` is broken (``None``: not)."""
    path, _, anchor = target.partition("#")
    if path.startswith("/"):
        return "an absolute path: it points into no repository"
    if not path:
        return None  # an anchor of the same file: the caller knows which
    file = (base / path).resolve()
    if not file.exists():
        return "no such file"
    if anchor and file.suffix == ".md" and anchor not in _anchors(file):
        return f"no heading #{anchor} in {file.name}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_of_the_docs_exists(doc: Path) -> None:
    broken = []
    for number, line in enumerate(_prose(doc.read_text(encoding="utf-8")), 1):
        for target in _LINK.findall(line):
            if _SCHEME.match(target):
                continue  # a URL: not this repository's to check
            if target.startswith("#"):
                why = None if target[1:] in _anchors(doc) else "no such heading here"
            else:
                why = _broken(target, doc.parent)
            if why is not None:
                broken.append(f"{doc.name}, prose line {number}: {target}: {why}")
    assert broken == []


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A heading (`x`)\n\n```\n# not a heading\n```\n")
    assert _anchors(tmp_path / "a.md") == {"a-heading-x"}
    assert _broken("a.md#a-heading-x", tmp_path) is None
    assert _broken("a.md#not-a-heading", tmp_path) is not None
    assert _broken("specification/overview.md#requests", tmp_path) == "no such file"
    assert _broken("/specification/overview", tmp_path) is not None


def _check_host_texts(capsys: pytest.CaptureFixture[str]) -> str:
    """Every text check-host and check-traffic show that is not the host's."""
    texts = []
    for command in ("check-host", "check-traffic"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        texts.append(capsys.readouterr().out)
    for prop in PROPERTIES:
        texts += [prop.section, prop.summary]
    return "\n".join(texts)


def test_check_host_names_only_docs_that_exist(capsys: pytest.CaptureFixture[str]) -> None:
    texts = _check_host_texts(capsys)
    named = _DOC_PATH.findall(texts)
    assert ("docs/conformance.md", "") in named  # the check sees what it should
    for path, anchor in named:
        assert (REPO / path).is_file(), path
        if anchor:
            assert anchor[1:] in _anchors(REPO / path), f"{path}{anchor}"
    # the specification is named by page and heading, not by a file it does not have
    for prop in PROPERTIES:
        assert ".md" not in prop.section and "/" not in prop.section, prop


def test_the_spec_sections_check_host_names_are_the_specs(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    # each section is "Page title: Heading" of the AHP specification (0.7.0), as its
    # pages title them; the spec's text is not in this repository, its names are here
    pages = {
        "Overview": ("Requests", "Responses"),
        "Versioning": ("Negotiation", "Forward Compatibility"),
        "Channels & Subscriptions": ("Action Delivery", "Subscribe"),
        "Session Channel": ("Server Validation of Client Actions", "Creation"),
        "Connection Lifecycle": ("Reconnection",),
    }
    for prop in PROPERTIES:
        page, _, heading = prop.section.partition(": ")
        assert heading in pages.get(page, ()), prop.section
