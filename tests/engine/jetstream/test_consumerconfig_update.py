"""What a consumer update may change, and the create/update ``action`` semantics."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from headwater.server.jetstream.consumerconfig import ConsumerConfig
from headwater.server.jetstream.consumerconfig_update import (
    same_consumer_config,
    time_ns,
    validate_consumer_update,
)
from headwater.server.jetstream.consumerconfig_validate import (
    apply_consumer_defaults,
    validate_consumer,
)
from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.streamconfig import StreamConfig
from headwater.server.jetstream.streamconfig_validate import apply_defaults

SEC = 1_000_000_000
STREAM = apply_defaults(StreamConfig(name="S", subjects=("s.>",)))
T0 = "2024-01-01T00:00:00Z"


def _cfg(**fields: Any) -> ConsumerConfig:
    return apply_consumer_defaults(ConsumerConfig(**fields), STREAM)


def _error(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiErrorException) as info:
        call()
    return info.value.error.err_code, info.value.error.description


REFUSED: list[tuple[dict[str, Any], dict[str, Any], str]] = [
    ({}, {"deliver_policy": "new"}, "deliver policy can not be updated"),
    ({}, {"mem_storage": True}, "storage type can not be updated"),
    (
        {"deliver_subject": "d"},
        {"deliver_subject": "d", "direct": True},
        "direct can not be updated",
    ),
    (
        {"deliver_policy": "by_start_sequence", "opt_start_seq": 1},
        {"deliver_policy": "by_start_sequence", "opt_start_seq": 2},
        "start sequence can not be updated",
    ),
    (
        {"deliver_policy": "by_start_time", "opt_start_time": T0},
        {"deliver_policy": "by_start_time", "opt_start_time": "2024-01-02T00:00:00Z"},
        "start time can not be updated",
    ),
    ({}, {"ack_policy": "explicit"}, "ack policy can not be updated"),
    ({}, {"replay_policy": "original"}, "replay policy can not be updated"),
    (
        {"deliver_subject": "d"},
        {"deliver_subject": "d", "idle_heartbeat": SEC, "flow_control": True},
        "heart beats can not be updated",
    ),
    (
        {"deliver_subject": "d", "idle_heartbeat": SEC},
        {"deliver_subject": "d", "idle_heartbeat": SEC, "flow_control": True},
        "flow control can not be updated",
    ),
    ({}, {"deliver_subject": "d"}, "can not update pull consumer to push based"),
    ({"deliver_subject": "d"}, {}, "can not update push consumer to pull based"),
    ({}, {"max_waiting": 10}, "max waiting can not be updated"),
]


@pytest.mark.parametrize(("old", "new", "text"), REFUSED)
def test_refused_changes(old: dict[str, Any], new: dict[str, Any], text: str) -> None:
    call = lambda: validate_consumer_update(_cfg(**old), _cfg(**new))  # noqa: E731
    assert _error(call) == (10012, text)


def test_backoff_longer_than_max_deliver() -> None:
    old = _cfg(ack_policy="explicit", backoff=(SEC,))
    new = msgspec.structs.replace(old, backoff=(SEC, SEC), max_deliver=1)
    assert _error(lambda: validate_consumer_update(old, new))[0] == 10116


ALLOWED: list[dict[str, Any]] = [
    {"description": "y"},
    {"metadata": {"a": "b"}},
    {"max_batch": 5, "max_expires": SEC, "max_bytes": 10},
    {"headers_only": True},
    {"max_deliver": 5},
    {"filter_subjects": ("s.a", "s.b")},
    {"filter_subject": "s.a"},
    {"inactive_threshold": 7 * SEC},
    {"num_replicas": 1},
    {"priority_policy": "overflow", "priority_groups": ("A",)},
    {"sample_freq": "10"},
    {"max_ack_pending": 5},
]


@pytest.mark.parametrize("fields", ALLOWED)
def test_allowed_changes(fields: dict[str, Any]) -> None:
    new = _cfg(**fields)
    updated = validate_consumer_update(_cfg(), new)
    for name, value in fields.items():
        if name != "metadata":
            assert getattr(updated, name) == value
    assert updated.metadata["_nats.req.level"] == new.metadata["_nats.req.level"]


def test_push_deliver_subject_may_change() -> None:
    updated = validate_consumer_update(_cfg(deliver_subject="d"), _cfg(deliver_subject="e"))
    assert updated.deliver_subject == "e"


def test_ack_wait_and_backoff_may_change() -> None:
    old = _cfg(ack_policy="explicit")
    new = _cfg(ack_policy="explicit", backoff=(SEC, 2 * SEC))
    assert validate_consumer_update(old, new).ack_wait == SEC


def test_update_keeps_pause_until() -> None:
    old = _cfg(durable_name="D")
    new = _cfg(durable_name="D", pause_until="2099-01-01T00:00:00Z")
    updated = validate_consumer_update(old, new)
    assert updated.pause_until is None
    assert updated.metadata["_nats.req.level"] == "0"
    paused = _cfg(durable_name="D", pause_until="2099-01-01T00:00:00Z")
    assert validate_consumer_update(paused, old).pause_until == "2099-01-01T00:00:00Z"


def test_same_instant_written_differently_is_no_change() -> None:
    old = _cfg(deliver_policy="by_start_time", opt_start_time=T0)
    new = _cfg(deliver_policy="by_start_time", opt_start_time="2024-01-01T01:00:00+01:00")
    assert same_consumer_config(new, old)
    assert validate_consumer_update(old, new).opt_start_time == "2024-01-01T01:00:00+01:00"


def test_same_config_ignores_server_metadata() -> None:
    old = _cfg(metadata={"a": "b"})
    new = msgspec.structs.replace(old, metadata={"a": "b", "_nats.ver": "1"})
    assert same_consumer_config(new, old)
    assert not same_consumer_config(_cfg(metadata={"a": "c"}), old)


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:01.5Z", 1_500_000_000),
        ("1970-01-01T01:00:00+01:00", 0),
        ("1969-12-31T23:00:00-01:00", 0),
        ("2024-01-01T00:00:00.123456789Z", 1_704_067_200_123_456_789),
    ],
)
def test_time_ns(text: str, ns: int) -> None:
    assert time_ns(text) == ns


def test_time_ns_rejects_other_text() -> None:
    with pytest.raises(ValueError):
        time_ns("yesterday")


# --- actions -------------------------------------------------------------------------------


def _decide(cfg: ConsumerConfig, existing: ConsumerConfig | None, action: str) -> ConsumerConfig:
    return validate_consumer(cfg, STREAM, is_pull=True, existing=existing, action=action)


def test_update_of_missing_consumer() -> None:
    assert _error(lambda: _decide(_cfg(name="C"), None, "update")) == (
        10149,
        "consumer does not exist",
    )


@pytest.mark.parametrize("action", ["", "create"])
def test_create_of_missing_consumer(action: str) -> None:
    assert _decide(_cfg(durable_name="D"), None, action).durable_name == "D"


def test_create_identical_durable_is_idempotent() -> None:
    stored = _decide(_cfg(durable_name="D"), None, "create")
    assert _decide(_cfg(durable_name="D"), stored, "create") == stored


def test_create_different_is_refused() -> None:
    stored = _decide(_cfg(durable_name="D"), None, "create")
    call = lambda: _decide(_cfg(durable_name="D", max_deliver=3), stored, "create")  # noqa: E731
    assert _error(call) == (10148, "consumer already exists")


def test_create_again_refused_for_named_ephemeral() -> None:
    # The stored config carries the 5s inactivity default the request did not ask for.
    stored = _decide(_cfg(name="C"), None, "create")
    assert stored.inactive_threshold == 5 * SEC
    assert _error(lambda: _decide(_cfg(name="C"), stored, "create"))[0] == 10148
    assert _decide(_cfg(name="C"), stored, "") == stored


@pytest.mark.parametrize("action", ["", "update"])
def test_update_changes_existing(action: str) -> None:
    stored = _decide(_cfg(durable_name="D"), None, "")
    updated = _decide(_cfg(durable_name="D", description="x"), stored, action)
    assert updated.description == "x"


def test_update_is_checked_after_the_config() -> None:
    stored = _decide(_cfg(durable_name="D"), None, "")
    call = lambda: _decide(_cfg(durable_name="D", ack_wait=-1), stored, "update")  # noqa: E731
    assert _error(call)[0] == 10183


def test_cleared_threshold_of_non_durable_gets_default_back() -> None:
    stored = _decide(_cfg(name="D"), None, "")
    assert stored.inactive_threshold == 5 * SEC
    updated = validate_consumer_update(stored, _cfg(durable_name="D", name="D"))
    assert updated.inactive_threshold == 5 * SEC


def test_durable_threshold_stays_unset_when_unchanged() -> None:
    stored = _decide(_cfg(durable_name="D", name="D"), None, "")
    assert validate_consumer_update(stored, _cfg(name="D")).inactive_threshold == 0


def test_durable_threshold_can_be_cleared() -> None:
    stored = _decide(_cfg(durable_name="D", inactive_threshold=SEC), None, "")
    assert validate_consumer_update(stored, _cfg(durable_name="D")).inactive_threshold == 0
