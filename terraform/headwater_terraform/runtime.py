"""One asyncio loop in a background thread, and one nats-py connection per provider connection.

Terraform calls the provider from a pool of gRPC threads (up to 10 operations at once);
nats-py is asyncio. Every call hands a coroutine to the one loop, which owns the connections,
so concurrent operations share a connection safely and never race on its state.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.aio.client import Client

from headwater_terraform.connection import Connection

T = TypeVar("T")

CALL_TIMEOUT = 60.0
"""Seconds one provider operation may take before it is reported as failed."""


class Runtime:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="headwater-nats", daemon=True
        )
        self._thread.start()
        self._clients: dict[Connection, Client] = {}
        self._connecting: dict[Connection, asyncio.Lock] = {}

    def run(
        self,
        connection: Connection,
        body: Callable[[Client], Awaitable[T]],
        timeout: float = CALL_TIMEOUT,
    ) -> T:
        """Run ``body(nc)`` on the loop with a connection for ``connection``; blocks the caller."""

        async def call() -> T:
            nc = await self._client(connection)
            return await body(nc)

        future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        return future.result(timeout)

    async def _client(self, connection: Connection) -> Client:
        lock = self._connecting.setdefault(connection, asyncio.Lock())
        async with lock:
            nc = self._clients.get(connection)
            if nc is not None and nc.is_connected:
                return nc
            if nc is not None:
                # The server went away (a test restarts it, or it was redeployed): start over.
                await _close_quietly(nc)
            nc = await connection.connect("headwater-terraform")
            self._clients[connection] = nc
            return nc

    def close(self) -> None:
        async def close_all() -> None:
            for nc in self._clients.values():
                await _close_quietly(nc)
            self._clients.clear()

        asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()  # else the collector reports an unclosed loop


async def _close_quietly(nc: Client) -> None:
    # A broken connection may fail to close; it is dropped either way.
    with contextlib.suppress(Exception):
        await nc.close()
