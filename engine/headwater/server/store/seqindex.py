"""The in-memory index both stores share: sequence → (live, subject id, time, size, location).

Sequences are contiguous, so the index is a handful of parallel arrays addressed by
``seq - base`` (``array``/``bytearray``: 21 bytes per message, no Python object per message).
Removal marks a slot dead; the dead prefix is cut off once it is a large share of the arrays, so
trimming costs O(1) amortised per message. Searches lean on C-speed built-ins:
``bytearray.find`` for "next live", ``array.index`` for "next message of subject x",
``bytearray.count`` for pending counts — the sortedcontainers lesson of letting built-ins run the
inner loops.

Invariants (``check()``): ``len(arrays) == last - base + 1``; a slot is live iff its subject id
is not ``DEAD``; dead slots have size 0 (so ``sum(size) == bytes``); ``first`` is the first live
sequence, or ``last + 1`` when empty; timestamps never decrease with the sequence.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from headwater.server.store.subjects import FIRST_STALE, LAST_STALE, SubjectTable

if TYPE_CHECKING:
    from headwater.server.store.base import StoredMsg

DEAD = 0xFFFFFFFF
"""Subject id of a removed (or skipped) slot; never a real id."""

_FEW = 8
"""Up to this many subjects are searched one by one with ``array.index``; more are scanned
together in one pass with a set-membership test."""
_CHUNK = 8192
_TRIM_MIN = 4096


class SeqIndex:
    """Per-sequence arrays plus the subject table. ``loc`` holds the file offset (file store)
    or the ``StoredMsg`` itself (memory store)."""

    __slots__ = (
        "base",
        "bytes",
        "first",
        "last",
        "live",
        "loc",
        "msgs",
        "sid",
        "size",
        "subjects",
        "ts",
    )

    def __init__(self, first_seq: int, objects: bool) -> None:
        self.base = first_seq
        self.first = first_seq
        self.last = first_seq - 1
        self.msgs = 0
        self.bytes = 0
        self.live = bytearray()
        self.sid = array("I")
        self.ts = array("q")
        self.size = array("I")
        self.loc: Any = [] if objects else array("I")
        self.subjects = SubjectTable()

    # ------------------------------------------------------------------ mutation

    def append(self, seq: int, subject: str, ts: int, size: int, loc: Any) -> None:
        """Add the message ``seq`` (must be ``last + 1``)."""
        assert seq == self.last + 1, f"append {seq} after {self.last}"
        if self.msgs == 0:
            self._reset_arrays(seq)
            self.first = seq
        st = self.subjects
        x = st.intern(subject, seq)
        c = st.count[x]
        st.count[x] = c + 1
        if c == 0:
            st.first[x] = seq
            st.flags[x] = 0
        st.last[x] = seq
        st.flags[x] &= ~LAST_STALE
        self.live.append(1)
        self.sid.append(x)
        self.ts.append(ts)
        self.size.append(size)
        self.loc.append(loc)
        self.last = seq
        self.msgs += 1
        self.bytes += size

    def extend(self, msgs: Sequence[StoredMsg], sizes: list[int], locs: list[Any]) -> None:
        """``append`` for consecutive messages (the first must be ``last + 1``), in bulk."""
        n = len(msgs)
        first = msgs[0].seq
        assert first == self.last + 1 and msgs[-1].seq == first + n - 1, "not consecutive"
        if self.msgs == 0:
            self._reset_arrays(first)
            self.first = first
        st = self.subjects
        intern = st.intern
        sids = array("I", bytes(4 * n))
        added: dict[int, int] = {}
        """subject id -> messages added (dicts keep first-seen order)."""
        subject, x = None, 0
        for i, m in enumerate(msgs):
            if m.subject != subject:
                subject = m.subject
                x = intern(subject, m.seq)
                if x not in added and st.count[x] == 0:
                    st.first[x] = m.seq
                    st.flags[x] = 0
                added[x] = added.get(x, 0) + 1
            else:
                added[x] += 1
            sids[i] = x
        for x, k in added.items():
            st.count[x] += k
        # Each subject's last message is the last one of the batch holding it.
        seen: set[int] = set()
        for i in range(n - 1, -1, -1):
            x = sids[i]
            if x not in seen:
                seen.add(x)
                st.last[x] = first + i
                st.flags[x] &= ~LAST_STALE
                if len(seen) == len(added):
                    break
        self.live.extend(b"\x01" * n)
        self.sid.extend(sids)
        self.ts.extend(array("q", [m.ts for m in msgs]))
        self.size.extend(array("I", sizes))
        self.loc.extend(locs)
        self.last = first + n - 1
        self.msgs += n
        self.bytes += sum(sizes)

    def remove(self, seq: int) -> tuple[str, int, Any] | None:
        """Remove ``seq``; returns ``(subject, size, loc)`` or None when it was not live."""
        i = seq - self.base
        if i < 0 or seq > self.last or not self.live[i]:
            return None
        x = self.sid[i]
        size = self.size[i]
        loc = self.loc[i]
        self.live[i] = 0
        self.sid[i] = DEAD
        self.size[i] = 0
        if type(self.loc) is list:
            self.loc[i] = None
        self.msgs -= 1
        self.bytes -= size
        st = self.subjects
        name = st.names[x]
        assert name is not None
        self._subject_removed(x, seq)
        if seq == self.first:
            self._advance_first(i + 1)
        return name, size, loc

    def skip(self, n: int, ts: int) -> None:
        """Consume ``n`` sequences without messages."""
        if n <= 0:
            return
        if self.msgs == 0:
            self.last += n
            self.first = self.last + 1
            self._reset_arrays(self.first)
            return
        self.live.extend(bytes(n))
        self.sid.extend(array("I", [DEAD]) * n)
        self.ts.extend(array("q", [ts]) * n)
        self.size.extend(array("I", bytes(4 * n)))
        if type(self.loc) is list:
            self.loc.extend([None] * n)
        else:
            self.loc.extend(array("I", bytes(4 * n)))
        self.last += n

    def reset(self, first_seq: int) -> None:
        """Drop everything; the next message will be ``first_seq``."""
        self.first = first_seq
        self.last = first_seq - 1
        self.msgs = 0
        self.bytes = 0
        self.subjects.clear()
        self._reset_arrays(first_seq)

    def remove_prefix(self, seq: int) -> None:
        """Remove every message below ``seq`` (``first < seq <= last``) in bulk, at C speed."""
        k = seq - self.base
        assert 0 < k <= len(self.live)
        st = self.subjects
        counts = Counter(self.sid[:k])
        counts.pop(DEAD, None)
        for x, n in counts.items():
            c = st.count[x] - n
            if c == 0:
                st.drop(x)
                continue
            st.count[x] = c
            # The subject's first is now at or after ``seq``: keep a lower bound.
            if st.first[x] < seq:
                st.first[x] = seq
                st.flags[x] |= FIRST_STALE
        self.msgs -= sum(counts.values())
        self.bytes -= sum(self.size[:k])
        self.live[:k] = bytes(k)
        self.sid[:k] = array("I", [DEAD]) * k
        self.size[:k] = array("I", bytes(4 * k))
        if type(self.loc) is list:
            self.loc[:k] = [None] * k
        self._advance_first(k)

    # ------------------------------------------------------------------ helpers

    def _reset_arrays(self, base: int) -> None:
        self.base = base
        self.live = bytearray()
        self.sid = array("I")
        self.ts = array("q")
        self.size = array("I")
        self.loc = [] if type(self.loc) is list else array("I")

    def _advance_first(self, from_pos: int) -> None:
        j = self.live.find(1, from_pos)
        if j < 0:
            self.first = self.last + 1
            self._reset_arrays(self.first)
            return
        self.first = self.base + j
        if j >= _TRIM_MIN and 2 * j > len(self.live):
            del self.live[:j]
            del self.sid[:j]
            del self.ts[:j]
            del self.size[:j]
            del self.loc[:j]
            self.base += j

    def _subject_removed(self, x: int, seq: int) -> None:
        st = self.subjects
        c = st.count[x] - 1
        if c == 0:
            st.drop(x)
            return
        st.count[x] = c
        fl = st.flags[x]
        if seq == st.first[x]:
            st.first[x] = seq + 1
            fl |= FIRST_STALE
        if seq == st.last[x]:
            st.last[x] = seq - 1
            fl |= LAST_STALE
        if c == 1:
            # One left: whichever bound is exact gives the other for free.
            if not fl & FIRST_STALE:
                st.last[x] = st.first[x]
                fl &= ~LAST_STALE
            elif not fl & LAST_STALE:
                st.first[x] = st.last[x]
                fl &= ~FIRST_STALE
        st.flags[x] = fl

    def first_of(self, x: int) -> int:
        """Exact first sequence of subject ``x``."""
        st = self.subjects
        if st.flags[x] & FIRST_STALE:
            lo = max(st.first[x], self.base) - self.base
            st.first[x] = self.base + self.sid.index(x, lo)
            st.flags[x] &= ~FIRST_STALE
        return st.first[x]

    def last_of(self, x: int) -> int:
        """Exact last sequence of subject ``x``."""
        st = self.subjects
        if st.flags[x] & LAST_STALE:
            pos = self._rfind(x, min(st.last[x], self.last) - self.base)
            assert pos >= 0
            st.last[x] = self.base + pos
            st.flags[x] &= ~LAST_STALE
        return st.last[x]

    def _rfind(self, x: int, hi_pos: int) -> int:
        """Position of the last slot ≤ ``hi_pos`` holding subject ``x``, or -1."""
        hi = hi_pos + 1
        step = 256
        while hi > 0:
            lo = max(0, hi - step)
            chunk = self.sid[lo:hi]
            chunk.reverse()
            try:
                return hi - 1 - chunk.index(x)
            except ValueError:
                hi = lo
                step = min(step * 4, 1 << 20)
        return -1

    # ------------------------------------------------------------------ queries

    def is_live(self, seq: int) -> bool:
        i = seq - self.base
        return 0 <= i < len(self.live) and self.live[i] == 1

    def next_live(self, seq: int) -> int | None:
        i = max(seq, self.first) - self.base
        j = self.live.find(1, i) if i < len(self.live) else -1
        return None if j < 0 else self.base + j

    def next_match(self, ids: set[int] | None, start: int) -> int | None:
        """First live sequence ≥ ``start`` whose subject id is in ``ids`` (None = any)."""
        start = max(start, self.first)
        if start > self.last:
            return None
        if ids is None or len(ids) == len(self.subjects):
            # ``ids`` holds live subjects only: matching all of them is matching any, and the
            # live bitmap answers that without looking at subjects (a consumer filtered on a
            # stream's single subject is the common case).
            return self.next_live(start)
        if len(ids) <= _FEW:
            best: int | None = None
            for x in ids:
                s = self._next_of(x, start, self.last + 1 if best is None else best)
                if s is not None:
                    best = s
            return best
        lo = start - self.base
        hi = len(self.sid)
        contains = ids.__contains__
        while lo < hi:
            end = min(hi, lo + _CHUNK)
            j = bytes(map(contains, self.sid[lo:end])).find(1)
            if j >= 0:
                return self.base + lo + j
            lo = end
        return None

    def _next_of(self, x: int, start: int, stop_seq: int) -> int | None:
        st = self.subjects
        f = st.first[x]
        exact_first = not st.flags[x] & FIRST_STALE
        if start <= f and exact_first:
            return f if f < stop_seq else None
        from_bound = start <= f
        lo = max(start, f) - self.base
        hi = min(stop_seq, st.last[x] + 1) - self.base
        if lo >= hi:
            return None
        try:
            s = self.base + self.sid.index(x, lo, hi)
        except ValueError:
            return None
        if from_bound:  # searched from the stale lower bound: this is the true first
            st.first[x] = s
            st.flags[x] &= ~FIRST_STALE
        return s

    def prev_match(self, ids: set[int] | None, start: int) -> int | None:
        """Last live sequence ≤ ``start`` whose subject id is in ``ids`` (None = any)."""
        start = min(start, self.last)
        if start < self.first:
            return None
        hi = start - self.base + 1
        if ids is None:
            j = self.live.rfind(1, 0, hi)
            return None if j < 0 else self.base + j
        if len(ids) <= _FEW:
            best = -1
            for x in ids:
                if start >= self.last_of(x):
                    pos = self.subjects.last[x] - self.base
                elif start < self.first_of(x):
                    continue
                else:
                    pos = self._rfind(x, hi - 1)
                best = max(best, pos)
            return None if best < 0 else self.base + best
        contains = ids.__contains__
        while hi > 0:
            lo = max(0, hi - _CHUNK)
            j = bytes(map(contains, self.sid[lo:hi])).rfind(1)
            if j >= 0:
                return self.base + lo + j
            hi = lo
        return None

    def count_match(self, ids: set[int] | None, start: int) -> int:
        """Live messages with seq ≥ ``start`` whose subject id is in ``ids``."""
        start = max(start, self.first)
        if start > self.last:
            return 0
        if ids is None:
            return self.msgs if start == self.first else self.live.count(1, start - self.base)
        st = self.subjects
        total = 0
        partial = []
        for x in ids:
            if start <= st.first[x]:  # first is exact or a lower bound: all of x counts
                total += st.count[x]
            elif start <= st.last[x]:
                partial.append(x)
        if not partial:
            return total
        lo = start - self.base
        if len(partial) <= _FEW:
            for x in partial:
                hi = st.last[x] - self.base + 1
                f = self.first_of(x) - self.base
                if hi - lo <= lo - f:
                    total += self.sid[lo:hi].count(x)
                else:
                    total += st.count[x] - self.sid[f:lo].count(x)
            return total
        return total + sum(map(set(partial).__contains__, self.sid[lo:]))

    def count_last_per_subject(self, ids: set[int] | None, start: int) -> int:
        """Subjects in ``ids`` whose last message has seq ≥ ``start``."""
        st = self.subjects
        it = st.ids.values() if ids is None else ids
        if start <= self.first:
            return len(st.ids) if ids is None else len(ids)
        return sum(1 for x in it if st.last[x] >= start and self.last_of(x) >= start)

    def matching_seqs(
        self, ids: set[int] | None, lo_seq: int, hi_seq: int, limit: int
    ) -> list[int]:
        """Up to ``limit`` live sequences in [lo_seq, hi_seq] matching ``ids``, ascending."""
        out: list[int] = []
        lo_seq = max(lo_seq, self.first)
        hi_seq = min(hi_seq, self.last)
        if lo_seq > hi_seq or limit <= 0:
            return out
        lo = lo_seq - self.base
        hi = hi_seq - self.base + 1
        if ids is None:
            j = self.live.find(1, lo, hi)
            while j >= 0 and len(out) < limit:
                out.append(self.base + j)
                j = self.live.find(1, j + 1, hi)
            return out
        if len(ids) == 1:
            (x,) = ids
            j = lo
            while len(out) < limit:
                try:
                    j = self.sid.index(x, j, hi)
                except ValueError:
                    break
                out.append(self.base + j)
                j += 1
            return out
        contains = ids.__contains__
        while lo < hi and len(out) < limit:
            end = min(hi, lo + _CHUNK)
            flags = bytes(map(contains, self.sid[lo:end]))
            j = flags.find(1)
            while j >= 0 and len(out) < limit:
                out.append(self.base + lo + j)
                j = flags.find(1, j + 1)
            lo = end
        return out

    def deleted(self) -> list[int]:
        """Sequences between first and last that hold no message."""
        out: list[int] = []
        if self.msgs == 0:
            return out
        end = self.last - self.base + 1
        j = self.live.find(0, self.first - self.base, end)
        while j >= 0:
            out.append(self.base + j)
            j = self.live.find(0, j + 1, end)
        return out

    def seq_from_time(self, ts: int) -> int:
        if self.msgs == 0:
            return self.last + 1
        lo = self.first - self.base
        i = bisect_left(self.ts, ts, lo, len(self.ts))
        s = self.next_live(self.base + i) if i < len(self.ts) else None
        return self.last + 1 if s is None else s

    # ------------------------------------------------------------------ invariants

    def check(self) -> None:
        n = len(self.live)
        assert len(self.sid) == len(self.ts) == len(self.size) == len(self.loc) == n
        assert n == self.last - self.base + 1 or (n == 0 and self.msgs == 0), "arrays misaligned"
        assert self.live.count(1) == self.msgs, "live count != msgs"
        assert sum(self.size) == self.bytes, "sizes != bytes"
        if self.msgs == 0:
            assert self.first == self.last + 1, "empty store must have first = last + 1"
        else:
            assert self.base <= self.first <= self.last
            assert self.live.find(1) == self.first - self.base, "first is not the first live"
        dead = self.live.count(0)
        assert self.sid.count(DEAD) == dead, "dead slots must carry the DEAD subject"
        assert all(self.ts[i] <= self.ts[i + 1] for i in range(n - 1)), "timestamps decrease"
        self.subjects.check()
        st = self.subjects
        counts = Counter(self.sid)
        counts.pop(DEAD, None)
        assert len(counts) == len(st.ids), "subject table size differs from stored subjects"
        for x, c in counts.items():
            assert st.count[x] == c, f"count of {st.names[x]!r}: {st.count[x]} != {c}"
            first_pos = self.sid.index(x)
            last_pos = self._rfind(x, n - 1)
            if st.flags[x] & FIRST_STALE:
                assert st.first[x] <= self.base + first_pos, "stale first above the true first"
            else:
                assert st.first[x] == self.base + first_pos, f"first of {st.names[x]!r} wrong"
            if st.flags[x] & LAST_STALE:
                assert st.last[x] >= self.base + last_pos, "stale last below the true last"
            else:
                assert st.last[x] == self.base + last_pos, f"last of {st.names[x]!r} wrong"
