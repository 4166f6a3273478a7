"""Snapshot transfers (`replicated.transfer`) between `Transfers` on real in-process Headwater
servers, each side with its own `InternalClient`: on one server (through its routing), and
between two servers joined by a route (through the route).

Faults are made by `Faulty`, a wrapper of a real internal client that drops, duplicates,
holds back (reorders) or corrupts some of the messages a side publishes; the server is never
mocked. Snapshots are written by the real `FileSink` to a tmp dir. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import xxhash

from headwater.server.config.settings import ClusterSettings, Settings
from headwater.server.connections.internal import InternalClient
from headwater.server.node import Server
from headwater.server.replicated.transfer import (
    COMPLETE,
    STALLED,
    Abort,
    Chunk,
    FileSink,
    Message,
    Transfers,
    decode,
    encode,
    file_sinks,
)
from headwater.testing import free_ports

from .conftest import wait_until

pytestmark = pytest.mark.timeout(60)

STREAM = "ORDERS"
IDS = {"s1": "IDS1", "s2": "IDS2", "s3": "IDS3"}
FAST = {"chunk_bytes": 16 * 1024, "window_bytes": 128 * 1024, "stall_s": 1.0, "resend_s": 0.05}
"""Small chunks and windows (many of each per test) and short timeouts."""


def snapshot(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


async def pieces(data: bytes, seed: int = 2) -> AsyncIterator[bytes]:
    """`data` in pieces of random sizes, from a byte to four chunks of the default size."""
    rng = random.Random(seed)
    at = 0
    while at < len(data):
        size = rng.choice((1, 100, 16 * 1024, 50_000, 256 * 1024))
        yield data[at : at + size]
        at += size


class Faulty:
    """A real internal client whose publishes pass through `fault(msg, n)` (n counts the
    messages of that kind), which answers None (sent), "drop", "dup", "hold" (sent after the
    next one: reordered) or "flip" (the last byte changed: a chunk's last data byte)."""

    def __init__(self, client: InternalClient) -> None:
        self.client = client
        self.fault: Callable[[Message, int], str | None] = lambda msg, n: None
        self.counts: dict[type, int] = {}
        self.held: bytes | None = None
        self.held_subject = ""
        self.done: list[str] = []  # the faults made

    def publish(self, subject: str, payload: bytes) -> int:
        msg = decode(payload)
        n = self.counts[type(msg)] = self.counts.get(type(msg), 0) + 1
        what = self.fault(msg, n)
        if what is not None:
            self.done.append(what)
        if what == "drop":
            return 0
        if what == "hold" and self.held is None:
            self.held, self.held_subject = payload, subject
            return 0
        if what == "flip":
            payload = payload[:-1] + bytes([payload[-1] ^ 0xFF])
        self.client.publish(subject, payload)
        if what == "dup":
            self.client.publish(subject, payload)
        if self.held is not None and what != "hold":
            held, self.held = self.held, None
            self.client.publish(self.held_subject, held)
        return 1

    def subscribe(self, subject: str, handler: Any) -> Any:
        return self.client.subscribe(subject, handler)

    def unsubscribe(self, sub: Any) -> None:
        self.client.unsubscribe(sub)


class Owner:
    """A server's side of STREAM: its `Transfers` (over a `Faulty` client) and what it got."""

    def __init__(self, name: str, server: Server, tmp: Path, **config: Any) -> None:
        self.name = name
        self.client = InternalClient(server, f"snap-{name}")
        self.transport = Faulty(self.client)
        self.dir = tmp / name
        self.dir.mkdir()
        self.sinks: list[FileSink] = []
        self.installed: list[tuple[int, int, bytes]] = []
        opener = file_sinks(self.dir)

        def open_sink(index: int, epoch: int) -> FileSink:
            sink = opener(index, epoch)
            self.sinks.append(sink)
            return sink

        self.transfers = Transfers(
            STREAM,
            IDS[name],
            transport=self.transport,
            resolve=IDS.get,
            open_sink=open_sink,
            on_complete=self._complete,
            **{**FAST, **config},
        )

    def _complete(self, index: int, epoch: int, sink: FileSink) -> None:
        # The owner's install: here, read the file back and delete it.
        self.installed.append((index, epoch, sink.path.read_bytes()))
        sink.path.unlink()

    def files(self) -> list[Path]:
        return sorted(self.dir.iterdir())

    async def close(self) -> None:
        await asyncio.wait_for(self.transfers.close(), 5.0)
        self.client.close()


lags: list[float] = []


async def loop_lag() -> None:
    """Appends to `lags` how late each 5 ms sleep woke (the event loop blocked), until
    cancelled."""
    lags.clear()
    for _ in range(100_000):
        began = time.monotonic()
        await asyncio.sleep(0.005)
        lags.append(time.monotonic() - began - 0.005)


def snap_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("snap:") and not t.done()]


