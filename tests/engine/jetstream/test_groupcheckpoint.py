"""A file replica's checkpoints and its restart from one (``jetstream.groupcheckpoint``), with
power cuts (``PowerCutIO``: whatever was not fsynced is lost, or kept in part).

A replica applies ops (``groupops.apply``) to a stream on a replica-mode file store, takes a
checkpoint, applies more ops (deletes, purges, publishes with message ids: writes a cut must
take back), and the power fails. Restarted from its newest checkpoint, with the ops after
it applied again, it must equal a reference stream that applied every op once from the
start: the same messages, counters and duplicate decisions (the window comes back from the
duplicate log, not from the store by this server's clock). Another in-process server's
stream ``R`` (memory) is the reference; ops carry a leader's time a day ahead, so no expiry
timer of the server's own fires.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from engine.jetstream.conftest import in_process
from engine.store.conftest import PowerCutIO

from headwater.server.connections.internal import InternalClient
from headwater.server.jetstream import groupcheckpoint, groupops
from headwater.server.jetstream.groupops import DeleteMsg, Publish, Purge
from headwater.server.jetstream.stream import Stream, store_limits
from headwater.server.jetstream.streamgroup import open_file_replica
from headwater.server.node import Server
from headwater.server.store import StoreConfig, SyncPolicy

SECOND = 10**9
BASE = time.time_ns() + 86_400 * SECOND


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    stream = {
        "name": "R",
        "subjects": ["r.>"],
        "storage": "memory",
        "duplicate_window": 60,
        "max_msgs_per_subject": 4,
    }
    async with in_process(tmp_path / "js", stream) as srv:
        yield srv


def _id(msg_id: str) -> bytes:
    return f"NATS/1.0\r\nNats-Msg-Id: {msg_id}\r\n\r\n".encode()


def ops(rng: random.Random, n: int, start: int) -> list[groupops.Op]:
    """Publishes (a third with ids, some of them retries of earlier ids), deletes, purges."""
    out: list[groupops.Op] = []
    for k in range(start, start + n):
        ts = BASE + k * 1000
        roll = rng.random()
        if roll < 0.1:
            out.append(DeleteMsg(rng.randint(1, k + 1), rng.random() < 0.5))
        elif roll < 0.15:
            out.append(Purge(f"r.{rng.randint(0, 5)}", 0, 0))
        elif roll < 0.18:
            out.append(Purge("", 0, rng.randint(0, 10)))
        elif roll < 0.5:
            msg_id = f"id{rng.randint(0, k)}"  # often one seen before: a duplicate
            out.append(Publish(f"r.{rng.randint(0, 5)}", _id(msg_id), b"x" * 40, ts))
        else:
            out.append(Publish(f"r.{rng.randint(0, 5)}", b"", bytes(rng.randbytes(60)), ts))
    return out


def replica(server: Server, directory: Path, io: PowerCutIO) -> tuple[Stream, Any]:
    """A replica's stream opened from ``directory`` as a restart does (its checkpoint)."""
    reference = server.jetstream.streams["R"]
    cfg = reference.config

    def store_config(path: Path) -> StoreConfig:
        return StoreConfig(
            name="R",
            storage="file",
            directory=path,
            limits=store_limits(cfg),
            sync=SyncPolicy(),
            block_size=4096,  # several blocks: the cut deletes later ones
        )

    rec = groupcheckpoint.recover(directory, store_config, io)
    stream = Stream(
        config=cfg,
        created_ns=time.time_ns(),
        store=rec.store,
        client=InternalClient(server, "replica"),
        resources=reference.resources,
        directory=None,
        domain=None,
        api_prefixes=("$JS.API",),
        durable_acks=False,
    )
    if rec.state is not None:
        stream.restore_state(rec.dedupe, rec.state.lseq, rec.state.lmsgid, rec.state.markers)
    stream.ids_recorded = []
    return stream, rec


def outcome(result: groupops.Outcome) -> Any:
    return repr(result)


def contents(stream: Stream) -> tuple[Any, ...]:
    st = stream.state()
    msgs = []
    for seq in range(st.first_seq, st.last_seq + 1):
        m = stream.store.load_msg(seq)
        if m is not None:
            msgs.append((m.seq, m.subject, m.hdr, m.data, m.ts))
    return (st.msgs, st.first_seq, st.last_seq, st.num_deleted, msgs, stream.lseq)


