"""nats-py as the load: what a Python user of the server sees.

A Python client is usually slower than the server it drives, so these figures mostly measure
nats-py; the issue's target for pub/sub here (headwater >= 90% of nats-server) says exactly
that the server must not be the bottleneck. Each load runs in this process on its own uvloop
event loop, publisher and subscriber sharing it, as a single-process Python app would.
Pub/sub can put the subscriber on another server of a cluster (``sub_url``, issue 17).
"""

from __future__ import annotations

import asyncio
import time

import nats
import nats.errors
import uvloop
from nats.aio.client import Client as NATS
from results import Throughput

SUBJECT = "bench.natspy"
# Published from the publisher's server until it reaches the subscriber's (remote interest).
PROBE_SUBJECT = "bench.natspy.probe"
INTEREST_TIMEOUT = 10.0
# Messages the publisher may be ahead of the subscriber before it yields: keeps the
# subscriber's pending queue far below nats-py's slow-consumer limit (512k messages) and the
# server's outbound buffer far below its max_pending.
WINDOW = 50_000


def publish_only(url: str, msgs: int, size: int) -> Throughput:
    """Publish ``msgs`` messages with no subscriber, then flush (a PING round trip)."""
    return uvloop.run(_publish_only(url, msgs, size))


def pubsub(url: str, msgs: int, size: int, sub_url: str | None = None) -> Throughput:
    """One publisher and one subscriber connection on the same subject; time to receive all.

    ``sub_url`` connects the subscriber to another server of the cluster (default ``url``).
    """
    return uvloop.run(_pubsub(url, msgs, size, sub_url or url))


async def _publish_only(url: str, msgs: int, size: int) -> Throughput:
    payload = b"x" * size
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        publish = nc.publish
        start = time.perf_counter()
        for _ in range(msgs):
            await publish(SUBJECT, payload)
        # flush() returns once the server answered PING, so it has read every PUB before it.
        await nc.flush(timeout=60)
        seconds = time.perf_counter() - start
    finally:
        await nc.close()
    return Throughput(msgs=msgs, seconds=seconds, ok=True)


async def _await_remote_interest(pub_nc: NATS, sub_nc: NATS) -> None:
    """Return once the publisher's server routes to the subscriber's.

    A server announces subscriptions over a route in the order they were made, so a probe
    subscribed after the measured subscription crossing the route means that one has too.
    """
    probe = await sub_nc.subscribe(PROBE_SUBJECT)
    try:
        await sub_nc.flush()
        deadline = time.monotonic() + INTEREST_TIMEOUT
        while time.monotonic() < deadline:
            await pub_nc.publish(PROBE_SUBJECT, b"")
            await pub_nc.flush()
            try:
                await probe.next_msg(timeout=0.05)
                return
            except nats.errors.TimeoutError:
                continue
        raise TimeoutError(f"no route to the subscriber's server after {INTEREST_TIMEOUT} s")
    finally:
        await probe.unsubscribe()


async def _pubsub(url: str, msgs: int, size: int, sub_url: str) -> Throughput:
    payload = b"x" * size
    sub_nc = await nats.connect(sub_url, allow_reconnect=False)
    pub_nc = await nats.connect(url, allow_reconnect=False)
    received = 0
    done = asyncio.get_running_loop().create_future()

    async def on_msg(_msg: object) -> None:
        nonlocal received
        received += 1
        if received == msgs and not done.done():
            done.set_result(None)

    try:
        await sub_nc.subscribe(SUBJECT, cb=on_msg)
        await sub_nc.flush()
        if sub_url != url:
            await _await_remote_interest(pub_nc, sub_nc)
        publish = pub_nc.publish
        start = time.perf_counter()
        for i in range(msgs):
            await publish(SUBJECT, payload)
            if i % 1000 == 0:
                while i - received > WINDOW:
                    # Let the subscriber (and the publisher's flusher) run.
                    await asyncio.sleep(0)
        await pub_nc.flush(timeout=60)
        try:
            await asyncio.wait_for(done, timeout=60)
        except TimeoutError:
            pass  # reported as ok=False with the count that did arrive
        seconds = time.perf_counter() - start
    finally:
        await pub_nc.close()
        await sub_nc.close()
    return Throughput(msgs=received, seconds=seconds, ok=received == msgs)
