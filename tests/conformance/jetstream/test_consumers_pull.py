"""Pull consumers through nats-py: fetch, acks, redelivery, statuses and CONSUMER.INFO numbers.

Every scenario runs against Headwater and nats-server (module-scoped servers, unique stream
names), and asserts the numbers both must report for the same sequence of operations.
"""

from __future__ import annotations

import asyncio
import json

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError, NotFoundError


async def stream_with(nc: Client, name: str, count: int, **config: object) -> None:
    js = nc.jetstream()
    prefix = name.lower()
    await js.add_stream(name=name, subjects=[f"{prefix}.>"], **config)
    for i in range(count):
        await js.publish(f"{prefix}.{i % 3}", b"m%d" % (i + 1))


async def test_fetch_and_ack_explicit(nc: Client) -> None:
    await stream_with(nc, "PULL1", 5)
    js = nc.jetstream()
    sub = await js.pull_subscribe("pull1.>", durable="W", stream="PULL1")
    msgs = await sub.fetch(3, timeout=2)
    assert [m.data for m in msgs] == [b"m1", b"m2", b"m3"]
    meta = msgs[0].metadata
    assert (meta.sequence.stream, meta.sequence.consumer) == (1, 1)
    assert (meta.num_delivered, meta.num_pending, meta.stream, meta.consumer) == (
        1,
        4,
        "PULL1",
        "W",
    )
    await msgs[1].ack()
    await msgs[0].ack_sync()
    info = await js.consumer_info("PULL1", "W")
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (3, 3)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (2, 2)
    assert (info.num_ack_pending, info.num_pending, info.num_redelivered) == (1, 2, 0)
    await msgs[2].ack_sync()
    info = await js.consumer_info("PULL1", "W")
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (3, 3)
    assert info.num_ack_pending == 0
    rest = await sub.fetch(5, timeout=1)
    assert [m.data for m in rest] == [b"m4", b"m5"]


async def test_fetch_times_out_when_empty(nc: Client) -> None:
    await stream_with(nc, "PULL2", 0)
    sub = await nc.jetstream().pull_subscribe("pull2.>", durable="W", stream="PULL2")
    # nats-py raises its own TimeoutError, or asyncio's when its deadline check runs first
    # (a loaded machine): either way the fetch timed out with nothing delivered.
    timed_out = (nats.errors.TimeoutError, asyncio.TimeoutError)
    with pytest.raises(timed_out):
        await sub.fetch(1, timeout=0.3)
    with pytest.raises(timed_out):
        await sub.fetch(4, timeout=0.3)


async def test_raw_statuses(nc: Client) -> None:
    await stream_with(nc, "PULL3", 2)
    create = {
        "stream_name": "PULL3",
        "config": {"durable_name": "R", "ack_policy": "explicit", "max_batch": 3},
    }
    await nc.request("$JS.API.CONSUMER.CREATE.PULL3.R", json.dumps(create).encode())
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    nxt = "$JS.API.CONSUMER.MSG.NEXT.PULL3.R"
    await nc.publish(nxt, json.dumps({"batch": 3, "no_wait": True}).encode(), reply=inbox)
    got = [await sub.next_msg(1) for _ in range(3)]
    assert [m.data for m in got[:2]] == [b"m1", b"m2"]
    assert got[2].headers == {"Status": "404", "Description": "No Messages"}
    await nc.publish(nxt, json.dumps({"batch": 2, "expires": 200_000_000}).encode(), reply=inbox)
    status = await sub.next_msg(1)
    assert status.headers == {
        "Status": "408",
        "Description": "Request Timeout",
        "Nats-Pending-Messages": "2",
        "Nats-Pending-Bytes": "0",
    }
    await nc.publish(nxt, json.dumps({"batch": 9}).encode(), reply=inbox)
    status = await sub.next_msg(1)
    assert status.headers == {"Status": "409", "Description": "Exceeded MaxRequestBatch of 3"}
    await sub.unsubscribe()


async def test_redelivery_nak_term(nc: Client) -> None:
    await stream_with(nc, "PULL4", 3)
    js = nc.jetstream()
    cfg = ConsumerConfig(ack_wait=0.5, max_deliver=5)
    sub = await js.pull_subscribe("pull4.>", durable="W", stream="PULL4", config=cfg)
    first = await sub.fetch(3, timeout=2)
    # Sent as requests, so each is recorded before the next fetch goes out.
    await nc.request(first[0].reply, b"-NAK", timeout=1)
    await nc.request(first[1].reply, b"+TERM", timeout=1)
    again = await sub.fetch(1, timeout=2)
    assert again[0].data == b"m1" and again[0].metadata.num_delivered == 2
    await again[0].ack_sync()
    # m3 was neither acked nor naked: it comes back after ack_wait.
    late = await sub.fetch(1, timeout=3)
    assert late[0].data == b"m3" and late[0].metadata.num_delivered == 2
    assert late[0].metadata.sequence.consumer == 5
    info = await js.consumer_info("PULL4", "W")
    assert (info.num_ack_pending, info.num_redelivered) == (1, 1)
    await late[0].ack_sync()
    info = await js.consumer_info("PULL4", "W")
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (5, 3)


