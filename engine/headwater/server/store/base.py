"""The message-store interface shared by the memory and file stores, and its value types.

A stream (``headwater.server.streams``) talks to its messages only through ``StreamStore``.
Both implementations keep the same in-memory index (``seqindex.SeqIndex``) and the same policy
code (``engine.IndexedStore``); they differ only in where payloads live. Semantics follow
nats-server's ``memstore.go``/``filestore.go`` (limits, purge, compact, byte accounting) so
clients' tests that assert stream state pass unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import msgspec

# --------------------------------------------------------------------------- values


class StoredMsg(msgspec.Struct, frozen=True, gc=False):
    """One stored message. A ``msgspec.Struct`` (not a dataclass) because the read path creates
    one per delivered message and Structs are about 3x cheaper to build."""

    subject: str
    seq: int
    hdr: bytes
    data: bytes
    ts: int
    """Store time, nanoseconds since the epoch."""


class StreamState(msgspec.Struct, gc=False):
    """What ``STREAM.INFO`` reports under ``state``."""

    msgs: int
    bytes: int
    first_seq: int
    first_ts: int
    """Timestamp (ns) of the first stored message; 0 when the stream is empty."""
    last_seq: int
    last_ts: int
    num_deleted: int
    """Interior gaps between ``first_seq`` and ``last_seq``."""
    num_subjects: int
    deleted: list[int] | None = None
    """The gaps themselves; only filled when ``state(deleted_details=True)``."""


Discard = Literal["old", "new"]


@dataclass(frozen=True)
class StoreLimits:
    """Retention limits the store itself enforces, as nats-server's stores do.

    -1 (or 0 for ``max_age``) means unlimited. The stream layer maps the API's "0 means
    unlimited" to -1 before building this.
    """

    max_msgs: int = -1
    """Messages kept; discard old drops the oldest, discard new refuses the append."""
    max_bytes: int = -1
    """Bytes kept, counted with the store's reference record size (see ``file_msg_size``)."""
    max_age: int = 0
    """Nanoseconds a message lives; enforced by ``expire()``, not on append."""
    max_msgs_per_subject: int = -1
    """Messages kept per subject; the oldest of that subject goes first (also for discard new,
    unless ``discard_new_per_subject``)."""
    max_msg_size: int = -1
    """Largest ``len(hdr) + len(data)`` accepted."""
    discard: Discard = "old"
    discard_new_per_subject: bool = False
    """With discard new, refuse an append whose subject is at ``max_msgs_per_subject``."""


@dataclass(frozen=True)
class SyncPolicy:
    """When appended messages reach the disk (file store only; the memory store ignores it).

    ``ack`` (default): ``durable()`` waits for an fsync that covers every message appended
    before the call; concurrent callers share one fsync (group commit), so a publish ack means
    the message survives a power failure. ``interval``: ``durable()`` returns at once and a
    timer fsyncs every ``interval`` seconds (nats-server's default model, 120 s there).
    ``always``: every ``store_msg`` fsyncs before returning (slowest; no batching).
    """

    mode: Literal["ack", "interval", "always"] = "ack"
    interval: float = 0.0
    """Seconds between fsyncs in ``interval`` mode."""

    def __post_init__(self) -> None:
        if self.mode not in ("ack", "interval", "always"):
            raise ValueError(f"unknown sync mode {self.mode!r}")
        if self.mode == "interval" and self.interval <= 0:
            raise ValueError("interval sync needs interval > 0 seconds")


class ByteBudget:
    """A byte allowance shared by several stores (an account's or the server's max_file_store).

    Stores add their accounted bytes on append and give them back on removal; an append that
    would go past ``limit`` fails with ``StorageFull``. Single-threaded (event loop) use only.
    """

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        """Bytes allowed; -1 means unlimited (only usage is tracked)."""
        self.used = 0

    def fits(self, n: int) -> bool:
        return self.limit < 0 or self.used + n <= self.limit


Storage = Literal["file", "memory"]
Compression = Literal["none", "s2"]

DEFAULT_BLOCK_SIZE = 8 * 1024 * 1024
"""8 MiB blocks: big enough that per-block bookkeeping is negligible, small enough that
compacting or compressing one block takes milliseconds."""


@dataclass(frozen=True)
class StoreConfig:
    """Everything ``open_store`` needs to create or reopen one stream's store."""

    name: str
    storage: Storage = "file"
    directory: Path | None = None
    """The stream's directory; the file store owns its ``msgs/`` subdirectory only, so the
    stream layer may keep its own metadata next to it."""
    limits: StoreLimits = field(default_factory=StoreLimits)
    first_seq: int = 1
    """Sequence of the first message of a new store (ignored when reopening)."""
    sync: SyncPolicy = field(default_factory=SyncPolicy)
    compression: Compression = "none"
    """``s2`` compresses sealed blocks (the active block stays raw for appends)."""
    block_size: int = DEFAULT_BLOCK_SIZE
    encryption_key: bytes | None = None
    """32 bytes enable AES-256-GCM at rest (per record, and per block once compressed)."""
    budget: ByteBudget | None = field(default=None, compare=False)
    """Shared account/server allowance; ``None`` means no budget beyond ``limits``."""


