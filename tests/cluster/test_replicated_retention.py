"""Work-queue and interest retention on replicated (R3) memory streams, against nats-server.

Both servers' clusters: a work-queue stream drops each message once its consumer's ack is
confirmed, on every server, and after its leader died the rest is delivered and dropped too,
nothing acknowledged delivered again; an interest stream stores only what a consumer wants,
keeps a message until every consumer that wants it acknowledged it, and drops what only a
deleted consumer still needed. Every server's STREAM.INFO is compared (they answer through
the leader, so the count is asked of each).
"""

from __future__ import annotations

from typing import Any

import pytest
from cluster.helpers import KINDS, crash, js_api, wait_until
from cluster.test_replicated_consumers import consumer_info, fetch_seqs
from cluster.test_replicated_streams import create, info, publish, r3
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig

from headwater.testing import Cluster

pytestmark = pytest.mark.timeout(90)
ON_BOTH = pytest.mark.parametrize("js_cluster", KINDS, indirect=True)


async def messages_everywhere(clients: list[NATS], stream: str, count: int) -> None:
    seen: list[int] = []

    async def check() -> Any:
        try:
            seen[:] = [(await info(nc, stream))["state"]["messages"] for nc in clients]
        except (NatsTimeoutError, NoRespondersError, KeyError):
            return False  # no leader answering yet (after a failover)
        return seen == [count] * len(clients)

    try:
        await wait_until(check, 10, f"{stream} holding {count} messages on every server")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {seen}") from None


@ON_BOTH
async def test_a_work_queue_drops_what_was_acknowledged_through_a_failover(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    await create(js_clients[0], r3("WQ", ["wq.>"], retention="workqueue"))
    for i in range(10):
        await publish(js_clients[0], "wq.job", f"w{i}".encode())
    js = js_clients[0].jetstream(timeout=5)
    await js.add_consumer(
        "WQ", ConsumerConfig(durable_name="W", ack_policy=AckPolicy.EXPLICIT, ack_wait=2.0)
    )
    leader = js_cluster.names.index(
        (await consumer_info(js_clients[0], "WQ", "W"))["cluster"]["leader"]
    )
    survivors = [js_clients[i] for i in range(3) if i != leader]
    assert await fetch_seqs(survivors[0], "WQ", "W", 6, timeout=10) == [1, 2, 3, 4, 5, 6]
    await messages_everywhere(js_clients, "WQ", 4)
    crash(js_cluster, leader)
    rest = await fetch_seqs(survivors[0], "WQ", "W", 4, timeout=40)
    assert sorted(rest) == [7, 8, 9, 10], rest
    await messages_everywhere(survivors, "WQ", 0)
    state = (await info(survivors[1], "WQ"))["state"]
    assert (state["first_seq"], state["last_seq"]) == (11, 10), state


@ON_BOTH
async def test_an_interest_stream_keeps_a_message_while_a_consumer_needs_it(
    js_cluster: Cluster, js_clients: list[NATS]
) -> None:
    await create(js_clients[0], r3("INT", ["int.>"], retention="interest"))
    ack = await publish(js_clients[1], "int.a", b"nobody")
    assert ack["seq"] == 1, ack
    await messages_everywhere(js_clients, "INT", 0)  # no consumer: not kept
    js = js_clients[0].jetstream(timeout=5)
    explicit = {"ack_policy": AckPolicy.EXPLICIT, "ack_wait": 30.0}
    await js.add_consumer(
        "INT", ConsumerConfig(durable_name="A", filter_subject="int.a", **explicit)
    )
    await js.add_consumer("INT", ConsumerConfig(durable_name="ALL", **explicit))
    for i, subject in enumerate(("int.a", "int.b", "int.a", "int.b")):
        await publish(js_clients[2], subject, f"i{i}".encode())  # the data is the msg id
    await messages_everywhere(js_clients, "INT", 4)
    assert await fetch_seqs(js_clients[1], "INT", "A", 2, timeout=10) == [2, 4]
    await messages_everywhere(js_clients, "INT", 4)  # ALL still needs them
    assert await fetch_seqs(js_clients[2], "INT", "ALL", 2, timeout=10) == [2, 3]
    await messages_everywhere(js_clients, "INT", 2)  # 2 and 3 went; 4 and 5 wait for ALL
    deleted = await js_api(js_clients[0], "$JS.API.CONSUMER.DELETE.INT.ALL", timeout=5)
    assert deleted.get("success") is True, deleted
    # Only ALL still needed 4 (A acked it) and 5 (A does not want int.b): both go.
    await messages_everywhere(js_clients, "INT", 0)
