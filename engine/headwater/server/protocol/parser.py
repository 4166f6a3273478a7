"""Sans-IO parser for the NATS client protocol (client → server direction).

The parser only buffers bytes and turns them into operations; it knows nothing about sockets
or asyncio (h11's split between protocol and transport). It resumes at any byte: a read that
ends mid-line or mid-payload keeps the partial data for the next ``feed``.

Per-byte loops are slow in Python, so the parser works on whole lines: ``bytes.find`` locates
the line end from a remembered offset (a client trickling one byte at a time costs O(n), not
O(n²)), and payloads are sliced by their declared length.

Operations are plain tuples, cheapest to build and unpack on the hot path:

- ``(PUB, subject, reply, None, payload)`` and ``(PUB, subject, reply, headers, payload)``
  for HPUB (headers include the ``NATS/1.0`` line and the blank line that ends them);
- ``(SUB, subject, queue, sid)``; ``(UNSUB, sid, max_msgs)`` with ``max_msgs`` 0 for none;
- ``(CONNECT, options_dict)``; ``(PING,)``; ``(PONG,)``.

Errors raise :class:`ProtocolError`, carrying the text nats-server sends (or none, where
nats-server closes silently) and whether the connection must close.
"""

from __future__ import annotations

import orjson

PUB = 1
SUB = 2
UNSUB = 3
CONNECT = 4
PING = 5
PONG = 6

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_MAX_CONTROL_LINE = "maximum control line exceeded"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"

Op = tuple


class ProtocolError(Exception):
    """A protocol violation.

    ``text`` is what goes into ``-ERR '<text>'``; ``None`` means nats-server closes the
    connection without telling the client (malformed arguments of a known operation).
    """

    def __init__(self, text: str | None, detail: str = "") -> None:
        super().__init__(detail or text or "protocol violation")
        self.text = text


def _parse_int(raw: bytes) -> int:
    """Parse a non-negative decimal size as nats-server does: digits only."""
    if not raw.isdigit():
        raise ProtocolError(None, f"invalid number {raw!r}")
    return int(raw)


