"""``/healthz`` of a server holding a replica of an R3 stream, against nats-server's.

A rolling restart (the StatefulSet's, which waits for each pod's readiness probe, /healthz)
must move on only once the restarted server is current again. So: a server restarted while
the two others are stopped (SIGSTOP: nothing leads, nothing can catch it up) answers 503, and
200 once they run again and it has caught up. nats-server answers 503 there too (its meta
group has no leader either); on Headwater the cluster's metadata (etcd, whose members run on)
stays reachable, so it is the stream's own check that answers.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from cluster.helpers import KINDS
from cluster.test_replicated_streams import create, info, publish, r3
from nats.aio.client import Client as NATS

from headwater.testing import Cluster, monitor_json

pytestmark = pytest.mark.timeout(90)
ON_BOTH = pytest.mark.parametrize("js_cluster", KINDS, indirect=True)


def healthz(cluster: Cluster, i: int) -> tuple[int, str]:
    """/healthz of server ``i``: its status and error text (or "ok")."""
    srv = cluster.servers[i]
    try:
        body = monitor_json(srv.http_port, "/healthz", host=srv.host)
        return 200, str(body.get("status"))
    except Exception as exc:  # urllib's HTTPError carries the status and the JSON body
        code = getattr(exc, "code", 0)
        read = getattr(exc, "read", None)
        return int(code), read().decode() if read else str(exc)


async def until_status(
    cluster: Cluster, i: int, status: int, timeout: float, saying: str = ""
) -> str:
    deadline = time.monotonic() + timeout
    last: tuple[int, str] = (0, "")
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(healthz, cluster, i)
        if last[0] == status and saying in last[1]:
            return last[1]
        await asyncio.sleep(0.2)
    raise AssertionError(f"/healthz of server {i} not {status} within {timeout}s: {last}")


@ON_BOTH
async def test_a_restarted_replica_is_healthy_only_once_caught_up(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    created = await create(js_clients[0], r3("ROLL", ["roll.>"]))
    for i in range(20):
        await publish(js_clients[0], "roll.a", f"r{i}".encode())
    leader = js_cluster.names.index(created["cluster"]["leader"])
    x = (leader + 1) % 3
    others = [i for i in range(3) if i != x]
    await until_status(js_cluster, x, 200, 20)
    for i in others:
        js_cluster.servers[i].signal(signal.SIGSTOP)
    try:
        await asyncio.to_thread(js_cluster.restart, x)
        # Headwater first says it is still joining the metadata, then names the stream.
        saying = "JetStream stream '$G > ROLL' is not current"
        await until_status(
            js_cluster, x, 503, 20, saying if js_cluster.kinds[0] == "headwater" else ""
        )
        # Still unhealthy a while later: nothing can catch it up.
        await asyncio.sleep(1.5)
        assert (await asyncio.to_thread(healthz, js_cluster, x))[0] == 503
    finally:
        for i in others:
            js_cluster.servers[i].signal(signal.SIGCONT)
    await until_status(js_cluster, x, 200, 40)
    nc = js_clients[others[0]]
    assert (await info(nc, "ROLL"))["state"]["messages"] == 20
