"""Damaged frames as findings: which bytes, which sequences, how many messages were lost.

The reader (:class:`headwater.archive.ArchiveReader` with ``salvage=True``) skips a frame that
fails its checksum and reads on; a flipped byte costs its whole frame (about 1 MiB), so a
finding names the frame's byte range and the sequences read on either side of it, which
bound the lost messages (their own sequences were in the lost bytes).
"""

from __future__ import annotations

from collections.abc import Sequence

from headwater.archive import DamagedFrame
from headwater.verify.findings import FindingLog, Kind

__all__ = ["damage_detail", "report_damage"]


def damage_detail(damage: DamagedFrame, stream_lost: bool) -> str:
    """One line: where, why, and what it cost. ``stream_lost``: the frame held the stream
    record (frame 0), and the consumer records that followed it."""
    failed = "failed its checksum" if damage.reason == "checksum mismatch" else damage.reason
    where = f"frame {damage.frame} (bytes {damage.first_byte}-{damage.last_byte}) {failed}"
    if damage.next_seq is None:
        messages = (
            f"messages after seq {damage.after_seq} to the end of the archive"
            if damage.after_seq
            else "every message"
        )
    elif damage.after_seq:
        messages = f"messages after seq {damage.after_seq} and before seq {damage.next_seq}"
    else:
        messages = f"messages before seq {damage.next_seq}"
    if stream_lost:
        messages = f"the stream record, the consumer records and {messages}"
    return f"{where}: {messages} are unreadable"


def report_damage(
    log: FindingLog,
    damaged: Sequence[DamagedFrame],
    stream_lost: bool,
    read: int,
    expected: int | None,
) -> None:
    """One ``archive_checksum`` finding per damaged frame, its ``seq`` the first sequence that
    may be lost; the last one also says how many messages are missing in all (``expected``
    less the ``read``), when the END record (or the recorded state) says how many to expect."""
    for index, damage in enumerate(damaged):
        detail = damage_detail(damage, stream_lost and damage.frame == 0)
        if index == len(damaged) - 1 and expected is not None:
            detail += f" ({expected - read} of {expected} messages{' in all' if index else ''})"
        log.add(Kind.ARCHIVE_CHECKSUM, detail, damage.after_seq + 1)
