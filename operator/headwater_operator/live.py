"""The live state of one resource, read with a request or two instead of listing everything.

The core's ``read_live`` lists every stream and consumer, which a CLI run does once; the
operator reconciles one resource at a time, every sync interval, so it reads just the stream
(and consumer, or template) the resource names into the same ``LiveState`` the planner takes.
The INFO replies also carry the live figures shown in status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client

from headwater.control import api
from headwater.control.live import TEMPLATE_PROBE_TIMEOUT, TEMPLATES_REMOVED_AT_LEVEL, LiveState
from headwater.control.models import Consumer, ResourceSpec, StreamTemplate


@dataclass
class LiveRead:
    state: LiveState
    kind: str
    stream: str = ""
    """The stream holding the resource (a consumer's stream; KV_/OBJ_ for buckets)."""
    stream_info: dict[str, Any] | None = None
    consumer_info: dict[str, Any] | None = None
    template_info: dict[str, Any] | None = None

    @property
    def exists(self) -> bool:
        """The server has the resource itself."""
        if self.kind == "Consumer":
            return self.consumer_info is not None
        if self.kind == "StreamTemplate":
            return self.template_info is not None
        return self.stream_info is not None


def stream_of(spec: ResourceSpec) -> str:
    if isinstance(spec, Consumer):
        return spec.stream_name
    if isinstance(spec, StreamTemplate):
        return ""
    stream = getattr(spec, "stream_name", None)
    return str(stream) if isinstance(stream, str) else spec.server_name


async def _info(nc: Client, subject: str, timeout: float) -> dict[str, Any] | None:
    try:
        return await api.request(nc, subject, timeout=timeout)
    except api.ApiError as error:
        if error.err_code in (api.STREAM_NOT_FOUND, api.CONSUMER_NOT_FOUND):
            return None
        raise


async def read_resource(nc: Client, spec: ResourceSpec, *, timeout: float) -> LiveRead:
    """What the server has of ``spec``'s resource (and, for a consumer, of its stream)."""
    state = LiveState()
    if isinstance(spec, StreamTemplate):
        return await _read_template(nc, spec, state, timeout)
    stream = stream_of(spec)
    read = LiveRead(state, spec.KIND, stream=stream)
    read.stream_info = await _info(nc, f"STREAM.INFO.{stream}", timeout)
    if read.stream_info is not None:
        state.streams[stream] = read.stream_info.get("config") or {}
    if isinstance(spec, Consumer):
        if read.stream_info is not None:
            subject = f"CONSUMER.INFO.{stream}.{spec.server_name}"
            read.consumer_info = await _info(nc, subject, timeout)
        if read.consumer_info is not None:
            state.consumers[(stream, spec.server_name)] = read.consumer_info.get("config") or {}
    return read


async def _read_template(
    nc: Client, spec: StreamTemplate, state: LiveState, timeout: float
) -> LiveRead:
    read = LiveRead(state, spec.KIND)
    account = await api.request(nc, "INFO", timeout=timeout)
    if int((account.get("api") or {}).get("level", 0)) >= TEMPLATES_REMOVED_AT_LEVEL:
        return read
    try:
        info = await api.request(
            nc, f"STREAM.TEMPLATE.INFO.{spec.name}", timeout=TEMPLATE_PROBE_TIMEOUT
        )
    except api.ApiUnavailable:
        return read
    except api.ApiError as error:
        if error.err_code != api.TEMPLATE_NOT_FOUND:
            raise
        state.templates_supported = True
        return read
    state.templates_supported = True
    read.template_info = info
    state.templates[spec.name] = info.get("config") or {}
    return read


def figures(read: LiveRead, spec: ResourceSpec) -> dict[str, Any]:
    """Status fields from the INFO replies: messages, bytes, sequences, pending counts, and
    the config values the printer columns show (storage, replicas, filters, ack policy)."""
    out: dict[str, Any] = {}
    if isinstance(spec, StreamTemplate):
        streams = sorted((read.template_info or {}).get("streams") or [])
        return {"streams": streams, "streamCount": len(streams)}
    out["stream"] = read.stream
    if isinstance(spec, Consumer):
        out["consumer"] = spec.server_name
        info = read.consumer_info or {}
        config = info.get("config") or {}
        single = config.get("filter_subject")
        out |= {
            "filterSubjects": [single] if single else list(config.get("filter_subjects") or []),
            "ackPolicy": str(config.get("ack_policy", "")),
            "numPending": int(info.get("num_pending", 0)),
            "numAckPending": int(info.get("num_ack_pending", 0)),
            "numRedelivered": int(info.get("num_redelivered", 0)),
            "numWaiting": int(info.get("num_waiting", 0)),
            "deliveredSeq": int((info.get("delivered") or {}).get("stream_seq", 0)),
            "ackFloorSeq": int((info.get("ack_floor") or {}).get("stream_seq", 0)),
        }
        return out
    if spec.KIND in ("KeyValue", "ObjectStore"):
        out["bucket"] = spec.server_name
    state = (read.stream_info or {}).get("state") or {}
    config = (read.stream_info or {}).get("config") or {}
    out |= {
        "storage": str(config.get("storage", "")),
        "replicas": int(config.get("num_replicas", 0)),
        "messages": int(state.get("messages", 0)),
        "bytes": int(state.get("bytes", 0)),
        "firstSeq": int(state.get("first_seq", 0)),
        "lastSeq": int(state.get("last_seq", 0)),
        "consumerCount": int(state.get("consumer_count", 0)),
    }
    return out
