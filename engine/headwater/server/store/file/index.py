"""The index snapshot: ``msgs/index.snap``, written atomically on clean close.

It is the ``SeqIndex`` arrays dumped as raw machine bytes (``array.tobytes``) plus a JSON
header, so loading 2M messages' index is a few ``frombytes`` calls rather than a scan of every
record. Layout::

    8 bytes  magic b"HWIDX1\\0\\0"
    4 bytes  header length H (u32 LE)
    H bytes  JSON header: counters, blocks (with each file's size and CRC-32), subject names
    then     for each array named in the header: u64 length + raw bytes
    4 bytes  CRC-32 of everything before

The snapshot is only trusted if every block it lists still has the recorded CRC over the
recorded length (``recovery`` checks; a block may have grown since, the tail is then scanned),
and the delete log is always replayed over it (its entries are idempotent). Anything else
(missing block, rewritten block, bad CRC) falls back to a full scan.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from typing import Any

import msgspec

SNAP_MAGIC = b"HWIDX1\x00\x00"
SNAP_NAME = "index.snap"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

ARRAY_TYPES = {
    "sid": "I",
    "ts": "q",
    "size": "I",
    "loc": "I",
    "subj_count": "Q",
    "subj_first": "Q",
    "subj_last": "Q",
    "ttl_seq": "q",
    "ttl_exp": "q",
    "never": "q",
}
"""Typecodes of the arrays a snapshot holds (``live`` and ``subj_flags`` are bytearrays)."""

_BYTEARRAYS = ("live", "subj_flags")


class SnapshotBlock(msgspec.Struct, array_like=True):
    index: int
    fields: tuple[int, ...]
    """``Block.fields()``: first, last, flags, disk_size, raw_size, crc, live, live_bytes,
    total_bytes."""


class SnapshotHeader(msgspec.Struct):
    byteorder: str
    base: int
    first: int
    last: int
    msgs: int
    bytes: int
    last_ts: int
    blocks: list[SnapshotBlock]
    names: list[str | None]
    free: list[int]
    arrays: list[str]
    checkpoint: str | None = None
    """Replica mode: hex ``Positions`` of the durable checkpoint this snapshot is the state
    of (``checkpoint.cut_back`` deletes a snapshot that does not name its checkpoint)."""


def encode_snapshot(header: SnapshotHeader, arrays: dict[str, Any]) -> bytes:
    head = msgspec.json.encode(header)
    parts = [SNAP_MAGIC, _U32.pack(len(head)), head]
    for name in header.arrays:
        raw = bytes(arrays[name]) if name in _BYTEARRAYS else arrays[name].tobytes()
        parts.append(_U64.pack(len(raw)))
        parts.append(raw)
    body = b"".join(parts)
    return body + _U32.pack(zlib.crc32(body))


def decode_snapshot(content: bytes) -> tuple[SnapshotHeader, dict[str, Any]] | None:
    """The header and arrays, or None if the file is damaged or from another machine."""
    if len(content) < 16 or content[:8] != SNAP_MAGIC:
        return None
    if zlib.crc32(memoryview(content)[:-4]) != _U32.unpack_from(content, len(content) - 4)[0]:
        return None
    (hlen,) = _U32.unpack_from(content, 8)
    try:
        header = msgspec.json.decode(content[12 : 12 + hlen], type=SnapshotHeader)
    except msgspec.DecodeError:
        return None
    if header.byteorder != sys.byteorder:
        return None
    arrays: dict[str, Any] = {}
    off = 12 + hlen
    view = memoryview(content)
    for name in header.arrays:
        (n,) = _U64.unpack_from(content, off)
        off += 8
        chunk = view[off : off + n]
        off += n
        if name in _BYTEARRAYS:
            arrays[name] = bytearray(chunk)
        else:
            arr = array(ARRAY_TYPES[name])
            arr.frombytes(chunk)
            arrays[name] = arr
    return header, arrays
