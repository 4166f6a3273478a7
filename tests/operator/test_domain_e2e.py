"""JetStream domains, nkey seeds and TLS first end to end: the spec's ``jsDomain``/``nkey``/
``tlsFirst`` and a profile's ``jsDomain``/``nkey`` keys, through kopf's real runner and a real
server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import BOTH
from headwater.control import api
from headwater.control.connection import ConnectionSettings
from headwater.testing import ServerProcess
from support.certs import TestPKI
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"
from support.connectopts import DOMAIN, domain_server, nkey_server, tls_first_server
from support.fakekube import FakeKubeThread
from tests.operator.conftest import (
    Cluster,
    create_object,
    eventually,
    operator_config,
    run_operator,
)


def stream_exists(settings: ConnectionSettings, name: str) -> bool:
    """Whether the stream exists, asked over a connection of the test's own."""

    async def main() -> bool:
        nc = await settings.connect()
        try:
            await api.request(nc, f"STREAM.INFO.{name}")
            return True
        except api.ApiError as error:
            if error.err_code == api.STREAM_NOT_FOUND:
                return False
            raise
        finally:
            await nc.close()

    return asyncio.run(main())


def condition_with(cluster: Cluster, name: str, kind: str, reason: str) -> dict[str, Any]:
    """The condition once it has ``reason`` (waits for it)."""
    return dict(
        eventually(
            lambda: (
                cluster.condition("streams", name, kind).get("reason") == reason
                and cluster.condition("streams", name, kind)
            )
        )
    )


@contextlib.contextmanager
def start_cluster(
    kube: FakeKubeThread, server: ServerProcess, connection: ConnectionSettings
) -> Iterator[Cluster]:
    config = operator_config(server, connection=connection, request_timeout=1.0)
    operator, runner = run_operator(kube, config, "--standalone", "--namespace", "default")
    with runner:
        yield Cluster(kube, server, operator, runner, "")
    assert runner.exception is None
    assert runner.exit_code == 0


@pytest.fixture(params=["headwater", "nats"])
def domain_cluster(
    request: pytest.FixtureRequest, fake_kube_thread: FakeKubeThread, tmp_path: Path
) -> Iterator[Cluster]:
    """A server with ``jetstream { domain: hub }``; the operator's default has no domain."""
    with (
        domain_server(request.param, tmp_path) as server,
        start_cluster(
            fake_kube_thread, server, ConnectionSettings(servers=(server.url,))
        ) as cluster,
    ):
        yield cluster


def test_spec_js_domain_reaches_that_domain_and_a_wrong_one_is_reported(
    domain_cluster: Cluster,
) -> None:
    cluster = domain_cluster
    hub = ConnectionSettings(servers=(cluster.server.url,), js_domain=DOMAIN)
    cluster.create(
        "Stream", "hubbed", {"name": "HUBBED", "subjects": ["hub.>"], "jsDomain": DOMAIN}
    )
    cluster.create("Stream", "astray", {"name": "ASTRAY", "jsDomain": "other"})

    eventually(lambda: cluster.condition("streams", "hubbed", "Ready").get("status") == "True")
    assert cluster.condition("streams", "hubbed", "InSync")["status"] == "True"
    assert stream_exists(hub, "HUBBED")

    astray = condition_with(cluster, "astray", "Ready", "Unreachable")
    assert astray["status"] != "True"
    assert "$JS.other.API" in astray["message"]
    assert "domain 'other'" in astray["message"]
    assert cluster.events("astray", "Unreachable")
    assert not stream_exists(hub, "ASTRAY")


