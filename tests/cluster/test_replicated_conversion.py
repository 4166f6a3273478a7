"""A stream created with one replica, killed in the middle of becoming replicated
(docs/REPLICATION.md, "Growing a stream of one replica"; Headwater only: the test hook
``HEADWATER_FAULT_CONVERT`` of ``jetstream/groupseed.py``).

The server that holds the stream kills itself with SIGKILL at a step of the conversion, its
unsynced writes lost with it (``HEADWATER_FAULT_IO=lose-unsynced``, as a power cut):

- **before the swap** (the seed and the marker written, etcd not asked): started again, the
  server finds the marker, reads the placement (one server still), deletes the seed and opens
  the stream as it was; it can then be made replicated;
- **after the swap** (etcd took it, the plain stream still on disk): started again, it deletes
  the plain stream and opens the group from the seed; the other replicas catch up.

Either way every acknowledged message and the consumer's acknowledged state are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import pytest
from cluster.helpers import (
    acked_work,
    connect,
    descendants,
    js_api,
    wait_jetstream,
    wait_until,
)
from cluster.test_replicated_membership import fill, lead_on, wait_peers
from cluster.test_replicated_streams import create
from nats.aio.client import Client as NATS

from headwater.server.jetstream import groupseed
from headwater.server.store.file.fileio import FAULT_IO_ENV, LOSE_UNSYNCED
from headwater.testing import Cluster

pytestmark = pytest.mark.timeout(120)

NAME = "HALF"
CONFIG = {"name": NAME, "subjects": ["half.>"], "storage": "file", "num_replicas": 1}


@pytest.mark.parametrize("point", [groupseed.BEFORE_SWAP, groupseed.AFTER_SWAP])
def test_a_conversion_cut_by_a_crash_loses_nothing(point: str) -> None:
    env = {groupseed.FAULT_ENV: point, FAULT_IO_ENV: LOSE_UNSYNCED}
    with Cluster("headwater", n=3, jetstream=True, env=env) as cluster:
        asyncio.run(_scenario(cluster, point))


async def _scenario(cluster: Cluster, point: str) -> None:
    await wait_jetstream(cluster)
    nc = await connect(cluster.urls[0])
    host = cluster.names.index((await create(nc, CONFIG))["cluster"]["leader"])
    await nc.close()
    # A client of another server: it outlives the host's crash.
    nc = await connect(cluster.urls[(host + 1) % len(cluster)])
    try:
        await fill(nc, "half.a", 0, 10)
        sub = await acked_work(nc, NAME, 4)

        await _crash_converting(cluster, host, nc)
        cluster.servers[host].env = {FAULT_IO_ENV: LOSE_UNSYNCED}  # the hook fired: off
        cluster.restart(host)
        await wait_jetstream(cluster)
        said = "became a replicated group" if point == groupseed.AFTER_SWAP else "stays on one"
        await wait_until(
            lambda: _logged(cluster, host, said), 30, f"the restarted server: {said!r}"
        )
        if point == groupseed.BEFORE_SWAP:
            await wait_peers(nc, NAME, 1, 10)
            up = await js_api(
                nc, f"$JS.API.STREAM.UPDATE.{NAME}", {**CONFIG, "num_replicas": 3}, 10
            )
            assert "error" not in up, up
        peers = await wait_peers(nc, NAME, 3, 10)
        # A replica that was not the stream's server leads, with everything acknowledged.
        await lead_on(nc, NAME, sorted(peers - {cluster.names[host]})[0])
        state = await js_api(nc, f"$JS.API.CONSUMER.INFO.{NAME}.WORK", timeout=10)
        assert state["ack_floor"]["stream_seq"] == 4, state
        assert state["num_pending"] == 6, state
        (msg,) = await sub.fetch(1, timeout=10)
        assert msg.metadata.sequence.stream == 5 and msg.data == b"m4"
    finally:
        await nc.close()


async def _crash_converting(cluster: Cluster, host: int, nc: NATS) -> None:
    """Ask for three replicas; the host kills itself at the hook's step. Its etcd member,
    left running by the kill, goes too (as with the machine)."""
    srv = cluster.servers[host]
    assert srv.proc is not None
    kids = descendants(srv.proc.pid)
    with contextlib.suppress(Exception):  # no answer: the server died answering
        await js_api(nc, f"$JS.API.STREAM.UPDATE.{NAME}", {**CONFIG, "num_replicas": 3}, 5)
    deadline = time.monotonic() + 20
    while srv.proc.poll() is None:
        assert time.monotonic() < deadline, "the server did not kill itself at the hook"
        await asyncio.sleep(0.1)
    for pid in kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def _logged(cluster: Cluster, i: int, text: str) -> Any:
    return text in cluster.servers[i].log()
