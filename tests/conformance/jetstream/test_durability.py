"""Headwater's own durability: a clean restart keeps everything; SIGKILL keeps every ack.

These run against Headwater only: they stop and restart the server process, which the
differential fixture does not do, and nats-server's defaults (fsync every 2 minutes) make no
promise about acknowledged messages after a kill.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest
from nats.aio.client import Client

from headwater.testing import ServerProcess


async def info(nc: Client, stream: str) -> dict[str, object]:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
    return json.loads(msg.data)


async def test_restart_keeps_streams_messages_and_dedupe(
    headwater: ServerProcess, clients: Callable[[ServerProcess], Awaitable[Client]]
) -> None:
    nc = await clients(headwater)
    js = nc.jetstream()
    await js.add_stream(name="KEEP", subjects=["keep.*"], max_msgs_per_subject=3, allow_direct=True)
    for i in range(10):
        await js.publish(f"keep.{i % 2}", b"v%d" % i, headers={"Nats-Msg-Id": f"k{i}"})
    await js.delete_msg("KEEP", 10)
    before = await info(nc, "KEEP")
    await nc.close()

    headwater.restart()
    assert "Restored 5 messages for stream '$G > KEEP'" in headwater.log()
    nc = await clients(headwater)
    js = nc.jetstream()
    after = await info(nc, "KEEP")
    for key in ("config", "created", "state"):
        assert after[key] == before[key], key
    assert (await js.get_last_msg("KEEP", "keep.1", direct=True)).data == b"v7"
    dup = await js.publish("keep.0", b"again", headers={"Nats-Msg-Id": "k8"})
    assert (dup.seq, dup.duplicate) == (9, True)
    assert (await js.publish("keep.0", b"new")).seq == 11
    await nc.close()


@pytest.mark.slow
async def test_sigkill_loses_no_acknowledged_message(
    headwater: ServerProcess, clients: Callable[[ServerProcess], Awaitable[Client]]
) -> None:
    nc = await clients(headwater)
    js = nc.jetstream()
    await js.add_stream(name="CRASH", subjects=["crash.*"])
    acked: dict[int, bytes] = {}
    stop = asyncio.Event()

    async def publisher(worker: int) -> None:
        n = 0
        while not stop.is_set():
            payload = b"w%d-%d" % (worker, n)
            try:
                ack = await js.publish(f"crash.{worker}", payload, timeout=2)
            except Exception:
                return  # the server is gone: this publish was never acknowledged
            acked[ack.seq] = payload
            n += 1

    tasks = [asyncio.create_task(publisher(w)) for w in range(8)]
    while len(acked) < 300:
        await asyncio.sleep(0.01)
    headwater.kill()
    stop.set()
    await asyncio.gather(*tasks)
    await nc.close()
    assert len(set(acked.values())) == len(acked), "two acks named the same sequence"

    headwater.restart()
    nc = await clients(headwater)
    js = nc.jetstream()
    state = (await js.stream_info("CRASH")).state
    assert state.last_seq >= max(acked)
    for seq, payload in sorted(acked.items()):
        msg = await js.get_msg("CRASH", seq)
        assert msg.data == payload, f"acknowledged message {seq} changed or vanished"
    await nc.close()
