"""Scope (one namespace, several, the whole cluster) and two replicas with kopf peering."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from headwater.testing import ServerProcess
from headwater_operator.config import parse_args
from headwater_operator.handlers import Operator
from support.fakekube import FakeKubeThread
from tests.operator.conftest import (
    eventually,
    free_port,
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


def peering_messages(caplog: pytest.LogCaptureFixture, prefix: str) -> list[str]:
    """kopf's peering decisions ("Pausing ...", "Resuming ..."), from every replica running
    in this process."""
    messages = [record.getMessage() for record in list(caplog.records)]
    return [message for message in messages if message.startswith(prefix)]


def peers(kube: FakeKubeThread, peering: dict[str, Any]) -> int:
    """How many replicas have announced themselves in the peering object."""
    plural = peering["kind"].lower() + "s"
    namespace = peering["metadata"].get("namespace")
    body = kube.api.get("kopf.dev/v1", plural, peering["metadata"]["name"], namespace=namespace)
    return len((body or {}).get("status") or {})


def failover(
    kube: FakeKubeThread,
    server: ServerProcess,
    caplog: pytest.LogCaptureFixture,
    peering: dict[str, Any],
    standby: tuple[Operator, Any],
    active: tuple[Operator, Any],
) -> None:
    """Two replicas on one peering object: only ``active`` handles a new Stream; when it
    leaves, ``standby`` handles the next one.

    The order is deterministic so that no wait depends on timing: kopf starts every replica
    paused until it has read the peering object, and logs a pause only when an active replica
    turns standby. So the standby starts alone and becomes active ("Resuming"), then the other
    replica joins and the standby must log its pause before a resource is created.
    """
    caplog.set_level(logging.INFO)
    namespace = peering["metadata"].get("namespace", "default")
    (standby_operator, standby_runner), (active_operator, active_runner) = standby, active
    with standby_runner:
        eventually(lambda: peers(kube, peering) == 1, timeout=30)
        eventually(lambda: peering_messages(caplog, "Resuming"), timeout=30)
        with active_runner:
            eventually(lambda: peers(kube, peering) == 2, timeout=30)
            eventually(lambda: peering_messages(caplog, "Pausing"), timeout=30)
            create_stream(kube, namespace, "FIRST")
            try:
                eventually(lambda: synced(kube, namespace, "first"), timeout=30)
            except AssertionError as failure:
                raise AssertionError(f"{failure}: {peering_messages(caplog, 'Pausing')}") from None
            eventually(lambda: reconciles(active_operator) >= 1)
            assert reconciles(standby_operator) == 0
            # Different priorities: never kopf's "pause everybody" for equal ones.
            assert not peering_messages(caplog, "Pausing all operators")
        # The active replica left (and took itself out of the peering): the standby resumes.
        create_stream(kube, namespace, "SECOND")
        eventually(lambda: synced(kube, namespace, "second"), timeout=30)
        eventually(lambda: reconciles(standby_operator) >= 1)
    assert stream_info(server, "SECOND") is not None
    assert standby_runner.exception is None and active_runner.exception is None


def test_two_replicas_with_peering(
    fake_kube_thread: FakeKubeThread, clean_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    kube = fake_kube_thread
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering",
        "metadata": {"name": "headwater", "namespace": "default"},
    }
    kube.api.create(peering)
    options = ("--peering", "headwater", "-n", "default")
    config = operator_config(clean_server, metrics_port=None)
    standby = run_operator(kube, config, *options, "--priority", "10")
    active = run_operator(kube, config, *options, "--priority", "20")
    failover(kube, clean_server, caplog, peering, standby, active)


DEPLOYMENT = Path(__file__).resolve().parents[2] / "operator" / "deploy" / "operator"


def deployment_args() -> tuple[list[str], dict[str, str]]:
    """The shipped Deployment's operator arguments and literal environment."""
    deployment = yaml.safe_load((DEPLOYMENT / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    _binary, *args = container["command"]
    env = {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}
    return args, env


def kopf_priority(kopf_args: list[str]) -> int:
    """The priority kopf will run with (its default is 0)."""
    for arg in kopf_args:
        if arg.startswith("--priority="):
            return int(arg.split("=", 1)[1])
    return 0


def test_the_deployments_two_replicas_elect_one(
    fake_kube_thread: FakeKubeThread, clean_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Both replicas of operator/deploy run with the same flags (no --priority), their pod
    names apart: one handles resources, and when it leaves the other takes over."""
    kube = fake_kube_thread
    (peering,) = yaml.safe_load_all((DEPLOYMENT / "peering.yaml").read_text())
    kube.api.create(peering)
    args, env = deployment_args()
    replicas: list[tuple[int, tuple[Operator, Any]]] = []
    for pod in ("headwater-operator-5f7b9c-x2k4q", "headwater-operator-5f7b9c-m8z7d"):
        _config, kopf_args = parse_args(args, {**env, "POD_NAME": pod})
        # The pod's liveness port would clash between two replicas on one host.
        kopf_args = [
            f"--liveness=http://127.0.0.1:{free_port()}/healthz"
            if arg.startswith("--liveness")
            else arg
            for arg in kopf_args
        ]
        config = operator_config(clean_server, metrics_port=None)
        replicas.append((kopf_priority(kopf_args), run_operator(kube, config, *kopf_args)))
    # The higher priority is the one that becomes active.
    (_, standby), (_, active) = sorted(replicas, key=lambda replica: replica[0])
    failover(kube, clean_server, caplog, peering, standby, active)
