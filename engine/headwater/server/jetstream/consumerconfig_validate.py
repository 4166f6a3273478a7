"""Defaults and validation of a consumer config against its stream, as CONSUMER.CREATE does it.

The reference fills defaults first (``setConsumerConfigDefaults``; pedantic mode turns its
silent corrections into 10157 errors), then checks the config (``checkConsumerCfg``), then
decides what an existing consumer of that name means, then applies the work-queue rules. The
order matters because a config wrong in several ways must fail with the reference's first error,
so :func:`validate_consumer` follows it step by step (checked against nats-server 2.15.1).

Facts worth knowing (2.15.1): a filter outside the stream's subjects is accepted (10093 is no
longer raised); ``max_batch`` etc. on a push consumer and ``deliver_group`` on a pull consumer
are accepted; the 5s inactivity default of consumers without a durable name is stamped when
the consumer starts, so it is applied last (and a repeated ``action: create`` of such a consumer
fails with 10148 unless the request sets the threshold itself).

Intended differences: the ``flow_control`` ack policy (2.14) is refused at decode time, as a
2.12 server does; checks that need live state (a bound push deliver subject, account and server
limits, max consumers, store creation) belong to the consumer runtime.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from . import errors
from .consumerconfig import (
    DEFAULT_EPHEMERAL_INACTIVE,
    ConsumerConfig,
    consumer_api_level,
    is_durable,
)
from .consumerconfig_update import same_consumer_config, validate_consumer_update
from .gojson import go_quote
from .streamconfig import StreamConfig
from .streamconfig_sources import is_valid_asset_name
from .streamconfig_validate import go_duration
from .subject_overlap import CollisionIndex, SubsetIndex
from .subject_rules import (
    BAD_SUBJECT,
    is_subset_match,
    is_valid_subject,
    subject_is_literal,
)
from .versioning import with_static_metadata

__all__ = [
    "DEFAULT_ACK_WAIT",
    "DEFAULT_EPHEMERAL_INACTIVE",
    "DEFAULT_MAX_ACK_PENDING",
    "DEFAULT_MAX_WAITING",
    "DEFAULT_PINNED_TTL",
    "apply_consumer_defaults",
    "apply_ephemeral_default",
    "filters_of",
    "refuse_unsupported",
    "validate_consumer",
]

SECOND = 1_000_000_000
DEFAULT_ACK_WAIT = 30 * SECOND
DEFAULT_MAX_WAITING = 512
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_PINNED_TTL = 120 * SECOND
MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
MIN_HEARTBEAT = 100_000_000  # 100ms
MIN_MAX_EXPIRES = 1_000_000  # 1ms
_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}\Z")
_ATOI = re.compile(r"[+-]?[0-9]+\Z")


def _pedantic(text: str) -> errors.ApiErrorException:
    return errors.PEDANTIC.exc(err=text)


def _invalid(text: str) -> errors.ApiErrorException:
    return errors.STREAM_INVALID_CONFIG.exc(err=text)


def filters_of(cfg: ConsumerConfig) -> tuple[str, ...]:
    """The consumer's subject filters, whichever field holds them (empty: the whole stream)."""
    return (cfg.filter_subject,) if cfg.filter_subject else cfg.filter_subjects


# Negative values the reference clamps, with the value it clamps to and the pedantic error.
_CLAMPS: tuple[tuple[str, int, str], ...] = (
    ("max_waiting", 0, "max_waiting must not be negative"),
    ("max_ack_pending", -1, "max_ack_pending must be set to -1"),
    ("max_batch", 0, "max_batch must not be negative"),
    ("max_expires", 0, "max_expires must not be negative"),
    ("max_bytes", 0, "max_bytes must not be negative"),
    ("idle_heartbeat", 0, "idle_heartbeat must not be negative"),
    ("inactive_threshold", 0, "inactive_threshold must not be negative"),
    ("priority_timeout", 0, "priority_timeout must not be negative"),
)


