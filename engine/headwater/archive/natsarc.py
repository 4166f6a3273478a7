"""Reading nats-server 2.15 stream backups (``NATSARC1``, ADR-63) as Headwater records.

A nats-server 2.15 snapshot is an S2 stream (:mod:`headwater.archive.s2`) whose content starts
with the magic ``NATSARC1`` and then holds entries, each ``uvarint name length, varint time
(ns), uvarint sequence, uvarint header size, uvarint payload size, name, headers + payload``,
in this order: ``state.json`` (the stream state), one ``consumers/<name>`` entry per consumer
(``{"config", "state"}``), the messages by ascending sequence (the name is the subject), and
a sentinel entry with an empty name and zeros. The archive holds no stream config: it comes
from ``backup.json`` or the restore request.

:class:`NatsArchiveReader` yields the same records as Headwater's own
:class:`~headwater.archive.reader.ArchiveReader` (stream, consumers, messages, summary), so
restore and the verifiers treat both formats alike, and it enforces the rules nats-server's
restore does: state first, exactly ``consumer_count`` consumers, message sequences non-zero,
ascending and inside the state's ``first_seq``..``last_seq``, and the sentinel at the end with
nothing after it.

:class:`NatsArchiveWriter` writes the same format from Headwater records (the calls of
:class:`~headwater.archive.writer.ArchiveWriter`), so a Headwater backup can be converted into
one nats-server restores.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, BinaryIO

import orjson

from headwater.archive.format import MalformedArchive, TruncatedArchive, UnsupportedVersion
from headwater.archive.records import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveSummary,
    Record,
)
from headwater.archive.s2 import S2Reader, S2Writer

__all__ = [
    "NATSARC_MAGIC",
    "NatsArchiveReader",
    "NatsArchiveWriter",
    "encode_entry",
    "nats_state_to_archive",
    "uvarint",
]

NATSARC_MAGIC = b"NATSARC1"
STATE_ENTRY = "state.json"
CONSUMER_PREFIX = "consumers/"
MAX_NAME = 1 << 20
"""The longest entry name accepted (nats-server's own bound)."""
MAX_ENTRY = 64 << 20
"""The largest headers + payload accepted: nats-server's max_payload cannot exceed it."""
_READ = 1 << 20


class _Cursor:
    """Bytes from an :class:`S2Reader`, consumed through a window that is refilled on demand
    (an entry may straddle S2 blocks)."""

    def __init__(self, source: S2Reader) -> None:
        self._src = source
        self._buf = b""
        self._pos = 0
        self.offset = 0
        """Uncompressed bytes consumed so far (for error messages)."""

    def at_end(self) -> bool:
        return not self._ensure(1)

    def _ensure(self, n: int) -> bool:
        if len(self._buf) - self._pos >= n:
            return True
        rest = self._buf[self._pos :]
        parts = [rest]
        have = len(rest)
        while have < n:
            more = self._src.read(max(_READ, n - have))
            if not more:
                break
            parts.append(more)
            have += len(more)
        self._buf = b"".join(parts)
        self._pos = 0
        return have >= n

    def take_upto(self, n: int) -> bytes:
        """The next ``n`` bytes, or fewer at the end of the stream."""
        self._ensure(n)
        piece = self._buf[self._pos : self._pos + n]
        self._pos += len(piece)
        self.offset += len(piece)
        return piece

    def take(self, n: int, what: str) -> bytes:
        if not self._ensure(n):
            raise TruncatedArchive(f"archive ends inside {what} (offset {self.offset})")
        start = self._pos
        self._pos += n
        self.offset += n
        return self._buf[start : self._pos]

    def uvarint(self, what: str) -> int:
        value = shift = 0
        while True:
            if self._pos >= len(self._buf) and not self._ensure(1):
                raise TruncatedArchive(f"archive ends inside {what} (offset {self.offset})")
            byte = self._buf[self._pos]
            self._pos += 1
            self.offset += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise MalformedArchive(f"{what} is not a valid varint (offset {self.offset})")

    def varint(self, what: str) -> int:
        zigzag = self.uvarint(what)
        return (zigzag >> 1) ^ -(zigzag & 1)


class _Entry:
    __slots__ = ("hdr_size", "name", "payload", "seq", "ts")

    def __init__(self, name: str, ts: int, seq: int, hdr_size: int, payload: bytes) -> None:
        self.name = name
        self.ts = ts
        self.seq = seq
        self.hdr_size = hdr_size
        self.payload = payload


class NatsArchiveReader:
    """Records of the nats-server archive ``source`` (a binary file object positioned at the
    S2 stream's start), for the stream ``name`` with ``config`` (from ``backup.json``)."""

    def __init__(self, source: BinaryIO, name: str, config: dict[str, Any]) -> None:
        self._s2 = S2Reader(source)
        self._cur = _Cursor(self._s2)
        self.name = name
        self.config = config
        self.stream: ArchivedStream | None = None
        self.summary: ArchiveSummary | None = None

    @property
    def bytes_read(self) -> int:
        """Compressed bytes consumed from the source so far."""
        return self._s2.compressed_bytes

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def records(self) -> Iterator[Record]:
        magic = self._cur.take_upto(len(NATSARC_MAGIC))
        if magic != NATSARC_MAGIC and NATSARC_MAGIC.startswith(magic):
            raise TruncatedArchive(f"the archive ends after {len(magic)} bytes, inside its magic")
        if magic != NATSARC_MAGIC:
            raise UnsupportedVersion(
                "not a NATSARC1 archive: nats-server 2.14 and older wrote tar backups "
                "(format v1), which Headwater does not read"
            )
        first = self._entry()
        if first is None or first.name != STATE_ENTRY or first.seq != 0:
            raise MalformedArchive(f"the first entry must be {STATE_ENTRY}")
        raw_state = _json(first.payload, STATE_ENTRY)
        state = nats_state_to_archive(raw_state)
        first_seq, last_seq = state["first_seq"], state["last_seq"]
        consumers_left = raw_state.get("consumer_count", 0)
        if not isinstance(consumers_left, int) or consumers_left < 0:
            raise MalformedArchive(f"{STATE_ENTRY}: invalid consumer_count {consumers_left!r}")
        if first_seq > last_seq + 1 or (first_seq == 0 and last_seq != 0):
            raise MalformedArchive(
                f"{STATE_ENTRY}: inconsistent sequences first {first_seq}, last {last_seq}"
            )
        self.stream = ArchivedStream(self.name, time.time_ns(), self.config, state)
        yield self.stream
        consumers = 0
        while consumers_left:
            entry = self._entry()
            if entry is None or not entry.name.startswith(CONSUMER_PREFIX) or entry.seq:
                raise MalformedArchive(
                    f"{STATE_ENTRY} counts {consumers + consumers_left} consumers, "
                    f"the archive holds {consumers}"
                )
            yield _consumer(entry)
            consumers += 1
            consumers_left -= 1
        prev = max(first_seq, 1) - 1
        messages = payload = 0
        while True:
            entry = self._entry()
            if entry is None:
                break
            if not entry.seq:
                raise MalformedArchive(f"entry {entry.name!r} out of place among the messages")
            if entry.seq <= prev or entry.seq > last_seq:
                raise MalformedArchive(
                    f"message {entry.seq} after {prev}: sequences must ascend within "
                    f"{first_seq}..{last_seq}"
                )
            prev = entry.seq
            messages += 1
            payload += len(entry.payload)
            yield ArchivedMessage(
                entry.seq,
                entry.name,
                entry.payload[: entry.hdr_size],
                entry.payload[entry.hdr_size :],
                entry.ts,
            )
        if not self._cur.at_end():
            raise MalformedArchive("data follows the end-of-backup sentinel")
        last_message = prev if messages else 0
        self.summary = ArchiveSummary(messages, consumers, last_message, payload)
        yield self.summary

    def _entry(self) -> _Entry | None:
        """The next entry, or None for the sentinel."""
        cur = self._cur
        if cur.at_end():
            raise TruncatedArchive(
                f"archive ends without its end-of-backup sentinel (offset {cur.offset})"
            )
        name_len = cur.uvarint("an entry's name length")
        ts = cur.varint("an entry's time")
        seq = cur.uvarint("an entry's sequence")
        hdr_size = cur.uvarint("an entry's header size")
        body_size = cur.uvarint("an entry's payload size")
        if not name_len:
            if ts or seq or hdr_size or body_size:
                raise MalformedArchive(f"entry without a name at offset {cur.offset}")
            return None
        if name_len > MAX_NAME or hdr_size + body_size > MAX_ENTRY:
            raise MalformedArchive(f"implausible entry sizes at offset {cur.offset}")
        raw_name = cur.take(name_len, "an entry's name")
        try:
            name = raw_name.decode()
        except UnicodeDecodeError:
            raise MalformedArchive(f"entry name at offset {cur.offset} is not UTF-8") from None
        payload = cur.take(hdr_size + body_size, f"entry {name!r}")
        return _Entry(name, ts, seq, hdr_size, payload)


def _json(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedArchive(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MalformedArchive(f"{what} is not a JSON object")
    return value


def _time_ns(value: Any, what: str) -> int:
    """nats-server's RFC 3339 time (``0001-01-01T00:00:00Z`` for none) in ns, 0 for none."""
    if value in (None, "", 0):
        return 0
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise MalformedArchive(f"{what}: {value!r} is not a time")
    text = value.strip()
    if text.startswith("0001-01-01"):
        return 0
    fraction = 0
    main = text
    if "." in text:
        main, rest = text.split(".", 1)
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        zone = rest[len(digits) :]
        fraction = int((digits + "000000000")[:9]) if digits else 0
        main += zone
    try:
        moment = datetime.fromisoformat(main.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedArchive(f"{what}: {value!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None:  # RFC 3339 always has a zone; read a bare time as UTC, not local
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000_000 + fraction


def _count(state: dict[str, Any], key: str) -> int:
    value = state.get(key, 0) or 0
    if not isinstance(value, int) or value < 0:
        raise MalformedArchive(f"{STATE_ENTRY}: invalid {key} {value!r}")
    return value


def nats_state_to_archive(state: dict[str, Any]) -> dict[str, Any]:
    """nats-server's StreamState JSON in the integer form Headwater's archive records use."""
    return {
        "messages": _count(state, "messages"),
        "bytes": _count(state, "bytes"),
        "first_seq": _count(state, "first_seq"),
        "first_ts": _time_ns(state.get("first_ts"), "first_ts"),
        "last_seq": _count(state, "last_seq"),
        "last_ts": _time_ns(state.get("last_ts"), "last_ts"),
        "num_deleted": _count(state, "num_deleted"),
        "num_subjects": _count(state, "num_subjects"),
    }


def _consumer(entry: _Entry) -> ArchivedConsumer:
    name = entry.name[len(CONSUMER_PREFIX) :]
    body = _json(entry.payload, f"consumer {name!r}")
    config, state = body.get("config"), body.get("state")
    if not name or not isinstance(config, dict) or not isinstance(state, dict):
        raise MalformedArchive(f"consumer entry {entry.name!r} needs a config and a state")
    try:
        # nats-server's Pending struct has no JSON tags: its keys are Go's field names.
        pending = sorted(
            [int(sseq), int(p.get("Sequence", 0)), int(p.get("Timestamp", 0))]
            for sseq, p in (state.get("pending") or {}).items()
        )
        redelivered = sorted(
            [int(sseq), int(count)] for sseq, count in (state.get("redelivered") or {}).items()
        )
    except (AttributeError, TypeError, ValueError) as exc:
        raise MalformedArchive(f"consumer {name!r} has an invalid state: {exc}") from None
    converted = {
        "delivered": state.get("delivered") or {},
        "ack_floor": state.get("ack_floor") or {},
        "pending": pending,
        "redelivered": redelivered,
    }
    created = _time_ns(body.get("created"), f"consumer {name!r} created") or entry.ts
    return ArchivedConsumer(name, created, config, converted)


# --- writing ---------------------------------------------------------------------------------


def uvarint(value: int) -> bytes:
    """``value`` as an unsigned LEB128 varint (Go's ``binary.PutUvarint``)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_entry(name: bytes, ts: int, seq: int, hdr: bytes, body: bytes) -> bytes:
    """One NATSARC1 entry (the sentinel is ``encode_entry(b"", 0, 0, b"", b"")``)."""
    zigzag = (ts << 1) ^ (ts >> 63)
    return b"".join(
        (
            uvarint(len(name)),
            uvarint(zigzag),
            uvarint(seq),
            uvarint(len(hdr)),
            uvarint(len(body)),
            name,
            hdr,
            body,
        )
    )


def _rfc3339(ns: int) -> str:
    """A time in ns as nats-server writes it (Go's RFC 3339 with nanoseconds)."""
    if ns <= 0:
        return "0001-01-01T00:00:00Z"
    seconds, fraction = divmod(ns, 1_000_000_000)
    text = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if fraction:
        text += "." + f"{fraction:09d}".rstrip("0")
    return text + "Z"


def _nats_consumer_state(state: dict[str, Any], last_seq: int) -> dict[str, Any]:
    """A consumer's state as nats-server 2.15 archives it: no per-message pending or
    redelivery records, so with messages awaiting acks both delivered sequences roll back to
    the ack floor (they are redelivered after a restore), and no stream sequence beyond the
    stream's last."""
    floor = dict(state.get("ack_floor") or {"consumer_seq": 0, "stream_seq": 0})
    delivered = dict(state.get("delivered") or floor)
    if state.get("pending"):
        delivered = dict(floor)
    for position in (delivered, floor):
        position["stream_seq"] = min(int(position.get("stream_seq", 0)), last_seq)
    return {"delivered": delivered, "ack_floor": floor}


class NatsArchiveWriter:
    """Write a nats-server 2.15 archive (``NATSARC1`` in S2) to ``sink``: ``write_stream``, then
    ``write_consumer``s, then ``write_message``s by ascending sequence, then ``close``.

    ``state.json`` counts the consumers that follow it, so it is written once the first message
    (or ``close``) shows there are no more."""

    def __init__(self, sink: Callable[[bytes], object]) -> None:
        self._s2 = S2Writer(sink)
        self._s2.write(NATSARC_MAGIC)
        self._state: dict[str, Any] | None = None
        self._consumers: list[bytes] = []
        self._started = False
        self._messages = 0
        self._last_seq = 0
        self._payload = 0

    @property
    def bytes_written(self) -> int:
        return self._s2.bytes_written

    def write_stream(self, stream: ArchivedStream) -> None:
        if self._state is not None:
            raise ValueError("the stream is written once, first")
        self._state = stream.state

    def write_consumer(self, consumer: ArchivedConsumer) -> None:
        if self._state is None or self._started:
            raise ValueError("consumers follow the stream and precede the messages")
        last_seq = int(self._state.get("last_seq", 0))
        body = {"config": consumer.config, "state": _nats_consumer_state(consumer.state, last_seq)}
        name = (CONSUMER_PREFIX + consumer.name).encode()
        self._consumers.append(encode_entry(name, consumer.created_ns, 0, b"", orjson.dumps(body)))

    def write_message(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int) -> None:
        self._start()
        if seq <= self._last_seq:
            raise ValueError(f"message {seq} after {self._last_seq}: sequences must ascend")
        self._s2.write(encode_entry(subject.encode(), ts, seq, hdr, data))
        self._last_seq = seq
        self._messages += 1
        self._payload += len(hdr) + len(data)

    def close(self) -> ArchiveSummary:
        self._start()
        self._s2.write(encode_entry(b"", 0, 0, b"", b""))
        self._s2.close()
        return ArchiveSummary(self._messages, len(self._consumers), self._last_seq, self._payload)

    def _start(self) -> None:
        if self._started:
            return
        if self._state is None:
            raise ValueError("the stream comes first")
        self._started = True
        state = self._state
        nats_state: dict[str, Any] = {
            "messages": int(state.get("messages", 0)),
            "bytes": int(state.get("bytes", 0)),
            "first_seq": int(state.get("first_seq", 0)),
            "first_ts": _rfc3339(int(state.get("first_ts", 0))),
            "last_seq": int(state.get("last_seq", 0)),
            "last_ts": _rfc3339(int(state.get("last_ts", 0))),
            "num_subjects": int(state.get("num_subjects", 0)),
            "consumer_count": len(self._consumers),
        }
        if state.get("num_deleted"):
            nats_state["num_deleted"] = int(state["num_deleted"])
        head = encode_entry(STATE_ENTRY.encode(), time.time_ns(), 0, b"", orjson.dumps(nats_state))
        self._s2.write(head + b"".join(self._consumers))
