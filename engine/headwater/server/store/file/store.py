"""``FileStore``: the shared engine over append-only block files, a delete log and a snapshot.

On-disk layout (``<directory>/msgs/``, documented in docs/FILESTORE.md)::

    format.json     format version, encryption key check (written atomically)
    00000001.blk    blocks of records (``blocks``/``records``)
    deletes.log     removals and sequence floors (``dellog``)
    index.snap      index snapshot from the last clean close (``index``)

Appends go to the active block's write buffer and reach the OS on the next loop iteration (so a
killed process loses nothing), and so do removals' delete-log entries; ``durable()`` adds the
fsync through group commit (``sync``). Disk space is reserved before a record is accepted, so a
full disk refuses the append (``StorageFull``) and leaves no trace. Any failed write or fsync
stops the store (``failed``) until it is reopened from disk.

Replica mode (``replica=True``, for a replicated stream that applies committed entries without
an fsync each): ``checkpoint()`` makes everything up to now durable and returns its
``Positions``, the work that cannot be undone waits for ``checkpoint_durable`` (``held``), and a
restart first cuts the store back to the newest durable checkpoint (``checkpoint.cut_back``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import hmac
import logging
import os
import shutil
import sys
from array import array
from collections.abc import Sequence
from typing import Any

import msgspec

from headwater.server.store.base import (
    StorageFull,
    StoreConfig,
    StoredMsg,
    StoreError,
    StoreFailed,
    file_msg_size,
)
from headwater.server.store.engine import IndexedStore
from headwater.server.store.file.blocks import CorruptBlock
from headwater.server.store.file.blockset import BlockSet, OutOfSpace, SyncJob
from headwater.server.store.file.checkpoint import Positions
from headwater.server.store.file.dellog import LOG_NAME, DeleteLog, dead_ranges
from headwater.server.store.file.fileio import FileIO, default_io
from headwater.server.store.file.index import SNAP_NAME, SnapshotHeader, encode_snapshot
from headwater.server.store.file.records import (
    CRC,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_RECORD,
    OVERHEAD,
    CorruptRecord,
    RecordCodec,
    crc32,
)
from headwater.server.store.file.recovery import Recovery
from headwater.server.store.file.sync import GroupCommit

log = logging.getLogger("headwater.store")

FORMAT_NAME = "format.json"
FORMAT_VERSION = 1

RECENT_BYTES = 8 * 1024 * 1024
"""How much of the newest data is served from memory instead of the blocks. Consumers that
keep up with publishers (the common case) read what was just written; without this every such
read re-parses and re-checksums a record we built a moment ago, about a quarter of a pull
consumer's CPU. nats-server keeps recently written messages cached per block for the same
reason."""


class StoreFormat(msgspec.Struct):
    version: int
    key_check: str | None = None
    """HMAC-SHA256(key, "headwater.store")[:16] hex: detects a wrong key without revealing it."""


def _key_check(key: bytes) -> str:
    return hmac.new(key, b"headwater.store", hashlib.sha256).hexdigest()[:32]


class FileStore(IndexedStore):
    def __init__(
        self, config: StoreConfig, io: FileIO | None = None, replica: bool = False
    ) -> None:
        """``replica``: hold irreversible work for checkpoints (see the module docstring);
        a replica store is opened after ``checkpoint.cut_back`` to its newest durable one."""
        if config.directory is None:
            raise ValueError("a file store needs a directory")
        super().__init__(config, objects_in_index=False)
        self._io = io or default_io()
        self._dir = os.path.join(os.fspath(config.directory), "msgs")
        self._codec = RecordCodec(config.encryption_key)
        self._policy = config.sync
        self._log = DeleteLog(self._io, self._dir)
        self._commit = GroupCommit(self._prepare_sync, self._commit_failed)
        self._flush_soon = False
        self._recent: dict[int, StoredMsg] = {}
        self._recent_order: collections.deque[int] = collections.deque()
        self._recent_bytes = 0
        self._replica = replica
        self._durable_at: Positions | None = None
        """Replica mode: the newest checkpoint the owner reported durable."""
        self._open()

    # ------------------------------------------------------------------ open

    def _open(self) -> None:
        io = self._io
        cfg = self.config
        os.makedirs(self._dir, exist_ok=True)
        fmt_path = os.path.join(self._dir, FORMAT_NAME)
        key = cfg.encryption_key
        if os.path.exists(fmt_path):
            fmt = msgspec.json.decode(io.read_file(fmt_path), type=StoreFormat)
            if fmt.version != FORMAT_VERSION:
                raise StoreError(f"unsupported store format {fmt.version}")
            if fmt.key_check is not None and key is None:
                raise StoreError("store is encrypted and no key was configured")
            if fmt.key_check is not None and key is not None and fmt.key_check != _key_check(key):
                raise StoreError("wrong encryption key for this store")
            if fmt.key_check is None and key is not None:
                fmt.key_check = _key_check(key)
                io.write_atomic(fmt_path, msgspec.json.encode(fmt))
        else:
            # A new store: its first sequence goes into the delete log as a FLOOR.
            self._log.generation = 0
            self._log.rewrite(cfg.first_seq, cfg.first_seq - 1, 0, ())
            self._log.close()
            check = _key_check(key) if key is not None else None
            io.write_atomic(fmt_path, msgspec.json.encode(StoreFormat(FORMAT_VERSION, check)))
        rec = Recovery(io, self._dir, self._codec, self.recovery_report).run()
        self._idx = rec.idx
        self._ttl = rec.ttl
        self._ttl_heap = sorted((e, s) for s, e in rec.ttl.items())
        self._never = rec.never
        self._last_ts = rec.last_ts
        self._log.open(rec.log_generation, rec.log_valid)
        self._blocks = BlockSet(
            io, self._dir, cfg.block_size, self._compress, self._idx, self._replica
        )
        self._blocks.adopt(rec.blocks)
        self._blocks.on_rewrite = self._rewrite_scheduled
        for seq in self.recovery_report.corrupt_seqs:
            if self._idx.first <= seq <= self._idx.last and not self._idx.is_live(seq):
                self._log.delete(seq)
        if self._budget is not None:
            self._budget.used += self._idx.bytes
        if not self.recovery_report.clean:
            log.warning("store %s recovered with damage: %s", cfg.name, self.recovery_report)

    @property
    def _compress(self) -> bool:
        return self.config.compression == "s2" and not self._codec.encrypted

    # ------------------------------------------------------------------ engine hooks

    def _msg_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        return file_msg_size(subject, hdr, data)

    def _discard_new_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        return len(hdr) + len(data)  # nats-server's filestore compares payload bytes only

    def _write(
        self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: int, size: int
    ) -> Any:
        try:
            record = self._codec.encode(seq, ts, ttl, subject.encode(), hdr, data)
            off = self._blocks.append(record, seq, size)
        except ValueError as exc:
            raise StoreError(f"cannot write message: {exc}") from exc
        except OutOfSpace as exc:
            log.warning("store %s: no disk space for message %d: %s", self.config.name, seq, exc)
            raise StorageFull() from exc
        except OSError as exc:
            raise self._write_failed(exc) from exc
        self._commit.dirty()
        self._remember(StoredMsg(subject, seq, hdr, data, ts))
        return off

    def _write_run(self, msgs: Sequence[StoredMsg], sizes: list[int]) -> list[Any]:
        encode = self._codec.encode
        append = self._blocks.append
        try:  # _reserve_batch made room in one block for the whole batch
            locs = [
                append(
                    encode(m.seq, m.ts, 0, m.subject.encode(), m.hdr, m.data), m.seq, size, False
                )
                for m, size in zip(msgs, sizes, strict=True)
            ]
        except (ValueError, OSError) as exc:
            raise self._write_failed(exc) from exc
        self._commit.dirty()
        # Only what the recent cache would keep anyway (it holds the newest bytes).
        kept, i = 0, len(msgs)
        while i > 0 and kept < RECENT_BYTES:
            i -= 1
            kept += len(msgs[i].hdr) + len(msgs[i].data) + 64
        for m in msgs[i:]:
            self._remember(m)
        return locs

    def _reserve_batch(self, msgs: Sequence[StoredMsg]) -> None:
        length = self._codec.length
        lengths = [length(m.subject.encode(), m.hdr, m.data) for m in msgs]
        if max(lengths, default=0) > MAX_RECORD:
            raise StoreError("cannot write message: record too large")
        total = sum(lengths)
        try:
            self._blocks.reserve_run(total)
        except OutOfSpace as exc:
            name, n = self.config.name, len(msgs)
            log.warning("store %s: no disk space for %d messages: %s", name, n, exc)
            raise StorageFull() from exc
        except OSError as exc:
            raise self._write_failed(exc) from exc

    def _remember(self, msg: StoredMsg) -> None:
        """Keep ``msg`` readable from memory while it is among the newest RECENT_BYTES.

        Entries are never invalidated on removal: reads only ask for sequences the index
        says are live, and a stored message never changes."""
        recent = self._recent
        recent[msg.seq] = msg
        self._recent_order.append(msg.seq)
        self._recent_bytes += len(msg.hdr) + len(msg.data) + 64
        while self._recent_bytes > RECENT_BYTES:
            old = recent.pop(self._recent_order.popleft(), None)
            if old is not None:
                self._recent_bytes -= len(old.hdr) + len(old.data) + 64

    def _after_write(self) -> None:
        # ``always`` and ``ack`` alike: the fsync runs in group commit, off the event loop;
        # the stream holds each ack until ``durable()`` has returned (docs/DIFFERENCES.md).
        self._flush_later()

    def _flush_later(self) -> None:
        """Get buffered records and delete-log entries to the OS on the next loop iteration
        (a killed process then keeps them), and arm the interval timer."""
        mode = self._policy.mode
        if self._flush_soon:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._flush_soon = True
        loop.call_soon(self._flush_to_os)
        if mode == "interval" and not self._commit.has_timer:
            self._commit.start_interval(self._policy.interval)

    def _flush_to_os(self) -> None:
        self._flush_soon = False
        if self._closed or self.failed is not None:
            return
        try:
            self._blocks.flush()
            self._log.flush()
        except OSError as exc:
            self._write_failed(exc)

    def _write_failed(self, exc: BaseException) -> StoreFailed:
        """A write to disk failed (not for want of reserved space): fail-stop."""
        self._commit_failed(exc)
        assert self.failed is not None
        return self.failed

    def _commit_failed(self, exc: BaseException) -> None:
        """A write or fsync failed: from now on the store only reads (see ``failed``)."""
        if self.failed is not None:
            return
        self.failed = StoreFailed(
            f"write or fsync to disk failed ({exc}); "
            "writes are refused until the stream is reopened from disk"
        )
        self._commit.failure = self._commit.failure or self.failed
        self._commit.stop()
        log.error("store %s: %s", self.config.name, self.failed)
        if self.on_failure is not None and not self._closed:  # not from the closing thread
            self.on_failure(self.failed)

    def _read(self, seq: int, loc: Any) -> StoredMsg | None:
        cached = self._recent.get(seq)
        if cached is not None:
            return cached
        idx = self._idx
        blk = self._blocks.block_for(seq)
        try:
            buf, start, end = self._blocks.reader.chunk(blk, loc)
            head = RecordCodec.head(buf, start, end)
            if head.seq != seq or head.erased:
                raise CorruptRecord(f"record at {loc} is not message {seq}")
            _, hdr, data = self._codec.payload(buf, start, head)
        except (CorruptRecord, CorruptBlock) as exc:
            self._lost(seq, exc)
            return None
        name = idx.subjects.names[idx.sid[seq - idx.base]]
        return StoredMsg(name, seq, hdr, data, head.ts)  # type: ignore[arg-type]

    def load_next_batch(
        self, filter: str, start_seq: int, limit: int, max_bytes: int
    ) -> list[StoredMsg]:
        idx = self._idx
        ids = idx.subjects.match(filter)
        if self._codec.encrypted or not (ids is None or len(ids) == len(idx.subjects)):
            return super().load_next_batch(filter, start_seq, limit, max_bytes)
        # Every subject: walk the blocks' records in order instead of looking each one up.
        recent = self._recent
        found: list[StoredMsg] = []
        seq: int | None = start_seq
        size = 0
        while len(found) < limit and size < max_bytes:
            seq = idx.next_live(seq)  # type: ignore[arg-type]
            if seq is None:
                break
            msg = recent.get(seq)
            if msg is not None:
                found.append(msg)
                size += len(msg.hdr) + len(msg.data)
                seq += 1
                continue
            run = self._read_run(seq, limit - len(found), max_bytes - size)
            if not run:
                # Something is off at ``seq``: the one-by-one read reports and skips it.
                msg = self._load_found(seq, None, True)
                if msg is None:
                    break
                run = [msg]
            found.extend(run)
            size += sum(len(m.hdr) + len(m.data) for m in run)
            seq = run[-1].seq + 1
        return found

    def _read_run(self, seq: int, limit: int, room: int) -> list[StoredMsg]:
        """The live messages of the records from ``seq``'s on, as far as one read reaches.

        Stops (returning what it has, maybe nothing) at anything unexpected: the one-by-one
        read then deals with it. Each record must sit where the index says and pass its
        checksum, as in ``_read``.
        """
        idx = self._idx
        base, live, sids, locs = idx.base, idx.live, idx.sid, idx.loc
        names = idx.subjects.names
        blk = self._blocks.block_for(seq)
        loc = locs[seq - base]
        try:
            buf, pos, end = self._blocks.reader.chunk(blk, loc)
        except CorruptBlock:
            return []
        shift = loc - pos
        """Raw block offset of ``buf[0]``."""
        last = min(blk.last, idx.last)
        view = memoryview(buf)
        unpack = HEADER.unpack_from
        out: list[StoredMsg] = []
        first = seq
        while len(out) < limit and room > 0 and pos + OVERHEAD <= end:
            magic, flags, rec_len, rseq, ts, _, slen, hlen = unpack(buf, pos)
            nxt = pos + rec_len
            if magic != MAGIC or rec_len < OVERHEAD or nxt > end or not seq <= rseq <= last:
                break
            if not out and rseq != first:
                break  # the index points elsewhere
            i = rseq - base
            if live[i]:
                stop = nxt - 4
                h = pos + HEADER_SIZE + slen
                d = h + hlen
                if flags or locs[i] != pos + shift or d > stop:
                    break
                if crc32(view[pos:stop]) != CRC.unpack_from(buf, stop)[0]:
                    break
                data = buf[d:stop]
                out.append(StoredMsg(names[sids[i]], rseq, buf[h:d], data, ts))  # type: ignore[arg-type]
                room -= hlen + len(data)
            seq = rseq + 1
            pos = nxt
        view.release()
        return out

    def _lost(self, seq: int, exc: Exception) -> None:
        """A record failed its checks on read: report it and stop indexing it."""
        name = self.config.name
        log.error("store %s: message %d is corrupt on disk (%s); dropped", name, seq, exc)
        report = self.recovery_report
        report.records_dropped += 1
        report.corrupt_seqs.append(seq)
        self._remove(seq, False)

    def _removed(self, seq: int, size: int, loc: Any, erase: bool) -> None:
        if erase:
            # A secure delete leaves no copy behind, in memory either.
            old = self._recent.pop(seq, None)
            if old is not None:
                self._recent_bytes -= len(old.hdr) + len(old.data) + 64
        self._log.delete(seq)
        self._commit.dirty()
        self._flush_later()
        self._blocks.removed(seq, size, loc, erase)

    def _floor(self) -> None:
        idx = self._idx
        self._log.floor(idx.first, idx.last, self._last_ts)
        self._commit.dirty()
        self._flush_later()
        self._blocks.floor()

    def purge(self, subject: str = "", seq: int = 0, keep: int = 0) -> int:
        removed = super().purge(subject, seq, keep)
        if removed and self.failed is None:
            self._blocks.release_dead_active()  # a purge must give the disk space back
        return removed

    def compact(self, seq: int) -> int:
        removed = super().compact(seq)
        if removed and self.failed is None:
            self._blocks.release_dead_active()
        return removed

    def _rewrite_scheduled(self) -> None:
        """Get a block rewrite fsynced and renamed without waiting for a publisher: a
        background round on the loop, or right away when there is no loop (tools, tests)."""
        self._commit.dirty()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if not self._closed and self.failed is None:
                with contextlib.suppress(OSError):  # recorded in ``failed``
                    self._commit.sync_now()
            return
        loop.call_soon(self._commit.kick)

    # ------------------------------------------------------------------ durability

    def _prepare_sync(self) -> SyncJob:
        return self._blocks.prepare(self._log)

    async def durable(self) -> None:
        if self.failed is not None:
            raise self.failed
        if self._policy.mode == "interval":
            self._flush_to_os()  # what the caller acknowledges survives a kill, at least
            if self.failed is not None:
                raise self.failed
        else:
            await self._round()

    async def _round(self) -> None:
        """Wait for the sync round that covers what was written so far; raise if it (or an
        earlier one) failed."""
        try:
            await self._commit.wait()
        except OSError as exc:
            raise self.failed or StoreError(f"cannot sync to disk: {exc}") from exc
        if self.failed is not None:
            raise self.failed

    # ------------------------------------------------------------------ replica checkpoints

    async def checkpoint(self) -> Positions:
        """Capture the store's positions now and make everything up to them durable.

        Call on the loop between two applies: the capture flushes the buffers (closing the
        delete log's open DEL run) and computes the compactions held for it; then one store
        round fsyncs the active block, the delete log, new blocks' directory entries and those
        compactions, in a worker thread. Applies may continue meanwhile (they land past the
        positions). Raises ``StoreFailed`` if the round fails (the store is then failed).
        After the caller wrote the positions durably, it calls ``checkpoint_durable``.
        """
        if not self._replica:
            raise StoreError("checkpoints are for a store opened in replica mode")
        self._check_open()
        if self.failed is not None:
            raise self.failed
        blocks = self._blocks
        try:
            blocks.flush()
            self._log.flush()
        except OSError as exc:
            raise self._write_failed(exc) from exc
        mark = blocks.capture()
        active = blocks.active
        positions = Positions(
            last_seq=self._idx.last,
            log_generation=self._log.generation,
            log_length=self._log.size,
            block=active.index,
            offset=active.disk_size,
            mark=mark,
        )
        self._commit.dirty()
        await self._round()
        return positions

    def checkpoint_durable(self, positions: Positions) -> None:
        """The caller has written ``positions`` (from this store's ``checkpoint()``) durably:
        release the held work they cover. It runs on the loop and in the following rounds,
        which this call starts (so erased payloads and dropped blocks are gone soon after)."""
        if not self._replica:
            raise StoreError("checkpoints are for a store opened in replica mode")
        if positions.mark > self._blocks.held.serial or positions.last_seq > self._idx.last:
            raise ValueError("positions from another store or another instance of it")
        if self._closed or self.failed is not None:
            return
        self._durable_at = positions
        try:
            self._blocks.release(positions.mark)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        if self._blocks.pending:
            self._rewrite_scheduled()

    @property
    def fsync_rounds(self) -> int:
        """Completed group-commit rounds (tests count them)."""
        return self._commit.fsyncs

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._commit.stop()
        self._shutdown()
        self._commit.finished()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._commit.stop()
        await self._commit.drain()
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._shutdown)
        finally:
            self._commit.finished()

    def _shutdown(self) -> None:
        if self.failed is None:
            try:
                self._commit.sync_now()
            except OSError:
                pass  # recorded in ``failed``
        if self.failed is not None:
            # Nothing more is written: reopening recovers from what the disk really holds.
            self._blocks.close(trim=False)
            self._log.close()
            return
        idx = self._idx
        mark: tuple[int, int, int] | None = None
        if self._replica:
            # The rewrite and the snapshot must be the state at a durable checkpoint (a cut
            # back to it keeps them): only when nothing changed since the newest one.
            at = self._durable_at
            if at is None or not at.same_place(self._positions_now()):
                self._blocks.close()
                self._log.close()
                return
            mark = (at.last_seq, at.log_generation, at.log_length)
        dead = dead_ranges(idx.live, idx.base, idx.first - idx.base, len(idx.live))
        try:
            self._log.rewrite(idx.first, idx.last, self._last_ts, list(dead), mark)
            self._write_snapshot()
        except OSError as exc:
            # A full disk, say: the synced log and blocks still say everything; the next
            # open replays the log (and scans) instead of loading a snapshot.
            log.warning("store %s: closing without an index snapshot: %s", self.config.name, exc)
        self._blocks.close()
        self._log.close()

    def _positions_now(self) -> Positions:
        """Where the (flushed) store ends now, as a checkpoint would name it."""
        blk, dlog = self._blocks.active, self._log
        return Positions(self._idx.last, dlog.generation, dlog.size, blk.index, blk.disk_size)

    def _write_snapshot(self) -> None:
        idx = self._idx
        st = idx.subjects
        named = self._durable_at if self._replica else None
        ttl = sorted(self._ttl.items())
        arrays: dict[str, Any] = {
            "live": idx.live,
            "sid": idx.sid,
            "ts": idx.ts,
            "size": idx.size,
            "loc": idx.loc,
            "subj_count": st.count,
            "subj_first": st.first,
            "subj_last": st.last,
            "subj_flags": st.flags,
            "ttl_seq": _q([s for s, _ in ttl]),
            "ttl_exp": _q([e for _, e in ttl]),
            "never": _q(sorted(self._never)),
        }
        header = SnapshotHeader(
            byteorder=sys.byteorder,
            base=idx.base,
            first=idx.first,
            last=idx.last,
            msgs=idx.msgs,
            bytes=idx.bytes,
            last_ts=self._last_ts,
            blocks=self._blocks.snapshot_blocks(),
            names=st.names,
            free=st.free,
            arrays=list(arrays),
            checkpoint=named.to_bytes().hex() if named is not None else None,
        )
        self._io.write_atomic(os.path.join(self._dir, SNAP_NAME), encode_snapshot(header, arrays))

    def delete(self) -> None:
        if not self._closed:
            self._closed = True
            self._commit.stop()
            self._release_files()
        self._forget()
        self._remove_files()

    async def adelete(self) -> None:
        """``delete`` for the loop: waits for a sync round still fsyncing our descriptors
        before closing them, and removes the files in a worker thread."""
        if not self._closed:
            self._closed = True
            self._commit.stop()
            await self._commit.drain()
            self._release_files()
        self._forget()
        await asyncio.get_running_loop().run_in_executor(None, self._remove_files)

    def _release_files(self) -> None:
        self._blocks.close()
        self._log.close()
        self._commit.finished()

    def _forget(self) -> None:
        if self._budget is not None:
            self._budget.used -= self._idx.bytes
        self._idx.reset(self._idx.last + 1)

    def _remove_files(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
        parent = os.path.dirname(self._dir)
        if os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)

    def check(self) -> None:
        super().check()
        if not self._closed:
            self._blocks.check()
            assert os.path.exists(os.path.join(self._dir, LOG_NAME)), "delete log missing"


def _q(values: list[int]) -> array[int]:
    return array("q", values)
