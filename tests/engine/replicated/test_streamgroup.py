"""A replicated stream's three replicas (`jetstream.streamgroup.StreamGroup`) on real parts.

Three replicas of one memory stream, each with its own internal client on one in-process
Headwater server (their group's messages cross its routing as between servers), a real etcd
member for the group record and real replication logs on disk. nats-py publishes to the
stream's subject: only the leader takes the message, and the ack comes once a quorum holds
it; every replica ends with the same messages, through a change of leader too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.server.connections.internal import InternalClient
from headwater.server.jetstream.accountinfo import Resources
from headwater.server.jetstream.stream import Stream, store_limits
from headwater.server.jetstream.streamconfig import StreamConfig
from headwater.server.jetstream.streamconfig_validate import apply_defaults
from headwater.server.jetstream.streamgroup import StreamGroup
from headwater.server.meta.client import MetaClient
from headwater.server.node import Server
from headwater.server.replicated.groupstore import GroupStore
from headwater.server.replicated.record import GroupRecord
from headwater.server.replicated.wal import ReplicationLog
from headwater.server.store import StoreConfig, open_store

from .conftest import wait_until

pytestmark = pytest.mark.timeout(60)

NAMES = ("s1", "s2", "s3")
IDS = {name: f"ID{name.upper()}" for name in NAMES}


class Replica:
    """One server's replica: its stream (memory store), log, etcd client and group."""

    def __init__(self, name: str, hub: Server, urls: list[str], wal_dir: Path) -> None:
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
        self.log, recovered = ReplicationLog.open(wal_dir)
        self.group = StreamGroup(
            self.stream,
            name,
            IDS[name],
            log=self.log,
            transport=self.client,
            store=GroupStore(self.meta),
            resolve=IDS.get,
            recovered=recovered,
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
