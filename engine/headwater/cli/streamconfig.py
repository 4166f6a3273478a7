"""Stream configuration from flags, a ``--config`` file, or both (flags win).

Flags follow the ``nats`` CLI (``nats stream add --help``); values use human units. Only flags
given on the command line enter the config, so the server fills in its own defaults and
``edit`` changes nothing that was not asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headwater.cli import options
from headwater.cli.options import Discard, Retention, Storage


def split_subjects(values: list[str] | None) -> list[str] | None:
    """``--subjects a,b --subjects c`` and ``--subjects "a b"`` both give ``[a, b, c]``."""
    if values is None:
        return None
    subjects = [part for value in values for part in value.replace(",", " ").split()]
    return subjects


@dataclass(frozen=True)
class StreamFlags:
    """The stream flags a command received; None means "not given"."""

    subjects: list[str] | None = None
    description: str | None = None
    storage: Storage | None = None
    retention: Retention | None = None
    discard: Discard | None = None
    max_msgs: str | None = None
    max_msgs_per_subject: str | None = None
    max_bytes: str | None = None
    max_age: str | None = None
    max_msg_size: str | None = None
    max_consumers: int | None = None
    dupe_window: str | None = None
    replicas: int | None = None
    ack: bool | None = None
    allow_rollup: bool | None = None
    deny_delete: bool | None = None
    deny_purge: bool | None = None
    allow_direct: bool | None = None

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
