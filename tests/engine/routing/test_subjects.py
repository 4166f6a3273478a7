"""Table and exhaustive tests for headwater.server.routing.subjects."""

from __future__ import annotations

import itertools

import pytest

from headwater.server.routing.subjects import (
    is_literal,
    subject_is_subset,
    subject_matches,
    subjects_overlap,
    tokens,
    valid_literal_subject,
    valid_subject,
)

# --------------------------------------------------------------------------- valid_subject

VALID = [
    "foo",
    "foo.bar",
    "foo.bar.baz",
    "*",
    ">",
    "foo.*",
    "*.bar",
    "foo.>",
    "*.*.>",
    "foo.*.baz.>",
    "_INBOX.abc123.*",
    "$JS.API.STREAM.INFO.orders",
    # Wildcard characters inside a longer token are literal text in nats-server.
    "foo*",
    "foo.*bar",
    "foo.bar*",
    "foo>",
    "foo.>bar",
    "foo.b>r.baz",
    "**",
    ">>",
    "a-b_c:d/e",
    "ünïcødé.サブジェクト",
]

INVALID = [
    "",
    ".",
    "..",
    "foo..bar",
    ".foo",
    "foo.",
    "foo.bar.",
    ".>",
    "foo.>.bar",
    ">.foo",
    ">.>",
    "foo bar",
    " foo",
    "foo ",
    "foo.\tbar",
    "foo\tbar",
    "foo\rbar",
    "foo\nbar",
    "foo\fbar",
    "foo. .bar",
    "foo.\r",
    " ",
]


@pytest.mark.parametrize("subject", VALID)
def test_valid_subject_accepts(subject: str) -> None:
    assert valid_subject(subject)


@pytest.mark.parametrize("subject", INVALID)
def test_valid_subject_rejects(subject: str) -> None:
    assert not valid_subject(subject)


# --------------------------------------------------------------------------- literal


@pytest.mark.parametrize(
    ("subject", "literal"),
    [
        ("foo", True),
        ("foo.bar", True),
        ("foo*", True),
        ("foo.*bar", True),
        ("foo>", True),
        ("a.b>c", True),
        ("*", False),
        (">", False),
        ("foo.*", False),
        ("*.foo", False),
        ("foo.*.bar", False),
        ("foo.>", False),
    ],
)
def test_is_literal(subject: str, literal: bool) -> None:
    assert is_literal(subject) is literal


@pytest.mark.parametrize(
    ("subject", "ok"),
    [
        ("foo", True),
        ("foo.bar.baz", True),
        ("foo*", True),
        ("foo.*bar", True),
        ("foo.b>r", True),
        ("foo.*", False),
        ("foo.>", False),
        ("*", False),
        (">", False),
        ("foo.*.bar", False),
        ("", False),
        ("foo..bar", False),
        ("foo.", False),
        (".foo", False),
        ("foo bar", False),
        ("foo.>.bar", False),
    ],
)
def test_valid_literal_subject(subject: str, ok: bool) -> None:
    assert valid_literal_subject(subject) is ok


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("foo", ["foo"]),
        ("foo.bar.>", ["foo", "bar", ">"]),
        ("a.*.c", ["a", "*", "c"]),
        ("foo..bar", ["foo", "", "bar"]),
    ],
)
def test_tokens(subject: str, expected: list[str]) -> None:
    assert tokens(subject) == expected


# --------------------------------------------------------------------------- matching

MATCHES = [
    ("foo", "foo", True),
    ("foo", "bar", False),
    ("foo", "foo.bar", False),
    ("foo.bar", "foo", False),
    ("*", "foo", True),
    ("*", "foo.bar", False),
    (">", "foo", True),
    (">", "foo.bar.baz", True),
    ("foo.*", "foo.bar", True),
    ("foo.*", "foo", False),
    ("foo.*", "foo.bar.baz", False),
    ("foo.>", "foo", False),
    ("foo.>", "foo.bar", True),
    ("foo.>", "foo.bar.baz", True),
    ("foo.>", "bar.baz", False),
    ("*.bar", "foo.bar", True),
    ("*.bar", "foo.baz", False),
    ("foo.*.baz", "foo.bar.baz", True),
    ("foo.*.baz", "foo.bar.bat", False),
    ("*.*.>", "a.b", False),
    ("*.*.>", "a.b.c", True),
    ("*.*.>", "a.b.c.d", True),
    # Wildcard characters inside tokens are literal.
    ("foo*", "foo*", True),
    ("foo*", "foobar", False),
    ("foo.*bar", "foo.xbar", False),
    ("foo.b>", "foo.bar", False),
    # A published subject containing wildcard tokens (non-pedantic PUB): the characters are
    # ordinary token text, matched by wildcards but never by a different literal.
    ("foo.*", "foo.*", True),
    ("foo.bar", "foo.*", False),
    ("foo.>", "foo.>", True),
    # A subject with empty tokens never matches a wildcard filter.
    ("foo.*", "foo.", False),
    ("*.bar", ".bar", False),
    (">", "foo..bar", False),
    ("*", "", False),
]


