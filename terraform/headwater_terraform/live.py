"""Read the live config of one resource into the core's ``LiveState``.

The core's ``read_live`` lists every stream and consumer, which is right for a whole set of
documents; Terraform asks about one resource at a time (and up to ten at once), so this reads
only what one plan needs: the resource, and for a consumer its stream (whose
``consumer_limits`` give the consumer's defaults).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client

from headwater.control import api
from headwater.control.live import TEMPLATE_PROBE_TIMEOUT, TEMPLATES_REMOVED_AT_LEVEL, LiveState
from headwater.control.models import KV_PREFIX, OBJ_PREFIX, ResourceKey

NOT_FOUND = (api.STREAM_NOT_FOUND, api.CONSUMER_NOT_FOUND, api.TEMPLATE_NOT_FOUND)


@dataclass
class Snapshot:
    """The live state around one resource, plus the raw info replies (for data sources)."""

    live: LiveState
    infos: dict[str, dict[str, Any]] = field(default_factory=dict)

    def config(self, key: ResourceKey) -> dict[str, Any] | None:
        return self.live.config(key)


def stream_of(key: ResourceKey) -> str:
    if key.kind == "KeyValue":
        return KV_PREFIX + key.name
    if key.kind == "ObjectStore":
        return OBJ_PREFIX + key.name
    if key.kind == "Consumer":
        return key.stream
    return key.name


async def _info(nc: Client, subject: str) -> dict[str, Any] | None:
    try:
        return await api.request(nc, subject)
    except api.ApiError as error:
        if error.err_code in NOT_FOUND or error.code == 404:
            return None
        raise


async def read_one(nc: Client, key: ResourceKey) -> Snapshot:
    """The live config of ``key`` (absent from the snapshot when the server lacks it)."""
    snapshot = Snapshot(LiveState())
    if key.kind == "StreamTemplate":
        await _read_template(nc, key.name, snapshot)
        return snapshot
    stream = stream_of(key)
    info = await _info(nc, f"STREAM.INFO.{stream}")
    if info is not None:
        snapshot.live.streams[stream] = info.get("config") or {}
        snapshot.infos["stream"] = info
    if key.kind == "Consumer" and info is not None:
        consumer = await _info(nc, f"CONSUMER.INFO.{key.stream}.{key.name}")
        if consumer is not None:
            snapshot.live.consumers[(key.stream, key.name)] = consumer.get("config") or {}
            snapshot.infos["consumer"] = consumer
    return snapshot


async def templates_supported(nc: Client) -> bool:
    """Whether the server has stream templates (Headwater does; nats-server 2.14+ not)."""
    account = await api.request(nc, "INFO")
    level = int((account.get("api") or {}).get("level", 0))
    if level >= TEMPLATES_REMOVED_AT_LEVEL:
        return False
    try:
        await api.request(
            nc, "STREAM.TEMPLATE.NAMES", {"offset": 0}, timeout=TEMPLATE_PROBE_TIMEOUT
        )
    except api.ApiUnavailable:
        return False
    except api.ApiError:
        return True
    return True


async def _read_template(nc: Client, name: str, snapshot: Snapshot) -> None:
    snapshot.live.templates_supported = await templates_supported(nc)
    if not snapshot.live.templates_supported:
        return
    info = await _info(nc, f"STREAM.TEMPLATE.INFO.{name}")
    if info is not None:
        snapshot.live.templates[name] = info.get("config") or {}
        snapshot.infos["template"] = info
