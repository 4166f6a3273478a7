"""Requests whose work grows with a stream's size must not stall the event loop.

Each scenario builds a stream big enough that doing the work in one pass of the loop takes
well over 100 ms of CPU, then triggers it through nats-py. The servers run with the stall
watchdog (``HEADWATER_STALL_REPORT_MS=100``, tests/conftest.py), so a pass that computes longer
fails the test: ``assert not srv.stall_reports()`` says so here with the culprit's stack, and
the ``no_event_loop_stalls`` fixture would anyway. Headwater only: nats-server has no such
watchdog, and the behaviour checked (order, counts, statuses) is covered differentially by the
pull, publish and retention tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, RetentionPolicy

from headwater.testing import ServerProcess

COUNT = 200_000
CHUNK = 1_000


@pytest.fixture
def srv() -> Iterator[ServerProcess]:
    server = ServerProcess("headwater", jetstream=True)
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
async def client(srv: ServerProcess) -> AsyncIterator[Client]:
    nc = await nats.connect(srv.url, allow_reconnect=False)
    try:
        yield nc
    finally:
        await nc.close()


async def fill(nc: Client, subject: str, count: int, msg_ids: bool = False) -> None:
    """``count`` small messages by core publishes, flushed in chunks so none is dropped."""
    for start in range(0, count, CHUNK):
        for i in range(start, min(start + CHUNK, count)):
            hdr = {"Nats-Msg-Id": f"id-{i}"} if msg_ids else None
            await nc.publish(subject, b"x", headers=hdr)
        await nc.flush(timeout=30)


async def stored(nc: Client, stream: str, count: int, timeout: float = 30.0) -> None:
    js = nc.jetstream()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = await js.stream_info(stream)
        if info.state.messages >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{stream}: only {info.state.messages} of {count} stored")


def assert_no_stall(server: ServerProcess) -> None:
    reports = server.stall_reports()
    assert not reports, "event loop stalled:\n" + "\n\n".join(reports)


async def test_pull_batch_of_a_million_ack_none(srv: ServerProcess, client: Client) -> None:
    js = client.jetstream()
    await js.add_stream(name="BIG", subjects=["big"])
    await fill(client, "big", COUNT)
    await stored(client, "BIG", COUNT)
    await js.add_consumer("BIG", durable_name="P", ack_policy=AckPolicy.NONE)
    got: list[int] = []
    statuses: list[str] = []
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        if msg.headers and msg.headers.get("Status"):
            statuses.append(msg.headers["Status"])
            done.set()
            return
        got.append(msg.metadata.sequence.stream)

    inbox = client.new_inbox()
    await client.subscribe(inbox, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    await client.publish(
        "$JS.API.CONSUMER.MSG.NEXT.BIG.P", b'{"batch":1000000,"no_wait":true}', reply=inbox
    )
    await asyncio.wait_for(done.wait(), 30)
    assert statuses == ["404"]
    assert got == list(range(1, COUNT + 1))
    assert_no_stall(srv)


async def test_dedupe_window_load_after_restart(srv: ServerProcess) -> None:
    nc = await nats.connect(srv.url, allow_reconnect=False)
    try:
        await nc.jetstream().add_stream(name="DD", subjects=["dd"])
        await fill(nc, "dd", COUNT, msg_ids=True)
        await stored(nc, "DD", COUNT)
    finally:
        await nc.close()
    srv.restart()
    nc = await nats.connect(srv.url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        # The first message with an id loads the window: a duplicate is still one.
        dup = await js.publish("dd", b"again", headers={"Nats-Msg-Id": "id-7"}, timeout=20)
        assert (dup.seq, dup.duplicate) == (8, True)
        # Messages published meanwhile without an id keep their order behind it.
        acks = await asyncio.gather(
            js.publish("dd", b"new", headers={"Nats-Msg-Id": "fresh"}, timeout=20),
            js.publish("dd", b"plain", timeout=20),
        )
        assert [(a.seq, a.duplicate) for a in acks] == [(COUNT + 1, None), (COUNT + 2, None)]
    finally:
        await nc.close()
    assert_no_stall(srv)


async def test_delete_marker_scan(srv: ServerProcess, client: Client) -> None:
    js = client.jetstream()
    await js.add_stream(name="MK", subjects=["mk.*"], allow_msg_ttl=True)
    await fill(client, "mk.a", COUNT)
    await stored(client, "MK", COUNT)
    # Turning markers on scans the stream for markers already stored.
    info = await js.stream_info("MK")
    cfg = info.config
    cfg.subject_delete_marker_ttl = 2.0
    await js.update_stream(cfg)
    # Expiry still runs once the scan is done: the last message of a subject expiring
    # leaves a marker there (for 2 s).
    await js.publish("mk.b", b"short", headers={"Nats-TTL": "2s"})
    marker = None
    deadline = time.monotonic() + 10
    while marker is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        last = await js.get_last_msg("MK", "mk.b")
        if last.headers and "Nats-Marker-Reason" in last.headers:
            marker = last
    assert marker is not None and marker.headers is not None
    assert marker.headers["Nats-Marker-Reason"] == "MaxAge"
    assert_no_stall(srv)
    # Every start scans too.
    srv.restart()
    nc = await nats.connect(srv.url, allow_reconnect=False)
    try:
        info = await nc.jetstream().stream_info("MK")
        assert COUNT <= info.state.messages <= COUNT + 1  # the marker may have expired
    finally:
        await nc.close()
    assert_no_stall(srv)


async def test_consumer_removed_on_interest_stream(srv: ServerProcess, client: Client) -> None:
    js = client.jetstream()
    await js.add_stream(name="IN", subjects=["in"], retention=RetentionPolicy.INTEREST)
    await js.add_consumer("IN", durable_name="A", ack_policy=AckPolicy.EXPLICIT)
    await fill(client, "in", COUNT)
    await stored(client, "IN", COUNT)
    # Only A wanted them: deleting A drops every message.
    await js.delete_consumer("IN", "A")
    deadline = time.monotonic() + 20
    while (await js.stream_info("IN")).state.messages and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert (await js.stream_info("IN")).state.messages == 0
    assert_no_stall(srv)


async def test_one_read_full_of_publishes(srv: ServerProcess, client: Client) -> None:
    """One socket read can hold tens of thousands of small publishes (a client's buffered
    burst, a mirror catching up): storing them all in that read's pass took ~140 ms on a CI
    machine. The connection now works through a read one slice at a time, reading no more
    until it is done, and in order."""
    js = client.jetstream()
    await js.add_stream(name="BURST", subjects=["b"])
    count = 100_000
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    try:
        await reader.readline()  # INFO
        burst = b"".join(b"PUB b %d\r\n%d\r\n" % (len(str(i)), i) for i in range(count))
        writer.write(b'CONNECT {"verbose":false}\r\n' + burst + b"PING\r\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 60)
        assert line == b"PONG\r\n"
    finally:
        writer.close()
    await stored(client, "BURST", count)
    for seq in (1, count // 2, count):
        msg = await js.get_msg("BURST", seq)
        assert msg.data == str(seq - 1).encode()
    assert_no_stall(srv)
