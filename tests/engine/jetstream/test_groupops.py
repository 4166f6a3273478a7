"""A replicated stream's ops (``jetstream.groupops``): encoded, decoded, and applied alike.

Two streams of one in-process server stand for two replicas: fed the same ops they must end
in the same state with the same outcomes, whatever time it is on the server (the ops carry
the leader's time, here a day ahead so that no expiry timer of the server's own fires).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from engine.jetstream.conftest import in_process

from headwater.server.jetstream import errors, groupops, publish
from headwater.server.jetstream.groupops import DeleteMsg, Expire, Publish, Purge, UpdateConfig
from headwater.server.jetstream.stream import Stream
from headwater.server.jetstream.streamconfig import config_to_json
from headwater.server.store import StoreError

SECOND = 10**9


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[tuple[Stream, Stream]]:
    streams = [
        {
            "name": name,
            "subjects": [f"{name.lower()}.>"],
            "duplicate_window": 60,
            "allow_msg_ttl": True,
            "allow_rollup_hdrs": True,
            "max_msgs_per_subject": 3,
        }
        for name in ("A", "B")
    ]
    async with in_process(tmp_path / "js", *streams) as srv:
        yield srv.jetstream.streams["A"], srv.jetstream.streams["B"]


def _headers(**fields: str) -> bytes:
    lines = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in fields.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def _ops(base: int) -> list[groupops.Op]:
    return [
        Publish("s.1", b"", b"one", base),
        Publish("s.1", _headers(Nats_Msg_Id="m1"), b"two", base + 1),
        Publish("s.1", _headers(Nats_Msg_Id="m1"), b"two again", base + 2),  # duplicate
        Publish("s.2", _headers(Nats_Expected_Last_Sequence="1"), b"late", base + 3),  # 10071
        Publish("s.2", _headers(Nats_TTL="5s"), b"short-lived", base + 4),
        Publish("s.3", b"", b"x", base + 5),
        Publish("s.3", b"", b"y", base + 6),
        Publish("s.3", b"", b"z", base + 7),
        Publish("s.3", b"", b"w", base + 8),  # max_msgs_per_subject drops "x"
        Publish("s.4", _headers(Nats_Rollup="sub"), b"rolled", base + 9),
        DeleteMsg(2, True),
        DeleteMsg(2, True),  # gone already
        Expire(base + 6 * SECOND),  # the TTL'd message
        Purge("s.3", 0, 1),
        Publish("s.1", _headers(Nats_Msg_Id="m1"), b"outside the window", base + 70 * SECOND),
    ]


def _contents(stream: Stream) -> list[tuple[int, str, bytes, int]]:
    state = stream.state()
    out = []
    for seq in range(state.first_seq, state.last_seq + 1):
        msg = stream.store.load_msg(seq)
        if msg is not None:
            out.append((msg.seq, msg.subject, msg.data, msg.ts))
    return out


async def test_ops_round_trip_and_junk_is_refused() -> None:
    for op in _ops(1):
        assert groupops.decode(groupops.encode(op)) == op
    assert groupops.decode(b"") is None  # the new leader's no-op entry
    for junk in (b"\xc1", b"\x93\x09\x01\x02", b"\x92\x02\xa1x", b"\x95\x01\xa1s\xc4\x00"):
        with pytest.raises(groupops.OpError):
            groupops.decode(junk)


async def test_replicas_fed_the_same_ops_end_alike(replicas: tuple[Stream, Stream]) -> None:
    base = time.time_ns() + 86_400 * SECOND
    outcomes = [[groupops.apply(s, op) for op in _ops(base)] for s in replicas]
    assert outcomes[0] == outcomes[1]
    got = outcomes[0]
    assert got[:3] == [publish.Stored(1), publish.Stored(2), publish.Stored(2, duplicate=True)]
    assert got[3] == errors.STREAM_WRONG_LAST_SEQUENCE.format(seq=2)
    assert got[10:14] == [True, False, 1, 2]  # deleted; not there; expired; purged y, z
    assert got[14] == publish.Stored(9)  # the id is new again, by the leader's time
    a, b = (_contents(s) for s in replicas)
    assert a == b
    assert [(seq, data) for seq, _, data, _ in a] == [
        (1, b"one"),
        (7, b"w"),
        (8, b"rolled"),
        (9, b"outside the window"),
    ]
    assert a[0][3] == base and a[-1][3] == base + 70 * SECOND


async def test_a_failure_of_this_servers_store_stops_the_apply(
    replicas: tuple[Stream, Stream],
) -> None:
    """On one server a publish the store cannot take is answered (10077); a replica that
    cannot apply what the others applied must stop instead of answering."""
    stream, _ = replicas
    stream.store.close()
    assert publish.admit(stream, "s.1", None, b"x") == errors.STREAM_STORE_FAILED.format(
        err="store is closed"
    )
    with pytest.raises(StoreError):
        groupops.apply(stream, Publish("s.1", b"", b"x", time.time_ns()))


async def test_a_new_config_is_applied_alike(replicas: tuple[Stream, Stream]) -> None:
    """STREAM.UPDATE of a replicated stream: every replica takes the new config where its log
    has it (here a lower max_msgs, which trims both alike); junk there stops the replica."""
    base = time.time_ns() + 86_400 * SECOND
    for stream in replicas:
        for i in range(6):
            groupops.apply(stream, Publish("s.9", b"", f"m{i}".encode(), base + i))
    for stream in replicas:
        raw = config_to_json(stream.config, dynamic_metadata=False) | {"max_msgs": 2}
        assert groupops.apply(stream, UpdateConfig(orjson.dumps(raw))) is True
        assert stream.config.max_msgs == 2
    a, b = (_contents(s) for s in replicas)
    assert [seq for seq, *_ in a] == [5, 6]
    assert [row[1:] for row in a] == [row[1:] for row in b]
    op = UpdateConfig(orjson.dumps({"name": "A", "max_msgs": "many"}))
    assert groupops.decode(groupops.encode(op)) == op
    with pytest.raises(groupops.OpError):
        groupops.apply(replicas[0], op)
