"""A replicated stream's snapshot (``jetstream.groupsnapshot``): produced from one replica while
it goes on applying entries, installed into another, which then decides every later entry as
the first one does.

Two in-process servers, each with a stream ``S`` of the same config, stand for two replicas
(replicas live on different servers). Ops carry the leader's time, a day ahead, so that no
expiry timer of the servers' own fires (as in ``test_groupops.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import orjson
import pytest

from headwater.archive import ArchiveWriter
from headwater.server.config.settings import JetStreamSettings, Settings
from headwater.server.jetstream import groupops, groupsnapshot
from headwater.server.jetstream.groupops import DeleteMsg, Expire, Publish, Purge
from headwater.server.jetstream.groupsnapshot import SnapshotError, SnapshotOverrun
from headwater.server.jetstream.snapshot import archived_stream
from headwater.server.jetstream.stream import Stream
from headwater.server.jetstream.streamconfig import config_to_json
from headwater.server.node import Server
from headwater.server.services import attach_services

SECOND = 10**9
BASE = time.time_ns() + 86_400 * SECOND


async def _server(
    tmp_path: Path, name: str, storage: str, per_subject: int = 3
) -> tuple[Server, Stream]:
    settings = Settings(
        host="127.0.0.1",
        port=-1,
        jetstream=JetStreamSettings(enabled=True, store_dir=str(tmp_path / name)),
    )
    srv = Server(settings)
    attach_services(srv)
    await srv.start()
    nc = await nats.connect(f"nats://127.0.0.1:{srv.port}", allow_reconnect=False)
    try:
        await nc.jetstream().add_stream(
            name="S",
            subjects=["s.>"],
            storage=storage,
            duplicate_window=60,
            allow_msg_ttl=True,
            allow_rollup_hdrs=True,
            max_msgs_per_subject=per_subject,
            subject_delete_marker_ttl=10,
        )
    finally:
        await nc.close()
    return srv, srv.jetstream.streams["S"]


@pytest.fixture(params=["memory", "file"])
async def pair(request: Any, tmp_path: Path) -> AsyncIterator[tuple[Stream, Stream, Path]]:
    """Replica A (with the state) and replica B (behind), and a directory for B's new store."""
    servers = []
    try:
        for name in ("x", "y"):
            servers.append(await _server(tmp_path, name, request.param))
        yield servers[0][1], servers[1][1], tmp_path
    finally:
        for srv, _ in servers:
            await srv.shutdown()


def _hdr(**fields: str) -> bytes:
    lines = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in fields.items())
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def _before(base: int) -> list[groupops.Op]:
    """Up to the snapshot's index: every kind of op, the stream's first messages purged, a
    message with an id deleted (its id stays in the window), markers, TTLs."""
    ops: list[groupops.Op] = [
        Publish("s.old", b"", b"gone", base),
        Publish("s.old", b"", b"gone too", base + 1),
        Purge("", 3, 0),  # first_seq 3
        Publish("s.1", b"", b"one", base + 2),
        Publish("s.1", _hdr(Nats_Msg_Id="m1"), b"two", base + 3),
        Publish("s.1", _hdr(Nats_Msg_Id="m1"), b"two again", base + 4),  # duplicate
        Publish("s.2", _hdr(Nats_Expected_Last_Sequence="1"), b"late", base + 5),  # 10071
        Publish("s.2", _hdr(Nats_TTL="5s"), b"short-lived", base + 6),  # raised to 10s
        Publish("s.ttl", _hdr(Nats_TTL="2s"), b"marked", base + 7),
        Publish("s.keep", _hdr(Nats_TTL="never"), b"forever", base + 8),
        Publish("s.del", _hdr(Nats_Msg_Id="m5"), b"deleted later", base + 9),
        Expire(base + 7 + 10 * SECOND),  # s.2's and s.ttl's: markers for both subjects
    ]
    ts = base + 11 * SECOND
    for i in range(120):  # several frames of the snapshot
        ops.append(Publish(f"s.bulk.{i % 40}", b"", bytes(60) + i.to_bytes(2, "big"), ts + i))
    ops += [
        DeleteMsg(8, True),  # s.del: its id m5 stays in the window
        Publish("s.4", _hdr(Nats_Rollup="sub"), b"rolled", ts + 200),
        Publish("s.4", _hdr(Nats_Msg_Id="m9"), b"last one", ts + 201),
        Publish("s.ttl2", _hdr(Nats_TTL="3s"), b"expires at 10s", ts + 202),
    ]
    return ops


