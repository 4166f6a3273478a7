"""Terraform attributes of a spec field, and the two conversions every resource needs.

A ``Field`` names one attribute (its name is the server's JSON name, as in the control-plane
spec) and its kind. ``to_spec`` turns a Terraform value into what the spec model accepts (unit
strings pass through: the model parses them, so ``"1y"`` means what it means in YAML);
``to_terraform`` turns a canonical spec value into the spelling Terraform stores (``"1y"``,
``"10GiB"``), with empty values as null so an attribute left out of the configuration stays
null.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from tf import schema, types
from tf.gen import tfplugin_pb2 as pb
from tf.types import Unknown

from headwater.control import units

SCALAR_KINDS = ("string", "bool", "number", "duration", "size", "count")
LIST_KINDS = ("strings", "durations")


@dataclass(frozen=True)
class Field:
    """One attribute. ``kind`` is a scalar kind, a list kind, ``map`` (of strings),
    ``object`` (one nested object) or ``objects`` (a list of nested objects)."""

    name: str
    kind: str = "string"
    description: str = ""
    required: bool = False
    nested: tuple[Field, ...] = field(default=())
    sensitive: bool = False

    def tf_type(self) -> types.TfType:
        if self.kind in ("string", "duration", "size", "count"):
            return types.String()
        if self.kind == "bool":
            return types.Bool()
        if self.kind == "number":
            return types.Number()
        if self.kind in LIST_KINDS:
            return types.List(types.String())
        if self.kind == "map":
            return types.Map(types.String())
        return PassThrough()

    def describe(self) -> str:
        hint = {
            "duration": " A duration with units, e.g. `30s`, `72h`, `1y`.",
            "size": " A size with units, e.g. `512MiB`, `10GiB`; `-1` is unlimited.",
            "count": " A count, e.g. `1000` or `1M`; `-1` is unlimited.",
            "durations": " Durations with units.",
        }.get(self.kind, "")
        return (self.description + hint).strip()

    def attribute(
        self, *, required: bool | None = None, computed: bool = True, optional: bool = True
    ) -> schema.Attribute:
        """The top-level schema attribute: optional and computed unless ``required``, so an
        attribute left out shows the value the server will hold."""
        is_required = self.required if required is None else required
        if self.kind in ("object", "objects"):
            return NestedAttribute(
                self,
                required=is_required,
                optional=not is_required and optional,
                computed=not is_required and computed,
            )
        return schema.Attribute(
            self.name,
            self.tf_type(),
            description=self.describe() or None,
            required=is_required,
            optional=not is_required and optional,
            computed=not is_required and computed,
            sensitive=self.sensitive,
        )

    # -- Terraform value -> spec input -------------------------------------------------

    def to_spec(self, value: Any) -> Any:
        """A Terraform value as spec input; None means "not set" (the caller drops it)."""
        if value is None:
            return None
        if self.kind == "number":
            return _integer(value)
        if self.kind == "object":
            return nested_to_spec(self.nested, value)
        if self.kind == "objects":
            return [nested_to_spec(self.nested, item) for item in value]
        if self.kind in LIST_KINDS:
            return list(value)
        if self.kind == "map":
            return dict(value)
        return value

    # -- canonical spec value -> Terraform value ----------------------------------------

    def to_terraform(self, value: Any, default: Any = None) -> Any:
        """A canonical spec value in Terraform's spelling. Empty strings, lists and maps,
        and (inside nested objects) values equal to ``default``, are null."""
        if value is None:
            return None
        if self.kind == "object":
            nested = nested_to_terraform(self.nested, value)
            # All defaults reads as "not set", as when the configuration leaves it out.
            return nested if any(v is not None for v in nested.values()) else None
        if self.kind == "objects":
            items = [nested_to_terraform(self.nested, item) for item in value]
            return items or None
        if self.kind in LIST_KINDS:
            items = [
                units.format_duration(int(v)) if self.kind == "durations" else v for v in value
            ]
            return items or None
        if self.kind == "map":
            return dict(sorted(value.items())) or None
        if value == "" or (default is not None and value == default):
            return None
        if self.kind == "duration":
            return units.format_duration(int(value))
        if self.kind == "size":
            return units.format_size(int(value))
        if self.kind == "count":
            return units.format_count(int(value)) if value != -1 else "-1"
        return value

    # -- comparing two Terraform values as the server reads them ------------------------

    def same(self, a: Any, b: Any) -> bool:
        """Whether two Terraform values mean the same server value (``"365d"`` and ``"1y"``)."""
        if a is Unknown or b is Unknown:
            return False
        try:
            return self._canonical(a) == self._canonical(b)
        except (TypeError, ValueError):
            return a == b

    def _canonical(self, value: Any) -> Any:
        if value is None or value in ("", [], {}):
            return None
        if self.kind == "duration":
            return units.parse_duration(value)
        if self.kind == "size":
            return units.parse_size(value)
        if self.kind == "count":
            return units.parse_count(value)
        if self.kind == "durations":
            return [units.parse_duration(v) for v in value]
        if self.kind == "number":
            return _integer(value)
        if self.kind == "object":
            return {f.name: f._canonical(value.get(f.name)) for f in self.nested}
        if self.kind == "objects":
            return [{f.name: f._canonical(item.get(f.name)) for f in self.nested} for item in value]
        return value


def _integer(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def nested_to_spec(fields: Sequence[Field], value: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in fields:
        converted = item.to_spec(value.get(item.name))
        if converted is not None:
            out[item.name] = converted
    return out


def nested_to_terraform(fields: Sequence[Field], value: Any) -> dict[str, Any]:
    """A nested model (or dict) as a Terraform object with every attribute present; values
    equal to the model's defaults are null, as they are when the configuration omits them."""
    if isinstance(value, BaseModel):
        defaults = {
            name: info.default
            for name, info in type(value).model_fields.items()
            if not info.is_required()
        }
        data = {item.name: getattr(value, item.name, None) for item in fields}
    else:
        defaults = {}
        data = {item.name: value.get(item.name) for item in fields}
    out: dict[str, Any] = {}
    for item in fields:
        raw = data[item.name]
        default = defaults.get(item.name)
        if item.kind not in ("object", "objects") and raw == default and default is not None:
            out[item.name] = None
            continue
        out[item.name] = item.to_terraform(raw)
    return out


