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
    BASE,
    FLUSH_BYTES,
    HEADER_SIZE,
    CorruptLog,
    LogFailed,
    ReplicationLog,
    decode,
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


async def _power_cut_round(tmp_path: Path, seed: int, rebases: bool = False) -> None:
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
        nonlocal epoch, durable, model
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
            elif rebases and r < 0.13:
                # A snapshot at `index`, which the log's entries up to it stand for here.
                index = rng.randint(log.first_index, len(model) + 10)
                epoch += 1
                log.rebase(index, epoch)
                versions.append(list(model))
                model = [*model[: index - 1], *entries(len(model) + 1, index - 1, epoch)]
                model.append(Entry(index, epoch, b"base"))
                durable = []  # until a sync: the log as it was, or the rebased one
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
        assert any(
            len(v) >= first - 1 and again.base_epoch == v[first - 2].epoch
            for v in [model, *(versions if rebases else [])]
        ), f"seed {seed}: base epoch"
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


@pytest.mark.parametrize("seed", range(int(os.environ.get("WAL_POWER_CUTS", "40"))))
async def test_power_cut_with_rebases_keeps_every_synced_entry(tmp_path: Path, seed: int) -> None:
    await _power_cut_round(tmp_path, seed, rebases=True)


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


# ------------------------------------------------------------------ rebase: a snapshot past the log
#
# The owner installed a snapshot at `index` (entry of `epoch`) that its log does not hold: the
# log drops every entry and goes on after `index`, exactly as a log compacted up to there.


def first_records(path: Path) -> list[tuple[Entry, int, int, int]]:
    """The first segment's first two records: (entry, prev_epoch, end, flags) each."""
    data = (path / segments(path)[0]).read_bytes()
    base = decode(data, 0)
    assert base is not None
    after = decode(data, base[2])
    assert after is not None
    return [base, after]


def assert_rebased(log: ReplicationLog, index: int, epoch: int) -> None:
    assert log.first_index == index + 1 and log.base_epoch == epoch
    assert log.epoch_at(index) == epoch and log.epoch_at(index - 1) == 0


async def test_rebase_an_empty_log(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path)
    log.rebase(100, 3)
    assert_rebased(log, 100, 3)
    assert log.last_index == 100
    with pytest.raises(ValueError):
        log.append([Entry(100, 3, b"at the base")])
    with pytest.raises(ValueError):
        log.append([Entry(101, 2, b"older than the base")])
    assert await log.sync() == 100
    # Reopened with nothing after the base: as a log compacted up to 100.
    log, got = await reopen(log, tmp_path)
    assert got == [] and log.last_index == 100
    assert_rebased(log, 100, 3)
    log.append(entries(101, 105, epoch=3))
    log, got = await reopen(log, tmp_path)
    assert got == entries(101, 105, epoch=3)
    assert_rebased(log, 100, 3)
    (base, _, _, flags), (entry, prev, _, entry_flags) = first_records(tmp_path)
    assert (base.index, base.epoch, base.op, flags) == (100, 3, b"", BASE)
    assert entry == Entry(101, 3, b"op-101-") and entry_flags == 0
    assert prev == 3  # the first entry chains to the base's epoch
    await log.aclose()


async def make_old_log(path: Path, last: int = 40, segment_bytes: int = 200) -> list[int]:
    log, _ = ReplicationLog.open(path, segment_bytes=segment_bytes)
    for i in range(1, last + 1):
        log.append(entries(i, i))
        await log.sync()
    await log.aclose()
    return [int(name[:-4]) for name in segments(path)]


REBASE_AT = {
    "inside": lambda firsts: firsts[2] + 1,  # entries after it, in its segment and later ones
    "before_a_segment": lambda firsts: firsts[2] - 1,  # the new segment's name was taken
    "past_the_end": lambda firsts: 60,
}


@pytest.mark.parametrize("where", sorted(REBASE_AT))
async def test_rebase_a_log_with_entries_before_and_after(tmp_path: Path, where: str) -> None:
    firsts = await make_old_log(tmp_path)
    assert len(firsts) >= 5
    index = REBASE_AT[where](firsts)
    io = OpsIO()
    log, _ = ReplicationLog.open(tmp_path, io=io, segment_bytes=200)
    log.append(entries(41, 45))  # unsynced: dropped with the rest
    io.ops.clear()
    log.rebase(index, 2)
    assert io.ops == []  # nothing on the event loop: files come and go in the sync round
    assert_rebased(log, index, 2)
    assert log.last_index == index
    want = entries(index + 1, index + 30, epoch=2)
    for e in want:  # appends after it, across several new segments
        log.append([e])
        await log.sync()
    names = segments(tmp_path)
    assert int(names[0][:-4]) == index + 1 and len(names) > 2
    # The old segments went only once the new one was durable, those named after the base
    # before the new one was created (its name may have been one of theirs).
    new = f"{index + 1:020d}.log"
    created = io.ops.index(("open", new))
    made_durable = max(io.ops.index(("fsync", new)), io.ops.index(("fsync_dir", ""), created))
    for first in firsts:
        name = f"{first:020d}.log"
        if name == new:
            assert ("unlink", name) in io.ops[:created]
        elif first > index:
            assert io.ops.index(("unlink", name)) < created, name
        else:
            assert io.ops.index(("unlink", name)) > made_durable, name
    log, got = await reopen(log, tmp_path, segment_bytes=200)
    assert got == want
    assert_rebased(log, index, 2)
    await log.aclose()


