"""Core NATS across a cut link: three servers, a subscriber on s1, a publisher on s3.

Only the s1-s3 link is cut; s2 still reaches both. Routes are one hop on both servers (a
message that came over a route goes to local subscribers only), so nothing is relayed
through s2: once s1 and s3 have given up their route to each other (two unanswered PINGs,
``cluster { ping_interval: 1s, ping_max: 2 }`` here), s3's messages for s1's subscriber are
dropped, not queued. After the link heals, the configured routes are dialled again, interest
is exchanged and delivery resumes, with nothing restarted. nats-server and Headwater behave
alike (docs/CLUSTERING.md, "Failure model").
"""

from __future__ import annotations

import asyncio
import time

import pytest
from cluster.helpers import KINDS, collect, connect, drain_for, inbox, propagated

from headwater.testing_netns import NetnsCluster

pytestmark = pytest.mark.timeout(60)

FAST_PINGS = 'cluster { ping_interval: "1s", ping_max: 2 }'


def has_route(cluster: NetnsCluster, i: int, remote: int) -> bool:
    routes = cluster.routez(i).get("routes") or []
    return any(r.get("remote_name") == cluster.names[remote] for r in routes)


async def wait_route(cluster: NetnsCluster, i: int, remote: int, up: bool, timeout: float) -> float:
    """Seconds until server ``i``'s /routez lists (``up``) or no longer lists ``remote``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if await asyncio.to_thread(has_route, cluster, i, remote) == up:
            return time.monotonic() - began
        await asyncio.sleep(0.1)
    state = "up" if up else "down"
    raise AssertionError(f"{cluster.names[i]}: route to {cluster.names[remote]} not {state}")


@pytest.mark.parametrize("kind", KINDS)
async def test_cut_between_subscriber_and_publisher(netns_cluster, kind: str) -> None:
    cluster = netns_cluster(kind, config=FAST_PINGS)
    s1, s2, s3 = [await connect(url) for url in cluster.urls]
    try:
        box = await inbox(s1, "cut.>")
        await propagated(s3, s1)
        await s3.publish("cut.before", b"before")
        assert [m.data for m in await collect(box, 1)] == [b"before"]

        cluster.cut(0, 2)
        # Detected by the route keepalive on both ends: 1 s interval, 2 missed, ~3 s.
        for i, remote in ((0, 2), (2, 0)):
            await wait_route(cluster, i, remote, up=False, timeout=15)
        # s2 still has both routes, and s1's interest still reaches s2.
        assert has_route(cluster, 1, 0) and has_route(cluster, 1, 2)
        await propagated(s2, s1)

        for n in range(5):
            await s3.publish("cut.during", f"during{n}".encode())
        await s3.flush()
        await s2.publish("cut.via2", b"via2")  # s2 to s1 still works
        assert [m.data for m in await collect(box, 1)] == [b"via2"]
        assert await drain_for(box, 1.0) == []  # s3's messages: dropped, not relayed

        cluster.heal()
        await wait_route(cluster, 0, 2, up=True, timeout=15)
        await asyncio.to_thread(cluster.wait_formed, 15)
        await propagated(s3, s1)
        await s3.publish("cut.after", b"after")
        got = [m.data for m in await collect(box, 1)]
        assert got == [b"after"], got  # and none of the dropped ones came late
        assert await drain_for(box, 0.5) == []
    finally:
        for nc in (s1, s2, s3):
            await nc.close()
