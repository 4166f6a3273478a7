"""Linearizable reads on a replicated stream: a leader cut off from the others never answers
from its own, stale state (docs/REPLICATION.md, "Reads").

Three Headwater servers, each in a network namespace (:class:`NetnsCluster`: needs root, as
the fault suite). An R3 memory stream with direct gets holds ``v1`` on ``kv.a``. Its
leader's server is isolated from the other two (their routes and etcd members), while a
client connected to it before the cut still reaches it. The other two elect a new leader,
which takes the old one out of ``in_sync`` and stores ``v2``. Through the old leader's server
then, a direct get (both forms), ``STREAM.MSG.GET``, ``STREAM.INFO`` and ``CONSUMER.INFO``
(of a consumer that acknowledged both messages through the new leader) must never show the
state before: the direct gets go unanswered (the client times out, as with a nats-server
replica that does not lead) and the API requests get 10008. Before the read barrier, all
four stream reads answered with ``v1`` (and ``last_seq`` 1); before the consumers' reads
passed it too, CONSUMER.INFO showed an ack floor of 0. After the heal the old leader
follows the new one and answers nothing more (it does not lead).

Headwater only: nats-server answers direct gets on every replica (``allow_direct``), its
followers included, so it does not promise this.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster.helpers import connect, js_api, wait_jetstream, wait_until
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.testing_netns import NetnsCluster, netns_unavailable, sweep_leftovers

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

STREAM = "KVR"
FAST_PINGS = 'cluster { ping_interval: "1s", ping_max: 2 }'
UNAVAILABLE = {
    "code": 503,
    "err_code": 10008,
    "description": "JetStream system temporarily unavailable",
}


@pytest.fixture
def netns() -> Iterator[NetnsCluster]:
    why = netns_unavailable()
    if why:
        pytest.fail(f"this test needs network namespaces: {why} (run it as root)")
    sweep_leftovers()
    cluster = NetnsCluster("headwater", jetstream=True, config=FAST_PINGS)
    try:
        yield cluster.__enter__()
    finally:
        cluster.cleanup()


async def publish_until_acked(nc: NATS, subject: str, data: bytes, timeout: float) -> int:
    """Publish (one Nats-Msg-Id) until acknowledged; the sequence (bounded)."""
    deadline = time.monotonic() + timeout
    for _ in range(1000):
        try:
            msg = await nc.request(subject, data, timeout=1, headers={"Nats-Msg-Id": data.decode()})
        except (NatsTimeoutError, NoRespondersError):
            msg = None  # no leader yet: published again below
        ack = json.loads(msg.data) if msg is not None else {"error": "no answer"}
        if "error" not in ack:
            return int(ack["seq"])
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    raise AssertionError(f"{data!r} not acknowledged within {timeout} s")


async def answer(nc: NATS, subject: str, body: bytes, timeout: float) -> Any:
    """The reply (headers and data), or "timeout" when none came."""
    try:
        msg = await nc.request(subject, body, timeout=timeout)
    except NatsTimeoutError:
        return "timeout"
    return msg.headers or {}, msg.data


async def stale_reads(old: NATS) -> list[str]:
    """Every read through the old leader's server that shows the state before ``v2``."""
    found = []
    last = await answer(old, f"$JS.API.DIRECT.GET.{STREAM}.kv.a", b"", 1.0)
    if last != "timeout" and last[1] == b"v1":
        found.append("DIRECT.GET last by subject: v1")
    body = json.dumps({"last_by_subj": "kv.a"}).encode()
    got = await answer(old, f"$JS.API.DIRECT.GET.{STREAM}", body, 1.0)
    if got != "timeout" and got[1] == b"v1":
        found.append("DIRECT.GET: v1")
    reply = await answer(old, f"$JS.API.STREAM.MSG.GET.{STREAM}", body, 5.0)
    if reply != "timeout":
        decoded = json.loads(reply[1])
        data = decoded.get("message", {}).get("data")
        if data is not None and base64.b64decode(data) == b"v1":
            found.append("STREAM.MSG.GET: v1")
        elif "message" not in decoded:
            assert decoded.get("error") == UNAVAILABLE, decoded
    for subject, field, seq, what in (
        (f"$JS.API.STREAM.INFO.{STREAM}", "state", "last_seq", "STREAM.INFO: last_seq"),
        (
            f"$JS.API.CONSUMER.INFO.{STREAM}.C",
            "ack_floor",
            "stream_seq",
            "CONSUMER.INFO: ack floor",
        ),
    ):
        reply = await answer(old, subject, b"", 5.0)
        if reply == "timeout":
            continue
        decoded = json.loads(reply[1])
        if field not in decoded:
            assert decoded.get("error") == UNAVAILABLE, decoded
        elif decoded[field][seq] < 2:
            found.append(f"{what} {decoded[field][seq]}")
    return found


async def test_a_leader_cut_off_never_answers_a_stale_read(netns: NetnsCluster) -> None:
    await wait_jetstream(netns)
    clients = [await connect(url) for url in netns.urls]
    try:
        config = {
            "name": STREAM,
            "subjects": ["kv.>"],
            "storage": "memory",
            "num_replicas": 3,
            "allow_direct": True,
            "max_msgs_per_subject": 1,
        }
        created = await js_api(clients[0], f"$JS.API.STREAM.CREATE.{STREAM}", config, 15)
        assert "error" not in created, created
        assert await publish_until_acked(clients[0], "kv.a", b"v1", 10) == 1
        consumer = {
            "stream_name": STREAM,
            "config": {"durable_name": "C", "ack_policy": "explicit"},
        }
        made = await js_api(clients[0], f"$JS.API.CONSUMER.CREATE.{STREAM}.C", consumer, 15)
        assert "error" not in made, made
        leader = netns.names.index(created["cluster"]["leader"])
        old = clients[leader]
        # The old leader answers reads before the cut.
        got = await answer(old, f"$JS.API.DIRECT.GET.{STREAM}.kv.a", b"", 5.0)
        assert got != "timeout" and got[1] == b"v1", got

        netns.isolate(leader)
        other = clients[(leader + 1) % 3]
        # The two others elect a leader, take the old one out of in_sync, and store v2.
        assert await publish_until_acked(other, "kv.a", b"v2", 30) == 2

        async def new_leader() -> bool:
            try:
                reply = await js_api(other, f"$JS.API.STREAM.INFO.{STREAM}", timeout=3)
            except NatsTimeoutError:
                return False
            return reply.get("state", {}).get("last_seq") == 2

        await wait_until(new_leader, 15, "the new leader's STREAM.INFO")
        # Its consumer takes both messages, acknowledged (confirmed) there.
        pulled = await other.jetstream().pull_subscribe_bind("C", stream=STREAM)
        for msg in await pulled.fetch(2, timeout=10):
            await msg.ack_sync()
        # The old leader, still believing it leads: none of its reads may show v1.
        assert await stale_reads(old) == []
        assert await stale_reads(old) == []  # a read timed out once: still not answered

        netns.heal()
        # After the heal it follows the new leader: still no stale answer.
        await asyncio.sleep(3)
        assert await stale_reads(old) == []
    finally:
        for nc in clients:
            await nc.close()
