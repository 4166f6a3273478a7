"""Stream resources end to end: kopf's runner, the fake API server, a real JetStream server."""

from __future__ import annotations

import signal
import time
from typing import Any

from nats.aio.client import Client

from headwater.control import api, units
from tests.operator.conftest import (
    SYNC_INTERVAL,
    Cluster,
    eventually,
    http_get,
    run_on,
    stream_info,
)

ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"], "storage": "file", "maxAge": "1h"}


def ready(cluster: Cluster, plural: str, name: str) -> bool:
    return cluster.condition(plural, name, "Ready").get("status") == "True"


def in_sync(cluster: Cluster, plural: str, name: str) -> bool:
    return cluster.condition(plural, name, "InSync").get("status") == "True"


def test_create_update_and_delete_a_stream(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", ORDERS)

    eventually(
        lambda: ready(cluster, "streams", "orders") and in_sync(cluster, "streams", "orders")
    )
    info = stream_info(cluster.server, "ORDERS")
    assert info is not None
    assert info["config"]["subjects"] == ["ORDERS.*"]
    assert info["config"]["max_age"] == units.HOUR
    assert info["config"]["metadata"]["headwater.io/managed-by"] == (
        "kubernetes:default/stream/orders"
    )
    status = cluster.status("streams", "orders")
    assert status["observedGeneration"] == 1
    assert status["stream"] == "ORDERS"
    assert cluster.events("orders", "Created")
    obj = cluster.get("streams", "orders") or {}
    assert "headwater.io/finalizer" in obj["metadata"]["finalizers"]

    cluster.patch("streams", "orders", {"spec": {"maxAge": "2h", "subjects": ["ORDERS.>"]}})
    eventually(lambda: cluster.status("streams", "orders").get("observedGeneration") == 2)
    eventually(lambda: in_sync(cluster, "streams", "orders"))
    info = stream_info(cluster.server, "ORDERS") or {}
    assert info["config"]["max_age"] == 2 * units.HOUR
    assert info["config"]["subjects"] == ["ORDERS.>"]
    updated = eventually(lambda: cluster.events("orders", "Updated"))
    assert "max_age" in updated[0]["message"]

    cluster.delete("streams", "orders")
    eventually(lambda: cluster.get("streams", "orders") is None)
    assert stream_info(cluster.server, "ORDERS") is None
    assert cluster.events("orders", "Deleted")


def test_destructive_change_is_refused_until_annotated(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", ORDERS)
    eventually(lambda: in_sync(cluster, "streams", "orders"))

    cluster.patch("streams", "orders", {"spec": {"storage": "memory"}})
    refused = eventually(
        lambda: (
            cluster.condition("streams", "orders", "InSync").get("reason") == "ReplaceRefused"
            and cluster.condition("streams", "orders", "InSync")
        )
    )
    assert refused["status"] == "False"
    # The way to allow it here is the annotation; the CLI's --allow-replace means nothing.
    assert 'annotation headwater.io/allow-replace: "true"' in refused["message"]
    assert "--allow-replace" not in refused["message"]
    assert "storage" in refused["message"]
    assert ready(cluster, "streams", "orders")  # the old stream still serves
    assert (stream_info(cluster.server, "ORDERS") or {})["config"]["storage"] == "file"
    (event,) = cluster.events("orders", "ReplaceRefused")
    assert "--allow-replace" not in event["message"]
    assert 'headwater.io/allow-replace: "true"' in event["message"]

    cluster.patch(
        "streams",
        "orders",
        {"metadata": {"annotations": {"headwater.io/allow-replace": "true"}}},
    )
    eventually(
        lambda: (
            (stream_info(cluster.server, "ORDERS") or {}).get("config", {}).get("storage")
            == "memory"
        )
    )
    eventually(lambda: in_sync(cluster, "streams", "orders"))
    assert cluster.events("orders", "Replaced")


def test_deleted_stream_is_recreated_under_correct(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", ORDERS)
    eventually(lambda: in_sync(cluster, "streams", "orders"))

    cluster_delete_stream(cluster, "ORDERS")
    eventually(lambda: cluster.events("orders", "DriftCorrected"))
    assert stream_info(cluster.server, "ORDERS") is not None
    eventually(lambda: in_sync(cluster, "streams", "orders"))


def test_drift_is_only_reported_under_report(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", {**ORDERS, "driftPolicy": "report"})
    eventually(lambda: in_sync(cluster, "streams", "orders"))

    # Someone changes the stream behind the operator's back: reported, not corrected.
    update_stream(cluster, "ORDERS", max_msgs=10)
    reported = eventually(
        lambda: (
            cluster.condition("streams", "orders", "InSync").get("reason") == "DriftReported"
            and cluster.status("streams", "orders")
        )
    )
    assert any("max_msgs" in line for line in reported["drift"])
    assert (stream_info(cluster.server, "ORDERS") or {})["config"]["max_msgs"] == 10
    assert cluster.events("orders", "DriftReported")

    # Deleted behind its back: reported missing, left missing.
    cluster_delete_stream(cluster, "ORDERS")
    eventually(lambda: cluster.condition("streams", "orders", "Ready").get("status") == "False")
    assert cluster.condition("streams", "orders", "InSync")["reason"] == "DriftReported"
    assert stream_info(cluster.server, "ORDERS") is None
    assert cluster.operator.metrics.registry.get_sample_value(
        "headwater_operator_drift_total", {"kind": "Stream", "handling": "reported"}
    )


def test_prevent_delete_keeps_the_stream(cluster: Cluster) -> None:
    cluster.create("Stream", "keep", {"name": "KEEP", "preventDelete": True})
    eventually(lambda: in_sync(cluster, "streams", "keep"))
    cluster.delete("streams", "keep")
    eventually(lambda: cluster.get("streams", "keep") is None)
    assert stream_info(cluster.server, "KEEP") is not None
    assert cluster.events("keep", "DeletePrevented")


def test_invalid_spec_is_reported_not_retried_hot(cluster: Cluster) -> None:
    # The CRD schema can not see this one: a mirror takes no subjects (a model check).
    cluster.create("Stream", "bad", {"name": "BAD", "subjects": ["a"], "mirror": {"name": "X"}})
    invalid = eventually(
        lambda: (
            cluster.condition("streams", "bad", "InSync").get("reason") == "Invalid"
            and cluster.condition("streams", "bad", "InSync")
        )
    )
    assert "mirror" in invalid["message"]
    assert cluster.events("bad", "Invalid")
    assert stream_info(cluster.server, "BAD") is None


def test_adopts_an_existing_stream(cluster: Cluster) -> None:
    async def create(nc: Client) -> None:
        await api.request(nc, "STREAM.CREATE.LEGACY", {"name": "LEGACY", "subjects": ["legacy"]})

    run_on(cluster.server, create)
    cluster.create("Stream", "legacy", {"name": "LEGACY", "subjects": ["legacy"]})
    eventually(lambda: cluster.events("legacy", "Adopted"))
    info = stream_info(cluster.server, "LEGACY") or {}
    assert info["config"]["metadata"]["headwater.io/managed-by"] == (
        "kubernetes:default/stream/legacy"
    )


def test_health_and_metrics_endpoints(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", ORDERS)
    eventually(lambda: in_sync(cluster, "streams", "orders"))
    health = eventually(lambda: http_get(cluster.liveness_url))
    assert "nats_connections" in health
    port = cluster.operator.metrics_port
    text = http_get(f"http://127.0.0.1:{port}/metrics")
    assert (
        'headwater_operator_reconciles_total{kind="Stream",outcome="created",trigger="create"}'
        in text
    )


def cluster_delete_stream(cluster: Cluster, name: str) -> None:
    async def delete(nc: Client) -> None:
        await api.request(nc, f"STREAM.DELETE.{name}")

    run_on(cluster.server, delete)


def update_stream(cluster: Cluster, name: str, **changes: Any) -> None:
    async def update(nc: Client) -> None:
        info = await api.request(nc, f"STREAM.INFO.{name}")
        config = {**info["config"], **changes}
        await api.request(nc, f"STREAM.UPDATE.{name}", config)

    run_on(cluster.server, update)


def test_server_errors_are_shown_and_retried(cluster: Cluster) -> None:
    async def occupy(nc: Client) -> None:
        await api.request(nc, "STREAM.CREATE.SQUAT", {"name": "SQUAT", "subjects": ["dup.>"]})

    run_on(cluster.server, occupy)
    cluster.create("Stream", "dup", {"name": "DUP", "subjects": ["dup.>"]})
    failed = eventually(
        lambda: (
            cluster.condition("streams", "dup", "InSync").get("reason") == "ApplyFailed"
            and cluster.condition("streams", "dup", "InSync")
        )
    )
    # The server's own words (err_code 10065, subjects overlap), on both servers.
    assert "overlap" in failed["message"] and "10065" in failed["message"]
    assert cluster.condition("streams", "dup", "Ready")["status"] == "False"
    warning = eventually(lambda: cluster.events("dup", "ApplyFailed"))
    assert warning[0]["type"] == "Warning" and "overlap" in warning[0]["message"]

    cluster_delete_stream(cluster, "SQUAT")
    eventually(lambda: in_sync(cluster, "streams", "dup"))
    assert stream_info(cluster.server, "DUP") is not None
    errors = cluster.operator.metrics.registry.get_sample_value(
        "headwater_operator_errors_total", {"kind": "Stream", "reason": "ApplyFailed"}
    )
    assert errors and errors >= 1


def test_a_resource_deleted_while_its_sync_is_in_flight_is_deleted_once_and_promptly(
    cluster: Cluster,
) -> None:
    """The sync timer is in the middle of a request when the resource is deleted.

    kopf does not release a resource while one of its timers runs; before, it looked again
    only after a minute (its default), or at the next change, when it ran the delete handler
    a second time (two events). Found in CI, where a deletion did not finish in 10 s.
    """
    cluster.create("Stream", "orders", ORDERS)
    eventually(lambda: in_sync(cluster, "streams", "orders"))
    cluster.server.signal(signal.SIGSTOP)  # the next sync's request goes unanswered
    try:
        time.sleep(3 * SYNC_INTERVAL)  # a sync is now waiting on its request
        cluster.delete("streams", "orders")
        time.sleep(2 * SYNC_INTERVAL)  # kopf has seen the deletion with the sync in flight
    finally:
        cluster.server.signal(signal.SIGCONT)
    eventually(lambda: cluster.get("streams", "orders") is None)
    assert stream_info(cluster.server, "ORDERS") is None
    assert len(cluster.events("orders", "Deleted")) == 1
    time.sleep(3 * SYNC_INTERVAL)  # a late sync does not bring it back
    assert stream_info(cluster.server, "ORDERS") is None
