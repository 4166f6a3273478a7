"""Where an archive read in salvage mode was damaged, and what the damage cost.

A Headwater archive checks each frame (about 1 MiB) as a whole, so one flipped byte makes
the whole frame unreadable, but no more: the frame header says where the next frame starts.
:class:`~headwater.archive.ArchiveReader` with ``salvage=True`` records such a frame here and
reads on, so a verifier can say which byte range and which sequences were lost instead of
stopping at the first fault.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["DamagedFrame"]


@dataclass
class DamagedFrame:
    """One frame (or the rest of one) whose records could not be read."""

    frame: int
    """The frame's index, 0 for the first after the file header."""
    first_byte: int
    """File offset of the frame's header."""
    last_byte: int
    """File offset of the frame's last stored byte (inclusive)."""
    reason: str
    """Why its records were not read: ``checksum mismatch``, ``does not decompress: ...``,
    or a record inside it that failed its own checksum."""
    after_seq: int = 0
    """The last message sequence read before it; 0 when none was."""
    next_seq: int | None = None
    """The first message sequence read after it; None when none was (it held the end)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
