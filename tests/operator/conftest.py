"""The operator's end-to-end harness: kopf's real runner, the fake API server serving crds/,
and a real JetStream server of each kind (Headwater, nats-server) behind the operator."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import kopf
import pytest
from kopf.testing import KopfRunner
from nats.aio.client import Client

from headwater.control import api
from headwater.control.connection import ConnectionSettings
from headwater.testing import ServerProcess
from headwater_operator.config import OperatorConfig
from headwater_operator.handlers import Operator
from support.controlplane import empty_jetstream, run_on
from support.fakekube import FakeKubeThread
from support.fakekube.fixtures import fake_kube_thread

__all__ = ["fake_kube_thread"]

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
GROUP_VERSION = "headwater.io/v1"
SYNC_INTERVAL = 0.4


@pytest.fixture
def fakekube_crds() -> list[Path]:
    return sorted(CRDS.glob("*.yaml"))


@pytest.fixture
def clean_server(js_server: ServerProcess) -> ServerProcess:
    run_on(js_server, empty_jetstream)
    return js_server


def stream_info(server: ServerProcess, name: str) -> dict[str, Any] | None:
    async def read(nc: Client) -> dict[str, Any] | None:
        try:
            return await api.request(nc, f"STREAM.INFO.{name}")
        except api.ApiError as error:
            if error.err_code == api.STREAM_NOT_FOUND:
                return None
            raise

    return run_on(server, read)


def consumer_info(server: ServerProcess, stream: str, name: str) -> dict[str, Any] | None:
    async def read(nc: Client) -> dict[str, Any] | None:
        try:
            return await api.request(nc, f"CONSUMER.INFO.{stream}.{name}")
        except api.ApiError as error:
            if error.err_code in (api.STREAM_NOT_FOUND, api.CONSUMER_NOT_FOUND):
                return None
            raise

    return run_on(server, read)


PROFILE_LABELS = {"headwater.io/connection": "true"}


def create_object(cluster: Cluster, kind: str, name: str, **fields: object) -> None:
    """A core object (a Secret or ConfigMap) in ``default``, labelled as a connection profile."""
    cluster.kube.api.create(
        {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": "default", "labels": PROFILE_LABELS},
            **fields,
        }
    )


def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail with its last value."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, f"condition not met within {timeout}s (last: {result!r})"
            return result
        time.sleep(0.05)


def http_get(url: str) -> str:
    """The body of a GET, or "" when nothing answers (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return str(reply.read().decode())
    except OSError:
        return ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    """The fake API server, the JetStream server, and the running operator."""

    kube: FakeKubeThread
    server: ServerProcess
    operator: Operator
    runner: KopfRunner
    liveness_url: str

    def create(self, kind: str, name: str, spec: dict[str, Any], **metadata: Any) -> None:
        self.kube.api.create(
            {
                "apiVersion": GROUP_VERSION,
                "kind": kind,
                "metadata": {"name": name, "namespace": "default", **metadata},
                "spec": spec,
            }
        )

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        return self.kube.api.get(GROUP_VERSION, plural, name)

    def patch(self, plural: str, name: str, body: dict[str, Any]) -> None:
        self.kube.api.patch(GROUP_VERSION, plural, name, body)

    def delete(self, plural: str, name: str) -> None:
        self.kube.api.delete(GROUP_VERSION, plural, name)

    def status(self, plural: str, name: str) -> dict[str, Any]:
        return dict((self.get(plural, name) or {}).get("status") or {})

    def condition(self, plural: str, name: str, kind: str) -> dict[str, Any]:
        for entry in self.status(plural, name).get("conditions") or []:
            if entry.get("type") == kind:
                return dict(entry)
        return {}

    def events(self, name: str, reason: str | None = None) -> list[dict[str, Any]]:
        return list(self.kube.api.events("default", involved_name=name, reason=reason))


def run_operator(
    kube: FakeKubeThread, config: OperatorConfig, *options: str
) -> tuple[Operator, KopfRunner]:
    """The operator on a fresh registry (with a login handler for the fake API server)."""
    registry = kopf.OperatorRegistry()
    operator = Operator(config)
    operator.register(registry)
    info = kube.connection_info()

    def login(**_: Any) -> kopf.ConnectionInfo:
        return info

    kopf.on.login(registry=registry)(login)
    runner = KopfRunner(["run", *options], registry=registry, timeout=30)
    return operator, runner


def operator_config(server: ServerProcess, **overrides: Any) -> OperatorConfig:
    values: dict[str, Any] = {
        "connection": ConnectionSettings(servers=(server.url,)),
        "sync_interval": SYNC_INTERVAL,
        "wait_delay": 0.3,
        "max_backoff": 1.0,
        "request_timeout": 3.0,
        "metrics_host": "127.0.0.1",
        "metrics_port": 0,
        "watch_timeout": 5.0,
    }
    values.update(overrides)
    return OperatorConfig(**values)


@pytest.fixture
def cluster(fake_kube_thread: FakeKubeThread, clean_server: ServerProcess) -> Iterator[Cluster]:
    """The operator watching namespace ``default``, with a liveness endpoint."""
    port = free_port()
    liveness = f"http://127.0.0.1:{port}/healthz"
    operator, runner = run_operator(
        fake_kube_thread,
        operator_config(clean_server),
        "--standalone",
        "--namespace",
        "default",
        "--liveness",
        liveness,
    )
    with runner:
        yield Cluster(fake_kube_thread, clean_server, operator, runner, liveness)
    assert runner.exception is None
    assert runner.exit_code == 0
