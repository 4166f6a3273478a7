"""Which spellings a spec field accepts, which one the CRD prefers, and what is nested where.

The core's spec models accept every field under the server's snake_case name and NACK's
camelCase (plus a few NACK names that are not plain camelCase). The CRDs list all of them, so
either kind of manifest passes the API server; defaults sit on one spelling only, the
*preferred* one (camelCase, the Kubernetes convention), or a manifest written in the other
spelling would end up with both and the model refuses a field given twice.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from headwater.control.models.base import SpecModel, camel


def preferred(field: str) -> str:
    """The spelling the CRD gives defaults to: camelCase (``maxAge``), or the name itself."""
    return camel(field)


def spellings(model: type[SpecModel]) -> dict[str, list[str]]:
    """Field -> every accepted spelling, the preferred one first."""
    table: dict[str, list[str]] = {name: [preferred(name)] for name in model.model_fields}
    for name in model.model_fields:
        # ``from_`` is Python's spelling of the keyword ``from``, not one users write.
        if name not in table[name] and not name.endswith("_"):
            table[name].append(name)
    for alias, name in model.aliases().items():
        if alias not in table[name]:
            table[name].append(alias)
    return table


def spelling_index(model: type[SpecModel]) -> dict[str, str]:
    """Every accepted spelling -> its field."""
    return {spelled: name for name, names in spellings(model).items() for spelled in names}


def _models_in(annotation: Any) -> Iterator[type[SpecModel]]:
    if isinstance(annotation, type) and issubclass(annotation, SpecModel):
        yield annotation
        return
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _models_in(typing.get_args(annotation)[0])
        return
    if origin in (typing.Union, types.UnionType, list, tuple, set, frozenset):
        for argument in typing.get_args(annotation):
            yield from _models_in(argument)


def nested_model(model: type[BaseModel], field: str) -> type[SpecModel] | None:
    """The spec model a field holds (directly, optional, or as list items), if any."""
    info = model.model_fields.get(field)
    if info is None:
        return None
    return next(_models_in(info.annotation), None)


def all_models(model: type[SpecModel]) -> dict[str, type[SpecModel]]:
    """The model and every model nested in it, by class name (pydantic's ``$defs`` keys)."""
    found: dict[str, type[SpecModel]] = {}

    def visit(current: type[SpecModel]) -> None:
        if current.__name__ in found:
            return
        found[current.__name__] = current
        for name in current.model_fields:
            inner = nested_model(current, name)
            if inner is not None:
                visit(inner)

    visit(model)
    return found
