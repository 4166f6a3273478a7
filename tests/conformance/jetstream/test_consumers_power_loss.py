"""Consumers, streams and templates survive state and config files left empty by a power cut.

Headwater only (it restarts and edits the store directory). The server is killed (no clean
flush), then a file is damaged the way a power cut damages what was not fsynced: cut to zero
bytes. In both sync modes the consumer must come back from the last state that is safely on
disk (or, with none left, from its config), never be dropped, and nothing not acknowledged
durably may be lost.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats
import nats.errors
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, StreamConfig

from headwater.testing import ServerProcess
from tests.conformance.jetstream.conftest import Connect

STATE_FILES = ("o.json", ".o.json.bak", "o.next.json")


def stream_dir(srv: ServerProcess, name: str) -> Path:
    return srv.store_dir / "jetstream" / "$G" / "streams" / name


async def restart(srv: ServerProcess, *, kill: bool) -> None:
    if kill:
        await asyncio.to_thread(srv.kill)
    await asyncio.to_thread(srv.restart)


async def drain_seqs(nc: Client, stream: str, want: set[int], timeout: float) -> set[int]:
    """Stream sequences the durable ``W`` delivers within ``timeout`` (acked as they come)."""
    sub = await nc.jetstream().pull_subscribe("pwr.>", durable="W", stream=stream)
    seen: set[int] = set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for _ in range(50):
        if want <= seen or loop.time() >= deadline:
            break
        try:
            msgs = await sub.fetch(10, timeout=min(1.0, max(deadline - loop.time(), 0.1)))
        except nats.errors.TimeoutError:
            continue
        for msg in msgs:
            seen.add(msg.metadata.sequence.stream)
            await msg.ack_sync(timeout=2)
    return seen


async def setup_acked(srv: ServerProcess, clients: Connect) -> None:
    """Stream PWR with 6 messages; ``W`` acked 1 and 2 and a clean restart saved that (the
    last state safely on disk); then 3 acked too, and the server killed."""
    nc = await clients(srv)
    js = nc.jetstream()
    await js.add_stream(name="PWR", subjects=["pwr.>"])
    for i in range(6):
        await js.publish("pwr.x", b"%d" % (i + 1))
    sub = await js.pull_subscribe(
        "pwr.>", durable="W", stream="PWR", config=ConsumerConfig(ack_wait=1.0)
    )
    msgs = await sub.fetch(4, timeout=2)
    await msgs[0].ack_sync(timeout=2)
    await msgs[1].ack_sync(timeout=2)
    await nc.close()
    await restart(srv, kill=False)
    nc = await clients(srv)
    await nc.request(msgs[2].reply, b"", timeout=2)  # the ack of 3, after the restart
    await nc.close()
    await restart(srv, kill=True)


async def test_torn_newest_state_falls_back_to_the_last_durable_one(
    hw: ServerProcess, clients: Connect
) -> None:
    await setup_acked(hw, clients)
    obs = stream_dir(hw, "PWR") / "obs" / "W"
    # The newest state file is the one a cut leaves empty: o.json in the default mode (the
    # fsynced one, as a damaged disk would), o.next.json (never fsynced) in the other.
    newest = "o.next.json" if (obs / "o.next.json").exists() else "o.json"
    (obs / newest).write_bytes(b"")
    await restart(hw, kill=True)
    nc = await clients(hw)
    info = await nc.jetstream().consumer_info("PWR", "W")
    assert info.ack_floor.stream_seq == 2
    assert "unreadable state files" in hw.log()
    # Everything not durably acked comes again (3 once more: its ack was in the lost write).
    assert await drain_seqs(nc, "PWR", {3, 4, 5, 6}, 6.0) >= {3, 4, 5, 6}


async def test_no_state_left_starts_over_from_the_config(
    hw: ServerProcess, clients: Connect
) -> None:
    await setup_acked(hw, clients)
    obs = stream_dir(hw, "PWR") / "obs" / "W"
    for name in STATE_FILES:
        if (obs / name).exists():
            (obs / name).write_bytes(b"")
    await restart(hw, kill=True)
    nc = await clients(hw)
    info = await nc.jetstream().consumer_info("PWR", "W")
    assert info.ack_floor.stream_seq == 0 and info.config.ack_wait == 1.0
    assert "unreadable state files" in hw.log()
    assert await drain_seqs(nc, "PWR", set(range(1, 7)), 6.0) == set(range(1, 7))


async def test_empty_stream_and_template_configs_fall_back_to_their_copies(
    hw: ServerProcess, clients: Connect
) -> None:
    nc = await clients(hw)
    js = nc.jetstream()
    await js.add_stream(name="PWRS", subjects=["pwrs.>"], description="kept")
    for i in range(3):
        await js.publish("pwrs.x", b"%d" % i)
    await js.update_stream(StreamConfig(name="PWRS", subjects=["pwrs.>"], description="v2"))
    template = {
        "name": "TPL",
        "max_streams": 4,
        "config": {"subjects": ["tpl.*"], "storage": "file"},
    }
    reply = await nc.request(
        "$JS.API.STREAM.TEMPLATE.CREATE.TPL", json.dumps(template).encode(), timeout=2
    )
    assert "error" not in json.loads(reply.data)
    await nc.close()
    await restart(hw, kill=True)
    (stream_dir(hw, "PWRS") / "meta.inf").write_bytes(b"")
    tpl_meta = hw.store_dir / "jetstream" / "$G" / "templates" / "TPL" / "meta.inf"
    tpl_meta.write_bytes(b'{"name": "TPL", "max_str')
    await asyncio.to_thread(hw.restart)
    nc = await clients(hw)
    info = await nc.jetstream().stream_info("PWRS")
    assert (info.config.description, info.state.messages) == ("v2", 3)
    reply = await nc.request("$JS.API.STREAM.TEMPLATE.INFO.TPL", b"", timeout=2)
    assert json.loads(reply.data)["config"]["max_streams"] == 4
    log = hw.log()
    assert "stream 'PWRS': unreadable meta.inf" in log
    assert "stream template 'TPL': unreadable meta.inf" in log
