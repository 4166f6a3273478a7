"""KeyValue, ObjectStore and StreamTemplate resources end to end."""

from __future__ import annotations

from nats.aio.client import Client

from headwater.testing import ServerProcess
from tests.operator.conftest import Cluster, eventually, run_on, stream_info


def synced(cluster: Cluster, plural: str, name: str) -> bool:
    return cluster.condition(plural, name, "InSync").get("status") == "True"


def test_key_value_bucket_lifecycle(cluster: Cluster) -> None:
    cluster.create("KeyValue", "config", {"bucket": "config", "history": 5, "ttl": "1h"})
    eventually(lambda: synced(cluster, "keyvalues", "config"))
    info = stream_info(cluster.server, "KV_config") or {}
    assert info["config"]["max_msgs_per_subject"] == 5
    assert info["config"]["subjects"] == ["$KV.config.>"]
    status = cluster.status("keyvalues", "config")
    assert status["stream"] == "KV_config" and status["bucket"] == "config"

    cluster.patch("keyvalues", "config", {"spec": {"history": 10}})
    eventually(
        lambda: (
            (stream_info(cluster.server, "KV_config") or {})
            .get("config", {})
            .get("max_msgs_per_subject")
            == 10
        )
    )
    cluster.delete("keyvalues", "config")
    eventually(lambda: cluster.get("keyvalues", "config") is None)
    assert stream_info(cluster.server, "KV_config") is None


def test_object_store_bucket(cluster: Cluster) -> None:
    cluster.create("ObjectStore", "files", {"bucket": "files", "storage": "memory"})
    eventually(lambda: synced(cluster, "objectstores", "files"))
    info = stream_info(cluster.server, "OBJ_files") or {}
    assert info["config"]["storage"] == "memory"
    assert cluster.events("files", "Created")


def test_stream_template_where_the_server_has_templates(cluster: Cluster) -> None:
    spec = {"name": "clients", "maxStreams": 4, "config": {"subjects": ["CLIENT.*"]}}
    cluster.create("StreamTemplate", "clients", spec)
    if cluster.server.kind == "nats":
        # nats-server 2.14 removed templates: the core refuses, the operator says so.
        refused = eventually(
            lambda: (
                cluster.condition("streamtemplates", "clients", "InSync").get("reason") == "Refused"
                and cluster.condition("streamtemplates", "clients", "InSync")
            )
        )
        assert "templates" in refused["message"]
        return
    eventually(lambda: synced(cluster, "streamtemplates", "clients"))
    publish_once(cluster.server, "CLIENT.acme")
    eventually(lambda: cluster.status("streamtemplates", "clients").get("streamCount") == 1)
    # The server names a template's stream after the subject (CLIENT.acme -> CLIENT_acme).
    assert cluster.status("streamtemplates", "clients")["streams"] == ["CLIENT_acme"]
    cluster.delete("streamtemplates", "clients")
    eventually(lambda: cluster.get("streamtemplates", "clients") is None)
    assert stream_info(cluster.server, "CLIENT_acme") is None


def publish_once(server: ServerProcess, subject: str) -> None:
    async def publish(nc: Client) -> None:
        await nc.request(subject, b"hello", timeout=3)

    run_on(server, publish)
