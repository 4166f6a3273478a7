"""Sans-IO parser and encoders for nats-server's route protocol (server ↔ server).

What a route carries, as nats-server 2.10+ speaks it to a server that does not pool routes
(see docs/CLUSTERING.md for why Headwater does not pool):

- ``INFO {json}`` / ``CONNECT {json}``: the handshake, and later INFO updates (gossip of
  other servers, lame duck);
- ``RS+ <account> <subject>`` and ``RS+ <account> <subject> <queue> <weight>``: interest, a
  queue group's weight being its number of members on the sending server; ``RS- <account>
  <subject> [<queue>]``: interest gone;
- ``RMSG <account> <subject> [<reply>] <size>`` and, when the message is meant for queue
  groups, ``RMSG <account> <subject> + <reply> <queue>... <size>`` or ``RMSG <account>
  <subject> | <queue>... <size>``; ``HMSG`` is the same with ``<header size>`` before the
  total size;
- ``PING``, ``PONG``, ``-ERR '<text>'``, ``+OK``.

Like :mod:`headwater.server.protocol.parser` it works on whole lines found with
``bytes.find`` and slices payloads by their declared size; operations are tuples. LS+/LS-/
LMSG (leaf node interest with an origin cluster) and A+/A- (gateways) are parsed only to be
recognised: nats-server sends them only to servers that announce leaf-node or gateway
support, which Headwater does not.
"""

from __future__ import annotations

from typing import Any

import orjson

from headwater.server.protocol.parser import ProtocolError

INFO = 1
CONNECT = 2
PING = 3
PONG = 4
SUB = 5
UNSUB = 6
MSG = 7
ERR = 8
OK = 9
IGNORED = 10
BATCH = 11

RoutedOp = tuple[Any, ...]
"""``(INFO, dict)``, ``(CONNECT, dict)``, ``(PING,)``, ``(PONG,)``, ``(ERR, text)``,
``(OK,)``, ``(SUB, account, subject, queue or None, weight)``, ``(UNSUB, account, subject,
queue or None)``, ``(MSG, account, subject, reply, queues, header or None, payload)``,
``(BATCH, account, subject, [payload, ...])`` for plain messages in a row to one subject
(no reply, queue groups or headers), and ``(IGNORED, verb)``."""


class RouteParser:
    """Incremental parser for what a remote server sends on a route."""

    __slots__ = ("_buf", "_max_control_line", "_memo", "_pending")

    #: Distinct RMSG control lines remembered: a route repeats the same few (same subject,
    #: same size) under load, and skipping the split and decode halves the parse.
    MEMO_SIZE = 256

    def __init__(self, max_control_line: int = 4096) -> None:
        self._buf = b""
        self._max_control_line = max_control_line
        # (account, subject, reply, queues, header size or -1, total size) of an RMSG/HMSG
        # whose payload has not fully arrived.
        self._pending: tuple[str, str, str, tuple[str, ...], int, int] | None = None
        self._memo: dict[bytes, tuple[str, str, str, tuple[str, ...], int, int]] = {}

    def feed(self, data: bytes) -> list[RoutedOp]:
        view = self._buf + data if self._buf else data
        self._buf = b""
        ops: list[RoutedOp] = []
        pos, end = 0, len(view)
        while pos < end:
            pending = self._pending
            raw = b""  # the control line as sent (with its line end), when read in this feed
            if pending is None:
                nl = view.find(b"\n", pos)
                if nl < 0:
                    # Routes carry no size limit on control lines of their own beyond the
                    # server's; an unterminated line longer than that is a broken peer.
                    if end - pos > self._max_control_line + 1024:
                        raise ProtocolError("maximum control line exceeded")
                    break
                line_end = nl - 1 if nl > pos and view[nl - 1] == 13 else nl
                line = view[pos:line_end]
                raw = view[pos : nl + 1]
                pos = nl + 1
                pending = self._memo.get(line) if line.startswith(b"RMSG ") else None
                if pending is None:
                    op = self._control_line(line)
                    if op[0] != MSG:
                        ops.append(op)
                        continue
                    pending = op[1]
                    if line.startswith(b"RMSG "):
                        if len(self._memo) >= self.MEMO_SIZE:
                            self._memo.clear()
                        self._memo[line] = pending
                self._pending = pending
            total = pending[5]
            stop = pos + total
            if stop + 2 > end:
                break
            if view[stop] != 13 or view[stop + 1] != 10:
                raise ProtocolError(None, "routed message longer than its declared size")
            hsize = pending[4]
            if hsize < 0 and not pending[2] and not pending[3]:
                # Plain messages (no reply, queues or headers) in a row to one subject are
                # one BATCH operation, routed with one match and one write per subscriber.
                last = ops[-1] if ops else None
                if last is not None and last[0] == BATCH and last[1:3] == pending[:2]:
                    payloads = last[3]
                else:
                    payloads = []
                    ops.append((BATCH, pending[0], pending[1], payloads))
                payloads.append(view[pos:stop])
                self._pending = None
                pos = stop + 2
                if raw:
                    # A route under load repeats the very same line (subject and size): take
                    # the next ones by comparing bytes, without finding, splitting or looking
                    # up each line again.
                    skip = len(raw)
                    while view.startswith(raw, pos):
                        start, stop = pos + skip, pos + skip + total
                        if stop + 2 > end:
                            break  # not all here yet: the general path keeps it for later
                        if view[stop] != 13 or view[stop + 1] != 10:
                            raise ProtocolError(None, "routed message longer than its size")
                        payloads.append(view[start:stop])
                        pos = stop + 2
                continue
            elif hsize < 0:
                ops.append((MSG, *pending[:4], None, view[pos:stop]))
            else:
                hdr, payload = view[pos : pos + hsize], view[pos + hsize : stop]
                ops.append((MSG, *pending[:4], hdr, payload))
            self._pending = None
            pos = stop + 2
        if pos < end:
            self._buf = bytes(view[pos:])
        return ops

    def _control_line(self, line: bytes) -> RoutedOp | tuple[int, Any]:
        verb, _, rest = line.strip().partition(b" ")
        verb = verb.upper()
        if verb == b"RMSG":
            return (MSG, _routed_msg(rest.split(), headers=False))
        if verb == b"HMSG":
            return (MSG, _routed_msg(rest.split(), headers=True))
        if verb == b"RS+":
            return _sub(rest.split())
        if verb == b"RS-":
            return _unsub(rest.split())
        if verb == b"PING":
            return (PING,)
        if verb == b"PONG":
            return (PONG,)
        if verb in (b"INFO", b"CONNECT"):
            try:
                fields = orjson.loads(rest)
            except orjson.JSONDecodeError as exc:
                raise ProtocolError(None, f"{verb.decode()} is not valid JSON") from exc
            if not isinstance(fields, dict):
                raise ProtocolError(None, f"{verb.decode()} is not a JSON object")
            return (INFO if verb == b"INFO" else CONNECT, fields)
        if verb == b"-ERR":
            return (ERR, rest.decode(errors="replace").strip().strip("'"))
        if verb == b"+OK":
            return (OK,)
        if verb in (b"LS+", b"LS-", b"A+", b"A-"):
            return (IGNORED, verb.decode())
        if verb == b"LMSG":
            # Never sent to us (we do not announce lnoc); its payload size is unknown here.
            raise ProtocolError("Unknown Protocol Operation", "LMSG on a route without lnoc")
        raise ProtocolError("Unknown Protocol Operation", f"unknown route operation {verb[:32]!r}")


