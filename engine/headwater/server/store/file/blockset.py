"""The ordered set of block files of one store: appends, lookups, erasure, compaction, packing.

File ownership: every block file and its fds belong to this object. The event loop thread does
all writes; the group-commit worker thread only fsyncs fds handed to it in a ``SyncJob``, and
no fd in a job is closed (or file renamed) until the job's ``finish``/``abort`` runs back on the
loop. That is why sealed blocks' write fds go to ``_retired`` rather than being closed, and why a
rewritten block (compacted, packed or erased-while-packed) is written to ``<name>.tmp`` and only
renamed over the original after the next fsync covered it: until then readers keep using the
original, which still holds every live record at the offsets the index knows.

In replica mode (``replica=True``, docs/FILESTORE.md "Replica mode") the writes that cannot be
undone wait for a durable checkpoint instead of a sync round: erasures of records a capture
covers, unlinks and packing are queued in ``held`` and run at ``release``; compaction is
computed at ``capture`` (the state is then exactly the checkpoint's) and renamed only after
that checkpoint is durable. So every write after a capture lies past its positions or is
covered, which is what lets ``checkpoint.cut_back`` restore the checkpoint's state.

Two orderings keep removals crash-safe. A block with no live record left is unlinked only by
the ``finish`` of the sync round that made the delete log entries about it durable, so a crash
can never lose the sequences it held before the log says they were used. And the active block
reserves disk space (``FileIO.allocate``) before it accepts a record: a full disk refuses the
append up front instead of failing a later flush.
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

from headwater.server.store.file.blocks import (
    B_S2,
    BLOCK_HEADER_SIZE,
    RAW_HEADER,
    Block,
    BlockReader,
    block_name,
    pack_block,
)
from headwater.server.store.file.dellog import DeleteLog
from headwater.server.store.file.fileio import FileIO
from headwater.server.store.file.held import HeldWork
from headwater.server.store.file.index import SnapshotBlock
from headwater.server.store.file.records import CorruptRecord, RecordCodec
from headwater.server.store.seqindex import SeqIndex

FLUSH_BYTES = 1 << 20
"""Buffered bytes that force a write to the OS even without a sync (bounds memory)."""
log = logging.getLogger("headwater.store")

RESERVE_STEP = 256 * 1024
"""Disk space the active block reserves at a time (one ``fallocate`` per step)."""

REWRITES_PER_CHECKPOINT = 2
"""Replica mode: compactions computed per capture, and packings per release. Each costs about
15 ms on the loop for an 8 MiB block; the rest wait for the next checkpoint, so a restart
that finds many unpacked blocks cannot stall the loop."""


class OutOfSpace(Exception):
    """The disk has no room for a record: nothing was appended."""


@dataclass
class Rewrite:
    """A replacement file for ``block`` waiting for an fsync before its rename."""

    block: Block
    tmp: str
    fd: int
    size: int
    crc: int
    flags: int
    raw_size: int
    locs: list[tuple[int, int]] | None = None
    """(seq, new offset) when records moved (compaction)."""
    total_bytes: int = -1
    in_flight: bool = False
    cancelled: bool = False
    hold: int | None = None
    """Replica mode: the ``Positions.mark`` of the capture that computed this compaction;
    renamed only once ``release`` saw that checkpoint durable."""
    synced: bool = False
    """A held rewrite a round already fsynced (it waits for ``release``)."""


@dataclass
class SyncJob:
    blocks: BlockSet
    fds: list[int]
    dir_path: str | None
    retired: list[int]
    rewrites: list[Rewrite] = field(default_factory=list)
    resync: list[Block | DeleteLog] = field(default_factory=list)
    """Files whose ``unsynced`` flag this job cleared (set again if it fails)."""
    unlinks: list[str] = field(default_factory=list)
    """Dropped blocks, unlinked once this job made the log entries about them durable."""

    def run(self) -> None:
        io = self.blocks.io
        for fd in self.fds:
            io.fsync(fd)
        if self.dir_path is not None:
            io.fsync_dir(self.dir_path)

    def finish(self) -> None:
        bs = self.blocks
        for fd in self.retired:
            bs.io.close(fd)
        for path in self.unlinks:
            with contextlib.suppress(FileNotFoundError):
                bs.io.unlink(path)
        if self.unlinks:
            bs.dir_dirty = True
        for rw in self.rewrites:
            bs.complete_rewrite(rw)

    def abort(self) -> None:
        bs = self.blocks
        for f in self.resync:
            f.unsynced = True
        bs.retired.extend(self.retired)
        bs.unlinks.extend(self.unlinks)
        if self.dir_path is not None:
            bs.dir_dirty = True
        for rw in self.rewrites:
            rw.in_flight = False
            if rw.cancelled:
                bs.discard_rewrite(rw)


class BlockSet:
    def __init__(
        self,
        io: FileIO,
        directory: str,
        block_size: int,
        compress: bool,
        idx: SeqIndex,
        replica: bool = False,
    ) -> None:
        self.io = io
        self.dir = directory
        self.block_size = block_size
        self.compress = compress
        self.idx = idx
        self.blocks: list[Block] = []
        self._firsts: list[int] = []
        self.active: Block
        self.reader = BlockReader(io)
        self.retired: list[int] = []
        self.unlinks: list[str] = []
        """Dropped blocks' files, removed by the next sync round's ``finish``."""
        self.dir_dirty = False
        self.rewrites: dict[int, Rewrite] = {}
        self._patch_fds: dict[int, int] = {}
        self.on_rewrite: Callable[[], None] = lambda: None
        """Called when a rewrite is scheduled: the store makes sure a sync round follows."""
        self.replica = replica
        self.held = HeldWork()
        self.captured_last = 0
        """Replica mode: ``last`` at the newest capture. An erasure of a later record runs at
        once: the record lies past every checkpoint's positions, so a cut removes it anyway."""
        self._compact_wanted: set[int] = set()
        """Replica mode: blocks whose compaction waits for the next capture."""

    # ------------------------------------------------------------------ set-up

    def adopt(self, blocks: list[Block]) -> None:
        """Take the recovered blocks; continue appending to the last one if it is raw."""
        self.blocks = blocks
        self._refresh()
        self.captured_last = self.idx.last  # what a restart finds is a checkpoint's state
        last = blocks[-1] if blocks else None
        if last is not None and not last.packed and last.raw_size < self.block_size:
            last.fd = self.io.open_rw(last.path)
            last.alloc = last.disk_size
            if last.disk_size == 0:  # its header never reached the disk
                last.wbuf = bytearray(RAW_HEADER)
                last.raw_size = BLOCK_HEADER_SIZE
            self.active = last
        else:
            self._new_block(last.index + 1 if last else 1)
        for blk in [b for b in self.blocks if b is not self.active and b.live == 0]:
            self.drop(blk)
        if self.compress:  # sealed before a crash cut their packing short
            for blk in [b for b in self.blocks if b is not self.active and not b.packed]:
                self._pack(blk)

    def _refresh(self) -> None:
        self._firsts = [b.first for b in self.blocks]

    def _new_block(self, index: int) -> Block:
        path = os.path.join(self.dir, block_name(index))
        blk = Block(index, path, self.idx.last + 1)
        blk.fd = self.io.open_rw(path, truncate=True)
        blk.wbuf += RAW_HEADER
        blk.raw_size = BLOCK_HEADER_SIZE
        self.blocks.append(blk)
        self._firsts.append(blk.first)
        self.active = blk
        self.dir_dirty = True
        return blk

    # ------------------------------------------------------------------ appends and reads

    def _reserve(self, blk: Block, n: int) -> None:
        """Make sure ``n`` more bytes of ``blk`` have disk space; raises ``OutOfSpace``."""
        need = blk.raw_size + n
        if need <= blk.alloc:
            return
        want = max(need, min(blk.alloc + RESERVE_STEP, self.block_size))
        try:
            self.io.allocate(blk.fd, blk.alloc, want - blk.alloc)
        except OSError as exc:
            if want == need:
                raise OutOfSpace(str(exc)) from exc
            try:  # room for this record, perhaps, if not for a whole step
                self.io.allocate(blk.fd, blk.alloc, need - blk.alloc)
            except OSError as exc2:
                raise OutOfSpace(str(exc2)) from exc2
            want = need
        blk.alloc = want

    def reserve_run(self, total: int) -> None:
        """Reserve ``total`` bytes for a run of records appended with ``roll=False``: they all
        go to one block (a fresh one when they do not fit the active block), so the run is
        refused or accepted as a whole."""
        blk = self.active
        if blk.raw_size + total > self.block_size and blk.raw_size > BLOCK_HEADER_SIZE:
            blk = self._roll()
        self._reserve(blk, total)

    def append(self, record: bytes, seq: int, size: int, roll: bool = True) -> int:
        """Append ``record``; raises ``OutOfSpace`` (with nothing appended) on a full disk.
        ``roll=False``: the space was reserved by ``reserve_run``."""
        blk = self.active
        if roll:
            if blk.raw_size + len(record) > self.block_size and blk.raw_size > BLOCK_HEADER_SIZE:
                blk = self._roll()
            self._reserve(blk, len(record))
        if blk.last < blk.first:
            self._firsts[-1] = seq
        off = blk.append(record, seq, size)
        if len(blk.wbuf) >= FLUSH_BYTES:
            blk.flush(self.io)
        return off

    def _roll(self) -> Block:
        old = self.active
        old.flush(self.io)
        if old.alloc > old.disk_size:  # give back the reserved space it will not use
            self.io.truncate(old.path, old.disk_size)
            old.alloc = old.disk_size
        self.retired.append(old.fd)
        old.fd = -1
        new = self._new_block(old.index + 1)
        if old.live == 0:
            self.drop(old)
        elif self.compress:
            self._pack(old)
        return new

    def _pack(self, blk: Block) -> None:
        if self.replica:
            self.held.hold("pack", blk)  # a cut must find the block raw (and unmoved)
            return
        self.schedule_rewrite(blk, pack_block(self.reader.raw(blk)), B_S2, blk.raw_size)

    def block_for(self, seq: int) -> Block:
        return self.blocks[bisect_right(self._firsts, seq) - 1]

    def flush(self) -> None:
        self.active.flush(self.io)

    # ------------------------------------------------------------------ removal

    def removed(self, seq: int, size: int, loc: int, erase: bool) -> None:
        blk = self.block_for(seq)
        blk.live -= 1
        blk.live_bytes -= size
        if erase:
            self._erase(blk, loc, seq)
        if blk is self.active:
            return
        if blk.live == 0:
            self.drop(blk)
        else:
            self._maybe_compact(blk)

    def _maybe_compact(self, blk: Block) -> None:
        if self.replica:
            self._compact_wanted.add(blk.index)  # decided at the next capture
            return
        if (
            2 * blk.live_bytes < blk.total_bytes
            and blk.first > self.idx.first  # the head block empties from the front anyway
            and blk.index not in self.rewrites
        ):
            self._compact(blk)

    def drop(self, blk: Block) -> None:
        """Delete a block none of whose records are live. Its file goes with the next sync
        round, after the delete log entries that explain its absence are durable."""
        assert blk is not self.active
        self._cancel_rewrite(blk)
        self.reader.forget(blk)
        fd = self._patch_fds.pop(blk.index, None)
        if fd is not None:
            self.retired.append(fd)
        if self.replica:
            self.held.hold("unlink", blk)
        else:
            self.unlinks.append(blk.path)
        i = self.blocks.index(blk)
        del self.blocks[i]
        del self._firsts[i]
        self.on_rewrite()

    def release_dead_active(self) -> None:
        """After a purge: if the active block holds records but none is live, start a new one
        and drop it, so its space is freed (the dead records still buffered are discarded:
        the delete log already says they are gone)."""
        blk = self.active
        if blk.live or blk.last < blk.first:
            return
        blk.wbuf = bytearray()
        blk.raw_size = blk.disk_size
        if blk.fd >= 0:
            self.retired.append(blk.fd)
            blk.fd = -1
        self._new_block(blk.index + 1)
        self.drop(blk)

    def floor(self) -> None:
        """After a bulk removal: delete blocks wholly below ``first`` and recount the rest."""
        first = self.idx.first
        for blk in [b for b in self.blocks if b is not self.active and b.last < first]:
            self.drop(blk)
        for blk in self.blocks:
            if blk.first >= first:
                break  # blocks at or after the new first lost nothing
            self.recount(blk)
        for blk in [b for b in self.blocks if b is not self.active and b.live == 0]:
            self.drop(blk)

    def recount(self, blk: Block) -> None:
        idx = self.idx
        lo = max(blk.first, idx.base) - idx.base
        hi = min(blk.last, idx.last) - idx.base + 1
        if blk.last < blk.first or hi <= lo:
            blk.live = blk.live_bytes = 0
            return
        blk.live = idx.live.count(1, lo, hi)
        blk.live_bytes = sum(idx.size[lo:hi])

    def _erase(self, blk: Block, off: int, seq: int) -> None:
        self._cancel_rewrite(blk)  # a pending copy would still hold the payload
        if self.replica and seq <= self.captured_last:
            self.held.hold("erase", blk, off)  # a cut back may need the record again
            return
        self._erase_now(blk, off)

    def _erase_now(self, blk: Block, off: int) -> None:
        """Overwrite the record at ``off`` in place with an erased record of the same length."""
        self._cancel_rewrite(blk)  # a pending copy would still hold the payload
        if blk.packed:
            raw = bytearray(self.reader.raw(blk))
            try:
                head = RecordCodec.head(raw, off, len(raw))
            except CorruptRecord:
                return
            raw[off : off + head.rec_len] = RecordCodec.erased(head)
            self.schedule_rewrite(blk, pack_block(bytes(raw)), B_S2, len(raw))
            return
        buf, start, end = self.reader.chunk(blk, off)
        try:
            head = RecordCodec.head(buf, start, end)
        except CorruptRecord:
            return
        new = RecordCodec.erased(head)
        if off >= blk.disk_size:
            p = off - blk.disk_size
            blk.wbuf[p : p + len(new)] = new
            return
        fd = blk.fd
        if fd < 0:
            fd = self._patch_fds.get(blk.index, -1)
            if fd < 0:
                fd = self._patch_fds[blk.index] = self.io.open_rw(blk.path)
        else:
            blk.unsynced = True
        self.io.pwrite(fd, new, off)
        blk.crc_ok = False

    # ------------------------------------------------------------------ rewrites

    def _compact(self, blk: Block, hold: int | None = None) -> None:
        """Rewrite ``blk`` with only its live records (most of it is dead)."""
        idx = self.idx
        raw = self.reader.raw(blk)
        parts = [RAW_HEADER]
        locs: list[tuple[int, int]] = []
        pos = BLOCK_HEADER_SIZE
        total = 0
        for seq in idx.matching_seqs(None, blk.first, blk.last, blk.live):
            off = idx.loc[seq - idx.base]
            try:
                head = RecordCodec.head(raw, off, len(raw))
            except CorruptRecord:
                continue  # left out; a read of it reports the loss
            parts.append(raw[off : off + head.rec_len])
            locs.append((seq, pos))
            pos += head.rec_len
            total += idx.size[seq - idx.base]
        new_raw = b"".join(parts)
        content = pack_block(new_raw) if self.compress else new_raw
        flags = B_S2 if self.compress else 0
        self.schedule_rewrite(blk, content, flags, len(new_raw), locs, total, hold)

    def schedule_rewrite(
        self,
        blk: Block,
        content: bytes,
        flags: int,
        raw_size: int,
        locs: list[tuple[int, int]] | None = None,
        total_bytes: int = -1,
        hold: int | None = None,
    ) -> None:
        self._cancel_rewrite(blk)
        tmp = blk.path + ".tmp"
        fd = -1
        try:
            fd = self.io.open_rw(tmp, truncate=True)
            self.io.pwrite(fd, content, 0)
        except OSError as exc:
            # Compaction and packing only save space; on a full disk the block stays as is.
            log.warning("cannot rewrite block %s: %s", blk.path, exc)
            if fd >= 0:
                self.io.close(fd)
            with contextlib.suppress(OSError):
                self.io.unlink(tmp)
            return
        crc = zlib.crc32(content)
        self.rewrites[blk.index] = Rewrite(
            blk, tmp, fd, len(content), crc, flags, raw_size, locs, total_bytes, hold=hold
        )
        self.on_rewrite()

    def complete_rewrite(self, rw: Rewrite) -> None:
        """After an fsync covered ``rw.tmp``: rename it over the block."""
        if rw.cancelled:
            self.discard_rewrite(rw)
            return
        if rw.hold is not None:  # fsynced; the rename waits for its checkpoint
            rw.in_flight = False
            rw.synced = True
            return
        blk = rw.block
        self.io.close(rw.fd)
        self.io.replace(rw.tmp, blk.path)
        if self.rewrites.get(blk.index) is rw:
            del self.rewrites[blk.index]
        self.dir_dirty = True
        self.reader.forget(blk)
        fd = self._patch_fds.pop(blk.index, None)
        if fd is not None:
            self.retired.append(fd)
        blk.flags, blk.disk_size, blk.raw_size = rw.flags, rw.size, rw.raw_size
        blk.crc, blk.crc_ok = rw.crc, True
        if rw.total_bytes >= 0:
            blk.total_bytes = rw.total_bytes
        if rw.locs:
            idx = self.idx
            for seq, off in rw.locs:
                if idx.is_live(seq):
                    idx.loc[seq - idx.base] = off
        if blk is not self.active and blk in self.blocks:
            self._maybe_compact(blk)  # removals that raced the rewrite may call for another

    def _cancel_rewrite(self, blk: Block) -> None:
        rw = self.rewrites.pop(blk.index, None)
        if rw is None:
            return
        rw.cancelled = True
        if not rw.in_flight:
            self.discard_rewrite(rw)

    def discard_rewrite(self, rw: Rewrite) -> None:
        self.io.close(rw.fd)
        self.io.unlink(rw.tmp)

    # ------------------------------------------------------------------ replica mode

    def capture(self) -> int:
        """A checkpoint is being captured (on the loop, between applies): compute the
        compactions waiting for it, from exactly its state, and return its ``mark``. Call
        after ``flush``: the positions are read from the flushed files."""
        mark = self.held.serial
        self.captured_last = self.idx.last
        wanted, self._compact_wanted = self._compact_wanted, set()
        by_index = {b.index: b for b in self.blocks}
        budget = REWRITES_PER_CHECKPOINT
        for i in sorted(wanted):
            blk = by_index.get(i)
            if blk is None or blk is self.active:
                continue
            if self.held.erasing(blk) or blk.index in self.rewrites or not budget:
                self._compact_wanted.add(i)  # after the erasure or the pending rewrite
                continue
            if 2 * blk.live_bytes < blk.total_bytes and blk.first > self.idx.first:
                self._compact(blk, hold=mark)
                budget -= 1
        return mark

    def release(self, mark: int) -> None:
        """A checkpoint with ``mark`` is durable: run the held work it covers."""
        for rw in self.rewrites.values():
            if rw.hold is not None and rw.hold <= mark:
                # The next round fsyncs it again (cheap) and renames it in its ``finish``.
                rw.hold, rw.synced = None, False
                self.on_rewrite()
        kept = {id(b) for b in self.blocks}
        budget = REWRITES_PER_CHECKPOINT
        for item in self.held.take(mark):
            blk = item.block
            if item.kind == "unlink":
                self.unlinks.append(blk.path)
                self.on_rewrite()
            elif id(blk) not in kept:
                continue  # dropped since: its unlink comes
            elif item.kind == "erase":
                self._erase_now(blk, item.offset)
                if self.compress and not blk.packed and blk is not self.active:
                    self.held.hold("pack", blk)  # the erasure cancelled a pending packing
            elif not budget:
                self.held.hold("pack", blk)  # covered already; the next release packs it
            elif not blk.packed and blk is not self.active and blk.index not in self.rewrites:
                self.schedule_rewrite(blk, pack_block(self.reader.raw(blk)), B_S2, blk.raw_size)
                budget -= 1

    # ------------------------------------------------------------------ sync

    def prepare(self, log: DeleteLog) -> SyncJob:
        """Flush everything to the OS and describe what the fsync must cover."""
        self.active.flush(self.io)
        log.flush()
        self.retired.extend(self._patch_fds.values())
        self._patch_fds.clear()
        retired, self.retired = self.retired, []
        unlinks, self.unlinks = self.unlinks, []
        rewrites = [rw for rw in self.rewrites.values() if not rw.in_flight and not rw.synced]
        for rw in rewrites:
            rw.in_flight = True
        # Only files that changed since the last round are fsynced: usually just one.
        resync: list[Block | DeleteLog] = [f for f in (self.active, log) if f.unsynced]
        for f in resync:
            f.unsynced = False
        fds = [f.fd for f in resync]
        fds += [*retired, *(rw.fd for rw in rewrites)]
        dir_path = self.dir if self.dir_dirty else None
        self.dir_dirty = False
        return SyncJob(self, fds, dir_path, retired, rewrites, resync, unlinks)

    @property
    def pending(self) -> bool:
        """Unsynced work that is not a plain append (rewrites, renames, closes, unlinks)."""
        return bool(
            self.rewrites or self.retired or self._patch_fds or self.dir_dirty or self.unlinks
        )

    def close(self, trim: bool = True) -> None:
        """Close every descriptor; ``trim`` gives back the active block's unused reservation."""
        for rw in list(self.rewrites.values()):
            rw.cancelled = True
            self.discard_rewrite(rw)
        self.rewrites.clear()
        for fd in [*self.retired, *self._patch_fds.values()]:
            self.io.close(fd)
        self.retired.clear()
        self._patch_fds.clear()
        active = self.active
        if active.fd >= 0:
            if trim and active.alloc > active.disk_size and not active.wbuf:
                self.io.truncate(active.path, active.disk_size)  # the unused reservation
                active.alloc = active.disk_size
            self.io.close(active.fd)
            active.fd = -1
        self.reader.close()

    def snapshot_blocks(self) -> list[SnapshotBlock]:
        out = []
        for b in self.blocks:
            if not b.crc_ok:
                b.crc = zlib.crc32(self.io.read_file(b.path)[: b.disk_size])
                b.crc_ok = True
            out.append(SnapshotBlock(b.index, b.fields()))
        return out

    # ------------------------------------------------------------------ invariants

    def check(self) -> None:
        idx = self.idx
        assert self.blocks and self.blocks[-1] is self.active, "active block must be last"
        assert self._firsts == [b.first for b in self.blocks], "block start table stale"
        prev_last = 0
        for blk in self.blocks:
            if blk.last >= blk.first:
                assert blk.first > prev_last, "blocks overlap"
                prev_last = blk.last
            live, live_bytes = blk.live, blk.live_bytes
            self.recount(blk)
            assert (blk.live, blk.live_bytes) == (live, live_bytes), f"block {blk.index} counts"
            assert blk is self.active or blk.live > 0, f"empty block {blk.index} kept"
            if not blk.packed:
                assert blk.raw_size == blk.disk_size + len(blk.wbuf)
        for seq in idx.matching_seqs(None, idx.first, idx.last, idx.msgs):
            blk = self.block_for(seq)
            assert blk.first <= seq <= blk.last, f"seq {seq} outside its block"
            buf, start, end = self.reader.chunk(blk, idx.loc[seq - idx.base])
            head = RecordCodec.head(buf, start, end)
            assert head.seq == seq and not head.erased, f"index points {seq} at another record"
            assert head.accounted_size() == idx.size[seq - idx.base], f"size of {seq} differs"
