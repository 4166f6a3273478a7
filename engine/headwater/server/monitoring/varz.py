"""/varz: server identity, limits, totals and process usage, under nats-server's field names.

Field names, JSON types and units follow nats-server's ``Varz`` (monitor.go): durations
configured in seconds are integer nanoseconds (``ping_interval``, ``write_deadline``) except
``auth_timeout`` and ``tls_timeout``, which are float seconds; booleans such as
``auth_required`` are left out when false. Subsystems we do not have (cluster, gateway, leaf
nodes, MQTT, websocket) are the empty objects nats-server shows when they are not configured.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from headwater.server.jetstream import layout
from headwater.server.jetstream.versioning import PROTOCOL_VERSION
from headwater.server.monitoring.formats import go_number, nanos, rfc3339, uptime
from headwater.server.monitoring.usage import PROCESS_CPU, cores, rss_bytes
from headwater.server.node import ADVERTISED_VERSION

if TYPE_CHECKING:
    from headwater.server.node import Server

#: What we put where nats-server names its Go version; the same value the INFO line carries.
GO_FIELD = "headwater"

#: Protocol level nats-server advertises to clients (supports async INFO); INFO's value.
PROTO = PROTOCOL_VERSION


def varz(
    server: Server, http_req_stats: Mapping[str, int] | None = None, now: float | None = None
) -> dict[str, Any]:
    """The /varz document for ``server``; ``http_req_stats`` counts requests per path."""
    settings = server.settings
    now = time.time() if now is None else now
    start = server.start_time
    ncores = cores()
    out: dict[str, Any] = {
        "server_id": server.server_id,
        "server_name": server.name,
        "version": ADVERTISED_VERSION,
        "proto": PROTO,
        "go": GO_FIELD,
        "host": settings.host,
        "port": server.port,
    }
    if settings.auth.required:
        out["auth_required"] = True
    if server.tls_context is not None:
        out["tls_required"] = True
        if settings.tls.verify:
            out["tls_verify"] = True
    out.update(
        {
            "max_connections": settings.max_connections,
            "ping_interval": nanos(settings.ping_interval),
            "ping_max": settings.max_pings_out,
            "http_host": settings.http_host,
            # The configured value, as nats-server reports it (-1 stays -1); the bound port is
            # in the log line and in Server.http_port.
            "http_port": settings.http_port,
            "http_base_path": "",
            "https_port": 0,
            "auth_timeout": go_number(float(settings.auth.timeout)),
            "max_control_line": settings.max_control_line,
            "max_payload": settings.max_payload,
            "max_pending": settings.max_pending,
            "cluster": {},
            "gateway": {},
            "leaf": {},
            "mqtt": {},
            "websocket": {},
            "jetstream": jetstream_varz(server),
            "tls_timeout": go_number(float(settings.tls.timeout)),
            "write_deadline": nanos(settings.write_deadline),
            "start": rfc3339(start),
            "now": rfc3339(now),
            "uptime": uptime(now - start),
            "mem": rss_bytes(),
            "cores": ncores,
            # Go's GOMAXPROCS is how many threads run code at once; ours is one event loop.
            "gomaxprocs": 1,
            "cpu": go_number(PROCESS_CPU.percent()),
            "connections": len(server.clients),
            "total_connections": server.total_connections,
            "routes": 0,
            "remotes": 0,
            "leafnodes": 0,
            "in_msgs": server.in_msgs,
            "out_msgs": server.out_msgs,
            "in_bytes": server.in_bytes,
            "out_bytes": server.out_bytes,
            "slow_consumers": server.slow_consumers,
            "subscriptions": server.num_subscriptions(),
            "http_req_stats": dict(http_req_stats or {}),
            "config_load_time": rfc3339(getattr(server, "config_load_time", start)),
            # Every slow consumer here is a client: there are no routes, gateways or leafs.
            "slow_consumer_stats": {
                "clients": server.slow_consumers,
                "routes": 0,
                "gateways": 0,
                "leafs": 0,
            },
        }
    )
    return out


def jetstream_varz(server: Server) -> dict[str, Any]:
    """The ``jetstream`` section: ``{}`` unless JetStream runs, as in nats-server.

    The JetStream service, once running, is ``server.jetstream``. If it offers ``varz()`` its
    answer (nats-server's ``{"config": ..., "stats": ...}`` shape) is used as is; otherwise the
    config part is derived from the settings, resolving the "-1 = automatic" limits the way
    nats-server does (75% of physical memory, 75% of the free space under the store dir) and
    reporting the store dir as nats-server does, with its ``jetstream`` subdirectory.
    """
    js = getattr(server, "jetstream", None)
    if js is None:
        return {}
    describe = getattr(js, "varz", None)
    if callable(describe):
        section = describe()
        if isinstance(section, dict):
            return section
    cfg = server.settings.jetstream
    store_dir = str(getattr(js, "store_dir", "") or layout.jetstream_root(cfg.store_dir))
    config: dict[str, Any] = {
        "max_memory": cfg.max_memory_store if cfg.max_memory_store >= 0 else _auto_memory(),
        "max_storage": (
            cfg.max_file_store if cfg.max_file_store >= 0 else _auto_storage(store_dir)
        ),
        "store_dir": store_dir,
    }
    if cfg.sync_interval > 0:
        config["sync_interval"] = nanos(cfg.sync_interval)
    else:
        # 0 (fsync before each ack) and -1 ("always") both mean no acknowledged write waits
        # for a timer: nats-server's closest notion is sync_always.
        config["sync_always"] = True
    if cfg.domain:
        config["domain"] = cfg.domain
    return {"config": config}


def _auto_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4
    except (AttributeError, ValueError, OSError):
        return -1


def _auto_storage(store_dir: str) -> int:
    path = store_dir or "."
    # The store dir may not exist yet; its nearest existing parent is on the same disk.
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        st = os.statvfs(path or ".")
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize * 3 // 4
