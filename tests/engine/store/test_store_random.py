"""Seeded random operations against both stores, compared with a plain-Python model.

After every operation the store's ``check()`` must hold and its state, per-subject counts and a
sample of filtered reads must equal the model's. File stores are also closed and reopened at
random (with and without the index snapshot), so recovery is held to the same model.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from headwater.server.routing.subjects import subject_matches
from headwater.server.store import (
    StoreConfig,
    StoreError,
    StoreLimits,
    StreamStore,
    open_store,
    seqindex,
)
from headwater.server.store.base import StoredMsg, file_msg_size, memory_msg_size

MakeStore = Callable[..., StreamStore]
SUBJECTS = ["a.1", "a.2", "a.3", "b.1", "b.2", "c", "a.1.x"]
FILTERS = [">", "a.*", "a.>", "b.1", "*.2", "c", "zzz"]


class Model:
    """The reference semantics, written the slow obvious way."""

    def __init__(self, kind: str, limits: StoreLimits) -> None:
        self.kind = kind
        self.limits = limits
        self.msgs: dict[int, tuple[str, bytes, bytes, int, int]] = {}
        self.first = 1
        self.last = 0

    def size(self, subj: str, hdr: bytes, data: bytes) -> int:
        return (file_msg_size if self.kind == "file" else memory_msg_size)(subj, hdr, data)

    @property
    def bytes(self) -> int:
        return sum(self.size(s, h, d) for s, h, d, _, _ in self.msgs.values())

    def _fix_first(self) -> None:
        self.first = min(self.msgs) if self.msgs else self.last + 1

    def remove(self, seq: int) -> bool:
        if seq not in self.msgs:
            return False
        del self.msgs[seq]
        self._fix_first()
        return True

    def of(self, subj: str) -> list[int]:
        return sorted(s for s, m in self.msgs.items() if m[0] == subj)

    def refusal(self, subj: str, hdr: bytes, data: bytes) -> str | None:
        lim = self.limits
        if lim.max_msg_size >= 0 and len(hdr) + len(data) > lim.max_msg_size:
            return "msg_too_large"
        mine = self.of(subj)
        asl = lim.max_msgs_per_subject > 0 and len(mine) >= lim.max_msgs_per_subject
        if lim.discard != "new":
            return None
        if asl and lim.discard_new_per_subject:
            return "max_msgs_per_subject"
        if 0 < lim.max_msgs <= len(self.msgs) and not asl:
            return "max_msgs"
        if lim.max_bytes > 0:
            need = len(hdr) + len(data) if self.kind == "file" else self.size(subj, hdr, data)
            if self.bytes + need >= lim.max_bytes:
                if not asl:
                    return "max_bytes"
                s, h, d, _, _ = self.msgs[mine[0]]
                oldest = self.size(s, h, d)
                if oldest < need or (oldest == need and self.kind == "file"):
                    return "max_bytes"
        return None

    def store(self, seq: int, ts: int, subj: str, hdr: bytes, data: bytes, ttl: int) -> None:
        assert seq == self.last + 1
        self.msgs[seq] = (subj, hdr, data, ts, ttl)
        self.last = seq
        self._fix_first()
        self.enforce(subj)

    def store_raw(self, seq: int, ts: int, subj: str, hdr: bytes, data: bytes) -> None:
        """A restored or mirrored message: its own sequence, no limits applied."""
        assert seq > self.last
        self.msgs[seq] = (subj, hdr, data, ts, 0)
        self.last = seq
        self._fix_first()

    def enforce(self, subject: str | None = None) -> None:
        """Apply the limits; an append only trims its own subject to the per-subject limit
        (others can be over it after a raw append, which applies no limits)."""
        lim = self.limits
        if lim.max_msgs_per_subject > 0:
            for subj in {m[0] for m in self.msgs.values()} if subject is None else {subject}:
                mine = self.of(subj)
                for s in mine[: max(0, len(mine) - lim.max_msgs_per_subject)]:
                    self.remove(s)
        if lim.discard == "old":
            while lim.max_msgs > 0 and len(self.msgs) > lim.max_msgs:
                self.remove(self.first)
            while lim.max_bytes > 0 and self.bytes > lim.max_bytes:
                self.remove(self.first)

    def compact(self, seq: int) -> int:
        if seq == 0:
            seq = self.last + 1
        gone = [s for s in self.msgs if s < seq]
        for s in gone:
            del self.msgs[s]
        if seq > self.last + 1:
            self.last = seq - 1
        self._fix_first()
        if not self.msgs:
            self.first = max(self.first, seq) if seq > self.last else self.last + 1
        return len(gone)

    def purge(self, subject: str, seq: int, keep: int) -> int:
        if subject in ("", ">"):
            if keep == 0 and seq == 0:
                return self.compact(0)
            if seq > 1:
                return self.compact(seq)
            if keep > 0:
                return 0 if keep >= len(self.msgs) else self.compact(self.last - keep + 1)
            return 0
        match = sorted(
            s for s, m in self.msgs.items() if not subject or subject_matches(subject, m[0])
        )
        if not match:
            return 0
        count = len(match)
        if keep > 0:
            if keep >= count:
                return 0
            count -= keep
        hi = seq - 1 if seq > 1 else self.last
        gone = [s for s in match if s <= hi][:count]
        for s in gone:
            self.remove(s)
        return len(gone)

    def expire(self, now: int) -> int:
        n = 0
        for seq, (_, _, _, ts, ttl) in sorted(self.msgs.items()):
            by_ttl = ttl > 0 and ts + ttl <= now
            by_age = self.limits.max_age > 0 and ttl >= 0 and ts <= now - self.limits.max_age
            if by_ttl or by_age:
                self.remove(seq)
                n += 1
        return n

    def skip(self, n: int) -> None:
        self.last += n
        self._fix_first()

    def matching(self, filter: str) -> list[int]:
        return sorted(
            s for s, m in self.msgs.items() if not filter or subject_matches(filter, m[0])
        )


def compare(store: StreamStore, model: Model, rng: random.Random) -> None:
    store.check()
    st = store.state(deleted_details=True)
    want_deleted = [s for s in range(model.first, model.last + 1) if s not in model.msgs]
    assert (st.msgs, st.bytes, st.first_seq, st.last_seq) == (
        len(model.msgs),
        model.bytes,
        model.first,
        model.last,
    )
    assert st.deleted == want_deleted and st.num_deleted == len(want_deleted)
    counts: dict[str, int] = {}
    for subj, *_ in model.msgs.values():
        counts[subj] = counts.get(subj, 0) + 1
    assert store.subject_state(">") == counts
    assert st.num_subjects == len(counts)
    for _ in range(3):
        filter = rng.choice(FILTERS)
        start = rng.randint(model.first - 2, model.last + 2)
        match = model.matching(filter)
        after = [s for s in match if s >= start]
        msg = store.load_next(filter, start)
        assert (msg.seq if msg else None) == (after[0] if after else None), (filter, start)
        if msg is not None:
            subj, hdr, data, ts, _ = model.msgs[msg.seq]
            assert (msg.subject, msg.hdr, msg.data, msg.ts) == (subj, hdr, data, ts)
        assert store.num_pending(filter, start) == len(after)
        compare_batch(store, model, rng, filter, start, after)
        lps = {model.msgs[s][0] for s in match if s >= start}
        last_per = {model.msgs[s][0]: s for s in match}
        assert store.num_pending(filter, start, last_per_subject=True) == sum(
            1 for subj in lps if last_per[subj] >= start
        )
        before = [s for s in match if s <= start]
        prev = store.load_prev(filter, start)
        assert (prev.seq if prev else None) == (before[-1] if before else None)
        last = store.load_last(filter)
        assert (last.seq if last else None) == (match[-1] if match else None)
        assert store.subjects_last(filter) == last_per


def compare_batch(
    store: StreamStore, model: Model, rng: random.Random, filter: str, start: int, after: list[int]
) -> None:
    """``load_next_batch`` returns what successive ``load_next`` calls would, within its caps."""
    recent = getattr(store, "_recent", None)
    if recent is not None and rng.random() < 0.5:
        recent.clear()  # read from the blocks, not from the file store's memory of them
    limit = rng.randint(1, 8)
    max_bytes = rng.choice([1, 25, 80, 1 << 20])
    want, size = [], 0
    for seq in after:
        if len(want) >= limit or size >= max_bytes:
            break
        subj, hdr, data, ts, _ = model.msgs[seq]
        want.append((subj, seq, hdr, data, ts))
        size += len(hdr) + len(data)
    got = store.load_next_batch(filter, start, limit, max_bytes)
    assert [(m.subject, m.seq, m.hdr, m.data, m.ts) for m in got] == want, (filter, start)


LIMIT_CHOICES = [
    StoreLimits(),
    StoreLimits(max_msgs=12),
    StoreLimits(max_bytes=900),
    StoreLimits(max_msgs_per_subject=3),
    StoreLimits(max_msgs=10, discard="new"),
    StoreLimits(max_bytes=700, discard="new", max_msgs_per_subject=2),
    StoreLimits(max_msgs_per_subject=2, discard="new", discard_new_per_subject=True),
    StoreLimits(max_age=3_000_000, max_msg_size=40),
]


@pytest.mark.parametrize("seed", range(int(os.environ.get("STORE_SEEDS", "4"))))
def test_random_operations_match_model(
    make_store: MakeStore, kind: str, seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed * 7919 + (kind == "file"))
    if seed % 2:
        # Tiny tuning constants push every index code path (trimming the dead prefix, chunked
        # scans, many-subject searches) with the few messages a test holds.
        monkeypatch.setattr(seqindex, "_TRIM_MIN", 3)
        monkeypatch.setattr(seqindex, "_CHUNK", 3)
        monkeypatch.setattr(seqindex, "_FEW", 1)
    limits = rng.choice(LIMIT_CHOICES)
    store = make_store(limits=limits, block_size=512)
    model = Model(kind, limits)
    stamps: list[int] = [0]
    for step in range(350):
        if kind == "file" and rng.random() < 0.06:
            store.close()
            if rng.random() < 0.5:
                os.unlink(tmp_path / "S" / "msgs" / "index.snap")
            store = make_store("S", limits=model.limits, block_size=512)
            assert store.recovery_report.clean
        else:
            random_step(store, model, rng, stamps, step)
        compare(store, model, rng)


async def test_file_store_random_under_event_loop(tmp_path: Path) -> None:
    """File store only: block rewrites (packing, compaction) complete in background rounds."""
    rng = random.Random(99)
    limits = StoreLimits(max_msgs_per_subject=4)

    def make_store(limits: StoreLimits, **kw: Any) -> StreamStore:
        return open_store(StoreConfig("R", directory=tmp_path, limits=limits, **kw))

    store = make_store(limits=limits, block_size=400, compression="s2")
    model = Model("file", limits)
    stamps: list[int] = [0]
    for step in range(500):
        random_step(store, model, rng, stamps, step)
        if rng.random() < 0.3:
            await store.durable()
        elif rng.random() < 0.5:
            await asyncio.sleep(0)
        compare(store, model, rng)
    await store.aclose()
    again = make_store(limits=model.limits, block_size=400, compression="s2")
    assert again.recovery_report.clean and again.recovery_report.used_index
    compare(again, model, rng)
    again.close()


def random_step(
    store: StreamStore, model: Model, rng: random.Random, stamps: list[int], step: int
) -> None:
    op = rng.random()
    if op < 0.55:
        subj = rng.choice(SUBJECTS)
        hdr = rng.choice([b"", b"NATS/1.0\r\nK: v\r\n\r\n"])
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 30)))
        ttl = rng.choice([0, 0, 0, 2_000_000, -1])
        want = model.refusal(subj, hdr, data)
        try:
            seq, ts = store.store_msg(subj, hdr, data, ttl_ns=ttl)
        except StoreError as err:
            assert err.kind == want, (step, err)
        else:
            assert want is None, (step, want)
            model.store(seq, ts, subj, hdr, data, ttl)
            stamps.append(ts)
    elif op < 0.68:
        seq = rng.randint(model.first - 1, model.last + 1)
        assert store.remove_msg(seq, erase=rng.random() < 0.5) == model.remove(seq)
    elif op < 0.74:
        subject = rng.choice(["", ">", *FILTERS])
        seq = rng.choice([0, 0, rng.randint(1, model.last + 3)])
        keep = rng.choice([0, 0, rng.randint(1, 6)])
        assert store.purge(subject, seq, keep) == model.purge(subject, seq, keep), step
    elif op < 0.77:
        seq = rng.randint(max(1, model.first - 2), model.last + 5)
        assert store.compact(seq) == model.compact(seq)
    elif op < 0.82:
        now = rng.choice(stamps) + rng.choice([0, 2_000_000, 3_000_000, 4_000_000])
        assert store.expire(now) == model.expire(now), step
    elif op < 0.85:
        new = rng.choice(LIMIT_CHOICES)
        store.update_limits(new)
        model.limits = new
        if new.discard == "old" or new.max_msgs_per_subject > 0:
            model.enforce()
    elif op < 0.88:
        n = rng.randint(1, 4)
        store.skip_msgs(model.last + 1, n)
        model.skip(n)
    elif op < 0.93:
        raw_batch(store, model, rng, stamps)


def raw_batch(store: StreamStore, model: Model, rng: random.Random, stamps: list[int]) -> None:
    """``store_raw_batch`` with gaps between sequences; sometimes one message out of order,
    which must refuse the whole batch and leave the store as it was."""
    seq = model.last
    ts = max(max(stamps), time.time_ns())
    batch = []
    for _ in range(rng.randint(1, 6)):
        seq += rng.choice([1, 1, 1, 2, 5])
        ts += rng.choice([0, 1000])
        hdr = rng.choice([b"", b"NATS/1.0\r\nK: v\r\n\r\n"])
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 30)))
        batch.append(StoredMsg(rng.choice(SUBJECTS), seq, hdr, data, ts))
    if rng.random() < 0.2:
        i = rng.randrange(len(batch))
        bad = batch[i]
        wrong = {"seq": model.last} if rng.random() < 0.5 else {"ts": stamps[0] if i == 0 else 0}
        batch[i] = msgspec.structs.replace(bad, **wrong)
        with pytest.raises(StoreError):
            store.store_raw_batch(batch)
        return
    store.store_raw_batch(batch)
    for m in batch:
        model.store_raw(m.seq, m.ts, m.subject, m.hdr, m.data)
        stamps.append(m.ts)