# Fixtures ------------------------------------------------------------------------------------


@pytest.fixture
async def owners(hub: Server, tmp_path: Path) -> AsyncIterator[dict[str, Owner]]:
    """s1, s2, s3 on one server, started."""
    made = {name: Owner(name, hub, tmp_path) for name in IDS}
    try:
        for owner in made.values():
            await owner.transfers.start()
        yield made
    finally:
        for owner in made.values():
            await owner.close()
        assert not snap_tasks()


@pytest.fixture
async def pair() -> AsyncIterator[list[Server]]:
    """Two servers joined by a route (no JetStream, no etcd: the routes alone)."""
    ports = free_ports(2)
    routes = tuple(f"nats-route://127.0.0.1:{p}" for p in ports)
    servers = [
        Server(
            Settings(
                host="127.0.0.1",
                port=-1,
                server_name=f"r{i}",
                cluster=ClusterSettings(name="c", host="127.0.0.1", port=port, routes=routes),
            )
        )
        for i, port in enumerate(ports)
    ]
    try:
        await asyncio.gather(*(srv.start() for srv in servers))
        yield servers
    finally:
        for srv in servers:
            await srv.shutdown()


# Tests ---------------------------------------------------------------------------------------


async def test_a_multi_mb_snapshot_crosses_a_route_byte_identical(
    pair: list[Server], tmp_path: Path
) -> None:
    # The defaults (64 KiB chunks, a 1 MiB window) but for the timeouts.
    sender = Owner("s1", pair[0], tmp_path, chunk_bytes=64 * 1024, window_bytes=1024 * 1024)
    receiver = Owner("s2", pair[1], tmp_path, chunk_bytes=64 * 1024, window_bytes=1024 * 1024)
    try:
        await sender.transfers.start()
        await receiver.transfers.start()
        # The route knows the receiver's subscription once a probe made after it crosses.
        got: list[bytes] = []
        receiver.client.subscribe("$HW.SNAP.probe", lambda *a: got.append(a[-1]))
        for _ in range(200):
            sender.client.publish("$HW.SNAP.probe", b"x")
            if got:
                break
            await asyncio.sleep(0.05)
        assert got, "the route did not come up"
        data = snapshot(24 * 1024 * 1024)
        lag = asyncio.get_running_loop().create_task(loop_lag())
        began = time.monotonic()
        task = sender.transfers.send("s2", 1000, 3, pieces(data))
        assert task is not None
        assert await asyncio.wait_for(task, 40.0) == COMPLETE
        took = time.monotonic() - began
        lag.cancel()
        await asyncio.gather(lag, return_exceptions=True)
        assert max(lags) < 0.1, f"the event loop was blocked {max(lags) * 1000:.0f} ms"
        await wait_until(lambda: bool(receiver.installed), 5.0, "installed")
        ((index, epoch, body),) = receiver.installed
        assert (index, epoch) == (1000, 3)
        assert len(body) == len(data) and body == data
        assert receiver.files() == []  # the owner took the file; nothing else left behind
        print(
            f"\n24 MiB over a route in {took:.2f} s ({24 / took:.1f} MiB/s), "
            f"the loop late by {max(lags) * 1000:.0f} ms at most"
        )
        # Memory stayed bounded on both sides: a window each.
        assert sender.transfers.peak_unacked <= 1024 * 1024
        assert receiver.transfers.peak_queued <= 1024 * 1024
    finally:
        await sender.close()
        await receiver.close()
    assert not snap_tasks()


