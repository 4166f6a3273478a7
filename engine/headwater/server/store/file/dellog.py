"""The delete log: removals recorded without rewriting blocks.

``msgs/deletes.log`` is a 16-byte header (magic ``HWDEL1\\0\\0``, u64 generation) followed by
fixed 32-byte entries::

    0  1  kind   1 = DEL (a..b removed), 2 = FLOOR (first = a, last >= b, last_ts = c),
                 3 = MARK (replica mode: this rewrite is the state at the checkpoint whose
                 last sequence is a, delete log generation b and length c; changes nothing)
    1  3  (zero)
    4  4  crc32 of the entry with this field zeroed
    8  8  a
   16  8  b
   24  8  c

Replaying the log over the records found in the blocks gives the live set; every entry is
idempotent, so the whole log may be replayed over an index snapshot. Consecutive removals (the
usual discard-old pattern) coalesce into one growing DEL range, and buffered entries reach the
file with the blocks' group commit. A torn last entry (bad CRC or short) ends the replay and is
truncated. ``rewrite`` compacts the log to one FLOOR plus the ranges still dead, atomically;
in replica mode it ends with a MARK naming the checkpoint it was taken at, which is how
``checkpoint.cut_back`` finds its place in a rewritten log.

The file keeps some disk space reserved past its end (zeros, which the replay treats as the
end of the log), so a removal or a purge can still be recorded on a full disk; that is how a
purge frees space there.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable, Iterator

from headwater.server.store.file.fileio import FileIO

LOG_MAGIC = b"HWDEL1\x00\x00"
LOG_HEADER = struct.Struct("<8sQ")
ENTRY = struct.Struct("<B3xIqqq")
DEL = 1
FLOOR = 2
MARK = 3
LOG_NAME = "deletes.log"
RESERVE = 16 * 1024
"""Bytes reserved past the log's end (512 entries)."""
LOW_WATER = 4 * 1024
"""Reserve more once less than this is left."""


def _entry(kind: int, a: int, b: int, c: int) -> bytes:
    crc = zlib.crc32(ENTRY.pack(kind, 0, a, b, c))
    return ENTRY.pack(kind, crc, a, b, c)


def parse_log(content: bytes) -> tuple[int, list[tuple[int, int, int, int]], int]:
    """``(generation, entries, valid_length)``; entries stop at the first torn one."""
    if len(content) < LOG_HEADER.size:
        return 0, [], 0
    magic, generation = LOG_HEADER.unpack_from(content, 0)
    if magic != LOG_MAGIC:
        return 0, [], 0
    entries = []
    off = LOG_HEADER.size
    while off + ENTRY.size <= len(content):
        kind, crc, a, b, c = ENTRY.unpack_from(content, off)
        if kind not in (DEL, FLOOR, MARK) or zlib.crc32(ENTRY.pack(kind, 0, a, b, c)) != crc:
            break
        if kind != MARK:
            entries.append((kind, a, b, c))
        off += ENTRY.size
    return generation, entries, off


def find_mark(content: bytes, last_seq: int, generation: int, length: int) -> int | None:
    """End offset of the MARK entry naming these checkpoint positions, if the log has one."""
    want = _entry(MARK, last_seq, generation, length)
    off = LOG_HEADER.size
    while off + ENTRY.size <= len(content):
        entry = content[off : off + ENTRY.size]
        if entry == want:
            return off + ENTRY.size
        kind, crc, a, b, c = ENTRY.unpack(entry)
        if kind not in (DEL, FLOOR, MARK) or zlib.crc32(ENTRY.pack(kind, 0, a, b, c)) != crc:
            return None
        off += ENTRY.size
    return None


