"""The event-loop stall watchdog names the code that computed too long, and only that."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import uvloop

from headwater.server.watchdog import STALL_MARKER, LoopWatchdog


def spin_for_cpu(seconds: float) -> None:
    """Burn the calling thread's CPU for ``seconds`` (CPU time, not wall time)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def run_with_watchdog(callback: object, threshold_s: float = 0.05) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        dog = LoopWatchdog(loop, threshold_s)
        dog.start()
        try:
            await asyncio.sleep(0.05)
            loop.call_soon(callback)  # type: ignore[arg-type]
            await asyncio.sleep(0.2)
        finally:
            dog.stop()

    uvloop.run(main())


def test_a_callback_that_computes_past_the_threshold_is_reported_with_its_stack(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="headwater.server"):
        run_with_watchdog(lambda: spin_for_cpu(0.3))
    reports = [r.getMessage() for r in caplog.records if STALL_MARKER in r.getMessage()]
    assert len(reports) == 1, reports  # once per stall, not once per look
    assert "spin_for_cpu" in reports[0]


def test_waiting_without_cpu_and_short_callbacks_are_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def short_and_sleepy() -> None:
        spin_for_cpu(0.01)
        time.sleep(0.2)  # blocked, not computing: no CPU used

    with caplog.at_level(logging.WARNING, logger="headwater.server"):
        run_with_watchdog(short_and_sleepy)
    assert not [r for r in caplog.records if STALL_MARKER in r.getMessage()]
