"""Power loss of a whole Headwater cluster, on real processes, with the history checked.

A SIGKILL leaves the kernel's page cache alone, so every write a killed server made survives
it: kill -9 alone is no power cut. Here every server runs with
``HEADWATER_FAULT_IO=lose-unsynced`` (``headwater.server.store.file.fileio``): the file store,
the replication log and the checkpoints keep their writes since the last fsync in the
process's memory, so a SIGKILL loses exactly what was not fsynced, as a power failure does
(directory operations stay synchronous: names are not lost, contents are).

Three servers, each in its own network namespace (``NetnsCluster``: a kill takes the server's
etcd member with it, as a machine's death does), an R3 file stream, KV bucket and consumer
(``set_up`` of test_histories), the workloads of ``workloads.py`` running ~13 s; twice during
the run every server is killed with SIGKILL at the same moment and all are started again 1 s
later. Then the same checks as test_histories: every acknowledged publish read back exactly
once, the KV linearizable, no confirmed ack undone, every server agreeing and holding the
stream. ``HW_HISTORY_SEED`` and ``HW_HISTORY_RESULTS`` as there. Headwater only: nats-server
has no I/O layer to cut (its kill -9 keeps the page cache), docs/RELIABILITY.md.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster.helpers import wait_jetstream
from faults.test_histories import FAST_PINGS, read_back, record, set_up, settled
from faults.test_histories import hosting as hosting_servers
from faults.workloads import Workload
from nats.js.api import StorageType

from headwater.testing_history import (
    FAIL,
    INFO,
    History,
    check_consumer_acks,
    check_kv,
    check_publishes,
    publish_outcomes,
)
from headwater.testing_netns import NetnsCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

POWER_LOSS = {"HEADWATER_FAULT_IO": "lose-unsynced"}
RUN_SECONDS = 13.0
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


async def run_and_check(
    cluster: NetnsCluster,
    tmp_path: Path,
    run: str,
    faults_of: Callable[[NetnsCluster, Any, Workload, Callable[[str], None]], Any],
    expect_faults: int,
) -> dict[str, Any]:
    """Set up the R3 stream, bucket and consumer, run the workloads for RUN_SECONDS while
    ``faults_of(cluster, js, workload, log)`` runs, settle, read back and judge the history
    as test_histories does (asserted); the result (also recorded)."""
    await wait_jetstream(cluster)
    seed = int(os.environ.get("HW_HISTORY_SEED", "1"))
    w = Workload(cluster.urls, seed=seed)
    admin = await w.connect(1)
    try:
        await set_up(admin, w, 3, StorageType.FILE)
        history, stop = History(), asyncio.Event()
        began = time.monotonic()
        faults: list[str] = []

        def log(what: str) -> None:
            faults.append(f"{time.monotonic() - began:.1f}s {what}")

        running = asyncio.create_task(w.run(history, stop))
        await faults_of(cluster, admin.jetstream(timeout=2), w, log)
        await asyncio.sleep(max(0.0, RUN_SECONDS - (time.monotonic() - began)))
        stop.set()
        await asyncio.wait_for(running, 20)

        infos = await settled(cluster, w.stream, 3)
        await settled(cluster, f"KV_{w.bucket}", 3)
        stored = await read_back(
            admin.jetstream(timeout=5), w.stream, w.subject, infos[0].state.messages
        )
        hosts = await asyncio.to_thread(hosting_servers, cluster, w.stream)
    finally:
        await admin.close()

    acked, unknown = publish_outcomes(history)
    published = check_publishes(acked, stored, unknown)
    kv = check_kv(history, w.keys, max_steps=1_000_000)
    acks = check_consumer_acks(history)
    result = {
        "run": run,
        "seed": seed,
        "faults": faults,
        "ops": len(history.ops),
        "outcomes": history.counts(),
        "publishes": published.summary(),
        "lost": published.lost[:20],
        "duplicates": dict(list(published.duplicates.items())[:20]),
        "unexpected": published.unexpected[:20],
        "kv": kv.summary(),
        "kv_stuck_at": {k.key: k.stuck_at for k in kv.keys if k.verdict == "fail"},
        "acks": acks.summary(),
        "ack_violations": acks.violations[:20],
        "hosts": hosts,
        "history": str(tmp_path / "history.jsonl"),
    }
    record(result, history, tmp_path)

    # A non-trivial history that the faults reached ...
    assert published.acked >= 100 and published.stored >= published.acked, result
    assert history.counts("get", "put", "update").get("ok", 0) >= 100, result
    assert acks.delivered >= 50 and acks.acked >= 50, result
    outcomes = history.counts()
    assert outcomes.get(INFO, 0) + outcomes.get(FAIL, 0) > 0, result
    assert len(faults) == expect_faults, faults
    # ... and nothing acknowledged lost or doubled, the KV linearizable, no ack undone.
    assert published.valid, result
    assert kv.verdict == "ok", result
    assert acks.valid, result
    assert sorted(hosts) == sorted(cluster.names), result
    return result


async def test_power_loss_of_every_server_loses_nothing_acknowledged(
    netns_cluster, tmp_path: Path
) -> None:
    cluster = netns_cluster("headwater", jetstream=True, config=FAST_PINGS, env=POWER_LOSS)

    async def two_power_cuts(cluster: NetnsCluster, js: Any, w: Workload, log: Any) -> None:
        began = time.monotonic()
        for at in CUTS_AT:
            await asyncio.sleep(max(0.0, at - (time.monotonic() - began)))
            await power_cut(cluster, log)

    await run_and_check(cluster, tmp_path, "headwater-R3-power-loss", two_power_cuts, 4)
    # Each server really ran the mode (fileio warns at its first use), before and after cuts.
    for srv in cluster.servers:
        assert srv.log_path.read_text().count("writes are held in memory until fsync") >= 3
