"""Schema patterns for the fields that take human units (durations, sizes, counts).

The models carry these fields as ``x-kubernetes-int-or-string`` (``Duration``, ``Size`` and
``Count`` in ``headwater.control.models.base``), so without a pattern the API server takes any
string and ``"1 fortnight"`` is only found later, when the operator parses the spec. A pattern
lets ``kubectl apply`` refuse it at once. It applies to strings only; integers are checked by
the models (and stay valid whatever the pattern says).

Each pattern restates what ``headwater.control.units`` parses, and must accept every string the
models accept (a test holds them together); it may be looser where a regular expression cannot
follow the parser (``"0.5ns"`` is not a whole number of nanoseconds). Both Go's RE2, which the
API server uses, and Python's ``re``, which the tests' fake API server uses, must read them the
same way: no look-arounds, no inline flags, explicit ASCII classes (``\\s`` and ``\\d`` differ
between the two), letter case spelled out as ``[kK]``. NACK's ``""`` (unset) is accepted, as
the models read it as the server default.

These are applied to the generated CRD (``crdschema``) rather than declared in the models'
``WithJsonSchema``: the models are the control plane's, and the CLI has no use for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from pydantic import WithJsonSchema

from headwater.control.models.base import Count, Duration, Size

_SPACE = r"[\t\n\v\f\r ]*"
"""``str.strip`` removes these around a value (and other Unicode blanks nobody writes)."""
_NUMBER = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"
"""A decimal as the parsers read it: ``10``, ``1.5``, ``1.``, ``.5``."""
_DURATION_UNIT = "(ns|us|µs|μs|ms|s|m|h|d|w|y)"
"""``units.DURATION_UNITS``: Go's units plus d, w and y (both micro signs, as Go takes)."""
_SIZE_PREFIX = "[kKmMgGtTpPeE]"
_COUNT_PREFIX = "[kKmMgGtT]"

DURATION_PATTERN = rf"^({_SPACE}\+?(0|({_NUMBER}{_DURATION_UNIT})+){_SPACE})?$"
"""``parse_duration``: ``0``, or number-unit parts with nothing between them (``1h30m``);
a leading ``+`` is allowed, a bare number other than 0 is not (it has no unit)."""

SIZE_PATTERN = (
    rf"^({_SPACE}(-1|{_NUMBER}{_SPACE}({_SIZE_PREFIX}([iI][bB]?|[bB])?|[bB])?){_SPACE})?$"
)
"""``parse_size``: ``-1``, or a number with an optional decimal prefix (``1G``), binary with
``i``, ``iB`` or ``B`` after it (``10GiB``, ``1GB``), or only ``B`` (``100B``)."""

_COUNT_NUMBER = r"([0-9_]*[0-9][0-9_]*(\.[0-9_]*)?|_*\.[0-9_]*[0-9][0-9_]*)"
COUNT_PATTERN = (
    rf"^({_SPACE}_*(-_*1|{_COUNT_NUMBER}[\t\n\v\f\r _]*({_COUNT_PREFIX}_*)?)"
    rf"[\t\n\v\f\r _]*)?$"
)
"""``parse_count``: as a size with decimal prefixes up to T only, where ``_`` may stand
anywhere (the parser drops underscores: ``1_000``)."""


def _description(unit: Any) -> str:
    """The description the model's ``WithJsonSchema`` gives a unit type: how its int-or-string
    nodes are told apart in the generated schema."""
    for item in get_args(unit)[1:]:
        if isinstance(item, WithJsonSchema) and item.json_schema:
            return str(item.json_schema["description"])
    raise LookupError(f"{unit} has no WithJsonSchema description")


PATTERNS: Mapping[str, str] = {
    _description(Duration): DURATION_PATTERN,
    _description(Size): SIZE_PATTERN,
    _description(Count): COUNT_PATTERN,
}
"""An int-or-string node's description -> the pattern its strings must match."""


def pattern_for(node: Mapping[str, Any]) -> str | None:
    """The pattern of an int-or-string schema node that holds a unit (None for other nodes)."""
    if not node.get("x-kubernetes-int-or-string"):
        return None
    return PATTERNS.get(str(node.get("description", "")))
