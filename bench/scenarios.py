"""The issue's scenarios, each run against both servers in the same run.

Loads run one at a time (the machine has 2 cores: a load and a server each get one). Throughput
repeats alternate between the servers so that slow drift on a shared machine (another job,
thermal limits) falls on both; the best run counts, since interference only ever slows a run.
Latency samples of all rounds are pooled per server before taking percentiles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import conns
import latency
import loads_gobench
import loads_natspy
from results import Measure, Target, Throughput, percentile
from servers import KINDS, LABELS, cpu_seconds, pid_of, running, running_both

SIZE = 16  # payload bytes, as the issue states for every core scenario
IDLE_TARGET_CONNS = 5000


@dataclass(frozen=True)
class Plan:
    """Message counts and repeats for one mode (full or --quick)."""

    mode: str
    gobench_msgs: int
    natspy_msgs: int
    requests: int  # request/reply round trips per server, split into ``latency_rounds``
    latency_rounds: int
    idle_conns: int
    repeats: int
    js_msgs: int  # JetStream async publishes per run (interval sync and memory storage)
    js_durable_msgs: int  # the same with an fsync per ack: nats-server manages ~6k/s there
    js_fetch_msgs: int
    js_stored_msgs: int  # messages kept in a stream for the RSS and restart figures
    store_bench_msgs: int  # --msgs for bench/store_bench.py
    consumer_replay_msgs: int  # messages an ordered push consumer replays (issue 4)
    consumer_pub_msgs: int  # acked publishes per run, with and without idle durables
    idle_consumers: int  # idle durable consumers on the stream for the second publish row
    cluster_gobench_msgs: int  # gobench pub/sub across a route (issue 17)
    cluster_natspy_msgs: int  # nats-py pub/sub across a route
    formation_repeats: int  # 3-server clusters started per server kind, for the formation time
    cluster_js_msgs: int  # async publishes per run into an R1 stream of a 3-server cluster


FULL = Plan("full", gobench_msgs=2_000_000, natspy_msgs=300_000, requests=10_000,
            latency_rounds=10, idle_conns=IDLE_TARGET_CONNS, repeats=3, js_msgs=300_000,
            js_durable_msgs=30_000, js_fetch_msgs=50_000, js_stored_msgs=2_000_000,
            store_bench_msgs=2_000_000, consumer_replay_msgs=100_000, consumer_pub_msgs=100_000,
            idle_consumers=1_000, cluster_gobench_msgs=1_000_000, cluster_natspy_msgs=200_000,
            formation_repeats=3, cluster_js_msgs=100_000)  # fmt: skip
QUICK = Plan("quick", gobench_msgs=100_000, natspy_msgs=20_000, requests=400,
             latency_rounds=2, idle_conns=500, repeats=1, js_msgs=20_000, js_durable_msgs=2_000,
             js_fetch_msgs=5_000, js_stored_msgs=50_000, store_bench_msgs=50_000,
             consumer_replay_msgs=5_000, consumer_pub_msgs=5_000, idle_consumers=50,
             cluster_gobench_msgs=100_000, cluster_natspy_msgs=20_000,
             formation_repeats=1, cluster_js_msgs=10_000)  # fmt: skip

# A load takes the server URL and a message count.
Load = Callable[[str, int], Throughput]


def alternate(rep: int) -> tuple[str, ...]:
    """The order of the servers in repeat ``rep``: headwater first in even repeats."""
    return KINDS if rep % 2 == 0 else tuple(reversed(KINDS))


def best_index(runs: list[Throughput]) -> int:
    """Index of the fastest run."""
    return max(range(len(runs)), key=lambda i: runs[i].msgs_per_s)


def _throughput(
    ident: str,
    scenario: str,
    load_name: str,
    load: Load,
    msgs: int,
    plan: Plan,
    target: Target | None,
    server_args: dict[str, list[str]] | None = None,
) -> Measure:
    """Run ``load`` against both servers ``plan.repeats`` times; keep each server's best.

    The server's CPU use during the best run goes in the note: near 100% means the server is
    the bottleneck, well below means the load is.
    """
    runs: dict[str, list[Throughput]] = {kind: [] for kind in KINDS}
    busy: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with running_both(per_kind=server_args) as servers:
        for kind in KINDS:  # warm-up: connections, caches, the allocator's arenas
            load(servers[kind].url, max(1000, msgs // 10))
        for rep in range(plan.repeats):
            for kind in alternate(rep):
                pid = pid_of(servers[kind])
                cpu_before = cpu_seconds(pid)
                run = load(servers[kind].url, msgs)
                runs[kind].append(run)
                busy[kind].append((cpu_seconds(pid) - cpu_before) / run.seconds)
    best_run = {kind: best_index(runs[kind]) for kind in KINDS}
    best = {kind: runs[kind][best_run[kind]].msgs_per_s for kind in KINDS}
    notes = [
        f"{LABELS[kind]}: {sum(not r.ok for r in runs[kind])}/{len(runs[kind])} runs lost msgs"
        for kind in KINDS
        if not all(r.ok for r in runs[kind])
    ]
    cpu = busy["headwater"][best_run["headwater"]], busy["nats"][best_run["nats"]]
    notes.append(f"best of {plan.repeats}; server CPU: hw {cpu[0]:.0%}, nats {cpu[1]:.0%}")
    return Measure(
        id=ident,
        scenario=scenario,
        load=load_name,
        metric="msgs/s",
        headwater=best["headwater"],
        nats=best["nats"],
        target=target,
        note="; ".join(notes),
        runs={kind: [round(r.msgs_per_s) for r in runs[kind]] for kind in KINDS},
    )


def _gobench_measures(plan: Plan, versions: dict[str, str]) -> list[Measure]:
    rows = [
        ("core_pub.gobench", "core pub 16 B", "core_pub", None),
        ("core_pubsub.gobench", "core pub/sub 16 B", "core_pubsub",
         Target("ratio_min", 0.25, ">= 0.25x")),
    ]  # fmt: skip
    try:
        binary = loads_gobench.ensure_gobench()
    except loads_gobench.GobenchUnavailable as exc:
        # Rows without figures (printed "n/a") rather than no rows: the gap stays visible.
        reason = str(exc).splitlines()[0]
        return [
            Measure(ident, label, "gobench", "msgs/s", None, None, target, reason)
            for ident, label, _, target in rows
        ]
    measures = []
    for ident, label, scenario, target in rows:

        def load(url: str, msgs: int, scenario: str = scenario) -> Throughput:
            run, client = loads_gobench.gobench(binary, url, scenario, msgs, SIZE)
            versions["nats_go"] = client
            return run

        measures.append(_throughput(ident, label, "gobench", load, plan.gobench_msgs, plan, target))
    return measures


def core(plan: Plan, versions: dict[str, str]) -> list[Measure]:
    """Scenarios 1 and 2: core publish without subscriber, and pub/sub, 16-byte payloads."""
    measures = _gobench_measures(plan, versions)
    p_msgs = plan.natspy_msgs
    measures.append(
        _throughput(
            "core_pub.natspy",
            "core pub 16 B",
            "nats-py",
            lambda url, msgs: loads_natspy.publish_only(url, msgs, SIZE),
            p_msgs,
            plan,
            None,
        )
    )
    measures.append(
        _throughput(
            "core_pubsub.natspy",
            "core pub/sub 16 B",
            "nats-py",
            lambda url, msgs: loads_natspy.pubsub(url, msgs, SIZE),
            p_msgs,
            plan,
            Target("ratio_min", 0.90, ">= 0.90x"),
        )
    )
    return measures


def request_reply(plan: Plan) -> list[Measure]:
    """Scenario 3: sequential request/reply round trips with nats-py on both sides.

    Many short alternating rounds rather than one long run per server: a burst of other work on
    the machine then lands on both servers' samples instead of ruining one server's p99.
    """
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    per_round = plan.requests // plan.latency_rounds
    with running_both() as servers:
        for rnd in range(plan.latency_rounds):
            for kind in alternate(rnd):
                got = latency.request_reply(servers[kind].url, per_round, SIZE)
                samples[kind].extend(got.samples_us)
    for values in samples.values():
        values.sort()
    note = f"{len(samples['headwater']):,} sequential requests per server"
    rows = [
        ("reqrep.p50", "p50 µs", 0.50, Target("ratio_max", 2.0, "<= 2.00x")),
        ("reqrep.p90", "p90 µs", 0.90, None),
        ("reqrep.p99", "p99 µs", 0.99, None),
    ]
    return [
        Measure(
            id=ident,
            scenario="request/reply 16 B",
            load="nats-py",
            metric=metric,
            headwater=percentile(samples["headwater"], fraction),
            nats=percentile(samples["nats"], fraction),
            target=target,
            note=note,
        )
        for ident, metric, fraction, target in rows
    ]


def idle_connections(plan: Plan) -> list[Measure]:
    """Scenario 4: RSS of each server while it holds ``plan.idle_conns`` handshaken clients."""
    held: dict[str, conns.IdleConnections] = {}
    for kind in KINDS:  # one fresh server at a time: nothing else in its heap
        with running(kind) as server:
            held[kind] = conns.hold_idle("127.0.0.1", server.port, pid_of(server), plan.idle_conns)
    count = plan.idle_conns
    scenario = f"{count:,} idle conns"
    if count == IDLE_TARGET_CONNS:
        rss_target: Target | None = Target("headwater_max", 250.0, "hw < 250 MB")
        rss_note = ""
    else:
        rss_target = None
        rss_note = f"target (< 250 MB) applies to {IDLE_TARGET_CONNS:,} conns"
    fds = ", ".join(f"{LABELS[k]} {held[k].server_fds} fds" for k in KINDS)
    before = ", ".join(f"{LABELS[k]} {held[k].rss_before_kib * 1024 / 1e6:.1f}" for k in KINDS)
    return [
        Measure(
            "conns.rss",
            scenario,
            "raw TCP",
            "RSS MB",
            held["headwater"].rss_held_kib * 1024 / 1e6,
            held["nats"].rss_held_kib * 1024 / 1e6,
            rss_target,
            "; ".join(filter(None, [rss_note, f"before: {before} MB", fds])),
        ),
        Measure(
            "conns.per_conn",
            scenario,
            "raw TCP",
            "KiB/conn",
            held["headwater"].per_conn_kib,
            held["nats"].per_conn_kib,
            None,
            "(RSS held - RSS before) / conns",
        ),
        Measure(
            "conns.open_rate",
            scenario,
            "raw TCP",
            "conns/s",
            count / held["headwater"].open_seconds,
            count / held["nats"].open_seconds,
            None,
            f"connect + INFO + CONNECT/PING + PONG, {conns.CONCURRENCY} at a time",
        ),
    ]
