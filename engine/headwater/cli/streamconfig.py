"""Stream configuration from flags, a ``--config`` file, or both (flags win).

Flags follow the ``nats`` CLI (``nats stream add --help``); values use human units. Only flags
given on the command line enter the config, so the server fills in its own defaults and
``edit`` changes nothing that was not asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from headwater.cli import options
from headwater.cli.options import Discard, Retention, Storage


def split_subjects(values: list[str] | None) -> list[str] | None:
    """``--subjects a,b --subjects c`` and ``--subjects "a b"`` both give ``[a, b, c]``."""
    if values is None:
        return None
    subjects = [part for value in values for part in value.replace(",", " ").split()]
    return subjects


# The options of ``stream add``, ``edit`` and ``cp`` (the nats CLI's names); the fields of
# StreamFlags below carry them, and :func:`headwater.cli.flaggroup.flag_group` hands them to typer.
Subjects = Annotated[
    list[str] | None,
    typer.Option("--subjects", help="Subjects to store; repeat or separate with commas."),
]
Description = Annotated[str | None, typer.Option("--description", help="Description.")]
StorageOpt = Annotated[Storage | None, typer.Option("--storage", help="Storage backend.")]
RetentionOpt = Annotated[
    Retention | None, typer.Option("--retention", help="Retention policy (work = workqueue).")
]
DiscardOpt = Annotated[
    Discard | None, typer.Option("--discard", help="What to drop when the stream is full.")
]
MaxMsgs = Annotated[str | None, typer.Option("--max-msgs", help="Message count limit (1M, -1).")]
MaxPerSubject = Annotated[
    str | None, typer.Option("--max-msgs-per-subject", help="Messages kept per subject.")
]
MaxBytes = Annotated[str | None, typer.Option("--max-bytes", help="Size limit (10GiB, -1).")]
MaxAge = Annotated[str | None, typer.Option("--max-age", help="Age limit (1y, 72h, -1).")]
MaxMsgSize = Annotated[str | None, typer.Option("--max-msg-size", help="Largest message.")]
MaxConsumers = Annotated[int | None, typer.Option("--max-consumers", help="Consumer limit.")]
DupeWindow = Annotated[
    str | None, typer.Option("--dupe-window", help="Duplicate tracking window (2m).")
]
Replicas = Annotated[int | None, typer.Option("--replicas", help="Number of replicas.")]
Ack = Annotated[
    bool | None, typer.Option("--ack/--no-ack", help="Acknowledge publishes (default yes).")
]
AllowRollup = Annotated[
    bool | None, typer.Option("--allow-rollup/--no-allow-rollup", help="Allow Nats-Rollup.")
]
DenyDelete = Annotated[
    bool | None, typer.Option("--deny-delete/--allow-delete", help="Refuse message deletes.")
]
DenyPurge = Annotated[
    bool | None, typer.Option("--deny-purge/--allow-purge", help="Refuse purges.")
]
AllowDirect = Annotated[
    bool | None, typer.Option("--allow-direct/--no-allow-direct", help="Allow direct get.")
]


@dataclass(frozen=True)
class StreamFlags:
    """The stream flags a command received; None means "not given"."""

    subjects: Subjects = None
    description: Description = None
    storage: StorageOpt = None
    retention: RetentionOpt = None
    discard: DiscardOpt = None
    max_msgs: MaxMsgs = None
    max_msgs_per_subject: MaxPerSubject = None
    max_bytes: MaxBytes = None
    max_age: MaxAge = None
    max_msg_size: MaxMsgSize = None
    max_consumers: MaxConsumers = None
    dupe_window: DupeWindow = None
    replicas: Replicas = None
    ack: Ack = None
    allow_rollup: AllowRollup = None
    deny_delete: DenyDelete = None
    deny_purge: DenyPurge = None
    allow_direct: AllowDirect = None

    def overrides(self) -> dict[str, Any]:
        """The given flags as server JSON fields."""
        fields: dict[str, Any] = {
            "subjects": split_subjects(self.subjects),
            "description": self.description,
            "storage": self.storage.value if self.storage else None,
            "retention": self.retention.wire if self.retention else None,
            "discard": self.discard.value if self.discard else None,
            "max_msgs": options.count("--max-msgs", self.max_msgs),
            "max_msgs_per_subject": options.count(
                "--max-msgs-per-subject", self.max_msgs_per_subject
            ),
            "max_bytes": options.size("--max-bytes", self.max_bytes),
            "max_age": options.duration("--max-age", self.max_age, unlimited_ok=True),
            "max_msg_size": options.size("--max-msg-size", self.max_msg_size),
            "max_consumers": self.max_consumers,
            "duplicate_window": options.duration("--dupe-window", self.dupe_window),
            "num_replicas": self.replicas,
            "no_ack": None if self.ack is None else not self.ack,
            "allow_rollup_hdrs": self.allow_rollup,
            "deny_delete": self.deny_delete,
            "deny_purge": self.deny_purge,
            "allow_direct": self.allow_direct,
        }
        return {key: value for key, value in fields.items() if value is not None}


def merged(base: dict[str, Any], flags: StreamFlags, name: str) -> dict[str, Any]:
    """``base`` (a file or the live config) with the flags on top and the name fixed."""
    return {**base, **flags.overrides(), "name": name}


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Fields whose value differs, as (field, before, after), sorted by field."""
    keys = sorted(set(before) | set(after))
    return [(k, before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)]
