"""Prometheus metrics: reconciles, errors and drift, on a registry of the operator's own.

A registry per operator (not prometheus_client's global one) lets several operators run in
one process, as the tests do, without "duplicated timeseries" errors.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter(
            "headwater_operator_reconciles",
            "Reconciles of one resource, by kind, trigger (create, update, resume, sync, "
            "delete) and outcome (the action taken, or the failure).",
            ["kind", "trigger", "outcome"],
            registry=self.registry,
        )
        self.errors = Counter(
            "headwater_operator_errors",
            "Failed reconciles, by kind and reason (the InSync condition's reason).",
            ["kind", "reason"],
            registry=self.registry,
        )
        self.drift = Counter(
            "headwater_operator_drift",
            "Drift found by the sync timer, by kind and what was done (corrected, reported).",
            ["kind", "handling"],
            registry=self.registry,
        )
        self.connections = Gauge(
            "headwater_operator_nats_connections",
            "Open NATS connections (one per distinct connection setting).",
            registry=self.registry,
        )
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics in a thread; returns the bound port (useful with port 0)."""
        server, thread = start_http_server(port, host, registry=self.registry)
        self._server, self._thread = server, thread
        return int(server.server_port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
