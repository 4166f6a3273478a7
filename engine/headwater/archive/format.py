"""Byte-level constants of the archive format (docs/ARCHIVE.md) and its errors.

An archive is a 24-byte file header, then frames, each holding whole records::

    file header   magic(8) major(u16) minor(u16) compression(u8) checksum(u8) reserved(u16)
                  xxh3_64 of the 16 bytes before it (u64)
    frame         stored_len(u32) raw_len(u32) xxh3_64(stored bytes)(u64), stored bytes
    record        type(u8) body_len(u32) body xxh3_64(type, body_len and body)(u64)

All integers are little-endian. A frame's stored bytes are its records, compressed as a unit
when the header says so; records never span frames, so a reader holds one frame at a time.
"""

from __future__ import annotations

import enum
import struct

import cramjam
import xxhash

__all__ = [
    "ARCHIVE_SUFFIX",
    "FILE_HEADER",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "FRAME_HEADER",
    "MAGIC",
    "MESSAGE_HEAD",
    "RECORD_HEAD",
    "ArchiveError",
    "ChecksumMismatch",
    "Compression",
    "MalformedArchive",
    "RecordType",
    "TruncatedArchive",
    "UnsupportedVersion",
    "checksum",
    "compress",
    "decompress",
    "pack_file_header",
    "unpack_file_header",
]

MAGIC = b"\x89HWARC\r\n"
"""PNG-style: a high byte first (catches 7-bit transports), CR LF last (catches newline
conversion), so a mangled copy fails at the first 8 bytes instead of somewhere inside."""
FORMAT_MAJOR = 1
"""Readers refuse another major version: the layout changed incompatibly."""
FORMAT_MINOR = 0
"""Readers accept any minor of their major: minors only add optional record types."""
ARCHIVE_SUFFIX = ".hwarc"

CHECKSUM_XXH3_64 = 1

FILE_HEADER = struct.Struct("<8sHHBBHQ")
FRAME_HEADER = struct.Struct("<IIQ")
RECORD_HEAD = struct.Struct("<BI")
RECORD_SUM = struct.Struct("<Q")
MESSAGE_HEAD = struct.Struct("<QqHII")
"""seq(u64) ts_ns(i64) subject_len(u16) hdr_len(u32) data_len(u32), then the three fields."""

MAX_FRAME = 1 << 30
"""A frame larger than 1 GiB is corruption, not data: refuse it before allocating."""


class Compression(enum.IntEnum):
    NONE = 0
    ZSTD = 1


class RecordType(enum.IntEnum):
    STREAM = 1
    CONSUMER = 2
    MESSAGE = 3
    END = 15


OPTIONAL_TYPES = range(64, 256)
"""Record types a reader may skip when it does not know them (added by later minors)."""


class ArchiveError(Exception):
    """The archive cannot be read; ``str()`` says where and why."""


class MalformedArchive(ArchiveError):
    """Bytes that are not (or no longer) a valid archive: bad magic, order, lengths."""


class ChecksumMismatch(ArchiveError):
    """A header, frame or record does not match its checksum: the bytes changed."""


class TruncatedArchive(ArchiveError):
    """The archive ends early: a partial frame, or no END record."""


class UnsupportedVersion(ArchiveError):
    """Written by an incompatible (newer major) version of the format."""


def checksum(data: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(data)


def pack_file_header(compression: Compression) -> bytes:
    head = FILE_HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, compression, CHECKSUM_XXH3_64, 0, 0)[
        :16
    ]
    return head + RECORD_SUM.pack(checksum(head))


def unpack_file_header(raw: bytes) -> tuple[int, int, Compression]:
    """(major, minor, compression) of a header, or the reason it is not one."""
    if len(raw) < FILE_HEADER.size:
        if MAGIC.startswith(raw[: len(MAGIC)]) and raw:
            raise TruncatedArchive("archive ends inside its file header")
        raise MalformedArchive("not a Headwater archive (file too short)")
    magic, major, minor, comp, algo, _reserved, digest = FILE_HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise MalformedArchive("not a Headwater archive (bad magic)")
    if digest != checksum(raw[:16]):
        raise ChecksumMismatch("file header checksum mismatch")
    if major != FORMAT_MAJOR:
        raise UnsupportedVersion(
            f"archive format {major}.{minor} is not readable by this version "
            f"(reads {FORMAT_MAJOR}.x)"
        )
    if algo != CHECKSUM_XXH3_64:
        raise MalformedArchive(f"unknown checksum algorithm {algo}")
    try:
        compression = Compression(comp)
    except ValueError:
        raise MalformedArchive(f"unknown compression {comp}") from None
    return major, minor, compression


def compress(raw: bytes, compression: Compression) -> bytes:
    if compression is Compression.ZSTD:
        # Level 1: the archive is written while a live server streams it; zstd's fastest
        # level still shrinks typical message payloads several-fold at >1 GB/s.
        return bytes(cramjam.zstd.compress(raw, level=1))
    return raw


def decompress(stored: bytes, raw_len: int, compression: Compression) -> bytes:
    if compression is Compression.NONE:
        return stored
    try:
        out = bytes(cramjam.zstd.decompress(stored, output_len=raw_len))
    except cramjam.DecompressionError as exc:
        raise ChecksumMismatch(f"frame does not decompress: {exc}") from None
    if len(out) != raw_len:
        raise MalformedArchive(f"frame decompresses to {len(out)} bytes, header says {raw_len}")
    return out
