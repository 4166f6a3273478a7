"""Value formats nats-server's monitoring JSON uses, so parsers written for it read ours.

nats-server is written in Go and its JSON carries Go's encodings: timestamps are RFC 3339 with
up to nine fractional digits (trailing zeros dropped), ``time.Duration`` fields are integer
nanoseconds, ``uptime``/``idle`` use its own "1d2h3m4s" format, ``rtt`` is Go's
``Duration.String()`` ("612µs", "1.5ms"), and a float64 that happens to be whole is written
without a fraction (``2`` rather than ``2.0``). Tools such as prometheus-nats-exporter parse
these strings, so the exact shapes matter.
"""

from __future__ import annotations

import datetime

_NS_PER_US = 1_000
_NS_PER_MS = 1_000_000
_NS_PER_S = 1_000_000_000


def rfc3339(ts: float) -> str:
    """Epoch seconds as UTC RFC 3339 with the fraction trimmed (Go's ``RFC3339Nano``)."""
    dt = datetime.datetime.fromtimestamp(ts, datetime.UTC)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        text += "." + f"{dt.microsecond:06d}".rstrip("0")
    return text + "Z"


def nanos(seconds: float) -> int:
    """Seconds as integer nanoseconds: how Go marshals a ``time.Duration``."""
    return round(seconds * _NS_PER_S)


def uptime(seconds: float) -> str:
    """Whole-second durations as nats-server writes ``uptime`` and ``idle``: "3d4h5m6s".

    Only the leading units that are non-zero are shown ("42s", "1m0s"); a year is 365 days.
    """
    total = max(int(seconds), 0)
    mins, secs = divmod(total, 60)
    hours, mins = divmod(mins, 60)
    days, hours = divmod(hours, 24)
    years, days = divmod(days, 365)
    if years:
        return f"{years}y{days}d{hours}h{mins}m{secs}s"
    if days:
        return f"{days}d{hours}h{mins}m{secs}s"
    if hours:
        return f"{hours}h{mins}m{secs}s"
    if mins:
        return f"{mins}m{secs}s"
    return f"{secs}s"


def _fraction(value: int, unit: int) -> str:
    """``value / unit`` in decimal with no trailing zeros (``1500, 1000`` gives ``"1.5"``)."""
    whole, rest = divmod(value, unit)
    if not rest:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{rest:0{digits}d}".rstrip("0")


def go_duration(ns: int) -> str:
    """Integer nanoseconds in Go's ``Duration.String()`` form: "0s", "850ns", "1.5ms", "2m3.5s"."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < _NS_PER_US:
        return f"{sign}{ns}ns"
    if ns < _NS_PER_MS:
        return f"{sign}{_fraction(ns, _NS_PER_US)}µs"
    if ns < _NS_PER_S:
        return f"{sign}{_fraction(ns, _NS_PER_MS)}ms"
    mins, sec_ns = divmod(ns, 60 * _NS_PER_S)
    hours, mins = divmod(mins, 60)
    secs = _fraction(sec_ns, _NS_PER_S) + "s"
    if hours:
        return f"{sign}{hours}h{mins}m{secs}"
    if mins:
        return f"{sign}{mins}m{secs}"
    return f"{sign}{secs}"


def rtt(seconds: float) -> str:
    """A round-trip time the way nats-server shows it in /connz.

    Between 1µs and 1ms it is cut to whole microseconds ("612µs") so the string stays short;
    otherwise it keeps nanosecond precision. Zero (not measured yet) is "0s".
    """
    ns = int(seconds * _NS_PER_S)
    if _NS_PER_US < ns < _NS_PER_MS:
        ns -= ns % _NS_PER_US
    return go_duration(ns)


def go_number(value: float) -> int | float:
    """A float as Go's encoder writes it: whole values lose their fraction (2.0 -> 2)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
