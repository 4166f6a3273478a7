"""A spec model's JSON schema as a Kubernetes structural openAPIV3Schema.

The core's models are the one source of truth (``headwater.control.models.json_schema``);
this turns pydantic's JSON schema into what the API server accepts: ``$ref`` inlined,
``anyOf [T, null]`` as ``nullable``, ``anyOf [integer, string]`` as
``x-kubernetes-int-or-string``, free-form maps as ``x-kubernetes-preserve-unknown-fields``, no
``additionalProperties: false`` (the API server prunes unknown fields instead), enums that
include NACK's spellings of values, defaults on one spelling of each field only, and patterns
on the fields that take units (``unitpatterns``: the models' schemas have none).

A few checks live in model validators rather than in the JSON schema (asset names, a bucket's
storage); ``EXTRA_CONSTRAINTS`` states them for the API server, and tests hold them to the
validators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headwater.control.models import KINDS, json_schema
from headwater.control.models.base import SpecModel
from headwater_operator.spellings import all_models, spellings
from headwater_operator.unitpatterns import pattern_for

Schema = dict[str, Any]

ASSET_NAME = {"pattern": r"^[^.*>\\/\s]+$", "minLength": 1, "maxLength": 255}
"""Stream, consumer and template names (the core's ``check_asset_name``)."""
BUCKET_STORAGE = {"enum": ["file", "memory", ""]}

EXTRA_CONSTRAINTS: Mapping[tuple[str, str], Schema] = {
    ("Stream", "name"): ASSET_NAME,
    ("StreamTemplate", "name"): ASSET_NAME,
    ("Consumer", "stream_name"): ASSET_NAME,
    ("Consumer", "durable_name"): ASSET_NAME,
    ("Consumer", "name"): ASSET_NAME,
    ("KeyValue", "storage"): BUCKET_STORAGE,
    ("ObjectStore", "storage"): BUCKET_STORAGE,
}
"""(model class, field) -> constraints a model validator enforces that its schema lacks."""

NAME_FIELDS: Mapping[str, str] = {
    "Stream": "name",
    "KeyValue": "bucket",
    "ObjectStore": "bucket",
    "StreamTemplate": "name",
    "Consumer": "durable_name",
}
"""The field ``metadata.name`` fills when the spec gives none, so the CRD must not require it."""

_KEPT = (
    "type",
    "description",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "format",
)


class SchemaError(ValueError):
    """The model's JSON schema has a shape no structural schema can express."""


def spec_schema(kind: str) -> Schema:
    """The structural schema of ``spec`` for one kind."""
    model = KINDS[kind]
    raw = json_schema(kind)
    models = all_models(model)
    converter = _Converter(raw.get("$defs", {}), models)
    schema = converter.object(raw, model, skip_required=NAME_FIELDS.get(kind))
    return schema


def default_allowed(value: Any) -> bool:
    """Defaults the CRD states: booleans, numbers and non-empty strings (the enums, mostly).
    Empty strings, lists and maps are what an absent field means anyway."""
    if isinstance(value, bool | int | float):
        return True
    return isinstance(value, str) and value != ""


class _Converter:
    def __init__(self, defs: Mapping[str, Schema], models: Mapping[str, type[SpecModel]]) -> None:
        self.defs = defs
        self.models = models

    def _resolve(self, node: Schema) -> tuple[Schema, type[SpecModel] | None]:
        ref = node.get("$ref")
        if ref is None:
            return node, None
        name = ref.rsplit("/", 1)[-1]
        merged = {**self.defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return merged, self.models.get(name)

    def node(self, node: Schema) -> Schema:
        """Any schema node (a property's value, an item, a map value)."""
        node, model = self._resolve(node)
        if "allOf" in node and len(node["allOf"]) == 1:
            inner = dict(node["allOf"][0])
            merged = {**{k: v for k, v in node.items() if k != "allOf"}, **inner}
            return self.node(merged)
        if "anyOf" in node:
            return self._any_of(node)
        if "const" in node:
            node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
        if node.get("type") == "object" or "properties" in node:
            if model is not None:
                return self.object(node, model)
            return self._map(node)
        out = {key: node[key] for key in _KEPT if key in node}
        self._bounds(node, out)
        if node.get("type") == "array":
            out["items"] = self.node(node.get("items") or {})
        if "type" not in out:
            raise SchemaError(f"a schema node without a type: {node}")
        return out

    def _any_of(self, node: Schema) -> Schema:
        variants = [v for v in node["anyOf"] if v != {"type": "null"}]
        nullable = len(variants) < len(node["anyOf"])
        types = sorted(str(self._resolve(v)[0].get("type")) for v in variants)
        if types == ["integer", "string"]:
            out: Schema = {"x-kubernetes-int-or-string": True}
        elif len(variants) == 1:
            out = self.node(variants[0])
        else:
            raise SchemaError(f"anyOf with {types} has no structural form")
        if "description" in node:
            out["description"] = node["description"]
        pattern = pattern_for(out)
        if pattern is not None:
            out["pattern"] = pattern  # a unit's strings; integers are the models' to check
        if nullable:
            out["nullable"] = True
        return out

    @staticmethod
    def _bounds(node: Schema, out: Schema) -> None:
        # JSON schema 2020-12 writes exclusive bounds as numbers; OpenAPI 3.0 as flags.
        for key, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(node.get(key), int | float) and not isinstance(node.get(key), bool):
                out[plain] = node[key]
                out[key] = True

    def _map(self, node: Schema) -> Schema:
        out: Schema = {"type": "object"}
        if "description" in node:
            out["description"] = node["description"]
        additional = node.get("additionalProperties")
        if isinstance(additional, dict) and additional:
            out["additionalProperties"] = self.node(additional)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out

    def object(
        self, node: Schema, model: type[SpecModel], *, skip_required: str | None = None
    ) -> Schema:
        """An object backed by a spec model: every spelling a property, defaults on one."""
        out: Schema = {"type": "object"}
        if "description" in node:
            out["description"] = _first_paragraph(node["description"])
        table = spellings(model)
        properties: Schema = {}
        for field, names in table.items():
            source = _find_property(node.get("properties") or {}, names)
            if source is None:
                raise SchemaError(f"{model.__name__}.{field} is missing from the JSON schema")
            for position, name in enumerate(names):
                prop = self.node(source)
                prop.pop("default", None)
                default = source.get("default")
                if position == 0 and default_allowed(default):
                    prop["default"] = default
                values = model.VALUE_ALIASES.get(field)
                if values and "enum" in prop:
                    prop["enum"] = [*prop["enum"], *[v for v in values if v not in prop["enum"]]]
                prop.update(EXTRA_CONSTRAINTS.get((model.__name__, field), {}))
                properties[name] = prop
        out["properties"] = properties
        rules = []
        required = []
        # The model says what is required; its JSON schema can not (either spelling does).
        for field, info in model.model_fields.items():
            if not info.is_required() or field == skip_required:
                continue
            names = table[field]
            if len(names) == 1:
                required.append(names[0])
            else:
                rules.append({"anyOf": [{"required": [name]} for name in names]})
        if required:
            out["required"] = required
        if len(rules) == 1:
            out |= rules[0]
        elif rules:
            out["allOf"] = rules
        return out


def _find_property(properties: Mapping[str, Schema], names: list[str]) -> Schema | None:
    for name in names:
        if name in properties:
            return properties[name]
    return None


def _first_paragraph(text: str) -> str:
    return text.strip().split("\n\n", 1)[0].replace("\n", " ")