class DeleteLog:
    """Append side of the delete log (replay lives in ``recovery``)."""

    def __init__(self, io: FileIO, directory: str) -> None:
        self._io = io
        self.path = os.path.join(directory, LOG_NAME)
        self.fd = -1
        self.generation = 0
        self.size = 0
        """Bytes in the file (flushed)."""
        self.alloc = 0
        """Bytes of the file with disk space reserved (see the module docstring)."""
        self.entries = 0
        self.unsynced = False
        """Bytes reached the file since the last fsync was prepared."""
        self._buf = bytearray()
        self._run: tuple[int, int] | None = None

    def open(self, generation: int, valid_length: int) -> None:
        """Continue the existing log (truncated to ``valid_length``) or start a new one."""
        self.fd = self._io.open_rw(self.path)
        if valid_length < LOG_HEADER.size:
            self.generation = generation
            self._io.pwrite(self.fd, LOG_HEADER.pack(LOG_MAGIC, generation), 0)
            self._io.truncate(self.path, LOG_HEADER.size)
            self.size = LOG_HEADER.size
            self.entries = 0
        else:
            self.generation = generation
            self._io.truncate(self.path, valid_length)
            self.size = valid_length
            self.entries = (valid_length - LOG_HEADER.size) // ENTRY.size
        self.alloc = self.size
        self._reserve(0)

    def _reserve(self, pending: int) -> None:
        """Keep ``RESERVE`` bytes reserved ahead; best effort (a full disk is not an error
        until the reserve is used up, and even then the write may still succeed)."""
        end = self.size + pending
        if self.alloc - end >= LOW_WATER:
            return
        try:
            self._io.allocate(self.fd, self.alloc, end + RESERVE - self.alloc)
        except OSError:
            return
        self.alloc = end + RESERVE

    @property
    def dirty(self) -> bool:
        return bool(self._buf) or self._run is not None

    def delete(self, seq: int) -> None:
        run = self._run
        if run is not None and seq == run[1] + 1:
            self._run = (run[0], seq)
            return
        if run is not None:
            self._buf += _entry(DEL, run[0], run[1], 0)
            self.entries += 1
        self._run = (seq, seq)

    def floor(self, first: int, last: int, last_ts: int) -> None:
        self._close_run()
        self._buf += _entry(FLOOR, first, last, last_ts)
        self.entries += 1

    def _close_run(self) -> None:
        if self._run is not None:
            self._buf += _entry(DEL, self._run[0], self._run[1], 0)
            self.entries += 1
            self._run = None

    def flush(self) -> None:
        self._close_run()
        if self._buf:
            self._reserve(len(self._buf))
            self._io.pwrite(self.fd, self._buf, self.size)
            self.size += len(self._buf)
            self._buf = bytearray()
            self.unsynced = True

    def rewrite(
        self,
        first: int,
        last: int,
        last_ts: int,
        dead: Iterable[tuple[int, int]],
        mark: tuple[int, int, int] | None = None,
    ) -> None:
        """Replace the log with FLOOR + ``dead`` ranges under a new generation (atomic);
        ``mark``: (last_seq, generation, length) of the checkpoint this state is (replica)."""
        self._run = None
        self._buf = bytearray()
        parts = [
            LOG_HEADER.pack(LOG_MAGIC, self.generation + 1),
            _entry(FLOOR, first, last, last_ts),
        ]
        parts.extend(_entry(DEL, a, b, 0) for a, b in dead)
        if mark is not None:
            parts.append(_entry(MARK, *mark))
        content = b"".join(parts)
        if self.fd >= 0:
            self._io.close(self.fd)
        self._io.write_atomic(self.path, content)
        self.generation += 1
        self.fd = self._io.open_rw(self.path)
        self.size = self.alloc = len(content)
        self.entries = len(parts) - 1

    def close(self) -> None:
        if self.fd >= 0:
            self._io.close(self.fd)
            self.fd = -1


def dead_ranges(live: bytearray, base: int, lo_pos: int, hi_pos: int) -> Iterator[tuple[int, int]]:
    """Ranges ``(a, b)`` of dead sequences within positions [lo_pos, hi_pos)."""
    j = live.find(0, lo_pos, hi_pos)
    while j >= 0:
        k = live.find(1, j, hi_pos)
        end = hi_pos if k < 0 else k
        yield base + j, base + end - 1
        if k < 0:
            return
        j = live.find(0, k, hi_pos)
