"""The seeds' ORDERS walk-through: NEW and DISPATCH pull workers, MONITOR push, exactly-once
processing with Nats-Msg-Id on publish and double acks, and the info numbers along the way."""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy


async def test_orders_pipeline(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["ORDERS.*"])
    explicit = {"ack_policy": AckPolicy.EXPLICIT, "max_deliver": -1, "sample_freq": "100"}
    await js.add_consumer(
        "ORDERS", ConsumerConfig(durable_name="NEW", filter_subject="ORDERS.received", **explicit)
    )
    await js.add_consumer(
        "ORDERS",
        ConsumerConfig(durable_name="DISPATCH", filter_subject="ORDERS.processed", **explicit),
    )
    monitor: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_monitor(msg: Msg) -> None:
        await monitor.put(msg)

    await nc.subscribe("monitor.ORDERS", cb=on_monitor)
    await js.add_consumer(
        "ORDERS",
        ConsumerConfig(
            durable_name="MONITOR",
            deliver_subject="monitor.ORDERS",
            ack_policy=AckPolicy.NONE,
            deliver_policy=DeliverPolicy.LAST,
        ),
    )
    metrics = await nc.subscribe("$JS.EVENT.METRIC.CONSUMER.ACK.ORDERS.NEW")
    for i in range(3):
        ack = await js.publish("ORDERS.received", b"order %d" % i, headers={"Nats-Msg-Id": f"o{i}"})
        assert not ack.duplicate
    dup = await js.publish("ORDERS.received", b"order 0", headers={"Nats-Msg-Id": "o0"})
    assert dup.duplicate and dup.seq == 1

    new = await js.pull_subscribe_bind(durable="NEW", stream="ORDERS")
    for msg in await new.fetch(3, timeout=2):
        await js.publish("ORDERS.processed", msg.data, headers={"Nats-Msg-Id": f"p{msg.data!r}"})
        await msg.ack_sync()  # the double ack: the server confirmed it recorded the ack
    dispatch = await js.pull_subscribe_bind(durable="DISPATCH", stream="ORDERS")
    processed = await dispatch.fetch(3, timeout=2)
    assert [m.data for m in processed] == [b"order 0", b"order 1", b"order 2"]
    await processed[0].ack_sync()

    sample = json.loads((await metrics.next_msg(2)).data)
    assert (sample["stream"], sample["consumer"], sample["deliveries"]) == ("ORDERS", "NEW", 1)

    info = await js.consumer_info("ORDERS", "NEW")
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (3, 3)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (3, 3)
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    info = await js.consumer_info("ORDERS", "DISPATCH")
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (3, 6)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (1, 4)
    assert info.num_ack_pending == 2

    # MONITOR (deliver last, created on the empty stream) saw every message, with no acks.
    seen = [await asyncio.wait_for(monitor.get(), 2) for _ in range(6)]
    assert [m.metadata.sequence.stream for m in seen] == [1, 2, 3, 4, 5, 6]
    info = await js.consumer_info("ORDERS", "MONITOR")
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (6, 6)
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    assert (await js.stream_info("ORDERS")).state.consumer_count == 3
