"""A per-pass time budget for long loops that run on the event loop.

A loop over a whole archive or store would stall every client while it runs (docs/OWNERSHIP.md,
rule 5). Counting iterations between yields is not enough: 2,048 small messages take a few
milliseconds, 2,048 messages of a megabyte take seconds. :class:`PassBudget` measures time
instead: ``await budget.tick()`` after each unit of work yields to the loop once the current
pass has run for ``slice_s``.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["SLICE_S", "PassBudget"]

SLICE_S = 0.02
"""How long one pass may run before it yields: a fifth of the 100 ms a client may wait."""


class PassBudget:
    def __init__(self, slice_s: float = SLICE_S) -> None:
        self._slice = slice_s
        self._since = time.perf_counter()

    def spent(self) -> bool:
        return time.perf_counter() - self._since >= self._slice

    async def tick(self) -> None:
        """Yield to the event loop if this pass has used its slice."""
        if time.perf_counter() - self._since >= self._slice:
            await asyncio.sleep(0)
            self._since = time.perf_counter()
