"""Checkpoints of a replicated stream on a file store, and its restart from the newest one
(docs/REPLICATION.md, "Restarting a replica on a file store").

A file replica applies committed entries to a :class:`FileStore` opened in replica mode, with
no fsync of its own. Now and then, between two Apply batches, its owner takes a
**checkpoint** (:meth:`Checkpoints.take`): in one synchronous step it captures the applied
index X (and its epoch), the small state the store cannot give back (:class:`SmallState`:
``Stream.lseq``/``lmsgid``, the subject delete markers, the consumers' records, the stream's
config) and the store's positions (``FileStore.checkpoint``, whose round then makes them
durable); then the message ids recorded since the last checkpoint go to the duplicate log
(below) and are fsynced, and only then the record is appended to ``<group dir>/checkpoint``
(``CheckpointFile``, fsynced) and the store told (``checkpoint_durable``). From then on the
replication log may be compacted up to X, never further.

A restart (:func:`recover`, blocking) reads the newest checkpoint, cuts the store back to its
positions (``cut_back``: whatever a crash left past them goes), opens it, and reads the small
state and the duplicate window back: the state as of X exactly. The log after X is then
applied again. With no checkpoint at all the store is deleted and the whole log replayed.

**The duplicate window** is an append-only ``dedupe.<generation>.log`` beside the
checkpoint: (id, sequence, time) of each publish with an id applied, written at the
checkpoint that covers it, its length named by the checkpoint; a restart truncates it to that
length and records its entries in order into the stream's window, the order and rule
``publish.Dedupe`` keeps, so later lookups drop exactly what the others' windows dropped.
Why a log and not the window in each checkpoint: the window holds every id published in
``duplicate_window`` (2 minutes by default): at 10,000 publishes/s with ids that is 1.2
million ids, some 40 MB rewritten every second, and past the checkpoint file's 1 MiB record.
The log costs one buffered append per id and is rewritten whole (a new generation: the
window then, named by the next checkpoint; the older file is deleted once that is durable)
only when it holds more than twice the live window, so the cost per id stays constant. Each
write carries its length and CRC-32 behind the file's :data:`DEDUPE_MAGIC`: a flipped bit
would otherwise decode into a wrong id or sequence and this replica would decide a duplicate
unlike the others; a damaged log raises :class:`DamagedDedupeLog`, and the replica starts
over and catches up (``streamgroup.open_file_replica``). A log written before checksums
(no magic) is read bare and rewritten, checksummed, at the next checkpoint.

**The store's directory** is ``<group dir>/store.<n>/`` (``msgs/`` inside, as any stream
directory), named by each checkpoint: a snapshot installed from the leader goes into a fresh
``store.<n+1>`` (the old one is the live state until the swap), which the checkpoint taken at
once after the swap names; the old one is deleted after that. A crash in between leaves the
older checkpoint, whose index the log may no longer continue from (the install rebased it):
then the replica restarts as one that lost its state (:attr:`Recovered.lost`), and catches
up from its leader.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from headwater.server.store import StoreConfig
from headwater.server.store.file.checkpoint import Positions, cut_back
from headwater.server.store.file.ckptfile import MAX_RECORD, CheckpointFile
from headwater.server.store.file.fileio import FileIO, default_io
from headwater.server.store.file.store import FileStore

if TYPE_CHECKING:
    from .stream import Stream

log = logging.getLogger("headwater.server.jetstream.groupcheckpoint")

CHECKPOINT = "checkpoint"
"""The checkpoint file, in the group's directory."""
STORE_PREFIX = "store."
DEDUPE_RE = re.compile(r"^dedupe\.(\d{8})\.log$")
_ID = struct.Struct("<H")
_SEQ_TS = struct.Struct("<qq")
DEDUPE_MAGIC = b"HWDD1\n"
"""The start of a duplicate log whose writes are checksummed (below); a log without it was
written before checksums, and is read as it is until its next rewrite."""
_CHUNK = struct.Struct("<II")
"""Each write's header: the length of the records that follow and their CRC-32."""
REWRITE_MIN = 4096
"""Ids the duplicate log holds before it is worth rewriting at all."""


