"""The records an archive holds, and how each body is encoded.

* ``ArchivedStream`` (JSON body, first and once): the stream's name, creation time, its config
  as the server's API reports it, and its state when the snapshot began.
* ``ArchivedConsumer`` (JSON body, zero or more): a durable consumer's config and state.
* ``ArchivedMessage`` (binary body, zero or more, ascending ``seq``): one stored message.
* ``ArchiveSummary`` (JSON body, last and once): what the writer wrote, so a reader can tell a
  complete archive from one cut at a frame boundary, and count dropped records.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from headwater.archive.format import MESSAGE_HEAD, MalformedArchive

__all__ = [
    "ArchiveSummary",
    "ArchivedConsumer",
    "ArchivedMessage",
    "ArchivedStream",
    "Record",
    "decode_json",
    "decode_message",
    "encode_message_body",
]


class ArchivedMessage(msgspec.Struct, frozen=True, gc=False):
    seq: int
    subject: str
    hdr: bytes
    """The NATS header block (``NATS/1.0\\r\\n...``) as stored; empty when none."""
    data: bytes
    ts: int
    """Store time in nanoseconds since the epoch."""


class ArchivedStream(msgspec.Struct, frozen=True):
    name: str
    created_ns: int
    config: dict[str, Any]
    """StreamConfig JSON as STREAM.INFO returns it."""
    state: dict[str, Any]
    """Integer state at the start of the snapshot: ``messages``, ``bytes``, ``first_seq``,
    ``first_ts``, ``last_seq``, ``last_ts`` (ns), ``num_deleted``, ``num_subjects``, and
    ``subjects`` (subject -> count) when recorded."""


class ArchivedConsumer(msgspec.Struct, frozen=True):
    name: str
    created_ns: int
    config: dict[str, Any]
    """ConsumerConfig JSON as CONSUMER.INFO returns it."""
    state: dict[str, Any]
    """``delivered`` and ``ack_floor`` (``{consumer_seq, stream_seq}``), ``pending``
    (``[[stream_seq, consumer_seq, ts_ns], ...]``), ``redelivered`` (``[[stream_seq, count],
    ...]``) and, for last-per-subject consumers, ``last_per_subject`` and
    ``last_per_subject_end``."""


class ArchiveSummary(msgspec.Struct, frozen=True):
    messages: int
    """Message records written."""
    consumers: int
    """Consumer records written."""
    last_seq: int
    """Sequence of the last message record (0 when none)."""
    payload_bytes: int
    """Sum of ``len(hdr) + len(data)`` over the message records."""


Record = ArchivedStream | ArchivedConsumer | ArchivedMessage | ArchiveSummary


def encode_message_body(seq: int, subject: bytes, hdr: bytes, data: bytes, ts: int) -> bytes:
    return b"".join(
        (MESSAGE_HEAD.pack(seq, ts, len(subject), len(hdr), len(data)), subject, hdr, data)
    )


def decode_message(body: memoryview) -> ArchivedMessage:
    size = MESSAGE_HEAD.size
    if len(body) < size:
        raise MalformedArchive("message record shorter than its fixed fields")
    seq, ts, slen, hlen, dlen = MESSAGE_HEAD.unpack_from(body)
    if size + slen + hlen + dlen != len(body):
        raise MalformedArchive(f"message {seq}: field lengths do not add up to the record")
    a = size + slen
    b = a + hlen
    try:
        subject = str(body[size:a], "utf-8")
    except UnicodeDecodeError:
        raise MalformedArchive(f"message {seq}: subject is not UTF-8") from None
    return ArchivedMessage(seq, subject, bytes(body[a:b]), bytes(body[b:]), ts)


def decode_json(body: memoryview, kind: type[Any], what: str) -> Any:
    try:
        return msgspec.convert(orjson.loads(bytes(body)), kind)
    except (orjson.JSONDecodeError, msgspec.ValidationError) as exc:
        raise MalformedArchive(f"{what} record is not valid: {exc}") from None
