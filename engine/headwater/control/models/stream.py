"""The Stream spec: nats-server's StreamConfig with its defaults, NACK's names and units."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from headwater.control.models.base import (
    ControlFields,
    Count,
    Duration,
    Size,
    SpecModel,
    register_nested,
    user_metadata,
)
from headwater.control.models.common import (
    ConsumerLimits,
    Placement,
    RePublish,
    StreamSource,
    SubjectTransform,
    check_asset_name,
    check_subject,
)
from headwater.control.models.resource import ResourceSpec

DEFAULT_DUPLICATE_WINDOW = 120_000_000_000
"""2 minutes, nats-server's ``StreamDefaultDuplicatesWindow``."""
ONE_SECOND = 1_000_000_000

# Limits where the server stores 0 as -1 (unlimited).
_UNLIMITED_WHEN_ZERO = (
    "max_consumers",
    "max_msgs",
    "max_bytes",
    "max_msgs_per_subject",
    "max_msg_size",
)
# Fields the server writes only when set (Go ``omitempty``); the rest it always writes.
_OPTIONAL_FALSE = (
    "no_ack",
    "discard_new_per_subject",
    "allow_msg_counter",
    "allow_atomic",
    "allow_msg_schedules",
    "allow_batched",
)


class StreamFields(ControlFields):
    """Every StreamConfig field but ``name``; shared by Stream and StreamTemplate's config
    (which is not a resource of its own, so this is not a ``ResourceSpec``)."""

    EXTRA_ALIASES: ClassVar = {
        "replicas": "num_replicas",
        "allowRollup": "allow_rollup_hdrs",
        "discardPerSubject": "discard_new_per_subject",
        "firstSequence": "first_seq",
        "allowAtomicPublish": "allow_atomic",
    }
    VALUE_ALIASES: ClassVar = {
        "compression": {"": "none"},
        "persist_mode": {"": "default"},
        "retention": {"Limits": "limits", "Interest": "interest", "WorkQueue": "workqueue"},
        "storage": {"File": "file", "Memory": "memory"},
        "discard": {"Old": "old", "New": "new"},
    }
    DURATION_FIELDS: ClassVar = frozenset(
        {"max_age", "duplicate_window", "subject_delete_marker_ttl", "inactive_threshold"}
    )
    SIZE_FIELDS: ClassVar = frozenset({"max_bytes", "max_msg_size"})
    COUNT_FIELDS: ClassVar = frozenset({"max_msgs", "max_msgs_per_subject"})

    description: str = Field("", max_length=4096)
    subjects: list[str] = []
    retention: Literal["limits", "interest", "workqueue"] = "limits"
    max_consumers: int = Field(-1, ge=-1)
    max_msgs: Count = -1
    max_bytes: Size = -1
    max_age: Duration = 0
    max_msgs_per_subject: Count = -1
    max_msg_size: Size = Field(-1, le=2**31 - 1)
    discard: Literal["old", "new"] = "old"
    storage: Literal["file", "memory"] = "file"
    num_replicas: int = Field(1, ge=0, le=5)
    no_ack: bool = False
    duplicate_window: Duration | None = None
    """None: the server's default, 2m or ``max_age`` when shorter."""
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: list[StreamSource] = []
    compression: Literal["none", "s2"] = "none"
    first_seq: int = Field(0, ge=0)
    subject_transform: SubjectTransform | None = None
    republish: RePublish | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: ConsumerLimits = ConsumerLimits()
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: Duration = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    allow_batched: bool = False
    persist_mode: Literal["default", "async"] = "default"
    template_owner: str = ""
    metadata: dict[str, str] = {}

    @field_validator("subjects")
    @classmethod
    def _subjects(cls, value: list[str]) -> list[str]:
        for subject in value:
            check_subject(subject)
        if len(set(value)) != len(value):
            raise ValueError("subjects must not repeat")
        return value

    @model_validator(mode="after")
    def _combinations(self) -> Self:
        if self.mirror is not None and (self.subjects or self.sources):
            raise ValueError("a mirror takes no subjects and no sources")
        if self.discard_new_per_subject and (
            self.discard != "new" or self.max_msgs_per_subject <= 0
        ):
            raise ValueError(
                "discard_new_per_subject needs discard: new and max_msgs_per_subject > 0"
            )
        if (
            self.duplicate_window is not None
            and self.max_age > 0
            and self.duplicate_window > self.max_age
        ):
            raise ValueError("duplicate_window must not be longer than max_age")
        if 0 < self.subject_delete_marker_ttl < ONE_SECOND:
            raise ValueError("subject_delete_marker_ttl must be at least 1s")
        if self.mirror_direct and self.mirror is None:
            raise ValueError("mirror_direct needs a mirror")
        return self

    def _server_body(self, name: str, metadata: dict[str, str]) -> dict[str, Any]:
        """The defaulted config in the server's field order and ``omitempty`` shape."""
        out: dict[str, Any] = {"name": name}
        if self.description:
            out["description"] = self.description
        subjects = list(self.subjects)
        if not subjects and self.mirror is None and not self.sources and name != "_":
            subjects = [name]
        if subjects:
            out["subjects"] = subjects
        out["retention"] = self.retention
        for field in ("max_consumers", "max_msgs", "max_bytes"):
            out[field] = getattr(self, field) or -1
        out["max_age"] = self.max_age
        out["max_msgs_per_subject"] = self.max_msgs_per_subject or -1
        out["max_msg_size"] = self.max_msg_size or -1
        out |= {"discard": self.discard, "storage": self.storage}
        out["num_replicas"] = self.num_replicas or 1
        if self.no_ack:
            out["no_ack"] = True
        if self.template_owner:
            out["template_owner"] = self.template_owner
        window = self._duplicate_window()
        if window:
            out["duplicate_window"] = window
        if self.placement is not None and self.placement.to_server():
            out["placement"] = self.placement.to_server()
        if self.mirror is not None:
            out["mirror"] = self.mirror.to_server()
        if self.sources:
            out["sources"] = [source.to_server() for source in self.sources]
        out["compression"] = self.compression
        if self.first_seq:
            out["first_seq"] = self.first_seq
        if self.subject_transform is not None:
            out["subject_transform"] = self.subject_transform.to_server()
        if self.republish is not None:
            out["republish"] = self.republish.to_server()
        out |= {"allow_direct": self.allow_direct, "mirror_direct": self.mirror_direct}
        if self.discard_new_per_subject:
            out["discard_new_per_subject"] = True
        # Delete markers and schedules need roll-ups (and markers TTLs): the server switches
        # them on, so the desired state says so too and no false diff appears.
        markers = self.subject_delete_marker_ttl > 0
        rollup = self.allow_rollup_hdrs or markers or self.allow_msg_schedules
        out |= {
            "sealed": self.sealed,
            "deny_delete": self.deny_delete,
            "deny_purge": self.deny_purge and not (rollup and not self.allow_rollup_hdrs),
            "allow_rollup_hdrs": rollup,
            "consumer_limits": self.consumer_limits.to_server(),
            "allow_msg_ttl": self.allow_msg_ttl or markers,
        }
        if markers:
            out["subject_delete_marker_ttl"] = self.subject_delete_marker_ttl
        for flag in ("allow_msg_counter", "allow_atomic", "allow_msg_schedules", "allow_batched"):
            if getattr(self, flag):
                out[flag] = True
        if self.persist_mode != "default":
            out["persist_mode"] = self.persist_mode
        if metadata:
            out["metadata"] = dict(sorted(metadata.items()))
        return out

    def _duplicate_window(self) -> int:
        if self.duplicate_window is not None:
            return self.duplicate_window
        if self.mirror is not None or self.sources:
            return 0
        if 0 < self.max_age < DEFAULT_DUPLICATE_WINDOW:
            return self.max_age
        return DEFAULT_DUPLICATE_WINDOW

    @classmethod
    def _fields_from_server(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """A live config as spec fields: unknown (newer) keys dropped, ``_nats.*`` removed."""
        known = set(cls.model_fields) - set(cls.CONTROL_FIELDS)
        data = {key: value for key, value in config.items() if key in known}
        data["metadata"] = user_metadata(config.get("metadata"))
        for field in _UNLIMITED_WHEN_ZERO:
            if data.get(field) == 0:
                data[field] = -1
        if data.get("placement") == {}:
            data.pop("placement")
        return data


def replace_reasons(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Stream changes nats-server refuses as an update (its ``configUpdateCheck``)."""
    reasons: list[str] = []

    def changed(field: str) -> bool:
        return before.get(field) != after.get(field)

    if changed("storage"):
        reasons.append("storage type can not change in place")
    retention = (before.get("retention"), after.get("retention"))
    if retention[0] != retention[1] and "workqueue" in retention:
        reasons.append("retention can not change to or from workqueue")
    if changed("template_owner"):
        reasons.append("template ownership can not change")
    if before.get("mirror") is not None and after.get("mirror") is not None and changed("mirror"):
        reasons.append("a mirror can not be changed (only removed)")
    if before.get("mirror") is None and after.get("mirror") is not None:
        reasons.append("a stream can not become a mirror")
    for flag, text in (
        ("sealed", "a sealed stream can not be unsealed"),
        ("deny_delete", "deny_delete can not be switched off"),
        ("deny_purge", "deny_purge can not be switched off"),
        ("allow_msg_ttl", "allow_msg_ttl can not be switched off"),
        ("allow_msg_schedules", "allow_msg_schedules can not be switched off"),
    ):
        if before.get(flag) and not after.get(flag):
            reasons.append(text)
    if bool(before.get("allow_msg_counter")) != bool(after.get("allow_msg_counter")):
        reasons.append("allow_msg_counter can not change in place")
    if before.get("persist_mode", "default") != after.get("persist_mode", "default"):
        reasons.append("persist_mode can not change in place")
    return reasons


@register_nested
class StreamRestore(SpecModel):
    """Where the operator restores the stream from when it is missing on the server."""

    from_: str = Field(
        alias="from",
        min_length=1,
        description="A backup directory (headwater stream backup) the operator can read.",
    )


class Stream(StreamFields, ResourceSpec):
    """A JetStream stream."""

    KIND: ClassVar[str] = "Stream"
    CONTROL_FIELDS: ClassVar[tuple[str, ...]] = (*ControlFields.CONTROL_FIELDS, "restore")

    name: str
    restore: StreamRestore | None = None
    """Operator only (a control field, never server config): restore a missing stream from a
    backup instead of creating it empty."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_asset_name(value, "stream name")

    @property
    def server_name(self) -> str:
        return self.name

    def to_server_config(self, *, control: bool = True, **context: Any) -> dict[str, Any]:
        metadata = dict(self.metadata)
        if control:
            metadata |= self.control_metadata()
        return self._server_body(self.name, metadata)

    @classmethod
    def from_server_config(cls, config: Mapping[str, Any], **context: Any) -> Self:
        return cls.model_validate(cls._fields_from_server(config))

    def request_config(self) -> dict[str, Any]:
        config = self.to_server_config()
        if self.duplicate_window is None:
            # The server derives it (2m, or max_age when shorter, or an account limit).
            config.pop("duplicate_window", None)
        return config

    def replace_reasons(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
        return replace_reasons(before, after)