class SmallState(msgspec.Struct, frozen=True):
    """A checkpoint's owner bytes: what restores the stream as of ``index`` beside its store."""

    index: int
    epoch: int
    lseq: int
    lmsgid: str
    markers: list[int]
    consumers: list[Any]
    """``GroupConsumers.capture()`` at ``index``."""
    store: str
    """The store's directory in the group's (``store.<n>``)."""
    dedupe_gen: int
    dedupe_len: int
    config: bytes = b""
    """The stream's config at ``index`` (``config_to_json``), as an UpdateConfig left it."""


def store_dir(group_dir: Path, gen: int) -> Path:
    return group_dir / f"{STORE_PREFIX}{gen}"


def _gen_of(name: str) -> int:
    return int(name[len(STORE_PREFIX) :])


class DedupeLog:
    """``dedupe.<gen>.log``: (id, seq, ts) records, appended at checkpoints (blocking calls:
    run them in a thread, one at a time)."""

    def __init__(
        self,
        directory: Path,
        io: FileIO,
        gen: int,
        length: int,
        count: int,
        legacy: bool = False,
    ) -> None:
        self.directory = directory
        self.io = io
        self.gen = gen
        self.length = length
        self.count = count
        """Records in the current file (what decides a rewrite)."""
        self.legacy = legacy
        """The current file was written without checksums: appended to as it is, and
        rewritten (checksummed) at the next checkpoint."""
        self._fd = -1

    def path(self, gen: int) -> str:
        return str(self.directory / f"dedupe.{gen:08d}.log")

    @classmethod
    def recover(
        cls, directory: Path, io: FileIO, gen: int, length: int
    ) -> tuple[DedupeLog, list[tuple[str, int, int]]]:
        """The log a checkpoint names, cut to its length, and its records in order; every other
        generation is deleted (older ones: superseded; newer: not named by any checkpoint)."""
        path = str(directory / f"dedupe.{gen:08d}.log")
        entries: list[tuple[str, int, int]] = []
        legacy = False
        if length:
            data = io.read_file(path)
            if len(data) < length:
                raise OSError(f"{path} holds {len(data)} bytes, the checkpoint says {length}")
            if len(data) > length:
                io.truncate(path, length)
            legacy = not data.startswith(DEDUPE_MAGIC)
            try:
                entries = decode_ids(data[:length])
            except DamagedDedupeLog as exc:
                raise DamagedDedupeLog(f"{path}: {exc}") from None
        _drop_other(directory, io, keep=gen)
        return cls(directory, io, gen, length, len(entries), legacy), entries

    def wants_rewrite(self, window: int) -> bool:
        return self.legacy or self.count > max(REWRITE_MIN, 2 * window)

    def write(self, ids: list[tuple[str, int, int]], whole: bool) -> tuple[int, int]:
        """Append ``ids`` and fsync; ``whole``: they are the whole window, written as the next
        generation instead. Returns (generation, length) for the checkpoint to name."""
        if whole:
            data = DEDUPE_MAGIC + encode_ids(ids)
            self.close()
            gen = self.gen + 1
            self.io.write_atomic(self.path(gen), data)
            self.gen, self.length, self.count, self.legacy = gen, len(data), len(ids), False
            return gen, len(data)
        data = encode_ids(ids, legacy=self.legacy)
        if data and self.length == 0:
            data = DEDUPE_MAGIC + data
        if data:
            if self._fd < 0:
                self._fd = self.io.open_rw(self.path(self.gen))
            self.io.pwrite(self._fd, data, self.length)
            self.io.fsync(self._fd)
            self.length += len(data)
            self.count += len(ids)
        return self.gen, self.length

    def prune(self) -> None:
        """The checkpoint naming the current generation is durable: drop the older files."""
        _drop_other(self.directory, self.io, keep=self.gen)

    def close(self) -> None:
        if self._fd >= 0:
            self.io.close(self._fd)
            self._fd = -1


class DamagedDedupeLog(ValueError):
    """A duplicate log whose bytes are not what was written (a checksum fails, or a write is
    cut short below the length a checkpoint named): the replica's state cannot be trusted."""


