"""The whole flow every way in uses: documents + live state -> plan -> apply, and export.

The CLI, the operator, the Terraform provider and the GitHub Actions call these, so they all
read live state, plan and apply the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from nats.aio.client import Client

from headwater.control import api
from headwater.control.apply import ApplyReport, Result, apply_plan
from headwater.control.documents import API_VERSION, Resource
from headwater.control.live import LiveState, read_live
from headwater.control.models import (
    CONTROL_METADATA_KEYS,
    PREVENT_DELETE_KEY,
    ResourceKey,
    ResourceSpec,
)
from headwater.control.plan import ADOPT_HINT, REPLACE_HINT, Plan, make_plan


async def plan_resources(
    nc: Client,
    resources: Iterable[Resource],
    *,
    owner: str,
    prune: bool = False,
    allow_replace: bool = False,
    adopt: bool = False,
    adopt_hint: str = ADOPT_HINT,
    replace_hint: str = REPLACE_HINT,
    timeout: float = api.DEFAULT_TIMEOUT,
) -> tuple[Plan, LiveState]:
    live = await read_live(nc, timeout=timeout)
    plan = make_plan(
        resources,
        live,
        owner=owner,
        prune=prune,
        allow_replace=allow_replace,
        adopt=adopt,
        adopt_hint=adopt_hint,
        replace_hint=replace_hint,
    )
    return plan, live


async def apply_resources(
    nc: Client,
    resources: Iterable[Resource],
    *,
    owner: str,
    prune: bool = False,
    allow_replace: bool = False,
    adopt: bool = False,
    on_result: Callable[[Result], None] | None = None,
    timeout: float = api.DEFAULT_TIMEOUT,
) -> tuple[Plan, ApplyReport]:
    """Plan as ``owner``, then apply. Raises PlanError/ApplyRefused before changing
    anything."""
    plan, _live = await plan_resources(
        nc,
        resources,
        owner=owner,
        prune=prune,
        allow_replace=allow_replace,
        adopt=adopt,
        timeout=timeout,
    )
    report = await apply_plan(nc, plan, on_result=on_result, timeout=timeout)
    return plan, report


async def export_documents(
    nc: Client, *, timeout: float = api.DEFAULT_TIMEOUT
) -> list[dict[str, Any]]:
    """Live state as documents: every stream, bucket, durable consumer and template, each
    spec minimal (fields equal to what the server would default are left out)."""
    live = await read_live(nc, timeout=timeout)
    documents = []
    for key in live.resource_keys():
        try:
            spec = live.spec(key)
        except ValueError:
            continue
        documents.append(export_document(key, spec, live))
    return documents


def kubernetes_name(*parts: str) -> str:
    """A lowercase Kubernetes object name from server names (``ORDERS``, ``NEW`` ->
    ``orders-new``)."""
    text = "-".join(parts).lower()
    text = re.sub(r"[^a-z0-9.-]+", "-", text).strip("-.")
    return text[:253] or "unnamed"


def export_document(key: ResourceKey, spec: ResourceSpec, live: LiveState) -> dict[str, Any]:
    name_parts = (key.stream, key.name) if key.stream else (key.name,)
    return {
        "apiVersion": API_VERSION,
        "kind": key.kind,
        "metadata": {"name": kubernetes_name(*name_parts)},
        "spec": minimal_spec(spec, live, key),
    }


def minimal_spec(spec: ResourceSpec, live: LiveState, key: ResourceKey) -> dict[str, Any]:
    """The spec's fields that matter: a field is dropped when leaving it out changes nothing
    the server would hold."""
    context: dict[str, Any] = {}
    if key.kind == "Consumer":
        context["limits"] = live.consumer_limits(key.stream)
    data = spec.model_dump(exclude_defaults=True, exclude=set(spec.CONTROL_FIELDS))
    if key.kind == "Consumer" and data.get("name") == data.get("durable_name"):
        data.pop("name", None)
    metadata = dict(data.get("metadata") or {})
    if metadata.get(PREVENT_DELETE_KEY) == "true":
        data["prevent_delete"] = True
    for control_key in CONTROL_METADATA_KEYS:
        metadata.pop(control_key, None)
    if metadata:
        data["metadata"] = metadata
    else:
        data.pop("metadata", None)
    model = type(spec)
    target = model.model_validate(data).comparable(control=False, **context)
    for name in list(data):
        trial = {k: v for k, v in data.items() if k != name}
        try:
            same = model.model_validate(trial).comparable(control=False, **context) == target
        except ValueError:
            same = False
        if same:
            data = trial
    # Identity first, as people write documents.
    identity = [k for k in ("name", "bucket", "stream_name", "durable_name") if k in data]
    data = {k: data[k] for k in identity} | {k: v for k, v in data.items() if k not in identity}
    return humanize(spec, data)


def humanize(spec: ResourceSpec, data: Any, field: str = "") -> Any:
    """Durations and sizes in units people write (``1y``, ``10GiB``)."""
    if isinstance(data, dict):
        return {key: humanize(spec, value, key) for key, value in data.items()}
    if isinstance(data, list):
        if field in spec.DURATION_FIELDS:
            return [spec.display(field, item) for item in data]
        return [humanize(spec, item) for item in data]
    return spec.display(field, data) if field else data
