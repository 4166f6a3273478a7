"""``IndexedStore``: the whole ``StreamStore`` contract over a ``SeqIndex``, minus persistence.

Limits, purge/compact semantics, TTL and max-age expiry, queries and invariants live here once;
``MemoryStore`` and ``FileStore`` only say where payloads go (``_write``/``_read``) and how a
removal or a new sequence floor is recorded (``_removed``/``_floor``). The semantics are
nats-server's (memstore.go ``storeRawMsg``, ``PurgeEx``, ``Compact``, ``expireMsgs``):

* discard new refuses an append at ``max_msgs``/``max_bytes`` unless the subject is at its
  per-subject limit (then the append replaces that subject's oldest message);
* discard old drops from the front until ``msgs``/``bytes`` are within limits;
* the per-subject limit always drops the subject's oldest message;
* ``max_age`` removes messages with ``ts <= now - max_age`` except Nats-TTL "never" ones;
  a positive TTL also removes the message at ``ts + ttl`` (whichever comes first).
"""

from __future__ import annotations

import heapq
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

from headwater.server.store.base import (
    MaxBytesExceeded,
    MaxMsgsExceeded,
    MaxMsgsPerSubjectExceeded,
    MsgTooLarge,
    RecoveryReport,
    RemoveHook,
    StorageFull,
    StoreClosed,
    StoreConfig,
    StoredMsg,
    StoreError,
    StoreFailed,
    StoreLimits,
    StreamState,
)
from headwater.server.store.seqindex import SeqIndex
from headwater.server.store.subjects import is_all


