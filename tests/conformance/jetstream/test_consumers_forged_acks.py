"""Acks for messages the consumer never delivered (forged ack subjects), on both servers.

nats-server ignores an ``+ACK`` or ``+TERM`` whose stream sequence is at or past the
consumer's delivery pointer and sends no reply to it, even when it came as a request: the ack
is not confirmed, and the message is later delivered as usual.
"""

from __future__ import annotations

import time

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import ConsumerConfig


def forged(stream: str, consumer: str, sseq: int, cseq: int) -> str:
    return f"$JS.ACK.{stream}.{consumer}.1.{sseq}.{cseq}.{time.time_ns()}.0"


@pytest.mark.parametrize("body", [b"", b"+ACK", b"+TERM"], ids=["empty", "ack", "term"])
async def test_ack_past_delivery_pointer_is_ignored(nc: Client, body: bytes) -> None:
    name = f"FRG{len(body)}"
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    for i in range(4):
        await js.publish(f"{name.lower()}.x", b"m%d" % (i + 1))
    sub = await js.pull_subscribe(
        f"{name.lower()}.>", durable="W", stream=name, config=ConsumerConfig(ack_wait=30)
    )
    (first,) = await sub.fetch(1, timeout=2)
    assert first.metadata.sequence.stream == 1
    # Stream seqs 2 (the pointer itself) and 3 were never delivered; 9 does not exist.
    for sseq, cseq in ((2, 2), (3, 3), (9, 9)):
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(forged(name, "W", sseq, cseq), body, timeout=0.4)
    info = await js.consumer_info(name, "W")
    assert (info.delivered.stream_seq, info.ack_floor.stream_seq) == (1, 0)
    assert (info.num_ack_pending, info.num_pending) == (1, 3)
    # The forged acks changed nothing: 2, 3 and 4 are delivered as usual, and real acks
    # are confirmed.
    rest = await sub.fetch(3, timeout=2)
    assert [m.metadata.sequence.stream for m in rest] == [2, 3, 4]
    assert [m.metadata.num_delivered for m in rest] == [1, 1, 1]
    for msg in [first, *rest]:
        await msg.ack_sync(timeout=2)
    info = await js.consumer_info(name, "W")
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (4, 0)
