"""Durable consumer state on disk: ``<stream dir>/obs/<consumer>/{meta.inf,o.json}``.

``meta.inf`` holds the config (written on create/update, with a backup copy
``.meta.inf.bak``); ``o.json`` the delivery state: delivered sequences, ack floor, pending
messages with their delivery times, delivery counts, and a generation number. Both are
replaced atomically (temp file, fsync, rename, fsync the directory); each ``o.json`` write
keeps the one it replaces as ``.o.json.bak``.

How durable a state write is follows the server's stream sync policy, so an ack is exactly as
durable as the messages it acknowledges: under ``ack`` (default) and ``always`` every write is
fsynced (file and directory) before ack replies go out, so an acked message is not redelivered
after a crash. Under ``interval`` the stream itself only fsyncs every N seconds, so paying two
fsyncs per consumer write would buy nothing; writes go to ``o.next.json`` without fsync, and a
timer writes the latest state to ``o.json`` (fsynced) once per interval, as does
:meth:`ConsumerState.flush` at a clean close.

At start-up (:func:`read_state`) the readable state file with the highest generation wins: a
power cut that leaves ``o.next.json`` (or anything else) empty or torn falls back to the last
state safely on disk, and the manager logs a warning and sends an advisory. A consumer whose
config is readable is never dropped for its state: with no state left it starts over from
its config (see :meth:`Consumer.position_after_loss`).

State changes are coalesced: :meth:`ConsumerState.changed` marks the consumer dirty and one
writer task saves the latest state, so a burst of acks costs one write. An ack sent as a
request (``ack_sync``) is answered only after the write that includes it has completed, which
is what the seeds' double-ack (exactly-once) pattern relies on. A write that fails (a full
disk) confirms nothing: its acks wait, unanswered, while the write is retried with backoff,
and are answered once a write that includes them succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from headwater.server.jetstream.layout import parse_time
from headwater.server.jetstream.wire import dumps, rfc3339
from headwater.server.store import SyncPolicy
from headwater.server.store.atomic import (
    UnreadableFile,
    backup_path,
    fsync_dir,
    parsed_copies,
    read_with_fallback,
    write_atomic,
)

from .ackstate import Pending

if TYPE_CHECKING:
    from .consumer import Consumer

__all__ = ["ConsumerState", "StoredConsumer", "load_consumers", "remove_consumer_dir"]

log = logging.getLogger("headwater.jetstream")

RETRY_FIRST = 0.1
RETRY_MAX = 2.0
"""Seconds between retries of a failed state write: doubling from the first to the max."""

META_FILE = "meta.inf"
STATE_FILE = "o.json"
UNSYNCED_FILE = "o.next.json"


def consumer_dir(stream_dir: Path, name: str) -> Path:
    return stream_dir / "obs" / name


def write_meta(directory: Path, config_json: dict[str, Any], created_ns: int) -> None:
    """Replace the consumer's ``meta.inf`` (and its backup copy) atomically."""
    fresh = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    if fresh:
        fsync_dir(directory.parent)
    body = dumps({"Created": rfc3339(created_ns)} | config_json)
    write_atomic(directory / META_FILE, body, backup="copy")


def remove_consumer_dir(directory: Path) -> None:
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)


def snapshot(c: Consumer, gen: int | None = None) -> bytes:
    """The consumer's delivery state as JSON (monotonic deadlines are not kept). ``gen``
    numbers the state files of one consumer, so the newest readable one wins at start-up."""
    body: dict[str, Any] = {
        "dseq": c.dseq,
        "sseq": c.sseq,
        "adflr": c.adflr,
        "asflr": c.asflr,
        "pending": [[s, p.cseq, p.ts] for s, p in c.pending.items()],
        "rdc": [[s, n] for s, n in c.rdc.items()],
        "lps": c.lps,
        "lps_end": c.lps_end,
    }
    if gen is not None:
        body["gen"] = gen
    return orjson.dumps(body)


def parse_state(data: bytes) -> dict[str, Any]:
    """A state file's JSON, checked enough that :func:`restore` cannot fail on it."""
    state = orjson.loads(data)
    if not isinstance(state, dict):
        raise ValueError("consumer state is not an object")
    for key in ("dseq", "sseq", "adflr", "asflr"):
        if not isinstance(state.get(key), int):
            raise ValueError(f"consumer state has no integer {key!r}")
    for key, width in (("pending", 3), ("rdc", 2)):
        rows = state.get(key, [])
        if not isinstance(rows, list) or any(
            not isinstance(r, list) or len(r) != width or not all(isinstance(v, int) for v in r)
            for r in rows
        ):
            raise ValueError(f"consumer state has a malformed {key!r}")
    return state


