"""Migrating from nats-server: a 2.15 snapshot (``NATSARC1`` in S2) backed up with the control
plane's client and restored into Headwater keeps every message (sequence, subject, headers,
data, time), the stream's gaps and sequence floor, and its durable consumers with their
delivered, acknowledged and pending state. The same backup restored into a fresh nats-server
is the reference: both restored servers must report the same state and deliver the same next
message. Damaged uploads are refused with 10062 and leave nothing behind."""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StorageType

from conftest import start_server
from headwater.archive import ArchivedConsumer, ArchiveFormat, NatsArchiveReader
from headwater.archive.s2 import S2Reader
from headwater.control.backup import (
    BACKUP_FILE,
    NATS_ARCHIVE_FILE,
    BackupError,
    backup_stream,
    restore_stream,
)
from headwater.testing import ServerProcess
from support.s2frames import SENTINEL, stored
from support.snapshots import collecting, store_leftovers

MESSAGES = 3000
BIG = 200 * 1024
"""Every 250th message carries at least this many bytes."""
DELETED = (1, 2, 700, 701, 702, 1500, 2222, MESSAGES)
"""A leading gap (the first sequence moves), interior gaps and a trailing one."""
STATE_KEYS = (
    "messages",
    "bytes",
    "first_seq",
    "first_ts",
    "last_seq",
    "last_ts",
    "num_deleted",
    "num_subjects",
    "consumer_count",
)


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="module")
def source() -> Iterator[ServerProcess]:
    """The nats-server being migrated from."""
    yield from start_server("nats", jetstream=True)


@pytest.fixture(scope="module")
def reference() -> Iterator[ServerProcess]:
    """A second nats-server the backups are restored into, as the reference."""
    yield from start_server("nats", jetstream=True)


@pytest.fixture(scope="module")
def hw() -> Iterator[ServerProcess]:
    yield from start_server("headwater", jetstream=True)


async def _connect(srv: ServerProcess) -> AsyncIterator[Client]:
    client = await nats.connect(srv.url, allow_reconnect=False)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def src(source: ServerProcess) -> AsyncIterator[Client]:
    async for client in _connect(source):
        yield client


@pytest.fixture
async def ref(reference: ServerProcess) -> AsyncIterator[Client]:
    async for client in _connect(reference):
        yield client


@pytest.fixture
async def hnc(hw: ServerProcess) -> AsyncIterator[Client]:
    async for client in _connect(hw):
        yield client


@pytest.fixture(autouse=True)
async def no_streams_left(src: Client, ref: Client, hnc: Client) -> AsyncIterator[None]:
    """Every test starts on servers without streams, even after one that failed half-way."""
    yield
    for nc in (src, ref, hnc):
        for name in await stream_names(nc):
            await nc.jetstream().delete_stream(name)


# --------------------------------------------------------------------------- helpers


async def api(nc: Client, subject: str, body: Any = None) -> dict[str, Any]:
    payload = b"" if body is None else json.dumps(body).encode()
    msg = await nc.request(f"$JS.API.{subject}", payload, timeout=10)
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


async def stream_state(nc: Client, stream: str, details: bool = True) -> dict[str, Any]:
    """STREAM.INFO's state; ``details`` adds the deleted sequences (nats-server reports
    ``[0]`` for a file stream that never held a message)."""
    info = await api(nc, f"STREAM.INFO.{stream}", {"deleted_details": details})
    assert "error" not in info, info
    state = info["state"]
    return {key: state.get(key) for key in (*STATE_KEYS, "deleted")}


async def all_messages(nc: Client, stream: str, last_seq: int) -> dict[int, dict[str, Any]]:
    """Every stored message as STREAM.MSG.GET reports it (seq, subject, headers, data, time)."""
    out = {}
    for seq in range(1, last_seq + 1):
        reply = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in reply:
            out[seq] = reply["message"]
        else:
            assert reply["error"]["err_code"] == 10037, reply  # no message found
    return out