def _after(base: int) -> list[groupops.Op]:
    """After both replicas have the same state: outcomes that depend on the window, on the
    last sequence and message id, on the per-subject limit and on TTLs."""
    ts = base + 20 * SECOND
    return [
        Expire(ts),  # s.ttl2's TTL was raised to the marker TTL: still there
        Publish("s.1", _hdr(Nats_Msg_Id="m1"), b"dup of m1", ts),  # duplicate
        Publish("s.x", _hdr(Nats_Msg_Id="m5"), b"dup of a deleted one", ts + 1),  # duplicate
        Publish("s.x", _hdr(Nats_Expected_Last_Msg_Id="m9"), b"wrong id?", ts + 2),
        Publish("s.x", _hdr(Nats_Expected_Last_Sequence="1"), b"wrong seq", ts + 3),
        Publish("s.bulk.3", b"", b"limit drops the oldest", ts + 4),
        Publish("s.bulk.3", _hdr(Nats_Expected_Last_Subject_Sequence="1"), b"no", ts + 5),
        Publish("s.y", _hdr(Nats_Msg_Id="m10", Nats_TTL="1s"), b"ttl", ts + 6),
        Expire(ts + 30 * SECOND),  # s.y's TTL (raised to 10s), the markers' own TTLs
        Publish("s.z", _hdr(Nats_Msg_Id="m10"), b"m10 still in the window", ts + 31 * SECOND),
        Purge("s.bulk.>", 0, 1),
        Publish("s.z", _hdr(Nats_Msg_Id="m1"), b"m1 outside the window", ts + 90 * SECOND),
    ]


def _apply(stream: Stream, ops: list[groupops.Op]) -> list[groupops.Outcome]:
    return [groupops.apply(stream, op) for op in ops]


def _snapshot_of(stream: Stream) -> dict[str, Any]:
    """Everything a later decision can depend on."""
    state = stream.state(deleted_details=True)
    msgs = []
    for seq in range(state.first_seq, state.last_seq + 1):
        msg = stream.store.load_msg(seq)
        if msg is not None:
            msgs.append((msg.seq, msg.subject, msg.hdr, msg.data, msg.ts))
    return {
        "state": state,
        "messages": msgs,
        "lseq": stream.lseq,
        "lmsgid": stream.lmsgid,
        "markers": sorted(stream.markers),
        "dedupe": stream.dedupe.entries(),
        "next_expiry": stream.store.next_expiry(),
        "subjects": stream.store.subject_state(">"),
    }


async def _write(chunks: AsyncIterator[bytes], path: Path) -> Path:
    with open(path, "wb") as fh:
        async for chunk in chunks:
            fh.write(chunk)
    return path


async def _install(stream: Stream, path: Path, tmp: Path, **kw: Any) -> groupsnapshot.Installed:
    directory = tmp / f"new-{time.monotonic_ns()}" if stream.config.storage == "file" else None
    return await groupsnapshot.install(stream, path, directory=directory, **kw)


async def test_snapshot_taken_while_applying_makes_an_identical_replica(
    pair: tuple[Stream, Stream, Path],
) -> None:
    a, b, tmp = pair
    before = _before(BASE)
    _apply(a, before)
    index = len(before)
    assert a.state().first_seq == 3 and a.markers  # the cases the snapshot must carry
    producer = groupsnapshot.SnapshotProducer(
        a, index, 2, chunk_size=1024, frame_size=1024, read_batch=16
    )
    chunks = producer.chunks()
    got = [await anext(chunks)]
    for _ in range(50):  # until the producer has read some messages
        if producer.read_up_to >= 20:
            break
        got.append(await anext(chunks))
    read = producer.read_up_to
    assert 20 <= read < a.state().last_seq  # messages still to read: the stream goes on
    ts = BASE + 15 * SECOND
    during = [
        Publish("s.new", b"", b"past the cut", ts),
        DeleteMsg(read, True),  # already read: B replays it
        Publish("s.bulk.0", b"", b"drops a bulk message already read", ts + 1),
        Purge("s.1", 0, 0),  # s.1: sequences 3 and 4, read
        Publish("s.new", _hdr(Nats_Msg_Id="m1"), b"dup during", ts + 2),
    ]
    outcomes = _apply(a, during)
    async for chunk in chunks:
        got.append(chunk)
    path = tmp / "snap"
    path.write_bytes(b"".join(got))

    installed = await _install(b, path, tmp, index=index, epoch=2)
    assert (installed.index, installed.epoch) == (index, 2)
    old = installed.swap_into(b)
    await old.aclose()
    assert _apply(b, during) == outcomes
    assert _snapshot_of(b) == _snapshot_of(a)
    after = _after(BASE)
    assert _apply(b, after) == _apply(a, after)
    assert _snapshot_of(b) == _snapshot_of(a)


