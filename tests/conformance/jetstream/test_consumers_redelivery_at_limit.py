"""Redeliveries of a consumer that sits at ``max_ack_pending``, on both servers.

A redelivery is not a new delivery: nats-server serves its redelivery queue before it checks
``max_ack_pending``, so a consumer holding as many unacked messages as it may still redelivers
them when their ack wait runs out, and once they run out of deliveries (a MAX_DELIVERIES
advisory each) the room they free goes to the next messages. Pull requests are raw
``CONSUMER.MSG.NEXT`` requests on an inbox, watched for a bounded time.
"""

from __future__ import annotations

import asyncio
import json
import time

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

SETTLE = 3.9
"""Seconds to watch: three deliveries 1 s apart, then the advisories (at about 3 s)."""
UNTIL = 3.6
"""Deliveries looked at (a push consumer goes on redelivering the next ones at 4 s)."""


async def collect(nc: Client, subject: str, sink: list[tuple[float, Msg]], t0: float) -> None:
    async def on_msg(msg: Msg) -> None:
        sink.append((time.monotonic() - t0, msg))

    await nc.subscribe(subject, cb=on_msg)


async def setup(nc: Client, name: str, cfg: ConsumerConfig) -> None:
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    for i in range(5):
        await js.publish(f"{name.lower()}.x", b"m%d" % (i + 1))
    await js.add_consumer(name, cfg)


def deliveries(got: list[tuple[float, Msg]]) -> list[tuple[int, int, float]]:
    """(stream seq, delivery count, seconds since start) of each delivered message."""
    out = []
    for at, msg in got:
        if msg.headers and msg.headers.get("Status"):
            continue
        if at >= UNTIL:
            continue
        md = msg.metadata
        out.append((md.sequence.stream, md.num_delivered, at))
    return out


def check(got: list[tuple[int, int, float]], advisories: list[tuple[float, Msg]]) -> None:
    by_round = {dc: sorted(s for s, d, _ in got if d == dc) for dc in (1, 2, 3)}
    assert by_round[1][:3] == [1, 2, 3], got
    assert by_round[2] == [1, 2, 3], got
    assert by_round[3] == [1, 2, 3], got
    second = [at for s, d, at in got if d == 2]
    third = [at for s, d, at in got if d == 3]
    assert min(second) > 0.8 and max(second) < 1.9, got
    assert min(third) > 1.8 and max(third) < 2.9, got
    # New messages wait while the three are pending, and go out once they ran out.
    fresh = [(s, at) for s, d, at in got if d == 1 and s > 3]
    assert [s for s, _ in fresh] == [4, 5], got
    assert all(at > 2.8 for _, at in fresh), got
    bodies = [json.loads(m.data) for _, m in advisories]
    assert sorted(b["stream_seq"] for b in bodies) == [1, 2, 3]
    assert all(b["deliveries"] == 3 for b in bodies)
    assert all(b["type"] == "io.nats.jetstream.advisory.v1.max_deliver" for b in bodies)


async def test_pull_redelivers_at_max_ack_pending(nc: Client) -> None:
    cfg = ConsumerConfig(
        durable_name="W",
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=1.0,
        max_deliver=3,
        max_ack_pending=3,
    )
    await setup(nc, "RDL1", cfg)
    t0 = time.monotonic()
    got: list[tuple[float, Msg]] = []
    advisories: list[tuple[float, Msg]] = []
    inbox = nc.new_inbox()
    await collect(nc, inbox, got, t0)
    await collect(nc, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.RDL1.W", advisories, t0)
    request = {"batch": 50, "expires": int(SETTLE * 1e9)}
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.RDL1.W", json.dumps(request).encode(), inbox)
    await asyncio.sleep(SETTLE + 0.2)
    check(deliveries(got), advisories)


async def test_push_redelivers_at_max_ack_pending(nc: Client) -> None:
    deliver = nc.new_inbox()
    cfg = ConsumerConfig(
        durable_name="P",
        deliver_subject=deliver,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=1.0,
        max_deliver=3,
        max_ack_pending=3,
    )
    t0 = time.monotonic()
    got: list[tuple[float, Msg]] = []
    advisories: list[tuple[float, Msg]] = []
    await collect(nc, deliver, got, t0)
    await collect(nc, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.RDL2.P", advisories, t0)
    await setup(nc, "RDL2", cfg)
    t0_shift = time.monotonic() - t0
    await asyncio.sleep(SETTLE + 0.2)
    shifted = [(at - t0_shift, m) for at, m in got]
    check(deliveries(shifted), [(at - t0_shift, m) for at, m in advisories])
