"""Hand-built S2 streams and NATSARC1 archives, for tests that need exact bytes.

nats-server writes real ones; these builders make the elements and faults a server never
writes on demand: every block element kind (literals of each length form, the three copy forms,
each S2 repeat length form, overlapping copies), bad checksums, reserved chunks, archives out of
order. Nothing here compresses; NATSARC1 entries are encoded with the writer's own
``encode_entry``, whose output nats-server restores (tests/conformance).
"""

from __future__ import annotations

import google_crc32c

from headwater.archive.natsarc import encode_entry, uvarint

STREAM_ID = b"\xff\x06\x00\x00S2sTwO"


def masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def chunk(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "little") + body


def data_chunk(data: bytes, *, block: bytes | None = None, crc: int | None = None) -> bytes:
    """A chunk holding ``data``: compressed as ``block`` when given, else stored as is."""
    check = (masked_crc(data) if crc is None else crc).to_bytes(4, "little")
    if block is None:
        return chunk(0x01, check + data)
    return chunk(0x00, check + block)


def s2_stream(*chunks: bytes) -> bytes:
    return STREAM_ID + b"".join(chunks)


# --- block elements --------------------------------------------------------------------------


def literal(data: bytes) -> bytes:
    n = len(data) - 1
    if n < 60:
        return bytes([n << 2]) + data
    size = (n.bit_length() + 7) // 8
    return bytes([(59 + size) << 2]) + n.to_bytes(size, "little") + data


def copy1(offset: int, length: int) -> bytes:
    assert 4 <= length <= 11 and 0 < offset < 2048
    return bytes([((offset >> 8) << 5) | ((length - 4) << 2) | 1, offset & 0xFF])


def copy2(offset: int, length: int) -> bytes:
    assert 1 <= length <= 64 and 0 < offset < 65536
    return bytes([((length - 1) << 2) | 2]) + offset.to_bytes(2, "little")


def copy4(offset: int, length: int) -> bytes:
    assert 1 <= length <= 64
    return bytes([((length - 1) << 2) | 3]) + offset.to_bytes(4, "little")


def repeat(length: int) -> bytes:
    """S2's repeat: the last offset again, in whichever length form fits."""
    if length <= 8:
        return bytes([((length - 4) << 2) | 1, 0])
    if length < 260:
        return bytes([(5 << 2) | 1, 0, length - 8])
    if length < 65540:
        return bytes([(6 << 2) | 1, 0]) + (length - 260).to_bytes(2, "little")
    return bytes([(7 << 2) | 1, 0]) + (length - 65540).to_bytes(3, "little")


def block(size: int, *elements: bytes) -> bytes:
    return uvarint(size) + b"".join(elements)


# --- NATSARC1 --------------------------------------------------------------------------------


def entry(name: str, *, ts: int = 0, seq: int = 0, hdr: bytes = b"", body: bytes = b"") -> bytes:
    return encode_entry(name.encode(), ts, seq, hdr, body)


SENTINEL = entry("")


def natsarc(*entries: bytes) -> bytes:
    """The uncompressed archive: the magic and ``entries`` (add SENTINEL yourself)."""
    return b"NATSARC1" + b"".join(entries)


def stored(content: bytes, piece: int = 65536) -> bytes:
    """``content`` as an S2 stream of uncompressed chunks of ``piece`` bytes."""
    pieces = [content[i : i + piece] for i in range(0, len(content), piece)] or [b""]
    return s2_stream(*(data_chunk(p) for p in pieces))
