"""Clustered JetStream (R1) when the server hosting a stream is cut from the other two.

The host is isolated from its peers only: the test's clients still reach it. Routes use
``cluster { ping_interval: 1s, ping_max: 2 }`` on both server kinds, so the routes across
the cut close within ~3 s (with the defaults, 2 minutes on nats-server and 30 s on
Headwater, a route stays open through a short cut and TCP delivers what it held once the
link is back, requests included). What is correct, and checked on both servers:

* the majority side keeps answering: ``STREAM.NAMES`` still lists the stream,
  ``STREAM.LIST`` reports it ``missing``; its ``STREAM.INFO`` times out on nats-server (no
  server there is in the stream's group) and gets 10008 on Headwater (docs/DIFFERENCES.md);
* the isolated server's ``/healthz`` turns 503 ("JetStream is not current with the meta
  leader"; nats-server moves on to "... has not established contact with a meta leader");
* publishing to the stream through the isolated server still works: an R1 stream's messages
  are its host's alone (its own disk), and the publish path never needs the metadata;
* changes to the metadata through the isolated server (a stream update, a create) are
  refused with 10008 at once, as nats-server does: no quorum, no change;
* after the heal everything converges with nothing restarted: ``/healthz`` 200 everywhere,
  every message (before and during the cut) in the stream, on its host only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cluster.helpers import KINDS, connect, js_api, propagated, wait_jetstream
from cluster.helpers import wait_until as until
from nats.aio.client import Client as NATS
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.testing import monitor_json
from headwater.testing_netns import HTTP_PORT, NetnsCluster

# Each takes 10 to 25 s here (three servers, a lease to run out, a heal to converge).
pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

FAST_PINGS = 'cluster { ping_interval: "1s", ping_max: 2 }'
UNAVAILABLE = {
    "code": 503,
    "err_code": 10008,
    "description": "JetStream system temporarily unavailable",
}
NOT_CURRENT = "JetStream is not current with the meta leader"
NO_LEADER = "JetStream has not established contact with a meta leader"


def config(name: str, subjects: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "subjects": subjects, "storage": "file", "num_replicas": 1, **extra}


async def api(nc: NATS, subject: str, body: Any = None, timeout: float = 2.0) -> Any:
    """The decoded reply, or the string "timeout" when none came."""
    try:
        return await js_api(nc, subject, body, timeout=timeout)
    except NatsTimeoutError:
        return "timeout"


async def js_cluster(netns_cluster: Any, kind: str) -> tuple[NetnsCluster, list[NATS]]:
    cluster = netns_cluster(kind, jetstream=True, config=FAST_PINGS)
    await wait_jetstream(cluster)
    return cluster, [await connect(url) for url in cluster.urls]


async def create_hosted(clients: list[NATS], cluster: NetnsCluster, name: str) -> int:
    """Create stream ``name`` (subjects ``<name>.>``) through s1; its host's index, once
    every server can publish to it."""
    reply = await api(clients[0], f"$JS.API.STREAM.CREATE.{name}", config(name, [f"{name}.>"]))
    assert "error" not in reply, reply
    host = cluster.names.index(reply["cluster"]["leader"])
    for i, nc in enumerate(clients):
        if i != host:
            await propagated(nc, clients[host])
    return host


def hosted_streams(cluster: NetnsCluster, i: int) -> list[str]:
    """The streams server ``i`` holds itself (its /jsz)."""
    jsz = monitor_json(HTTP_PORT, "/jsz?streams=true", host=cluster.address(i))
    return sorted(
        s["name"]
        for acc in jsz.get("account_details") or []
        for s in acc.get("stream_detail") or []
    )


async def publish(nc: NATS, subject: str, payloads: list[bytes]) -> list[int]:
    seqs = []
    for data in payloads:
        msg = await nc.request(subject, data, timeout=2)
        assert b'"error"' not in msg.data, msg.data
        seqs.append(int(msg.data.split(b'"seq":')[1].split(b",")[0].rstrip(b"}")))
    return seqs


async def refused(nc: NATS, subject: str, body: dict[str, Any]) -> None:
    """Send a change through a server cut from the quorum until it answers 10008.

    nats-server answers nothing at first (a server that has just lost its meta leader waits
    for one), then 10008 once it has been without one for a while; a server that can tell at
    once answers 10008 at once. Any other answer (the change made) fails at once; the time
    the 10008 took is bounded by the test's timeout.
    """

    async def answered() -> bool:
        reply = await api(nc, subject, body)
        assert reply == "timeout" or reply.get("error") == UNAVAILABLE, reply
        return reply != "timeout"

    await until(answered, 30, f"10008 for {subject}")


async def isolated_and_noticed(cluster: NetnsCluster, host: int) -> None:
    """Isolate ``host``; return once its /healthz fails and the others' are still fine."""
    cluster.isolate(host)

    async def noticed() -> bool:
        status = [await asyncio.to_thread(cluster.healthz, i) for i in range(len(cluster))]
        return status[host][0] == 503 and all(
            s[0] == 200 for i, s in enumerate(status) if i != host
        )

    await until(noticed, 20, "the isolated server's /healthz at 503, the others' at 200")


