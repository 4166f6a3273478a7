"""kopf's real runner against the fake server: the operator in widget_operator.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
from kopf.testing import KopfRunner

from support.fakekube import FakeKubeThread

OPERATOR = Path(__file__).parent / "widget_operator.py"
FINALIZER = "example.headwater.io/finalizer"


def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail with its last value."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, f"condition not met within {timeout}s (last: {result!r})"
            return result
        time.sleep(0.05)


def widget(kube: FakeKubeThread, name: str) -> dict[str, Any] | None:
    return kube.api.get("example.headwater.io/v1", "widgets", name)


def status_of(kube: FakeKubeThread, name: str) -> dict[str, Any]:
    return (widget(kube, name) or {}).get("status") or {}


def list_requests(kube: FakeKubeThread) -> int:
    return sum(
        1
        for line in kube.requests
        if line.startswith("GET /apis/example.headwater.io/v1/namespaces/default/widgets")
        and "watch=true" not in line
    )


@pytest.fixture
def kopf_env(fake_kube_thread: FakeKubeThread, monkeypatch: pytest.MonkeyPatch) -> None:
    """What widget_operator.py's login handler reads."""
    monkeypatch.setenv("FAKEKUBE_URL", fake_kube_thread.url)
    monkeypatch.setenv("FAKEKUBE_TOKEN", fake_kube_thread.token or "")


def run_operator(*options: str) -> KopfRunner:
    args = ["run", *options, "--namespace", "default", str(OPERATOR)]
    # A fresh registry: kopf loads the operator file anew for every run.
    return KopfRunner(args, registry=kopf.OperatorRegistry(), timeout=30)


@pytest.fixture
def operator(kopf_env: None) -> Iterator[KopfRunner]:
    with run_operator("--standalone") as runner:
        yield runner
    assert runner.exception is None
    assert runner.exit_code == 0


def test_widget_lifecycle_through_kopf(
    fake_kube_thread: FakeKubeThread, operator: KopfRunner
) -> None:
    kube = fake_kube_thread
    kube.api.create(
        {
            "apiVersion": "example.headwater.io/v1",
            "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default"},
            "spec": {"color": "red"},
        }
    )

    # create handler -> status patched through /status; kopf added its finalizer.
    eventually(lambda: status_of(kube, "w1").get("phase") == "Created")
    assert status_of(kube, "w1")["color"] == "red"
    assert FINALIZER in (widget(kube, "w1") or {})["metadata"]["finalizers"]
    created = eventually(lambda: kube.api.events("default", involved_name="w1", reason="Created"))
    assert created[0]["message"] == "widget w1 is red"
    assert created[0]["involvedObject"]["uid"] == (widget(kube, "w1") or {})["metadata"]["uid"]

    # timer: patches status repeatedly.
    eventually(lambda: status_of(kube, "w1").get("ticks", 0) >= 2)

    # update handler: runs on a spec change, which bumps the generation.
    kube.api.patch("example.headwater.io/v1", "widgets", "w1", {"spec": {"color": "blue"}})
    eventually(lambda: status_of(kube, "w1").get("color") == "blue")
    assert status_of(kube, "w1")["phase"] == "Updated"
    assert status_of(kube, "w1")["observedGeneration"] == 2

    # a compaction closes every watch; kopf's reconnect gets 410 Gone, and it lists again.
    lists_before = list_requests(kube)
    expired_before = kube.api.expired_watches
    kube.api.compact()
    eventually(lambda: kube.api.expired_watches > expired_before)
    eventually(lambda: list_requests(kube) > lists_before)
    kube.api.patch("example.headwater.io/v1", "widgets", "w1", {"spec": {"color": "green"}})
    eventually(lambda: status_of(kube, "w1").get("color") == "green")

    # delete: the object stays while the finalizer is there, the delete handler runs, kopf
    # removes its finalizer and the object is gone.
    deleting = kube.api.delete("example.headwater.io/v1", "widgets", "w1")
    assert deleting["metadata"]["deletionTimestamp"]
    eventually(lambda: widget(kube, "w1") is None)
    assert kube.api.events("default", involved_name="w1", reason="Deleting")
    # kopf changes finalizers with a JSON patch guarded by a resourceVersion test.
    assert any("/widgets/w1 [application/json-patch+json]" in line for line in kube.requests)


def test_kopf_peering_objects_work(fake_kube_thread: FakeKubeThread, kopf_env: None) -> None:
    kube = fake_kube_thread
    kube.api.create(
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfPeering",
            "metadata": {"name": "default", "namespace": "default"},
        }
    )

    def peers() -> dict[str, Any]:
        peering = kube.api.get("kopf.dev/v1", "kopfpeerings", "default") or {}
        return dict(peering.get("status") or {})

    with run_operator("--peering", "default", "--priority", "7") as runner:
        # The operator announces itself in the peering object and keeps working.
        announced = eventually(peers)
        assert [peer["priority"] for peer in announced.values()] == [7]
        kube.api.create(
            {
                "apiVersion": "example.headwater.io/v1",
                "kind": "Widget",
                "metadata": {"name": "w2", "namespace": "default"},
                "spec": {"color": "red"},
            }
        )
        eventually(lambda: status_of(kube, "w2").get("phase") == "Created")
    assert runner.exception is None and runner.exit_code == 0
    # On exit it removes itself (a merge patch with null for its key).
    assert peers() == {}