async def test_the_snapshot_is_the_state_at_its_index(pair: tuple[Stream, Stream, Path]) -> None:
    """Without later ops: B equals A as A was at the index (messages past the cut dropped)."""
    a, b, tmp = pair
    _apply(a, _before(BASE))
    expected = _snapshot_of(a)
    chunks = groupsnapshot.produce(a, 7, 1)
    groupops.apply(a, Publish("s.later", b"", b"past the cut", BASE + 30 * SECOND))
    path = await _write(chunks, tmp / "snap")
    installed = await _install(b, path, tmp)
    await installed.swap_into(b).aclose()
    assert _snapshot_of(b) == expected


async def test_an_empty_stream_and_a_purged_one(pair: tuple[Stream, Stream, Path]) -> None:
    a, b, tmp = pair
    path = await _write(groupsnapshot.produce(a, 0, 0), tmp / "empty")
    installed = await _install(b, path, tmp)
    await installed.swap_into(b).aclose()
    assert _snapshot_of(b) == _snapshot_of(a)
    ops = [Publish("s.1", _hdr(Nats_Msg_Id=f"p{i}"), b"x", BASE + i) for i in range(5)]
    ops.append(Purge("", 0, 0))  # first_seq 6, nothing stored: last_seq 5
    assert _apply(a, ops) == _apply(b, ops)
    path = await _write(groupsnapshot.produce(a, 6, 0), tmp / "purged")
    installed = await _install(b, path, tmp)
    await installed.swap_into(b).aclose()
    state = b.state()
    assert (state.first_seq, state.last_seq, state.msgs) == (6, 5, 0)
    assert _snapshot_of(b) == _snapshot_of(a)
    more = [
        Publish("s.1", _hdr(Nats_Msg_Id="p2"), b"dup of a purged one", BASE + 10),
        Publish("s.1", _hdr(Nats_Expected_Last_Sequence="5"), b"six", BASE + 11),
    ]
    assert _apply(a, more) == _apply(b, more)
    assert _snapshot_of(b) == _snapshot_of(a)


async def test_a_message_removed_before_it_was_sent_is_kept_for_the_snapshot(
    pair: tuple[Stream, Stream, Path],
) -> None:
    """Messages at or below the cut that go before the producer read them (a delete, a limit,
    a subject purge) are copied as they go: the snapshot is still the state at its index."""
    a, b, tmp = pair
    _apply(a, _before(BASE))
    expected = _snapshot_of(a)
    producer = groupsnapshot.SnapshotProducer(
        a, 1, 1, chunk_size=1024, frame_size=1024, read_batch=16
    )
    chunks = producer.chunks()
    got = [await anext(chunks)]
    last = a.state().last_seq
    assert producer.read_up_to < last - 1
    _apply(a, [DeleteMsg(last, True), Purge("s.bulk.0", 0, 0)])
    async for chunk in chunks:
        got.append(chunk)
    assert producer.kept_total >= 2 and not producer.kept
    assert getattr(a.store, "before_remove", None) is None  # no longer watched
    path = tmp / "snap"
    path.write_bytes(b"".join(got))
    installed = await _install(b, path, tmp)
    await installed.swap_into(b).aclose()
    assert _snapshot_of(b) == expected


async def test_a_bulk_drop_before_the_messages_were_sent_fails_the_snapshot(
    pair: tuple[Stream, Stream, Path],
) -> None:
    """A purge of everything does not copy each message: the state would never have
    existed, so the producer stops rather than send it (the core asks again)."""
    a, _, _ = pair
    _apply(a, _before(BASE))
    producer = groupsnapshot.SnapshotProducer(
        a, 1, 1, chunk_size=1024, frame_size=1024, read_batch=16
    )
    chunks = producer.chunks()
    await anext(chunks)
    assert producer.read_up_to < a.state().last_seq
    groupops.apply(a, Purge("", 0, 0))
    with pytest.raises(SnapshotOverrun, match="removed before the snapshot"):
        for _ in range(100):
            await anext(chunks)


