"""A KV watch survives a restart of the server (same store, same port) and misses no update.

nats-py reconnects by itself; its watcher is an ordered consumer, which notices the lost
consumer through missing heartbeats or a sequence gap and recreates it after the last
revision it delivered. The same scenario runs against nats-server (stopped cleanly there:
after a kill it may have lost acknowledged writes, which is a different promise).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import nats
import pytest

from headwater.testing import ServerProcess


@pytest.fixture
def lone_server(js_server: ServerProcess) -> Iterator[ServerProcess]:
    srv = ServerProcess(js_server.kind, jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


async def _watch_across_restart(srv: ServerProcess, restart: object) -> None:
    nc = await nats.connect(
        srv.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2, connect_timeout=2
    )
    try:
        js = nc.jetstream()
        kv = await js.create_key_value(bucket="live", history=5)
        await kv.put("k0", b"0")
        watcher = await kv.watchall()
        seen: list[tuple[str, bytes, int]] = []

        async def collect(until: int, timeout: float) -> None:
            async def run() -> None:
                while len(seen) < until:
                    entry = await watcher.updates(timeout=timeout)
                    if entry is not None:
                        seen.append((entry.key, entry.value or b"", entry.revision))

            await asyncio.wait_for(run(), timeout)

        await collect(1, 5)
        for i in range(1, 4):
            await kv.put(f"k{i}", b"%d" % i)
        await collect(4, 5)

        await asyncio.to_thread(restart)  # type: ignore[arg-type]

        async def put_after_reconnect(key: str, value: bytes) -> None:
            for _ in range(100):
                try:
                    await kv.put(key, value)
                    return
                except Exception:
                    await asyncio.sleep(0.1)
            raise AssertionError("the server never came back")

        for i in range(4, 9):
            await put_after_reconnect(f"k{i}", b"%d" % i)
        await collect(9, 30)
        assert seen == [(f"k{i}", b"%d" % i, i + 1) for i in range(9)]
        await watcher.stop()
    finally:
        await nc.close()


@pytest.mark.slow
async def test_kv_watch_survives_a_restart(lone_server: ServerProcess) -> None:
    await _watch_across_restart(lone_server, lone_server.restart)


@pytest.mark.slow
async def test_kv_watch_survives_kill_9(headwater: ServerProcess) -> None:
    def kill_and_start() -> None:
        headwater.kill()
        headwater.restart()

    await _watch_across_restart(headwater, kill_and_start)
