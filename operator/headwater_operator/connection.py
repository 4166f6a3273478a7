"""Which server a resource lives on and how to log in, and the connections themselves.

A connection *profile* is a Secret and/or ConfigMap labelled ``headwater.io/connection`` in the
resource's namespace. It is chosen by ``spec.account`` (NACK's field for a connection
profile), else the namespace default (``headwater-connection``), else the operator's own
defaults (flags and ``NATS_URL``). Keys: ``servers`` (comma-separated URLs), ``user``,
``password``, ``token``, ``creds`` (the .creds file's content), ``tls.crt``, ``tls.key`` and
``ca.crt`` (PEM). ``spec.servers``, ``spec.creds`` and ``spec.tls`` (paths inside the operator
pod, as NACK has them) override the profile.
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

from headwater.control.connection import ConnectionSettings
from headwater.control.models import ResourceSpec

PROFILE_LABEL = "headwater.io/connection"
PROFILE_KEYS = ("servers", "user", "password", "token", "creds", "tls.crt", "tls.key", "ca.crt")


class ProfileMissing(LookupError):
    """``spec.account`` names a profile that does not exist (yet)."""


class UnsupportedConnection(ValueError):
    """A NACK connection field this operator does not honour (nkey, jsDomain)."""


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
    """The connection settings of one resource (raises ProfileMissing, UnsupportedConnection)."""
    if spec.nkey:
        raise UnsupportedConnection("spec.nkey is not supported; use creds or user/password")
    if spec.js_domain:
        raise UnsupportedConnection("spec.jsDomain is not supported by the control plane")
    values: dict[str, Any] = defaults.model_dump()
    if spec.account:
        profile = profiles.get(spec.account)
        if profile is None:
            raise ProfileMissing(
                f"connection profile {spec.account!r}: no Secret or ConfigMap of that name "
                f"labelled {PROFILE_LABEL} in this namespace"
            )
    else:
        profile = profiles.get(namespace_profile) or {}
    values |= _from_profile(profile, files)
    if spec.servers:
        values["servers"] = list(spec.servers)
    if spec.creds:
        values["credentials"] = spec.creds
    if spec.tls:
        values |= _from_nack_tls(spec.tls)
    return ConnectionSettings.model_validate(values)


def _from_profile(profile: Mapping[str, str], files: FileCache) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if profile.get("servers"):
        values["servers"] = profile["servers"]
    for key in ("user", "password", "token"):
        if profile.get(key):
            values[key] = profile[key]
    if profile.get("user") or profile.get("token") or profile.get("creds"):
        # A profile that logs in replaces the operator's default login rather than mixing.
        for key in ("user", "password", "token", "credentials"):
            values.setdefault(key, None)
    if profile.get("creds"):
        values["credentials"] = files.path_for(profile["creds"], ".creds")
    for key, field, suffix in (
        ("tls.crt", "tls_cert", ".crt"),
        ("tls.key", "tls_key", ".key"),
        ("ca.crt", "tls_ca", ".ca.crt"),
    ):
        if profile.get(key):
            values[field] = files.path_for(profile[key], suffix)
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
