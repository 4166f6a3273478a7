"""A custom resource's body as the core's ``Resource``: the same parser the CLI uses.

The API server fills CRD defaults under the preferred (camelCase) spelling of each field. A
manifest written with the server's snake_case names then carries both spellings of a field,
which the model refuses; a preferred spelling that only holds its default is dropped first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from headwater.control.documents import (
    API_VERSION,
    DocumentError,
    Resource,
    parse_document,
)
from headwater.control.models import KINDS
from headwater.control.models.base import SpecModel
from headwater_operator.crdschema import default_allowed
from headwater_operator.spellings import nested_model, spelling_index, spellings


def drop_defaulted_duplicates(data: Any, model: type[SpecModel]) -> Any:
    """``data`` without preferred spellings that only repeat a default another spelling
    overrides; recursing into nested specs."""
    if isinstance(data, list):
        return [drop_defaulted_duplicates(item, model) for item in data]
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for field, names in spellings(model).items():
        present = [name for name in names if name in out]
        if len(present) > 1 and names[0] in present:
            default = model.model_fields[field].default
            if default_allowed(default) and out[names[0]] == default:
                del out[names[0]]
    index = spelling_index(model)
    for key, value in out.items():
        field = index.get(key)
        inner = nested_model(model, field) if field else None
        if inner is not None:
            out[key] = drop_defaulted_duplicates(value, inner)
    return out


@dataclass(frozen=True)
class Parsed:
    """A custom resource read as a core Resource, or the reasons it is not one."""

    resource: Resource | None
    errors: list[DocumentError]

    @property
    def message(self) -> str:
        return "; ".join(
            f"{error.field}: {error.message}" if error.field else error.message
            for error in self.errors
        )


def parse_body(body: Mapping[str, Any]) -> Parsed:
    """The custom resource as the core's Resource (file: ``namespace/name``)."""
    kind = str(body.get("kind", ""))
    metadata = body.get("metadata") or {}
    model = KINDS.get(kind)
    spec = dict(body.get("spec") or {})
    if model is not None:
        spec = drop_defaulted_duplicates(spec, model)
    document = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {
            "name": metadata.get("name"),
            "annotations": dict(metadata.get("annotations") or {}),
        },
        "spec": spec,
    }
    where = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    resource, errors = parse_document(document, where)
    return Parsed(resource, errors)
