"""A replicated stream's snapshot: produced by a replica's owner when its runner says
SendSnapshot, installed by the owner of a replica that is behind (docs/REPLICATION.md,
"Catching up").

A snapshot is an archive in the backup format (docs/ARCHIVE.md): the STREAM record, then every
message, then END. What a replica needs beyond a backup, to decide every later entry exactly
as the others do, rides in the STREAM record's ``state`` as one more JSON field,
``"replica"`` (readers of the format ignore fields they do not know, so any archive reader
still reads the file; a backup without it is refused here)::

    {"index": 812, "epoch": 3,            the log entry the state is as of, and its epoch
     "lseq": 40, "lmsgid": "m7",           what Nats-Expected-Last-Sequence / -Msg-Id check
     "dedupe": [["m1", 2, <ts>], ...],     the duplicate window: id, sequence, time (ns), in
                                           arrival order (ids of messages deleted since stay)
     "markers": [12, 30],                  the subject delete markers the stream knows
     "consumers": [[name, config, created, state], ...]}   its consumers (groupconsumers)

The store's counters (``first_seq``, ``last_seq``, ``last_ts``, ``num_deleted``) are the
record's ``state`` as in any archive; deleted sequences are the gaps between message records
and after the last one. Per-message TTLs are derived again from each message's ``Nats-TTL``
header by the rule the publish applied (:func:`ttl_ns`).

**Producing** (:func:`produce`). The runner asks right after it applied ``index``, and the
producer takes, in that call and without yielding, everything that is not a message: the
counters, the window, ``lseq``/``lmsgid`` and the markers. The messages are read later, a
slice at a time, while the replica goes on applying entries: those stored past the captured
``last_seq`` are cut. A message at or below it that is removed *before the producer read it*
would make the snapshot a state that never existed (the follower would then decide the
entries after ``index`` on a stream missing that message: a per-subject limit, a
Nats-Expected-Last-Subject-Sequence or a byte limit may then decide differently, so "a
removal of an absent message is a no-op" is not enough). So the producer watches the store's
``before_remove`` hook and keeps a copy of each such message as it goes (a stream at its
``max_msgs`` removes its oldest, unread, message at every publish: without the copies no
snapshot of a busy stream would ever finish); the copies are merged into the reads in
sequence order. They cost memory up to the snapshot's own messages at worst, and are freed as
they are sent. Bulk drops (a purge of everything or below a sequence) do not go through the
hook: the producer notices them (the live messages left up to the cut, plus its copies, are
counted after every read) and fails with :class:`SnapshotOverrun`; the transfer is abandoned
and the core asks again after its ``snapshot_interval``. Removals of messages already read do
no harm: the follower applies them again after installing. Reads run ahead of the consumer by
at most one frame and one batch of reads.

**Installing** (:func:`install`). A snapshot file (the transfer's verified sink) becomes a new
store built beside the replica's (memory, or file in a directory the owner gives), read a
batch at a time in a worker thread (constant memory) and stored on the loop in
:class:`PassBudget` slices. The result is checked against the record's counters; any fault (a
damaged or cut file, an archive without the replica state, another stream's or another
index's snapshot) raises :class:`SnapshotError` and deletes the new store: the replica is
untouched. :meth:`Installed.swap_into` then replaces the replica's state in one synchronous
step (:meth:`Stream.replace_state`); the owner closes (or deletes) the old store it returns
and tells the core (``install_snapshot``) in the same step.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from headwater.archive import ArchivedMessage, ArchivedStream, ArchiveError, ArchiveWriter
from headwater.archive.format import Compression
from headwater.archive.reader import ArchiveReader
from headwater.archive.writer import DEFAULT_FRAME_SIZE
from headwater.server.budget import PassBudget
from headwater.server.protocol import headers
from headwater.server.store import StoreConfig, StoreError, StreamStore, SyncPolicy, open_store
from headwater.server.store.base import ByteBudget, StoredMsg
from headwater.server.store.file.store import FileStore

from . import publish
from .restore import next_batch
from .snapshot import archived_stream
from .stream import store_limits
from .streamconfig import config_from_json, config_to_json

if TYPE_CHECKING:
    from .stream import Stream
    from .streamconfig import StreamConfig

__all__ = [
    "Installed",
    "ReplicaState",
    "SnapshotError",
    "SnapshotOverrun",
    "SnapshotProducer",
    "install",
    "produce",
    "ttl_ns",
]

REPLICA_KEY = "replica"
"""The field of the STREAM record's ``state`` that holds :class:`ReplicaState`."""
CHUNK_SIZE = 256 * 1024
"""Bytes the producer hands out at a time (the transfer cuts them to its own chunks)."""
READ_BATCH = 2048
READ_BYTES = 256 * 1024
"""Messages (and their bytes) the producer reads from the store in one call."""


