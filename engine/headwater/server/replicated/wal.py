"""The replication log on disk: one stream's group on one server (docs/REPLICATION.md).

It runs the core's disk actions: ``append`` for ``Persist``, ``truncate`` for ``Truncate``,
``rebase`` for ``Rebase``, in the order the core emits them, then ``await sync()`` once per
Persist before telling the core ``on_persisted``. A restarted replica is built from what
``ReplicationLog.open`` recovers past the owner's snapshot (``after_snapshot``).

Layout: ``<store_dir>/<stream>/group/`` (``group_log_dir``) holds segment files named by the
index of their first entry, ``00000000000000000001.log``; a new segment starts once the last
one holds ``segment_bytes``. Indexes are absolute: compaction deletes whole old segments and
the log then starts at the first kept index; a rebase starts it after a snapshot's index.

The record: a fixed 36-byte header, then the op::

    off  size  field
      0     2  magic  b"\\x9e\\x7a"
      2     1  flags                     bit 0: base record (below); others zero
      3     1  (zero)
      4     4  op_len
      8     8  index
     16     8  epoch
     24     8  prev_epoch                epoch of the entry before (0 before index 1)
     32     4  crc32 of bytes [0, 32) and the op
     36     …  op

All integers little-endian. ``prev_epoch`` chains the records as Raft's log matching does:
a record left over from before a truncate that did not reach the disk cannot pass for the
entry after a newer one, and after compaction it gives the epoch of the last dropped entry
(``base_epoch``, which the core needs to check an Append at that index). Logs written before
flags existed have zero there and open as ever; a record with an unknown flag is not valid.

A **base record** (flag 1, no op) is no entry: it says the log starts after its ``index``,
whose entry has ``epoch`` (``prev_epoch`` 0). It is only ever the first record of a segment
named ``index + 1``, and the next record's ``prev_epoch`` is its ``epoch``.

Writes. ``append`` encodes into a buffer, written to the OS at every sync round (or every
``FLUSH_BYTES``); ``truncate`` cuts the buffer or ``truncate``s the file at the offset of the
first dropped entry (offsets are kept in memory, 8 bytes an entry) and deletes whole segments
after it, newest first (only an uncommitted tail is ever cut, so few); both are cheap and
run on the event loop. ``sync`` uses the file
store's group commit: concurrent callers share a round, whose fsyncs run in a worker thread;
a failed round poisons the log (``LogFailed`` from every later call; reopen it). A round
fsyncs the directory first (segments created or deleted), then every written segment, oldest
first. A new segment's file is created, and its first bytes written, only once every older
segment is fsynced: a power cut cannot leave a later segment's records without the earlier
segment's whole tail. Truncates and deletions are ordered so that a crash leaves a prefix of
the log as it was at some point (an unsynced cut may come back undone).

Rebase (``rebase(index, epoch)``: the owner installed a snapshot at ``index`` that the log does
not hold). On the loop it only swaps the log in memory for an empty one after ``index``: a
new, unborn last segment ``index + 1`` whose buffer starts with the base record; appends go on
after it. The old segments go in the sync rounds, in an order that leaves, at every point of
a power cut, either the log as it was or the rebased one: first the old segments named
``index + 1`` or later are deleted and the directory fsynced (the new segment would sort
before them, or take one's name), in a round of their own when there are any; then a round
creates the new segment, writes it, fsyncs the directory and the file, and only then deletes
the older segments (and fsyncs the directory again). After a crash in between, ``open`` starts
the log at the newest segment that begins with a valid base record and deletes the ones before
it. A crash before the new segment is durable leaves the old log, at most cut after
``index`` (a prefix of it); a torn new segment is cut as any torn tail. So after a crash
that undid an unsynced rebase, the owner, restarting from its snapshot, finds a log that ends
before ``index`` or holds another entry there (the core asked for the rebase for that
reason): ``after_snapshot`` then rebases it again and returns no entries; when the log holds
the snapshot's entry (or has it as its base) it returns the entries past ``index``. A
truncate never goes below the base (``ValueError``, nothing changed: the core never asks, its
base being committed and applied).

Recovery reads every record in order and checks its CRC, index and epoch chain. At the first
bad record: if no valid record follows it anywhere (the rest of its file, later segments), it
is a write torn by a power failure: the file is cut there and later segments deleted. If a
valid record follows, the bad one was written before it and may have been acknowledged:
``CorruptLog`` names the file and offset and nothing is changed (an operator can remove the
replica's log; it then catches up from the others). A valid record that does not continue the
log (index, epoch chain, overlapping or missing segment) is refused the same way. Whatever is
kept is fsynced before ``open`` returns (after a process crash it may only be in the page
cache), since the core treats a recovered log as durable. ``open`` reads every segment: call
it at start-up or in a thread. Two states look like others on disk: a corrupt last record
of a synced log, with nothing valid after it, is cut as a torn write would be (it may have
been acknowledged: the replica then reports less than it did, as one whose disk lost it);
and a power cut during which the kernel wrote a later page of the unsynced tail but not an
earlier one is refused as corruption would be.

Compaction (``compact(upto)``) deletes a segment once the next one starts at or below both
``upto`` and the durable index, so the first kept entry is applied and never cut, and its
record's ``prev_epoch`` survives as ``base_epoch``. Recovered entries then start at
``first_index`` > 1. A segment that starts with a base record is compacted like any other
(the next one's first record then gives ``base_epoch``).
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from pathlib import Path

from headwater.server.replicated.messages import Entry
from headwater.server.store.file.fileio import FileIO, default_io
from headwater.server.store.file.sync import GroupCommit

MAGIC = b"\x9e\x7a"
HEADER = struct.Struct("<2sBxIQQQI")
HEADER_SIZE = HEADER.size
CRC_AT = HEADER_SIZE - 4
_HEAD = struct.Struct("<2sBxIQQQ")  # HEADER up to its crc (CRC_AT bytes)
MAX_OP = 64 << 20
"""Ops above 64 MiB are refused (a corrupt length must not make recovery read gigabytes)."""
SEGMENT_BYTES = 64 << 20
FLUSH_BYTES = 1 << 20
SUFFIX = ".log"
BASE = 0x01
"""Flag of a base record: the log starts after its index (written by ``rebase``)."""

crc32 = zlib.crc32


class CorruptLog(Exception):
    """A record in the middle of the log is bad: acknowledged entries may follow it."""


class LogFailed(Exception):
    """An fsync or write failed: the log must be reopened from disk."""


def group_log_dir(store_dir: Path | str, stream: str) -> Path:
    return Path(store_dir) / stream / "group"


def encode(entry: Entry, prev_epoch: int, flags: int = 0) -> bytes:
    op = entry.op
    if len(op) > MAX_OP:
        raise ValueError("op too large")
    # HEADER without its crc field, packed once (the hot path: every entry written).
    head = _HEAD.pack(MAGIC, flags, len(op), entry.index, entry.epoch, prev_epoch)
    return head + crc32(op, crc32(head)).to_bytes(4, "little") + op


def encode_base(index: int, epoch: int) -> bytes:
    """The base record a rebased log starts with: no op, no entry."""
    return encode(Entry(index, epoch, b""), 0, BASE)


def decode(buf: bytes, off: int) -> tuple[Entry, int, int, int] | None:
    """``(entry, prev_epoch, end, flags)`` of the record at ``off``, or None if it is not whole
    and valid (unknown flags included: a later format's record is not guessed at)."""
    if len(buf) - off < HEADER_SIZE:
        return None
    magic, flags, n, index, epoch, prev, crc = HEADER.unpack_from(buf, off)
    end = off + HEADER_SIZE + n
    if magic != MAGIC or flags & ~BASE or n > MAX_OP or end > len(buf):
        return None
    if flags & BASE and n:
        return None
    view = memoryview(buf)
    if crc32(view[off + HEADER_SIZE : end], crc32(view[off : off + CRC_AT])) != crc:
        return None
    return Entry(index, epoch, bytes(view[off + HEADER_SIZE : end])), prev, end, flags


class _Segment:
    def __init__(self, directory: Path, first: int, born: bool) -> None:
        self.first = first
        self.path = str(directory / f"{first:020d}{SUFFIX}")
        self.offsets = array("Q")
        """File offset of each entry (those still in the write buffer included)."""
        self.size = 0
        """Bytes written to the OS."""
        self.fd: int | None = None
        self.born = born
        """The file exists. A new segment's file waits until older segments are fsynced."""
        self.dirty = False
        """Written or cut since the last fsync started."""

    @property
    def last(self) -> int:
        return self.first + len(self.offsets) - 1


class _SyncJob:
    def __init__(
        self,
        log: ReplicationLog,
        files: list[tuple[_Segment, int]],
        doomed: list[str],
        sync_dir: bool,
        target: int,
        gen: int | None,
        superseded: list[str],
    ) -> None:
        self.log, self.files, self.doomed = log, files, doomed
        self.sync_dir, self.target, self.gen = sync_dir, target, gen
        self.superseded = superseded

    def run(self) -> None:
        io = self.log.io
        for path in self.doomed:  # compacted segments oldest first, then rebased-away newest
            with contextlib.suppress(FileNotFoundError):
                io.unlink(path)
        if self.sync_dir or self.doomed:
            io.fsync_dir(str(self.log.path))
        for _, fd in self.files:
            io.fsync(fd)
        if self.superseded:
            # The rebased log's first segment, name and bytes, is durable (above): the
            # segments before it can go. A crash in between leaves them for ``open`` to drop.
            for path in self.superseded:
                with contextlib.suppress(FileNotFoundError):
                    io.unlink(path)
            io.fsync_dir(str(self.log.path))

    def finish(self) -> None:
        self.log._finished(self)

    def abort(self) -> None:
        self.log._release_deferred()


class ReplicationLog:
    def __init__(
        self,
        path: Path,
        io: FileIO,
        segments: list[_Segment],
        epochs: list[tuple[int, int]],
        base_epoch: int,
        segment_bytes: int,
    ) -> None:
        self.path = path
        self.io = io
        self.segment_bytes = segment_bytes
        self.recovery_report = ""
        self._segments = segments
        self._epochs = epochs
        """(first index, epoch) of each run of entries of one epoch."""
        self.base_epoch = base_epoch
        """Epoch of the entry before ``first_index`` (0 when it is 1)."""
        self._pending = bytearray()
        """Encoded records of the last segment not yet written to the OS."""
        self._gen = 0
        self._synced_gen = 0
        self.durable_index = self.last_index
        self._low = self.last_index
        """Lowest truncation point since the running round took its target."""
        self._doomed: list[str] = []
        self._superseded: list[str] = []
        """Segments of the log before a rebase: deleted once the rebased one is durable."""
        self._rebase_wait = False
        """A rebased log's first file waits for a round that deletes the old segments it
        would sort before (or whose name it takes)."""
        self._dir_dirty = False
        self._deferred: list[int] = []
        """fds released while a round may still fsync them: closed when it ends."""
        self._failure: BaseException | None = None
        self._closed = False
        self._commit = GroupCommit(self._prepare, self._on_failure)

    # Opening ---------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: Path | str, io: FileIO | None = None, segment_bytes: int = SEGMENT_BYTES
    ) -> tuple[ReplicationLog, list[Entry]]:
        """Recover the log (see the module docstring). Blocking: at start-up, or in a thread."""
        io = io or default_io()
        path = Path(path)
        if not path.is_dir():
            path.mkdir(parents=True)
            io.fsync_dir(str(path.parent))
        firsts = sorted(
            int(p.stem)
            for p in path.iterdir()
            if p.suffix == SUFFIX and len(p.stem) == 20 and p.stem.isdigit()
        )
        # A rebase's segment starts the log: those before it are what it replaced.
        start = _newest_base(io, path, firsts)
        superseded, firsts = firsts[:start], firsts[start:]
        segments: list[_Segment] = []
        got: list[Entry] = []
        epochs: list[tuple[int, int]] = []
        base_epoch = 0
        chain: int | None = None  # epoch of the record before the next one (None: unknown)
        expected = firsts[0] if firsts else 1
        problem: tuple[int, int, str] | None = None  # (segment position, offset, reason)
        buf = b""
        for k, first in enumerate(firsts):
            seg = _Segment(path, first, born=True)
            if first != expected:
                problem = (k, 0, f"segment starts at index {first}, expected {expected}")
                break
            buf = io.read_file(seg.path)
            off = 0
            while off < len(buf):
                rec = decode(buf, off)
                if rec is None:
                    problem = (k, off, "torn or corrupt record")
                    break
                entry, prev, end, flags = rec
                if flags & BASE:
                    # Only the first record of the first segment, which is named after it.
                    if k or off or entry.index + 1 != first:
                        raise CorruptLog(
                            f"{seg.path}: base record of index {entry.index} at offset {off}"
                        )
                    base_epoch = chain = entry.epoch
                    off = end
                    continue
                # A valid record that does not continue the log is never a torn write.
                if entry.index != expected:
                    raise CorruptLog(
                        f"{seg.path}: record of index {entry.index} at offset {off}, "
                        f"expected {expected}"
                    )
                if chain is not None and (prev != chain or entry.epoch < prev):
                    raise CorruptLog(
                        f"{seg.path}: epoch chain broken at index {entry.index}, offset {off}"
                    )
                if chain is None:
                    base_epoch = prev
                if not epochs or epochs[-1][1] != entry.epoch:
                    epochs.append((entry.index, entry.epoch))
                seg.offsets.append(off)
                got.append(entry)
                chain = entry.epoch
                expected += 1
                off = end
            seg.size = off
            segments.append(seg)
            if problem:
                break
        report = ""
        if problem is not None:
            k, off, reason = problem
            bad = str(path / f"{firsts[k]:020d}{SUFFIX}")
            later = _valid_after(io, bad, buf if k < len(segments) else b"", off, path, firsts[k:])
            if later is not None:
                raise CorruptLog(
                    f"{bad}: {reason} at offset {off}, followed by a valid record in "
                    f"{later[0]} at offset {later[1]}: refusing to open (the entries after it "
                    "may have been acknowledged)"
                )
            for first in reversed(firsts[k + 1 :]):  # newest first: a crash leaves a prefix
                io.unlink(str(path / f"{first:020d}{SUFFIX}"))
            if k < len(segments):
                io.truncate(bad, off)
            else:
                io.unlink(bad)
            report = f"cut a torn tail ({reason}) at {bad} offset {off}"
        # Make what is kept durable: the core counts a recovered log as fsynced.
        for seg in segments:
            fd = io.open_rw(seg.path)
            try:
                io.fsync(fd)
            finally:
                if seg is segments[-1]:
                    seg.fd = fd
                else:
                    io.close(fd)
        io.fsync_dir(str(path))
        if superseded:  # only now: the rebased log is durable
            for first in superseded:
                io.unlink(str(path / f"{first:020d}{SUFFIX}"))
            io.fsync_dir(str(path))
            dropped = f"dropped {len(superseded)} segment(s) from before a rebase"
            report = f"{report}; {dropped}" if report else dropped
        if not segments:
            segments.append(_Segment(path, expected, born=False))
        log = cls(path, io, segments, epochs, base_epoch, segment_bytes)
        log.recovery_report = report
        return log, got

    # Reading the state -----------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        return self._segments[0].first

    @property
    def last_index(self) -> int:
        return self._segments[-1].last

    @property
    def fsync_rounds(self) -> int:
        return self._commit.fsyncs

    def epoch_at(self, index: int) -> int:
        if index < self.first_index:
            return self.base_epoch if index == self.first_index - 1 else 0
        k = bisect_right(self._epochs, (index, 1 << 64)) - 1
        return self._epochs[k][1] if k >= 0 else 0

    # Writing ---------------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Add entries after the last (buffered; durable after ``sync``)."""
        with self._guard():
            self._append(entries)

    def truncate(self, after_index: int) -> None:
        """Drop the entries after ``after_index`` (an append after it lands after the cut)."""
        with self._guard():
            self._truncate(after_index)

    def compact(self, upto_index: int) -> None:
        """Drop whole segments whose entries are all < ``upto_index`` (applied and
        snapshotted): a segment goes once the next one starts at or below ``upto_index`` and
        below the durable index, so the first kept entry is never cut and the last segment
        always stays. The files are deleted by the next round, off the loop."""
        with self._guard():
            self._compact(upto_index)

    def rebase(self, index: int, epoch: int) -> None:
        """Drop every entry: the log goes on after ``index``, whose entry (of ``epoch``) the
        owner's snapshot holds, as a log compacted up to there (``first_index`` ``index + 1``,
        ``base_epoch`` ``epoch``); the next append is ``index + 1``. Nothing touches the disk
        here: the sync round writes the new first segment, then deletes the old ones (see the
        module docstring). Until a sync, a crash brings back the log as it was before."""
        with self._guard():
            self._rebase(index, epoch)

    def after_snapshot(self, index: int, epoch: int, recovered: Sequence[Entry]) -> list[Entry]:
        """The entries a runner restarting from the owner's snapshot at ``index`` (entry of
        ``epoch``; (0, 0) without one) starts with, of those ``open`` returned: the ones past
        ``index`` if this log holds that very entry (or has it as its base). Otherwise the log
        ends before ``index`` or holds another entry there (a crash undid an unsynced rebase,
        or the snapshot was installed and the crash came before its rebase): nothing of it
        follows the snapshot, so it is rebased there and nothing is returned."""
        if index < self.first_index - 1:
            raise ValueError(f"snapshot at {index}: the log is compacted up to {self.first_index}")
        if index <= self.last_index and self.epoch_at(index) == epoch:
            return [e for e in recovered if e.index > index]
        self.rebase(index, epoch)
        return []

    def _append(self, entries: Sequence[Entry]) -> None:
        last = self.last_index
        prev = self.epoch_at(last)
        for entry in entries:
            if entry.index != last + 1:
                raise ValueError(f"append of index {entry.index} after {last}")
            if entry.epoch < prev:
                raise ValueError(f"entry {entry.index} of epoch {entry.epoch} after {prev}")
            tail = self._segments[-1]
            if tail.born and tail.offsets and tail.size + len(self._pending) >= self.segment_bytes:
                # Roll. The old segment keeps its fd until a round has fsynced it.
                self._flush()
                tail = _Segment(self.path, entry.index, born=False)
                self._segments.append(tail)
            tail.offsets.append(tail.size + len(self._pending))
            self._pending += encode(entry, prev)
            if entry.epoch != prev or not self._epochs:
                self._epochs.append((entry.index, entry.epoch))
            prev = entry.epoch
            last += 1
        if len(self._pending) >= FLUSH_BYTES:
            self._flush()
        self._changed()

    def _truncate(self, after_index: int) -> None:
        if after_index >= self.last_index:
            return
        if after_index < self.first_index - 1:
            raise ValueError(f"truncate after {after_index}: compacted up to {self.first_index}")
        segs = self._segments
        while len(segs) > 1 and segs[-1].first > after_index:
            seg = segs.pop()  # newest first: a crash in between leaves a prefix of the log
            self._pending = bytearray()
            if seg.born:
                self._release(seg.fd)
                self.io.unlink(seg.path)
                self._dir_dirty = True
        tail = segs[-1]
        keep = after_index - tail.first + 1
        if keep < len(tail.offsets):
            cut = tail.offsets[keep]
            del tail.offsets[keep:]
            if cut >= tail.size:
                del self._pending[cut - tail.size :]
            else:
                self._pending = bytearray()
                self.io.truncate(tail.path, cut)
                tail.size = cut
                tail.dirty = True
        if tail.born and tail.fd is None:
            tail.fd = self.io.open_rw(tail.path)
        k = bisect_right(self._epochs, (after_index, 1 << 64))
        del self._epochs[k:]
        self.durable_index = min(self.durable_index, after_index)
        self._low = min(self._low, after_index)
        self._changed()

    def _rebase(self, index: int, epoch: int) -> None:
        if index < self.first_index or epoch < 0:
            if index == self.first_index - 1 and epoch == self.base_epoch:
                self._truncate(index)  # back to the base: that is a truncate
                return
            # The base is committed and applied: a snapshot before it, or of another entry
            # there, is a bug upstream.
            raise ValueError(
                f"rebase at {index} (epoch {epoch}): the log starts after "
                f"{self.first_index - 1} (epoch {self.base_epoch})"
            )
        # The new first segment is named index + 1: the old segments named so or after must
        # be gone (durably) before its file is created; the others go once it is durable.
        for seg in reversed(self._segments):
            self._release(seg.fd)
            seg.fd = None
            if seg.born:
                self._superseded.append(seg.path)
        later = [p for p in self._superseded if _first_of(p) > index]
        self._superseded = [p for p in self._superseded if _first_of(p) <= index]
        self._doomed += sorted(later, key=_first_of, reverse=True)  # newest first
        self._rebase_wait = any(_first_of(p) > index for p in self._doomed)
        self._segments = [_Segment(self.path, index + 1, born=False)]
        self._pending = bytearray(encode_base(index, epoch))
        self._epochs = []
        self.base_epoch = epoch
        self.durable_index = min(self.durable_index, index)
        self._low = min(self._low, index)
        self._changed()
        self._commit.kick()

    def _compact(self, upto_index: int) -> None:
        segs = self._segments
        # The first kept entry must be durable and applied (so never cut): its record then
        # always survives, and with it ``base_epoch``.
        upto = min(upto_index, self.durable_index)
        if len(segs) < 2 or segs[1].first > upto:
            return
        while len(segs) > 1 and segs[1].first <= upto:
            seg = segs.pop(0)
            self._release(seg.fd)
            self._doomed.append(seg.path)
        first = self.first_index
        k = bisect_right(self._epochs, (first - 1, 1 << 64)) - 1
        self.base_epoch = self._epochs[k][1]
        del self._epochs[: bisect_right(self._epochs, (first, 1 << 64)) - 1]
        self._changed()
        self._commit.kick()

    async def sync(self) -> int:
        """Make everything appended and truncated before the call durable, and return the
        last index the log had at the call: durable now, unless a truncate made during the wait
        cut it (``durable_index`` is the current value). A runner that tells the core
        ``on_persisted`` per Persist needs no more: the core discounts what it truncated."""
        self._check()
        gen = self._gen
        must = self.last_index
        # A few rounds at most: one in flight, one that only fsyncs the segments before a new
        # one (whose file waits for them), or deletes the segments a rebase's first one would
        # sort before, then the one that writes it.
        for _ in range(8):
            if self._synced_gen >= gen:
                return must
            try:
                await self._commit.wait()
            except Exception as exc:
                raise LogFailed(f"{self.path}: {exc}") from exc
        if self._synced_gen >= gen:
            return must
        raise AssertionError("sync made no progress")

    async def aclose(self) -> None:
        """Sync (unless poisoned) and close."""
        if self._failure is None:
            await self.sync()
        await self._commit.drain()
        self.close()

    def close(self) -> None:
        """Close without syncing: what was not synced may be lost, as in a crash."""
        self._closed = True
        self._commit.stop()
        for seg in self._segments:
            if seg.fd is not None:
                self.io.close(seg.fd)
                seg.fd = None
        for fd in self._deferred:
            self.io.close(fd)
        self._deferred = []

    # Internals -------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._failure is not None:
            raise LogFailed(f"{self.path}: poisoned by {self._failure!r}; reopen the log")

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """A failed write, cut or unlink poisons the log: what the file holds is unknown."""
        self._check()
        try:
            yield
        except OSError as exc:
            self._failure = exc
            self._commit.stop()
            raise LogFailed(f"{self.path}: {exc!r}; reopen the log") from exc

    def _changed(self) -> None:
        self._gen += 1
        self._commit.dirty()

    def _flush(self) -> None:
        tail = self._segments[-1]
        if self._pending and tail.born:
            assert tail.fd is not None
            self.io.pwrite(tail.fd, self._pending, tail.size)
            tail.size += len(self._pending)
            tail.dirty = True
            self._pending = bytearray()

    def _release(self, fd: int | None) -> None:
        if fd is None:
            return
        if self._commit.busy:
            self._deferred.append(fd)  # the running round may be fsyncing it
        else:
            self.io.close(fd)

    def _release_deferred(self) -> None:
        for fd in self._deferred:
            self.io.close(fd)
        self._deferred = []

    def _prepare(self) -> _SyncJob:
        if self._closed:
            # A round kicked (by compact or rebase) before a close without sync: it must not
            # write or delete anything, as after a crash (the log may be open again already).
            return _SyncJob(self, [], [], False, self.durable_index, None, [])
        tail = self._segments[-1]
        complete = True
        if not tail.born:
            if self._rebase_wait or any(seg.dirty for seg in self._segments[:-1]):
                # This round fsyncs them (or deletes what a rebase replaced); the next one,
                # which starts only after it finished, creates the file.
                complete = False
                self._rebase_wait = False
            else:
                tail.fd = self.io.open_rw(tail.path, truncate=True)
                tail.born = True
                self._dir_dirty = True
        self._flush()
        files: list[tuple[_Segment, int]] = []
        for seg in self._segments:
            if seg.born and seg.dirty and seg.fd is not None:
                files.append((seg, seg.fd))
                seg.dirty = False
        target = self.last_index if complete else tail.first - 1
        superseded: list[str] = []
        if tail.born:  # a rebased log's first segment is written by this round, or was
            superseded, self._superseded = self._superseded, []
        job = _SyncJob(
            self,
            files,
            self._doomed,
            self._dir_dirty,
            target,
            self._gen if complete else None,
            superseded,
        )
        self._doomed, self._dir_dirty = [], False
        self._low = target
        return job

    def _finished(self, job: _SyncJob) -> None:
        self.durable_index = max(self.durable_index, min(job.target, self._low))
        if job.gen is None:
            self._commit.dirty()  # the new segment still waits for its round
        else:
            self._synced_gen = max(self._synced_gen, job.gen)
        for seg in self._segments[:-1]:
            if seg.fd is not None and not seg.dirty:
                self.io.close(seg.fd)  # fsynced and no longer written: no fd needed
                seg.fd = None
        self._release_deferred()

    def _on_failure(self, exc: BaseException) -> None:
        self._failure = exc


