"""Opening a file store: index snapshot fast path, full scan fallback, damage repair.

1. Read the delete log (a torn last entry is cut off).
2. If ``index.snap`` decodes and every block it lists still has its recorded length and CRC,
   load the arrays and scan only what was appended after it (the active block's tail, newer
   blocks). Otherwise scan every block.
3. The scan checks each record's CRC. A bad record followed by a valid one (found again by its
   magic) is mid-block corruption: the record is dropped and reported. A bad record with nothing
   valid after it is a torn tail: the block is truncated there. Either way the store opens.
4. Replay the whole delete log (idempotent) and rebuild per-block counters from the index.

``last_seq`` never goes backwards: an erased record still names its sequence, and a DEL entry
proves its range was used, so both raise ``last`` as a FLOOR does. Zeros after the last
record or log entry are space reserved ahead of writes, not damage.

Everything dropped is counted in the ``RecoveryReport``.
"""

from __future__ import annotations

import os
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from headwater.server.store.base import RecoveryReport
from headwater.server.store.file.blocks import (
    BLOCK_HEADER_SIZE,
    RAW_HEADER,
    Block,
    CorruptBlock,
    block_name,
    is_packed,
    unpack_block,
)
from headwater.server.store.file.dellog import DEL, LOG_NAME, parse_log
from headwater.server.store.file.fileio import FileIO
from headwater.server.store.file.index import SNAP_NAME, decode_snapshot
from headwater.server.store.file.records import (
    F_ERASED,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    OVERHEAD,
    CorruptRecord,
    RecordCodec,
)
from headwater.server.store.seqindex import DEAD, SeqIndex
from headwater.server.store.subjects import LAST_STALE

_BLOCK_RE = re.compile(r"^(\d{8})\.blk$")


@dataclass
class Recovered:
    idx: SeqIndex
    blocks: list[Block]
    ttl: dict[int, int] = field(default_factory=dict)
    never: set[int] = field(default_factory=set)
    last_ts: int = 0
    log_generation: int = 0
    log_valid: int = 0
    erased_last: int = 0
    """Highest sequence seen in an erased record (the sequence was used)."""
    erased_ts: int = 0


class BulkLoader:
    """Appends many messages in sequence order (recovery scans) about twice as fast as
    ``SeqIndex.append``: subjects arrive as raw bytes, and per-subject counts are settled once
    in ``finish()`` with a C-speed ``Counter`` pass instead of per message."""

    def __init__(self, idx: SeqIndex) -> None:
        self.idx = idx
        self._ids: dict[bytes, int] = {}
        self._last: dict[int, int] = {}
        self._start = len(idx.live)
        self._n = 0
        self._bytes = 0
        self._bind()

    def _bind(self) -> None:
        idx = self.idx
        self._live = idx.live.append
        self._sid = idx.sid.append
        self._ts = idx.ts.append
        self._size = idx.size.append
        self._loc = idx.loc.append

    def appenders(self) -> tuple[Any, Any, Any, Any, Any]:
        """Bound ``append`` of the live/sid/ts/size/loc arrays (valid until the next ``add``)."""
        return self._live, self._sid, self._ts, self._size, self._loc

    def count(self, n: int, nbytes: int) -> None:
        """Account ``n`` messages (``nbytes``) appended directly through ``appenders()``."""
        self._n += n
        self._bytes += nbytes

    def subject_id(self, subject: bytes, seq: int) -> int:
        """Id for a raw subject first seen at ``seq`` (interned on first sight)."""
        name = subject.decode()
        st = self.idx.subjects
        x = st.ids.get(name)
        if x is None:
            x = st.intern(name, seq)
        self._ids[subject] = x
        return x

    def _settle_totals(self) -> None:
        self.idx.msgs += self._n
        self.idx.bytes += self._bytes
        self._n = self._bytes = 0

    def add(self, seq: int, ts: int, subject: bytes, size: int, loc: Any) -> bool:
        """Append message ``seq``; False (and nothing appended) if it is not after ``last``."""
        idx = self.idx
        if seq != idx.last + 1:
            if seq <= idx.last:
                return False
            self._settle_totals()
            idx.skip(seq - idx.last - 1, ts)
        if idx.msgs == 0 and self._n == 0:
            idx._reset_arrays(seq)
            idx.first = seq
            self._start = 0
            self._bind()
        x = self._ids.get(subject)
        if x is None:
            x = self.subject_id(subject, seq)
        self._live(1)
        self._sid(x)
        self._ts(ts)
        self._size(size)
        self._loc(loc)
        self._last[x] = seq
        idx.last = seq
        self._n += 1
        self._bytes += size
        return True

    def finish(self) -> None:
        """Settle message totals and per-subject counts/last for everything added."""
        self._settle_totals()
        idx = self.idx
        st = idx.subjects
        counts = Counter(idx.sid[self._start :])
        counts.pop(DEAD, None)
        for x, c in counts.items():
            st.count[x] += c
            st.last[x] = self._last[x]
            st.flags[x] &= ~LAST_STALE
        self._ids.clear()
        self._last.clear()
        self._start = len(idx.live)


