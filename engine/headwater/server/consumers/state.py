"""Durable consumer state on disk: ``<stream dir>/obs/<consumer>/{meta.inf,o.json}``.

``meta.inf`` holds the config (written on create/update); ``o.json`` the delivery state:
delivered sequences, ack floor, pending messages with their delivery times, and delivery
counts. Both are replaced atomically (temp file, rename).

How durable a state write is follows the server's stream sync policy, so an ack is exactly as
durable as the messages it acknowledges: under ``ack`` (default) and ``always`` every write is
fsynced (file and directory) before ack replies go out, so an acked message is not redelivered
after a crash. Under ``interval`` the stream itself only fsyncs every N seconds, so paying two
fsyncs per consumer write would buy nothing; writes skip the fsync and a timer fsyncs the
latest state once per interval, and :meth:`ConsumerState.flush` (clean close) fsyncs always.

State changes are coalesced: :meth:`ConsumerState.changed` marks the consumer dirty and one
writer task saves the latest state, so a burst of acks costs one write. An ack sent as a
request (``ack_sync``) is answered only after the write that includes it has completed, which
is what the seeds' double-ack (exactly-once) pattern relies on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from headwater.server.jetstream.layout import parse_time
from headwater.server.jetstream.wire import dumps, rfc3339
from headwater.server.store import SyncPolicy
from headwater.server.store.atomic import fsync_dir, write_atomic

from .consumer import Pending

if TYPE_CHECKING:
    from .consumer import Consumer

__all__ = ["ConsumerState", "StoredConsumer", "load_consumers", "remove_consumer_dir"]

log = logging.getLogger("headwater.jetstream")

META_FILE = "meta.inf"
STATE_FILE = "o.json"


def consumer_dir(stream_dir: Path, name: str) -> Path:
    return stream_dir / "obs" / name


def write_meta(directory: Path, config_json: dict[str, Any], created_ns: int) -> None:
    fresh = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    if fresh:
        fsync_dir(directory.parent)
    write_atomic(directory / META_FILE, dumps({"Created": rfc3339(created_ns)} | config_json))


def remove_consumer_dir(directory: Path) -> None:
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)


def snapshot(c: Consumer) -> bytes:
    """The consumer's delivery state as JSON (monotonic deadlines are not kept)."""
    return orjson.dumps(
        {
            "dseq": c.dseq,
            "sseq": c.sseq,
            "adflr": c.adflr,
            "asflr": c.asflr,
            "pending": [[s, p.cseq, p.ts] for s, p in c.pending.items()],
            "rdc": [[s, n] for s, n in c.rdc.items()],
            "lps": c.lps,
            "lps_end": c.lps_end,
        }
    )


def restore(c: Consumer, data: bytes) -> None:
    """Load saved state. A pending message's ack wait runs from its last delivery, so one
    whose wait passed while the server was down is redelivered at once."""
    state = orjson.loads(data)
    c.dseq = int(state["dseq"])
    c.sseq = int(state["sseq"])
    c.adflr = int(state["adflr"])
    c.asflr = int(state["asflr"])
    now, wall = time.monotonic(), time.time_ns()
    c.pending = {
        int(s): Pending(int(cseq), now + (int(ts) + c.ack_wait - wall) / 1e9, int(ts))
        for s, cseq, ts in state.get("pending", [])
    }
    c.rdc = {int(s): int(n) for s, n in state.get("rdc", [])}
    c.lps = [int(s) for s in state.get("lps", [])]
    c.lps_end = int(state.get("lps_end", 0))


@dataclass
class StoredConsumer:
    name: str
    config_json: dict[str, Any]
    created_ns: int
    state: bytes | None
    directory: Path


def load_consumers(stream_dir: Path) -> list[StoredConsumer]:
    """Every consumer directory of a stream with a readable ``meta.inf``."""
    obs = stream_dir / "obs"
    found: list[StoredConsumer] = []
    if not obs.is_dir():
        return found
    for entry in sorted(obs.iterdir()):
        meta = entry / META_FILE
        if not meta.is_file():
            continue
        try:
            body = orjson.loads(meta.read_bytes())
            created = parse_time(body.pop("Created", ""))
        except (OSError, ValueError) as exc:
            log.error("Error reading consumer %s: %s", entry, exc)
            continue
        state_file = entry / STATE_FILE
        state = state_file.read_bytes() if state_file.is_file() else None
        found.append(StoredConsumer(entry.name, body, created, state, entry))
    return found


def write_unsynced(path: Path, data: bytes) -> None:
    """Replace ``path`` by temp file and rename, leaving the fsync to :func:`sync_file`."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def sync_file(path: Path) -> None:
    """Make an earlier :func:`write_unsynced` of ``path`` durable (data, then the rename)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


class ConsumerState:
    """Writes one consumer's state after changes, one write at a time."""

    def __init__(self, consumer: Consumer, directory: Path, sync: SyncPolicy | None = None) -> None:
        self.consumer = consumer
        self.directory = directory
        policy = sync or SyncPolicy()
        self.deferred_sync = policy.mode == "interval"
        """True when writes skip the fsync and a timer makes them durable (``interval``)."""
        self._interval = policy.interval
        self._sync_timer: asyncio.TimerHandle | None = None
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._replies: list[str] = []
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
        try:
            while self._dirty:
                self._dirty = False
                replies, self._replies = self._replies, []
                if self.consumer.closed:
                    # Deleted, or closing: :meth:`flush` writes the final state if needed.
                    break
                data = snapshot(self.consumer)
                try:
                    await asyncio.to_thread(self._write, data)
                    if self.deferred_sync:
                        self._arm_sync()
                except OSError as exc:
                    log.error("consumer %s: state write failed: %s", self.consumer.name, exc)
                if not self.consumer.closed or replies:
                    for reply in replies:
                        self.consumer.client.publish(reply, b"")
        finally:
            self._task = None

    def _write(self, data: bytes) -> None:
        """One state write (worker thread), fsynced unless the policy defers it."""
        path = self.directory / STATE_FILE
        if not self.deferred_sync:
            write_atomic(path, data)
            return
        write_unsynced(path, data)

    def _arm_sync(self) -> None:
        if self._sync_timer is None and not self.consumer.closed:
            loop = asyncio.get_running_loop()
            self._sync_timer = loop.call_later(self._interval, self._sync_due)

    def _sync_due(self) -> None:
        """The interval passed: fsync the state written since (skipped once closed: the
        final :meth:`flush` fsyncs, and a deleted consumer's directory is gone)."""
        self._sync_timer = None
        if not self.consumer.closed:
            asyncio.get_running_loop().create_task(self._sync_now())

    async def _sync_now(self) -> None:
        try:
            await asyncio.to_thread(sync_file, self.directory / STATE_FILE)
        except OSError as exc:
            log.error("consumer %s: state sync failed: %s", self.consumer.name, exc)

    async def flush(self) -> None:
        """Wait for the writes in flight (at shutdown), then save once more, fsynced."""
        if self._task is not None:
            await asyncio.shield(self._task)
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None
        if self.directory.exists():
            await asyncio.to_thread(
                write_atomic, self.directory / STATE_FILE, snapshot(self.consumer)
            )