def _newest_base(io: FileIO, directory: Path, firsts: list[int]) -> int:
    """Position in ``firsts`` of the newest segment that starts with a valid base record (0 if
    none). Only its header is read."""
    for k in range(len(firsts) - 1, -1, -1):
        fd = io.open_ro(str(directory / f"{firsts[k]:020d}{SUFFIX}"))
        try:
            head = io.pread(fd, HEADER_SIZE, 0)
        finally:
            io.close(fd)
        rec = decode(head, 0)
        if rec is not None and rec[3] & BASE:
            return k
    return 0


def _first_of(path: str) -> int:
    return int(os.path.basename(path)[: -len(SUFFIX)])


def _valid_after(
    io: FileIO, bad: str, buf: bytes, off: int, directory: Path, firsts: list[int]
) -> tuple[str, int] | None:
    """The first valid record after offset ``off`` of ``bad`` (whose bytes are ``buf``, empty
    if it was not read), in it or in the later segments."""
    found = _scan(buf, off + 1)
    if found is not None:
        return bad, found
    for first in firsts[1:]:
        p = str(directory / f"{first:020d}{SUFFIX}")
        found = _scan(io.read_file(p), 0)
        if found is not None:
            return p, found
    if not buf and os.path.exists(bad):
        found = _scan(io.read_file(bad), 0)
        if found is not None:
            return bad, found
    return None


def _scan(buf: bytes, start: int) -> int | None:
    i = buf.find(MAGIC, start)
    while i >= 0:
        if decode(buf, i) is not None:
            return i
        i = buf.find(MAGIC, i + 1)
    return None