@pytest.mark.parametrize(("filter_", "subject", "expected"), MATCHES)
def test_subject_matches(filter_: str, subject: str, expected: bool) -> None:
    assert subject_matches(filter_, subject) is expected


OVERLAPS = [
    ("foo", "foo", True),
    ("foo", "bar", False),
    ("foo.*", "*.bar", True),
    ("foo.*", "bar.*", False),
    ("foo.>", "foo", False),
    ("foo.>", "foo.bar", True),
    ("foo.>", "foo.bar.baz", True),
    ("foo.>", "*.bar", True),
    ("foo.>", "bar.>", False),
    (">", "foo", True),
    (">", "foo.bar.baz", True),
    (">", ">", True),
    ("*", "foo", True),
    ("*", "foo.bar", False),
    ("*", ">", True),
    ("*.*", "foo.>", True),
    ("*.*", "*", False),
    ("foo.*.baz", "foo.bar.*", True),
    ("foo.*.baz", "foo.bar.bat", False),
    ("foo.*", "foo.bar.>", False),
    ("a.*.c.>", "*.b.*.d", True),
    ("a.*.c.>", "*.b.x.d", False),
    ("foo*", "foo.*", False),
    ("foo*", "*", True),
]


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAPS)
def test_subjects_overlap(a: str, b: str, expected: bool) -> None:
    assert subjects_overlap(a, b) is expected
    assert subjects_overlap(b, a) is expected


SUBSETS = [
    ("foo", "foo", True),
    ("foo", "bar", False),
    ("foo.bar", "foo.*", True),
    ("foo.bar", "foo.>", True),
    ("foo.bar", ">", True),
    ("foo.*", "foo.*", True),
    ("foo.*", "*.*", True),
    ("foo.*", "foo.>", True),
    ("foo.*", ">", True),
    ("foo.*", "foo.bar", False),
    ("foo.*", "*.bar", False),
    ("foo.>", "foo.*", False),
    ("foo.>", "foo.>", True),
    ("foo.>", ">", True),
    ("foo.bar.>", "foo.>", True),
    ("foo.bar.>", "foo.*.>", True),
    ("foo.>", "foo.bar.>", False),
    (">", "foo.>", False),
    (">", "*", False),
    ("*", ">", True),
    ("foo", "foo.>", False),
    ("foo", "*", True),
    ("foo.bar", "*", False),
    ("foo.bar.baz", "foo.*", False),
    ("foo.*.baz", "foo.>", True),
    ("foo.*.baz", "*.*.baz", True),
    ("foo.*.baz", "*.bar.baz", False),
    ("foo*", "*", True),
    ("foo*", "foo", False),
]


@pytest.mark.parametrize(("sub", "filter_", "expected"), SUBSETS)
def test_subject_is_subset(sub: str, filter_: str, expected: bool) -> None:
    assert subject_is_subset(sub, filter_) is expected


# --------------------------------------------------------------------------- exhaustive
# Over filters of up to 3 tokens from {a, b, *, >}, the literal subjects of up to 4 tokens
# over {a, b, c} are enough witnesses: `c` stands for any token a filter does not name, and
# one token beyond the longest filter exposes `>`.


def _reference_match(ftoks: tuple[str, ...], stoks: tuple[str, ...]) -> bool:
    if not ftoks:
        return not stoks
    head = ftoks[0]
    if head == ">":
        return len(stoks) >= 1
    if not stoks:
        return False
    return (head == "*" or head == stoks[0]) and _reference_match(ftoks[1:], stoks[1:])


def _filters() -> list[str]:
    out = []
    for n in range(1, 4):
        for toks in itertools.product(["a", "b", "*", ">"], repeat=n):
            if ">" in toks[:-1]:
                continue
            out.append(".".join(toks))
    return out


FILTERS = _filters()
LITERALS = [
    ".".join(toks) for n in range(1, 5) for toks in itertools.product(["a", "b", "c"], repeat=n)
]


@pytest.fixture(scope="module")
def match_sets() -> dict[str, frozenset[str]]:
    return {
        f: frozenset(
            s for s in LITERALS if _reference_match(tuple(f.split(".")), tuple(s.split(".")))
        )
        for f in FILTERS
    }


def test_subject_matches_exhaustive(match_sets: dict[str, frozenset[str]]) -> None:
    for f in FILTERS:
        got = frozenset(s for s in LITERALS if subject_matches(f, s))
        assert got == match_sets[f], f


def test_overlap_and_subset_exhaustive(match_sets: dict[str, frozenset[str]]) -> None:
    for a in FILTERS:
        assert valid_subject(a)
        for b in FILTERS:
            assert subjects_overlap(a, b) is bool(match_sets[a] & match_sets[b]), (a, b)
            assert subject_is_subset(a, b) is (match_sets[a] <= match_sets[b]), (a, b)
