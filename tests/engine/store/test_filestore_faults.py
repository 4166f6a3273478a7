"""The file store under faults: removals and a kill, a power cut, a full disk, a failed fsync.

* A removal or purge reaches the OS on the next loop iteration, so a killed process keeps it
  (reopening a store that was never closed is what a restart after SIGKILL sees). Once its
  ``durable()`` returned it also survives a power cut. ``last_seq`` never goes backwards.
* A full disk refuses the append up front (the active block's space is reserved before the
  record is accepted), so a refused message leaves no trace. A purge frees the space.
* A failed fsync stops the store: no retry, every later write is refused until it is
  reopened from disk.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest

from headwater.server.store import StorageFull, StoreConfig, StoredMsg, StoreError
from headwater.server.store.file.fileio import FileIO
from headwater.server.store.file.store import FileStore


def cfg(path: Path, **kw: Any) -> StoreConfig:
    kw.setdefault("block_size", 2048)
    return StoreConfig(name="F", directory=path, **kw)


def fill(store: FileStore, n: int, subject: str = "s.a") -> None:
    for i in range(n):
        store.store_msg(subject if i % 2 else "s.b", b"", b"payload %03d" % i)


def blocks(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "msgs").glob("*.blk"))


# ------------------------------------------------------------------ removals and SIGKILL

REMOVALS = {
    "delete_tail": lambda s: [s.remove_msg(q) for q in range(46, 51)],
    "purge_all": lambda s: s.purge(),
    "purge_filter": lambda s: s.purge("s.a"),
    "purge_seq": lambda s: s.purge("", 48),
    "purge_keep": lambda s: s.purge("", 0, 3),
}


@pytest.mark.parametrize("case", list(REMOVALS))
async def test_removal_survives_kill_without_close(tmp_path: Path, case: str) -> None:
    store = FileStore(cfg(tmp_path))
    fill(store, 50)
    await store.durable()
    REMOVALS[case](store)
    before = store.state()
    await asyncio.sleep(0)  # one loop iteration: buffers reach the OS
    again = FileStore(cfg(tmp_path))  # the old one is abandoned, as by SIGKILL
    after = again.state()
    assert (after.last_seq, after.first_seq, after.msgs) == (
        before.last_seq,
        before.first_seq,
        before.msgs,
    )
    assert again.store_msg("s.a", b"", b"next")[0] == 51
    again.check()
    again.close()


async def test_erased_tail_keeps_last_seq_even_without_the_log(tmp_path: Path) -> None:
    """The erased records themselves prove their sequences were used."""
    store = FileStore(cfg(tmp_path, block_size=1 << 20))
    fill(store, 10)
    await store.durable()
    for seq in (9, 10):
        store.remove_msg(seq, erase=True)
    store._blocks.flush()  # the erasures reach the file, the delete log entries do not
    again = FileStore(cfg(tmp_path))
    assert (again.state().last_seq, again.state().msgs) == (10, 8)
    assert again.store_msg("s.a", b"", b"x")[0] == 11
    again.close()


async def test_dropped_block_outlives_its_unsynced_delete_entries(tmp_path: Path) -> None:
    """A block emptied by removals is unlinked only after the delete log covering it is
    synced, so a kill in between cannot lose the sequences it held."""
    first = FileStore(cfg(tmp_path, block_size=1 << 20))
    fill(first, 30)
    await first.durable()  # then abandoned, as by SIGKILL: no snapshot, no log rewrite
    # Reopened with smaller blocks, the full block is sealed and an empty one is active.
    store = FileStore(cfg(tmp_path, block_size=600))
    assert store._blocks.active.last < store._blocks.active.first
    for seq in range(1, 31):
        store.remove_msg(seq, erase=False)
    # No loop iteration: the delete entries are still in the process when it is killed.
    again = FileStore(cfg(tmp_path))
    assert again.state().last_seq == 30
    again.close()


@pytest.mark.parametrize("case", list(REMOVALS))
async def test_durable_removal_survives_power_cut(
    tmp_path: Path, power_cut: Any, case: str
) -> None:
    FileStore(cfg(tmp_path)).close()
    io = power_cut(tmp_path)
    store = FileStore(cfg(tmp_path), io=io)
    fill(store, 50)
    await store.durable()
    REMOVALS[case](store)
    await store.durable()
    before = store.state()
    io.crash(torn=True)
    again = FileStore(cfg(tmp_path))
    after = again.state()
    assert (after.last_seq, after.first_seq, after.msgs) == (
        before.last_seq,
        before.first_seq,
        before.msgs,
    )
    again.check()
    again.close()


# ------------------------------------------------------------------ disk full


class FullDiskIO(FileIO):
    """Space runs out when ``full`` is set: reservations and growing writes fail."""

    def __init__(self) -> None:
        self.full = False
        self.cow = False
        """Copy-on-write file system: reservations succeed but writes may still fail."""

    def allocate(self, fd: int, offset: int, length: int) -> None:
        if self.full and not self.cow:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().allocate(fd, offset, length)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        if self.full and offset + len(data) > os.fstat(fd).st_size:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.full and self.cow:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().pwrite(fd, data, offset)


async def test_refused_append_leaves_no_trace(tmp_path: Path) -> None:
    io = FullDiskIO()
    store = FileStore(cfg(tmp_path, block_size=1 << 20), io=io)
    fill(store, 20)
    await store.durable()
    io.full = True
    refused = 0
    for _ in range(3000):  # past whatever the active block had reserved
        try:
            store.store_msg("s.a", b"", b"x" * 200)
        except StorageFull:
            refused += 1
            break
    assert refused == 1
    state = store.state()
    assert store.load_msg(state.last_seq + 1) is None
    kept = state.msgs
    await store.durable()  # what was accepted is still synced
    io.full = False
    await store.aclose()
    again = FileStore(cfg(tmp_path))
    assert (again.state().msgs, again.state().last_seq) == (kept, state.last_seq)
    assert again.recovery_report.clean
    again.close()


async def test_refused_batch_leaves_no_trace(tmp_path: Path) -> None:
    io = FullDiskIO()
    store = FileStore(cfg(tmp_path, block_size=4096), io=io)
    fill(store, 5)
    await store.durable()
    io.full = True
    now = time.time_ns()
    batch = [StoredMsg("s.a", 6 + i, b"", b"y" * 300, now + i) for i in range(40)]
    with pytest.raises(StorageFull):
        store.store_raw_batch(batch)
    assert store.state().last_seq == 5 and store.state().msgs == 5
    store.check()
    io.full = False
    await store.aclose()
    again = FileStore(cfg(tmp_path))
    assert (again.state().msgs, again.state().last_seq) == (5, 5)
    again.close()


async def test_purge_frees_the_active_block(tmp_path: Path) -> None:
    store = FileStore(cfg(tmp_path, block_size=1 << 20))
    fill(store, 200)
    await store.durable()
    old = blocks(tmp_path)
    size_before = sum(os.path.getsize(tmp_path / "msgs" / b) for b in old)
    store.purge()
    await store.durable()
    now = blocks(tmp_path)
    assert not set(old) & set(now), (old, now)
    size_after = sum(os.path.getsize(tmp_path / "msgs" / b) for b in now)
    assert size_after < size_before
    await store.aclose()
    again = FileStore(cfg(tmp_path))
    assert (again.state().msgs, again.state().last_seq) == (0, 200)
    again.close()


async def test_write_failure_after_reservation_stops_the_store(tmp_path: Path) -> None:
    """A copy-on-write file system can fail a write into reserved space: fail-stop."""
    io = FullDiskIO()
    store = FileStore(cfg(tmp_path, block_size=1 << 20), io=io)
    fill(store, 5)
    await store.durable()
    io.full = io.cow = True
    store.store_msg("s.a", b"", b"lost")
    with pytest.raises(StoreError):
        await store.durable()
    assert store.failed is not None
    with pytest.raises(StoreError):
        store.store_msg("s.a", b"", b"refused")
    io.full = io.cow = False
    await store.aclose()
    again = FileStore(cfg(tmp_path))
    assert again.state().msgs == 5
    again.close()


# ------------------------------------------------------------------ fsync failure


class FsyncFailsOnceIO(FileIO):
    def __init__(self) -> None:
        self.fail_next = False
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        if self.fail_next:
            self.fail_next = False
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)


async def test_failed_fsync_stops_the_store_until_reopened(tmp_path: Path) -> None:
    io = FsyncFailsOnceIO()
    store = FileStore(cfg(tmp_path), io=io)
    failures: list[StoreError] = []
    store.on_failure = failures.append
    fill(store, 5)
    await store.durable()
    store.store_msg("s.a", b"", b"unsure")
    io.fail_next = True
    with pytest.raises(StoreError):
        await store.durable()
    calls = io.fsyncs
    # No retry: a later fsync that succeeds proves nothing about the dropped pages.
    with pytest.raises(StoreError):
        await store.durable()
    with pytest.raises(StoreError, match="fsync"):
        store.store_msg("s.a", b"", b"refused")
    with pytest.raises(StoreError):
        store.skip_msgs(store.state().last_seq + 1, 1)
    assert io.fsyncs == calls
    assert len(failures) == 1 and store.failed is failures[0]
    await store.aclose()
    again = FileStore(cfg(tmp_path))
    assert again.state().msgs in (5, 6)
    assert again.failed is None
    assert again.store_msg("s.a", b"", b"works")[0] == again.state().last_seq
    again.close()


# ------------------------------------------------------------------ deleting the store


class SlowFsyncIO(FileIO):
    def __init__(self) -> None:
        self.bad_fds: list[int] = []

    def fsync(self, fd: int) -> None:
        time.sleep(0.05)
        try:
            super().fsync(fd)
        except OSError:
            self.bad_fds.append(fd)  # closed under the running round
            raise


async def test_adelete_waits_for_the_running_round(tmp_path: Path) -> None:
    io = SlowFsyncIO()
    store = FileStore(cfg(tmp_path / "S"), io=io)
    fill(store, 5)
    waiter = asyncio.ensure_future(store.durable())
    await asyncio.sleep(0.01)  # the round is fsyncing in a worker thread
    await store.adelete()
    await waiter
    assert io.bad_fds == []
    assert not (tmp_path / "S").exists()
