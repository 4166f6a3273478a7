"""Durable consumers across Headwater restarts (clean stop and SIGKILL).

Headwater only: the differential fixture does not restart servers. An acked message must not
come back after a restart; a delivered but unacked one must.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import ConsumerConfig

from headwater.testing import ServerProcess


async def connect(srv: ServerProcess) -> Client:
    return await nats.connect(srv.url, allow_reconnect=False)


@pytest.fixture
async def made() -> AsyncIterator[list[Client]]:
    clients: list[Client] = []
    yield clients
    for nc in clients:
        if not nc.is_closed:
            await nc.close()


@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_ack_state_survives_restart(
    headwater: ServerProcess, made: list[Client], how: str
) -> None:
    nc = await connect(headwater)
    made.append(nc)
    js = nc.jetstream()
    await js.add_stream(name="DUR", subjects=["dur.>"])
    for i in range(5):
        await js.publish("dur.x", b"%d" % i)
    sub = await js.pull_subscribe(
        "dur.>", durable="W", stream="DUR", config=ConsumerConfig(ack_wait=0.5)
    )
    msgs = await sub.fetch(3, timeout=2)
    await msgs[0].ack_sync()
    await msgs[2].ack_sync()
    await nc.close()
    if how == "kill":
        headwater.kill()
    headwater.restart()
    nc = await connect(headwater)
    made.append(nc)
    js = nc.jetstream()
    info = await js.consumer_info("DUR", "W")
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (3, 3)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (1, 1)
    assert (info.num_ack_pending, info.num_pending) == (1, 2)
    sub = await js.pull_subscribe_bind(durable="W", stream="DUR")
    await asyncio.sleep(0.6)  # the restored message's ack wait (0.5s) runs out
    again = await sub.fetch(3, timeout=3)
    # The unacked message 2 comes back (second delivery) before the new ones; 1 and 3 never do.
    assert [m.data for m in again] == [b"1", b"3", b"4"]
    assert again[0].metadata.num_delivered == 2


async def test_at_least_once_with_dying_workers_and_kill(
    headwater: ServerProcess, made: list[Client]
) -> None:
    """Workers that vanish without acking, then a SIGKILL mid-run: every message is processed."""
    nc = await connect(headwater)
    made.append(nc)
    js = nc.jetstream()
    await js.add_stream(name="ALO", subjects=["alo.>"])
    total = 120
    for i in range(total):
        await js.publish("alo.job", b"%d" % i)
    cfg = ConsumerConfig(ack_wait=0.4)
    await js.pull_subscribe("alo.>", durable="W", stream="ALO", config=cfg)
    done: set[int] = set()

    async def work(rounds: int, client: Client, drop_every: int) -> None:
        sub = await client.jetstream().pull_subscribe_bind(durable="W", stream="ALO")
        for n in range(rounds):
            try:
                msgs = await sub.fetch(10, timeout=0.5)
            except nats.errors.TimeoutError:
                continue
            for k, msg in enumerate(msgs):
                if drop_every and (n + k) % drop_every == 0:
                    continue  # this "worker" dies holding the message: no ack
                await msg.ack_sync()
                done.add(int(msg.data))

    await asyncio.gather(work(4, nc, 3), work(4, nc, 4))
    await nc.close()
    headwater.kill()
    headwater.restart()
    nc = await connect(headwater)
    made.append(nc)
    for _ in range(40):
        if len(done) == total:
            break
        await work(1, nc, 0)
    assert done == set(range(total))
    info = await nc.jetstream().consumer_info("ALO", "W")
    assert info.num_ack_pending == 0 and info.num_pending == 0