def _text(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise ProtocolError(None, "subject is not UTF-8") from exc


def _size(raw: bytes) -> int:
    if not raw.isdigit():
        raise ProtocolError(None, f"invalid size {raw[:32]!r}")
    return int(raw)


def _routed_msg(
    args: list[bytes], headers: bool
) -> tuple[str, str, str, tuple[str, ...], int, int]:
    """(account, subject, reply, queues, header size or -1, total size) of RMSG/HMSG."""
    sizes = 2 if headers else 1
    fixed = 2 + sizes  # account, subject, the sizes
    if len(args) < fixed:
        raise ProtocolError(None, "routed message: too few arguments")
    account, subject = _text(args[0]), _text(args[1])
    middle = args[2 : len(args) - sizes]
    reply, queues = "", ()
    if len(middle) == 1:
        reply = _text(middle[0])
    elif len(middle) > 1:
        marker = middle[0]
        if marker == b"+":
            reply = _text(middle[1])
            queues = tuple(_text(q) for q in middle[2:])
        elif marker == b"|":
            queues = tuple(_text(q) for q in middle[1:])
        else:
            raise ProtocolError(None, f"routed message: bad reply indicator {marker[:8]!r}")
    total = _size(args[-1])
    hsize = _size(args[-2]) if headers else -1
    if headers and hsize > total:
        raise ProtocolError(None, "routed message: header size larger than total size")
    return (account, subject, reply, queues, hsize, total)


def _sub(args: list[bytes]) -> RoutedOp:
    if len(args) == 2:
        return (SUB, _text(args[0]), _text(args[1]), None, 1)
    if len(args) == 4:
        return (SUB, _text(args[0]), _text(args[1]), _text(args[2]), max(_size(args[3]), 1))
    raise ProtocolError(None, "RS+: wrong number of arguments")


def _unsub(args: list[bytes]) -> RoutedOp:
    if len(args) == 2:
        return (UNSUB, _text(args[0]), _text(args[1]), None)
    if len(args) == 3:
        return (UNSUB, _text(args[0]), _text(args[1]), _text(args[2]))
    raise ProtocolError(None, "RS-: wrong number of arguments")


# --- encoders ------------------------------------------------------------------------------


def info(fields: dict[str, Any]) -> bytes:
    return b"INFO " + orjson.dumps(fields) + b"\r\n"


def connect(fields: dict[str, Any]) -> bytes:
    return b"CONNECT " + orjson.dumps(fields) + b"\r\n"


def sub(account: str, subject: str, queue: str | None, weight: int) -> bytes:
    if queue:
        return f"RS+ {account} {subject} {queue} {weight}\r\n".encode()
    return f"RS+ {account} {subject}\r\n".encode()


def unsub(account: str, subject: str, queue: str | None) -> bytes:
    if queue:
        return f"RS- {account} {subject} {queue}\r\n".encode()
    return f"RS- {account} {subject}\r\n".encode()


def routed_msg(
    account: str,
    subject: str,
    reply: str,
    queues: list[str] | tuple[str, ...],
    hdr: bytes | None,
    payload: bytes,
) -> bytes:
    """One RMSG (or HMSG with headers) for a route."""
    head = f"{account} {subject}"
    if queues:
        qs = " ".join(queues)
        head += f" + {reply} {qs}" if reply else f" | {qs}"
    elif reply:
        head += f" {reply}"
    if hdr is None:
        return b"RMSG %s %d\r\n%s\r\n" % (head.encode(), len(payload), payload)
    hlen = len(hdr)
    return b"HMSG %s %d %d\r\n%s%s\r\n" % (head.encode(), hlen, hlen + len(payload), hdr, payload)


__all__ = [
    "BATCH",
    "CONNECT",
    "ERR",
    "IGNORED",
    "INFO",
    "MSG",
    "OK",
    "PING",
    "PONG",
    "SUB",
    "UNSUB",
    "RouteParser",
    "connect",
    "info",
    "routed_msg",
    "sub",
    "unsub",
]