def restore(c: Consumer, data: bytes) -> None:
    """Load saved state. A pending message's ack wait runs from its last delivery, so one
    whose wait passed while the server was down is redelivered at once."""
    state = parse_state(data)
    c.sseq = int(state["sseq"])
    now, wall = time.monotonic(), time.time_ns()
    c.ack_state.restore(
        int(state["dseq"]),
        int(state["adflr"]),
        int(state["asflr"]),
        {
            int(s): Pending(int(cseq), now + (int(ts) + c.ack_wait - wall) / 1e9, int(ts))
            for s, cseq, ts in state.get("pending", [])
        },
        {int(s): int(n) for s, n in state.get("rdc", [])},
    )
    c.lps = [int(s) for s in state.get("lps", [])]
    c.lps_end = int(state.get("lps_end", 0))


@dataclass
class StoredConsumer:
    name: str
    config_json: dict[str, Any]
    created_ns: int
    state: bytes | None
    """The newest readable delivery state; None when there is none."""
    directory: Path
    gen: int = 0
    """The generation of ``state`` (writes go on from it)."""
    skipped: list[str] = field(default_factory=list)
    """State or config files found unreadable (empty, torn): the state may be older than
    the last one written, or missing, and the manager warns and advises about it."""


def _parse_meta(data: bytes) -> tuple[dict[str, Any], int]:
    body = orjson.loads(data)
    if not isinstance(body, dict):
        raise ValueError("consumer config is not an object")
    created = parse_time(str(body.pop("Created", "")))
    return body, created


def read_state(directory: Path) -> tuple[bytes | None, int, list[str]]:
    """The newest readable state of a consumer: (state, its generation, files skipped).

    Candidates: ``o.json`` (written fsynced), its backup ``.o.json.bak`` (the state before
    the last fsynced write; the only one left if a crash fell between the two renames) and
    ``o.next.json`` (written without fsync under a periodic sync policy, so a power cut may
    leave it empty or torn). The highest generation among the readable ones wins."""
    best: tuple[int, bytes] | None = None
    skipped: list[str] = []
    state_file = directory / STATE_FILE
    candidates = (state_file, backup_path(state_file), directory / UNSYNCED_FILE)
    for _, data, state in parsed_copies(candidates, parse_state, skipped):
        gen = state.get("gen", 0)
        gen = gen if isinstance(gen, int) else 0
        if best is None or gen > best[0]:
            best = (gen, data)
    if best is None:
        return None, 0, skipped
    return best[1], best[0], skipped


def load_consumers(stream_dir: Path) -> list[StoredConsumer]:
    """Every consumer directory of a stream with a readable ``meta.inf`` (or backup)."""
    obs = stream_dir / "obs"
    found: list[StoredConsumer] = []
    if not obs.is_dir():
        return found
    for entry in sorted(obs.iterdir()):
        meta = entry / META_FILE
        if not meta.is_file() and not backup_path(meta).is_file():
            continue
        try:
            recovered = read_with_fallback(meta, _parse_meta)
        except UnreadableFile as exc:
            log.error("Error reading consumer %s: %s", entry, exc)
            continue
        body, created = recovered.value
        state, gen, skipped = read_state(entry)
        item = StoredConsumer(entry.name, body, created, state, entry, gen, skipped)
        item.skipped[:0] = recovered.skipped
        found.append(item)
    return found


