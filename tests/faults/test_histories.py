"""Jepsen-style histories under faults, checked (docs/RELIABILITY.md).

A three-server cluster, each server in its own network namespace, runs the workloads of
``workloads.py`` (publishers with unique ``Nats-Msg-Id``s, KV get/put/update on three keys,
a pull consumer acking with ``ack_sync``) for ~14 s while the faults happen:

1. at 2 s the stream leader's server (the host, for R1) is cut from the other servers for
   4 s (its clients still reach it; routes at a 1 s keepalive notice within ~3 s);
2. the cut heals; at 9 s the stream leader's server (again looked up) is killed with
   SIGKILL, together with everything in its namespace, and started again 2 s later.

A second plan is a StatefulSet's rolling update (``test_histories_through_a_rolling_restart``,
R3 on both servers): from 1.5 s on, each server in turn, the highest ordinal first, is
stopped with SIGTERM and started again, the next one only once ``/healthz`` answers 200 on
it (the pod's startup probe). It found Headwater's consumers going on serving pull requests
on a replica shutting down, beside the new leader's: messages acknowledged (confirmed) there
came again from the stale copy.

Then everything heals and settles, the stream is read back, and the checkers of
``headwater.testing_history`` judge the history: acknowledged publishes (lost, duplicated,
unexpected), KV linearizability per key, consumer acks never undone; plus a split-brain
check (every server reports the same leader and state; the stream's data on exactly R
servers).

Runs: nats-server with R3 streams and buckets (file storage, the default lazy fsync, and
``sync_interval: always``), nats-server with R1, Headwater with R1 and with R3 (file
storage too: a replica restarts from its checkpoint and its log). nats-server's results are
recorded, never asserted (the checkers' findings are data; the Jepsen report found
acked-write loss under coordinated power failure, not simulated here). Headwater is asserted:
R1's host killed -9 and restarted, or R3's leader cut off and then killed -9, loses nothing
acknowledged, its KV stays linearizable and its acks hold; the stream is on its host (R1) or
on every server (R3). Every run is asserted to have checked a non-trivial history.

``HW_HISTORY_RESULTS=<file>`` appends one JSON line per run (the table of
docs/RELIABILITY.md is made from them); ``HW_HISTORY_SEED`` sets the workloads' seed.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from cluster.helpers import wait_jetstream
from cluster.helpers import wait_until as until
from faults.workloads import Workload
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, KeyValueConfig, StorageType, StreamConfig

from headwater.testing import monitor_json
from headwater.testing_history import (
    FAIL,
    INFO,
    OK,
    History,
    check_consumer_acks,
    check_kv,
    check_publishes,
    publish_outcomes,
)
from headwater.testing_netns import HTTP_PORT, NetnsCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

FAST_PINGS = 'cluster { ping_interval: "1s", ping_max: 2 }'
SYNC_ALWAYS = "jetstream { sync_interval: always }"
RUN_SECONDS = 14.0

SCENARIOS = [
    pytest.param("nats", 3, "", id="nats-R3", marks=pytest.mark.differential),
    pytest.param("nats", 3, SYNC_ALWAYS, id="nats-R3-sync-always", marks=pytest.mark.differential),
    pytest.param("nats", 1, "", id="nats-R1", marks=pytest.mark.differential),
    pytest.param("headwater", 1, "", id="headwater-R1"),
    pytest.param("headwater", 3, "", id="headwater-R3"),
]


async def leader_of(js: Any, stream: str, fallback: int, names: list[str]) -> int:
    """The index of ``stream``'s leader, or ``fallback`` when nobody says in time."""
    try:
        info = await js.stream_info(stream)
        return names.index(info.cluster.leader)
    except Exception:  # mid-fault: any answer but a leader's name
        return fallback


async def inflict_faults(
    cluster: NetnsCluster, js: Any, stream: str, log: Callable[[str], None]
) -> None:
    await asyncio.sleep(2)
    host = await leader_of(js, stream, 0, cluster.names)
    log(f"isolate {cluster.names[host]}")
    await asyncio.to_thread(cluster.isolate, host)
    await asyncio.sleep(4)
    log("heal")
    await asyncio.to_thread(cluster.heal)
    await asyncio.sleep(3)
    victim = await leader_of(js, stream, host, cluster.names)
    log(f"kill -9 {cluster.names[victim]}")
    await asyncio.to_thread(cluster.kill, victim)
    await asyncio.sleep(2)
    log(f"restart {cluster.names[victim]}")
    await asyncio.to_thread(cluster.restart, victim)


