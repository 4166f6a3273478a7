"""Clustered JetStream without its metadata: the API refuses with 10008, core NATS works.

A server whose ``cluster { etcd: [...] }`` points at nothing never joins the cluster's
metadata: it must say so on /healthz (503, so Kubernetes keeps it out of the Service) and in
every JetStream API answer (10008 "JetStream system temporarily unavailable"), never hang or
half-create a stream, while plain publish/subscribe goes on.

A server that joined, then lost its quorum (two of three servers died), must say so too, on
both servers: /healthz turns 503 with nats-server's words, and turns 200 again once the others
are back.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.testing import Cluster, ServerProcess, free_ports

from .helpers import KINDS, crash, wait_jetstream

pytestmark = pytest.mark.timeout(30)

NO_META_LEADER = "JetStream has not established contact with a meta leader"
NOT_CURRENT = "JetStream is not current with the meta leader"


@pytest.fixture
def cut_off(tmp_path: Path) -> Iterator[ServerProcess]:
    cluster_port, dead_etcd = free_ports(2)
    conf = tmp_path / "server.conf"
    conf.write_text(
        f"""
        listen: 127.0.0.1:-1
        http: 127.0.0.1:-1
        server_name: lonely
        jetstream {{ store_dir: "{tmp_path / "js"}" }}
        cluster {{
          name: c
          listen: 127.0.0.1:{cluster_port}
          etcd: ["http://127.0.0.1:{dead_etcd}"]
        }}
        """
    )
    srv = ServerProcess("headwater", ["-c", str(conf)])
    srv.start()
    yield srv
    srv.cleanup()


def _healthz(srv: ServerProcess, query: str = "") -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/healthz{query}") as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def test_without_metadata_the_api_refuses_and_core_nats_works(cut_off: ServerProcess) -> None:
    status, body = _healthz(cut_off)
    assert (status, body) == (503, {"status": "unavailable", "error": NO_META_LEADER})
    assert _healthz(cut_off, "?js-server-only=true")[0] == 200

    nc = await nats.connect(cut_off.url, allow_reconnect=False)
    try:
        reply = await nc.request("$JS.API.STREAM.CREATE.S", b'{"name":"S"}', timeout=5)
        error = json.loads(reply.data)["error"]
        assert (error["code"], error["err_code"]) == (503, 10008), error
        assert error["description"] == "JetStream system temporarily unavailable"

        sub = await nc.subscribe("plain")
        await nc.publish("plain", b"still works")
        msg = await sub.next_msg(timeout=2)
        assert msg.data == b"still works"
    finally:
        await nc.close()


async def _wait_healthz(srv: ServerProcess, want: int, timeout: float) -> dict:
    """/healthz until it answers ``want`` (bounded); its last body."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = await asyncio.to_thread(_healthz, srv)
        if status == want or time.monotonic() > deadline:
            assert status == want, (status, body)
            return body
        await asyncio.sleep(0.2)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", KINDS)
async def test_quorum_lost_then_regained(kind: str) -> None:
    with Cluster(kind, 3, jetstream=True) as cluster:
        await wait_jetstream(cluster)
        survivor = cluster.servers[0]
        # The meta group's own requests belong to the system account on nats-server: asked
        # from the global account, neither server answers them.
        nc = await nats.connect(survivor.url, allow_reconnect=False)
        try:
            for subject in ("$JS.API.META.LEADER.STEPDOWN", "$JS.API.SERVER.REMOVE"):
                with pytest.raises(NatsTimeoutError):
                    await nc.request(subject, b'{"peer":"s3"}', timeout=0.5)
        finally:
            await nc.close()
        assert (await asyncio.to_thread(_healthz, survivor))[0] == 200
        crash(cluster, 1)
        crash(cluster, 2)

        # Headwater: the survivor's registration goes unconfirmed within its lease (5 s).
        # nats-server: its meta leader is gone, or no longer heard from.
        body = await _wait_healthz(survivor, 503, 20)
        assert body["status"] == "unavailable" and body["error"] in (NOT_CURRENT, NO_META_LEADER)

        nc = await nats.connect(survivor.url, allow_reconnect=False)
        try:
            sub = await nc.subscribe("plain")
            await nc.publish("plain", b"core goes on")
            assert (await sub.next_msg(timeout=2)).data == b"core goes on"
        finally:
            await nc.close()

        cluster.restart(1)
        cluster.restart(2)
        await _wait_healthz(survivor, 200, 40)
        await wait_jetstream(cluster)


