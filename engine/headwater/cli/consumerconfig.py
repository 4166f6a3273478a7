"""Consumer configuration from flags, a ``--config`` file, or both (flags win).

Flags follow the ``nats`` CLI: ``--filter``, ``--ack``, ``--deliver``, ``--pull`` or
``--target SUBJECT``, ``--max-deliver``, ``--wait`` (ack wait), ``--replay``, ``--sample``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from headwater.cli import options
from headwater.cli.errors import CliError
from headwater.cli.options import AckPolicy, ReplayPolicy
from headwater.control import units

#: What ``add`` fills in when neither a flag nor the file says: the server's JSON zero for
#: ``ack_policy`` is ``none``, but every NATS client (and the nats CLI) defaults to explicit.
ADD_DEFAULTS: dict[str, Any] = {
    "ack_policy": "explicit",
    "deliver_policy": "all",
    "replay_policy": "instant",
}

_POLICIES = {
    "all": "all",
    "last": "last",
    "new": "new",
    "last_per_subject": "last_per_subject",
    "last-per-subject": "last_per_subject",
}


def deliver_fields(value: str) -> dict[str, Any]:
    """``--deliver``: a policy name, a stream sequence, an age (``1h`` ago) or a timestamp."""
    text = value.strip().lower()
    if text in _POLICIES:
        return {"deliver_policy": _POLICIES[text]}
    if text.isdigit():
        return {"deliver_policy": "by_start_sequence", "opt_start_seq": int(text)}
    try:
        start = datetime.now(UTC) - timedelta(microseconds=units.parse_duration(text) // 1000)
    except ValueError:
        try:
            start = datetime.fromisoformat(value.strip())
        except ValueError:
            raise CliError(
                f"invalid value for --deliver: {value!r}; use all, last, new, last_per_subject,"
                " a stream sequence, an age such as 1h, or an RFC 3339 time"
            ) from None
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
    return {
        "deliver_policy": "by_start_time",
        "opt_start_time": start.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    }


def filter_fields(filters: list[str]) -> dict[str, Any]:
    """One filter is ``filter_subject``, several are ``filter_subjects``; ``''`` is none."""
    subjects = [part for value in filters for part in value.replace(",", " ").split()]
    if len(subjects) > 1:
        return {"filter_subjects": subjects, "filter_subject": None}
    return {"filter_subject": subjects[0] if subjects else None, "filter_subjects": None}


@dataclass(frozen=True)
class ConsumerFlags:
    """The consumer flags a command received; None means "not given"."""

    filters: list[str] | None = None
    ack: AckPolicy | None = None
    deliver: str | None = None
    pull: bool = False
    target: str | None = None
    deliver_group: str | None = None
    max_deliver: int | None = None
    ack_wait: str | None = None
    replay: ReplayPolicy | None = None
    sample: int | None = None
    max_pending: int | None = None
    max_waiting: int | None = None
    heartbeat: str | None = None
    flow_control: bool | None = None
    headers_only: bool | None = None
    inactive_threshold: str | None = None
    description: str | None = None

    def overrides(self) -> dict[str, Any]:
        """The given flags as server JSON fields; a None value removes the field."""
        if self.pull and self.target:
            raise CliError("--pull and --target cannot be combined")
        if self.sample is not None and not 0 <= self.sample <= 100:
            raise CliError("invalid value for --sample: a percentage from 0 to 100")
        fields: dict[str, Any] = {
            "ack_policy": self.ack.value if self.ack else None,
            "deliver_subject": self.target,
            "deliver_group": self.deliver_group,
            "max_deliver": self.max_deliver,
            "ack_wait": options.duration("--wait", self.ack_wait),
            "replay_policy": self.replay.value if self.replay else None,
            "sample_freq": f"{self.sample}%" if self.sample else None,
            "max_ack_pending": self.max_pending,
            "max_waiting": self.max_waiting,
            "idle_heartbeat": options.duration("--heartbeat", self.heartbeat),
            "flow_control": self.flow_control,
            "headers_only": self.headers_only,
            "inactive_threshold": options.duration("--inactive-threshold", self.inactive_threshold),
            "description": self.description,
        }
        given = {key: value for key, value in fields.items() if value is not None}
        if self.pull:
            given["deliver_subject"] = None
        if self.deliver is not None:
            given.update({"opt_start_seq": None, "opt_start_time": None})
            given.update(deliver_fields(self.deliver))
        if self.filters is not None:
            given.update(filter_fields(self.filters))
        return given


def merged(base: dict[str, Any], flags: ConsumerFlags, name: str) -> dict[str, Any]:
    """``base`` with the flags on top, the durable name fixed, and removed fields dropped."""
    config = {**base, **flags.overrides(), "durable_name": name}
    if config.get("name") not in (None, name):
        config["name"] = name
    return {key: value for key, value in config.items() if value is not None}
