"""JetStream across a cluster (issue 17): publish to an R1 stream through a server without it.

Part of ``python bench/run.py --only cluster``. Per server kind, a 3-server cluster of that
kind with clustered JetStream (``headwater.testing.Cluster(jetstream=True)``: every server
routes to all three, ``-js -sd <dir>``, Headwater's etcd members on cluster port + 1 and + 2).
Both kinds read one config file that sets ``sync_interval: "2m"`` (nats-server's default,
so like with like: Headwater's own default fsyncs before every ack).

Stream GOBENCH (subject ``gobench.js``, file storage, R1) is created once per cluster through
its first server; ``STREAM.INFO``'s ``cluster.leader`` names the server that holds it (the
host). gobench ``js_pub_async -existing-stream`` then publishes 16-byte messages through
(a) the host and (b) another server, whose every publish and ack crosses a route. gobench
purges the stream before each run, so each starts from an empty stream. A warm-up, then
``plan.repeats`` runs alternating between the kinds, the best of each path counting.

Three rows: (a) and (b) in msgs/s, and (b) / (a) for each kind, the issue's target being that
Headwater's (b) is at least half its own (a).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loads_gobench
import nats
import nats.errors
from results import Measure, Target, Throughput
from scenarios import SIZE, Plan, alternate, best_index
from servers import KINDS, LABELS, cpu_seconds, pid_of

from headwater.testing import Cluster, ServerProcess

# gobench's stream and subject (bench/gobench/main.go streamName, jsSubject).
STREAM = "GOBENCH"
SUBJECT = "gobench.js"
SERVERS = 3
WINDOW = 4000  # gobench -window, as js_pub.file_interval (bench/js_scenarios.py)
# nats.go gives up on a full async window after 200 ms without an ack ("stalled"); a run that
# hits one (the shared disk, or the route) is repeated and counted in the note.
STALL_RETRIES = 3
READY_TIMEOUT = 30.0  # seconds for every server's JetStream to answer (etcd, meta leader)
PATHS = ("host", "other")

CONFIG = 'host: "127.0.0.1"\nport: -1\njetstream {\n  sync_interval: "2m"\n}\n'


async def _acked(url: str, attempts: int = 100) -> None:
    """Publish a probe through ``url`` until the stream acknowledges one (bounded: ~5 s)."""
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2)
    try:
        for attempt in range(attempts):
            try:
                await nc.request(SUBJECT, b"probe", timeout=2)
                return
            except nats.errors.NoRespondersError:
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(0.05)
    finally:
        await nc.close()


async def _api(url: str, subject: str, body: dict[str, Any] | None, timeout: float) -> Any:
    nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2)
    try:
        payload = json.dumps(body).encode() if body is not None else b""
        msg = await nc.request(subject, payload, timeout=timeout)
        return json.loads(msg.data)
    finally:
        await nc.close()


def js_api(url: str, subject: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> Any:
    """One ``$JS.API`` request through the server at ``url``; the decoded reply."""
    return asyncio.run(_api(url, subject, body, timeout))


def wait_jetstream(cluster: Cluster, timeout: float = READY_TIMEOUT) -> None:
    """Until each server answers ``$JS.API.INFO`` without an error (bounded by ``timeout``).

    nats-server answers nothing, or 10008, until its meta group has a leader; Headwater 10008
    until its etcd member has joined.
    """
    deadline = time.monotonic() + timeout
    for name, server in zip(cluster.names, cluster.servers, strict=True):
        last: object = None
        while True:
            try:
                last = js_api(server.url, "$JS.API.INFO", timeout=0.5)
                if "error" not in last:
                    break
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
                last = exc
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: JetStream not ready within {timeout} s: {last!r}")
            time.sleep(0.1)


def create_stream(url: str, reach: list[str] | tuple[str, ...] = ()) -> str:
    """Create GOBENCH (R1, file) through ``url``; the name of the server that holds it.

    ``reach``: servers that must take publishes to the stream before this returns. The host
    announces the stream's subject to the other servers after its create reply, so a publish
    sent at once through another server could still find no responders."""
    config = {"name": STREAM, "subjects": [SUBJECT], "storage": "file", "num_replicas": 1}
    created = js_api(url, f"$JS.API.STREAM.CREATE.{STREAM}", config)
    if "error" in created:
        raise RuntimeError(f"creating {STREAM}: {created['error']}")
    for server in reach:
        asyncio.run(_acked(server))
    info = js_api(url, f"$JS.API.STREAM.INFO.{STREAM}")
    leader = (info.get("cluster") or {}).get("leader")
    if not leader:
        raise RuntimeError(f"STREAM.INFO names no leader: {info}")
    return str(leader)


def host_and_other(cluster: Cluster, leader: str) -> tuple[int, int]:
    """Indexes of the stream's server and of the next server, which does not hold it."""
    host = cluster.names.index(leader)
    return host, (host + 1) % len(cluster.names)


