"""The archive format: round trips, and every kind of damage the reader must detect."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from headwater.archive import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveReader,
    ArchiveSummary,
    ArchiveWriter,
    ChecksumMismatch,
    Compression,
    MalformedArchive,
    TruncatedArchive,
    UnsupportedVersion,
    scan_archive,
)
from headwater.archive.format import FILE_HEADER, FRAME_HEADER, checksum

STREAM = ArchivedStream(
    name="ORDERS",
    created_ns=1_700_000_000_000_000_000,
    config={"name": "ORDERS", "subjects": ["orders.>"], "storage": "file"},
    state={"messages": 4, "first_seq": 1, "last_seq": 9, "num_deleted": 5},
)
CONSUMER = ArchivedConsumer(
    name="NEW",
    created_ns=1_700_000_000_000_000_001,
    config={"durable_name": "NEW", "ack_policy": "explicit"},
    state={
        "delivered": {"consumer_seq": 3, "stream_seq": 5},
        "ack_floor": {"consumer_seq": 1, "stream_seq": 1},
        "pending": [[5, 3, 1_700_000_000_000_000_100]],
        "redelivered": [],
    },
)
MESSAGES = [
    ArchivedMessage(1, "orders.new", b"", b"first", 1_700_000_000_000_000_010),
    ArchivedMessage(2, "orders.new", b"NATS/1.0\r\nA: 1\r\n\r\n", b"", 1_700_000_000_000_000_020),
    ArchivedMessage(5, "orders.ünï", b"", bytes(range(256)), 1_700_000_000_000_000_020),
    ArchivedMessage(9, "orders.old", b"NATS/1.0\r\nB: 2\r\n\r\n", b"x" * 5000, 17 * 10**17 + 1),
]


def write(
    messages: list[ArchivedMessage] = MESSAGES,
    compression: Compression = Compression.ZSTD,
    frame_size: int = 1 << 20,
) -> bytes:
    out = io.BytesIO()
    writer = ArchiveWriter(out.write, compression, frame_size)
    writer.write_stream(STREAM)
    writer.write_consumer(CONSUMER)
    for m in messages:
        writer.write_message(m.seq, m.subject, m.hdr, m.data, m.ts)
    writer.close()
    return out.getvalue()


def read(raw: bytes) -> list[object]:
    return list(ArchiveReader(io.BytesIO(raw)))


@pytest.mark.parametrize("compression", [Compression.ZSTD, Compression.NONE])
@pytest.mark.parametrize("frame_size", [1 << 20, 64])
def test_round_trip(compression: Compression, frame_size: int) -> None:
    records = read(write(compression=compression, frame_size=frame_size))
    assert records[0] == STREAM
    assert records[1] == CONSUMER
    assert records[2:-1] == MESSAGES
    payload = sum(len(m.hdr) + len(m.data) for m in MESSAGES)
    assert records[-1] == ArchiveSummary(len(MESSAGES), 1, 9, payload)


def test_compression_shrinks_repetitive_payloads() -> None:
    many = [ArchivedMessage(i, "s", b"", b"abc" * 300, i) for i in range(1, 200)]
    assert len(write(many)) * 10 < len(write(many, Compression.NONE))


def test_scan_counts_gaps(tmp_path: Path) -> None:
    path = tmp_path / "a.hwarc"
    path.write_bytes(write())
    result = scan_archive(path)
    assert result.stream == STREAM
    assert result.consumers == [CONSUMER]
    assert result.first_seq == 1
    assert result.deleted_gaps == 5  # 3, 4, 6, 7, 8


def test_reader_holds_one_frame_at_a_time() -> None:
    many = [ArchivedMessage(i, "s", b"", bytes(1000), i) for i in range(1, 3001)]
    raw = write(many, Compression.NONE, frame_size=64 * 1024)
    source = io.BytesIO(raw)
    records = iter(ArchiveReader(source))
    next(records)  # the stream record: only the first frame has been read
    assert source.tell() < 70 * 1024 < len(raw)
    assert sum(1 for r in records if type(r) is ArchivedMessage) == 3000


# --------------------------------------------------------------------------- damage


def _frames(raw: bytes) -> list[tuple[int, int, int]]:
    """(offset of frame header, stored_len, raw_len) of every frame."""
    out = []
    off = FILE_HEADER.size
    while off < len(raw):
        stored, rawlen, _ = FRAME_HEADER.unpack_from(raw, off)
        out.append((off, stored, rawlen))
        off += FRAME_HEADER.size + stored
    return out


def _reframe(raw: bytes, index: int, body: bytes) -> bytes:
    """Replace an uncompressed frame's body, with a valid frame header for it."""
    off, stored, _ = _frames(raw)[index]
    head = FRAME_HEADER.pack(len(body), len(body), checksum(body))
    end = off + FRAME_HEADER.size + stored
    return raw[:off] + head + body + raw[end:]


