"""The two servers under test, started the way a user starts them, plus process measurements.

Both run through ``headwater.testing.ServerProcess`` (the real command line, 127.0.0.1, an
ephemeral port), so headwater-server and nats-server are measured under identical conditions.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
from collections.abc import Iterator

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
