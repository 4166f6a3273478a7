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
only when it holds more than twice the live window, so the cost per id stays constant.

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

    def __init__(self, directory: Path, io: FileIO, gen: int, length: int, count: int) -> None:
        self.directory = directory
        self.io = io
        self.gen = gen
        self.length = length
        self.count = count
        """Records in the current file (what decides a rewrite)."""
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
        if length:
            data = io.read_file(path)
            if len(data) < length:
                raise OSError(f"{path} holds {len(data)} bytes, the checkpoint says {length}")
            if len(data) > length:
                io.truncate(path, length)
            entries = decode_ids(data[:length])
        _drop_other(directory, io, keep=gen)
        return cls(directory, io, gen, length, len(entries)), entries

    def wants_rewrite(self, window: int) -> bool:
        return self.count > max(REWRITE_MIN, 2 * window)

    def write(self, ids: list[tuple[str, int, int]], whole: bool) -> tuple[int, int]:
        """Append ``ids`` and fsync; ``whole``: they are the whole window, written as the next
        generation instead. Returns (generation, length) for the checkpoint to name."""
        data = encode_ids(ids)
        if whole:
            self.close()
            gen = self.gen + 1
            self.io.write_atomic(self.path(gen), data)
            self.gen, self.length, self.count = gen, len(data), len(ids)
            return gen, len(data)
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


def encode_ids(ids: list[tuple[str, int, int]]) -> bytes:
    out = bytearray()
    for msg_id, seq, ts in ids:
        raw = msg_id.encode()
        out += _ID.pack(len(raw)) + raw + _SEQ_TS.pack(seq, ts)
    return bytes(out)


def decode_ids(data: bytes) -> list[tuple[str, int, int]]:
    out = []
    off, end = 0, len(data)
    while off < end:
        (n,) = _ID.unpack_from(data, off)
        off += _ID.size
        msg_id = data[off : off + n].decode()
        off += n
        seq, ts = _SEQ_TS.unpack_from(data, off)
        off += _SEQ_TS.size
        out.append((msg_id, seq, ts))
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
    window, ids = DedupeLog.recover(directory, io, state.dedupe_gen, state.dedupe_len)
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
