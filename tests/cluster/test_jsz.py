"""/jsz and /healthz?js-meta-only on a 3-server JetStream cluster, differential.

What nats-server 2.15 shows, and Headwater must too: every server names the same meta leader
in ``meta_cluster``, whose ``peer`` is that leader's peer id (the same 8 characters on both
servers for one server name), lists the other two servers as replicas, and counts the meta
group in ``ha_assets``. A server lists only the streams it hosts (an R1 stream: its one
server), with STREAM.INFO's ``cluster`` block; ``leader-only`` answers on the meta leader only.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from cluster.helpers import KINDS, js_api
from nats.aio.client import Client as NATS

from headwater.server.jetstream.peers import peer_id
from headwater.testing import Cluster

pytestmark = pytest.mark.timeout(60)
ON_BOTH = pytest.mark.parametrize("js_cluster", KINDS, indirect=True)

META_KEYS = ["name", "leader", "peer", "replicas", "cluster_size", "quorum_needed", "pending"]
META_KEYS += ["pending_requests", "pending_infos", "snapshot"]


def _get(port: int, target: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{target}", timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def get(cluster: Cluster, i: int, target: str) -> tuple[int, bytes]:
    return await asyncio.to_thread(_get, cluster.servers[i].http_port, target)


async def jsz(cluster: Cluster, i: int, query: str = "") -> dict[str, Any]:
    status, body = await get(cluster, i, "/jsz" + (f"?{query}" if query else ""))
    assert status == 200, (cluster.names[i], status, body)
    return json.loads(body)  # type: ignore[no-any-return]


async def agreed_leader(cluster: Cluster, timeout: float = 15.0) -> str:
    """The meta leader, once every server names the same one (bounded)."""
    deadline = time.monotonic() + timeout
    seen: list[str | None] = []
    while time.monotonic() < deadline:
        docs = [await jsz(cluster, i) for i in range(len(cluster))]
        seen = [d.get("meta_cluster", {}).get("leader") for d in docs]
        if seen[0] in cluster.names and len(set(seen)) == 1:
            return seen[0]
        await asyncio.sleep(0.2)
    raise AssertionError(f"no agreed meta leader within {timeout}s: {seen}")


@ON_BOTH
async def test_meta_cluster_streams_and_leader_only(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    names = js_cluster.names
    created = await js_api(
        js_clients[0],
        "$JS.API.STREAM.CREATE.JSZ",
        {"name": "JSZ", "subjects": ["jsz.>"], "num_replicas": 1},
    )
    assert "error" not in created, created
    host = names.index(created["cluster"]["leader"])
    consumer = await js_api(
        js_clients[1],
        "$JS.API.CONSUMER.CREATE.JSZ.D",
        {"stream_name": "JSZ", "config": {"durable_name": "D", "ack_policy": "explicit"}},
    )
    assert "error" not in consumer, consumer
    leader = await agreed_leader(js_cluster)
    block = {"name": js_cluster.name, "leader": names[host]}

    for i, name in enumerate(names):
        doc = await jsz(js_cluster, i, "consumers=1")
        meta = doc["meta_cluster"]
        assert list(meta) == META_KEYS, (name, meta)
        assert meta["name"] == js_cluster.name and meta["leader"] == leader
        assert meta["peer"] == peer_id(leader), (name, meta)
        assert (meta["cluster_size"], meta["quorum_needed"], meta["pending"]) == (3, 2, 0)
        assert [r["name"] for r in meta["replicas"]] == sorted(set(names) - {name})
        for replica in meta["replicas"]:
            assert {"name", "current", "active", "peer"} <= set(replica), replica
            assert replica["peer"] == peer_id(replica["name"])
        assert (doc["accounts"], doc["total"], doc["ha_assets"]) == (1, 1, 1), name
        # /varz's JetStream stats count the same assets.
        status, body = await get(js_cluster, i, "/varz")
        assert json.loads(body)["jetstream"]["stats"]["ha_assets"] == 1, name
        # Only the stream's own server lists it (and its consumer).
        (account,) = doc["account_details"]
        if i == host:
            assert (doc["streams"], doc["consumers"]) == (1, 1)
            (stream,) = account["stream_detail"]
            assert stream["name"] == "JSZ" and stream["cluster"] == block
            (detail,) = stream["consumer_detail"]
            assert detail["name"] == "D" and detail["cluster"] == block
        else:
            assert (doc["streams"], doc["consumers"]) == (0, 0), name
            assert "stream_detail" not in account, name
        raft = await jsz(js_cluster, i, "raft=1")
        assert raft.get("streams_leader") == (1 if i == host else None), name

        status, body = await get(js_cluster, i, "/jsz?leader-only=true")
        if name == leader:
            assert status == 200 and json.loads(body)["meta_cluster"]["leader"] == leader
        else:
            assert (status, body) == (400, b"filtered response: not leader"), name
        status, body = await get(js_cluster, i, "/healthz?js-meta-only=true")
        assert (status, json.loads(body)) == (200, {"status": "ok"}), name

    # nats-server names each stream's Raft group; Headwater's R1 streams have none, so it
    # refuses the question rather than answer it without them.
    status, body = await get(js_cluster, host, "/jsz?raft=1&streams=1")
    if js_cluster.kinds[host] == "nats":
        assert status == 200 and "stream_raft_group" in body.decode()
    else:
        assert status == 400 and body.startswith(b"raft groups are not supported"), body
