"""/healthz: the probe Kubernetes and load balancers ask, with nats-server's answers.

The order of checks and the status codes follow nats-server's ``healthz`` (monitor.go):

1. not accepting clients (starting, shutting down, or in lame-duck mode, where nats-server has
   closed its client listener): 500 ``{"status": "error", "error": ...}``;
2. ``js-server-only=true``: stop here, 200;
3. JetStream not configured: 200 (``js-enabled-only`` does not fail a server without it);
4. JetStream configured but not running: 503 ``{"status": "unavailable", ...}``;
5. ``js-enabled-only=true``: stop here, 200;
6. otherwise the JetStream service's own check, if it has one: 503 "unavailable" on failure.
   ``js-meta-only=true`` stops that check after the meta layer (in a cluster: contact with,
   and being current with, the metadata's leader), as nats-server does; a single server has
   no meta layer, so for it the parameter changes nothing (in nats-server either).

The deprecated ``js-enabled`` parameter is read as ``js-enabled-only``, as nats-server does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headwater.server.monitoring.params import Query

if TYPE_CHECKING:
    from headwater.server.node import Server

OK = 200
NOT_READY = 500
UNAVAILABLE = 503

JS_NOT_ENABLED = "JetStream not enabled"


@dataclass(frozen=True)
class HealthzOptions:
    js_enabled_only: bool = False
    js_server_only: bool = False
    js_meta_only: bool = False

    @classmethod
    def from_query(cls, query: Query) -> HealthzOptions:
        # Decoded in nats-server's order, so the first bad parameter is the one reported.
        legacy = query.boolean("js-enabled")
        enabled_only = query.boolean("js-enabled-only")
        server_only = query.boolean("js-server-only")
        meta_only = query.boolean("js-meta-only")
        return cls(
            js_enabled_only=enabled_only or legacy,
            js_server_only=server_only,
            js_meta_only=meta_only,
        )


def healthz(server: Server, options: HealthzOptions | None = None) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for ``server``'s health under ``options``."""
    opts = options or HealthzOptions()
    if server.lame_duck:
        return NOT_READY, _error("error", "server is in lame duck mode: not accepting clients")
    if not server.ready:
        return NOT_READY, _error("error", "server is not ready for client connections")
    if opts.js_server_only or not server.settings.jetstream.enabled:
        return OK, {"status": "ok"}
    js = server.jetstream
    if js is None:
        # JetStream is configured but its service is not running (failed or not started).
        return UNAVAILABLE, _error("unavailable", JS_NOT_ENABLED)
    if opts.js_enabled_only:
        return OK, {"status": "ok"}
    check = getattr(js, "meta_health_error" if opts.js_meta_only else "health_error", None)
    problem = check() if callable(check) else None
    if problem:
        return UNAVAILABLE, _error("unavailable", str(problem))
    return OK, {"status": "ok"}


def _error(status: str, error: str) -> dict[str, Any]:
    return {"status": status, "error": error}