async def test_an_unsynced_rebase_is_undone_by_a_crash(tmp_path: Path) -> None:
    await make_old_log(tmp_path, last=40)
    log, _ = ReplicationLog.open(tmp_path, segment_bytes=200)
    log.rebase(30, 2)
    log.append(entries(31, 33, epoch=2))
    before = {name: (tmp_path / name).read_bytes() for name in segments(tmp_path)}
    log.close()  # a crash before any sync round: the log as it was
    await asyncio.sleep(0.05)  # a round the rebase kicked does nothing once closed
    assert {name: (tmp_path / name).read_bytes() for name in segments(tmp_path)} == before
    log, got = ReplicationLog.open(tmp_path, segment_bytes=200)
    assert got == entries(1, 40) and log.first_index == 1
    # The owner restarts from its snapshot: the log does not hold (30, 2), so it is rebased
    # again and nothing of it follows the snapshot.
    assert log.after_snapshot(30, 2, got) == []
    assert_rebased(log, 30, 2)
    log.append(entries(31, 33, epoch=2))
    log, got = await reopen(log, tmp_path, segment_bytes=200)
    assert got == entries(31, 33, epoch=2)
    assert_rebased(log, 30, 2)
    await log.aclose()


async def test_after_snapshot_keeps_what_follows_the_snapshot(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path)
    log.append(entries(1, 10) + entries(11, 20, epoch=2))
    await log.sync()
    got = entries(1, 10) + entries(11, 20, epoch=2)
    assert log.after_snapshot(0, 0, got) == got  # no snapshot: the whole log
    assert log.after_snapshot(15, 2, got) == got[15:]  # it holds (15, 2): kept
    assert log.first_index == 1 and log.last_index == 20
    log.compact(15)  # one segment: nothing dropped, but the answer is the same
    assert log.after_snapshot(12, 1, got) == []  # (12, 1) is not its entry: rebased
    assert_rebased(log, 12, 1)
    assert log.last_index == 12
    log.append(entries(13, 14, epoch=4))
    log, got = await reopen(log, tmp_path)
    assert got == entries(13, 14, epoch=4)
    assert log.after_snapshot(12, 1, got) == got  # its base is the snapshot's entry
    assert log.after_snapshot(13, 4, got) == got[1:]
    with pytest.raises(ValueError):
        log.after_snapshot(11, 1, got)  # compacted past the snapshot: the owner's bug
    await log.aclose()


async def test_rebase_twice(tmp_path: Path) -> None:
    await make_old_log(tmp_path, last=40)
    log, _ = ReplicationLog.open(tmp_path, segment_bytes=200)
    log.rebase(30, 2)
    log.append(entries(31, 35, epoch=2))
    log.rebase(50, 3)  # before any round: the first never reaches the disk
    log.append(entries(51, 52, epoch=3))
    assert await log.sync() == 52
    log, got = await reopen(log, tmp_path, segment_bytes=200)
    assert got == entries(51, 52, epoch=3)
    assert_rebased(log, 50, 3)
    for i in range(53, 90):  # several segments of the rebased log
        log.append(entries(i, i, epoch=3))
        await log.sync()
    log.rebase(70, 4)  # inside the rebased log, after a restart
    log.append(entries(71, 71, epoch=4))
    assert await log.sync() == 71
    assert int(segments(tmp_path)[0][:-4]) == 71
    log, got = await reopen(log, tmp_path, segment_bytes=200)
    assert got == entries(71, 71, epoch=4)
    assert_rebased(log, 70, 4)
    await log.aclose()


