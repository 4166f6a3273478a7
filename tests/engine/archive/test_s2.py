"""The S2 stream decoder: every element and chunk kind, and the faults it must catch."""

from __future__ import annotations

import io

import pytest

from headwater.archive import ChecksumMismatch, MalformedArchive, TruncatedArchive
from headwater.archive.s2 import S2Reader, decode_block, is_s2_stream
from support.s2frames import (
    STREAM_ID,
    block,
    chunk,
    copy1,
    copy2,
    copy4,
    data_chunk,
    literal,
    repeat,
    s2_stream,
)


def read_all(stream: bytes, size: int = 1 << 30) -> bytes:
    return S2Reader(io.BytesIO(stream)).read(size)


def test_literal_length_forms():
    for n in (1, 60, 61, 256, 257, 70_000):
        data = bytes(i % 251 for i in range(n))
        assert decode_block(block(n, literal(data))) == data


def test_copies_and_overlapping_copies():
    src = block(
        8 + 4 + 10 + 6 + 3,
        literal(b"abcdefgh"),
        copy1(8, 4),  # abcd
        copy2(1, 10),  # overlaps itself: dddddddddd
        copy4(12, 6),  # from "efgh" + "abcd"... 12 back from the end of 22 bytes
        copy2(3, 3),
    )
    out = decode_block(src)
    assert out[:22] == b"abcdefghabcd" + b"d" * 10
    assert out[22:28] == out[10:16]
    assert out[28:] == out[25:28]


@pytest.mark.parametrize("length", [4, 8, 9, 259, 260, 1000, 65539, 65540, 70_000])
def test_repeat_reuses_the_last_offset_in_every_length_form(length):
    head = b"0123456789"
    src = block(10 + 5 + length, literal(head), copy2(10, 5), repeat(length))
    out = decode_block(src)
    expected = bytearray(head + head[:5])
    for _ in range(length):
        expected.append(expected[-10])
    assert out == bytes(expected)


def test_repeat_at_the_start_of_a_block_is_refused():
    # The last offset does not carry across blocks: a block cannot open with a repeat.
    with pytest.raises(MalformedArchive):
        decode_block(block(9, literal(b"a"), repeat(8)))


@pytest.mark.parametrize(
    "src",
    [
        block(4, copy2(1, 4)),  # copies from before the output starts
        block(5, literal(b"abcd")),  # declared size larger than the output
        block(3, literal(b"abcd")),  # and smaller
        block(10, literal(b"abcd")[:3]),  # literal cut short
        block(8, literal(b"abcd"), copy4(4, 4))[:-2],  # copy element cut short
        b"\xff\xff\xff\xff\xff\xff",  # runaway varint
        block(5 << 20, literal(b"a")),  # more than S2's 4 MiB block
    ],
)
def test_bad_blocks_are_malformed(src):
    with pytest.raises(MalformedArchive):
        decode_block(src)


def test_stream_of_stored_and_compressed_chunks():
    first = b"hello " * 10
    second = bytes(range(200))
    stream = s2_stream(
        data_chunk(first, block=block(len(first), literal(b"hello "), copy2(6, 54))),
        chunk(0xFE, b"\0" * 7),  # padding
        chunk(0x99, b"index"),  # skippable: S2's seek index
        data_chunk(second),
        data_chunk(b""),  # empty chunks are legal
    )
    reader = S2Reader(io.BytesIO(stream))
    assert reader.read(7) == first[:7]
    assert reader.read(1 << 20) == first[7:] + second
    assert reader.read(10) == b""
    assert reader.compressed_bytes == len(stream)


def test_snappy_framed_streams_are_accepted():
    snappy = b"\xff\x06\x00\x00sNaPpY" + data_chunk(b"plain snappy")
    assert is_s2_stream(snappy) and is_s2_stream(STREAM_ID)
    assert read_all(snappy) == b"plain snappy"


def test_a_wrong_checksum_is_caught():
    data = b"payload" * 100
    good = data_chunk(data, block=block(len(data), literal(b"payload"), copy2(7, 64), repeat(629)))
    assert read_all(s2_stream(good)) == data
    with pytest.raises(ChecksumMismatch):
        read_all(s2_stream(data_chunk(data, crc=12345)))
    flipped = bytearray(s2_stream(data_chunk(data)))
    flipped[-50] ^= 0x01
    with pytest.raises(ChecksumMismatch):
        read_all(bytes(flipped))


@pytest.mark.parametrize(
    ("stream", "error"),
    [
        (s2_stream(data_chunk(b"abc"))[:-1], TruncatedArchive),
        (s2_stream(data_chunk(b"abc"))[:12], TruncatedArchive),  # inside a chunk header
        (data_chunk(b"abc"), MalformedArchive),  # no stream identifier first
        (b"\xff\x06\x00\x00S2sTwX" + data_chunk(b"abc"), MalformedArchive),
        (s2_stream(chunk(0x02, b"xx")), MalformedArchive),  # reserved, unskippable
        (s2_stream(chunk(0x01, b"ab")), MalformedArchive),  # too short for its CRC
    ],
)
def test_broken_streams(stream, error):
    with pytest.raises(error):
        read_all(stream)
