"""Differential routing scenarios on a 3-server cluster (s1 is the seed; s2 and s3 gossip in).

Each runs on nats-server, on Headwater, and the core ones on a mixed cluster (Headwater s1 and
s2, nats-server s3), with one nats-py client per server (``clients[0]`` is on s1 ...).
Interest is awaited with :func:`cluster.helpers.propagated` (a probe request) rather than
sleeps, and every wait is bounded. The scenarios that leave every server running share one
cluster per kind (``shared_cluster``; their subjects are unique, their clients closed after
each); the fail-over and rejoin ones kill a server, so each starts its own.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import nats
import pytest
from cluster.helpers import (
    CORE_KINDS,
    KINDS,
    collect,
    connect,
    drain_for,
    inbox,
    propagated,
    request_until_answered,
    route_out_msgs,
    wait_route_quiet,
)
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from headwater.testing import Cluster

pytestmark = pytest.mark.timeout(30)


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("module_cluster", CORE_KINDS, indirect=True)
async def test_pub_on_s1_reaches_s2_and_s3_until_unsubscribed(
    shared_cluster: Cluster, shared_clients: list[NATS]
) -> None:
    nc1, nc2, nc3 = shared_clients
    subject = unique("fanout")
    box2: asyncio.Queue[Msg] = asyncio.Queue()

    async def put2(msg: Msg) -> None:
        box2.put_nowait(msg)

    sub2 = await nc2.subscribe(subject, cb=put2)
    box3 = await inbox(nc3, subject)
    await propagated(nc1, nc2, nc3)

    sent = [f"m{i}".encode() for i in range(5)]
    for data in sent:
        await nc1.publish(subject, data)
    await nc1.flush()
    assert [m.data for m in await collect(box2, 5)] == sent
    assert [m.data for m in await collect(box3, 5)] == sent

    await sub2.unsubscribe()
    await nc2.flush()

    async def probe() -> None:
        await nc1.publish(subject, b"probe")
        await nc1.flush()

    # The RS- reaches s1 asynchronously: probe until s1 stops forwarding to s2 at all.
    await wait_route_quiet(shared_cluster, 0, "s2", probe)
    before = await asyncio.to_thread(route_out_msgs, shared_cluster, 0, "s2")
    after = [f"after{i}".encode() for i in range(5)]
    for data in after:
        await nc1.publish(subject, data)
    await nc1.flush()
    assert [m.data for m in await collect(box3, 5, skip=b"probe")] == after
    assert await asyncio.to_thread(route_out_msgs, shared_cluster, 0, "s2") == before
    assert await drain_for(box2, 0.2) == []


@pytest.mark.parametrize("module_cluster", CORE_KINDS, indirect=True)
async def test_headers_reply_and_payload_cross_the_route_intact(
    shared_cluster: Cluster, shared_clients: list[NATS]
) -> None:
    nc1, nc2, nc3 = shared_clients
    subject, reply = unique("hdr"), unique("reply")
    box2 = await inbox(nc2, subject)
    await propagated(nc1, nc2)

    headers = {"X-Trace": "abc-123", "Nats-Msg-Id": "id 1"}
    big = bytes(range(256)) * 256  # 64 KiB with every byte value, CR and LF among them
    await nc1.publish(subject, b"hello", reply=reply, headers=headers)
    await nc1.publish(subject, b"", headers={"X-Empty": "1"})
    await nc1.publish(subject, big)
    await nc1.flush()
    first, empty, large = await collect(box2, 3)
    assert (first.data, first.reply, first.headers) == (b"hello", reply, headers)
    assert (empty.data, empty.headers) == (b"", {"X-Empty": "1"})
    assert large.data == big
    assert not large.headers

    # Request/reply s1 -> s3: the reply subject (s1's inbox) routes back, headers both ways.
    service = unique("svc")

    async def answer_with_headers(msg: Msg) -> None:
        assert msg.reply
        echoed = {"X-Echo": (msg.headers or {}).get("X-Ask", "")}
        await nc3.publish(msg.reply, b"re:" + msg.data, headers=echoed)

    await nc3.subscribe(service, cb=answer_with_headers)
    await propagated(nc1, nc3)
    resp = await nc1.request(service, b"ping", timeout=2, headers={"X-Ask": "q1"})
    assert (resp.data, resp.headers) == (b"re:ping", {"X-Echo": "q1"})


async def gather(
    boxes: list[asyncio.Queue[Msg]], total: int, timeout: float = 5.0
) -> list[list[bytes]]:
    """The payloads each box received, once ``total`` arrived overall (plus a short wait for
    any duplicate), failing after ``timeout`` seconds."""
    got: list[list[bytes]] = [[] for _ in boxes]
    deadline = time.monotonic() + timeout
    while sum(map(len, got)) < total and time.monotonic() < deadline:
        for i, box in enumerate(boxes):
            got[i] += [m.data for m in await drain_for(box, 0.02)]
    for i, box in enumerate(boxes):
        got[i] += [m.data for m in await drain_for(box, 0.3 if i == 0 else 0.0)]
    return got


def assert_each_once(got: list[list[bytes]], total: int) -> None:
    counts = Counter(data for member in got for data in member)
    assert sorted(counts) == sorted(str(i).encode() for i in range(total)), "messages lost"
    assert set(counts.values()) == {1}, "a message was delivered twice"


@pytest.mark.parametrize("module_cluster", CORE_KINDS, indirect=True)
async def test_queue_group_with_members_on_every_server(
    shared_cluster: Cluster, shared_clients: list[NATS]
) -> None:
    """Each message goes to exactly one member cluster-wide.

    nats-server 2.15 does not prefer the publisher's local member for a message from a client:
    it picks among all members, local and behind routes, so all three get some. (Only a
    message arriving from a route is kept local: it is never forwarded again.)
    """
    nc1, nc2, nc3 = shared_clients
    subject = unique("work")
    boxes = [await inbox(nc, subject, queue="workers") for nc in (nc1, nc2, nc3)]
    await propagated(nc1, nc2, nc3)

    for i in range(300):
        await nc1.publish(subject, str(i).encode())
    await nc1.flush()
    got = await gather(boxes, 300)
    assert_each_once(got, 300)
    assert all(got), [len(member) for member in got]


@pytest.mark.parametrize("module_cluster", CORE_KINDS, indirect=True)
async def test_queue_group_without_local_member_spreads_over_routes(
    shared_cluster: Cluster, shared_clients: list[NATS]
) -> None:
    nc1, nc2, nc3 = shared_clients
    subject = unique("work")
    boxes = [await inbox(nc, subject, queue="workers") for nc in (nc2, nc3)]
    await propagated(nc1, nc2, nc3)

    for i in range(300):
        await nc1.publish(subject, str(i).encode())
    await nc1.flush()
    got = await gather(boxes, 300)
    assert_each_once(got, 300)
    assert all(got), [len(member) for member in got]


@pytest.mark.parametrize("module_cluster", CORE_KINDS, indirect=True)
async def test_no_responders_until_a_remote_responder_subscribes(
    shared_cluster: Cluster, shared_clients: list[NATS]
) -> None:
    nc1, _, nc3 = shared_clients
    subject = unique("nobody")
    started = time.monotonic()
    with pytest.raises(NoRespondersError):
        await nc1.request(subject, b"anyone?", timeout=3)
    assert time.monotonic() - started < 1.0, "no-responders must not wait for the timeout"

    async def answer(msg: Msg) -> None:
        await msg.respond(b"here")

    await nc3.subscribe(subject, cb=answer)
    await nc3.flush()
    resp = await request_until_answered(nc1, subject, timeout=5)
    assert resp.data == b"here"


@pytest.mark.parametrize("module_cluster", CORE_KINDS, indirect=True)
async def test_overlapping_wildcards_on_a_remote_server(
    shared_cluster: Cluster, shared_clients: list[NATS]
) -> None:
    nc1, nc2, _ = shared_clients
    root = unique("wild")
    one_token = await inbox(nc2, f"{root}.*")
    all_below = await inbox(nc2, f"{root}.>")
    await propagated(nc1, nc2)

    before = await asyncio.to_thread(route_out_msgs, shared_cluster, 0, "s2")
    for i in range(10):
        await nc1.publish(f"{root}.a", str(i).encode())
    await nc1.publish(f"{root}.a.b", b"deep")  # matches only the full wildcard
    await nc1.flush()
    expected = [str(i).encode() for i in range(10)]
    assert [m.data for m in await collect(one_token, 10)] == expected
    assert [m.data for m in await collect(all_below, 11)] == [*expected, b"deep"]
    assert await drain_for(one_token, 0.2) == []
    assert await drain_for(all_below, 0.0) == []
    # One RMSG per message on the route; s2 fans it out to both of its subscriptions.
    assert await asyncio.to_thread(route_out_msgs, shared_cluster, 0, "s2") - before == 11


@pytest.mark.parametrize("cluster", KINDS, indirect=True)
async def test_client_learns_the_cluster_and_fails_over(cluster: Cluster) -> None:
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await nats.connect(
        servers=[cluster.urls[0]],
        reconnect_time_wait=0.1,
        max_reconnect_attempts=30,
        connect_timeout=1,
        reconnected_cb=on_reconnect,
    )
    nc3 = await nats.connect(servers=[cluster.urls[2]], allow_reconnect=False)
    try:
        others = {cluster.servers[1].port, cluster.servers[2].port}
        assert {u.port for u in nc.discovered_servers} == others
        assert {u.port for u in nc.servers} == {cluster.servers[0].port, *others}

        subject = unique("failover")
        box = await inbox(nc, subject)
        await propagated(nc3, nc)
        await nc3.publish(subject, b"before")
        assert [m.data for m in await collect(box, 1)] == [b"before"]

        await asyncio.to_thread(cluster.kill, 0)
        await asyncio.wait_for(reconnected.wait(), 10)
        assert nc.connected_url is not None
        assert nc.connected_url.port in others
        await propagated(nc3, nc)  # the resubscription reached s3
        await nc3.publish(subject, b"after")
        assert [m.data for m in await collect(box, 1)] == [b"after"]
    finally:
        await nc.close()
        await nc3.close()


@pytest.mark.parametrize("cluster", KINDS, indirect=True)
async def test_killed_server_rejoins_after_restart(cluster: Cluster) -> None:
    await asyncio.to_thread(cluster.kill, 2)
    await asyncio.to_thread(cluster.restart, 2)
    await asyncio.to_thread(cluster.wait_formed, 10)

    nc1, nc3 = await connect(cluster.urls[0]), await connect(cluster.urls[2])
    try:
        subject = unique("rejoin")
        box = await inbox(nc1, subject)
        await propagated(nc3, nc1)
        await nc3.publish(subject, b"back")
        assert [m.data for m in await collect(box, 1)] == [b"back"]
    finally:
        await nc1.close()
        await nc3.close()
