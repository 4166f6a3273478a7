"""The provider block: user/password, token and mutual TLS, each against a server that
requires it, and wrong credentials as a plan-time error. One server process per case, both
kinds (they take the same flags), ``tls_first`` included."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import BOTH
from headwater.testing import ServerProcess, nats_server_binary
from support.certs import TestPKI
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"
from support.connectopts import tls_first_server
from tests.terraform.conftest import Terraform

STREAM = 'resource "headwater_stream" "s" {\n  name = "SECURED"\n}\n'


@contextmanager
def secured_server(kind: str, args: list[str]) -> Iterator[ServerProcess]:
    if kind == "nats" and nats_server_binary() is None:
        pytest.fail("nats-server is not installed")
    server = ServerProcess(kind, args=args, jetstream=True)
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


def provider(**settings: str) -> str:
    lines = "".join(f'  {name} = "{value}"\n' for name, value in settings.items())
    return f'provider "headwater" {{\n{lines}}}\n'


@pytest.mark.parametrize("kind", BOTH)
def test_user_password_and_token(tf: Terraform, kind: str) -> None:
    with secured_server(kind, ["--user", "admin", "--pass", "s3cret"]) as server:
        tf.write(STREAM, provider(servers=server.url, user="admin", password="wrong"))
        refused = tf.plan()
        assert refused.returncode == 1, refused
        assert refused.says("can not connect"), refused
        assert refused.says("Authorization Violation"), refused
        tf.write(STREAM, provider(servers=server.url, user="admin", password="s3cret"))
        tf.apply()
        assert tf.plan().returncode == 0
        tf.destroy()
    (tf.workdir / "terraform.tfstate").unlink()
    with secured_server(kind, ["--auth", "t0ken"]) as server:
        tf.write(STREAM, provider(servers=server.url, token="t0ken"))
        tf.apply()
        assert tf.plan().returncode == 0


@pytest.mark.parametrize("kind", BOTH)
def test_mutual_tls(tf: Terraform, kind: str, pki: TestPKI) -> None:
    args = [
        "--tlsverify",
        "--tlscert",
        str(pki.server_cert),
        "--tlskey",
        str(pki.server_key),
        "--tlscacert",
        str(pki.ca_cert),
    ]
    with secured_server(kind, args) as server:
        url = server.url.replace("nats://", "tls://")
        tf.write(STREAM, provider(servers=url, tls_ca=str(pki.ca_cert)))
        refused = tf.plan()  # no client certificate
        assert refused.returncode == 1, refused
        tf.write(
            STREAM,
            provider(
                servers=url,
                tls_ca=str(pki.ca_cert),
                tls_cert=str(pki.client_cert),
                tls_key=str(pki.client_key),
            ),
        )
        tf.apply()
        assert tf.plan().returncode == 0


@pytest.mark.parametrize("kind", BOTH)
def test_tls_first(tf: Terraform, pki: TestPKI, tmp_path: Path, kind: str) -> None:
    if nats_server_binary() is None:
        pytest.fail("nats-server is not installed")
    with tls_first_server(tmp_path, pki, kind) as server:
        block = provider(servers=server.url, tls_ca=str(pki.ca_cert))
        tf.write(STREAM, block)
        refused = tf.plan()  # the client waits for an INFO the server never sends first
        assert refused.returncode == 1, refused
        assert refused.says("can not connect"), refused
        tf.write(STREAM, block.replace("}\n", "  tls_first = true\n}\n"))
        tf.apply()
        assert tf.plan().returncode == 0
        assert tf.attributes("headwater_stream.s")["name"] == "SECURED"
