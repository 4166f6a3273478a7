"""Sizes and durations in nats-server's notations."""

from __future__ import annotations

import pytest

from headwater.server.config.units import parse_duration, parse_size_literal, parse_storage_size

KiB, MiB, GiB, TiB = 1024, 1024**2, 1024**3, 1024**4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("4222", 4222),
        ("-1", -1),
        ("1K", 1000),
        ("1k", 1000),
        ("1KB", KiB),
        ("1kb", KiB),
        ("1Ki", KiB),
        ("1KiB", KiB),
        ("1kib", KiB),
        ("64MB", 64 * MiB),
        ("64M", 64_000_000),
        ("512mib", 512 * MiB),
        ("2G", 2_000_000_000),
        ("2GB", 2 * GiB),
        ("1T", 10**12),
        ("1TiB", TiB),
        ("1P", 10**15),
        ("1PB", 1024**5),
        ("1E", 10**18),
        ("-2k", -2000),
    ],
)
def test_size_literals(text: str, expected: int) -> None:
    assert parse_size_literal(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1kbi", "invalid size suffix 'kbi'"),
        ("1x", "invalid size suffix 'x'"),
        ("1bk", "invalid size suffix 'bk'"),
        ("abc", "expected an integer"),
        ("1.5K", "expected an integer"),
        ("", "expected an integer"),
        ("9223372036854775808", "out of the 64-bit range"),
        ("9EB", "out of the 64-bit range"),
    ],
)
def test_bad_size_literals(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_size_literal(text)


def test_size_literal_at_the_int64_edges() -> None:
    assert parse_size_literal("9223372036854775807") == 2**63 - 1
    assert parse_size_literal("-9223372036854775808") == -(2**63)
    assert parse_size_literal("7EB") == 7 * 1024**6


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("1K", KiB),
        ("512M", 512 * MiB),
        ("1G", GiB),
        ("2T", 2 * TiB),
        ("-1G", -GiB),
    ],
)
def test_storage_sizes(text: str, expected: int) -> None:
    assert parse_storage_size(text) == expected


@pytest.mark.parametrize("text", ["1GB", "1g", "1Gi", "G", "abc", "1.5G", "1024", "1 G"])
def test_bad_storage_sizes(text: str) -> None:
    # nats-server takes exactly one uppercase K/M/G/T after a plain integer here.
    with pytest.raises(ValueError, match="invalid size"):
        parse_storage_size(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("-0", 0.0),
        ("10s", 10.0),
        ("2m", 120.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("250us", 0.00025),
        ("250\u00b5s", 0.00025),
        ("250\u03bcs", 0.00025),
        ("1500ns", 1.5e-6),
        ("1h2m3s4ms", 3723.004),
        ("-5s", -5.0),
        ("+5s", 5.0),
        (".5s", 0.5),
        ("5.s", 5.0),
        ("2562047h", 2562047 * 3600.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("5", 'time: missing unit in duration "5"'),
        ("1y", 'time: unknown unit "y" in duration "1y"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("1w", 'time: unknown unit "w"'),
        ("s", 'time: invalid duration "s"'),
        (".s", 'time: invalid duration ".s"'),
        ("1h 30m", 'time: unknown unit "h "'),
        ("-", 'time: invalid duration "-"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
    ],
)
def test_bad_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_duration(text)