async def test_a_damaged_snapshot_is_refused_and_changes_nothing(
    pair: tuple[Stream, Stream, Path],
) -> None:
    a, b, tmp = pair
    _apply(a, _before(BASE))
    _apply(b, _before(BASE)[:5])
    data = (await _write(groupsnapshot.produce(a, 9, 1), tmp / "good")).read_bytes()
    plain = bytearray()
    writer = ArchiveWriter(plain.extend)
    writer.write_stream(archived_stream(a))  # a backup: no replica state
    writer.close()
    middle = bytearray(data)
    middle[len(data) // 2] ^= 0xFF
    cases = {
        "truncated": (data[: len(data) - 100], "invalid archive: archive ends"),
        "corrupt": (bytes(middle), "invalid archive: .*checksum mismatch"),
        "not an archive": (b"hello", "invalid archive"),
        "a backup": (bytes(plain), "not a replica's snapshot"),
        "another index": (data, r"snapshot is of entry 9 \(epoch 1\), not 8 \(epoch 1\)"),
    }
    untouched = _snapshot_of(b)
    store = b.store
    for name, (body, error) in cases.items():
        path = tmp / name
        path.write_bytes(body)
        directory = tmp / f"new-{name}"
        with pytest.raises(SnapshotError, match=error):
            await groupsnapshot.install(b, path, index=8, epoch=1, directory=directory)
        assert b.store is store and _snapshot_of(b) == untouched, name
        assert not (directory / "msgs").exists() or not any((directory / "msgs").iterdir())
    more = _before(BASE)[5:]
    assert _apply(b, more)  # B still works


class _LoopLag:
    """The longest the event loop went without running this probe (a 1 ms sleep loop)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        last = time.perf_counter()
        for _ in range(600_000):  # bounded: ends with the test (cancelled) long before
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last)
            last = now

    async def stop(self) -> float:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self.worst


@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_throughput_of_100k_small_messages(tmp_path: Path, storage: str) -> None:
    """Measured, not asserted: produce + install of 100,000 16-byte messages, and the
    longest the loop was held meanwhile."""
    srv_a, a = await _server(tmp_path, "x", storage, per_subject=-1)
    srv_b, b = await _server(tmp_path, "y", storage, per_subject=-1)
    try:
        payload = bytes(16)
        for i in range(100_000):
            a.store.store_msg(f"s.{i % 100}", b"", payload, ts_ns=BASE + i)
        a.lseq = a.store.state().last_seq
        lag = _LoopLag()
        began = time.perf_counter()
        path = await _write(groupsnapshot.produce(a, 1, 1), tmp_path / "snap")
        produced = time.perf_counter()
        installed = await _install(b, path, tmp_path)
        await installed.swap_into(b).aclose()
        ended = time.perf_counter()
        worst = await lag.stop()
        assert _snapshot_of(b) == _snapshot_of(a)
        size = path.stat().st_size
        print(
            f"\n{storage} 100k x 16 B: produce {produced - began:.2f}s "
            f"({100_000 / (produced - began):,.0f} msgs/s, {size / 1e6:.1f} MB), "
            f"install {ended - produced:.2f}s ({100_000 / (ended - produced):,.0f} msgs/s), "
            f"loop held at most {worst * 1000:.0f} ms"
        )
    finally:
        await srv_a.shutdown()
        await srv_b.shutdown()


async def test_a_snapshot_carries_a_config_updated_before_its_index(
    pair: tuple[Stream, Stream, Path],
) -> None:
    """A replica that missed a STREAM.UPDATE (here: max_msgs_per_subject raised from 3 to 5,
    so A holds 5 messages of one subject) takes the config with the snapshot: installed under
    its old config, 2 of them would go and the install would fail its count."""
    a, b, tmp = pair
    raw = config_to_json(a.config, dynamic_metadata=False) | {"max_msgs_per_subject": 5}
    groupops.apply(a, groupops.UpdateConfig(orjson.dumps(raw)))
    _apply(a, [Publish("s.five", b"", f"m{i}".encode(), BASE + i) for i in range(5)])
    assert a.state().msgs == 5
    path = await _write(groupsnapshot.produce(a, 6, 1), tmp / "snap")
    installed = await _install(b, path, tmp)
    await installed.swap_into(b).aclose()
    assert b.config.max_msgs_per_subject == 5
    assert _snapshot_of(b) == _snapshot_of(a)
