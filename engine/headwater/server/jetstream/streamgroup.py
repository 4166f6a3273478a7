"""A replicated stream on one server: its replica's state (a :class:`Stream`) bound to its
group's log (a :class:`GroupRunner`) (docs/REPLICATION.md, "Applying").

- **Publishes** reach the leader's replica only (:meth:`Stream.take` subscribes while it
  leads). The leader checks what only it can, its server's storage budget (10023 at once),
  and proposes the publish with its time (:class:`groupops.Publish`; strictly increasing, so
  that two publishes never share one), the answer to give as the proposal's token.
- **Every replica** applies the committed entries in order through :func:`groupops.apply`.
  While leading it keeps the outcomes of the batch it applies: the runner's Acknowledges for
  that batch come right after the Apply, in the same step, and each answers its publisher
  with its entry's outcome (:meth:`Stream.answer`: the ack once the store's group commit
  covers it, or the error).
- **A rejected proposal** (this replica stopped leading, its runner closed or is full) is not
  answered: the publisher's request times out and it publishes again, as when a nats-server
  stream leader changes. The first may still be committed by the new leader; a publisher
  that sets ``Nats-Msg-Id`` gets the retry acknowledged as a duplicate.
- **Expiry** follows the leader's clock: when the stream's expiry timer fires on the leader
  it proposes :class:`groupops.Expire` (one at a time), and the timer is armed again once an
  Expire is applied. Replicas remove nothing by their own clocks.
- **Peers** (docs/REPLICATION.md, "Changing the peers"): :meth:`StreamGroup.set_wanted` gives
  the peers the stream's placement wants; the replica leading hands them to its runner (the
  core's rule 10), now and whenever it starts leading. A replica that sees a record without
  itself while it is not wanted either calls ``on_left``: its server deletes it, after
  reading etcd.
- **Leadership**: the runner's ``on_leadership`` makes the stream take its messages, or stop,
  and a replica that starts leading sends ``$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED``; a
  leader that cannot reach a quorum sends ``QUORUM_LOST`` (the runner's ``on_quorum_lost``).
  :meth:`StreamGroup.step_down` hands the leadership over (STREAM.LEADER.STEPDOWN, lame duck).
- **Snapshots** (docs/REPLICATION.md, "Catching up") go through a :class:`Transfers` of the
  group's own (``$HW.SNAP.<stream>.<server id>``, the runner's transport). The runner's
  ``on_send_snapshot`` starts a :class:`groupsnapshot.SnapshotProducer` in the callback (the
  state as of the index it just applied) and hands its chunks to ``Transfers.send``. A
  received snapshot (``on_complete``) is installed into a new store in a task; if the runner
  still wants it then, the stream takes its state (``Installed.swap_into``) and the runner is
  told (``install_snapshot``) in one synchronous step, and the old store is closed.
- **Compaction**: every ``compact_every`` applied entries the replica compacts the runner's
  log and its disk log up to its applied index; the leader keeps the entries a follower
  within ``compact_every`` of it still needs, so that a short lag costs entries, not a
  snapshot. The log in memory thus holds at most about ``2 * compact_every`` entries.

**What compaction may drop, for a memory stream.** Its state lives only in this process: no
snapshot of it is on this server's disk. Dropping entries is still safe while the process
runs (the state holds them, and the leader sends a follower that needs them a snapshot
produced from its live state). After a restart the stream is empty, so:

- a log that still starts at index 1 is replayed whole (the core applies it again as the
  leader's commit index allows): the state is rebuilt exactly;
- a log compacted past index 1 (``first_index`` > 1) cannot be replayed: its base is state
  this process no longer has, and applying the entries after it to an empty stream would
  make a state no replica ever had. :func:`open_log` deletes such a log and the replica
  starts empty from base (0, 0), as a new replica: the leader, whose log no longer reaches
  back to 1, sends it a snapshot, then the log.

Such a replica has lost entries it once reported durable, while the record may still list
it in ``in_sync``: it must not lead before it holds the state again, or a stream whose other
replicas are only out of reach for a while would lead on empty and lose what was
acknowledged. So until it installed a snapshot its campaigns are refused here (the runner's
etcd swap is not made, an unknown outcome to the core); the leader meanwhile either catches
it up or takes it out of ``in_sync``. When every replica lost its state (every server
restarted after their logs were compacted) none may lead: publishes find no responders
until the stream is deleted and created again (and its requests are still answered from a
replica's empty state: not yet refused). nats-server brings such a memory stream back empty;
telling
"every replica lost it" from "the others are out of reach" needs the record to say which
replicas lost their state, which it does not yet.

A failure to apply (``groupops.OpError``, this server's store failing) stops the runner as a
crash would (the runner's rule for its owner's callbacks).

**Consumers** are in the log too (:mod:`.groupconsumers`): every replica applies their ops,
and the leader runs them once it applied its own epoch's no-op entry.

**A file stream** (``file``: what :func:`open_file_replica` recovered) compacts differently:
its replica takes a checkpoint (:mod:`.groupcheckpoint`) right at start, then every
``checkpoint_every_s`` with something applied or after :data:`CHECKPOINT_BYTES` of ops, and
at a clean close, in a task between two Apply batches; the logs are compacted up to a
checkpoint's index once it is durable, never by the applied index (a restart cuts the store
back to its newest checkpoint and applies the log after it again). A failed checkpoint
stops the runner. A restarted file replica holds its state: it is not ``lost_state`` and may
lead. A snapshot is installed into a new store in a fresh directory, checkpointed at once
after the swap; the old store is deleted after that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from headwater.server.replicated.core import Config
from headwater.server.replicated.groupstore import GroupStore
from headwater.server.replicated.messages import Entry
from headwater.server.replicated.record import GroupRecord
from headwater.server.replicated.runner import GroupRunner, ReplicaLog, Resolve, Transport
from headwater.server.replicated.transfer import COMPLETE, FileSink, Transfers, file_sinks
from headwater.server.replicated.wal import SEGMENT_BYTES, CorruptLog, ReplicationLog
from headwater.server.store import StoreConfig, StreamStore
from headwater.server.store.file.fileio import FileIO

from . import advisories, errors, groupcheckpoint, groupops, groupsnapshot, publish
from .groupconsumers import GroupConsumers
from .peers import peer_id
from .stream import Stream
from .wire import rfc3339

if TYPE_CHECKING:
    from headwater.server.consumers.manager import ConsumerManager

    from .replication import ReplicationManager
    from .streamconfig import StreamConfig

log = logging.getLogger("headwater.server.jetstream.streamgroup")

Answer = Callable[[groupops.Outcome | None], None]
"""What a proposal's outcome goes to once committed here (None: not committed here)."""

