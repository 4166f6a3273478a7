"""The kopf layer: handlers for the five kinds, the sync timer, indexes, health and metrics.

Every handler is a method of one ``Operator`` (its config, NATS connections, metrics and
per-resource locks) registered on a kopf registry by ``Operator.register``: no module-level
state, so the tests can run several operators in one process through kopf's ``KopfRunner``.

Each custom resource is the owner of the asset it names (``ownership.owner_of``): it plans as
that owner, and its deletion deletes the asset only when the asset's ``headwater.io/managed-by``
names it; another owner's asset, or one nobody manages, is left in place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from nats.errors import Error as NatsError

from headwater.control import api
from headwater.control.apply import Status, apply_plan
from headwater.control.connection import ConnectionSettings
from headwater.control.documents import Resource
from headwater.control.models import MANAGED_BY_KEY
from headwater.control.plan import Action, Change, Plan
from headwater_operator import GROUP, VERSION
from headwater_operator.config import OperatorConfig
from headwater_operator.connection import (
    PROFILE_LABEL,
    ConnectionPool,
    FileCache,
    InvalidConnection,
    ProfileInvalid,
    ProfileLookup,
    ProfileMissing,
    configmap_data,
    secret_data,
    settings_for,
)
from headwater_operator.live import figures, read_resource, stream_of
from headwater_operator.metrics import Metrics
from headwater_operator.ownership import owner_of
from headwater_operator.reconcile import WAITING, Condition, Event, Mode, Outcome, reconcile
from headwater_operator.resources import parse_body
from headwater_operator.restore import BACKUP_INVALID, reconcile_with_restore, wants_restore
from headwater_operator.status import clip, condition, merge_conditions, now, same_condition
from headwater_operator.waits import ExpectedWaits

FINALIZER = f"{GROUP}/finalizer"
ANNOTATION_PREFIX = f"kopf.{GROUP}"
PLURALS = {
    "Stream": "streams",
    "Consumer": "consumers",
    "KeyValue": "keyvalues",
    "ObjectStore": "objectstores",
    "StreamTemplate": "streamtemplates",
}
STREAM_KINDS = ("Stream", "KeyValue", "ObjectStore")
LOGGER = logging.getLogger(__name__)
UNREACHABLE = (ConnectionError, OSError, TimeoutError, NatsError, api.ApiUnavailable)
"""Failures of the connection rather than of the request: retried, the connection dropped."""


@dataclass(frozen=True)
class Deletion:
    """What deleting a resource did on the server."""

    outcome: str
    """"deleted", "prevented" (server metadata), "missing", or "left" (another's asset)."""
    manager: str | None = None
    """Who manages an asset left in place (None: nobody)."""


class Operator:
    """The operator's state and handlers. ``register`` puts them on a kopf registry."""

    def __init__(self, config: OperatorConfig | None = None) -> None:
        self.config = config or OperatorConfig()
        self.pool = ConnectionPool()
        self.files = FileCache(self.config.cache_dir)
        self.metrics = Metrics()
        self.metrics_port: int | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self.waits = ExpectedWaits()

    # -- registration ---------------------------------------------------------------------

    def register(self, registry: kopf.OperatorRegistry) -> kopf.OperatorRegistry:
        on = kopf.on
        on.startup(registry=registry)(self.startup)
        on.cleanup(registry=registry)(self.cleanup)
        on.probe(id="nats_connections", registry=registry)(self.probe)
        kopf.index(
            "",
            "v1",
            "secrets",
            id="connection_secrets",
            registry=registry,
            labels={PROFILE_LABEL: kopf.PRESENT},
        )(self.index_secret)
        kopf.index(
            "",
            "v1",
            "configmaps",
            id="connection_configmaps",
            registry=registry,
            labels={PROFILE_LABEL: kopf.PRESENT},
        )(self.index_configmap)
        kopf.index(GROUP, VERSION, "consumers", id="consumers_by_stream", registry=registry)(
            self.index_consumer
        )
        for plural in PLURALS.values():
            resource = (GROUP, VERSION, plural)
            on.create(*resource, id="create", registry=registry)(self.on_create)
            on.update(*resource, id="update", registry=registry)(self.on_update)
            on.resume(*resource, id="resume", registry=registry)(self.on_resume)
            on.delete(*resource, id="delete", registry=registry)(self.on_delete)
            kopf.timer(
                *resource,
                id="sync",
                interval=self.config.sync_interval,
                initial_delay=self.config.sync_interval,
                registry=registry,
            )(self.on_sync)
        return registry

    async def startup(
        self, settings: kopf.OperatorSettings, logger: logging.Logger, **_: Any
    ) -> None:
        settings.persistence.finalizer = FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix=ANNOTATION_PREFIX
        )
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
        )
        settings.posting.level = logging.INFO
        # kopf releases a deleted resource only once its sync timer has stopped. It waits
        # this long for a running sync to end within the deletion's own pass (a sync is a
        # request or two), so the delete handler runs once; when a sync outlasts that, kopf
        # looks again every second instead of every minute (its default), which held
        # deletions for a minute.
        settings.background.instant_exit_timeout = self.config.request_timeout
        settings.background.cancellation_polling = 1.0
        self.waits.install()
        if self.config.watch_timeout is not None:
            settings.watching.server_timeout = self.config.watch_timeout
        if self.config.metrics_port is not None:
            self.metrics_port = self.metrics.serve(
                self.config.metrics_host, self.config.metrics_port
            )
            logger.info("metrics on %s:%d/metrics", self.config.metrics_host, self.metrics_port)

    async def cleanup(self, **_: Any) -> None:
        self.waits.uninstall()
        await self.pool.close()
        self.metrics.stop()
        self.files.cleanup()

    async def probe(self, **_: Any) -> int:
        return len(self.pool)

    # -- indexes --------------------------------------------------------------------------

    def index_secret(self, name: str, namespace: str, body: kopf.Body, **_: Any) -> dict[str, Any]:
        return {namespace: (name, secret_data(body))}

    def index_configmap(
        self, name: str, namespace: str, body: kopf.Body, **_: Any
    ) -> dict[str, Any]:
        return {namespace: (name, configmap_data(body))}

    def index_consumer(
        self, name: str, namespace: str, spec: kopf.Spec, **_: Any
    ) -> dict[str, Any]:
        stream = spec.get("streamName") or spec.get("stream_name") or ""
        return {(namespace, str(stream)): name}

    # -- handlers -------------------------------------------------------------------------

    async def on_create(self, **kwargs: Any) -> None:
        await self._apply("create", **kwargs)

    async def on_update(self, **kwargs: Any) -> None:
        await self._apply("update", **kwargs)

    async def on_resume(self, **kwargs: Any) -> None:
        await self._apply("resume", **kwargs)

    async def _apply(
        self, trigger: str, *, body: kopf.Body, patch: kopf.Patch, retry: int, **kwargs: Any
    ) -> None:
        kind = str(body.get("kind"))
        outcome = await self._reconcile(body, Mode.APPLY, kwargs)
        self._write_status(body, patch, outcome)
        self._count(kind, trigger, outcome)
        if outcome.event is not None:
            self._post(body, outcome.event)
        if outcome.action == "invalid":
            raise kopf.PermanentError(outcome.in_sync.message)
        if outcome.retry:
            if outcome.action != "waiting":
                raise kopf.TemporaryError(outcome.in_sync.message, delay=self.config.backoff(retry))
            if outcome.in_sync.reason == WAITING:
                self._expect_wait(body, outcome.in_sync.message)  # ordering, not an error
            raise kopf.TemporaryError(outcome.in_sync.message, delay=self.config.wait_delay)

    async def on_sync(
        self,
        body: kopf.Body,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        **kwargs: Any,
    ) -> None:
        """The timer: refresh live figures, detect drift, correct or report it."""
        kind = str(body.get("kind"))
        if kwargs.get("stopped") or meta.get("deletionTimestamp"):
            return  # being deleted: the delete handler owns the resource now
        if status.get("observedGeneration") != meta.get("generation"):
            return  # a handler has not finished this generation; it owns the resource now
        if condition(status, "InSync").get("reason") in ("Invalid", BACKUP_INVALID):
            return  # nothing to do until the spec changes
        outcome = await self._reconcile(body, Mode.SYNC, kwargs)
        before = condition(status, "InSync")
        self._write_status(body, patch, outcome)
        self._count(kind, "sync", outcome)
        if outcome.drift or outcome.action in ("recreated", "corrected", "reported"):
            handling = "corrected" if outcome.action in ("recreated", "corrected") else "reported"
            self.metrics.drift.labels(kind, handling).inc()
        acted = outcome.action not in (
            "unchanged",
            "refused",
            "skipped",
            "reported",
            "conflict",
            "failed",
            "waiting",
            "unreachable",
        )
        if outcome.event is not None and (acted or not same_condition(before, outcome.in_sync)):
            self._post(body, outcome.event)

    async def on_delete(self, body: kopf.Body, namespace: str, retry: int, **kwargs: Any) -> None:
        kind = str(body.get("kind"))
        parsed = parse_body(body)
        resource = parsed.resource
        if resource is None:
            self._post(
                body,
                Event(
                    "Normal",
                    "Deleted",
                    f"the spec never parsed ({parsed.message}); nothing to delete",
                ),
            )
            return
        what = str(resource.key)
        if resource.spec.prevent_delete:
            self._post(
                body,
                Event(
                    "Normal",
                    "DeletePrevented",
                    f"{what}: preventDelete is set; the server keeps it",
                ),
            )
            self.metrics.reconciles.labels(kind, "delete", "prevented").inc()
            return
        if kind in STREAM_KINDS:
            consumers = self._consumer_resources(kwargs, namespace, stream_of(resource.spec))
            if consumers:
                message = (
                    f"{what}: waiting for Consumer resources {', '.join(sorted(consumers))} "
                    "to be deleted first"
                )
                self._post(body, Event("Normal", "DeleteWaiting", message))
                self._expect_wait(body, message)
                raise kopf.TemporaryError(message, delay=self.config.wait_delay)
        owner = self.owner(body)
        async with self._lock(body):
            try:
                settings = self._settings(resource, namespace, kwargs)
                deletion = await self._delete(settings, resource, owner)
            except (
                ProfileMissing,
                ProfileInvalid,
                InvalidConnection,
                *UNREACHABLE,
                api.ApiError,
            ) as error:
                message = f"{what}: delete failed: {error}"
                self._post(body, Event("Warning", "DeleteFailed", message))
                self.metrics.errors.labels(kind, "DeleteFailed").inc()
                raise kopf.TemporaryError(message, delay=self.config.backoff(retry)) from None
        self._locks.pop(str(body.get("metadata", {}).get("uid")), None)
        event = _deletion_event(what, owner, deletion)
        if deletion.outcome == "left":
            LOGGER.info("%s", event.message)
        self._post(body, event)
        self.metrics.reconciles.labels(kind, "delete", deletion.outcome).inc()

    # -- the work -------------------------------------------------------------------------

    async def _reconcile(self, body: kopf.Body, mode: Mode, kwargs: Mapping[str, Any]) -> Outcome:
        parsed = parse_body(body)
        if parsed.resource is None:
            message = f"invalid spec: {parsed.message}"
            invalid = Condition("False", "Invalid", message)
            return Outcome("invalid", invalid, invalid, Event("Warning", "Invalid", message))
        resource = parsed.resource
        namespace = str(body.get("metadata", {}).get("namespace", ""))
        try:
            settings = self._settings(resource, namespace, kwargs)
        except InvalidConnection as error:
            message = f"invalid spec: {error}"
            invalid = Condition("False", "Invalid", message)
            return Outcome("invalid", invalid, invalid, Event("Warning", "Invalid", message))
        except (ProfileMissing, ProfileInvalid) as error:
            reason = (
                "ConnectionProfileMissing"
                if isinstance(error, ProfileMissing)
                else "ConnectionProfileInvalid"
            )
            waiting = Condition("False", reason, str(error))
            return Outcome(
                "waiting", waiting, waiting, Event("Warning", reason, str(error)), retry=True
            )
        async with self._lock(body):
            try:
                nc = await self.pool.get(settings)
                owner = self.owner(body)
                timeout = self.config.request_timeout
                if wants_restore(resource, mode):
                    outcome = await reconcile_with_restore(
                        nc, resource, mode, owner=owner, timeout=timeout
                    )
                else:
                    outcome, _change = await reconcile(
                        nc, resource, mode, owner=owner, timeout=timeout
                    )
            except UNREACHABLE as error:
                await self.pool.discard(settings)
                message = _unreachable(settings, error)
                unknown = Condition("Unknown", "Unreachable", message)
                return Outcome(
                    "unreachable",
                    unknown,
                    Condition("Unknown", "Unreachable", message),
                    Event("Warning", "Unreachable", message),
                    retry=True,
                )
            except api.ApiError as error:
                message = f"the server refused a read: {error}"
                failed = Condition("False", "ApplyFailed", message)
                return Outcome(
                    "failed",
                    Condition("Unknown", "ReadFailed", message),
                    failed,
                    Event("Warning", "ApplyFailed", message),
                    retry=True,
                )
        self.metrics.connections.set(len(self.pool))
        return outcome

    def owner(self, body: Mapping[str, Any]) -> str:
        """The owner the custom resource ``body`` writes in ``headwater.io/managed-by``."""
        metadata = body.get("metadata") or {}
        return owner_of(
            str(body.get("kind", "")),
            str(metadata.get("namespace", "")),
            str(metadata.get("name", "")),
            self.config.cluster_id,
        )

    async def _delete(
        self, settings: ConnectionSettings, resource: Resource, owner: str
    ) -> Deletion:
        """Delete the resource on the server, only when ``owner`` manages it: an asset another
        owner manages, or nobody does, is theirs (or was there before) and stays."""
        nc = await self.pool.get(settings)
        read = await read_resource(nc, resource.spec, timeout=self.config.request_timeout)
        if not read.exists:
            return Deletion("missing")
        manager = read.state.owner(resource.key)
        if manager != owner:
            return Deletion("left", manager)
        if read.state.delete_prevented(resource.key):
            return Deletion("prevented")
        change = Change(resource.key, Action.DELETE, destructive=True)
        report = await apply_plan(nc, Plan([change]), timeout=self.config.request_timeout)
        for result in report.results:
            if result.status is Status.FAILED:
                raise api.ApiError("delete", 500, 0, result.message)
        return Deletion("deleted")

    def _settings(
        self, resource: Resource, namespace: str, kwargs: Mapping[str, Any]
    ) -> ConnectionSettings:
        profiles = ProfileLookup(
            secrets=_profiles_in(kwargs.get("connection_secrets"), namespace),
            configmaps=_profiles_in(kwargs.get("connection_configmaps"), namespace),
        )
        return settings_for(
            resource.spec,
            profiles,
            self.config.connection,
            self.files,
            self.config.namespace_profile,
        )

    def _consumer_resources(
        self, kwargs: Mapping[str, Any], namespace: str, stream: str
    ) -> list[str]:
        index = kwargs.get("consumers_by_stream")
        if index is None:
            return []
        return [str(name) for name in index.get((namespace, stream), [])]

    def _expect_wait(self, body: kopf.Body, message: str) -> None:
        """Announce the TemporaryError about to be raised as a wait, so that kopf's record of
        it is INFO (``waits``); the handler's own Event already reports it."""
        self.waits.expect(str(body.get("metadata", {}).get("uid")), message)

    def _lock(self, body: kopf.Body) -> asyncio.Lock:
        uid = str(body.get("metadata", {}).get("uid"))
        return self._locks.setdefault(uid, asyncio.Lock())

    def _write_status(self, body: kopf.Body, patch: kopf.Patch, outcome: Outcome) -> None:
        status = body.get("status") or {}
        generation = body.get("metadata", {}).get("generation")
        timestamp = now()
        patch.status["observedGeneration"] = generation
        patch.status["conditions"] = merge_conditions(
            status.get("conditions"),
            {"Ready": outcome.ready, "InSync": outcome.in_sync},
            generation,
            timestamp,
        )
        patch.status["drift"] = list(outcome.drift)
        patch.status["lastSynced"] = timestamp
        parsed = parse_body(body)
        if outcome.read is not None and parsed.resource is not None:
            for key, value in figures(outcome.read, parsed.resource.spec).items():
                patch.status[key] = value

    def _count(self, kind: str, trigger: str, outcome: Outcome) -> None:
        self.metrics.reconciles.labels(kind, trigger, outcome.action).inc()
        if outcome.retry or outcome.action == "invalid":
            self.metrics.errors.labels(kind, outcome.in_sync.reason).inc()

    @staticmethod
    def _post(body: kopf.Body, event: Event) -> None:
        kopf.event(body, type=event.type, reason=event.reason, message=clip(event.message))


