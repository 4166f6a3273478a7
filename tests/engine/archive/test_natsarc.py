"""nats-server 2.15 archives (NATSARC1): hand-built ones for every rule, and real snapshots
taken from nats-server, read back message for message."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import nats
import orjson
import pytest

from conftest import start_server
from headwater.archive import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveError,
    ArchiveFormat,
    ArchiveReader,
    ArchiveSummary,
    ArchiveWriter,
    Compression,
    MalformedArchive,
    NatsArchiveReader,
    NatsArchiveWriter,
    TruncatedArchive,
    UnsupportedVersion,
    archive_format,
    convert_archive,
    open_archive,
)
from headwater.archive import s2 as s2_module
from headwater.control import api
from headwater.control.backup import backup_stream
from support.s2frames import SENTINEL, entry, natsarc, stored

CONFIG = {"name": "ORDERS", "subjects": ["orders.>"], "storage": "file"}
STATE = {
    "messages": 3,
    "bytes": 300,
    "first_seq": 5,
    "first_ts": "2026-09-08T10:00:00.000000123Z",
    "last_seq": 12,
    "last_ts": "2026-09-08T10:01:00Z",
    "num_subjects": 2,
    "consumer_count": 1,
}
WORKER = {
    "config": {"name": "worker", "durable_name": "worker", "ack_policy": "explicit"},
    "state": {
        "delivered": {"consumer_seq": 4, "stream_seq": 9},
        "ack_floor": {"consumer_seq": 2, "stream_seq": 6},
        "pending": {"9": {"Sequence": 4, "Timestamp": 77}, "7": {"Sequence": 3, "Timestamp": 66}},
        "redelivered": {"7": 2},
    },
}
HDR = b"NATS/1.0\r\nA: 1\r\n\r\n"


def state_entry(state: dict | None = None) -> bytes:
    return entry("state.json", ts=1, body=orjson.dumps(state or STATE))


def worker_entry(body: dict | None = None) -> bytes:
    return entry("consumers/worker", ts=5, body=orjson.dumps(body or WORKER))


MESSAGES = [
    entry("orders.new", ts=100, seq=5, body=b"first"),
    entry("orders.new", ts=200, seq=6, hdr=HDR, body=b""),
    entry("orders.old", ts=300, seq=9, hdr=HDR, body=b"x" * 5000),
]


def read(content: bytes) -> list:
    return list(NatsArchiveReader(io.BytesIO(stored(content, piece=1000)), "ORDERS", CONFIG))


def test_a_complete_archive_reads_as_headwater_records():
    records = read(natsarc(state_entry(), worker_entry(), *MESSAGES, SENTINEL))
    stream, consumer, *messages, summary = records
    assert stream == ArchivedStream(
        "ORDERS",
        stream.created_ns,
        CONFIG,
        {
            "messages": 3,
            "bytes": 300,
            "first_seq": 5,
            "first_ts": 1_788_861_600_000_000_123,
            "last_seq": 12,
            "last_ts": 1_788_861_660_000_000_000,
            "num_deleted": 0,
            "num_subjects": 2,
        },
    )
    assert consumer == ArchivedConsumer(
        "worker",
        5,
        WORKER["config"],
        {
            "delivered": {"consumer_seq": 4, "stream_seq": 9},
            "ack_floor": {"consumer_seq": 2, "stream_seq": 6},
            "pending": [[7, 3, 66], [9, 4, 77]],
            "redelivered": [[7, 2]],
        },
    )
    assert messages == [
        ArchivedMessage(5, "orders.new", b"", b"first", 100),
        ArchivedMessage(6, "orders.new", HDR, b"", 200),
        ArchivedMessage(9, "orders.old", HDR, b"x" * 5000, 300),
    ]
    assert summary == ArchiveSummary(3, 1, 9, 5 + len(HDR) * 2 + 5000)


def test_an_empty_stream_keeps_its_sequence_floor():
    purged = {"messages": 0, "first_seq": 41, "last_seq": 40, "consumer_count": 0}
    stream, summary = read(natsarc(state_entry(purged), SENTINEL))
    assert (stream.state["first_seq"], stream.state["last_seq"]) == (41, 40)
    assert summary == ArchiveSummary(0, 0, 0, 0)


def with_state(**changes: object) -> dict:
    return {**STATE, **changes}


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (natsarc(worker_entry(), state_entry(), SENTINEL), MalformedArchive),  # state not first
        (natsarc(state_entry(), *MESSAGES, SENTINEL), MalformedArchive),  # its consumer missing
        (
            natsarc(state_entry(with_state(consumer_count=0)), worker_entry(), SENTINEL),
            MalformedArchive,
        ),  # a consumer it does not count
        (
            natsarc(state_entry(), worker_entry(), MESSAGES[1], MESSAGES[0], SENTINEL),
            MalformedArchive,
        ),  # sequences descend
        (
            natsarc(state_entry(), worker_entry(), MESSAGES[0], MESSAGES[0], SENTINEL),
            MalformedArchive,
        ),  # a sequence twice
        (
            natsarc(state_entry(), worker_entry(), entry("orders.x", seq=4), SENTINEL),
            MalformedArchive,
        ),  # below first_seq
        (
            natsarc(state_entry(), worker_entry(), entry("orders.x", seq=13), SENTINEL),
            MalformedArchive,
        ),  # above last_seq
        (natsarc(state_entry(), worker_entry(), *MESSAGES), TruncatedArchive),  # no sentinel
        (
            natsarc(state_entry(), worker_entry(), *MESSAGES, SENTINEL, MESSAGES[0]),
            MalformedArchive,
        ),  # data after the sentinel
        (
            natsarc(state_entry(), worker_entry(), entry("", seq=3), SENTINEL),
            MalformedArchive,
        ),  # a sentinel with numbers in it
        (natsarc(state_entry(), worker_entry(), *MESSAGES, SENTINEL)[:-40], TruncatedArchive),
        (natsarc(entry("state.json", body=b"{not json")), MalformedArchive),
        (natsarc(state_entry(with_state(first_ts="yesterday"))), MalformedArchive),
        (natsarc(state_entry(with_state(first_seq=20, last_seq=10))), MalformedArchive),
        (natsarc(state_entry(with_state(consumer_count=-1))), MalformedArchive),
        (natsarc(state_entry(), worker_entry({"config": {}})), MalformedArchive),
        (natsarc(state_entry(), entry("consumers/worker", body=b"[]")), MalformedArchive),
        (b"ustar\0" + bytes(500), UnsupportedVersion),  # a ≤2.14 tar backup
        (b"", TruncatedArchive),
        (b"NATSA", TruncatedArchive),
    ],
)
def test_archives_breaking_the_rules_are_refused(content, error):
    with pytest.raises(error):
        read(content)


def test_open_archive_picks_the_reader_by_format(tmp_path: Path):
    ours = io.BytesIO()
    writer = ArchiveWriter(ours.write, Compression.NONE)
    writer.write_stream(ArchivedStream("ORDERS", 1, CONFIG, {"last_seq": 0}))
    writer.close()
    theirs = stored(natsarc(state_entry(with_state(consumer_count=0)), SENTINEL))
    assert archive_format(ours.getvalue()[:10]) is ArchiveFormat.HEADWATER
    assert archive_format(theirs[:10]) is ArchiveFormat.NATS
    assert archive_format(b"PK\x03\x04 zip") is None
    ours.seek(0)
    assert isinstance(open_archive(ours, "ORDERS", CONFIG), ArchiveReader)
    source = io.BytesIO(b"junk" + theirs)
    source.seek(4)
    reader = open_archive(source, "ORDERS", CONFIG)
    assert isinstance(reader, NatsArchiveReader)
    assert [type(r) for r in reader] == [ArchivedStream, ArchiveSummary]
    with pytest.raises(MalformedArchive):
        open_archive(io.BytesIO(b"PK\x03\x04 zip file"), "ORDERS", CONFIG)
    for cut in (b"", b"\x89HWA", b"\xff\x06\x00\x00S2"):
        with pytest.raises(TruncatedArchive):
            open_archive(io.BytesIO(cut), "ORDERS", CONFIG)


async def test_real_nats_server_snapshots_read_back_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """nats-server is the encoder: 3 MiB of repetitive messages (several S2 blocks, repeat
    elements) and random ones, with deletions and a consumer, read back message for message."""
    repeats = 0
    real = s2_module._repeat_length

    def counting(code: int, src: bytes, pos: int) -> tuple[int, int]:
        nonlocal repeats
        repeats += 1
        return real(code, src, pos)

    monkeypatch.setattr(s2_module, "_repeat_length", counting)
    rng = random.Random(7)
    sent: dict[int, tuple[str, bytes, bytes]] = {}
    for server in start_server("nats", jetstream=True):
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="ORDERS", subjects=["orders.>"])
            for i in range(3000):
                subject = f"orders.{rng.choice(['eu', 'us', 'apac'])}.{i % 17}"
                if i % 5 == 0:
                    data = rng.randbytes(rng.randint(0, 3000))
                else:
                    data = (f"order {i} " * rng.randint(1, 200)).encode()
                headers = {"Nats-Msg-Id": f"id-{i}", "Region": subject} if i % 3 else None
                ack = await js.publish(subject, data, headers=headers)
                sent[ack.seq] = (subject, data, headers)
            for seq in (2, 3, 1500, 2999):
                await js.delete_msg("ORDERS", seq)
                del sent[seq]
            sub = await js.pull_subscribe("orders.eu.>", durable="eu")
            for msg in await sub.fetch(5):
                await msg.ack()
            await api.request(nc, "CONSUMER.INFO.ORDERS.eu")
            result = await backup_stream(nc, "ORDERS", tmp_path / "backup")
        finally:
            await nc.close()
    archive = next(p for p in result.directory.iterdir() if p.name != "backup.json")
    config = json.loads((result.directory / "backup.json").read_text())["config"]
    with open(archive, "rb") as fh:
        records = list(open_archive(fh, "ORDERS", config))
    stream, consumer, *messages, summary = records
    assert stream.state["last_seq"] == 3000 and stream.state["messages"] == len(sent)
    assert consumer.name == "eu" and consumer.state["ack_floor"]["consumer_seq"] == 5
    assert [m.seq for m in messages] == sorted(sent)
    for msg in messages:
        subject, data, headers = sent[msg.seq]
        assert (msg.subject, msg.data) == (subject, data)
        for key, value in (headers or {}).items():
            assert f"{key}: {value}".encode() in msg.hdr
        assert bool(msg.hdr) == bool(headers)
    assert summary.messages == len(sent) and summary.last_seq == 3000
    assert repeats > 100, "nats-server's S2 output should use repeat elements"


def written(stream: ArchivedStream, consumers: list[ArchivedConsumer], messages: list) -> bytes:
    out = io.BytesIO()
    writer = NatsArchiveWriter(out.write)
    writer.write_stream(stream)
    for consumer in consumers:
        writer.write_consumer(consumer)
    for msg in messages:
        writer.write_message(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts)
    summary = writer.close()
    assert writer.bytes_written == len(out.getvalue())
    assert summary.messages == len(messages)
    return out.getvalue()


OURS = ArchivedStream(
    "ORDERS",
    1,
    CONFIG,
    {
        "messages": 3,
        "bytes": 6000,
        "first_seq": 5,
        "first_ts": 1_788_861_600_000_000_120,
        "last_seq": 12,
        "last_ts": 1_788_861_660_000_000_000,
        "num_deleted": 5,
        "num_subjects": 2,
    },
)
OUR_MESSAGES = [
    ArchivedMessage(5, "orders.new", b"", b"first", 100),
    ArchivedMessage(6, "orders.new", HDR, b"", 200),
    ArchivedMessage(9, "orders.ünï", HDR, bytes(range(256)) * 2000, 300),
]


def test_written_archives_read_back():
    acking = ArchivedConsumer(
        "acking",
        7,
        {"durable_name": "acking"},
        {
            "delivered": {"consumer_seq": 3, "stream_seq": 9},
            "ack_floor": {"consumer_seq": 1, "stream_seq": 5},
            "pending": [[6, 2, 10], [9, 3, 11]],
            "redelivered": [[6, 1]],
        },
    )
    ahead = ArchivedConsumer(
        "ahead",
        8,
        {"durable_name": "ahead"},
        {
            "delivered": {"consumer_seq": 30, "stream_seq": 40},
            "ack_floor": {"consumer_seq": 30, "stream_seq": 40},
        },
    )
    raw = written(OURS, [acking, ahead], OUR_MESSAGES)
    stream, first, second, *messages, summary = NatsArchiveReader(io.BytesIO(raw), "ORDERS", CONFIG)
    assert stream.state == OURS.state
    # NATSARC1 has no pending records: the ack floor is where delivery resumes (nats-server's
    # own rule), and no position lies beyond the stream's last sequence.
    assert (first.name, first.created_ns) == ("acking", 7)
    assert first.state["delivered"] == first.state["ack_floor"] == acking.state["ack_floor"]
    assert first.state["pending"] == [] and first.state["redelivered"] == []
    assert second.state["delivered"] == {"consumer_seq": 30, "stream_seq": 12}
    assert messages == OUR_MESSAGES
    assert summary == ArchiveSummary(3, 2, 9, sum(len(m.hdr) + len(m.data) for m in messages))


def test_the_writer_refuses_calls_out_of_order():
    writer = NatsArchiveWriter(io.BytesIO().write)
    with pytest.raises(ValueError):
        writer.write_message(1, "a", b"", b"", 1)
    writer.write_stream(OURS)
    writer.write_message(5, "a", b"", b"", 1)
    with pytest.raises(ValueError):
        writer.write_consumer(ArchivedConsumer("late", 1, {}, {}))
    with pytest.raises(ValueError):
        writer.write_message(5, "a", b"", b"", 1)


def test_conversion_both_ways_keeps_every_message(tmp_path: Path):
    source = tmp_path / "stream.hwarc"
    with open(source, "wb") as fh:
        writer = ArchiveWriter(fh.write)
        writer.write_stream(OURS)
        for msg in OUR_MESSAGES:
            writer.write_message(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts)
        writer.close()
    theirs = tmp_path / "stream.tar.s2"
    back = tmp_path / "back.hwarc"
    convert_archive(source, theirs, ArchiveFormat.NATS, "ORDERS", CONFIG)
    convert_archive(theirs, back, ArchiveFormat.HEADWATER, "ORDERS", CONFIG)
    with open(theirs, "rb") as fh:
        assert archive_format(fh.read(10)) is ArchiveFormat.NATS
    with open(back, "rb") as fh:
        stream, *messages, _ = ArchiveReader(fh)
    assert messages == OUR_MESSAGES and stream.state == OURS.state
    # A damaged source fails the conversion and leaves no target behind.
    damaged = bytearray(theirs.read_bytes())
    damaged[len(damaged) // 2] ^= 0x40
    theirs.write_bytes(bytes(damaged))
    with pytest.raises(ArchiveError):
        convert_archive(theirs, tmp_path / "out.hwarc", ArchiveFormat.HEADWATER, "ORDERS", CONFIG)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "back.hwarc",
        "stream.hwarc",
        "stream.tar.s2",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "2026-09-08T10:00:00.123Z",
        "2026-09-08T12:00:00.123+02:00",
        "2026-09-08T10:00:00.123000000Z",
        "2026-09-08T10:00:00.123",  # no zone: UTC, never the machine's local time
    ],
)
def test_state_times_in_every_rfc3339_form(text: str):
    stream, _ = read(natsarc(state_entry(with_state(first_ts=text, consumer_count=0)), SENTINEL))
    assert stream.state["first_ts"] == 1_788_861_600_123_000_000
