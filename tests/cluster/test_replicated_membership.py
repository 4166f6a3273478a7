"""A replicated stream's peers change: STREAM.UPDATE of ``num_replicas`` (3 to 5 and back) and
STREAM.PEER.REMOVE, on a 5-server cluster of each kind (Headwater on etcd, nats-server).

Both must: answer the update with the new count at once and then move the stream there
(STREAM.INFO's ``cluster.replicas`` reaches the new peers, each current), keep every
acknowledged message on the replicas added (a new one leads and holds them all), and take the
removed replicas out; replace a removed peer by another server (the count kept), the leader
included (another leads); refuse a server not a peer (10040), a request without one (10003)
and an unknown stream (10059) with nats-server's codes; scale down to one replica and up
again. On Headwater a removed server also deletes its replica (``/jsz`` no longer lists the
stream there). A stream created with one replica becomes replicated, its messages and its
consumers' states kept.

The scenarios share one cluster per kind, each on its own stream, deleted after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from cluster.helpers import (
    KINDS,
    acked_work,
    connect,
    js_api,
    require_nats_server,
    wait_jetstream,
    wait_until,
)
from cluster.test_replicated_streams import create, info, publish, r3
from nats.aio.client import Client as NATS
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.testing import Cluster, monitor_json

pytestmark = pytest.mark.timeout(120)
PEER_REMOVE_TYPE = "io.nats.jetstream.api.v1.stream_remove_peer_response"


@pytest.fixture(scope="module", params=KINDS)
def five(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    require_nats_server([request.param])
    yield from _five(request.param)


def _five(kind: str) -> Iterator[Cluster]:
    """Five servers with JetStream, started again once if JetStream is not ready in 40 s
    (seen once under load with five etcd members: the first failure is printed, not lost)."""
    for attempt in (1, 2):
        with Cluster(kind, n=5, jetstream=True) as formed:
            try:
                asyncio.run(wait_jetstream(formed, timeout=40))
            except AssertionError as exc:
                if attempt == 2:
                    raise
                print(f"five {kind} servers not ready, started again: {exc}")
                continue
            yield formed
            return


@pytest.fixture
async def nc(five: Cluster) -> AsyncIterator[NATS]:
    conn = await connect(five.urls[0])
    try:
        yield conn
    finally:
        await conn.close()


async def _replicas(nc: NATS, name: str) -> tuple[str | None, list[dict[str, Any]], int]:
    """STREAM.INFO's leader, replicas and message count (None and [] while none answers)."""
    try:
        reply = await info(nc, name)
    except Exception:  # an election under way: nobody answers for a moment
        return None, [], -1
    if "error" in reply:  # 10008 while the leadership moves
        return None, [], -1
    cluster = reply.get("cluster") or {}
    return cluster.get("leader"), cluster.get("replicas") or [], reply["state"]["messages"]


async def wait_peers(nc: NATS, name: str, count: int, messages: int, without: str = "") -> set[str]:
    """Until the stream has a leader and ``count - 1`` current replicas (``without`` not
    among them), with ``messages``; returns its peers (leader included)."""
    found: list[set[str]] = []

    async def settled() -> bool:
        leader, replicas, held = await _replicas(nc, name)
        current = [r["name"] for r in replicas if r.get("current")]
        if not leader or without == leader or without in current or held != messages:
            return False
        if len(replicas) == count - 1 == len(current):
            found.append({leader, *current})
            return True
        return False

    await wait_until(settled, 30, f"{name} on {count} current peers with {messages} messages")
    return found[-1]


async def fill(nc: NATS, subject: str, start: int, count: int) -> None:
    for i in range(start, start + count):
        ack = await publish(nc, subject, f"m{i}".encode())
        assert "error" not in ack, ack


async def remove_peer(nc: NATS, name: str, body: Any = None) -> dict[str, Any]:
    return await js_api(nc, f"$JS.API.STREAM.PEER.REMOVE.{name}", body, timeout=10)


