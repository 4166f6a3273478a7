"""Connection profiles end to end: Secrets and ConfigMaps, per resource and per namespace."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from headwater.control import api
from headwater.control.connection import ConnectionSettings
from headwater.testing import ServerProcess
from support.fakekube import FakeKubeThread
from tests.operator.conftest import (
    Cluster,
    create_object,
    eventually,
    free_port,
    operator_config,
    run_operator,
)

USER, PASSWORD = "operator", "s3cret"


@pytest.fixture(scope="module")
def auth_server() -> Iterator[ServerProcess]:
    srv = ServerProcess("headwater", jetstream=True, args=["--user", USER, "--pass", PASSWORD])
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
def cluster(fake_kube_thread: FakeKubeThread, auth_server: ServerProcess) -> Iterator[Cluster]:
    """The operator's own default points nowhere: only profiles reach the server."""
    config = operator_config(
        auth_server, connection=ConnectionSettings(servers=(f"nats://127.0.0.1:{free_port()}",))
    )
    operator, runner = run_operator(
        fake_kube_thread, config, "--standalone", "--namespace", "default"
    )
    with runner:
        yield Cluster(fake_kube_thread, auth_server, operator, runner, "")
    assert runner.exception is None


def stream_names(server: ServerProcess) -> list[str]:
    async def main() -> list[str]:
        settings = ConnectionSettings(servers=(server.url,), user=USER, password=PASSWORD)
        nc = await settings.connect()
        try:
            reply = await api.request(nc, "STREAM.NAMES", {})
            return list(reply.get("streams") or [])
        finally:
            await nc.close()

    return asyncio.run(main())


def test_per_resource_profile_from_a_secret(cluster: Cluster) -> None:
    cluster.create("Stream", "tenant", {"name": "TENANT", "account": "tenant-a"})
    missing = eventually(
        lambda: (
            cluster.condition("streams", "tenant", "InSync").get("reason")
            == "ConnectionProfileMissing"
            and cluster.condition("streams", "tenant", "InSync")
        )
    )
    assert "tenant-a" in missing["message"]

    create_object(
        cluster,
        "Secret",
        "tenant-a",
        stringData={"servers": cluster.server.url, "user": USER, "password": PASSWORD},
    )
    eventually(lambda: cluster.condition("streams", "tenant", "InSync").get("status") == "True")
    assert "TENANT" in stream_names(cluster.server)


def test_namespace_profile_from_configmap_and_secret(cluster: Cluster) -> None:
    create_object(
        cluster, "ConfigMap", "headwater-connection", data={"servers": cluster.server.url}
    )
    create_object(
        cluster,
        "Secret",
        "headwater-connection",
        stringData={"user": USER, "password": PASSWORD},
    )
    cluster.create("Stream", "shared", {"name": "SHARED"})
    eventually(lambda: cluster.condition("streams", "shared", "InSync").get("status") == "True")
    assert "SHARED" in stream_names(cluster.server)


def test_wrong_password_is_reported_as_unreachable(cluster: Cluster) -> None:
    create_object(
        cluster,
        "Secret",
        "wrong",
        stringData={"servers": cluster.server.url, "user": USER, "password": "nope"},
    )
    cluster.create("Stream", "denied", {"name": "DENIED", "account": "wrong"})
    failed = eventually(
        lambda: (
            cluster.condition("streams", "denied", "Ready").get("reason") == "Unreachable"
            and cluster.condition("streams", "denied", "Ready")
        )
    )
    assert failed["status"] == "Unknown"
    assert cluster.events("denied", "Unreachable")
