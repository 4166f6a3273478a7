"""The kustomize bases: every manifest parses, references resolve, selectors match labels,
and the install order works on a fresh cluster (CRDs first, Established, then the rest).

The engine is a cluster of three pods: its config is loaded for each pod with the
environment the kubelet would give it (routes, advertised address, etcd bootstrap plan), and
run on three real servers with the pods' DNS names mapped to local ports."""

from __future__ import annotations

import functools
import inspect
import re
import shlex
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from headwater.server.config.loader import LoadResult, load
from headwater.server.meta.bootstrap import (
    CLIENT_PORT_OFFSET,
    PEER_PORT_OFFSET,
    Mode,
    member_address,
    plan_bootstrap,
)
from headwater.server.meta.etcdmember import EtcdMember
from headwater.testing import ServerProcess
from headwater_operator.config import parse_args
from headwater_operator.crdgen import KIND_NAMES
from support.fakekube import ApiError, FakeKubeThread
from tests.operator.conftest import eventually, free_port

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "operator" / "deploy"
DEPLOY_CRDS = DEPLOY / "crds"
# The two steps of an install, in order: `kubectl apply -k` of each.
INSTALL = (DEPLOY_CRDS, DEPLOY)
# The names kustomize looks for in a folder (exactly one may be there).
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def kustomization_file(folder: Path) -> Path:
    found = [folder / name for name in KUSTOMIZATION_NAMES if (folder / name).exists()]
    assert len(found) == 1, f"{folder}: {found}"
    return found[0]


def kustomization_files(folder: Path) -> Iterator[Path]:
    """Every manifest a kustomization folder pulls in, following folder references."""
    body = yaml.safe_load(kustomization_file(folder).read_text())
    assert body["kind"] == "Kustomization"
    for entry in body["resources"]:
        target = (folder / entry).resolve()
        assert target.exists(), f"{folder}: {entry} does not exist"
        if target.is_dir():
            yield from kustomization_files(target)
        else:
            # kustomize refuses files outside the folder's tree (a folder is fine).
            assert target.is_relative_to(folder.resolve()), f"{folder}: {entry} is outside"
            yield target


