"""Consumer configuration from flags, a ``--config`` file, or both (flags win).

Flags follow the ``nats`` CLI: ``--filter``, ``--ack``, ``--deliver``, ``--pull`` or
``--target SUBJECT``, ``--max-deliver``, ``--wait`` (ack wait), ``--replay``, ``--sample``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from headwater.cli import options
from headwater.cli.errors import CliError
from headwater.cli.options import AckPolicy, ReplayPolicy
from headwater.cli.streamconfig import Description
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


# The options of ``consumer add`` and ``edit``; the fields of ConsumerFlags below carry them,
# and :func:`headwater.cli.flaggroup.flag_group` hands them to typer.
Filter = Annotated[
    list[str] | None,
    typer.Option("--filter", help="Only messages on these subjects ('' for all)."),
]
AckOpt = Annotated[AckPolicy | None, typer.Option("--ack", help="Acknowledgement policy.")]
Deliver = Annotated[
    str | None,
    typer.Option("--deliver", help="Start: all, last, new, last_per_subject, a sequence, 1h."),
]
Pull = Annotated[bool, typer.Option("--pull", help="A pull consumer (the default).")]
Target = Annotated[str | None, typer.Option("--target", help="Push: the subject to deliver to.")]
DeliverGroup = Annotated[
    str | None, typer.Option("--deliver-group", help="Push: queue group of the subscribers.")
]
MaxDeliver = Annotated[
    int | None, typer.Option("--max-deliver", help="Deliveries per message (-1: unlimited).")
]
AckWait = Annotated[str | None, typer.Option("--wait", help="Ack wait before redelivery (30s).")]
Replay = Annotated[ReplayPolicy | None, typer.Option("--replay", help="Replay policy.")]
Sample = Annotated[int | None, typer.Option("--sample", help="Ack sampling percentage.")]
MaxPending = Annotated[
    int | None, typer.Option("--max-pending", help="Most unacknowledged messages.")
]
MaxWaiting = Annotated[int | None, typer.Option("--max-waiting", help="Pull: most waiting pulls.")]
Heartbeat = Annotated[
    str | None, typer.Option("--heartbeat", help="Push: idle heartbeat interval.")
]
FlowControl = Annotated[
    bool | None, typer.Option("--flow-control/--no-flow-control", help="Push: flow control.")
]
HeadersOnly = Annotated[
    bool | None, typer.Option("--headers-only/--no-headers-only", help="Deliver only headers.")
]
Inactive = Annotated[
    str | None, typer.Option("--inactive-threshold", help="Delete after this long idle.")
]


@dataclass(frozen=True)
class ConsumerFlags:
    """The consumer flags a command received; None means "not given"."""

    filters: Filter = None
    ack: AckOpt = None
    deliver: Deliver = None
    pull: Pull = False
    target: Target = None
    deliver_group: DeliverGroup = None
    max_deliver: MaxDeliver = None
    ack_wait: AckWait = None
    replay: Replay = None
    sample: Sample = None
    max_pending: MaxPending = None
    max_waiting: MaxWaiting = None
    heartbeat: Heartbeat = None
    flow_control: FlowControl = None
    headers_only: HeadersOnly = None
    inactive_threshold: Inactive = None
    description: Description = None

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
