"""Strict ``MAJOR.MINOR.PATCH`` versions and SemVer range matching.

AHP protocol versions are plain SemVer cores: three non-negative integers, no
leading zeros, no pre-release or build part (:func:`parse_version`).

The ``supportedVersions`` list a host sends with ``UnsupportedProtocolVersion``
(``-32005``) may also hold *ranges* such as ``">=0.1.0 <0.3.0"`` or
``"^0.2.0"``.  :func:`parse_range` understands the range grammar of
`node-semver <https://github.com/npm/node-semver#ranges>`_, the de-facto
reference for SemVer ranges, without the pre-release parts AHP never uses:

* comparators ``<``, ``<=``, ``>``, ``>=``, ``=`` (or no operator), joined by
  spaces: every comparator must hold (``">=0.1.0 <0.3.0"``);
* alternatives joined by ``||``: any alternative may hold;
* X-ranges: ``*``, ``x``, ``X``, or a partial version (``"1"``, ``"0.2"``,
  ``"0.2.x"``); an empty range means ``*``;
* tilde ``~1.2.3`` (``~>`` too): patch-level changes only;
* caret ``^0.2.0``: changes that keep the left-most non-zero component;
* hyphen ranges ``"1.2.3 - 2.3"``: inclusive on both ends, a partial upper
  end covers everything it names.

A leading ``v`` on a version inside a range is accepted (node-semver allows
it); :func:`parse_version` itself does not accept one.

Malformed input raises :class:`InvalidVersion`, a
:class:`~agenthost_protocol.errors.LocalProtocolError` (and a ``ValueError``).
When the text came from a peer, catch it (or use :func:`matches_any`, which
skips entries it cannot parse) and answer the peer as appropriate.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, Literal

from attrs import frozen

from .errors import LocalProtocolError

__all__ = [
    "Comparator",
    "InvalidVersion",
    "Version",
    "VersionRange",
    "is_valid_version",
    "matches_any",
    "parse_range",
    "parse_version",
    "satisfies",
]

Operator = Literal["<", "<=", ">", ">=", "="]

_MAX_TEXT: Final = 1024
"""Longest version or range text accepted: a peer controls these strings, and
the limit keeps every number far below ``int()``'s digit limit."""

_NUMBER: Final = r"(?:0|[1-9][0-9]*)"
# A protocol version is parsed as the spec's ``parseSemver`` does: the JS
# ``^(\d+)\.(\d+)\.(\d+)$`` (ASCII digits, leading zeros accepted, no trailing
# newline), so "0.07.0" is 0.7.0.  Used with ``fullmatch``, never ``$``.
_VERSION_RE: Final = re.compile(r"([0-9]+)\.([0-9]+)\.([0-9]+)")
_PART: Final = rf"(?:{_NUMBER}|[xX*])"
_PARTIAL_RE: Final = re.compile(rf"[vV]?({_PART})(?:\.({_PART})(?:\.({_PART}))?)?")
_COMPARATOR_RE: Final = re.compile(r"(~>|~|\^|<=|>=|<|>|=)?\s*(\S*)")


class InvalidVersion(LocalProtocolError, ValueError):
    """A version or range string is malformed."""


def _invalid(kind: str, text: object) -> InvalidVersion:
    shown = repr(text)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return InvalidVersion(f"invalid {kind}: {shown}")


@frozen(order=True)
class Version:
    """A ``MAJOR.MINOR.PATCH`` version; orders numerically."""

    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> Version:
        """Parse a strict ``MAJOR.MINOR.PATCH`` string (see :func:`parse_version`)."""
        return parse_version(text)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def as_tuple(self) -> tuple[int, int, int]:
        """``(major, minor, patch)``."""
        return (self.major, self.minor, self.patch)


