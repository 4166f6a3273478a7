"""Inline credentials and terraform-provider-jetstream's connection names.

``credential_data`` holds a ``.creds`` file's content (sensitive), as in
terraform-provider-jetstream; ``credentials`` (a path) and ``credential_data`` together are an
error. Creds are decentralized (JWT) auth, which Headwater refuses (docs/DIFFERENCES.md), so
that part runs against nats-server in operator mode. The ``tls { ... }`` block takes
terraform-provider-jetstream's ``ca_file``/``cert_file``/``key_file`` and their ``*_data``
forms, against both servers requiring mutual TLS.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tf.utils import Diagnostics

from conftest import BOTH
from headwater.testing import ServerProcess, nats_server_binary
from headwater_terraform.provider import HeadwaterProvider
from support.certs import TestPKI
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"
from tests.terraform.conftest import Terraform
from tests.terraform.jwtauth import decentralized

STREAM = 'resource "headwater_stream" "s" {\n  name = "SECURED"\n}\n'


@contextmanager
def started(kind: str, args: list[str], jetstream: bool = False) -> Iterator[ServerProcess]:
    if nats_server_binary() is None:
        pytest.fail("nats-server is not installed")
    server = ServerProcess(kind, args=args, jetstream=jetstream)
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


def provider(body: str) -> str:
    return f'provider "headwater" {{\n{body}}}\n'


def test_credential_data(tf: Terraform, tmp_path: Path) -> None:
    auth = decentralized()
    conf = tmp_path / "operator.conf"
    conf.write_text(auth.server_config(tmp_path / "store"))
    creds = tmp_path / "user.creds"
    creds.write_text(auth.creds)
    with started("nats", ["-c", str(conf)]) as server:
        url = f'  servers = "{server.url}"\n'
        tf.write(STREAM, provider(url))
        refused = tf.plan()
        assert refused.returncode == 1, refused
        assert refused.says("Authorization Violation"), refused
        # As terraform-provider-jetstream's docs use it: the content, from a file or a secret.
        tf.write(STREAM, provider(url + f'  credential_data = file("{creds}")\n'))
        applied = tf.apply()
        assert auth.creds.split()[4] not in applied.output  # the user's JWT is never shown
        assert tf.plan().returncode == 0
        assert tf.attributes("headwater_stream.s")["name"] == "SECURED"
        # The same user from the file's path: the same state, no changes.
        tf.write(STREAM, provider(url + f'  credentials = "{creds}"\n'))
        assert tf.plan().returncode == 0


@pytest.mark.parametrize(
    ("cut", "message"),
    [
        ("NATS USER JWT", 'credential_data is not a .creds file: no "BEGIN NATS USER JWT" block'),
        ("USER NKEY SEED", 'credential_data is not a .creds file: no "BEGIN USER NKEY SEED" block'),
    ],
)
def test_credential_data_not_creds(tf: Terraform, tmp_path: Path, cut: str, message: str) -> None:
    """Content without a JWT made nats-py read lines forever on the provider's event loop (the
    plan hung until Terraform gave up): such content is refused before any connection."""
    auth = decentralized()
    conf = tmp_path / "operator.conf"
    conf.write_text(auth.server_config(tmp_path / "store"))
    with started("nats", ["-c", str(conf)]) as server:
        broken = tmp_path / "broken.creds"
        broken.write_text(auth.creds.replace(cut, "SOMETHING ELSE"))
        body = f'  servers = "{server.url}"\n  credential_data = file("{broken}")\n'
        tf.write(STREAM, provider(body))
        refused = tf.plan()
        assert refused.returncode == 1, refused
        assert refused.says(message), refused
        assert auth.creds.splitlines()[-2] not in refused.output  # the seed is not echoed


def test_credentials_and_credential_data_conflict(tf: Terraform) -> None:
    tf.write(
        STREAM,
        provider('  credentials = "/etc/nats/app.creds"\n  credential_data = "x"\n'),
    )
    refused = tf.run("validate", "-no-color")
    assert refused.returncode == 1, refused
    assert refused.says('"credential_data": conflicts with credentials'), refused


def tls_block(**files: str) -> str:
    lines = "".join(f"    {name} = {value}\n" for name, value in files.items())
    return f"  tls {{\n{lines}  }}\n"


@pytest.mark.parametrize("kind", BOTH)
def test_jetstream_tls_block(tf: Terraform, kind: str, pki: TestPKI) -> None:
    args = ["--tlsverify", "--tlscert", str(pki.server_cert), "--tlskey", str(pki.server_key)]
    with started(kind, [*args, "--tlscacert", str(pki.ca_cert)], jetstream=True) as server:
        url = f'  servers = "{server.url.replace("nats://", "tls://")}"\n'
        ca = f'"{pki.ca_cert}"'
        tf.write(STREAM, provider(url + tls_block(ca_file=ca)))
        assert tf.plan().returncode == 1  # no client certificate
        paths = tls_block(
            ca_file=ca, cert_file=f'"{pki.client_cert}"', key_file=f'"{pki.client_key}"'
        )
        tf.write(STREAM, provider(url + paths))
        tf.apply()
        assert tf.plan().returncode == 0
        contents = tls_block(
            ca_file_data=f'file("{pki.ca_cert}")',
            cert_file_data=f'file("{pki.client_cert}")',
            key_file_data=f'file("{pki.client_key}")',
        )
        tf.write(STREAM, provider(url + contents))
        assert tf.plan().returncode == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (tls_block(ca_file='"a.pem"', ca_file_data='"x"'), '"tls.0.ca_file_data": conflicts'),
        (
            '  tls_cert = "c.pem"\n' + tls_block(cert_file='"c.pem"'),
            '"tls.0.cert_file": conflicts with tls_cert',
        ),
        (tls_block(key_file='"k.pem"'), "key_file needs cert_file"),
        ('  tls_key = "k.pem"\n', "tls_key needs tls_cert"),  # was silently dropped
    ],
)
def test_tls_block_conflicts(tf: Terraform, body: str, message: str) -> None:
    tf.write(STREAM, provider(body))
    refused = tf.run("validate", "-no-color")
    assert refused.returncode == 1, refused
    assert refused.says(message), refused


def test_schema_names(tf: Terraform) -> None:
    tf.write("", provider(""))
    shown = tf.run("providers", "schema", "-json", check=True)
    block = json.loads(shown.output)["provider_schemas"]["headwater.io/headwater/headwater"]
    attributes = block["provider"]["block"]["attributes"]
    assert attributes["credential_data"]["sensitive"] is True
    assert attributes["credential_data"]["optional"] is True
    tls = block["provider"]["block"]["block_types"]["tls"]
    assert tls["max_items"] == 1
    names = set(tls["block"]["attributes"])
    assert names == {f"{f}{d}" for f in ("ca_file", "cert_file", "key_file") for d in ("", "_data")}
    assert tls["block"]["attributes"]["key_file_data"]["sensitive"] is True


def test_credential_data_wins_over_nats_creds(monkeypatch: pytest.MonkeyPatch) -> None:
    """``NATS_CREDS`` fills ``credentials`` only when the block gives no credentials at all."""
    monkeypatch.setenv("NATS_CREDS", "/etc/nats/other.creds")
    provider_ = HeadwaterProvider()
    try:
        diags = Diagnostics()
        provider_.configure_provider(diags, {"credential_data": decentralized().creds})
        assert not diags.has_errors()
        assert provider_.connection is not None
        assert provider_.connection.settings.credentials is None
        assert "BEGIN" not in repr(provider_.connection)  # nor in a logged connection
        provider_.configure_provider(diags, {})
        assert provider_.connection.settings.credentials == "/etc/nats/other.creds"
    finally:
        provider_.runtime.close()
