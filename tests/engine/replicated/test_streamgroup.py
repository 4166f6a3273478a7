"""A replicated stream's three replicas (`jetstream.streamgroup.StreamGroup`) on real parts.

Three replicas of one memory stream, each with its own internal client on one in-process
Headwater server (their group's messages cross its routing as between servers), a real etcd
member for the group record and real replication logs on disk. nats-py publishes to the
stream's subject: only the leader takes the message, and the ack comes once a quorum holds
it; every replica ends with the same messages, through a change of leader too. With a small
compaction interval and small log segments, a replica stopped while the leader compacted past
it drops its own compacted log at restart and catches up by a snapshot and the log.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.server.connections.internal import InternalClient
from headwater.server.jetstream import groupsnapshot
from headwater.server.jetstream.accountinfo import Resources
from headwater.server.jetstream.stream import Stream, store_limits
from headwater.server.jetstream.streamconfig import StreamConfig
from headwater.server.jetstream.streamconfig_validate import apply_defaults
from headwater.server.jetstream.streamgroup import StreamGroup, open_log
from headwater.server.meta.client import MetaClient
from headwater.server.node import Server
from headwater.server.replicated.groupstore import GroupStore
from headwater.server.replicated.record import GroupRecord
from headwater.server.store import StoreConfig, open_store

from .conftest import wait_until

pytestmark = pytest.mark.timeout(60)

NAMES = ("s1", "s2", "s3")
IDS = {name: f"ID{name.upper()}" for name in NAMES}


COMPACT = 20
"""The compaction interval of the tests that compact (entries)."""
SEGMENT = 2048
"""Their log segments (bytes): small, so that the disk log is compacted too."""


class Replica:
    """One server's replica: its stream (memory store), log, etcd client and group."""

    def __init__(
        self,
        name: str,
        hub: Server,
        urls: list[str],
        wal_dir: Path,
        compact_every: int = 10_000,
        segment_bytes: int = 64 << 20,
    ) -> None:
        self.name = name
        self.client = InternalClient(hub, f"replica-{name}")
        self.meta = MetaClient(urls, "test", timeout=2.0)
        cfg = apply_defaults(
            StreamConfig(
                name="ORDERS",
                subjects=("orders.>",),
                storage="memory",
                num_replicas=3,
                allow_msg_ttl=True,
            )
        )
        store = open_store(StoreConfig(name="ORDERS", storage="memory", limits=store_limits(cfg)))
        self.stream = Stream(
            config=cfg,
            created_ns=time.time_ns(),
            store=store,
            client=self.client,
            resources=Resources(-1, -1),
            directory=None,
            domain=None,
            api_prefixes=("$JS.API",),
            durable_acks=False,
        )
        self.log, recovered, self.lost = open_log(wal_dir, segment_bytes)
        self.group = StreamGroup(
            self.stream,
            name,
            IDS[name],
            log=self.log,
            transport=self.client,
            store=GroupStore(self.meta),
            resolve=IDS.get,
            recovered=recovered,
            snapshot_dir=wal_dir / "snapshots",
            compact_every=compact_every,
            lost_state=self.lost,
        )

    @property
    def up(self) -> bool:
        return not self.group.runner._closed

    def messages(self) -> list[tuple[int, str, bytes, int]]:
        state = self.stream.state()
        found = (self.stream.store.load_msg(s) for s in range(state.first_seq, state.last_seq + 1))
        return [(m.seq, m.subject, m.data, m.ts) for m in found if m is not None]

    async def stop(self) -> None:
        await self.group.close()
        await self.stream.close()
        self.log.close()
        await self.meta.close()
        self.client.close()


@pytest.fixture
async def replicas(
    hub: Server, etcd_urls: list[str], tmp_path: Path
) -> AsyncIterator[list[Replica]]:
    made = [Replica(name, hub, etcd_urls, tmp_path / name) for name in NAMES]
    first = GroupRecord(NAMES, 1, "s1", frozenset(NAMES))
    assert await GroupStore(made[0].meta).create("ORDERS", first)
    try:
        for replica in made:
            await replica.group.start()
        yield made
    finally:
        for replica in made:
            await asyncio.wait_for(replica.stop(), 5.0)


