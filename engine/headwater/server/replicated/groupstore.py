"""Replica-group records in etcd: `groups/<stream>` (docs/REPLICATION.md, "The group record").

The value is JSON, `{"peers": [...], "epoch": n, "leader": "...", "in_sync": [...]}` (in_sync
sorted, so one record has one encoding); `GroupRecord.revision` is the key's etcd mod
revision, never stored in the value. Every change is `MetaClient.compare_and_swap` on that
revision. A value that does not decode to a consistent record (the leader among the peers and
in `in_sync`, `in_sync` within the peers, no peer twice, epoch from 1) is refused with
`RecordError`: the watch logs and skips it, since acting on it could break the guarantees.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Annotated

import msgspec

from headwater.server.meta.client import MetaClient, MetaError, MetaValue, WatchCompacted
from headwater.server.replicated.record import GroupRecord

log = logging.getLogger("headwater.server.replicated")

PREFIX = "groups/"
RETRY_S = 0.5
"""Pause before the watch reads the record again after etcd failed it."""

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class RecordError(ValueError):
    """A `groups/<stream>` value that is not a consistent group record."""


class _Record(msgspec.Struct, forbid_unknown_fields=True):
    peers: list[_Name]
    epoch: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
    leader: _Name
    in_sync: list[_Name]


def key(stream: str) -> str:
    return PREFIX + stream


def encode(record: GroupRecord) -> bytes:
    return msgspec.json.encode(
        _Record(list(record.peers), record.epoch, record.leader, sorted(record.in_sync))
    )


def decode(data: bytes, revision: int) -> GroupRecord:
    try:
        r = msgspec.json.decode(data, type=_Record)
    except (msgspec.DecodeError, ValueError) as exc:
        raise RecordError(f"group record: {exc}") from None
    peers = set(r.peers)
    if len(peers) != len(r.peers) or len(set(r.in_sync)) != len(r.in_sync):
        raise RecordError("group record: a server named twice")
    if r.leader not in r.in_sync or not set(r.in_sync) <= peers:
        raise RecordError("group record: the leader or in_sync outside the peers")
    return GroupRecord(tuple(r.peers), r.epoch, r.leader, frozenset(r.in_sync), revision)


def _from(value: MetaValue | None) -> GroupRecord | None:
    return None if value is None else decode(value.value, value.mod_revision)


class GroupStore:
    """The group records of a cluster, through its `MetaClient`.

    `timeout` bounds each read and swap (`MetaUnavailable` past it: for a swap, the outcome
    is then unknown).
    """

    def __init__(self, meta: MetaClient, timeout: float | None = None) -> None:
        self.meta = meta
        self.timeout = timeout

    async def read(self, stream: str) -> GroupRecord | None:
        return _from(await self.meta.get(key(stream), timeout=self.timeout))

    async def compare_and_swap(
        self, stream: str, new: GroupRecord, expected_revision: int
    ) -> tuple[bool, GroupRecord | None]:
        """Writes `new` if the record's revision is `expected_revision` (0: no record yet);
        returns whether it did and the record etcd holds now (None if there is none)."""
        ok, current = await self.meta.compare_and_swap(
            key(stream), encode(new), expected_revision, timeout=self.timeout
        )
        return ok, _from(current)

    async def create(self, stream: str, record: GroupRecord) -> bool:
        """The group's first record; False when it has one already."""
        ok, _ = await self.compare_and_swap(stream, record, 0)
        return ok

    async def delete(self, stream: str) -> bool:
        return await self.meta.delete(key(stream))

    async def watch(self, stream: str) -> AsyncGenerator[GroupRecord, None]:
        """The record as it is now (once there is one), then every later revision, in order.

        Never ends on its own (close it): when etcd fails the watch or compacted past it,
        the record is read again after a pause and watched from there; a revision missed
        meanwhile is of no matter, since each record replaces the one before. Deleting the
        record is not an event here: whoever deletes the stream stops its runners.
        """
        name = key(stream)
        while True:
            try:
                # The read names the store revision it was made at: watching from the next
                # one misses no change.
                found = await self.meta.range(name)
                current = found.items.get(name)
                if current is not None:
                    record = self._decode(current.value, current.mod_revision)
                    if record is not None:
                        yield record
                events = await self.meta.watch(name, start_revision=found.revision + 1)
                try:
                    async for event in events:
                        # A prefix watch: groups/S also sees groups/S2.
                        if event.key != name or event.kind != "put":
                            continue
                        record = self._decode(event.value, event.revision)
                        if record is not None:
                            yield record
                finally:
                    await events.aclose()
            except (MetaError, WatchCompacted) as exc:
                log.warning("group record %s: etcd watch failed: %s (reading again)", name, exc)
            await asyncio.sleep(RETRY_S)

    @staticmethod
    def _decode(data: bytes, revision: int) -> GroupRecord | None:
        try:
            return decode(data, revision)
        except RecordError as exc:
            log.error("skipped a malformed group record at revision %d: %s", revision, exc)
            return None
