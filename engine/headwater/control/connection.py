"""How every way in connects to a server: one settings model, one connect function.

The CLI fills it from flags and ``NATS_URL``/``NATS_CREDS``; the operator from a Secret or
ConfigMap; the Terraform provider from its provider block. Keeping one model means the same
option means the same thing everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import Mapping
from pathlib import Path

from nats.aio.client import Client
from nats.errors import NoServersError
from pydantic import BaseModel, ConfigDict, field_validator

from headwater.control import api

DEFAULT_URL = "nats://127.0.0.1:4222"
CREDS_BLOCKS = ("BEGIN NATS USER JWT", "BEGIN USER NKEY SEED")
"""The armour lines a ``.creds`` file holds, each followed by its (non-empty) value line."""


def creds_problem(content: str, what: str) -> str | None:
    """Why ``content`` is not a ``.creds`` file's, or None; never quotes the content. nats-py
    reads a creds file when the server asks for a signature, and on a wrong one it fails
    with a bare TypeError deep in nkeys, or reads lines forever looking for the armour."""
    lines = content.splitlines()
    for armour in CREDS_BLOCKS:
        found = [i for i, line in enumerate(lines) if armour in line]
        if not found or found[0] + 1 >= len(lines) or not lines[found[0] + 1].strip():
            return f'{what} is not a .creds file: no "{armour}" block'
    return None


def checked_creds(path: str) -> str:
    """``path`` when it holds a ``.creds`` file; raises ConnectionError saying why not."""
    try:
        content = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise ConnectionError(f"cannot read credentials file {path}: {error.strerror}") from None
    problem = creds_problem(content, f"credentials file {path}")
    if problem is not None:
        raise ConnectionError(problem)
    return path


class ConnectionSettings(BaseModel):
    """Where the server is and how to authenticate. Every field is optional but ``servers``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    servers: tuple[str, ...] = (DEFAULT_URL,)
    """Server URLs; a comma-separated string is split, as nats-server's tools accept."""
    credentials: str | None = None
    """Path to a NATS .creds file (JWT plus nkey seed)."""
    user: str | None = None
    password: str | None = None
    token: str | None = None
    nkey: str | None = None
    """Path to an nkey seed file (``SU...``): the server challenges, the seed signs."""
    js_domain: str | None = None
    """JetStream domain: every JetStream API request goes to ``$JS.<domain>.API`` instead of
    ``$JS.API`` (a hub reached through a leaf node, or a server with ``jetstream.domain``)."""
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_first: bool = False
    """Start TLS before the server's INFO (nats-server's ``tls { handshake_first: true }``),
    for proxies and load balancers that only speak TLS."""
    connect_timeout: float = 5.0
    """Seconds for the first connection; a control plane should fail fast, not retry forever."""

    @field_validator("servers", mode="before")
    @classmethod
    def _split_servers(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        if isinstance(value, list | tuple):
            urls = tuple(str(part) for part in value if str(part).strip())
            if not urls:
                raise ValueError("at least one server URL is required")
            return urls
        return value

    @field_validator("js_domain")
    @classmethod
    def _domain(cls, value: str | None) -> str | None:
        if not value:
            return None
        if any(c in value for c in ".*> \t\r\n"):
            raise ValueError(f"invalid JetStream domain {value!r}: one subject token expected")
        return value

    @property
    def api_prefix(self) -> str:
        """Where this connection's JetStream API lives."""
        return api.domain_prefix(self.js_domain)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, **overrides: object
    ) -> ConnectionSettings:
        """Settings from ``NATS_URL``/``NATS_CREDS``/``NATS_USER``/``NATS_PASSWORD``/``NATS_TOKEN``/
        ``NATS_NKEY``/``NATS_JS_DOMAIN``, with explicit values (those not None) taking
        precedence."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for key, name in (
            ("servers", "NATS_URL"),
            ("credentials", "NATS_CREDS"),
            ("user", "NATS_USER"),
            ("password", "NATS_PASSWORD"),
            ("token", "NATS_TOKEN"),
            ("nkey", "NATS_NKEY"),
            ("js_domain", "NATS_JS_DOMAIN"),
        ):
            if env.get(name):
                values[key] = env[name]
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls.model_validate(values)

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context when any TLS file is set or TLS comes first, else None (plain
        TCP or tls:// URL)."""
        if not (self.tls_ca or self.tls_cert or self.tls_key or self.tls_first):
            return None
        context = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context

    async def connect(self, **options: object) -> Client:
        """Connect with nats-py. Extra keyword options go to nats-py's ``Client.connect`` unchanged.

        The connection is registered with :mod:`headwater.control.api` under this settings'
        JetStream API prefix, so every request made over it goes to the right domain."""
        errors = _Errors()
        kwargs: dict[str, object] = {
            "servers": list(self.servers),
            "connect_timeout": self.connect_timeout,
            "allow_reconnect": False,
            # nats-py reads 0 as "no limit" when picking the first server, so a server that
            # is down made connect() loop forever; 1 fails after a second try.
            "max_reconnect_attempts": 1,
            "reconnect_time_wait": 0.2,
            "error_cb": errors.record,
            "name": "headwater-control",
        }
        if self.credentials:
            kwargs["user_credentials"] = checked_creds(self.credentials)
        if self.user is not None:
            kwargs["user"] = self.user
            kwargs["password"] = self.password or ""
        if self.token is not None:
            kwargs["token"] = self.token
        if self.nkey:
            kwargs["nkeys_seed"] = self.nkey
        context = self.ssl_context()
        if context is not None:
            kwargs["tls"] = context
        if self.tls_first:
            kwargs["tls_handshake_first"] = True
        kwargs.update(options)
        nc = Client()
        try:
            await nc.connect(**kwargs)
        except BaseException as failure:
            await _discard(nc)
            if not isinstance(failure, NoServersError):
                raise
            reason = f": {errors.last}" if errors.last is not None else ""
            servers = ", ".join(self.servers)
            raise ConnectionError(f"no server reachable at {servers}{reason}") from failure
        api.use_prefix(nc, self.api_prefix)
        return nc


async def _discard(nc: Client) -> None:
    """Release a client whose connect failed. Callers that retry (the operator's handlers, a
    CLI ``--wait``) would otherwise leave its socket and transports to the garbage collector
    on every attempt. After a failed TLS upgrade nats-py's close() can wait on a stream that
    start_tls took over, so the wait is bounded."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), 0.5)


class _Errors:
    """Collects connect errors: nats-py logs each failed attempt with a traceback by default,
    and then raises a bare NoServersError that no longer says why."""

    def __init__(self) -> None:
        self.last: Exception | None = None

    async def record(self, error: Exception) -> None:
        self.last = error
