"""The replication log on disk (`headwater.server.replicated.wal`): round trips, truncation,
compaction, group commit, power failures through `PowerCutIO`, corruption and failed fsyncs."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from pathlib import Path

import pytest
from engine.store.conftest import PowerCutIO

from headwater.server.replicated.messages import Entry
from headwater.server.replicated.wal import (
    FLUSH_BYTES,
    HEADER_SIZE,
    CorruptLog,
    LogFailed,
    ReplicationLog,
    group_log_dir,
)
from headwater.server.store.file.fileio import FileIO


def entries(first: int, last: int, epoch: int = 1, tag: bytes = b"") -> list[Entry]:
    return [Entry(i, epoch, b"op-%d-" % i + tag) for i in range(first, last + 1)]


def segments(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.suffix == ".log")


async def reopen(log: ReplicationLog, path: Path, **kw: object) -> tuple[ReplicationLog, list]:
    await log.aclose()
    return ReplicationLog.open(path, **kw)  # type: ignore[arg-type]


async def test_round_trip_and_empty_log(tmp_path: Path) -> None:
    path = group_log_dir(tmp_path, "ORDERS")
    assert path == tmp_path / "ORDERS" / "group"
    log, got = ReplicationLog.open(path)
    assert got == [] and log.first_index == 1 and log.last_index == 0
    assert await log.sync() == 0
    want = [*entries(1, 50), Entry(51, 2, b""), Entry(52, 2, bytes(range(256)))]
    log.append(want[:20])
    log.append(want[20:])
    assert await log.sync() == 52
    log, got = await reopen(log, path)
    assert got == want
    assert log.last_index == 52 and log.durable_index == 52
    log.append([Entry(53, 3, b"after")])
    log, got = await reopen(log, path)
    assert got == [*want, Entry(53, 3, b"after")]
    await log.aclose()


async def test_append_must_continue_the_log(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path)
    with pytest.raises(ValueError):
        log.append([Entry(2, 1, b"x")])
    log.append(entries(1, 3, epoch=5))
    with pytest.raises(ValueError):
        log.append([Entry(4, 4, b"older epoch")])
    await log.aclose()


@pytest.mark.parametrize("segment_bytes", [1 << 20, 300])
async def test_truncate_then_append_lands_after_the_cut(tmp_path: Path, segment_bytes: int) -> None:
    log, _ = ReplicationLog.open(tmp_path, segment_bytes=segment_bytes)
    log.append(entries(1, 30))
    assert await log.sync() == 30
    log.append(entries(31, 40))  # unsynced, then cut and replaced
    log.truncate(25)
    assert log.durable_index == 25
    log.append(entries(26, 35, epoch=2, tag=b"new"))
    want = entries(1, 25) + entries(26, 35, epoch=2, tag=b"new")
    assert await log.sync() == 35
    log, got = await reopen(log, tmp_path, segment_bytes=segment_bytes)
    assert got == want
    # Truncate right after a reopen (the cut segment's file is closed), and to nothing.
    log.truncate(12)
    log, got = await reopen(log, tmp_path, segment_bytes=segment_bytes)
    assert got == want[:12]
    log.truncate(0)
    log.append(entries(1, 3, epoch=7))
    log, got = await reopen(log, tmp_path, segment_bytes=segment_bytes)
    assert got == entries(1, 3, epoch=7)
    await log.aclose()


async def test_truncate_across_segments_deletes_them(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path, segment_bytes=200)
    for i in range(1, 41):
        log.append(entries(i, i))
        await log.sync()
    assert len(segments(tmp_path)) >= 5
    log.truncate(7)
    assert await log.sync() == 7
    assert max(int(n[:-4]) for n in segments(tmp_path)) <= 7
    log.append(entries(8, 9, epoch=2))
    log, got = await reopen(log, tmp_path, segment_bytes=200)
    assert got == entries(1, 7) + entries(8, 9, epoch=2)
    await log.aclose()


async def test_compaction_keeps_indexes_absolute(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path, segment_bytes=200)
    for i in range(1, 61):
        log.append(entries(i, i, epoch=1 + i // 20))
        await log.sync()
    before = segments(tmp_path)
    log.compact(33)
    await log.sync()
    after = segments(tmp_path)
    assert len(after) < len(before)
    first = log.first_index
    assert 1 < first <= 33  # whole segments only, and the first kept entry is applied
    assert log.base_epoch == 1 + (first - 1) // 20
    log, got = await reopen(log, tmp_path, segment_bytes=200)
    assert [e.index for e in got] == list(range(first, 61))
    assert got[0].epoch == 1 + first // 20
    assert log.first_index == first and log.base_epoch == 1 + (first - 1) // 20
    with pytest.raises(ValueError):
        log.truncate(first - 2)  # compacted entries are committed: never cut
    log.truncate(50)
    log.append(entries(51, 52, epoch=9))
    log.compact(1000)  # the last segment always stays
    log, got = await reopen(log, tmp_path, segment_bytes=200)
    assert got and got[-1] == Entry(52, 9, b"op-52-")
    await log.aclose()


async def test_concurrent_syncs_share_fsyncs(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path)
    acked: list[int] = []

    async def writer(w: int) -> None:
        for _ in range(50):
            i = log.last_index + 1
            log.append([Entry(i, 1, b"w%d" % w)])
            assert await log.sync() >= i
            acked.append(i)

    await asyncio.gather(*(writer(w) for w in range(8)))
    assert sorted(acked) == list(range(1, 401))
    assert log.fsync_rounds < 200  # 400 syncs, far fewer rounds
    await log.aclose()


# ------------------------------------------------------------------ corruption


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


async def test_flipped_bit_in_synced_middle_is_refused(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path)
    log.append(entries(1, 20))
    await log.sync()
    await log.aclose()
    (seg,) = segments(tmp_path)
    flip(tmp_path / seg, HEADER_SIZE + 2)  # the first record's op
    with pytest.raises(CorruptLog) as err:
        ReplicationLog.open(tmp_path)
    assert seg in str(err.value) and "offset 0" in str(err.value)
    assert (tmp_path / seg).stat().st_size > 0  # nothing was cut


async def test_flipped_bit_in_unsynced_tail_is_cut(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path)
    log.append(entries(1, 20))
    await log.sync()
    log.append([Entry(21, 1, bytes(FLUSH_BYTES))])  # big enough to be written to the OS
    log.close()  # a crash: entry 21 never synced
    (seg,) = segments(tmp_path)
    size = (tmp_path / seg).stat().st_size
    flip(tmp_path / seg, size - 1)
    log, got = ReplicationLog.open(tmp_path)
    assert got == entries(1, 20)
    assert "cut" in log.recovery_report
    log.append(entries(21, 22, epoch=2))
    log, got = await reopen(log, tmp_path)
    assert got == entries(1, 20) + entries(21, 22, epoch=2)
    await log.aclose()


async def test_torn_tail_is_cut_and_later_segments_dropped(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path)
    log.append(entries(1, 10))
    await log.aclose()
    (seg,) = segments(tmp_path)
    data = (tmp_path / seg).read_bytes()
    (tmp_path / seg).write_bytes(data[:-5])
    log, got = ReplicationLog.open(tmp_path)
    assert got == entries(1, 9)
    await log.aclose()
    assert len((tmp_path / seg).read_bytes()) == len(data) - HEADER_SIZE - len(b"op-10-")


# ------------------------------------------------------------------ failures and power cuts


class FailingFsyncIO(FileIO):
    def __init__(self) -> None:
        self.fail = False

    def fsync(self, fd: int) -> None:
        if self.fail:
            raise OSError(5, "Input/output error")
        super().fsync(fd)


async def test_failed_fsync_poisons_the_log(tmp_path: Path) -> None:
    io = FailingFsyncIO()
    log, _ = ReplicationLog.open(tmp_path, io=io)
    log.append(entries(1, 5))
    assert await log.sync() == 5
    log.append(entries(6, 6))
    io.fail = True
    with pytest.raises(LogFailed):
        await log.sync()
    io.fail = False  # a later fsync that succeeds proves nothing: still poisoned
    with pytest.raises(LogFailed):
        await log.sync()
    with pytest.raises(LogFailed):
        log.append(entries(7, 7))
    with pytest.raises(LogFailed):
        log.truncate(3)
    with pytest.raises(LogFailed):
        log.compact(3)
    log.close()
    log, got = ReplicationLog.open(tmp_path)  # the server reopens it
    assert got[:5] == entries(1, 5)
    await log.aclose()


class DeadProcessIO(PowerCutIO):
    """``PowerCutIO`` whose process also dies with the power: ``open_rw`` after ``crash()``
    must not create a file in the directory the next start recovers (the model's does)."""

    def open_rw(self, path: str, truncate: bool = False) -> int:
        if self.dead:
            return os.open(os.devnull, os.O_RDWR)
        return super().open_rw(path, truncate)


async def _power_cut_round(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / f"run{seed}"
    path.mkdir()
    seg_bytes = rng.choice([400, 4000, 1 << 20])
    if rng.random() < 0.5:  # an existing log
        log, _ = ReplicationLog.open(path, segment_bytes=seg_bytes)
        log.append(entries(1, rng.randint(1, 30)))
        await log.aclose()
    io = DeadProcessIO(path, rng)
    log, recovered = ReplicationLog.open(path, io=io, segment_bytes=seg_bytes)
    model: list[Entry] = list(recovered)  # the log as appended (truncations applied)
    durable: list[Entry] = list(recovered)  # what sync() confirmed, less what was cut since
    versions: list[list[Entry]] = []  # the log before each truncate: an unsynced cut may undo
    epoch = recovered[-1].epoch if recovered else 1
    crashed = asyncio.Event()

    async def writer() -> None:
        nonlocal epoch, durable
        for _ in range(400):
            if crashed.is_set():
                return
            r = rng.random()
            if r < 0.08 and len(model) > log.first_index - 1:
                # Synced entries may be cut too (an uncommitted tail of an older epoch), never
                # compacted ones (those were committed and applied).
                after = rng.randint(max(log.first_index - 1, len(model) - 12), len(model) - 1)
                log.truncate(after)
                versions.append(list(model))
                del model[after:]
                del durable[after:]
                epoch += 1
            elif r < 0.1:
                log.compact(rng.randint(0, len(durable)))
            else:
                new = [
                    Entry(len(model) + k + 1, epoch, rng.randbytes(rng.choice([0, 16, 100])))
                    for k in range(rng.randint(1, 5))
                ]
                log.append(new)
                model.extend(new)
            if rng.random() < 0.5:
                index = await log.sync()
                if io.dead:
                    return  # the process died before it could tell anyone
                assert index == len(model)
                durable = list(model)
            else:
                await asyncio.sleep(0)

    async def killer() -> None:
        for _ in range(rng.randint(1, 60)):
            await asyncio.sleep(0)
        if rng.random() < 0.5:
            await asyncio.sleep(rng.random() * 0.01)
        io.crash(torn=True)
        crashed.set()

    await asyncio.gather(killer(), writer())
    await asyncio.sleep(0.02)  # an fsync in flight finishes (as a no-op)
    log.close()
    again, got = ReplicationLog.open(path, segment_bytes=seg_bytes)
    first = again.first_index
    assert [e.index for e in got] == list(range(first, first + len(got))), f"seed {seed}"
    assert first <= len(durable) + 1 or not durable, f"seed {seed}: compacted past durable"
    if first > 1:  # nothing at or below first - 1 was ever cut: the model still holds it
        assert again.base_epoch == model[first - 2].epoch, f"seed {seed}: base epoch"
    # Every confirmed entry is back, intact and in order; the whole is a prefix of the log as
    # it was at some point (nothing from after a torn record, nothing invented or mixed).
    kept = [e for e in durable if e.index >= first]
    assert got[: len(kept)] == kept, f"seed {seed}: lost {again.recovery_report}"
    assert any(got == v[first - 1 : first - 1 + len(got)] for v in [model, *versions]), (
        f"seed {seed}: not a prefix of any state of the log"
    )
    await again.aclose()


@pytest.mark.parametrize("seed", range(int(os.environ.get("WAL_POWER_CUTS", "40"))))
async def test_power_cut_keeps_every_synced_entry(tmp_path: Path, seed: int) -> None:
    await _power_cut_round(tmp_path, seed)


class RecordingIO(FileIO):
    """Logs writes and fsyncs by file name, in the order they happen."""

    def __init__(self, delay: float = 0.0) -> None:
        self.ops: list[tuple[str, str]] = []
        self.paths: dict[int, str] = {}
        self.delay = delay

    def open_rw(self, path: str, truncate: bool = False) -> int:
        fd = super().open_rw(path, truncate)
        self.paths[fd] = os.path.basename(path)
        return fd

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        self.ops.append(("write", self.paths[fd]))
        super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        if self.delay:
            time.sleep(self.delay)
        self.ops.append(("fsync", self.paths[fd]))
        super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        self.ops.append(("fsync_dir", ""))
        super().fsync_dir(path)


async def test_recovered_log_is_fsynced_before_open_returns(tmp_path: Path) -> None:
    # After a process crash the log may be only in the page cache; the core counts what it
    # recovers as durable, so open must make it so.
    log, _ = ReplicationLog.open(tmp_path)
    log.append(entries(1, 1))
    await log.sync()
    log.append([Entry(2, 1, bytes(FLUSH_BYTES))])  # written to the OS, never synced
    log.close()
    io = RecordingIO()
    log, got = ReplicationLog.open(tmp_path, io=io)
    assert [e.index for e in got] == [1, 2]
    (seg,) = segments(tmp_path)
    assert ("fsync", seg) in io.ops and ("fsync_dir", "") in io.ops
    await log.aclose()


async def test_new_segment_is_written_only_after_older_ones_are_fsynced(tmp_path: Path) -> None:
    # Otherwise writeback could put a later segment's records on disk before an earlier
    # segment's tail, and a power cut would leave valid records after a torn one.
    io = RecordingIO()
    log, _ = ReplicationLog.open(tmp_path, io=io, segment_bytes=300)
    for i in range(1, 61):
        log.append(entries(i, i))
        if i % 3 == 0:
            await log.sync()
    await log.aclose()
    names = segments(tmp_path)
    assert len(names) > 5
    for older, newer in itertools.pairwise(names):
        first_write = io.ops.index(("write", newer))
        last_write = max(k for k, op in enumerate(io.ops) if op == ("write", older))
        synced = [k for k, op in enumerate(io.ops) if op == ("fsync", older) and k > last_write]
        assert synced and synced[0] < first_write, (older, newer)


async def test_sync_keeps_the_event_loop_free(tmp_path: Path) -> None:
    io = RecordingIO(delay=0.3)
    log, _ = ReplicationLog.open(tmp_path, io=io)
    io.ops.clear()
    log.append(entries(1, 10))
    loop = asyncio.get_running_loop()
    lags: list[float] = []

    async def ticker() -> None:
        for _ in range(40):
            t = loop.time()
            await asyncio.sleep(0.01)
            lags.append(loop.time() - t - 0.01)

    tick = asyncio.ensure_future(ticker())
    assert await log.sync() == 10
    await tick
    assert ("fsync", segments(tmp_path)[0]) in io.ops
    assert max(lags) < 0.1
    await log.aclose()


class FailingWriteIO(FileIO):
    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        raise OSError(28, "No space left on device")


async def test_failed_write_poisons_the_log(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path, io=FailingWriteIO())
    log.append(entries(1, 1))
    with pytest.raises(LogFailed):
        await log.sync()  # the round's write fails
    with pytest.raises(LogFailed):
        log.append(entries(2, 2))
    log.close()
    log, _ = ReplicationLog.open(tmp_path)
    log.append(entries(1, 10))
    await log.sync()
    log.io = FailingWriteIO()
    with pytest.raises(LogFailed):
        log.append([Entry(11, 1, bytes(FLUSH_BYTES))])  # flushed at once: the write fails
    with pytest.raises(LogFailed):
        await log.sync()
    log.close()


async def test_sync_answers_for_the_log_at_the_call(tmp_path: Path) -> None:
    # The runner checks sync() against the last index it appended before the call; a truncate
    # the core asks for meanwhile is the core's business (it discounts the cut entries).
    log, _ = ReplicationLog.open(tmp_path, io=RecordingIO(delay=0.05))
    log.append(entries(1, 10))
    waiting = asyncio.ensure_future(log.sync())
    await asyncio.sleep(0.01)  # the round is in flight
    log.truncate(6)
    assert await waiting == 10
    assert log.durable_index == 6
    log.append(entries(7, 8, epoch=2))
    assert await log.sync() == 8 and log.durable_index == 8
    await log.aclose()
