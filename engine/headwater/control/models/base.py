"""What every spec shares: both spellings of a field, human units, control fields.

A spec accepts the server's JSON names (``max_age``) and NACK's CRD names (``maxAge``, and the
few NACK names that are not plain camelCase, such as ``replicas`` for ``num_replicas``). Both
spellings of one field in one spec is an error, as is any name neither spelling knows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PrivateAttr,
    WithJsonSchema,
    model_validator,
)

from headwater.control import units

MANAGED_BY_KEY = "headwater.io/managed-by"
"""Metadata key naming the owner of an asset: the way in and instance that manages it
(``cli``, ``github:org/repo``, ``terraform:prod``, ``kubernetes:ns/stream/name``). Every way in
writes its own identity here; prune and delete touch only assets whose value is their own."""
MANAGED_BY_VALUE = "headwater"
"""The one value every way in wrote before owners had names. Whose such an asset is cannot be
told (Terraform's, the operator's, a repository's), so no owner takes it without adopting."""
ADOPT_ANNOTATION = "headwater.io/adopt"
"""Document annotation: take this asset over from its current owner (shown in the plan)."""
PREVENT_DELETE_KEY = "headwater.io/prevent-delete"
"""Metadata key recording ``preventDelete`` on the server, so a later prune (whose documents no
longer name the resource) still knows not to delete it."""
CONTROL_METADATA_KEYS = (MANAGED_BY_KEY, PREVENT_DELETE_KEY)
SERVER_METADATA_PREFIX = "_nats."
"""Keys the server owns (version, API level, ADR-44); never part of a desired state."""


def _unit(parse: Any) -> Any:
    def convert(value: object) -> object:
        # NACK writes "" for an unset duration; it means the server default (zero).
        if value == "" or value is None:
            return 0
        return parse(value)

    return convert


_INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}]}

Duration = Annotated[
    int,
    BeforeValidator(_unit(units.parse_duration)),
    WithJsonSchema({**_INT_OR_STRING, "description": "duration: ns, or '30s', '72h', '1y'"}),
]
"""Nanoseconds; accepts Go duration strings extended with d/w/y."""
Size = Annotated[
    int,
    BeforeValidator(_unit(units.parse_size)),
    WithJsonSchema({**_INT_OR_STRING, "description": "bytes, or '10GiB', '1GB'; -1 unlimited"}),
]
Count = Annotated[
    int,
    BeforeValidator(_unit(units.parse_count)),
    WithJsonSchema({**_INT_OR_STRING, "description": "a count, or '1M', '10K'; -1 unlimited"}),
]

_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$"
)


