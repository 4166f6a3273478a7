"""File store on-disk behaviour: restart paths, torn tails, bit flips, erasure, compaction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headwater.server.store import StoreConfig, StoreError, StoreLimits, open_store
from headwater.server.store.file.store import FileStore

MSGS = "msgs"


def cfg(path: Path, **kw: object) -> StoreConfig:
    kw.setdefault("block_size", 4096)
    return StoreConfig(name="T", directory=path, **kw)  # type: ignore[arg-type]


def blocks(path: Path) -> list[Path]:
    return sorted((path / MSGS).glob("*.blk"))


def payloads(store: FileStore) -> dict[int, bytes]:
    out, seq = {}, 0
    while (msg := store.load_next(">", seq + 1)) is not None:
        out[msg.seq] = msg.data
        seq = msg.seq
    return out


def filled(path: Path, n: int = 200, **kw: object) -> FileStore:
    store = FileStore(cfg(path, **kw))
    for i in range(n):
        store.store_msg(f"sub.{i % 7}", b"", b"payload-%05d" % i)
    return store


def test_restart_with_index_snapshot(tmp_path: Path) -> None:
    store = filled(tmp_path)
    store.remove_msg(10)
    store.purge("sub.3")
    before, data = store.state(True), payloads(store)
    store.close()
    assert (tmp_path / MSGS / "index.snap").exists()
    again = FileStore(cfg(tmp_path))
    assert again.recovery_report.used_index and again.recovery_report.clean
    assert again.state(True) == before
    assert payloads(again) == data
    again.check()
    assert again.store_msg("x", b"", b"")[0] == before.last_seq + 1


def test_restart_without_index_rebuilds_by_scanning(tmp_path: Path) -> None:
    store = filled(tmp_path)
    store.remove_msg(3)
    store.compact(50)
    before, data = store.state(True), payloads(store)
    store.close()
    os.unlink(tmp_path / MSGS / "index.snap")
    again = FileStore(cfg(tmp_path))
    assert not again.recovery_report.used_index and again.recovery_report.clean
    assert again.state(True) == before
    assert payloads(again) == data
    again.check()


def test_stale_index_is_not_trusted(tmp_path: Path) -> None:
    store = filled(tmp_path)
    store.close()
    again = FileStore(cfg(tmp_path))
    again.store_msg("late", b"", b"after the snapshot")
    again.remove_msg(5)
    again._blocks.flush()  # the process dies here: no clean close, the old snapshot remains
    again._log.flush()
    third = FileStore(cfg(tmp_path))
    assert third.state().last_seq == 201
    assert third.load_msg(5) is None
    last = third.load_last("late")
    assert last is not None and last.data == b"after the snapshot"
    third.check()


def test_restart_after_crash_without_any_close(tmp_path: Path) -> None:
    store = filled(tmp_path)
    store.purge("sub.1")
    store._blocks.flush()
    store._log.flush()
    expected = payloads(store)
    again = FileStore(cfg(tmp_path))
    assert payloads(again) == expected
    again.check()


def test_torn_tail_is_truncated_and_reported(tmp_path: Path) -> None:
    store = filled(tmp_path, n=100)
    store.close()
    os.unlink(tmp_path / MSGS / "index.snap")
    last = blocks(tmp_path)[-1]
    size = last.stat().st_size
    os.truncate(last, size - 7)  # the last record loses its final bytes
    again = FileStore(cfg(tmp_path))
    rep = again.recovery_report
    assert rep.records_dropped == 1
    assert rep.bytes_truncated > 0
    assert rep.blocks_affected == [int(last.stem)]
    # The clean close recorded last_seq = 100 in the delete log, so 100 stays used (a gap):
    # a sequence that was handed out is never reused.
    st = again.state()
    assert (st.msgs, st.last_seq, st.num_deleted) == (99, 100, 1)
    assert last.stat().st_size < size - 7
    assert again.store_msg("new", b"", b"x")[0] == 101
    again.check()
    again.close()
    third = FileStore(cfg(tmp_path))
    assert third.recovery_report.clean
    assert third.load_last("new") is not None


def test_garbage_tail_is_truncated(tmp_path: Path) -> None:
    store = filled(tmp_path, n=30)
    store.close()
    last = blocks(tmp_path)[-1]
    with open(last, "ab") as f:
        f.write(b"\xb7\x1e" + os.urandom(100))  # a half-written record
    again = FileStore(cfg(tmp_path))
    rep = again.recovery_report
    assert rep.records_dropped == 1 and rep.bytes_truncated == 102
    assert again.state().msgs == 30
    again.check()


def _flip_in_record(path: Path, block: Path, seq: int, store: FileStore) -> None:
    idx = store._idx
    off = idx.loc[seq - idx.base] + 45  # inside the payload
    with open(block, "r+b") as f:
        f.seek(off)
        byte = f.read(1)
        f.seek(off)
        f.write(bytes([byte[0] ^ 0x10]))


def test_bit_flip_detected_at_recovery(tmp_path: Path) -> None:
    store = filled(tmp_path)
    victim = 20
    block = next(b for b in blocks(tmp_path) if store._blocks.block_for(victim).path == str(b))
    assert block != blocks(tmp_path)[-1]  # in the middle of a sealed block
    data = payloads(store)
    store.close()
    _flip_in_record(tmp_path, block, victim, store)
    again = FileStore(cfg(tmp_path))
    rep = again.recovery_report
    assert not rep.used_index  # the block's CRC no longer matches the snapshot
    assert rep.corrupt_seqs == [victim] and rep.records_dropped == 1
    assert rep.bytes_truncated == 0
    assert again.load_msg(victim) is None
    del data[victim]
    assert payloads(again) == data
    again.store_msg("more", b"", b"still usable")
    again.check()
    again.close()
    third = FileStore(cfg(tmp_path))
    assert third.load_msg(victim) is None
    assert third.state().msgs == len(data) + 1


def test_bit_flip_detected_on_read(tmp_path: Path) -> None:
    store = filled(tmp_path)
    victim = 33
    store._blocks.flush()
    store._recent.clear()  # as if the message had aged out of the recent-message cache
    block = Path(store._blocks.block_for(victim).path)
    _flip_in_record(tmp_path, block, victim, store)
    msgs_before = store.state().msgs
    assert store.load_msg(victim) is None  # never served as valid
    assert store.recovery_report.corrupt_seqs == [victim]
    assert store.state().msgs == msgs_before - 1
    nxt = store.load_next(">", victim)
    assert nxt is not None and nxt.seq == victim + 1
    store.check()


def test_bit_flip_detected_by_batch_read(tmp_path: Path) -> None:
    store = filled(tmp_path)
    victim = 77
    store._blocks.flush()
    store._recent.clear()
    _flip_in_record(tmp_path, Path(store._blocks.block_for(victim).path), victim, store)
    got = store.load_next_batch(">", 1, 1000, 1 << 20)
    assert [m.seq for m in got] == [s for s in range(1, 201) if s != victim]
    assert got[victim - 1].data == b"payload-%05d" % victim  # the one after it, intact
    assert store.recovery_report.corrupt_seqs == [victim]
    store.check()


def test_recent_messages_are_served_from_memory_within_the_bound(tmp_path: Path) -> None:
    store = FileStore(cfg(tmp_path, block_size=1 << 20))
    big = b"x" * (1 << 20)
    for _ in range(12):
        store.store_msg("a", b"", big)
    assert store.load_msg(12) is store._recent[12]
    assert 1 not in store._recent  # older than RECENT_BYTES: read back from the blocks
    assert store.load_msg(1) is not None and store.load_msg(1).data == big
    store.remove_msg(12, erase=True)
    assert 12 not in store._recent
    store.close()


def test_erase_overwrites_payload_on_disk(tmp_path: Path) -> None:
    store = FileStore(cfg(tmp_path, block_size=1 << 20))
    store.store_msg("a", b"", b"SECRET-ERASED")
    store.store_msg("a", b"", b"SECRET-KEPT")
    store.store_msg("a", b"", b"filler")
    store.remove_msg(1, erase=True)
    store.remove_msg(2, erase=False)
    store._blocks.flush()
    disk = b"".join(p.read_bytes() for p in blocks(tmp_path))
    assert b"SECRET-ERASED" not in disk
    assert b"SECRET-KEPT" in disk  # a plain remove only records the delete
    store.check()
    store.close()
    again = FileStore(cfg(tmp_path, block_size=1 << 20))
    assert again.recovery_report.clean
    assert payloads(again) == {3: b"filler"}


async def test_sparse_blocks_are_compacted(tmp_path: Path) -> None:
    store = filled(tmp_path, n=400)
    victim = store._blocks.block_for(150)
    assert victim is not store._blocks.blocks[0] and victim is not store._blocks.active
    path = Path(victim.path)
    before = path.stat().st_size
    for seq in range(victim.first, victim.last + 1):
        if seq % 5:
            store.remove_msg(seq, erase=False)
    # A rewrite is renamed in once an fsync covered it; removals that raced the first rewrite
    # schedule a second one, which the next round completes.
    await store.durable()
    await store.durable()
    assert path.stat().st_size < 0.4 * before
    assert not list((tmp_path / MSGS).glob("*.tmp"))
    data = payloads(store)
    assert all(seq % 5 == 0 for seq in data if victim.first <= seq <= victim.last)
    store.check()
    await store.aclose()
    again = FileStore(cfg(tmp_path))
    assert again.recovery_report.used_index
    assert payloads(again) == data
    again.check()


def test_fully_removed_blocks_are_deleted(tmp_path: Path) -> None:
    store = filled(tmp_path, n=400, limits=StoreLimits(max_msgs=50))
    assert len(blocks(tmp_path)) <= 3
    assert store.state().msgs == 50
    store.purge()
    assert len(blocks(tmp_path)) == 1
    store.check()


def test_s2_compression_of_sealed_blocks(tmp_path: Path) -> None:
    store = FileStore(cfg(tmp_path, compression="s2"))
    for i in range(300):
        store.store_msg("logs", b"", b"the same log line, again and again %d" % (i % 3))
    store.close()  # completes the pending packs
    raw_size = 300 * (44 + 4 + 36)
    assert sum(p.stat().st_size for p in blocks(tmp_path)) < raw_size / 3
    again = FileStore(cfg(tmp_path, compression="s2"))
    msg = again.load_msg(150)
    assert msg is not None and msg.data == b"the same log line, again and again 2"
    assert again.remove_msg(10, erase=True)
    again.check()
    again.close()
    third = FileStore(cfg(tmp_path, compression="s2"))
    assert third.recovery_report.clean and third.state().msgs == 299
    third.check()


def test_encryption_at_rest(tmp_path: Path) -> None:
    key = bytes(range(32))
    store = FileStore(cfg(tmp_path, encryption_key=key))
    store.store_msg("secret.subject", b"NATS/1.0\r\nX: y\r\n\r\n", b"TOP-SECRET-PAYLOAD")
    store.close()
    disk = b"".join(p.read_bytes() for p in blocks(tmp_path))
    assert b"TOP-SECRET-PAYLOAD" not in disk and b"secret.subject" not in disk
    os.unlink(tmp_path / MSGS / "index.snap")  # force a scan: it must decrypt subjects
    again = FileStore(cfg(tmp_path, encryption_key=key))
    msg = again.load_msg(1)
    assert msg is not None and (msg.subject, msg.data) == ("secret.subject", b"TOP-SECRET-PAYLOAD")
    again.check()
    again.close()
    with pytest.raises(StoreError, match="wrong encryption key"):
        FileStore(cfg(tmp_path, encryption_key=bytes(32)))
    with pytest.raises(StoreError, match="no key"):
        FileStore(cfg(tmp_path))


def test_delete_removes_the_directory(tmp_path: Path) -> None:
    store = open_store(cfg(tmp_path / "stream"))
    store.store_msg("a", b"", b"")
    store.delete()
    assert not (tmp_path / "stream").exists()


def test_ttl_survives_restart(tmp_path: Path) -> None:
    store = FileStore(cfg(tmp_path, limits=StoreLimits(max_age=10**12)))
    _, ts = store.store_msg("a", b"", b"", ttl_ns=5_000)
    store.store_msg("b", b"", b"", ttl_ns=-1)
    store.close()
    again = FileStore(cfg(tmp_path, limits=StoreLimits(max_age=10**12)))
    assert again.next_expiry() == ts + 5_000
    os.unlink(tmp_path / MSGS / "index.snap")
    again.close()
    os.unlink(tmp_path / MSGS / "index.snap")
    third = FileStore(cfg(tmp_path, limits=StoreLimits(max_age=10**12)))
    assert third.next_expiry() == ts + 5_000
    assert third.expire(ts + 10**13) == 1  # only the TTL'd one; "never" stays
    assert third.state().msgs == 1
