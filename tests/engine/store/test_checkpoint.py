"""Replica mode of the file store: checkpoints, held work and the cut back
(docs/REPLICATION.md, "Restarting a replica on a file store").

A replica applies committed entries without an fsync per entry; after a power cut the store may
hold any subset of the writes made after its newest durable checkpoint. ``cut_back`` must bring
it back to exactly the checkpoint's state, and the work that cannot be undone (erasures, block
unlinks, compaction, packing) must wait for a durable checkpoint that covers its cause.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

import pytest
from engine.store.conftest import PowerCutIO

from headwater.server.store import StoreConfig, StoreLimits
from headwater.server.store.base import MaxMsgsExceeded, StoreError
from headwater.server.store.file.blockset import REWRITES_PER_CHECKPOINT
from headwater.server.store.file.checkpoint import Positions, cut_back
from headwater.server.store.file.ckptfile import CheckpointFile
from headwater.server.store.file.dellog import LOG_NAME, parse_log
from headwater.server.store.file.index import SNAP_NAME, decode_snapshot
from headwater.server.store.file.store import FileStore


class ScatterCutIO(PowerCutIO):
    def __init__(self, root: Path, rng: random.Random | None = None) -> None:
        super().__init__(root, rng)
        self.keep: float | None = None
        """Chance that an unsynced change reached the disk; ``None``: a fair coin per file."""

    def crash(self, torn: bool = True) -> None:
        rng = self.rng
        with self.lock:
            self.dead = True
            current: dict[int, bytes] = {}
            for path, ino in self.names.items():
                if os.path.exists(path):
                    current[ino] = Path(path).read_bytes()
                    os.unlink(path)
            for path in set(self.durable_names) | set(self.names):
                old, new = self.durable_names.get(path), self.names.get(path)
                ino = old if old == new or not self._flushed() else new
                if ino is None:
                    continue
                synced = self.durable_data.get(ino, b"")
                now = current.get(ino)
                data = synced
                if now is not None and now != synced and self._flushed():
                    data = now
                    if torn and now.startswith(synced) and rng.random() < 0.3:
                        data = now[: len(synced) + rng.randint(0, len(now) - len(synced))]
                os.makedirs(os.path.dirname(path), exist_ok=True)
                Path(path).write_bytes(data)

    def _flushed(self) -> bool:
        return self.rng.random() < (0.5 if self.keep is None else self.keep)


def config(path: Path, **kw: Any) -> StoreConfig:
    kw.setdefault("block_size", 1024)
    return StoreConfig(name="R", directory=path, **kw)


def state_of(store: FileStore) -> dict[str, Any]:
    """Everything a replay must reproduce: counters and each sequence's message or absence
    (timestamps included: the tests pass their own)."""
    st = store.state()
    msgs = {}
    for seq in range(1, st.last_seq + 1):
        m = store.load_msg(seq)
        if m is not None:
            msgs[seq] = (m.subject, m.hdr, m.data, m.ts)
    return {
        "first": st.first_seq,
        "last": st.last_seq,
        "msgs": st.msgs,
        "bytes": st.bytes,
        "live": msgs,
    }


async def take(store: FileStore, cf: CheckpointFile, extra: bytes = b"") -> Positions:
    """What the owner does: capture, write the record durably (in a thread), then release."""
    p = await store.checkpoint()
    await asyncio.get_running_loop().run_in_executor(None, cf.append, p, extra)
    store.checkpoint_durable(p)
    return p


async def settle(store: FileStore) -> None:
    """Let the background rounds that released work kicked run to the end."""
    for _ in range(3):
        await asyncio.sleep(0)
        await store.durable()


def reopen(path: Path, p: Positions | None = None, **kw: Any) -> FileStore:
    cf = CheckpointFile(str(path / "checkpoint"))
    got = cf.latest()
    cf.close()
    assert got is not None
    if p is not None:
        assert got[0] == p
    cut_back(str(path), got[0])
    return FileStore(config(path, **kw), replica=True)


def blk_files(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path / "msgs") if n.endswith(".blk"))


# ------------------------------------------------------------------ positions and the file


def test_positions_round_trip() -> None:
    p = Positions(last_seq=7, log_generation=2, log_length=80, block=3, offset=512, mark=4)
    assert Positions.from_bytes(p.to_bytes()) == p
    with pytest.raises(ValueError):
        Positions.from_bytes(p.to_bytes()[:-1])


def test_checkpoint_file_keeps_the_last_valid_record(tmp_path: Path) -> None:
    io = PowerCutIO(tmp_path, random.Random(3))
    cf = CheckpointFile(str(tmp_path / "checkpoint"), io=io)
    assert cf.latest() is None
    p1 = Positions(5, 1, 48, 1, 300, 0)
    p2 = Positions(9, 1, 80, 2, 100, 2)
    cf.append(p1, b"index=5")
    cf.append(p2, b"index=9")
    assert cf.latest() == (p2, b"index=9")
    # A third record that never got its fsync: torn or lost, the second one counts.
    fd = io.open_rw(cf.path)
    io.pwrite(fd, b"\x30\x00\x00\x00garbage-record-bytes", os.path.getsize(cf.path))
    io.close(fd)
    io.crash(torn=True)
    again = CheckpointFile(str(tmp_path / "checkpoint"))
    assert again.latest() == (p2, b"index=9")
    again.append(p1, b"x")  # appends after the torn tail, which was cut off
    assert CheckpointFile(str(tmp_path / "checkpoint")).latest() == (p1, b"x")


def test_checkpoint_file_is_rewritten_when_large(tmp_path: Path) -> None:
    cf = CheckpointFile(str(tmp_path / "checkpoint"), max_size=1024)
    for i in range(100):
        cf.append(Positions(i, 1, 16, 1, 32, 0), b"%d" % i)
    assert os.path.getsize(cf.path) <= 1024
    assert CheckpointFile(cf.path).latest() == (Positions(99, 1, 16, 1, 32, 0), b"99")


# ------------------------------------------------------------------ the design's two examples


async def test_surviving_record_is_cut_before_a_replayed_purge(tmp_path: Path) -> None:
    """Entries: 1 publish a, 2 publish b, [checkpoint], 3 publish c, 4 purge. The record of c
    reached the disk, the purge did not. Replaying 3 and 4 must leave an empty stream whose
    next sequence is 4 (not c kept at 3 and then purged, or c stored twice)."""
    tmp_path.mkdir(exist_ok=True)
    io = ScatterCutIO(tmp_path, random.Random(1))
    store = FileStore(config(tmp_path), io=io, replica=True)
    cf = CheckpointFile(str(tmp_path / "checkpoint"), io=io)
    store.store_msg("a", b"", b"a", ts_ns=1)
    store.store_msg("b", b"", b"b", ts_ns=2)
    p = await take(store, cf)
    at_c = state_of(store)
    store.store_msg("c", b"", b"c", ts_ns=3)
    await asyncio.sleep(0)  # c reaches the OS
    io.keep = 1.0  # everything the OS had reaches the disk
    io.crash(torn=False)

    again = reopen(tmp_path, p)
    assert state_of(again) == at_c
    assert again.store_msg("c", b"", b"c", ts_ns=3)[0] == 3
    assert again.purge() == 3
    st = again.state()
    assert (st.msgs, st.first_seq, st.last_seq) == (0, 4, 3)
    again.check()
    again.close()


async def test_surviving_del_entry_is_cut_before_a_refused_publish(tmp_path: Path) -> None:
    """max_msgs 2, discard new. Entries: 1 publish a, 2 publish b, [checkpoint], 3 publish c
    (refused: full), 4 delete a. The DEL entry of 4 reached the disk. Replaying 3 must refuse c
    again, or this replica would hold a message the others refused."""
    tmp_path.mkdir(exist_ok=True)
    limits = StoreLimits(max_msgs=2, discard="new")
    io = ScatterCutIO(tmp_path, random.Random(2))
    store = FileStore(config(tmp_path, limits=limits), io=io, replica=True)
    cf = CheckpointFile(str(tmp_path / "checkpoint"), io=io)
    store.store_msg("a", b"", b"a", ts_ns=1)
    store.store_msg("b", b"", b"b", ts_ns=2)
    p = await take(store, cf)
    at_c = state_of(store)
    with pytest.raises(MaxMsgsExceeded):
        store.store_msg("c", b"", b"c", ts_ns=3)
    assert store.remove_msg(1)
    await store.durable()  # even a round that syncs the DEL entry is past the checkpoint
    io.keep = 1.0
    io.crash(torn=False)

    again = reopen(tmp_path, p, limits=limits)
    assert state_of(again) == at_c
    with pytest.raises(MaxMsgsExceeded):
        again.store_msg("c", b"", b"c", ts_ns=3)
    assert again.remove_msg(1)
    assert state_of(again)["live"] == {2: ("b", b"", b"b", 2)}
    again.check()
    again.close()


# ------------------------------------------------------------------ held work


async def _filled(path: Path, io: Any = None, **kw: Any) -> tuple[FileStore, CheckpointFile]:
    path.mkdir(exist_ok=True)
    store = FileStore(config(path, **kw), io=io, replica=True)
    cf = CheckpointFile(str(path / "checkpoint"), io=io)
    for i in range(30):
        store.store_msg(f"s.{i % 3}", b"", b"SECRET-%03d-" % i + bytes(60), ts_ns=i + 1)
    return store, cf


async def test_block_unlink_waits_for_a_covering_checkpoint(tmp_path: Path) -> None:
    """Removals after the checkpoint empty the first block. Rounds that sync their DEL entries
    must not unlink it: the cut brings the DEL entries back out, and the records with them."""
    io = PowerCutIO(tmp_path, random.Random(4))
    store, cf = await _filled(tmp_path, io)
    p = await take(store, cf)
    at_c = state_of(store)
    first_block = store._blocks.blocks[0]
    for seq in range(first_block.first, first_block.last + 1):
        store.remove_msg(seq, erase=False)
    await settle(store)
    store.store_msg("more", b"", b"x", ts_ns=100)  # dirty: one more round syncs the directory
    await settle(store)
    io.crash(torn=False)

    again = reopen(tmp_path, p)
    assert state_of(again) == at_c
    again.check()
    again.close()


async def test_held_unlink_runs_after_checkpoint_durable(tmp_path: Path) -> None:
    store, cf = await _filled(tmp_path)
    await take(store, cf)
    first_block = store._blocks.blocks[0]
    for seq in range(first_block.first, first_block.last + 1):
        store.remove_msg(seq, erase=False)
    await settle(store)
    assert "00000001.blk" in blk_files(tmp_path)
    p = await store.checkpoint()
    await settle(store)
    assert "00000001.blk" in blk_files(tmp_path)  # captured, not yet durable
    cf.append(p)
    store.checkpoint_durable(p)
    await settle(store)
    assert "00000001.blk" not in blk_files(tmp_path)
    store.check()
    await store.aclose()


def _in_blocks(path: Path, needle: bytes) -> bool:
    return any(needle in (path / "msgs" / n).read_bytes() for n in blk_files(path))


async def test_erasure_waits_then_overwrites(tmp_path: Path) -> None:
    """An erasure of a record a checkpoint covers is held (the cut might need the record back),
    then done once a durable checkpoint covers the DEL entry."""
    io = PowerCutIO(tmp_path, random.Random(5))
    store, cf = await _filled(tmp_path, io)
    p = await take(store, cf)
    at_c = state_of(store)
    assert store.remove_msg(2, erase=True)
    assert store.load_msg(2) is None
    await settle(store)
    store.store_msg("more", b"", b"x", ts_ns=100)
    await settle(store)
    # A crash now: the cut brings message 2 back (the delete is replayed from the log).
    io.crash(torn=False)
    again = reopen(tmp_path, p)
    assert state_of(again) == at_c
    again.close()


async def test_erasure_released_by_checkpoint_durable(tmp_path: Path) -> None:
    store, cf = await _filled(tmp_path)
    await take(store, cf)
    assert store.remove_msg(2, erase=True)
    await settle(store)
    assert _in_blocks(tmp_path, b"SECRET-001-")
    await take(store, cf)
    await settle(store)
    assert not _in_blocks(tmp_path, b"SECRET-001-")
    # A record appended after the newest capture is erased at once: a cut removes it anyway.
    seq, _ = store.store_msg("s.0", b"", b"FRESH-SECRET", ts_ns=1000)
    await store.durable()
    assert store.remove_msg(seq, erase=True)
    await settle(store)
    assert not _in_blocks(tmp_path, b"FRESH-SECRET")
    store.check()
    await store.aclose()


async def test_compaction_and_packing_wait_for_checkpoints(tmp_path: Path) -> None:
    store, cf = await _filled(tmp_path, compression="s2")
    await settle(store)
    sealed = [b for b in store._blocks.blocks if b is not store._blocks.active]
    assert sealed and not any(b.packed for b in sealed)  # packing is held
    await take(store, cf)
    await settle(store)
    packed = sum(b.packed for b in store._blocks.blocks)
    assert packed == min(len(sealed), REWRITES_PER_CHECKPOINT)  # the loop's budget per release
    await take(store, cf)  # the rest; they were covered already
    await settle(store)
    assert all(b.packed for b in store._blocks.blocks if b is not store._blocks.active)
    # Most of the second block dies: its compaction waits for a checkpoint.
    second = store._blocks.blocks[1]
    size = os.path.getsize(second.path)
    for seq in range(second.first, second.last):
        store.remove_msg(seq, erase=False)
    await settle(store)
    assert os.path.getsize(second.path) == size
    p = await take(store, cf)  # captures the compaction
    await settle(store)
    assert os.path.getsize(second.path) < size
    assert p.last_seq == store.state().last_seq
    store.check()
    await store.aclose()


# ------------------------------------------------------------------ clean close and R1


async def test_clean_close_names_the_checkpoint(tmp_path: Path) -> None:
    """A clean close right after a durable checkpoint rewrites the delete log and writes the
    index snapshot, both naming it: the cut keeps them and the open uses the snapshot."""
    store, cf = await _filled(tmp_path)
    for seq in (3, 4, 5, 9):
        store.remove_msg(seq, erase=False)
    p = await take(store, cf)
    at_c = state_of(store)
    await store.aclose()
    generation, _, _ = parse_log((tmp_path / "msgs" / LOG_NAME).read_bytes())
    assert generation == p.log_generation + 1
    again = reopen(tmp_path, p)
    assert again.recovery_report.used_index
    assert state_of(again) == at_c
    # Changes after the reopen, closed without a newer checkpoint: no rewrite, no snapshot.
    # The cut finds its place after the MARK, and keeps the snapshot that names p.
    again.store_msg("late", b"", b"late", ts_ns=500)
    again.remove_msg(10, erase=False)
    await again.aclose()
    assert parse_log((tmp_path / "msgs" / LOG_NAME).read_bytes())[0] == generation
    third = reopen(tmp_path, p)
    assert third.recovery_report.used_index
    assert state_of(third) == at_c
    third.check()
    third.close()


def test_cut_back_deletes_a_snapshot_it_does_not_name(tmp_path: Path) -> None:
    store = FileStore(config(tmp_path), replica=True)
    store.store_msg("a", b"", b"a", ts_ns=1)
    p = asyncio.run(store.checkpoint())
    store.store_msg("b", b"", b"b", ts_ns=2)
    store.close()  # no durable checkpoint: no snapshot
    assert not (tmp_path / "msgs" / SNAP_NAME).exists()
    r1 = FileStore(config(tmp_path))  # an R1 close writes a snapshot naming no checkpoint
    r1.close()
    assert (tmp_path / "msgs" / SNAP_NAME).exists()
    with pytest.raises(StoreError):  # the R1 close rewrote the delete log past p
        cut_back(str(tmp_path), p)


def test_replica_mode_off_needs_no_checkpoint(tmp_path: Path) -> None:
    store = FileStore(config(tmp_path))
    for i in range(30):
        store.store_msg("a", b"", b"%d" % i + bytes(80))
    for seq in range(1, 10):
        store.remove_msg(seq)
    store.check()
    store.close()
    assert sorted(os.listdir(tmp_path)) == ["msgs"]
    header, _ = decode_snapshot((tmp_path / "msgs" / SNAP_NAME).read_bytes())  # type: ignore[misc]
    assert header.checkpoint is None
    again = FileStore(config(tmp_path))
    assert again.recovery_report.used_index
    assert again.state().msgs == 21
    again.close()
