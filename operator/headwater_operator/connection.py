"""Which server a resource lives on and how to log in, and the connections themselves.

A connection *profile* is a Secret and/or ConfigMap labelled ``headwater.io/connection`` in the
resource's namespace. It is chosen by ``spec.account`` (NACK's field for a connection
profile), else the namespace default (``headwater-connection``), else the operator's own
defaults (flags and ``NATS_URL``). Keys: ``servers`` (comma-separated URLs), ``user``,
``password``, ``token``, ``creds`` (the .creds file's content), ``nkey`` (an nkey user seed,
``SU...``), ``jsDomain`` (the JetStream domain), ``tls.crt``, ``tls.key`` and ``ca.crt`` (PEM),
``tlsFirst`` (``true``/``false``: TLS before the server's INFO). ``spec.servers``,
``spec.creds``, ``spec.nkey``, ``spec.tls`` (paths inside the operator pod, as NACK has them),
``spec.tlsFirst`` and ``spec.jsDomain`` override the profile.

Connections are pooled by their whole settings, the domain and the nkey seed's path included,
so resources in different domains or logging in as different users never share one.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from pydantic import ValidationError

from headwater.control.connection import ConnectionSettings
from headwater.control.models import ResourceSpec

PROFILE_LABEL = "headwater.io/connection"
PROFILE_KEYS = (
    "servers",
    "user",
    "password",
    "token",
    "creds",
    "nkey",
    "jsDomain",
    "tls.crt",
    "tls.key",
    "ca.crt",
    "tlsFirst",
)
LOGIN_FIELDS = ("user", "password", "token", "credentials", "nkey")
"""The ways to log in: a profile or spec that names one replaces the others, never mixes."""

SPEC_NAMES = {
    "servers": "spec.servers",
    "credentials": "spec.creds",
    "nkey": "spec.nkey",
    "js_domain": "spec.jsDomain",
    "tls_cert": "spec.tls.clientCert",
    "tls_key": "spec.tls.clientKey",
    "tls_ca": "spec.tls.rootCas",
    "tls_first": "spec.tlsFirst",
}
PROFILE_NAMES = {
    "servers": "servers",
    "user": "user",
    "password": "password",
    "token": "token",
    "credentials": "creds",
    "nkey": "nkey",
    "js_domain": "jsDomain",
    "tls_cert": "tls.crt",
    "tls_key": "tls.key",
    "tls_ca": "ca.crt",
    "tls_first": "tlsFirst",
}


class ProfileMissing(LookupError):
    """``spec.account`` names a profile that does not exist (yet)."""


class ProfileInvalid(ValueError):
    """A profile's values do not make connection settings (e.g. a ``jsDomain`` with a dot).
    Fixing the profile fixes the resource, so this is retried, not a spec error."""


class InvalidConnection(ValueError):
    """The resource's own connection fields do not make connection settings (e.g.
    ``spec.jsDomain`` is not one subject token): an invalid spec, until it changes."""


def secret_data(body: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's known keys, base64-decoded (``stringData`` is folded in by the API)."""
    out: dict[str, str] = {}
    for key, value in (body.get("data") or {}).items():
        if key in PROFILE_KEYS and isinstance(value, str):
            try:
                out[key] = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                continue
    return out


def configmap_data(body: Mapping[str, Any]) -> dict[str, str]:
    return {
        key: value
        for key, value in (body.get("data") or {}).items()
        if key in PROFILE_KEYS and isinstance(value, str)
    }


class FileCache:
    """Secret contents as files (nats-py and ssl read paths), named by their hash, 0600."""

    def __init__(self, directory: Path | None = None) -> None:
        self._owned = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="headwater-operator-"))

    def path_for(self, content: str, suffix: str) -> str:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        digest = hashlib.sha256(content.encode()).hexdigest()[:24]
        path = self.directory / f"{digest}{suffix}"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(content)
        return str(path)

    def cleanup(self) -> None:
        if self._owned:
            shutil.rmtree(self.directory, ignore_errors=True)


@dataclass(frozen=True)
class ProfileLookup:
    """The profiles of one namespace: name -> merged Secret and ConfigMap data."""

    secrets: Mapping[str, Mapping[str, str]]
    configmaps: Mapping[str, Mapping[str, str]]

    def get(self, name: str) -> dict[str, str] | None:
        if name not in self.secrets and name not in self.configmaps:
            return None
        # Non-secret settings (servers, ca.crt) may sit in a ConfigMap; the Secret wins.
        return {**self.configmaps.get(name, {}), **self.secrets.get(name, {})}


def settings_for(
    spec: ResourceSpec,
    profiles: ProfileLookup,
    defaults: ConnectionSettings,
    files: FileCache,
    namespace_profile: str,
) -> ConnectionSettings:
    """The connection settings of one resource: the operator's defaults, overridden by the
    profile (``spec.account``'s, else the namespace's), overridden by the spec's own fields.
    Raises ProfileMissing, ProfileInvalid or InvalidConnection."""
    values: dict[str, Any] = defaults.model_dump()
    profile_name = spec.account or namespace_profile
    if spec.account:
        profile = profiles.get(spec.account)
        if profile is None:
            raise ProfileMissing(
                f"connection profile {spec.account!r}: no Secret or ConfigMap of that name "
                f"labelled {PROFILE_LABEL} in this namespace"
            )
    else:
        profile = profiles.get(namespace_profile) or {}
    from_profile = _from_profile(profile, files)
    from_spec = _from_spec(spec)
    values |= from_profile
    values |= from_spec
    try:
        return ConnectionSettings.model_validate(values)
    except ValidationError as error:
        problems = [(_field_of(entry), _message_of(entry)) for entry in error.errors()]
        in_spec = [(field, message) for field, message in problems if field in from_spec]
        if in_spec:
            raise InvalidConnection(
                "; ".join(
                    f"{SPEC_NAMES.get(field, field)}: {message}" for field, message in in_spec
                )
            ) from None
        raise ProfileInvalid(
            f"connection profile {profile_name!r}: "
            + "; ".join(
                f"{PROFILE_NAMES.get(field, field)}: {message}" for field, message in problems
            )
        ) from None


