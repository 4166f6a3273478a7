"""A flipped bit on one follower replica's disk (issue 18; docs/RELIABILITY.md).

Three servers (network namespaces), an R3 file stream, KV bucket and consumer; the workloads
of workloads.py run ~6 s (the history is checked as in test_histories); then, with the
cluster quiet and past a checkpoint, a follower's server is stopped, one bit flipped in the
middle of its store's first message block (``block``) or of its log's newest segment
(``wal``) under <store_dir>/jetstream/groups/HIST/, and the server started again. Expected:
the corruption is detected (checksums), never served and never spread, and repaired from the
leader: the replica ends up holding what the others hold (/jsz of every server alike, and,
after a step-down to it, the stream read back through it equal to what was read before).
Before the fix both failed: the block's damaged message was dropped and never restored (the
replica led without it), and the damaged log kept the replica from opening at all.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import nats
import pytest
from cluster.helpers import wait_jetstream
from cluster.helpers import wait_until as until
from faults.test_histories import FAST_PINGS, leader_of, read_back, set_up, settled
from faults.workloads import Workload
from nats.js.api import StorageType

from headwater.testing import monitor_json
from headwater.testing_history import (
    History,
    check_consumer_acks,
    check_kv,
    check_publishes,
    publish_outcomes,
)
from headwater.testing_netns import HTTP_PORT, NetnsCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def flip_bit(directory: Path, where: str) -> str:
    if where == "block":
        stores = sorted(directory.glob("store.*"), key=lambda p: int(p.suffix[1:]))
        path = sorted((stores[-1] / "msgs").glob("*.blk"))[0]
        header = 32
    else:
        path = sorted(directory.glob("[0-9]" * 20 + ".log"))[-1]
        header = 0
    data = bytearray(path.read_bytes())
    offset = header + (len(data) - header) // 2
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))
    return f"{path} byte {offset} (bit 4) of {len(data)}"


def local_states(cluster: NetnsCluster, stream: str) -> dict[str, Any]:
    """Each server's own replica of ``stream`` (/jsz): messages, first and last sequence."""
    out: dict[str, Any] = {}
    for i in range(len(cluster)):
        jsz = monitor_json(HTTP_PORT, "/jsz?streams=true", host=cluster.address(i))
        for acc in jsz.get("account_details") or []:
            for s in acc.get("stream_detail") or []:
                if s["name"] == stream:
                    st = s["state"]
                    out[cluster.names[i]] = (st["messages"], st["first_seq"], st["last_seq"])
    return out


@pytest.mark.parametrize("where", ["block", "wal"])
async def test_a_flipped_bit_on_a_follower_is_repaired(
    netns_cluster, tmp_path: Path, where: str
) -> None:
    cluster = netns_cluster("headwater", jetstream=True, config=FAST_PINGS)
    await wait_jetstream(cluster)
    w = Workload(cluster.urls, seed=int(os.environ.get("HW_HISTORY_SEED", "1")))
    admin = await w.connect(1)
    try:
        await set_up(admin, w, 3, StorageType.FILE)
        history, stop = History(), asyncio.Event()
        running = asyncio.create_task(w.run(history, stop))
        await asyncio.sleep(6)
        stop.set()
        await asyncio.wait_for(running, 20)
        infos = await settled(cluster, w.stream, 3)
        before = await read_back(admin.jetstream(timeout=5), w.stream, w.subject,
                                 infos[0].state.messages)  # fmt: skip
        await asyncio.sleep(2)  # past a checkpoint: the replica restarts from its store
        leader = await leader_of(admin.jetstream(timeout=2), w.stream, 0, cluster.names)
    finally:
        await admin.close()
    acked, unknown = publish_outcomes(history)
    published = check_publishes(acked, before, unknown)
    assert published.valid and published.acked >= 100, published.summary()
    assert check_kv(history, w.keys, max_steps=1_000_000).verdict == "ok"
    assert check_consumer_acks(history).valid

    victim = (leader + 1) % len(cluster)
    name = cluster.names[victim]
    await asyncio.to_thread(cluster.stop, victim)
    group = cluster.servers[victim].store_dir / "jetstream" / "groups" / w.stream
    flipped = flip_bit(group, where)
    await asyncio.to_thread(cluster.restart, victim)
    print(f"flipped {flipped} on {name}")
    try:
        await settled(cluster, w.stream, 3)

        async def alike() -> dict[str, Any] | None:
            states = await asyncio.to_thread(local_states, cluster, w.stream)
            return states if len(states) == 3 and len(set(states.values())) == 1 else None

        await until(alike, 20, f"every replica of {w.stream} alike after the flip on {name}")
        nc = await nats.connect(cluster.urls[victim])
        try:
            js = nc.jetstream(timeout=5)

            async def leads() -> bool:
                if (await js.stream_info(w.stream)).cluster.leader == name:
                    return True
                body = json.dumps({"placement": {"preferred": name}}).encode()
                await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{w.stream}", body, timeout=3)
                return False

            await until(leads, 20, f"{name} leading {w.stream}", interval=1)
            after = await read_back(js, w.stream, w.subject, len(before))
        finally:
            await nc.close()
        assert after == before
    finally:
        text = cluster.servers[victim].log_path.read_text(errors="replace")
        print("\n".join(ln for ln in text.splitlines() if "HIST" in ln or "orrupt" in ln))
        print(await asyncio.to_thread(local_states, cluster, w.stream))
