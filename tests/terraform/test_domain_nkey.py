"""The provider block's ``js_domain`` and ``nkey``.

``js_domain`` against a server with ``jetstream { domain: hub }`` (both kinds): a stream, a
consumer, a KV bucket and a KV entry apply and then plan clean, and the same state read with
``js_domain = "other"`` fails on every resource with the subject it asked on, which proves
each call (the core's requests and nats-py's KV API) goes under the configured prefix.
``nkey`` against a server (both kinds) admitting one nkey user.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError
from tf.utils import Diagnostics

from conftest import BOTH
from headwater.control import api
from headwater.control.connection import ConnectionSettings
from headwater.testing import ServerProcess, nats_server_binary
from headwater_terraform.provider import HeadwaterProvider
from support.connectopts import DOMAIN, domain_server, nkey_server
from tests.terraform.conftest import Terraform

T = TypeVar("T")

APPLIED = """
resource "headwater_stream" "orders" {
  name     = "ORDERS"
  subjects = ["orders.>"]
}
resource "headwater_consumer" "ship" {
  stream_name  = headwater_stream.orders.name
  durable_name = "SHIP"
}
resource "headwater_kv_bucket" "config" {
  bucket = "config"
}
resource "headwater_kv_entry" "mode" {
  bucket = headwater_kv_bucket.config.bucket
  key    = "app/mode"
  value  = "blue"
}
"""

# The same resources without references: refreshing them in another domain reads each one
# on its own (a failed read skips the resources that refer to it).
UNLINKED = APPLIED.replace("headwater_stream.orders.name", '"ORDERS"').replace(
    "headwater_kv_bucket.config.bucket", '"config"'
)


def provider(**settings: str) -> str:
    lines = "".join(f'  {name} = "{value}"\n' for name, value in settings.items())
    return f'provider "headwater" {{\n{lines}}}\n'


def in_domain(server: ServerProcess, domain: str) -> dict[str, Any]:
    """What the server holds, read through ``$JS.<domain>.API``."""

    async def read(nc: Client) -> dict[str, Any]:
        stream = await api.request(nc, "STREAM.INFO.ORDERS")
        consumer = await api.request(nc, "CONSUMER.INFO.ORDERS.SHIP")
        kv = await api.jetstream(nc).key_value("config")
        try:
            entry = (await kv.get("app/mode")).value
        except KeyNotFoundError:
            entry = None
        return {
            "subjects": stream["config"]["subjects"],
            "consumer": consumer["config"]["durable_name"],
            "entry": entry,
        }

    return on_domain(server, domain, read)


def on_domain(server: ServerProcess, domain: str, body: Callable[[Client], Awaitable[T]]) -> T:
    """``body(nc)`` on a connection to ``server`` set to ``domain``."""

    async def main() -> T:
        nc = await ConnectionSettings(servers=(server.url,), js_domain=domain).connect()
        try:
            return await body(nc)
        finally:
            await nc.close()

    return asyncio.run(main())


def stream_names(server: ServerProcess, domain: str) -> list[str]:
    async def names(nc: Client) -> list[str]:
        return (await api.request(nc, "STREAM.NAMES", {})).get("streams") or []

    return on_domain(server, domain, names)


@pytest.mark.parametrize("kind", BOTH)
def test_js_domain(tf: Terraform, kind: str, tmp_path: Path) -> None:
    if kind == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed")
    with domain_server(kind, tmp_path) as server:
        tf.write(APPLIED, provider(servers=server.url, js_domain=DOMAIN))
        tf.apply()
        assert tf.plan().returncode == 0
        assert in_domain(server, DOMAIN) == {
            "subjects": ["orders.>"],
            "consumer": "SHIP",
            "entry": b"blue",
        }

        tf.write(UNLINKED, provider(servers=server.url, js_domain="other"))
        refused = tf.plan()
        assert refused.returncode == 1, refused
        for resource in ("Stream/ORDERS", "Consumer/ORDERS/SHIP", "KeyValue/config"):
            assert refused.says(f"Reading {resource} failed: the JetStream API did not answer"), (
                refused
            )
        assert refused.says("Reading config/app/mode failed: the JetStream API did not answer")
        for stream in ("ORDERS", "KV_config"):
            assert refused.says(f"no reply on $JS.other.API.STREAM.INFO.{stream}"), refused

        tf.write(APPLIED, provider(servers=server.url, js_domain=DOMAIN))
        assert tf.plan().returncode == 0
        tf.destroy()
        assert tf.state()["resources"] == []
        assert stream_names(server, DOMAIN) == []


def test_invalid_js_domain(tf: Terraform) -> None:
    tf.write(APPLIED, provider(servers="nats://127.0.0.1:1", js_domain="hub.east"))
    refused = tf.plan()
    assert refused.returncode == 1, refused
    assert refused.says("invalid JetStream domain 'hub.east': one subject token expected")


@pytest.mark.parametrize("kind", BOTH)
def test_nkey(tf: Terraform, tmp_path: Path, kind: str) -> None:
    if nats_server_binary() is None:
        pytest.fail("nats-server is not installed")
    with nkey_server(tmp_path, kind) as (server, seed):
        tf.write(APPLIED, provider(servers=server.url))
        refused = tf.plan()
        assert refused.returncode == 1, refused
        assert refused.says("Authorization Violation"), refused
        tf.write(APPLIED, provider(servers=server.url, nkey=str(seed)))
        tf.apply()
        assert tf.plan().returncode == 0
        assert tf.attributes("headwater_kv_entry.mode")["value"] == "blue"


def test_provider_schema(tf: Terraform) -> None:
    tf.write("", provider())
    shown = tf.run("providers", "schema", "-json", check=True)
    schemas = json.loads(shown.output)["provider_schemas"]
    attributes = schemas["headwater.io/headwater/headwater"]["provider"]["block"]["attributes"]
    for name, env in (("js_domain", "NATS_JS_DOMAIN"), ("nkey", "NATS_NKEY")):
        assert attributes[name]["type"] == "string"
        assert attributes[name]["optional"] is True
        assert "sensitive" not in attributes[name]  # a domain and a seed file's path
        assert env in attributes[name]["description"]
    assert attributes["tls_first"]["type"] == "bool"
    assert attributes["tls_first"]["optional"] is True
    assert "handshake_first" in attributes["tls_first"]["description"]
    assert {name for name, item in attributes.items() if item.get("sensitive")} == {
        "password",
        "token",
        "credential_data",  # a .creds file's content (test_credentials.py)
    }


def test_domain_and_nkey_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values the block leaves out come from NATS_JS_DOMAIN and NATS_NKEY; the block wins."""
    monkeypatch.setenv("NATS_JS_DOMAIN", "hub")
    monkeypatch.setenv("NATS_NKEY", "/etc/nats/user.nk")
    provider_ = HeadwaterProvider()
    try:
        diags = Diagnostics()
        provider_.configure_provider(diags, {"servers": "nats://127.0.0.1:4222"})
        assert not diags.has_errors()
        assert provider_.settings is not None
        assert provider_.settings.api_prefix == "$JS.hub.API"
        assert provider_.settings.nkey == "/etc/nats/user.nk"
        provider_.configure_provider(diags, {"js_domain": "leaf"})
        assert provider_.settings.api_prefix == "$JS.leaf.API"
        provider_.configure_provider(diags, {"js_domain": "a b"})
        assert diags.has_errors()
    finally:
        provider_.runtime.close()
