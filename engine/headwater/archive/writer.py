"""``ArchiveWriter``: records in, archive bytes out, one frame at a time.

The writer never holds more than one frame (``frame_size`` bytes of records, 1 MiB by
default) plus the record being added, whatever the stream's size: each full frame is
compressed and handed to ``sink`` (a file's ``write``, or the snapshot sender's buffer).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import orjson

from headwater.archive.format import (
    FRAME_HEADER,
    RECORD_HEAD,
    RECORD_SUM,
    Compression,
    RecordType,
    checksum,
    compress,
    pack_file_header,
)
from headwater.archive.records import (
    ArchivedConsumer,
    ArchivedStream,
    ArchiveSummary,
    encode_message_body,
)

__all__ = ["DEFAULT_FRAME_SIZE", "ArchiveWriter"]

DEFAULT_FRAME_SIZE = 1 << 20

_STREAM, _CONSUMERS, _MESSAGES, _CLOSED = range(4)


class ArchiveWriter:
    """Write one archive: ``write_stream``, then ``write_consumer``s, then ``write_message``s
    in ascending sequence order, then ``close``. Out-of-order calls raise ``ValueError``."""

    def __init__(
        self,
        sink: Callable[[bytes], object],
        compression: Compression = Compression.ZSTD,
        frame_size: int = DEFAULT_FRAME_SIZE,
    ) -> None:
        self._sink = sink
        self._compression = compression
        self._frame_size = frame_size
        self._buf = bytearray()
        self._phase = _STREAM
        self._messages = 0
        self._consumers = 0
        self._last_seq = 0
        self._payload = 0
        self.bytes_written = 0
        self._emit(pack_file_header(compression))

    # ------------------------------------------------------------------ records

    def write_stream(self, stream: ArchivedStream) -> None:
        if self._phase != _STREAM:
            raise ValueError("the stream record comes first, once")
        self._record(RecordType.STREAM, _json(stream))
        self._phase = _CONSUMERS

    def write_consumer(self, consumer: ArchivedConsumer) -> None:
        if self._phase != _CONSUMERS:
            raise ValueError("consumer records come after the stream record, before messages")
        self._record(RecordType.CONSUMER, _json(consumer))
        self._consumers += 1

    def write_message(self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int) -> None:
        if self._phase == _CONSUMERS:
            self._phase = _MESSAGES
        if self._phase != _MESSAGES:
            raise ValueError("message records come after the stream and consumer records")
        if seq <= self._last_seq:
            raise ValueError(f"message {seq} after {self._last_seq}: sequences must ascend")
        body = encode_message_body(seq, subject.encode(), hdr or b"", data, ts)
        record = RECORD_HEAD.pack(RecordType.MESSAGE, len(body)) + body
        buf = self._buf
        buf += record
        buf += RECORD_SUM.pack(checksum(record))
        self._messages += 1
        self._last_seq = seq
        self._payload += len(hdr) + len(data)
        if len(buf) >= self._frame_size:
            self._flush_frame()

    def close(self) -> ArchiveSummary:
        """Write the END record and the last frame; the archive is complete."""
        if self._phase == _STREAM:
            raise ValueError("an archive needs its stream record")
        if self._phase == _CLOSED:
            raise ValueError("archive already closed")
        summary = ArchiveSummary(self._messages, self._consumers, self._last_seq, self._payload)
        self._record(RecordType.END, _json(summary))
        self._flush_frame()
        self._phase = _CLOSED
        return summary

    # ------------------------------------------------------------------ framing

    def _record(self, kind: RecordType, body: bytes) -> None:
        record = RECORD_HEAD.pack(kind, len(body)) + body
        self._buf += record
        self._buf += RECORD_SUM.pack(checksum(record))
        if len(self._buf) >= self._frame_size:
            self._flush_frame()

    def _flush_frame(self) -> None:
        if not self._buf:
            return
        raw = bytes(self._buf)
        self._buf.clear()
        stored = compress(raw, self._compression)
        self._emit(FRAME_HEADER.pack(len(stored), len(raw), checksum(stored)))
        self._emit(stored)

    def _emit(self, data: bytes) -> None:
        self.bytes_written += len(data)
        self._sink(data)


def _json(record: object) -> bytes:
    return orjson.dumps(msgspec.to_builtins(record))
