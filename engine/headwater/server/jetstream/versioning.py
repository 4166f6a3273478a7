"""The server version and JetStream API level we advertise, and the metadata that carries them.

ADR-44 versioning: every stream config stores ``_nats.req.level``, the lowest API level a server
needs to run the stream as configured. Responses additionally carry ``_nats.ver`` (the server
version) and ``_nats.level`` (the server's API level); those two are never stored, and any
values a client sends for them are dropped.

Headwater implements the 2.11 feature set, so it advertises 2.11.0 and API level 1. Everything
that reports a version (INFO ``version``/``proto``, ``/varz``, ``$JS.API.INFO``, stream and
consumer metadata, the start-up banner) reads it here; ``tests/engine/jetstream/
test_versioning.py`` checks each of them, README.md and docs/DIFFERENCES.md against it.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "ADVERTISED_SERVER_VERSION",
    "DYNAMIC_METADATA_KEYS",
    "JS_API_LEVEL",
    "PROTOCOL_VERSION",
    "REQUIRED_LEVEL_KEY",
    "SERVER_LEVEL_KEY",
    "SERVER_VERSION_KEY",
    "with_dynamic_metadata",
    "with_static_metadata",
]

#: The nats-server version we claim; clients pick API forms by it (minor >= 9 matters).
ADVERTISED_SERVER_VERSION = "2.11.0"
#: The highest JetStream API level we implement (1 = the 2.11 features: TTLs, pause; priority
#: groups, also level 1, are refused with 10052 until they run).
JS_API_LEVEL = 1
#: The client protocol version in INFO's ``proto`` (1: asynchronous INFO updates understood).
PROTOCOL_VERSION = 1

REQUIRED_LEVEL_KEY = "_nats.req.level"
SERVER_VERSION_KEY = "_nats.ver"
SERVER_LEVEL_KEY = "_nats.level"
DYNAMIC_METADATA_KEYS = frozenset({SERVER_VERSION_KEY, SERVER_LEVEL_KEY})


def with_static_metadata(metadata: Mapping[str, str] | None, required_level: int) -> dict[str, str]:
    """The metadata to store: dynamic keys removed, ``_nats.req.level`` set.

    Other ``_nats.*`` keys a client sends are kept, as the reference keeps them.
    """
    out = {k: v for k, v in (metadata or {}).items() if k not in DYNAMIC_METADATA_KEYS}
    out[REQUIRED_LEVEL_KEY] = str(required_level)
    return out


def with_dynamic_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """The metadata to show in a response: stored keys plus our version and API level."""
    out = dict(metadata or {})
    out[SERVER_VERSION_KEY] = ADVERTISED_SERVER_VERSION
    out[SERVER_LEVEL_KEY] = str(JS_API_LEVEL)
    return out
