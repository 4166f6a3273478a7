"""A consumer state write that fails confirms nothing; it is retried until it succeeds.

Headwater only (nats-server answers an ack before its state is on disk). The fault is made
from outside the server process: a directory where the state writer puts its temp file makes
every write fail with EISDIR (the tests run as root, so permissions would not stop a write),
and removing it clears the fault. Run in both sync modes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig

from headwater.server.consumers.state import read_state
from headwater.testing import ServerProcess
from tests.conformance.jetstream.conftest import Connect


def consumer_dir(srv: ServerProcess, stream: str, name: str) -> Path:
    return srv.store_dir / "jetstream" / "$G" / "streams" / stream / "obs" / name


def saved_floor(directory: Path) -> int:
    """The ack floor of the newest state on disk (``o.json``, or ``o.next.json`` written
    without fsync under a periodic sync policy)."""
    data, _, _ = read_state(directory)
    assert data is not None
    return int(json.loads(data)["asflr"])


async def wait_until(predicate: object, timeout: float) -> bool:
    for _ in range(int(timeout / 0.05)):
        if predicate():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.05)
    return False


async def test_failed_state_write_confirms_nothing_until_it_succeeds(
    hw: ServerProcess, clients: Connect
) -> None:
    nc = await clients(hw)
    js = nc.jetstream()
    await js.add_stream(name="FLT", subjects=["flt.>"])
    for i in range(3):
        await js.publish("flt.x", b"%d" % i)
    sub = await js.pull_subscribe(
        "flt.>", durable="W", stream="FLT", config=ConsumerConfig(ack_wait=30)
    )
    first, second, third = await sub.fetch(3, timeout=2)
    await first.ack_sync(timeout=2)
    directory = consumer_dir(hw, "FLT", "W")
    assert saved_floor(directory) == 1

    # Where the next write puts its temp file: o.json's, or o.next.json's when unsynced.
    written = "o.next.json" if (directory / "o.next.json").exists() else "o.json"
    fault = directory / f".{written}.tmp"
    fault.mkdir()
    replies: list[Msg] = []
    inbox = nc.new_inbox()

    async def on_reply(msg: Msg) -> None:
        replies.append(msg)

    await nc.subscribe(inbox, cb=on_reply)
    # The ack is applied in memory but not confirmed while its write fails.
    await nc.publish(second.reply, b"", reply=inbox)
    with pytest.raises(nats.errors.TimeoutError):
        await third.ack_sync(timeout=0.8)
    assert replies == []
    assert saved_floor(directory) == 1
    assert "state write failed" in hw.log()
    info = await js.consumer_info("FLT", "W")
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (3, 0)

    # The fault clears: the retried write records both acks, and the held ack is answered.
    fault.rmdir()
    assert await wait_until(lambda: len(replies) == 1, 5.0)
    assert saved_floor(directory) == 3
    assert replies[0].data == b""

    # After a crash both acks hold: nothing is redelivered.
    await nc.close()
    await asyncio.to_thread(hw.kill)
    await asyncio.to_thread(hw.restart)
    nc = await clients(hw)
    info = await nc.jetstream().consumer_info("FLT", "W")
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == (3, 0, 0)