def apply_consumer_defaults(
    cfg: ConsumerConfig, stream_cfg: StreamConfig, *, pedantic: bool = False
) -> ConsumerConfig:
    """The server's defaults for ``cfg`` on ``stream_cfg`` (reference order), without checks.

    ``max_deliver`` 0 (or below -1) -> -1; negative limits -> 0 (``max_ack_pending`` -> -1);
    pull consumers wait for 512 requests; explicit/all acks wait 30s, or ``backoff[0]`` when a
    backoff is set; ``max_ack_pending`` and ``inactive_threshold`` come from the stream's
    ``consumer_limits``, then ``max_ack_pending`` is 1000 unless acks are off; pinned-client
    groups time out after 2m. ``_nats.req.level`` is set in the metadata, rated on the request
    as sent. In pedantic mode a correction raises 10157.

    The 5s inactivity default of non-durable consumers is not applied here but by
    :func:`validate_consumer` (see :func:`apply_ephemeral_default`): the reference sets it when
    the consumer starts, after comparing the request with an existing consumer.
    """
    level = consumer_api_level(cfg)
    changes: dict[str, object] = {}
    if cfg.max_deliver == 0 or cfg.max_deliver < -1:
        if pedantic and cfg.max_deliver < -1:
            raise _pedantic("max_deliver must be set to -1")
        changes["max_deliver"] = -1
    for name, floor, text in _CLAMPS:
        value = getattr(cfg, name)
        if value < floor:
            if pedantic:
                raise _pedantic(text)
            changes[name] = floor
    cfg = msgspec.structs.replace(cfg, **changes)
    changes = {}
    if not cfg.deliver_subject and cfg.max_waiting == 0:
        changes["max_waiting"] = DEFAULT_MAX_WAITING
    ack_wait = cfg.ack_wait
    if ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        ack_wait = DEFAULT_ACK_WAIT
    if cfg.backoff:
        if pedantic and ack_wait != cfg.backoff[0]:
            raise _pedantic("first backoff value has to equal batch AckWait")
        ack_wait = cfg.backoff[0]
    changes["ack_wait"] = ack_wait
    limits = stream_cfg.consumer_limits
    max_ack_pending = cfg.max_ack_pending
    if max_ack_pending == 0:
        if pedantic and limits.max_ack_pending > 0:
            raise _pedantic("max_ack_pending must be set if it's configured in stream limits")
        max_ack_pending = limits.max_ack_pending
    inactive = cfg.inactive_threshold
    if inactive == 0:
        if pedantic and limits.inactive_threshold > 0:
            raise _pedantic("inactive_threshold must be set if it's configured in stream limits")
        inactive = limits.inactive_threshold
    if max_ack_pending == 0 and cfg.ack_policy != "none":
        max_ack_pending = DEFAULT_MAX_ACK_PENDING
    changes |= {"max_ack_pending": max_ack_pending, "inactive_threshold": inactive}
    if cfg.priority_policy == "pinned_client" and cfg.priority_timeout == 0:
        changes["priority_timeout"] = DEFAULT_PINNED_TTL
    changes["metadata"] = with_static_metadata(cfg.metadata, level)
    return msgspec.structs.replace(cfg, **changes)


def apply_ephemeral_default(cfg: ConsumerConfig) -> ConsumerConfig:
    """Consumers without a durable name are removed after 5s without interest by default."""
    if cfg.inactive_threshold == 0 and not is_durable(cfg):
        return msgspec.structs.replace(cfg, inactive_threshold=DEFAULT_EPHEMERAL_INACTIVE)
    return cfg


# --- checkConsumerCfg ----------------------------------------------------------------------