class Compacting:
    """Three replicas that compact every `COMPACT` entries on logs of small segments; a
    replica can be stopped and started again (a new process: an empty memory stream)."""

    def __init__(self, hub: Server, urls: list[str], root: Path) -> None:
        self.hub = hub
        self.urls = urls
        self.root = root
        self.replicas: dict[str, Replica] = {}

    async def start(self, name: str) -> Replica:
        replica = Replica(
            name,
            self.hub,
            self.urls,
            self.root / name,
            compact_every=COMPACT,
            segment_bytes=SEGMENT,
        )
        self.replicas[name] = replica
        await replica.group.start()
        return replica

    async def stop(self, name: str) -> None:
        await asyncio.wait_for(self.replicas[name].stop(), 5.0)

    def up(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.up]


@pytest.fixture
async def compacting(
    hub: Server, etcd_urls: list[str], tmp_path: Path
) -> AsyncIterator[Compacting]:
    group = Compacting(hub, etcd_urls, tmp_path)
    meta = MetaClient(etcd_urls, "test", timeout=2.0)
    try:
        assert await GroupStore(meta).create(
            "ORDERS", GroupRecord(NAMES, 1, "s1", frozenset(NAMES))
        )
    finally:
        await meta.close()
    try:
        for name in NAMES:
            await group.start(name)
        yield group
    finally:
        for replica in group.up():
            await asyncio.wait_for(replica.stop(), 5.0)


@pytest.fixture
async def nc(hub: Server) -> AsyncIterator[Client]:
    client = await nats.connect(f"nats://127.0.0.1:{hub.port}", allow_reconnect=False)
    try:
        yield client
    finally:
        await client.close()


