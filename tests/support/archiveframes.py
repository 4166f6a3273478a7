"""A Headwater archive's frames, walked independently of the reader under test, and a one-byte
flip: what the damaged-archive tests (verify, restore --salvage) build their cases from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headwater.archive.format import (
    FILE_HEADER,
    FRAME_HEADER,
    RECORD_HEAD,
    RECORD_SUM,
    RecordType,
    decompress,
    unpack_file_header,
)
from headwater.archive.records import decode_message
from headwater.verify.backupdir import ARCHIVE_FILE


@dataclass
class Frame:
    start: int
    end: int  # inclusive
    first_seq: int  # 0: no message in it
    last_seq: int
    messages: int


def frames(backup: Path) -> list[Frame]:
    """The frames of ``backup``'s archive with the sequences each holds."""
    data = (backup / ARCHIVE_FILE).read_bytes()
    _major, _minor, compression = unpack_file_header(data[: FILE_HEADER.size])
    out: list[Frame] = []
    off = FILE_HEADER.size
    while off < len(data):
        stored_len, raw_len, _digest = FRAME_HEADER.unpack_from(data, off)
        body = off + FRAME_HEADER.size
        raw = decompress(data[body : body + stored_len], raw_len, compression)
        seqs: list[int] = []
        pos = 0
        while pos < len(raw):
            kind, blen = RECORD_HEAD.unpack_from(raw, pos)
            if kind == RecordType.MESSAGE:
                seqs.append(decode_message(memoryview(raw)[pos + RECORD_HEAD.size :][:blen]).seq)
            pos += RECORD_HEAD.size + blen + RECORD_SUM.size
        end = body + stored_len - 1
        out.append(Frame(off, end, seqs[0] if seqs else 0, seqs[-1] if seqs else 0, len(seqs)))
        off = end + 1
    return out


def flip(backup: Path, at: int) -> None:
    """Invert one byte of ``backup``'s archive."""
    path = backup / ARCHIVE_FILE
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


__all__ = ["FRAME_HEADER", "Frame", "flip", "frames"]
