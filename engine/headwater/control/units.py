"""Human units for durations, sizes and counts, and their shortest exact spelling.

The server's JSON carries durations as integer nanoseconds and sizes as integer bytes; people
write ``72h``, ``1y`` and ``10GiB``. Every way in (YAML, CLI flags, Terraform) parses through
here so the same string means the same number everywhere.

Size suffixes follow nats-server's configuration parser: ``K``/``M``/``G``/``T``/``P``/``E``
alone are powers of 1000; followed by ``B``, ``i`` or ``iB`` they are powers of 1024 (so ``1GB``
is 1 GiB, as in a nats-server config file). Suffixes are case-insensitive.
"""

from __future__ import annotations

import itertools
import re
from decimal import Decimal, InvalidOperation

NANOSECOND = 1
MICROSECOND = 1_000
MILLISECOND = 1_000_000
SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
WEEK = 7 * DAY
YEAR = 365 * DAY

DURATION_UNITS: dict[str, int] = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "µs": MICROSECOND,  # Go accepts both micro signs
    "μs": MICROSECOND,
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
    "d": DAY,
    "w": WEEK,
    "y": YEAR,
}

# Largest first; the formatter only writes ASCII units.
_FORMAT_UNITS: tuple[tuple[str, int], ...] = (
    ("y", YEAR),
    ("w", WEEK),
    ("d", DAY),
    ("h", HOUR),
    ("m", MINUTE),
    ("s", SECOND),
    ("ms", MILLISECOND),
    ("us", MICROSECOND),
    ("ns", NANOSECOND),
)

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d|w|y)")

_SIZE_PREFIXES = "kmgtpe"
_SIZE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*([kmgtpe]?)(b|i|ib)?$", re.IGNORECASE)
_COUNT_PREFIXES: dict[str, int] = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_COUNT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)$", re.IGNORECASE)


def _reject_bool(value: object, what: str) -> None:
    # bool is an int subclass; "true" as a duration is always a mistake in the document.
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number or a string with units, not a boolean")


def _integral(value: Decimal, original: object, what: str) -> int:
    if value != value.to_integral_value():
        raise ValueError(f"{what} {original!r} is not a whole number of {_base(what)}")
    return int(value)


def _base(what: str) -> str:
    return {"duration": "nanoseconds", "size": "bytes"}.get(what, "units")


def parse_duration(value: str | int | float) -> int:
    """Nanoseconds from an int/float (already nanoseconds, as in the server JSON) or a string in
    Go syntax (``1h30m``, ``500ms``, ``1.5s``) extended with ``d`` (24h), ``w`` (7d), ``y``
    (365d). ``"0"`` is zero; negative durations are rejected."""
    _reject_bool(value, "duration")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"duration must not be negative, got {value}")
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"duration must be finite, got {value}")
        return parse_duration(_integral(Decimal(repr(value)), value, "duration"))
    if not isinstance(value, str):
        raise ValueError(
            f"duration must be a string like '72h' or an integer of nanoseconds, "
            f"got {type(value).__name__}"
        )
    text = value.strip()
    if not text:
        raise ValueError("duration is empty; use e.g. '30s', '72h', '1y' or 0")
    if text.startswith("-"):
        raise ValueError(f"duration must not be negative, got {value!r}")
    text = text.removeprefix("+")
    if text == "0":
        return 0
    if text.isdigit():
        raise ValueError(
            f"duration {value!r} has no unit; write e.g. '{text}s', or an integer of nanoseconds"
        )
    total = Decimal(0)
    position = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += Decimal(match.group(1)) * DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(text) or position == 0:
        raise ValueError(
            f"invalid duration {value!r}; expected e.g. '1h30m', '500ms', '90d', '1y' "
            "(units ns, us, ms, s, m, h, d, w, y)"
        )
    return _integral(total, value, "duration")


