"""The plan: for every resource, what it takes to make the server match the documents.

Each desired resource gets a typed Change:

* ``create``: the server does not have it (also drift when it was deleted by hand);
* ``update``: changed fields, each before -> after, that the server changes in place;
* ``replace``: a change the server refuses in place (storage type, retention to/from
  workqueue, a consumer's deliver or ack policy ...). Replacing deletes and re-creates, losing
  messages or a consumer's position, so it is destructive and refused unless allowed for that
  resource (annotation ``headwater.io/allow-replace: "true"``) or for the run;
* ``delete``: with prune, a live resource no document names that this plan's owner manages;
  also consumers that go with a stream being replaced or deleted;
* ``noop``.

Every plan is made for one owner (``headwater.io/managed-by``: ``cli``, ``github:org/repo``,
``terraform:prod``, ``kubernetes:ns/stream/name``). A live resource another owner manages is
refused (``conflict`` names that owner) unless the run or the document adopts it (``--adopt``,
annotation ``headwater.io/adopt: "true"``, ``terraform import``); an adoption is shown as the
marker's change. A resource nobody manages is taken over without asking, and the plan says so.

Configs are compared after filling every server default on both sides, so a plan right after
an apply is empty on Headwater and on nats-server alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from headwater.control.documents import ALLOW_REPLACE_ANNOTATION, Resource
from headwater.control.live import LiveState
from headwater.control.models import (
    ADOPT_ANNOTATION,
    MANAGED_BY_VALUE,
    Consumer,
    ResourceKey,
    ResourceSpec,
)
from headwater.control.models.common import ConsumerLimits
from headwater.control.models.stream import StreamFields

ADOPT_HINT = f'annotate it {ADOPT_ANNOTATION}: "true"'
"""How a document adopts; ways in with their own means (a flag, an import) say theirs."""
REPLACE_HINT = f'annotation {ALLOW_REPLACE_ANNOTATION}: "true"'
"""How a document allows a replace; the CLI adds its ``--allow-replace``."""


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    NOOP = "noop"


STREAM_KINDS = ("StreamTemplate", "Stream", "KeyValue", "ObjectStore")


@dataclass(frozen=True)
class FieldChange:
    """One field, dotted path in server spelling, before -> after (None: absent)."""

    path: str
    before: Any
    after: Any

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.path, "before": self.before, "after": self.after}


@dataclass
class Change:
    key: ResourceKey
    action: Action
    fields: list[FieldChange] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    """Why a replace is needed, or why a resource is deleted."""
    spec: ResourceSpec | None = None
    source: str = ""
    destructive: bool = False
    refused: str = ""
    """Non-empty: this change is not allowed (apply stops before changing anything)."""
    skipped: str = ""
    """Non-empty: apply leaves this alone (preventUpdate, preventDelete, drift_policy)."""
    implicit: bool = False
    """Happens as a side effect of another change (consumers deleted with their stream)."""
    conflict: str = ""
    """Non-empty: another owner manages the live resource (its marker); the change is refused
    unless adopted."""

    @property
    def actionable(self) -> bool:
        return self.action is not Action.NOOP and not self.skipped and not self.implicit

    @property
    def drift(self) -> bool:
        """Live differs from desired (or exists while nothing wants it)."""
        return self.action is not Action.NOOP

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.key.kind,
            "name": self.key.name,
            "action": self.action.value,
            "destructive": self.destructive,
            "fields": [f.to_dict() for f in self.fields],
            "reasons": list(self.reasons),
        }
        if self.key.stream:
            out["stream"] = self.key.stream
        if self.source:
            out["source"] = self.source
        if self.refused:
            out["refused"] = self.refused
        if self.skipped:
            out["skipped"] = self.skipped
        if self.implicit:
            out["implicit"] = True
        if self.conflict:
            out["owner"] = self.conflict
        return out


@dataclass
class Plan:
    changes: list[Change]
    prune: bool = False
    owner: str = ""

    @property
    def has_changes(self) -> bool:
        return any(change.actionable for change in self.changes)

    @property
    def refusals(self) -> list[Change]:
        return [change for change in self.changes if change.refused]

    @property
    def drift(self) -> list[Change]:
        return [change for change in self.changes if change.drift]

    def counts(self) -> dict[str, int]:
        counts = {action.value: 0 for action in Action}
        for change in self.changes:
            counts[change.action.value] += 1
        return counts

    def ordered(self) -> list[Change]:
        """Apply order: consumer deletes, then stream-level deletes, then stream-level
        creates/updates/replaces, then consumers; each phase sorted by name."""

        def phase(change: Change) -> int:
            consumer = change.key.kind == "Consumer"
            if change.action is Action.DELETE:
                return 0 if consumer else 1
            return 3 if consumer else 2 + STREAM_KINDS.index(change.key.kind) / 10

        return sorted(self.changes, key=lambda c: (phase(c), c.key.kind, c.key.stream, c.key.name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": [change.to_dict() for change in self.ordered()],
            "summary": self.counts(),
            "has_changes": self.has_changes,
            "refused": [str(change.key) for change in self.refusals],
            "prune": self.prune,
            "owner": self.owner,
        }


class PlanError(Exception):
    """The plan can not be computed (e.g. a consumer whose stream exists nowhere)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def diff(
    before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""
) -> list[FieldChange]:
    """Field changes between two comparable configs; mappings recurse (``metadata.owner``)."""
    changes: list[FieldChange] = []
    for name in _ordered_keys(before, after):
        old, new = before.get(name), after.get(name)
        path = f"{prefix}{name}"
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changes.extend(diff(old, new, f"{path}."))
        elif old != new:
            changes.append(FieldChange(path, old, new))
    return changes


