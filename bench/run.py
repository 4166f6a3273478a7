"""Benchmark headwater-server against nats-server, both in the same run, with ratios.

    python bench/run.py [--quick] [--only core|latency|conns|js|consumers|cluster]
                        [--json out.json]

Scenarios (issue 2): core publish and pub/sub with 16-byte payloads (gobench and nats-py as
loads), request/reply latency (nats-py), and 5,000 idle connections (server RSS). Every ratio
is headwater / nats-server. Issue 3 adds JetStream (``--only js``, bench/js_scenarios.py): async
publish with file storage in two durability modes and with memory storage, pull fetch, and a
stream holding many messages (RSS, restart time). Issue 4 adds consumers (``--only consumers``,
bench/consumer_bench.py): ordered push replay and publish with many idle durables. Issue 17
adds clusters (``--only cluster``, bench/cluster_bench.py): pub/sub across a route and the
time a 3-server cluster takes to form. Figures
are printed, never asserted: speed on a shared 2-core machine is noisy, which is why both
servers are measured side by side.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import cluster_bench
import consumer_bench
import js_scenarios
import report
import scenarios
from results import Measure
from servers import nats_server_version, raise_fd_limit

GROUPS = ("core", "latency", "conns", "js", "consumers", "cluster")


def source_revision() -> str:
    """The commit measured, marked dirty when the work tree differs from it."""
    repo = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "engine"],
            cwd=repo,
            capture_output=True,
            check=False,
        ).stdout
    except OSError:
        return "unknown"
    return (rev or "unknown") + (" (engine/ modified)" if dirty else "")


def machine_info(plan: scenarios.Plan) -> dict[str, str]:
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as info:
        mem_kib = int(info.readline().split()[1])
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": plan.mode,
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "headwater": f"{metadata.version('headwater')} at {source_revision()}",
        "nats_server": nats_server_version(),
        "nats_py": metadata.version("nats-py"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one repeat (smoke)")
    parser.add_argument("--only", choices=GROUPS, help="run one group of scenarios")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    plan = scenarios.QUICK if args.quick else scenarios.FULL
    groups = [args.only] if args.only else list(GROUPS)

    # Before any server starts: the servers inherit the limit, and this process holds the
    # client side of every idle connection.
    limit = raise_fd_limit(2 * plan.idle_conns + 1024)
    if "conns" in groups and limit < plan.idle_conns + 256:
        parser.error(f"file descriptor limit {limit} is too low for {plan.idle_conns} conns")

    machine = machine_info(plan)
    measures: list[Measure] = []
    if "core" in groups:
        measures += scenarios.core(plan, machine)
    if "latency" in groups:
        measures += scenarios.request_reply(plan)
    if "conns" in groups:
        measures += scenarios.idle_connections(plan)
    if "js" in groups:
        measures += js_scenarios.jetstream(plan, machine)
    if "consumers" in groups:
        measures += consumer_bench.consumers(plan)
    if "cluster" in groups:
        measures += cluster_bench.cluster(plan, machine)

    report.render(measures, machine)
    if args.json:
        report.write_json(args.json, measures, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