def _valid_at(raw: bytes, off: int, end: int) -> bool:
    try:
        RecordCodec.head(raw, off, end)
    except CorruptRecord:
        return False
    return True


CRC_RESIDUE = 0x2144DF1C
"""CRC-32 of any data followed by its own little-endian CRC-32: one call checks a record."""


def scan_records(
    raw: bytes,
    start: int,
    codec: RecordCodec,
    loader: BulkLoader,
    rec: Recovered,
    block: Block,
    report: RecoveryReport,
) -> int:
    """Index the records of ``raw`` from ``start``; returns where valid data ends.

    The hot loop appends straight to the index arrays (``loader.appenders()``) and keeps block
    and loader counters in locals: this loop is most of a 2M-message restart without snapshot.
    """
    unpack = HEADER.unpack_from
    crc32 = zlib.crc32
    view = memoryview(raw)
    end = len(raw)
    off = start
    idx = loader.idx
    ids_get = loader._ids.get
    lasts = loader._last
    live_app, sid_app, ts_app, size_app, loc_app = loader.appenders()
    fast = idx.msgs > 0 or loader._n > 0
    last = idx.last
    n = nbytes = total = 0
    last_ts = rec.last_ts
    bfirst, blast = block.first, block.last
    ttls, never = rec.ttl, rec.never
    # Module constants as locals: this loop runs once per record on a restart without snapshot.
    magic_ok, overhead, hsize, residue = MAGIC, OVERHEAD, HEADER_SIZE, CRC_RESIDUE
    while off < end:
        if end - off >= overhead:
            magic, flags, rec_len, seq, ts, ttl, slen, hlen = unpack(raw, off)
            if (
                magic == magic_ok
                and rec_len >= overhead
                and off + rec_len <= end
                and crc32(view[off : off + rec_len]) == residue
            ):
                if flags:
                    if flags & F_ERASED:
                        if seq > rec.erased_last:
                            rec.erased_last, rec.erased_ts = seq, ts
                        off += rec_len
                        continue
                    try:  # encrypted: the subject is inside the sealed payload
                        head = RecordCodec.head(raw, off, end)
                        subject = codec.payload(raw, off, head)[0]
                        size = head.accounted_size() if head.data_len() >= 0 else -1
                    except CorruptRecord:
                        size = -1
                elif rec_len - overhead - slen - hlen >= 0:
                    subject = raw[off + hsize : off + hsize + slen]
                    # = 30 + slen + data_len (+ 4 + hlen with headers): the reference's size
                    size = rec_len - 10 if hlen else rec_len - 14
                else:
                    size = -1
                if size < 0:
                    _bad(report, block, seq)
                elif fast and seq == last + 1:
                    x = ids_get(subject)
                    if x is None:
                        x = loader.subject_id(subject, seq)
                    live_app(1)
                    sid_app(x)
                    ts_app(ts)
                    size_app(size)
                    loc_app(off)
                    lasts[x] = seq
                    last = seq
                    n += 1
                    nbytes += size
                    total += size
                    if blast < bfirst:
                        bfirst = seq
                    blast = seq
                    last_ts = ts
                    if ttl:
                        if ttl > 0:
                            ttls[seq] = ts + ttl
                        else:
                            never.add(seq)
                else:
                    idx.last = last
                    loader.count(n, nbytes)
                    n = nbytes = 0
                    if loader.add(seq, ts, subject, size, off):
                        total += size
                        if blast < bfirst:
                            bfirst = seq
                        blast = seq
                        last_ts = max(last_ts, ts)
                        if ttl:
                            if ttl > 0:
                                ttls[seq] = ts + ttl
                            else:
                                never.add(seq)
                    else:
                        _bad(report, block, seq)
                    live_app, sid_app, ts_app, size_app, loc_app = loader.appenders()
                    last = idx.last
                    fast = True
                off += rec_len
                continue
        if raw.count(0, off, end) == end - off:
            end = off  # reserved space that was never written: the clean end
            break
        # Damaged record: resynchronise on the next magic that starts a valid record.
        nxt = raw.find(MAGIC, off + 1)
        while nxt >= 0 and not _valid_at(raw, nxt, end):
            nxt = raw.find(MAGIC, nxt + 1)
        if nxt < 0:
            report.records_dropped += 1
            report.bytes_truncated += end - off
            if block.index not in report.blocks_affected:
                report.blocks_affected.append(block.index)
            end = off
            break
        plausible = end - off >= HEADER_SIZE and raw[off : off + 2] == MAGIC
        _bad(report, block, unpack(raw, off)[3] if plausible else 0)
        off = nxt
    idx.last = last
    loader.count(n, nbytes)
    rec.last_ts = max(rec.last_ts, last_ts)
    block.first, block.last = bfirst, blast
    block.total_bytes += total
    return end