# --------------------------------------------------------------------------- byte accounting


def subject_len(subject: str) -> int:
    """Length in bytes (UTF-8), as Go's ``len(subj)`` counts it."""
    return len(subject) if subject.isascii() else len(subject.encode())


def file_msg_size(subject: str, hdr: bytes, data: bytes) -> int:
    """Bytes a message counts in a file stream: nats-server's ``fileStoreMsgSize`` (its record
    length: 22-byte header, subject, optional 4-byte header length + headers, payload, 8-byte
    hash). Our on-disk record differs; the reported number must not."""
    if hdr:
        return 22 + subject_len(subject) + 4 + len(hdr) + len(data) + 8
    return 22 + subject_len(subject) + len(data) + 8


def memory_msg_size(subject: str, hdr: bytes, data: bytes) -> int:
    """Bytes a message counts in a memory stream: nats-server's ``memStoreMsgSize``."""
    return subject_len(subject) + len(hdr) + len(data) + 16


# --------------------------------------------------------------------------- errors


class StoreError(Exception):
    """A store operation failed. ``kind`` names the reference error so the stream layer can map
    it to the API error code; ``str(err)`` is the reference's description."""

    kind = "store_failed"
    description = "store failed"

    def __init__(self, description: str | None = None) -> None:
        super().__init__(description or self.description)


class LimitExceeded(StoreError):
    """The stream's own limits refuse the message: decided by the stream's configuration and
    contents alone, so every replica of a replicated stream refuses it alike (unlike a full
    disk or a failed write, which are one server's)."""


class MaxMsgsExceeded(LimitExceeded):
    kind = "max_msgs"
    description = "maximum messages exceeded"


class MaxBytesExceeded(LimitExceeded):
    kind = "max_bytes"
    description = "maximum bytes exceeded"


class MaxMsgsPerSubjectExceeded(LimitExceeded):
    kind = "max_msgs_per_subject"
    description = "maximum messages per subject exceeded"


class MsgTooLarge(LimitExceeded):
    kind = "msg_too_large"
    description = "message size exceeds maximum allowed"


class StorageFull(StoreError):
    kind = "storage_full"
    description = "insufficient storage resources available"


class StoreFailed(StoreError):
    """A write or fsync failed: the store refuses writes until it is reopened from disk
    (see ``StreamStore.failed``). ``str(err)`` says what failed."""

    kind = "store_failed"
    description = "stream store failed"


class StoreClosed(StoreError):
    kind = "closed"
    description = "store is closed"


# --------------------------------------------------------------------------- recovery report


@dataclass
class RecoveryReport:
    """What opening a file store found wrong and repaired. Empty means a clean open."""

    records_dropped: int = 0
    """Records lost: a torn tail counts its partial record, a corrupt record counts 1."""
    bytes_truncated: int = 0
    """Bytes cut off the end of blocks (torn or corrupt tails)."""
    blocks_affected: list[int] = field(default_factory=list)
    corrupt_seqs: list[int] = field(default_factory=list)
    """Sequences whose records failed their checksum (at open or later, on read)."""
    used_index: bool = False
    """True when the index snapshot was valid and no full scan was needed."""

    @property
    def clean(self) -> bool:
        return not (self.records_dropped or self.bytes_truncated or self.corrupt_seqs)


# --------------------------------------------------------------------------- the interface

RemoveHook = Callable[[int, str], None]
"""``on_remove(seq, subject)``: called after a message is removed by a limit, ``max_age`` or its
TTL (not by ``remove_msg``/``purge``). ``store.removal_reason`` says which during the call
("max_msgs", "max_bytes", "max_msgs_per_subject", "max_age", "ttl"). Called once the store
operation has finished, so the hook may call back into the store."""


