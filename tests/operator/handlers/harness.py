"""Calling the operator's handlers the way kopf calls them, without kopf's runner.

A ``Resource`` plays the API server's part for one custom resource: it holds the raw object,
hands each handler kopf's own ``Body``/``Patch`` and the keyword arguments kopf passes, and
merges the patch the handler wrote back into the object, as kopf's patching would. Events go
through kopf's real ``kopf.event`` into a queue read here: the handlers themselves make no
Kubernetes API call (indexes arrive as keyword arguments, events are queued for kopf's
poster), so no API server is needed at this level.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from kopf._core.engines.indexing import OperatorIndexer

# kopf.event reads these context variables, which kopf's runner sets for its handler tasks.
from kopf._core.engines.posting import (
    K8sEvent,
    event_queue_loop_var,
    event_queue_var,
    settings_var,
)
from nats.aio.client import Client

from headwater.control import api
from headwater_operator.handlers import PLURALS, Operator

GROUP_VERSION = "headwater.io/v1"
NAMESPACE = "default"
LOGGER = logging.getLogger("tests.operator.handlers")

Handler = Callable[..., Awaitable[None]]


def merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 merge patch, as the API server applies kopf's status patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)


@dataclass
class Resource:
    """One custom resource as the API server would hold it."""

    kind: str
    name: str
    spec: dict[str, Any]
    annotations: dict[str, str] = field(default_factory=dict)
    generation: int = 1
    status: dict[str, Any] = field(default_factory=dict)

    def raw(self) -> dict[str, Any]:
        return {
            "apiVersion": GROUP_VERSION,
            "kind": self.kind,
            "metadata": {
                "name": self.name,
                "namespace": NAMESPACE,
                "uid": f"uid-{self.kind}-{self.name}",
                "resourceVersion": str(self.generation),
                "generation": self.generation,
                "annotations": dict(self.annotations),
            },
            "spec": copy.deepcopy(self.spec),
            "status": copy.deepcopy(self.status),
        }

    def edit(self, spec: Mapping[str, Any]) -> None:
        """A spec edit: the API server bumps the generation."""
        merge_patch(self.spec, spec)
        self.generation += 1


@dataclass
class Harness:
    """An Operator whose handlers are called directly, and the events they posted."""

    operator: Operator
    settings: kopf.OperatorSettings
    queue: asyncio.Queue[K8sEvent] = field(default_factory=asyncio.Queue)
    posted: list[K8sEvent] = field(default_factory=list)

    async def call(
        self,
        handler: Handler,
        resource: Resource,
        *,
        retry: int = 0,
        indexes: Mapping[str, kopf.Index[Any, Any]] | None = None,
    ) -> kopf.Patch:
        """Call ``handler`` with kopf's keyword arguments; merge its patch into ``resource``.

        The patch is merged even when the handler raises, as kopf applies it then too."""
        # Set in the caller's (the test's) context, as kopf sets them for its handler tasks.
        settings_var.set(self.settings)
        event_queue_var.set(self.queue)
        event_queue_loop_var.set(asyncio.get_running_loop())
        body = kopf.Body(resource.raw())
        patch = kopf.Patch()
        kwargs: dict[str, Any] = {
            "body": body,
            "spec": body.spec,
            "meta": body.meta,
            "status": body.status,
            "patch": patch,
            "namespace": NAMESPACE,
            "name": resource.name,
            "uid": body.metadata.uid,
            "labels": body.metadata.labels,
            "annotations": body.metadata.annotations,
            "resource": kopf.Resource("headwater.io", "v1", PLURALS[resource.kind]),
            "retry": retry,
            "logger": LOGGER,
            "memo": kopf.Memo(),
            "param": None,
            **(indexes or {}),
        }
        try:
            await handler(**kwargs)
        finally:
            merge_patch(resource.status, dict(patch.get("status") or {}))
            self._drain()
        return patch

    def _drain(self) -> None:
        while not self.queue.empty():
            self.posted.append(self.queue.get_nowait())

    def reasons(self, resource: Resource) -> list[str]:
        """The reasons of the events posted for ``resource``, oldest first."""
        return [e.reason for e in self.posted if e.ref.get("name") == resource.name]

    def events(self, resource: Resource, reason: str) -> list[K8sEvent]:
        return [e for e in self.posted if e.ref.get("name") == resource.name and e.reason == reason]


def condition(resource: Resource, kind: str) -> dict[str, Any]:
    for entry in resource.status.get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return {}


def index_of(entries: Mapping[Any, Any]) -> kopf.Index[Any, Any]:
    """A kopf index holding ``entries`` (index key -> value), filled through kopf's own
    indexer, as the runner fills it from the watched objects."""
    indexer = OperatorIndexer()
    for number, (key, value) in enumerate(entries.items()):
        indexer.replace((NAMESPACE, f"object-{number}"), {key: value})
    return indexer.index


async def stream_config(nc: Client, name: str) -> dict[str, Any] | None:
    """The stream's config on the server, or None when it does not exist."""
    try:
        info = await api.request(nc, f"STREAM.INFO.{name}")
    except api.ApiError as error:
        if error.err_code == api.STREAM_NOT_FOUND:
            return None
        raise
    return dict(info["config"])
