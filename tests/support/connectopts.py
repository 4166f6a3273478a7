"""Servers for the connection options every way in offers: a JetStream domain, nkey users.

``domain_server`` starts either server with ``jetstream { domain: ... }`` (both answer the
domain's API prefix ``$JS.<domain>.API`` to their own clients). ``nkey_server`` starts
a server (nats-server unless ``kind`` says otherwise) with one nkey user and writes that
user's seed file. ``tls_first_server`` starts one requiring TLS before its INFO
(``handshake_first``). Both servers support both; the defaults stay nats-server so existing
callers keep their reference.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import nkeys

from conftest import start_server
from headwater.testing import ServerProcess
from support.certs import TestPKI

DOMAIN = "hub"

DOCUMENTS = """
apiVersion: headwater.io/v1
kind: Stream
metadata: {name: orders}
spec: {name: DORDERS, subjects: ["dorders.>"], maxAge: 1h}
---
apiVersion: headwater.io/v1
kind: KeyValue
metadata: {name: settings}
spec: {bucket: DSETTINGS, history: 3}
"""
"""A stream and a KV bucket, for the ways in to plan and apply in a domain."""


def _configured(
    kind: str, tmp_path: Path, name: str, extra: str = "", jetstream: str = ""
) -> Iterator[ServerProcess]:
    """``kind`` on 127.0.0.1 with JetStream in ``tmp_path`` (plus ``jetstream`` lines in that
    block) and ``extra`` config lines."""
    conf = tmp_path / f"{kind}-{name}.conf"
    store = tmp_path / f"{kind}-{name}-store"
    conf.write_text(
        f'host: 127.0.0.1\nport: -1\njetstream {{\n  store_dir: "{store}"\n{jetstream}}}\n{extra}'
    )
    yield from start_server(kind, args=["-c", str(conf)])


@contextlib.contextmanager
def domain_server(kind: str, tmp_path: Path, domain: str = DOMAIN) -> Iterator[ServerProcess]:
    yield from _configured(kind, tmp_path, "domain", jetstream=f"  domain: {domain}\n")


def user_seed(tmp_path: Path) -> tuple[Path, str]:
    """A new nkey user: (path of its seed file, its public key)."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    path = tmp_path / "user.nk"
    path.write_bytes(seed + b"\n")
    return path, public


@contextlib.contextmanager
def nkey_server(tmp_path: Path, kind: str = "nats") -> Iterator[tuple[ServerProcess, Path]]:
    """A server with JetStream that admits only one nkey user; yields it and the seed."""
    seed, public = user_seed(tmp_path)
    users = f'authorization {{\n  users = [ {{ nkey: "{public}" }} ]\n}}\n'
    servers = _configured(kind, tmp_path, "nkey", users)
    try:
        yield next(servers), seed
    finally:
        servers.close()


@contextlib.contextmanager
def tls_first_server(tmp_path: Path, pki: TestPKI, kind: str = "nats") -> Iterator[ServerProcess]:
    """A server with JetStream whose clients must start TLS before anything else
    (``handshake_first``)."""
    tls = (
        f'tls {{\n  cert_file: "{pki.server_cert}"\n  key_file: "{pki.server_key}"\n'
        "  handshake_first: true\n}\n"
    )
    yield from _configured(kind, tmp_path, "tls-first", tls)
