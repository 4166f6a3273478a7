"""on_create / on_update / on_resume called directly, against a real JetStream server."""

from __future__ import annotations

import kopf
import pytest
from nats.aio.client import Client

from headwater.control import units
from tests.operator.handlers.conftest import MAX_BACKOFF, WAIT_DELAY
from tests.operator.handlers.harness import Harness, Resource, condition, stream_config

ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"], "storage": "file", "maxAge": "1h"}
ALLOW_REPLACE = "headwater.io/allow-replace"


async def test_create_applies_the_stream_and_writes_ready_in_sync_and_generation(
    harness: Harness, nc: Client
) -> None:
    orders = Resource("Stream", "orders", dict(ORDERS))

    patch = await harness.call(harness.operator.on_create, orders)

    config = await stream_config(nc, "ORDERS")
    assert config is not None
    assert config["subjects"] == ["ORDERS.*"]
    assert config["storage"] == "file"
    assert config["max_age"] == units.HOUR
    status = patch["status"]
    assert status["observedGeneration"] == 1
    assert status["drift"] == []
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["InSync"]["status"] == "True"
    assert conditions["InSync"]["observedGeneration"] == 1
    assert status["stream"] == "ORDERS"
    assert harness.reasons(orders) == ["Created"]


async def test_resume_of_an_unchanged_stream_changes_nothing_and_posts_nothing(
    harness: Harness, nc: Client
) -> None:
    orders = Resource("Stream", "orders", dict(ORDERS))
    await harness.call(harness.operator.on_create, orders)
    before = await stream_config(nc, "ORDERS")

    patch = await harness.call(harness.operator.on_resume, orders)

    assert await stream_config(nc, "ORDERS") == before
    assert condition(orders, "InSync")["reason"] == "InSync"
    assert patch["status"]["observedGeneration"] == 1
    assert harness.reasons(orders) == ["Created"]  # no second event for a no-op


async def test_an_update_is_applied_and_reported_with_the_changed_fields(
    harness: Harness, nc: Client
) -> None:
    orders = Resource("Stream", "orders", dict(ORDERS))
    await harness.call(harness.operator.on_create, orders)

    orders.edit({"maxAge": "2h"})
    patch = await harness.call(harness.operator.on_update, orders)

    assert (await stream_config(nc, "ORDERS") or {})["max_age"] == 2 * units.HOUR
    assert patch["status"]["observedGeneration"] == 2
    assert condition(orders, "InSync")["status"] == "True"
    (updated,) = harness.events(orders, "Updated")
    assert "max_age" in updated.message


async def test_an_invalid_spec_is_a_permanent_error_naming_the_field(
    harness: Harness, nc: Client
) -> None:
    broken = Resource("Stream", "broken", {"name": "BROKEN", "storage": "floppy"})

    with pytest.raises(kopf.PermanentError) as raised:
        await harness.call(harness.operator.on_create, broken)

    in_sync = condition(broken, "InSync")
    assert in_sync["status"] == "False"
    assert in_sync["reason"] == "Invalid"
    assert "storage" in in_sync["message"]
    assert "storage" in str(raised.value)
    assert condition(broken, "Ready")["reason"] == "Invalid"
    assert broken.status["observedGeneration"] == 1
    (event,) = harness.events(broken, "Invalid")
    assert event.type == "Warning"
    assert await stream_config(nc, "BROKEN") is None


async def test_a_destructive_change_is_refused_until_the_resource_allows_replace(
    harness: Harness, nc: Client
) -> None:
    orders = Resource("Stream", "orders", dict(ORDERS))
    await harness.call(harness.operator.on_create, orders)
    # A JetStream publish waits for the stream's ack: the message is stored before the read.
    await nc.jetstream().publish("ORDERS.new", b"kept while refused")

    orders.edit({"storage": "memory"})
    await harness.call(harness.operator.on_update, orders)  # refused: no error, nothing to retry

    refused = condition(orders, "InSync")
    assert refused["status"] == "False"
    assert refused["reason"] == "ReplaceRefused"
    assert ALLOW_REPLACE in refused["message"]
    assert "storage" in refused["message"]
    assert condition(orders, "Ready")["status"] == "True"  # the old stream still serves
    assert orders.status["observedGeneration"] == 2
    assert orders.status["messages"] == 1
    config = await stream_config(nc, "ORDERS")
    assert config is not None and config["storage"] == "file"
    assert harness.events(orders, "ReplaceRefused")[0].type == "Warning"

    orders.annotations[ALLOW_REPLACE] = "true"
    await harness.call(harness.operator.on_update, orders)

    config = await stream_config(nc, "ORDERS")
    assert config is not None and config["storage"] == "memory"
    assert condition(orders, "InSync")["status"] == "True"
    assert orders.status["messages"] == 0  # replace means delete and re-create
    assert harness.events(orders, "Replaced")


async def test_a_consumer_waits_for_its_stream_with_a_temporary_error(
    harness: Harness, nc: Client
) -> None:
    worker = Resource(
        "Consumer",
        "worker",
        {"streamName": "ORDERS", "durableName": "worker", "ackPolicy": "explicit"},
    )

    with pytest.raises(kopf.TemporaryError) as raised:
        await harness.call(harness.operator.on_create, worker, retry=3)

    assert raised.value.delay == WAIT_DELAY  # waiting polls at the wait delay, not backoff
    assert "ORDERS" in str(raised.value)
    assert condition(worker, "Ready")["reason"] == "StreamMissing"
    assert condition(worker, "InSync")["reason"] == "Waiting"
    assert harness.reasons(worker) == ["Waiting"]

    # Once the stream exists the same handler succeeds.
    await harness.call(harness.operator.on_create, Resource("Stream", "orders", dict(ORDERS)))
    await harness.call(harness.operator.on_create, worker, retry=4)
    assert condition(worker, "Ready")["status"] == "True"
    assert condition(worker, "InSync")["status"] == "True"


async def test_an_unreachable_server_is_retried_with_backoff(harness: Harness) -> None:
    # spec.servers overrides the operator's default: a port nothing listens on.
    lost = Resource(
        "Stream", "lost", {"name": "LOST", "subjects": ["LOST"], "servers": ["nats://127.0.0.1:1"]}
    )

    with pytest.raises(kopf.TemporaryError) as raised:
        await harness.call(harness.operator.on_create, lost, retry=2)
    assert raised.value.delay == 4.0  # 2 ** retry
    assert condition(lost, "InSync")["status"] == "Unknown"
    assert condition(lost, "InSync")["reason"] == "Unreachable"

    with pytest.raises(kopf.TemporaryError) as capped:
        await harness.call(harness.operator.on_create, lost, retry=10)
    assert capped.value.delay == MAX_BACKOFF


async def test_prevent_update_keeps_the_servers_config_and_says_so(
    harness: Harness, nc: Client
) -> None:
    orders = Resource("Stream", "orders", {**ORDERS, "preventUpdate": True})
    await harness.call(harness.operator.on_create, orders)

    orders.edit({"maxAge": "2h"})
    await harness.call(harness.operator.on_update, orders)

    assert (await stream_config(nc, "ORDERS") or {})["max_age"] == units.HOUR
    in_sync = condition(orders, "InSync")
    assert in_sync["status"] == "False"
    assert in_sync["reason"] == "UpdatePrevented"
    assert "max_age" in in_sync["message"]
    assert orders.status["observedGeneration"] == 2
    assert harness.events(orders, "UpdatePrevented")
