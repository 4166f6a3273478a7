"""The :class:`headwater.testing.Cluster` fixture itself: a cluster port taken is retried."""

from __future__ import annotations

import socket

import pytest
from cluster.helpers import KINDS

from headwater import testing

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("kind", KINDS)
def test_cluster_port_taken_before_start_is_retried(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server exits with "address already in use" when its route port is taken after
    "Server is ready"; the fixture starts that server again on another port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        real = testing.free_ports
        calls: list[int] = []

        def first_busy(n: int, host: str = "127.0.0.1") -> list[int]:
            calls.append(n)
            ports = real(n, host)
            return [busy, *ports[1:]] if len(calls) == 1 else ports

        monkeypatch.setattr(testing, "free_ports", first_busy)
        with testing.Cluster(kind, 2) as cluster:
            assert cluster.cluster_ports[0] != busy
            assert len(calls) == 2
