"""Replicated (R3) streams on FILE storage, on a 3-server cluster, against nats-server's.

A file replica applies the committed log without an fsync of its own and restarts from its
newest checkpoint plus the log after it (docs/REPLICATION.md, "Restarting a replica on a file
store"). On both servers' clusters: an R3 file stream is created, takes publishes, a purge, a
message delete and a consumer's synchronous acks; its leader is killed -9 and restarted, and
afterwards every acknowledged message is on every server, the restarted server's own replica
caught up, the consumer does not deliver an acknowledged message again and a publish retried
with its message id is a duplicate. On Headwater only: every server killed -9 at once and
restarted loses nothing acknowledged (a file stream survives a whole cluster's crash, unlike
a memory one) and still calls a retry a duplicate.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest
from cluster.helpers import KINDS, connect, crash, fetch_ready, js_api, wait_jetstream, wait_until
from cluster.test_replicated_streams import create, publish, r3
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.testing import Cluster, monitor_json

pytestmark = pytest.mark.timeout(120)
ON_BOTH = pytest.mark.parametrize("js_cluster", KINDS, indirect=True)
HEADWATER = pytest.mark.parametrize("js_cluster", ["headwater"], indirect=True)


def r3_file(name: str, subjects: list[str], **extra: Any) -> dict[str, Any]:
    return r3(name, subjects, storage="file", **extra)


async def api(nc: NATS, subject: str, body: Any = None, timeout: float = 20) -> dict[str, Any]:
    """An API request retried (bounded) while the stream elects a leader."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = await js_api(nc, subject, body, timeout=2)
        except (NatsTimeoutError, NoRespondersError):
            reply = {"error": {"err_code": -1}}
        code = reply.get("error", {}).get("err_code")
        if code not in (-1, 10008) or time.monotonic() > deadline:  # 10008: no leader yet
            return reply
        await asyncio.sleep(0.2)


async def local_messages(cluster: Cluster, i: int) -> int | None:
    """The messages server ``i`` holds itself (its /jsz), None while it does not answer."""
    try:
        jsz = await asyncio.to_thread(monitor_json, cluster.servers[i].http_port, "/jsz")
    except OSError:
        return None
    return int(jsz.get("messages", 0))


async def fetch_one(nc: NATS, stream: str, durable: str) -> Any:
    """One message of the consumer; asked again (bounded) while its pull subject has no
    responders yet: on nats-server a consumer created a moment ago may not yet listen on
    every server (seen under load)."""
    sub = await nc.jetstream().pull_subscribe_bind(durable, stream)
    return (await fetch_ready(sub, 1))[0]


