"""etcd follows the cluster's TLS: https URLs, etcd's TLS flags, and clients that dial TLS.

The first tests are pure (URLs and flags derived from the settings, combinations refused);
the others run real etcd members with a throwaway PKI (``support.certs``, IP SAN 127.0.0.1):
a seed and a joiner (``member add`` as a learner, promotion, member list, all over TLS), a
restarted member, and clients with and without the right credentials.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from headwater.server.config.settings import TLSSettings
from headwater.server.meta.bootstrap import (
    Mode,
    initial_cluster_flag,
    member_address,
    member_of_peer_url,
    plan_bootstrap,
)
from headwater.server.meta.client import MetaClient, MetaUnavailable
from headwater.server.meta.etcdmember import EtcdMember
from headwater.server.meta.tls import EtcdTLS
from support.certs import TestPKI
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"

pytestmark = pytest.mark.timeout(40)

ROUTES = ["nats-route://host1:6222", "nats-route://host2:6222", "nats-route://host3:6222"]
FILES = EtcdTLS("route-cert.pem", "route-key.pem", "ca.pem")


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# -- derived URLs and flags (no process) -------------------------------------------------------


def test_member_urls_are_https_when_the_cluster_has_tls() -> None:
    member = member_address("nats-route://Host1:6222", tls=True)
    assert (member.client_url, member.peer_url) == ("https://host1:6223", "https://host1:6224")
    assert member_of_peer_url(member.peer_url) == member
    assert member_address("nats-route://host1:6222").client_url == "http://host1:6223"
    plan = plan_bootstrap(ROUTES[0], ROUTES, False, tls=True)
    assert plan.mode is Mode.STATIC
    assert initial_cluster_flag(plan.initial_cluster).split(",") == [
        f"host{i}-6222=https://host{i}:6224" for i in (1, 2, 3)
    ]
    joining = plan_bootstrap("nats-route://host4:6222", ROUTES, False, tls=True)
    assert joining.seeds[0].client_url == "https://host1:6223"


def test_the_member_serves_https_with_the_cluster_files(tmp_path: Path) -> None:
    member = EtcdMember(
        self_url=ROUTES[0], routes=ROUTES, store_dir=tmp_path, listen_host="0.0.0.0", tls=FILES
    )
    args = member._base_args("etcd")
    assert flag(args, "--listen-client-urls") == "https://0.0.0.0:6223"
    assert flag(args, "--listen-peer-urls") == "https://0.0.0.0:6224"
    assert flag(args, "--advertise-client-urls") == "https://host1:6223"
    assert flag(args, "--initial-advertise-peer-urls") == "https://host1:6224"
    for prefix in ("--", "--peer-"):
        assert flag(args, f"{prefix}cert-file") == "route-cert.pem"
        assert flag(args, f"{prefix}key-file") == "route-key.pem"
        assert flag(args, f"{prefix}trusted-ca-file") == "ca.pem"
        assert f"{prefix}client-cert-auth" in args
    assert member.client_urls == [f"https://host{i}:6223" for i in (1, 2, 3)]
    plain = EtcdMember(self_url=ROUTES[0], routes=ROUTES, store_dir=tmp_path)._base_args("etcd")
    assert flag(plain, "--listen-client-urls") == "http://host1:6223"
    assert not [a for a in plain if "cert" in a or "-ca-" in a]


def test_client_certificates_are_demanded_with_a_ca_or_verify() -> None:
    # A CA: etcd demands certificates whatever verify says (it has no other authentication).
    assert "--client-cert-auth" in EtcdTLS("c.pem", "k.pem", "ca.pem").member_args()
    assert "--peer-client-cert-auth" in EtcdTLS("c.pem", "k.pem", "ca.pem").member_args()
    # No CA: only verify demands them (checked against the system roots, as Go does).
    no_ca = EtcdTLS("c.pem", "k.pem").member_args()
    assert no_ca == [
        "--cert-file", "c.pem", "--key-file", "k.pem",
        "--peer-cert-file", "c.pem", "--peer-key-file", "k.pem",
    ]  # fmt: skip
    verify = EtcdTLS("c.pem", "k.pem", verify=True).member_args()
    assert "--client-cert-auth" in verify and "--peer-client-cert-auth" in verify
    assert "--trusted-ca-file" not in verify


def test_the_files_come_from_the_cluster_tls_settings() -> None:
    assert EtcdTLS.from_settings(TLSSettings()) is None
    settings = TLSSettings(cert_file="c.pem", key_file="k.pem", ca_file="ca.pem", verify=True)
    assert EtcdTLS.from_settings(settings) == EtcdTLS("c.pem", "k.pem", "ca.pem", True)


def test_schemes_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match=r"https etcd URL .* needs the cluster's TLS"):
        EtcdMember(external=["https://e1:2379"])
    with pytest.raises(ValueError, match=r"https etcd URL .* needs the cluster's TLS"):
        MetaClient(["https://e1:2379"], "c")
    with pytest.raises(ValueError, match=r"http etcd URL .* cluster has TLS"):
        EtcdMember(external=["http://e1:2379"], tls=FILES)
    with pytest.raises(ValueError, match=r"http etcd URL .* cluster has TLS"):
        MetaClient(["https://e1:2379", "http://e2:2379"], "c", tls=FILES)
    with pytest.raises(ValueError, match="not http"):
        MetaClient(["unix://e1:2379"], "c")
    external = EtcdMember(external=["https://e1:2379", "e2:2379"], tls=FILES)
    assert external.client_urls == ["https://e1:2379", "e2:2379"]
    assert MetaClient(["https://e1:2379", "e2:2379"], "c", tls=FILES).endpoints == [
        ("e1", 2379),
        ("e2", 2379),
    ]


# -- real members over TLS ---------------------------------------------------------------------


def tls_files(pki: TestPKI) -> EtcdTLS:
    return EtcdTLS(str(pki.route_cert), str(pki.route_key), str(pki.ca_cert))


async def start_all(members: list[EtcdMember]) -> list[Mode | None]:
    modes = await asyncio.gather(*(m.start() for m in members))
    healthy = await asyncio.gather(*(m.wait_healthy(15.0) for m in members))
    unhealthy = [m for m, ok in zip(members, healthy, strict=True) if not ok]
    assert not unhealthy, [m.log_path.read_text()[-800:] for m in unhealthy]
    return modes


def https_get(url: str, context: ssl.SSLContext | None) -> str:
    with urllib.request.urlopen(url, timeout=3, context=context) as reply:
        return str(reply.read().decode())


async def test_members_join_restart_and_serve_over_tls_only(etcd: Any, pki: TestPKI) -> None:
    tls = tls_files(pki)
    ports = etcd.ports(2)
    seed = etcd.member(ports[0], tls=tls)
    assert await start_all([seed]) == [Mode.SINGLE]
    # Joining: member list, member add (as a learner) and promote, all through the TLS seed.
    joiner = etcd.member(ports[1], [etcd.route(ports[0])], tls=tls)
    assert await start_all([joiner]) == [Mode.JOIN]
    async with MetaClient(joiner.client_urls, "test", tls=tls) as meta:
        await meta.put("streams/ORDERS", b"config")
        status = await meta.status()
        assert {m.name for m in status.members} == {seed.name, joiner.name}
        assert all(url.startswith("https://") for m in status.members for url in m.client_urls)
    # Restarted on its data dir: the same member, still over TLS.
    await joiner.stop()
    assert await start_all([joiner]) == [Mode.RESTART]
    await asyncio.wait_for(joiner.settled(), 20)
    async with MetaClient(joiner.client_urls[:1], "test", tls=tls) as meta:
        found = await meta.get("streams/ORDERS")
        assert found is not None and found.value == b"config"

    # TLS only: a plaintext client gets nothing, a TLS one without a certificate is refused,
    # one with the CA and a certificate the CA signed is served.
    async with MetaClient(
        [f"http://127.0.0.1:{seed.me.client_port}"], "test", timeout=1.5
    ) as plain:
        with pytest.raises(MetaUnavailable):
            await plain.get("streams/ORDERS")
    health = f"{seed.client_urls[0]}/health"
    with pytest.raises(OSError):
        await asyncio.to_thread(https_get, health.replace("https:", "http:"), None)
    with pytest.raises((ssl.SSLError, OSError)):
        await asyncio.to_thread(https_get, health, pki.client_context())
    body = await asyncio.to_thread(https_get, health, pki.client_context(with_cert=True))
    assert '"health":"true"' in body