async def test_max_deliver_advisory(nc: Client) -> None:
    await stream_with(nc, "PULL5", 1)
    js = nc.jetstream()
    adv = await nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.PULL5.W")
    cfg = ConsumerConfig(ack_wait=0.3, max_deliver=2)
    sub = await js.pull_subscribe("pull5.>", durable="W", stream="PULL5", config=cfg)
    one = await sub.fetch(1, timeout=2)
    two = await sub.fetch(1, timeout=2)
    assert one[0].metadata.num_delivered == 1 and two[0].metadata.num_delivered == 2
    # nats-server notices the exhausted message when a request looks for the next one.
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.8)
    event = json.loads((await adv.next_msg(3)).data)
    assert event["type"] == "io.nats.jetstream.advisory.v1.max_deliver"
    assert (event["stream"], event["consumer"], event["stream_seq"]) == ("PULL5", "W", 1)
    assert event["deliveries"] == 2


async def test_shared_pull_consumer_is_disjoint(nc: Client) -> None:
    await stream_with(nc, "PULL6", 20)
    js = nc.jetstream()
    a = await js.pull_subscribe("pull6.>", durable="W", stream="PULL6")
    b = await js.pull_subscribe("pull6.>", durable="W", stream="PULL6")
    got_a, got_b = await asyncio.gather(a.fetch(10, timeout=2), b.fetch(10, timeout=2))
    seqs = [m.metadata.sequence.stream for m in got_a + got_b]
    assert sorted(seqs) == list(range(1, 21))


async def test_deliver_policies_and_filters(nc: Client) -> None:
    await stream_with(nc, "PULL7", 6)  # subjects pull7.0, .1, .2, .0, .1, .2
    js = nc.jetstream()

    async def first_seqs(durable: str, n: int, **kw: object) -> list[int]:
        await js.add_consumer("PULL7", ConsumerConfig(durable_name=durable, **kw))
        sub = await js.pull_subscribe_bind(durable=durable, stream="PULL7")
        msgs = await sub.fetch(n, timeout=1)
        return [m.metadata.sequence.stream for m in msgs]

    assert await first_seqs("L", 1, deliver_policy=DeliverPolicy.LAST) == [6]
    assert await first_seqs(
        "S", 2, deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=4
    ) == [4, 5]
    assert await first_seqs("F", 2, filter_subject="pull7.1") == [2, 5]
    assert await first_seqs("FS", 4, filter_subjects=["pull7.0", "pull7.2"]) == [1, 3, 4, 6]
    lps = await first_seqs(
        "P", 3, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, filter_subject="pull7.*"
    )
    assert lps == [4, 5, 6]
    info = await js.consumer_info("PULL7", "P")
    assert (info.num_pending, info.delivered.stream_seq) == (0, 6)
    info = await js.consumer_info("PULL7", "F")
    assert info.num_pending == 0


async def test_consumer_api_names_list_delete_errors(nc: Client) -> None:
    await stream_with(nc, "PULL8", 1)
    js = nc.jetstream()
    await js.add_consumer("PULL8", ConsumerConfig(durable_name="B", ack_policy=AckPolicy.EXPLICIT))
    await js.add_consumer("PULL8", ConsumerConfig(durable_name="A", ack_policy=AckPolicy.EXPLICIT))
    reply = await nc.request("$JS.API.CONSUMER.NAMES.PULL8", b"")
    body = json.loads(reply.data)
    assert (body["total"], body["consumers"]) == (2, ["A", "B"])
    listed = await js.consumers_info("PULL8")
    assert [c.name for c in listed] == ["A", "B"]
    stream = await js.stream_info("PULL8")
    assert stream.state.consumer_count == 2
    req = {
        "stream_name": "PULL8",
        "config": {"durable_name": "A", "ack_policy": "none"},
        "action": "create",
    }
    reply = await nc.request("$JS.API.CONSUMER.CREATE.PULL8.A", json.dumps(req).encode())
    assert json.loads(reply.data)["error"]["err_code"] == 10148
    req = {"stream_name": "PULL8", "config": {"durable_name": "Z"}, "action": "update"}
    reply = await nc.request("$JS.API.CONSUMER.CREATE.PULL8.Z", json.dumps(req).encode())
    assert json.loads(reply.data)["error"]["err_code"] == 10149
    assert await js.delete_consumer("PULL8", "A")
    with pytest.raises(NotFoundError):
        await js.consumer_info("PULL8", "A")
    with pytest.raises(APIError) as err:
        await js.consumer_info("NOPE_STREAM", "A")
    assert err.value.err_code == 10059


