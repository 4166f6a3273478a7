"""Request/reply latency with nats-py: a responder connection and a requester connection.

gobench has no request/reply scenario, so nats-py plays both sides, on one uvloop event loop.
Requests are sequential (one in flight), so each sample is one full round trip:
requester -> server -> responder -> server -> requester, including both clients' Python
overhead (the same for both servers, which dilutes the ratio towards 1).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import nats
import uvloop
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

SUBJECT = "bench.latency"
WARMUP = 200
WARMUP_RETRIES = 20
"""Attempts at the first request (about a second in all)."""


@dataclass(frozen=True)
class Latencies:
    """Round-trip times of every measured request, in microseconds."""

    samples_us: list[float]


def request_reply(url: str, requests: int, size: int) -> Latencies:
    return uvloop.run(_request_reply(url, requests, size))


async def _request_reply(url: str, requests: int, size: int) -> Latencies:
    payload = b"x" * size
    responder = await nats.connect(url, allow_reconnect=False)
    requester = await nats.connect(url, allow_reconnect=False)

    async def respond(msg: Msg) -> None:
        await msg.respond(msg.data)

    samples: list[float] = []
    try:
        await responder.subscribe(SUBJECT, cb=respond)
        await responder.flush()
        request = requester.request
        clock = time.perf_counter_ns
        # The warm-up creates the requester's inbox subscription and fills both servers' caches.
        # Its first requests may find no responder: nats-server 2.15, just after start,
        # sometimes answers "no responders" for a subscription another connection has flushed
        # (tests/conformance/test_ipv6.py saw it too), so they are retried, a bounded number
        # of times; the measured requests below are not.
        for attempt in range(WARMUP_RETRIES):
            try:
                await request(SUBJECT, payload, timeout=5)
                break
            except NoRespondersError:
                if attempt == WARMUP_RETRIES - 1:
                    raise
                await asyncio.sleep(0.05)
        for _ in range(WARMUP):
            await request(SUBJECT, payload, timeout=5)
        for _ in range(requests):
            start = clock()
            await request(SUBJECT, payload, timeout=5)
            samples.append((clock() - start) / 1000)
    finally:
        await requester.close()
        await responder.close()
    return Latencies(samples_us=samples)
