"""Glue to :mod:`headwater.server.jetstream.consumerconfig` (parsing, defaults, validation).

The consumer runtime reads config fields by name through :func:`cfg_get`, durations
in nanoseconds; this module only adds what the runtime needs around that config: ephemeral
names and a stable JSON form to store.
"""

from __future__ import annotations

import secrets
import string
from typing import Any

import msgspec

from headwater.server.jetstream.consumerconfig import (
    ConsumerConfig,
    consumer_config_from_json,
    consumer_config_to_json,
)
from headwater.server.jetstream.layout import parse_time

__all__ = [
    "add_header",
    "cfg_get",
    "config_json",
    "ephemeral_name",
    "from_stored",
    "pause_ns",
    "stored_json",
    "time_ns",
    "with_pause",
]

_ALPHABET = string.ascii_letters + string.digits


def ephemeral_name() -> str:
    """nats-server names ephemerals with 8 random alphanumerics."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(8))


def config_json(cfg: ConsumerConfig) -> dict[str, Any]:
    """The config as API responses carry it."""
    return consumer_config_to_json(cfg)


def stored_json(cfg: ConsumerConfig) -> dict[str, Any]:
    """The config as ``meta.inf`` keeps it (no version metadata that changes per release)."""
    return consumer_config_to_json(cfg, dynamic_metadata=False)


def from_stored(data: dict[str, Any]) -> ConsumerConfig:
    return consumer_config_from_json(data)


def with_pause(cfg: ConsumerConfig, pause_until: str | None) -> ConsumerConfig:
    return msgspec.structs.replace(cfg, pause_until=pause_until)


def cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """A config field by its JSON name; None and missing read as ``default``."""
    value = cfg.get(key) if isinstance(cfg, dict) else getattr(cfg, key, None)
    return default if value is None else value


def add_header(hdr: bytes | None, key: str, value: str) -> bytes:
    """``hdr`` with one more header line (``headers_only`` adds ``Nats-Msg-Size``)."""
    base = hdr if hdr else b"NATS/1.0\r\n\r\n"
    return base[:-2] + f"{key}: {value}\r\n\r\n".encode()


def time_ns(value: Any) -> int:
    """An RFC 3339 config time (``opt_start_time``, ``pause_until``) in ns; 0 when unset."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value:
        return parse_time(value)
    return 0


def pause_ns(value: Any) -> int:
    return time_ns(value) if value else 0
