"""Reading S2 streams: the compression nats-server puts around its stream backups.

S2 (github.com/klauspost/compress/s2) extends Snappy. Its stream format is Snappy's framing
format with the stream identifier ``S2sTwO`` and blocks of up to 4 MiB; its block format adds
one element to Snappy's, a *repeat*: a 1-byte-offset copy whose offset is 0 reuses the last
copy offset of the block, with a length read from the table in ``_repeat_length``. Every
data chunk carries a masked CRC-32C of its uncompressed bytes, which is checked here.

No maintained Python package decodes S2 (cramjam and python-snappy stop at Snappy, and a
Snappy decoder rejects the repeat element), so this module rewrites each repeat into the plain
copies it stands for and lets cramjam's Snappy decode the block. Writing needs
no S2 encoder: every Snappy block is a valid S2 block, so :class:`S2Writer` frames blocks that
cramjam's Snappy compresses, and nats-server reads them like its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import BinaryIO

import cramjam
import google_crc32c

from headwater.archive.format import ChecksumMismatch, MalformedArchive, TruncatedArchive

__all__ = ["S2_MAGIC", "S2Reader", "S2Writer", "decode_block", "is_s2_stream", "read_uvarint"]

S2_MAGIC = b"\xff\x06\x00\x00S2sTwO"
"""The stream identifier chunk an S2 stream starts with."""
SNAPPY_MAGIC = b"\xff\x06\x00\x00sNaPpY"
"""A Snappy framed stream, which S2 readers accept too."""

MAX_BLOCK = 4 << 20
"""The largest uncompressed block S2 allows."""
WRITE_BLOCK = 1 << 20
"""The block size S2Writer uses (S2's own default)."""

_COMPRESSED = 0x00
_UNCOMPRESSED = 0x01
_PADDING = 0xFE
_STREAM_ID = 0xFF
_CRC_MASK_DELTA = 0xA282EAD8


def is_s2_stream(head: bytes) -> bool:
    """Whether ``head`` (the first 10 or more bytes of a file) starts an S2 or Snappy
    framed stream."""
    return head[:10] in (S2_MAGIC, SNAPPY_MAGIC)


def _masked_crc(data: bytes | bytearray) -> int:
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


class S2Writer:
    """Bytes in, an S2 stream out to ``sink``, a block (1 MiB) at a time; ``close`` writes
    the last, partial block."""

    def __init__(self, sink: Callable[[bytes], object]) -> None:
        self._sink = sink
        self._buf = bytearray()
        self.bytes_written = len(S2_MAGIC)
        sink(S2_MAGIC)

    def write(self, data: bytes) -> None:
        self._buf += data
        while len(self._buf) >= WRITE_BLOCK:
            self._emit(bytes(self._buf[:WRITE_BLOCK]))
            del self._buf[:WRITE_BLOCK]

    def close(self) -> None:
        if self._buf:
            self._emit(bytes(self._buf))
            self._buf.clear()

    def _emit(self, raw: bytes) -> None:
        crc = _masked_crc(raw).to_bytes(4, "little")
        packed = bytes(cramjam.snappy.compress_raw(raw))
        kind, body = (_COMPRESSED, packed) if len(packed) < len(raw) else (_UNCOMPRESSED, raw)
        chunk = bytes([kind]) + (len(body) + 4).to_bytes(3, "little") + crc + body
        self.bytes_written += len(chunk)
        self._sink(chunk)


class S2Reader:
    """The uncompressed bytes of the S2 stream ``source``, read a chunk at a time.

    ``read(n)`` returns up to ``n`` bytes and ``b""`` at the end of the stream. Corruption
    raises :class:`~headwater.archive.format.ChecksumMismatch` (a chunk's CRC) or
    :class:`~headwater.archive.format.MalformedArchive`; a stream cut inside a chunk raises
    :class:`~headwater.archive.format.TruncatedArchive`.
    """

    def __init__(self, source: BinaryIO) -> None:
        self._src = source
        self._buf = b""
        self._pos = 0
        self._chunk_no = 0
        self._seen_id = False
        self.compressed_bytes = 0
        """Bytes consumed from ``source`` so far."""

    def read(self, n: int) -> bytes:
        out = []
        want = n
        while want > 0:
            if self._pos >= len(self._buf) and not self._fill():
                break
            piece = self._buf[self._pos : self._pos + want]
            self._pos += len(piece)
            want -= len(piece)
            out.append(piece)
        return b"".join(out)

    def _fill(self) -> bool:
        """Decode the next data chunk into the buffer; False at the end of the stream."""
        while True:
            head = self._src.read(4)
            if not head:
                return False
            self.compressed_bytes += len(head)
            where = f"S2 chunk {self._chunk_no}"
            self._chunk_no += 1
            if len(head) < 4:
                raise TruncatedArchive(f"{where}: stream ends inside a chunk header")
            kind = head[0]
            length = int.from_bytes(head[1:4], "little")
            body = self._src.read(length)
            self.compressed_bytes += len(body)
            if len(body) < length:
                raise TruncatedArchive(f"{where}: stream ends inside a chunk")
            if kind == _STREAM_ID:
                if head + body not in (S2_MAGIC, SNAPPY_MAGIC):
                    raise MalformedArchive(f"{where}: not an S2 stream identifier")
                self._seen_id = True
                continue
            if not self._seen_id:
                raise MalformedArchive(f"{where}: data before the S2 stream identifier")
            if kind in (_COMPRESSED, _UNCOMPRESSED):
                if length < 4:
                    raise MalformedArchive(f"{where}: chunk too short for its checksum")
                expected = int.from_bytes(body[:4], "little")
                data = decode_block(body[4:]) if kind == _COMPRESSED else body[4:]
                if len(data) > MAX_BLOCK:
                    raise MalformedArchive(f"{where}: block larger than 4 MiB")
                if _masked_crc(data) != expected:
                    raise ChecksumMismatch(f"{where}: CRC-32C mismatch")
                if data:
                    self._buf = data
                    self._pos = 0
                    return True
                continue
            if kind <= 0x7F:
                raise MalformedArchive(f"{where}: reserved unskippable chunk type {kind:#x}")
            # 0x80-0xFD are skippable (S2 puts its seek index there), 0xFE is padding.


def read_uvarint(src: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``src[pos:]`` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(src):
            raise MalformedArchive("S2 block: varint runs past the block")
        byte = src[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise MalformedArchive("S2 block: varint too long")


def _repeat_length(code: int, src: bytes, pos: int) -> tuple[int, int]:
    """The length of a repeat element (3-bit ``code``) and the position after it."""
    if code < 5:
        return code + 4, pos
    if code == 5:
        return src[pos] + 8, pos + 1
    if code == 6:
        return int.from_bytes(src[pos : pos + 2], "little") + 260, pos + 2
    return int.from_bytes(src[pos : pos + 3], "little") + 65540, pos + 3


def decode_block(src: bytes) -> bytes:
    """Decompress one S2 (or Snappy) block.

    S2 differs from Snappy in one element, the repeat. A block without repeats (S2Writer's
    always) is decoded by cramjam's Snappy at native speed; otherwise the repeats are first
    rewritten into the explicit copies they stand for (:func:`_snappy_block`), which only
    walks the elements and costs about a quarter of decoding them in Python."""
    size, pos = read_uvarint(src, 0)
    if size > MAX_BLOCK:
        raise MalformedArchive(f"S2 block: declared size {size} exceeds 4 MiB")
    with contextlib.suppress(cramjam.DecompressionError):  # not plain Snappy: repeats
        return bytes(cramjam.snappy.decompress_raw(src))
    try:
        return bytes(cramjam.snappy.decompress_raw(_snappy_block(src, pos)))
    except cramjam.DecompressionError as exc:
        raise MalformedArchive(f"S2 block: {exc}") from None


def _copies(offset: int, length: int) -> bytes:
    """Snappy copy elements for ``length`` bytes from ``offset`` back (at most 64 each)."""

    def copy(n: int) -> bytes:
        if offset > 0xFFFF:
            return bytes([((n - 1) << 2) | 3]) + offset.to_bytes(4, "little")
        return bytes([((n - 1) << 2) | 2, offset & 0xFF, offset >> 8])

    whole, rest = divmod(length, 64)
    return copy(64) * whole + (copy(rest) if rest else b"")


def _snappy_block(src: bytes, pos: int) -> bytes:
    """``src`` with every repeat element replaced by the copies it stands for; elements
    from ``pos`` (after the size). Structural faults raise MalformedArchive; offsets and
    lengths are left to the Snappy decoder to check."""
    parts: list[bytes] = []
    done = 0  # src[:done] is already in parts
    end = len(src)
    offset = 0  # the last copy offset; a block cannot open with a repeat
    try:
        while pos < end:
            tag = src[pos]
            kind = tag & 3
            if kind == 0:  # literal
                n = tag >> 2
                if n < 60:
                    pos += n + 2
                else:
                    extra = n - 59
                    n = int.from_bytes(src[pos + 1 : pos + 1 + extra], "little")
                    pos += extra + n + 2
            elif kind == 2:  # copy, 2-byte offset
                offset = src[pos + 1] | (src[pos + 2] << 8)
                pos += 3
            elif kind == 3:  # copy, 4-byte offset
                offset = int.from_bytes(src[pos + 1 : pos + 5], "little")
                pos += 5
            else:  # copy, 1-byte offset; offset 0 is the repeat
                short = ((tag & 0xE0) << 3) | src[pos + 1]
                if short:
                    offset = short
                    pos += 2
                    continue
                if not offset:
                    raise MalformedArchive("S2 block: a repeat before any copy")
                length, after = _repeat_length((tag >> 2) & 7, src, pos + 2)
                parts.append(src[done:pos])
                parts.append(_copies(offset, length))
                pos = done = after
    except IndexError:
        raise MalformedArchive("S2 block: element runs past the block") from None
    if pos != end:
        raise MalformedArchive("S2 block: element runs past the block")
    parts.append(src[done:])
    return b"".join(parts)
