"""/metrics: Prometheus text exposition under prometheus-nats-exporter's metric names.

Dashboards built for NATS scrape the exporter, which polls the monitoring endpoints and names
each number ``gnatsd_<endpoint>_<json field>`` with a ``server_id`` label: every numeric /varz
field becomes ``gnatsd_varz_<field>``, the string fields ``server_id``, ``server_name`` and
``version`` become a gauge of 1 with the string in a ``value`` label, /subsz numbers become
``gnatsd_subsz_<field>``, /connz gives its totals plus per-field sums over the listed
connections (``gnatsd_connz_in_msgs`` ...), and /healthz gives ``gnatsd_healthz_status`` (0 =
ok, the error text in ``value``). We serve the same series directly, so an existing dashboard
can scrape the server without running the exporter.

The exporter marks the connz sums as counters. prometheus_client would rename a counter to
``..._total``, which would break those dashboards, so they are exposed as gauges: the sample
names stay identical, and ``rate()`` works on them all the same.

Each server gets its own registry holding one collector that reads the server on every scrape;
nothing is registered in prometheus_client's global registry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from headwater.server.monitoring.connz import connz
from headwater.server.monitoring.healthz import healthz
from headwater.server.monitoring.subsz import subsz
from headwater.server.monitoring.varz import varz

if TYPE_CHECKING:
    from headwater.server.node import Server

#: The exporter's default namespace (kept from gnatsd days so dashboards keep working).
NAMESPACE = "gnatsd"

#: The classic Prometheus text format; every Prometheus version reads it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LABEL_FIELDS = ("server_id", "server_name", "version")
_CONNZ_SUMS = ("pending_bytes", "subscriptions", "in_bytes", "out_bytes", "in_msgs", "out_msgs")


class ServerCollector:
    """A prometheus_client collector reading one server's monitoring documents."""

    def __init__(self, server: Server, namespace: str = NAMESPACE) -> None:
        self.server = server
        self.namespace = namespace

    def collect(self) -> Iterator[Metric]:
        server = self.server
        sid = server.server_id
        doc = varz(server)
        yield from self._numbers("varz", doc, sid)
        for field in _LABEL_FIELDS:
            family = GaugeMetricFamily(
                self._name("varz", field), field, labels=["server_id", "value"]
            )
            family.add_metric([sid, str(doc[field])], 1)
            yield family
        yield from self._numbers("subsz", subsz(server), sid)
        conns = connz(server)
        yield from self._numbers("connz", conns, sid)
        for field in _CONNZ_SUMS:
            total = sum(c[field] for c in conns["connections"])
            yield self._gauge("connz", field, sid, total)
        code, body = healthz(server)
        status = GaugeMetricFamily(
            self._name("healthz", "status"), "status", labels=["server_id", "value"]
        )
        ok = code == 200
        status.add_metric([sid, "ok" if ok else str(body.get("error", ""))], 0 if ok else 1)
        yield status

    def _numbers(self, endpoint: str, doc: Mapping[str, Any], sid: str) -> Iterator[Metric]:
        """A gauge per top-level number, as the exporter makes them (booleans are skipped)."""
        for field, value in doc.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            yield self._gauge(endpoint, field, sid, value)

    def _gauge(self, endpoint: str, field: str, sid: str, value: float) -> Metric:
        family = GaugeMetricFamily(self._name(endpoint, field), field, labels=["server_id"])
        family.add_metric([sid], value)
        return family

    def _name(self, endpoint: str, field: str) -> str:
        return f"{self.namespace}_{endpoint}_{field}"


class MetricsEndpoint:
    """The registry behind one server's /metrics."""

    def __init__(self, server: Server) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ServerCollector(server))

    def render(self) -> bytes:
        return generate_latest(self.registry)