async def settled(cluster: NetnsCluster, stream: str, replicas: int) -> list[Any]:
    """Wait until every server answers /healthz 200 and STREAM.INFO of ``stream`` alike
    (leader, message count, last sequence), with every replica current; the infos."""

    async def healthy() -> bool:
        status = [await asyncio.to_thread(cluster.healthz, i) for i in range(len(cluster))]
        return all(s[0] == 200 for s in status)

    await until(healthy, 40, "/healthz 200 on every server", interval=0.3)
    clients = [await nats.connect(url, allow_reconnect=False) for url in cluster.urls]
    try:

        async def agreed() -> list[Any] | None:
            infos = []
            for nc in clients:
                try:
                    infos.append(await nc.jetstream(timeout=2).stream_info(stream))
                except Exception:  # not settled yet
                    return None
            views = {(i.cluster.leader, i.state.messages, i.state.last_seq) for i in infos}
            current = all(r.current for r in infos[0].cluster.replicas or [])
            return infos if len(views) == 1 and current else None

        return await until(agreed, 40, f"every server agreeing on {stream}", interval=0.3)
    finally:
        for nc in clients:
            await nc.close()


async def read_back(js: Any, stream: str, subject: str, count: int) -> list[str]:
    """Every message id in ``stream`` (``count`` of them), in order, via an ephemeral
    consumer that acks nothing."""
    config = ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=30)
    psub = await js.pull_subscribe(f"{subject}.>", stream=stream, config=config)
    ids: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while len(ids) < count and time.monotonic() < deadline:
            try:
                msgs = await psub.fetch(min(256, count - len(ids)), timeout=2)
            except nats.errors.TimeoutError:
                continue
            ids += [(m.headers or {}).get("Nats-Msg-Id", m.data.decode()) for m in msgs]
    finally:
        await psub.unsubscribe()
    assert len(ids) == count, f"read {len(ids)} of {count} messages back"
    return ids


def hosting(cluster: NetnsCluster, stream: str) -> list[str]:
    """The servers whose /jsz lists ``stream`` (one per replica)."""
    out = []
    for i in range(len(cluster)):
        jsz = monitor_json(HTTP_PORT, "/jsz?streams=true", host=cluster.address(i))
        names = {
            s["name"]
            for acc in jsz.get("account_details") or []
            for s in acc.get("stream_detail") or []
        }
        if stream in names:
            out.append(cluster.names[i])
    return out


async def set_up(nc: NATS, w: Workload, replicas: int, storage: StorageType) -> None:
    js = nc.jetstream(timeout=5)
    await js.add_stream(
        StreamConfig(
            name=w.stream,
            subjects=[f"{w.subject}.>"],
            storage=storage,
            num_replicas=replicas,
            duplicate_window=120,
        )
    )
    await js.create_key_value(KeyValueConfig(bucket=w.bucket, replicas=replicas, storage=storage))
    # A long ack wait: no redelivery of a message in flight during the run, so any
    # redelivery of an acked message is the server's doing.
    await js.add_consumer(
        w.stream,
        ConsumerConfig(durable_name=w.durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=30),
    )


def record(result: dict[str, Any], history: History, tmp_path: Path) -> None:
    print(json.dumps(result))  # shown with -s, and in the report of a failing test
    (tmp_path / "history.jsonl").write_text(history.to_json())
    if target := os.environ.get("HW_HISTORY_RESULTS"):
        with open(target, "a") as out:
            out.write(json.dumps(result) + "\n")


Faults = Callable[[NetnsCluster, Any, str, Callable[[str], None]], Awaitable[None]]


async def rolling_restart(
    cluster: NetnsCluster, js: Any, stream: str, log: Callable[[str], None]
) -> None:
    """A StatefulSet's rolling update: each server in turn, the highest ordinal first, is
    stopped (SIGTERM) and started again, and the next goes only once /healthz answers 200
    on it (the pod's startup probe: on Headwater, its replicas caught up)."""
    await asyncio.sleep(1.5)
    for i in reversed(range(len(cluster))):
        log(f"restart {cluster.names[i]}")
        await asyncio.to_thread(cluster.restart, i)

        async def healthy(i: int = i) -> bool:
            return (await asyncio.to_thread(cluster.healthz, i))[0] == 200

        await until(healthy, 30, f"/healthz 200 on {cluster.names[i]}", interval=0.2)
        log(f"{cluster.names[i]} healthy")


