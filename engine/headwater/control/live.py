"""Live state: what the server has, read through the JetStream API as raw JSON.

Streams named ``KV_<b>`` and ``OBJ_<b>`` are buckets; streams a template created
(``template_owner``) belong to their template and are not resources of their own; consumers
without a durable name are ephemeral and never managed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client

from headwater.control import api
from headwater.control.models import (
    KV_PREFIX,
    MANAGED_BY_KEY,
    OBJ_PREFIX,
    PREVENT_DELETE_KEY,
    Consumer,
    KeyValue,
    ObjectStore,
    ResourceKey,
    ResourceSpec,
    Stream,
    StreamTemplate,
)
from headwater.control.models.common import ConsumerLimits

TEMPLATES_REMOVED_AT_LEVEL = 4
"""JetStream API level of nats-server 2.14, which removed stream templates."""
TEMPLATE_PROBE_TIMEOUT = 1.0
"""A server without templates may not answer at all; do not wait the full API timeout."""


@dataclass
class LiveState:
    """Raw server configs, keyed by server-side name."""

    streams: dict[str, dict[str, Any]] = field(default_factory=dict)
    consumers: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    templates_supported: bool = False

    def config(self, key: ResourceKey) -> dict[str, Any] | None:
        """The raw config of a resource, None when the server does not have it."""
        if key.kind == "Stream":
            return self.streams.get(key.name)
        if key.kind == "KeyValue":
            return self.streams.get(KV_PREFIX + key.name)
        if key.kind == "ObjectStore":
            return self.streams.get(OBJ_PREFIX + key.name)
        if key.kind == "Consumer":
            return self.consumers.get((key.stream, key.name))
        if key.kind == "StreamTemplate":
            return self.templates.get(key.name)
        raise ValueError(f"unknown kind {key.kind!r}")

    def stream_of(self, key: ResourceKey) -> str | None:
        """The stream that holds a resource (buckets live in ``KV_``/``OBJ_`` streams)."""
        return {
            "Stream": key.name,
            "KeyValue": KV_PREFIX + key.name,
            "ObjectStore": OBJ_PREFIX + key.name,
        }.get(key.kind)

    def consumer_limits(self, stream: str) -> ConsumerLimits:
        config = self.streams.get(stream) or {}
        return ConsumerLimits.model_validate(config.get("consumer_limits") or {})

    def resource_keys(self) -> Iterator[ResourceKey]:
        """Every resource on the server, classified by kind."""
        for name, config in sorted(self.streams.items()):
            if config.get("template_owner"):
                continue
            yield stream_key(name)
        for stream, name in sorted(self.consumers):
            yield ResourceKey("Consumer", name, stream)
        for name in sorted(self.templates):
            yield ResourceKey("StreamTemplate", name)

    def spec(self, key: ResourceKey) -> ResourceSpec:
        """The live resource as a spec (raises ValueError if it does not parse)."""
        config = self.config(key)
        if config is None:
            raise KeyError(str(key))
        model = MODEL_OF[key.kind]
        return model.from_server_config(config, stream=key.stream)

    def metadata(self, key: ResourceKey) -> dict[str, str]:
        config = self.config(key) or {}
        if key.kind == "StreamTemplate":
            config = config.get("config") or {}
        return dict(config.get("metadata") or {})

    def owner(self, key: ResourceKey) -> str | None:
        """Who manages the live resource (its ``headwater.io/managed-by``); None: nobody."""
        return self.metadata(key).get(MANAGED_BY_KEY) or None

    def owned(self, key: ResourceKey, owner: str) -> bool:
        """``owner`` manages it, so ``owner`` may prune or delete it."""
        return self.owner(key) == owner

    def delete_prevented(self, key: ResourceKey) -> bool:
        return self.metadata(key).get(PREVENT_DELETE_KEY) == "true"


MODEL_OF: dict[str, type[ResourceSpec]] = {
    "Stream": Stream,
    "Consumer": Consumer,
    "KeyValue": KeyValue,
    "ObjectStore": ObjectStore,
    "StreamTemplate": StreamTemplate,
}


def stream_key(name: str) -> ResourceKey:
    """How a stream name reads as a resource: a bucket, or a plain stream."""
    if name.startswith(KV_PREFIX) and len(name) > len(KV_PREFIX):
        return ResourceKey("KeyValue", name[len(KV_PREFIX) :])
    if name.startswith(OBJ_PREFIX) and len(name) > len(OBJ_PREFIX):
        return ResourceKey("ObjectStore", name[len(OBJ_PREFIX) :])
    return ResourceKey("Stream", name)


async def read_live(nc: Client, *, timeout: float = api.DEFAULT_TIMEOUT) -> LiveState:
    """Read streams, their durable consumers, and templates where the server has them."""
    state = LiveState()
    for info in await api.paged(nc, "STREAM.LIST", "streams", timeout=timeout):
        config = info.get("config") or {}
        state.streams[config["name"]] = config
    for stream in state.streams:
        for info in await api.paged(nc, f"CONSUMER.LIST.{stream}", "consumers", timeout=timeout):
            config = info.get("config") or {}
            durable = config.get("durable_name")
            if durable:
                state.consumers[(stream, durable)] = config
    await _read_templates(nc, state, timeout)
    return state


async def _read_templates(nc: Client, state: LiveState, timeout: float) -> None:
    account = await api.request(nc, "INFO", timeout=timeout)
    level = int((account.get("api") or {}).get("level", 0))
    if level >= TEMPLATES_REMOVED_AT_LEVEL:
        return
    try:
        names = await api.request(
            nc, "STREAM.TEMPLATE.NAMES", {"offset": 0}, timeout=TEMPLATE_PROBE_TIMEOUT
        )
    except (api.ApiUnavailable, api.ApiError):
        return
    state.templates_supported = True
    # nats-server 2.10 listed template names under "streams"; later drafts used "templates".
    listed = names.get("templates") or names.get("streams") or []
    for name in listed:
        info = await api.request(nc, f"STREAM.TEMPLATE.INFO.{name}", timeout=timeout)
        state.templates[name] = info.get("config") or {}
