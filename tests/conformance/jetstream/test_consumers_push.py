"""Push consumers through nats-py: js.subscribe, queue groups, ordered consumers, heartbeats."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy


async def stream_with(nc: Client, name: str, count: int, **config: object) -> None:
    js = nc.jetstream()
    prefix = name.lower()
    await js.add_stream(name=name, subjects=[f"{prefix}.>"], **config)
    for i in range(count):
        await js.publish(f"{prefix}.{i % 2}", b"m%d" % (i + 1))


async def collect(queue: asyncio.Queue[Msg], n: int, timeout: float = 3) -> list[Msg]:
    return [await asyncio.wait_for(queue.get(), timeout) for _ in range(n)]


async def test_push_durable_with_acks(nc: Client) -> None:
    await stream_with(nc, "PUSH1", 4)
    js = nc.jetstream()
    got: asyncio.Queue[Msg] = asyncio.Queue()

    async def handler(msg: Msg) -> None:
        await got.put(msg)
        await msg.ack()

    sub = await js.subscribe("push1.>", durable="D", cb=handler, manual_ack=True)
    msgs = await collect(got, 4)
    assert [m.data for m in msgs] == [b"m1", b"m2", b"m3", b"m4"]
    await js.publish("push1.9", b"late")
    (late,) = await collect(got, 1)
    assert late.data == b"late" and late.metadata.sequence.stream == 5
    await asyncio.sleep(0.2)
    info = await js.consumer_info("PUSH1", "D")
    assert (info.delivered.consumer_seq, info.ack_floor.stream_seq) == (5, 5)
    assert info.push_bound is True
    await sub.unsubscribe()


async def test_push_queue_group_splits_messages(nc: Client) -> None:
    await stream_with(nc, "PUSH2", 0)
    js = nc.jetstream()
    got: asyncio.Queue[Msg] = asyncio.Queue()

    async def handler(msg: Msg) -> None:
        await got.put(msg)
        await msg.ack()

    s1 = await js.subscribe("push2.>", queue="workers", cb=handler, manual_ack=True)
    s2 = await js.subscribe("push2.>", queue="workers", cb=handler, manual_ack=True)
    for i in range(10):
        await js.publish("push2.x", b"%d" % i)
    msgs = await collect(got, 10)
    assert sorted(int(m.data) for m in msgs) == list(range(10))
    await asyncio.sleep(0.2)
    assert got.empty()
    await s1.unsubscribe()
    await s2.unsubscribe()


async def test_ordered_consumer_replays_in_order(nc: Client) -> None:
    await stream_with(nc, "PUSH3", 300)
    js = nc.jetstream()
    got: asyncio.Queue[Msg] = asyncio.Queue()

    async def handler(msg: Msg) -> None:
        await got.put(msg)

    sub = await js.subscribe("push3.>", ordered_consumer=True, cb=handler)
    msgs = await collect(got, 300)
    assert [m.data for m in msgs] == [b"m%d" % i for i in range(1, 301)]
    assert [m.metadata.sequence.consumer for m in msgs] == list(range(1, 301))
    info = await sub.consumer_info()
    assert info.config.ack_policy == AckPolicy.NONE
    assert info.config.flow_control is True and info.config.mem_storage is True
    await sub.unsubscribe()


async def test_idle_heartbeat_status(nc: Client) -> None:
    await stream_with(nc, "PUSH4", 1)
    js = nc.jetstream()
    inbox = nc.new_inbox()
    raw = await nc.subscribe(inbox)
    cfg = ConsumerConfig(
        deliver_subject=inbox,
        ack_policy=AckPolicy.NONE,
        idle_heartbeat=0.2,
        flow_control=True,
    )
    await js.add_consumer("PUSH4", cfg)
    first = await raw.next_msg(2)
    assert first.data == b"m1"
    hb = await raw.next_msg(2)
    assert hb.headers is not None
    assert (hb.headers["Status"], hb.headers["Description"]) == ("100", "Idle Heartbeat")
    assert (hb.headers["Nats-Last-Consumer"], hb.headers["Nats-Last-Stream"]) == ("1", "1")
    await raw.unsubscribe()


async def test_ephemeral_goes_away_after_inactive_threshold(nc: Client) -> None:
    await stream_with(nc, "PUSH5", 1)
    req = {
        "stream_name": "PUSH5",
        "config": {"ack_policy": "explicit", "inactive_threshold": 300_000_000},
    }
    reply = await nc.request("$JS.API.CONSUMER.CREATE.PUSH5", json.dumps(req).encode())
    name = json.loads(reply.data)["name"]
    assert len(name) == 8
    names = await nc.request("$JS.API.CONSUMER.NAMES.PUSH5", b"")
    assert json.loads(names.data)["consumers"] == [name]
    await asyncio.sleep(1.5)
    names = await nc.request("$JS.API.CONSUMER.NAMES.PUSH5", b"")
    assert json.loads(names.data)["total"] == 0


@pytest.mark.parametrize("retention", ["interest", "workqueue"])
async def test_retention_removes_acked_messages(nc: Client, retention: str) -> None:
    name = f"RET_{retention.upper()}"
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"ret{retention}.>"], retention=retention)
    await js.add_consumer(name, ConsumerConfig(durable_name="A", ack_policy=AckPolicy.EXPLICIT))
    if retention == "interest":
        cfg = ConsumerConfig(durable_name="B", ack_policy=AckPolicy.EXPLICIT)
        await js.add_consumer(name, cfg)
    for i in range(3):
        await js.publish(f"ret{retention}.x", b"%d" % i)
    a = await js.pull_subscribe_bind(durable="A", stream=name)
    for msg in await a.fetch(3, timeout=2):
        await msg.ack_sync()
    state = (await js.stream_info(name)).state
    if retention == "workqueue":
        assert state.messages == 0
        reply = await nc.request(
            f"$JS.API.CONSUMER.CREATE.{name}.C",
            json.dumps(
                {"stream_name": name, "config": {"durable_name": "C", "ack_policy": "explicit"}}
            ).encode(),
        )
        assert json.loads(reply.data)["error"]["err_code"] == 10099
        return
    assert state.messages == 3
    b = await js.pull_subscribe_bind(durable="B", stream=name)
    msgs = await b.fetch(3, timeout=2)
    await msgs[0].ack_sync()
    assert (await js.stream_info(name)).state.messages == 2
    await js.delete_consumer(name, "B")
    assert (await js.stream_info(name)).state.messages == 0


async def test_headers_only_replay_original_and_start_time(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="PUSH6", subjects=["push6.>"])
    await js.publish("push6.a", b"12345", headers={"X-A": "1"})
    await asyncio.sleep(0.2)
    mid = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    await asyncio.sleep(0.2)
    await js.publish("push6.b", b"xyz")
    inbox = nc.new_inbox()
    raw = await nc.subscribe(inbox)
    await js.add_consumer(
        "PUSH6",
        ConsumerConfig(
            deliver_subject=inbox,
            ack_policy=AckPolicy.NONE,
            headers_only=True,
            replay_policy=ReplayPolicy.ORIGINAL,
        ),
    )
    loop = asyncio.get_running_loop()
    first = await raw.next_msg(2)
    t0 = loop.time()
    second = await raw.next_msg(2)
    gap = loop.time() - t0
    assert first.data == b"" and first.headers == {"X-A": "1", "Nats-Msg-Size": "5"}
    assert second.headers == {"Nats-Msg-Size": "3"}
    assert 0.25 < gap < 1.0  # the 0.4 s between the two publishes is kept
    await raw.unsubscribe()
    sub = await js.pull_subscribe(
        "push6.>",
        durable="T",
        stream="PUSH6",
        config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=mid),
    )
    (msg,) = await sub.fetch(1, timeout=1)
    assert msg.metadata.sequence.stream == 2


async def test_rate_limit_spaces_deliveries(nc: Client) -> None:
    js = nc.jetstream()
    # nats-server's limiter bursts up to the stream's max_msg_size.
    await js.add_stream(name="PUSH7", subjects=["push7.>"], max_msg_size=1100)
    for _ in range(5):
        await js.publish("push7.x", b"x" * 1000)
    inbox = nc.new_inbox()
    raw = await nc.subscribe(inbox)
    cfg = ConsumerConfig(deliver_subject=inbox, ack_policy=AckPolicy.NONE, rate_limit_bps=64_000)
    await js.add_consumer("PUSH7", cfg)
    loop = asyncio.get_running_loop()
    await raw.next_msg(2)
    start = loop.time()
    for _ in range(4):
        await raw.next_msg(2)
    # 4 more messages of ~1 kB each at 8 kB/s take about 0.5 s.
    assert 0.3 < loop.time() - start < 1.5


async def test_flow_control_window_stalls_until_answered(nc: Client) -> None:
    """A byte window, as nats-server's: a client that never answers gets less than the
    stream, a FlowControl Request among it; answering releases the rest."""
    js = nc.jetstream()
    await js.add_stream(name="PUSHFC", subjects=["pushfc"])
    body = b"x" * 1024
    total = 3000  # about 3 MiB: more than the first window (2 MiB) allows
    for _ in range(total):
        await nc.publish("pushfc", body)
    await nc.flush()
    for _ in range(50):
        if (await js.stream_info("PUSHFC")).state.messages == total:
            break
        await asyncio.sleep(0.05)
    inbox = nc.new_inbox()
    got: asyncio.Queue[Msg] = asyncio.Queue()

    async def keep(msg: Msg) -> None:
        await got.put(msg)

    await nc.subscribe(inbox, cb=keep, pending_msgs_limit=-1, pending_bytes_limit=-1)
    cfg = ConsumerConfig(
        deliver_subject=inbox, ack_policy=AckPolicy.NONE, idle_heartbeat=5, flow_control=True
    )
    await js.add_consumer("PUSHFC", cfg)

    async def drain(seconds: float) -> tuple[int, list[str]]:
        data, requests = 0, []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            try:
                msg = await asyncio.wait_for(got.get(), left)
            except TimeoutError:
                break
            if msg.headers and msg.headers.get("Status") == "100":
                assert msg.headers.get("Description") == "FlowControl Request"
                requests.append(msg.reply)
            else:
                data += 1
        return data, requests

    before, requests = await drain(1.0)
    assert requests, "no FlowControl Request before the window filled"
    assert 0 < before < total
    received = before
    while received < total:
        for reply in requests:
            await nc.publish(reply, b"")
        more, requests = await drain(1.0)
        assert more or requests, f"stalled at {received} of {total} after answering"
        received += more
    assert received == total