async def consumer_state(nc: Client, stream: str, name: str) -> dict[str, Any]:
    info = await api(nc, f"CONSUMER.INFO.{stream}.{name}")
    assert "error" not in info, info
    return {
        "delivered": {k: info["delivered"][k] for k in ("consumer_seq", "stream_seq")},
        "ack_floor": {k: info["ack_floor"][k] for k in ("consumer_seq", "stream_seq")},
        "num_ack_pending": info["num_ack_pending"],
        "num_redelivered": info["num_redelivered"],
        "num_pending": info["num_pending"],
        "filter_subject": info["config"].get("filter_subject"),
        "ack_policy": info["config"]["ack_policy"],
        "ack_wait": info["config"]["ack_wait"],
    }


async def stream_names(nc: Client) -> list[str]:
    return (await api(nc, "STREAM.NAMES")).get("streams") or []


def payload(i: int, rng: random.Random) -> bytes:
    if i % 250 == 0:
        return rng.randbytes(BIG + i)
    if i % 11 == 0:
        return b""
    size = (i * 37) % 3000
    # Half compressible, half not: both kinds of S2 chunk.
    return rng.randbytes(size) if i % 2 else (b"%06d," % i) * (size // 7)


def headers(i: int) -> dict[str, str] | None:
    if i % 3 == 0:
        return {"Trace": f"t-{i}", "Nats-Msg-Id": f"id-{i}", "X-Multi": "a b  c"}
    if i % 5 == 0:
        return {"Only": str(i)}
    return None


async def fill(nc: Client, stream: str, storage: StorageType) -> None:
    """``MESSAGES`` messages over several subjects, with the ``DELETED`` sequences removed,
    and two durable pull consumers: WORK (acks done out of order, one redelivery, three
    pending) and FILT (filtered, all it got acknowledged)."""
    js = nc.jetstream()
    base = stream.lower()
    await js.add_stream(name=stream, subjects=[f"{base}.>"], storage=storage)
    rng = random.Random(stream)
    acks = []
    for i in range(1, MESSAGES + 1):
        acks.append(
            js.publish(
                f"{base}.{i % 7}.{'even' if i % 2 == 0 else 'odd'}",
                payload(i, rng),
                headers=headers(i),
            )
        )
        if len(acks) == 100:
            await asyncio.gather(*acks)
            acks = []
    await asyncio.gather(*acks)
    for seq in DELETED:
        assert await js.delete_msg(stream, seq)
    await js.add_consumer(
        stream,
        ConsumerConfig(durable_name="WORK", ack_policy=AckPolicy.EXPLICIT, ack_wait=120.0),
    )
    await js.add_consumer(
        stream,
        ConsumerConfig(
            durable_name="FILT",
            ack_policy=AckPolicy.EXPLICIT,
            filter_subject=f"{base}.3.odd",
            ack_wait=120.0,
        ),
    )
    work = await js.pull_subscribe_bind("WORK", stream)
    got = await work.fetch(10, timeout=5)
    assert len(got) == 10
    for i, msg in enumerate(got):
        if i < 6 or i == 7:
            await msg.ack_sync()
    await got[6].nak()
    await asyncio.sleep(0.1)
    again = await work.fetch(1, timeout=5)
    assert again[0].metadata.num_delivered == 2
    assert again[0].metadata.sequence.stream == got[6].metadata.sequence.stream
    await work.unsubscribe()
    filt = await js.pull_subscribe_bind("FILT", stream)
    for msg in await filt.fetch(5, timeout=5):
        await msg.ack_sync()
    await filt.unsubscribe()
    await asyncio.sleep(0.2)  # nats-server handles acks on their own queue


def delivered(msg: Msg) -> dict[str, Any]:
    meta = msg.metadata
    return {
        "subject": msg.subject,
        "data": msg.data,
        "headers": msg.headers,
        "stream_seq": meta.sequence.stream,
        "consumer_seq": meta.sequence.consumer,
        "num_delivered": meta.num_delivered,
        "num_pending": meta.num_pending,
    }


async def next_delivery(nc: Client, stream: str, durable: str) -> dict[str, Any]:
    sub = await nc.jetstream().pull_subscribe_bind(durable, stream)
    try:
        (msg,) = await sub.fetch(1, timeout=5)
        await msg.ack_sync()
        return delivered(msg)
    finally:
        await sub.unsubscribe()


def archive_content(archive: Path) -> bytes:
    """The uncompressed NATSARC1 bytes of an S2 archive."""
    with open(archive, "rb") as fh:
        reader = S2Reader(fh)
        parts = []
        while piece := reader.read(1 << 20):
            parts.append(piece)
    return b"".join(parts)


# --------------------------------------------------------------------------- migration


@pytest.mark.parametrize("storage", [StorageType.FILE, StorageType.MEMORY])
async def test_migrate_stream_from_nats_server(
    src: Client, ref: Client, hnc: Client, tmp_path: Path, storage: StorageType
) -> None:
    name = f"MIG{storage.value.upper()}"
    await fill(src, name, storage)
    before = await stream_state(src, name)
    assert before["messages"] == MESSAGES - len(DELETED)
    assert before["first_seq"] == 3 and before["last_seq"] == MESSAGES
    before_msgs = await all_messages(src, name, MESSAGES)
    assert len(before_msgs) == MESSAGES - len(DELETED)
    assert sum(len(m.get("data", "")) > BIG for m in before_msgs.values()) >= 10
    before_consumers = {c: await consumer_state(src, name, c) for c in ("WORK", "FILT")}
    assert before_consumers["WORK"]["num_ack_pending"] == 3
    assert before_consumers["WORK"]["num_redelivered"] == 1
    assert before_consumers["FILT"]["ack_floor"]["consumer_seq"] == 5

    result = await backup_stream(src, name, tmp_path / "b")
    assert sorted(os.listdir(tmp_path / "b")) == [BACKUP_FILE, NATS_ARCHIVE_FILE]
    assert result.archive == tmp_path / "b" / NATS_ARCHIVE_FILE
    assert result.archive_bytes == result.archive.stat().st_size
    assert result.messages == MESSAGES - len(DELETED)

    info = await restore_stream(hnc, tmp_path / "b", verify=True, timeout=30)
    assert info["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    assert info["config"]["storage"] == storage.value
    assert await stream_state(hnc, name) == before
    assert await all_messages(hnc, name, MESSAGES) == before_msgs
    for durable, state in before_consumers.items():
        assert await consumer_state(hnc, name, durable) == state, durable

    # The reference: the same backup restored into a fresh nats-server.
    await restore_stream(ref, tmp_path / "b", timeout=30)
    ref_state = await stream_state(ref, name)
    # nats-server's own restore takes last_ts from the last stored message (2999), not from
    # the deleted last sequence the state records; Headwater keeps the stream's (above).
    assert ref_state["last_ts"] == before_msgs[MESSAGES - 1]["time"]
    assert ref_state | {"last_ts": before["last_ts"]} == before
    for durable in ("WORK", "FILT", "FILT"):
        expected = await next_delivery(ref, name, durable)
        assert await next_delivery(hnc, name, durable) == expected, durable
    for durable in ("WORK", "FILT"):
        assert await consumer_state(hnc, name, durable) == await consumer_state(ref, name, durable)
    # Publishing continues the sequence after the (deleted) last one on both.
    ref_ack = await ref.jetstream().publish(f"{name.lower()}.0.even", b"after")
    hw_ack = await hnc.jetstream().publish(f"{name.lower()}.0.even", b"after")
    assert hw_ack.seq == ref_ack.seq == MESSAGES + 1


@pytest.mark.parametrize("storage", [StorageType.FILE, StorageType.MEMORY])
async def test_migrate_stream_from_headwater_to_nats_server(
    ref: Client, hnc: Client, tmp_path: Path, storage: StorageType
) -> None:
    """The way back: a Headwater backup converted to NATSARC1 (``--format nats``) restores
    into nats-server with every message and the stream's state. NATSARC1 has no pending
    records, so a consumer with unacknowledged messages resumes from its ack floor there."""
    name = f"BACK{storage.value.upper()}"
    await fill(hnc, name, storage)
    before = await stream_state(hnc, name)
    before_msgs = await all_messages(hnc, name, MESSAGES)
    work = await consumer_state(hnc, name, "WORK")
    filt = await consumer_state(hnc, name, "FILT")
    assert work["num_ack_pending"] == 3

    await backup_stream(hnc, name, tmp_path / "b", convert_to=ArchiveFormat.NATS)
    assert sorted(os.listdir(tmp_path / "b")) == [BACKUP_FILE, NATS_ARCHIVE_FILE]
    await restore_stream(ref, tmp_path / "b", verify=True, timeout=30)

    after = await stream_state(ref, name)
    # nats-server's restore takes last_ts from the last stored message (see the test above).
    assert after | {"last_ts": before["last_ts"]} == before
    assert await all_messages(ref, name, MESSAGES) == before_msgs
    assert await consumer_state(ref, name, "FILT") == filt
    ref_work = await consumer_state(ref, name, "WORK")
    assert ref_work["ack_floor"] == ref_work["delivered"] == work["ack_floor"]
    assert ref_work["num_ack_pending"] == 0
    floor = work["ack_floor"]["stream_seq"]
    first_unacked = min(seq for seq in before_msgs if seq > floor)
    assert (await next_delivery(ref, name, "WORK"))["stream_seq"] == first_unacked


async def test_headwater_snapshots_in_nats_format_when_configured(
    ref: Client, tmp_path: Path
) -> None:
    """``jetstream { snapshot_format: nats }``: the server itself sends NATSARC1, so the
    backup directory is the one nats-server (and ``nats stream restore``) takes as it is."""
    conf = tmp_path / "hw.conf"
    store = tmp_path / "store"
    conf.write_text(
        f'host: 127.0.0.1\nport: -1\njetstream {{ store_dir: "{store}", snapshot_format: nats }}\n'
    )
    for server in start_server("headwater", args=["-c", str(conf)]):
        async for nc in _connect(server):
            await fill(nc, "SNAP", StorageType.FILE)
            before = await stream_state(nc, "SNAP")
            before_msgs = await all_messages(nc, "SNAP", MESSAGES)
            filt = await consumer_state(nc, "SNAP", "FILT")
            await backup_stream(nc, "SNAP", tmp_path / "b")
    assert sorted(os.listdir(tmp_path / "b")) == [BACKUP_FILE, NATS_ARCHIVE_FILE]
    await restore_stream(ref, tmp_path / "b", verify=True, timeout=30)
    after = await stream_state(ref, "SNAP")
    assert after | {"last_ts": before["last_ts"]} == before
    assert await all_messages(ref, "SNAP", MESSAGES) == before_msgs
    assert await consumer_state(ref, "SNAP", "FILT") == filt


async def test_restored_consumers_come_from_the_archive(
    src: Client, hnc: Client, tmp_path: Path
) -> None:
    """The consumers' pending messages keep their delivery sequence and time: the archive's
    record of them is what Headwater restores, not a recount."""
    js = src.jetstream()
    await js.add_stream(name="PENDING", subjects=["pending"])
    for i in range(20):
        await js.publish("pending", f"m{i}".encode())
    await js.add_consumer(
        "PENDING", ConsumerConfig(durable_name="P", ack_policy=AckPolicy.EXPLICIT, ack_wait=90)
    )
    sub = await js.pull_subscribe_bind("P", "PENDING")
    got = await sub.fetch(6, timeout=5)
    for msg in got[:2]:
        await msg.ack_sync()
    await sub.unsubscribe()
    await asyncio.sleep(0.1)
    await backup_stream(src, "PENDING", tmp_path)
    backup = json.loads((tmp_path / BACKUP_FILE).read_text())
    with open(tmp_path / NATS_ARCHIVE_FILE, "rb") as fh:
        (record,) = [
            r
            for r in NatsArchiveReader(fh, "PENDING", backup["config"])
            if isinstance(r, ArchivedConsumer)
        ]
    pending = record.state["pending"]
    assert [p[:2] for p in pending] == [[3, 3], [4, 4], [5, 5], [6, 6]]
    assert all(p[2] > 0 for p in pending), pending  # delivery times, in ns

    await restore_stream(hnc, tmp_path)
    state = await consumer_state(hnc, "PENDING", "P")
    assert state["delivered"] == {"consumer_seq": 6, "stream_seq": 6}
    assert state["ack_floor"] == {"consumer_seq": 2, "stream_seq": 2}
    assert state["num_ack_pending"] == 4
    # Not yet due for redelivery (90 s ack wait): the next fetch is a new message.
    nxt = await next_delivery(hnc, "PENDING", "P")
    assert (nxt["stream_seq"], nxt["consumer_seq"], nxt["num_delivered"]) == (7, 7, 1)


# --------------------------------------------------------------------------- floors


@pytest.mark.parametrize("storage", [StorageType.FILE, StorageType.MEMORY])
async def test_purged_and_never_used_streams_keep_their_floor(
    src: Client, ref: Client, hnc: Client, tmp_path: Path, storage: StorageType
) -> None:
    """first_seq = last_seq + 1 with no message (purged, or never used with a configured
    first_seq), and a floor moved by a purge that kept some: the restored state is the
    source's and the next publish gets last_seq + 1 on both servers the backup is restored
    into."""
    suffix = storage.value.upper()
    cases = {
        f"PURGED{suffix}": None,
        f"FIRSTSEQ{suffix}": 1000,
        f"HEADCUT{suffix}": None,
        f"NEVERUSED{suffix}": None,
    }
    js = src.jetstream()
    for name, first_seq in cases.items():
        config: dict[str, Any] = {"name": name, "subjects": [name.lower()], "storage": storage}
        if first_seq:
            config["first_seq"] = first_seq
        created = await api(src, f"STREAM.CREATE.{name}", config)
        assert "error" not in created, created
    for _ in range(50):
        await js.publish(f"purged{suffix.lower()}", b"gone")
    await js.purge_stream(f"PURGED{suffix}")
    # A purge that keeps the last few: the floor moves while messages remain.
    for i in range(30):
        await js.publish(f"headcut{suffix.lower()}", f"m{i}".encode())
    await api(src, f"STREAM.PURGE.HEADCUT{suffix}", {"keep": 4})
    expected_floor = {
        f"PURGED{suffix}": 51,
        f"FIRSTSEQ{suffix}": 1000,
        f"HEADCUT{suffix}": 27,
        f"NEVERUSED{suffix}": 0,
    }
    for name in cases:
        before = await stream_state(src, name, details=False)
        assert before["first_seq"] == expected_floor[name], (name, before)
        await backup_stream(src, name, tmp_path / name)
        for nc in (hnc, ref):
            await restore_stream(nc, tmp_path / name, verify=True)
        assert await stream_state(hnc, name, details=False) == before, name
        # nats-server's own restore drops the time of a purged stream's last sequence (it
        # reports none) and says first_seq 1 for a stream never used; every other field
        # agrees, and Headwater keeps the source's.
        ref_state = await stream_state(ref, name, details=False)
        quirks = {"last_ts": before["last_ts"]}
        if before["last_seq"] == 0:
            assert ref_state["first_seq"] == 1
            quirks["first_seq"] = 0
        assert ref_state | quirks == before, name
        for nc in (hnc, ref):
            ack = await nc.jetstream().publish(name.lower(), b"next")
            assert ack.seq == before["last_seq"] + 1, name


async def test_message_ttls_are_rearmed(src: Client, hnc: Client, tmp_path: Path) -> None:
    """Messages with a Nats-TTL still expire after the restore, counted from their original
    store time; "never" and TTL-less messages stay."""
    created = await api(
        src,
        "STREAM.CREATE.TTLS",
        {"name": "TTLS", "subjects": ["ttls.>"], "allow_msg_ttl": True},
    )
    assert "error" not in created, created
    js = src.jetstream()
    published = asyncio.get_running_loop().time()
    for i in range(12):
        ttl = ("2s", "never", None)[i % 3]
        await js.publish(f"ttls.{i}", b"x", headers={"Nats-TTL": ttl} if ttl else None)
    await backup_stream(src, "TTLS", tmp_path)
    await restore_stream(hnc, tmp_path, verify=True)
    assert (await stream_state(hnc, "TTLS"))["messages"] == 12
    await asyncio.sleep(max(0.0, published + 3.5 - asyncio.get_running_loop().time()))
    left = await all_messages(hnc, "TTLS", 12)
    assert sorted(left) == [seq for seq in range(1, 13) if (seq - 1) % 3]


# --------------------------------------------------------------------------- damage


async def _damaged_backups(src: Client, tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    js = src.jetstream()
    await js.add_stream(name="BROKEN", subjects=["broken.>"])
    rng = random.Random(7)
    for i in range(400):
        await js.publish(f"broken.{i % 7}", rng.randbytes(300) + b"compressible " * 40)
    await js.add_consumer("BROKEN", durable_name="C")
    backup = tmp_path / "b"
    await backup_stream(src, "BROKEN", backup)
    await js.delete_stream("BROKEN")
    archive = backup / NATS_ARCHIVE_FILE
    good = archive.read_bytes()
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x08
    content = archive_content(archive)
    assert content.endswith(SENTINEL)
    damaged = {
        "flip": bytes(flipped),
        "cut inside a chunk": good[: len(good) - 20],
        "no sentinel": stored(content[: -len(SENTINEL)]),
        "data after the sentinel": stored(content + b"\x01"),
        "tar, nats-server 2.14": stored(b"stream.json\x00" + b"\x00" * 500),
    }
    return backup, damaged | {"good": good}


async def test_damaged_nats_archive_is_refused_leaving_nothing(
    src: Client, hnc: Client, hw: ServerProcess, tmp_path: Path
) -> None:
    backup, archives = await _damaged_backups(src, tmp_path)
    archive = backup / NATS_ARCHIVE_FILE
    good = archives.pop("good")
    for damage, raw in archives.items():
        archive.write_bytes(raw)
        with pytest.raises(BackupError) as failure:
            await restore_stream(hnc, backup)
        assert failure.value.err_code == 10062, damage
        assert "invalid nats-server archive" in str(failure.value), (damage, failure.value)
        if damage.startswith("tar"):
            assert "2.14" in str(failure.value)
        assert "BROKEN" not in await stream_names(hnc), damage
        assert store_leftovers(hw, "BROKEN") == [], damage
    # The same backup, undamaged, restores.
    archive.write_bytes(good)
    info = await restore_stream(hnc, backup)
    assert info["state"]["messages"] == 400
    assert info["state"]["consumer_count"] == 1


async def test_client_side_verify_refuses_a_damaged_nats_archive(
    src: Client, hnc: Client, tmp_path: Path
) -> None:
    backup, archives = await _damaged_backups(src, tmp_path)
    archive = backup / NATS_ARCHIVE_FILE
    del archives["good"]
    requests, watch = await collecting(hnc, "$JS.API.STREAM.RESTORE.>")
    for damage, raw in archives.items():
        archive.write_bytes(raw)
        with pytest.raises(BackupError, match="failed verification") as failure:
            await restore_stream(hnc, backup, verify=True)
        assert failure.value.err_code == 0, damage
        if damage.startswith("tar"):
            assert "2.14" in str(failure.value)
    await hnc.flush()
    await watch.unsubscribe()
    assert requests == []
    assert "BROKEN" not in await stream_names(hnc)


async def test_nats_archive_needs_the_request_name(
    src: Client, hnc: Client, tmp_path: Path
) -> None:
    """A nats-server archive records no stream name: the restore request's config names the
    stream, and a renamed config restores the same messages under the new name."""
    js = src.jetstream()
    await js.add_stream(name="ORIGINAL", subjects=["original"])
    for i in range(5):
        await js.publish("original", f"m{i}".encode())
    await backup_stream(src, "ORIGINAL", tmp_path)
    config = json.loads((tmp_path / BACKUP_FILE).read_text())["config"]
    renamed = dict(config, name="RENAMED", subjects=["renamed"])
    info = await restore_stream(hnc, tmp_path, verify=True, config=renamed)
    assert info["config"]["name"] == "RENAMED"
    assert info["state"]["messages"] == 5
    msg = await api(hnc, "STREAM.MSG.GET.RENAMED", {"seq": 5})
    assert msg["message"]["subject"] == "original"
