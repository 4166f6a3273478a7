"""Carry out a plan through the JetStream API, resource by resource, in dependency order.

Nothing is sent when the plan has a refused change (a destructive replace not allowed, a
replace of a preventDelete resource): validation failures change nothing. Otherwise each
change gets its own result; a failed stream-level change skips the consumers of that stream,
and the rest goes on, so one bad resource does not hide the state of the others.

A replace deletes, then creates. When the server refuses the new config of a stream, bucket
or object store (Headwater's 10052 for a replicated stream on file storage, say), the stream
is created again with the config it had, so the failure leaves it as it was but empty rather
than gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from nats.aio.client import Client

from headwater.control import api
from headwater.control.models import (
    Consumer,
    KeyValue,
    ObjectStore,
    ResourceKey,
    ResourceSpec,
    StreamTemplate,
)
from headwater.control.models.base import user_metadata
from headwater.control.plan import Action, Change, Plan

NOT_FOUND = (api.STREAM_NOT_FOUND, api.CONSUMER_NOT_FOUND, api.TEMPLATE_NOT_FOUND)


class Status(StrEnum):
    APPLIED = "applied"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass
class Result:
    change: Change
    status: Status
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = self.change.to_dict()
        out |= {"status": self.status.value, "message": self.message}
        return out


@dataclass
class ApplyReport:
    results: list[Result] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(result.status is not Status.FAILED for result in self.results)

    @property
    def applied(self) -> list[Result]:
        return [r for r in self.results if r.status is Status.APPLIED]

    def to_dict(self) -> dict[str, Any]:
        counts = {status.value: 0 for status in Status}
        for result in self.results:
            counts[result.status.value] += 1
        return {
            "ok": self.ok,
            "results": [result.to_dict() for result in self.results],
            "summary": counts,
        }


class ApplyRefused(Exception):
    """The plan holds refused changes; nothing was changed."""

    def __init__(self, plan: Plan) -> None:
        lines = [f"{change.key}: {change.refused}" for change in plan.refusals]
        super().__init__("refusing to apply, nothing was changed:\n" + "\n".join(lines))
        self.plan = plan


async def apply_plan(
    nc: Client,
    plan: Plan,
    *,
    on_result: Callable[[Result], None] | None = None,
    timeout: float = api.DEFAULT_TIMEOUT,
) -> ApplyReport:
    """Apply every actionable change of ``plan`` in dependency order."""
    if plan.refusals:
        raise ApplyRefused(plan)
    report = ApplyReport()
    failed_streams: set[str] = set()
    ordered = plan.ordered()
    for change in [c for c in ordered if not c.implicit]:
        result = await _apply_one(nc, change, failed_streams, timeout)
        if result.status is Status.FAILED and change.key.kind != "Consumer":
            stream = _stream_name(change.key)
            if stream:
                failed_streams.add(stream)
        report.results.append(result)
        if on_result is not None:
            on_result(result)
    # Consumers that go with their stream are reported once the stream's fate is known.
    for change in [c for c in ordered if c.implicit]:
        gone = change.key.stream not in failed_streams
        result = Result(
            change,
            Status.APPLIED if gone else Status.SKIPPED,
            "; ".join(change.reasons) if gone else f"stream {change.key.stream} failed",
        )
        report.results.append(result)
        if on_result is not None:
            on_result(result)
    return report


async def _apply_one(
    nc: Client, change: Change, failed_streams: set[str], timeout: float
) -> Result:
    if change.action is Action.NOOP:
        return Result(change, Status.UNCHANGED)
    if change.skipped:
        return Result(change, Status.SKIPPED, change.skipped)
    if change.key.kind == "Consumer" and change.key.stream in failed_streams:
        return Result(change, Status.SKIPPED, f"stream {change.key.stream} failed to apply")
    try:
        if change.action is Action.DELETE:
            await _delete(nc, change.key, timeout)
        elif change.action is Action.CREATE:
            await _create(nc, _spec(change), timeout)
        elif change.action is Action.UPDATE:
            await _update(nc, change, timeout)
        else:
            return await _replace(nc, change, timeout)
    except (api.ApiError, api.ApiUnavailable) as error:
        return Result(change, Status.FAILED, str(error))
    return Result(change, Status.APPLIED)


async def _replace(nc: Client, change: Change, timeout: float) -> Result:
    """Delete, then create as desired; a stream-level create the server refuses puts the
    previous config back (see the module docstring), and the refusal stays the result."""
    previous = await _stream_config(nc, change.key, timeout)
    await _delete(nc, change.key, timeout)
    try:
        await _create(nc, _spec(change), timeout)
    except api.ApiError as error:
        if previous is None:
            raise
        subject = f"STREAM.CREATE.{previous['name']}"
        try:
            await api.request(nc, subject, previous, timeout=timeout)
        except (api.ApiError, api.ApiUnavailable) as again:
            return Result(
                change, Status.FAILED, f"{error}; putting the previous config back failed: {again}"
            )
        return Result(
            change,
            Status.FAILED,
            f"{error}; the stream was created again with its previous config (its messages "
            "are gone)",
        )
    return Result(change, Status.APPLIED)


async def _stream_config(nc: Client, key: ResourceKey, timeout: float) -> dict[str, Any] | None:
    """The live config of a stream-level resource, as a create request takes it (without the
    server's own ``_nats.*`` metadata); None for consumers and templates, or when it is gone."""
    stream = _stream_name(key)
    if not stream:
        return None
    try:
        reply = await api.request(nc, f"STREAM.INFO.{stream}", timeout=timeout)
    except api.ApiError as error:
        if error.err_code in NOT_FOUND:
            return None
        raise
    config: dict[str, Any] = dict(reply["config"])
    metadata = user_metadata(config.get("metadata"))
    if metadata:
        config["metadata"] = metadata
    else:
        config.pop("metadata", None)
    return config


def _spec(change: Change) -> ResourceSpec:
    if change.spec is None:  # pragma: no cover - plans give every non-delete change a spec
        raise ValueError(f"{change.key}: no desired spec")
    return change.spec


def _stream_name(key: ResourceKey) -> str:
    if key.kind == "Stream":
        return key.name
    if key.kind == "KeyValue":
        return KeyValue.PREFIX + key.name
    if key.kind == "ObjectStore":
        return ObjectStore.PREFIX + key.name
    return ""


async def _delete(nc: Client, key: ResourceKey, timeout: float) -> None:
    if key.kind == "Consumer":
        subject = f"CONSUMER.DELETE.{key.stream}.{key.name}"
    elif key.kind == "StreamTemplate":
        subject = f"STREAM.TEMPLATE.DELETE.{key.name}"
    else:
        subject = f"STREAM.DELETE.{_stream_name(key)}"
    try:
        await api.request(nc, subject, timeout=timeout)
    except api.ApiError as error:
        # Already gone (deleted by hand, or with its stream) is what a delete wants.
        if error.err_code not in NOT_FOUND:
            raise


async def _create(nc: Client, spec: ResourceSpec, timeout: float) -> None:
    if isinstance(spec, Consumer):
        await _consumer_request(nc, spec, "create", timeout)
    elif isinstance(spec, StreamTemplate):
        await api.request(
            nc, f"STREAM.TEMPLATE.CREATE.{spec.name}", spec.create_request(), timeout=timeout
        )
    else:
        config = spec.request_config()
        await api.request(nc, f"STREAM.CREATE.{config['name']}", config, timeout=timeout)


async def _update(nc: Client, change: Change, timeout: float) -> None:
    spec = _spec(change)
    if isinstance(spec, Consumer):
        await _consumer_request(nc, spec, "update", timeout)
        if any(f.path == "pause_until" for f in change.fields):
            # An update keeps the paused-until time; pausing has its own API.
            body = {"pause_until": spec.pause_until} if spec.pause_until else {}
            await api.request(
                nc, f"CONSUMER.PAUSE.{spec.stream_name}.{spec.server_name}", body, timeout=timeout
            )
        return
    config = spec.request_config()
    await api.request(nc, f"STREAM.UPDATE.{config['name']}", config, timeout=timeout)


async def _consumer_request(nc: Client, spec: Consumer, action: str, timeout: float) -> None:
    body = {"stream_name": spec.stream_name, "config": spec.request_config(), "action": action}
    await api.request(
        nc, f"CONSUMER.CREATE.{spec.stream_name}.{spec.server_name}", body, timeout=timeout
    )
