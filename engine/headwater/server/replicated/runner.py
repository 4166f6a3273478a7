"""One replica of one stream's group, run for real: the core bound to a clock, the routes,
etcd and a log (docs/REPLICATION.md, "The parts").

A `GroupRunner` owns a `core.Replica` and carries out its actions:

- **Send**: the message, encoded by `wire`, published on ``$HW.RG.<stream>.<server id>``
  through the server's internal client (the routes carry it; a client may not publish on
  ``$HW.``); the target's name is turned into its server id by `resolve` (the cluster's
  ``peers``). A target with no known id, or a publish that fails, loses the message: the core
  resends on its heartbeats. Each runner subscribes to its own subject; what does not decode
  is logged and dropped.
- **Persist / Truncate / Rebase**: `ReplicaLog.append` / `truncate` / `rebase`, at once and in
  order. A background task calls `ReplicaLog.sync` while appends wait (one sync covers every
  append made before it was called: group commit), then `on_persisted_many` with every
  Persist it covered, in order (one input per sync).
- **SendSnapshot**: the owner's `on_send_snapshot(to, index, epoch)`: it transfers its state
  as of `index` (what it applied so far: every Apply before is done) out of band; the
  receiving owner installs it, then calls `install_snapshot(index, epoch)` on its runner.
  Installing must not roll its state back: check `snapshot_wanted(index)`, switch to the
  snapshot's state and call `install_snapshot` in one step (no await in between, not from a
  callback). A lost transfer costs nothing: the core asks again after `snapshot_interval`.
- **Compaction**: once the owner's snapshot holds everything up to `upto` (<= what it
  applied), `compact(upto)` lets the core drop those entries; the owner compacts its log.
  A runner starts from what the owner recovered: `base` = its snapshot's (index, epoch) and
  `recovered` = the durable entries after it (from `ReplicationLog`:
  `after_snapshot(index, epoch, entries open returned)`, which also rebases a log that does
  not hold the snapshot's entry, e.g. after a crash undid an unsynced Rebase: the log's next
  append must be `index + 1`).
- **ProposeRecord**: `GroupStore.compare_and_swap` in a task (at most `max_cas` at once; more
  are dropped, which the core takes as an unknown outcome and proposes again after its
  `cas_timeout`), then `on_cas_result`. An etcd failure is logged and answers nothing: the
  outcome is unknown, as the core expects.
- The record's etcd watch feeds `on_record`; a timer feeds `on_tick` every `tick_ms` with
  ``time.monotonic()`` in ms.
- **Leadership**: the owner's `on_leadership(leading, epoch)` (it serves the stream's
  clients only while leading). `step_down(preferred)` hands the leadership to an in-sync
  replica (the core's rule 8); proposals meanwhile are rejected.
- **Quorum lost**: while leading, when fewer than a quorum of the replicas (this one
  included) were heard from within `lost_quorum_ms`, the owner's `on_quorum_lost()` is
  called, at most once per `lost_quorum_every_s` (nats-server's advisory interval).
- **Reads**: `read(ready)` asks for the core's read barrier (its rule 9); `ready(True)` once
  the owner may answer the read from its state (everything acknowledged before the call is
  applied: answer synchronously, in the callback), `ready(False)` when it may not (not
  leading, stepping down, not ready within the core's `read_timeout`, closed, or
  `max_waiting` reads wait already). The reads of one pass of the loop share one round.
- **Apply / Acknowledge / Rejected**: the owner's callbacks, with the tokens it passed to
  `propose`. Every token gets exactly one answer: Acknowledge, or Rejected (also for the
  proposals still waiting when the runner closes, and at once when `max_waiting` wait already
  or the runner is closed). Rejected means "not acknowledged here": the operation may still
  be committed, so the owner retries with the same id (the application deduplicates).

A failure of the log (append, truncate or sync raising, or a sync that returns less than it
must cover) or of the owner's Apply callback stops the runner, as a crash would: after a
failed fsync nothing is known of what the disk holds (fsync errors are not retried), and the
core's safety assumes a replica either does what it says or stops. The owner builds a new
runner from what the log recovers. `SafetyError` from the core stops it the same way.

Inputs are processed one at a time: an input that arrives while one is being processed (a
callback proposing, or an internal client delivering a reply synchronously) is queued and
runs right after. Nothing here blocks the event loop; the slow parts (sync, etcd) are tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from headwater.server.replicated import wire
from headwater.server.replicated.core import (
    Acknowledge,
    Action,
    Apply,
    Config,
    Leadership,
    Persist,
    ProposeRecord,
    ReadReady,
    ReadRejected,
    Rebase,
    Rejected,
    Replica,
    Send,
    SendSnapshot,
    Truncate,
)
from headwater.server.replicated.groupstore import GroupStore
from headwater.server.replicated.messages import Entry
from headwater.server.replicated.record import GroupRecord
from headwater.server.routing.subjects import SERVERS_ONLY

log = logging.getLogger("headwater.server.replicated")

RG_PREFIX = f"{SERVERS_ONLY}RG"
"""``$HW.RG.<stream>.<server id>``: replication messages for one replica of one stream."""
WARN_EVERY_S = 10.0
"""Repeated warnings of one kind (malformed messages, unknown targets) at most this often."""


class ReplicaLog(Protocol):
    """The durable log a runner writes (the real one is `replicated.wal`)."""

    def append(self, entries: Sequence[Entry]) -> None:
        """Buffered; ordered with the other appends and truncates."""

    def truncate(self, after_index: int) -> None:
        """Drops the entries after `after_index`; ordered with the appends."""

    def rebase(self, index: int, epoch: int) -> None:
        """Drops every entry: the log goes on after `index` (entry of `epoch`), which a
        snapshot holds; ordered with the appends. Until the next sync a crash may undo it."""

    async def sync(self) -> int:
        """Makes every append and truncate made before the call durable; returns the index
        the log is durable up to."""
        ...


class Transport(Protocol):
    """What the runner needs of the server's `InternalClient`."""

    def publish(self, subject: str, payload: bytes) -> int: ...

    def subscribe(self, subject: str, handler: Any) -> Any: ...

    def unsubscribe(self, sub: Any) -> None: ...