def _deletion_event(what: str, owner: str, deletion: Deletion) -> Event:
    if deletion.outcome == "deleted":
        return Event("Normal", "Deleted", f"{what}: deleted from the server")
    if deletion.outcome == "missing":
        return Event("Normal", "Deleted", f"{what}: not on the server; nothing to delete")
    if deletion.outcome == "prevented":
        return Event(
            "Normal", "DeletePrevented", f"{what}: marked preventDelete on the server; it keeps it"
        )
    whose = (
        f"managed by {deletion.manager!r}, not by {owner!r}"
        if deletion.manager
        else f"managed by nobody (no {MANAGED_BY_KEY})"
    )
    return Event("Normal", "LeftInPlace", f"{what}: {whose}; left in place")


def _unreachable(settings: ConnectionSettings, error: BaseException) -> str:
    servers = ", ".join(settings.servers)
    if isinstance(error, api.ApiUnavailable) and settings.js_domain:
        # Connected, but nothing answers the domain's API: a wrong or unreachable domain.
        return f"JetStream domain {settings.js_domain!r} not reachable via {servers}: {error}"
    return f"server not reachable ({servers}): {error}"


def _profiles_in(index: Any, namespace: str) -> dict[str, Mapping[str, str]]:
    if index is None:
        return {}
    return {name: data for name, data in index.get(namespace, [])}


def build_operator(
    config: OperatorConfig | None = None, registry: kopf.OperatorRegistry | None = None
) -> Operator:
    """An operator whose handlers are registered on ``registry`` (kopf's default registry,
    which also holds kopf's own login handlers, when None)."""
    operator = Operator(config)
    operator.register(registry if registry is not None else kopf.get_default_registry())
    return operator