def _timestamp(value: object) -> object:
    """RFC 3339 text in UTC with up to nanoseconds, so equal instants compare equal as text."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a timestamp needs a time zone, e.g. 2026-01-02T03:04:05Z")
        value = value.isoformat()
    if not isinstance(value, str):
        raise ValueError(f"expected an RFC 3339 timestamp, got {type(value).__name__}")
    match = _RFC3339.match(value.strip())
    if match is None:
        raise ValueError(f"invalid RFC 3339 timestamp {value!r}; e.g. 2026-01-02T03:04:05Z")
    date, clock, fraction, zone = match.groups()
    zone = "+00:00" if zone in ("Z", "z") else zone
    moment = datetime.fromisoformat(f"{date}T{clock}{zone}").astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    digits = (fraction or "").rstrip("0")
    return f"{text}.{digits}Z" if digits else f"{text}Z"


Timestamp = Annotated[str | None, BeforeValidator(_timestamp)]
"""An RFC 3339 time, normalized to UTC (``...Z``)."""

DriftPolicy = Literal["correct", "report"]


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class SpecModel(BaseModel):
    """Strict base: unknown fields are errors; snake_case and camelCase both accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    EXTRA_ALIASES: ClassVar[Mapping[str, str]] = {}
    """Spellings other than the automatic camelCase one, e.g. NACK's ``replicas``."""
    VALUE_ALIASES: ClassVar[Mapping[str, Mapping[str, str]]] = {}
    """Per field, other spellings of enum values (NACK's ``byStartSequence``)."""

    @classmethod
    def aliases(cls) -> dict[str, str]:
        """Every accepted spelling -> the field name."""
        table = {camel(name): name for name in cls.model_fields if camel(name) != name}
        table.update(cls.EXTRA_ALIASES)
        return table

    @model_validator(mode="before")
    @classmethod
    def _canonical_names(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        aliases = cls.aliases()
        out: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        for key, value in data.items():
            name = aliases.get(key, key) if isinstance(key, str) else key
            if name in out:
                raise ValueError(f"{key!r} and {spelled[name]!r} are the same field; give it once")
            spelled[name] = key
            values = cls.VALUE_ALIASES.get(name)
            if values and isinstance(value, str):
                value = values.get(value, value)
            out[name] = value
        return out

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """JSON schema of the spec with every accepted spelling as a property (for CRDs)."""
        schema = cls.model_json_schema(mode="validation")
        _add_alias_properties(schema, cls)
        return schema


def _add_alias_properties(schema: dict[str, Any], model: type[SpecModel]) -> None:
    properties = schema.get("properties", {})
    aliases = model.aliases()
    for alias, name in aliases.items():
        if name in properties and alias not in properties:
            properties[alias] = properties[name]
    # Either spelling satisfies a required field, so a schema can not insist on one.
    aliased = set(aliases.values())
    if "required" in schema:
        schema["required"] = [name for name in schema["required"] if name not in aliased]
        if not schema["required"]:
            del schema["required"]
    for definition in schema.get("$defs", {}).values():
        title = definition.get("title")
        nested = _NESTED_MODELS.get(title or "")
        if nested is not None:
            _add_alias_properties(definition, nested)


_NESTED_MODELS: dict[str, type[SpecModel]] = {}


def register_nested(model: type[SpecModel]) -> type[SpecModel]:
    """Nested models get their alias properties in the JSON schema too."""
    _NESTED_MODELS[model.__name__] = model
    return model


CONNECTION_FIELDS = ("account", "creds", "nkey", "servers", "tls", "tls_first", "js_domain")
"""NACK's per-resource connection fields. Accepted so NACK manifests load unchanged; each way
in decides whether to honour them (the CLI uses its own connection flags)."""


class ControlFields(SpecModel):
    """Fields of every kind that steer the reconciler and are not server config."""

    prevent_delete: bool = False
    prevent_update: bool = False
    drift_policy: DriftPolicy = "correct"
    account: str | None = None
    creds: str | None = None
    nkey: str | None = None
    servers: list[str] | None = None
    tls: dict[str, Any] | None = None
    tls_first: bool | None = None
    js_domain: str | None = None

    CONTROL_FIELDS: ClassVar[tuple[str, ...]] = (
        "prevent_delete",
        "prevent_update",
        "drift_policy",
        *CONNECTION_FIELDS,
    )

    _owner: str = PrivateAttr(default="")

    def owned_by(self, owner: str) -> Self:
        """This spec as ``owner`` writes it: the ownership marker carries ``owner``."""
        copy = self.model_copy()
        copy._owner = owner
        return copy

    @property
    def owner(self) -> str:
        return self._owner

    def control_metadata(self) -> dict[str, str]:
        """Metadata apply writes next to the user's: the owner's marker, and preventDelete."""
        extra = {MANAGED_BY_KEY: self._owner} if self._owner else {}
        if self.prevent_delete:
            extra[PREVENT_DELETE_KEY] = "true"
        return extra


def user_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """Metadata without the server's keys (``_nats.*``)."""
    return {
        key: value
        for key, value in (metadata or {}).items()
        if not key.startswith(SERVER_METADATA_PREFIX)
    }