def parse_version(text: str) -> Version:
    """Parse a protocol version such as ``"0.7.0"``, by the spec's rule.

    Three decimal integers of ASCII digits separated by dots, nothing else:
    no ``v`` prefix, no whitespace or trailing newline, no pre-release or build
    part.  Leading zeros are accepted and ignored, as the reference's
    ``Number()`` conversion does (``"0.07.0"`` is 0.7.0).  Raises
    :class:`InvalidVersion` otherwise (also for non-strings).
    """
    if not isinstance(text, str) or len(text) > _MAX_TEXT:
        raise _invalid("protocol version", text)
    match = _VERSION_RE.fullmatch(text)
    if match is None:
        raise _invalid("protocol version", text)
    major, minor, patch = (int(part) for part in match.groups())
    return Version(major, minor, patch)


def is_valid_version(text: object) -> bool:
    """Whether ``text`` is a strict ``MAJOR.MINOR.PATCH`` string."""
    try:
        parse_version(text)  # type: ignore[arg-type]
    except InvalidVersion:
        return False
    return True


@frozen
class Comparator:
    """One primitive comparison against a full version, e.g. ``>=0.1.0``."""

    operator: Operator
    version: Version

    def test(self, version: Version) -> bool:
        """Whether ``version`` satisfies this comparison."""
        op, other = self.operator, self.version
        if op == "<":
            return version < other
        if op == "<=":
            return version <= other
        if op == ">":
            return version > other
        if op == ">=":
            return version >= other
        return version == other

    def __str__(self) -> str:
        return f"{self.operator}{self.version}"


_ZERO: Final = Version(0, 0, 0)
_NEVER: Final = (Comparator("<", _ZERO),)
"""A comparator set nothing satisfies (there is nothing below 0.0.0)."""


@frozen
class VersionRange:
    """A parsed SemVer range: a version matches if every comparator of any
    one alternative holds.  An alternative with no comparators matches
    everything.  Build one with :func:`parse_range`.
    """

    source: str
    """The text the range was parsed from."""
    alternatives: tuple[tuple[Comparator, ...], ...]
    """The ``||`` alternatives, each desugared into primitive comparators."""

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        """Parse ``text`` (see :func:`parse_range`)."""
        return parse_range(text)

    def matches(self, version: str | Version) -> bool:
        """Whether ``version`` (a strict version string or a :class:`Version`) is in range."""
        v = version if isinstance(version, Version) else parse_version(version)
        return any(all(c.test(v) for c in alt) for alt in self.alternatives)

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, (str, Version)):
            return False
        return self.matches(version)

    def __str__(self) -> str:
        return " || ".join(" ".join(str(c) for c in alt) or "*" for alt in self.alternatives)


# A partial version: None marks a wildcard (or a missing) component.  Once a
# component is a wildcard, the ones after it are too (node-semver ignores them).
_Partial = tuple[int | None, int | None, int | None]


def _parse_partial(text: str, source: str) -> _Partial:
    match = _PARTIAL_RE.fullmatch(text)
    if match is None:
        raise _invalid("version range", source)
    parts: list[int | None] = []
    wild = False
    for group in match.groups():
        if group is None or group in ("x", "X", "*"):
            wild = True
        if wild:
            parts.append(None)
            continue
        parts.append(int(group))
    return (parts[0], parts[1], parts[2])


def _floor(p: _Partial) -> Version:
    """The lowest version the partial covers."""
    return Version(p[0] or 0, p[1] or 0, p[2] or 0)


def _next_after(p: _Partial) -> Version | None:
    """The lowest version above everything the partial covers (None for ``*``)."""
    major, minor, patch = p
    if major is None:
        return None
    if minor is None:
        return Version(major + 1, 0, 0)
    if patch is None:
        return Version(major, minor + 1, 0)
    return Version(major, minor, patch + 1)


