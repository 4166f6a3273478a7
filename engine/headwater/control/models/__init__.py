"""Specs of every kind the control plane manages, and the table from kind name to model."""

from __future__ import annotations

from headwater.control.models.base import (
    ADOPT_ANNOTATION,
    CONTROL_METADATA_KEYS,
    MANAGED_BY_KEY,
    MANAGED_BY_VALUE,
    PREVENT_DELETE_KEY,
)
from headwater.control.models.buckets import KV_PREFIX, OBJ_PREFIX, KeyValue, ObjectStore
from headwater.control.models.consumer import Consumer
from headwater.control.models.resource import ResourceKey, ResourceSpec
from headwater.control.models.stream import Stream
from headwater.control.models.template import StreamTemplate

KINDS: dict[str, type[ResourceSpec]] = {
    model.KIND: model for model in (Stream, Consumer, KeyValue, ObjectStore, StreamTemplate)
}
"""Document ``kind`` -> spec model, in apply order (streams before what depends on them)."""


def json_schema(kind: str) -> dict[str, object]:
    """The JSON schema of a kind's spec, every accepted spelling a property (for CRDs).

    The server-side name is not required: a document without it uses ``metadata.name``.
    """
    schema = KINDS[kind].json_schema()
    required = [n for n in schema.get("required", []) if n not in ("name", "bucket")]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    return schema


__all__ = [
    "ADOPT_ANNOTATION",
    "CONTROL_METADATA_KEYS",
    "KINDS",
    "KV_PREFIX",
    "MANAGED_BY_KEY",
    "MANAGED_BY_VALUE",
    "OBJ_PREFIX",
    "PREVENT_DELETE_KEY",
    "Consumer",
    "KeyValue",
    "ObjectStore",
    "ResourceKey",
    "ResourceSpec",
    "Stream",
    "StreamTemplate",
    "json_schema",
]
