"""The two servers under test, started the way a user starts them, plus process measurements.

Both run through ``headwater.testing.ServerProcess`` (the real command line, 127.0.0.1, an
ephemeral port), so headwater-server and nats-server are measured under identical conditions.
Clusters (issue 17) are N such processes of one kind joined by routes: each listens for routes
on an ephemeral port (``--cluster nats://127.0.0.1:-1``) and all but the first dial the first
(``--routes``), whose route port is read from its log once it has started.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

from headwater.testing import ServerProcess, nats_server_binary

# The kinds ServerProcess understands, in the order every scenario measures them.
KINDS = ("headwater", "nats")
LABELS = {"headwater": "headwater", "nats": "nats-server"}


@contextlib.contextmanager
def running(kind: str, args: list[str] | None = None) -> Iterator[ServerProcess]:
    """A started server that is always stopped, whatever the load did."""
    server = ServerProcess(kind, args=args or [])
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@contextlib.contextmanager
def running_both(
    args: list[str] | None = None, per_kind: dict[str, list[str]] | None = None
) -> Iterator[dict[str, ServerProcess]]:
    """Both servers at once, so repeats can alternate between them (an idle server costs no CPU).

    ``per_kind`` gives each server its own arguments (JetStream runs use one config file each).
    """
    chosen = per_kind or {}
    with (
        running("headwater", chosen.get("headwater", args)) as headwater,
        running("nats", chosen.get("nats", args)) as nats,
    ):
        yield {"headwater": headwater, "nats": nats}


# Both servers log this line once their route listener is bound (nats-server after "ready").
_ROUTE_LISTEN = re.compile(rb"Listening for route connections on (?:\[[^\]]*\]|[^\s:]+):(\d+)")


def cluster_args(name: str, seed_route_port: int | None) -> list[str]:
    """A cluster member's flags: monitoring on, routes on an ephemeral port, the seed dialled."""
    args = ["-m", "-1", "--cluster", "nats://127.0.0.1:-1", "--cluster_name", name]
    if seed_route_port is not None:
        args += ["--routes", f"nats-route://127.0.0.1:{seed_route_port}"]
    return args


def route_port(server: ServerProcess, timeout: float = 5.0) -> int:
    """The port ``server`` listens on for routes, from its log (bounded wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _ROUTE_LISTEN.search(server.log_path.read_bytes())
        if found:
            return int(found.group(1))
        if not server.running:
            raise RuntimeError(f"{server.kind} server exited:\n{server.log()}")
        time.sleep(0.01)
    raise TimeoutError(f"{server.kind} server never listened for routes:\n{server.log()}")


def routed_servers(server: ServerProcess) -> set[str]:
    """Ids of the servers ``server``'s /routez shows a route to.

    Distinct remotes, not connections: nats-server opens a pool of routes per remote (3 by
    default, plus one for ``$SYS``), Headwater one.
    """
    url = f"http://127.0.0.1:{server.http_port}/routez"
    with urllib.request.urlopen(url, timeout=2) as resp:
        routez = json.loads(resp.read())
    return {r["remote_id"] for r in routez.get("routes") or [] if r.get("remote_id")}


def meshed(servers: list[ServerProcess]) -> bool:
    """Every server has a route to every other one."""
    return all(len(routed_servers(s)) >= len(servers) - 1 for s in servers)


def wait_meshed(servers: list[ServerProcess], timeout: float = 10.0) -> float:
    """Poll every /routez until the mesh is complete; returns the monotonic time it was seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if meshed(servers):
                return time.monotonic()
        except OSError:
            pass  # a monitoring port not answering yet
        time.sleep(0.01)
    routes = {s.url: sorted(routed_servers(s)) for s in servers}
    raise TimeoutError(f"no full mesh within {timeout} s: {routes}")


@dataclass
class ClusterStart:
    """Servers started as one cluster, and when (``time.monotonic()``) the last one was."""

    servers: list[ServerProcess] = field(default_factory=list)
    launched: float = 0.0  # the last process was launched
    ready: float = 0.0  # the last process logged "Server is ready"


@contextlib.contextmanager
def cluster_starting(kind: str, n: int, name: str = "bench") -> Iterator[ClusterStart]:
    """Start ``n`` servers of ``kind``, seed first, the others routing to it, one at a time.

    Returns once each has logged "Server is ready", without waiting for the mesh (the
    formation figure is measured from the last launch); always stops them all.
    """
    started = ClusterStart()
    try:
        seed = ServerProcess(kind, args=cluster_args(name, None))
        started.servers.append(seed)
        started.launched = time.monotonic()
        seed.start()
        started.ready = time.monotonic()
        seed_port = route_port(seed)
        for _ in range(n - 1):
            member = ServerProcess(kind, args=cluster_args(name, seed_port))
            started.servers.append(member)
            started.launched = time.monotonic()
            member.start()
            started.ready = time.monotonic()
        yield started
    finally:
        for server in started.servers:
            server.cleanup()


@contextlib.contextmanager
def running_clusters(n: int = 2) -> Iterator[dict[str, list[ServerProcess]]]:
    """One meshed ``n``-server cluster of each kind at once, so repeats can alternate."""
    with (
        cluster_starting("headwater", n, "hwbench") as headwater,
        cluster_starting("nats", n, "natsbench") as nats,
    ):
        wait_meshed(headwater.servers)
        wait_meshed(nats.servers)
        yield {"headwater": headwater.servers, "nats": nats.servers}


def pid_of(server: ServerProcess) -> int:
    assert server.proc is not None, "server not started"
    return server.proc.pid


def rss_kib(pid: int) -> int:
    """Resident set size from /proc (``VmRSS``), in KiB: what the kernel charges the process."""
    return _status_field(pid, "VmRSS")


def peak_rss_kib(pid: int) -> int:
    """High-water mark of the resident set (``VmHWM``), in KiB."""
    return _status_field(pid, "VmHWM")


def _status_field(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        # Fields after the ")" that ends the command name; utime and stime are 14th and 15th.
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards ``wanted``; returns the new soft limit.

    Called before any server starts: child processes inherit the limit, and headwater-server
    (unlike Go programs) does not raise its own.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def nats_server_version() -> str:
    binary = nats_server_binary()
    if binary is None:
        return "not installed"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or out.stderr.strip()
