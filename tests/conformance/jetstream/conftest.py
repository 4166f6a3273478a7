"""A nats-py connection to the module's JetStream server of each kind (``js_server``, from
the root conftest): every test here runs against Headwater and nats-server. ``headwater`` is a
fresh Headwater server alone, for tests that kill it: only Headwater promises acknowledged
writes survive a kill (nats-server fsyncs every 2 minutes by default)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from headwater.testing import ServerProcess


@pytest.fixture
async def nc(js_server: ServerProcess) -> AsyncIterator[Client]:
    """A nats-py connection to ``js_server``, closed after the test even when it fails."""
    client = await nats.connect(js_server.url, allow_reconnect=False)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def headwater() -> Iterator[ServerProcess]:
    srv = ServerProcess("headwater", jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture(params=["ack", "interval"])
def hw(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh Headwater server alone, once per sync policy: the default (fsync before every
    ack) and a periodic one (``sync_interval: "2m"``), for tests of what survives a crash."""
    args: list[str] = []
    if request.param == "interval":
        conf = tmp_path / "sync.conf"
        conf.write_text('listen: 127.0.0.1:-1\njetstream { sync_interval: "2m" }\n')
        args = ["-c", str(conf)]
    srv = ServerProcess("headwater", args=args, jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


Connect = Callable[[ServerProcess], Awaitable[Client]]
"""``await clients(server)``: a nats-py connection (no reconnects) to a server a test kills."""


@pytest.fixture
async def clients() -> AsyncIterator[Connect]:
    """Connects to a server on demand; every connection made is closed after the test."""
    made: list[Client] = []

    async def connect(srv: ServerProcess) -> Client:
        made.append(await nats.connect(srv.url, allow_reconnect=False))
        return made[-1]

    yield connect
    for nc in made:
        if not nc.is_closed:
            await nc.close()
