"""The contract every kind (Stream, Consumer, KeyValue, ObjectStore, StreamTemplate) keeps.

A spec turns into the server's JSON config (``to_server_config``) and back
(``from_server_config``); ``comparable`` is what a plan compares, with every default the
server would fill already filled, so a live config and a desired one compare field by field.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from headwater.control import units
from headwater.control.models.base import ControlFields


@dataclass(frozen=True, order=True)
class ResourceKey:
    """A resource's identity on the server: kind plus server-side name (and stream)."""

    kind: str
    name: str
    stream: str = ""

    def __str__(self) -> str:
        if self.stream:
            return f"{self.kind}/{self.stream}/{self.name}"
        return f"{self.kind}/{self.name}"


class ResourceSpec(ControlFields):
    """The base of every kind. Abstract: pydantic's model metaclass is an ``ABCMeta``, so a
    kind that leaves one of the abstract methods out cannot be instantiated."""

    KIND: ClassVar[str]
    DURATION_FIELDS: ClassVar[frozenset[str]] = frozenset()
    SIZE_FIELDS: ClassVar[frozenset[str]] = frozenset()
    COUNT_FIELDS: ClassVar[frozenset[str]] = frozenset()

    @property
    @abstractmethod
    def server_name(self) -> str:
        """The resource's name on the server."""

    @property
    def key(self) -> ResourceKey:
        return ResourceKey(self.KIND, self.server_name)

    @abstractmethod
    def to_server_config(self, *, control: bool = True, **context: Any) -> dict[str, Any]:
        """The server's JSON config; ``control`` adds the ownership metadata apply writes."""

    @classmethod
    @abstractmethod
    def from_server_config(cls, config: Mapping[str, Any], **context: Any) -> Self:
        """The spec a server config describes (what export and drift read back)."""

    def request_config(self) -> dict[str, Any]:
        """The config a create or update request sends (with the ownership metadata)."""
        return self.to_server_config()

    def keeping(self, live: Mapping[str, Any]) -> Self:
        """This spec as an update of the ``live`` config: server flags this kind does not
        model and that can only be switched on stay as they are (the default keeps none)."""
        return self

    def comparable(self, *, control: bool = True, **context: Any) -> dict[str, Any]:
        """What a plan compares; by default the full server config."""
        return self.to_server_config(control=control, **context)

    def replace_reasons(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
        """Why the server can't move ``before`` to ``after`` in place (comparable dicts)."""
        return []

    def display(self, field: str, value: Any) -> Any:
        """A value as a person reads it in a plan: ``1y`` rather than 31536000000000000."""
        leaf = field.rsplit(".", 1)[-1]
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, list) and leaf in self.DURATION_FIELDS:
                return [self.display(field, item) for item in value]
            return value
        if leaf in self.DURATION_FIELDS and value > 0:
            return units.format_duration(value)
        if leaf in self.SIZE_FIELDS and value > 0:
            return units.format_size(value)
        if leaf in self.COUNT_FIELDS and value > 0:
            return units.format_count(value)
        return value