@pytest.mark.parametrize("seed", range(6))
async def test_a_restart_after_a_power_cut_equals_the_log_applied_from_the_start(
    server: Server, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    reference = server.jetstream.streams["R"]
    first, second, third = ops(rng, 120, 0), ops(rng, 80, 120), ops(rng, 60, 200)
    expected = [outcome(groupops.apply(reference, op)) for op in first + second + third]

    root = tmp_path / f"g{seed}"
    root.mkdir()
    io = PowerCutIO(root, random.Random(seed))
    stream, rec = replica(server, root, io)
    assert rec.state is None
    checkpoints = rec.checkpoints
    await checkpoints.take(stream, 0, 0, list)  # right after creating the store
    got = [outcome(groupops.apply(stream, op)) for op in first]
    await checkpoints.take(stream, len(first), 1, list)
    got += [outcome(groupops.apply(stream, op)) for op in second]
    checkpointed = len(first)
    if seed % 2:
        checkpointed += len(second)
        await checkpoints.take(stream, checkpointed, 1, list)
    got += [outcome(groupops.apply(stream, op)) for op in third[:30]]
    assert got == expected[: len(got)]
    for _ in range(3):
        await asyncio.sleep(0)  # the store's buffers reach the OS (not the disk)
    io.crash(torn=True)
    stream.store.close()
    checkpoints.close()

    io2 = PowerCutIO(root, random.Random(seed + 100))
    again, rec2 = replica(server, root, io2)
    assert rec2.state is not None and rec2.state.index == checkpointed
    replayed = [
        outcome(groupops.apply(again, op)) for op in (first + second + third)[checkpointed:]
    ]
    assert replayed == expected[checkpointed:]
    assert contents(again) == contents(reference)
    again.store.close()
    rec2.checkpoints.close()


async def test_the_duplicate_log_is_rewritten_and_read_back(server: Server, tmp_path: Path) -> None:
    """Past twice the live window the duplicate log starts a new generation holding the
    window; the restart reads that generation (and only it) back."""
    root = tmp_path / "g"
    root.mkdir()
    io = PowerCutIO(root)
    stream, rec = replica(server, root, io)
    checkpoints = rec.checkpoints
    index = 0
    for _ in range(4):  # 100 ms apart: the 60 s window holds the last 600
        for _ in range(3000):
            index += 1
            op = Publish("r.a", _id(f"m{index}"), b"", BASE + index * SECOND // 10)
            groupops.apply(stream, op)
        await checkpoints.take(stream, index, 1, list)
    gens = sorted(p.name for p in root.iterdir() if p.name.startswith("dedupe."))
    # The first (whole, 600), two appends (6,600 ids), then the rewrite: the window only.
    assert gens == ["dedupe.00000002.log"], gens
    now = BASE + index * SECOND // 10 + 1
    stream.dedupe.lookup("", now)  # drop what has expired, as the next publish would
    window = stream.dedupe.entries()
    assert 590 < len(window) <= 600
    io.crash(torn=True)
    stream.store.close()
    checkpoints.close()
    again, rec2 = replica(server, root, PowerCutIO(root))
    again.dedupe.lookup("", now)
    assert again.dedupe.entries() == window
    retry = Publish("r.a", _id(f"m{index - 10}"), b"", now)
    assert outcome(groupops.apply(again, retry)) == outcome(groupops.apply(stream, retry))
    again.store.close()
    rec2.checkpoints.close()


def _dedupe_file(root: Path) -> Path:
    (path,) = sorted(p for p in root.iterdir() if p.name.startswith("dedupe."))
    return path


async def test_a_flipped_bit_in_the_duplicate_log_is_found(server: Server, tmp_path: Path) -> None:
    """The duplicate log is checksummed per write: one flipped bit in it fails the replica's
    recovery loudly instead of recording a wrong id or sequence in its window (where a
    duplicate would then be decided unlike the others), and its opening starts over empty
    (``lost``: it catches up from its leader), as for a damaged block or log segment."""
    root = tmp_path / "g"
    root.mkdir()
    stream, rec = replica(server, root, PowerCutIO(root))
    for index in range(1, 51):
        groupops.apply(stream, Publish("r.a", _id(f"m{index}"), b"", BASE + index))
    await rec.checkpoints.take(stream, 50, 1, list)
    stream.store.close()
    rec.checkpoints.close()
    path = _dedupe_file(root)
    data = bytearray(path.read_bytes())
    assert data.startswith(groupcheckpoint.DEDUPE_MAGIC)
    data[len(data) // 2] ^= 0x04  # inside the records: bare, they would still decode
    path.write_bytes(bytes(data))
    with pytest.raises(groupcheckpoint.DamagedDedupeLog):
        replica(server, root, PowerCutIO(root))

    def config(directory: Path) -> StoreConfig:
        return StoreConfig(name="R", storage="file", directory=directory)

    opened = open_file_replica(root, config)
    try:
        assert opened.lost and opened.file.state is None and opened.base == (0, 0)
    finally:
        opened.file.store.close()
        opened.file.checkpoints.close()
        opened.log.close()


def test_a_duplicate_log_written_before_checksums_is_read_and_rewritten(tmp_path: Path) -> None:
    """A log written before checksums (no magic) is read as it is, and the next write makes
    a new, checksummed generation of the whole window."""
    ids = [("a", 1, BASE), ("b", 2, BASE + 1)]
    old = groupcheckpoint.encode_ids(ids, legacy=True)
    (tmp_path / "dedupe.00000003.log").write_bytes(old)
    io = groupcheckpoint.default_io()
    log, read = groupcheckpoint.DedupeLog.recover(tmp_path, io, 3, len(old))
    assert read == ids and log.legacy and log.wants_rewrite(window=2)
    gen, length = log.write(ids, whole=True)
    log.close()
    assert gen == 4 and not log.legacy
    new = (tmp_path / "dedupe.00000004.log").read_bytes()
    assert new.startswith(groupcheckpoint.DEDUPE_MAGIC) and len(new) == length
    assert groupcheckpoint.decode_ids(new) == ids
