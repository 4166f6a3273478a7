"""What a consumer update may change, following the reference's ``checkNewConsumerConfig``.

A CONSUMER.CREATE for a name that exists is an update (unless its action is ``create``). The
reference compares the two defaulted configs and refuses, with 10012 and its own text, any
change to the deliver policy, storage type, ``direct``, start sequence or time, ack or replay
policy, heartbeat, flow control, pull/push mode or ``max_waiting``; a backoff longer than
``max_deliver`` is 10116. Everything else (description, metadata, ack wait, backoff, filters,
limits, rate, sampling, headers-only, inactive threshold, replicas, deliver subject of a push
consumer, priority settings) may change.

A consumer keeps the durability it was created with: when an update clears
``inactive_threshold`` of a consumer created without a durable name, it gets the 5s default
again, even if the update names it durable (checked against 2.15.1).

``pause_until`` is not changed by an update: pausing has its own API (CONSUMER.PAUSE), and the
reference keeps the paused-until time of the existing consumer (checked against 2.15.1).
"""

from __future__ import annotations

import calendar
import re

import msgspec

from . import errors
from .consumerconfig import (
    DEFAULT_EPHEMERAL_INACTIVE,
    ConsumerConfig,
    consumer_api_level,
    is_durable,
)
from .versioning import DYNAMIC_METADATA_KEYS, REQUIRED_LEVEL_KEY, with_static_metadata

__all__ = ["same_consumer_config", "time_ns", "validate_consumer_update"]

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:Z|([+-])(\d{2}):(\d{2}))\Z"
)


def time_ns(text: str) -> int:
    """Nanoseconds since the Unix epoch of an RFC 3339 time (as Go's ``time.Time`` holds it)."""
    match = _RFC3339.match(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    frac, sign, off_h, off_m = match.groups()[6:]
    secs = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if sign is not None:
        offset = (int(off_h) * 60 + int(off_m)) * 60
        secs -= offset if sign == "+" else -offset
    nanos = int((frac or "0")[:9].ljust(9, "0"))
    return secs * 1_000_000_000 + nanos


def _same_time(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    return time_ns(a) == time_ns(b)


def _comparable(cfg: ConsumerConfig) -> ConsumerConfig:
    # Times compare as instants and server-owned metadata keys are not the client's to match.
    metadata = {
        k: v
        for k, v in cfg.metadata.items()
        if k not in DYNAMIC_METADATA_KEYS and k != REQUIRED_LEVEL_KEY
    }
    return msgspec.structs.replace(cfg, metadata=metadata, opt_start_time=None, pause_until=None)


def same_consumer_config(new: ConsumerConfig, existing: ConsumerConfig) -> bool:
    """True when ``new`` asks for exactly the config ``existing`` has (both defaulted)."""
    return (
        _comparable(new) == _comparable(existing)
        and _same_time(new.opt_start_time, existing.opt_start_time)
        and _same_time(new.pause_until, existing.pause_until)
    )


def _refuse(text: str) -> errors.ApiErrorException:
    return errors.CONSUMER_CREATE.exc(err=text)


def validate_consumer_update(old: ConsumerConfig, new: ConsumerConfig) -> ConsumerConfig:
    """The config that replaces ``old`` when ``new`` is requested for it, or raise.

    Both configs must already be defaulted and ``new`` validated. The result is ``new`` with
    ``old``'s ``pause_until``: times are compared as instants, but a time written differently
    (another UTC offset) is stored as written, as the reference stores it.
    """
    if not same_consumer_config(new, old):
        _check_changes(old, new)
    changes: dict[str, object] = {"pause_until": old.pause_until}
    # A changed threshold is re-stamped by the running consumer, which was created durable or
    # not: a consumer that was not durable gets the 5s default back.
    cleared = new.inactive_threshold == 0 != old.inactive_threshold
    if cleared and not is_durable(old):
        changes["inactive_threshold"] = DEFAULT_EPHEMERAL_INACTIVE
    return _relevel(msgspec.structs.replace(new, **changes))


def _check_changes(old: ConsumerConfig, new: ConsumerConfig) -> None:
    checks = (
        (old.deliver_policy != new.deliver_policy, "deliver policy can not be updated"),
        (old.mem_storage != new.mem_storage, "storage type can not be updated"),
        (old.direct != new.direct, "direct can not be updated"),
        (old.opt_start_seq != new.opt_start_seq, "start sequence can not be updated"),
        (not _same_time(old.opt_start_time, new.opt_start_time), "start time can not be updated"),
        (old.ack_policy != new.ack_policy, "ack policy can not be updated"),
        (old.replay_policy != new.replay_policy, "replay policy can not be updated"),
        (old.idle_heartbeat != new.idle_heartbeat, "heart beats can not be updated"),
        (old.flow_control != new.flow_control, "flow control can not be updated"),
    )
    for changed, text in checks:
        if changed:
            raise _refuse(text)
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            raise _refuse("can not update pull consumer to push based")
        if not new.deliver_subject:
            raise _refuse("can not update push consumer to pull based")
    if old.max_waiting != new.max_waiting:
        raise _refuse("max waiting can not be updated")
    if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
        raise errors.CONSUMER_MAX_DELIVER_BACKOFF.exc()


def _relevel(cfg: ConsumerConfig) -> ConsumerConfig:
    # Keeping the old pause time can change the API level the config requires.
    metadata = with_static_metadata(cfg.metadata, consumer_api_level(cfg))
    return msgspec.structs.replace(cfg, metadata=metadata)
