"""Consumer state writes follow the server's sync policy: fsynced under ``ack``/``always``,
fsync deferred to one per interval (and at close) under ``interval``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson
import pytest
from engine.consumers.test_consumer_state import deliver, make

from headwater.server.consumers import state
from headwater.server.store import SyncPolicy


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every ``os.fsync`` made by the state writer and the atomic helper."""
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


async def _ack_and_settle(cs: state.ConsumerState, seq: int) -> None:
    cs.consumer.process_ack(seq, seq)
    cs.changed(cs.consumer)
    for _ in range(200):
        if cs._task is None:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("state writer did not finish")


def _saved_floor(directory: Path) -> int:
    """The ack floor of the newest state written (o.json, or o.next.json when unsynced)."""
    data, _, skipped = state.read_state(directory)
    assert data is not None and skipped == []
    return int(orjson.loads(data)["asflr"])


@pytest.mark.parametrize("mode", ["ack", "always"])
async def test_durable_modes_fsync_every_write(
    tmp_path: Path, fsyncs: list[int], mode: str
) -> None:
    _, consumer = make(3)
    deliver(consumer, 3)
    cs = state.ConsumerState(consumer, tmp_path, SyncPolicy(mode))  # type: ignore[arg-type]
    await _ack_and_settle(cs, 1)
    assert len(fsyncs) == 2  # the file, then the directory holding the rename
    assert _saved_floor(tmp_path) == 1
    consumer.stop(deleted=False)


async def test_interval_mode_defers_fsync_to_the_timer(tmp_path: Path, fsyncs: list[int]) -> None:
    _, consumer = make(3)
    deliver(consumer, 3)
    cs = state.ConsumerState(consumer, tmp_path, SyncPolicy("interval", 0.15))
    assert cs.deferred_sync
    await _ack_and_settle(cs, 1)
    await _ack_and_settle(cs, 2)
    assert fsyncs == []  # written (readable) but not yet fsynced
    assert _saved_floor(tmp_path) == 2
    await asyncio.sleep(0.3)
    assert len(fsyncs) == 2  # one timer fsync covers both writes
    await _ack_and_settle(cs, 3)
    assert len(fsyncs) == 2
    consumer.stop(deleted=False)
    await cs.flush()  # a clean close always leaves the state fsynced
    assert len(fsyncs) == 4
    assert _saved_floor(tmp_path) == 3
    assert cs._sync_timer is None
