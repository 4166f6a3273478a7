"""Ack variants through nats-py: max_ack_pending, +WPI, backoff, NAK/TERM advisories, ack
sampling metrics, ack policy all, and pausing — same observations on both servers."""

from __future__ import annotations

import asyncio
import json

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig


async def stream_with(nc: Client, name: str, count: int) -> None:
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    for i in range(count):
        await js.publish(f"{name.lower()}.x", b"m%d" % (i + 1))


async def test_max_ack_pending_stops_delivery(nc: Client) -> None:
    await stream_with(nc, "ACK1", 5)
    js = nc.jetstream()
    cfg = ConsumerConfig(max_ack_pending=2)
    sub = await js.pull_subscribe("ack1.>", durable="W", stream="ACK1", config=cfg)
    first = await sub.fetch(5, timeout=1)
    assert [m.data for m in first] == [b"m1", b"m2"]
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.3)
    await first[0].ack_sync()
    (third,) = await sub.fetch(1, timeout=1)
    assert third.data == b"m3"


async def test_progress_extends_ack_wait(nc: Client) -> None:
    await stream_with(nc, "ACK2", 1)
    js = nc.jetstream()
    sub = await js.pull_subscribe(
        "ack2.>", durable="W", stream="ACK2", config=ConsumerConfig(ack_wait=0.6)
    )
    (msg,) = await sub.fetch(1, timeout=1)
    for _ in range(3):
        await asyncio.sleep(0.3)
        await msg.in_progress()
    # 0.9s after delivery, past the original ack wait, it has not come back.
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.3)
    await msg.ack_sync()
    info = await js.consumer_info("ACK2", "W")
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)


async def test_backoff_spaces_redeliveries(nc: Client) -> None:
    await stream_with(nc, "ACK3", 1)
    js = nc.jetstream()
    cfg = ConsumerConfig(backoff=[0.3, 1.0], max_deliver=3)
    sub = await js.pull_subscribe("ack3.>", durable="W", stream="ACK3", config=cfg)
    info = await js.consumer_info("ACK3", "W")
    assert info.config.ack_wait == 0.3
    loop = asyncio.get_running_loop()
    (first,) = await sub.fetch(1, timeout=1)
    start = loop.time()
    (second,) = await sub.fetch(1, timeout=2)
    t2 = loop.time() - start
    (third,) = await sub.fetch(1, timeout=3)
    t3 = loop.time() - start
    assert first.metadata.num_delivered == 1
    assert second.metadata.num_delivered == 2 and third.metadata.num_delivered == 3
    assert 0.2 < t2 < 0.9
    assert t3 - t2 > 0.8


async def test_nak_and_term_advisories(nc: Client) -> None:
    await stream_with(nc, "ACK4", 2)
    js = nc.jetstream()
    naked = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.ACK4.W")
    terminated = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ACK4.W")
    sub = await js.pull_subscribe("ack4.>", durable="W", stream="ACK4")
    first, second = await sub.fetch(2, timeout=1)
    await first.nak(delay=5)
    await second.term()
    event = json.loads((await naked.next_msg(2)).data)
    assert event["type"] == "io.nats.jetstream.advisory.v1.nak"
    assert (event["stream_seq"], event["consumer_seq"], event["deliveries"]) == (1, 1, 1)
    event = json.loads((await terminated.next_msg(2)).data)
    assert event["type"] == "io.nats.jetstream.advisory.v1.terminated"
    assert (event["stream_seq"], event["consumer_seq"], event["deliveries"]) == (2, 2, 1)
    # The delayed NAK keeps message 1 away for now.
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.3)


async def test_ack_sampling_metric(nc: Client) -> None:
    await stream_with(nc, "ACK5", 1)
    js = nc.jetstream()
    metrics = await nc.subscribe("$JS.EVENT.METRIC.CONSUMER.ACK.ACK5.W")
    cfg = ConsumerConfig(sample_freq="100%")
    sub = await js.pull_subscribe("ack5.>", durable="W", stream="ACK5", config=cfg)
    (msg,) = await sub.fetch(1, timeout=1)
    await msg.ack()
    event = json.loads((await metrics.next_msg(2)).data)
    assert event["type"] == "io.nats.jetstream.metric.v1.consumer_ack"
    assert (event["stream"], event["consumer"]) == ("ACK5", "W")
    assert (event["consumer_seq"], event["stream_seq"], event["deliveries"]) == (1, 1, 1)
    assert event["ack_time"] > 0


async def test_ack_all_and_pause(nc: Client) -> None:
    await stream_with(nc, "ACK6", 4)
    js = nc.jetstream()
    await js.add_consumer("ACK6", ConsumerConfig(durable_name="W", ack_policy=AckPolicy.ALL))
    sub = await js.pull_subscribe_bind(durable="W", stream="ACK6")
    msgs = await sub.fetch(3, timeout=1)
    await msgs[1].ack_sync()
    info = await js.consumer_info("ACK6", "W")
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (2, 2)
    assert info.num_ack_pending == 1
    reply = await nc.request(
        "$JS.API.CONSUMER.PAUSE.ACK6.W",
        json.dumps({"pause_until": "2099-01-01T00:00:00Z"}).encode(),
    )
    body = json.loads(reply.data)
    assert body["paused"] is True and body["pause_until"] == "2099-01-01T00:00:00Z"
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.3)
    reply = await nc.request("$JS.API.CONSUMER.PAUSE.ACK6.W", b"")
    assert json.loads(reply.data)["paused"] is False
    (last,) = await sub.fetch(1, timeout=1)
    assert last.data == b"m4"