def _field_of(entry: Mapping[str, Any]) -> str:
    location = entry.get("loc") or ()
    return str(location[0]) if location else ""


def _message_of(entry: Mapping[str, Any]) -> str:
    message = str(entry.get("msg", "invalid"))
    return message.removeprefix("Value error, ")


def _from_profile(profile: Mapping[str, str], files: FileCache) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if profile.get("servers"):
        values["servers"] = profile["servers"]
    for key in ("user", "password", "token"):
        if profile.get(key):
            values[key] = profile[key]
    if any(profile.get(key) for key in ("user", "token", "creds", "nkey")):
        # A profile that logs in replaces the operator's default login rather than mixing.
        for key in LOGIN_FIELDS:
            values.setdefault(key, None)
    if profile.get("creds"):
        values["credentials"] = files.path_for(profile["creds"], ".creds")
    if profile.get("nkey"):
        values["nkey"] = files.path_for(profile["nkey"], ".nk")
    if profile.get("jsDomain"):
        values["js_domain"] = profile["jsDomain"].strip()
    for key, field, suffix in (
        ("tls.crt", "tls_cert", ".crt"),
        ("tls.key", "tls_key", ".key"),
        ("ca.crt", "tls_ca", ".ca.crt"),
    ):
        if profile.get(key):
            values[field] = files.path_for(profile[key], suffix)
    if profile.get("tlsFirst", "").strip():
        # "true"/"false" (pydantic reads yes/no/1/0 too); anything else is ProfileInvalid.
        values["tls_first"] = profile["tlsFirst"].strip()
    return values


def _from_spec(spec: ResourceSpec) -> dict[str, Any]:
    """NACK's per-resource connection fields. A login named here (``creds``, ``nkey``)
    replaces the profile's or operator's login, as a profile's replaces the operator's."""
    values: dict[str, Any] = {}
    if spec.servers:
        values["servers"] = list(spec.servers)
    if spec.creds or spec.nkey:
        values |= dict.fromkeys(LOGIN_FIELDS)
    if spec.creds:
        values["credentials"] = spec.creds
    if spec.nkey:
        values["nkey"] = spec.nkey
    if spec.tls:
        values |= _from_nack_tls(spec.tls)
    if spec.tls_first is not None:
        # An explicit false wins too: this resource's server does not want TLS first.
        values["tls_first"] = spec.tls_first
    if spec.js_domain:
        values["js_domain"] = spec.js_domain
    return values


def _from_nack_tls(tls: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if tls.get("clientCert"):
        values["tls_cert"] = str(tls["clientCert"])
    if tls.get("clientKey"):
        values["tls_key"] = str(tls["clientKey"])
    roots = tls.get("rootCas") or tls.get("rootCAs") or []
    if isinstance(roots, str):
        roots = [roots]
    if roots:
        values["tls_ca"] = str(roots[0])
    return values


class ConnectionPool:
    """One NATS connection per distinct settings, reused across reconciles; a connection
    that dropped is replaced on next use, and one unused for ``idle_timeout`` seconds is
    closed (a rotated password or a deleted profile leaves its old connection behind)."""

    def __init__(
        self, idle_timeout: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.idle_timeout = idle_timeout
        self._clock = clock
        self._clients: dict[ConnectionSettings, Client] = {}
        self._used: dict[ConnectionSettings, float] = {}
        self._locks: dict[ConnectionSettings, asyncio.Lock] = {}

    def __len__(self) -> int:
        return sum(1 for client in self._clients.values() if client.is_connected)

    async def get(self, settings: ConnectionSettings) -> Client:
        await self._close_idle(keep=settings)
        lock = self._locks.setdefault(settings, asyncio.Lock())
        async with lock:
            self._used[settings] = self._clock()
            client = self._clients.get(settings)
            if client is not None and client.is_connected:
                return client
            if client is not None:
                await _close(client)
            client = await settings.connect(name="headwater-operator")
            self._clients[settings] = client
            return client

    async def _close_idle(self, keep: ConnectionSettings) -> None:
        now = self._clock()
        for settings, used in list(self._used.items()):
            if settings != keep and now - used > self.idle_timeout:
                await self.discard(settings)

    async def discard(self, settings: ConnectionSettings) -> None:
        """Drop a connection (after a failure, or idle), so the next use connects afresh."""
        self._used.pop(settings, None)
        client = self._clients.pop(settings, None)
        if client is not None:
            await _close(client)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        self._used.clear()
        for client in clients:
            await _close(client)


async def _close(client: Client) -> None:
    if client.is_closed:
        return
    try:
        await asyncio.wait_for(client.close(), timeout=2.0)
    except (TimeoutError, OSError):
        # The socket is gone or stuck; there is nothing left to flush.
        return