def read_manifests(paths: Iterator[Path]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                out.append(document)
    return out


@functools.cache
def applied(folder: Path) -> list[dict[str, Any]]:
    """What `kubectl apply -k folder` sends (before kustomize's transformers)."""
    return read_manifests(kustomization_files(folder))


def documents() -> list[dict[str, Any]]:
    """Everything an install applies, both steps. Parsed once (the CRDs are large); tests
    only read them."""
    return [document for folder in INSTALL for document in applied(folder)]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in by_kind(kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


NAMESPACE = yaml.safe_load(kustomization_file(DEPLOY).read_text())["namespace"]


def engine() -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine StatefulSet and its one container."""
    sts = one("StatefulSet", "headwater")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return sts, container


def engine_pods() -> list[str]:
    """The StatefulSet's pod names: ``<name>-<ordinal>`` for every ordinal below replicas."""
    sts, _ = engine()
    return [f"{sts['metadata']['name']}-{i}" for i in range(sts["spec"]["replicas"])]


_K8S_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def pod_environment(pod: str) -> dict[str, str]:
    """The engine container's environment in pod ``pod``, as the kubelet builds it: a
    ``fieldRef`` to ``metadata.name`` is the pod's name, and ``$(NAME)`` in a value is
    replaced by an entry defined earlier in the list (``$$`` is a literal ``$``; an unknown
    name stays as written)."""
    _, container = engine()
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "valueFrom" in item:
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, item
            env[item["name"]] = pod
            continue

        def expand(found: re.Match[str]) -> str:
            if found.group(0) == "$$":
                return "$"
            return env.get(found.group(1), found.group(0))

        env[item["name"]] = _K8S_VAR.sub(expand, str(item.get("value", "")))
    return env


def engine_config_text() -> str:
    return str(one("ConfigMap", "headwater-config")["data"]["headwater.conf"])


def load_pod_config(pod: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LoadResult:
    """``headwater-server -c headwater.conf -t`` with pod ``pod``'s environment."""
    path = tmp_path / f"{pod}.conf"
    path.write_text(engine_config_text())
    with monkeypatch.context() as patch:
        for name, value in pod_environment(pod).items():
            patch.setenv(name, value)
        return load(["-c", str(path), "-t"])


def route_address(route: str) -> str:
    """``host:port`` of a route URL exactly as spelled (credentials dropped)."""
    return urllib.parse.urlsplit(route).netloc.rsplit("@", 1)[-1]


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


def test_engine_config_is_valid_for_headwater_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pods = engine_pods()
    result = load_pod_config(pods[0], tmp_path, monkeypatch)
    assert result.action == "test_config"
    assert result.settings.port == 4222
    settings = result.settings
    sts, container = engine()
    pod = sts["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert settings.jetstream.enabled
    assert settings.jetstream.store_dir == mounts["data"]  # the PVC
    assert str(Path(settings.pid_file).parent) == mounts["pid"]
    assert container["command"][-1].startswith(mounts["config"])
    # preStop waits out lame duck and the etcd member's stop (the server stops it once lame
    # duck is over), and the pod's grace period covers the wait and a stop after SIGTERM.
    stop = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    assert settings.pid_file in stop and "USR2" in stop
    wait = int(stop.rsplit("sleep", 1)[1])
    etcd_stop = inspect.signature(EtcdMember).parameters["stop_timeout"].default
    assert settings.lame_duck_duration + etcd_stop <= wait
    assert wait + etcd_stop < pod["terminationGracePeriodSeconds"]


def test_engine_runs_three_replicas_started_in_parallel() -> None:
    """Three etcd members keep a quorum with one down. They bootstrap statically, and the
    first one has no quorum until a second runs: an OrderedReady StatefulSet would wait for
    pod 0 to be ready before starting pod 1, for ever."""
    sts, _ = engine()
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["podManagementPolicy"] == "Parallel"


def test_engine_pod_name_comes_from_the_downward_api() -> None:
    _, container = engine()
    env = {item["name"]: item for item in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    for pod in engine_pods():
        assert pod_environment(pod)["POD_NAME"] == pod


def test_engine_config_for_every_pod_bootstraps_one_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For each pod, with its environment: the config passes ``-t``, names the server after
    the pod, routes to every pod of the StatefulSet by its stable DNS name (and to nothing
    else), and advertises the pod spelled as the routes spell it, so that its etcd member
    bootstraps statically with the others (``plan_bootstrap``)."""
    sts, _ = engine()
    pods = engine_pods()
    service = sts["spec"]["serviceName"]
    domain = rf"\.{re.escape(service)}(\.{NAMESPACE}(\.svc(\.cluster\.local)?)?)?"
    pod_host = re.compile(rf"({re.escape(sts['metadata']['name'])}-(\d+)){domain}")
    members = set()
    for pod in pods:
        result = load_pod_config(pod, tmp_path, monkeypatch)
        assert result.action == "test_config", pod
        settings = result.settings
        assert settings.server_name == pod
        cluster = settings.cluster
        assert cluster.name and cluster.host == "0.0.0.0"
        routed = set()
        for route in cluster.routes:
            host, port = route_address(route).rsplit(":", 1)
            found = pod_host.fullmatch(host)
            assert found, f"{route} is not a pod of {service}"
            assert int(found.group(2)) < len(pods), f"{route}: no such pod"
            assert int(port) == cluster.port, route
            routed.add(found.group(1))
        assert routed == set(pods), pod
        assert cluster.advertise in {route_address(route) for route in cluster.routes}, pod
        advertised = pod_host.fullmatch(cluster.advertise.rsplit(":", 1)[0])
        assert advertised and advertised.group(1) == pod, cluster.advertise
        plan = plan_bootstrap(f"nats-route://{cluster.advertise}", cluster.routes, False)
        assert plan.mode is Mode.STATIC and len(plan.initial_cluster) == len(pods), pod
        members.add(member_address(f"nats-route://{cluster.advertise}").name)
    assert len(members) == len(pods)


def engine_cluster_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[int, str]:
    """The route port and the etcd member's ports derived from it: port -> what it is for."""
    port = load_pod_config(engine_pods()[0], tmp_path, monkeypatch).settings.cluster.port
    return {
        port: "routes",
        port + CLIENT_PORT_OFFSET: "etcd client",
        port + PEER_PORT_OFFSET: "etcd peer",
    }


def test_engine_cluster_ports_on_the_pod_and_the_headless_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Routes and etcd's ports are open on the container and published by the headless
    Service, with not-ready pods included: the pods must reach each other to become ready."""
    wanted = engine_cluster_ports(tmp_path, monkeypatch)
    sts, container = engine()
    by_name = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert [what for port, what in wanted.items() if port not in by_name.values()] == []
    headless = one("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["publishNotReadyAddresses"] is True
    published = {by_name.get(p["targetPort"], p["targetPort"]) for p in headless["spec"]["ports"]}
    assert [what for port, what in wanted.items() if port not in published] == []
    for port in headless["spec"]["ports"]:
        assert port["port"] == by_name.get(port["targetPort"], port["targetPort"]), port
    # The client Service balances clients; routes and etcd go to a given pod, never through it.
    client = one("Service", "headwater")
    assert not {by_name.get(p["targetPort"]) for p in client["spec"]["ports"]} & set(wanted)


def test_engine_probes_wait_for_the_cluster_metadata() -> None:
    """Started (and so ready for the first time, which a rolling update waits for) once
    JetStream has joined the cluster's metadata and every replica here caught up (plain
    /healthz answers 503 until then); then ready and alive while JetStream runs, as the NATS
    Helm chart's probes; a generous start-up budget for the join and the catch-up."""
    _, container = engine()
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz?js-enabled-only=true"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz?js-enabled-only=true"
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/healthz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_engine_disruption_budget_keeps_the_etcd_quorum() -> None:
    sts, _ = engine()
    (budget,) = by_kind("PodDisruptionBudget")
    assert matches(
        budget["spec"]["selector"]["matchLabels"], sts["spec"]["template"]["metadata"]["labels"]
    )
    replicas = sts["spec"]["replicas"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert replicas - budget["spec"]["maxUnavailable"] > replicas // 2


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
    # Every engine pod, by its stable name: a connection that finds one down tries the next.
    service = one("StatefulSet", "headwater")["spec"]["serviceName"]
    assert config.connection.servers == tuple(
        f"nats://{pod}.{service}.{NAMESPACE}.svc:4222" for pod in engine_pods()
    )
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
    listed = {file for folder in INSTALL for file in kustomization_files(folder)}
    assert path.name in KUSTOMIZATION_NAMES or path.resolve() in listed


def crd_names(documents: list[dict[str, Any]]) -> set[str]:
    return {d["metadata"]["name"] for d in documents if d["kind"] == "CustomResourceDefinition"}


def defined_kinds(documents: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(group, kind) of every CRD among ``documents``."""
    return {
        (d["spec"]["group"], d["spec"]["names"]["kind"])
        for d in documents
        if d["kind"] == "CustomResourceDefinition"
    }


def test_crds_are_their_own_first_step() -> None:
    """`kubectl apply -k operator/deploy/crds` holds every CRD (headwater.io and kopf's
    peering), and nothing else; `kubectl apply -k operator/deploy` holds no CRD."""
    crds = applied(DEPLOY_CRDS)
    assert {d["kind"] for d in crds} == {"CustomResourceDefinition"}
    expected = {f"{n.plural}.headwater.io" for n in KIND_NAMES.values()}
    expected |= {"kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}
    assert crd_names(crds) == expected
    assert crd_names(applied(DEPLOY)) == set()


def kustomization_folders() -> list[Path]:
    folders = {
        path.parent
        for name in KUSTOMIZATION_NAMES
        for path in [*REPO.glob(f"crds/{name}"), *DEPLOY.rglob(name)]
    }
    return sorted(folders)


@pytest.mark.parametrize("folder", kustomization_folders(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_kustomization_applies_a_custom_object_with_its_crd(folder: Path) -> None:
    """A custom object sent in the same `kubectl apply` as its CRD fails on a fresh cluster
    (no mapping for the kind yet)."""
    documents = read_manifests(kustomization_files(folder))
    kinds = defined_kinds(documents)
    together = [
        f"{d['kind']} {d['metadata']['name']}"
        for d in documents
        if (str(d["apiVersion"]).split("/")[0], d["kind"]) in kinds
    ]
    assert together == [], folder


def kubectl_commands(script: str) -> list[list[str]]:
    """The script's kubectl commands, split as the shell would (continuations joined,
    comment lines dropped)."""
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["kubectl"]:
            commands.append(words)
    return commands


def test_kind_sh_applies_the_crds_waits_for_them_then_the_rest() -> None:
    commands = kubectl_commands((DEPLOY / "kind.sh").read_text())

    def folder(command: list[str]) -> Path:
        return Path(command[command.index("-k") + 1].replace("$root", str(REPO))).resolve()

    applies = [i for i, command in enumerate(commands) if command[1:2] == ["apply"]]
    waits = [i for i, command in enumerate(commands) if command[1:2] == ["wait"]]
    installs = [i for i in applies if "-k" in commands[i]]
    assert [folder(commands[i]) for i in installs] == [DEPLOY_CRDS, DEPLOY], commands
    between = [i for i in waits if installs[0] < i < installs[1]]
    assert len(between) == 1, "one wait between the two applies"
    wait = commands[between[0]]
    assert "--for=condition=established" in [w.lower() for w in wait] or (
        "--for" in wait and wait[wait.index("--for") + 1].lower() == "condition=established"
    )
    assert any(word.startswith("--timeout") for word in wait)
    waited = {word.removeprefix("crd/") for word in wait if word.startswith("crd/")}
    assert waited == crd_names(applied(DEPLOY_CRDS))


def kubectl_verb(command: list[str]) -> str:
    """``apply``, ``wait`` ...: the first word after ``kubectl`` and its ``-n NAMESPACE``."""
    words = command[1:]
    while words and words[0] in ("-n", "--namespace"):
        words = words[2:]
    return words[0] if words else ""


def test_kind_sh_waits_for_every_engine_pod() -> None:
    """After the install, kind.sh waits (bounded) until every engine pod is Ready, i.e. has
    joined the cluster's metadata, before it creates the example stream."""
    commands = kubectl_commands((DEPLOY / "kind.sh").read_text())
    applies = [i for i, c in enumerate(commands) if kubectl_verb(c) == "apply"]
    install = next(i for i in applies if commands[i][-1] == "$root/operator/deploy")
    example = next(i for i in applies if "-f" in commands[i])
    waits = [
        c
        for c in commands[install + 1 : example]
        if kubectl_verb(c) == "wait" and "--for=condition=Ready" in c
    ]
    waited = {word.removeprefix("pod/") for c in waits for word in c if word.startswith("pod/")}
    assert waited == set(engine_pods())
    for command in waits:
        timeout = next(w for w in command if w.startswith("--timeout="))
        assert int(timeout.removeprefix("--timeout=").removesuffix("s")) > 0
        assert command[command.index("-n") + 1] == NAMESPACE


def test_peering_object_is_refused_before_its_crd_and_accepted_after() -> None:
    """The fake API server without kopf's peering types built in, like a fresh cluster."""
    (peering,) = [d for d in applied(DEPLOY) if d["apiVersion"].startswith("kopf.dev/")]
    with FakeKubeThread(kopf_peerings=False) as kube:
        with pytest.raises(ApiError) as refused:
            kube.api.create(peering)
        assert refused.value.code == 404
        for crd in applied(DEPLOY_CRDS):
            kube.api.create(crd)
        created = kube.api.create(peering)
        assert created["metadata"]["name"] == "headwater-operator"
        assert kube.api.get("kopf.dev/v1", "clusterkopfpeerings", "headwater-operator")


def probe_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def free_port_run(span: int, taken: set[int], tries: int = 50) -> int:
    """A port P with P .. P + span - 1 free a moment ago and none of them in ``taken``."""
    for _ in range(tries):
        base = free_port()
        run = range(base, base + span)
        if taken.intersection(run) or base + span > 65535:
            continue
        socks = [socket.socket() for _ in run]
        try:
            for sock, port in zip(socks, run, strict=True):
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
        taken.update(run)
        return base
    raise RuntimeError(f"no run of {span} free ports")


def test_engine_config_probes_and_pre_stop_on_a_real_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three headwater-servers run the ConfigMap's config, one per pod with the pod's
    environment, the pods' DNS names standing for 127.0.0.1 and ports of their own (paths
    moved to a temp dir). The first alone is not ready (its etcd member, bootstrapping
    statically, has no quorum); once all three run they join and every probe answers 200; the
    preStop command puts a server in lame-duck mode, and its readiness fails."""
    text = engine_config_text()
    pods = engine_pods()
    cluster = load_pod_config(pods[0], tmp_path, monkeypatch).settings.cluster
    port = cluster.port
    service = one("StatefulSet", "headwater")["spec"]["serviceName"]
    taken: set[int] = set()
    local = {f"{pod}.{service}:{port}": f"127.0.0.1:{free_port_run(3, taken)}" for pod in pods}
    assert f"listen: 0.0.0.0:{port}" in text
    (container,) = one("StatefulSet", "headwater")["spec"]["template"]["spec"]["containers"]
    servers: list[ServerProcess] = []
    try:
        for pod in pods:
            folder = tmp_path / pod
            folder.mkdir()
            env = pod_environment(pod)
            me = local[env["CLUSTER_ADVERTISE"]]
            env = {name: local.get(value, value) for name, value in env.items()}
            pod_text = text.replace(f"listen: 0.0.0.0:{port}", f"listen: {me}")
            for name, address in local.items():
                assert name in pod_text
                pod_text = pod_text.replace(name, address)
            pod_text = pod_text.replace(
                "/var/run/headwater/headwater.pid", str(folder / "headwater.pid")
            )
            pod_text = pod_text.replace("store_dir: /data", f"store_dir: {folder / 'data'}")
            (folder / "headwater.conf").write_text(pod_text)
            http_port = free_port()
            args = ["-c", str(folder / "headwater.conf"), "-a", "127.0.0.1", "-p", "-1"]
            server = ServerProcess("headwater", args=[*args, "-m", str(http_port)], env=env)
            servers.append(server)
            server.start()
            server.http_port = http_port
            if len(servers) == 1:
                # Alone, its etcd member has no quorum: up, but not ready.
                url = f"http://127.0.0.1:{http_port}/healthz"
                assert probe_status(url) == 503
                assert probe_status(url + "?js-enabled-only=true") == 200
        for server in servers:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                path = container[probe]["httpGet"]["path"]
                url = f"http://127.0.0.1:{server.http_port}{path}"
                eventually(lambda url=url: probe_status(url) == 200, timeout=30)
            assert f"JetStream cluster {cluster.name}: joined" in server.log()
        # The first bootstrapped etcd statically (with the others listed); one that starts
        # when two already serve may join them instead, as a late pod does.
        assert "static) in" in servers[0].log()
        server = servers[0]
        pid_file = tmp_path / pods[0] / "headwater.pid"
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
        url = f"http://127.0.0.1:{server.http_port}{readiness}"
        # Kubernetes counts any answer outside 200-399 as a failed probe: the pod leaves
        # the Service's endpoints while clients drain.
        failing = eventually(lambda: probe_status(url) >= 400 and probe_status(url))
        assert failing in (500, 503)
        client.close()
    finally:
        for server in servers:
            server.cleanup()


BACKUPS_OVERLAY = REPO / "examples" / "operator-backups"


# The strategic-merge keys of the lists the backups patch touches (kustomize merges these lists
# item by item; anything else a patch sets replaces the base's value).
MERGE_KEYS = {"containers": "name", "volumeMounts": "mountPath", "volumes": "name"}


def strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    """The subset of kustomize's strategic merge the examples' patches use."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = strategic_merge(base[key], value, key) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        merged_list = list(base)
        for item in patch:
            at = [i for i, old in enumerate(merged_list) if old.get(key) == item.get(key)]
            if at:
                merged_list[at[0]] = strategic_merge(merged_list[at[0]], item)
            else:
                merged_list.append(item)
        return merged_list
    return patch


def rendered(folder: Path) -> list[dict[str, Any]]:
    """What ``kubectl kustomize folder`` renders, for an overlay of resources, a namespace and
    strategic-merge patches (the examples' shape), without needing kubectl."""
    body = yaml.safe_load(kustomization_file(folder).read_text())
    documents = [dict(d) for d in applied(folder)]
    for document in documents:
        if "namespace" in body and document["kind"] not in CLUSTER_SCOPED:
            document["metadata"] = {**document["metadata"], "namespace": body["namespace"]}
    for entry in body.get("patches", []):
        (patch,) = [d for d in yaml.safe_load_all((folder / entry["path"]).read_text()) if d]
        (index,) = [
            i
            for i, d in enumerate(documents)
            if d["kind"] == patch["kind"] and d["metadata"]["name"] == patch["metadata"]["name"]
        ]
        documents[index] = strategic_merge(documents[index], patch)
    return documents


CLUSTER_SCOPED = {
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "ClusterKopfPeering",
    "Namespace",
}


def test_backups_overlay_mounts_a_volume_where_the_docs_say() -> None:
    """docs/OPERATOR.md sends ``restore.from`` to /backups: the overlay it shows must render
    to the operator Deployment with that volume, read-only."""
    documents = rendered(BACKUPS_OVERLAY)
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    (claim,) = [d for d in documents if d["kind"] == "PersistentVolumeClaim"]
    assert claim["metadata"]["namespace"] == "headwater"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/backups"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    backups = volumes[mounts["/backups"]["name"]]["persistentVolumeClaim"]
    assert backups["claimName"] == claim["metadata"]["name"]
    assert "/var/cache/headwater-operator" in mounts  # the base's mounts are kept
    docs = (REPO / "docs" / "OPERATOR.md").read_text(encoding="utf-8")
    assert "examples/operator-backups" in docs and "from: /backups/" in docs
