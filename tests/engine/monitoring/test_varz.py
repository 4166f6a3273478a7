"""/varz: identity, configured limits in nats-server's units, live totals."""

from __future__ import annotations

import asyncio
import datetime
import time
from types import SimpleNamespace
from typing import Any

from headwater.server.config.settings import AuthSettings, JetStreamSettings
from headwater.server.monitoring.usage import CpuSampler
from headwater.server.monitoring.varz import jetstream_varz, varz
from headwater.server.node import ADVERTISED_VERSION, Server
from support.wire import WireClient


async def test_identity_and_configuration_fields(node: Server) -> None:
    doc = varz(node)
    assert doc["server_id"] == node.server_id
    assert doc["server_name"] == node.name
    assert doc["version"] == ADVERTISED_VERSION
    assert doc["proto"] == 1
    assert doc["host"] == "127.0.0.1"
    assert doc["port"] == node.port
    assert doc["max_connections"] == 64 * 1024
    # Durations are nanoseconds, as Go marshals time.Duration...
    assert doc["ping_interval"] == 120 * 10**9
    assert doc["write_deadline"] == 10 * 10**9
    # ...except the two nats-server keeps as float seconds, written without a fraction.
    assert doc["auth_timeout"] == 2 and isinstance(doc["auth_timeout"], int)
    assert doc["tls_timeout"] == 2
    assert doc["ping_max"] == 2
    assert doc["max_payload"] == 1024 * 1024
    assert doc["max_pending"] == 64 * 1024 * 1024
    assert doc["max_control_line"] == 4096
    assert doc["http_host"] == "127.0.0.1"
    assert doc["http_port"] == -1  # the configured value, like nats-server
    assert doc["routes"] == doc["remotes"] == doc["leafnodes"] == 0
    assert doc["jetstream"] == {}
    # Off switches are left out, not false.
    assert "auth_required" not in doc and "tls_required" not in doc


async def test_times_and_process_usage(node: Server) -> None:
    now = node.start_time + 62.5
    doc = varz(node, now=now)
    assert doc["uptime"] == "1m2s"
    start = datetime.datetime.fromisoformat(doc["start"].replace("Z", "+00:00"))
    assert abs(start.timestamp() - node.start_time) < 1e-3
    assert doc["now"].endswith("Z")
    assert doc["config_load_time"] == doc["start"]
    assert doc["mem"] > 10 * 1024 * 1024  # a Python process is at least this big
    assert doc["cores"] >= 1
    assert isinstance(doc["cpu"], int | float) and doc["cpu"] >= 0


async def test_totals_follow_traffic(node: Server) -> None:
    sub = await WireClient.connect(node.port, {})
    await sub.send("SUB t.* 1\r\nSUB t.x 2\r\nPING\r\n")
    await sub.expect("PONG")
    pub = await WireClient.connect(node.port, {})
    await pub.send("PUB t.x 5\r\nhello\r\nPUB nobody 3\r\nabc\r\nPING\r\n")
    await pub.expect("PONG")
    for _ in range(2):
        await sub.msg()
    doc = varz(node)
    assert doc["connections"] == 2
    assert doc["total_connections"] == 2
    assert doc["subscriptions"] == 2
    assert doc["in_msgs"] == 2
    assert doc["in_bytes"] == 8
    # One publish reached two subscriptions; the other reached none.
    assert doc["out_msgs"] == 2
    assert doc["out_bytes"] == 10
    await pub.close()
    await sub.close()
    for _ in range(100):
        if not node.clients:
            break
        await asyncio.sleep(0.01)
    doc = varz(node)
    assert doc["connections"] == 0
    assert doc["total_connections"] == 2
    assert doc["subscriptions"] == 0


async def test_slow_consumers_are_counted_as_clients(node: Server) -> None:
    node.slow_consumers = 3
    doc = varz(node)
    assert doc["slow_consumers"] == 3
    assert doc["slow_consumer_stats"] == {"clients": 3, "routes": 0, "gateways": 0, "leafs": 0}


async def test_auth_required_shows_when_configured(start: Any) -> None:
    srv = await start(auth=AuthSettings(token="s3cret", timeout=0.5))
    doc = varz(srv)
    assert doc["auth_required"] is True
    assert doc["auth_timeout"] == 0.5


async def test_request_stats_are_passed_through(node: Server) -> None:
    doc = varz(node, {"/varz": 4, "/connz": 1})
    assert doc["http_req_stats"] == {"/varz": 4, "/connz": 1}


async def test_jetstream_section_prefers_the_service_own_description(node: Server) -> None:
    described = {"config": {"max_memory": 1, "max_storage": 2, "store_dir": "/x"}, "stats": {}}
    node.jetstream = SimpleNamespace(varz=lambda: described)  # type: ignore[attr-defined]
    assert varz(node)["jetstream"] is described


async def test_jetstream_section_from_settings(start: Any, tmp_path: Any) -> None:
    js_settings = JetStreamSettings(
        enabled=False, store_dir=str(tmp_path), max_memory_store=1 << 30, sync_interval=120.0
    )
    srv = await start(jetstream=js_settings)
    assert jetstream_varz(srv) == {}  # nothing running: {} like nats-server
    srv.jetstream = SimpleNamespace()  # type: ignore[attr-defined]
    config = jetstream_varz(srv)["config"]
    assert config["max_memory"] == 1 << 30
    assert config["store_dir"] == str(tmp_path / "jetstream")
    assert config["sync_interval"] == 120 * 10**9
    # -1 resolves the way nats-server resolves it: 75% of the free space.
    assert config["max_storage"] > 0


async def test_jetstream_automatic_limits_and_sync_always(start: Any, tmp_path: Any) -> None:
    srv = await start(jetstream=JetStreamSettings(store_dir=str(tmp_path / "not-yet")))
    srv.jetstream = SimpleNamespace(store_dir=str(tmp_path / "js"))  # type: ignore[attr-defined]
    config = jetstream_varz(srv)["config"]
    assert config["store_dir"] == str(tmp_path / "js")
    assert config["max_memory"] > 0
    assert config["max_storage"] > 0
    assert config["sync_always"] is True
    assert "sync_interval" not in config


async def test_cpu_percent_follows_the_process_load() -> None:
    sampler = CpuSampler()
    assert sampler.percent() == 0  # too soon after the baseline to say
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        sum(range(1000))
    busy = sampler.percent()
    assert busy > 20, busy
    await asyncio.sleep(0.3)
    idle = sampler.percent()
    assert idle < busy, (idle, busy)
