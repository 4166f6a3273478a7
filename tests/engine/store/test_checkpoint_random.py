"""Random op sequences against a replica-mode file store, cut by power failures.

Each seed applies store / delete / erase / purge / purge-keep / compact / skip ops, with sync
rounds, checkpoints (made durable the way the owner does) and clean restarts (cut back and
replay) at random points, then cuts the
power with ``ScatterCutIO`` (any unsynced file may or may not have reached the disk, in part or
whole, in-place overwrites included). Then ``cut_back`` to the newest durable checkpoint and an
open must give exactly the state the store had at that checkpoint, and replaying the ops after
it must give exactly the state before the cut (the replicated log's replay).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from pathlib import Path
from typing import Any

import pytest
from engine.store.test_checkpoint import ScatterCutIO, config, state_of

from headwater.server.store import StoreLimits
from headwater.server.store.base import StoreError
from headwater.server.store.file.checkpoint import cut_back
from headwater.server.store.file.ckptfile import CheckpointFile
from headwater.server.store.file.store import FileStore

Op = tuple[Any, ...]

VARIANTS: list[dict[str, Any]] = [
    {},
    {"compression": "s2"},
    {"limits": StoreLimits(max_msgs=25)},
    {"limits": StoreLimits(max_msgs_per_subject=4), "compression": "s2"},
    {"limits": StoreLimits(max_msgs=12, discard="new")},
    {"encryption_key": bytes(range(32))},
]


def apply(store: FileStore, op: Op) -> None:
    """One op, as the replicated apply would run it: a refused op changes nothing."""
    kind = op[0]
    with contextlib.suppress(StoreError):
        if kind == "store":
            store.store_msg(op[1], b"", op[2], ts_ns=op[3])
        elif kind == "remove":
            store.remove_msg(op[1], erase=op[2])
        elif kind == "purge":
            store.purge(op[1], 0, op[2])
        elif kind == "compact":
            store.compact(op[1])
        elif kind == "skip":
            st = store.state()
            store.skip_msgs(st.last_seq + 1, op[1], op[2])


def random_op(rng: random.Random, store: FileStore, ts: int) -> Op:
    st = store.state()
    r = rng.random()
    if r < 0.6 or st.msgs == 0:
        data = b"%d-" % ts + rng.randbytes(rng.choice((0, 10, 80, 300)))
        return ("store", f"s.{rng.randrange(4)}", data, ts)
    if r < 0.85:
        return ("remove", rng.randint(st.first_seq, st.last_seq), rng.random() < 0.5)
    if r < 0.9:
        return ("purge", rng.choice(("", "s.1", "s.2")), rng.choice((0, 1, 3)))
    if r < 0.95:
        return ("compact", rng.randint(st.first_seq, st.last_seq + 2))
    return ("skip", rng.randint(1, 3), ts)


async def one_run(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    kw = VARIANTS[seed % len(VARIANTS)]
    path = tmp_path / f"s{seed}"
    path.mkdir()
    io = ScatterCutIO(path, rng)
    cfg = config(path, block_size=rng.choice((512, 1024, 4096)), **kw)
    store = FileStore(cfg, io=io, replica=True)
    cf = CheckpointFile(str(path / "checkpoint"), io=io)
    ops: list[Op] = []
    at: dict[int, dict[str, Any]] = {}
    """Op count → the store's state when a checkpoint was captured there."""
    loop = asyncio.get_running_loop()

    async def checkpoint() -> None:
        at[len(ops)] = state_of(store)
        p = await store.checkpoint()
        await loop.run_in_executor(None, cf.append, p, b"%d" % len(ops))
        store.checkpoint_durable(p)

    async def restart() -> FileStore:
        """A clean stop and start: cut back to the newest checkpoint, replay what follows."""
        before = state_of(store)
        await store.aclose()
        got = cf.latest()
        assert got is not None
        cut_back(str(path), got[0], io)
        again = FileStore(cfg, io=io, replica=True)
        done = int(got[1])
        assert state_of(again) == at[done], f"seed {seed}: restart not at the checkpoint"
        for op in ops[done:]:
            apply(again, op)
        assert state_of(again) == before, f"seed {seed}: replay after a restart diverged"
        return again

    await checkpoint()
    ts = 1
    for _ in range(rng.randint(10, 150)):
        r = rng.random()
        if r < 0.08:
            await checkpoint()
        elif r < 0.1:
            if rng.random() < 0.5:
                await checkpoint()  # the clean close then rewrites the log and the snapshot
            store = await restart()
        elif r < 0.15:
            await store.durable()
        elif r < 0.25:
            await asyncio.sleep(0)
        else:
            ts += rng.randint(0, 1000)
            op = random_op(rng, store, ts)
            ops.append(op)
            apply(store, op)
    final = state_of(store)
    if rng.random() < 0.3:  # the power goes while a checkpoint's round runs
        task = asyncio.ensure_future(checkpoint())
        for _ in range(rng.randint(0, 5)):
            await asyncio.sleep(0)
        io.crash()
        with contextlib.suppress(Exception):
            await task
    else:
        io.crash()
    await asyncio.sleep(0.02)  # an fsync still in flight finishes (as a no-op)

    ck = CheckpointFile(str(path / "checkpoint"))
    got = ck.latest()
    ck.close()
    assert got is not None
    positions, extra = got
    done = int(extra)
    cut_back(str(path), positions)
    again = FileStore(config(path, **kw), replica=True)
    assert state_of(again) == at[done], f"seed {seed}: not the checkpoint's state"
    again.check()
    for op in ops[done:]:
        apply(again, op)
    assert state_of(again) == final, f"seed {seed}: the replay diverged"
    again.check()
    again.close()


@pytest.mark.parametrize("chunk", range(4))
async def test_cut_back_restores_the_checkpoint_state(tmp_path: Path, chunk: int) -> None:
    seeds = int(os.environ.get("STORE_CHECKPOINT_SEEDS", "160"))
    for seed in range(chunk, seeds, 4):
        await one_run(tmp_path, seed)
