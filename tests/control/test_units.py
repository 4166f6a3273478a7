"""Human units: Go-style durations with d/w/y, nats-server-style sizes, decimal counts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.control.units import (
    DAY,
    HOUR,
    MINUTE,
    SECOND,
    YEAR,
    format_count,
    format_duration,
    format_size,
    parse_count,
    parse_duration,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1h30m", HOUR + 30 * MINUTE),
        ("500ms", 500_000_000),
        ("1.5s", 1_500_000_000),
        ("2m", 2 * MINUTE),
        ("72h", 72 * HOUR),
        ("90d", 90 * DAY),
        ("1w", 7 * DAY),
        ("1y", YEAR),
        ("10us", 10_000),
        ("10µs", 10_000),
        ("7ns", 7),
        (" 1m30s ", 90 * SECOND),
        (3_000_000_000, 3 * SECOND),
        (1e9, SECOND),
    ],
)
def test_parse_duration(text: str | int | float, expected: int) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("30", "no unit"),
        ("1x", "invalid duration"),
        ("1h 30m", "invalid duration"),
        ("h", "invalid duration"),
        ("-1s", "negative"),
        (-5, "negative"),
        (True, "boolean"),
        (0.5, "whole number"),
        ("0.5ns", "whole number"),
    ],
)
def test_parse_duration_errors(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (YEAR, "1y"),
        (90 * DAY, "90d"),
        (14 * DAY, "2w"),
        (72 * HOUR, "3d"),
        (2 * MINUTE, "2m"),
        (90 * SECOND, "90s"),
        (HOUR + 30 * MINUTE, "90m"),
        (30 * SECOND, "30s"),
        (1_500_000_000, "1500ms"),
        (1, "1ns"),
        (SECOND + 1, "1s1ns"),
    ],
)
def test_format_duration(ns: int, text: str) -> None:
    assert format_duration(ns) == text


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_format_duration_round_trips(ns: int) -> None:
    assert parse_duration(format_duration(ns)) == ns


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10GiB", 10 * 1024**3),
        ("1GB", 1024**3),
        ("1gb", 1024**3),
        ("1Gi", 1024**3),
        ("1G", 1000**3),
        ("1k", 1000),
        ("1KB", 1024),
        ("2MiB", 2 * 1024**2),
        ("1TB", 1024**4),
        ("512", 512),
        ("100B", 100),
        ("1.5KiB", 1536),
        ("-1", -1),
        (-1, -1),
        (4096, 4096),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10XB", "invalid size"),
        ("-2", "invalid size"),
        (-2, ">= 0"),
        ("1.5B", "whole"),
        ("5i", "needs a prefix"),
        (False, "boolean"),
    ],
)
def test_parse_size_errors(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_size(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (-1, "-1"),
        (0, "0B"),
        (100, "100B"),
        (1024**3, "1GiB"),
        (10**9, "1G"),
        (1536, "1536B"),
        (10 * 1024**3, "10GiB"),
        (1000, "1K"),
    ],
)
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text


@given(st.integers(min_value=-1, max_value=2**63 - 1))
def test_format_size_round_trips(n: int) -> None:
    assert parse_size(format_size(n)) == n


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1M", 1_000_000),
        ("10K", 10_000),
        ("10k", 10_000),
        ("2G", 2 * 10**9),
        ("1000", 1000),
        ("1_000", 1000),
        (-1, -1),
        ("-1", -1),
        (5, 5),
    ],
)
def test_parse_count(text: str | int, expected: int) -> None:
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["1Mi", "abc", "-3", "1.5"])
def test_parse_count_errors(text: str) -> None:
    with pytest.raises(ValueError, match="count"):
        parse_count(text)


@given(st.integers(min_value=-1, max_value=2**63 - 1))
def test_format_count_round_trips(n: int) -> None:
    assert parse_count(format_count(n)) == n
