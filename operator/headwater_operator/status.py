"""The status the operator writes: conditions Ready and InSync, figures, drift, generation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from headwater_operator.reconcile import Condition

MAX_MESSAGE = 1000
"""Kubernetes caps an Event's message at 1 KiB; conditions are kept as short."""


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None,
    updates: Mapping[str, Condition],
    generation: int | None,
    timestamp: str,
) -> list[dict[str, Any]]:
    """Conditions with ``updates`` applied; lastTransitionTime moves only when the status
    does, as Kubernetes conventions ask."""
    current = {str(c.get("type")): dict(c) for c in previous or [] if isinstance(c, Mapping)}
    for kind, condition in updates.items():
        before = current.get(kind) or {}
        changed = before.get("status") != condition.status
        entry: dict[str, Any] = {
            "type": kind,
            "status": condition.status,
            "reason": condition.reason,
            "message": clip(condition.message),
            "lastTransitionTime": timestamp
            if changed or "lastTransitionTime" not in before
            else before["lastTransitionTime"],
        }
        if generation is not None:
            entry["observedGeneration"] = generation
        current[kind] = entry
    order = ["Ready", "InSync"]
    return sorted(
        current.values(),
        key=lambda c: (order.index(c["type"]) if c["type"] in order else len(order), c["type"]),
    )


def condition(status: Mapping[str, Any] | None, kind: str) -> dict[str, Any]:
    for entry in (status or {}).get("conditions") or []:
        if isinstance(entry, Mapping) and entry.get("type") == kind:
            return dict(entry)
    return {}


def same_condition(before: Mapping[str, Any], after: Condition) -> bool:
    return (
        before.get("status") == after.status
        and before.get("reason") == after.reason
        and before.get("message") == clip(after.message)
    )
