"""Event-loop stall reports: which code kept the loop busy for longer than a threshold.

Every client shares one event loop, so a single callback that computes for 200 ms stalls every
connection for 200 ms. The rule (docs/OWNERSHIP.md) is that no request may do that; this module
is how the tests check it and how an operator finds the culprit.

asyncio's debug mode reports slow callbacks, but it also records a traceback for every handle,
which slows the server several-fold, so it cannot stay on during a test suite. Instead:

* a **heartbeat** on the loop (``call_later`` every ``BEAT_S``) records the loop thread's CPU
  time each time the loop gets round to it;
* a **watchdog thread** reads the loop thread's CPU clock (``pthread_getcpuclockid``) between
  beats. When the loop thread has used more than the threshold of CPU since the last beat, one
  pass of the loop has been computing that long without yielding: the watchdog logs a warning
  with the loop thread's current stack (``sys._current_frames``), once per stall.

CPU time, not wall time, is what is measured, so a server descheduled on a busy machine (CI
runs many processes on two cores) is not reported; time spent blocked in a system call on the
loop thread (an fsync) uses no CPU and is not reported either: blocking I/O is kept off the loop
by review and by tests of its own.

Enabled with ``HEADWATER_STALL_REPORT_MS`` (the tests set 100); off by default.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback

__all__ = ["ENV", "STALL_MARKER", "LoopWatchdog", "from_environment"]

log = logging.getLogger("headwater.server")

ENV = "HEADWATER_STALL_REPORT_MS"
STALL_MARKER = "event loop stalled"
"""The start of every report's log line: what ``headwater.testing`` looks for."""

BEAT_S = 0.02
"""How often the loop records its CPU time; also how often the watchdog looks."""


class LoopWatchdog:
    """Reports passes of ``loop`` that use more than ``threshold_s`` of the loop thread's CPU."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_s: float) -> None:
        self._loop = loop
        self._threshold = threshold_s
        self._thread_id = threading.get_ident()
        self._clock = time.pthread_getcpuclockid(self._thread_id)
        self._beat_cpu = time.clock_gettime(self._clock)
        self._beats = 0
        self._reported_beat = -1
        self._timer: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)

    def start(self) -> None:
        """Call from the loop's thread."""
        self._beat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _beat(self) -> None:
        self._beat_cpu = time.clock_gettime(self._clock)
        self._beats += 1
        self._timer = self._loop.call_later(BEAT_S, self._beat)

    def _watch(self) -> None:
        while not self._stop.wait(BEAT_S):
            beat, since = self._beats, self._beat_cpu
            used = time.clock_gettime(self._clock) - since
            if used <= self._threshold or beat == self._reported_beat:
                continue
            self._reported_beat = beat
            frame = sys._current_frames().get(self._thread_id)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "?"
            log.warning(
                "%s: %d ms of CPU without yielding (threshold %d ms); the loop is at:\n%s",
                STALL_MARKER,
                used * 1000,
                self._threshold * 1000,
                stack.rstrip(),
            )


def from_environment(loop: asyncio.AbstractEventLoop) -> LoopWatchdog | None:
    """A started watchdog when ``HEADWATER_STALL_REPORT_MS`` asks for one, else None."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        threshold_ms = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds; no stall reports", ENV, raw)
        return None
    if threshold_ms <= 0:
        return None
    watchdog = LoopWatchdog(loop, threshold_ms / 1000)
    watchdog.start()
    return watchdog
