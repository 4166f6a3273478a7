"""Opening a file store: index snapshot fast path, full scan fallback, damage repair.

1. Read the delete log (a torn last entry is cut off).
2. If ``index.snap`` decodes and every block it lists still has its recorded length and CRC,
   load the arrays and scan only what was appended after it (the active block's tail, newer
   blocks). Otherwise scan every block.
3. The scan checks each record's CRC. A bad record followed by a valid one (found again by its
   magic) is mid-block corruption: the record is dropped and reported. A bad record with nothing
   valid after it is a torn tail: the block is truncated there. Either way the store opens.
4. Replay the whole delete log (idempotent) and rebuild per-block counters from the index.

Everything dropped is counted in the ``RecoveryReport``.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass, field

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
    CRC,
    F_ENCRYPTED,
    F_ERASED,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    NONCE,
    OVERHEAD,
    TAG,
    CorruptRecord,
    RecordCodec,
)
from headwater.server.store.seqindex import SeqIndex

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


class _Builder:
    """Feeds scanned records, in sequence order, into a ``SeqIndex``."""

    def __init__(self, rec: Recovered) -> None:
        self.rec = rec
        self.names: dict[bytes, str] = {}

    def add(self, seq: int, ts: int, ttl: int, subject: bytes, size: int, off: int) -> bool:
        idx = self.rec.idx
        if seq <= idx.last:
            return False  # out of order: not a record we wrote here
        if seq > idx.last + 1:
            idx.skip(seq - idx.last - 1, ts)
        name = self.names.get(subject)
        if name is None:
            name = self.names[subject] = subject.decode()
        idx.append(seq, name, ts, size, off)
        if ttl > 0:
            self.rec.ttl[seq] = ts + ttl
        elif ttl < 0:
            self.rec.never.add(seq)
        if ts > self.rec.last_ts:
            self.rec.last_ts = ts
        return True


def _valid_at(raw: bytes, off: int, end: int) -> bool:
    try:
        RecordCodec.head(raw, off, end)
    except CorruptRecord:
        return False
    return True


def scan_records(
    raw: bytes, start: int, codec: RecordCodec, builder: _Builder, block: Block, report: RecoveryReport
) -> int:
    """Index the records of ``raw`` from ``start``; returns where valid data ends."""
    unpack = HEADER.unpack_from
    crc_of = CRC.unpack_from
    crc32 = zlib.crc32
    view = memoryview(raw)
    end = len(raw)
    off = start
    add = builder.add
    while off < end:
        if end - off >= OVERHEAD:
            magic, flags, rec_len, seq, ts, ttl, slen, hlen = unpack(raw, off)
            stop = off + rec_len - 4
            if (
                magic == MAGIC
                and rec_len >= OVERHEAD
                and stop + 4 <= end
                and crc32(view[off:stop]) == crc_of(raw, stop)[0]
            ):
                if not flags & F_ERASED:
                    extra = NONCE + TAG if flags & F_ENCRYPTED else 0
                    dlen = rec_len - OVERHEAD - extra - slen - hlen
                    size = 30 + slen + dlen + (4 + hlen if hlen else 0)
                    if flags & F_ENCRYPTED:
                        head = RecordCodec.head(raw, off, end)
                        try:
                            subject = codec.payload(raw, off, head)[0]
                        except CorruptRecord:
                            subject = b""
                            dlen = -1
                    else:
                        subject = raw[off + HEADER_SIZE : off + HEADER_SIZE + slen]
                    if dlen >= 0 and add(seq, ts, ttl, subject, size, off):
                        block.total_bytes += size
                        if block.last < block.first:
                            block.first = seq
                        block.last = seq
                    else:
                        _bad(report, block, seq)
                off += rec_len
                continue
        # Damaged record: resynchronise on the next magic that starts a valid record.
        nxt = raw.find(MAGIC, off + 1)
        while nxt >= 0 and not _valid_at(raw, nxt, end):
            nxt = raw.find(MAGIC, nxt + 1)
        if nxt < 0:
            report.records_dropped += 1
            report.bytes_truncated += end - off
            if block.index not in report.blocks_affected:
                report.blocks_affected.append(block.index)
            return off
        seq_guess = unpack(raw, off)[3] if end - off >= HEADER_SIZE and raw[off : off + 2] == MAGIC else 0
        _bad(report, block, seq_guess)
        off = nxt
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
    def __init__(self, io: FileIO, directory: str, codec: RecordCodec, report: RecoveryReport) -> None:
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
        if content and valid < len(content):
            self.report.bytes_truncated += len(content) - valid
        rec = self._from_snapshot() or self._rebuild()
        rec.log_generation, rec.log_valid = generation, valid
        self._apply_log(rec, entries)
        self._block_stats(rec)
        first = rec.idx.first
        rec.ttl = {s: e for s, e in rec.ttl.items() if rec.idx.is_live(s)}
        rec.never = {s for s in rec.never if s >= first and rec.idx.is_live(s)}
        return rec

    # ------------------------------------------------------------------ full scan

    def _rebuild(self) -> Recovered:
        rec = Recovered(SeqIndex(1, objects=False), [])
        builder = _Builder(rec)
        for index in list_blocks(self.dir):
            self._scan_block(rec, builder, index)
        return rec

    def _scan_block(self, rec: Recovered, builder: _Builder, index: int) -> None:
        """Scan a whole block file into the index and append it to ``rec.blocks``."""
        path = self._path(index)
        content = self.io.read_file(path)
        block = Block(index, path, rec.idx.last + 1)
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
        valid = scan_records(raw, BLOCK_HEADER_SIZE, self.codec, builder, block, self.report)
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
                missing.append((sb.first, sb.last))  # removed since the snapshot
                continue
            content = self.io.read_file(bpath)
            is_last = sb.index == known_max
            grown = len(content) > sb.disk_size
            if len(content) < sb.disk_size or (grown and (not is_last or sb.flags)):
                return None
            if zlib.crc32(memoryview(content)[: sb.disk_size]) != sb.crc:
                return None
            blk = Block(sb.index, bpath, sb.first)
            blk.last, blk.flags, blk.disk_size, blk.raw_size = sb.last, sb.flags, sb.disk_size, sb.raw_size
            blk.crc, blk.live, blk.live_bytes, blk.total_bytes = sb.crc, sb.live, sb.live_bytes, sb.total_bytes
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
        st.count, st.first, st.last = arrays["subj_count"], arrays["subj_first"], arrays["subj_last"]
        st.flags, st.free = arrays["subj_flags"], header.free
        rec = Recovered(idx, blocks, last_ts=header.last_ts)
        rec.ttl = dict(zip(arrays["ttl_seq"], arrays["ttl_exp"], strict=True))
        rec.never = set(arrays["never"])
        for first, last in missing:
            for s in idx.matching_seqs(None, first, last, last - first + 1):
                idx.remove(s)
        builder = _Builder(rec)
        if tail is not None:
            self._scan_tail(rec, builder, *tail)
        for index in on_disk:
            if index > known_max:
                self._scan_block(rec, builder, index)
        self.report.used_index = True
        return rec

    def _scan_tail(self, rec: Recovered, builder: _Builder, block: Block, content: bytes) -> None:
        start = block.disk_size
        valid = scan_records(content, start, self.codec, builder, block, self.report)
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
