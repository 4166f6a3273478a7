"""Sizes and durations as nats-server's configuration spells them.

Three notations exist, each with its own rules, and configs written for nats-server rely on
all three:

* size literals, unquoted in a config file: ``1K`` (1000), ``1KB``/``1KiB`` (1024),
  ``64MB``, ``2G`` ... (``parse_size_literal``);
* JetStream storage sizes written as quoted strings: ``"1G"`` = 1 GiB; only one of the
  uppercase letters K, M, G, T may follow the number (``parse_storage_size``);
* durations in Go's ``time.ParseDuration`` syntax: ``"2m"``, ``"1h30m"``, ``"500ms"``,
  ``"1.5h"``. Go has no day or year unit, so ``"1d"`` and ``"1y"`` are errors there and here
  (``parse_duration``).

Errors are ``ValueError`` with a message the caller wraps with the key and position.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

_DEC = [1000**n for n in range(7)]
_BIN = [1024**n for n in range(7)]

#: Suffix (lower-cased) of an unquoted number -> multiplier. A bare letter is decimal, the
#: letter followed by ``b``, ``i`` or ``ib`` is binary, as in nats-server's config parser.
SIZE_MULTIPLIERS: dict[str, int] = {"": 1}
for _power, _letter in enumerate("kmgtpe", start=1):
    SIZE_MULTIPLIERS[_letter] = _DEC[_power]
    for _tail in ("b", "i", "ib"):
        SIZE_MULTIPLIERS[_letter + _tail] = _BIN[_power]

_SIZE_LITERAL = re.compile(r"(-?[0-9]+)([A-Za-z]*)")


def parse_size_literal(text: str) -> int:
    """Value of an integer literal with an optional size suffix: ``"64MB"`` -> 67108864."""
    match = _SIZE_LITERAL.fullmatch(text)
    if match is None:
        raise ValueError(f"expected an integer, got {text!r}")
    digits, suffix = match.groups()
    multiplier = SIZE_MULTIPLIERS.get(suffix.lower())
    if multiplier is None:
        raise ValueError(
            f"invalid size suffix {suffix!r} in {text!r} "
            "(use K, M, G, T, P, E for powers of 1000, or KB/KiB, MB/MiB ... for powers of 1024)"
        )
    value = int(digits) * multiplier
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"integer {text!r} is out of the 64-bit range")
    return value


_STORAGE_SHIFT = {"K": 10, "M": 20, "G": 30, "T": 40}


def parse_storage_size(text: str) -> int:
    """A JetStream size given as a string: ``"512M"`` -> 536870912; ``""`` -> 0.

    nats-server accepts exactly one uppercase K, M, G or T after a plain integer here, always
    as a power of 1024; ``"1GB"`` and ``"1g"`` are errors, and so they are here.
    """
    if text == "":
        return 0
    number, suffix = text[:-1], text[-1]
    if not re.fullmatch(r"[+-]?[0-9]+", number):
        raise ValueError(f"invalid size {text!r}: expected a number followed by K, M, G or T")
    shift = _STORAGE_SHIFT.get(suffix)
    if shift is None:
        raise ValueError(f"invalid size {text!r}: sizes given as strings must end in K, M, G or T")
    value = int(number) << shift
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"size {text!r} is out of the 64-bit range")
    return value


#: Nanoseconds per unit of Go's ``time.ParseDuration``.
_DURATION_UNITS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string: ``"1h30m"`` -> 5400.0, ``"500ms"`` -> 0.5.

    Follows ``time.ParseDuration``: an optional sign, then one or more number+unit pairs;
    the only unit-less value is ``"0"``. Results beyond Go's int64 nanoseconds are errors.
    """
    quoted = f'"{text}"'
    rest = text
    negative = rest[:1] == "-"
    if rest[:1] in ("-", "+"):
        rest = rest[1:]
    if rest == "0":
        return 0.0
    if rest == "":
        raise ValueError(f"time: invalid duration {quoted}")
    total = Decimal(0)
    while rest:
        match = _DURATION_PART.match(rest)
        assert match is not None  # the pattern matches the empty string
        number, unit = match.groups()
        if number in ("", "."):
            raise ValueError(f"time: invalid duration {quoted}")
        if unit == "":
            raise ValueError(f"time: missing unit in duration {quoted}")
        scale = _DURATION_UNITS.get(unit)
        if scale is None:
            raise ValueError(f'time: unknown unit "{unit}" in duration {quoted}')
        try:
            total += Decimal(number) * scale
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
            raise ValueError(f"time: invalid duration {quoted}") from exc
        rest = rest[match.end() :]
    nanos = int(total)
    if nanos > INT64_MAX + (1 if negative else 0):
        raise ValueError(f"time: invalid duration {quoted}")
    return float(-nanos if negative else nanos) / 1e9