class Parser:
    """Incremental parser; call :meth:`feed` with each chunk read from the socket."""

    __slots__ = ("_buf", "_max_control_line", "_max_payload", "_pending", "_scanned")

    def __init__(self, max_control_line: int = 4096, max_payload: int = 1024 * 1024) -> None:
        self._buf = bytearray()
        self._scanned = 0  # bytes of an unfinished control line already searched for '\n'
        self._max_control_line = max_control_line
        self._max_payload = max_payload
        # (subject, reply, header_size, total_size) of a PUB/HPUB awaiting its payload.
        self._pending: tuple[str, str, int, int] | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete operation (bounded by the control-line and payload caps)."""
        return len(self._buf)

    def set_max_payload(self, max_payload: int) -> None:
        self._max_payload = max_payload

    def feed(self, data: bytes) -> list[Op]:
        """Add ``data`` and return every operation it completes, in order."""
        buf = self._buf
        if buf:
            buf += data
            view: bytes | bytearray = buf
        else:
            view = data
        ops: list[Op] = []
        pos = 0
        end = len(view)
        try:
            while pos < end:
                pending = self._pending
                if pending is not None:
                    total = pending[3]
                    stop = pos + total
                    if stop + 2 > end:
                        break
                    if view[stop : stop + 2] != b"\r\n":
                        raise ProtocolError(ERR_UNKNOWN_OP, "payload longer than its declared size")
                    hsize = pending[2]
                    if hsize < 0:
                        ops.append((PUB, pending[0], pending[1], None, bytes(view[pos:stop])))
                    else:
                        mid = pos + hsize
                        ops.append(
                            (
                                PUB,
                                pending[0],
                                pending[1],
                                bytes(view[pos:mid]),
                                bytes(view[mid:stop]),
                            )
                        )
                    self._pending = None
                    pos = stop + 2
                    continue
                nl = view.find(b"\n", pos + self._scanned if pos == 0 else pos)
                if nl < 0:
                    if end - pos > self._max_control_line:
                        raise ProtocolError(ERR_MAX_CONTROL_LINE)
                    self._scanned = end - pos
                    break
                self._scanned = 0
                line_end = nl - 1 if nl > pos and view[nl - 1] == 13 else nl
                if line_end - pos > self._max_control_line:
                    raise ProtocolError(ERR_MAX_CONTROL_LINE)
                line = bytes(view[pos:line_end])
                pos = nl + 1
                op = self._control_line(line)
                if op is not None:
                    ops.append(op)
        except ProtocolError:
            self._buf = bytearray()
            self._pending = None
            raise
        if pos >= end:
            if buf:
                self._buf = bytearray()
        elif buf:
            del buf[:pos]
        else:
            self._buf = bytearray(view[pos:])
        return ops

    def _control_line(self, line: bytes) -> Op | None:
        verb, _, rest = line.partition(b" ")
        if not verb and rest:
            # Leading spaces or tabs: nats-server skips whitespace before the verb.
            return self._control_line(line.lstrip(b" \t"))
        verb = verb.upper().rstrip(b"\t")
        if verb == b"PUB":
            self._start_pub(rest.split(), headers=False)
            return None
        if verb == b"HPUB":
            self._start_pub(rest.split(), headers=True)
            return None
        if verb == b"SUB":
            return self._sub(rest.split())
        if verb == b"PING":
            return (PING,)
        if verb == b"PONG":
            return (PONG,)
        if verb == b"UNSUB":
            return self._unsub(rest.split())
        if verb == b"CONNECT":
            return self._connect(rest)
        if verb in (b"INFO", b"+OK", b"-ERR"):
            # Sent by servers; a client echoing them is harmless and nats-server ignores them.
            return None
        raise ProtocolError(ERR_UNKNOWN_OP, f"unknown operation {verb[:32]!r}")

    def _start_pub(self, args: list[bytes], headers: bool) -> None:
        want = 3 if headers else 2
        if len(args) == want:
            subject, reply = args[0], b""
        elif len(args) == want + 1:
            subject, reply = args[0], args[1]
        else:
            raise ProtocolError(None, "wrong number of PUB arguments")
        total = _parse_int(args[-1])
        hsize = _parse_int(args[-2]) if headers else -1
        if headers and hsize > total:
            raise ProtocolError(None, "header size larger than total size")
        if total > self._max_payload:
            raise ProtocolError(ERR_MAX_PAYLOAD)
        try:
            self._pending = (subject.decode(), reply.decode(), hsize, total)
        except UnicodeDecodeError as exc:
            raise ProtocolError(None, "subject is not UTF-8") from exc

    @staticmethod
    def _sub(args: list[bytes]) -> Op:
        if len(args) == 2:
            subject, queue, sid = args[0], b"", args[1]
        elif len(args) == 3:
            subject, queue, sid = args
        else:
            raise ProtocolError(None, "wrong number of SUB arguments")
        try:
            return (SUB, subject.decode(), queue.decode() or None, sid.decode())
        except UnicodeDecodeError as exc:
            raise ProtocolError(None, "subject is not UTF-8") from exc

    @staticmethod
    def _unsub(args: list[bytes]) -> Op:
        if len(args) == 1:
            return (UNSUB, args[0].decode(errors="replace"), 0)
        if len(args) == 2:
            return (UNSUB, args[0].decode(errors="replace"), _parse_int(args[1]))
        raise ProtocolError(None, "wrong number of UNSUB arguments")

    @staticmethod
    def _connect(rest: bytes) -> Op:
        try:
            options = orjson.loads(rest)
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(None, "CONNECT is not valid JSON") from exc
        if not isinstance(options, dict):
            raise ProtocolError(None, "CONNECT options are not an object")
        return (CONNECT, options)
