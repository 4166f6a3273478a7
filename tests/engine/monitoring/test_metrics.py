"""/metrics: prometheus-nats-exporter's series, from a registry of the server's own."""

from __future__ import annotations

import prometheus_client
from prometheus_client.parser import text_string_to_metric_families

from headwater.server.monitoring.metrics import MetricsEndpoint
from headwater.server.node import ADVERTISED_VERSION, Server
from support.wire import WireClient


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def value(found: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    ((_labels, val),) = found[name]
    return val


async def test_exporter_names_and_values(node: Server) -> None:
    sub = await WireClient.connect(node.port, {})
    await sub.send("SUB m 1\r\nPING\r\n")
    await sub.expect("PONG")
    pub = await WireClient.connect(node.port, {})
    await pub.send("PUB m 3\r\nabc\r\nPING\r\n")
    await pub.expect("PONG")
    await sub.msg()
    found = samples(MetricsEndpoint(node).render().decode())
    sid = node.server_id
    assert found["gnatsd_varz_in_msgs"] == [({"server_id": sid}, 1.0)]
    assert value(found, "gnatsd_varz_out_bytes") == 3
    assert value(found, "gnatsd_varz_connections") == 2
    assert value(found, "gnatsd_varz_subscriptions") == 1
    assert value(found, "gnatsd_varz_ping_interval") == 120e9
    assert value(found, "gnatsd_varz_mem") > 0
    assert found["gnatsd_varz_version"] == [({"server_id": sid, "value": ADVERTISED_VERSION}, 1)]
    assert found["gnatsd_varz_server_name"][0][0]["value"] == node.name
    assert value(found, "gnatsd_subsz_num_subscriptions") == 1
    assert value(found, "gnatsd_subsz_num_matches") == 1
    assert value(found, "gnatsd_connz_num_connections") == 2
    assert value(found, "gnatsd_connz_total") == 2
    assert value(found, "gnatsd_connz_limit") == 1024
    # Sums over the connections, under the exporter's sample names (no _total suffix).
    assert value(found, "gnatsd_connz_in_msgs") == 1
    assert value(found, "gnatsd_connz_out_bytes") == 3
    assert value(found, "gnatsd_connz_subscriptions") == 1
    assert found["gnatsd_healthz_status"] == [({"server_id": sid, "value": "ok"}, 0)]
    # Objects and strings other than the three label fields do not become series.
    assert "gnatsd_varz_jetstream" not in found and "gnatsd_varz_uptime" not in found
    await sub.close()
    await pub.close()


async def test_unhealthy_status_carries_the_error(node: Server) -> None:
    node.lame_duck = True
    found = samples(MetricsEndpoint(node).render().decode())
    ((labels, val),) = found["gnatsd_healthz_status"]
    assert val == 1 and "lame duck" in labels["value"]
    node.lame_duck = False


async def test_each_server_has_its_own_registry(start: object) -> None:
    a = await start()  # type: ignore[operator]
    b = await start()  # type: ignore[operator]
    text_a = MetricsEndpoint(a).render().decode()
    text_b = MetricsEndpoint(b).render().decode()
    assert a.server_id in text_a and b.server_id not in text_a
    assert b.server_id in text_b
    # Nothing leaks into prometheus_client's process-wide registry.
    assert b"gnatsd_" not in prometheus_client.generate_latest(prometheus_client.REGISTRY)
