"""The Consumer spec: a durable consumer of one stream (``stream_name``/``streamName``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from headwater.control.models.base import Duration, Size, Timestamp, user_metadata
from headwater.control.models.common import ConsumerLimits, check_asset_name, check_subject
from headwater.control.models.resource import ResourceKey, ResourceSpec

DEFAULT_ACK_WAIT = 30_000_000_000
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
DEFAULT_PINNED_TTL = 120_000_000_000

# What nats-server refuses to change on an existing consumer (``checkNewConsumerConfig``):
# field -> why, in the words a plan shows.
IMMUTABLE_FIELDS: Mapping[str, str] = {
    "deliver_policy": "deliver policy can not be updated",
    "opt_start_seq": "start sequence can not be updated",
    "opt_start_time": "start time can not be updated",
    "ack_policy": "ack policy can not be updated",
    "replay_policy": "replay policy can not be updated",
    "idle_heartbeat": "heartbeats can not be updated",
    "flow_control": "flow control can not be updated",
    "max_waiting": "max waiting can not be updated",
    "mem_storage": "storage type can not be updated",
}


class Consumer(ResourceSpec):
    """A durable JetStream consumer."""

    KIND: ClassVar[str] = "Consumer"
    EXTRA_ALIASES: ClassVar = {
        "heartbeatInterval": "idle_heartbeat",
        "maxRequestBatch": "max_batch",
        "maxRequestExpires": "max_expires",
        "maxRequestMaxBytes": "max_bytes",
        "replicas": "num_replicas",
        "pinnedTtl": "priority_timeout",
        "rateLimit": "rate_limit_bps",
    }
    VALUE_ALIASES: ClassVar = {
        "deliver_policy": {
            "byStartSequence": "by_start_sequence",
            "byStartTime": "by_start_time",
            "lastPerSubject": "last_per_subject",
        },
        "ack_policy": {"flowControl": "flow_control"},
        "priority_policy": {"pinnedClient": "pinned_client", "": "none"},
        "replay_policy": {"": "instant"},
    }
    DURATION_FIELDS: ClassVar = frozenset(
        {
            "ack_wait",
            "backoff",
            "max_expires",
            "idle_heartbeat",
            "inactive_threshold",
            "priority_timeout",
        }
    )
    SIZE_FIELDS: ClassVar = frozenset({"max_bytes"})

    stream_name: str
    durable_name: str | None = None
    name: str | None = None
    description: str = Field("", max_length=4096)
    deliver_policy: Literal[
        "all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"
    ] = "all"
    opt_start_seq: int = Field(0, ge=0)
    opt_start_time: Timestamp = None
    ack_policy: Literal["none", "all", "explicit", "flow_control"] = "explicit"
    ack_wait: Duration | None = None
    """None: 30s when messages are acknowledged, ``backoff[0]`` when a backoff is set."""
    max_deliver: int = Field(-1, ge=-1)
    backoff: list[Duration] = []
    filter_subject: str = ""
    filter_subjects: list[str] = []
    replay_policy: Literal["instant", "original"] = "instant"
    rate_limit_bps: int = Field(0, ge=0)
    sample_freq: str = ""
    max_waiting: int | None = Field(None, ge=0)
    """None: 512 for a pull consumer, none for push."""
    max_ack_pending: int | None = Field(None, ge=-1)
    """None: the stream's consumer_limits, else 1000 unless acks are off."""
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = Field(0, ge=0)
    max_expires: Duration = 0
    max_bytes: Size = Field(0, ge=0)
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: Duration = 0
    inactive_threshold: Duration | None = None
    """None: the stream's consumer_limits.inactive_threshold, else never."""
    num_replicas: int = Field(0, ge=0, le=5)
    mem_storage: bool = False
    metadata: dict[str, str] = {}
    pause_until: Timestamp = None
    priority_groups: list[str] = []
    priority_policy: Literal["none", "overflow", "pinned_client", "prioritized"] = "none"
    priority_timeout: Duration | None = None

    @field_validator("sample_freq", mode="before")
    @classmethod
    def _sample(cls, value: object) -> object:
        # natscli writes --sample 100; YAML makes that an int.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("stream_name")
    @classmethod
    def _stream(cls, value: str) -> str:
        return check_asset_name(value, "stream name")

    @field_validator("filter_subjects")
    @classmethod
    def _filters(cls, value: list[str]) -> list[str]:
        for subject in value:
            check_subject(subject)
        if len(set(value)) != len(value):
            raise ValueError("filter_subjects must not repeat")
        return value

    @model_validator(mode="after")
    def _combinations(self) -> Self:
        names = {n for n in (self.durable_name, self.name) if n}
        if not names:
            raise ValueError("durable_name is required (or name, or metadata.name)")
        if len(names) > 1:
            raise ValueError("durable_name and name must be equal when both are given")
        check_asset_name(next(iter(names)), "consumer name")
        if self.filter_subject and self.filter_subjects:
            raise ValueError("filter_subject and filter_subjects are mutually exclusive")
        if self.filter_subject:
            check_subject(self.filter_subject)
        self._check_start()
        self._check_mode()
        if self.backoff and self.max_deliver != -1 and len(self.backoff) > self.max_deliver:
            raise ValueError("backoff has more entries than max_deliver allows")
        if self.backoff and self.ack_wait is not None and self.ack_wait != self.backoff[0]:
            raise ValueError("with a backoff, ack_wait is backoff[0]; leave ack_wait out")
        return self

    def _check_start(self) -> None:
        policy = self.deliver_policy
        if policy == "by_start_sequence" and not self.opt_start_seq:
            raise ValueError("deliver_policy by_start_sequence needs opt_start_seq")
        if policy != "by_start_sequence" and self.opt_start_seq:
            raise ValueError("opt_start_seq needs deliver_policy by_start_sequence")
        if policy == "by_start_time" and not self.opt_start_time:
            raise ValueError("deliver_policy by_start_time needs opt_start_time")
        if policy != "by_start_time" and self.opt_start_time:
            raise ValueError("opt_start_time needs deliver_policy by_start_time")

    def _check_mode(self) -> None:
        if self.deliver_subject:
            check_subject(self.deliver_subject, wildcards=False)
            pull_only = ("max_waiting", "max_batch", "max_expires", "max_bytes")
            for field in pull_only:
                if getattr(self, field):
                    raise ValueError(f"{field} is for pull consumers; remove deliver_subject")
            if self.priority_groups or self.priority_policy != "none":
                raise ValueError("priority groups are for pull consumers")
        else:
            for field in ("deliver_group", "idle_heartbeat", "flow_control"):
                if getattr(self, field):
                    raise ValueError(f"{field} is for push consumers; set deliver_subject")
        if self.flow_control and not self.idle_heartbeat:
            raise ValueError("flow_control needs idle_heartbeat")
        if self.priority_policy != "none" and len(self.priority_groups) != 1:
            raise ValueError("a priority_policy needs exactly one entry in priority_groups")
        if self.priority_groups and self.priority_policy == "none":
            raise ValueError("priority_groups need a priority_policy")

    @property
    def server_name(self) -> str:
        return self.durable_name or self.name or ""

    @property
    def key(self) -> ResourceKey:
        return ResourceKey(self.KIND, self.server_name, self.stream_name)

    def to_server_config(
        self,
        *,
        control: bool = True,
        limits: ConsumerLimits | None = None,
        **context: Any,
    ) -> dict[str, Any]:
        """The defaulted ConsumerConfig. ``limits`` are the stream's consumer_limits, which
        give ``max_ack_pending`` and ``inactive_threshold`` their defaults."""
        limits = limits or ConsumerLimits()
        acked = self.ack_policy != "none"
        ack_wait = self.ack_wait
        if self.backoff:
            ack_wait = self.backoff[0]
        elif ack_wait is None:
            ack_wait = DEFAULT_ACK_WAIT if self.ack_policy in ("explicit", "all") else 0
        max_ack_pending = self.max_ack_pending
        if not max_ack_pending:
            max_ack_pending = limits.max_ack_pending or (DEFAULT_MAX_ACK_PENDING if acked else 0)
        max_waiting = self.max_waiting
        if max_waiting is None or (max_waiting == 0 and not self.deliver_subject):
            max_waiting = 0 if self.deliver_subject else DEFAULT_MAX_WAITING
        inactive = self.inactive_threshold or limits.inactive_threshold
        timeout = self.priority_timeout
        if not timeout:
            timeout = DEFAULT_PINNED_TTL if self.priority_policy == "pinned_client" else 0
        metadata = dict(self.metadata)
        if control:
            metadata |= self.control_metadata()
        name = self.server_name
        out: dict[str, Any] = {"durable_name": name, "name": name}
        optional: dict[str, Any] = {
            "description": self.description,
            "opt_start_seq": self.opt_start_seq,
            "opt_start_time": self.opt_start_time,
            "ack_wait": ack_wait,
            "backoff": list(self.backoff),
            "filter_subject": self.filter_subject,
            "filter_subjects": list(self.filter_subjects),
            "rate_limit_bps": self.rate_limit_bps,
            "sample_freq": self.sample_freq,
            "max_waiting": max_waiting,
            "max_ack_pending": max_ack_pending,
            "flow_control": self.flow_control,
            "headers_only": self.headers_only,
            "max_batch": self.max_batch,
            "max_expires": self.max_expires,
            "max_bytes": self.max_bytes,
            "deliver_subject": self.deliver_subject,
            "deliver_group": self.deliver_group,
            "idle_heartbeat": self.idle_heartbeat,
            "inactive_threshold": inactive,
            "mem_storage": self.mem_storage,
            "pause_until": self.pause_until,
            "priority_groups": list(self.priority_groups),
            "priority_timeout": timeout,
            "metadata": dict(sorted(metadata.items())),
        }
        out |= {
            "deliver_policy": self.deliver_policy,
            "ack_policy": self.ack_policy,
            "max_deliver": self.max_deliver or -1,
            "replay_policy": self.replay_policy,
            "num_replicas": self.num_replicas,
        }
        if self.priority_policy != "none":
            out["priority_policy"] = self.priority_policy
        out |= {key: value for key, value in optional.items() if value}
        return out

    def request_config(self) -> dict[str, Any]:
        """The config to send: what the spec sets, leaving derived defaults to the server
        (it knows the stream's consumer_limits, and may refuse a default we would guess)."""
        config = self.to_server_config()
        for field in (
            "ack_wait",
            "max_ack_pending",
            "max_waiting",
            "inactive_threshold",
            "priority_timeout",
        ):
            if getattr(self, field) is None:
                config.pop(field, None)
        return config

    @classmethod
    def from_server_config(
        cls, config: Mapping[str, Any], *, stream: str = "", **context: Any
    ) -> Self:
        known = set(cls.model_fields) - set(cls.CONTROL_FIELDS)
        data = {key: value for key, value in config.items() if key in known}
        data["metadata"] = user_metadata(config.get("metadata"))
        data["stream_name"] = stream or config.get("stream_name", "")
        if data.get("max_deliver") == 0:
            data["max_deliver"] = -1
        # A live config always carries ack_wait (30s) next to a backoff; our spec derives it.
        if data.get("backoff"):
            data.pop("ack_wait", None)
        return cls.model_validate(data)

    def replace_reasons(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
        reasons = [
            text
            for field, text in IMMUTABLE_FIELDS.items()
            if before.get(field) != after.get(field)
        ]
        was_push, is_push = bool(before.get("deliver_subject")), bool(after.get("deliver_subject"))
        if was_push != is_push:
            reasons.append(
                "a pull consumer can not become push based"
                if is_push
                else "a push consumer can not become pull based"
            )
        return reasons
