"""Replicated (R3) memory streams on a 3-server cluster, against nats-server's.

Each scenario runs on both servers' clusters and asserts what both answer: the create reply
names a leader and the two other servers as replicas; publishes through any server are
acknowledged in order and every server reports the same stream; purge, message delete and
message get work through any server; deleting through any server removes it everywhere; a
stream keeps every acknowledged message when its leader dies (the publishes go on once the
others elected a new one). On Headwater, a server restarted after the leader compacted its
log past it catches up by a snapshot. Where Headwater does not do what nats-server does yet,
it refuses with what is missing (10052), and that is asserted on Headwater only.

The scenarios that leave every server running share one cluster per kind
(``shared_js_cluster``, which deletes their streams after each); those that kill a server
start their own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from cluster.helpers import KINDS, acked_work, crash, js_api, wait_until
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.control import backup
from headwater.testing import Cluster, monitor_json

pytestmark = pytest.mark.timeout(60)
ON_BOTH = pytest.mark.parametrize("js_cluster", KINDS, indirect=True)
#: The same on the cluster of each kind the module's tests share (``shared_js_cluster``).
SHARED = pytest.mark.parametrize("module_js_cluster", KINDS, indirect=True)
SHARED_HEADWATER = pytest.mark.parametrize("module_js_cluster", ["headwater"], indirect=True)
HEADWATER = pytest.mark.parametrize("js_cluster", ["headwater"], indirect=True)


def r3(name: str, subjects: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "subjects": subjects, "storage": "memory", "num_replicas": 3, **extra}


async def create(nc: NATS, config: dict[str, Any]) -> dict[str, Any]:
    reply = await js_api(nc, f"$JS.API.STREAM.CREATE.{config['name']}", config, timeout=10)
    assert "error" not in reply, reply
    return reply


async def publish(nc: NATS, subject: str, data: bytes, timeout: float = 20) -> dict[str, Any]:
    """Publish until acknowledged (bounded): while a stream has no leader a publish gets no
    answer (or no responders), and the publisher sends it again, on either server."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = await nc.request(subject, data, timeout=1, headers={"Nats-Msg-Id": data.decode()})
            return dict(json.loads(msg.data))
        except (NatsTimeoutError, NoRespondersError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def info(nc: NATS, name: str) -> dict[str, Any]:
    return await js_api(nc, f"$JS.API.STREAM.INFO.{name}", timeout=5)


@SHARED
async def test_an_r3_stream_is_created_with_a_leader_and_two_replicas(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    created = await create(shared_js_clients[1], r3("ORDERS", ["orders.>"]))
    assert created["config"]["num_replicas"] == 3
    cluster = created["cluster"]
    leader = cluster["leader"]
    assert leader in shared_js_cluster.names
    replicas = sorted(r["name"] for r in cluster["replicas"])
    assert replicas == sorted(set(shared_js_cluster.names) - {leader})
    for replica in cluster["replicas"]:
        assert set(replica) >= {"name", "current", "active", "peer"}
    assert created["did_create"] is True


@SHARED
async def test_publishes_through_every_server_are_in_one_stream(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    await create(shared_js_clients[0], r3("EVENTS", ["events.>"]))
    seqs = []
    for i in range(12):
        ack = await publish(shared_js_clients[i % 3], f"events.{i}", f"e{i}".encode())
        assert ack.get("stream") == "EVENTS", ack
        seqs.append(ack["seq"])
    assert seqs == list(range(1, 13))
    again = await publish(shared_js_clients[2], "events.3", b"e3")
    assert again == {"stream": "EVENTS", "seq": 4, "duplicate": True}
    leaders = set()
    for nc in shared_js_clients:
        reply = await info(nc, "EVENTS")
        assert reply["state"]["messages"] == 12, reply
        leaders.add(reply["cluster"]["leader"])
    assert len(leaders) == 1


@SHARED
async def test_purge_delete_and_get_through_any_server(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    await create(shared_js_clients[0], r3("LOG", ["log.>"]))
    for i in range(6):
        await publish(shared_js_clients[0], f"log.{i % 2}", f"l{i}".encode())
    got = await js_api(shared_js_clients[1], "$JS.API.STREAM.MSG.GET.LOG", {"seq": 2}, timeout=5)
    assert got["message"]["subject"] == "log.1", got
    deleted = await js_api(
        shared_js_clients[2], "$JS.API.STREAM.MSG.DELETE.LOG", {"seq": 2}, timeout=5
    )
    assert deleted == {
        "type": "io.nats.jetstream.api.v1.stream_msg_delete_response",
        "success": True,
    }
    again = await js_api(
        shared_js_clients[1], "$JS.API.STREAM.MSG.DELETE.LOG", {"seq": 2}, timeout=5
    )
    assert again["error"] == {"code": 400, "err_code": 10043, "description": "sequence 2 not found"}
    purged = await js_api(
        shared_js_clients[1], "$JS.API.STREAM.PURGE.LOG", {"filter": "log.0"}, timeout=5
    )
    assert purged.get("purged") == 3, purged
    for nc in shared_js_clients:
        state = (await info(nc, "LOG"))["state"]
        assert (state["messages"], state["last_seq"]) == (2, 6), state


@SHARED
async def test_deleted_through_any_server_it_is_gone_everywhere(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    await create(shared_js_clients[0], r3("GONE", ["gone.>"]))
    await publish(shared_js_clients[0], "gone.a", b"g")
    reply = await js_api(shared_js_clients[2], "$JS.API.STREAM.DELETE.GONE", timeout=10)
    assert reply.get("success") is True, reply

    async def gone(nc: NATS) -> bool:
        names = await js_api(nc, "$JS.API.STREAM.NAMES", timeout=5)
        return not names.get("streams")

    for nc in shared_js_clients:
        await wait_until(lambda nc=nc: gone(nc), 10, "no stream listed")


@SHARED
async def test_more_replicas_than_servers_is_refused(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    reply = await js_api(
        shared_js_clients[0],
        "$JS.API.STREAM.CREATE.R5",
        r3("R5", ["r5"], num_replicas=5),
        timeout=5,
    )
    assert reply.get("error") == {
        "code": 400,
        "err_code": 10005,
        "description": "no suitable peers for placement",
    }


@ON_BOTH
async def test_every_acknowledged_message_survives_the_leaders_death(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    created = await create(js_clients[0], r3("SAFE", ["safe.>"]))
    leader = js_cluster.names.index(created["cluster"]["leader"])
    others = [i for i in range(3) if i != leader]
    for i in range(20):
        await publish(js_clients[others[0]], "safe.a", f"a{i}".encode())
    crash(js_cluster, leader)
    began = time.monotonic()
    ack = await publish(js_clients[others[0]], "safe.b", b"b0", timeout=20)
    took = time.monotonic() - began
    print(f"\n{js_cluster.kinds[0]}: publishes accepted again {took:.2f} s after the leader died")
    assert ack["seq"] == 21, ack
    for i in range(1, 10):
        await publish(js_clients[others[1]], "safe.b", f"b{i}".encode())
    reply = await info(js_clients[others[1]], "SAFE")
    assert reply["state"]["messages"] == 30, reply
    assert reply["cluster"]["leader"] in [js_cluster.names[i] for i in others]


@SHARED
async def test_an_update_reaches_every_replica(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    """A new description, a lower max_msgs and one more subject, through a server that does
    not lead: every server then reports the new config and the trimmed stream, and the
    leader takes the new subject."""
    created = await create(shared_js_clients[0], r3("UPD", ["upd.a"]))
    leader = shared_js_cluster.names.index(created["cluster"]["leader"])
    for i in range(8):
        await publish(shared_js_clients[0], "upd.a", f"u{i}".encode())
    via = shared_js_clients[(leader + 1) % 3]
    config = r3("UPD", ["upd.a", "upd.b"], max_msgs=5, description="trimmed")
    updated = await js_api(via, "$JS.API.STREAM.UPDATE.UPD", config, timeout=10)
    assert "error" not in updated, updated
    assert updated["config"]["max_msgs"] == 5 and updated["state"]["messages"] == 5
    ack = await publish(shared_js_clients[2], "upd.b", b"new-subject")
    assert ack["seq"] == 9, ack
    for nc in shared_js_clients:
        reply = await info(nc, "UPD")
        assert reply["config"]["subjects"] == ["upd.a", "upd.b"], reply["config"]
        assert reply["config"]["description"] == "trimmed"
        assert (reply["state"]["messages"], reply["state"]["first_seq"]) == (5, 5), reply


@HEADWATER
async def test_a_server_back_after_the_leader_compacted_gets_every_message(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    """A follower's server crashes; the others take more than twice the compaction interval
    (1,000 entries), so the leader's log no longer reaches back to where the crashed one
    stopped. Restarted, its memory stream is empty: it gets the leader's snapshot, then the
    log, and its own replica (its /jsz) holds every message again."""
    created = await create(js_clients[0], r3("BIG", ["big.>"]))
    leader = js_cluster.names.index(created["cluster"]["leader"])
    down = next(i for i in range(3) if i != leader)
    up = next(i for i in range(3) if i not in (leader, down))
    await publish(js_clients[up], "big.first", b"first")
    crash(js_cluster, down)
    count = 2_500
    sent = 1
    for start in range(1, count, 100):
        batch = [f"m{i}".encode() for i in range(start, min(start + 100, count))]
        acks = await asyncio.gather(*(publish(js_clients[up], "big.m", data) for data in batch))
        assert all("error" not in a for a in acks), acks
        sent += len(batch)
    assert sent == count
    await asyncio.to_thread(js_cluster.restart, down)

    async def local_messages() -> int | None:
        try:
            jsz = await asyncio.to_thread(monitor_json, js_cluster.servers[down].http_port, "/jsz")
        except OSError:
            return None
        return jsz.get("messages") == count and jsz.get("streams") == 1

    await wait_until(local_messages, 20, f"the restarted server holding {count} messages")
    log = js_cluster.servers[down].log_path.read_text(errors="replace")
    assert "installed" in log and "snapshot at" in log, log[-2000:]
    reply = await info(js_clients[up], "BIG")
    assert reply["state"]["messages"] == count, reply

    async def current_again() -> bool:
        # The leader puts it back in sync once it matched the log (the next replies).
        cluster = (await info(js_clients[up], "BIG"))["cluster"]
        mine = [r for r in cluster["replicas"] if r["name"] == js_cluster.names[down]]
        return bool(mine) and mine[0]["current"] is True

    await wait_until(current_again, 10, "the restarted replica current again")


@SHARED
async def test_nats_py_jetstream_api_on_an_r3_stream_and_bucket(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    """An official client's own API, unmodified: add_stream with replicas, publish, get_msg,
    and a KV bucket with replicas (put through one server, get through another)."""
    from nats.js.api import StorageType, StreamConfig

    js = [nc.jetstream() for nc in shared_js_clients]
    info = await js[0].add_stream(
        StreamConfig(name="PY", subjects=["py.>"], storage=StorageType.MEMORY, num_replicas=3)
    )
    assert info.config.num_replicas == 3 and info.cluster is not None
    assert len(info.cluster.replicas or []) == 2
    acks = [await js[i % 3].publish(f"py.{i}", f"p{i}".encode(), timeout=10) for i in range(6)]
    assert [a.seq for a in acks] == list(range(1, 7))
    got = await js[2].get_msg("PY", 4)
    assert got.subject == "py.3" and got.data == b"p3"
    kv = await js[1].create_key_value(bucket="CFG", replicas=3, storage=StorageType.MEMORY)
    revision = await kv.put("color", b"blue")
    other = await js[2].key_value("CFG")
    entry = await other.get("color")
    assert (entry.value, entry.revision) == (b"blue", revision)


@SHARED_HEADWATER
async def test_what_replicated_streams_do_not_do_yet_is_refused(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    await create(shared_js_clients[0], r3("NOTYET", ["notyet.>"]))
    update = await js_api(
        shared_js_clients[2],
        "$JS.API.STREAM.UPDATE.NOTYET",
        r3("NOTYET", ["notyet.>"], subject_delete_marker_ttl=60_000_000_000, allow_msg_ttl=True),
        timeout=5,
    )
    assert update.get("error") == {
        "code": 500,
        "err_code": 10052,
        "description": "turning subject delete markers on in an update of a replicated "
        "stream is not supported yet",
    }


@SHARED
async def test_a_backup_is_restored_with_three_replicas(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS], tmp_path: Path
) -> None:
    """A backup of a stream made with one replica is restored with three: every message and
    the consumer's acknowledged state are there, on a leader and two current replicas (on
    Headwater the restored stream becomes a replicated group from its state)."""
    nc = shared_js_clients[0]
    config = {**r3("BACKED", ["backed.>"], storage="file"), "num_replicas": 1}
    await create(nc, config)
    for i in range(10):
        ack = await publish(nc, "backed.a", f"m{i}".encode())
        assert "error" not in ack, ack
    await (await acked_work(nc, "BACKED", 4)).unsubscribe()
    await backup.backup_stream(nc, "BACKED", tmp_path / "bk")
    assert (await js_api(nc, "$JS.API.STREAM.DELETE.BACKED", timeout=10)).get("success")

    restored = await backup.restore_stream(
        shared_js_clients[1], tmp_path / "bk", config={**config, "num_replicas": 3}, timeout=20
    )
    assert restored["config"]["num_replicas"] == 3, restored
    assert restored["state"]["messages"] == 10, restored

    async def replicated() -> bool:
        reply = await info(shared_js_clients[2], "BACKED")
        others = (reply.get("cluster") or {}).get("replicas") or []
        return (
            reply.get("state", {}).get("messages") == 10
            and len(others) == 2
            and all(r.get("current") for r in others)
        )

    await wait_until(replicated, 30, "BACKED on a leader and two current replicas")

    async def acked() -> bool:
        # nats-server's restored consumer shows its state a moment after the restore's reply.
        got = await js_api(shared_js_clients[2], "$JS.API.CONSUMER.INFO.BACKED.WORK", timeout=10)
        return bool(got.get("ack_floor", {}).get("stream_seq") == 4 and got["num_pending"] == 6)

    await wait_until(acked, 15, "the restored consumer's ack floor at 4, 6 pending")


@SHARED
async def test_an_r3_mirror_and_sourcing_stream_follow_through_a_leader_change(
    shared_js_cluster: Cluster, shared_js_clients: list[NATS]
) -> None:
    """An R3 mirror keeps its origin's sequences and an R3 sourcing stream takes each
    message once, through a change of their leaders in the middle (on Headwater the leader
    proposes what it takes into the log: docs/REPLICATION.md, "Mirrors and sources")."""
    nc = shared_js_clients[0]
    await create(nc, {**r3("ORIG", ["orig.>"]), "num_replicas": 1})
    await create(
        nc, {"name": "MIR", "storage": "file", "num_replicas": 3, "mirror": {"name": "ORIG"}}
    )
    await create(nc, {**r3("SRC", [], storage="file"), "sources": [{"name": "ORIG"}]})

    async def holds(count: int) -> bool:
        for name in ("MIR", "SRC"):
            reply = await info(shared_js_clients[2], name)
            if reply.get("state", {}).get("messages") != count:
                return False
        return True

    for i in range(20):
        assert "error" not in await publish(nc, f"orig.{i % 3}", f"m{i}".encode())
    await wait_until(lambda: holds(20), 20, "mirror and source hold 20")
    for name in ("MIR", "SRC"):
        before = (await info(nc, name))["cluster"]["leader"]
        await js_api(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{name}", timeout=10)

        async def moved(name: str = name, before: str = before) -> bool:
            leader = ((await info(nc, name)).get("cluster") or {}).get("leader")
            return leader is not None and leader != before

        await wait_until(moved, 20, f"a new leader of {name}")
    for i in range(20, 40):
        assert "error" not in await publish(nc, f"orig.{i % 3}", f"m{i}".encode())
    await wait_until(lambda: holds(40), 30, "mirror and source hold 40")
    await asyncio.sleep(0.5)  # nothing more comes: no message twice
    assert await holds(40)
    mirror = await info(shared_js_clients[1], "MIR")
    assert (mirror["state"]["first_seq"], mirror["state"]["last_seq"]) == (1, 40), mirror
    assert mirror["mirror"]["name"] == "ORIG", mirror
    sourced = await info(shared_js_clients[1], "SRC")
    assert [s["name"] for s in sourced["sources"]] == ["ORIG"], sourced
    datas = set()
    for seq in range(1, 41):
        got = await js_api(nc, "$JS.API.STREAM.MSG.GET.SRC", {"seq": seq}, timeout=5)
        datas.add(base64.b64decode(got["message"]["data"]))
    assert datas == {f"m{i}".encode() for i in range(40)}
