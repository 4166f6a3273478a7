"""Idle connections: open N raw TCP clients, each CONNECT + PING answered by PONG, then hold.

Raw sockets, not nats-py: a NATS client object per connection would cost this process far
more than the server, and the handshake is all an idle client ever does. The server's
resident set is read from /proc/<pid>/status while every connection is held.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import uvloop
from servers import rss_kib

CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"lang":"bench","version":"0"}\r\nPING\r\n'
# Connections being set up at once: stays well under both servers' listen backlogs, so no SYN
# is dropped and retried a second later (that would measure TCP's retry timer, not the server).
CONCURRENCY = 200
SETTLE_S = 1.0


@dataclass(frozen=True)
class IdleConnections:
    count: int
    open_seconds: float
    rss_before_kib: int
    rss_held_kib: int
    server_fds: int  # open descriptors in the server while the connections were held

    @property
    def per_conn_kib(self) -> float:
        return (self.rss_held_kib - self.rss_before_kib) / self.count if self.count else 0.0


def hold_idle(host: str, port: int, pid: int, count: int) -> IdleConnections:
    """Open ``count`` handshaken connections to the server ``pid`` and measure it holding them."""
    return uvloop.run(_hold_idle(host, port, pid, count))


async def _handshake(host: str, port: int, gate: asyncio.Semaphore) -> asyncio.StreamWriter:
    async with gate:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            info = await asyncio.wait_for(reader.readline(), 10)
            if not info.startswith(b"INFO "):
                raise RuntimeError(f"expected INFO, got {info[:80]!r}")
            writer.write(CONNECT)
            while True:
                line = await asyncio.wait_for(reader.readline(), 10)
                if line == b"PONG\r\n":
                    return writer
                if not line or line.startswith(b"-ERR"):
                    raise RuntimeError(f"handshake refused: {line[:80]!r}")
                # Anything else (a server PING, +OK) is harmless while handshaking.
        except BaseException:
            writer.close()
            raise


async def _hold_idle(host: str, port: int, pid: int, count: int) -> IdleConnections:
    await asyncio.sleep(SETTLE_S)
    before = rss_kib(pid)
    gate = asyncio.Semaphore(CONCURRENCY)
    start = time.perf_counter()
    tasks = [asyncio.ensure_future(_handshake(host, port, gate)) for _ in range(count)]
    try:
        writers = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, asyncio.StreamWriter):
                result.close()
        raise
    open_seconds = time.perf_counter() - start
    try:
        # Let the server finish whatever it does after a handshake (buffers, timers) first.
        await asyncio.sleep(SETTLE_S)
        held = rss_kib(pid)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    finally:
        for writer in writers:
            writer.close()
        await asyncio.sleep(0)
    return IdleConnections(count, open_seconds, before, held, fds)
