"""/healthz answers in nats-server's order: readiness, then JetStream."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from headwater.server.config.settings import JetStreamSettings
from headwater.server.monitoring.healthz import HealthzOptions, healthz
from headwater.server.monitoring.params import BadRequest, Query
from headwater.server.node import Server

OK = (200, {"status": "ok"})


async def test_ready_server_is_healthy(node: Server) -> None:
    assert healthz(node) == OK
    assert healthz(node, HealthzOptions(js_enabled_only=True)) == OK
    assert healthz(node, HealthzOptions(js_server_only=True)) == OK


async def test_not_ready_and_lame_duck_fail_with_500(node: Server) -> None:
    node.ready = False
    status, body = healthz(node)
    assert status == 500 and body["status"] == "error" and body["error"]
    # Nothing JetStream-related rescues a server that takes no clients.
    assert healthz(node, HealthzOptions(js_server_only=True))[0] == 500
    node.ready = True
    node.lame_duck = True
    status, body = healthz(node)
    assert status == 500 and "lame duck" in body["error"]
    node.lame_duck = False


def enable_jetstream_setting(srv: Server) -> None:
    """Turn the setting on after start, so no real JetStream service is attached."""
    srv.settings = dataclasses.replace(srv.settings, jetstream=JetStreamSettings(enabled=True))


async def test_jetstream_configured_but_not_running(node: Server) -> None:
    srv = node
    enable_jetstream_setting(srv)
    # No JetStream service has registered itself: JetStream is not running.
    status, body = healthz(srv)
    assert (status, body) == (503, {"status": "unavailable", "error": "JetStream not enabled"})
    assert healthz(srv, HealthzOptions(js_enabled_only=True))[0] == 503
    # js-server-only skips every JetStream check.
    assert healthz(srv, HealthzOptions(js_server_only=True)) == OK


async def test_jetstream_running_uses_its_own_check(node: Server) -> None:
    enable_jetstream_setting(node)
    problem: list[str] = []
    node.jetstream = SimpleNamespace(  # type: ignore[attr-defined]
        health_error=lambda: problem[0] if problem else None
    )
    assert healthz(node) == OK
    problem.append("JetStream stream 'ORDERS' could not be recovered")
    status, body = healthz(node)
    assert status == 503 and body == {"status": "unavailable", "error": problem[0]}
    # js-enabled-only stops before the asset check.
    assert healthz(node, HealthzOptions(js_enabled_only=True)) == OK


def test_options_from_query() -> None:
    assert HealthzOptions.from_query(Query.parse("js-enabled-only=true")).js_enabled_only
    assert HealthzOptions.from_query(Query.parse("js-enabled=1")).js_enabled_only
    assert HealthzOptions.from_query(Query.parse("js-server-only=t")).js_server_only
    assert HealthzOptions.from_query(Query.parse("js-meta-only=true")).js_meta_only
    # nats-server decodes js-meta-only after js-server-only: the first bad one is reported.
    with pytest.raises(BadRequest, match="js-server-only"):
        HealthzOptions.from_query(Query.parse("js-meta-only=no&js-server-only=maybe"))
    # A bare flag is an empty value: false, as Go reads it.
    assert not HealthzOptions.from_query(Query.parse("js-enabled-only")).js_enabled_only
    with pytest.raises(BadRequest, match="js-server-only"):
        HealthzOptions.from_query(Query.parse("js-server-only=maybe"))