async def test_lost_duplicated_and_reordered_messages_are_resent_and_it_completes(
    owners: dict[str, Owner],
) -> None:
    s1, s2 = owners["s1"], owners["s2"]

    def chunks(msg: Message, n: int) -> str | None:
        if isinstance(msg, Chunk):
            return {0: "drop", 3: "dup", 5: "hold"}.get(n % 7)
        return None

    def answers(msg: Message, n: int) -> str | None:
        return "drop" if n % 5 == 0 else None  # every fifth ACK, NACK, DONE ... lost

    s1.transport.fault = chunks
    s2.transport.fault = answers
    data = snapshot(3 * 1024 * 1024 + 12345)
    task = s1.transfers.send("s2", 50, 2, pieces(data))
    assert task is not None
    assert await asyncio.wait_for(task, 30.0) == COMPLETE
    await wait_until(lambda: bool(s2.installed), 5.0, "installed")
    assert s2.installed == [(50, 2, data)]
    assert {"drop", "dup", "hold"} <= set(s1.transport.done)
    assert "drop" in s2.transport.done
    assert s1.transfers.resent > 0
    assert s1.transfers.peak_unacked <= FAST["window_bytes"]
    assert s2.transfers.peak_queued <= FAST["window_bytes"]
    assert s2.files() == []


async def test_a_cut_off_transfer_is_abandoned_on_both_sides_and_a_retry_succeeds(
    owners: dict[str, Owner],
) -> None:
    s1, s2 = owners["s1"], owners["s2"]
    data = snapshot(2 * 1024 * 1024)
    # The link goes down after the 20th chunk: nothing more in either direction.
    down = {"on": False}

    def cut(msg: Message, n: int) -> str | None:
        if isinstance(msg, Chunk) and n == 20:
            down["on"] = True
        return "drop" if down["on"] else None

    s1.transport.fault = cut
    s2.transport.fault = lambda msg, n: "drop" if down["on"] else None
    began = time.monotonic()
    task = s1.transfers.send("s2", 10, 1, pieces(data))
    assert task is not None
    assert await asyncio.wait_for(task, 5.0) == STALLED
    sender_took = time.monotonic() - began
    await wait_until(lambda: not s2.files(), 5.0, "the receiver dropped its partial file")
    receiver_took = time.monotonic() - began
    assert len(s2.sinks) == 1 and not s2.sinks[0].path.exists()
    assert s2.installed == []
    # Abandoned within the stall timeout (plus a resend period and scheduling).
    print(f"\nabandoned by the sender after {sender_took:.2f} s, receiver {receiver_took:.2f} s")
    assert sender_took < FAST["stall_s"] + 1.0
    assert receiver_took < FAST["stall_s"] + 1.0
    # The link comes back; the core asks again: a new transfer completes.
    down["on"] = False
    s1.transport.fault = s2.transport.fault = lambda msg, n: None
    task = s1.transfers.send("s2", 12, 1, pieces(data))
    assert task is not None
    assert await asyncio.wait_for(task, 10.0) == COMPLETE
    await wait_until(lambda: bool(s2.installed), 5.0, "installed")
    assert s2.installed == [(12, 1, data)]