class IndexedStore(ABC):
    """Base class of both stores. Subclasses implement the ``_write``… hooks below."""

    def __init__(self, config: StoreConfig, objects_in_index: bool) -> None:
        self.config = config
        self._limits = config.limits
        self._budget = config.budget
        self._idx = SeqIndex(config.first_seq, objects_in_index)
        self._last_ts = 0
        self._ttl: dict[int, int] = {}
        """seq → expiry (ns) for messages with a positive TTL."""
        self._ttl_heap: list[tuple[int, int]] = []
        """(expiry, seq), lazily cleaned: entries whose seq left ``_ttl`` are skipped."""
        self._never: set[int] = set()
        """Messages exempt from max_age (Nats-TTL: never)."""
        self._hook_queue: list[tuple[int, str, str]] = []
        self.on_remove: RemoveHook | None = None
        self.before_remove: Callable[[int], None] | None = None
        """Called with a sequence just before one message is removed (a limit, expiry,
        ``remove_msg``, a subject purge), while it can still be read: a replica's snapshot
        producer keeps a copy of what it has not sent yet. Not called for bulk drops (a purge
        below a sequence, or of everything). It must not change the store."""
        self.removal_reason = ""
        self.recovery_report = RecoveryReport()
        self.failed: StoreFailed | None = None
        self.on_failure: Callable[[StoreFailed], None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ hooks for subclasses

    #: Discard new at a subject's limit replaces its oldest message only if that frees enough
    #: bytes; the file store refuses when ``oldest <= need``, the memory store when
    #: ``oldest < need`` (upstream's two stores differ, and clients see the difference).
    _replace_needs_strictly_more = True

    @abstractmethod
    def _msg_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        """Accounted bytes of one message (the reference's formula for this storage type)."""

    @abstractmethod
    def _discard_new_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        """Size the discard-new byte check adds to ``bytes`` (differs per store, as upstream)."""

    @abstractmethod
    def _write(
        self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: int, size: int
    ) -> Any:
        """Persist a new message (``size`` = its accounted bytes); returns its index ``loc``."""

    def _write_run(self, msgs: Sequence[StoredMsg], sizes: list[int]) -> list[Any]:
        """Persist consecutive messages (no TTLs); returns their ``loc``s. Stores with a
        cheaper bulk write override this."""
        return [
            self._write(m.seq, m.subject, m.hdr, m.data, m.ts, 0, size)
            for m, size in zip(msgs, sizes, strict=True)
        ]

    @abstractmethod
    def _read(self, seq: int, loc: Any) -> StoredMsg | None:
        """Load a live message; None if its record turned out corrupt (already reported)."""

    @abstractmethod
    def _removed(self, seq: int, size: int, loc: Any, erase: bool) -> None:
        """Record that ``seq`` is gone (after the index dropped it)."""

    @abstractmethod
    def _floor(self) -> None:
        """Record the index's new ``first``/``last`` after a bulk drop or a skip."""

    @abstractmethod
    def _after_write(self) -> None:
        """Called at the end of every ``store_msg`` (sync policy hooks)."""

    # ------------------------------------------------------------------ append

    @property
    def limits(self) -> StoreLimits:
        return self._limits

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed()

    def _check_writable(self) -> None:
        """Appends (and sequence moves) are refused once the store failed (fail-stop)."""
        if self._closed:
            raise StoreClosed()
        if self.failed is not None:
            raise self.failed

    def _reserve_batch(self, msgs: Sequence[StoredMsg]) -> None:  # noqa: B027 - optional hook
        """Make room for ``msgs`` before any of them is stored, or raise ``StorageFull``."""

    def store_msg(
        self, subject: str, hdr: bytes, data: bytes, ttl_ns: int = 0, ts_ns: int | None = None
    ) -> tuple[int, int]:
        self._check_writable()
        lim = self._limits
        idx = self._idx
        if lim.max_msg_size >= 0 and len(hdr) + len(data) > lim.max_msg_size:
            raise MsgTooLarge()
        size = self._msg_size(subject, hdr, data)
        per = lim.max_msgs_per_subject
        x = idx.subjects.ids.get(subject) if per > 0 else None
        at_subject_limit = x is not None and idx.subjects.count[x] >= per
        if lim.discard == "new":
            if at_subject_limit and lim.discard_new_per_subject:
                raise MaxMsgsPerSubjectExceeded()
            if 0 < lim.max_msgs <= idx.msgs and not at_subject_limit:
                raise MaxMsgsExceeded()
            if lim.max_bytes > 0:
                need = self._discard_new_size(subject, hdr, data)
                if idx.bytes + need >= lim.max_bytes:
                    if not at_subject_limit:
                        raise MaxBytesExceeded()
                    assert x is not None
                    oldest = idx.size[idx.first_of(x) - idx.base]
                    if oldest < need or (oldest == need and self._replace_needs_strictly_more):
                        raise MaxBytesExceeded()
        budget = self._budget
        if budget is not None and not budget.fits(size):
            raise StorageFull()
        ts = time.time_ns() if ts_ns is None else ts_ns
        if ts < self._last_ts:
            ts = self._last_ts  # keep time monotonic per stream: max_age trims a prefix
        seq = idx.last + 1
        self._append(seq, subject, hdr, data, ts, ttl_ns, size)
        if per > 0:
            x = idx.subjects.ids[subject]
            while idx.subjects.count[x] > per:
                self._remove(idx.first_of(x), False, "max_msgs_per_subject")
        if lim.discard == "old":
            self._enforce_old()
        self._after_write()
        if self._hook_queue:
            self._run_hooks()
        return seq, ts

    def _append(
        self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl_ns: int, size: int
    ) -> None:
        """Write one message at ``seq`` and index it: the part every append shares."""
        loc = self._write(seq, subject, hdr, data, ts, ttl_ns, size)
        self._idx.append(seq, subject, ts, size, loc)
        self._last_ts = ts
        if self._budget is not None:
            self._budget.used += size
        if ttl_ns > 0:
            exp = ts + ttl_ns
            self._ttl[seq] = exp
            heapq.heappush(self._ttl_heap, (exp, seq))
        elif ttl_ns < 0:
            self._never.add(seq)

    def store_raw_msg(
        self, subject: str, hdr: bytes, data: bytes, seq: int, ts: int, ttl_ns: int = 0
    ) -> None:
        self._check_writable()
        idx = self._idx
        if seq <= idx.last:
            raise StoreError(f"restored message {seq} is not after {idx.last}")
        if ts < self._last_ts:
            raise StoreError(f"restored message {seq} is older than the one before it")
        size = self._msg_size(subject, hdr, data)
        budget = self._budget
        if budget is not None and not budget.fits(size):
            raise StorageFull()
        self._reserve_batch([StoredMsg(subject, seq, hdr, data, ts)])  # before the gap is used
        if seq > idx.last + 1:
            # The gap takes the previous message's time, keeping timestamps non-decreasing.
            idx.skip(seq - idx.last - 1, self._last_ts)
            self._floor()
        self._append(seq, subject, hdr, data, ts, ttl_ns, size)
        self._after_write()

    def store_raw_batch(self, msgs: Sequence[StoredMsg]) -> None:
        self._check_writable()
        if not msgs:
            return
        idx = self._idx
        last_seq, last_ts = idx.last, self._last_ts
        runs: list[int] = []
        """Where each run of consecutive sequences starts (gaps become deleted ones)."""
        for i, m in enumerate(msgs):
            if m.seq <= last_seq:
                raise StoreError(f"restored message {m.seq} is not after {last_seq}")
            if m.ts < last_ts:
                raise StoreError(f"restored message {m.seq} is older than the one before it")
            if m.seq != last_seq + 1 or i == 0:
                runs.append(i)
            last_seq, last_ts = m.seq, m.ts
        msg_size = self._msg_size
        sizes = [msg_size(m.subject, m.hdr, m.data) for m in msgs]
        total = sum(sizes)
        budget = self._budget
        if budget is not None and not budget.fits(total):
            raise StorageFull()
        self._reserve_batch(msgs)
        runs.append(len(msgs))
        for a, b in pairwise(runs):
            first = msgs[a].seq
            if first > idx.last + 1:
                idx.skip(first - idx.last - 1, self._last_ts)
                self._floor()
            run = msgs[a:b]
            locs = self._write_run(run, sizes[a:b])
            idx.extend(run, sizes[a:b], locs)
            self._last_ts = run[-1].ts
        if budget is not None:
            budget.used += total
        self._after_write()

    def _enforce_old(self) -> None:
        lim = self._limits
        idx = self._idx
        if lim.max_msgs > 0:
            while idx.msgs > lim.max_msgs:
                self._remove(idx.first, False, "max_msgs")
        if lim.max_bytes > 0:
            while idx.bytes > lim.max_bytes:
                self._remove(idx.first, False, "max_bytes")

    def skip_msgs(self, seq: int, n: int, ts_ns: int | None = None) -> None:
        self._check_writable()
        idx = self._idx
        if seq != idx.last + 1:
            raise StoreError("expected sequence does not match store")
        if n <= 0:
            return
        self._last_ts = max(self._last_ts, time.time_ns() if ts_ns is None else ts_ns)
        idx.skip(n, self._last_ts)
        self._floor()

    # ------------------------------------------------------------------ removal

    def _remove(self, seq: int, erase: bool, reason: str = "") -> bool:
        if self.before_remove is not None:
            self.before_remove(seq)
        got = self._idx.remove(seq)
        if got is None:
            return False
        subject, size, loc = got
        if self._ttl:
            self._ttl.pop(seq, None)
            if len(self._ttl_heap) > 2 * len(self._ttl) + 1024:
                self._ttl_heap = [(e, s) for s, e in self._ttl.items()]
                heapq.heapify(self._ttl_heap)
        if self._never:
            self._never.discard(seq)
        if self._budget is not None:
            self._budget.used -= size
        self._removed(seq, size, loc, erase)
        if reason:
            self._hook_queue.append((seq, subject, reason))
        return True

    def _run_hooks(self) -> None:
        queue, self._hook_queue = self._hook_queue, []
        hook = self.on_remove
        if hook is None:
            return
        for seq, subject, reason in queue:
            self.removal_reason = reason
            hook(seq, subject)
        self.removal_reason = ""

    def remove_msg(self, seq: int, erase: bool = True) -> bool:
        self._check_open()
        return self._remove(seq, erase)

    def _drop_below(self, seq: int) -> int:
        """Remove everything below ``seq`` (``seq`` ≤ last + 1). Returns the count."""
        idx = self._idx
        if seq <= idx.first:
            return 0
        before_msgs, before_bytes = idx.msgs, idx.bytes
        if seq > idx.last:
            idx.reset(seq)
        else:
            idx.remove_prefix(seq)
        if self._budget is not None:
            self._budget.used -= before_bytes - idx.bytes
        first = idx.first
        if self._ttl:
            for s in [s for s in self._ttl if s < first]:
                del self._ttl[s]
        if self._never:
            self._never = {s for s in self._never if s >= first}
        self._floor()
        return before_msgs - idx.msgs

    def purge(self, subject: str = "", seq: int = 0, keep: int = 0) -> int:
        self._check_open()
        idx = self._idx
        if is_all(subject):
            if keep == 0 and seq == 0:
                return self._drop_below(idx.last + 1)
            if seq > 1:
                return self.compact(seq)
            if keep > 0:
                if keep >= idx.msgs:
                    return 0
                return self.compact(idx.last - keep + 1)
            return 0
        ids = idx.subjects.match(subject)
        assert ids is not None
        total = sum(idx.subjects.count[x] for x in ids)
        if total == 0:
            return 0
        if keep > 0:
            if keep >= total:
                return 0
            total -= keep
        hi = seq - 1 if seq > 1 else idx.last
        seqs = idx.matching_seqs(set(ids), idx.first, hi, total)
        for s in seqs:
            self._remove(s, False)
        return len(seqs)

    def compact(self, seq: int) -> int:
        self._check_open()
        idx = self._idx
        if seq == 0:
            return self._drop_below(idx.last + 1)
        if seq > idx.last + 1:
            removed = idx.msgs
            self._drop_below(idx.last + 1)
            idx.reset(seq)
            self._floor()
            return removed
        return self._drop_below(seq)

    def set_first_seq(self, seq: int) -> int:
        self._check_writable()
        idx = self._idx
        if seq < idx.last:
            raise StoreError("partial purges not supported")
        removed = idx.msgs
        self._drop_below(idx.last + 1)
        if seq != idx.first:
            idx.reset(seq)
            self._floor()
        return removed

    # ------------------------------------------------------------------ limits and expiry

    def update_limits(self, limits: StoreLimits) -> None:
        self._check_open()
        self._limits = limits
        idx = self._idx
        per = limits.max_msgs_per_subject
        if per > 0:
            st = idx.subjects
            for x in [x for x in st.ids.values() if st.count[x] > per]:
                while st.count[x] > per:
                    self._remove(idx.first_of(x), False, "max_msgs_per_subject")
        if limits.discard == "old":
            self._enforce_old()
        self._run_hooks()

    def expire(self, now_ns: int | None = None) -> int:
        self._check_open()
        now = time.time_ns() if now_ns is None else now_ns
        removed = 0
        heap = self._ttl_heap
        while heap and heap[0][0] <= now:
            exp, seq = heapq.heappop(heap)
            if self._ttl.get(seq) == exp and self._remove(seq, False, "ttl"):
                removed += 1
        max_age = self._limits.max_age
        if max_age > 0:
            cutoff = now - max_age
            idx = self._idx
            seq: int | None = idx.first
            while seq is not None and seq <= idx.last and idx.ts[seq - idx.base] <= cutoff:
                if seq in self._never:
                    seq = idx.next_live(seq + 1)
                    continue
                self._remove(seq, False, "max_age")
                removed += 1
                seq = idx.next_live(seq + 1)
        self._run_hooks()
        return removed

    def next_expiry(self) -> int | None:
        best: int | None = None
        idx = self._idx
        if self._limits.max_age > 0 and idx.msgs:
            seq: int | None = idx.first
            while seq is not None and seq in self._never:
                seq = idx.next_live(seq + 1)
            if seq is not None:
                best = idx.ts[seq - idx.base] + self._limits.max_age
        heap = self._ttl_heap
        while heap and self._ttl.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        if heap and (best is None or heap[0][0] < best):
            best = heap[0][0]
        return best

    # ------------------------------------------------------------------ reads

    def load_msg(self, seq: int) -> StoredMsg | None:
        idx = self._idx
        if not idx.is_live(seq):
            return None
        return self._read(seq, idx.loc[seq - idx.base])

    def _load_found(self, seq: int | None, ids: set[int] | None, forward: bool) -> StoredMsg | None:
        # A record that fails its checksum is dropped by _read; keep searching past it.
        idx = self._idx
        while seq is not None:
            msg = self._read(seq, idx.loc[seq - idx.base])
            if msg is not None:
                return msg
            seq = idx.next_match(ids, seq + 1) if forward else idx.prev_match(ids, seq - 1)
        return None

    def load_next(self, filter: str, start_seq: int) -> StoredMsg | None:
        idx = self._idx
        ids = idx.subjects.match(filter)
        return self._load_found(idx.next_match(ids, start_seq), ids, True)

    def load_next_batch(
        self, filter: str, start_seq: int, limit: int, max_bytes: int
    ) -> list[StoredMsg]:
        idx = self._idx
        ids = idx.subjects.match(filter)
        found: list[StoredMsg] = []
        seq, size = start_seq, 0
        while len(found) < limit and size < max_bytes:
            msg = self._load_found(idx.next_match(ids, seq), ids, True)
            if msg is None:
                break
            found.append(msg)
            seq = msg.seq + 1
            size += len(msg.hdr) + len(msg.data)
        return found

    def is_live(self, seq: int) -> bool:
        return self._idx.is_live(seq)

    def load_last(self, filter: str) -> StoredMsg | None:
        return self.load_prev(filter, self._idx.last)

    def load_prev(self, filter: str, start_seq: int) -> StoredMsg | None:
        idx = self._idx
        ids = idx.subjects.match(filter)
        if ids is not None and len(ids) == 1 and start_seq >= idx.last:
            (x,) = ids
            return self._load_found(idx.last_of(x), ids, False)
        return self._load_found(idx.prev_match(ids, start_seq), ids, False)

    def seq_from_time(self, ts_ns: int) -> int:
        return self._idx.seq_from_time(ts_ns)

    # ------------------------------------------------------------------ state

    def state(self, deleted_details: bool = False) -> StreamState:
        idx = self._idx
        msgs = idx.msgs
        return StreamState(
            msgs=msgs,
            bytes=idx.bytes,
            first_seq=idx.first,
            first_ts=idx.ts[idx.first - idx.base] if msgs else 0,
            last_seq=idx.last,
            last_ts=self._last_ts,
            num_deleted=idx.last - idx.first + 1 - msgs if msgs else 0,
            num_subjects=len(idx.subjects),
            deleted=idx.deleted() if deleted_details else None,
        )

    def subject_state(self, filter: str) -> dict[str, int]:
        st = self._idx.subjects
        ids = st.match(filter)
        it = st.ids.items() if ids is None else ((st.names[x], x) for x in ids)
        return {name: st.count[x] for name, x in it if name is not None}

    def subjects_last(self, filter: str) -> dict[str, int]:
        idx = self._idx
        st = idx.subjects
        ids = st.match(filter)
        it = list(st.ids.values()) if ids is None else list(ids)
        return {st.names[x]: idx.last_of(x) for x in it}  # type: ignore[misc]

    def num_pending(self, filter: str, start_seq: int, last_per_subject: bool = False) -> int:
        idx = self._idx
        ids = idx.subjects.match(filter)
        if last_per_subject:
            return idx.count_last_per_subject(ids, start_seq)
        return idx.count_match(ids, start_seq)

    def check(self) -> None:
        idx = self._idx
        idx.check()
        for seq in self._ttl:
            assert idx.is_live(seq), f"TTL kept for removed message {seq}"
        for seq in self._never:
            assert idx.is_live(seq), f"never-expire kept for removed message {seq}"
        if idx.msgs:
            assert idx.ts[idx.last - idx.base] <= self._last_ts