async def _wait_answer(
    srv: ServerProcess, query: str, want: tuple[int, dict], timeout: float
) -> None:
    """/healthz?query until it answers ``want`` (bounded): the metadata reaches every server
    a moment after the request that changed it was answered."""
    deadline = time.monotonic() + timeout
    while True:
        got = await asyncio.to_thread(_healthz, srv, query)
        if got == want or time.monotonic() > deadline:
            assert got == want, (srv.port, query)
            return
        await asyncio.sleep(0.1)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", KINDS)
async def test_healthz_stream_consumer_and_account_in_a_cluster(kind: str) -> None:
    """account/stream/consumer are looked up in the cluster's metadata: the account is known
    while the cluster has any stream, and a stream (with its consumers) only on its server."""
    ok = (200, {"status": "ok"})
    no_account = (404, {"status": "unavailable", "error": 'JetStream account "$G" not found'})
    with Cluster(kind, 3, jetstream=True) as cluster:
        await wait_jetstream(cluster)
        for srv in cluster.servers:
            assert _healthz(srv, "?account=$G") == no_account
            assert _healthz(srv, "?js-meta-only=true&account=other") == ok
        nc = await nats.connect(cluster.servers[0].url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            info = await js.add_stream(name="X", subjects=["x"], storage="memory")
            await js.add_consumer("X", durable_name="C")
            assert info.cluster is not None
            host = cluster.names.index(info.cluster.leader)
            not_found = 'JetStream stream "X" not found on account "$G"'
            for i, srv in enumerate(cluster.servers):
                await _wait_answer(srv, "?account=$G", ok, 10)
                assert _healthz(srv, "?account=$G&details=true") == ok
                assert _healthz(srv, "?account=other") == (
                    404,
                    {"status": "unavailable", "error": 'JetStream account "other" not found'},
                )
                if i == host:
                    # A memory stream counts in a cluster (single servers only walk the disk).
                    assert _healthz(srv, "?account=$G&stream=X") == ok
                    assert _healthz(srv, "?account=$G&stream=X&consumer=C&details=1") == ok
                    missing = 'JetStream consumer "Z" not found for stream "X" on account "$G"'
                    assert _healthz(srv, "?account=$G&stream=X&consumer=Z") == (
                        404,
                        {"status": "unavailable", "error": missing},
                    )
                    continue
                # Not a member of the stream's group: not found here.
                for query in ("?account=$G&stream=X", "?account=$G&stream=X&consumer=C"):
                    assert _healthz(srv, query) == (
                        404,
                        {"status": "unavailable", "error": not_found},
                    ), (i, query)
                assert _healthz(srv, "?account=$G&stream=X&details=true") == (
                    404,
                    {
                        "status": "error",
                        "errors": [
                            {"type": "STREAM", "account": "$G", "stream": "X", "error": not_found}
                        ],
                    },
                )
            await js.delete_stream("X")
            for srv in cluster.servers:
                await _wait_answer(srv, "?account=$G", no_account, 10)
                assert _healthz(srv) == ok
        finally:
            await nc.close()


@pytest.mark.timeout(90)
async def test_healthz_reports_a_placed_stream_that_is_not_live() -> None:
    """Headwater only: its stream placed here but not recovered (config unreadable) stays in
    the metadata, and /healthz names it with nats-server's words for a stream assigned to a
    server that does not run it. (nats-server rebuilds such a stream from its assignment.)"""
    with Cluster("headwater", 3, jetstream=True) as cluster:
        await wait_jetstream(cluster)
        nc = await nats.connect(cluster.servers[0].url, allow_reconnect=False)
        try:
            info = await nc.jetstream().add_stream(name="X", subjects=["x"])
        finally:
            await nc.close()
        assert info.cluster is not None
        host = cluster.names.index(info.cluster.leader)
        srv = cluster.servers[host]
        cluster.stop(host)
        directory = srv.store_dir / "jetstream" / "$G" / "streams" / "X"
        for name in ("meta.inf", ".meta.inf.bak"):
            if (directory / name).exists():
                (directory / name).write_text("garbage")
        cluster.restart(host)
        await wait_jetstream(cluster)
        error = "JetStream stream '$G > X' is not current: stream not found"
        await _wait_answer(srv, "", (503, {"status": "unavailable", "error": error}), 10)
        assert _healthz(srv, "?details=true&account=$G&stream=X") == (
            503,
            {
                "status": "error",
                "errors": [{"type": "STREAM", "account": "$G", "stream": "X", "error": error}],
            },
        )
        assert _healthz(srv, "?js-meta-only=true") == (200, {"status": "ok"})
        for other in cluster.servers:
            if other is not srv:
                assert _healthz(other) == (200, {"status": "ok"})