COMPACT_EVERY = 1_000
"""Applied entries between two compactions. A memory stream compacts without writing
anything, so this only bounds memory (about twice this many entries in the log) against how
far behind a follower may fall and still catch up from the log instead of a snapshot."""
SNAPSHOTS = "snapshots"
"""The directory, in a replica's log directory, where received snapshots are written."""
CHECKPOINT_EVERY_S = 1.0
CHECKPOINT_BYTES = 64 << 20
"""A file stream's replica takes a checkpoint every second, or once this many bytes of ops
were applied since the last (docs/REPLICATION.md, "Restarting a replica on a file store")."""


def open_log(
    directory: Path, segment_bytes: int = SEGMENT_BYTES
) -> tuple[ReplicationLog, list[Entry], bool]:
    """Open a memory stream replica's log in ``directory`` at start: the log, the entries to
    start the runner with (from base (0, 0)) and whether the replica lost state it had (its
    log was compacted past index 1, so it was deleted: see the module docstring). Snapshots
    left half received by an earlier run are deleted. Blocking: call it in a thread."""
    _drop_snapshots(directory)
    wal, recovered = ReplicationLog.open(directory, segment_bytes=segment_bytes)
    if wal.first_index <= 1:
        return wal, recovered, False
    log.warning(
        "replica log %s starts at %d: the memory stream's state before it is gone; the log "
        "is dropped and the replica catches up from its leader",
        directory,
        wal.first_index,
    )
    wal, recovered = _drop_log(directory, wal, segment_bytes)
    return wal, recovered, True


def _drop_snapshots(directory: Path) -> None:
    snapshots = directory / SNAPSHOTS
    if snapshots.is_dir():
        for part in snapshots.iterdir():
            with contextlib.suppress(OSError):
                part.unlink()


def _drop_log(
    directory: Path, wal: ReplicationLog, segment_bytes: int, io: FileIO | None = None
) -> tuple[ReplicationLog, list[Entry]]:
    """Delete the log in ``directory`` and open it again, empty (blocking)."""
    wal.close()
    _drop_segments(directory)
    return ReplicationLog.open(directory, io, segment_bytes=segment_bytes)


def _drop_segments(directory: Path) -> None:
    # Newest first: a crash in between leaves a log that still starts past 1 (dropped again).
    for seg in sorted(directory.glob("[0-9]" * 20 + ".log"), reverse=True):
        seg.unlink()
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileReplica(NamedTuple):
    """What a file stream's replica starts from (:func:`open_file_replica`)."""

    file: groupcheckpoint.Recovered
    log: ReplicationLog
    recovered: list[Entry]
    """The log's entries after ``base``, for the runner."""
    base: tuple[int, int]
    lost: bool


