"""NATS 2.0 decentralized auth for tests: an operator, an account with JetStream, a user, and
the user's ``.creds`` file, signed here with ``nkeys`` (no ``nsc`` on the machine).

A JWT is ``header.claims.signature``, each part base64url without padding; the header names
the ``ed25519-nkey`` algorithm, the claims carry the issuer's and subject's public nkeys, and
the issuer's seed signs the first two parts. nats-server accepts such an operator, the account
preloaded in a ``MEMORY`` resolver, and a user that presents the JWT and signs the nonce.
Headwater refuses operator mode (docs/DIFFERENCES.md), so these are for nats-server only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass(frozen=True)
class Key:
    seed: bytes
    public: str

    @classmethod
    def new(cls, prefix: int) -> Key:
        seed = nkeys.encode_seed(os.urandom(32), prefix)
        return cls(seed, nkeys.from_seed(bytearray(seed)).public_key.decode())

    def sign(self, data: bytes) -> bytes:
        return nkeys.from_seed(bytearray(self.seed)).sign(data)


def encode(issuer: Key, subject: str, name: str, nats: dict[str, Any]) -> str:
    """A JWT of ``nats`` claims about ``subject``, signed by ``issuer``."""
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": issuer.public,
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": 2},
    }
    # The ID is a hash of the claims, as the JWT library makes it; servers don't check it.
    digest = hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    signed = _b64(json.dumps(HEADER).encode()) + "." + _b64(json.dumps(claims).encode())
    return signed + "." + _b64(issuer.sign(signed.encode()))


@dataclass(frozen=True)
class Decentralized:
    operator_jwt: str
    account: str
    account_jwt: str
    system: str
    system_jwt: str
    creds: str
    """A ``.creds`` file's content: the user's JWT and seed, in the armoured blocks."""

    def server_config(self, store: Path) -> str:
        return (
            "host: 127.0.0.1\nport: -1\n"
            f'jetstream {{ store_dir: "{store}" }}\n'
            f"operator: {self.operator_jwt}\n"
            f"system_account: {self.system}\n"
            "resolver: MEMORY\n"
            "resolver_preload: {\n"
            f"  {self.account}: {self.account_jwt}\n"
            f"  {self.system}: {self.system_jwt}\n"
            "}\n"
        )


def decentralized() -> Decentralized:
    """A fresh operator, a JetStream-enabled account and one of its users, and the system
    account."""
    operator = Key.new(nkeys.PREFIX_BYTE_OPERATOR)
    account = Key.new(nkeys.PREFIX_BYTE_ACCOUNT)
    user = Key.new(nkeys.PREFIX_BYTE_USER)
    # JetStream needs a system account for its internal subscriptions.
    system = Key.new(nkeys.PREFIX_BYTE_ACCOUNT)
    operator_jwt = encode(operator, operator.public, "OP", {"type": "operator"})
    limits = {
        **UNLIMITED,
        "imports": -1,
        "exports": -1,
        "wildcards": True,
        "conn": -1,
        "leaf": -1,
        "mem_storage": -1,
        "disk_storage": -1,
        "streams": -1,
        "consumer": -1,
    }
    account_jwt = encode(operator, account.public, "APP", {"type": "account", "limits": limits})
    user_jwt = encode(
        account, user.public, "terraform", {"type": "user", "pub": {}, "sub": {}, **UNLIMITED}
    )
    creds = (
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n------END USER NKEY SEED------\n"
    )
    system_jwt = encode(operator, system.public, "SYS", {"type": "account"})
    return Decentralized(
        operator_jwt, account.public, account_jwt, system.public, system_jwt, creds
    )
