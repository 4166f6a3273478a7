"""Expected waits are not errors, and status carries what the printer columns show.

A Consumer applied before its Stream, and a Stream deleted before its Consumers, are the
ordering ``kubectl apply -f dir/`` and ``kubectl delete -f dir/`` produce every day: the
operator waits (and retries), and says so at INFO, with no ERROR log record and no kopf
"Error" Event. Run through kopf's real runner against Headwater and nats-server.
"""

from __future__ import annotations

import logging

import pytest

from tests.operator.conftest import Cluster, eventually

ORDERS = {"name": "ORDERS", "subjects": ["ORDERS.*"], "storage": "memory"}
NEW = {"streamName": "ORDERS", "durableName": "NEW", "filterSubject": "ORDERS.received"}
BOTH = {
    "stream_name": "ORDERS",
    "durable_name": "BOTH",
    "filter_subjects": ["ORDERS.a", "ORDERS.b"],
    "ack_policy": "none",
}


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in list(caplog.records)
        if r.levelno >= logging.ERROR
    ]


def _retries(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in list(caplog.records))


def test_waiting_for_a_stream_and_for_consumers_logs_no_error(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    cluster.create("Consumer", "orders-new", NEW)
    # At least two retries, so the handler has raised (and kopf logged) more than once.
    eventually(lambda: _retries(caplog, "does not exist on the server (yet)") >= 2)
    cluster.create("Stream", "orders", ORDERS)
    eventually(lambda: cluster.condition("consumers", "orders-new", "InSync").get("status"))
    eventually(lambda: cluster.condition("consumers", "orders-new", "InSync")["status"] == "True")

    cluster.delete("streams", "orders")
    eventually(lambda: _retries(caplog, "to be deleted first") >= 2)
    cluster.delete("consumers", "orders-new")
    eventually(lambda: cluster.get("streams", "orders") is None)

    assert _errors(caplog) == []
    waits = [
        r
        for r in list(caplog.records)
        if "does not exist on the server (yet)" in r.getMessage()
        or "to be deleted first" in r.getMessage()
    ]
    assert waits and {r.levelno for r in waits} == {logging.INFO}
    for name in ("orders", "orders-new"):
        kinds = {e.get("type") for e in cluster.events(name)}
        assert "Error" not in kinds, (name, cluster.events(name))
    assert {e["type"] for e in cluster.events("orders-new", "Waiting")} == {"Normal"}


def test_status_holds_the_printer_columns_values(cluster: Cluster) -> None:
    cluster.create("Stream", "orders", ORDERS)
    cluster.create("Consumer", "orders-new", NEW)
    cluster.create("Consumer", "orders-both", BOTH)
    eventually(lambda: cluster.condition("consumers", "orders-both", "InSync").get("status"))
    eventually(lambda: cluster.status("consumers", "orders-both").get("filterSubjects"))

    stream = cluster.status("streams", "orders")
    assert (stream["storage"], stream["replicas"]) == ("memory", 1)
    new = cluster.status("consumers", "orders-new")
    assert (new["filterSubjects"], new["ackPolicy"]) == (["ORDERS.received"], "explicit")
    both = cluster.status("consumers", "orders-both")
    assert (both["filterSubjects"], both["ackPolicy"]) == (["ORDERS.a", "ORDERS.b"], "none")