@contextlib.contextmanager
def js_cluster(kind: str, name: str) -> Iterator[Cluster]:
    """A formed 3-server ``kind`` cluster with JetStream answering on every server."""
    with tempfile.TemporaryDirectory(prefix="js-cluster-bench-") as tmp:
        conf = Path(tmp) / "js.conf"
        conf.write_text(CONFIG)
        with Cluster(kind, SERVERS, name=name, jetstream=True, args=["-c", str(conf)]) as cluster:
            wait_jetstream(cluster)
            yield cluster


def _publish(binary: Path, url: str, msgs: int, stalls: list[int]) -> tuple[Throughput, str]:
    """gobench js_pub_async into the existing GOBENCH through ``url``; stalls are retried."""
    flags = ["-existing-stream", "-window", str(WINDOW)]
    for attempt in range(STALL_RETRIES + 1):
        try:
            return loads_gobench.gobench(binary, url, "js_pub_async", msgs, SIZE, flags, 300)
        except RuntimeError as exc:
            if "stalled" not in str(exc) or attempt == STALL_RETRIES:
                raise
            stalls[0] += 1
    raise AssertionError("unreachable: the last attempt returns or raises")


@dataclass
class Runs:
    """Every timed run of one server kind, by path, and the servers' CPU use during each."""

    host: str = ""  # the name of the server holding the stream
    runs: dict[str, list[Throughput]] = field(default_factory=lambda: {p: [] for p in PATHS})
    # (the server the client is on, the stream's server): busy fraction of a core.
    cpu: dict[str, list[tuple[float, float]]] = field(
        default_factory=lambda: {p: [] for p in PATHS}
    )

    def best(self, path: str) -> int:
        return best_index(self.runs[path])

    def best_rate(self, path: str) -> float:
        return self.runs[path][self.best(path)].msgs_per_s

    def best_cpu(self, path: str) -> tuple[float, float]:
        return self.cpu[path][self.best(path)]


