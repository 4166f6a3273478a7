"""Reading consumer state back after a power cut: the newest readable file wins.

A power cut is modelled on the files a writer leaves: whatever was written without fsync
(``o.next.json`` under a periodic sync policy) may be empty or torn; ``o.json`` is always
complete (fsynced before its rename), though a crash between its two renames leaves only the
backup ``.o.json.bak``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from engine.consumers.test_consumer_state import deliver, make

from headwater.server.consumers import state
from headwater.server.store import SyncPolicy
from headwater.server.store.atomic import (
    UnreadableFile,
    backup_path,
    read_with_fallback,
    write_atomic,
)


async def _settle(cs: state.ConsumerState) -> None:
    for _ in range(200):
        if cs._task is None and cs._sync_task is None:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("state writer did not finish")


async def _ack(cs: state.ConsumerState, seq: int) -> None:
    cs.consumer.process_ack(seq, seq)
    cs.changed(cs.consumer)
    await _settle(cs)


def _floor(data: bytes | None) -> int:
    assert data is not None
    return int(orjson.loads(data)["asflr"])


async def test_each_durable_write_keeps_the_previous_one(tmp_path: Path) -> None:
    _, c = make(3)
    deliver(c, 3)
    cs = state.ConsumerState(c, tmp_path, SyncPolicy("ack"))
    await _ack(cs, 1)
    await _ack(cs, 2)
    assert _floor((tmp_path / "o.json").read_bytes()) == 2
    assert _floor(backup_path(tmp_path / "o.json").read_bytes()) == 1
    data, gen, skipped = state.read_state(tmp_path)
    assert (_floor(data), gen, skipped) == (2, 2, [])
    c.stop(deleted=False)


@pytest.mark.parametrize("damage", [b"", b'{"dseq": 3, "sseq": 4, "adf'], ids=["empty", "torn"])
async def test_damaged_state_file_falls_back_to_the_backup(tmp_path: Path, damage: bytes) -> None:
    _, c = make(3)
    deliver(c, 3)
    cs = state.ConsumerState(c, tmp_path, SyncPolicy("ack"))
    await _ack(cs, 1)
    await _ack(cs, 2)
    c.stop(deleted=False)
    (tmp_path / "o.json").write_bytes(damage)
    data, _, skipped = state.read_state(tmp_path)
    assert _floor(data) == 1
    assert len(skipped) == 1 and skipped[0].startswith("o.json: ")


async def test_crash_between_the_renames_reads_the_backup(tmp_path: Path) -> None:
    _, c = make(3)
    deliver(c, 3)
    cs = state.ConsumerState(c, tmp_path, SyncPolicy("ack"))
    await _ack(cs, 1)
    await _ack(cs, 2)
    c.stop(deleted=False)
    (tmp_path / "o.json").unlink()  # renamed to the backup; the new one not yet in place
    data, _, skipped = state.read_state(tmp_path)
    assert _floor(data) == 1 and skipped == []


async def test_interval_mode_power_cut_loses_only_the_unsynced_writes(tmp_path: Path) -> None:
    _, c = make(4)
    deliver(c, 4)
    cs = state.ConsumerState(c, tmp_path, SyncPolicy("interval", 0.1))
    await _ack(cs, 1)
    await asyncio.sleep(0.25)  # the timer writes o.json, fsynced
    await _settle(cs)
    assert _floor((tmp_path / "o.json").read_bytes()) == 1
    await _ack(cs, 2)
    await _ack(cs, 3)
    c.stop(deleted=False)
    # Before the cut the unsynced file is the newest and wins.
    data, _, skipped = state.read_state(tmp_path)
    assert (_floor(data), skipped) == (3, [])
    # The cut: the unsynced file is left empty, or torn.
    for damage in (b"", b'{"dseq":4,"ss'):
        (tmp_path / state.UNSYNCED_FILE).write_bytes(damage)
        data, _, skipped = state.read_state(tmp_path)
        assert _floor(data) == 1
        assert len(skipped) == 1 and skipped[0].startswith("o.next.json: ")


async def test_stale_unsynced_file_loses_to_a_newer_durable_one(tmp_path: Path) -> None:
    _, c = make(3)
    deliver(c, 3)
    cs = state.ConsumerState(c, tmp_path, SyncPolicy("interval", 60))
    await _ack(cs, 1)
    c.stop(deleted=False)
    await cs.flush()  # a clean close: o.json fsynced, with a higher generation
    (tmp_path / state.UNSYNCED_FILE).write_bytes(state.snapshot(c, gen=0))
    data, gen, _ = state.read_state(tmp_path)
    assert _floor(data) == 1 and gen == cs.gen


def test_read_with_fallback_for_copied_files(tmp_path: Path) -> None:
    target = tmp_path / "meta.inf"
    write_atomic(target, b'{"v": 1}', backup="copy")
    write_atomic(target, b'{"v": 2}', backup="copy")
    assert backup_path(target).read_bytes() == b'{"v": 2}'
    target.write_bytes(b"")
    found = read_with_fallback(target, orjson.loads)
    assert found.value == {"v": 2} and found.from_backup
    assert found.skipped == ["meta.inf: empty file"]
    backup_path(target).write_bytes(b"{")
    with pytest.raises(UnreadableFile):
        read_with_fallback(target, orjson.loads)
