"""The kustomize bases: every manifest parses, references resolve, selectors match labels."""

from __future__ import annotations

import functools
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from headwater.server.config.loader import load
from headwater.testing import ServerProcess
from headwater_operator.config import parse_args
from headwater_operator.crdgen import KIND_NAMES
from tests.operator.conftest import eventually, free_port

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "operator" / "deploy"


def kustomization_files(folder: Path) -> Iterator[Path]:
    """Every manifest a kustomization folder pulls in, following folder references."""
    body = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert body["kind"] == "Kustomization"
    for entry in body["resources"]:
        target = (folder / entry).resolve()
        assert target.exists(), f"{folder}: {entry} does not exist"
        if target.is_dir():
            yield from kustomization_files(target)
        else:
            yield target


@functools.cache
def documents() -> list[dict[str, Any]]:
    """Parsed once (the CRDs are large); tests only read them."""
    out = []
    for path in kustomization_files(DEPLOY):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                out.append(document)
    return out


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in by_kind(kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_every_manifest_parses_and_kinds_are_expected() -> None:
    kinds = sorted({d["kind"] for d in documents()})
    assert kinds == sorted(
        {
            "Namespace",
            "ConfigMap",
            "Service",
            "StatefulSet",
            "PodDisruptionBudget",
            "CustomResourceDefinition",
            "ClusterKopfPeering",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
        }
    )
    for document in documents():
        assert document["apiVersion"] and document["metadata"]["name"]
    names = {d["metadata"]["name"] for d in by_kind("CustomResourceDefinition")}
    assert {f"{n.plural}.headwater.io" for n in KIND_NAMES.values()} <= names


def test_workload_selectors_match_their_pod_labels() -> None:
    workloads = by_kind("StatefulSet") + by_kind("Deployment")
    for workload in workloads:
        selector = workload["spec"]["selector"]["matchLabels"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert matches(selector, labels), workload["metadata"]["name"]
    for service in by_kind("Service"):
        selected = [
            w
            for w in workloads
            if matches(service["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])
        ]
        assert selected, service["metadata"]["name"]
    for budget in by_kind("PodDisruptionBudget"):
        labels = one("StatefulSet")["spec"]["template"]["metadata"]["labels"]
        assert matches(budget["spec"]["selector"]["matchLabels"], labels)


def test_engine_statefulset_volumes_probes_and_services() -> None:
    sts = one("StatefulSet", "headwater")
    headless = one("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert one("Service", "headwater")["spec"].get("clusterIP") != "None"
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {port["name"] for port in container["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"].startswith("/healthz")
        assert container[probe]["httpGet"]["port"] in ports
    assert "preStop" in container["lifecycle"]
    assert container["resources"]["requests"]
    claims = {claim["metadata"]["name"] for claim in sts["spec"]["volumeClaimTemplates"]}
    volumes = {volume["name"] for volume in pod["volumes"]} | claims
    assert {mount["name"] for mount in container["volumeMounts"]} <= volumes
    for volume in pod["volumes"]:
        if "configMap" in volume:
            one("ConfigMap", volume["configMap"]["name"])
    for service in by_kind("Service"):
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports


def test_engine_config_is_valid_for_headwater_server(tmp_path: Path) -> None:
    text = one("ConfigMap", "headwater-config")["data"]["headwater.conf"]
    path = tmp_path / "headwater.conf"
    path.write_text(text)
    result = load(["-c", str(path), "-t"])
    assert result.action == "test_config"
    assert result.settings.port == 4222
    settings = result.settings
    sts = one("StatefulSet", "headwater")
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert settings.jetstream.enabled
    assert settings.jetstream.store_dir == mounts["data"]  # the PVC
    assert str(Path(settings.pid_file).parent) == mounts["pid"]
    assert container["command"][-1].startswith(mounts["config"])
    # preStop waits out lame duck, and the pod's grace period covers the wait.
    stop = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    assert settings.pid_file in stop and "USR2" in stop
    wait = int(stop.rsplit("sleep", 1)[1])
    assert settings.lame_duck_duration < wait < pod["terminationGracePeriodSeconds"]


def test_operator_deployment_rbac_and_flags() -> None:
    deployment = one("Deployment", "headwater-operator")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    account = one("ServiceAccount", pod["serviceAccountName"])
    binding = one("ClusterRoleBinding", "headwater-operator")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "headwater"}
    ]
    role = one("ClusterRole", binding["roleRef"]["name"])
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for names in KIND_NAMES.values():
        for verb in ("list", "watch", "patch"):
            assert ("headwater.io", names.plural, verb) in granted
        assert ("headwater.io", f"{names.plural}/status", "patch") in granted
    assert ("", "events", "create") in granted
    assert ("kopf.dev", "clusterkopfpeerings", "patch") in granted
    assert not any(verb in ("delete", "*") for _, _, verb in granted)
    (container,) = pod["containers"]
    binary, *args = container["command"]
    assert binary == "headwater-operator"
    env = {item["name"]: item.get("value", "") for item in container.get("env", [])}
    config, kopf_args = parse_args(args, env)
    assert config.connection.servers == ("nats://headwater.headwater.svc:4222",)
    assert config.metrics_port == 9090
    assert "--all-namespaces" in kopf_args
    assert any(arg.startswith("--peering=") for arg in kopf_args)
    liveness = next(arg for arg in kopf_args if arg.startswith("--liveness="))
    port = int(liveness.rsplit(":", 1)[1].split("/")[0])
    assert container["livenessProbe"]["httpGet"]["port"] in {
        p["name"] for p in container["ports"] if p["containerPort"] == port
    }
    peering = liveness and next(a for a in kopf_args if a.startswith("--peering="))
    one("ClusterKopfPeering", peering.split("=", 1)[1])


@pytest.mark.parametrize("path", sorted(DEPLOY.rglob("*.yaml")), ids=lambda p: p.name)
def test_every_yaml_file_is_in_a_kustomization(path: Path) -> None:
    listed = set(kustomization_files(DEPLOY))
    assert path.name == "kustomization.yaml" or path.resolve() in listed


def probe_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def test_engine_config_probes_and_pre_stop_on_a_real_server(tmp_path: Path) -> None:
    """headwater-server runs the ConfigMap's config (paths moved to a temp dir), answers the
    StatefulSet's probes, and the preStop command puts it in lame-duck mode."""
    text = one("ConfigMap", "headwater-config")["data"]["headwater.conf"]
    pid_file = tmp_path / "headwater.pid"
    text = text.replace("/var/run/headwater/headwater.pid", str(pid_file))
    text = text.replace("store_dir: /data", f"store_dir: {tmp_path / 'data'}")
    config = tmp_path / "headwater.conf"
    config.write_text(text)
    http_port = free_port()
    server = ServerProcess(
        "headwater", args=["-c", str(config), "-a", "127.0.0.1", "-p", "-1", "-m", str(http_port)]
    )
    server.start()
    try:
        (container,) = one("StatefulSet", "headwater")["spec"]["template"]["spec"]["containers"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            path = container[probe]["httpGet"]["path"]
            assert probe_status(f"http://127.0.0.1:{http_port}{path}") == 200, probe
        # A connected client keeps the server in lame duck for the grace period (with no
        # clients it stops at once, as nats-server does).
        client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        client.recv(4096)  # INFO
        client.sendall(b"CONNECT {}\r\nPING\r\n")
        assert b"PONG" in client.recv(4096)
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        script = command[-1].replace("/var/run/headwater/headwater.pid", str(pid_file))
        script = script.rsplit("&& sleep", 1)[0]  # the wait is the pod's business
        subprocess.run([*command[:-1], script], check=True, timeout=10)
        readiness = container["readinessProbe"]["httpGet"]["path"]
        # Kubernetes counts any answer outside 200-399 as a failed probe: the pod leaves
        # the Service's endpoints while clients drain.
        failing = eventually(
            lambda: (
                probe_status(f"http://127.0.0.1:{http_port}{readiness}") >= 400
                and probe_status(f"http://127.0.0.1:{http_port}{readiness}")
            )
        )
        assert failing in (500, 503)
        client.close()
    finally:
        server.cleanup()