def _ordered_keys(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    keys = list(after)
    keys.extend(name for name in before if name not in after)
    return keys


def make_plan(
    resources: Iterable[Resource],
    live: LiveState,
    *,
    owner: str,
    prune: bool = False,
    allow_replace: bool = False,
    adopt: bool = False,
    adopt_hint: str = ADOPT_HINT,
    replace_hint: str = REPLACE_HINT,
) -> Plan:
    """Compare the documents with the live state, as ``owner`` (see the module docstring).
    ``adopt_hint`` and ``replace_hint`` tell, in a refusal, how this way in adopts and how it
    allows a replace. Raises PlanError
    when a consumer names a stream that neither the documents nor the server have."""
    if not owner or owner == MANAGED_BY_VALUE:
        raise ValueError(f"a plan needs an owner's name (not {owner!r})")
    desired = {resource.key: resource for resource in resources}
    problems = _missing_streams(desired.values(), live)
    if problems:
        raise PlanError(problems)
    changes: dict[ResourceKey, Change] = {}
    stream_limits = _desired_limits(desired.values())
    for key, resource in desired.items():
        change = _change_for(resource, owner, live, stream_limits, allow_replace, replace_hint)
        _check_owner(change, live, owner, adopt or resource.adopt, adopt_hint)
        changes[key] = change
    _cascade_stream_replaces(changes, live)
    if prune:
        _prune(changes, desired, live, owner)
    return Plan(changes=list(changes.values()), prune=prune, owner=owner)


def _check_owner(change: Change, live: LiveState, owner: str, adopt: bool, hint: str) -> None:
    """Refuse to change what another owner manages, unless adopting; say when an unmanaged
    resource is taken over."""
    current = live.owner(change.key) if live.config(change.key) is not None else owner
    if current == owner or change.action is Action.CREATE:
        return
    if current is None:
        change.reasons.append("takes over a resource nobody manages (no headwater.io/managed-by)")
        return
    if adopt:
        change.reasons.append(f"adopted from owner {current!r}")
        return
    change.conflict = current
    who = f"owner {current!r}"
    if current == MANAGED_BY_VALUE:
        who += " (written before owners had names: Terraform, the operator or another repository)"
    change.refused = f"managed by {who}, not by {owner!r}; to take it over, {hint}"


def _missing_streams(resources: Iterable[Resource], live: LiveState) -> list[str]:
    resources = list(resources)
    streams = {r.key.name for r in resources if r.key.kind == "Stream"}
    streams |= {
        live.stream_of(r.key) or "" for r in resources if r.key.kind in ("KeyValue", "ObjectStore")
    }
    problems = []
    for resource in resources:
        if isinstance(resource.spec, Consumer):
            stream = resource.spec.stream_name
            if stream not in streams and stream not in live.streams:
                problems.append(
                    f"{resource.file}: {resource.key}: spec.stream_name: stream {stream!r} is "
                    "neither in the documents nor on the server"
                )
    return problems


def _desired_limits(resources: Iterable[Resource]) -> dict[str, ConsumerLimits]:
    return {
        r.key.name: r.spec.consumer_limits
        for r in resources
        if r.key.kind == "Stream" and isinstance(r.spec, StreamFields)
    }


def _change_for(
    resource: Resource,
    owner: str,
    live: LiveState,
    stream_limits: Mapping[str, ConsumerLimits],
    allow_replace: bool,
    replace_hint: str,
) -> Change:
    spec, key = resource.spec.owned_by(owner), resource.key
    source = f"{resource.file}" + (f"#{resource.index + 1}" if resource.index else "")
    context: dict[str, Any] = {}
    if isinstance(spec, Consumer):
        limits = stream_limits.get(spec.stream_name) or live.consumer_limits(spec.stream_name)
        context["limits"] = limits
    if key.kind == "StreamTemplate" and not live.templates_supported:
        return Change(
            key,
            Action.CREATE,
            spec=spec,
            source=source,
            refused="this server has no stream templates (nats-server 2.14 removed them)",
        )
    config = live.config(key)
    if config is None:
        return Change(key, Action.CREATE, spec=spec, source=source)
    spec = spec.keeping(config)
    after = spec.comparable(control=True, **context)
    try:
        before = live.spec(key).comparable(control=False, **context)
    except (ValidationError, ValueError) as error:
        return Change(
            key,
            Action.UPDATE,
            spec=spec,
            source=source,
            refused=f"the live config does not parse as a {key.kind}: {error}",
        )
    fields = diff(before, after)
    if not fields:
        return Change(key, Action.NOOP, spec=spec, source=source)
    reasons = spec.replace_reasons(before, after)
    change = Change(
        key,
        Action.REPLACE if reasons else Action.UPDATE,
        fields=fields,
        reasons=reasons,
        spec=spec,
        source=source,
    )
    if spec.prevent_update:
        change.skipped = "preventUpdate: the server keeps its config"
    elif spec.drift_policy == "report":
        change.skipped = "driftPolicy report: drift is reported, not corrected"
    elif reasons:
        change.destructive = True
        if spec.prevent_delete or live.delete_prevented(key):
            change.refused = "replace deletes the resource, and preventDelete is set"
        elif not (allow_replace or resource.allow_replace):
            change.refused = (
                f"replace is destructive (delete and re-create); allow it with {replace_hint}"
            )
    return change


def _cascade_stream_replaces(changes: dict[ResourceKey, Change], live: LiveState) -> None:
    """A stream that is replaced loses its consumers: desired ones are created again, the
    others are gone with it."""
    for change in list(changes.values()):
        if change.action is not Action.REPLACE or change.skipped:
            continue
        if change.key.kind == "StreamTemplate":
            _template_streams_go(changes, live, change.key.name, "replaced")
        stream = live.stream_of(change.key)
        if stream is None:
            continue
        for (owner, name), _config in live.consumers.items():
            if owner != stream:
                continue
            key = ResourceKey("Consumer", name, owner)
            existing = changes.get(key)
            if existing is not None:
                existing.action = Action.CREATE
                existing.fields = []
                existing.reasons = [f"re-created: stream {stream} is replaced"]
                existing.refused = existing.skipped = ""
                existing.destructive = False
            else:
                changes[key] = Change(
                    key,
                    Action.DELETE,
                    reasons=[f"deleted with stream {stream}, which is replaced"],
                    destructive=True,
                    implicit=True,
                )


def _prune(
    changes: dict[ResourceKey, Change],
    desired: Mapping[ResourceKey, Resource],
    live: LiveState,
    owner: str,
) -> None:
    """Delete the live resources ``owner`` manages that no document names (consumers go with
    their stream)."""
    deleted_streams: set[str] = set()
    # A stream a desired consumer reads from stays, even if no document names the stream.
    needed = {key.stream for key in desired if key.kind == "Consumer"}
    for key in live.resource_keys():
        if key in desired or key in changes or key.kind == "Consumer":
            continue
        if live.stream_of(key) in needed:
            continue
        if not live.owned(key, owner):
            continue
        change = Change(key, Action.DELETE, reasons=["no document names it"], destructive=True)
        foreign = _foreign_consumers(live, live.stream_of(key), owner)
        if live.delete_prevented(key):
            change.skipped = "preventDelete: the server keeps it"
        elif foreign:
            change.skipped = f"kept: other owners manage consumers on it ({foreign})"
        else:
            stream = live.stream_of(key)
            if stream:
                deleted_streams.add(stream)
            if key.kind == "StreamTemplate":
                deleted_streams |= _template_streams_go(changes, live, key.name, "deleted")
        changes[key] = change
    for key in live.resource_keys():
        if key.kind != "Consumer" or key in desired or key in changes:
            continue
        if key.stream in deleted_streams:
            changes[key] = Change(
                key,
                Action.DELETE,
                reasons=[f"deleted with stream {key.stream}"],
                destructive=True,
                implicit=True,
            )
        elif live.owned(key, owner):
            change = Change(key, Action.DELETE, reasons=["no document names it"], destructive=True)
            if live.delete_prevented(key):
                change.skipped = "preventDelete: the server keeps it"
            changes[key] = change


def _foreign_consumers(live: LiveState, stream: str | None, owner: str) -> str:
    """The consumers on ``stream`` another named owner manages, as ``C by 'owner'``."""
    found = []
    for stream_name, name in sorted(live.consumers):
        if stream_name != stream:
            continue
        other = live.owner(ResourceKey("Consumer", name, stream_name))
        if other is not None and other != owner:
            found.append(f"{name} by {other!r}")
    return ", ".join(found)


def _template_streams_go(
    changes: dict[ResourceKey, Change], live: LiveState, template: str, why: str
) -> set[str]:
    """Deleting a template deletes the streams it created; show them going with it."""
    owned = {name for name, cfg in live.streams.items() if cfg.get("template_owner") == template}
    for name in sorted(owned):
        key = ResourceKey("Stream", name)
        changes.setdefault(
            key,
            Change(
                key,
                Action.DELETE,
                reasons=[f"created by template {template}, which is {why}"],
                destructive=True,
                implicit=True,
            ),
        )
    return owned
