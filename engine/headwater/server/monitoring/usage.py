"""Process resource usage for /varz: resident memory, CPU percent, usable cores.

nats-server samples ``/proc/self/stat`` once a second in the background and reports the CPU
used over the last interval. We sample lazily instead: each reading compares the process CPU
time with the previous reading, so a scraper polling every N seconds sees the average over
those N seconds, and an idle server spends nothing on bookkeeping.
"""

from __future__ import annotations

import os
import resource
import sys
import time

# Readings closer together than this reuse the last percentage: a tiny interval would turn
# clock granularity into wild swings.
_MIN_INTERVAL = 0.25

try:
    _PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):
    _PAGE_SIZE = 4096


def rss_bytes() -> int:
    """Current resident set size in bytes (peak RSS where /proc is unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is in KiB on Linux, bytes on macOS.
        return peak if sys.platform == "darwin" else peak * 1024


def cores() -> int:
    """CPUs this process may run on (nats-server reports Go's NumCPU, affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


class CpuSampler:
    """CPU percent of this process since the previous reading (100 = one core busy).

    The first baseline is taken when the sampler is made (monitoring start-up); until a
    quarter second has passed the reading stays 0, as nats-server's does right after start.
    """

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu = _cpu_seconds()
        self._percent = 0.0

    def percent(self) -> float:
        wall = time.monotonic()
        cpu = _cpu_seconds()
        elapsed = wall - self._wall
        if elapsed >= _MIN_INTERVAL:
            self._percent = round(max(cpu - self._cpu, 0.0) / elapsed * 100.0, 1)
            self._wall, self._cpu = wall, cpu
        return self._percent


#: One sampler per process: CPU time is a process-wide quantity.
PROCESS_CPU = CpuSampler()
