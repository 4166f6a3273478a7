"""The replication messages on the wire (`replicated.wire`): round trips, and refusals.

Everything that is not a well-formed message must come out as `WireError` (a ValueError),
never as another exception that would escape the receiver's handler, nor as a message the
core would take.
"""

from __future__ import annotations

import contextlib
import random

import msgspec
import pytest

from headwater.server.replicated.messages import Append, AppendReply, Entry, TimeoutNow
from headwater.server.replicated.wire import WireError, decode, encode


def append(entries: int = 3, prev: int = 4, epoch: int = 2) -> Append:
    es = tuple(Entry(prev + i, epoch, f"op{i}".encode()) for i in range(1, entries + 1))
    return Append(epoch, "s1", prev, 1 if prev else 0, es, prev)


@pytest.mark.parametrize(
    "msg",
    [
        append(),
        append(entries=0),  # a heartbeat
        append(entries=2, prev=0, epoch=1),
        Append(3, "s2", 5, 2, (Entry(6, 2, b""), Entry(7, 3, b"\x00\xff" * 100)), 5),
        AppendReply(2, "s3", True, 7, 9),
        AppendReply(5, "s3", False, 0, 0),
        AppendReply(0, "a-server-with-a-long-name" * 5, False, 0, 3),
        Append(3, "s2", 5, 2, (), 5, 17),  # a read round
        AppendReply(3, "s3", True, 5, 5, 17),
        TimeoutNow(1, "s1"),
        TimeoutNow(2**40, "a-server-with-a-long-name" * 5),
    ],
)
def test_round_trip(msg: Append | AppendReply | TimeoutNow) -> None:
    data = encode(msg)
    assert decode(data) == msg
    assert decode(bytearray(data)) == msg


def test_compact() -> None:
    # No field names: a heartbeat is a few bytes, and an entry costs its op plus a few.
    assert len(encode(append(entries=0))) < 16
    one = len(encode(append(entries=1)))
    assert len(encode(append(entries=101))) - one < 100 * (len(b"op10") + 8)
    assert len(encode(AppendReply(2, "s3", True, 7, 9))) < 12
    assert len(encode(TimeoutNow(2, "s3"))) < 8


def test_without_a_read_round() -> None:
    # A server from before read rounds leaves the field out: it reads as 0 (no round).
    assert decode(raw(1, 2, "s1", 0, 0, [], 0)) == Append(2, "s1", 0, 0, (), 0, 0)
    assert decode(raw(2, 2, "s3", True, 4, 4)) == AppendReply(2, "s3", True, 4, 4, 0)


def raw(*fields: object) -> bytes:
    return msgspec.msgpack.encode(list(fields))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",  # never used in msgpack
        b"not msgpack at all",
        msgspec.msgpack.encode({"epoch": 1}),  # a map, not an array
        raw(),
        raw(9, 1, "s1", 0, 0, [], 0),  # unknown kind
        raw(3, 1, "s1", 0, 0, [], 0),  # a TimeoutNow with an Append's fields
        raw(3, 0, "s1"),  # TimeoutNow: epoch 0
        raw(3, 1, ""),  # no leader
        raw(3, 1),  # a field short
        raw(3, -1, "s1"),
        raw("1", 1, "s1", 0, 0, [], 0),
        raw(1, 1, "s1", 0, 0, []),  # a field short
        raw(1, 1, "s1", 0, 0, [], 0, 0, 9),  # a field too many
        raw(1, 1, "s1", 0, 0, [], 0, -1),  # a negative read round
        raw(2, 1, "s2", True, 0, 0, 0, 9),  # a field too many
        raw(1, 1, "", 0, 0, [], 0),  # no leader
        raw(1, 1, 7, 0, 0, [], 0),  # leader not a string
        raw(1, 0, "s1", 0, 0, [], 0),  # epoch 0
        raw(1, 1, "s1", -1, 0, [], 0),  # negative
        raw(1, 1, "s1", 0, 0, [], 2**64 - 1),  # out of range
        raw(1, 1, "s1", 0, 0, [[1, 1]], 0),  # entry short
        raw(1, 1, "s1", 0, 0, [[1, 1, "text"]], 0),  # op not bytes
        raw(1, 1, "s1", 0, 0, [[0, 1, b""]], 0),  # index 0
        raw(1, 1, "s1", 0, 0, [[2, 1, b""]], 0),  # does not follow prev_index
        raw(1, 2, "s1", 3, 1, [[4, 1, b""], [6, 1, b""]], 0),  # a gap
        raw(1, 2, "s1", 3, 1, [[4, 1, b""], [4, 1, b""]], 0),  # a repeat
        raw(1, 2, "s1", 3, 1, [[4, 3, b""]], 0),  # an entry from a later epoch
        raw(1, 3, "s1", 3, 2, [[4, 1, b""]], 0),  # an epoch going back
        raw(1, 3, "s1", 3, 2, [[4, 2, b""], [5, 1, b""]], 0),
        raw(1, 2, "s1", 3, 5, [], 0),  # prev_epoch above the epoch
        raw(1, 2, "s1", 0, 1, [], 0),  # prev_epoch without a prev_index
        raw(2, 1, "s2", "yes", 0, 0),  # ok not a bool
        raw(2, 1, "s2", True, -3, 0),
        raw(2, 1, None, True, 0, 0),
    ],
)
def test_malformed_is_refused(data: bytes) -> None:
    with pytest.raises(WireError):
        decode(data)


def test_random_bytes_never_escape_as_another_error() -> None:
    rng = random.Random(18)
    good = [encode(append()), encode(AppendReply(2, "s3", True, 7, 9)), encode(TimeoutNow(4, "s2"))]
    for _ in range(3000):
        base = bytearray(rng.choice(good))
        for _ in range(rng.randint(1, 4)):
            base[rng.randrange(len(base))] = rng.randrange(256)
        cut = bytes(base[: rng.randint(0, len(base))])
        for data in (
            bytes(base),
            cut,
            bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))),
        ):
            # Refused with WireError, or decoded: any other exception fails the test.
            with contextlib.suppress(WireError):
                decode(data)


def test_encode_refuses_other_objects() -> None:
    with pytest.raises(TypeError):
        encode(Entry(1, 1, b""))  # type: ignore[arg-type]