def _check_identity(cfg: ConsumerConfig, stream_cfg: StreamConfig) -> None:
    if cfg.name and not is_valid_asset_name(cfg.name):
        raise _invalid("consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.durable_name and not is_valid_asset_name(cfg.durable_name):
        raise _invalid("consumer durable name can not contain '.', '*', '>', '\\', '/'")
    stream_replicas = stream_cfg.num_replicas or 1
    if cfg.num_replicas > 0 and cfg.num_replicas > stream_replicas:
        raise errors.CONSUMER_REPLICAS_EXCEEDS_STREAM.exc()
    if cfg.num_replicas < 0:
        raise errors.REPLICAS_COUNT_CANNOT_BE_NEGATIVE.exc()
    if stream_cfg.retention in ("interest", "workqueue") and cfg.num_replicas not in (
        0,
        stream_replicas,
    ):
        raise errors.CONSUMER_REPLICAS_SHOULD_MATCH_STREAM.exc()


def _check_acks(cfg: ConsumerConfig) -> None:
    if any(b < 0 for b in cfg.backoff):
        raise errors.CONSUMER_BACK_OFF_NEGATIVE.exc()
    if cfg.ack_wait < 0:
        raise errors.CONSUMER_ACK_WAIT_NEGATIVE.exc()
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise errors.CONSUMER_MAX_DELIVER_BACKOFF.exc()
    if len(cfg.description.encode()) > MAX_DESCRIPTION_LEN:
        raise errors.CONSUMER_DESCRIPTION_TOO_LONG.exc(max=MAX_DESCRIPTION_LEN)


def _check_mode(cfg: ConsumerConfig, stream_cfg: StreamConfig, is_pull: bool) -> None:
    if not is_pull:
        deliver = cfg.deliver_subject
        if not subject_is_literal(deliver):
            raise errors.CONSUMER_DELIVER_TO_WILDCARDS.exc()
        if not is_valid_subject(deliver):
            raise errors.CONSUMER_INVALID_DELIVER_SUBJECT.exc()
        if any(is_subset_match(deliver, subject) for subject in stream_cfg.subjects):
            raise errors.CONSUMER_DELIVER_CYCLE.exc()
        if cfg.max_waiting != 0:
            raise errors.CONSUMER_PUSH_MAX_WAITING.exc()
        if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
            raise errors.CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED.exc()
        if 0 < cfg.idle_heartbeat < MIN_HEARTBEAT:
            raise errors.CONSUMER_SMALL_HEARTBEAT.exc()
        return
    if cfg.ack_policy == "none" and stream_cfg.retention == "workqueue":
        raise errors.CONSUMER_PULL_REQUIRES_ACK.exc()
    if cfg.rate_limit_bps > 0:
        raise errors.CONSUMER_PULL_WITH_RATE_LIMIT.exc()
    if cfg.max_waiting < 0:
        raise errors.CONSUMER_MAX_WAITING_NEGATIVE.exc()
    if cfg.idle_heartbeat > 0:
        raise errors.CONSUMER_HB_REQUIRES_PUSH.exc()
    if cfg.flow_control:
        raise errors.CONSUMER_FC_REQUIRES_PUSH.exc()
    if cfg.max_batch < 0:
        raise errors.CONSUMER_MAX_REQUEST_BATCH_NEGATIVE.exc()
    if cfg.max_expires != 0 and cfg.max_expires < MIN_MAX_EXPIRES:
        raise errors.CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL.exc()


def _check_limits(cfg: ConsumerConfig, stream_cfg: StreamConfig, is_pull: bool) -> None:
    limits = stream_cfg.consumer_limits
    if 0 < limits.max_ack_pending < cfg.max_ack_pending:
        raise errors.CONSUMER_MAX_PENDING_ACK_EXCESS.exc(limit=limits.max_ack_pending)
    if 0 < limits.inactive_threshold < cfg.inactive_threshold:
        limit = go_duration(limits.inactive_threshold)
        raise errors.CONSUMER_INACTIVE_THRESHOLD_EXCESS.exc(limit=limit)
    if cfg.direct:
        if is_pull:
            raise errors.CONSUMER_DIRECT_REQUIRES_PUSH.exc()
        if is_durable(cfg):
            raise errors.CONSUMER_DIRECT_REQUIRES_EPHEMERAL.exc()


def _check_filters(cfg: ConsumerConfig) -> None:
    if cfg.filter_subject and cfg.filter_subjects:
        raise errors.CONSUMER_DUPLICATE_FILTER_SUBJECTS.exc()
    if cfg.filter_subject and not is_valid_subject(cfg.filter_subject):
        raise _invalid(BAD_SUBJECT)
    if any(not f for f in cfg.filter_subjects):
        raise errors.CONSUMER_EMPTY_FILTER.exc()
    filters = filters_of(cfg)
    # The reference checks each filter's validity, then whether it is a subset of any other
    # filter, in order; a trie of all filters answers the second without comparing every pair.
    first_bad = next((i for i, f in enumerate(filters) if not is_valid_subject(f)), len(filters))
    if first_bad > 0 and len(filters) > 1:
        index = SubsetIndex(filters)
        for subject in filters[:first_bad]:
            index.remove(subject)  # "any other filter": not this copy of itself
            if index.is_subset(subject):
                raise errors.CONSUMER_OVERLAPPING_SUBJECT_FILTERS.exc()
            index.add(subject)
    if first_bad < len(filters):
        raise _invalid(BAD_SUBJECT)


_POLICY_WORDS = {
    "all": "all",
    "last": "last",
    "last_per_subject": "last per subject",
    "new": "new",
}


def _check_start(cfg: ConsumerConfig) -> None:
    def bad_start(policy: str, start: str) -> errors.ApiErrorException:
        text = (
            f"consumer delivery policy is deliver {policy}, but optional start {start} is also set"
        )
        return errors.CONSUMER_INVALID_POLICY.exc(err=text)

    def not_set(policy: str, missing: str) -> errors.ApiErrorException:
        text = f"consumer delivery policy is deliver {policy}, but optional {missing} is not set"
        return errors.CONSUMER_INVALID_POLICY.exc(err=text)

    policy = cfg.deliver_policy
    if policy in _POLICY_WORDS:
        words = _POLICY_WORDS[policy]
        if cfg.opt_start_seq > 0:
            raise bad_start(words, "sequence")
        if cfg.opt_start_time is not None:
            raise bad_start(words, "time")
        if policy == "last_per_subject" and not filters_of(cfg):
            raise not_set(words, "filter subject")
    elif policy == "by_start_sequence":
        if cfg.opt_start_seq == 0:
            raise not_set("by start sequence", "start sequence")
        if cfg.opt_start_time is not None:
            raise bad_start("by start sequence", "time")
    elif policy == "by_start_time":
        if cfg.opt_start_time is None:
            raise not_set("by start time", "start time")
        if cfg.opt_start_seq != 0:
            raise bad_start("by start time", "start sequence")


def _sampling_error(text: str) -> str | None:
    """The reference's 10095 detail for ``sample_freq`` (Go ``strconv.Atoi``), or None if ok."""
    digits = text.removesuffix("%")
    if not _ATOI.match(digits):
        return f"strconv.Atoi: parsing {go_quote(digits)}: invalid syntax"
    value = int(digits)
    if not -(2**63) <= value < 2**63:
        return f"strconv.Atoi: parsing {go_quote(digits)}: value out of range"
    return "<nil>" if value < 0 else None  # a negative rate fails with Go's nil error text


def _check_misc(cfg: ConsumerConfig, stream_cfg: StreamConfig) -> None:
    if cfg.sample_freq:
        detail = _sampling_error(cfg.sample_freq)
        if detail is not None:
            raise errors.CONSUMER_INVALID_SAMPLING.exc(err=detail)
    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise errors.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS.exc()
    if cfg.durable_name and cfg.name and cfg.durable_name != cfg.name:
        raise errors.CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH.exc()
    if sum(len(k.encode()) + len(v.encode()) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise errors.CONSUMER_METADATA_LENGTH.exc(limit=f"{MAX_METADATA_LEN // 1024}KB")
    if cfg.priority_policy != "none":
        if cfg.deliver_subject:
            raise errors.CONSUMER_PUSH_WITH_PRIORITY_GROUP.exc()
        if not cfg.priority_groups:
            raise errors.CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP.exc()
        for group in cfg.priority_groups:
            if not group:
                raise errors.CONSUMER_EMPTY_GROUP_NAME.exc()
            if not _GROUP_NAME.match(group):
                raise errors.CONSUMER_INVALID_GROUP_NAME.exc()
    else:
        if cfg.priority_groups:
            raise errors.CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE.exc()
        if cfg.priority_timeout > 0:
            raise errors.CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE.exc()
    if stream_cfg.placement is not None and stream_cfg.placement.preferred:
        raise _invalid("preferred server not permitted in placement")


# --- the create decision -------------------------------------------------------------------


def _partition_unique(filters: tuple[str, ...], others: list[ConsumerConfig]) -> bool:
    """No other consumer may see a subject ours sees (work-queue streams deliver once)."""
    if not filters:
        return True
    theirs = CollisionIndex()
    for other in others:
        their_filters = filters_of(other)
        if not their_filters:
            return False
        for filt in their_filters:
            theirs.add(filt)
    return not any(theirs.collides(subject) for subject in filters)


def validate_consumer(
    cfg: ConsumerConfig,
    stream_cfg: StreamConfig,
    *,
    is_pull: bool,
    existing: ConsumerConfig | None,
    action: str,
    others: Iterable[ConsumerConfig] = (),
) -> ConsumerConfig:
    """Check a defaulted ``cfg`` for ``stream_cfg``; return the config to store.

    ``is_pull`` is ``not cfg.deliver_subject``. ``existing`` is the stream's consumer of the
    same name, if any, and ``others`` the stream's other consumers (for the work-queue rules).
    ``action`` is the request's: ``"create"`` refuses a different existing config (10148),
    ``"update"`` a missing consumer (10149), ``""`` does either. An update returns
    :func:`.validate_consumer_update`'s result; a new consumer gets
    :func:`apply_ephemeral_default`. Raises ``ApiErrorException`` with the reference's first
    error; checks needing live state (max consumers, a bound deliver subject) are the caller's.
    """
    _check_identity(cfg, stream_cfg)
    _check_acks(cfg)
    _check_mode(cfg, stream_cfg, is_pull)
    _check_limits(cfg, stream_cfg, is_pull)
    _check_filters(cfg)
    _check_start(cfg)
    _check_misc(cfg, stream_cfg)
    workqueue = stream_cfg.retention == "workqueue"
    limitable = [o for o in others if not o.direct]
    if existing is not None:
        if action == "create" and not same_consumer_config(cfg, existing):
            raise errors.CONSUMER_ALREADY_EXISTS.exc()
        if workqueue and not _partition_unique(filters_of(cfg), limitable):
            raise errors.CONSUMER_WQ_CONSUMER_NOT_UNIQUE.exc()
        return validate_consumer_update(existing, cfg)
    if action == "update":
        raise errors.CONSUMER_DOES_NOT_EXIST.exc()
    if workqueue and not cfg.direct:
        if cfg.ack_policy != "explicit":
            raise errors.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK.exc()
        if cfg.deliver_policy != "all":
            raise errors.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL.exc()
        if limitable:
            if not filters_of(cfg):
                raise errors.CONSUMER_WQ_MULTIPLE_UNFILTERED.exc()
            if not _partition_unique(filters_of(cfg), limitable):
                raise errors.CONSUMER_WQ_CONSUMER_NOT_UNIQUE.exc()
    if len(cfg.durable_name.encode()) > MAX_NAME_LEN:
        raise errors.CONSUMER_NAME_TOO_LONG.exc(max=MAX_NAME_LEN)
    return apply_ephemeral_default(cfg)


def refuse_unsupported(cfg: ConsumerConfig) -> ConsumerConfig:
    """10052 for settings we parse but do not run yet; the API calls it after
    :func:`validate_consumer` (which stays the reference's decision), so every error the
    reference gives comes first.

    Priority groups (overflow, pinned client, prioritized) would be stored and shown while
    every pull request was served as if they were not there.
    """
    if cfg.priority_groups or cfg.priority_policy != "none":
        raise _invalid("consumer priority groups are not supported yet")
    return cfg
