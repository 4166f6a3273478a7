"""The StreamTemplate spec: a stream config that Headwater instantiates per subject.

nats-server removed templates in 2.14; Headwater keeps them (docs/DIFFERENCES.md). A template
can not be updated on any server (there is no TEMPLATE.UPDATE), so every change is a replace,
and deleting a template deletes the streams it created: replace is destructive.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import Field, field_validator, model_validator

from headwater.control.models.base import register_nested
from headwater.control.models.common import check_asset_name
from headwater.control.models.resource import ResourceSpec
from headwater.control.models.stream import StreamFields

TEMPLATE_STREAM_PLACEHOLDER = "_"
"""The name the server gives a template's stream config (each stream gets its own)."""


@register_nested
class TemplateStreamConfig(StreamFields):
    """A stream config without a name (the template names each stream it creates)."""

    name: str = ""

    @field_validator("name")
    @classmethod
    def _no_name(cls, value: str) -> str:
        if value not in ("", TEMPLATE_STREAM_PLACEHOLDER):
            raise ValueError("a template's stream config must not name a stream")
        return value

    @model_validator(mode="after")
    def _needs_subjects(self) -> Self:
        if not self.subjects:
            raise ValueError("a template's stream config needs subjects")
        return self


class StreamTemplate(ResourceSpec):
    """A stream template (``$JS.API.STREAM.TEMPLATE.*``)."""

    KIND: ClassVar[str] = "StreamTemplate"
    EXTRA_ALIASES: ClassVar = {}
    DURATION_FIELDS: ClassVar = StreamFields.DURATION_FIELDS
    SIZE_FIELDS: ClassVar = StreamFields.SIZE_FIELDS
    COUNT_FIELDS: ClassVar = StreamFields.COUNT_FIELDS

    name: str
    max_streams: int = Field(ge=0, le=2**32 - 1)
    config: TemplateStreamConfig

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_asset_name(value, "template name")

    @property
    def server_name(self) -> str:
        return self.name

    def to_server_config(self, *, control: bool = True, **context: Any) -> dict[str, Any]:
        metadata = dict(self.config.metadata)
        if control:
            metadata |= self.control_metadata()
        config = self.config._server_body(TEMPLATE_STREAM_PLACEHOLDER, metadata)
        return {"name": self.name, "config": config, "max_streams": self.max_streams}

    def create_request(self) -> dict[str, Any]:
        """The TEMPLATE.CREATE body: the stream config must not carry a name."""
        body = self.to_server_config()
        body["config"] = {k: v for k, v in body["config"].items() if k != "name"}
        return body

    @classmethod
    def from_server_config(cls, config: Mapping[str, Any], **context: Any) -> Self:
        stream = TemplateStreamConfig._fields_from_server(config.get("config") or {})
        stream["name"] = TEMPLATE_STREAM_PLACEHOLDER
        return cls.model_validate(
            {
                "name": config.get("name", ""),
                "max_streams": config.get("max_streams", 0),
                "config": stream,
            }
        )

    def replace_reasons(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
        return ["a stream template can not be updated"] if before != after else []