def open_file_replica(
    directory: Path,
    store_config: Callable[[Path], StoreConfig],
    segment_bytes: int = SEGMENT_BYTES,
    io: FileIO | None = None,
) -> FileReplica:
    """Open a file stream's replica in its group ``directory`` at start: the store cut back
    to its newest checkpoint and opened (:func:`groupcheckpoint.recover`), the log, and the
    runner's start: base (X, epoch) of the checkpoint and the log's entries after X, which
    are applied again. With no checkpoint the store is new and the whole log is applied (the
    log is never compacted past a durable checkpoint, so it starts at 1). A checkpoint the
    log does not continue from (a crash after a snapshot's install rebased the log, before
    the checkpoint naming the installed store) leaves nothing to start from: the store and
    the log are dropped and the replica starts as one that lost its state (``lost``), caught
    up from its leader. So does a replica whose disk was damaged: a log with a bad record
    before good ones (:class:`CorruptLog`), or a store that found a record failing its
    checksum, or cut, below its checkpoint (the cut-back store holds only what the checkpoint
    made durable, so anything wrong there is damage, never a torn tail): its state is not
    what it acknowledged, and serving or leading from it would lose or change acknowledged
    messages. Blocking: call it in a thread."""
    _drop_snapshots(directory)
    try:
        wal, recovered = ReplicationLog.open(directory, io, segment_bytes=segment_bytes)
    except CorruptLog as exc:
        log.error("replica %s: its log is damaged (%s): it starts over", directory, exc)
        _drop_segments(directory)
        wal, _ = ReplicationLog.open(directory, io, segment_bytes=segment_bytes)
        return _start_over(directory, store_config, wal, segment_bytes, io)
    try:
        file = groupcheckpoint.recover(directory, store_config, io)
    except groupcheckpoint.DamagedDedupeLog as exc:
        log.error("replica %s: its duplicate log is damaged (%s): it starts over", directory, exc)
        return _start_over(directory, store_config, wal, segment_bytes, io)
    if not file.store.recovery_report.clean:
        log.error(
            "replica %s: its store is damaged (%s): it starts over",
            directory,
            file.store.recovery_report,
        )
        file.store.close()
        file.checkpoints.close()
        return _start_over(directory, store_config, wal, segment_bytes, io)
    state = file.state
    if state is None and wal.first_index <= 1:
        return FileReplica(file, wal, recovered, (0, 0), False)
    if state is not None and state.index >= wal.first_index - 1:
        entries = wal.after_snapshot(state.index, state.epoch, recovered)
        return FileReplica(file, wal, entries, (state.index, state.epoch), False)
    log.warning(
        "replica %s: its checkpoint (index %s) is before its log (from %d): the store and "
        "the log are dropped and the replica catches up from its leader",
        directory,
        state.index if state is not None else None,
        wal.first_index,
    )
    file.store.close()
    file.checkpoints.close()
    return _start_over(directory, store_config, wal, segment_bytes, io)


def _start_over(
    directory: Path,
    store_config: Callable[[Path], StoreConfig],
    wal: ReplicationLog,
    segment_bytes: int,
    io: FileIO | None,
) -> FileReplica:
    """An empty log and a new store: a replica that lost its state (blocking)."""
    wal, _ = _drop_log(directory, wal, segment_bytes, io)
    file = groupcheckpoint.recover(directory, store_config, io, fresh=True)
    return FileReplica(file, wal, [], (0, 0), True)