class SnapshotError(Exception):
    """A snapshot that cannot be installed (``str()`` says why); the target is untouched."""


class SnapshotOverrun(SnapshotError):
    """A message the snapshot still had to send was removed meanwhile: the snapshot would not
    be the state as of its index. Produce a new one (the core asks again)."""


class ReplicaState(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """What an exact replica needs beyond the archive's messages and counters."""

    index: int
    epoch: int
    lseq: int
    lmsgid: str
    dedupe: list[tuple[str, int, int]]
    """(message id, sequence, time ns) in arrival order: the duplicate window."""
    markers: list[int]
    consumers: list[Any] = msgspec.field(default_factory=list)
    """The stream's consumers as its log has them (:meth:`GroupConsumers.capture`)."""


def ttl_ns(hdr: bytes, cfg: StreamConfig) -> int:
    """The TTL the store keeps for a message with headers ``hdr``: what :func:`publish.admit`
    gave it (``Nats-TTL``, raised to the subject delete marker TTL by nats-server's rule);
    -1 for "never", 0 for none."""
    if not hdr or not cfg.allow_msg_ttl:
        return 0
    seconds, ok = publish.parse_ttl(headers.get(hdr, publish.MSG_TTL))
    if not ok or seconds == 0:
        return 0
    if seconds < 0:
        return -1
    marker = cfg.subject_delete_marker_ttl // publish.SECOND
    if marker > 0 and cfg.max_msgs_per_subject != 1:
        seconds = max(seconds, marker)
    return seconds * publish.SECOND


# --------------------------------------------------------------------------- producing


class SnapshotProducer:
    """The state of ``stream`` as of entry ``index`` (of ``epoch``), captured at construction;
    :meth:`chunks` streams it as an archive. Construct it right when the runner says
    SendSnapshot (every entry up to ``index`` applied, none after)."""

    def __init__(
        self,
        stream: Stream,
        index: int,
        epoch: int,
        *,
        chunk_size: int = CHUNK_SIZE,
        frame_size: int = DEFAULT_FRAME_SIZE,
        compression: Compression = Compression.ZSTD,
        read_batch: int = READ_BATCH,
        consumers: list[Any] | None = None,
        config: StreamConfig | None = None,
    ) -> None:
        """``config``: the config the snapshot carries (the stream's by default; a plain
        stream's seed carries the group's new one, :mod:`.groupseed`)."""
        self.stream = stream
        self.store = stream.store
        self.index = index
        self.epoch = epoch
        self.chunk_size = chunk_size
        self.frame_size = frame_size
        self.compression = compression
        self.read_batch = read_batch
        # Everything but the messages, now: later applies change all of it.
        record = archived_stream(stream)
        state = ReplicaState(
            index=index,
            epoch=epoch,
            lseq=stream.lseq,
            lmsgid=stream.lmsgid,
            dedupe=stream.dedupe.entries(),
            markers=sorted(stream.markers),
            consumers=consumers or [],
        )
        self.header = ArchivedStream(
            name=record.name,
            created_ns=record.created_ns,
            config=record.config
            if config is None
            else config_to_json(config, dynamic_metadata=False),
            state={**record.state, REPLICA_KEY: state},
        )
        self.cut = int(record.state["last_seq"])
        self.messages = int(record.state["messages"])
        self.sent_messages = 0
        self.read_up_to = 0
        """Messages up to this sequence are read: removing them now does no harm."""
        self.bytes = 0
        self.kept: dict[int, StoredMsg] = {}
        """Copies of unread messages up to the cut that were removed meanwhile."""
        self._kept_seqs: list[int] = []  # a heap of kept's keys
        self.kept_total = 0
        """Messages kept this way in all (tests and logs)."""
        self._watching = _watch(self.store, self)

    def close(self) -> None:
        """Stop watching the store's removals (done when :meth:`chunks` ends; call it when
        the chunks are never read)."""
        if self._watching:
            self._watching = False
            _unwatch(self.store, self)
        self.kept.clear()
        self._kept_seqs.clear()

    def _keep(self, seq: int) -> None:
        """The store is about to remove ``seq``: keep a copy if it is still to be sent."""
        if self.read_up_to < seq <= self.cut and seq not in self.kept:
            msg = self.store.load_msg(seq)
            if msg is not None:
                self.kept[seq] = msg
                heapq.heappush(self._kept_seqs, seq)
                self.kept_total += 1

    def _left_up_to_cut(self, start: int) -> int:
        """Messages still to send in ``[start, cut]`` right now: live ones and copies."""
        store = self.store
        live = store.num_pending(">", start) - store.num_pending(">", self.cut + 1)
        return live + len(self.kept)

    def _read(self, seq: int) -> list[StoredMsg]:
        """The messages to send from ``seq`` on, in order, one read's worth: the store's up
        to the cut and the copies up to the last one the store gave."""
        batch = self.store.load_next_batch(">", seq, self.read_batch, READ_BYTES)
        msgs = [m for m in batch if m.seq <= self.cut]
        # A short read may have been cut by count or bytes: copies past its last message
        # wait for the next one (an empty read reaches the cut).
        hi = min(batch[-1].seq, self.cut) if batch else self.cut
        if self._kept_seqs and self._kept_seqs[0] <= hi:
            while self._kept_seqs and self._kept_seqs[0] <= hi:
                msgs.append(self.kept.pop(heapq.heappop(self._kept_seqs)))
            msgs.sort(key=_seq_of)
        return msgs

    async def chunks(self) -> AsyncIterator[bytes]:
        """The archive, ``chunk_size`` bytes at a time (the last one shorter). Raises
        :class:`SnapshotOverrun` (see the module docstring) or the store's error."""
        try:
            async for piece in self._chunks():
                yield piece
        finally:
            self.close()

    async def _chunks(self) -> AsyncIterator[bytes]:
        buf = bytearray()
        writer = ArchiveWriter(buf.extend, self.compression, self.frame_size)
        # The dedupe window may hold many ids: its JSON is built off the loop.
        await asyncio.to_thread(writer.write_stream, self.header)
        budget = PassBudget()
        seq = 1
        done = self.messages == 0
        if done:
            writer.close()
        while True:
            while len(buf) < self.chunk_size and not done:
                if self.store is not self.stream.store:
                    raise SnapshotError("the stream's store was replaced during the snapshot")
                for msg in self._read(seq):
                    writer.write_message(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts)
                    self.sent_messages += 1
                    seq = msg.seq + 1
                self.read_up_to = seq - 1
                # Counted in the same pass as the read: nothing ran in between.
                left = self._left_up_to_cut(seq)
                if left != self.messages - self.sent_messages:
                    raise SnapshotOverrun(
                        f"stream {self.stream.name!r}: a message at or below {self.cut} was "
                        f"removed before the snapshot at index {self.index} sent it"
                    )
                if left == 0:
                    done = True
                    writer.close()
                await budget.tick()
            if done and not buf:
                return
            piece = bytes(buf[: self.chunk_size])
            del buf[: self.chunk_size]
            self.bytes += len(piece)
            yield piece


def _seq_of(msg: StoredMsg) -> int:
    return msg.seq


class _Keepers:
    """A store's ``before_remove`` while snapshot producers read it: tells each one."""

    def __init__(self) -> None:
        self.producers: set[SnapshotProducer] = set()

    def __call__(self, seq: int) -> None:
        for producer in list(self.producers):
            producer._keep(seq)


def _watch(store: StreamStore, producer: SnapshotProducer) -> bool:
    """Have ``producer`` told of ``store``'s removals; False when the store has no such hook
    (or another user holds it): overruns are then only detected."""
    hook = getattr(store, "before_remove", _NO_HOOK)
    if hook is None:
        hook = _Keepers()
        store.before_remove = hook  # type: ignore[attr-defined]
    if not isinstance(hook, _Keepers):
        return False
    hook.producers.add(producer)
    return True


def _unwatch(store: StreamStore, producer: SnapshotProducer) -> None:
    hook = getattr(store, "before_remove", None)
    if isinstance(hook, _Keepers):
        hook.producers.discard(producer)
        if not hook.producers:
            store.before_remove = None  # type: ignore[attr-defined]


_NO_HOOK = object()


def produce(stream: Stream, index: int, epoch: int, **options: Any) -> AsyncIterator[bytes]:
    """``stream``'s snapshot as of entry ``index`` (of ``epoch``) as an async iterator of
    chunks, its state captured in this call (see :class:`SnapshotProducer` for ``options``)."""
    return SnapshotProducer(stream, index, epoch, **options).chunks()


# --------------------------------------------------------------------------- installing


class Installed:
    """A snapshot read into a new store, not yet the replica's: :meth:`swap_into` makes it so,
    :meth:`discard` drops it (the owner no longer wants it)."""

    def __init__(
        self, store: StreamStore, header: ArchivedStream, state: ReplicaState, config: StreamConfig
    ) -> None:
        self.store = store
        self.header = header
        self.state = state
        self.config = config
        """The stream's config as of the snapshot's index."""

    @property
    def index(self) -> int:
        return self.state.index

    @property
    def epoch(self) -> int:
        return self.state.epoch

    def swap_into(self, stream: Stream) -> StreamStore:
        """Make this the replica's state, in one synchronous step: its store, the duplicate
        window, ``lseq``/``lmsgid`` and the markers (:meth:`Stream.replace_state`), its
        creation time, and its config when the snapshot's differs
        (:meth:`Stream.reconfigure`). Returns the old store, which the owner closes
        (``aclose``) or deletes (``adelete``) afterwards."""
        st = self.state
        old = stream.replace_state(self.store, st.dedupe, st.lseq, st.lmsgid, st.markers)
        if self.config != stream.config:
            stream.reconfigure(self.config)
        # The stream's creation time is its first server's, whichever replica shows it.
        stream.created_ns = self.header.created_ns
        return old

    async def discard(self) -> None:
        await self.store.adelete()


async def install(
    stream: Stream,
    path: str | Path,
    *,
    index: int | None = None,
    epoch: int | None = None,
    directory: Path | None = None,
    sync: SyncPolicy | None = None,
    budget: ByteBudget | None = None,
    replica: bool = False,
) -> Installed:
    """Read the snapshot file at ``path`` into a new store for ``stream`` (its config says
    memory or file; a file store is created in ``directory``, which must not hold one), made
    durable before this returns. ``index``/``epoch``: the snapshot the transfer announced
    (checked when given). ``budget``: the account's allowance (the stream's by default).
    ``replica``: a file store is opened in replica mode (a file replica's: its owner takes a
    checkpoint of it once swapped in, :mod:`.groupcheckpoint`).

    The stream's config is the snapshot's (a replica that missed a STREAM.UPDATE takes it
    with the state: :meth:`Installed.swap_into`).

    Raises :class:`SnapshotError` on any fault, after deleting the new store."""
    cfg = await asyncio.to_thread(_snapshot_config, Path(path), stream.config)
    if cfg.storage == "file" and directory is None:
        raise ValueError("a file stream's snapshot needs a directory for its new store")
    config = StoreConfig(
        name=cfg.name,
        storage=cfg.storage,
        directory=directory if cfg.storage == "file" else None,
        limits=store_limits(cfg),
        sync=sync or SyncPolicy(),
        compression=cfg.compression,
        budget=budget if budget is not None else stream.resources.budget(cfg.storage),
    )
    # open_store knows nothing of replica mode: a replica's file store is built here.
    file_replica = replica and cfg.storage == "file"
    store: StreamStore = FileStore(config, replica=True) if file_replica else open_store(config)
    try:
        header, state = await _load(stream, store, Path(path), cfg)
        if index is not None and (state.index, state.epoch) != (index, epoch):
            raise SnapshotError(
                f"snapshot is of entry {state.index} (epoch {state.epoch}), "
                f"not {index} (epoch {epoch})"
            )
        await store.durable()
    except asyncio.CancelledError:
        store.delete()
        raise
    except Exception as exc:
        await store.adelete()
        if isinstance(exc, StoreError):
            raise SnapshotError(f"stream {cfg.name!r}: store failed: {exc}") from None
        raise
    return Installed(store, header, state, cfg)


def _snapshot_config(path: Path, current: StreamConfig) -> StreamConfig:
    """The config in the snapshot's STREAM record (its first); ``current`` when the file
    cannot say (:func:`_load` then refuses it)."""
    try:
        with open(path, "rb") as fh:
            for record in ArchiveReader(fh):
                if type(record) is ArchivedStream and record.name == current.name:
                    return config_from_json(record.config)
                break
    except (ArchiveError, OSError, ValueError, TypeError, KeyError):
        return current
    return current


async def _load(
    stream: Stream, store: StreamStore, path: Path, cfg: StreamConfig
) -> tuple[ArchivedStream, ReplicaState]:
    header: ArchivedStream | None = None
    state: ReplicaState | None = None
    budget = PassBudget()
    what = f"snapshot of stream {cfg.name!r}"
    try:
        with open(path, "rb") as fh:
            reader = ArchiveReader(fh)
            records = iter(reader)
            while batch := await asyncio.to_thread(next_batch, records):
                # Messages without a TTL are stored a run at a time (one store call per
                # batch read: about half the cost of one call each); one with a TTL alone.
                run: list[StoredMsg] = []
                for record in batch:
                    if type(record) is ArchivedMessage:
                        ttl = ttl_ns(record.hdr, cfg)
                        if not ttl:
                            run.append(
                                StoredMsg(
                                    record.subject, record.seq, record.hdr, record.data, record.ts
                                )
                            )
                            continue
                        _store_run(store, run)
                        store.store_raw_msg(
                            record.subject, record.hdr, record.data, record.seq, record.ts, ttl
                        )
                        await budget.tick()
                    elif type(record) is ArchivedStream:
                        if record.name != cfg.name:
                            raise SnapshotError(f"{what}: the file holds stream {record.name!r}")
                        header = record
                        state = _replica_state(record, what)
                _store_run(store, run)
                await budget.tick()
    except ArchiveError as exc:
        raise SnapshotError(f"{what}: invalid archive: {exc}") from None
    except OSError as exc:
        raise SnapshotError(f"{what}: {exc}") from None
    assert header is not None and state is not None  # the reader refuses a file without it
    st = header.state
    last = int(st.get("last_seq", 0))
    current = store.state().last_seq
    if last > current:
        # Sequences deleted after the last message, or a purged stream's floor.
        store.skip_msgs(current + 1, last - current, int(st.get("last_ts", 0)))
    got = store.state()
    found = {
        "messages": got.msgs,
        "first_seq": got.first_seq,
        "last_seq": got.last_seq,
        "last_ts": got.last_ts,
        "num_deleted": got.num_deleted,
    }
    expected = {k: int(st.get(k, -1)) for k in found}
    if found != expected:
        raise SnapshotError(f"{what}: the messages make {found}, the record says {expected}")
    return header, state


def _store_run(store: StreamStore, run: list[StoredMsg]) -> None:
    """Store the messages gathered in ``run`` (in order, none with a TTL) and empty it."""
    if run:
        store.store_raw_batch(run)
        run.clear()


def _replica_state(record: ArchivedStream, what: str) -> ReplicaState:
    raw = record.state.get(REPLICA_KEY)
    if raw is None:
        raise SnapshotError(f"{what}: not a replica's snapshot (no replica state)")
    try:
        return msgspec.convert(raw, ReplicaState)
    except msgspec.ValidationError as exc:
        raise SnapshotError(f"{what}: invalid replica state: {exc}") from None