@pytest.mark.parametrize("kind", KINDS)
async def test_isolated_host_keeps_its_stream_and_converges(netns_cluster, kind: str) -> None:
    cluster, clients = await js_cluster(netns_cluster, kind)
    try:
        host = await create_hosted(clients, cluster, "ISO")
        other = clients[(host + 1) % 3]
        assert await publish(other, "ISO.a", [b"m1", b"m2"]) == [1, 2]

        await isolated_and_noticed(cluster, host)
        status, body = cluster.healthz(host)
        assert status == 503 and (NOT_CURRENT in body or NO_LEADER in body), body

        # The majority side answers for the cluster and knows the stream is out of reach.
        names = await api(other, "$JS.API.STREAM.NAMES", timeout=4)
        assert names.get("streams") == ["ISO"], names

        async def listed_missing() -> Any:
            reply = await api(other, "$JS.API.STREAM.LIST", timeout=6)
            return reply if isinstance(reply, dict) and reply.get("missing") else None

        listed = await until(listed_missing, 15, "STREAM.LIST reporting ISO missing")
        assert (listed["total"], listed["streams"], listed["missing"]) == (1, [], ["ISO"])
        info = await api(other, "$JS.API.STREAM.INFO.ISO")
        if kind == "nats":
            assert info == "timeout", info
        else:
            assert info.get("error") == UNAVAILABLE, info

        # The host itself: its R1 stream takes publishes on its own disk.
        assert await publish(clients[host], "ISO.b", [b"m3", b"m4"]) == [3, 4]

        cluster.heal()

        async def converged() -> bool:
            status = [await asyncio.to_thread(cluster.healthz, i) for i in range(3)]
            return all(s[0] == 200 for s in status)

        await until(converged, 20, "/healthz 200 on every server")
        await asyncio.to_thread(cluster.wait_formed, 15)

        async def info_everywhere() -> list[Any] | None:
            infos = [await api(nc, "$JS.API.STREAM.INFO.ISO", timeout=1) for nc in clients]
            ok = all(isinstance(i, dict) and "error" not in i for i in infos)
            return infos if ok else None

        infos = await until(info_everywhere, 20, "STREAM.INFO answered through every server")
        for i, info in enumerate(infos):
            assert info["cluster"]["leader"] == cluster.names[host], (i, info)
            assert (info["state"]["messages"], info["state"]["last_seq"]) == (4, 4), (i, info)
        for i, nc in enumerate(clients):
            names = await api(nc, "$JS.API.STREAM.NAMES", timeout=4)
            assert names.get("streams") == ["ISO"], (i, names)
        # One copy only: on its host, nowhere else.
        hosted = [await asyncio.to_thread(hosted_streams, cluster, i) for i in range(3)]
        assert hosted == [["ISO"] if i == host else [] for i in range(3)], hosted
        assert await publish(other, "ISO.c", [b"m5"]) == [5]
    finally:
        for nc in clients:
            await nc.close()


