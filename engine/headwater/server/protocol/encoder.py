"""Server → client protocol lines. Pure functions returning bytes."""

from __future__ import annotations

from typing import Any

import orjson

PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"


def info(fields: dict[str, Any]) -> bytes:
    return b"INFO " + orjson.dumps(fields) + b"\r\n"


def err(text: str) -> bytes:
    return b"-ERR '" + text.encode() + b"'\r\n"


def msg(subject: bytes, sid: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> bytes:
    """MSG or HMSG for one subscription; ``subject``, ``sid`` and ``reply`` are pre-encoded."""
    if hdr is None:
        if reply:
            head = b"MSG %s %s %s %d\r\n" % (subject, sid, reply, len(payload))
        else:
            head = b"MSG %s %s %d\r\n" % (subject, sid, len(payload))
        return head + payload + b"\r\n"
    hlen = len(hdr)
    if reply:
        head = b"HMSG %s %s %s %d %d\r\n" % (subject, sid, reply, hlen, hlen + len(payload))
    else:
        head = b"HMSG %s %s %d %d\r\n" % (subject, sid, hlen, hlen + len(payload))
    return head + hdr + payload + b"\r\n"
