"""A Headwater cluster with route TLS runs its etcd over TLS too (docs/CLUSTERING.md, "etcd").

Three servers with ``cluster { tls { cert_file, key_file, ca_file } }`` and JetStream: each
server's etcd member (client port = cluster port + 1, peer port + 2) answers only TLS with a
client certificate the CA signed, clustered JetStream works across servers through it, and a
server restarted on its store rejoins (its member restarts over TLS).

Headwater only: nats-server keeps its metadata in its own Raft group, with no etcd to test.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator

import pytest
from cluster.helpers import connect, js_api, wait_jetstream
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from headwater.testing import Cluster
from support.certs import TestPKI
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def tls_cluster(pki: TestPKI) -> AsyncIterator[Cluster]:
    tls = (
        f'cluster {{ tls {{ cert_file: "{pki.route_cert}", key_file: "{pki.route_key}", '
        f'ca_file: "{pki.ca_cert}", verify: true }} }}'
    )
    with Cluster("headwater", 3, jetstream=True, config=tls) as formed:
        await wait_jetstream(formed)
        yield formed


def etcd_url(cluster: Cluster, i: int, scheme: str, path: str = "/health") -> str:
    return f"{scheme}://127.0.0.1:{cluster.cluster_ports[i] + 1}{path}"


def get(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=3, context=context) as reply:
        return str(reply.read().decode())


async def assert_tls_only(cluster: Cluster, i: int, pki: TestPKI) -> None:
    """Server ``i``'s etcd member: plaintext fails, TLS without a client certificate is
    refused, TLS with the CA and a certificate it signed is served (and healthy)."""
    with pytest.raises(OSError):  # URLError, HTTPError (400) or a reset: never an answer
        await asyncio.to_thread(get, etcd_url(cluster, i, "http"))
    with pytest.raises(OSError):
        await asyncio.to_thread(get, etcd_url(cluster, i, "https"), pki.client_context())
    body = await asyncio.to_thread(
        get, etcd_url(cluster, i, "https"), pki.client_context(with_cert=True)
    )
    assert json.loads(body)["health"] == "true", body


async def publish(nc: NATS, subject: str, data: bytes, timeout: float = 10.0) -> dict:
    """Publish with an ack, retried while the stream's interest is still on its way here."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = await nc.request(subject, data, timeout=1.0)
            ack: dict = json.loads(reply.data)
            return ack
        except (NoRespondersError, NatsTimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_etcd_follows_route_tls_and_a_restarted_server_rejoins(
    tls_cluster: Cluster, pki: TestPKI
) -> None:
    cluster = tls_cluster
    for i in range(len(cluster)):
        await assert_tls_only(cluster, i, pki)
        log = cluster.servers[i].log()
        assert "joined (etcd member" in log, log[-3000:]

    first, second = await connect(cluster.urls[0]), await connect(cluster.urls[1])
    try:
        config = {"name": "ORDERS", "subjects": ["orders.>"], "storage": "file"}
        created = await js_api(first, "$JS.API.STREAM.CREATE.ORDERS", config, timeout=5)
        assert "error" not in created, created
        ack = await publish(second, "orders.1", b"one")
        assert ack == {"stream": "ORDERS", "seq": 1}, ack
    finally:
        await first.close()
        await second.close()

    # The third server stops and starts on its store: its member restarts (over TLS).
    cluster.restart(2)
    await wait_jetstream(cluster)
    log = cluster.servers[2].log()
    assert "restart) in" in log, log[-3000:]
    await assert_tls_only(cluster, 2, pki)
    third = await connect(cluster.urls[2])
    try:
        info = await js_api(third, "$JS.API.STREAM.INFO.ORDERS", timeout=5)
        assert info.get("state", {}).get("messages") == 1, info
        ack = await publish(third, "orders.2", b"two")
        assert ack == {"stream": "ORDERS", "seq": 2}, ack
    finally:
        await third.close()
