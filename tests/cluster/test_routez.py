"""/routez on a formed 3-server cluster: the shape nats-server 2.15 returns, and its values.

What nats-server 2.15.1 returns for ``GET /routez`` (no query) on a server of a 3-node cluster:

- top level: ``server_id``, ``server_name``, ``now``, ``num_routes``, ``routes``;
- ``num_routes`` counts route connections, not remote servers: with the default route pool
  (``cluster.pool_size`` 3 in /varz) each remote has 3 routes plus one pinned to the system
  account (``"account": "$SYS"``), so a 3-node cluster shows 8 on every server;
- each route: ``rid``, ``remote_id``, ``remote_name``, ``did_solicit``, ``is_configured``,
  ``ip``, ``port``, ``start``, ``last_activity``, ``rtt``, ``uptime``, ``idle``,
  ``pending_size``, ``in_msgs``, ``out_msgs``, ``in_bytes``, ``out_bytes``,
  ``subscriptions``, ``compression`` (``"off"``), and ``account`` on pinned routes only;
  ``subscriptions_list`` appears with ``?subs=1`` when the route has subscriptions.

Headwater may leave out route keys only where docs/DIFFERENCES.md names them (as `key`, on a
line that mentions /routez); it may not add keys nats-server does not have.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cluster.helpers import KINDS

from headwater.testing import Cluster

pytestmark = pytest.mark.timeout(30)

TOP_KEYS = {"server_id", "server_name", "now", "num_routes", "routes"}
ROUTE_KEYS = {
    "rid",
    "remote_id",
    "remote_name",
    "did_solicit",
    "is_configured",
    "ip",
    "port",
    "start",
    "last_activity",
    "rtt",
    "uptime",
    "idle",
    "pending_size",
    "in_msgs",
    "out_msgs",
    "in_bytes",
    "out_bytes",
    "subscriptions",
    "compression",
}
#: Present only on some routes or with some queries, in nats-server too.
OPTIONAL_ROUTE_KEYS = {"account", "subscriptions_list", "subscriptions_list_detail"}
#: Needed by the rest of this suite (and asked for by the clustering issue): never omitted.
REQUIRED_ROUTE_KEYS = {
    "rid",
    "remote_id",
    "remote_name",
    "did_solicit",
    "ip",
    "port",
    "pending_size",
    "in_msgs",
    "out_msgs",
}

DIFFERENCES = Path(__file__).resolve().parents[2] / "docs" / "DIFFERENCES.md"


def documented_omissions() -> set[str]:
    """Route keys docs/DIFFERENCES.md says Headwater's /routez leaves out."""
    lines = [ln for ln in DIFFERENCES.read_text().splitlines() if "/routez" in ln]
    return {key for ln in lines for key in re.findall(r"`([a-z_]+)`", ln)}


@pytest.mark.parametrize("cluster", KINDS, indirect=True)
def test_routez_shape_and_values(cluster: Cluster) -> None:
    allowed_missing = documented_omissions() if cluster.kinds[0] == "headwater" else set()
    ids = [cluster.varz(i)["server_id"] for i in range(len(cluster))]
    for i, name in enumerate(cluster.names):
        routez = cluster.routez(i)
        assert set(routez) == TOP_KEYS, name
        assert (routez["server_name"], routez["server_id"]) == (name, ids[i])
        routes = routez["routes"]
        assert routez["num_routes"] == len(routes)
        others = {n: ids[j] for j, n in enumerate(cluster.names) if j != i}
        assert {r["remote_name"] for r in routes} == set(others), name
        for route in routes:
            keys = set(route)
            assert keys <= ROUTE_KEYS | OPTIONAL_ROUTE_KEYS, f"{name}: extra {keys - ROUTE_KEYS}"
            missing = ROUTE_KEYS - keys
            assert not missing & REQUIRED_ROUTE_KEYS, f"{name}: missing {missing}"
            assert missing <= allowed_missing, f"{name}: undocumented missing {missing}"
            assert route["remote_id"] == others[route["remote_name"]]
            assert route["ip"] == "127.0.0.1"
            assert isinstance(route["rid"], int)
            assert isinstance(route["did_solicit"], bool)
            for counter in ("pending_size", "in_msgs", "out_msgs"):
                assert isinstance(route[counter], int) and route[counter] >= 0
        # s2 and s3 dialled the seed: their routes to s1 are solicited, to its cluster port.
        if i > 0:
            to_seed = [r for r in routes if r["remote_name"] == "s1"]
            assert all(r["did_solicit"] for r in to_seed), to_seed
            assert {r["port"] for r in to_seed} == {cluster.cluster_ports[0]}
        else:  # the seed has no --routes: every route to it was accepted
            assert not any(r["did_solicit"] for r in routes)
            assert {r["port"] for r in routes}.isdisjoint(cluster.cluster_ports)