def write_unsynced(path: Path, data: bytes) -> None:
    """Replace ``path`` by temp file and rename, without fsync (periodic sync mode: a power
    cut may lose or tear it, and :func:`read_state` then falls back to ``o.json``)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


class ConsumerState:
    """Writes one consumer's state after changes, one write at a time."""

    def __init__(
        self, consumer: Consumer, directory: Path, sync: SyncPolicy | None = None, gen: int = 0
    ) -> None:
        self.consumer = consumer
        self.directory = directory
        self.gen = gen
        """The generation of the last state written (see :func:`read_state`)."""
        self._sync_task: asyncio.Task[None] | None = None
        policy = sync or SyncPolicy()
        self.deferred_sync = policy.mode == "interval"
        """True when writes skip the fsync and a timer makes them durable (``interval``)."""
        self._interval = policy.interval
        self._sync_timer: asyncio.TimerHandle | None = None
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._replies: list[str] = []
        """Ack replies waiting for the write that records their acks."""
        self.failing = False
        """True while state writes fail (they are retried; no ack is confirmed meanwhile)."""
        consumer.on_change = self.changed
        consumer.on_ack_reply = self.reply_after_write

    def changed(self, _consumer: Consumer) -> None:
        self._dirty = True
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._writer())

    def reply_after_write(self, reply: str) -> None:
        self._replies.append(reply)
        self.changed(self.consumer)

    async def _writer(self) -> None:
        backoff = RETRY_FIRST
        try:
            while self._dirty:
                self._dirty = False
                if self.consumer.closed:
                    # Deleted, or closing: :meth:`flush` writes the final state and answers
                    # the acks still waiting for it.
                    break
                replies, self._replies = self._replies, []
                data = self._snapshot()
                try:
                    await asyncio.to_thread(self._write, data)
                except OSError as exc:
                    # Nothing is confirmed that is not on disk: the acks stay unanswered
                    # (the in-memory state keeps them; a crash now redelivers them) and the
                    # write is retried, with backoff, until it succeeds or the consumer goes.
                    self._replies[:0] = replies
                    self._dirty = True
                    if not self.failing:
                        log.error(
                            "consumer '%s > %s': state write failed, retrying: %s",
                            self.consumer.stream.name,
                            self.consumer.name,
                            exc,
                        )
                    self.failing = True
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, RETRY_MAX)
                    continue
                if self.failing:
                    self.failing = False
                    backoff = RETRY_FIRST
                    log.warning(
                        "consumer '%s > %s': state written again",
                        self.consumer.stream.name,
                        self.consumer.name,
                    )
                if self.deferred_sync:
                    self._arm_sync()
                for reply in replies:
                    self.consumer.client.publish(reply, b"")
        finally:
            self._task = None

    def _snapshot(self) -> bytes:
        self.gen += 1
        return snapshot(self.consumer, self.gen)

    def _write(self, data: bytes) -> None:
        """One state write (worker thread): ``o.json`` fsynced, its previous version kept as
        the backup; under a periodic policy ``o.next.json``, not fsynced."""
        if not self.deferred_sync:
            write_atomic(self.directory / STATE_FILE, data, backup="previous")
            return
        write_unsynced(self.directory / UNSYNCED_FILE, data)

    def _arm_sync(self) -> None:
        if self._sync_timer is None and not self.consumer.closed:
            loop = asyncio.get_running_loop()
            self._sync_timer = loop.call_later(self._interval, self._sync_due)

    def _sync_due(self) -> None:
        """The interval passed: write the latest state durably (skipped once closed: the
        final :meth:`flush` writes it, and a deleted consumer's directory is gone)."""
        self._sync_timer = None
        if not self.consumer.closed and self._sync_task is None:
            self._sync_task = asyncio.get_running_loop().create_task(self._sync_now())

    async def _sync_now(self) -> None:
        """One fsynced write of ``o.json`` (the unsynced ``o.next.json`` is not trusted after
        a power cut: :func:`read_state` falls back to this one)."""
        try:
            data = self._snapshot()
            await asyncio.to_thread(
                write_atomic, self.directory / STATE_FILE, data, backup="previous"
            )
        except OSError as exc:
            log.error("consumer %s: state sync failed, retrying: %s", self.consumer.name, exc)
            self._arm_sync()
        finally:
            self._sync_task = None

    async def flush(self) -> None:
        """Wait for the writes in flight (at shutdown), then save once more, fsynced."""
        if self._task is not None:
            await asyncio.shield(self._task)
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        if self._sync_task is not None:
            await asyncio.shield(self._sync_task)
        if self.directory.exists():
            data = self._snapshot()
            await asyncio.to_thread(
                write_atomic, self.directory / STATE_FILE, data, backup="previous"
            )
            # Acks that waited for a write are on disk now (the clients are still connected:
            # JetStream stops before client connections close).
            replies, self._replies = self._replies, []
            for reply in replies:
                self.consumer.client.publish(reply, b"")