def format_duration(ns: int) -> str:
    """The shortest exact spelling of ``ns`` nanoseconds (``"1y"``, ``"90d"``, ``"1m30s"``);
    ``parse_duration(format_duration(n)) == n`` for every n >= 0."""
    if isinstance(ns, bool) or not isinstance(ns, int):
        raise ValueError(f"duration must be an integer of nanoseconds, got {ns!r}")
    if ns < 0:
        raise ValueError(f"duration must not be negative, got {ns}")
    if ns == 0:
        return "0s"
    best: tuple[int, int, str] | None = None
    # Each unit either takes as much as it can or is skipped: skipping lets "90d" beat
    # "12w6d". 2^9 patterns is cheap and covers every case where a longer unit loses.
    for use in itertools.product((True, False), repeat=len(_FORMAT_UNITS) - 1):
        remaining = ns
        parts: list[str] = []
        for (name, size), take in zip(_FORMAT_UNITS, (*use, True), strict=True):
            if take and remaining >= size:
                count, remaining = divmod(remaining, size)
                parts.append(f"{count}{name}")
        text = "".join(parts)
        candidate = (len(text), len(parts), text)
        if best is None or candidate[:2] < best[:2]:
            best = candidate
    assert best is not None
    return best[2]


def parse_size(value: str | int) -> int:
    """Bytes from an int or a string such as ``"10GiB"``, ``"1GB"`` (1024^3), ``"1G"``
    (1000^3), ``"512"``, ``"100B"``. ``-1`` (unlimited) stays -1."""
    _reject_bool(value, "size")
    if isinstance(value, float):
        value = _integral(Decimal(repr(value)), value, "size")
    if isinstance(value, int):
        if value < -1:
            raise ValueError(f"size must be -1 (unlimited) or >= 0, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(
            f"size must be a string like '10GiB' or an integer of bytes, got {type(value).__name__}"
        )
    text = value.strip()
    if text == "-1":
        return -1
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(
            f"invalid size {value!r}; expected e.g. '512', '100B', '10GiB', '1GB' (=GiB), "
            "'1G' (=10^9), or -1 for unlimited"
        )
    number, prefix, suffix = match.group(1), match.group(2).lower(), (match.group(3) or "")
    if suffix and not prefix and suffix.lower() != "b":
        raise ValueError(f"invalid size {value!r}; 'i' needs a prefix such as Ki, Mi, Gi")
    exponent = _SIZE_PREFIXES.index(prefix) + 1 if prefix else 0
    base = 1024 if suffix and prefix else 1000
    try:
        amount = Decimal(number) * base**exponent
    except InvalidOperation as error:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f"invalid size {value!r}") from error
    return _integral(amount, value, "size")


def format_size(n: int) -> str:
    """The shortest exact spelling of ``n`` bytes: ``"10GiB"``, ``"1G"`` (10^9), ``"100B"``;
    -1 is ``"-1"``. Round-trips through ``parse_size``."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"size must be an integer of bytes, got {n!r}")
    if n == -1:
        return "-1"
    if n < 0:
        raise ValueError(f"size must be -1 (unlimited) or >= 0, got {n}")
    candidates = [f"{n}B"]
    if n:
        for exponent, prefix in enumerate(_SIZE_PREFIXES.upper(), start=1):
            if n % 1024**exponent == 0:
                candidates.append(f"{n // 1024**exponent}{prefix}iB")
            if n % 1000**exponent == 0:
                candidates.append(f"{n // 1000**exponent}{prefix}")
    # Shortest wins; on a tie the binary spelling (listed first per prefix) is kept.
    return min(candidates, key=len)


def parse_count(value: str | int) -> int:
    """A count from an int or a string with a decimal suffix: ``"1M"`` = 1_000_000,
    ``"10K"`` = 10_000, ``"2G"`` = 2_000_000_000. ``-1`` (unlimited) stays -1."""
    _reject_bool(value, "count")
    if isinstance(value, float):
        value = _integral(Decimal(repr(value)), value, "count")
    if isinstance(value, int):
        if value < -1:
            raise ValueError(f"count must be -1 (unlimited) or >= 0, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(
            f"count must be an integer or a string like '1M', got {type(value).__name__}"
        )
    text = value.strip().replace("_", "")
    if text == "-1":
        return -1
    match = _COUNT.match(text)
    if match is None:
        raise ValueError(f"invalid count {value!r}; expected e.g. 1000, '10K', '1M', or -1")
    amount = Decimal(match.group(1)) * _COUNT_PREFIXES.get(match.group(2).lower(), 1)
    return _integral(amount, value, "count")


def format_count(n: int) -> str:
    """``1_000_000`` -> ``"1M"``; other numbers as digits. Round-trips through parse_count."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"count must be an integer, got {n!r}")
    for prefix, size in sorted(_COUNT_PREFIXES.items(), key=lambda item: -item[1]):
        if n > 0 and n % size == 0:
            return f"{n // size}{prefix.upper()}"
    return str(n)