async def test_consumer_deleted_status_and_stream_delete(nc: Client) -> None:
    await stream_with(nc, "PULL9", 0)
    js = nc.jetstream()
    await js.add_consumer("PULL9", ConsumerConfig(durable_name="W", ack_policy=AckPolicy.EXPLICIT))
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.PULL9.W", b'{"batch":2}', reply=inbox)
    await asyncio.sleep(0.1)
    await js.delete_consumer("PULL9", "W")
    status = await sub.next_msg(1)
    assert status.headers is not None
    assert (status.headers["Status"], status.headers["Description"]) == ("409", "Consumer Deleted")
    await js.add_consumer("PULL9", ConsumerConfig(durable_name="V", ack_policy=AckPolicy.EXPLICIT))
    await js.delete_stream("PULL9")
    await js.add_stream(name="PULL9", subjects=["pull9.>"])
    with pytest.raises(NotFoundError):
        await js.consumer_info("PULL9", "V")


async def test_purge_moves_consumer_state(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="PULLP", subjects=["pullp.>"])
    for i in range(6):
        await js.publish(f"pullp.{i % 2}", b"x%d" % i)
    sub = await js.pull_subscribe("pullp.>", durable="C", stream="PULLP")
    msgs = await sub.fetch(3, timeout=1)
    await msgs[1].ack_sync()

    async def numbers() -> tuple[int, ...]:
        i = await js.consumer_info("PULLP", "C")
        return (
            i.delivered.consumer_seq,
            i.delivered.stream_seq,
            i.ack_floor.consumer_seq,
            i.ack_floor.stream_seq,
            i.num_ack_pending,
            i.num_pending,
        )

    await js.purge_stream("PULLP", subject="pullp.0")
    assert await numbers() == (3, 3, 3, 3, 0, 2)
    await js.purge_stream("PULLP", seq=5)
    assert await numbers() == (3, 5, 3, 5, 0, 1)
    (last,) = await sub.fetch(5, timeout=1)
    assert last.metadata.sequence.stream == 6
    await js.purge_stream("PULLP")
    assert await numbers() == (4, 6, 4, 6, 0, 0)


async def test_exhausted_message_leaves_pending_but_keeps_its_count(nc: Client) -> None:
    await stream_with(nc, "PULLX", 1)
    js = nc.jetstream()
    cfg = ConsumerConfig(ack_wait=0.3, max_deliver=2)
    sub = await js.pull_subscribe("pullx.>", durable="C", stream="PULLX", config=cfg)
    await sub.fetch(1, timeout=1)
    (second,) = await sub.fetch(1, timeout=1)

    async def numbers() -> tuple[int, ...]:
        i = await js.consumer_info("PULLX", "C")
        return (i.ack_floor.stream_seq, i.num_ack_pending, i.num_pending, i.num_redelivered)

    await asyncio.sleep(0.5)
    assert await numbers() == (0, 1, 0, 1)
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.5)
    assert await numbers() == (0, 0, 0, 1)
    await js.publish("pullx.0", b"next")
    (nxt,) = await sub.fetch(1, timeout=1)
    await nxt.ack_sync()
    assert await numbers() == (2, 0, 0, 1)
    await second.ack_sync()
    assert await numbers() == (2, 0, 0, 0)


