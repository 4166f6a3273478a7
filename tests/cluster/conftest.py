"""Fixtures for the cluster suite: 3-server clusters of nats-server, Headwater, or both mixed.

``cluster`` is parametrized indirectly by the tests (``KINDS`` or ``CORE_KINDS`` from
:mod:`cluster.helpers`) and gives a formed :class:`headwater.testing.Cluster`, one per test;
``clients`` connects one nats-py client to each of its servers, in server order.

``js_cluster`` is the same with JetStream on every server (parametrized the same way, usually
with ``KINDS``), handed over once every server answers ``$JS.API.INFO``; ``js_clients`` are
its clients.

Starting and stopping a cluster costs seconds, so tests that leave every server running share
one per module and kind: they parametrize ``module_cluster`` (or ``module_js_cluster``)
indirectly instead, and take ``shared_cluster`` and ``shared_clients`` (``shared_js_cluster``
and ``shared_js_clients``). pytest groups a module's tests by that parameter, so one cluster
runs at a time, and it stops as soon as the next test does not take it (not at the end of
the module, beside the clusters of the module's other tests). After each test,
``shared_js_cluster`` deletes every stream (the next test starts with none) and both check
that every server still runs (see :class:`cluster.helpers.SharedCluster`). A test that stops,
restarts or cuts off a server, or that needs a pristine cluster, keeps ``cluster`` /
``js_cluster``. Tests on a shared cluster also pass alone and in any order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from cluster.helpers import (
    SharedCluster,
    connect,
    kinds_of,
    remove_streams,
    require_nats_server,
    wait_jetstream,
)
from nats.aio.client import Client as NATS

from headwater.testing import Cluster


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    kinds = kinds_of(request.param)
    require_nats_server(kinds)
    with Cluster(kinds) as formed:
        yield formed


async def _clients(cluster: Cluster) -> AsyncIterator[list[NATS]]:
    """One nats-py client per server (no reconnect, so a failure shows at once), closed after
    the test (unless the test closed it)."""
    conns: list[NATS] = []
    try:
        for url in cluster.urls:
            conns.append(await connect(url))
        yield conns
    finally:
        for nc in conns:
            if not nc.is_closed:
                await nc.close()


@pytest.fixture
async def clients(cluster: Cluster) -> AsyncIterator[list[NATS]]:
    async for conns in _clients(cluster):
        yield conns


@pytest.fixture
async def js_cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    kinds = kinds_of(request.param)
    require_nats_server(kinds)
    with Cluster(kinds, jetstream=True) as formed:
        await wait_jetstream(formed)
        yield formed


@pytest.fixture
async def js_clients(js_cluster: Cluster) -> AsyncIterator[list[NATS]]:
    """One nats-py client per server of ``js_cluster``, in server order."""
    async for conns in _clients(js_cluster):
        yield conns


@pytest.fixture(scope="module")
def module_cluster(request: pytest.FixtureRequest) -> Iterator[SharedCluster]:
    """The cluster of ``request.param``'s kinds that a module's tests share (started lazily)."""
    shared = SharedCluster(kinds_of(request.param))
    try:
        yield shared
    finally:
        shared.close()


def _next_test_shares(request: pytest.FixtureRequest, argname: str) -> bool:
    """Whether the test run next takes the same shared cluster as this one.

    pytest stops a module-scoped fixture only after the module's last test, so a shared
    cluster would idle beside the clusters of the module's remaining tests; closed as soon as
    the next test does not use it (it starts again if a later one does), it does not.
    """
    items = request.session.items
    here = request.node
    at = items.index(here) if here in items else len(items)
    if at + 1 >= len(items):
        return False
    after = items[at + 1]
    mine = getattr(here, "callspec", None)
    theirs = getattr(after, "callspec", None)
    return (
        after.module is here.module  # type: ignore[attr-defined]
        and mine is not None
        and theirs is not None
        and argname in theirs.params
        and theirs.params[argname] == mine.params.get(argname)
    )


@pytest.fixture
def shared_cluster(
    module_cluster: SharedCluster, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """``module_cluster``'s cluster for one test; its servers must all run after it."""
    yield module_cluster.take()
    module_cluster.release()
    if not _next_test_shares(request, "module_cluster"):
        module_cluster.close()


@pytest.fixture
async def shared_clients(shared_cluster: Cluster) -> AsyncIterator[list[NATS]]:
    async for conns in _clients(shared_cluster):
        yield conns


@pytest.fixture(scope="module")
def module_js_cluster(request: pytest.FixtureRequest) -> Iterator[SharedCluster]:
    """The JetStream cluster a module's tests share, like ``module_cluster``."""
    shared = SharedCluster(kinds_of(request.param), jetstream=True)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
async def shared_js_cluster(
    module_js_cluster: SharedCluster, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    """``module_js_cluster``'s cluster for one test, JetStream answering on every server and
    no stream left by an earlier test; every stream the test made is deleted after it."""
    cluster = module_js_cluster.take()
    await wait_jetstream(cluster)
    yield cluster
    module_js_cluster.release()
    if not _next_test_shares(request, "module_js_cluster"):
        module_js_cluster.close()
        return
    try:
        await remove_streams(cluster)
    except BaseException:
        module_js_cluster.close()  # whatever is left, the next test starts on a fresh one
        raise


@pytest.fixture
async def shared_js_clients(shared_js_cluster: Cluster) -> AsyncIterator[list[NATS]]:
    async for conns in _clients(shared_js_cluster):
        yield conns
