"""Consumer scenarios of issue 4, each against both servers in the same run (``--only consumers``).

* ordered push replay: a nats-py ``js.subscribe(..., ordered_consumer=True)`` reads a stream of
  16-byte messages from the start (flow control and idle heartbeats on, as nats-py sets them);
  timed from the subscribe to the last message;
* publish throughput into a stream with no consumers, then with many idle durable pull
  consumers on it (created before timing); headwater's target is about its own drop, so a
  third row gives each server's with-consumers rate as a percentage of its no-consumer rate.

Both servers use file storage with periodic sync (headwater ``"2m"``, nats-server's default),
so the rows compare like with like. Figures are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import js_config
import nats
import uvloop
from js_config import DEFAULT, INTERVAL
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StorageType
from nats.js.errors import NotFoundError
from results import Measure, Target, Throughput
from scenarios import SIZE, Plan, _throughput

PERIODIC = {"headwater": INTERVAL, "nats": DEFAULT}
# Publishes in flight before the publisher waits for stream acks: keeps the load measuring the
# server's ingest, not nats-py's request bookkeeping (acks are counted on one wildcard inbox).
WINDOW = 2_000
LOAD_CHUNK = 5_000  # untimed preload: plain publishes per flush


async def _connect(url: str) -> Client:
    return await nats.connect(url, allow_reconnect=False, pending_size=256 * 1024 * 1024)


async def _stream_count(nc: Client, name: str) -> int:
    info = await nc.jetstream().stream_info(name)
    return int(info.state.messages)


async def _fill(nc: Client, name: str, subject: str, msgs: int) -> None:
    """Make stream ``name`` hold ``msgs`` messages (plain publishes; a server may drop some
    under ingest pressure, so the shortfall is published again)."""
    js = nc.jetstream()
    try:
        have = await _stream_count(nc, name)
    except NotFoundError:
        await js.add_stream(name=name, subjects=[subject], storage=StorageType.FILE)
        have = 0
    payload = b"x" * SIZE
    while have < msgs:
        for start in range(have, msgs, LOAD_CHUNK):
            for _ in range(min(LOAD_CHUNK, msgs - start)):
                await nc.publish(subject, payload)
            await nc.flush()
        for _ in range(100):  # let the stream catch up with what it accepted
            await asyncio.sleep(0.05)
            now = await _stream_count(nc, name)
            if now >= msgs or now == have:
                break
            have = now
        have = await _stream_count(nc, name)


def ordered_replay(url: str, msgs: int) -> Throughput:
    """Time an ordered push consumer reading ``msgs`` stored messages through nats-py."""
    return uvloop.run(_ordered_replay(url, msgs))


async def _ordered_replay(url: str, msgs: int) -> Throughput:
    name, subject = f"CREPLAY{msgs}", f"creplay.{msgs}"
    nc = await _connect(url)
    try:
        await _fill(nc, name, subject, msgs)
        done = asyncio.get_running_loop().create_future()
        got = [0]

        async def count(msg: Msg) -> None:
            got[0] += 1
            if got[0] == msgs and not done.done():
                done.set_result(None)

        start = time.perf_counter()
        sub = await nc.jetstream().subscribe(subject, cb=count, ordered_consumer=True)
        # A timeout is reported through the result's completeness flag, not raised.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done, timeout=300)
        seconds = time.perf_counter() - start
        await sub.unsubscribe()
        return Throughput(got[0], seconds, got[0] == msgs)
    finally:
        await nc.close()


def publish_with_consumers(consumers: int) -> Callable[[str, int], Throughput]:
    """A load: acked publishes of ``msgs`` messages into a stream with ``consumers`` idle
    durables (stream and consumers made once per server, outside the timing)."""

    def load(url: str, msgs: int) -> Throughput:
        return uvloop.run(_publish(url, msgs, consumers))

    return load


async def _publish(url: str, msgs: int, consumers: int) -> Throughput:
    name, subject = f"CPUB{consumers}", f"cpub.{consumers}"
    nc = await _connect(url)
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(name)
        except NotFoundError:
            await js.add_stream(name=name, subjects=[subject], storage=StorageType.FILE)
            for i in range(consumers):
                await js.add_consumer(name, durable_name=f"IDLE{i}", ack_policy="explicit")
        acked = [0]
        room = asyncio.Event()
        finished = asyncio.get_running_loop().create_future()

        async def on_ack(msg: Msg) -> None:
            acked[0] += 1
            room.set()
            if acked[0] == msgs and not finished.done():
                finished.set_result(None)

        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=on_ack)
        payload = b"x" * SIZE
        start = time.perf_counter()
        for sent in range(msgs):
            while sent - acked[0] >= WINDOW:
                room.clear()
                await room.wait()
            await nc.publish(subject, payload, reply=inbox)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(finished, timeout=300)
        seconds = time.perf_counter() - start
        return Throughput(acked[0], seconds, acked[0] == msgs)
    finally:
        await nc.close()


def consumers(plan: Plan) -> list[Measure]:
    """Ordered replay and publish with/without idle consumers, both servers, periodic sync."""
    replay_msgs = plan.consumer_replay_msgs
    idle = plan.idle_consumers
    measures: list[Measure] = []
    with js_config.js_args(PERIODIC) as args:
        measures.append(
            _throughput(
                "consumers.ordered_replay",
                f"ordered push replay 16 B ({replay_msgs:,} msgs)",
                "nats-py",
                ordered_replay,
                replay_msgs,
                plan,
                Target("ratio_min", 0.90, ">= 0.90x"),
                args,
            )
        )
    rates: list[Measure] = []
    for count in (0, idle):
        with js_config.js_args(PERIODIC) as args:
            rates.append(
                _throughput(
                    f"consumers.pub_idle{0 if count == 0 else 'N'}",
                    f"JS pub 16 B, {count:,} idle durables",
                    "nats-py",
                    publish_with_consumers(count),
                    plan.consumer_pub_msgs,
                    plan,
                    None,
                    args,
                )
            )
    measures += rates
    kept = {
        kind: _percent(getattr(rates[1], kind), getattr(rates[0], kind))
        for kind in ("headwater", "nats")
    }
    measures.append(
        Measure(
            "consumers.pub_kept",
            f"JS pub rate kept with {idle:,} idle durables",
            "nats-py",
            "% of 0",
            kept["headwater"],
            kept["nats"],
            Target("headwater_min", 50.0, "hw >= 50%"),
            "each server's rate with idle durables as a % of its rate with none",
        )
    )
    for m in measures:
        m.note = f"hw sync_interval 2m, nats default; {m.note}"
    return measures


def _percent(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else 100.0 * part / whole