@pytest.mark.parametrize(("kind", "replicas", "extra"), SCENARIOS)
async def test_histories_under_faults(
    netns_cluster, tmp_path: Path, kind: str, replicas: int, extra: str
) -> None:
    cluster = netns_cluster(kind, jetstream=True, config=f"{FAST_PINGS}\n{extra}")
    await check_history(cluster, tmp_path, kind, replicas, extra, inflict_faults, 4)


@pytest.mark.parametrize(
    "kind",
    [pytest.param("nats", marks=pytest.mark.differential), "headwater"],
    ids=["nats-R3-rolling", "headwater-R3-rolling"],
)
async def test_histories_through_a_rolling_restart(
    netns_cluster, tmp_path: Path, kind: str
) -> None:
    cluster = netns_cluster(kind, jetstream=True, config=FAST_PINGS)
    await check_history(cluster, tmp_path, kind, 3, "", rolling_restart, 6, "rolling")


async def check_history(
    cluster: NetnsCluster,
    tmp_path: Path,
    kind: str,
    replicas: int,
    extra: str,
    inflict: Faults,
    expected_faults: int,
    label: str = "",
) -> None:
    """Run the workloads through ``inflict``'s faults, settle, read back and judge."""
    await wait_jetstream(cluster)
    seed = int(os.environ.get("HW_HISTORY_SEED", "1"))
    w = Workload(cluster.urls, seed=seed)
    admin = await w.connect(1)
    try:
        # File storage everywhere: Headwater's R3 replicas restart from their checkpoints.
        await set_up(admin, w, replicas, StorageType.FILE)
        history, stop = History(), asyncio.Event()
        began = time.monotonic()
        faults: list[str] = []

        def log(what: str) -> None:
            faults.append(f"{time.monotonic() - began:.1f}s {what}")

        running = asyncio.create_task(w.run(history, stop))
        js = admin.jetstream(timeout=2)
        await inflict(cluster, js, w.stream, log)
        await asyncio.sleep(max(0.0, RUN_SECONDS - (time.monotonic() - began)))
        stop.set()
        await asyncio.wait_for(running, 20)

        infos = await settled(cluster, w.stream, replicas)
        await settled(cluster, f"KV_{w.bucket}", replicas)
        stored = await read_back(
            admin.jetstream(timeout=5), w.stream, w.subject, infos[0].state.messages
        )
        hosts = await asyncio.to_thread(hosting, cluster, w.stream)
        kv_info = await admin.jetstream(timeout=5).stream_info(f"KV_{w.bucket}")
    finally:
        await admin.close()

    acked, unknown = publish_outcomes(history)
    published = check_publishes(acked, stored, unknown)
    kv = check_kv(history, w.keys, max_steps=1_000_000)
    acks = check_consumer_acks(history)
    result = {
        "run": f"{kind}-R{replicas}"
        + ("-sync-always" if extra else "")
        + (f"-{label}" if label else ""),
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
        "kv_direct_get": bool(kv_info.config.allow_direct),
        "acks": acks.summary(),
        "ack_violations": acks.violations[:20],
        "hosts": hosts,
        "history": str(tmp_path / "history.jsonl"),
    }
    record(result, history, tmp_path)

    # The checkers ran over non-trivial histories that the faults reached.
    assert published.acked >= 100 and published.stored >= published.acked, result
    assert history.counts("get", "put", "update").get(OK, 0) >= 100, result
    assert acks.delivered >= 50 and acks.acked >= 50, result
    outcomes = history.counts()
    assert outcomes.get(INFO, 0) + outcomes.get(FAIL, 0) > 0, result
    assert len(faults) == expected_faults, faults
    if kind == "headwater":
        # Durable by default: nothing acknowledged lost or doubled, on R1 (fsync before every
        # ack) and on R3 (a quorum holds it before the ack).
        assert published.valid, result
        assert kv.verdict == "ok", result
        assert acks.valid, result
        if replicas == 1:
            assert hosts == [infos[0].cluster.leader], result
        else:
            assert sorted(hosts) == sorted(cluster.names), result
