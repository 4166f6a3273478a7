"""The sync timer (drift under driftPolicy correct and report) and on_delete, called
directly against a real JetStream server."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from nats.aio.client import Client

from headwater.control import api, units
from tests.operator.handlers.conftest import WAIT_DELAY
from tests.operator.handlers.harness import (
    Harness,
    Resource,
    condition,
    index_of,
    stream_config,
)

ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"], "storage": "file", "maxAge": "1h"}


async def created(harness: Harness, **spec: Any) -> Resource:
    orders = Resource("Stream", "orders", {**ORDERS, **spec})
    await harness.call(harness.operator.on_create, orders)
    assert condition(orders, "InSync")["status"] == "True"
    return orders


async def change_behind_the_operator(nc: Client, max_age: int) -> None:
    config = await stream_config(nc, "ORDERS")
    assert config is not None
    await api.request(nc, "STREAM.UPDATE.ORDERS", {**config, "max_age": max_age})


async def delete_behind_the_operator(nc: Client) -> None:
    await api.request(nc, "STREAM.DELETE.ORDERS")
    assert await stream_config(nc, "ORDERS") is None


async def test_sync_corrects_a_changed_stream(harness: Harness, nc: Client) -> None:
    orders = await created(harness)
    await change_behind_the_operator(nc, 5 * units.HOUR)

    await harness.call(harness.operator.on_sync, orders)

    assert (await stream_config(nc, "ORDERS") or {})["max_age"] == units.HOUR
    assert condition(orders, "InSync")["status"] == "True"
    assert any("max_age" in line for line in orders.status["drift"])
    (corrected,) = harness.events(orders, "DriftCorrected")
    assert "max_age" in corrected.message


async def test_sync_recreates_a_deleted_stream(harness: Harness, nc: Client) -> None:
    orders = await created(harness)
    await delete_behind_the_operator(nc)

    await harness.call(harness.operator.on_sync, orders)

    assert await stream_config(nc, "ORDERS") is not None
    assert condition(orders, "Ready")["status"] == "True"
    assert "re-created" in harness.events(orders, "DriftCorrected")[0].message


async def test_sync_only_reports_a_change_under_drift_policy_report(
    harness: Harness, nc: Client
) -> None:
    orders = await created(harness, driftPolicy="report")
    await change_behind_the_operator(nc, 5 * units.HOUR)

    await harness.call(harness.operator.on_sync, orders)

    assert (await stream_config(nc, "ORDERS") or {})["max_age"] == 5 * units.HOUR
    in_sync = condition(orders, "InSync")
    assert in_sync["status"] == "False"
    assert in_sync["reason"] == "DriftReported"
    assert "max_age" in in_sync["message"]
    assert orders.status["drift"]
    assert len(harness.events(orders, "DriftReported")) == 1

    # The same drift on the next tick: the condition holds, no second event.
    await harness.call(harness.operator.on_sync, orders)
    assert len(harness.events(orders, "DriftReported")) == 1


async def test_drift_policy_report_does_not_hold_back_the_users_own_edit(
    harness: Harness, nc: Client
) -> None:
    orders = await created(harness, driftPolicy="report")

    orders.edit({"maxAge": "2h"})
    await harness.call(harness.operator.on_update, orders)

    assert (await stream_config(nc, "ORDERS") or {})["max_age"] == 2 * units.HOUR
    assert condition(orders, "InSync")["status"] == "True"
    assert harness.events(orders, "Updated")


async def test_sync_leaves_a_deleted_stream_missing_under_drift_policy_report(
    harness: Harness, nc: Client
) -> None:
    orders = await created(harness, driftPolicy="report")
    await delete_behind_the_operator(nc)

    await harness.call(harness.operator.on_sync, orders)

    assert await stream_config(nc, "ORDERS") is None
    assert condition(orders, "Ready")["reason"] == "Missing"
    assert condition(orders, "InSync")["reason"] == "DriftReported"
    assert orders.status["drift"] == ["(missing on the server)"]
    assert harness.events(orders, "DriftReported")


async def test_sync_keeps_out_while_a_handler_owns_the_new_generation(
    harness: Harness, nc: Client
) -> None:
    orders = await created(harness)
    orders.edit({"maxAge": "2h"})  # generation 2, not yet handled: status says 1

    patch = await harness.call(harness.operator.on_sync, orders)

    assert dict(patch) == {}
    assert (await stream_config(nc, "ORDERS") or {})["max_age"] == units.HOUR


async def test_delete_removes_the_stream(harness: Harness, nc: Client) -> None:
    orders = await created(harness)

    await harness.call(harness.operator.on_delete, orders)

    assert await stream_config(nc, "ORDERS") is None
    assert harness.reasons(orders)[-1] == "Deleted"


async def test_prevent_delete_keeps_the_stream(harness: Harness, nc: Client) -> None:
    orders = await created(harness, preventDelete=True)

    await harness.call(harness.operator.on_delete, orders)

    assert await stream_config(nc, "ORDERS") is not None
    (kept,) = harness.events(orders, "DeletePrevented")
    assert "preventDelete is set" in kept.message


async def test_prevent_delete_recorded_on_the_server_outlives_the_spec(
    harness: Harness, nc: Client
) -> None:
    # preventDelete dropped from the spec and the resource deleted before an update handler
    # ran: the server's metadata still says keep it.
    orders = await created(harness, preventDelete=True)
    del orders.spec["preventDelete"]

    await harness.call(harness.operator.on_delete, orders)

    assert await stream_config(nc, "ORDERS") is not None
    (kept,) = harness.events(orders, "DeletePrevented")
    assert "on the server" in kept.message


async def test_delete_waits_for_the_streams_consumer_resources(
    harness: Harness, nc: Client
) -> None:
    orders = await created(harness)
    consumers = index_of({("default", "ORDERS"): "worker"})

    with pytest.raises(kopf.TemporaryError) as raised:
        await harness.call(
            harness.operator.on_delete, orders, indexes={"consumers_by_stream": consumers}
        )

    assert raised.value.delay == WAIT_DELAY
    assert "worker" in str(raised.value)
    assert await stream_config(nc, "ORDERS") is not None
    assert harness.reasons(orders)[-1] == "DeleteWaiting"

    # The Consumer resource gone, the index empty: the delete goes through.
    await harness.call(
        harness.operator.on_delete, orders, indexes={"consumers_by_stream": index_of({})}
    )
    assert await stream_config(nc, "ORDERS") is None


async def test_sync_leaves_an_invalid_resource_alone_until_its_spec_changes(
    harness: Harness,
) -> None:
    broken = Resource("Stream", "broken", {"name": "BROKEN", "storage": "floppy"})
    with pytest.raises(kopf.PermanentError):
        await harness.call(harness.operator.on_create, broken)
    posted = len(harness.posted)

    patch = await harness.call(harness.operator.on_sync, broken)

    assert dict(patch) == {}
    assert len(harness.posted) == posted  # no Warning event on every tick
