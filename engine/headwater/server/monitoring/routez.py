"""/routez: the routes to the other servers of the cluster, as nats-server reports them.

``subs=1`` adds each route's ``subscriptions_list`` (the remote interest it carries, subject
and queue as nats-server prints them). Headwater never pools routes nor compresses them, so
``compression`` is always ``"not supported"`` (what nats-server shows for such a route).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from headwater.server.monitoring.formats import rfc3339, rtt, uptime
from headwater.server.monitoring.params import Query

if TYPE_CHECKING:
    from headwater.server.cluster.route import RouteConnection
    from headwater.server.node import Server


def routez(server: Server, query: Query | None = None, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    with_subs = query.boolean("subs") if query is not None else False
    cluster = server.cluster
    routes = list(cluster.routes.values()) if cluster is not None else []
    return {
        "server_id": server.server_id,
        "server_name": server.name,
        "now": rfc3339(now),
        "num_routes": len(routes),
        "routes": [_route(r, now, with_subs, cluster) for r in routes],
    }


def _route(route: RouteConnection, now: float, with_subs: bool, cluster: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "rid": route.cid,
        "remote_id": route.remote_id,
        "remote_name": route.remote_name,
        "did_solicit": route.solicited,
        "is_configured": route.url is not None and route.url in cluster.configured,
        "ip": route.ip,
        "port": route.port,
        "start": rfc3339(route.start),
        "last_activity": rfc3339(route.last_activity),
        "rtt": rtt(route.rtt),
        "uptime": uptime(now - route.start),
        "idle": uptime(now - route.last_activity),
        "pending_size": route.out_size,
        "in_msgs": route.in_msgs,
        "out_msgs": route.out_msgs,
        "in_bytes": route.in_bytes,
        "out_bytes": route.out_bytes,
        "subscriptions": len(route.subs),
        "compression": "not supported",
    }
    if with_subs:
        doc["subscriptions_list"] = sorted(
            f"{s.subject} {s.queue}" if s.queue else s.subject for s in route.subs.values()
        )
    return doc


__all__ = ["routez"]
