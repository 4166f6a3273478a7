"""How JetStream values look on the wire: JSON bytes, timestamps, durations, header blocks.

Clients parse our replies with ordinary JSON decoders, but some tools and tests compare raw
bytes or texts with nats-server's, so the encoding follows Go's ``encoding/json`` and ``time``
packages: ``<``, ``>`` and ``&`` are escaped as ``\\u003c`` etc. (Go's HTML-safe default),
timestamps are RFC 3339 with nanoseconds and trailing zeros trimmed, and a zero time is Go's
``0001-01-01T00:00:00Z``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

__all__ = [
    "ZERO_TIME",
    "dumps",
    "go_int",
    "is_empty_request",
    "parse_go_duration",
    "rfc3339",
    "with_headers",
]

ZERO_TIME = "0001-01-01T00:00:00Z"
"""Go's zero ``time.Time`` as JSON: what a stream with no messages reports as ``first_ts``."""

_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def dumps(value: Any) -> bytes:
    """JSON bytes as Go's ``json.Marshal`` writes them (compact, HTML characters escaped).

    The escaped characters can only occur inside JSON strings, so a byte replace is exact.
    """
    out = orjson.dumps(value)
    for raw, escaped in _ESCAPES:
        if raw in out:
            out = out.replace(raw, escaped)
    return out


def rfc3339(ns: int) -> str:
    """A UTC timestamp in Go's ``time.RFC3339Nano`` form; 0 is Go's zero time."""
    if ns <= 0:
        return ZERO_TIME
    secs, frac = divmod(ns, 1_000_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def go_int(text: str | None) -> int:
    """nats-server's ``parseInt64`` on a header value: ASCII digits only, else -1."""
    if not text or not text.isascii() or not text.isdigit() or len(text) > 19:
        return -1
    return int(text)


def is_empty_request(body: bytes) -> bool:
    """nats-server's ``isEmptyRequest``: no bytes, or a JSON object with no members."""
    if not body:
        return True
    if body == b"{}":
        return True
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and not value


_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # Go accepts both micro signs
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}


def parse_go_duration(text: str) -> int | None:
    """Go's ``time.ParseDuration`` (``1h30m``, ``1.5s``, ``-2ms``, ``0``) in ns; None if invalid."""
    s = text
    if not s:
        return None
    sign = 1
    if s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        return None
    total = 0
    while s:
        i = 0
        while i < len(s) and s[i].isdigit():
            i += 1
        whole = s[:i]
        s = s[i:]
        frac = ""
        if s.startswith("."):
            j = 1
            while j < len(s) and s[j].isdigit():
                j += 1
            frac = s[1:j]
            s = s[j:]
        if not whole and not frac:
            return None
        k = 0
        while k < len(s) and not (s[k].isdigit() or s[k] == "."):
            k += 1
        unit = _UNITS.get(s[:k])
        if unit is None:
            return None
        s = s[k:]
        value = int(whole or "0") * unit
        if frac:
            value += int(frac) * unit // 10 ** len(frac)
        total += value
    return sign * total


def with_headers(hdr: bytes | None, pairs: list[tuple[str, str]]) -> bytes:
    """Append ``key: value`` lines to a header block (a new block when ``hdr`` is empty).

    Existing lines are kept, as nats-server's ``genHeader`` keeps them: the added lines come
    last, so a client reading the last value of a repeated key sees ours.
    """
    lines = "".join(f"{k}: {v}\r\n" for k, v in pairs).encode()
    if hdr and len(hdr) > 2:
        return hdr[:-2] + lines + b"\r\n"
    return b"NATS/1.0\r\n" + lines + b"\r\n"