Resolve = Callable[[str], "str | None"]
"""Server name -> its server id (None when unknown, e.g. the server is down)."""
OnApply = Callable[[tuple[Entry, ...]], None]
OnAcknowledge = Callable[[Any, int], None]
OnRejected = Callable[[Any, "str | None"], None]
OnLeadership = Callable[[bool, int], None]
OnSendSnapshot = Callable[[str, int, int], None]
OnQuorumLost = Callable[[], None]
OnReadReady = Callable[[bool], None]
"""A read's answer: True, answer it from the state now; False, this replica may not."""
LOST_QUORUM_MS = 3_000
"""A leader that heard from fewer than a quorum of replicas for this long lost its quorum."""
LOST_QUORUM_EVERY_S = 10.0
"""At most one quorum-lost report per this many seconds (nats-server's lostQuorumAdvInterval)."""


def server_ids(peers: Mapping[str, Any]) -> Resolve:
    """A `Resolve` over a live name -> peer mapping whose values have a ``server_id``
    (``ClusteredJetStream.peers``): read at each send, so it follows servers coming and
    going."""

    def resolve(name: str) -> str | None:
        peer = peers.get(name)
        return None if peer is None else str(peer.server_id)

    return resolve


def _ignore(*_: Any) -> None:
    return None


class RunnerStopped(Exception):
    """Why a runner stopped by itself (its `failed`)."""


