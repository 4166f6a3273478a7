"""Scope (one namespace, several, the whole cluster) and two replicas with kopf peering."""

from __future__ import annotations

import time

from headwater.testing import ServerProcess
from headwater_operator.handlers import Operator
from support.fakekube import FakeKubeThread
from tests.operator.conftest import (
    eventually,
    operator_config,
    run_operator,
    stream_info,
)


def make_namespaces(kube: FakeKubeThread, *names: str) -> None:
    for name in names:
        kube.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def create_stream(kube: FakeKubeThread, namespace: str, name: str) -> None:
    kube.api.create(
        {
            "apiVersion": "headwater.io/v1",
            "kind": "Stream",
            "metadata": {"name": name.lower(), "namespace": namespace},
            "spec": {"name": name},
        }
    )


def synced(kube: FakeKubeThread, namespace: str, name: str) -> bool:
    body = kube.api.get("headwater.io/v1", "streams", name, namespace=namespace) or {}
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(c["type"] == "InSync" and c["status"] == "True" for c in conditions)


def test_watches_only_the_namespaces_it_is_given(
    fake_kube_thread: FakeKubeThread, clean_server: ServerProcess
) -> None:
    kube = fake_kube_thread
    make_namespaces(kube, "team-a", "team-b", "other")
    _operator, runner = run_operator(
        kube, operator_config(clean_server), "--standalone", "-n", "team-a", "-n", "team-b"
    )
    with runner:
        create_stream(kube, "other", "OTHER")
        create_stream(kube, "team-a", "A")
        create_stream(kube, "team-b", "B")
        eventually(lambda: synced(kube, "team-a", "a") and synced(kube, "team-b", "b"))
        time.sleep(4 * 0.4)  # several sync intervals: "other" stays untouched
        assert stream_info(clean_server, "OTHER") is None
        other = kube.api.get("headwater.io/v1", "streams", "other", namespace="other") or {}
        assert "status" not in other
        assert not other["metadata"].get("finalizers")
    assert runner.exception is None


def test_cluster_wide(fake_kube_thread: FakeKubeThread, clean_server: ServerProcess) -> None:
    kube = fake_kube_thread
    make_namespaces(kube, "anywhere")
    _operator, runner = run_operator(kube, operator_config(clean_server), "--standalone", "-A")
    with runner:
        create_stream(kube, "anywhere", "ANYWHERE")
        eventually(lambda: synced(kube, "anywhere", "anywhere"))
    assert stream_info(clean_server, "ANYWHERE") is not None
    assert runner.exception is None


def reconciles(operator: Operator) -> float:
    total = 0.0
    for family in operator.metrics.registry.collect():
        if family.name == "headwater_operator_reconciles":
            total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return total


def test_two_replicas_with_peering(
    fake_kube_thread: FakeKubeThread, clean_server: ServerProcess
) -> None:
    kube = fake_kube_thread
    kube.api.create(
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfPeering",
            "metadata": {"name": "headwater", "namespace": "default"},
        }
    )
    peering = ("--peering", "headwater", "-n", "default")
    config = operator_config(clean_server, metrics_port=None)
    standby, standby_runner = run_operator(kube, config, *peering, "--priority", "10")
    active, active_runner = run_operator(kube, config, *peering, "--priority", "20")
    with standby_runner:
        with active_runner:

            def peers() -> int:
                body = kube.api.get("kopf.dev/v1", "kopfpeerings", "headwater") or {}
                return len(body.get("status") or {})

            eventually(lambda: peers() == 2, timeout=30)
            create_stream(kube, "default", "FIRST")
            # Generous: on a loaded machine kopf's peering may pause both replicas for a
            # moment while they settle who is active.
            eventually(lambda: synced(kube, "default", "first"), timeout=30)
            assert reconciles(active) >= 1
            assert reconciles(standby) == 0
        # The active replica left: the standby takes over.
        create_stream(kube, "default", "SECOND")
        eventually(lambda: synced(kube, "default", "second"), timeout=30)
        assert reconciles(standby) >= 1
    assert stream_info(clean_server, "SECOND") is not None
    assert standby_runner.exception is None and active_runner.exception is None
