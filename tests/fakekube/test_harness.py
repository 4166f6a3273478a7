"""The harness around the server: the background thread, the kubeconfig, the test-side API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from support.fakekube import FakeKubeThread, read_crds, write_kubeconfig

CRDS = Path(__file__).parent / "crds"


def request(kube: FakeKubeThread, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """A blocking HTTP call from the test thread, the way a sync client would make it."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {kube.token}", "Content-Type": "application/json"}
    req = urllib.request.Request(kube.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as failure:
        with failure:
            return failure.code, json.loads(failure.read())


def test_thread_server_serves_http_and_the_inspector(fake_kube_thread: FakeKubeThread) -> None:
    kube = fake_kube_thread
    body = {"metadata": {"name": "w1"}, "spec": {"color": "red"}}
    status, created = request(
        kube, "POST", "/apis/example.headwater.io/v1/namespaces/default/widgets", body
    )
    assert status == 201
    seen = kube.api.get("example.headwater.io/v1", "widgets", "w1")
    assert seen == created
    kube.api.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "conn", "namespace": "default"},
            "data": {"servers": "nats://127.0.0.1:4222"},
        }
    )
    status, config_map = request(kube, "GET", "/api/v1/namespaces/default/configmaps/conn")
    assert status == 200 and config_map["data"]["servers"] == "nats://127.0.0.1:4222"
    assert kube.api.resource_version == int(config_map["metadata"]["resourceVersion"])
    assert "GET /api/v1/namespaces/default/configmaps/conn" in kube.requests


def test_thread_server_stops_cleanly() -> None:
    kube = FakeKubeThread([CRDS / "widgets.yaml"])
    kube.start()
    url = kube.url
    kube.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/api", timeout=2)
    kube.stop()  # a second stop is harmless


def test_inspector_lists_events_by_object_and_reason(fake_kube_thread: FakeKubeThread) -> None:
    kube = fake_kube_thread
    for name, reason in (("w1", "Created"), ("w1", "Updated"), ("w2", "Created")):
        kube.api.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": "ev-", "namespace": "default"},
                "reason": reason,
                "involvedObject": {"kind": "Widget", "name": name, "namespace": "default"},
            }
        )
    assert len(kube.api.events("default")) == 3
    reasons = sorted(e["reason"] for e in kube.api.events(involved_name="w1"))
    assert reasons == ["Created", "Updated"]
    assert len(kube.api.events(reason="Created")) == 2


def test_kubeconfig_is_what_kopf_reads(
    fake_kube_thread: FakeKubeThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fake_kube_thread.write_kubeconfig(tmp_path / "kubeconfig")
    config = yaml.safe_load(path.read_text())
    assert config["current-context"] == "fakekube"
    # kopf's own fallback login (used when neither pykube nor kubernetes is installed).
    monkeypatch.setenv("KUBECONFIG", str(path))
    info = kopf.login_with_kubeconfig(settings=kopf.OperatorSettings())
    assert info is not None
    assert info.server == fake_kube_thread.url
    assert info.token == fake_kube_thread.token
    assert info.default_namespace == "default"
    direct = fake_kube_thread.connection_info()
    assert (direct.server, direct.token) == (info.server, info.token)


def test_kubeconfig_without_a_token(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", "http://127.0.0.1:1", None)
    assert yaml.safe_load(path.read_text())["users"] == [{"name": "fakekube", "user": {}}]


def test_read_crds_takes_multi_document_yaml(tmp_path: Path) -> None:
    crd = yaml.safe_load((CRDS / "widgets.yaml").read_text())
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump_all([other, crd, None]))
    assert read_crds(path) == [crd]
    assert read_crds(crd) == [crd]
