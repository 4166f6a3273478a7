"""``CheckpointFile``: where a replica's owner keeps its durable checkpoints.

An append-only file: the magic ``HWCKPT1\\0``, then records of::

    0  4  body length n (u32 LE)
    4  4  crc32 of the body
    8  n  body: u16 length of the positions, ``Positions.to_bytes()``, then the owner's
          opaque bytes (its applied index, epoch, ...)

``append`` fsyncs before it returns, so a checkpoint counts once ``append`` returned. The last
valid record is the checkpoint: a torn or damaged tail (a crash during an append) is ignored,
and cut off when the file is opened again. Past ``max_size`` the file is replaced atomically
by one holding only the newest record. Blocking calls: run them in a thread.
"""

from __future__ import annotations

import os
import struct
import zlib

from headwater.server.store.file.checkpoint import Positions
from headwater.server.store.file.fileio import FileIO, default_io

MAGIC = b"HWCKPT1\x00"
_HEAD = struct.Struct("<II")
_PLEN = struct.Struct("<H")
MAX_RECORD = 1 << 20
"""A record's body longer than this is damage, not a checkpoint."""


def _record(positions: Positions, extra: bytes) -> bytes:
    raw = positions.to_bytes()
    body = _PLEN.pack(len(raw)) + raw + extra
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


class CheckpointFile:
    def __init__(self, path: str, io: FileIO | None = None, max_size: int = 1 << 20) -> None:
        self.path = path
        self._io = io or default_io()
        self._max_size = max_size
        self._latest: tuple[Positions, bytes] | None = None
        self._fd = -1
        if os.path.exists(path):
            content = self._io.read_file(path)
            if content[: len(MAGIC)] == MAGIC:
                self._size = self._parse(content)
                if self._size < len(content):
                    self._io.truncate(path, self._size)  # the torn tail of an append
                return
        # New (or so damaged that nothing in it counts): start an empty file, durably.
        self._io.write_atomic(path, MAGIC)
        self._size = len(MAGIC)

    def _parse(self, content: bytes) -> int:
        """Remember the last valid record; returns where the valid records end."""
        off = len(MAGIC)
        while off + _HEAD.size <= len(content):
            n, crc = _HEAD.unpack_from(content, off)
            body = content[off + _HEAD.size : off + _HEAD.size + n]
            if n > MAX_RECORD or len(body) != n or zlib.crc32(body) != crc:
                break
            (plen,) = _PLEN.unpack_from(body, 0)
            try:
                positions = Positions.from_bytes(body[_PLEN.size : _PLEN.size + plen])
            except ValueError:
                break
            self._latest = (positions, body[_PLEN.size + plen :])
            off += _HEAD.size + n
        return off

    def latest(self) -> tuple[Positions, bytes] | None:
        """The newest durable checkpoint: its positions and the owner's bytes."""
        return self._latest

    def append(self, positions: Positions, extra: bytes = b"") -> None:
        """Write one checkpoint and fsync it (blocking)."""
        record = _record(positions, extra)
        if self._size + len(record) > self._max_size:
            if self._fd >= 0:
                self._io.close(self._fd)
                self._fd = -1
            self._io.write_atomic(self.path, MAGIC + record)
            self._size = len(MAGIC) + len(record)
        else:
            if self._fd < 0:
                self._fd = self._io.open_rw(self.path)
            self._io.pwrite(self._fd, record, self._size)
            self._io.fsync(self._fd)
            self._size += len(record)
        self._latest = (positions, extra)

    def close(self) -> None:
        if self._fd >= 0:
            self._io.close(self._fd)
            self._fd = -1
