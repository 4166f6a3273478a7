"""NATS message headers: ``NATS/1.0[ <status>[ <description>]]\\r\\n`` then MIME-style lines.

Values keep their case and order; lookups are by exact key (NATS headers are case-sensitive
in nats-server's ``getHeader``, which JetStream uses for ``Nats-*`` keys).
"""

from __future__ import annotations

VERSION_LINE = b"NATS/1.0"


def status(code: int, description: str = "", extra: dict[str, str] | None = None) -> bytes:
    """A status-only header block, as nats-server sends for 503 no responders or 404/408."""
    line = VERSION_LINE + b" %d" % code
    if description:
        line += b" " + description.encode()
    return encode(extra or {}, first_line=line)


def encode(headers: dict[str, str], first_line: bytes = VERSION_LINE) -> bytes:
    parts = [first_line]
    parts.extend(f"{k}: {v}".encode() for k, v in headers.items())
    return b"\r\n".join(parts) + b"\r\n\r\n"


def parse(block: bytes | None) -> dict[str, str]:
    """Header lines of ``block`` as a dict (the last value wins for repeated keys)."""
    if not block:
        return {}
    out: dict[str, str] = {}
    for raw in block.split(b"\r\n")[1:]:
        key, sep, value = raw.partition(b":")
        if sep and key:
            out[key.decode(errors="replace").strip()] = value.decode(errors="replace").strip()
    return out


def get(block: bytes | None, key: str) -> str | None:
    """One header value without building a dict: the hot path checks a few keys per publish."""
    if not block:
        return None
    needle = b"\r\n" + key.encode() + b":"
    start = block.find(needle)
    if start < 0:
        return None
    start += len(needle)
    stop = block.find(b"\r\n", start)
    return block[start:stop].decode(errors="replace").strip()


def status_of(block: bytes | None) -> int | None:
    """The status code on the first line, if any."""
    if not block or not block.startswith(VERSION_LINE):
        return None
    line = block[: block.find(b"\r\n")]
    code = line[len(VERSION_LINE) :].strip()[:3]
    return int(code) if code.isdigit() else None
