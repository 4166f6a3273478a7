"""STREAM.LEADER.STEPDOWN on replicated streams, and the stream leader advisories, on a
3-server cluster of each kind (Headwater on etcd, nats-server).

Both must: move a replicated stream's leadership to another replica (STREAM.INFO's
``cluster.leader`` changes within a bounded wait), to the ``placement.preferred`` server
when one is named, with publishes going on and nothing acknowledged lost; answer an R1
stream's step-down with success (nothing to move) and refuse what is wrong with nats-server's
codes and texts; send ``$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED`` when a replica starts
leading and ``QUORUM_LOST`` when a leader cannot reach its replicas (the keys compared, not
the values). On Headwater, a server entering lame duck mode hands the leadership of its
streams over first.

The step-downs share one cluster per kind (``shared_js_cluster``, which deletes their streams
after each); the scenarios that kill servers or send one into lame duck mode start their own.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import pytest
from cluster.helpers import KINDS, crash, js_api, wait_until
from cluster.test_replicated_streams import create, info, publish, r3
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.testing import Cluster

pytestmark = pytest.mark.timeout(90)
ON_BOTH = pytest.mark.parametrize("js_cluster", KINDS, indirect=True)
#: The same on the cluster of each kind the module's tests share (``shared_js_cluster``).
SHARED = pytest.mark.parametrize("module_js_cluster", KINDS, indirect=True)
HEADWATER = pytest.mark.parametrize("js_cluster", ["headwater"], indirect=True)
STEPDOWN_TYPE = "io.nats.jetstream.api.v1.stream_leader_stepdown_response"


async def stepdown(nc: NATS, name: str, body: dict[str, Any] | bytes | None = None) -> Any:
    data = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
    msg = await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", data, timeout=15)
    return json.loads(msg.data)


async def leader_of(nc: NATS, name: str) -> str | None:
    """The leader STREAM.INFO names; None while nobody answers (an election under way)."""
    try:
        reply = await info(nc, name)
    except NatsTimeoutError:
        return None
    return reply.get("cluster", {}).get("leader")


async def wait_leader_other_than(nc: NATS, name: str, old: str, timeout: float = 10) -> str:
    found: list[str] = []

    async def moved() -> bool:
        leader = await leader_of(nc, name)
        if leader and leader != old:
            found.append(leader)
            return True
        return False

    await wait_until(moved, timeout, f"a leader of {name} other than {old}")
    return found[-1]


def success() -> dict[str, Any]:
    return {"type": STEPDOWN_TYPE, "success": True}


def error(code: int, err_code: int, description: str) -> dict[str, Any]:
    return {
        "type": STEPDOWN_TYPE,
        "error": {"code": code, "err_code": err_code, "description": description},
    }


@SHARED
async def test_stepdown_moves_the_leader_and_publishes_go_on(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    created = await create(shared_js_clients[0], r3("SD", ["sd.>"]))
    old = created["cluster"]["leader"]
    for i in range(10):
        await publish(shared_js_clients[i % 3], "sd.a", f"a{i}".encode())
    # Publishes keep coming from another task while the leadership moves.
    acked: list[int] = []

    async def publisher() -> None:
        for i in range(40):
            ack = await publish(shared_js_clients[i % 3], "sd.b", f"b{i}".encode(), timeout=20)
            assert "error" not in ack, ack
            acked.append(ack["seq"])
            await asyncio.sleep(0.02)

    task = asyncio.create_task(publisher())
    await asyncio.sleep(0.1)
    began = time.monotonic()
    assert await stepdown(shared_js_clients[1], "SD") == success()
    new = await wait_leader_other_than(shared_js_clients[2], "SD", old)
    print(
        f"\n{shared_js_cluster.kinds[0]}: leader {old} -> {new} in {time.monotonic() - began:.2f} s"
    )
    await asyncio.wait_for(task, 60)
    assert len(set(acked)) == 40
    for nc in shared_js_clients:
        await wait_until(
            lambda nc=nc: _messages(nc, "SD", 50), 10, "every acknowledged message everywhere"
        )
    # And to a preferred replica, named by its server. (nats-server leaves a step-down
    # request unanswered for a moment after its stream leader changed: give it a second.)
    await asyncio.sleep(1.0)
    target = next(n for n in shared_js_cluster.names if n != new)
    began = time.monotonic()
    reply = await stepdown(shared_js_clients[0], "SD", {"placement": {"preferred": target}})
    print(f"answered in {time.monotonic() - began:.2f} s")
    assert reply == success()
    await wait_until(
        lambda: _leader_is(shared_js_clients[0], "SD", target), 10, f"{target} leading SD"
    )
    ack = await publish(shared_js_clients[2], "sd.c", b"c0")
    assert ack["seq"] == 51, ack


async def _messages(nc: NATS, name: str, count: int) -> bool:
    try:
        reply = await info(nc, name)
    except NatsTimeoutError:
        return False
    return reply.get("state", {}).get("messages") == count


async def _leader_is(nc: NATS, name: str, server: str) -> bool:
    return await leader_of(nc, name) == server


@SHARED
async def test_stepdown_errors(shared_js_cluster: Cluster, shared_js_clients: list[NATS]) -> None:
    created = await create(shared_js_clients[0], r3("ERR", ["err.>"]))
    leader = created["cluster"]["leader"]
    r1 = await js_api(
        shared_js_clients[0],
        "$JS.API.STREAM.CREATE.ONE",
        {"name": "ONE", "subjects": ["one"], "storage": "memory"},
        timeout=10,
    )
    assert "error" not in r1, r1
    nc = shared_js_clients[1]
    assert await stepdown(nc, "ONE") == success()  # an R1 stream: nothing to move
    assert await stepdown(nc, "NOPE") == error(404, 10059, "stream not found")
    assert (await stepdown(nc, "ERR", b"{not json"))["error"]["err_code"] == 10025
    assert await stepdown(nc, "ERR", {"foo": 1}) == error(
        400, 10025, 'invalid JSON: json: unknown field "foo"'
    )
    assert await stepdown(nc, "ERR", b"[]") == error(
        400,
        10025,
        "invalid JSON: json: cannot unmarshal array into Go value of type "
        "server.JSApiLeaderStepdownRequest",
    )
    assert await stepdown(nc, "ERR", {"placement": {"preferred": "zzz"}}) == error(
        400, 10005, 'preferred server "zzz" not known'
    )
    assert await stepdown(nc, "ERR", {"placement": {"preferred": leader}}) == error(
        400, 10005, f'preferred server "{leader}" is already leader'
    )
    for placement in ({"tags": ["nowhere"]}, {"cluster": "elsewhere"}):
        assert await stepdown(nc, "ERR", {"placement": placement}) == error(
            400, 10005, "no replacement peer connected"
        )
    # None of those moved it.
    assert await leader_of(nc, "ERR") == leader


@HEADWATER
async def test_stepdown_of_a_stream_that_lost_its_quorum(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    """10008 once the leader has not heard from a quorum for a while (before, the step-down
    is taken, and goes nowhere). nats-server, with two of its three servers gone, answers
    nothing at all (its meta group lost its quorum too), so this runs on Headwater only."""
    created = await create(js_clients[0], r3("LOST", ["lost.>"]))
    leader = js_cluster.names.index(created["cluster"]["leader"])
    await publish(js_clients[leader], "lost.a", b"x")
    survivor = leader
    for i in range(3):
        if i != survivor:
            crash(js_cluster, i)
    # Until the leader notices (nats-server's steps down, Headwater's has not heard from a
    # quorum for a while), a step-down may still be taken; then it is refused.
    reply: dict[str, Any] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reply = await stepdown(js_clients[survivor], "LOST")
        if "error" in reply:
            break
        await asyncio.sleep(0.5)
    assert reply.get("error", {}).get("err_code") == 10008, reply


def _keys(body: dict[str, Any]) -> dict[str, Any]:
    """The shape of an advisory: its keys, and the keys of each replica."""
    return {
        "keys": sorted(body),
        "replicas": sorted({k for r in body.get("replicas", []) for k in r} - {"lag"}),
    }


@ON_BOTH
async def test_leader_advisories(js_cluster: Cluster, js_clients: list[NATS]) -> None:
    box: asyncio.Queue[Msg] = asyncio.Queue()
    await js_clients[0].subscribe("$JS.EVENT.ADVISORY.STREAM.*.ADV", cb=box.put)
    await js_clients[0].flush()
    created = await create(js_clients[0], r3("ADV", ["adv.>"]))
    old = created["cluster"]["leader"]
    elected = await _next(box, "LEADER_ELECTED", 10)
    assert elected.subject == "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ADV"
    body = json.loads(elected.data)
    assert body["type"] == "io.nats.jetstream.advisory.v1.stream_leader_elected"
    assert (body["stream"], body["leader"]) == ("ADV", old)
    assert sorted(r["name"] for r in body["replicas"]) == sorted(js_cluster.names)
    assert _keys(body) == {
        "keys": ["id", "leader", "replicas", "stream", "timestamp", "type"],
        "replicas": ["active", "current", "name", "peer"],
    }
    assert await stepdown(js_clients[0], "ADV") == success()
    again = json.loads((await _next(box, "LEADER_ELECTED", 10)).data)
    assert again["leader"] != old and _keys(again) == _keys(body)
    # The leader loses both other servers: it cannot commit, and says so.
    leader = js_cluster.names.index(again["leader"])
    if leader != 0:  # the advisories come through server 0's client: keep it up
        # Asked once server 0 knows the new leader (before, it may send it to the old one,
        # which answers 10008, as a client sees during any change of leader).
        await wait_until(
            lambda: _leader_is(js_clients[0], "ADV", again["leader"]), 10, "the new leader known"
        )
        assert await stepdown(js_clients[0], "ADV", {"placement": {"preferred": "s1"}}) == success()
        await _next(box, "LEADER_ELECTED", 10)
        leader = 0
    for i in range(3):
        if i != leader:
            crash(js_cluster, i)
    lost = await _next(box, "QUORUM_LOST", 30)
    assert lost.subject == "$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.ADV"
    body = json.loads(lost.data)
    assert body["type"] == "io.nats.jetstream.advisory.v1.stream_quorum_lost"
    assert _keys(body) == {
        "keys": ["id", "replicas", "stream", "timestamp", "type"],
        "replicas": ["active", "current", "name", "peer"],
    }


async def _next(box: asyncio.Queue[Msg], kind: str, timeout: float) -> Msg:
    deadline = time.monotonic() + timeout
    for _ in range(1000):
        msg = await asyncio.wait_for(box.get(), max(deadline - time.monotonic(), 0.01))
        if msg.subject.split(".")[4] == kind:
            return msg
    raise AssertionError(f"no {kind} advisory")


@ON_BOTH
async def test_lame_duck_moves_leadership_before_the_server_exits(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    """A server entering lame duck mode (SIGUSR2) hands over the streams it leads while it
    is still up (its connected client keeps it in the 10 s grace period), and publishes
    through the other servers go on."""
    created = await create(js_clients[0], r3("LDM", ["ldm.>"]))
    old = created["cluster"]["leader"]
    leaving = js_cluster.names.index(old)
    others = [i for i in range(3) if i != leaving]
    for i in range(5):
        await publish(js_clients[others[0]], "ldm.a", f"a{i}".encode())
    began = time.monotonic()
    js_cluster.servers[leaving].signal(signal.SIGUSR2)
    new = await wait_leader_other_than(js_clients[others[0]], "LDM", old, timeout=8)
    took = time.monotonic() - began
    print(f"\n{js_cluster.kinds[0]}: lame duck moved the leader {old} -> {new} in {took:.2f} s")
    assert js_cluster.servers[leaving].running, "moved before the lame-duck server exited"
    for i in range(5):
        ack = await publish(js_clients[others[i % 2]], "ldm.b", f"b{i}".encode())
        assert ack["seq"] == 6 + i, ack


CONSUMER_STEPDOWN_TYPE = "io.nats.jetstream.api.v1.consumer_leader_stepdown_response"


async def consumer_stepdown(nc: NATS, stream: str, consumer: str) -> Any:
    subject = f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}"
    msg = await nc.request(subject, b"", timeout=15)
    return json.loads(msg.data)


async def _consumer_leader(nc: NATS, stream: str, consumer: str) -> str | None:
    try:
        reply = await js_api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{consumer}", timeout=5)
    except NatsTimeoutError:
        return None
    return reply.get("cluster", {}).get("leader")


@SHARED
async def test_consumer_stepdown_moves_its_leader(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    """CONSUMER.LEADER.STEPDOWN: the consumer's leader moves (on Headwater with its stream's:
    docs/DIFFERENCES.md) and the consumer goes on from its state; an unknown stream or
    consumer is named as nats-server names it."""
    await create(shared_js_clients[0], r3("CSD", ["csd.>"]))
    for i in range(4):
        await publish(shared_js_clients[0], "csd.a", f"c{i}".encode())
    made = await js_api(
        shared_js_clients[0],
        "$JS.API.CONSUMER.CREATE.CSD.W",
        {"stream_name": "CSD", "config": {"durable_name": "W", "ack_policy": "explicit"}},
        timeout=10,
    )
    assert "error" not in made, made
    old = made["cluster"]["leader"]
    nc = shared_js_clients[1]
    assert await consumer_stepdown(nc, "CSD", "W") == {
        "type": CONSUMER_STEPDOWN_TYPE,
        "success": True,
    }

    async def moved() -> bool:
        leader = await _consumer_leader(nc, "CSD", "W")
        return leader is not None and leader != old

    await wait_until(moved, 15, "a new consumer leader")
    reply = await js_api(nc, "$JS.API.CONSUMER.INFO.CSD.W", timeout=5)
    assert reply["num_pending"] == 4, reply
    assert (await consumer_stepdown(nc, "CSD", "NOPE"))["error"] == {
        "code": 404,
        "err_code": 10014,
        "description": "consumer not found",
    }
    assert (await consumer_stepdown(nc, "NOPE", "W"))["error"] == {
        "code": 404,
        "err_code": 10059,
        "description": "stream not found",
    }
