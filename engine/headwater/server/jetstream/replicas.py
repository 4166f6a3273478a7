"""This server's replicas of the cluster's replicated streams (``num_replicas`` > 1): opened
and removed as the cluster's metadata says (docs/REPLICATION.md, "The server side").

A replicated stream's placement in etcd (``streams/<name>``) names its peers; the server that
handles its STREAM.CREATE (the first of them, which the placing server sent the request to)
validates the config, writes it into the placement, writes the group record (``groups/
<name>``: epoch 1, itself leading, every peer in sync) and opens its own replica. Each other
peer opens its replica when the placement with the config reaches it (the watch, or its load
at start). A replica is a :class:`StreamGroup` over a :class:`Stream` registered in the
service like any other, so the stream's requests are answered from it where it leads; its
log is a :class:`ReplicationLog` in ``<store_dir>/jetstream/groups/<name>/`` (and the
snapshots it receives are written in its ``snapshots/``). Deleting the placement removes
every replica and its log.

**Memory streams**: each replica compacts its log every :data:`streamgroup.COMPACT_EVERY`
applied entries; a restarted replica starts from an empty stream and applies its log again
if it still starts at index 1, else drops it and catches up from the leader by a snapshot
(:func:`streamgroup.open_log`; the module docstring of :mod:`.streamgroup` says why).

**File streams**: the replica's :class:`FileStore` (replica mode, built here directly:
``open_store`` knows nothing of it) lives in ``<store_dir>/jetstream/groups/<name>/
store.<n>/``, beside its log, its ``checkpoint`` file and its duplicate log, not in the R1
streams' directory (``$G/streams``): the service recovers every stream there as an R1 stream
at start (with a ``meta.inf``), which a replica is not (its config comes from the placement,
and it must be cut back to its checkpoint before it is opened); one directory per group also
makes the removal one ``rmtree`` and keeps a snapshot's new store (``store.<n+1>``) next to
the one it replaces. At start :func:`streamgroup.open_file_replica` cuts the store back to
its newest checkpoint and gives the runner's base and the log after it
(:mod:`.groupcheckpoint`); the group checkpoints every second and compacts up to there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from headwater.server.consumers import config as ccfg
from headwater.server.meta.client import MetaError
from headwater.server.replicated.groupstore import GroupStore
from headwater.server.replicated.record import GroupRecord
from headwater.server.replicated.wal import ReplicationLog

from . import errors, groupcheckpoint, groupseed, layout
from .registry import NameTaken
from .stream import Stream
from .streamconfig import StreamConfig
from .streamgroup import SNAPSHOTS, StreamGroup, open_file_replica, open_log

if TYPE_CHECKING:
    from .clustered import ClusteredJetStream, Placement
    from .service import JetStreamService

log = logging.getLogger("headwater.server")

LEADING_TIMEOUT_S = 5.0
"""How long a STREAM.CREATE waits for its new group to lead before 10008."""
RECORD_SWAP_TIMEOUT_S = 1.0
"""How long one swap of a group record may wait on etcd. When etcd's own leader died with a
server, a member forwards a swap to it until etcd notices (about a second), then answers
nothing for seconds: a swap that gets no answer soon is given up (its outcome unknown, which
the core expects) and proposed again, and the one after etcd's election goes through. A
stream's failover waits on this."""


HAND_OVER_TIMEOUT_S = 5.0
"""How long a server entering lame duck mode waits for its streams' leadership to move."""


def groups_dir(root: Path) -> Path:
    """Where this server's replication logs live, one directory per replicated stream."""
    return root / "groups"


