"""Clusters (issue 17): core pub/sub across a route, how fast a 3-server cluster forms, and
JetStream publish through a server that does not hold the stream.

``python bench/run.py --only cluster``. Both scenarios run for headwater-server and
nats-server in the same run, each server kind in a cluster of its own kind:

- **Pub/sub across a route**: a 2-server cluster per kind; the publisher connects to the
  first server, the subscriber to the second, so every message crosses the route. gobench
  (``-sub-url``) and nats-py are the loads; 16-byte payloads; a warm-up, then
  ``plan.repeats`` runs alternating between the kinds, the best counting, as for the core
  scenarios (bench/scenarios.py). The note gives both servers' CPU use during the best run.
- **Formation**: 3 servers started one after the other, the second and third with a route to
  the first; the time from launching the third process until every server's ``/routez``
  shows a route to both others (distinct remote servers: nats-server pools several
  connections per remote). It includes the last process's own start-up. The slowest of
  ``plan.formation_repeats`` fresh clusters is reported, since the target is a bound.
- **JetStream through another server** (bench/js_cluster_bench.py): an R1 stream in a 3-server
  JetStream cluster, published to through the server holding it and through another one.
"""

from __future__ import annotations

from collections.abc import Callable

import js_cluster_bench
import loads_gobench
import loads_natspy
from results import Measure, Target, Throughput
from scenarios import SIZE, Plan, alternate, best_index
from servers import (
    KINDS,
    LABELS,
    cluster_starting,
    cpu_seconds,
    pid_of,
    running_clusters,
    wait_meshed,
)

# A load across a route: the publisher's server URL, the subscriber's, a message count.
RouteLoad = Callable[[str, str, int], Throughput]

SCENARIO = "pub/sub 16 B across a route"
FORMATION_SERVERS = 3
FORMATION_LIMIT = 10.0  # seconds: the target, and the wait before a run fails


def _across_route(
    ident: str, load_name: str, load: RouteLoad, msgs: int, plan: Plan, target: Target | None
) -> Measure:
    """Run ``load`` from server A to server B of each kind's 2-server cluster; keep the best."""
    runs: dict[str, list[Throughput]] = {kind: [] for kind in KINDS}
    busy: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    with running_clusters(2) as clusters:
        for kind in KINDS:  # warm-up: connections, caches, the route's buffers
            pub, sub = clusters[kind]
            load(pub.url, sub.url, max(1000, msgs // 10))
        for rep in range(plan.repeats):
            for kind in alternate(rep):
                pub, sub = clusters[kind]
                pids = pid_of(pub), pid_of(sub)
                before = [cpu_seconds(pid) for pid in pids]
                run = load(pub.url, sub.url, msgs)
                after = [cpu_seconds(pid) for pid in pids]
                runs[kind].append(run)
                busy[kind].append(
                    ((after[0] - before[0]) / run.seconds, (after[1] - before[1]) / run.seconds)
                )
    best_run = {kind: best_index(runs[kind]) for kind in KINDS}
    notes = [
        f"{LABELS[kind]}: {sum(not r.ok for r in runs[kind])}/{len(runs[kind])} runs lost msgs"
        for kind in KINDS
        if not all(r.ok for r in runs[kind])
    ]
    (hw_pub, hw_sub), (nats_pub, nats_sub) = (busy[k][best_run[k]] for k in KINDS)
    notes.append(
        f"best of {plan.repeats}; server CPU (sending/receiving): "
        f"hw {hw_pub:.0%}/{hw_sub:.0%}, nats {nats_pub:.0%}/{nats_sub:.0%}"
    )
    return Measure(
        id=ident,
        scenario=SCENARIO,
        load=load_name,
        metric="msgs/s",
        headwater=runs["headwater"][best_run["headwater"]].msgs_per_s,
        nats=runs["nats"][best_run["nats"]].msgs_per_s,
        target=target,
        note="; ".join(notes),
        runs={kind: [round(r.msgs_per_s) for r in runs[kind]] for kind in KINDS},
    )


def _gobench_row(plan: Plan, versions: dict[str, str]) -> Measure:
    ident, load_name = "cluster_pubsub.gobench", "gobench"
    target = Target("ratio_min", 0.5, ">= 0.50x")
    try:
        binary = loads_gobench.ensure_gobench()
    except loads_gobench.GobenchUnavailable as exc:
        # A row without figures (printed "n/a") rather than no row: the gap stays visible.
        reason = str(exc).splitlines()[0]
        return Measure(ident, SCENARIO, load_name, "msgs/s", None, None, target, reason)

    def load(pub_url: str, sub_url: str, msgs: int) -> Throughput:
        run, client = loads_gobench.gobench(
            binary, pub_url, "core_pubsub", msgs, SIZE, sub_url=sub_url
        )
        versions["nats_go"] = client
        return run

    return _across_route(ident, load_name, load, plan.cluster_gobench_msgs, plan, target)


def formation_seconds(kind: str) -> tuple[float, float]:
    """Start a fresh 3-server cluster of ``kind``; seconds to a full mesh from the last launch,
    and from the moment that last server was ready (the routes' own share)."""
    with cluster_starting(kind, FORMATION_SERVERS, f"form{kind}") as started:
        formed = wait_meshed(started.servers, FORMATION_LIMIT)
        return formed - started.launched, max(0.0, formed - started.ready)


def formation(plan: Plan) -> Measure:
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    after_ready: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for rep in range(plan.formation_repeats):
        for kind in alternate(rep):
            total, routes = formation_seconds(kind)
            times[kind].append(total)
            after_ready[kind].append(routes)
    slowest = {kind: max(range(len(times[kind])), key=times[kind].__getitem__) for kind in KINDS}
    ready_note = ", ".join(
        f"{LABELS[kind]} {after_ready[kind][slowest[kind]]:.3f} s" for kind in KINDS
    )
    return Measure(
        id="cluster.formation",
        scenario=f"{FORMATION_SERVERS}-server cluster forms",
        load="/routez",
        metric="seconds",
        headwater=max(times["headwater"]),
        nats=max(times["nats"]),
        target=Target("headwater_max", FORMATION_LIMIT, f"hw < {FORMATION_LIMIT:.0f} s"),
        note=(
            f"slowest of {plan.formation_repeats}; from the last process launch (its start-up "
            "included) to every /routez showing both other servers; of which after that "
            f"server was ready: {ready_note}"
        ),
        runs={kind: [round(t, 3) for t in times[kind]] for kind in KINDS},
    )


def cluster(plan: Plan, versions: dict[str, str]) -> list[Measure]:
    """The cluster group: pub/sub across a route (gobench, nats-py), formation time, and
    JetStream publish through the stream's server and through another one."""
    measures = [_gobench_row(plan, versions)]
    measures.append(
        _across_route(
            "cluster_pubsub.natspy",
            "nats-py",
            lambda pub_url, sub_url, msgs: loads_natspy.pubsub(pub_url, msgs, SIZE, sub_url),
            plan.cluster_natspy_msgs,
            plan,
            None,
        )
    )
    measures.append(formation(plan))
    measures += js_cluster_bench.remote_publish(plan, versions)
    return measures