async def test_rebase_then_compact(tmp_path: Path) -> None:
    log, _ = ReplicationLog.open(tmp_path, segment_bytes=200)
    log.append(entries(1, 5))
    log.rebase(30, 2)
    log.compact(30)  # nothing to drop: the base is the start
    for i in range(31, 81):
        log.append(entries(i, i, epoch=2 + i // 60))
        await log.sync()
    log.compact(65)  # drops the segment that starts with the base
    await log.sync()
    first = log.first_index
    assert 31 < first <= 65
    assert log.base_epoch == 2 + (first - 1) // 60
    log, got = await reopen(log, tmp_path, segment_bytes=200)
    assert [e.index for e in got] == list(range(first, 81))
    assert log.first_index == first and log.base_epoch == 2 + (first - 1) // 60
    await log.aclose()


async def test_truncate_after_a_rebase_never_goes_below_the_base(tmp_path: Path) -> None:
    # The core never asks (its base is committed and applied): such a truncate is a bug, and
    # it raises ValueError before touching anything, as below a compacted log's base.
    log, _ = ReplicationLog.open(tmp_path)
    log.append(entries(1, 5))
    log.rebase(30, 2)
    log.truncate(30)  # at the base, nothing after it: nothing to do
    with pytest.raises(ValueError):
        log.truncate(29)
    log.append(entries(31, 35, epoch=2))
    log.truncate(32)
    with pytest.raises(ValueError):
        log.truncate(3)
    assert log.last_index == 32
    assert await log.sync() == 32
    log.truncate(30)  # every entry after the base, synced ones too
    log.append(entries(31, 31, epoch=5))
    log, got = await reopen(log, tmp_path)
    assert got == entries(31, 31, epoch=5)
    assert_rebased(log, 30, 2)
    await log.aclose()


class OpsIO(FileIO):
    """Logs every file operation by file name, in the order they happen."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str]] = []
        self.paths: dict[int, str] = {}

    def open_rw(self, path: str, truncate: bool = False) -> int:
        fd = super().open_rw(path, truncate)
        self.paths[fd] = os.path.basename(path)
        self.ops.append(("open", self.paths[fd]))
        return fd

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        self.ops.append(("write", self.paths[fd]))
        super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        self.ops.append(("fsync", self.paths[fd]))
        super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        self.ops.append(("fsync_dir", ""))
        super().fsync_dir(path)

    def truncate(self, path: str, size: int) -> None:
        self.ops.append(("truncate", os.path.basename(path)))
        super().truncate(path, size)

    def unlink(self, path: str) -> None:
        self.ops.append(("unlink", os.path.basename(path)))
        super().unlink(path)


class CutIO(DeadProcessIO):
    """Cuts the power right before its `cut`-th write, fsync, create, truncate or unlink
    (counted from `arm()`): every point of a run, one run per point."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        super().__init__(root, rng)
        self.cut: int | None = None
        self.count = 0

    def arm(self, cut: int) -> None:
        self.cut, self.count = cut, 0

    def _tick(self) -> None:
        if self.cut is not None and not self.dead:
            if self.count == self.cut:
                self.crash(torn=True)
            self.count += 1

    def open_rw(self, path: str, truncate: bool = False) -> int:
        self._tick()
        return super().open_rw(path, truncate)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        self._tick()
        super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        self._tick()
        super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        self._tick()
        super().fsync_dir(path)

    def truncate(self, path: str, size: int) -> None:
        self._tick()
        super().truncate(path, size)

    def unlink(self, path: str) -> None:
        self._tick()
        super().unlink(path)


async def _rebase_cut_at(path: Path, index: int, cut: int, seed: int) -> bool:
    """One run: a rebase at `index` (epoch 2) of `path`'s log, appends after it and syncs,
    the power cut before the `cut`-th operation. Returns whether the cut came (else the run
    was past the last point)."""
    io = CutIO(path, random.Random(seed))
    log, old = ReplicationLog.open(path, io=io, segment_bytes=200)
    log.append(entries(41, 43, tag=b"unsynced"))
    io.arm(cut)
    log.rebase(index, 2)
    after = entries(index + 1, index + 20, epoch=2)
    confirmed = 0  # entries after the base that a sync confirmed before the cut
    for k in range(0, 20, 4):
        log.append(after[k : k + 4])
        await log.sync()
        if io.dead:
            break
        confirmed = k + 4
    came = io.dead
    log.close()
    again, got = ReplicationLog.open(path, segment_bytes=200)
    where = f"index {index}, cut {cut}, seed {seed}: {again.recovery_report}"
    if again.first_index == index + 1:  # the rebased log
        assert again.base_epoch == 2, where
        assert got == after[: len(got)] and len(got) >= confirmed, where
        assert again.after_snapshot(index, 2, got) == got, where
    else:  # the log as it was (its entries after the base may be gone): never a mix
        assert confirmed == 0, where
        assert again.first_index == 1, where
        assert got == old[: len(got)] and len(got) >= min(index, len(old)), where
        assert again.after_snapshot(index, 2, got) == [], where
        assert_rebased(again, index, 2)
    # Either way the owner goes on after its snapshot.
    again.append(entries(again.last_index + 1, index + 25, epoch=2))
    again, got = await reopen(again, path, segment_bytes=200)
    assert again.first_index == index + 1 and [e.index for e in got][-1] == index + 25, where
    await again.aclose()
    return came


@pytest.mark.parametrize("where", sorted(REBASE_AT))
async def test_power_cut_at_every_point_of_a_rebase(tmp_path: Path, where: str) -> None:
    base = tmp_path / "base"
    firsts = await make_old_log(base)
    index = REBASE_AT[where](firsts)
    for cut in range(300):
        run = tmp_path / f"cut{cut}"
        run.mkdir()
        for name in segments(base):
            (run / name).write_bytes((base / name).read_bytes())
        if not await _rebase_cut_at(run, index, cut, seed=cut):
            break
    else:
        pytest.fail("more than 300 cut points")
    assert cut > 10  # the runs went past every point
