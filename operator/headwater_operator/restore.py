"""``spec.restore.from``: a missing stream comes back from a backup instead of empty.

The backup is a directory ``headwater stream backup`` wrote (``backup.json`` and
``stream.hwarc``), at a path the operator can read (a mounted volume). Before anything is sent
to the server the verifier's checks run on it (``headwater.verify.checks``, the same checks the
Spark job runs on each backup); a finding makes the resource ``BackupInvalid``, a permanent
error until the spec changes, and nothing is created. A clean backup is restored, and then the
resource is reconciled as usual: the spec's config is applied as an update where it differs
from the backed-up one, and a change that would need a replace is refused as always.

A stream that exists already is never restored over: ``restore`` is ignored, and the Ready
condition says so.

The stream is restored with the resource's owner in its ``headwater.io/managed-by`` (the
backed-up config may carry another owner's, or the legacy ``headwater``): it is this
resource's from the start, as a stream the operator creates is. Restored consumers keep the
metadata they were backed up with.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from headwater.control.backup import BackupError, read_backup, restore_stream
from headwater.control.documents import Resource
from headwater.control.models import MANAGED_BY_KEY, Stream
from headwater.verify.checks import verify_backup
from headwater.verify.findings import BackupReport
from headwater_operator.live import read_resource
from headwater_operator.reconcile import Condition, Event, Mode, Outcome, reconcile

BACKUP_INVALID = "BackupInvalid"
RESTORE_FAILED = "RestoreFailed"
STREAM_NAME_IN_USE = 10130
"""The server's answer to a restore whose stream exists: someone created it meanwhile."""
MAX_FINDINGS_SHOWN = 5


def restore_source(resource: Resource) -> str | None:
    """The backup directory ``spec.restore.from`` names, for a Stream that asks for one."""
    spec = resource.spec
    if isinstance(spec, Stream) and spec.restore is not None:
        return spec.restore.from_
    return None


def wants_restore(resource: Resource, mode: Mode) -> bool:
    """Restore where the operator would otherwise create the stream: always for a handler,
    and on the timer only under ``driftPolicy: correct`` (``report`` leaves a missing
    stream missing)."""
    if restore_source(resource) is None:
        return False
    return mode is Mode.APPLY or resource.spec.drift_policy == "correct"


def findings_text(report: BackupReport) -> str:
    """The findings in one line, the first few in full and a count of the rest."""
    shown = [
        f"{finding.kind}: {finding.detail}"
        + (f" (seq {finding.seq})" if finding.seq is not None else "")
        for finding in report.findings[:MAX_FINDINGS_SHOWN]
    ]
    rest = len(report.findings) - len(shown)
    if rest > 0:
        shown.append(f"and {rest} more")
    return "; ".join(shown)


def _invalid(what: str, directory: str, problem: str) -> Outcome:
    message = f"backup {directory} can not be restored: {problem}; nothing was created"
    condition = Condition("False", BACKUP_INVALID, message)
    event = Event("Warning", BACKUP_INVALID, f"{what}: {message}")
    return Outcome("invalid", condition, condition, event)


def _check_backup(resource: Resource, directory: str) -> tuple[str | None, dict[str, Any]]:
    """Why the backup can not be restored as this resource's stream (None when it can), and
    the backed-up config. Reads the whole archive: run it off the event loop."""
    report = verify_backup(directory)
    if not report.ok:
        return f"{len(report.findings)} finding(s): {findings_text(report)}", {}
    try:
        backup, _archive = read_backup(directory)
    except BackupError as error:
        return str(error), {}
    config = dict(backup["config"])
    name = str(config.get("name", ""))
    if name != resource.spec.server_name:
        # A restore keeps the backed-up name; another stream's backup is not this one's.
        return f"it holds stream {name!r}, the spec names {resource.spec.server_name!r}", config
    return None, config


def owned_config(config: dict[str, Any], owner: str) -> dict[str, Any]:
    """The backed-up stream config with ``owner`` as its owner."""
    metadata = {**(config.get("metadata") or {}), MANAGED_BY_KEY: owner}
    return {**config, "metadata": metadata}


async def reconcile_with_restore(
    nc: Client, resource: Resource, mode: Mode, *, owner: str, timeout: float
) -> Outcome:
    """Restore the stream from ``spec.restore.from`` when it is missing, then reconcile (both
    as ``owner``)."""
    directory = str(Path(restore_source(resource) or ""))
    what = str(resource.key)
    before = await read_resource(nc, resource.spec, timeout=timeout)
    if before.exists:
        outcome, _change = await reconcile(nc, resource, mode, owner=owner, timeout=timeout)
        return _noted(outcome, f"spec.restore ignored: {what} existed on the server")
    problem, config = await asyncio.to_thread(_check_backup, resource, directory)
    if problem is not None:
        return _invalid(what, directory, problem)
    try:
        # _check_backup has read and checked the whole archive already: a second pass here
        # would only double the time a large restore takes.
        info = await restore_stream(
            nc, directory, config=owned_config(config, owner), timeout=timeout
        )
    except BackupError as error:
        if error.err_code != STREAM_NAME_IN_USE:
            message = f"restore from {directory} failed: {error}"
            failed = Condition("False", RESTORE_FAILED, message)
            return Outcome(
                "failed", failed, failed, Event("Warning", RESTORE_FAILED, message), retry=True
            )
        # Created meanwhile (by someone else): it exists now, so restore no longer applies.
        outcome, _change = await reconcile(nc, resource, mode, owner=owner, timeout=timeout)
        return _noted(outcome, f"spec.restore ignored: {what} was created meanwhile")
    state = info.get("state") or {}
    restored = (
        f"{what}: restored from {directory} ({state.get('messages', 0)} messages, "
        f"{state.get('consumer_count', 0)} consumers)"
    )
    outcome, _change = await reconcile(nc, resource, mode, owner=owner, timeout=timeout)
    return _after_restore(outcome, restored, what)


def _noted(outcome: Outcome, note: str) -> Outcome:
    """``outcome`` with ``note`` on its Ready condition: how status says restore was skipped."""
    ready = dataclasses.replace(outcome.ready, message=f"{outcome.ready.message}; {note}")
    return dataclasses.replace(outcome, ready=ready)


def _after_restore(outcome: Outcome, restored: str, what: str) -> Outcome:
    """The reconcile that followed a restore, with the restore in its condition and event
    (one event per reconcile: a warning from the follow-up, a refused replace, stays one)."""
    event = outcome.event
    if event is None:
        event = Event("Normal", "Restored", restored)
    else:
        reason = "Restored" if event.type == "Normal" else event.reason
        then = event.message.removeprefix(f"{what}: ")
        event = Event(event.type, reason, f"{restored}; then {then}")
    ready = outcome.ready
    if ready.status == "True":
        ready = Condition("True", "Restored", restored)
    action = "restored" if outcome.action in ("unchanged", "updated", "adopted") else outcome.action
    return dataclasses.replace(outcome, action=action, ready=ready, event=event)
