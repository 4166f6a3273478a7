"""A plain (R1) stream's state as the first state of the replicated group it becomes
(docs/REPLICATION.md, "Growing a stream of one replica").

STREAM.UPDATE raising ``num_replicas`` of a stream created with one replica makes it a
group of one replica on its server, which then grows as any group does (the core's rule 10).
The group's first state is the stream's, its consumers included, written as a **seed**: a
replica snapshot (:mod:`.groupsnapshot`'s format) as of entry 1 of epoch 1 (:data:`BASE`).
The group's log starts after it, so a new replica, empty at entry 0, needs an entry no log
holds: its leader sends it a snapshot, as to any replica that fell behind.

The order, each step durable before the next (:meth:`.replicas.Replicas.convert`):

1. the stream stops: no publishes, no API requests (its name is claimed), no consumers
   (their last states written); its store is made durable;
2. the seed is written in the group's directory (fsynced, then renamed into place), and a
   :data:`MARKER` file in the plain stream's directory;
3. one etcd transaction swaps the stream's placement to the group's peers and writes the
   group's first record (itself leading, alone in sync): the change is made, or not, here;
4. the plain stream's directory is deleted and the replica opens from the seed (its first
   checkpoint taken, the seed deleted).

A failure before 3 reopens the plain stream from its directory, as a restart would (its
ephemeral consumers are gone). A server that restarts between 2 and 4 finds the marker: the
service keeps that stream closed (:attr:`.service.JetStreamService.replicating`) until the
placement is read; replicated there, the directory is deleted and the seed opens; placed on
one server still, the marker and the seed are deleted and the stream opens as it was.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from headwater.server.consumers import config as ccfg
from headwater.server.consumers import state as cstate
from headwater.server.store.file.fileio import default_io

from .groupsnapshot import SnapshotProducer

if TYPE_CHECKING:
    from headwater.server.consumers.consumer import Consumer

    from .stream import Stream
    from .streamconfig import StreamConfig

log = logging.getLogger("headwater.server")

SEED = "seed"
"""The seed's file in the group's directory."""
MARKER = "replicating"
"""The file in a plain stream's directory that says it is becoming a group."""
BASE = (1, 1)
"""The entry (index, epoch) a seed is the state as of."""
FAULT_ENV = "HEADWATER_FAULT_CONVERT"
BEFORE_SWAP = "before-swap"
AFTER_SWAP = "after-swap"


def fault_point(point: str) -> None:
    """A test hook for the fault suite: with ``HEADWATER_FAULT_CONVERT=<point>`` the process
    kills itself (SIGKILL) at that step of a conversion: :data:`BEFORE_SWAP` (the seed and
    the marker written), :data:`AFTER_SWAP` (etcd took it; the plain stream still on
    disk)."""
    if os.environ.get(FAULT_ENV) == point:
        log.warning("%s=%s: killed at this step of a conversion", FAULT_ENV, point)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)


def consumer_rows(consumers: list[Consumer]) -> list[list[Any]]:
    """Stopped consumers as a group's consumer records (``GroupConsumers.capture``'s rows:
    name, config as ``meta.inf`` keeps it, creation time, delivery state as ``o.json``)."""
    return [
        [
            c.name,
            ccfg.stored_json(c.config),
            c.created_ns,
            orjson.loads(cstate.snapshot(c)),
        ]
        for c in sorted(consumers, key=lambda c: c.name)
    ]


async def write(stream: Stream, config: StreamConfig, rows: list[list[Any]], path: Path) -> None:
    """``stream``'s state (stopped: nothing changes it meanwhile) with ``rows`` and
    ``config`` (the new one), as the seed at ``path``: written beside it, fsynced, renamed
    into place and its directory fsynced."""
    io = default_io()
    producer = SnapshotProducer(stream, *BASE, consumers=rows, config=config)
    tmp = str(path) + ".tmp"
    fd = await asyncio.to_thread(io.open_rw, tmp, True)
    try:
        offset = 0
        async for chunk in producer.chunks():
            await asyncio.to_thread(io.pwrite, fd, chunk, offset)
            offset += len(chunk)
        await asyncio.to_thread(io.fsync, fd)
    finally:
        io.close(fd)
    await asyncio.to_thread(io.replace, tmp, str(path))
    await asyncio.to_thread(io.fsync_dir, os.path.dirname(path))


async def mark(directory: Path) -> None:
    """The plain stream in ``directory`` is becoming a group (durably)."""
    io = default_io()
    await asyncio.to_thread(io.write_atomic, str(directory / MARKER), b"")


def marked(directory: Path) -> bool:
    return (directory / MARKER).exists()


async def unmark(directory: Path) -> None:
    io = default_io()
    await asyncio.to_thread(io.unlink, str(directory / MARKER))
    await asyncio.to_thread(io.fsync_dir, str(directory))