def _measure(
    binary: Path, plan: Plan, versions: dict[str, str], stalls: list[int]
) -> dict[str, Runs]:
    """Run both paths on each kind's cluster, alternating kinds and paths between repeats."""
    msgs = plan.cluster_js_msgs
    measured = {kind: Runs() for kind in KINDS}
    with js_cluster("headwater", "hwjs") as hw, js_cluster("nats", "natsjs") as nc:
        clusters = {"headwater": hw, "nats": nc}
        ends: dict[str, dict[str, ServerProcess]] = {}
        for kind, cluster in clusters.items():
            host, other = host_and_other(cluster, create_stream(cluster.urls[0], cluster.urls))
            measured[kind].host = cluster.names[host]
            ends[kind] = {"host": cluster.servers[host], "other": cluster.servers[other]}
            for path in PATHS:  # warm-up: connections, the stream's interest on every server
                _publish(binary, ends[kind][path].url, max(1000, msgs // 10), stalls)
        for rep in range(plan.repeats):
            for kind in alternate(rep):
                for path in PATHS if rep % 2 == 0 else tuple(reversed(PATHS)):
                    watched = pid_of(ends[kind][path]), pid_of(ends[kind]["host"])
                    before = [cpu_seconds(pid) for pid in watched]
                    url = ends[kind][path].url
                    run, versions["nats_go"] = _publish(binary, url, msgs, stalls)
                    used = [cpu_seconds(pid) - b for pid, b in zip(watched, before, strict=True)]
                    measured[kind].runs[path].append(run)
                    measured[kind].cpu[path].append((used[0] / run.seconds, used[1] / run.seconds))
    return measured


def _rate_row(
    ident: str, scenario: str, path: str, measured: dict[str, Runs], note: str
) -> Measure:
    runs = {k: measured[k].runs[path] for k in KINDS}
    lost = [
        f"{LABELS[k]}: {sum(not r.ok for r in runs[k])}/{len(runs[k])} runs lost msgs"
        for k in KINDS
        if not all(r.ok for r in runs[k])
    ]
    return Measure(
        id=ident,
        scenario=scenario,
        load="gobench",
        metric="msgs/s",
        headwater=measured["headwater"].best_rate(path),
        nats=measured["nats"].best_rate(path),
        note="; ".join([*lost, note]),
        runs={k: [round(r.msgs_per_s) for r in runs[k]] for k in KINDS},
    )


def remote_publish(plan: Plan, versions: dict[str, str]) -> list[Measure]:
    """The three rows: through the host, through another server, and (b) / (a) per kind."""
    idents = ("cluster_js.host", "cluster_js.other", "cluster_js.other_vs_host")
    labels = ("JS pub R1 16 B, file, through the stream's server",
              "JS pub R1 16 B, file, through another server",
              "JS pub R1: another server / the stream's server")  # fmt: skip
    target = Target("headwater_min", 0.5, "hw >= 0.50")
    try:
        binary = loads_gobench.ensure_gobench()
    except loads_gobench.GobenchUnavailable as exc:
        reason = str(exc).splitlines()[0]
        # Rows without figures (printed "n/a") rather than no rows: the gap stays visible.
        return [
            Measure(idents[0], labels[0], "gobench", "msgs/s", None, None, None, reason),
            Measure(idents[1], labels[1], "gobench", "msgs/s", None, None, None, reason),
            Measure(idents[2], labels[2], "gobench", "b/a", None, None, target, reason),
        ]
    stalls = [0]
    measured = _measure(binary, plan, versions, stalls)
    hw, nats_ = measured["headwater"], measured["nats"]
    retried = f"; {stalls[0]} runs repeated after a nats.go stall" if stalls[0] else ""
    common = f"best of {plan.repeats}; -window {WINDOW}{retried}"
    where = f"stream created through s1, held by hw {hw.host}, nats {nats_.host}"
    (hw_client, hw_stream), (nats_client, nats_stream) = (
        hw.best_cpu("other"),
        nats_.best_cpu("other"),
    )
    rows = [
        _rate_row(idents[0], labels[0], "host", measured,
                  f"{common}; {where}; server CPU: hw {hw.best_cpu('host')[0]:.0%}, "
                  f"nats {nats_.best_cpu('host')[0]:.0%}"),
        _rate_row(idents[1], labels[1], "other", measured,
                  f"{common}; server CPU (client's/stream's): hw {hw_client:.0%}/"
                  f"{hw_stream:.0%}, nats {nats_client:.0%}/{nats_stream:.0%}"),
    ]  # fmt: skip
    rows.append(
        Measure(
            id=idents[2],
            scenario=labels[2],
            load="gobench",
            metric="b/a",
            headwater=hw.best_rate("other") / hw.best_rate("host"),
            nats=nats_.best_rate("other") / nats_.best_rate("host"),
            target=target,
            note="each kind's best through another server / its best through the stream's",
        )
    )
    return rows
