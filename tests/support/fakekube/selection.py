"""``labelSelector`` and ``fieldSelector`` query parameters, parsed into predicates."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from . import errors

Predicate = Callable[[dict[str, Any]], bool]

# One requirement of a label selector: "k", "!k", "k=v", "k==v", "k!=v", "k in (a,b)",
# "k notin (a,b)". Splitting on commas must not split inside the parentheses of a set.
_REQUIREMENT = re.compile(
    r"""\s*(?:
        !(?P<absent>[^\s,=!()]+)
      | (?P<setkey>[^\s,=!()]+)\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\)
      | (?P<key>[^\s,=!()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,=!()]*))?
    )\s*(?:,|$)""",
    re.VERBOSE,
)

# Field selectors the fake understands for every type (the real server adds per-type fields).
_FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda obj: obj.get("metadata", {}).get("name", ""),
    "metadata.namespace": lambda obj: obj.get("metadata", {}).get("namespace", ""),
}


def label_selector(text: str) -> Predicate:
    checks: list[Callable[[dict[str, str]], bool]] = []
    position = 0
    while position < len(text.strip()):
        match = _REQUIREMENT.match(text, position)
        if match is None or match.end() == position:
            raise errors.bad_request(f"unable to parse requirement: {text[position:]!r}")
        position = match.end()
        checks.append(_label_check(match))
    return lambda obj: all(check(_labels(obj)) for check in checks)


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def _label_check(match: re.Match[str]) -> Callable[[dict[str, str]], bool]:
    if match["absent"]:
        absent = match["absent"]
        return lambda labels: absent not in labels
    if match["setkey"]:
        key, negate = match["setkey"], match["setop"] == "notin"
        values = {v.strip() for v in match["values"].split(",") if v.strip()}
        if negate:
            return lambda labels: labels.get(key) not in values
        return lambda labels: key in labels and labels[key] in values
    key, op, value = match["key"], match["op"], match["value"] or ""
    if op is None:
        return lambda labels: key in labels
    if op == "!=":
        return lambda labels: labels.get(key) != value
    return lambda labels: labels.get(key) == value


def field_selector(text: str) -> Predicate:
    checks: list[Predicate] = []
    for requirement in filter(None, (part.strip() for part in text.split(","))):
        match = re.fullmatch(r"([\w.]+)\s*(==|=|!=)\s*(.*)", requirement)
        if match is None or match[1] not in _FIELDS:
            raise errors.bad_request(f'"{requirement}" is not a known field selector')
        getter, negate, value = _FIELDS[match[1]], match[2] == "!=", match[3]
        checks.append(
            lambda obj, g=getter, n=negate, v=value: (g(obj) != v) if n else (g(obj) == v)
        )
    return lambda obj: all(check(obj) for check in checks)
