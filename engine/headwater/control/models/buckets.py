"""KeyValue and ObjectStore specs: buckets that live in streams ``KV_<b>`` and ``OBJ_<b>``.

The stream configs follow the layout of ADR-8 (KV) and ADR-20 (object store) as the Go client
creates them, so a bucket made here is usable by every client and one made by a client plans
clean here. Plans compare buckets by their bucket-level fields, not the whole stream config,
so a client that set an extra stream flag does not show as drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import Field, PrivateAttr, field_validator, model_validator

from headwater.control.models.base import Duration, Size, user_metadata
from headwater.control.models.common import (
    Placement,
    RePublish,
    StreamSource,
    SubjectTransform,
)
from headwater.control.models.resource import ResourceKey, ResourceSpec
from headwater.control.models.stream import Stream, replace_reasons

KV_PREFIX = "KV_"
OBJ_PREFIX = "OBJ_"
_BUCKET = r"^[a-zA-Z0-9_-]+$"


class _Bucket(ResourceSpec):
    EXTRA_ALIASES: ClassVar = {"name": "bucket", "num_replicas": "replicas"}
    VALUE_ALIASES: ClassVar = {"storage": {"": "file"}}
    DURATION_FIELDS: ClassVar = frozenset({"ttl", "limit_marker_ttl", "duplicate_window"})
    SIZE_FIELDS: ClassVar = frozenset({"max_bytes", "max_value_size", "max_msg_size"})
    PREFIX: ClassVar[str]

    bucket: str = Field(pattern=_BUCKET, max_length=255)
    description: str = Field("", max_length=4096)
    ttl: Duration = 0
    max_bytes: Size = -1
    storage: str = "file"
    replicas: int = Field(1, ge=0, le=5)
    placement: Placement | None = None
    compression: bool = False
    metadata: dict[str, str] = {}

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        if value not in ("file", "memory"):
            raise ValueError("storage must be file or memory")
        return value

    @property
    def server_name(self) -> str:
        return self.bucket

    @property
    def stream_name(self) -> str:
        return self.PREFIX + self.bucket

    @property
    def key(self) -> ResourceKey:
        return ResourceKey(self.KIND, self.bucket)

    def _metadata(self, control: bool) -> dict[str, str]:
        metadata = dict(self.metadata)
        if control:
            metadata |= self.control_metadata()
        return metadata

    def comparable(self, *, control: bool = True, **context: Any) -> dict[str, Any]:
        """The bucket-level fields, defaults filled, in server spelling."""
        data = self.model_dump(exclude=set(self.CONTROL_FIELDS) | {"metadata"})
        data["replicas"] = data["replicas"] or 1
        if data["max_bytes"] == 0:
            data["max_bytes"] = -1
        # Nested parts compare as the server stores them (an empty placement is none, an
        # empty republish source is ">").
        data["placement"] = self.placement.to_server() if self.placement else None
        republish = getattr(self, "republish", None)
        if republish is not None:
            data["republish"] = republish.to_server()
        data = {key: value for key, value in data.items() if value not in (None, [], "")}
        data["metadata"] = dict(sorted(self._metadata(control).items()))
        return data

    def replace_reasons(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
        return replace_reasons(before, after)


class KeyValue(_Bucket):
    """A KV bucket (stream ``KV_<bucket>``)."""

    KIND: ClassVar[str] = "KeyValue"
    PREFIX: ClassVar[str] = KV_PREFIX

    history: int = Field(1, ge=1, le=64)
    max_value_size: Size = -1
    republish: RePublish | None = None
    mirror: StreamSource | None = None
    sources: list[StreamSource] = []
    limit_marker_ttl: Duration = 0

    @model_validator(mode="after")
    def _combinations(self) -> Self:
        if self.mirror is not None and self.sources:
            raise ValueError("a bucket mirror takes no sources")
        return self

    _keep_msg_ttl: bool = PrivateAttr(default=False)

    def keeping(self, live: Mapping[str, Any]) -> Self:
        """nats-py 2.16 makes every bucket with ``allow_msg_ttl`` on (per-key TTLs), and no
        server lets an update switch it off: an update keeps it on, whatever the spec says
        of limit markers (it is not part of the comparison, so it never shows as drift)."""
        if not live.get("allow_msg_ttl"):
            return self
        copy = self.model_copy()
        copy._keep_msg_ttl = True
        return copy

    def to_server_config(self, *, control: bool = True, **context: Any) -> dict[str, Any]:
        mirror = self.mirror
        sources: list[StreamSource] = []
        subjects: list[str] = [f"$KV.{self.bucket}.>"]
        if mirror is not None:
            # A mirrored bucket reads the origin's stream; it takes no subjects itself.
            subjects = []
            if not mirror.name.startswith(KV_PREFIX):
                mirror = mirror.model_copy(update={"name": KV_PREFIX + mirror.name})
        for source in self.sources:
            origin = source.name.removeprefix(KV_PREFIX)
            update: dict[str, Any] = {"name": KV_PREFIX + origin}
            if not source.subject_transforms and origin != self.bucket:
                update["subject_transforms"] = [
                    SubjectTransform(src=f"$KV.{origin}.>", dest=f"$KV.{self.bucket}.>")
                ]
            sources.append(source.model_copy(update=update))
        stream = Stream(
            name=self.stream_name,
            description=self.description,
            subjects=subjects,
            max_msgs_per_subject=self.history,
            max_bytes=self.max_bytes,
            max_age=self.ttl,
            max_msg_size=self.max_value_size,
            storage=self.storage,  # type: ignore[arg-type]
            num_replicas=self.replicas or 1,
            placement=self.placement,
            republish=self.republish,
            mirror=mirror,
            mirror_direct=mirror is not None,
            sources=sources,
            compression="s2" if self.compression else "none",
            allow_rollup_hdrs=True,
            deny_delete=True,
            discard="new",
            allow_direct=True,
            allow_msg_ttl=self.limit_marker_ttl > 0 or self._keep_msg_ttl,
            subject_delete_marker_ttl=self.limit_marker_ttl,
            metadata=self._metadata(control),
        )
        return stream.to_server_config(control=False)

    def comparable(self, *, control: bool = True, **context: Any) -> dict[str, Any]:
        data = super().comparable(control=control)
        # Compare origins as the stream sees them (KV_ names, implied subject transforms).
        config = self.to_server_config(control=False)
        for key in ("mirror", "sources"):
            data.pop(key, None)
            if key in config:
                data[key] = config[key]
        return data

    @classmethod
    def from_server_config(cls, config: Mapping[str, Any], **context: Any) -> Self:
        name = str(config.get("name", ""))
        data: dict[str, Any] = {
            "bucket": name.removeprefix(KV_PREFIX),
            "description": config.get("description", ""),
            "history": config.get("max_msgs_per_subject") or 1,
            "max_bytes": config.get("max_bytes", -1),
            "ttl": config.get("max_age", 0),
            "max_value_size": config.get("max_msg_size", -1),
            "storage": config.get("storage", "file"),
            "replicas": config.get("num_replicas", 1),
            "compression": config.get("compression") == "s2",
            "limit_marker_ttl": config.get("subject_delete_marker_ttl", 0),
            "metadata": user_metadata(config.get("metadata")),
        }
        for key in ("placement", "republish", "mirror"):
            if config.get(key):
                data[key] = config[key]
        if config.get("sources"):
            data["sources"] = config["sources"]
        return cls.model_validate(data)


class ObjectStore(_Bucket):
    """An object store bucket (stream ``OBJ_<bucket>``)."""

    KIND: ClassVar[str] = "ObjectStore"
    PREFIX: ClassVar[str] = OBJ_PREFIX

    def to_server_config(self, *, control: bool = True, **context: Any) -> dict[str, Any]:
        stream = Stream(
            name=self.stream_name,
            description=self.description,
            subjects=[f"$O.{self.bucket}.C.>", f"$O.{self.bucket}.M.>"],
            max_bytes=self.max_bytes,
            max_age=self.ttl,
            storage=self.storage,  # type: ignore[arg-type]
            num_replicas=self.replicas or 1,
            placement=self.placement,
            compression="s2" if self.compression else "none",
            allow_rollup_hdrs=True,
            discard="new",
            allow_direct=True,
            metadata=self._metadata(control),
        )
        return stream.to_server_config(control=False)

    @classmethod
    def from_server_config(cls, config: Mapping[str, Any], **context: Any) -> Self:
        name = str(config.get("name", ""))
        data: dict[str, Any] = {
            "bucket": name.removeprefix(OBJ_PREFIX),
            "description": config.get("description", ""),
            "max_bytes": config.get("max_bytes", -1),
            "ttl": config.get("max_age", 0),
            "storage": config.get("storage", "file"),
            "replicas": config.get("num_replicas", 1),
            "compression": config.get("compression") == "s2",
            "metadata": user_metadata(config.get("metadata")),
        }
        if config.get("placement"):
            data["placement"] = config["placement"]
        return cls.model_validate(data)
