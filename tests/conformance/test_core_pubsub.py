"""Core NATS through nats-py, run against Headwater and nats-server alike."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import nats
import pytest
from nats.aio.msg import Msg

from headwater.testing import ServerProcess


async def collect(nc: nats.NATS, subject: str, queue: str = "") -> list[Msg]:
    got: list[Msg] = []

    async def cb(msg: Msg) -> None:
        got.append(msg)

    await nc.subscribe(subject, queue=queue, cb=cb)
    return got


async def settle(nc: nats.NATS, until: Callable[[], bool] | None = None) -> None:
    """Flush, then wait briefly (up to 5 s while ``until`` is false) for deliveries to land."""
    await nc.flush()
    await asyncio.sleep(0.05)
    if until is None:
        return
    for _ in range(250):
        if until():
            return
        await asyncio.sleep(0.02)


async def test_wildcards_route_to_the_right_subscribers(any_shared_server: ServerProcess) -> None:
    nc = await nats.connect(any_shared_server.url)
    star = await collect(nc, "w.*.b")
    full = await collect(nc, "w.>")
    exact = await collect(nc, "w.a.b")
    for subject in ("w.a.b", "w.x.b", "w.a.c", "w.a.b.c"):
        await nc.publish(subject, subject.encode())
    await settle(nc, lambda: len(full) == 4)
    assert [m.subject for m in star] == ["w.a.b", "w.x.b"]
    assert [m.subject for m in full] == ["w.a.b", "w.x.b", "w.a.c", "w.a.b.c"]
    assert [m.data for m in exact] == [b"w.a.b"]
    await nc.close()


async def test_queue_group_gets_each_message_once(any_shared_server: ServerProcess) -> None:
    nc = await nats.connect(any_shared_server.url)
    members = [await collect(nc, "q.work", queue="workers") for _ in range(3)]
    plain = await collect(nc, "q.work")
    for i in range(300):
        await nc.publish("q.work", str(i).encode())
    await settle(nc, lambda: len(plain) == 300 and sum(map(len, members)) == 300)
    received = [m.data for member in members for m in member]
    assert sorted(received, key=int) == [str(i).encode() for i in range(300)]
    assert all(len(member) > 30 for member in members), [len(m) for m in members]
    assert len(plain) == 300
    await nc.close()


async def test_request_reply_and_headers(any_shared_server: ServerProcess) -> None:
    nc = await nats.connect(any_shared_server.url)

    async def handler(msg: Msg) -> None:
        assert msg.headers is not None
        await nc.publish(msg.reply, msg.data[::-1], headers={"X-Seen": msg.headers["X-In"]})

    await nc.subscribe("svc.reverse", cb=handler)
    reply = await nc.request("svc.reverse", b"abc", headers={"X-In": "1"}, timeout=2)
    assert reply.data == b"cba"
    assert reply.headers == {"X-Seen": "1"}
    await nc.close()


async def test_no_responders_answers_503(any_shared_server: ServerProcess) -> None:
    nc = await nats.connect(any_shared_server.url)
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("nobody.listens", b"?", timeout=2)
    await nc.close()


async def test_auto_unsubscribe_after_max(any_shared_server: ServerProcess) -> None:
    nc = await nats.connect(any_shared_server.url)
    got = []

    async def cb(msg: Msg) -> None:
        got.append(msg.data)

    sub = await nc.subscribe("auto.unsub", cb=cb)
    await sub.unsubscribe(limit=3)
    for i in range(10):
        await nc.publish("auto.unsub", str(i).encode())
    await settle(nc)
    assert got == [b"0", b"1", b"2"]
    await nc.close()


async def test_echo_false_skips_own_messages(any_shared_server: ServerProcess) -> None:
    quiet = await nats.connect(any_shared_server.url, no_echo=True)
    other = await nats.connect(any_shared_server.url)
    own = await collect(quiet, "echo.test")
    theirs = await collect(other, "echo.test")
    await quiet.flush()
    await other.flush()
    await quiet.publish("echo.test", b"from quiet")
    await other.publish("echo.test", b"from other")
    await settle(quiet)
    await settle(other, lambda: len(theirs) == 2 and len(own) == 1)
    assert [m.data for m in own] == [b"from other"]
    assert sorted(m.data for m in theirs) == [b"from other", b"from quiet"]
    await quiet.close()
    await other.close()


async def test_large_payload_round_trips(any_shared_server: ServerProcess) -> None:
    nc = await nats.connect(any_shared_server.url)
    got = await collect(nc, "big")
    payload = bytes(range(256)) * 4000  # ~1 MB, just under max_payload
    await nc.publish("big", payload)
    await settle(nc, lambda: bool(got))
    assert [m.data for m in got] == [payload]
    await nc.close()


async def test_order_is_kept_per_publisher(any_shared_server: ServerProcess) -> None:
    pub = await nats.connect(any_shared_server.url)
    sub = await nats.connect(any_shared_server.url)
    got = await collect(sub, "order.>")
    await sub.flush()
    for i in range(2000):
        await pub.publish(f"order.{i % 7}", str(i).encode())
    await pub.flush()
    for _ in range(100):
        if len(got) == 2000:
            break
        await asyncio.sleep(0.02)
    assert [int(m.data) for m in got] == list(range(2000))
    await pub.close()
    await sub.close()


async def test_fanout_counts(any_shared_server: ServerProcess) -> None:
    nc = await nats.connect(any_shared_server.url)
    boxes = [await collect(nc, "fan.out") for _ in range(5)]
    for i in range(20):
        await nc.publish("fan.out", str(i).encode())
    await settle(nc, lambda: sum(map(len, boxes)) == 100)
    assert Counter(len(b) for b in boxes) == Counter({20: 5})
    await nc.close()