@ON_BOTH
async def test_an_r3_file_stream_survives_its_leader_killed_and_restarted(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    created = await create(js_clients[0], r3_file("FILES", ["files.>"]))
    assert created["config"]["storage"] == "file" and created["config"]["num_replicas"] == 3
    leader = js_cluster.names.index(created["cluster"]["leader"])
    others = [i for i in range(3) if i != leader]
    acked = {}
    for i in range(20):
        ack = await publish(js_clients[i % 3], f"files.{i % 2}", f"f{i}".encode())
        acked[ack["seq"]] = f"f{i}".encode()
    for i in range(4):
        await publish(js_clients[0], "files.purged", f"p{i}".encode())
    purged = await api(js_clients[1], "$JS.API.STREAM.PURGE.FILES", {"filter": "files.purged"})
    assert purged.get("purged") == 4, purged
    deleted = await api(js_clients[2], "$JS.API.STREAM.MSG.DELETE.FILES", {"seq": 2})
    assert deleted.get("success") is True, deleted
    del acked[2]
    consumer = {"durable_name": "C", "ack_policy": "explicit", "filter_subject": "files.0"}
    body = {"stream_name": "FILES", "config": consumer}
    made = await api(js_clients[0], "$JS.API.CONSUMER.CREATE.FILES.C", body)
    assert "error" not in made, made
    for _ in range(3):
        msg = await fetch_one(js_clients[0], "FILES", "C")
        await msg.ack_sync(timeout=10)
    before = (await api(js_clients[0], "$JS.API.STREAM.INFO.FILES"))["state"]

    crash(js_cluster, leader)
    for i in range(20, 30):
        ack = await publish(js_clients[others[0]], "files.0", f"f{i}".encode())
        acked[ack["seq"]] = f"f{i}".encode()
    await asyncio.to_thread(js_cluster.restart, leader)
    total = before["messages"] + 10

    async def caught_up() -> bool:
        return await local_messages(js_cluster, leader) == total

    await wait_until(caught_up, 30, f"the restarted server holding {total} messages")
    js_clients[leader] = await connect(js_cluster.urls[leader])  # the fixture closes it
    states = []
    for nc in js_clients:
        replies: list[dict[str, Any]] = []

        async def answered(nc: NATS = nc, replies: list[dict[str, Any]] = replies) -> bool:
            # 10008 while the restarted replica's return moves the read round (seen once).
            replies.append(await api(nc, "$JS.API.STREAM.INFO.FILES"))
            return "error" not in replies[-1]

        await wait_until(answered, 10, "STREAM.INFO answered")
        reply = replies[-1]
        states.append({k: reply["state"][k] for k in ("messages", "first_seq", "last_seq")})
    assert states == [states[0]] * 3, states
    assert states[0]["messages"] == total, states
    for nc in js_clients:
        for seq, data in acked.items():
            got = await api(nc, "$JS.API.STREAM.MSG.GET.FILES", {"seq": seq})
            assert base64.b64decode(got["message"]["data"]) == data, (seq, got)
    again = await publish(js_clients[leader], "files.0", b"f25")
    assert again.get("duplicate") is True, again
    # The three acknowledged deliveries (f0, f2, f4 on files.0) are not delivered again.
    msg = await fetch_one(js_clients[others[1]], "FILES", "C")
    assert msg.data == b"f6", msg.data


@HEADWATER
async def test_every_server_killed_at_once_loses_nothing_acknowledged(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    """A file stream's replicas come back from their own disks after a whole cluster's
    crash: every acknowledged message is there, and a retried publish is still a duplicate
    (the duplicate window comes back from each replica's duplicate log)."""
    await create(js_clients[0], r3_file("ALL", ["all.>"], duplicate_window=600_000_000_000))
    acks = []
    for i in range(40):
        acks.append(await publish(js_clients[i % 3], f"all.{i % 4}", f"a{i}".encode()))
    deleted = await api(js_clients[1], "$JS.API.STREAM.MSG.DELETE.ALL", {"seq": 5})
    assert deleted.get("success") is True, deleted
    await asyncio.sleep(1.5)  # past a checkpoint: the restart replays from one, not from 1
    for i in range(40, 50):
        acks.append(await publish(js_clients[i % 3], f"all.{i % 4}", f"a{i}".encode()))
    assert [a["seq"] for a in acks] == list(range(1, 51)), acks
    for nc in js_clients:
        await nc.close()
    for i in range(3):
        crash(js_cluster, i)
    for i in range(3):
        await asyncio.to_thread(js_cluster.restart, i)
    await wait_jetstream(js_cluster)
    for i in range(3):

        async def holds(i: int = i) -> bool:
            return await local_messages(js_cluster, i) == 49

        await wait_until(holds, 30, f"server {i} holding 49 messages")
    clients = [await connect(url) for url in js_cluster.urls]
    try:
        for nc in clients:
            state = (await api(nc, "$JS.API.STREAM.INFO.ALL"))["state"]
            assert (state["messages"], state["last_seq"]) == (49, 50), state
        for seq in (1, 4, 6, 44, 50):
            got = await api(clients[seq % 3], "$JS.API.STREAM.MSG.GET.ALL", {"seq": seq})
            assert "message" in got, (seq, got)
        for data, seq in ((b"a0", 1), (b"a4", 5), (b"a45", 46)):
            again = await publish(clients[2], "all.x", data)
            assert again == {"stream": "ALL", "seq": seq, "duplicate": True}, again
        ack = await publish(clients[0], "all.x", b"new")
        assert ack == {"stream": "ALL", "seq": 51}, ack
    finally:
        for nc in clients:
            await nc.close()