def test_flipped_byte_is_detected_anywhere() -> None:
    raw = write()
    for pos in range(0, len(raw), max(len(raw) // 60, 1)):
        damaged = bytearray(raw)
        damaged[pos] ^= 0x40
        with pytest.raises((ChecksumMismatch, MalformedArchive, TruncatedArchive)):
            read(bytes(damaged))


def test_record_checksum_mismatch_even_with_a_valid_frame() -> None:
    raw = write(compression=Compression.NONE)
    off, stored, _ = _frames(raw)[0]
    body = bytearray(raw[off + FRAME_HEADER.size : off + FRAME_HEADER.size + stored])
    body[body.index(b"first")] ^= 0x01  # a payload byte of message 1
    with pytest.raises(ChecksumMismatch, match="record checksum"):
        read(_reframe(raw, 0, bytes(body)))


def test_truncated_archive_is_detected() -> None:
    raw = write(frame_size=64)
    frames = _frames(raw)
    assert len(frames) > 3
    # Cut exactly at a frame boundary: every frame present is valid, the END is missing.
    with pytest.raises(TruncatedArchive, match="without its END"):
        read(raw[: frames[-1][0]])
    for cut in (len(raw) - 1, frames[2][0] + 5, frames[2][0] + FRAME_HEADER.size + 3, 10):
        with pytest.raises(TruncatedArchive):
            read(raw[:cut])


def _records(frame: bytes) -> list[bytes]:
    out, off = [], 0
    while off < len(frame):
        (blen,) = struct.unpack_from("<I", frame, off + 1)
        out.append(frame[off : off + 5 + blen + 8])
        off += 5 + blen + 8
    return out


def test_dropped_record_is_detected() -> None:
    raw = write(compression=Compression.NONE)
    off, stored, _ = _frames(raw)[0]
    records = _records(raw[off + FRAME_HEADER.size : off + FRAME_HEADER.size + stored])
    del records[3]  # message 2: still ascending, but the END record counts 4 messages
    with pytest.raises(MalformedArchive, match="END record says"):
        read(_reframe(raw, 0, b"".join(records)))


def test_reordered_records_are_detected() -> None:
    raw = write(compression=Compression.NONE)
    off, stored, _ = _frames(raw)[0]
    records = _records(raw[off + FRAME_HEADER.size : off + FRAME_HEADER.size + stored])
    records[2], records[3] = records[3], records[2]  # messages 1 and 2
    with pytest.raises(MalformedArchive, match="sequences must ascend"):
        read(_reframe(raw, 0, b"".join(records)))
    records = _records(raw[off + FRAME_HEADER.size : off + FRAME_HEADER.size + stored])
    records[0], records[1] = records[1], records[0]  # consumer before the stream
    with pytest.raises(MalformedArchive, match="consumer record out of place"):
        read(_reframe(raw, 0, b"".join(records)))


def test_unknown_optional_records_are_skipped_others_refused() -> None:
    raw = write(compression=Compression.NONE)
    off, stored, _ = _frames(raw)[0]
    records = _records(raw[off + FRAME_HEADER.size : off + FRAME_HEADER.size + stored])
    for kind, ok in ((0x40, True), (0x20, False)):
        extra = struct.pack("<BI", kind, 3) + b"new"
        extra += struct.pack("<Q", checksum(extra))
        damaged = _reframe(raw, 0, b"".join([*records[:2], extra, *records[2:]]))
        if ok:
            assert read(damaged)[2:-1] == MESSAGES
        else:
            with pytest.raises(MalformedArchive, match="unknown record type"):
                read(damaged)


def test_header_checks() -> None:
    raw = write()
    with pytest.raises(MalformedArchive, match="bad magic"):
        read(b"NATSARC1" + raw[8:])
    newer = bytearray(raw[:16])
    newer[8] = 2  # major version 2
    head = bytes(newer) + struct.pack("<Q", checksum(bytes(newer)))
    with pytest.raises(UnsupportedVersion):
        read(head + raw[24:])
    minor = bytearray(raw[:16])
    minor[10] = 7  # a later minor of the same major is readable
    head = bytes(minor) + struct.pack("<Q", checksum(bytes(minor)))
    assert read(head + raw[24:])[2:-1] == MESSAGES
    with pytest.raises(MalformedArchive, match="too short"):
        read(b"")
    with pytest.raises(TruncatedArchive):
        read(raw[:12])


def test_trailing_bytes_after_end_are_refused() -> None:
    raw = write()
    with pytest.raises((MalformedArchive, TruncatedArchive)):
        read(raw + raw[24:40])


def test_writer_enforces_order() -> None:
    writer = ArchiveWriter(io.BytesIO().write)
    with pytest.raises(ValueError):
        writer.write_message(1, "s", b"", b"", 1)
    writer.write_stream(STREAM)
    writer.write_message(3, "s", b"", b"", 1)
    with pytest.raises(ValueError):
        writer.write_message(3, "s", b"", b"", 1)
    with pytest.raises(ValueError):
        writer.write_consumer(CONSUMER)
    writer.close()
    with pytest.raises(ValueError):
        writer.close()