def _desugar(op: str, p: _Partial) -> tuple[Comparator, ...]:
    """Primitive comparators equivalent to ``op`` applied to the partial ``p``."""
    full = p[2] is not None
    floor = _floor(p)
    after = _next_after(p)
    if op in ("", "="):
        if full:
            return (Comparator("=", floor),)
        return () if after is None else (Comparator(">=", floor), Comparator("<", after))
    if op == ">":
        if after is None:
            return _NEVER
        return (Comparator(">", floor),) if full else (Comparator(">=", after),)
    if op == ">=":
        return () if after is None else (Comparator(">=", floor),)
    if op == "<":
        return _NEVER if after is None else (Comparator("<", floor),)
    if op == "<=":
        if after is None:
            return ()
        return (Comparator("<=", floor),) if full else (Comparator("<", after),)
    major, minor, patch = p
    if major is None:  # ~* and ^*
        return ()
    if op in ("~", "~>"):
        upper = Version(major + 1, 0, 0) if minor is None else Version(major, minor + 1, 0)
        return (Comparator(">=", floor), Comparator("<", upper))
    # Caret: keep the left-most non-zero component of those given.
    if major > 0 or minor is None:
        upper = Version(major + 1, 0, 0)
    elif minor > 0 or patch is None:
        upper = Version(0, minor + 1, 0)
    else:
        upper = Version(0, 0, patch + 1)
    return (Comparator(">=", floor), Comparator("<", upper))


_HYPHEN_RE: Final = re.compile(r"(\S+)\s+-\s+(\S+)")


def _parse_alternative(text: str, source: str) -> tuple[Comparator, ...]:
    text = text.strip()
    if not text:
        raise _invalid("version range", source)
    hyphen = _HYPHEN_RE.fullmatch(text)
    if hyphen is not None:
        low = _parse_partial(hyphen.group(1), source)
        high = _parse_partial(hyphen.group(2), source)
        lower = () if low[0] is None else (Comparator(">=", _floor(low)),)
        return lower + _desugar("<=", high)
    comparators: list[Comparator] = []
    # Let an operator be separated from its version by spaces: ">= 1.2.3".
    tokens = re.sub(r"(~>|~|\^|<=|>=|<|>|=)\s+", r"\1", text).split()
    for token in tokens:
        match = _COMPARATOR_RE.fullmatch(token)
        if match is None or not match.group(2):
            raise _invalid("version range", source)
        comparators.extend(_desugar(match.group(1) or "", _parse_partial(match.group(2), source)))
    return tuple(comparators)


def parse_range(text: str) -> VersionRange:
    """Parse a SemVer range such as ``">=0.1.0 <0.3.0"``, ``"^0.2.0"`` or
    ``"0.3.x || >=0.5.0"``.  A plain version (``"0.5.0"``) is a range holding
    exactly that version; ``""`` and ``"*"`` match every version.

    Raises :class:`InvalidVersion` for anything else (including pre-release
    or build parts, which AHP does not use).
    """
    if not isinstance(text, str) or len(text) > _MAX_TEXT:
        raise _invalid("version range", text)
    if not text.strip():
        return VersionRange(text, ((),))
    alternatives = tuple(_parse_alternative(alt, text) for alt in text.split("||"))
    return VersionRange(text, alternatives)


def satisfies(version: str | Version, range_text: str | VersionRange) -> bool:
    """Whether ``version`` lies in ``range_text``.  Both must be well formed."""
    spec = range_text if isinstance(range_text, VersionRange) else parse_range(range_text)
    return spec.matches(version)


def matches_any(version: str | Version, specs: Iterable[str]) -> bool:
    """Whether ``version`` matches any of ``specs`` (exact versions or ranges).

    Meant for a peer's ``supportedVersions`` list: entries that do not parse
    are skipped rather than raised, so one odd entry does not hide the others.
    ``version`` itself must be well formed.
    """
    v = version if isinstance(version, Version) else parse_version(version)
    for spec in specs:
        try:
            parsed = parse_range(spec)
        except InvalidVersion:
            continue
        if parsed.matches(v):
            return True
    return False
