"""A throwaway PKI for TLS tests: a CA, a server certificate and a client certificate.

Everything is generated with ``cryptography`` into a directory the caller owns, so the tests
never depend on checked-in key material that could expire. EC P-256 keys keep generation fast
(milliseconds), and both nats-server (Go's crypto/tls) and Python's ssl module accept them.
``pki_fixture`` is a session-scoped pytest fixture named ``pki``; a test module registers it
by importing it.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class TestPKI:
    """Paths of the generated PEM files."""

    __test__ = False  # not a pytest test class despite the name

    directory: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    route_cert: Path
    """For cluster routes: presented both ways, so it carries both key usages."""
    route_key: Path

    def client_context(self, with_cert: bool = False) -> ssl.SSLContext:
        """A client context trusting the CA; ``with_cert`` also presents the client cert."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca_cert))
        if with_cert:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Headwater tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _leaf(
    subject: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    usage: list[x509.ObjectIdentifier],
    san: list[x509.GeneralName],
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path) -> TestPKI:
    """Write ca.pem, server-cert.pem/server-key.pem (127.0.0.1, localhost) and
    client-cert.pem/client-key.pem into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("Headwater Test CA")
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_cert, server_key = _leaf(
        "localhost",
        ca_key,
        ca_name,
        [ExtendedKeyUsageOID.SERVER_AUTH],
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client_cert, client_key = _leaf(
        "test-client", ca_key, ca_name, [ExtendedKeyUsageOID.CLIENT_AUTH], []
    )
    route_cert, route_key = _leaf(
        "route",
        ca_key,
        ca_name,
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    pki = TestPKI(
        directory=directory,
        ca_cert=directory / "ca.pem",
        server_cert=directory / "server-cert.pem",
        server_key=directory / "server-key.pem",
        client_cert=directory / "client-cert.pem",
        client_key=directory / "client-key.pem",
        route_cert=directory / "route-cert.pem",
        route_key=directory / "route-key.pem",
    )
    _write_cert(pki.ca_cert, ca_cert)
    _write_cert(pki.server_cert, server_cert)
    _write_key(pki.server_key, server_key)
    _write_cert(pki.client_cert, client_cert)
    _write_key(pki.client_key, client_key)
    _write_cert(pki.route_cert, route_cert)
    _write_key(pki.route_key, route_key)
    return pki


@pytest.fixture(scope="session", name="pki")
def pki_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestPKI]:
    """One PKI for the whole session: generation is cheap, but servers read the files."""
    yield make_pki(tmp_path_factory.mktemp("pki"))