async def publish(
    nc: Client, subject: str, data: bytes, msg_id: str, timeout: float = 10, **headers: str
) -> dict:
    """Publish until acknowledged (bounded): a request sent while no replica leads, or to a
    leader that loses its place, is not answered, and the publisher sends it again."""
    deadline = time.monotonic() + timeout
    headers["Nats-Msg-Id"] = msg_id
    while True:
        try:
            msg = await nc.request(subject, data, timeout=0.5, headers=headers)
            return dict(json.loads(msg.data))
        except (NatsTimeoutError, nats.errors.NoRespondersError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def alike(replicas: list[Replica], count: int) -> bool:
    up = [r.messages() for r in replicas if r.up]
    return all(len(m) == count and m == up[0] for m in up)


def replica_state(r: Replica) -> tuple[object, ...]:
    """What later decisions depend on, beside the messages."""
    st = r.stream.state()
    return (
        st.first_seq,
        st.last_seq,
        st.msgs,
        r.stream.lseq,
        r.stream.lmsgid,
        tuple(r.stream.dedupe.entries()),
    )


async def publish_many(nc: Client, prefix: str, count: int, window: int = 50) -> list[dict]:
    """`count` publishes, `window` of them in flight at a time (each one retried until
    acknowledged, bounded)."""
    acks: list[dict] = []
    for start in range(0, count, window):
        batch = range(start, min(start + window, count))
        acks += await asyncio.gather(
            *(
                publish(nc, f"orders.{i % 7}", f"{prefix}{i}".encode(), f"{prefix}{i}")
                for i in batch
            )
        )
    return acks


async def test_a_replica_behind_the_compacted_log_catches_up_by_snapshot(
    compacting: Compacting, nc: Client
) -> None:
    """Stopped after it compacted its own log, while the others publish far past the leader's
    compaction: at restart it drops its log (its memory stream is empty), gets the leader's
    snapshot and then the log, and all three replicas end identical."""
    acks = await publish_many(nc, "a", 5 * COMPACT)
    assert sorted(a["seq"] for a in acks) == list(range(1, 5 * COMPACT + 1))
    await wait_until(lambda: alike(compacting.up(), 5 * COMPACT), 10, "replicated")
    (leader,) = [r for r in compacting.up() if r.group.runner.is_leader]
    behind = next(r for r in compacting.up() if r is not leader)
    await compacting.stop(behind.name)
    assert behind.log.first_index > 1  # its disk log was compacted too
    acks = await publish_many(nc, "b", 6 * COMPACT)
    assert {a["seq"] for a in acks} == set(range(5 * COMPACT + 1, 11 * COMPACT + 1))
    assert leader.group.runner.replica.base > 5 * COMPACT  # the log no longer reaches it

    back = await compacting.start(behind.name)
    assert back.lost and back.group.runner.replica.last_index == 0  # started empty
    await wait_until(lambda: alike(compacting.up(), 11 * COMPACT), 20, "caught up")
    assert back.group.snapshots_installed >= 1 and leader.group.snapshots_sent >= 1
    # It goes on from the log: more publishes reach it by entries, not snapshots.
    installed = back.group.snapshots_installed
    await publish_many(nc, "c", COMPACT)
    await wait_until(lambda: alike(compacting.up(), 12 * COMPACT), 10, "more replicated")
    assert back.group.snapshots_installed == installed
    states = {replica_state(r) for r in compacting.up()}
    assert len(states) == 1, states
    # And it answers a duplicate as the others would: the window came with the snapshot.
    again = await publish(nc, "orders.1", b"b1", "b1")
    assert again.get("duplicate") is True, again


async def test_the_log_in_memory_stays_bounded(compacting: Compacting, nc: Client) -> None:
    await publish_many(nc, "m", 15 * COMPACT)
    await wait_until(lambda: alike(compacting.up(), 15 * COMPACT), 10, "replicated")
    for r in compacting.up():
        core = r.group.runner.replica
        assert core.last_index - core.base < 2 * COMPACT + 10, (r.name, core.base)
        assert core.base > 12 * COMPACT, (r.name, core.base)


async def test_replicas_without_their_state_never_lead(compacting: Compacting, nc: Client) -> None:
    """Every replica restarts after compacting (a whole cluster of memory streams): each
    lost its state, so none may lead (leading on empty would lose what was acknowledged if
    the others were only out of reach); the stream stays without a leader, and says so."""
    await publish_many(nc, "p", 3 * COMPACT)
    await wait_until(lambda: alike(compacting.up(), 3 * COMPACT), 10, "replicated")
    for name in NAMES:
        await compacting.stop(name)
    back = [await compacting.start(name) for name in NAMES]
    assert all(r.lost for r in back)
    deadline = time.monotonic() + 3.0  # ten election timeouts
    while time.monotonic() < deadline:
        assert not any(r.group.runner.is_leader for r in back)
        await asyncio.sleep(0.05)


async def test_publishes_are_acknowledged_once_replicated_and_stored_alike(
    replicas: list[Replica], nc: Client
) -> None:
    acks = [await publish(nc, "orders.new", f"o{i}".encode(), f"id{i}") for i in range(20)]
    assert [a.get("seq") for a in acks] == list(range(1, 21)), acks
    assert all(a.get("stream") == "ORDERS" and "error" not in a for a in acks)
    again = await publish(nc, "orders.new", b"o3", "id3")
    assert again == {"stream": "ORDERS", "seq": 4, "duplicate": True}
    # A check fails alike everywhere, and its error is the leader's answer.
    wrong = await nc.request(
        "orders.new", b"x", timeout=2, headers={"Nats-Expected-Last-Sequence": "7"}
    )
    assert json.loads(wrong.data)["error"]["err_code"] == 10071
    await wait_until(lambda: alike(replicas, 20), 5, "every replica has the 20 messages")
    leaders = [r for r in replicas if r.group.runner.is_leader]
    assert len(leaders) == 1 and len(leaders[0].stream._subs) == 1
    assert all(not r.stream._subs for r in replicas if r is not leaders[0])


async def test_a_new_leader_takes_the_publishes_and_nothing_is_lost(
    replicas: list[Replica], nc: Client
) -> None:
    for i in range(10):
        await publish(nc, "orders.new", f"a{i}".encode(), f"a{i}")
    (old,) = [r for r in replicas if r.group.runner.is_leader]
    await old.stop()  # its server goes: the others elect a new leader among them
    acks = [await publish(nc, "orders.new", f"b{i}".encode(), f"b{i}") for i in range(10)]
    assert [a["seq"] for a in acks] == list(range(11, 21)), acks
    (new,) = [r for r in replicas if r.up and r.group.runner.is_leader]
    assert new is not old and new.stream._subs
    await wait_until(lambda: alike(replicas, 20), 5, "the two replicas have the 20 messages")


async def test_expiry_follows_the_leaders_clock(replicas: list[Replica], nc: Client) -> None:
    """A message with a TTL goes from every replica by one Expire entry the leader proposed."""
    ack = await publish(nc, "orders.ttl", b"short", "t1", **{"Nats-TTL": "1s"})
    assert ack["seq"] == 1
    await wait_until(lambda: alike(replicas, 1), 5, "replicated")
    await wait_until(lambda: alike(replicas, 0), 5, "expired on every replica")
    for replica in replicas:
        assert replica.stream.state().last_seq == 1


async def test_an_install_slower_than_the_resends_still_completes(
    compacting: Compacting, nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader sends a follower that still lacks its state a snapshot again every
    `snapshot_interval` (1 s), and a large one takes longer than that to install: each one
    that arrived used to cancel the install in progress, so none ever completed (found by
    the catch-up benchmark, 200,000 messages). An install in progress now completes and the
    snapshots arriving meanwhile are dropped."""
    real_install = groupsnapshot.install

    async def slow_install(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(2.5)  # longer than two resends
        return await real_install(*args, **kwargs)

    acks = await publish_many(nc, "a", 3 * COMPACT)
    assert len(acks) == 3 * COMPACT
    await wait_until(lambda: alike(compacting.up(), 3 * COMPACT), 10, "replicated")
    (leader,) = [r for r in compacting.up() if r.group.runner.is_leader]
    behind = next(r for r in compacting.up() if r is not leader)
    await compacting.stop(behind.name)
    await publish_many(nc, "b", 4 * COMPACT)
    monkeypatch.setattr(groupsnapshot, "install", slow_install)
    back = await compacting.start(behind.name)
    await wait_until(lambda: alike(compacting.up(), 7 * COMPACT), 15, "caught up")
    assert back.group.snapshots_installed == 1
    assert leader.group.snapshots_sent >= 2  # it did send again while the install ran


async def test_a_snapshot_sent_whole_is_not_sent_again_while_it_installs(
    compacting: Compacting, nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a snapshot went whole to a follower, the leader sends it none again for twice
    the time that one took (the follower is installing it, which takes about as long): each
    extra one cost the leader a whole read of its stream, on the cores the install needs
    (found by the catch-up benchmark: 51k -> 77k msgs/s at 200,000 messages)."""
    real_chunks = groupsnapshot.SnapshotProducer.chunks
    real_install = groupsnapshot.install

    async def slow_chunks(self: Any) -> Any:
        await asyncio.sleep(0.8)  # a large stream's production and transfer
        async for chunk in real_chunks(self):
            yield chunk

    async def slow_install(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(1.4)  # and its install: past the core's next ask (1 s)
        return await real_install(*args, **kwargs)

    await publish_many(nc, "a", 3 * COMPACT)
    await wait_until(lambda: alike(compacting.up(), 3 * COMPACT), 10, "replicated")
    (leader,) = [r for r in compacting.up() if r.group.runner.is_leader]
    behind = next(r for r in compacting.up() if r is not leader)
    await compacting.stop(behind.name)
    await publish_many(nc, "b", 4 * COMPACT)
    monkeypatch.setattr(groupsnapshot.SnapshotProducer, "chunks", slow_chunks)
    monkeypatch.setattr(groupsnapshot, "install", slow_install)
    sent = leader.group.snapshots_sent
    back = await compacting.start(behind.name)
    await wait_until(lambda: alike(compacting.up(), 7 * COMPACT), 15, "caught up")
    assert back.group.snapshots_installed == 1
    assert leader.group.snapshots_sent == sent + 1