class PassThrough(types.TfType):
    """Nested objects travel as plain dicts and lists; Terraform knows their shape from the
    schema's ``nested_type``."""

    def encode(self, value: Any) -> Any:
        return value

    def decode(self, value: Any) -> Any:
        return value

    def tf_type(self) -> bytes:
        return b""


class NestedAttribute(schema.Attribute):
    """An attribute holding a nested object or a list of them (tfplugin6 ``nested_type``),
    so configurations read ``placement = { cluster = "east" }``. Nested attributes are
    optional and never computed: Terraform stores exactly what was written."""

    def __init__(self, spec: Field, *, required: bool, optional: bool, computed: bool) -> None:
        super().__init__(
            spec.name,
            PassThrough(),
            description=spec.describe() or None,
            required=required,
            optional=optional,
            computed=computed,
        )
        self.spec = spec

    def to_pb(self) -> pb.Schema.Attribute:
        return pb.Schema.Attribute(
            name=self.name,
            nested_type=nested_object(self.spec),
            description=self.description or "",
            description_kind=pb.StringKind.MARKDOWN,
            required=bool(self.required),
            optional=bool(self.optional),
            computed=bool(self.computed),
        )


def nested_object(spec: Field) -> pb.Schema.Object:
    nesting = pb.Schema.Object.SINGLE if spec.kind == "object" else pb.Schema.Object.LIST
    attributes = []
    for item in spec.nested:
        if item.kind in ("object", "objects"):
            attributes.append(
                pb.Schema.Attribute(
                    name=item.name,
                    nested_type=nested_object(item),
                    description=item.describe(),
                    description_kind=pb.StringKind.MARKDOWN,
                    required=item.required,
                    optional=not item.required,
                )
            )
        else:
            attributes.append(
                pb.Schema.Attribute(
                    name=item.name,
                    type=item.tf_type().tf_type(),
                    description=item.describe(),
                    description_kind=pb.StringKind.MARKDOWN,
                    required=item.required,
                    optional=not item.required,
                )
            )
    return pb.Schema.Object(attributes=attributes, nesting=nesting)