async def lead_on(nc: NATS, name: str, server: str) -> None:
    """Hand the leadership to ``server`` (STREAM.LEADER.STEPDOWN with it preferred)."""

    async def moved() -> bool:
        leader, _, _ = await _replicas(nc, name)
        if leader == server:
            return True
        body = {"placement": {"preferred": server}}
        # nats-server left one unanswered under load: asked again on the next round.
        with contextlib.suppress(NatsTimeoutError):
            await js_api(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", body, timeout=5)
        return False

    await wait_until(moved, 30, f"{server} leading {name}", interval=1.0)


def hosts(cluster: Cluster, name: str) -> set[str]:
    """The Headwater servers whose ``/jsz`` lists ``name`` (one per replica held)."""
    held = set()
    for i, srv in enumerate(cluster.servers):
        jsz = monitor_json(srv.http_port, "/jsz?streams=true")
        for acc in jsz.get("account_details") or []:
            if any(s["name"] == name for s in acc.get("stream_detail") or []):
                held.add(cluster.names[i])
    return held


def held_by(cluster: Cluster, name: str, peers: set[str]) -> Any:
    async def check() -> bool:
        return await asyncio.to_thread(hosts, cluster, name) == peers

    return check


async def test_growing_to_five_and_back_to_three(five: Cluster, nc: NATS) -> None:
    config = r3("GROW", ["grow.>"], storage="file")
    try:
        await create(nc, config)
        await fill(nc, "grow.a", 0, 20)
        grown = await js_api(nc, "$JS.API.STREAM.UPDATE.GROW", {**config, "num_replicas": 5}, 10)
        assert "error" not in grown, grown
        assert grown["config"]["num_replicas"] == 5
        # While the peers change, the reply says where they go (nats-server 2.15's block).
        desired = grown["cluster"]["desired"]
        assert sorted(r["name"] for r in desired["replicas"]) == sorted(five.names), desired
        assert desired["origin"] == {"replicas": 3} and desired["name"] == grown["cluster"]["name"]
        await fill(nc, "grow.a", 20, 10)
        peers = await wait_peers(nc, "GROW", 5, 30)
        assert peers == set(five.names)

        async def settled() -> bool:
            return "desired" not in (await info(nc, "GROW")).get("cluster", {})

        await wait_until(settled, 20, "no desired block once the peers are reached")
        # Every server holds every acknowledged message: each leads in turn and has them all.
        for server in five.names[3:]:
            await lead_on(nc, "GROW", server)
            leader, _, held = await _replicas(nc, "GROW")
            assert (leader, held) == (server, 30)
        shrunk = await js_api(nc, "$JS.API.STREAM.UPDATE.GROW", {**config, "num_replicas": 3}, 10)
        assert "error" not in shrunk, shrunk
        assert shrunk["config"]["num_replicas"] == 3
        await fill(nc, "grow.a", 30, 5)
        kept = await wait_peers(nc, "GROW", 3, 35)
        if five.kinds[0] == "headwater":
            await wait_until(held_by(five, "GROW", kept), 20, "the removed replicas deleted")
    finally:
        await js_api(nc, "$JS.API.STREAM.DELETE.GROW", timeout=10)


async def test_a_removed_peer_is_replaced(five: Cluster, nc: NATS) -> None:
    try:
        created = await create(nc, r3("SWAP", ["swap.>"]))
        await fill(nc, "swap.a", 0, 10)
        leader = created["cluster"]["leader"]
        follower = created["cluster"]["replicas"][0]["name"]
        assert await remove_peer(nc, "SWAP", {"peer": follower}) == {
            "type": PEER_REMOVE_TYPE,
            "success": True,
        }
        await fill(nc, "swap.a", 10, 5)
        peers = await wait_peers(nc, "SWAP", 3, 15, without=follower)
        assert leader in peers
        # The leader itself: another leads, and the count is kept.
        assert (await remove_peer(nc, "SWAP", {"peer": leader})).get("success") is True
        peers = await wait_peers(nc, "SWAP", 3, 15, without=leader)
        await fill(nc, "swap.a", 15, 5)
        await wait_peers(nc, "SWAP", 3, 20)
        if five.kinds[0] == "headwater":
            await wait_until(held_by(five, "SWAP", peers), 20, "the removed replicas deleted")
    finally:
        await js_api(nc, "$JS.API.STREAM.DELETE.SWAP", timeout=10)


async def test_peer_removal_errors(five: Cluster, nc: NATS) -> None:
    def error(code: int, err_code: int, description: str) -> dict[str, Any]:
        return {
            "type": PEER_REMOVE_TYPE,
            "error": {"code": code, "err_code": err_code, "description": description},
        }

    try:
        await create(nc, r3("ERRS", ["errs.>"]))
        assert await remove_peer(nc, "ERRS", {"peer": "nope"}) == error(
            400, 10040, "peer not a member"
        )
        assert await remove_peer(nc, "ERRS", {}) == error(400, 10003, "bad request")
        assert await remove_peer(nc, "ERRS") == error(400, 10003, "bad request")
        assert await remove_peer(nc, "NOPE", {"peer": "s1"}) == error(
            404, 10059, "stream not found"
        )
        _, _, held = await _replicas(nc, "ERRS")
        assert held == 0
        await wait_peers(nc, "ERRS", 3, 0)  # nothing changed
    finally:
        await js_api(nc, "$JS.API.STREAM.DELETE.ERRS", timeout=10)


async def test_down_to_one_replica_and_up_again(five: Cluster, nc: NATS) -> None:
    config = r3("ONE", ["one.>"])
    try:
        created = await create(nc, config)
        await fill(nc, "one.a", 0, 5)
        down = await js_api(nc, "$JS.API.STREAM.UPDATE.ONE", {**config, "num_replicas": 1}, 10)
        assert "error" not in down, down
        assert down["config"]["num_replicas"] == 1
        (alone,) = await wait_peers(nc, "ONE", 1, 5)
        assert alone == created["cluster"]["leader"]  # the leader stays
        await fill(nc, "one.a", 5, 5)
        if five.kinds[0] == "headwater":
            await wait_until(held_by(five, "ONE", {alone}), 20, "the two others deleted")
        up = await js_api(nc, "$JS.API.STREAM.UPDATE.ONE", {**config, "num_replicas": 3}, 10)
        assert "error" not in up, up
        await wait_peers(nc, "ONE", 3, 10)
    finally:
        await js_api(nc, "$JS.API.STREAM.DELETE.ONE", timeout=10)


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_a_stream_created_with_one_replica_grows(
    five: Cluster, nc: NATS, storage: str
) -> None:
    """A stream created with one replica becomes replicated (three peers, each current),
    keeping its messages and its consumer's acknowledged state: each new replica leads in turn
    with every message and the consumer's ack floor, and the consumer goes on where it was."""
    name = f"PLAIN{storage.upper()}"
    subject = f"{name.lower()}.a"
    config = {**r3(name, [f"{name.lower()}.>"], storage=storage), "num_replicas": 1}
    try:
        created = await create(nc, config)
        first = created["cluster"]["leader"]
        await fill(nc, subject, 0, 10)
        sub = await acked_work(nc, name, 4)
        up = await js_api(nc, f"$JS.API.STREAM.UPDATE.{name}", {**config, "num_replicas": 3}, 10)
        assert "error" not in up, up
        assert up["config"]["num_replicas"] == 3
        await fill(nc, subject, 10, 5)
        peers = await wait_peers(nc, name, 3, 15)
        assert first in peers
        for server in sorted(peers - {first}):
            await lead_on(nc, name, server)
            leader, _, held = await _replicas(nc, name)
            assert (leader, held) == (server, 15)
            state = await js_api(nc, f"$JS.API.CONSUMER.INFO.{name}.WORK", timeout=10)
            assert state["ack_floor"]["stream_seq"] == 4, state
        (msg,) = await sub.fetch(1, timeout=10)
        assert msg.metadata.sequence.stream == 5 and msg.data == b"m4"
    finally:
        await js_api(nc, f"$JS.API.STREAM.DELETE.{name}", timeout=10)