class GroupRunner:
    """The replica `name` of `stream`'s group; `start()` it, `close()` it.

    `recovered` is what the log holds durably after `base` (the index and epoch of the entry
    the owner's snapshot ends at; (0, 0) without one): the core's starting log. `my_id` is
    this server's id (the subject it listens on).
    """

    def __init__(
        self,
        stream: str,
        name: str,
        my_id: str,
        *,
        log: ReplicaLog,
        transport: Transport,
        store: GroupStore,
        resolve: Resolve,
        recovered: Sequence[Entry] = (),
        base: tuple[int, int] = (0, 0),
        config: Config | None = None,
        on_apply: OnApply = _ignore,
        on_acknowledge: OnAcknowledge = _ignore,
        on_rejected: OnRejected = _ignore,
        on_leadership: OnLeadership = _ignore,
        on_send_snapshot: OnSendSnapshot = _ignore,
        on_quorum_lost: OnQuorumLost = _ignore,
        lost_quorum_ms: int = LOST_QUORUM_MS,
        lost_quorum_every_s: float = LOST_QUORUM_EVERY_S,
        tick_ms: int = 10,
        max_waiting: int = 10_000,
        max_cas: int = 2,
        prefix: str = RG_PREFIX,
    ) -> None:
        self.stream = stream
        self.name = name
        self.my_id = my_id
        self.log = log
        self.transport = transport
        self.store = store
        self.resolve = resolve
        self.replica = Replica(name, tuple(recovered), config, base=base)
        self.on_apply = on_apply
        self.on_acknowledge = on_acknowledge
        self.on_rejected = on_rejected
        self.on_leadership = on_leadership
        self.on_send_snapshot = on_send_snapshot
        self.on_quorum_lost = on_quorum_lost
        self.lost_quorum_ms = lost_quorum_ms
        self.lost_quorum_every_s = lost_quorum_every_s
        self._quorum_lost_at = -lost_quorum_every_s
        self.tick_ms = tick_ms
        self.max_waiting = max_waiting
        self.max_cas = max_cas
        self.prefix = prefix
        self.failed: BaseException | None = None
        self._closed = False
        self._inputs: deque[tuple[Callable[..., list[Action]], tuple[Any, ...]]] = deque()
        self._busy = False
        self._waiting: dict[int, Any] = {}  # the core's token -> the owner's
        self._proposing: list[tuple[bytes, int]] = []  # for the core at the end of the pass
        self._reads: dict[int, OnReadReady] = {}  # the core's read token -> the owner's
        self._reading: list[int] = []  # reads for the core at the end of the pass
        self._next_token = 0
        # Durability: the last index of each Persist not yet synced, in order, and the index
        # the log ends at after every operation handed to it.
        self._unsynced: deque[int] = deque()
        self._log_end = self.replica.last_index
        self._dirty = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._cas_tasks: set[asyncio.Task[None]] = set()
        self._sub: Any = None
        self._closing: asyncio.Task[None] | None = None
        self._warned: dict[str, float] = {}
        self._handlers: dict[type, Callable[[Any], None]] = {
            Send: self._send,
            Persist: self._persist,
            Truncate: self._truncate,
            Rebase: self._rebase,
            SendSnapshot: self._send_snapshot,
            Apply: self._apply,
            Acknowledge: self._acknowledge,
            Rejected: self._rejected,
            ReadReady: self._read_answer,
            ReadRejected: self._read_answer,
            Leadership: self._leadership,
            ProposeRecord: self._propose_record,
        }

    # Lifecycle -------------------------------------------------------------------------------

    @property
    def subject(self) -> str:
        return f"{self.prefix}.{self.stream}.{self.my_id}"

    @property
    def is_leader(self) -> bool:
        return self.replica.is_leader and not self._closed

    @property
    def record(self) -> GroupRecord | None:
        return self.replica.record

    async def start(self) -> None:
        self._input(self.replica.on_tick, _now_ms())  # the core's clock starts before input
        self._sub = self.transport.subscribe(self.subject, self._on_delivery)
        for coro, what in (
            (self._tick_loop(), "tick"),
            (self._sync_loop(), "sync"),
            (self._watch_loop(), "watch"),
        ):
            self._spawn(coro, what, self._tasks)

    async def close(self) -> None:
        """Stops everything; proposals still waiting are answered Rejected."""
        self._closed = True
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self._shutdown())
        await asyncio.shield(self._closing)

    async def _shutdown(self) -> None:
        if self._sub is not None:
            self.transport.unsubscribe(self._sub)
            self._sub = None
        tasks = [*self._tasks, *self._cas_tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        waiting, self._waiting = self._waiting, {}
        for token in waiting.values():
            self._callback(self.on_rejected, token, None)
        reads, self._reads = self._reads, {}
        for ready in reads.values():
            self._callback(ready, False)

    def _spawn(self, coro: Any, what: str, into: set[asyncio.Task[None]]) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=f"rg:{self.stream}:{what}")
        into.add(task)
        task.add_done_callback(into.discard)

    def _fail(self, exc: BaseException) -> None:
        if self._closed:
            return
        log.error("replica %s of %s stopped: %s", self.name, self.stream, exc, exc_info=exc)
        self.failed = exc
        self._closed = True  # no more input from here on; the shutdown lets go of the rest
        self._inputs.clear()
        self._closing = asyncio.get_running_loop().create_task(self._shutdown())

    # Inputs ----------------------------------------------------------------------------------

    def propose(self, op: bytes, token: Any) -> None:
        """Proposes `op`; `token` comes back in on_acknowledge or on_rejected, exactly once."""
        if self._closed or len(self._waiting) >= self.max_waiting:
            self._callback(self.on_rejected, token, None)
            return
        self._next_token += 1
        self._waiting[self._next_token] = token
        # Proposals of one pass of the loop go to the core together: one Persist and one
        # Append per follower for all of them (the publishes a client pipelines arrive so).
        self._proposing.append((op, self._next_token))
        if len(self._proposing) == 1:
            asyncio.get_running_loop().call_soon(self._flush_proposals)

    def _flush_proposals(self) -> None:
        batch, self._proposing = self._proposing, []
        self._input(self.replica.propose_many, batch)

    def read(self, ready: OnReadReady) -> None:
        """A read barrier: ``ready(True)`` once the state may be read (answer in the call),
        ``ready(False)`` when this replica may not answer; exactly once."""
        if self._closed or len(self._reads) >= self.max_waiting:
            self._callback(ready, False)
            return
        self._next_token += 1
        self._reads[self._next_token] = ready
        # The reads of one pass share one round (a read arriving once a round is in flight
        # waits for the next: the first of a pass must not send a round of its own).
        self._reading.append(self._next_token)
        if len(self._reading) == 1:
            asyncio.get_running_loop().call_soon(self._flush_reads)

    def _flush_reads(self) -> None:
        batch, self._reading = self._reading, []
        if self._closed:
            for token in batch:
                ready = self._reads.pop(token, None)
                if ready is not None:
                    self._callback(ready, False)
            return
        self._input(self.replica.read_many, batch)

    def step_down(self, preferred: str | None = None) -> None:
        """Hand the leadership over to an in-sync replica, `preferred` if it is one (the
        core's rule 8); nothing if this replica does not lead. The owner sees it go through
        `on_leadership(False, ...)` once the new epoch is known."""
        self._input(self.replica.step_down, preferred)

    def change_peers(self, peers: Sequence[str]) -> None:
        """Change the group's peers to ``peers`` (the core's rule 10), as its leader; nothing
        if this replica does not lead: the owner gives the wanted peers to every replica that
        starts leading (``on_leadership``) until the record lists them."""
        self._input(self.replica.change_peers, tuple(peers))

    @property
    def transferring_to(self) -> str | None:
        """The replica this leader is handing its leadership to, while it does."""
        return None if self._closed else self.replica.transferring_to

    def snapshot_wanted(self, index: int) -> bool:
        """Would a snapshot at `index` be installed (see the module docstring)?"""
        return not self._closed and self.replica.snapshot_wanted(index)

    def install_snapshot(self, index: int, epoch: int) -> None:
        """The owner installed (durably) the state as of `index`, entry of `epoch`."""
        self._input(self.replica.on_snapshot, index, epoch)

    def compact(self, upto: int) -> None:
        """The owner's snapshot holds everything up to `upto` (<= what it applied)."""
        self._input(self._compact, upto)

    def _compact(self, upto: int) -> list[Action]:
        self.replica.compact(upto)
        return []

    def _input(self, fn: Callable[..., list[Action]], *args: Any) -> None:
        if self._closed:
            return
        self._inputs.append((fn, args))
        if self._busy:
            return  # runs once the input being processed is done
        self._busy = True
        try:
            while self._inputs and not self._closed:
                fn, args = self._inputs.popleft()
                self._do(fn(*args))
        except Exception as exc:  # SafetyError, a failing log or Apply: stop, as a crash
            self._fail(exc)
        finally:
            self._busy = False

    def _on_delivery(
        self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        try:
            msg = wire.decode(payload)
        except wire.WireError as exc:
            self._warn("wire", "dropped a message: %s", exc)
            return
        self._input(self.replica.on_message, msg)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick_ms / 1000)
            self._input(self.replica.on_tick, _now_ms())
            self._check_quorum()

    def _check_quorum(self) -> None:
        if not self.is_leader or self.replica.quorum_heard(self.lost_quorum_ms):
            return
        now = time.monotonic()
        if now - self._quorum_lost_at >= self.lost_quorum_every_s:
            self._quorum_lost_at = now
            log.warning("replica %s of %s leads without a quorum: stalled", self.name, self.stream)
            self._callback(self.on_quorum_lost)

    async def _watch_loop(self) -> None:
        records = self.store.watch(self.stream)
        try:
            async for record in records:
                self._input(self.replica.on_record, record)
        except Exception as exc:  # the watch retries etcd failures itself: this is a bug
            self._fail(exc)
        finally:
            await records.aclose()

    async def _sync_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            while self._unsynced and not self._closed:
                covered = len(self._unsynced)
                must = self._log_end
                try:
                    durable = await self.log.sync()
                except Exception as exc:
                    self._fail(exc)
                    return
                if durable < must:
                    self._fail(RunnerStopped(f"log sync reached {durable}, not {must}"))
                    return
                # One input for every Persist the sync covered: one commit advance (leader)
                # or one durable report (follower) per fsync, not one per Persist.
                done = [self._unsynced.popleft() for _ in range(covered)]
                self._input(self.replica.on_persisted_many, done)

    async def _cas(self, action: ProposeRecord) -> None:
        try:
            ok, current = await self.store.compare_and_swap(
                self.stream, action.new, action.expected_revision
            )
        except Exception as exc:  # MetaError, RecordError (or a bug): no answer, only a log
            log.warning(
                "replica %s of %s: record swap to epoch %d, outcome unknown: %s",
                self.name,
                self.stream,
                action.new.epoch,
                exc,
            )
            return
        if current is not None:
            self._input(self.replica.on_cas_result, ok, current)

    # Actions ---------------------------------------------------------------------------------

    def _do(self, actions: list[Action]) -> None:
        # By exact type, one dict look-up per action (a batch of acks is most of them).
        handlers = self._handlers
        for action in actions:
            handler = handlers.get(type(action))
            if handler is None:  # pragma: no cover
                raise TypeError(action)
            handler(action)

    def _persist(self, action: Persist) -> None:
        self.log.append(action.entries)
        self._log_end = action.entries[-1].index
        self._unsynced.append(self._log_end)
        self._dirty.set()

    def _truncate(self, action: Truncate) -> None:
        self.log.truncate(action.after_index)
        self._log_end = action.after_index

    def _rebase(self, action: Rebase) -> None:
        self.log.rebase(action.index, action.epoch)
        self._log_end = action.index

    def _send_snapshot(self, action: SendSnapshot) -> None:
        self._callback(self.on_send_snapshot, action.to, action.index, action.epoch)

    def _apply(self, action: Apply) -> None:
        self.on_apply(action.entries)  # raising stops the runner: state unknown

    def _acknowledge(self, action: Acknowledge) -> None:
        token = self._waiting.pop(action.token, None)
        if token is not None:
            self._callback(self.on_acknowledge, token, action.index)

    def _rejected(self, action: Rejected) -> None:
        token = self._waiting.pop(action.token, None)
        if token is not None:
            self._callback(self.on_rejected, token, action.leader)

    def _read_answer(self, action: ReadReady | ReadRejected) -> None:
        ready = self._reads.pop(action.token, None)
        if ready is not None:
            self._callback(ready, isinstance(action, ReadReady))

    def _leadership(self, action: Leadership) -> None:
        self._callback(self.on_leadership, action.leading, action.epoch)

    def _propose_record(self, action: ProposeRecord) -> None:
        if len(self._cas_tasks) < self.max_cas:
            self._spawn(self._cas(action), "cas", self._cas_tasks)
        else:
            self._warn("cas", "record swap dropped: %d in flight", len(self._cas_tasks))

    def _send(self, action: Send) -> None:
        target = self.resolve(action.to)
        if target is None:
            self._warn("target", "no server id for %s: message dropped", action.to)
            return
        try:
            self.transport.publish(f"{self.prefix}.{self.stream}.{target}", wire.encode(action.msg))
        except Exception as exc:  # a route going away: the message is lost, the core resends
            self._warn("send", "send to %s failed: %s", action.to, exc)

    def _callback(self, fn: Callable[..., None], *args: Any) -> None:
        """An owner's callback for a token: its failure is the owner's bug, logged only."""
        try:
            fn(*args)
        except Exception:
            log.exception("replica %s of %s: callback failed", self.name, self.stream)

    def _warn(self, kind: str, fmt: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._warned.get(kind, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[kind] = now
            log.warning("replica %s of %s: " + fmt, self.name, self.stream, *args)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