@pytest.mark.parametrize(
    ("name", "config", "before", "after"),
    [
        ("N", {"deliver_policy": DeliverPolicy.NEW}, (0, 5, 0, 5, 0), (0, 5, 0, 5, 0)),
        ("L", {"deliver_policy": DeliverPolicy.LAST}, (0, 4, 0, 4, 1), (1, 5, 1, 5, 0)),
        (
            "S",
            {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": 3},
            (0, 2, 0, 2, 3),
            (1, 3, 1, 3, 2),
        ),
        ("F", {"filter_subject": "pulli.1"}, (0, 0, 0, 0, 2), (1, 2, 1, 2, 1)),
        (
            "LF",
            {"deliver_policy": DeliverPolicy.LAST, "filter_subject": "pulli.1"},
            (0, 3, 0, 3, 1),
            (1, 4, 1, 4, 0),
        ),
        (
            "P",
            {"deliver_policy": DeliverPolicy.LAST_PER_SUBJECT, "filter_subject": "pulli.*"},
            (0, 3, 0, 3, 2),
            (1, 4, 1, 4, 1),
        ),
    ],
)
async def test_starting_positions_in_info(
    nc: Client,
    name: str,
    config: dict[str, object],
    before: tuple[int, ...],
    after: tuple[int, ...],
) -> None:
    """delivered/ack_floor/num_pending right after creation and after one fetch + ack."""
    js = nc.jetstream()
    stream = f"PULLI_{name}"
    await js.add_stream(name=stream, subjects=["pulli.>"])
    for i in range(5):
        await js.publish(f"pulli.{i % 2}", b"x")

    async def numbers() -> tuple[int, ...]:
        i = await js.consumer_info(stream, "C")
        return (
            i.delivered.consumer_seq,
            i.delivered.stream_seq,
            i.ack_floor.consumer_seq,
            i.ack_floor.stream_seq,
            i.num_pending,
        )

    await js.add_consumer(stream, ConsumerConfig(durable_name="C", **config))
    assert await numbers() == before
    sub = await js.pull_subscribe_bind(durable="C", stream=stream)
    try:
        (msg,) = await sub.fetch(1, timeout=0.5)
        await msg.ack_sync()
    except nats.errors.TimeoutError:
        assert before[-1] == 0
    assert await numbers() == after
    await js.delete_stream(stream)


async def test_max_consumers_and_bad_config(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="PULLM", subjects=["pullm.>"], max_consumers=1)
    await js.add_consumer("PULLM", ConsumerConfig(durable_name="A", ack_policy=AckPolicy.EXPLICIT))
    with pytest.raises(APIError) as err:
        await js.add_consumer(
            "PULLM", ConsumerConfig(durable_name="B", ack_policy=AckPolicy.EXPLICIT)
        )
    assert (err.value.err_code, err.value.description) == (10026, "maximum consumers limit reached")
    # Re-creating the existing one with the same config is not a new consumer.
    await js.add_consumer("PULLM", ConsumerConfig(durable_name="A", ack_policy=AckPolicy.EXPLICIT))
    body = {"stream_name": "PULLM", "config": {"durable_name": "A", "deliver_subject": "x"}}
    reply = await nc.request("$JS.API.CONSUMER.CREATE.PULLM.A", json.dumps(body).encode())
    error = json.loads(reply.data)["error"]
    assert error["err_code"] == 10012


async def test_next_on_push_or_missing_consumer(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(name="PULLN", subjects=["pulln.>"])
    await js.add_consumer("PULLN", ConsumerConfig(durable_name="P", deliver_subject="pulln_dd"))
    reply = await nc.request("$JS.API.CONSUMER.MSG.NEXT.PULLN.P", b"1", timeout=1)
    assert reply.headers == {"Status": "409", "Description": "Consumer is push based"}
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.API.CONSUMER.MSG.NEXT.PULLN.MISSING", b"1", timeout=1)


async def test_ack_floor_walk_with_redelivery(nc: Client) -> None:
    """Out-of-order acks around a NAKed, redelivered message: the floor follows nats-server."""
    await stream_with(nc, "PULLW", 6)
    js = nc.jetstream()
    cfg = ConsumerConfig(ack_wait=5)
    sub = await js.pull_subscribe("pullw.>", durable="C", stream="PULLW", config=cfg)

    async def numbers() -> tuple[int, ...]:
        i = await js.consumer_info("PULLW", "C")
        return (
            i.ack_floor.consumer_seq,
            i.ack_floor.stream_seq,
            i.num_ack_pending,
            i.num_redelivered,
        )

    m = await sub.fetch(5, timeout=1)
    await m[2].ack_sync()
    assert await numbers() == (0, 0, 4, 0)
    await nc.request(m[0].reply, b"-NAK", timeout=1)  # a NAK sent as a request is answered
    again = await sub.fetch(2, timeout=1)
    got = [(x.metadata.sequence.stream, x.metadata.sequence.consumer) for x in again]
    assert got == [(1, 6), (6, 7)]
    assert await numbers() == (0, 0, 5, 1)
    await m[1].ack_sync()
    assert await numbers() == (0, 0, 4, 1)
    await again[0].ack_sync()
    assert await numbers() == (3, 3, 3, 0)
    await m[3].ack_sync()
    assert await numbers() == (4, 4, 2, 0)
    await again[1].ack_sync()
    assert await numbers() == (4, 4, 1, 0)
    await m[4].ack_sync()
    assert await numbers() == (7, 6, 0, 0)
