"""Parts shared by several kinds: placement, sources, transforms, republish, names."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic import model_validator

from headwater.control.models.base import Duration, SpecModel, Timestamp, register_nested

_BAD_NAME = re.compile(r"[.*>\\/\s]")


def check_asset_name(value: str, what: str = "name") -> str:
    """Stream, consumer and bucket names: not empty, no ``. * > \\ /`` or whitespace, ≤255."""
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > 255:
        raise ValueError(f"{what} is longer than 255 characters")
    bad = _BAD_NAME.search(value)
    if bad is not None:
        raise ValueError(f"{what} {value!r} must not contain {bad.group()!r}")
    return value


def check_subject(value: str, *, wildcards: bool = True) -> str:
    """A NATS subject: dot-separated non-empty tokens, no whitespace, ``>`` only last."""
    if not value or any(ch.isspace() for ch in value):
        raise ValueError(f"invalid subject {value!r}")
    tokens = value.split(".")
    for index, token in enumerate(tokens):
        if not token:
            raise ValueError(f"invalid subject {value!r}: empty token")
        if not wildcards and token in ("*", ">"):
            raise ValueError(f"subject {value!r} must not contain wildcards")
        if token == ">" and index != len(tokens) - 1:
            raise ValueError(f"invalid subject {value!r}: '>' must be the last token")
    return value


@register_nested
class SubjectTransform(SpecModel):
    """``{src, dest}`` (NACK: ``{source, dest}``)."""

    EXTRA_ALIASES: ClassVar = {"source": "src", "destination": "dest"}

    src: str = ""
    dest: str

    def to_server(self) -> dict[str, Any]:
        return {"src": self.src, "dest": self.dest}


@register_nested
class Placement(SpecModel):
    cluster: str = ""
    tags: list[str] = []
    preferred: str = ""

    def to_server(self) -> dict[str, Any] | None:
        out: dict[str, Any] = {}
        if self.cluster:
            out["cluster"] = self.cluster
        if self.tags:
            out["tags"] = list(self.tags)
        if self.preferred:
            out["preferred"] = self.preferred
        return out or None


@register_nested
class External(SpecModel):
    api: str = ""
    deliver: str = ""


@register_nested
class SourceConsumer(SpecModel):
    name: str = ""
    deliver_subject: str = ""


@register_nested
class StreamSource(SpecModel):
    """A mirror or a source. NACK spells ``external`` as two flat prefix fields."""

    EXTRA_ALIASES: ClassVar = {
        "externalApiPrefix": "external_api_prefix",
        "externalDeliverPrefix": "external_deliver_prefix",
    }

    name: str
    opt_start_seq: int = 0
    opt_start_time: Timestamp = None
    filter_subject: str = ""
    subject_transforms: list[SubjectTransform] = []
    external: External | None = None
    external_api_prefix: str = ""
    external_deliver_prefix: str = ""
    consumer: SourceConsumer | None = None

    @model_validator(mode="after")
    def _one_external(self) -> StreamSource:
        if self.external is not None and (self.external_api_prefix or self.external_deliver_prefix):
            raise ValueError("give either external or externalApiPrefix/externalDeliverPrefix")
        return self

    def to_server(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.opt_start_seq:
            out["opt_start_seq"] = self.opt_start_seq
        if self.opt_start_time:
            out["opt_start_time"] = self.opt_start_time
        if self.filter_subject:
            out["filter_subject"] = self.filter_subject
        if self.subject_transforms:
            out["subject_transforms"] = [t.to_server() for t in self.subject_transforms]
        external = self.external or External(
            api=self.external_api_prefix, deliver=self.external_deliver_prefix
        )
        if external.api or external.deliver:
            out["external"] = {"api": external.api, "deliver": external.deliver}
        if self.consumer is not None:
            consumer: dict[str, Any] = {"name": self.consumer.name}
            if self.consumer.deliver_subject:
                consumer["deliver_subject"] = self.consumer.deliver_subject
            out["consumer"] = consumer
        return out


@register_nested
class RePublish(SpecModel):
    """``{src, dest, headers_only}`` (NACK: ``{source, destination, headers_only}``)."""

    EXTRA_ALIASES: ClassVar = {"source": "src", "destination": "dest"}

    src: str = ""
    dest: str
    headers_only: bool = False

    def to_server(self) -> dict[str, Any]:
        # The server stores an empty source as ">" (everything the stream takes).
        out: dict[str, Any] = {"src": self.src or ">", "dest": self.dest}
        if self.headers_only:
            out["headers_only"] = True
        return out


@register_nested
class ConsumerLimits(SpecModel):
    inactive_threshold: Duration = 0
    max_ack_pending: int = 0

    def to_server(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.inactive_threshold:
            out["inactive_threshold"] = self.inactive_threshold
        if self.max_ack_pending:
            out["max_ack_pending"] = self.max_ack_pending
        return out