async def unchanged_after_heal(
    cluster: NetnsCluster, clients: list[NATS], host: int, stream: str
) -> None:
    """Heal, then check through another server that the refused update left no trace."""
    cluster.heal()

    async def answered() -> Any:
        info = await api(clients[(host + 1) % 3], f"$JS.API.STREAM.INFO.{stream}", timeout=1)
        return info if isinstance(info, dict) and "error" not in info else None

    info = await until(answered, 20, "STREAM.INFO answered after the heal")
    assert "description" not in info["config"], info["config"]


@pytest.mark.parametrize("kind", KINDS)
async def test_update_through_the_isolated_host_is_refused(netns_cluster, kind: str) -> None:
    """The isolated host holds the stream, but not the metadata: an update through it gets
    10008 at once (nats-server's answer), and is not applied later either."""
    cluster, clients = await js_cluster(netns_cluster, kind)
    try:
        host = await create_hosted(clients, cluster, "UPD")
        await isolated_and_noticed(cluster, host)

        changed = config("UPD", ["UPD.>"], description="changed while isolated")
        await refused(clients[host], "$JS.API.STREAM.UPDATE.UPD", changed)
        # Its own stream is still there to read (and to publish to, see above).
        info = await api(clients[host], "$JS.API.STREAM.INFO.UPD")
        assert isinstance(info, dict) and "error" not in info, info

        await unchanged_after_heal(cluster, clients, host, "UPD")
    finally:
        for nc in clients:
            await nc.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_create_through_a_minority_server_is_refused(netns_cluster, kind: str) -> None:
    """A STREAM.CREATE through a server cut from the other two: 10008 at once, nothing made
    anywhere, and after the heal the name is still free (a create through any server makes
    it new, with the config it gives)."""
    cluster, clients = await js_cluster(netns_cluster, kind)
    try:
        minority = 2
        await isolated_and_noticed(cluster, minority)
        await refused(clients[minority], "$JS.API.STREAM.CREATE.FREE", config("FREE", ["f.>"]))
        names = await api(clients[0], "$JS.API.STREAM.NAMES", timeout=4)
        assert names.get("streams") in (None, []), names

        cluster.heal()
        await until(
            lambda: asyncio.to_thread(lambda: all(cluster.healthz(i)[0] == 200 for i in range(3))),
            20,
            "/healthz 200 on every server",
        )
        await asyncio.to_thread(cluster.wait_formed, 15)
        await asyncio.sleep(2)  # time for a late (buffered, retried) create to land
        for i, nc in enumerate(clients):
            names = await api(nc, "$JS.API.STREAM.NAMES", timeout=4)
            assert names.get("streams") in (None, []), (cluster.names[i], names)
        hosted = [await asyncio.to_thread(hosted_streams, cluster, i) for i in range(3)]
        assert hosted == [[], [], []], hosted

        fresh = config("FREE", ["free.>"], description="made after the heal")
        made = await api(clients[minority], "$JS.API.STREAM.CREATE.FREE", fresh)
        assert isinstance(made, dict) and "error" not in made, made
        assert made["config"]["subjects"] == ["free.>"], made
        assert made.get("did_create", True), made
    finally:
        for nc in clients:
            await nc.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_update_right_after_the_cut_is_refused(netns_cluster, kind: str) -> None:
    """The same update sent the moment the host is cut off, before anything (health, leases,
    route keepalives) has noticed: still refused, never applied. Headwater makes a change
    on the server that hosts the stream only after a read that only an etcd quorum answers."""
    cluster, clients = await js_cluster(netns_cluster, kind)
    try:
        host = await create_hosted(clients, cluster, "NOW")
        cluster.isolate(host)
        changed = config("NOW", ["NOW.>"], description="changed right after the cut")
        await refused(clients[host], "$JS.API.STREAM.UPDATE.NOW", changed)

        await unchanged_after_heal(cluster, clients, host, "NOW")
    finally:
        for nc in clients:
            await nc.close()
