"""Strict versions and SemVer ranges (``agenthost_protocol.semver``)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agenthost_protocol.errors import LocalProtocolError
from agenthost_protocol.semver import (
    Comparator,
    InvalidVersion,
    Version,
    VersionRange,
    is_valid_version,
    matches_any,
    parse_range,
    parse_version,
    satisfies,
)

numbers = st.integers(min_value=0, max_value=10**6)
triples = st.tuples(numbers, numbers, numbers)


def text_of(t: tuple[int, int, int]) -> str:
    return ".".join(map(str, t))


# -- versions -------------------------------------------------------------------


@given(triples)
def test_parse_round_trips_and_orders_like_tuples(t: tuple[int, int, int]) -> None:
    v = parse_version(text_of(t))
    assert v.as_tuple() == t
    assert str(v) == text_of(t)
    assert Version.parse(str(v)) == v


@given(triples, triples)
def test_version_order_is_numeric(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    va, vb = parse_version(text_of(a)), parse_version(text_of(b))
    assert (va < vb) == (a < b)
    assert (va == vb) == (a == b)


def test_numeric_not_lexicographic() -> None:
    assert parse_version("0.10.0") > parse_version("0.9.0")
    assert parse_version("10.0.0") > parse_version("9.99.99")


@pytest.mark.parametrize(("text", "value"), [("01.2.3", (1, 2, 3)), ("1.02.3", (1, 2, 3)),
                                              ("0.07.0", (0, 7, 0)), ("000.0.00", (0, 0, 0))])
def test_leading_zeros_are_accepted_as_the_reference_does(
    text: str, value: tuple[int, int, int]
) -> None:
    # The spec's parseSemver matches ^(\d+)\.(\d+)\.(\d+)$ and converts with Number().
    assert parse_version(text) == Version(*value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1",
        "1.2",
        "1.2.3.4",
        "v1.2.3",
        " 1.2.3",
        "1.2.3 ",
        "1.2.3\n",
        "1.2.3-beta.1",
        "1.2.3+build",
        "-1.2.3",
        "1..3",
        "a.b.c",
        "\uff11.2.3",  # fullwidth digit one
        "\u0663.2.3",  # Arabic-Indic digit three
        "1" * 2000 + ".0.0",
    ],
)
def test_malformed_versions_raise(text: str) -> None:
    with pytest.raises(InvalidVersion):
        parse_version(text)
    assert not is_valid_version(text)


@pytest.mark.parametrize("value", [None, 1, 1.5, b"1.2.3", ["1.2.3"], ("1", "2", "3")])
def test_non_strings_raise(value: object) -> None:
    with pytest.raises(InvalidVersion):
        parse_version(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidVersion):
        parse_range(value)  # type: ignore[arg-type]
    assert not is_valid_version(value)


def test_invalid_version_is_a_local_protocol_error_and_a_value_error() -> None:
    with pytest.raises(InvalidVersion) as info:
        parse_version("nope")
    assert isinstance(info.value, LocalProtocolError)
    assert isinstance(info.value, ValueError)
    assert info.value.code == -32602
    assert "nope" in str(info.value)


def test_long_input_is_abbreviated_in_the_message() -> None:
    with pytest.raises(InvalidVersion) as info:
        parse_version("x" * 5000)
    assert len(str(info.value)) < 120


# -- ranges: fixed examples (node-semver semantics) -------------------------------

RANGE_CASES = [
    # the two forms the spec names
    (">=0.1.0 <0.3.0", {"0.1.0": True, "0.2.9": True, "0.3.0": False, "0.0.9": False}),
    ("^0.2.0", {"0.2.0": True, "0.2.7": True, "0.3.0": False, "0.1.9": False}),
    # caret
    ("^1.2.3", {"1.2.3": True, "1.9.0": True, "2.0.0": False, "1.2.2": False}),
    ("^0.0.3", {"0.0.3": True, "0.0.4": False, "0.0.2": False}),
    ("^0.0", {"0.0.0": True, "0.0.9": True, "0.1.0": False}),
    ("^0.x", {"0.0.0": True, "0.9.9": True, "1.0.0": False}),
    ("^1.2.x", {"1.2.0": True, "1.9.9": True, "2.0.0": False, "1.1.9": False}),
    ("^0.0.x", {"0.0.0": True, "0.0.9": True, "0.1.0": False}),
    ("^*", {"0.0.0": True, "9.9.9": True}),
    # tilde
    ("~1.2.3", {"1.2.3": True, "1.2.9": True, "1.3.0": False, "1.2.2": False}),
    ("~1.2", {"1.2.0": True, "1.2.9": True, "1.3.0": False}),
    ("~1", {"1.0.0": True, "1.9.9": True, "2.0.0": False}),
    ("~0.2.3", {"0.2.3": True, "0.2.9": True, "0.3.0": False}),
    ("~>1.2.3", {"1.2.3": True, "1.3.0": False}),
    # X-ranges
    ("*", {"0.0.0": True, "5.5.5": True}),
    ("", {"0.0.0": True, "5.5.5": True}),
    ("1.x", {"1.0.0": True, "1.9.9": True, "2.0.0": False, "0.9.9": False}),
    ("1.2.*", {"1.2.0": True, "1.2.9": True, "1.3.0": False}),
    ("1", {"1.0.0": True, "2.0.0": False}),
    ("1.x.3", {"1.0.0": True, "1.9.0": True}),  # after a wildcard, node ignores the rest
    # primitive comparators with partial versions
    (">1.2", {"1.2.9": False, "1.3.0": True}),
    (">1", {"1.9.9": False, "2.0.0": True}),
    ("<=1.2", {"1.2.9": True, "1.3.0": False}),
    ("<1.2", {"1.1.9": True, "1.2.0": False}),
    (">=1", {"0.9.9": False, "1.0.0": True}),
    (">*", {"0.0.0": False, "9.9.9": False}),
    ("<*", {"0.0.0": False}),
    ("<=*", {"0.0.0": True}),
    ("=1.2.3", {"1.2.3": True, "1.2.4": False}),
    ("1.2.3", {"1.2.3": True, "1.2.4": False}),
    ("v1.2.3", {"1.2.3": True}),
    (">= 1.2.3  < 2", {"1.2.3": True, "1.9.9": True, "2.0.0": False}),
    # hyphen ranges
    ("1.2.3 - 2.3.4", {"1.2.3": True, "2.3.4": True, "2.3.5": False, "1.2.2": False}),
    ("1.2 - 2.3.4", {"1.2.0": True, "1.1.9": False}),
    ("1.2.3 - 2.3", {"2.3.9": True, "2.4.0": False}),
    ("1.2.3 - 2", {"2.9.9": True, "3.0.0": False}),
    ("* - 2", {"0.0.0": True, "3.0.0": False}),
    # alternatives
    ("0.3.x || >=0.5.0", {"0.3.1": True, "0.4.0": False, "0.5.0": True, "7.0.0": True}),
    ("<0.1.0 || >0.2.0", {"0.0.5": True, "0.1.5": False, "0.2.1": True}),
]


@pytest.mark.parametrize(("text", "expected"), RANGE_CASES)
def test_range_examples(text: str, expected: dict[str, bool]) -> None:
    parsed = parse_range(text)
    for version, result in expected.items():
        assert parsed.matches(version) is result, (text, version)
        assert satisfies(version, text) is result
        assert (version in parsed) is result


@pytest.mark.parametrize(
    "text",
    [
        "1.2.3-beta",
        "^1.2.3+build",
        "01.2.3",
        ">",
        "^",
        "~",
        ">=",
        "1.2.3 ||",
        "|| 1.2.3",
        "1.2.3 || || 2.0.0",
        "1.2.3.4",
        ">=>=1.0.0",
        "1.2.3 - ",
        "1.2.3 - 2.0.0 - 3.0.0",
        "a.b.c",
        "\uff11.2.3",
        "=" * 2000,
    ],
)
def test_malformed_ranges_raise(text: str) -> None:
    with pytest.raises(InvalidVersion):
        parse_range(text)


def test_range_api() -> None:
    parsed = VersionRange.parse("^0.2.0")
    assert parsed.source == "^0.2.0"
    assert str(parsed) == ">=0.2.0 <0.3.0"
    assert parsed.matches(Version(0, 2, 5))
    assert 42 not in parsed
    assert satisfies("0.2.1", parsed)
    with pytest.raises(InvalidVersion):
        parsed.matches("0.2")
    assert str(Comparator(">=", Version(1, 0, 0))) == ">=1.0.0"
    assert str(parse_range("*")) == "*"


def test_matches_any_skips_entries_it_cannot_parse() -> None:
    assert matches_any("0.5.0", ["garbage", "0.5.0"])
    assert matches_any("0.2.4", ["not a range", "^0.2.0"])
    assert not matches_any("0.4.0", ["garbage", "^0.2.0", ">=0.5.0"])
    assert not matches_any("0.4.0", [])
    with pytest.raises(InvalidVersion):
        matches_any("0.4", ["*"])


# -- ranges against a brute-force oracle -----------------------------------------------
#
# The oracle reads each comparator directly off its definition, on the
# components the partial version actually gives (k of them):
#   =P  : v[:k] == P[:k]     >P : v[:k] > P[:k]     >=P : v[:k] >= P[:k]
#   <P  : v[:k] <  P[:k]     <=P: v[:k] <= P[:k]
#   ~P  : v >= P (missing parts 0) and v[:min(k, 2)] == P[:min(k, 2)]
#   ^P  : v >= P (missing parts 0) and v[:j] == P[:j], where j is one past the
#         left-most non-zero given component (all of them if they are all zero)
#   A - B: >=A and <=B.
# It shares no code with the implementation, which desugars into comparators.

SMALL = st.integers(min_value=0, max_value=3)
GRID = [(a, b, c) for a in range(5) for b in range(5) for c in range(5)]
Partial = tuple[int, ...]
Alternative = list[tuple[str, Partial]] | tuple[Partial, Partial]
"""Comparators (operator, partial) to conjoin, or the two ends of a hyphen range."""


@st.composite
def partials(draw: st.DrawFn, allow_star: bool = True) -> tuple[str, Partial]:
    k = draw(st.integers(min_value=0 if allow_star else 1, max_value=3))
    given_parts = tuple(draw(SMALL) for _ in range(k))
    words = [str(p) for p in given_parts]
    if k == 0:
        return draw(st.sampled_from(["*", "x", "X"])), ()
    if k < 3 and draw(st.booleans()):
        words += [draw(st.sampled_from(["x", "X", "*"]))] * draw(st.integers(1, 3 - k))
    prefix = draw(st.sampled_from(["", "", "", "v"]))
    return prefix + ".".join(words), given_parts


def oracle_comparator(op: str, p: Partial, v: tuple[int, int, int]) -> bool:
    k = len(p)
    head = v[:k]
    padded = p + (0,) * (3 - k)
    if op in ("", "="):
        return head == p
    if op == ">":
        return head > p
    if op == ">=":
        return head >= p
    if op == "<":
        return head < p
    if op == "<=":
        return head <= p
    if op in ("~", "~>"):
        n = min(k, 2)
        return v >= padded and v[:n] == p[:n]
    nonzero = [i for i, part in enumerate(p) if part != 0]
    j = nonzero[0] + 1 if nonzero else k
    return v >= padded and v[:j] == p[:j]


OPS = ["", "=", "<", "<=", ">", ">=", "~", "~>", "^"]


@st.composite
def alternatives(draw: st.DrawFn) -> tuple[str, Alternative]:
    if draw(st.integers(0, 4)) == 0:
        (low_text, low), (high_text, high) = draw(partials()), draw(partials())
        return f"{low_text} - {high_text}", (low, high)
    comparators = []
    words = []
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        op = draw(st.sampled_from(OPS))
        text, p = draw(partials())
        space = draw(st.sampled_from(["", "", " "])) if op else ""
        words.append(f"{op}{space}{text}")
        comparators.append((op, p))
    return " ".join(words), comparators


def oracle_alternative(alt: Alternative, v: tuple[int, int, int]) -> bool:
    if isinstance(alt, tuple):
        low, high = alt
        return oracle_comparator(">=", low, v) and oracle_comparator("<=", high, v)
    return all(oracle_comparator(op, p, v) for op, p in alt)


def all_partials(top: int) -> list[tuple[str, Partial]]:
    out: list[tuple[str, Partial]] = [("*", ()), ("x", ())]
    for k in (1, 2, 3):
        for p in itertools.product(range(top), repeat=k):
            out.append((".".join(map(str, p)), p))
            if k < 3:
                out.append((".".join(map(str, p)) + ".x", p))
    return out


@pytest.mark.parametrize("op", OPS)
def test_every_comparator_agrees_with_the_oracle(op: str) -> None:
    for text, p in all_partials(3):
        parsed = parse_range(f"{op}{text}")
        for v in GRID:
            assert parsed.matches(Version(*v)) is oracle_comparator(op, p, v), (op + text, v)


def test_every_hyphen_range_agrees_with_the_oracle() -> None:
    partial_set = all_partials(2)
    for (low_text, low), (high_text, high) in itertools.product(partial_set, partial_set):
        parsed = parse_range(f"{low_text} - {high_text}")
        for v in GRID:
            expected = oracle_alternative((low, high), v)
            assert parsed.matches(Version(*v)) is expected, (low_text, high_text, v)


@given(st.lists(alternatives(), min_size=1, max_size=3))
def test_range_matching_agrees_with_the_oracle(
    alts: list[tuple[str, Alternative]],
) -> None:
    text = " || ".join(t for t, _ in alts)
    parsed = parse_range(text)
    normalised = parse_range(str(parsed))
    for v in GRID:
        expected = any(oracle_alternative(alt, v) for _, alt in alts)
        assert parsed.matches(Version(*v)) is expected, (text, v)
        assert normalised.matches(Version(*v)) is expected, (str(parsed), v)


@given(triples, triples)
def test_exact_versions_are_ranges_of_one(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    assert satisfies(text_of(b), text_of(a)) is (a == b)
    assert satisfies(text_of(b), f"={text_of(a)}") is (a == b)


@given(triples, triples)
def test_caret_on_spec_style_versions(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    # ^X.Y.Z means "compatible with X.Y.Z" in the AHP sense (same MAJOR >= 1, or same 0.MINOR).
    compatible = a[0] == b[0] and (a[0] >= 1 or (a[1] == b[1] and (a[1] > 0 or a[2] == b[2])))
    assert satisfies(text_of(b), f"^{text_of(a)}") is (compatible and b >= a)