class StreamGroup:
    """Replica ``name`` of ``stream``: ``start()`` starts the stream and the runner;
    ``close()`` stops the runner (the stream is its owner's to close)."""

    def __init__(
        self,
        stream: Stream,
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
        snapshot_dir: Path | None = None,
        compact_every: int = COMPACT_EVERY,
        lost_state: bool = False,
        consumers: ConsumerManager | None = None,
        file: groupcheckpoint.Recovered | None = None,
        checkpoint_every_s: float = CHECKPOINT_EVERY_S,
        seed: Path | None = None,
        replication: ReplicationManager | None = None,
    ) -> None:
        """``seed``: a new group's first state (:mod:`.groupseed`), as of ``base``, installed
        by :meth:`start`."""
        if compact_every < 1:
            raise ValueError("compact_every must be positive")
        self.stream = stream
        self.compact_every = compact_every
        self.lost_state = lost_state
        """This replica restarted without the state its log was compacted over: it refuses
        to lead until a snapshot is installed."""
        self.runner = GroupRunner(
            stream.name,
            name,
            my_id,
            log=log,
            transport=transport,
            store=_Campaigns(store, self),
            resolve=resolve,
            recovered=recovered,
            base=base,
            config=config,
            on_apply=self._on_apply,
            on_acknowledge=self._on_answer,
            on_rejected=self._on_rejected,
            on_leadership=self._on_leadership,
            on_send_snapshot=self._on_send_snapshot,
            on_quorum_lost=self._on_quorum_lost,
        )
        snapshots = snapshot_dir if snapshot_dir is not None else Path(tempfile.gettempdir())
        self.transfers = Transfers(
            stream.name,
            my_id,
            transport=transport,
            resolve=resolve,
            open_sink=file_sinks(snapshots),
            on_complete=self._on_snapshot,
            accept=lambda index, epoch: self.runner.snapshot_wanted(index),
        )
        self._snapshot_dir = snapshots
        self._resolve = resolve
        self._sending: dict[str, tuple[asyncio.Task[str], str | None]] = {}
        """Follower name -> the transfer to it in progress, and the server id it goes to."""
        self._installing_at: dict[str, tuple[float, str | None]] = {}
        """Follower name -> until when (monotonic) it is taken to be installing the snapshot
        last sent whole to it, and the server id it went to."""
        self._applied = base[0]
        self._compacted = base[0]
        self._compacted_at = base[0]  # the applied index of the last compaction
        self._installing: asyncio.Task[None] | None = None
        self.snapshots_sent = 0
        self.snapshots_installed = 0
        """Counts, for tests and logs."""
        self.leading = False
        self._taken: bool | None = False
        """Whether the stream takes its messages; None: it does, by a config since replaced."""
        self._taking: asyncio.Task[None] | None = None
        self._outcomes: dict[int, groupops.Outcome] = {}
        """Index -> outcome of the entries of the batch applied last (while leading)."""
        self._last_ts = 0
        self._expiring = False
        self.leader_since = 0
        """When this replica last started leading (ns), for STREAM.INFO."""
        self._epoch_committed = False
        """Leading, with the no-op entry of its epoch applied (see :meth:`current`)."""
        self._caught_up_at = -(1 << 62)
        """When (the core's clock, ms) an apply last reached what the leader said is
        committed: see :meth:`current`."""
        self.consumers = GroupConsumers(stream, consumers)
        """The stream's consumers, as its log has them (and live here while leading)."""
        self._applied_epoch = base[1]
        self.checkpoints = file.checkpoints if file is not None else None
        """A file stream's checkpoints (:mod:`.groupcheckpoint`); None for memory."""
        self.checkpoint_every_s = checkpoint_every_s
        self._checkpointed = -1
        """The index of the newest durable checkpoint (-1: none taken by this process)."""
        self._since_checkpoint = 0
        """Bytes of ops applied since the newest checkpoint's capture."""
        self._checkpoint_due = asyncio.Event()
        self._closing = False
        self._checkpointing: asyncio.Task[None] | None = None
        self.wanted: tuple[str, ...] | None = None
        """The peers the stream's placement wants (None: not told yet)."""
        self.wanted_since = 0
        """When the placement named them (ns)."""
        self.wanted_from = 0
        """The replica count a STREAM.UPDATE changed from (0: not a change of the count)."""
        self._changing: bool | None = None
        """The wanted peers changed while this replica ran, and the group has not reached
        them (every one in the record and in sync) since; None: told them once, at open
        (then only a record that lacks one of them shows a change)."""
        self.on_left: Callable[[], None] = _nothing
        """Called when this replica is neither in the group's record nor wanted."""
        self._seed = seed
        self.replication = replication
        """Runs the stream's mirror or sources while this replica leads (None: never)."""
        if file is not None and file.state is not None:
            self._restore(file)

    async def start(self) -> None:
        self.stream.group = self
        self._snapshot_dir.mkdir(parents=True, exist_ok=True)
        if self._seed is not None:
            await self._plant(self._seed)
        await self.stream.start()
        await self.transfers.start()
        if self.checkpoints is not None:
            self.stream.ids_recorded = []
            # A new store has nothing durable to cut back to until this one (and a restored
            # one starts counting from here).
            await self.checkpoint()
            loop = asyncio.get_running_loop()
            self._checkpointing = loop.create_task(self._checkpoint_loop())
        await self.runner.start()

    def stop_serving(self) -> None:
        """Stop the live consumers at once (synchronously): a replica about to close commits
        nothing more, while a new leader elsewhere may already run the same consumers from
        the log. Two live copies would answer one pull request together, this one from a
        state without the acks confirmed there: a message delivered again after its ack was
        confirmed (found by a rolling restart under load)."""
        self._epoch_committed = False
        self.consumers.deactivate()
        self._replicating(False)

    def _replicating(self, on: bool) -> None:
        """The stream's mirror or sources run on its leader once its epoch is committed
        (what they take goes into the log: docs/REPLICATION.md, "Mirrors and sources")."""
        if self.replication is None:
            return
        if on and self.stream.replication is None:
            self.replication.attach(self.stream)
        elif not on:
            self.replication.detach(self.stream)

    def _reconfigured(self, before: StreamConfig) -> None:
        """The leader applied a new config: its mirror or sources follow it."""
        if self.replication is not None:
            self.replication.reconfigure(self.stream, before.mirror, before.sources)

    async def close(self) -> None:
        self._closing = True
        self.stop_serving()
        await self.runner.close()
        await self.transfers.close()
        if self._installing is not None:
            self._installing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._installing
        if self._taking is not None:
            self._taking.cancel()
        if self._taken is not False:
            with contextlib.suppress(Exception):
                await self.stream.take(False)  # its publishes find another leader
            self._taken = False
        if self._checkpointing is not None:
            self._checkpointing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._checkpointing
        if self.checkpoints is not None:
            # A clean close: the store's own close then names this checkpoint (index.snap).
            if self.runner.failed is None and self.stream.store.failed is None:
                with contextlib.suppress(Exception):
                    await self.checkpoint()
            self.checkpoints.close()

    def current(self) -> bool:
        """Whether this replica is current (``/healthz``): it leads, committed in its epoch
        (its no-op entry is applied) and heard from every in-sync replica within an election
        timeout; or it is in sync, holds its state, heard from its leader within an election
        timeout and applied everything that leader told it is committed."""
        runner = self.runner
        core, record = runner.replica, runner.record
        if runner.is_leader:
            timeout = core.config.election_timeout
            now = core.now or 0
            heard = all(
                now - seen <= timeout for _, in_sync, _, seen in core.followers() if in_sync
            )
            return self._epoch_committed and heard
        if self.lost_state or record is None or core.name not in record.in_sync:
            return False
        if not core.leader or core.leader == core.name or core.now is None:
            return False
        if core.last_heard is None or core.now - core.last_heard > core.config.election_timeout:
            return False
        if core.told_commit > 0 and core.applied >= core.told_commit:
            return True
        # Under load the leader's commit index runs ahead between two applies: current if it
        # was caught up lately (a lagging replica never is).
        return core.now - self._caught_up_at <= core.config.election_timeout

    def may_lead(self) -> bool:
        """Whether this replica may make itself leader now (see the module docstring)."""
        return not self.lost_state

    # The leader's side ----------------------------------------------------------------------

    def publish(self, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        """A message published to the stream's subjects, here while this replica leads."""
        stream = self.stream
        if not stream.active:
            return
        reply = reply if reply and not stream.config.no_ack else ""
        if stream.resources.limits_exceeded(stream.config.storage):
            stream.answer(reply, errors.INSUFFICIENT_RESOURCES)
            return
        op = groupops.Publish(subject, hdr or b"", payload, self.stamp())
        # The token is the reply subject itself: no closure per message (see _on_answer).
        self.runner.propose(groupops.encode(op), reply)

    def propose(self, op: bytes, answer: Answer) -> None:
        """Propose an encoded op; ``answer`` gets its outcome once committed here, or None."""
        self.runner.propose(op, answer)

    def read(self, ready: Callable[[bool], None]) -> None:
        """A read of the stream's state (direct get, STREAM.MSG.GET, STREAM.INFO) through the
        read barrier (docs/REPLICATION.md, "Reads"): ``ready(True)`` once this replica, leading,
        holds everything acknowledged before the call (answer in the call); ``ready(False)``
        when it may not answer (it does not lead, hands over, or was cut off)."""
        self.runner.read(ready)

    async def read_barrier(self) -> bool:
        """:meth:`read` for an API request: whether it may be answered from the state now
        (a replica's state only moves forward, so a later moment is as good as the call's)."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def ready(ok: bool) -> None:
            if not done.done():
                done.set_result(ok)

        self.runner.read(ready)
        return await done

    async def submit(self, op: groupops.Op) -> groupops.Outcome:
        """Propose ``op`` (a request that changes the stream: delete, purge) and wait for its
        outcome once committed; 10008 when it was not committed here (this replica does not
        lead, or stopped)."""
        done: asyncio.Future[groupops.Outcome | None] = asyncio.get_running_loop().create_future()

        def answer(outcome: groupops.Outcome | None) -> None:
            if not done.done():
                done.set_result(outcome)

        self.runner.propose(groupops.encode(op), answer)
        outcome = await done
        if outcome is None:
            raise errors.CLUSTER_NOT_AVAIL.exc()
        return outcome

    def cluster_block(self, cluster_name: str | None) -> dict:
        """STREAM.INFO's ``cluster`` as nats-server 2.15 words it: the leader, since when, and
        each other replica: ``current`` (in sync), ``active`` (ns since it last made progress
        or answered caught up), ``lag`` (entries it lacks, when any) and its ``peer`` id. Only
        the leader knows the replicas; a follower names the leader."""
        block: dict[str, Any] = {"name": cluster_name} if cluster_name else {}
        runner = self.runner
        record = runner.record
        if runner.is_leader:
            block["leader"] = runner.name
            block["leader_since"] = rfc3339(self.leader_since)
        elif record is not None and record.leader:
            block["leader"] = record.leader
        core = runner.replica
        now = core.now or 0
        replicas = [
            _peer_info(name, in_sync, core.last_index - match, now - seen)
            for name, in_sync, match, seen in core.followers()
        ]
        wanted = self.wanted
        if runner.is_leader and record is not None and wanted is not None:
            # A peer wanted and not yet added shows as pending, as on nats-server.
            replicas += [_pending_info(p) for p in wanted if p not in record.peers]
        if replicas:
            block["replicas"] = replicas
        desired = self._desired(cluster_name) if runner.is_leader else None
        if desired is not None:
            block["desired"] = desired
        return block

    def _desired(self, cluster_name: str | None) -> dict[str, Any] | None:
        """nats-server 2.15's ``desired`` block while the peers change: when the wanted peers
        were named, the cluster, the wanted peers, the count changed from (a STREAM.UPDATE
        of ``num_replicas``) and what is under way. None once the group has them all in its
        record and in sync."""
        record, wanted = self.runner.record, self.wanted
        if record is None or wanted is None:
            return None
        adding = [p for p in wanted if p not in record.peers]
        catching_up = [p for p in wanted if p in record.peers and p not in record.in_sync]
        removing = [p for p in record.peers if p not in wanted]
        if self._changing is None:
            changing = bool(adding or removing)
        else:
            changing = self._changing and bool(adding or catching_up or removing)
            self._changing = changing
        if not changing:
            return None
        out: dict[str, Any] = {"created": rfc3339(self.wanted_since)}
        if cluster_name:
            out["name"] = cluster_name
        out["replicas"] = [{"name": p, "peer": peer_id(p)} for p in wanted]
        if self.wanted_from:
            out["origin"] = {"replicas": self.wanted_from}
        if adding:
            status = {"description": f"adding peer {adding[0]}", "type": "membership"}
        elif catching_up:
            status = {
                "description": "waiting for peer to catch up before adding it",
                "type": "catchup",
            }
        else:
            status = {"description": f"removing peer {removing[0]}", "type": "membership"}
        out["status"] = status
        return out

    def expire_due(self) -> None:
        """The stream's expiry timer fired: the leader proposes an expiry at its time."""
        if not self.runner.is_leader or self._expiring:
            return
        self._expiring = True
        self.runner.propose(groupops.encode(groupops.Expire(self.stamp())), self._expired)

    def _expired(self, outcome: groupops.Outcome | None) -> None:
        self._expiring = False

    def stamp(self) -> int:
        """The leader's time for its next op (ns): strictly increasing, so that two
        publishes never share one."""
        self._last_ts = max(time.time_ns(), self._last_ts + 1)
        return self._last_ts

    # The runner's callbacks ------------------------------------------------------------------

    def _on_apply(self, entries: tuple[Entry, ...]) -> None:
        outcomes: dict[int, groupops.Outcome] = {}
        for entry in entries:
            op = groupops.decode(entry.op)
            if op is None:
                if self.runner.is_leader and entry.epoch == self.runner.replica.epoch:
                    # Everything committed before this leader's epoch is applied now: its
                    # consumers may run (groupconsumers: "Changing leader").
                    self._epoch_committed = True
                    self.consumers.activate()
                    self._replicating(True)
                continue
            before = self.stream.config
            if isinstance(op, groupops.ConsumerOp):
                outcome = self.consumers.apply(op)
            else:
                outcome = groupops.apply(self.stream, op)
            if self.runner.is_leader:
                outcomes[entry.index] = outcome
            if isinstance(op, groupops.Expire):
                self.stream._arm_expiry(force=True)
            elif isinstance(op, groupops.UpdateConfig):
                if self._epoch_committed:
                    self._reconfigured(before)  # its mirror or sources follow
                if self._taken:
                    self._taken = None  # leading: take the new config's subjects
                    self._follow()
        self._outcomes = outcomes
        core = self.runner.replica
        if core.now is not None and core.applied >= core.told_commit > 0:
            self._caught_up_at = core.now
        if entries:
            self._applied = entries[-1].index
            self._applied_epoch = entries[-1].epoch
            if self.checkpoints is not None:
                # A file stream compacts at its checkpoints only (never past a durable one).
                self._since_checkpoint += sum(len(e.op) for e in entries)
                if self._since_checkpoint >= CHECKPOINT_BYTES:
                    self._checkpoint_due.set()
            elif self._applied - self._compacted_at >= self.compact_every:
                self._compact(self._applied)

    def _compact(self, applied: int) -> None:
        """Drop the entries up to ``applied``, which the stream's state holds (a memory
        stream's live state; a file stream's durable checkpoint), from the runner's log and
        the disk's (the runner's compaction runs right after the Apply being processed)."""
        self._compacted_at = applied
        upto = applied
        followers = self.runner.replica.followers()  # empty unless leading
        if followers:
            # A follower close behind gets entries, not a whole snapshot.
            lowest = min(match for _, _, match, _ in followers)
            upto = max(min(applied, lowest), applied - self.compact_every)
        if upto <= self._compacted:
            return
        self.runner.compact(upto)
        compact = getattr(self.runner.log, "compact", None)
        if compact is not None:
            compact(upto)
        self._compacted = upto

    # Checkpoints (file streams) -----------------------------------------------------------

    def _restore(self, file: groupcheckpoint.Recovered) -> None:
        """Take the small state of the checkpoint the store was cut back to (before start)."""
        state = file.state
        assert state is not None
        stream = self.stream
        if state.config and state.config != groupops.encode_config(stream.config):
            # The log had a config update by then: the entries after it go by that config.
            stream.reconfigure(groupops.decode_config(state.config))
        stream.restore_state(file.dedupe, state.lseq, state.lmsgid, state.markers)
        self.consumers.install(state.consumers)

    async def checkpoint(self) -> None:
        """A file stream's checkpoint as of what it applied now (:mod:`.groupcheckpoint`),
        then the logs compacted up to it. A failure stops the replica, as a failed apply
        does. A replica that lost its state takes none before a snapshot is installed."""
        checkpoints = self.checkpoints
        if checkpoints is None or self.lost_state:
            return
        self._since_checkpoint = 0
        try:
            taken = await checkpoints.take(
                self.stream,
                self._applied,
                self._applied_epoch,
                self.consumers.capture,
                groupops.encode_config(self.stream.config),
            )
        except Exception as exc:
            log.error("stream %r: checkpoint failed: %s", self.stream.name, exc)
            self.runner._fail(exc)
            raise
        self._checkpointed = max(self._checkpointed, taken.index)
        if not self._closing and taken.index > self._compacted:
            self._compact(taken.index)

    async def _checkpoint_loop(self) -> None:
        """Every ``checkpoint_every_s`` with something applied (or sooner, by bytes)."""
        while self.runner.failed is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._checkpoint_due.wait(), self.checkpoint_every_s)
            self._checkpoint_due.clear()
            if self._applied == self._checkpointed and not self._since_checkpoint:
                continue
            try:
                await self.checkpoint()
            except Exception:
                return  # the replica stopped (logged)

    # Snapshots ----------------------------------------------------------------------------

    def _on_send_snapshot(self, to: str, index: int, epoch: int) -> None:
        """The runner wants ``to`` to have the state as of ``index``, just applied: captured
        now, sent as it is read (one transfer per follower at a time; the core asks again)."""
        running = self._sending.get(to)
        if running is not None and not running[0].done():
            if running[1] != self._resolve(to):
                # The follower's server restarted under a new id: that transfer goes nowhere
                # (it would stall for the transfer's stall_s); the next ask starts anew.
                running[0].cancel()
            return
        until, server = self._installing_at.get(to, (0.0, None))
        if time.monotonic() < until and server == self._resolve(to):
            # One went whole a moment ago and is being installed there: a second one now
            # would cost this server a whole read of the stream, and be dropped there.
            return
        producer = groupsnapshot.SnapshotProducer(
            self.stream, index, epoch, consumers=self.consumers.capture()
        )
        task = self.transfers.send(to, index, epoch, producer.chunks())
        if task is None:
            producer.close()
            return
        self._sending[to] = (task, self._resolve(to))
        self.snapshots_sent += 1
        began = time.monotonic()

        def done(task: asyncio.Task[str]) -> None:
            producer.close()
            if self._sending.get(to, (None,))[0] is task:
                del self._sending[to]
            if not task.cancelled():
                outcome = task.result()
                if outcome == COMPLETE:
                    # Installing takes about as long as producing and sending did.
                    now = time.monotonic()
                    self._installing_at[to] = (now + 2 * (now - began), self._resolve(to))
                log.info(
                    "stream %r: snapshot at %d to %s: %s (%d messages, %d bytes)",
                    self.stream.name,
                    index,
                    to,
                    outcome,
                    producer.sent_messages,
                    producer.bytes,
                )

        task.add_done_callback(done)

    def _on_snapshot(self, index: int, epoch: int, sink: FileSink) -> None:
        """A snapshot arrived whole: install it in a task (the transfer takes one at a time).
        One arriving while another installs is dropped, even a later one: the leader sends
        again every ``snapshot_interval`` while this replica lacks its state, and a large
        install takes longer than that, so cancelling for each newcomer would never finish
        one. After the install the log (or the next snapshot) goes on from its index."""
        if self._installing is not None and not self._installing.done():
            log.debug("stream %r: snapshot at %d dropped: one installs", self.stream.name, index)
            # Off the loop (a large file's blocks are freed by the unlink); the executor runs
            # it whether or not anyone awaits it.
            asyncio.get_running_loop().run_in_executor(None, _unlink, sink.path)
            return
        task = asyncio.get_running_loop().create_task(self._install(index, epoch, sink.path))
        self._installing = task

    async def _install(self, index: int, epoch: int, path: Path) -> None:
        stream = self.stream
        try:
            if not self.runner.snapshot_wanted(index):
                return
            checkpoints = self.checkpoints
            directory = checkpoints.next_store_dir() if checkpoints is not None else None
            installed = await groupsnapshot.install(
                stream, path, index=index, epoch=epoch, directory=directory, replica=True
            )
            if not self.runner.snapshot_wanted(index):  # applied past it meanwhile, or leads
                await installed.discard()
                return
            # One synchronous step: no entry is applied between the swap and the core's move.
            old = installed.swap_into(stream)
            self.consumers.install(installed.state.consumers)
            self.runner.install_snapshot(index, epoch)
            self._applied = self._compacted = self._compacted_at = index
            self._applied_epoch = epoch
            self.lost_state = False
            self.snapshots_installed += 1
            log.info("stream %r: snapshot at %d (epoch %d) installed", stream.name, index, epoch)
            await self._retire(old, directory)
        except groupsnapshot.SnapshotError as exc:
            log.warning("stream %r: snapshot at %d not installed: %s", stream.name, index, exc)
        except Exception:
            log.exception("stream %r: snapshot at %d not installed", stream.name, index)
        finally:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(path.unlink, True)

    async def _retire(self, old: StreamStore, directory: Path | None) -> None:
        """The store a snapshot (or seed) replaced: closed, or for a file stream deleted once a
        checkpoint names the new one in ``directory`` (a restart must find the new store)."""
        checkpoints = self.checkpoints
        if checkpoints is None:
            await old.aclose()
            return
        assert directory is not None
        checkpoints.swapped(directory)
        self.stream.ids_recorded = []
        await self.checkpoint()
        await old.adelete()
        await checkpoints.drop_stores_but_current()

    async def _plant(self, seed: Path) -> None:
        """A new group's first state, before its runner starts (whose base is the seed's
        entry already). A file stream's seed is deleted once checkpointed; a memory stream
        keeps it, so that a restart before its log holds an entry starts from it again
        (:func:`.replicas.Replicas._open` plants a seed only in a replica with no log)."""
        checkpoints = self.checkpoints
        directory = checkpoints.next_store_dir() if checkpoints is not None else None
        installed = await groupsnapshot.install(
            self.stream,
            seed,
            index=self._applied,
            epoch=self._applied_epoch,
            directory=directory,
            replica=True,
        )
        old = installed.swap_into(self.stream)
        self.consumers.install(installed.state.consumers)
        await self._retire(old, directory)
        if checkpoints is not None:
            await asyncio.to_thread(seed.unlink, True)
        self._seed = None
        log.info("stream %r: its group starts from the stream's state", self.stream.name)

    def _on_answer(self, answer: Answer | str, index: int) -> None:
        outcome = self._outcomes.pop(index, None)
        if outcome is None:
            # Acknowledged right after its Apply (the runner's order): never missing.
            log.error("stream %r: no outcome for entry %d", self.stream.name, index)
        if type(answer) is str:
            # A client's publish (`publish`): its ack or error to its reply subject, if any.
            if answer and isinstance(outcome, publish.Stored | errors.ApiError):
                self.stream.answer(answer, outcome)
            return
        answer(outcome)

    def _on_rejected(self, answer: Answer | str, leader: str | None) -> None:
        # Not committed here: a publisher (a str token) gets nothing, times out and publishes
        # again (its id deduplicates).
        if type(answer) is not str:
            answer(None)

    def set_wanted(self, peers: tuple[str, ...], since: int = 0, origin: int = 0) -> None:
        """The peers the stream's placement wants now (since ``since``; ``origin``: the
        count a STREAM.UPDATE changed from): the leader changes the group toward them; a
        replica not wanted goes once the record no longer lists it."""
        if self.wanted is not None and set(peers) != set(self.wanted):
            self._changing = True
        self.wanted, self.wanted_since, self.wanted_from = peers, since, origin
        if self.leading:
            self.runner.change_peers(peers)
        self.seen_record(self.runner.record)

    def seen_record(self, record: GroupRecord | None) -> None:
        """A record of the group (the watch's): is this replica out of it, and unwanted?"""
        me = self.runner.name
        if record is None or self.wanted is None or me in record.peers or me in self.wanted:
            return
        self.on_left()

    def _on_leadership(self, leading: bool, epoch: int) -> None:
        self.leading = leading
        if not leading:
            self.stop_serving()
        if leading:
            if self.wanted is not None:
                self.runner.change_peers(self.wanted)
            self._advise("LEADER_ELECTED")
            self.leader_since = time.time_ns()
            # Times never go back across leaders, whatever this server's clock says: a
            # message's time is at least its predecessor's (what the store would do anyway).
            self._last_ts = max(self._last_ts, self.stream.state().last_ts)
        self._follow()

    def _follow(self) -> None:
        if self._taking is None or self._taking.done():
            loop = asyncio.get_running_loop()
            self._taking = loop.create_task(self._follow_leadership())

    # Leadership transfer and the leader advisories -----------------------------------------

    def step_down(self, preferred: str | None = None) -> None:
        """Hand this replica's leadership to an in-sync replica, ``preferred`` if it is one
        (STREAM.LEADER.STEPDOWN, lame duck): the core's rule 8."""
        self.runner.step_down(preferred)

    def _on_quorum_lost(self) -> None:
        self._advise("QUORUM_LOST")

    def _advise(self, kind: str) -> None:
        """``$JS.EVENT.ADVISORY.STREAM.<kind>.<stream>`` with every replica's PeerInfo."""
        stream, runner = self.stream, self.runner
        record = runner.record
        if record is None:
            return
        core = runner.replica
        now = core.now or 0
        # A new leader has heard from nobody yet in its epoch: the record says who is in sync.
        followers = core.followers() if kind != "LEADER_ELECTED" else []
        known = {name: (in_sync, match, seen) for name, in_sync, match, seen in followers}
        replicas = []
        for name in record.peers:
            in_sync, match, seen = known.get(name, (name in record.in_sync, core.last_index, now))
            replicas.append(_peer_info(name, in_sync, core.last_index - match, now - seen))
        domain = stream.domain or ""
        if kind == "LEADER_ELECTED":
            body = advisories.stream_leader_elected_body(stream.name, runner.name, replicas, domain)
        else:
            body = advisories.stream_quorum_lost_body(stream.name, replicas, domain)
        stream.client.publish(f"{advisories.STREAM_ADVISORY}.{kind}.{stream.name}", body)

    async def _follow_leadership(self) -> None:
        """Subscribe or unsubscribe until the stream takes messages exactly while leading
        (leadership may change again while a change is under way)."""
        while self._taken != self.leading:
            leading = self.leading
            await self.stream.take(leading)
            self._taken = leading


