"""The server defaults a stream config gets, and how limits and pedantic mode change them."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.streamconfig import (
    Placement,
    RePublish,
    StreamConfig,
    StreamSource,
    SubjectTransform,
)
from headwater.server.jetstream.streamconfig_validate import (
    StreamLimits,
    apply_defaults,
    check_stream_config,
    go_duration,
)
from headwater.server.jetstream.versioning import (
    ADVERTISED_SERVER_VERSION,
    JS_API_LEVEL,
    with_dynamic_metadata,
    with_static_metadata,
)

SEC = 1_000_000_000
MINUTE = 60 * SEC


def test_bare_config_defaults() -> None:
    cfg = apply_defaults(StreamConfig(name="S"))
    assert cfg == StreamConfig(
        name="S",
        subjects=("S",),
        max_consumers=-1,
        max_msgs=-1,
        max_bytes=-1,
        max_msgs_per_subject=-1,
        max_msg_size=-1,
        num_replicas=1,
        duplicate_window=2 * MINUTE,
        metadata={"_nats.req.level": "0"},
    )
    assert (cfg.retention, cfg.storage, cfg.discard, cfg.compression) == (
        "limits",
        "file",
        "old",
        "none",
    )


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_msgs": -7, "max_bytes": 5}, {"max_msgs": -1, "max_bytes": 5}),
        ({"max_consumers": -1, "max_msg_size": 0}, {"max_consumers": -1, "max_msg_size": -1}),
        ({"num_replicas": 3}, {"num_replicas": 3}),
        ({"max_age": MINUTE}, {"duplicate_window": MINUTE}),
        ({"max_age": 3 * MINUTE}, {"duplicate_window": 2 * MINUTE}),
        ({"duplicate_window": SEC}, {"duplicate_window": SEC}),
        ({"subjects": ("a", "b")}, {"subjects": ("a", "b")}),
        ({"mirror": StreamSource(name="O")}, {"subjects": (), "duplicate_window": 0}),
        ({"sources": (StreamSource(name="O"),)}, {"subjects": (), "duplicate_window": 0}),
        (
            {"subject_delete_marker_ttl": SEC, "deny_purge": True},
            {"allow_msg_ttl": True, "allow_rollup_hdrs": True, "deny_purge": False},
        ),
        ({"allow_msg_schedules": True}, {"allow_rollup_hdrs": True}),
        ({"republish": RePublish(dest="r.>")}, {"republish": RePublish(src=">", dest="r.>")}),
        (
            {
                "subjects": ("in.>",),
                "subject_transform": SubjectTransform("in.>", "out.>"),
                "republish": RePublish(src=">", dest=">"),
            },
            {"republish": RePublish(src="out.>", dest="out.>")},
        ),
        ({"placement": Placement()}, {"placement": None}),
        ({"placement": Placement(cluster="c")}, {"placement": Placement(cluster="c")}),
        ({"allow_msg_ttl": True}, {"metadata": {"_nats.req.level": "1"}}),
        (
            {"metadata": {"a": "b", "_nats.ver": "9", "_nats.level": "9", "_nats.req.level": "7"}},
            {"metadata": {"a": "b", "_nats.req.level": "0"}},
        ),
    ],
)
def test_defaults(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    defaulted = apply_defaults(StreamConfig(name="S", **fields))
    for name, value in expected.items():
        assert getattr(defaulted, name) == value, name
    # check_stream_config fills the same defaults on a valid config.
    assert check_stream_config(StreamConfig(name="S", **fields)) == defaulted


def test_defaults_are_idempotent() -> None:
    once = apply_defaults(StreamConfig(name="S", max_age=MINUTE, allow_msg_ttl=True))
    assert apply_defaults(once) == once
    assert check_stream_config(once) == once


def test_server_duplicate_window_limit_caps_the_default() -> None:
    limits = StreamLimits(max_duplicate_window=MINUTE)
    assert apply_defaults(StreamConfig(name="S"), limits).duplicate_window == MINUTE
    assert check_stream_config(StreamConfig(name="S"), limits).duplicate_window == MINUTE
    with pytest.raises(ApiErrorException) as caught:
        check_stream_config(StreamConfig(name="S", duplicate_window=90 * SEC), limits)
    assert caught.value.error.description == (
        "duplicates window can not be larger then server limit of 1m0s"
    )


@pytest.mark.parametrize(
    ("cfg", "limits", "message"),
    [
        (StreamConfig(name="S", max_age=MINUTE), StreamLimits(), "cannot be bigger than max age"),
        (StreamConfig(name="S"), StreamLimits(max_duplicate_window=MINUTE), "higher than current"),
        (StreamConfig(name="S", max_bytes=-5), StreamLimits(), "max_bytes must be set to -1"),
        (
            StreamConfig(name="S", republish=RePublish(dest="x.>")),
            StreamLimits(),
            "can not be empty",
        ),
    ],
)
def test_pedantic_refuses_silent_corrections(
    cfg: StreamConfig, limits: StreamLimits, message: str
) -> None:
    check_stream_config(cfg, limits)  # accepted when not pedantic
    with pytest.raises(ApiErrorException) as caught:
        check_stream_config(cfg, limits, pedantic=True)
    assert caught.value.error.err_code == 10157
    assert caught.value.error.description.startswith("pedantic mode: ")
    assert message in caught.value.error.description


def test_pedantic_accepts_explicit_values() -> None:
    cfg = StreamConfig(name="S", max_age=MINUTE, duplicate_window=MINUTE, max_msgs=-1)
    assert check_stream_config(cfg, pedantic=True).duplicate_window == MINUTE


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (SEC, "1s"),
        (MINUTE, "1m0s"),
        (90 * SEC, "1m30s"),
        (2 * MINUTE, "2m0s"),
        (3600 * SEC, "1h0m0s"),
        (1500 * 1_000_000, "1.5s"),
        (100 * 1_000_000, "100ms"),
        (1_500, "1.5µs"),
        (7, "7ns"),
        (-SEC, "-1s"),
    ],
)
def test_go_duration(ns: int, text: str) -> None:
    assert go_duration(ns) == text


def test_static_and_dynamic_metadata() -> None:
    stored = with_static_metadata({"a": "b", "_nats.ver": "x", "_nats.other": "y"}, 1)
    assert stored == {"a": "b", "_nats.other": "y", "_nats.req.level": "1"}
    shown = with_dynamic_metadata(stored)
    assert shown["_nats.ver"] == ADVERTISED_SERVER_VERSION == "2.11.0"
    assert shown["_nats.level"] == str(JS_API_LEVEL) == "1"
    assert stored == {"a": "b", "_nats.other": "y", "_nats.req.level": "1"}, "not mutated"
