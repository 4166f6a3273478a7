"""Rebuild a damaged Headwater archive from its readable frames.

:class:`~headwater.archive.ArchiveReader` in salvage mode skips a frame that fails its checksum
(or does not decompress) and records it. :func:`salvage_archive` copies every record it still
reads into a new, complete archive (its own END record, counting what it holds), which a server
restores like any other, and says exactly what was lost: the damaged frames, their byte ranges,
the sequence ranges they held and how many messages that was.

The stream record is always the first record of frame 0: when that frame is lost, the caller's
``fallback`` stream record (built from ``backup.json``) takes its place. Consumer records lost
with a frame are simply absent. Only Headwater's format can be salvaged: a nats-server archive's
entries span S2 chunks, so nothing past a bad chunk can be found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from headwater.archive.damage import DamagedFrame
from headwater.archive.detect import ArchiveFormat, archive_format
from headwater.archive.format import MalformedArchive
from headwater.archive.reader import ArchiveReader
from headwater.archive.records import ArchivedConsumer, ArchivedMessage, ArchivedStream
from headwater.archive.writer import ArchiveWriter

__all__ = ["SalvageResult", "salvage_archive"]

_SNIFF = 10


@dataclass
class SalvageResult:
    """What a salvage pass kept and what it lost."""

    damaged: list[DamagedFrame] = field(default_factory=list)
    lost_sequences: list[tuple[int, int]] = field(default_factory=list)
    """Inclusive sequence ranges the damaged frames held (merged, ascending). Sequences in
    them that were already deleted in the stream cannot be told apart from lost ones."""
    lost_messages: int = 0
    """Messages lost: the END record's count (the stream's message count when the END record
    was lost too) minus the messages read."""
    restored_messages: int = 0
    consumers: int = 0
    stream_record_lost: bool = False

    def ranges_text(self) -> str:
        """``"1-5,9-12"``: the lost sequence ranges, as the stream's metadata mark holds them."""
        return ",".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in self.lost_sequences)

    def to_dict(self) -> dict[str, Any]:
        return {
            "damaged": [d.to_dict() for d in self.damaged],
            "lost_sequences": [list(r) for r in self.lost_sequences],
            "lost_messages": self.lost_messages,
            "restored_messages": self.restored_messages,
            "consumers": self.consumers,
            "stream_record_lost": self.stream_record_lost,
        }


def salvage_archive(
    source: BinaryIO, sink: Callable[[bytes], object], fallback: ArchivedStream
) -> SalvageResult:
    """Copy every readable record of the Headwater archive ``source`` into a new archive written
    to ``sink``; what was lost. ``fallback`` is the stream record to use when frame 0 (which
    holds it) is damaged.

    Damage past which the next frame cannot be found (an implausible frame length, a truncated
    file, records out of order) still raises :class:`~headwater.archive.ArchiveError`, as does
    an archive in another format."""
    head = source.read(_SNIFF)
    source.seek(-len(head), 1)
    if archive_format(head) is not ArchiveFormat.HEADWATER:
        raise MalformedArchive("salvage reads only Headwater archives (stream.hwarc)")
    reader = ArchiveReader(source, salvage=True)
    writer = ArchiveWriter(sink, compression=reader.compression)
    result = SalvageResult()
    stream: ArchivedStream | None = None
    for record in reader:
        kind = type(record)
        if kind is ArchivedStream:
            stream = record
            writer.write_stream(record)
            continue
        if stream is None and kind in (ArchivedMessage, ArchivedConsumer):
            # Frame 0 was lost with the stream record: backup.json's stands in for it.
            stream = fallback
            result.stream_record_lost = True
            writer.write_stream(fallback)
        if kind is ArchivedMessage:
            msg: ArchivedMessage = record  # type: ignore[assignment]
            writer.write_message(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts)
            result.restored_messages += 1
        elif kind is ArchivedConsumer:
            writer.write_consumer(record)  # type: ignore[arg-type]
            result.consumers += 1
    if stream is None:  # nothing readable at all: an empty stream with backup.json's config
        stream = fallback
        result.stream_record_lost = True
        writer.write_stream(fallback)
    writer.close()
    result.damaged = list(reader.damaged)
    state = stream.state
    result.lost_sequences = _lost_ranges(
        reader.damaged, int(state.get("first_seq", 1) or 1), int(state.get("last_seq", 0))
    )
    expected = reader.summary.messages if reader.summary else int(state.get("messages", 0))
    result.lost_messages = max(expected - result.restored_messages, 0) if reader.damaged else 0
    return result


def _lost_ranges(damaged: list[DamagedFrame], first: int, last: int) -> list[tuple[int, int]]:
    """The sequence range each damaged frame held: between the messages read on either side
    of it (the stream's first and last sequence at the archive's ends)."""
    ranges: list[tuple[int, int]] = []
    for damage in damaged:
        lo = damage.after_seq + 1 if damage.after_seq else first
        hi = damage.next_seq - 1 if damage.next_seq is not None else last
        if hi < lo:
            continue  # the frame held no message (only the stream or consumer records)
        if ranges and lo <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(hi, ranges[-1][1]))
        else:
            ranges.append((lo, hi))
    return ranges
