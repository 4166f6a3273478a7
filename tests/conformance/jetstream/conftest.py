"""A nats-py connection to the module's JetStream server of each kind (``js_server``, from
the root conftest): every test here runs against Headwater and nats-server. ``headwater`` is a
fresh Headwater server alone, for tests that kill it: only Headwater promises acknowledged
writes survive a kill (nats-server fsyncs every 2 minutes by default)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

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
