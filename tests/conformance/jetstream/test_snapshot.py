"""STREAM.SNAPSHOT / STREAM.RESTORE through nats-py: the raw flow (differential against
nats-server where the two servers must agree), and backup -> restore round trips on
Headwater that keep every message, header, sequence, timestamp and durable consumer state."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StorageType

from headwater.archive import ARCHIVE_SUFFIX, scan_archive
from headwater.control.backup import (
    ARCHIVE_FILE,
    BACKUP_FILE,
    BackupError,
    backup_stream,
    restore_stream,
)
from headwater.testing import ServerProcess
from support.snapshots import collecting, store_leftovers

ACK_REPLY = re.compile(r"^\$JS\.SNAPSHOT\.ACK\.(?P<stream>[^.]+)\.[^.]+\.(?P<len>\d+)\.(?P<i>\d+)$")


# --------------------------------------------------------------------------- helpers


async def api(nc: Client, subject: str, body: Any = None) -> dict[str, Any]:
    payload = b"" if body is None else json.dumps(body).encode()
    msg = await nc.request(f"$JS.API.{subject}", payload, timeout=5)
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


async def raw_snapshot(
    nc: Client, stream: str, ack: bool = True, **options: Any
) -> tuple[dict[str, Any], list[Msg], Msg]:
    """Run the snapshot flow by hand: (API reply, data chunks, end-of-stream message)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        reply = await api(nc, f"STREAM.SNAPSHOT.{stream}", {"deliver_subject": inbox, **options})
        chunks: list[Msg] = []
        while True:
            msg = await sub.next_msg(timeout=10)
            if not msg.data:
                return reply, chunks, msg
            chunks.append(msg)
            if ack and msg.reply:
                await nc.publish(msg.reply, b"")
    finally:
        await sub.unsubscribe()


async def messages(nc: Client, stream: str, last_seq: int) -> list[dict[str, Any]]:
    """Every stored message as STREAM.MSG.GET reports it (subject, seq, headers, data, time)."""
    out = []
    for seq in range(1, last_seq + 1):
        reply = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in reply:
            out.append(reply["message"])
    return out


async def consumer_state(nc: Client, stream: str, name: str) -> dict[str, Any]:
    info = await api(nc, f"CONSUMER.INFO.{stream}.{name}")
    return {
        "delivered": {k: info["delivered"][k] for k in ("consumer_seq", "stream_seq")},
        "ack_floor": {k: info["ack_floor"][k] for k in ("consumer_seq", "stream_seq")},
        "num_ack_pending": info["num_ack_pending"],
        "num_redelivered": info["num_redelivered"],
        "num_pending": info["num_pending"],
    }


async def fill(nc: Client, stream: str, storage: StorageType) -> None:
    """A stream with headers, a deleted first message, interior and trailing gaps, and a
    durable consumer with delivered, acknowledged, redelivered and pending messages."""
    js = nc.jetstream()
    subject = stream.lower()
    await js.add_stream(name=stream, subjects=[f"{subject}.>"], storage=storage)
    for i in range(1, 41):
        hdrs = {"Trace": f"t-{i}", "Nats-Msg-Id": f"id-{i}"} if i % 3 == 0 else None
        await js.publish(f"{subject}.{i % 4}", f"payload {i}".encode() * (i % 5), headers=hdrs)
    for seq in (1, 7, 8, 20, 39, 40):
        await js.delete_msg(stream, seq)
    await js.add_consumer(
        stream,
        ConsumerConfig(durable_name="WORK", ack_policy=AckPolicy.EXPLICIT, ack_wait=1.0),
    )
    await js.add_consumer(stream, ConsumerConfig(durable_name="IDLE"))
    sub = await js.pull_subscribe_bind("WORK", stream)
    first = await sub.fetch(4, timeout=2)
    for msg in first[:2]:
        await msg.ack_sync()
    await first[2].nak()
    await asyncio.sleep(0.1)  # nats-server handles acks on their own queue
    again = await sub.fetch(1, timeout=2)  # the nak'ed message, delivered a second time
    assert again[0].metadata.num_delivered == 2
    await sub.unsubscribe()


