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

    __slots__ = (
        "_buf",
        "_max_control_line",
        "_max_payload",
        "_need",
        "_pending",
        "_pub_memo",
        "_scanned",
    )

    #: Distinct PUB control lines remembered per connection. Publishers repeat the same line
    #: (same subject, same size), and skipping split/decode/int for it halves the parse cost.
    PUB_MEMO_SIZE = 256

    def __init__(self, max_control_line: int = 4096, max_payload: int = 1024 * 1024) -> None:
        self._buf = bytearray()
        self._scanned = 0  # bytes of an unfinished control line already searched for '\n'
        self._need = 0  # bytes the buffer must reach before parsing can make progress
        self._max_control_line = max_control_line
        self._max_payload = max_payload
        # (subject, reply, header_size, total_size) of a PUB/HPUB awaiting its payload.
        self._pending: tuple[str, str, int, int] | None = None
        self._pub_memo: dict[bytes, tuple[str, str, int, int]] = {}

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete operation (bounded by the control-line and payload caps)."""
        return len(self._buf)

    def set_max_payload(self, max_payload: int) -> None:
        self._max_payload = max_payload
        self._pub_memo.clear()

    def feed(self, data: bytes) -> list[Op]:
        """Add ``data`` and return every operation it completes, in order."""
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                # A large payload still arriving: don't copy or rescan until it is complete.
                return []
            view = bytes(buf)
            self._buf = bytearray()
        else:
            view = data
        self._need = 0
        ops: list[Op] = []
        append = ops.append
        pos = 0
        end = len(view)
        find = view.find
        try:
            while pos < end:
                pending = self._pending
                if pending is None:
                    nl = find(b"\n", pos + self._scanned)
                    if nl < 0:
                        if end - pos > self._max_control_line:
                            raise ProtocolError(ERR_MAX_CONTROL_LINE)
                        self._scanned = end - pos
                        break
                    self._scanned = 0
                    line_end = nl - 1 if nl > pos and view[nl - 1] == 13 else nl
                    if line_end - pos > self._max_control_line:
                        raise ProtocolError(ERR_MAX_CONTROL_LINE)
                    if view.startswith(b"PUB ", pos):
                        key = view[pos + 4 : line_end]
                        pending = self._pub_memo.get(key)
                        if pending is None:
                            pending = self._start_pub(key.split(), headers=False)
                            if len(self._pub_memo) >= self.PUB_MEMO_SIZE:
                                self._pub_memo.clear()
                            self._pub_memo[key] = pending
                    else:
                        op = self._control_line(view[pos:line_end])
                        if op is not None:
                            if op[0] != PUB:
                                append(op)
                                pos = nl + 1
                                continue
                            pending = op[1]
                        else:
                            pos = nl + 1
                            continue
                    pos = nl + 1
                total = pending[3]
                stop = pos + total
                if stop + 2 > end:
                    self._pending = pending
                    self._need = stop + 2 - pos
                    break
                if view[stop] != 13 or view[stop + 1] != 10:
                    raise ProtocolError(ERR_UNKNOWN_OP, "payload longer than its declared size")
                hsize = pending[2]
                if hsize < 0:
                    append((PUB, pending[0], pending[1], None, view[pos:stop]))
                else:
                    mid = pos + hsize
                    append((PUB, pending[0], pending[1], view[pos:mid], view[mid:stop]))
                self._pending = None
                pos = stop + 2
        except ProtocolError:
            self._buf = bytearray()
            self._pending = None
            self._need = 0
            self._scanned = 0
            raise
        if pos < end:
            self._buf = bytearray(view[pos:] if pos else view)
        return ops

    def _control_line(self, line: bytes) -> Op | None:
        verb, _, rest = line.partition(b" ")
        if not verb and rest:
            # Leading spaces or tabs: nats-server skips whitespace before the verb.
            return self._control_line(line.lstrip(b" \t"))
        verb = verb.upper().rstrip(b"\t")
        if verb == b"PUB":
            return (PUB, self._start_pub(rest.split(), headers=False))
        if verb == b"HPUB":
            return (PUB, self._start_pub(rest.split(), headers=True))
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

    def _start_pub(self, args: list[bytes], headers: bool) -> tuple[str, str, int, int]:
        """(subject, reply, header size or -1, total size) of a PUB/HPUB control line."""
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
            return (subject.decode(), reply.decode(), hsize, total)
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
