"""``ArchiveReader``: iterate an archive's records in constant memory, checking everything.

The reader holds one frame at a time. It checks the file header, every frame's and every
record's checksum, the record order (stream, consumers, messages by ascending sequence, END),
the END record's counts against what it read, and that nothing follows the END frame. Any
violation raises an :class:`~headwater.archive.format.ArchiveError` naming the frame and the
record, so a verifier can report where an archive broke.

With ``salvage=True`` a frame that fails its checksum (or does not decompress), or a record
that fails its own inside a good frame, does not end the read: it is recorded in
:attr:`ArchiveReader.damaged` (a :class:`~headwater.archive.damage.DamagedFrame`, with the
sequences read on either side of it) and reading goes on at the next frame, which the frame
header locates. The END record's counts then cannot match and are not compared, and an archive
whose last frame was lost ends without its END record. Structural faults (implausible lengths,
record order, a truncated file) still raise: past them, where the next frame starts is unknown.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from headwater.archive.damage import DamagedFrame
from headwater.archive.format import (
    FILE_HEADER,
    FRAME_HEADER,
    MAX_FRAME,
    OPTIONAL_TYPES,
    RECORD_HEAD,
    RECORD_SUM,
    ArchiveError,
    ChecksumMismatch,
    Compression,
    MalformedArchive,
    RecordType,
    TruncatedArchive,
    checksum,
    decompress,
    unpack_file_header,
)
from headwater.archive.records import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveSummary,
    Record,
    decode_json,
    decode_message,
)

__all__ = ["ArchiveReader", "ScanResult", "read_archive", "scan_archive"]

_SUM = RECORD_SUM.size
_HEAD = RECORD_HEAD.size


class _FrameUnreadable(ArchiveError):
    """A frame whose stored bytes are damaged but whose length is plausible, so the next
    frame can still be found (``str()`` is the reason, without the frame number)."""


class ArchiveReader:
    """Records of the archive ``source`` (a binary file object), checked as they are read.

    ``salvage``: skip damaged frames, recording them in :attr:`damaged`, instead of raising
    :class:`ChecksumMismatch` at the first one (see the module docstring)."""

    def __init__(self, source: BinaryIO, salvage: bool = False) -> None:
        self._src = source
        head = source.read(FILE_HEADER.size)
        self.major, self.minor, self.compression = unpack_file_header(head)
        self.bytes_read = len(head)
        self.summary: ArchiveSummary | None = None
        self.stream: ArchivedStream | None = None
        self.salvage = salvage
        self.damaged: list[DamagedFrame] = []

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def records(self) -> Iterator[Record]:
        phase = 0  # 0: expect stream, 1: consumers or messages, 2: messages, 3: after END
        last_seq = 0
        messages = consumers = payload = 0
        frame_no = 0
        awaiting_next: list[DamagedFrame] = []  # damage whose next_seq is not known yet
        last_damaged = -1
        while True:
            start = self.bytes_read
            try:
                frame = self._next_frame(frame_no)
            except _FrameUnreadable as exc:
                if not self.salvage:
                    raise ChecksumMismatch(f"frame {frame_no}: {exc}") from None
                if phase == 3:
                    raise MalformedArchive(f"frame {frame_no} follows the END record") from None
                damage = DamagedFrame(frame_no, start, self.bytes_read - 1, str(exc), last_seq)
                self.damaged.append(damage)
                awaiting_next.append(damage)
                # The stream record is always in frame 0: lost with it, not missing after it.
                phase = max(phase, 1)
                last_damaged = frame_no
                frame_no += 1
                continue
            if frame is None:
                if phase != 3 and last_damaged == frame_no - 1:
                    return  # the END record was in the damaged last frame: already reported
                if phase != 3:
                    raise TruncatedArchive(
                        f"archive ends after frame {frame_no - 1} without its END record "
                        f"({messages} messages read)"
                    )
                return
            if phase == 3:
                raise MalformedArchive(f"frame {frame_no} follows the END record")
            view = memoryview(frame)
            off = 0
            end_of_frame = len(view)
            while off < end_of_frame:
                where = f"frame {frame_no} offset {off}"
                if phase == 3:
                    raise MalformedArchive(f"{where}: record after the END record")
                if off + _HEAD + _SUM > end_of_frame:
                    raise MalformedArchive(f"{where}: record header runs past the frame")
                kind, blen = RECORD_HEAD.unpack_from(view, off)
                body_end = off + _HEAD + blen
                if body_end + _SUM > end_of_frame:
                    raise MalformedArchive(f"{where}: record runs past the frame")
                (digest,) = RECORD_SUM.unpack_from(view, body_end)
                if digest != checksum(view[off:body_end]):
                    if not self.salvage:
                        raise ChecksumMismatch(f"{where}: record checksum mismatch")
                    # The frame passed its own checksum, so the writer stored a bad record:
                    # its length cannot be trusted, the rest of this frame is lost.
                    damage = DamagedFrame(
                        frame_no,
                        start,
                        self.bytes_read - 1,
                        f"the record at offset {off} failed its checksum",
                        last_seq,
                    )
                    self.damaged.append(damage)
                    awaiting_next.append(damage)
                    phase = max(phase, 1)
                    last_damaged = frame_no
                    break
                body = view[off + _HEAD : body_end]
                off = body_end + _SUM
                if kind == RecordType.MESSAGE:
                    if phase == 0:
                        raise MalformedArchive(f"{where}: message before the stream record")
                    phase = 2
                    msg = decode_message(body)
                    if msg.seq <= last_seq:
                        raise MalformedArchive(
                            f"{where}: message {msg.seq} after {last_seq}: sequences must ascend"
                        )
                    last_seq = msg.seq
                    messages += 1
                    payload += len(msg.hdr) + len(msg.data)
                    if awaiting_next:
                        for damage in awaiting_next:
                            damage.next_seq = last_seq
                        awaiting_next.clear()
                    yield msg
                elif kind == RecordType.STREAM:
                    if phase != 0:
                        raise MalformedArchive(f"{where}: second stream record")
                    phase = 1
                    self.stream = decode_json(body, ArchivedStream, "stream")
                    yield self.stream
                elif kind == RecordType.CONSUMER:
                    if phase != 1:
                        raise MalformedArchive(f"{where}: consumer record out of place")
                    consumers += 1
                    yield decode_json(body, ArchivedConsumer, "consumer")
                elif kind == RecordType.END:
                    if phase == 0:
                        raise MalformedArchive(f"{where}: END before the stream record")
                    summary: ArchiveSummary = decode_json(body, ArchiveSummary, "END")
                    found = ArchiveSummary(messages, consumers, last_seq, payload)
                    # Records lost in damaged frames make the counts differ: expected then.
                    if summary != found and not self.damaged:
                        raise MalformedArchive(
                            f"{where}: END record says {summary}, archive holds {found}"
                        )
                    self.summary = summary
                    phase = 3
                    yield summary
                elif kind in OPTIONAL_TYPES:
                    continue
                else:
                    raise MalformedArchive(f"{where}: unknown record type {kind}")
            frame_no += 1

    def _next_frame(self, frame_no: int) -> bytes | None:
        head = self._src.read(FRAME_HEADER.size)
        if not head:
            return None
        self.bytes_read += len(head)
        if len(head) < FRAME_HEADER.size:
            raise TruncatedArchive(f"archive ends inside the header of frame {frame_no}")
        stored_len, raw_len, digest = FRAME_HEADER.unpack(head)
        if stored_len > MAX_FRAME or raw_len > MAX_FRAME:
            raise MalformedArchive(f"frame {frame_no}: implausible length {stored_len}")
        stored = self._src.read(stored_len)
        self.bytes_read += len(stored)
        if len(stored) < stored_len:
            raise TruncatedArchive(
                f"archive ends inside frame {frame_no} ({len(stored)} of {stored_len} bytes)"
            )
        if digest != checksum(stored):
            raise _FrameUnreadable("checksum mismatch")
        if self.compression is Compression.NONE and raw_len != stored_len:
            raise MalformedArchive(f"frame {frame_no}: lengths differ without compression")
        try:
            return decompress(stored, raw_len, self.compression)
        except ChecksumMismatch as exc:  # zstd rejected bytes that matched the checksum
            raise _FrameUnreadable(str(exc).removeprefix("frame ")) from None


def read_archive(path: str | Path) -> Iterator[Record]:
    """Every record of the archive file at ``path``; the file is closed at the end."""
    with open(path, "rb") as fh:
        yield from ArchiveReader(fh)


class ScanResult:
    """What a full pass over an archive found (messages are counted, not kept)."""

    def __init__(self) -> None:
        self.stream: ArchivedStream | None = None
        self.consumers: list[ArchivedConsumer] = []
        self.summary: ArchiveSummary | None = None
        self.first_seq = 0
        self.deleted_gaps = 0
        """Sequences missing between the first and the last message."""


def scan_archive(path: str | Path) -> ScanResult:
    """Read and check the whole archive at ``path``; raises ``ArchiveError`` on any fault."""
    result = ScanResult()
    prev = 0
    for rec in read_archive(path):
        if type(rec) is ArchivedMessage:
            if prev:
                result.deleted_gaps += rec.seq - prev - 1
            else:
                result.first_seq = rec.seq
            prev = rec.seq
        elif type(rec) is ArchivedConsumer:
            result.consumers.append(rec)
        elif type(rec) is ArchivedStream:
            result.stream = rec
        else:
            result.summary = rec
    return result