@runtime_checkable
class StreamStore(Protocol):
    """One stream's messages. Not thread-safe: call it from the event loop thread only.

    Sequences are contiguous from ``first_seq``; removed messages leave gaps (``num_deleted``).
    Subject filters accept ``*`` (one token) and ``>`` (the rest); ``""`` and ``">"`` mean all.
    """

    on_remove: RemoveHook | None
    removal_reason: str
    recovery_report: RecoveryReport
    failed: StoreFailed | None
    """Set once a write or fsync to disk failed (file stores). From then on appends raise
    it and ``durable()`` raises it: nothing more can be promised until the store is reopened
    from disk. Removals still change the in-memory state (acks, limits) but are not made
    durable; callers that answer a client should refuse them first."""
    on_failure: Callable[[StoreFailed], None] | None
    """Called once, on the loop thread, when ``failed`` is set."""

    @property
    def limits(self) -> StoreLimits: ...

    def store_msg(
        self, subject: str, hdr: bytes, data: bytes, ttl_ns: int = 0, ts_ns: int | None = None
    ) -> tuple[int, int]:
        """Append; returns ``(seq, ts)``. Never waits for the disk (see ``durable``). ``ttl_ns``
        > 0 expires the message at ``ts + ttl_ns``; < 0 exempts it from ``max_age`` (Nats-TTL
        "never"). ``ts_ns`` is its time (now when None; a replicated stream's leader gives
        it), raised to the last message's if earlier so that time never goes back. Raises a
        ``StoreError`` subclass when a discard-new limit refuses it, and ``StorageFull`` when
        the disk has no room (the message then leaves no trace)."""
        ...

    def store_raw_msg(
        self, subject: str, hdr: bytes, data: bytes, seq: int, ts: int, ttl_ns: int = 0
    ) -> None:
        """Append a message with its original ``seq`` and ``ts`` (stream restore): sequences
        skipped before ``seq`` become deleted ones. No discard limit is applied, since the
        stream is rebuilt as it was. ``seq`` must be past ``last_seq`` and ``ts`` no earlier
        than the last message's, else ``StoreError``."""
        ...

    def store_raw_batch(self, msgs: Sequence[StoredMsg]) -> None:
        """``store_raw_msg`` for each of ``msgs`` (none with a TTL) in one call: what a mirror
        catching up stores. Everything is checked before anything is stored, so a
        ``StoreError`` leaves the store as it was."""
        ...

    async def durable(self) -> None:
        """Return once everything appended (or removed) before the call is on stable storage,
        as far as the sync policy promises."""
        ...

    def skip_msgs(self, seq: int, n: int, ts_ns: int | None = None) -> None:
        """Consume ``n`` sequences starting at ``seq`` (must be ``last_seq + 1``) without
        storing anything (mirrors and sources). ``ts_ns`` is the time they carry when given
        (a restore keeps the original ``last_ts``, 0 included); otherwise now."""
        ...

    def set_first_seq(self, seq: int) -> int:
        """Drop everything; the next message gets ``seq`` (must be ≥ ``last_seq``). Returns the
        number of messages removed."""
        ...

    def load_msg(self, seq: int) -> StoredMsg | None: ...

    def load_next(self, filter: str, start_seq: int) -> StoredMsg | None:
        """First message with seq ≥ ``start_seq`` whose subject matches ``filter``."""
        ...

    def load_next_batch(
        self, filter: str, start_seq: int, limit: int, max_bytes: int
    ) -> list[StoredMsg]:
        """Messages matching ``filter`` from ``start_seq`` on, in order, as successive
        :meth:`load_next` calls would return them: at most ``limit``, and none past the one
        that brings headers and payloads to ``max_bytes`` (always at least one if any)."""
        ...

    def is_live(self, seq: int) -> bool:
        """Whether message ``seq`` is stored (not removed, expired or purged)."""
        ...

    def load_last(self, filter: str) -> StoredMsg | None: ...

    def load_prev(self, filter: str, start_seq: int) -> StoredMsg | None:
        """Last message with seq ≤ ``start_seq`` whose subject matches ``filter``."""
        ...

    def seq_from_time(self, ts_ns: int) -> int:
        """First sequence stored at or after ``ts_ns`` (``last_seq + 1`` when none)."""
        ...

    def remove_msg(self, seq: int, erase: bool = True) -> bool: ...

    def purge(self, subject: str = "", seq: int = 0, keep: int = 0) -> int:
        """nats-server's ``PurgeEx``: all; or only ``subject`` matches; below ``seq``; keeping the
        newest ``keep``. Returns the number removed."""
        ...

    def compact(self, seq: int) -> int:
        """Remove every message below ``seq``; past the end, the next message gets ``seq``."""
        ...

    def state(self, deleted_details: bool = False) -> StreamState: ...

    def subject_state(self, filter: str) -> dict[str, int]: ...

    def num_pending(self, filter: str, start_seq: int, last_per_subject: bool = False) -> int: ...

    def subjects_last(self, filter: str) -> dict[str, int]: ...

    def update_limits(self, limits: StoreLimits) -> None: ...

    def expire(self, now_ns: int | None = None) -> int:
        """Remove messages past ``max_age`` or their TTL at ``now_ns``; returns how many."""
        ...

    def next_expiry(self) -> int | None:
        """When (ns since the epoch) the next message expires, or None."""
        ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...

    def delete(self) -> None:
        """Close and remove everything the store keeps on disk."""
        ...

    async def adelete(self) -> None:
        """``delete`` from the event loop: lets a sync round in flight finish first and
        removes the files off the loop thread."""
        ...

    def check(self) -> None:
        """Assert every internal invariant (tests call it after each operation)."""
        ...
