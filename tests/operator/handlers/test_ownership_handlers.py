"""Ownership (issue 16), handlers called directly against a real JetStream server: the owner a
resource writes, Conflict on another owner's asset (the legacy ``headwater`` value included),
adoption, and deletion that leaves what is not the resource's own."""

from __future__ import annotations

from typing import Any

import kopf
from nats.aio.client import Client

from headwater.control import api, units
from headwater.control.connection import ConnectionSettings
from headwater.testing import ServerProcess
from headwater_operator.config import OperatorConfig
from headwater_operator.handlers import Operator
from tests.operator.handlers.harness import LOGGER, Harness, Resource, condition, stream_config

MANAGED_BY = "headwater.io/managed-by"
ADOPT = "headwater.io/adopt"
ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"], "storage": "file", "maxAge": "1h"}
OWNER = "kubernetes:default/stream/orders"


async def create_behind_the_operator(nc: Client, **metadata: str) -> None:
    config: dict[str, Any] = {"name": "ORDERS", "subjects": ["ORDERS.*"], "max_age": units.HOUR}
    if metadata:
        config["metadata"] = metadata
    await api.request(nc, "STREAM.CREATE.ORDERS", config)
    await nc.jetstream().publish("ORDERS.1", b"keep me")


async def messages(nc: Client) -> int:
    info = await api.request(nc, "STREAM.INFO.ORDERS")
    return int(info["state"]["messages"])


async def test_a_created_stream_carries_the_resources_own_owner(
    harness: Harness, nc: Client
) -> None:
    orders = Resource("Stream", "orders", dict(ORDERS))
    await harness.call(harness.operator.on_create, orders)

    config = await stream_config(nc, "ORDERS") or {}
    assert config["metadata"][MANAGED_BY] == OWNER
    assert harness.reasons(orders) == ["Created"]


async def test_the_cluster_id_prefixes_the_owner(clean_server: ServerProcess, nc: Client) -> None:
    config = OperatorConfig(
        connection=ConnectionSettings(servers=(clean_server.url,)), cluster_id="prod-eu"
    )
    operator = Operator(config)
    await operator.startup(settings=kopf.OperatorSettings(), logger=LOGGER)
    try:
        harness = Harness(operator, kopf.OperatorSettings())
        worker = Resource("Consumer", "worker", {"streamName": "ORDERS", "ackPolicy": "explicit"})
        await harness.call(operator.on_create, Resource("Stream", "orders", dict(ORDERS)))
        await harness.call(operator.on_create, worker)
    finally:
        await operator.cleanup()

    stream = await stream_config(nc, "ORDERS") or {}
    assert stream["metadata"][MANAGED_BY] == "kubernetes:prod-eu/default/stream/orders"
    consumer = await api.request(nc, "CONSUMER.INFO.ORDERS.worker")
    assert consumer["config"]["metadata"][MANAGED_BY] == (
        "kubernetes:prod-eu/default/consumer/worker"
    )


async def test_the_legacy_marker_is_a_conflict_until_adopted(harness: Harness, nc: Client) -> None:
    # Written before owners had names: Terraform's, another operator's? Nobody can tell.
    await create_behind_the_operator(nc, **{MANAGED_BY: "headwater"})
    orders = Resource("Stream", "orders", {**ORDERS, "maxAge": "2h"})

    await harness.call(harness.operator.on_create, orders)  # no error: nothing to retry

    in_sync = condition(orders, "InSync")
    assert (in_sync["status"], in_sync["reason"]) == ("False", "Conflict")
    assert "'headwater'" in in_sync["message"]
    assert f'{ADOPT}: "true"' in in_sync["message"]
    assert condition(orders, "Ready")["status"] == "True"
    (event,) = harness.events(orders, "Conflict")
    assert event.type == "Warning"
    config = await stream_config(nc, "ORDERS") or {}
    assert config["max_age"] == units.HOUR and config["metadata"][MANAGED_BY] == "headwater"

    # Deleting the resource leaves the stream and its messages.
    await harness.call(harness.operator.on_delete, orders)
    assert await messages(nc) == 1
    (left,) = harness.events(orders, "LeftInPlace")
    assert "'headwater'" in left.message and "left in place" in left.message

    # Annotated, a resource takes it over.
    orders.annotations[ADOPT] = "true"
    await harness.call(harness.operator.on_update, orders)
    config = await stream_config(nc, "ORDERS") or {}
    assert config["max_age"] == 2 * units.HOUR and config["metadata"][MANAGED_BY] == OWNER
    (adopted,) = harness.events(orders, "Adopted")
    assert "'headwater'" in adopted.message
    assert condition(orders, "InSync")["status"] == "True"


async def test_the_sync_timer_does_not_adopt_on_a_standing_annotation(
    harness: Harness, nc: Client
) -> None:
    await create_behind_the_operator(nc, **{MANAGED_BY: "kubernetes:default/stream/other"})
    orders = Resource("Stream", "orders", dict(ORDERS), annotations={ADOPT: "true"})
    orders.status["observedGeneration"] = 1  # a handler has handled this generation

    await harness.call(harness.operator.on_sync, orders)

    in_sync = condition(orders, "InSync")
    assert in_sync["reason"] == "Conflict"
    assert "kubernetes:default/stream/other" in in_sync["message"]
    assert "not by the sync timer" in in_sync["message"]
    config = await stream_config(nc, "ORDERS") or {}
    assert config["metadata"][MANAGED_BY] == "kubernetes:default/stream/other"


async def test_an_unmanaged_stream_is_adopted_on_create_but_not_deleted_when_unmanaged(
    harness: Harness, nc: Client
) -> None:
    await create_behind_the_operator(nc)
    orders = Resource("Stream", "orders", dict(ORDERS))

    await harness.call(harness.operator.on_create, orders)

    (adopted,) = harness.events(orders, "Adopted")
    assert "nobody managed it" in adopted.message
    assert (await stream_config(nc, "ORDERS") or {})["metadata"][MANAGED_BY] == OWNER

    # Someone strips the marker: the stream is no longer this resource's to delete.
    config = await stream_config(nc, "ORDERS") or {}
    await api.request(nc, "STREAM.UPDATE.ORDERS", {**config, "metadata": {}})
    await harness.call(harness.operator.on_delete, orders)
    assert await messages(nc) == 1
    (left,) = harness.events(orders, "LeftInPlace")
    assert "managed by nobody" in left.message


async def test_a_consumer_of_another_owner_is_a_conflict_and_survives_delete(
    harness: Harness, nc: Client
) -> None:
    await harness.call(harness.operator.on_create, Resource("Stream", "orders", dict(ORDERS)))
    await api.request(
        nc,
        "CONSUMER.DURABLE.CREATE.ORDERS.worker",
        {
            "stream_name": "ORDERS",
            "config": {
                "durable_name": "worker",
                "ack_policy": "explicit",
                "metadata": {MANAGED_BY: "cli"},
            },
        },
    )
    worker = Resource(
        "Consumer", "worker", {"streamName": "ORDERS", "ackPolicy": "explicit", "maxDeliver": 3}
    )

    await harness.call(harness.operator.on_create, worker)

    assert condition(worker, "InSync")["reason"] == "Conflict"
    assert "'cli'" in condition(worker, "InSync")["message"]
    await harness.call(harness.operator.on_delete, worker)
    info = await api.request(nc, "CONSUMER.INFO.ORDERS.worker")
    assert info["config"]["max_deliver"] == -1
    assert harness.reasons(worker) == ["Conflict", "LeftInPlace"]