async def test_a_stalled_source_is_abandoned_on_both_sides(owners: dict[str, Owner]) -> None:
    s1, s2 = owners["s1"], owners["s2"]
    release = asyncio.Event()

    async def hangs() -> AsyncIterator[bytes]:
        yield b"x" * 40_000
        await release.wait()  # never set: the owner's snapshot reader hangs
        yield b"y"

    began = time.monotonic()
    task = s1.transfers.send("s2", 10, 1, hangs())
    assert task is not None
    await wait_until(lambda: len(s2.sinks) == 1, 2.0, "the receiver took it")
    # Both sides time out after `stall_s`: whichever first tells the other.
    assert await asyncio.wait_for(task, 5.0) in (STALLED, "aborted: stalled")
    await wait_until(lambda: not s2.files(), 5.0, "the partial file dropped")
    took = time.monotonic() - began
    assert took < FAST["stall_s"] + 1.0
    assert s2.installed == []
    await wait_until(lambda: not snap_tasks(), 2.0, "both sides' tasks ended")


async def test_a_newer_transfer_supersedes_an_older_one(owners: dict[str, Owner]) -> None:
    s1, s2, s3 = owners["s1"], owners["s2"], owners["s3"]
    old_data, new_data = snapshot(1024 * 1024, seed=5), snapshot(1024 * 1024, seed=6)
    gate = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield old_data[:100_000]
        await gate.wait()
        yield old_data[100_000:]

    # s1 (say a deposed leader) sends index 10 and its source waits half way.
    old = s1.transfers.send("s3", 10, 1, slow())
    assert old is not None
    await wait_until(lambda: len(s3.sinks) == 1, 2.0, "s3 took the first")
    first = s3.sinks[0]
    # The same sender is not asked twice at once: its transfer is still running.
    assert s1.transfers.send("s3", 11, 1, pieces(old_data)) is None
    # s2 (the new leader) sends index 20: it supersedes; s1's is told and stops.
    new = s2.transfers.send("s3", 20, 2, pieces(new_data))
    assert new is not None
    assert await asyncio.wait_for(old, 5.0) == "aborted: superseded"
    assert await asyncio.wait_for(new, 10.0) == COMPLETE
    await wait_until(lambda: bool(s3.installed), 5.0, "installed")
    assert s3.installed == [(20, 2, new_data)]
    assert not first.path.exists()
    # An older one (index 15) is refused while one at a higher index is received.
    gate2 = asyncio.Event()

    async def held() -> AsyncIterator[bytes]:
        yield new_data[:50_000]
        await gate2.wait()
        yield new_data[50_000:]

    newest = s2.transfers.send("s3", 30, 2, held())
    assert newest is not None
    await wait_until(lambda: len(s3.sinks) == 3, 2.0, "s3 took index 30")
    older = s1.transfers.send("s3", 15, 1, pieces(old_data))
    assert older is not None
    assert await asyncio.wait_for(older, 5.0) == "aborted: busy with 30"
    gate2.set()
    assert await asyncio.wait_for(newest, 10.0) == COMPLETE
    await wait_until(lambda: len(s3.installed) == 2, 5.0, "index 30 installed")
    assert [i for i, _, _ in s3.installed] == [20, 30]


async def test_a_corrupt_chunk_fails_the_checksum_and_is_never_installed(
    owners: dict[str, Owner],
) -> None:
    s1, s2 = owners["s1"], owners["s2"]
    data = snapshot(1024 * 1024 + 7)
    # One data byte of the 9th chunk flips on the way (the chunk's last byte is data).
    s1.transport.fault = lambda msg, n: "flip" if isinstance(msg, Chunk) and n == 9 else None
    task = s1.transfers.send("s2", 40, 4, pieces(data))
    assert task is not None
    assert await asyncio.wait_for(task, 10.0) == "aborted: checksum"
    assert s1.transport.done == ["flip"]
    await wait_until(lambda: not s2.files(), 5.0, "the corrupt file dropped")
    assert s2.installed == []
    # Asked again, without the fault: installed whole.
    s1.transport.fault = lambda msg, n: None
    task = s1.transfers.send("s2", 40, 4, pieces(data))
    assert task is not None
    assert await asyncio.wait_for(task, 10.0) == COMPLETE
    await wait_until(lambda: bool(s2.installed), 5.0, "installed")
    assert s2.installed == [(40, 4, data)]