def encode_ids(ids: list[tuple[str, int, int]], legacy: bool = False) -> bytes:
    """One write's records: ``(id length, id, seq, ts)`` each, behind a header with their
    length and CRC-32 (``legacy``: bare, for a log written before checksums)."""
    out = bytearray()
    for msg_id, seq, ts in ids:
        raw = msg_id.encode()
        out += _ID.pack(len(raw)) + raw + _SEQ_TS.pack(seq, ts)
    if legacy or not out:
        return bytes(out)
    return _CHUNK.pack(len(out), zlib.crc32(out)) + out


def decode_ids(data: bytes) -> list[tuple[str, int, int]]:
    """The records of a duplicate log's bytes, each write's checksum checked
    (:class:`DamagedDedupeLog` when one fails); a log without :data:`DEDUPE_MAGIC` is read
    bare, as written before checksums."""
    if not data.startswith(DEDUPE_MAGIC):
        return _decode_records(data)
    out: list[tuple[str, int, int]] = []
    off, end = len(DEDUPE_MAGIC), len(data)
    while off < end:
        if end - off < _CHUNK.size:
            raise DamagedDedupeLog(f"a write's header cut at byte {off}")
        length, crc = _CHUNK.unpack_from(data, off)
        off += _CHUNK.size
        payload = data[off : off + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            raise DamagedDedupeLog(f"the write at byte {off - _CHUNK.size} fails its checksum")
        out += _decode_records(payload)
        off += length
    return out


def _decode_records(data: bytes) -> list[tuple[str, int, int]]:
    out = []
    off, end = 0, len(data)
    try:
        while off < end:
            (n,) = _ID.unpack_from(data, off)
            off += _ID.size
            msg_id = data[off : off + n].decode()
            off += n
            seq, ts = _SEQ_TS.unpack_from(data, off)
            off += _SEQ_TS.size
            out.append((msg_id, seq, ts))
    except (struct.error, UnicodeDecodeError) as exc:
        raise DamagedDedupeLog(f"a record at byte {off} does not decode: {exc}") from None
    return out


def _drop_other(directory: Path, io: FileIO, keep: int) -> None:
    gone = False
    for name in os.listdir(directory):
        m = DEDUPE_RE.match(name)
        if m and int(m.group(1)) != keep:
            io.unlink(str(directory / name))
            gone = True
    if gone:
        io.fsync_dir(str(directory))


@dataclass
class Recovered:
    """What :func:`recover` found: the store (opened, as of ``state.index``) and the rest."""

    store: FileStore
    checkpoints: Checkpoints
    state: SmallState | None
    """None: no checkpoint; the store is new and the whole log is to be applied."""
    dedupe: list[tuple[str, int, int]] = field(default_factory=list)
    """The duplicate window as of ``state.index``, in order (record each: see the docstring)."""


def recover(
    directory: Path,
    store_config: Callable[[Path], StoreConfig],
    io: FileIO | None = None,
    fresh: bool = False,
) -> Recovered:
    """Open a file replica's store in its group ``directory`` as of its newest checkpoint
    (``store_config(dir)`` gives the config for a store directory). ``fresh``: ignore any
    checkpoint and start a new store (the caller's log cannot continue from it). Blocking."""
    io = io or default_io()
    directory.mkdir(parents=True, exist_ok=True)
    if fresh and (directory / CHECKPOINT).exists():
        # Its store goes below: a checkpoint left naming it would make the next open fail.
        io.unlink(str(directory / CHECKPOINT))
        io.fsync_dir(str(directory))
    ckpt = CheckpointFile(str(directory / CHECKPOINT), io)
    latest = ckpt.latest()
    stores = sorted(
        (p for p in directory.iterdir() if p.name.startswith(STORE_PREFIX) and p.is_dir()),
        key=lambda p: _gen_of(p.name),
    )
    if latest is None:
        gen = _gen_of(stores[-1].name) + 1 if stores else 1
        for old in stores:
            shutil.rmtree(old)
        dedupe = DedupeLog(directory, io, 0, 0, 0)
        dedupe.prune()  # every generation: none is named
        path = store_dir(directory, gen)
        store = FileStore(store_config(path), io=io, replica=True)
        return Recovered(store, Checkpoints(directory, io, ckpt, dedupe, gen), None)
    positions, extra = latest
    state = msgspec.msgpack.decode(extra, type=SmallState)
    path = directory / state.store
    for old in stores:
        if old.name != state.store:
            shutil.rmtree(old)  # an install not checkpointed, or one superseded
    cut_back(str(path), positions, io)
    try:
        window, ids = DedupeLog.recover(directory, io, state.dedupe_gen, state.dedupe_len)
    except DamagedDedupeLog:
        ckpt.close()
        raise
    store = FileStore(store_config(path), io=io, replica=True)
    checkpoints = Checkpoints(directory, io, ckpt, window, _gen_of(state.store))
    return Recovered(store, checkpoints, state, ids)


@dataclass
class Taken:
    """A checkpoint just made durable."""

    index: int
    positions: Positions


class Checkpoints:
    """A file replica's checkpoints: the file, the duplicate log, the store's directory
    generation. :meth:`take` one at a time (a lock orders them)."""

    def __init__(
        self, directory: Path, io: FileIO, ckpt: CheckpointFile, dedupe: DedupeLog, gen: int
    ) -> None:
        self.directory = directory
        self.io = io
        self.file = ckpt
        self.dedupe = dedupe
        self.gen = gen
        """The generation of the live store's directory (``store.<gen>``)."""
        self.whole = True
        """The next checkpoint writes the whole window (a new store, a swapped window)."""
        self._lock = asyncio.Lock()
        self.taken = 0

    def next_store_dir(self) -> Path:
        """A fresh directory for a store to install a snapshot into."""
        path = store_dir(self.directory, self.gen + 1)
        if path.exists():
            shutil.rmtree(path)
        return path

    def swapped(self, gen_dir: Path) -> None:
        """The stream now runs on the store in ``gen_dir`` with a window given whole."""
        self.gen = _gen_of(gen_dir.name)
        self.whole = True

    async def take(
        self,
        stream: Stream,
        index: int,
        epoch: int,
        consumers: Callable[[], list[Any]],
        config: bytes = b"",
    ) -> Taken:
        """One checkpoint of ``stream`` as of ``index`` (applied, of ``epoch``): see the module
        docstring. Call on the loop: everything up to the store's capture runs in this step,
        with no Apply in between. Raises on any failure (the replica must stop)."""
        async with self._lock:
            store = stream.store
            assert isinstance(store, FileStore)
            recorded = stream.ids_recorded
            stream.ids_recorded = []
            whole = self.whole or self.dedupe.wants_rewrite(len(stream.dedupe))
            ids = stream.dedupe.entries() if whole else (recorded or [])
            self.whole = False
            gen = self.gen
            state = (
                index,
                epoch,
                stream.lseq,
                stream.lmsgid,
                sorted(stream.markers),
                consumers(),
                f"{STORE_PREFIX}{gen}",
                config,
            )
            try:
                positions = await store.checkpoint()  # the capture: in this very step
                dgen, dlen = await asyncio.to_thread(self.dedupe.write, ids, whole)
            except BaseException:
                self.whole = True  # what was taken is lost to the log: rewrite next time
                raise
            index, epoch, lseq, lmsgid, markers, rows, name, cfg = state
            extra = msgspec.msgpack.encode(
                SmallState(index, epoch, lseq, lmsgid, markers, rows, name, dgen, dlen, cfg)
            )
            if len(extra) > MAX_RECORD - 1024:
                # A record past the file's limit would read back as damage: the older one
                # would count while the log was compacted past it. Stop instead.
                raise OSError(f"checkpoint state of {len(extra)} bytes: too large")
            await asyncio.to_thread(self.file.append, positions, extra)
            store.checkpoint_durable(positions)
            if whole:
                await asyncio.to_thread(self.dedupe.prune)
            self.taken += 1
            return Taken(index, positions)

    async def drop_stores_but_current(self) -> None:
        """Delete store directories other than the live one (after a swap's checkpoint)."""

        def drop() -> None:
            for p in self.directory.iterdir():
                if p.name.startswith(STORE_PREFIX) and p.name != f"{STORE_PREFIX}{self.gen}":
                    shutil.rmtree(p, ignore_errors=True)

        await asyncio.to_thread(drop)

    def close(self) -> None:
        self.file.close()
        self.dedupe.close()
