"""Clustered JetStream without its metadata: the API refuses with 10008, core NATS works.

A server whose ``cluster { etcd: [...] }`` points at nothing never joins the cluster's
metadata: it must say so on /healthz (503, so Kubernetes keeps it out of the Service) and in
every JetStream API answer (10008 "JetStream system temporarily unavailable"), never hang or
half-create a stream, while plain publish/subscribe goes on.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from headwater.testing import ServerProcess, free_ports

pytestmark = pytest.mark.timeout(30)


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
    assert status == 503 and "cluster metadata" in body["error"], body
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