def test_profile_js_domain_applies_and_the_spec_overrides_it(domain_cluster: Cluster) -> None:
    cluster = domain_cluster
    hub = ConnectionSettings(servers=(cluster.server.url,), js_domain=DOMAIN)
    create_object(cluster, "ConfigMap", "headwater-connection", data={"jsDomain": "other"})
    create_object(
        cluster, "ConfigMap", "hub", data={"servers": cluster.server.url, "jsDomain": DOMAIN}
    )
    create_object(cluster, "ConfigMap", "dotted", data={"jsDomain": "a.b"})
    cluster.create("Stream", "by-profile", {"name": "BY_PROFILE", "account": "hub"})
    cluster.create("Stream", "by-spec", {"name": "BY_SPEC", "jsDomain": DOMAIN})
    cluster.create("Stream", "by-namespace", {"name": "BY_NAMESPACE"})
    cluster.create("Stream", "bad-profile", {"name": "BAD_PROFILE", "account": "dotted"})

    for name in ("by-profile", "by-spec"):
        eventually(
            lambda name=name: cluster.condition("streams", name, "Ready").get("status") == "True"
        )
    assert stream_exists(hub, "BY_PROFILE") and stream_exists(hub, "BY_SPEC")
    # The namespace profile's domain beats the operator's default (which has none).
    inherited = condition_with(cluster, "by-namespace", "Ready", "Unreachable")
    assert "$JS.other.API" in inherited["message"]
    invalid = condition_with(cluster, "bad-profile", "InSync", "ConnectionProfileInvalid")
    assert "'dotted'" in invalid["message"] and "jsDomain" in invalid["message"]
    assert cluster.events("bad-profile", "ConnectionProfileInvalid")
    assert not stream_exists(hub, "BY_NAMESPACE") and not stream_exists(hub, "BAD_PROFILE")


@pytest.mark.parametrize("kind", BOTH)
def test_an_nkey_seed_from_a_profile_or_the_spec_logs_in(
    fake_kube_thread: FakeKubeThread, tmp_path: Path, kind: str
) -> None:
    """A server with one nkey user; the operator's default has no login."""
    with nkey_server(tmp_path, kind) as (server, seed):
        signed = ConnectionSettings(servers=(server.url,), nkey=str(seed))
        anonymous = ConnectionSettings(servers=(server.url,))
        with start_cluster(fake_kube_thread, server, anonymous) as cluster:
            create_object(
                cluster,
                "Secret",
                "signer",
                stringData={"servers": server.url, "nkey": seed.read_text()},
            )
            cluster.create("Stream", "anonymous", {"name": "ANONYMOUS"})
            cluster.create("Stream", "profiled", {"name": "PROFILED", "account": "signer"})
            cluster.create("Stream", "direct", {"name": "DIRECT", "nkey": str(seed)})

            for name in ("profiled", "direct"):
                eventually(
                    lambda name=name: (
                        cluster.condition("streams", name, "Ready").get("status") == "True"
                    )
                )
            assert stream_exists(signed, "PROFILED") and stream_exists(signed, "DIRECT")
            refused = condition_with(cluster, "anonymous", "Ready", "Unreachable")
            assert "uthorization" in refused["message"]
            assert not stream_exists(signed, "ANONYMOUS")
            # Each login is its own pooled connection: the anonymous one failed and is gone.
            assert len(cluster.operator.pool) == 2


def test_invalid_spec_js_domain_is_an_invalid_spec(
    fake_kube_thread: FakeKubeThread, js_server: ServerProcess
) -> None:
    with start_cluster(
        fake_kube_thread, js_server, ConnectionSettings(servers=(js_server.url,))
    ) as cluster:
        cluster.create("Stream", "dotted", {"name": "DOTTED", "jsDomain": "a.b"})
        invalid = condition_with(cluster, "dotted", "InSync", "Invalid")
        assert "spec.jsDomain" in invalid["message"] and "'a.b'" in invalid["message"]
        assert cluster.events("dotted", "Invalid")


@pytest.mark.parametrize("kind", BOTH)
def test_spec_tls_first_reaches_a_tls_first_server(
    fake_kube_thread: FakeKubeThread, tmp_path: Path, pki: TestPKI, kind: str
) -> None:
    """NACK's ``spec.tlsFirst``. The same CA without it waits for an INFO the server never
    sends first."""
    with tls_first_server(tmp_path, pki, kind) as server:
        roots = {"rootCas": [str(pki.ca_cert)]}
        first = ConnectionSettings(servers=(server.url,), tls_ca=str(pki.ca_cert), tls_first=True)
        plain = ConnectionSettings(servers=(server.url,))
        with start_cluster(fake_kube_thread, server, plain) as cluster:
            cluster.create("Stream", "first", {"name": "FIRST", "tls": roots, "tlsFirst": True})
            cluster.create("Stream", "late", {"name": "LATE", "tls": roots})
            eventually(
                lambda: cluster.condition("streams", "first", "Ready").get("status") == "True"
            )
            assert stream_exists(first, "FIRST")
            late = condition_with(cluster, "late", "Ready", "Unreachable")
            assert late["status"] != "True"
            assert not stream_exists(first, "LATE")