@pytest.fixture(scope="module")
def hw() -> Iterator[ServerProcess]:
    srv = ServerProcess("headwater", jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
async def hnc(hw: ServerProcess) -> AsyncIterator[Client]:
    client = await nats.connect(hw.url, allow_reconnect=False)
    try:
        yield client
    finally:
        await client.close()


# --------------------------------------------------------------------------- differential


async def test_snapshot_flow(nc: Client) -> None:
    """Reply, chunks with flow-control reply subjects, end of stream, advisories."""
    js = nc.jetstream()
    await js.add_stream(name="SNAPFLOW", subjects=["snapflow.>"])
    for _ in range(300):
        await js.publish("snapflow.a", os.urandom(1024))
    events: list[Msg] = []

    async def collect(msg: Msg) -> None:
        events.append(msg)

    adv = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.*.SNAPFLOW", cb=collect)
    reply, chunks, eof = await raw_snapshot(nc, "SNAPFLOW", chunk_size=4096)
    assert reply["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
    assert reply["config"]["name"] == "SNAPFLOW"
    assert reply["state"]["messages"] == 300
    assert len(chunks) > 3
    indexes = []
    for chunk in chunks:
        assert len(chunk.data) <= 4096
        if chunk.reply:  # nats-server sends its last chunk without one
            m = ACK_REPLY.match(chunk.reply)
            assert m is not None, chunk.reply
            assert m["stream"] == "SNAPFLOW" and int(m["len"]) == len(chunk.data)
            indexes.append(int(m["i"]))
    assert indexes == list(range(1, len(indexes) + 1))
    assert len(indexes) >= len(chunks) - 1
    assert (eof.headers or {}).get("Status", "204") == "204"
    for _ in range(50):
        if len(events) >= 2:
            break
        await asyncio.sleep(0.02)
    await adv.unsubscribe()
    kinds = [(m.subject, json.loads(m.data)["type"]) for m in events]
    assert kinds == [
        (
            "$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_CREATE.SNAPFLOW",
            "io.nats.jetstream.advisory.v1.snapshot_create",
        ),
        (
            "$JS.EVENT.ADVISORY.STREAM.SNAPSHOT_COMPLETE.SNAPFLOW",
            "io.nats.jetstream.advisory.v1.snapshot_complete",
        ),
    ]
    complete = json.loads(events[1].data)
    assert complete["stream"] == "SNAPFLOW" and complete["start"] and complete["end"]
    await js.delete_stream("SNAPFLOW")


async def test_request_errors(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="SNAPERR", subjects=["snaperr"])
    cases = [
        ("STREAM.SNAPSHOT.SNAPERR", None, 10003),
        ("STREAM.SNAPSHOT.SNAPERR", {"deliver_subject": "a.*"}, 10015),
        ("STREAM.SNAPSHOT.SNAPERR", {"deliver_subject": ""}, 10015),
        ("STREAM.SNAPSHOT.MISSING", {"deliver_subject": "inbox"}, 10059),
        ("STREAM.RESTORE.SNAPERR", None, 10003),
        ("STREAM.RESTORE.SNAPERR", {"config": {"name": "SNAPERR"}}, 10130),
    ]
    for subject, body, code in cases:
        reply = await api(nc, subject, body)
        assert reply["error"]["err_code"] == code, (subject, body, reply)
    restore = await api(nc, "STREAM.RESTORE.SNAPERR", {"config": {"name": "SNAPERR"}})
    assert restore["type"] == "io.nats.jetstream.api.v1.stream_restore_response"
    assert restore["error"]["description"] == "stream name already in use, cannot restore"
    await js.delete_stream("SNAPERR")


async def test_client_round_trip_on_both_servers(nc: Client, tmp_path: Path) -> None:
    """The control plane's backup client treats the archive as opaque bytes, so the same flow
    backs up and restores a nats-server stream (in nats-server's own archive format)."""
    await fill(nc, "BOTHRT", StorageType.FILE)
    before = await messages(nc, "BOTHRT", 40)
    work = await consumer_state(nc, "BOTHRT", "WORK")
    result = await backup_stream(nc, "BOTHRT", tmp_path / "b")
    assert result.messages == 34
    await nc.jetstream().delete_stream("BOTHRT")
    info = await restore_stream(nc, tmp_path / "b")
    assert info["state"]["messages"] == 34
    assert await messages(nc, "BOTHRT", 40) == before
    assert await consumer_state(nc, "BOTHRT", "WORK") == work
    await nc.jetstream().delete_stream("BOTHRT")


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("storage", [StorageType.FILE, StorageType.MEMORY])
async def test_backup_restore_round_trip(
    hnc: Client, hw: ServerProcess, tmp_path: Path, storage: StorageType
) -> None:
    name = f"RT{storage.value.upper()}"
    await fill(hnc, name, storage)
    before_info = await api(hnc, f"STREAM.INFO.{name}", {"deleted_details": True})
    before_msgs = await messages(hnc, name, 40)
    before_work = await consumer_state(hnc, name, "WORK")
    before_idle = await consumer_state(hnc, name, "IDLE")
    assert before_work["num_ack_pending"] == 2 and before_work["num_redelivered"] == 1

    result = await backup_stream(hnc, name, tmp_path / "b")
    assert result.messages == 34
    assert (tmp_path / "b" / BACKUP_FILE).is_file()
    assert ARCHIVE_FILE.endswith(ARCHIVE_SUFFIX)
    saved = json.loads((tmp_path / "b" / BACKUP_FILE).read_text())
    assert saved["config"]["name"] == name and saved["state"]["messages"] == 34
    scan = scan_archive(tmp_path / "b" / ARCHIVE_FILE)
    assert [c.name for c in scan.consumers] == ["IDLE", "WORK"]
    assert scan.summary is not None and scan.summary.messages == 34

    await hnc.jetstream().delete_stream(name)
    info = await restore_stream(hnc, tmp_path / "b")
    assert info["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    after_info = await api(hnc, f"STREAM.INFO.{name}", {"deleted_details": True})
    for key in ("messages", "bytes", "first_seq", "first_ts", "last_seq", "num_deleted"):
        assert after_info["state"][key] == before_info["state"][key], key
    assert after_info["state"]["deleted"] == before_info["state"]["deleted"] == [7, 8, 20, 39, 40]
    assert after_info["state"]["consumer_count"] == 2
    assert after_info["created"] == before_info["created"]
    assert await messages(hnc, name, 40) == before_msgs
    assert await consumer_state(hnc, name, "WORK") == before_work
    assert await consumer_state(hnc, name, "IDLE") == before_idle

    # The unacknowledged messages are redelivered once their ack wait has passed.
    js = hnc.jetstream()
    sub = await js.pull_subscribe_bind("WORK", name)
    got: dict[int, int] = {}
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        try:
            batch = await sub.fetch(10, timeout=1.5)
        except nats.errors.TimeoutError:
            continue
        for msg in batch:
            if msg.metadata.num_delivered > 1:
                got[msg.metadata.sequence.stream] = msg.metadata.num_delivered
            await msg.ack()
    assert sorted(got) == [4, 5]  # delivered 2, 3 (acked), 4 (nak'ed, again), 5
    assert got[4] == 3 and got[5] == 2
    # A new publish continues the sequence after the restored (deleted) last ones.
    ack = await js.publish(f"{name.lower()}.x", b"after")
    assert ack.seq == 41
    await js.delete_stream(name)


async def test_restored_file_stream_survives_a_restart(tmp_path: Path) -> None:
    with ServerProcess("headwater", jetstream=True) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            await fill(nc, "DURABLE", StorageType.FILE)
            await backup_stream(nc, "DURABLE", tmp_path / "b")
            await nc.jetstream().delete_stream("DURABLE")
            await restore_stream(nc, tmp_path / "b")
            before = await messages(nc, "DURABLE", 40)
            work = await consumer_state(nc, "DURABLE", "WORK")
        finally:
            await nc.close()
        srv.restart()
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            assert await messages(nc, "DURABLE", 40) == before
            assert await consumer_state(nc, "DURABLE", "WORK") == work
        finally:
            await nc.close()


async def test_restore_onto_existing_name_is_refused(hnc: Client, tmp_path: Path) -> None:
    js = hnc.jetstream()
    await js.add_stream(name="TAKEN", subjects=["taken"])
    await js.publish("taken", b"x")
    await backup_stream(hnc, "TAKEN", tmp_path)
    with pytest.raises(BackupError) as failure:
        await restore_stream(hnc, tmp_path)
    assert failure.value.err_code == 10130
    assert (await js.stream_info("TAKEN")).state.messages == 1
    await js.delete_stream("TAKEN")


async def test_corrupted_archive_is_refused_leaving_nothing(
    hnc: Client, hw: ServerProcess, tmp_path: Path
) -> None:
    js = hnc.jetstream()
    await js.add_stream(name="BROKEN", subjects=["broken.>"])
    for i in range(200):
        await js.publish(f"broken.{i % 7}", f"message {i}".encode() * 20)
    await js.add_consumer("BROKEN", durable_name="C")
    await backup_stream(hnc, "BROKEN", tmp_path)
    await js.delete_stream("BROKEN")
    archive = tmp_path / ARCHIVE_FILE
    good = archive.read_bytes()
    for damage in ("flip", "truncate"):
        raw = bytearray(good)
        if damage == "flip":
            raw[len(raw) // 2] ^= 0x08
        else:
            del raw[len(raw) - 20 :]
        archive.write_bytes(bytes(raw))
        with pytest.raises(BackupError) as failure:
            await restore_stream(hnc, tmp_path)
        assert failure.value.err_code == 10062
        assert "invalid archive" in str(failure.value)
        names = await api(hnc, "STREAM.NAMES")
        assert "BROKEN" not in (names["streams"] or [])
        assert store_leftovers(hw, "BROKEN") == []
    # The same backup, undamaged, still restores.
    archive.write_bytes(good)
    info = await restore_stream(hnc, tmp_path)
    assert info["state"]["messages"] == 200
    await js.delete_stream("BROKEN")


async def test_client_side_verify_refuses_without_contacting_the_server(
    hnc: Client, tmp_path: Path
) -> None:
    js = hnc.jetstream()
    await js.add_stream(name="VERIFY", subjects=["verify"])
    await js.publish("verify", b"x" * 100)
    await backup_stream(hnc, "VERIFY", tmp_path)
    archive = tmp_path / ARCHIVE_FILE
    archive.write_bytes(archive.read_bytes()[:-5])
    with pytest.raises(BackupError, match="failed verification"):
        await restore_stream(hnc, tmp_path, verify=True)
    assert (await js.stream_info("VERIFY")).state.messages == 1
    await js.delete_stream("VERIFY")


async def test_no_consumers(hnc: Client, tmp_path: Path) -> None:
    js = hnc.jetstream()
    await js.add_stream(name="NOCONS", subjects=["nocons"])
    await js.publish("nocons", b"x")
    await js.add_consumer("NOCONS", durable_name="D")
    await backup_stream(hnc, "NOCONS", tmp_path, consumers=False)
    assert scan_archive(tmp_path / ARCHIVE_FILE).consumers == []
    await js.delete_stream("NOCONS")
    info = await restore_stream(hnc, tmp_path)
    assert info["state"]["consumer_count"] == 0
    assert info["state"]["messages"] == 1
    await js.delete_stream("NOCONS")


async def test_restore_advisories_and_jsck(hnc: Client, tmp_path: Path) -> None:
    js = hnc.jetstream()
    await js.add_stream(name="ADVR", subjects=["advr"])
    for _ in range(10):
        await js.publish("advr", b"x" * 50)
    await backup_stream(hnc, "ADVR", tmp_path, check=True)
    await js.delete_stream("ADVR")
    events, sub = await collecting(hnc, "$JS.EVENT.ADVISORY.STREAM.*.ADVR")
    await restore_stream(hnc, tmp_path)
    for _ in range(50):
        if len(events) >= 2:
            break
        await asyncio.sleep(0.02)
    await sub.unsubscribe()
    bodies = [json.loads(m.data) for m in events]
    assert [m.subject for m in events] == [
        "$JS.EVENT.ADVISORY.STREAM.RESTORE_CREATE.ADVR",
        "$JS.EVENT.ADVISORY.STREAM.RESTORE_COMPLETE.ADVR",
    ]
    assert bodies[0]["type"] == "io.nats.jetstream.advisory.v1.restore_create"
    assert bodies[1]["type"] == "io.nats.jetstream.advisory.v1.restore_complete"
    assert bodies[1]["bytes"] == (tmp_path / ARCHIVE_FILE).stat().st_size
    await js.delete_stream("ADVR")


async def test_window_and_no_flow_response(hnc: Client) -> None:
    """Without acks the server stops at the window, then ends with 408 after 5 s."""
    js = hnc.jetstream()
    await js.add_stream(name="NOFLOW", subjects=["noflow"])
    for _ in range(200):
        await js.publish("noflow", os.urandom(2048))
    began = time.monotonic()
    _, chunks, eof = await raw_snapshot(hnc, "NOFLOW", ack=False, chunk_size=1024, window_size=4096)
    assert len(chunks) == 4  # the window's worth, then silence
    assert eof.headers is not None
    assert eof.headers.get("Status") == "408"
    assert eof.headers.get("Description") == "No Flow Response"
    assert time.monotonic() - began >= 4.5
    await js.delete_stream("NOFLOW")


async def test_restore_upload_is_abandoned_after_inactivity(hnc: Client, hw: ServerProcess) -> None:
    reply = await api(hnc, "STREAM.RESTORE.IDLE", {"config": {"name": "IDLE"}})
    subject = reply["deliver_subject"]
    assert subject.startswith("$JS.SNAPSHOT.RESTORE.IDLE.")
    ack = await hnc.request(subject, b"partial", timeout=2)
    assert ack.data == b""
    await asyncio.sleep(5.5)
    with pytest.raises(nats.errors.NoRespondersError):
        await hnc.request(subject, b"", timeout=2)
    assert store_leftovers(hw, "IDLE") == []
    # The name is free again.
    again = await api(hnc, "STREAM.RESTORE.IDLE", {"config": {"name": "IDLE"}})
    assert "error" not in again


async def test_jsck_refuses_a_damaged_store() -> None:
    with ServerProcess("headwater", jetstream=True) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            await js.add_stream(name="DAMAGED", subjects=["damaged"])
            for i in range(20):
                await js.publish("damaged", f"precious-{i:03d}".encode())
        finally:
            await nc.close()
        srv.stop()
        msgs = Path(srv.store_dir) / "jetstream" / "$G" / "streams" / "DAMAGED" / "msgs"
        (block,) = msgs.glob("*.blk")
        raw = bytearray(block.read_bytes())
        raw[raw.index(b"precious-007") + 3] ^= 0x20
        block.write_bytes(bytes(raw))
        srv.start()
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            inbox = nc.new_inbox()
            reply = await api(
                nc, "STREAM.SNAPSHOT.DAMAGED", {"deliver_subject": inbox, "jsck": True}
            )
            assert reply["error"]["err_code"] == 10064
            assert reply["error"]["description"].startswith("snapshot failed: ")
        finally:
            await nc.close()


async def test_stream_deleted_during_snapshot_ends_with_500(hnc: Client) -> None:
    js = hnc.jetstream()
    await js.add_stream(name="VANISH", subjects=["vanish"])
    for _ in range(3000):
        await hnc.publish("vanish", os.urandom(1024))
    await hnc.flush()
    inbox = hnc.new_inbox()
    sub = await hnc.subscribe(inbox)
    reply = await api(
        hnc,
        "STREAM.SNAPSHOT.VANISH",
        {"deliver_subject": inbox, "chunk_size": 256 * 1024, "window_size": 256 * 1024},
    )
    assert reply["state"]["messages"] == 3000
    first = await sub.next_msg(timeout=5)  # the window is full until this is acked
    await js.delete_stream("VANISH")
    await hnc.publish(first.reply, b"")
    while True:
        msg = await sub.next_msg(timeout=10)
        if not msg.data:
            break
        await hnc.publish(msg.reply, b"")
    await sub.unsubscribe()
    assert msg.headers is not None
    assert msg.headers.get("Status") == "500"
    assert "deleted" in msg.headers.get("Description", "")


@pytest.mark.parametrize("storage", [StorageType.FILE, StorageType.MEMORY])
async def test_empty_and_purged_streams_round_trip(
    hnc: Client, tmp_path: Path, storage: StorageType
) -> None:
    js = hnc.jetstream()
    cases = {"PURGED": None, "FIRSTSEQ": 1000, "NEVERUSED": None}
    for name, first_seq in cases.items():
        config: dict[str, Any] = {"name": name, "subjects": [name.lower()], "storage": storage}
        if first_seq:
            config["first_seq"] = first_seq
        created = await api(hnc, f"STREAM.CREATE.{name}", config)
        assert "error" not in created, created
    for _ in range(5):
        await js.publish("purged", b"gone")
    await js.purge_stream("PURGED")
    for name in cases:
        before = (await api(hnc, f"STREAM.INFO.{name}"))["state"]
        await backup_stream(hnc, name, tmp_path / name)
        await js.delete_stream(name)
        await restore_stream(hnc, tmp_path / name)
        after = (await api(hnc, f"STREAM.INFO.{name}"))["state"]
        assert after == before, name
        ack = await js.publish(name.lower(), b"next")
        assert ack.seq == max(before["last_seq"] + 1, 1), name
        await js.delete_stream(name)
