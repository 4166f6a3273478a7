"""Ownership end to end (issue 16): two Stream resources naming one server stream, with kopf's
real runner, the fake API server and a real JetStream server of each kind.

Each custom resource is its own owner (``kubernetes:<ns>/<kind>/<name>``): the second resource
is refused with ``Conflict`` and never writes to the stream or deletes it, until it adopts it.
"""

from __future__ import annotations

import time

from nats.aio.client import Client

from headwater.control import units
from tests.operator.conftest import SYNC_INTERVAL, Cluster, eventually, run_on, stream_info

ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"], "storage": "file", "maxAge": "1h"}
FIRST = "kubernetes:default/stream/orders"
SECOND = "kubernetes:default/stream/orders-copy"


def in_sync(cluster: Cluster, name: str) -> dict[str, object]:
    return cluster.condition("streams", name, "InSync")


def publish(cluster: Cluster) -> None:
    async def body(nc: Client) -> None:
        await nc.jetstream().publish("ORDERS.1", b"keep me")

    run_on(cluster.server, body)


def messages(cluster: Cluster) -> int:
    return int(((stream_info(cluster.server, "ORDERS") or {}).get("state") or {})["messages"])


def managed_by(cluster: Cluster) -> str:
    config = (stream_info(cluster.server, "ORDERS") or {}).get("config") or {}
    return str((config.get("metadata") or {}).get("headwater.io/managed-by"))


def two_streams(cluster: Cluster) -> None:
    """``orders`` owns ORDERS (max_age 1h); ``orders-copy`` names it too (max_age 2h)."""
    cluster.create("Stream", "orders", ORDERS)
    eventually(lambda: in_sync(cluster, "orders").get("status") == "True")
    assert managed_by(cluster) == FIRST
    publish(cluster)
    cluster.create("Stream", "orders-copy", {**ORDERS, "maxAge": "2h"})
    conflict = eventually(
        lambda: (
            in_sync(cluster, "orders-copy").get("reason") == "Conflict"
            and in_sync(cluster, "orders-copy")
        )
    )
    assert conflict["status"] == "False"
    assert FIRST in str(conflict["message"])
    assert 'headwater.io/adopt: "true"' in str(conflict["message"])
    # Ready says what the server has: the stream exists.
    assert cluster.condition("streams", "orders-copy", "Ready")["status"] == "True"
    (event,) = eventually(lambda: cluster.events("orders-copy", "Conflict"))
    assert event["type"] == "Warning"
    assert FIRST in event["message"]


def test_a_second_resource_naming_a_managed_stream_is_refused_and_deletes_nothing(
    cluster: Cluster,
) -> None:
    two_streams(cluster)

    # Several sync intervals: no flip-flop, the first resource's max_age stands.
    deadline = time.monotonic() + 6 * SYNC_INTERVAL
    while time.monotonic() < deadline:
        info = stream_info(cluster.server, "ORDERS") or {}
        assert info["config"]["max_age"] == units.HOUR
        time.sleep(SYNC_INTERVAL / 4)
    assert managed_by(cluster) == FIRST
    assert in_sync(cluster, "orders")["status"] == "True"
    assert in_sync(cluster, "orders-copy")["reason"] == "Conflict"
    assert len(cluster.events("orders-copy", "Conflict")) == 1  # not one per sync

    # Deleting the second resource leaves the stream and its data alone.
    cluster.delete("streams", "orders-copy")
    eventually(lambda: cluster.get("streams", "orders-copy") is None)
    assert messages(cluster) == 1
    assert managed_by(cluster) == FIRST
    (left,) = cluster.events("orders-copy", "LeftInPlace")
    assert FIRST in left["message"] and "left in place" in left["message"]

    # Deleting its owner deletes it.
    cluster.delete("streams", "orders")
    eventually(lambda: cluster.get("streams", "orders") is None)
    assert stream_info(cluster.server, "ORDERS") is None
    assert cluster.events("orders", "Deleted")


def test_the_adopt_annotation_takes_the_stream_over(cluster: Cluster) -> None:
    two_streams(cluster)

    cluster.patch(
        "streams", "orders-copy", {"metadata": {"annotations": {"headwater.io/adopt": "true"}}}
    )
    (adopted,) = eventually(lambda: cluster.events("orders-copy", "Adopted"))
    assert FIRST in adopted["message"]
    eventually(lambda: in_sync(cluster, "orders-copy").get("status") == "True")
    assert managed_by(cluster) == SECOND
    assert (stream_info(cluster.server, "ORDERS") or {})["config"]["max_age"] == 2 * units.HOUR

    # The first resource is now the one refused, and it does not take the stream back.
    conflict = eventually(
        lambda: (
            in_sync(cluster, "orders").get("reason") == "Conflict" and in_sync(cluster, "orders")
        )
    )
    assert SECOND in str(conflict["message"])
    time.sleep(3 * SYNC_INTERVAL)
    assert managed_by(cluster) == SECOND
    assert (stream_info(cluster.server, "ORDERS") or {})["config"]["max_age"] == 2 * units.HOUR

    # Deleting the first resource no longer deletes the stream; deleting its owner does.
    cluster.delete("streams", "orders")
    eventually(lambda: cluster.get("streams", "orders") is None)
    assert messages(cluster) == 1
    cluster.delete("streams", "orders-copy")
    eventually(lambda: cluster.get("streams", "orders-copy") is None)
    assert stream_info(cluster.server, "ORDERS") is None