def _peer_info(name: str, in_sync: bool, lag: int, idle_ms: int) -> dict[str, Any]:
    """One replica as nats-server's PeerInfo words it (a ``cluster`` block's ``replicas``,
    the leader advisories): ``current`` (in sync, lacking nothing), ``active`` (ns since it
    last made progress or answered caught up), ``lag`` (entries it lacks, when any) and its
    ``peer`` id."""
    lag = max(lag, 0)
    info: dict[str, Any] = {
        "name": name,
        "current": in_sync and lag == 0,
        "active": max(idle_ms, 0) * 1_000_000,
    }
    if lag:
        info["lag"] = lag
    info["peer"] = peer_id(name)
    return info


def _pending_info(name: str) -> dict[str, Any]:
    """A peer wanted and not yet in the group (nats-server's ``pending`` replica)."""
    return {"name": name, "current": False, "active": 0, "peer": peer_id(name), "pending": True}


class _Campaigns:
    """The runner's :class:`GroupStore`, but for the swaps that would make this replica
    leader while it may not (:meth:`StreamGroup.may_lead`): those are not made, and the core
    sees an unknown outcome (it keeps its fence and may ask again)."""

    def __init__(self, store: GroupStore, group: StreamGroup) -> None:
        self.store = store
        self.group = group
        self._warned = False

    async def watch(self, stream: str) -> AsyncGenerator[GroupRecord, None]:
        records = self.store.watch(stream)
        try:
            async for record in records:
                yield record  # the runner takes it in first
                self.group.seen_record(record)
        finally:
            await records.aclose()

    async def compare_and_swap(
        self, stream: str, new: GroupRecord, expected_revision: int
    ) -> tuple[bool, GroupRecord | None]:
        group = self.group
        if new.leader == group.runner.name and not group.runner.is_leader and not group.may_lead():
            if not self._warned:
                self._warned = True
                log.warning(
                    "stream %r: replica %s lost its state in a restart: it does not lead "
                    "before it caught up",
                    stream,
                    group.runner.name,
                )
            return False, None
        return await self.store.compare_and_swap(stream, new, expected_revision)


def _nothing() -> None:
    return None


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