def _bad(report: RecoveryReport, block: Block, seq: int) -> None:
    report.records_dropped += 1
    if seq:
        report.corrupt_seqs.append(seq)
    if block.index not in report.blocks_affected:
        report.blocks_affected.append(block.index)


def list_blocks(directory: str) -> list[int]:
    out = []
    for name in os.listdir(directory):
        m = _BLOCK_RE.match(name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


class Recovery:
    def __init__(
        self, io: FileIO, directory: str, codec: RecordCodec, report: RecoveryReport
    ) -> None:
        self.io = io
        self.dir = directory
        self.codec = codec
        self.report = report

    def _path(self, index: int) -> str:
        return os.path.join(self.dir, block_name(index))

    def run(self) -> Recovered:
        for name in os.listdir(self.dir):
            if name.endswith(".tmp"):  # an interrupted rewrite; the original is intact
                self.io.unlink(os.path.join(self.dir, name))
        log_path = os.path.join(self.dir, LOG_NAME)
        content = self.io.read_file(log_path) if os.path.exists(log_path) else b""
        generation, entries, valid = parse_log(content)
        if content and content.count(0, valid) < len(content) - valid:
            self.report.bytes_truncated += len(content) - valid
        rec = self._from_snapshot() or self._rebuild()
        rec.log_generation, rec.log_valid = generation, valid
        idx = rec.idx
        if rec.erased_last > idx.last:
            rec.last_ts = max(rec.last_ts, rec.erased_ts)
            idx.skip(rec.erased_last - idx.last, rec.last_ts)
        self._apply_log(rec, entries)
        self._block_stats(rec)
        first = rec.idx.first
        rec.ttl = {s: e for s, e in rec.ttl.items() if rec.idx.is_live(s)}
        rec.never = {s for s in rec.never if s >= first and rec.idx.is_live(s)}
        return rec

    # ------------------------------------------------------------------ full scan

    def _rebuild(self) -> Recovered:
        rec = Recovered(SeqIndex(1, objects=False), [])
        loader = BulkLoader(rec.idx)
        for index in list_blocks(self.dir):
            self._scan_block(rec, loader, index)
        loader.finish()
        return rec

    def _scan_block(self, rec: Recovered, loader: BulkLoader, index: int) -> None:
        """Scan a whole block file into the index and append it to ``rec.blocks``."""
        path = self._path(index)
        content = self.io.read_file(path)
        block = Block(index, path, rec.idx.last + 1)
        if content[:1] in (b"", b"\0") and content.count(0) == len(content):
            # Created (and maybe space reserved) but its header never written: empty.
            if content:
                self.io.truncate(path, 0)
            rec.blocks.append(block)
            return
        packed = is_packed(content)
        if packed:
            try:
                raw = unpack_block(content)
            except CorruptBlock:
                # A packed block that fails its checksum is lost as a whole.
                self.report.records_dropped += 1
                self.report.blocks_affected.append(index)
                self.io.unlink(path)
                return
            block.flags = content[6]
        else:
            if content[:BLOCK_HEADER_SIZE] != RAW_HEADER:
                # Damaged or torn block header: records carry their own checks, keep them.
                self.report.blocks_affected.append(index)
                content = RAW_HEADER + content[BLOCK_HEADER_SIZE:]
                self._rewrite_head(path, len(content))
            raw = content
        valid = scan_records(raw, BLOCK_HEADER_SIZE, self.codec, loader, rec, block, self.report)
        if valid < len(raw):
            if packed:
                self.report.blocks_affected.append(index)
                self.io.unlink(path)
                return
            self.io.truncate(path, valid)
            content = content[:valid]
        rec.blocks.append(block)
        block.disk_size = len(content)
        block.raw_size = len(raw) if packed else len(content)
        block.crc = zlib.crc32(content)

    def _rewrite_head(self, path: str, size: int) -> None:
        fd = self.io.open_rw(path)
        try:
            if size <= BLOCK_HEADER_SIZE:
                self.io.truncate(path, 0)
            self.io.pwrite(fd, RAW_HEADER, 0)
            self.io.fsync(fd)
        finally:
            self.io.close(fd)

    # ------------------------------------------------------------------ snapshot

    def _from_snapshot(self) -> Recovered | None:
        path = os.path.join(self.dir, SNAP_NAME)
        if not os.path.exists(path):
            return None
        decoded = decode_snapshot(self.io.read_file(path))
        if decoded is None:
            return None
        header, arrays = decoded
        on_disk = list_blocks(self.dir)
        present = set(on_disk)
        known_max = max((b.index for b in header.blocks), default=0)
        if any(i <= known_max and i not in {b.index for b in header.blocks} for i in on_disk):
            return None  # a block the snapshot does not know, older than its newest: stale
        blocks: list[Block] = []
        missing: list[tuple[int, int]] = []
        tail: tuple[Block, bytes] | None = None
        for sb in header.blocks:
            bpath = self._path(sb.index)
            if sb.index not in present:
                missing.append((sb.fields[0], sb.fields[1]))  # removed since the snapshot
                continue
            blk = Block.restore(bpath, sb.index, sb.fields)
            content = self.io.read_file(bpath)
            grown = len(content) > blk.disk_size
            if len(content) < blk.disk_size or (grown and (sb.index != known_max or blk.flags)):
                return None
            if zlib.crc32(memoryview(content)[: blk.disk_size]) != blk.crc:
                return None
            if (
                grown
                and blk.disk_size < BLOCK_HEADER_SIZE
                and content[:BLOCK_HEADER_SIZE] != RAW_HEADER
                and content.count(0) != len(content)
            ):
                return None  # its header came after the snapshot: rewritten, torn or packed
            blocks.append(blk)
            if grown:
                tail = (blk, content)
        idx = SeqIndex(header.first, objects=False)
        n = header.last - header.base + 1 if header.msgs else 0
        if any(len(arrays[k]) != n for k in ("live", "sid", "ts", "size", "loc")):
            return None
        idx.base, idx.first, idx.last = header.base, header.first, header.last
        idx.msgs, idx.bytes = header.msgs, header.bytes
        idx.live, idx.sid, idx.ts = arrays["live"], arrays["sid"], arrays["ts"]
        idx.size, idx.loc = arrays["size"], arrays["loc"]
        st = idx.subjects
        st.names = header.names
        st.ids = {name: x for x, name in enumerate(header.names) if name is not None}
        st.count, st.first = arrays["subj_count"], arrays["subj_first"]
        st.last, st.flags, st.free = arrays["subj_last"], arrays["subj_flags"], header.free
        rec = Recovered(idx, blocks, last_ts=header.last_ts)
        rec.ttl = dict(zip(arrays["ttl_seq"], arrays["ttl_exp"], strict=True))
        rec.never = set(arrays["never"])
        for first, last in missing:
            for s in idx.matching_seqs(None, first, last, last - first + 1):
                idx.remove(s)
        loader = BulkLoader(idx)
        if tail is not None:
            self._scan_tail(rec, loader, *tail)
        for index in on_disk:
            if index > known_max:
                self._scan_block(rec, loader, index)
        loader.finish()
        self.report.used_index = True
        return rec

    def _scan_tail(self, rec: Recovered, loader: BulkLoader, block: Block, content: bytes) -> None:
        start = block.disk_size
        if start < BLOCK_HEADER_SIZE:
            # The snapshot saw this block before its header reached the disk.
            if content.count(0) == len(content):
                self.io.truncate(block.path, 0)
                block.disk_size = block.raw_size = block.crc = 0
                return
            start = BLOCK_HEADER_SIZE  # _from_snapshot checked the header
        valid = scan_records(content, start, self.codec, loader, rec, block, self.report)
        if valid < len(content):
            self.io.truncate(block.path, valid)
            content = content[:valid]
        block.disk_size = block.raw_size = len(content)
        block.crc = zlib.crc32(content)

    # ------------------------------------------------------------------ delete log

    def _apply_log(self, rec: Recovered, entries: list[tuple[int, int, int, int]]) -> None:
        idx = rec.idx
        for kind, a, b, c in entries:
            if kind == DEL:
                if b > idx.last:  # the range was used: its sequences stay consumed
                    idx.skip(b - idx.last, rec.last_ts)
                if a <= idx.first:
                    if b >= idx.last:
                        idx.reset(idx.last + 1)
                    elif b >= idx.first:
                        idx.remove_prefix(b + 1)
                    continue
                for s in idx.matching_seqs(None, a, b, b - a + 1):
                    idx.remove(s)
                continue
            # FLOOR: nothing below a, last at least b.
            if a > idx.last:
                idx.reset(a)
            elif a > idx.first:
                idx.remove_prefix(a)
            if b > idx.last:
                idx.skip(b - idx.last, max(c, rec.last_ts))
            rec.last_ts = max(rec.last_ts, c)

    def _block_stats(self, rec: Recovered) -> None:
        idx = rec.idx
        for blk in rec.blocks:
            lo = max(blk.first, idx.base) - idx.base
            hi = min(blk.last, idx.last) - idx.base + 1
            if blk.last < blk.first or hi <= lo:
                blk.live = blk.live_bytes = 0
                continue
            blk.live = idx.live.count(1, lo, hi)
            blk.live_bytes = sum(idx.size[lo:hi])
