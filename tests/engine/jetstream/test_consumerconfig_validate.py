"""Consumer defaults and the checks CONSUMER.CREATE makes against the stream."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.server.jetstream.consumerconfig import ConsumerConfig
from headwater.server.jetstream.consumerconfig_validate import (
    DEFAULT_EPHEMERAL_INACTIVE,
    apply_consumer_defaults,
    apply_ephemeral_default,
    filters_of,
    validate_consumer,
)
from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.streamconfig import ConsumerLimits, Placement, StreamConfig
from headwater.server.jetstream.streamconfig_validate import apply_defaults

SEC = 1_000_000_000
MS = 1_000_000

LIMITS = apply_defaults(StreamConfig(name="S", subjects=("s.>",)))
WORKQUEUE = apply_defaults(StreamConfig(name="W", subjects=("w.>",), retention="workqueue"))
INTEREST = apply_defaults(StreamConfig(name="I", subjects=("i.>",), retention="interest"))
CAPPED = apply_defaults(
    StreamConfig(
        name="L",
        subjects=("l.>",),
        consumer_limits=ConsumerLimits(inactive_threshold=10 * SEC, max_ack_pending=50),
    )
)


def _defaults(stream: StreamConfig = LIMITS, pedantic: bool = False, **fields: Any) -> Any:
    return apply_consumer_defaults(ConsumerConfig(**fields), stream, pedantic=pedantic)


def _validate(
    stream: StreamConfig = LIMITS,
    *,
    existing: ConsumerConfig | None = None,
    action: str = "",
    others: tuple[ConsumerConfig, ...] = (),
    **fields: Any,
) -> ConsumerConfig:
    cfg = apply_consumer_defaults(ConsumerConfig(**fields), stream)
    return validate_consumer(
        cfg,
        stream,
        is_pull=not cfg.deliver_subject,
        existing=existing,
        action=action,
        others=others,
    )


def _error(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiErrorException) as info:
        call()
    return info.value.error.err_code, info.value.error.description


# --- defaults --------------------------------------------------------------------------------


def test_pull_defaults() -> None:
    cfg = _defaults()
    assert (cfg.max_deliver, cfg.max_waiting, cfg.ack_wait, cfg.max_ack_pending) == (-1, 512, 0, 0)
    assert cfg.inactive_threshold == 0  # the ephemeral default comes later
    assert cfg.metadata == {"_nats.req.level": "0"}


@pytest.mark.parametrize("policy", ["explicit", "all"])
def test_acked_defaults(policy: str) -> None:
    cfg = _defaults(ack_policy=policy)
    assert (cfg.ack_wait, cfg.max_ack_pending) == (30 * SEC, 1000)


def test_push_has_no_max_waiting() -> None:
    assert _defaults(deliver_subject="d").max_waiting == 0


def test_backoff_sets_ack_wait() -> None:
    assert _defaults(ack_policy="explicit", backoff=(2 * SEC, 3 * SEC)).ack_wait == 2 * SEC
    assert _defaults(backoff=(2 * SEC,)).ack_wait == 2 * SEC


def test_stream_consumer_limits_are_defaults() -> None:
    cfg = _defaults(CAPPED, ack_policy="explicit")
    assert (cfg.max_ack_pending, cfg.inactive_threshold) == (50, 10 * SEC)
    assert _defaults(CAPPED).max_ack_pending == 50  # even without acks


def test_pinned_client_timeout() -> None:
    cfg = _defaults(priority_policy="pinned_client", priority_groups=("A",))
    assert cfg.priority_timeout == 120 * SEC
    assert cfg.metadata["_nats.req.level"] == "1"


def test_negatives_clamped() -> None:
    cfg = _defaults(
        max_deliver=-7,
        max_waiting=-1,
        max_ack_pending=-5,
        max_batch=-1,
        max_expires=-1,
        max_bytes=-1,
        idle_heartbeat=-1,
        inactive_threshold=-1,
        priority_timeout=-1,
    )
    assert cfg.max_deliver == -1
    assert cfg.max_ack_pending == -1
    assert cfg.max_waiting == 512
    assert (cfg.max_batch, cfg.max_expires, cfg.max_bytes, cfg.idle_heartbeat) == (0, 0, 0, 0)
    assert (cfg.inactive_threshold, cfg.priority_timeout) == (0, 0)
    assert cfg.metadata["_nats.req.level"] == "1"  # rated on the request as sent


@pytest.mark.parametrize(
    ("stream", "fields", "text"),
    [
        (LIMITS, {"max_deliver": -5}, "max_deliver must be set to -1"),
        (LIMITS, {"max_waiting": -1}, "max_waiting must not be negative"),
        (LIMITS, {"max_ack_pending": -2}, "max_ack_pending must be set to -1"),
        (LIMITS, {"max_batch": -1}, "max_batch must not be negative"),
        (LIMITS, {"max_expires": -1}, "max_expires must not be negative"),
        (LIMITS, {"max_bytes": -1}, "max_bytes must not be negative"),
        (LIMITS, {"idle_heartbeat": -1}, "idle_heartbeat must not be negative"),
        (LIMITS, {"inactive_threshold": -1}, "inactive_threshold must not be negative"),
        (LIMITS, {"priority_timeout": -1}, "priority_timeout must not be negative"),
        (
            LIMITS,
            {"ack_policy": "explicit", "backoff": (SEC,)},
            "first backoff value has to equal batch AckWait",
        ),
        (
            CAPPED,
            {"ack_policy": "explicit"},
            "max_ack_pending must be set if it's configured in stream limits",
        ),
        (
            CAPPED,
            {"max_ack_pending": 5},
            "inactive_threshold must be set if it's configured in stream limits",
        ),
    ],
)
def test_pedantic_refuses_corrections(
    stream: StreamConfig, fields: dict[str, Any], text: str
) -> None:
    code, description = _error(lambda: _defaults(stream, pedantic=True, **fields))
    assert (code, description) == (10157, f"pedantic mode: {text}")


def test_pedantic_accepts_explicit_values() -> None:
    cfg = _defaults(pedantic=True, ack_policy="explicit", ack_wait=SEC, backoff=(SEC,))
    assert cfg.ack_wait == SEC


def test_client_cannot_set_server_metadata() -> None:
    cfg = _defaults(metadata={"_nats.req.level": "9", "_nats.ver": "x", "k": "v"})
    assert cfg.metadata == {"_nats.req.level": "0", "k": "v"}


def test_ephemeral_inactivity_default() -> None:
    assert (
        apply_ephemeral_default(ConsumerConfig()).inactive_threshold == DEFAULT_EPHEMERAL_INACTIVE
    )
    assert apply_ephemeral_default(ConsumerConfig(name="N")).inactive_threshold == 5 * SEC
    assert apply_ephemeral_default(ConsumerConfig(durable_name="D")).inactive_threshold == 0
    assert _validate(name="N").inactive_threshold == 5 * SEC
    assert _validate(durable_name="D").inactive_threshold == 0


def test_filters_of() -> None:
    assert filters_of(ConsumerConfig(filter_subject="a")) == ("a",)
    assert filters_of(ConsumerConfig(filter_subjects=("a", "b"))) == ("a", "b")
    assert filters_of(ConsumerConfig()) == ()


# --- checkConsumerCfg ------------------------------------------------------------------------

T0 = "2024-01-01T00:00:00Z"
RULES: list[tuple[str, StreamConfig, dict[str, Any], int, str | None]] = [
    (
        "name",
        LIMITS,
        {"name": "a.b"},
        10052,
        "consumer name can not contain '.', '*', '>', '\\', '/'",
    ),
    ("name-space", LIMITS, {"name": "a b"}, 10052, None),
    (
        "durable",
        LIMITS,
        {"durable_name": "a*"},
        10052,
        "consumer durable name can not contain '.', '*', '>', '\\', '/'",
    ),
    ("replicas-exceed", LIMITS, {"num_replicas": 2}, 10126, None),
    ("replicas-negative", LIMITS, {"num_replicas": -1, "ack_wait": -1}, 10133, None),
    ("replicas-interest", INTEREST, {"num_replicas": 2}, 10126, None),
    ("backoff-negative", LIMITS, {"backoff": (-1,)}, 10184, None),
    ("ack-wait-negative", LIMITS, {"ack_wait": -1}, 10183, None),
    ("backoff-max-deliver", LIMITS, {"backoff": (SEC, SEC), "max_deliver": 1}, 10116, None),
    (
        "description",
        LIMITS,
        {"description": "d" * 4097},
        10107,
        "consumer description is too long, maximum allowed is 4096",
    ),
    ("deliver-wildcard", LIMITS, {"deliver_subject": "d.>"}, 10079, None),
    ("deliver-invalid", LIMITS, {"deliver_subject": "d..x"}, 10112, None),
    ("deliver-cycle", LIMITS, {"deliver_subject": "s.x.y"}, 10081, None),
    ("push-max-waiting", LIMITS, {"deliver_subject": "d", "max_waiting": 1}, 10080, None),
    ("push-ack-pending", LIMITS, {"deliver_subject": "d", "max_ack_pending": 1}, 10082, None),
    ("push-heartbeat", LIMITS, {"deliver_subject": "d", "idle_heartbeat": 99 * MS}, 10083, None),
    ("pull-wq-no-ack", WORKQUEUE, {}, 10084, None),
    ("pull-rate", LIMITS, {"rate_limit_bps": 1}, 10086, None),
    ("pull-heartbeat", LIMITS, {"idle_heartbeat": SEC}, 10088, None),
    ("pull-flow-control", LIMITS, {"flow_control": True}, 10089, None),
    ("pull-expires", LIMITS, {"max_expires": MS - 1}, 10115, None),
    (
        "limit-ack-pending",
        CAPPED,
        {"max_ack_pending": 51},
        10121,
        "consumer max ack pending exceeds system limit of 50",
    ),
    (
        "limit-inactive",
        CAPPED,
        {"max_ack_pending": 5, "inactive_threshold": 11 * SEC},
        10153,
        "consumer inactive threshold exceeds system limit of 10s",
    ),
    ("direct-pull", LIMITS, {"direct": True}, 10090, None),
    (
        "direct-durable",
        LIMITS,
        {"direct": True, "deliver_subject": "d", "durable_name": "D"},
        10091,
        None,
    ),
    ("filters-both", LIMITS, {"filter_subject": "a", "filter_subjects": ("b",)}, 10136, None),
    ("filter-invalid", LIMITS, {"filter_subject": "a..b"}, 10052, "invalid subject"),
    ("filters-empty", LIMITS, {"filter_subjects": ("a", "")}, 10139, None),
    ("filters-invalid", LIMITS, {"filter_subjects": ("a..b", "c")}, 10052, "invalid subject"),
    ("filters-overlap", LIMITS, {"filter_subjects": ("s.a", "s.*")}, 10138, None),
    (
        "all-with-seq",
        LIMITS,
        {"opt_start_seq": 1},
        10094,
        "consumer delivery policy is deliver all, but optional start sequence is also set",
    ),
    (
        "last-with-time",
        LIMITS,
        {"deliver_policy": "last", "opt_start_time": T0},
        10094,
        "consumer delivery policy is deliver last, but optional start time is also set",
    ),
    (
        "new-with-seq",
        LIMITS,
        {"deliver_policy": "new", "opt_start_seq": 1},
        10094,
        "consumer delivery policy is deliver new, but optional start sequence is also set",
    ),
    (
        "last-per-subject-unfiltered",
        LIMITS,
        {"deliver_policy": "last_per_subject"},
        10094,
        "consumer delivery policy is deliver last per subject, "
        "but optional filter subject is not set",
    ),
    (
        "by-seq-missing",
        LIMITS,
        {"deliver_policy": "by_start_sequence"},
        10094,
        "consumer delivery policy is deliver by start sequence, "
        "but optional start sequence is not set",
    ),
    (
        "by-seq-with-time",
        LIMITS,
        {"deliver_policy": "by_start_sequence", "opt_start_seq": 1, "opt_start_time": T0},
        10094,
        "consumer delivery policy is deliver by start sequence, "
        "but optional start time is also set",
    ),
    (
        "by-time-missing",
        LIMITS,
        {"deliver_policy": "by_start_time"},
        10094,
        "consumer delivery policy is deliver by start time, but optional start time is not set",
    ),
    (
        "by-time-with-seq",
        LIMITS,
        {"deliver_policy": "by_start_time", "opt_start_time": T0, "opt_start_seq": 2},
        10094,
        "consumer delivery policy is deliver by start time, "
        "but optional start start sequence is also set",
    ),
    (
        "sample-syntax",
        LIMITS,
        {"sample_freq": "x%"},
        10095,
        'failed to parse consumer sampling configuration: strconv.Atoi: parsing "x": '
        "invalid syntax",
    ),
    (
        "sample-negative",
        LIMITS,
        {"sample_freq": "-5"},
        10095,
        "failed to parse consumer sampling configuration: <nil>",
    ),
    (
        "sample-range",
        LIMITS,
        {"sample_freq": "99999999999999999999"},
        10095,
        "failed to parse consumer sampling configuration: strconv.Atoi: parsing "
        '"99999999999999999999": value out of range',
    ),
    ("fc-without-heartbeat", LIMITS, {"deliver_subject": "d", "flow_control": True}, 10108, None),
    ("durable-name-mismatch", LIMITS, {"durable_name": "A", "name": "B"}, 10132, None),
    (
        "metadata",
        LIMITS,
        {"metadata": {"k": "v" * (128 * 1024)}},
        10135,
        "consumer metadata exceeds maximum size of 128KB",
    ),
    (
        "priority-push",
        LIMITS,
        {"priority_policy": "overflow", "priority_groups": ("A",), "deliver_subject": "d"},
        10178,
        None,
    ),
    ("priority-no-group", LIMITS, {"priority_policy": "overflow"}, 10159, None),
    (
        "priority-empty-group",
        LIMITS,
        {"priority_policy": "overflow", "priority_groups": ("",)},
        10161,
        None,
    ),
    (
        "priority-bad-group",
        LIMITS,
        {"priority_policy": "overflow", "priority_groups": ("G" * 17,)},
        10162,
        None,
    ),
    ("groups-policy-none", LIMITS, {"priority_groups": ("A",)}, 10196, None),
    ("timeout-policy-none", LIMITS, {"priority_timeout": 1}, 10197, None),
    ("wq-ack-all", WORKQUEUE, {"ack_policy": "all"}, 10098, None),
    ("wq-deliver-new", WORKQUEUE, {"ack_policy": "explicit", "deliver_policy": "new"}, 10101, None),
    ("durable-too-long", LIMITS, {"durable_name": "D" * 256}, 10102, None),
]


@pytest.mark.parametrize(
    ("stream", "fields", "err_code", "description"),
    [rule[1:] for rule in RULES],
    ids=[rule[0] for rule in RULES],
)
def test_rules(
    stream: StreamConfig, fields: dict[str, Any], err_code: int, description: str | None
) -> None:
    code, text = _error(lambda: _validate(stream, **fields))
    assert code == err_code, text
    if description is not None:
        assert text == description


ACCEPTED: list[tuple[str, StreamConfig, dict[str, Any]]] = [
    ("plain", LIMITS, {}),
    ("push-max-batch", LIMITS, {"deliver_subject": "d", "max_batch": 3}),
    ("deliver-group-on-pull", LIMITS, {"deliver_group": "g"}),
    ("filter-outside-stream", LIMITS, {"filter_subject": "x.y"}),
    ("interest-no-ack", INTEREST, {"num_replicas": 1}),
    ("heartbeat-minimum", LIMITS, {"deliver_subject": "d", "idle_heartbeat": 100 * MS}),
    ("expires-minimum", LIMITS, {"max_expires": MS}),
    ("backoff-unlimited", LIMITS, {"backoff": (SEC, SEC, SEC)}),
    ("sample-percent", LIMITS, {"sample_freq": "100%"}),
    ("priority-groups", LIMITS, {"priority_policy": "prioritized", "priority_groups": ("a-b/_=",)}),
    (
        "last-per-subject",
        LIMITS,
        {"deliver_policy": "last_per_subject", "filter_subjects": ("s.a", "s.b")},
    ),
    ("by-time", LIMITS, {"deliver_policy": "by_start_time", "opt_start_time": T0}),
    ("wq-explicit", WORKQUEUE, {"ack_policy": "explicit", "num_replicas": 1}),
    (
        "push-flow-control",
        LIMITS,
        {"deliver_subject": "d", "flow_control": True, "idle_heartbeat": SEC},
    ),
]


@pytest.mark.parametrize(
    ("stream", "fields"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED]
)
def test_accepted(stream: StreamConfig, fields: dict[str, Any]) -> None:
    cfg = _validate(stream, **fields)
    for name, value in fields.items():
        assert getattr(cfg, name) == value


def test_preferred_placement_refused() -> None:
    stream = apply_defaults(StreamConfig(name="P", placement=Placement(preferred="n1")))
    assert _error(lambda: _validate(stream)) == (
        10052,
        "preferred server not permitted in placement",
    )


# --- work-queue uniqueness -------------------------------------------------------------------

EXPLICIT = {"ack_policy": "explicit"}


def _wq(**fields: Any) -> ConsumerConfig:
    return _validate(WORKQUEUE, **(EXPLICIT | fields))


@pytest.mark.parametrize(
    ("first", "second", "err_code"),
    [
        ({}, {}, 10099),
        ({}, {"filter_subject": "w.a"}, 10100),
        ({"filter_subject": "w.a"}, {}, 10099),
        ({"filter_subject": "w.*.x"}, {"filter_subject": "w.>"}, 10100),
        ({"filter_subject": "w.a.*"}, {"filter_subject": "w.*.b"}, 10100),
        ({"filter_subjects": ("w.a", "w.b")}, {"filter_subjects": ("w.c", "w.b")}, 10100),
    ],
)
def test_workqueue_overlaps(first: dict[str, Any], second: dict[str, Any], err_code: int) -> None:
    other = _wq(name="A", **first)
    assert _error(lambda: _wq(name="B", others=(other,), **second))[0] == err_code


def test_workqueue_disjoint_filters() -> None:
    other = _wq(name="A", filter_subject="w.a")
    cfg = _wq(name="B", filter_subjects=("w.b", "w.c.>"), others=(other,))
    assert cfg.filter_subjects == ("w.b", "w.c.>")


def test_workqueue_ignores_direct_consumers() -> None:
    direct = ConsumerConfig(name="X", deliver_subject="d", direct=True)
    assert _wq(name="B", others=(direct,)).name == "B"


def test_workqueue_update_must_stay_unique() -> None:
    a = _wq(name="A", filter_subject="w.a")
    b = _wq(name="B", filter_subject="w.b", others=(a,))
    call = lambda: _wq(name="B", filter_subject="w.a", existing=b, others=(a,))  # noqa: E731
    assert _error(call)[0] == 10100
