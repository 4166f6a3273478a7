"""Consumer resources end to end: ordering against their Stream, figures, drift, deletion."""

from __future__ import annotations

from nats.aio.client import Client

from headwater.control import api
from tests.operator.conftest import Cluster, consumer_info, eventually, run_on, stream_info

ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"]}
NEW = {"streamName": "ORDERS", "durableName": "NEW", "filterSubject": "ORDERS.received"}


def condition(cluster: Cluster, name: str, kind: str) -> dict[str, object]:
    return cluster.condition("consumers", name, kind)


def test_consumer_waits_for_its_stream(cluster: Cluster) -> None:
    cluster.create("Consumer", "orders-new", NEW)
    waiting = eventually(
        lambda: (
            condition(cluster, "orders-new", "Ready").get("reason") == "StreamMissing"
            and condition(cluster, "orders-new", "Ready")
        )
    )
    assert "ORDERS" in str(waiting["message"])
    assert cluster.events("orders-new", "Waiting")
    assert consumer_info(cluster.server, "ORDERS", "NEW") is None

    cluster.create("Stream", "orders", ORDERS)
    eventually(lambda: condition(cluster, "orders-new", "InSync").get("status") == "True")
    info = consumer_info(cluster.server, "ORDERS", "NEW") or {}
    assert info["config"]["filter_subject"] == "ORDERS.received"
    status = cluster.status("consumers", "orders-new")
    assert status["stream"] == "ORDERS" and status["consumer"] == "NEW"
    assert cluster.events("orders-new", "Created")


def test_live_figures_and_consumer_drift(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", ORDERS)
    cluster.create("Consumer", "orders-new", NEW)
    eventually(lambda: condition(cluster, "orders-new", "InSync").get("status") == "True")

    async def publish(nc: Client) -> None:
        for index in range(3):
            await nc.publish("ORDERS.received", f"order {index}".encode())
        await nc.flush()

    run_on(cluster.server, publish)
    eventually(lambda: cluster.status("streams", "orders").get("messages") == 3)
    assert cluster.status("streams", "orders")["lastSeq"] == 3
    eventually(lambda: cluster.status("consumers", "orders-new").get("numPending") == 3)

    async def delete(nc: Client) -> None:
        await api.request(nc, "CONSUMER.DELETE.ORDERS.NEW")

    run_on(cluster.server, delete)
    eventually(lambda: cluster.events("orders-new", "DriftCorrected"))
    # The event can be seen a moment before the re-created consumer answers (seen once in a
    # full run, on nats-server): bounded wait, as for the figures above.
    eventually(lambda: consumer_info(cluster.server, "ORDERS", "NEW") is not None)


def test_stream_delete_waits_for_its_consumers(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", ORDERS)
    cluster.create("Consumer", "orders-new", NEW)
    eventually(lambda: condition(cluster, "orders-new", "InSync").get("status") == "True")

    cluster.delete("streams", "orders")
    eventually(lambda: cluster.events("orders", "DeleteWaiting"))
    assert stream_info(cluster.server, "ORDERS") is not None
    assert cluster.get("streams", "orders") is not None

    cluster.delete("consumers", "orders-new")
    eventually(lambda: cluster.get("consumers", "orders-new") is None)
    eventually(lambda: cluster.get("streams", "orders") is None)
    assert stream_info(cluster.server, "ORDERS") is None
    assert cluster.events("orders-new", "Deleted")


def test_consumer_comes_back_after_its_stream_is_replaced(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", ORDERS)
    cluster.create("Consumer", "orders-new", NEW)
    eventually(lambda: condition(cluster, "orders-new", "InSync").get("status") == "True")

    cluster.patch(
        "streams",
        "orders",
        {
            "metadata": {"annotations": {"headwater.io/allow-replace": "true"}},
            "spec": {"storage": "memory"},
        },
    )
    eventually(lambda: cluster.events("orders", "Replaced"))
    # The replace took the consumer with it; the sync timer re-creates it from its resource.
    eventually(lambda: cluster.events("orders-new", "DriftCorrected"))
    # The event can be seen a moment before the re-created consumer answers (seen once in a
    # full run, on nats-server): bounded wait, as for the figures above.
    eventually(lambda: consumer_info(cluster.server, "ORDERS", "NEW") is not None)
    assert (stream_info(cluster.server, "ORDERS") or {})["config"]["storage"] == "memory"


def test_prevent_update_keeps_the_server_config(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", ORDERS)
    cluster.create("Consumer", "orders-new", {**NEW, "preventUpdate": True})
    eventually(lambda: condition(cluster, "orders-new", "InSync").get("status") == "True")
    cluster.patch("consumers", "orders-new", {"spec": {"description": "changed"}})
    prevented = eventually(
        lambda: (
            condition(cluster, "orders-new", "InSync").get("reason") == "UpdatePrevented"
            and condition(cluster, "orders-new", "InSync")
        )
    )
    assert "description" in str(prevented["message"])
    assert "description" not in (consumer_info(cluster.server, "ORDERS", "NEW") or {})["config"]
    assert cluster.events("orders-new", "UpdatePrevented")
