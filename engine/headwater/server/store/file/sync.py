"""Group commit: many ``durable()`` callers share one fsync, run off the event loop.

Every change bumps ``written``. ``wait()`` remembers the generation it needs; if no fsync is in
flight it starts one, otherwise it waits for the running one and, if that one started before
its change was written, for the next. So while one fsync runs, every publish that arrives
queues behind a single follow-up fsync: fsyncs per second stay bounded by the disk's latency
whatever the publish rate. The fsync itself runs in the default thread pool, so the event loop
keeps accepting (and buffering) publishes meanwhile.

The store supplies ``prepare()`` (on the loop: flush buffers to the OS and return a ``SyncJob``
naming what to fsync) — nothing in the job is touched by the loop until ``finish()`` runs.

A failed round is never retried. After a failed fsync Linux may have dropped the dirty pages
and cleared the error, so a second fsync that succeeds proves nothing; after a failed write we
no longer know what the file holds. The commit records the ``failure``, tells the store
(``on_failure``), and from then on every ``wait()`` raises it: the store must be reopened from
disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol


class SyncJob(Protocol):
    def run(self) -> None:
        """Blocking part (fsyncs); runs in a worker thread."""

    def finish(self) -> None:
        """Back on the loop thread once ``run`` succeeded (close fds, complete renames)."""

    def abort(self) -> None:
        """Back on the loop thread after ``run`` failed: hand resources back to the store."""


log = logging.getLogger("headwater.store")


class GroupCommit:
    def __init__(
        self,
        prepare: Callable[[], SyncJob],
        on_failure: Callable[[BaseException], None] = lambda exc: None,
    ) -> None:
        self._prepare = prepare
        self._on_failure = on_failure
        self.failure: BaseException | None = None
        """The error that stopped the commit (see the module docstring)."""
        self.written = 0
        """Generation of the latest change."""
        self.synced = 0
        """Generation known to be on stable storage."""
        self.fsyncs = 0
        """Completed sync rounds (each fsyncs every dirty file once)."""
        self._inflight: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False
        """Set by ``stop()``: no new rounds; the closing store does a final ``sync_now``."""
        self._final: asyncio.Event | None = None
        self._final_done = False

    def dirty(self) -> None:
        self.written += 1

    @property
    def busy(self) -> bool:
        return self._inflight is not None

    async def wait(self) -> None:
        """Return once every change made before the call is durable."""
        target = self.written
        while self.synced < target:
            if self.failure is not None:
                raise self.failure
            if self._stopped:
                # Closing: the store's final sync covers us; wait for it, not a new round.
                if self._final_done:
                    return
                if self._final is None:
                    self._final = asyncio.Event()
                await self._final.wait()
                return
            if self._inflight is None:
                self._inflight = asyncio.ensure_future(self._round())
            await asyncio.shield(self._inflight)

    def _fail(self, exc: BaseException) -> None:
        if self.failure is None and isinstance(exc, Exception):
            self.failure = exc
            self.stop()
            self._on_failure(exc)

    async def _round(self) -> None:
        try:
            gen = self.written
            try:
                job = self._prepare()
            except BaseException as exc:
                self._fail(exc)
                raise
            try:
                await asyncio.get_running_loop().run_in_executor(None, job.run)
            except BaseException as exc:
                job.abort()
                self._fail(exc)
                raise
            job.finish()
            self.fsyncs += 1
            self.synced = max(self.synced, gen)
        finally:
            self._inflight = None

    def kick(self) -> None:
        """Start a background round if changes are pending (e.g. a block rewrite waits for one)."""
        if (
            self._inflight is None
            and self.synced < self.written
            and not self._stopped
            and self.failure is None
        ):
            self._inflight = asyncio.ensure_future(self._round())
            self._inflight.add_done_callback(_log_failure)

    async def drain(self) -> None:
        """Wait for an in-flight round (before closing files under it); its failure, if it
        fails, is already recorded in ``failure``."""
        if self._inflight is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._inflight)

    def finished(self) -> None:
        """The closing store's final sync is done: release waiters (loop thread)."""
        self._final_done = True
        if self._final is not None:
            self._final.set()

    def sync_now(self) -> None:
        """A blocking round on the calling thread (close, ``always`` mode, no event loop)."""
        if self.failure is not None:
            raise self.failure
        gen = self.written
        try:
            job = self._prepare()
        except BaseException as exc:
            self._fail(exc)
            raise
        try:
            job.run()
        except BaseException as exc:
            job.abort()
            self._fail(exc)
            raise
        job.finish()
        self.fsyncs += 1
        self.synced = max(self.synced, gen)

    def start_interval(self, seconds: float) -> None:
        """Fsync every ``seconds`` while there are unsynced changes (``interval`` policy)."""
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self.kick()
            if not self._stopped:
                self._timer = loop.call_later(seconds, tick)

        self._timer = loop.call_later(seconds, tick)

    @property
    def has_timer(self) -> bool:
        return self._timer is not None

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _log_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("background fsync failed", exc_info=fut.exception())
