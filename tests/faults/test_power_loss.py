"""Power loss of a whole Headwater cluster, on real processes, with the history checked.

A SIGKILL leaves the kernel's page cache alone, so every write a killed server made survives
it: kill -9 alone is no power cut. Here every server runs with
``HEADWATER_FAULT_IO=lose-unsynced`` (``headwater.server.store.file.fileio``): the file store,
the replication log and the checkpoints keep their writes since the last fsync in the
process's memory, so a SIGKILL loses exactly what was not fsynced, as a power failure does
(directory operations stay synchronous: names are not lost, contents are).

Three servers, each in its own network namespace (``NetnsCluster``: a kill takes the server's
etcd member with it, as a machine's death does), an R3 file stream, KV bucket and consumer
(``set_up`` of test_histories), the workloads of ``workloads.py`` running ~14 s; twice during
the run every server is killed with SIGKILL at the same moment and all are started again 1 s
later. Then the same checks as test_histories: every acknowledged publish read back exactly
once, the KV linearizable, no confirmed ack undone, every server agreeing and holding the
stream. ``HW_HISTORY_SEED`` and ``HW_HISTORY_RESULTS`` as there. Headwater only: nats-server
has no I/O layer to cut (its kill -9 keeps the page cache), docs/RELIABILITY.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faults.test_histories import FAST_PINGS, check_history

from headwater.testing_netns import NetnsCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

POWER_LOSS = {"HEADWATER_FAULT_IO": "lose-unsynced"}
CUTS_AT = (3.0, 8.0)
"""Seconds into the run at which the power of every server goes."""


async def power_cut(cluster: NetnsCluster, log: Callable[[str], None]) -> None:
    """SIGKILL every server (and its etcd member) at once, then start them all again."""
    everyone = range(len(cluster))
    log("power cut: kill -9 every server")
    await asyncio.gather(*(asyncio.to_thread(cluster.kill, i) for i in everyone))
    await asyncio.sleep(1)
    log("power back: restart every server")
    await asyncio.gather(*(asyncio.to_thread(cluster.restart, i) for i in everyone))


async def two_power_cuts(
    cluster: NetnsCluster, js: Any, stream: str, log: Callable[[str], None]
) -> None:
    began = time.monotonic()
    for at in CUTS_AT:
        await asyncio.sleep(max(0.0, at - (time.monotonic() - began)))
        await power_cut(cluster, log)


async def test_power_loss_of_every_server_loses_nothing_acknowledged(
    netns_cluster, tmp_path: Path
) -> None:
    cluster = netns_cluster("headwater", jetstream=True, config=FAST_PINGS, env=POWER_LOSS)
    await check_history(cluster, tmp_path, "headwater", 3, "", two_power_cuts, 4, "power-loss")
    # Each server really ran the mode (fileio warns at its first use), before and after cuts.
    for srv in cluster.servers:
        assert srv.log_path.read_text().count("writes are held in memory until fsync") >= 3