class Replicas:
    """The replicated streams this server holds a replica of (name -> its group)."""

    def __init__(self, service: JetStreamService, clustered: ClusteredJetStream) -> None:
        self.service = service
        self.clustered = clustered
        self.groups: dict[str, StreamGroup] = {}
        self._logs: dict[str, ReplicationLog] = {}
        self._work: dict[str, asyncio.Task[None]] = {}
        """The opening or removal in progress per stream (one at a time)."""

    # What the metadata says ---------------------------------------------------------------

    def follow(self, name: str, placed: Placement) -> None:
        """The placement of ``name`` is (now) this: open a replica here if this server is a
        peer and the config is known (its creating server writes it after the peers); tell
        the replica here the peers wanted (they change by STREAM.UPDATE and PEER.REMOVE)."""
        group = self.groups.get(name)
        if group is not None:
            group.set_wanted(placed.peers, placed.created, placed.origin)
            return
        config = placed.config
        if config is None or self.clustered.name not in placed.peers:
            return
        if name in self.service.replicating:
            return  # found half-converted at start: settle_recovered opens it
        if name in self._work:
            return
        self._start(name, self._open(config))

    def _left(self, name: str) -> None:
        """The replica of ``name`` here is out of its group's record and not wanted (its
        :attr:`StreamGroup.on_left`): delete it once etcd confirms both."""
        if name in self.groups and name not in self._work:
            self._start(name, self._remove_if_gone(name))

    async def _remove_if_gone(self, name: str) -> None:
        """Delete the replica of ``name`` if etcd, read now, neither lists this server in the
        group's record nor wants it (a watch may lag: a peer added again since keeps it)."""
        meta = self.clustered.meta
        assert meta is not None
        me = self.clustered.name
        try:
            record = await GroupStore(meta).read(name)
            placed = await self.clustered.read_placement(name, refresh=True)
        except Exception as exc:  # etcd out of reach: the next record seen asks again
            log.warning("JetStream cluster: replica of %r not removed yet: %s", name, exc)
            return
        if record is not None and me in record.peers:
            return
        if placed is not None and me in placed.peers:
            return
        log.info("JetStream cluster: replica of %r is no longer a peer here: deleted", name)
        await self.remove(name, advise=False)

    def forget(self, name: str) -> None:
        """The placement of ``name`` is gone: remove the replica here, and its log (after
        the opening in progress, if any)."""
        pending = self._work.get(name)
        if name in self.groups or pending is not None:
            self._start(name, self._remove_after(pending, name))

    async def _remove_after(self, pending: asyncio.Task[None] | None, name: str) -> None:
        if pending is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await pending
        await self.remove(name)

    def _start(self, name: str, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._work[name] = task

        def done(_: asyncio.Task[None]) -> None:
            if self._work.get(name) is task:
                del self._work[name]

        task.add_done_callback(done)
        return task

    # Creating -----------------------------------------------------------------------------

    async def create(self, cfg: StreamConfig, peers: tuple[str, ...], placed: bytes) -> Stream:
        """STREAM.CREATE here, as the first of ``peers``: the config into the placement
        (``placed``, its value with the config), the group record, this replica; then wait
        until it leads (10008 when it does not soon)."""
        meta = self.clustered.meta
        assert meta is not None
        name = cfg.name
        record = GroupRecord(peers, 1, self.clustered.name, frozenset(peers))
        try:
            await meta.put(f"streams/{name}", placed)
            await GroupStore(meta).create(name, record)
        except Exception as exc:
            log.error("JetStream cluster: replicated stream %r not set up: %s", name, exc)
            raise errors.CLUSTER_NOT_AVAIL.exc() from None
        if name not in self.groups and name not in self._work:
            self._start(name, self._open(cfg))
        return await self._leading(name)

    async def _leading(self, name: str) -> Stream:
        """The replica of ``name`` here once it leads (10008 when it does not soon)."""
        deadline = time.monotonic() + LEADING_TIMEOUT_S
        while time.monotonic() < deadline:
            group = self.groups.get(name)
            if group is not None and group.runner.is_leader:
                return group.stream
            if group is None and name not in self._work:
                break  # opening failed (logged)
            await asyncio.sleep(0.02)
        raise errors.CLUSTER_NOT_AVAIL.exc()

    async def _open(self, cfg: StreamConfig) -> None:
        svc = self.service
        name = cfg.name
        try:
            claim = svc.streams.claim(name, "being replicated")
        except NameTaken as exc:
            log.error("JetStream cluster: no replica of %r here: %s", name, exc)
            return
        with claim:
            try:
                directory = groups_dir(svc.root) / name
                file: groupcheckpoint.Recovered | None = None
                base = (0, 0)
                if cfg.storage == "file":
                    opened = await asyncio.to_thread(
                        open_file_replica, directory, lambda d: svc._store_config(cfg, d)
                    )
                    file, wal, recovered, base, lost = opened
                    stream = svc.new_stream(cfg, time.time_ns(), store=file.store)
                else:
                    wal, recovered, lost = await asyncio.to_thread(open_log, directory)
                    stream = svc.new_stream(cfg, time.time_ns())
                seed_path = directory / groupseed.SEED
                seed: Path | None = None
                if base == (0, 0) and not recovered and not lost and seed_path.exists():
                    seed, base = seed_path, groupseed.BASE  # a new group from a plain stream
                    wal.rebase(*base)
                elif file is not None:  # planted and checkpointed before a restart
                    await asyncio.to_thread(seed_path.unlink, True)
                assert svc.client is not None and self.clustered.meta is not None
                group = StreamGroup(
                    stream,
                    self.clustered.name,
                    svc.server.server_id,
                    log=wal,
                    transport=svc.client,
                    store=GroupStore(self.clustered.meta, RECORD_SWAP_TIMEOUT_S),
                    resolve=self.clustered.server_id,
                    recovered=recovered,
                    base=base,
                    snapshot_dir=directory / SNAPSHOTS,
                    lost_state=lost,
                    consumers=svc.consumers,
                    file=file,
                    seed=seed,
                    replication=svc.replication,
                )
                placed = self.clustered.placements.get(name)
                if placed is not None and placed.replicated:
                    group.set_wanted(placed.peers, placed.created, placed.origin)
                group.on_left = lambda: self._left(name)
                claim.install(stream)
                await group.start()
            except Exception:
                log.exception("JetStream cluster: replica of %r could not open", name)
                return
        self.groups[name] = group
        self._logs[name] = wal
        log.info(
            "JetStream cluster: replica of %r open (%d entries in its log)", name, len(recovered)
        )

    # A plain stream becoming a group (groupseed) ---------------------------------------------

    async def convert(self, stream: Stream, cfg: StreamConfig, peers: tuple[str, ...]) -> Stream:
        """STREAM.UPDATE raising ``num_replicas`` of the plain stream ``stream``, placed here:
        it becomes a group of one replica here wanting ``peers`` (this server first), from
        its own state (:mod:`.groupseed`). Returns the replica once it leads, as a create."""
        name = stream.name
        if name in self._work:
            raise errors.CLUSTER_NOT_AVAIL.exc()
        task = self._start(name, self._convert(stream, cfg, peers))
        await task
        return await self._leading(name)

    async def _convert(self, stream: Stream, cfg: StreamConfig, peers: tuple[str, ...]) -> None:
        svc, clustered = self.service, self.clustered
        name = stream.name
        try:
            claim, stream = svc.streams.claim_live(name, "being replicated")
        except (NameTaken, KeyError):
            raise errors.CLUSTER_NOT_AVAIL.exc() from None
        directory = groups_dir(svc.root) / name
        with claim:
            consumers = list(stream.consumers.values())
            svc.replication.detach(stream)  # its mirror or sources go on from the group
            await stream.take(False)
            await svc.consumers.close_stream(stream, deleted=False)
            rows = groupseed.consumer_rows(consumers)
            swapped: bool | None = False
            try:
                await stream.durable()
                await asyncio.to_thread(_fresh_dir, directory)
                await groupseed.write(stream, cfg, rows, directory / groupseed.SEED)
                if stream.directory is not None:
                    await groupseed.mark(stream.directory)
                groupseed.fault_point(groupseed.BEFORE_SWAP)
                me = clustered.name
                record = GroupRecord((me,), groupseed.BASE[1], me, frozenset({me}))
                swapped = await clustered.swap_to_group(name, peers, cfg, record)
            except Exception as exc:
                log.error("JetStream cluster: stream %r not replicated: %s", name, exc)
            if swapped is False:
                await self._stay_plain(stream, rows, directory)
                claim.install(stream)
                raise errors.CLUSTER_NOT_AVAIL.exc()
            if swapped is None:
                # Whether etcd took it is unknown: the stream stays closed, its marker on disk,
                # until the placement can be read (the server's start does the same).
                self._spawn_settle(stream, rows, directory)
                raise errors.CLUSTER_NOT_AVAIL.exc()
            groupseed.fault_point(groupseed.AFTER_SWAP)
            await self._drop_plain(stream)
        await self._open(cfg)

    async def _stay_plain(self, stream: Stream, rows: list[list[Any]], directory: Path) -> None:
        """Undo a conversion that etcd did not take: the stream takes its messages again and
        its consumers run from the states just written."""
        svc = self.service
        await asyncio.to_thread(shutil.rmtree, directory, True)
        if stream.directory is not None and groupseed.marked(stream.directory):
            await groupseed.unmark(stream.directory)
        for name, config, created, state in rows:
            cfg = ccfg.from_stored(config)
            await svc.consumers.restore(stream, name, cfg, created, orjson.dumps(state))
        await stream.take(True)
        svc.replication.attach(stream)

    async def _drop_plain(self, stream: Stream) -> None:
        """The plain stream, replaced by its group: its files go (no advisory: it lives on)."""
        await stream.delete()
        if stream.directory is not None:
            await asyncio.to_thread(layout.remove_stream_dir, stream.directory)

    def _spawn_settle(self, stream: Stream, rows: list[list[Any]], directory: Path) -> None:
        """Settle a conversion whose outcome is unknown, in the background (its name's work:
        the placement's watch opens no replica meanwhile)."""

        async def settle() -> None:
            placed = await self._placement_when_known(stream.name)
            if placed is not None and placed.replicated:
                await self._drop_plain(stream)
                await self._open_if_peer(stream.name, placed)
                return
            try:
                claim = self.service.streams.claim(stream.name, "being recovered")
            except NameTaken:
                return
            with claim:
                await self._stay_plain(stream, rows, directory)
                claim.install(stream)

        self._start(stream.name, settle())

    async def settle_recovered(self) -> None:
        """The streams the service found half-converted at start (their marker on disk):
        the placement decides, now that it can be read."""
        held = self.service.replicating
        for name in list(held):
            item = held.pop(name)
            self._start(name, self._settle_recovered(item))

    async def _settle_recovered(self, item: layout.StoredStream) -> None:
        name = item.config.name
        placed = await self._placement_when_known(name)
        if placed is not None and placed.replicated:
            log.info("JetStream cluster: stream %r became a replicated group", name)
            await asyncio.to_thread(layout.remove_stream_dir, item.directory)
            await self._open_if_peer(name, placed)
            return
        log.info("JetStream cluster: stream %r stays on one server", name)
        await asyncio.to_thread(shutil.rmtree, groups_dir(self.service.root) / name, True)
        await groupseed.unmark(item.directory)
        await self.service.recover_stream(item)

    async def _open_if_peer(self, name: str, placed: Placement) -> None:
        if placed.config is not None and self.clustered.name in placed.peers:
            await self._open(placed.config)

    async def _placement_when_known(self, name: str) -> Placement | None:
        """The stream's placement as etcd has it, read again until etcd answers."""
        while True:
            try:
                return await self.clustered.read_placement(name, refresh=True)
            except MetaError as exc:
                log.warning("JetStream cluster: placement of %r not read yet: %s", name, exc)
                await asyncio.sleep(1.0)

    # Removing -----------------------------------------------------------------------------

    async def remove(self, name: str, advise: bool = True) -> None:
        """Stop the replica of ``name`` and delete it here: its stream and its log. With
        ``advise`` (the stream is deleted, not only this replica), the delete advisory."""
        group = self.groups.pop(name, None)
        if group is None:
            return
        await self._close(name, group)
        with contextlib.suppress(errors.ApiErrorException):
            await self.service.delete_stream(name, advise=advise)
        directory = groups_dir(self.service.root) / name
        await asyncio.to_thread(shutil.rmtree, directory, True)

    async def _close(self, name: str, group: StreamGroup) -> None:
        await group.close()
        wal = self._logs.pop(name, None)
        if wal is not None:
            await wal.aclose()

    async def hand_over(self, timeout: float = HAND_OVER_TIMEOUT_S) -> int:
        """Lame duck: every group led here hands its leadership to an in-sync replica (the
        core's step-down), so that a rolling restart moves leadership away before the process
        exits rather than leaving each stream leaderless for an election timeout. Waits,
        bounded, until none is led here; returns how many still are."""
        leading = [g for g in self.groups.values() if g.runner.is_leader and _has_others(g)]
        for group in leading:
            group.step_down()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = [g for g in leading if g.runner.is_leader]
            if not left:
                return 0
            for group in left:
                if group.runner.transferring_to is None:
                    group.step_down()  # the last attempt timed out: again, while time remains
            await asyncio.sleep(0.05)
        left = [g.stream.name for g in leading if g.runner.is_leader]
        if left:
            log.warning("lame duck: still leading %s after %.1f s", ", ".join(left), timeout)
        return len(left)

    async def close(self) -> None:
        """Server shutdown: every replica stops serving at once (its consumers), then every
        runner stops and its log closes (the streams are the service's to close)."""
        for group in self.groups.values():
            group.stop_serving()
        for task in list(self._work.values()):
            task.cancel()
        for name, group in list(self.groups.items()):
            with contextlib.suppress(Exception):
                await self._close(name, group)
        self.groups.clear()


def _fresh_dir(directory: Path) -> None:
    """``directory`` empty (a failed conversion's leftovers go)."""
    shutil.rmtree(directory, True)
    directory.mkdir(parents=True)


def _has_others(group: StreamGroup) -> bool:
    """Whether ``group`` has another replica in sync to hand its leadership to (a group
    scaled down to one replica has none: lame duck does not wait for it)."""
    record = group.runner.record
    return record is not None and bool(record.in_sync - {group.runner.name})