async def test_unwanted_and_malformed_are_refused(owners: dict[str, Owner]) -> None:
    s1, s2 = owners["s1"], owners["s2"]
    s2.transfers.accept = lambda index, epoch: index > 100  # the owner's snapshot_wanted
    task = s1.transfers.send("s2", 100, 1, pieces(b"abc"))
    assert task is not None
    assert await asyncio.wait_for(task, 5.0) == "aborted: not wanted"
    assert s2.sinks == []
    # Unknown target: nothing starts.
    assert s1.transfers.send("s9", 101, 1, pieces(b"abc")) is None
    # Bytes that are no transfer message, and a chunk of no transfer, change nothing.
    s1.client.publish(s2.transfers.subject, b"\x93junk")
    s1.client.publish(s2.transfers.subject, encode(Chunk(7, IDS["s1"], 0, b"zz")))
    await asyncio.sleep(0.05)
    assert s2.sinks == [] and s2.installed == []
    task = s1.transfers.send("s2", 101, 1, pieces(b"abc"))
    assert task is not None
    assert await asyncio.wait_for(task, 5.0) == COMPLETE
    await wait_until(lambda: bool(s2.installed), 5.0, "installed")
    assert s2.installed == [(101, 1, b"abc")]


async def test_close_mid_transfer_leaves_no_task_and_no_partial_data(
    hub: Server, tmp_path: Path
) -> None:
    s1, s2 = Owner("s1", hub, tmp_path), Owner("s2", hub, tmp_path)
    await s1.transfers.start()
    await s2.transfers.start()
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        try:
            for i in range(10_000):
                yield xxhash.xxh3_128_digest(str(i).encode()) * 1000
                await asyncio.sleep(0.001)
        finally:
            closed.set()

    task = s1.transfers.send("s2", 5, 1, endless())
    assert task is not None
    await wait_until(lambda: s2.transfers.peak_queued > 0, 5.0, "chunks arriving")
    assert snap_tasks()  # the sender's and the receiver's
    await s2.close()  # the receiver first: its sender is told
    assert not s2.files()
    assert await asyncio.wait_for(task, 5.0) == "aborted: closed"
    assert closed.is_set()  # the source was closed
    # And a sender closed mid-transfer: its task is cancelled.
    s3 = Owner("s3", hub, tmp_path)
    await s3.transfers.start()
    task = s1.transfers.send("s3", 6, 1, endless())
    assert task is not None
    await wait_until(lambda: s3.transfers.peak_queued > 0, 5.0, "chunks arriving at s3")
    await s1.close()
    assert task.cancelled()
    await wait_until(lambda: not s3.files(), 5.0, "s3 dropped the partial file")
    await s3.close()
    assert not snap_tasks()


async def test_a_sender_whose_abort_was_lost_is_stopped_by_its_next_chunk(
    owners: dict[str, Owner],
) -> None:
    s1, s2, s3 = owners["s1"], owners["s2"], owners["s3"]
    data = snapshot(512 * 1024)
    gate = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield data[:20_000]
        await gate.wait()
        yield data[20_000:]

    old = s1.transfers.send("s3", 10, 1, slow())
    assert old is not None
    await wait_until(lambda: len(s3.sinks) == 1, 2.0, "s3 took the first")
    # s3's ABORT to s1 when index 20 supersedes it is lost.
    s3.transport.fault = lambda msg, n: "drop" if isinstance(msg, Abort) else None
    new = s2.transfers.send("s3", 20, 2, pieces(data))
    assert new is not None
    assert await asyncio.wait_for(new, 10.0) == COMPLETE
    assert not old.done()
    assert "drop" in s3.transport.done
    # s1's source goes on: its first chunk draws an ABORT, well before its stall timeout.
    s3.transport.fault = lambda msg, n: None
    began = time.monotonic()
    gate.set()
    assert await asyncio.wait_for(old, 5.0) == "aborted: unknown transfer"
    assert time.monotonic() - began < FAST["stall_s"] / 2
    assert [i for i, _, _ in s3.installed] == [20]
