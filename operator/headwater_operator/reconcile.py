"""Reconcile one resource through the core: read live, plan, apply, and say what happened.

Two modes. ``apply`` is a handler reacting to the user (create, spec or annotation change,
operator restart): the spec is what the user wants now, so it is applied whatever
``driftPolicy`` says. ``sync`` is the timer: a difference it finds is drift (someone changed
the server behind the operator's back), corrected under ``driftPolicy: correct`` and only
reported under ``report``. In both modes the core's refusals stand: a destructive replace
needs the ``headwater.io/allow-replace`` annotation, and ``preventUpdate`` keeps the server's
config.

Every reconcile is planned as the resource's own owner (``ownership.owner_of``). An asset
another owner manages (``headwater.io/managed-by``, including the legacy value ``headwater``)
is a ``Conflict``: nothing is written to it. The ``headwater.io/adopt`` annotation takes it
over, but only in ``apply`` mode: a takeover is the user's act, and were the timer to honour a
standing annotation, two annotated resources naming one asset would take it from each other on
every sync.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum

from nats.aio.client import Client

from headwater.control.apply import Status, apply_plan
from headwater.control.documents import Resource
from headwater.control.models import ADOPT_ANNOTATION, Consumer
from headwater.control.plan import Action, Change, Plan, PlanError, make_plan
from headwater.control.render import field_lines
from headwater_operator.live import LiveRead, read_resource
from headwater_operator.ownership import ADOPT_HINT

SYNC_ADOPT_HINT = (
    f"edit the resource (the {ADOPT_ANNOTATION} annotation is honoured when the resource "
    "changes or the operator restarts, not by the sync timer)"
)
"""The hint of a Conflict the timer finds on a resource that carries the adopt annotation."""


WAITING = "Waiting"
"""The InSync reason of a Consumer whose stream does not exist yet: ordering, not an error."""


class Mode(StrEnum):
    APPLY = "apply"
    SYNC = "sync"


@dataclass(frozen=True)
class Condition:
    status: str
    """"True", "False" or "Unknown", as Kubernetes conditions spell it."""
    reason: str
    message: str = ""


@dataclass(frozen=True)
class Event:
    type: str
    """"Normal" or "Warning"."""
    reason: str
    message: str


@dataclass
class Outcome:
    """What one reconcile did: the conditions to write, the event to post, and the figures."""

    action: str
    ready: Condition
    in_sync: Condition
    event: Event | None = None
    drift: list[str] = field(default_factory=list)
    read: LiveRead | None = None
    retry: bool = False
    """A failure worth retrying (with backoff): the server refused or was not reachable."""


def _ready(read: LiveRead, what: str) -> Condition:
    if read.exists:
        return Condition("True", "Exists", f"{what} exists on the server")
    return Condition("False", "Missing", f"{what} does not exist on the server")


def _for_mode(resource: Resource, mode: Mode) -> tuple[Resource, str]:
    """``resource`` as ``mode`` plans it, and the hint a Conflict gives."""
    spec = resource.spec
    if mode is Mode.APPLY:
        if spec.drift_policy != "correct":
            # The user just asked for this spec: driftPolicy governs drift, not their own edits.
            spec = spec.model_copy(update={"drift_policy": "correct"})
            resource = dataclasses.replace(resource, spec=spec)
        return resource, ADOPT_HINT
    if not resource.adopt:
        return resource, ADOPT_HINT
    annotations = {k: v for k, v in resource.annotations.items() if k != ADOPT_ANNOTATION}
    return dataclasses.replace(resource, annotations=annotations), SYNC_ADOPT_HINT


async def reconcile(
    nc: Client, resource: Resource, mode: Mode, *, owner: str, timeout: float
) -> tuple[Outcome, Change | None]:
    """Plan as ``owner`` and (unless refused or only reported) apply ``resource``; the
    outcome, and the core's planned change (None when no plan could be made: a consumer's
    stream is missing)."""
    spec = resource.spec
    what = str(resource.key)
    resource, hint = _for_mode(resource, mode)
    read = await read_resource(nc, resource.spec, timeout=timeout)
    try:
        plan = make_plan([resource], read.state, owner=owner, adopt_hint=hint)
    except PlanError as error:
        # The core's words are for a set of documents; here it is one consumer waiting.
        message = "; ".join(error.problems)
        if isinstance(spec, Consumer):
            message = f"stream {spec.stream_name!r} does not exist on the server (yet)"
        return (
            Outcome(
                "waiting",
                Condition("False", "StreamMissing", message),
                Condition("False", WAITING, message),
                # Normal, as DeleteWaiting: the stream is expected to come (apply -f dir/).
                Event("Normal", WAITING, f"{what}: {message}; retrying"),
                read=read,
                retry=True,
            ),
            None,
        )
    change = next(c for c in plan.changes if c.key == resource.key)
    drift = field_lines(change) if change.action is not Action.CREATE else []
    if change.action is Action.NOOP:
        return (
            Outcome(
                "unchanged",
                _ready(read, what),
                Condition("True", "InSync", "the server matches the spec"),
                read=read,
            ),
            change,
        )
    previous = read.state.owner(resource.key) if read.exists else owner
    if change.conflict:
        # Another owner's asset: say whose, write nothing (Ready still tells what exists).
        return (
            Outcome(
                "conflict",
                _ready(read, what),
                Condition("False", "Conflict", change.refused),
                Event("Warning", "Conflict", f"{what}: {change.refused}"),
                drift=drift,
                read=read,
            ),
            change,
        )
    if change.refused:
        reason = "ReplaceRefused" if change.action is Action.REPLACE else "Refused"
        message = _with_reasons(change.refused, change)
        return (
            Outcome(
                "refused",
                _ready(read, what),
                Condition("False", reason, message),
                Event("Warning", reason, f"{what}: {message}"),
                drift=drift,
                read=read,
            ),
            change,
        )
    if change.skipped:
        reason = "UpdatePrevented" if spec.prevent_update else "DriftReported"
        message = _with_fields(change.skipped, drift)
        return (
            Outcome(
                "skipped",
                _ready(read, what),
                Condition("False", reason, message),
                Event("Warning", reason, f"{what}: {message}"),
                drift=drift,
                read=read,
            ),
            change,
        )
    if mode is Mode.SYNC and spec.drift_policy == "report":
        # Only a missing resource gets here (the core marks other drift skipped): report it.
        message = f"{what} is missing on the server; driftPolicy report leaves it missing"
        return (
            Outcome(
                "reported",
                _ready(read, what),
                Condition("False", "DriftReported", message),
                Event("Warning", "DriftReported", message),
                drift=["(missing on the server)"],
                read=read,
            ),
            change,
        )
    report = await apply_plan(nc, Plan([change]), timeout=timeout)
    result = next(r for r in report.results if r.change.key == resource.key)
    after = await read_resource(nc, resource.spec, timeout=timeout)
    if result.status is Status.FAILED:
        message = result.message
        return (
            Outcome(
                "failed",
                _ready(after, what),
                Condition("False", "ApplyFailed", f"{change.action.value} failed: {message}"),
                Event("Warning", "ApplyFailed", f"{what}: {change.action.value} failed: {message}"),
                drift=drift,
                read=after,
                retry=True,
            ),
            change,
        )
    action, reason, text = _applied(change, mode, owner, previous)
    in_sync = Condition("True", "InSync", "the server matches the spec")
    message = _with_fields(f"{what}: {text}", drift)
    return (
        Outcome(
            action, _ready(after, what), in_sync, Event("Normal", reason, message), drift, after
        ),
        change,
    )


def _applied(change: Change, mode: Mode, owner: str, previous: str | None) -> tuple[str, str, str]:
    """(action, event reason, message) of a change that was applied; ``previous`` is who
    managed the live resource before (None: nobody)."""
    if change.action is Action.CREATE:
        if mode is Mode.SYNC:
            return "recreated", "DriftCorrected", "missing on the server; re-created"
        return "created", "Created", "created"
    if change.action is Action.REPLACE:
        return (
            "replaced",
            "Replaced",
            "replaced (deleted and re-created): " + "; ".join(change.reasons),
        )
    if previous != owner:
        whose = f"from owner {previous!r}" if previous else "(nobody managed it)"
        return "adopted", "Adopted", f"an existing resource was adopted {whose} and updated"
    if mode is Mode.SYNC:
        return "corrected", "DriftCorrected", "changed on the server; the spec was re-applied"
    return "updated", "Updated", "updated"


def _with_reasons(text: str, change: Change) -> str:
    if change.reasons:
        return f"{text} ({'; '.join(change.reasons)})"
    return text


def _with_fields(text: str, fields: list[str]) -> str:
    if not fields:
        return text
    return f"{text}: {', '.join(fields)}"
