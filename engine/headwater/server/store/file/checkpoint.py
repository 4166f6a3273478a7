"""Checkpoints of a replica's file store: its ``Positions`` and the cut back to them.

A replicated stream applies committed log entries to its store without an fsync per entry, so
after a crash the store may hold any subset of the writes made since its last durable point
(blocks, the delete log and in-place erasures are separate writes the page cache flushes in any
order). ``FileStore.checkpoint()`` (replica mode) reports where everything ends and makes it
durable; the owner writes the positions durably (``ckptfile.CheckpointFile``) and calls
``checkpoint_durable``. On restart ``cut_back`` removes everything past the newest durable
positions, before the store is opened; the owner's log replays the rest. Every write made after
a capture lies past its positions (appends, delete-log entries), or is *held work* that only
runs once a durable checkpoint covers its cause (see ``held``), so the cut leaves exactly the
state at the checkpoint. docs/REPLICATION.md ("Restarting a replica on a file store") has the
argument; docs/FILESTORE.md the rules.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from headwater.server.store.base import StoreError
from headwater.server.store.file.blocks import BLOCK_HEADER_SIZE, RAW_HEADER, block_name
from headwater.server.store.file.dellog import LOG_HEADER, LOG_MAGIC, LOG_NAME, find_mark
from headwater.server.store.file.fileio import FileIO, default_io
from headwater.server.store.file.index import SNAP_NAME, decode_snapshot
from headwater.server.store.file.recovery import list_blocks

_VERSION = 1
_POSITIONS = struct.Struct("<BQQQQQQ")


@dataclass(frozen=True)
class Positions:
    """Where a replica's store ended when a checkpoint was captured."""

    last_seq: int
    """The store's last sequence: every record after it is cut."""
    log_generation: int
    """The delete log's generation (it changes when the log is rewritten)."""
    log_length: int
    """Bytes of the delete log (header included), its open DEL run closed."""
    block: int
    """Index of the active block: later blocks are deleted by the cut."""
    offset: int
    """Bytes of the active block on disk: the cut truncates it there."""
    mark: int = 0
    """How much held work had been queued (this store instance's count): the held work that
    ``checkpoint_durable`` may release. Meaningless to another instance of the store."""

    def to_bytes(self) -> bytes:
        return _POSITIONS.pack(
            _VERSION,
            self.last_seq,
            self.log_generation,
            self.log_length,
            self.block,
            self.offset,
            self.mark,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Positions:
        if len(data) != _POSITIONS.size or data[0] != _VERSION:
            raise ValueError("not a checkpoint's positions")
        _, *fields = _POSITIONS.unpack(data)
        return cls(*fields)

    def same_place(self, other: Positions) -> bool:
        """The same store state (``mark`` aside, which only counts held work)."""
        return self.to_bytes()[:-8] == other.to_bytes()[:-8]


def cut_back(directory: str, positions: Positions, io: FileIO | None = None) -> None:
    """Bring the file store in ``directory`` (a stream's directory, as in ``StoreConfig``)
    back to ``positions``, before it is opened. Blocking: run it in a thread.

    Records after ``last_seq`` go (the active block of the capture is truncated at its
    offset, later blocks are deleted), the delete log is truncated to its length, and an
    ``index.snap`` that does not name exactly these positions is deleted. Raises
    ``StoreError`` when the store does not hold what the positions say was durable (a block
    or the delete log shorter than recorded, or rewritten past them): opening it would not
    give the checkpoint's state. Idempotent: a crash during the cut is healed by the next.
    """
    io = io or default_io()
    msgs = os.path.join(os.fspath(directory), "msgs")
    if not os.path.isdir(msgs):
        raise StoreError(f"no file store in {directory}")
    touched = False
    for index in list_blocks(msgs):
        path = os.path.join(msgs, block_name(index))
        if index > positions.block:
            io.unlink(path)  # made after the capture: every record in it is past last_seq
            touched = True
        elif index == positions.block:
            touched |= _cut_block(io, path, positions.offset)
    if positions.offset > 0 and not os.path.exists(os.path.join(msgs, block_name(positions.block))):
        raise StoreError(f"block {positions.block} of the checkpoint is missing")
    _cut_log(io, os.path.join(msgs, LOG_NAME), positions)
    snap = os.path.join(msgs, SNAP_NAME)
    if os.path.exists(snap):
        decoded = decode_snapshot(io.read_file(snap))
        named = decoded[0].checkpoint if decoded is not None else None
        if named is None or not Positions.from_bytes(bytes.fromhex(named)).same_place(positions):
            io.unlink(snap)  # newer than the checkpoint, or from an R1 close
            touched = True
    if touched:
        io.fsync_dir(msgs)


def _cut_block(io: FileIO, path: str, offset: int) -> bool:
    size = io.size(path)
    if size < offset:
        raise StoreError(f"{path} holds {size} bytes, the checkpoint says {offset} were durable")
    if size == offset:
        return False
    head = io.read_file(path)[:BLOCK_HEADER_SIZE]
    if offset >= BLOCK_HEADER_SIZE and head != RAW_HEADER:
        # Packing waits for a durable checkpoint past the block's last record: never here.
        raise StoreError(f"{path} was rewritten after the checkpoint; cannot cut it")
    io.truncate(path, offset)
    fd = io.open_rw(path)
    try:
        io.fsync(fd)
    finally:
        io.close(fd)
    return True


def _cut_log(io: FileIO, path: str, p: Positions) -> None:
    content = io.read_file(path) if os.path.exists(path) else b""
    if len(content) < LOG_HEADER.size or content[:8] != LOG_MAGIC:
        raise StoreError("the delete log is missing or damaged; cannot cut back")
    _, generation = LOG_HEADER.unpack_from(content, 0)
    if generation == p.log_generation:
        end = p.log_length
        if len(content) < end:
            raise StoreError(
                f"the delete log holds {len(content)} bytes, the checkpoint says {end}"
            )
    else:
        # Rewritten at a clean close: valid only if the rewrite names these very positions.
        end = find_mark(content, p.last_seq, p.log_generation, p.log_length)
        if end is None:
            raise StoreError(
                f"the delete log was rewritten (generation {generation}) after the "
                f"checkpoint (generation {p.log_generation}); cannot cut back"
            )
    if len(content) > end:
        io.truncate(path, end)
        fd = io.open_rw(path)
        try:
            io.fsync(fd)
        finally:
            io.close(fd)
