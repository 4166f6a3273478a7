"""Structural-schema behaviour of CRDs: pruning, defaulting and validation, in that order.

This mirrors how the API server decodes a custom resource: unknown fields are dropped (unless
``x-kubernetes-preserve-unknown-fields``), ``null`` for non-nullable fields is dropped,
``default`` values fill absent fields, then the result is validated against the
openAPIV3Schema. Validation uses jsonschema's Draft 4 rules, which OpenAPI v3.0 is based on;
``nullable`` and ``x-kubernetes-int-or-string`` are translated first because jsonschema does
not know them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

import jsonschema

Schema = dict[str, Any]
Cause = tuple[str, str, str]  # (reason, field, message) as in StatusCause

# Always kept at the root of a resource (and of an embedded resource), whatever the schema says.
_RESOURCE_FIELDS = ("apiVersion", "kind", "metadata")


def prune(schema: Schema, value: Any, *, root: bool = True) -> Any:
    """Drop the fields the schema does not declare. Returns the (mutated) value."""
    if isinstance(value, dict):
        properties: dict[str, Schema] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        keep_meta = root or bool(schema.get("x-kubernetes-embedded-resource"))
        for key in list(value):
            if keep_meta and key in _RESOURCE_FIELDS:
                continue  # ObjectMeta is the server's, never pruned by the CRD schema
            if key in properties:
                value[key] = prune(properties[key], value[key], root=False)
            elif isinstance(additional, dict):
                value[key] = prune(additional, value[key], root=False)
            elif not keep_unknown and additional is not True:
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(schema["items"], item, root=False) for item in value]
    return value


def apply_defaults(schema: Schema, value: Any) -> Any:
    """Fill absent fields with their schema defaults, recursing only into present objects."""
    if isinstance(value, dict):
        properties: dict[str, Schema] = schema.get("properties") or {}
        for key, subschema in properties.items():
            if key in value and value[key] is None and not subschema.get("nullable"):
                del value[key]  # null for a non-nullable field is dropped, then defaulted
            if key not in value and "default" in subschema:
                value[key] = copy.deepcopy(subschema["default"])
            if key in value:
                value[key] = apply_defaults(subschema, value[key])
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key in value:
                if key not in properties:
                    value[key] = apply_defaults(additional, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def _to_json_schema(schema: Any) -> Any:
    """Translate the OpenAPI-only keywords into plain JSON Schema (recursively)."""
    if isinstance(schema, list):
        return [_to_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _to_json_schema(item) for key, item in schema.items()}
    # "default", "description" and "example" are annotations; properties named like them are
    # inside "properties" and were translated above.
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if schema.get("nullable"):
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def _field_path(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _causes(error: jsonschema.ValidationError) -> list[Cause]:
    path = _field_path(error.absolute_path)
    if error.validator == "required":
        present = error.instance if isinstance(error.instance, dict) else {}
        return [
            ("FieldValueRequired", f"{path}.{name}" if path else name, "Required value")
            for name in error.validator_value
            if name not in present
        ]
    if error.validator == "enum":
        supported = ", ".join(json.dumps(item) for item in error.validator_value)
        return [
            (
                "FieldValueNotSupported",
                path,
                f"Unsupported value: {json.dumps(error.instance)}: supported values: {supported}",
            )
        ]
    if error.validator == "type":
        return [
            (
                "FieldValueTypeInvalid",
                path,
                f"Invalid value: {json.dumps(error.instance)}: "
                f"{path} in body must be of type {error.validator_value}",
            )
        ]
    return [
        ("FieldValueInvalid", path, f"Invalid value: {json.dumps(error.instance)}: {error.message}")
    ]


class ObjectSchema:
    """One version's openAPIV3Schema, compiled once."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._validator = jsonschema.Draft4Validator(_to_json_schema(schema))

    def normalize(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Prune, then default; mutates and returns ``obj``."""
        prune(self.schema, obj)
        apply_defaults(self.schema, obj)
        return obj

    def validate(self, obj: dict[str, Any]) -> list[Cause]:
        causes: list[Cause] = []
        for error in sorted(self._validator.iter_errors(obj), key=lambda e: list(map(str, e.path))):
            causes.extend(_causes(error))
        return causes
