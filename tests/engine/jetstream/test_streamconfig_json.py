"""The config's JSON shape in responses, and round trips through storage and nats-py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from nats.js.api import StreamConfig as ClientConfig

from headwater.server.jetstream.streamconfig import (
    ConsumerLimits,
    ExternalStream,
    Placement,
    RePublish,
    StreamConfig,
    StreamSource,
    SubjectTransform,
    config_from_json,
    config_to_json,
    parse_stream_request,
)
from headwater.server.jetstream.streamconfig_update import validate_update
from headwater.server.jetstream.streamconfig_validate import apply_defaults

SEC = 1_000_000_000

# The reference's reply for CREATE {"name":"A"}, minus its own version metadata.
REFERENCE_DEFAULT = {
    "name": "A",
    "subjects": ["A"],
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 120_000_000_000,
    "compression": "none",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "consumer_limits": {},
    "allow_msg_ttl": False,
    "metadata": {"_nats.level": "1", "_nats.req.level": "0", "_nats.ver": "2.11.0"},
}


def test_default_config_shape_and_key_order() -> None:
    out = config_to_json(apply_defaults(StreamConfig(name="A")))
    assert out == REFERENCE_DEFAULT
    assert list(out) == list(REFERENCE_DEFAULT)


def test_stored_form_has_no_dynamic_metadata() -> None:
    out = config_to_json(apply_defaults(StreamConfig(name="A")), dynamic_metadata=False)
    assert out["metadata"] == {"_nats.req.level": "0"}


FULL = StreamConfig(
    name="F",
    description="full",
    subjects=("f.*",),
    retention="interest",
    max_consumers=2,
    max_msgs=3,
    max_bytes=4,
    max_age=5 * SEC,
    max_msgs_per_subject=6,
    max_msg_size=7,
    discard="new",
    storage="memory",
    num_replicas=1,
    no_ack=True,
    template_owner="T",
    duplicate_window=SEC,
    placement=Placement(cluster="c", tags=("x",)),
    mirror=StreamSource(
        name="O",
        opt_start_seq=2,
        opt_start_time="2024-01-01T00:00:00Z",
        filter_subject="o.>",
        external=ExternalStream("$JS.d.API", "dlv"),
    ),
    sources=(StreamSource(name="P", subject_transforms=(SubjectTransform("p.>", "q.>"),)),),
    compression="s2",
    first_seq=9,
    subject_transform=SubjectTransform("f.*", "g.$1"),
    republish=RePublish(src="f.*", dest="r.$1", headers_only=True),
    allow_direct=True,
    mirror_direct=True,
    discard_new_per_subject=True,
    sealed=True,
    deny_delete=True,
    deny_purge=True,
    allow_rollup_hdrs=True,
    consumer_limits=ConsumerLimits(inactive_threshold=SEC, max_ack_pending=8),
    allow_msg_ttl=True,
    subject_delete_marker_ttl=2 * SEC,
    allow_msg_counter=True,
    allow_atomic=True,
    allow_msg_schedules=True,
    persist_mode="async",
    metadata={"z": "1", "a": "2"},
)


def test_every_field_serializes_in_reference_order() -> None:
    out = config_to_json(FULL, dynamic_metadata=False)
    assert list(out) == [
        "name", "description", "subjects", "retention", "max_consumers", "max_msgs",
        "max_bytes", "max_age", "max_msgs_per_subject", "max_msg_size", "discard", "storage",
        "num_replicas", "no_ack", "template_owner", "duplicate_window", "placement", "mirror",
        "sources", "compression", "first_seq", "subject_transform", "republish", "allow_direct",
        "mirror_direct", "discard_new_per_subject", "sealed", "deny_delete", "deny_purge",
        "allow_rollup_hdrs", "consumer_limits", "allow_msg_ttl", "subject_delete_marker_ttl",
        "allow_msg_counter", "allow_atomic", "allow_msg_schedules", "persist_mode", "metadata",
    ]  # fmt: skip
    assert out["mirror"] == {
        "name": "O",
        "opt_start_seq": 2,
        "opt_start_time": "2024-01-01T00:00:00Z",
        "filter_subject": "o.>",
        "external": {"api": "$JS.d.API", "deliver": "dlv"},
    }
    assert out["sources"] == [{"name": "P", "subject_transforms": [{"src": "p.>", "dest": "q.>"}]}]
    assert out["republish"] == {"src": "f.*", "dest": "r.$1", "headers_only": True}
    assert out["consumer_limits"] == {"inactive_threshold": SEC, "max_ack_pending": 8}
    assert list(out["metadata"]) == ["a", "z"]


@pytest.mark.parametrize(
    ("cfg", "absent"),
    [
        (
            StreamConfig(name="A"),
            {
                "description",
                "subjects",
                "max_msg_size",
                "no_ack",
                "template_owner",
                "duplicate_window",
                "placement",
                "mirror",
                "sources",
                "first_seq",
                "subject_transform",
                "republish",
                "discard_new_per_subject",
                "subject_delete_marker_ttl",
                "allow_msg_counter",
                "allow_atomic",
                "allow_msg_schedules",
                "persist_mode",
            },
        ),
        (
            StreamConfig(name="A", republish=RePublish(dest="x")),
            {"republish.src", "republish.headers_only"},
        ),
        (
            StreamConfig(name="A", placement=Placement(cluster="c")),
            {"placement.tags", "placement.preferred"},
        ),
    ],
)
def test_omitempty_fields(cfg: StreamConfig, absent: set[str]) -> None:
    out = config_to_json(cfg, dynamic_metadata=False)
    for path in absent:
        head, _, tail = path.partition(".")
        assert (tail not in out[head]) if tail else (head not in out), path


def test_storage_round_trip() -> None:
    stored = json.loads(json.dumps(config_to_json(FULL, dynamic_metadata=False)))
    assert config_from_json(stored) == FULL


def test_request_round_trip_of_every_field() -> None:
    body = json.dumps(config_to_json(FULL, dynamic_metadata=False)).encode()
    assert parse_stream_request(body, "F") == (FULL, False)


ROUND_TRIPS: list[dict[str, Any]] = [
    {},
    {"subjects": ("a.*", "b"), "max_age": 3600 * SEC, "description": "d"},
    {"storage": "memory", "retention": "workqueue", "discard": "new", "compression": "s2"},
    {"allow_msg_ttl": True, "subject_delete_marker_ttl": 5 * SEC},
    {"max_msgs_per_subject": 5, "discard": "new", "discard_new_per_subject": True},
    {"republish": RePublish(src=">", dest="rp.>", headers_only=True), "allow_direct": True},
    {"consumer_limits": ConsumerLimits(inactive_threshold=30 * SEC, max_ack_pending=10)},
    {"placement": Placement(cluster="c", tags=("t",)), "metadata": {"owner": "me"}},
    {"subject_transform": SubjectTransform("S", "x.S"), "first_seq": 5, "no_ack": True},
]


@pytest.mark.parametrize("fields", ROUND_TRIPS)
def test_nats_py_round_trip_is_a_no_op_update(fields: dict[str, Any]) -> None:
    """nats-py reads the config from a response and sends ``as_dict()`` back on update."""
    stored = apply_defaults(StreamConfig(name="S", **fields))
    response = json.loads(json.dumps(config_to_json(stored)))
    client = ClientConfig.from_response(copy.deepcopy(response))
    assert client.name == "S"
    body = json.dumps(client.as_dict()).encode()
    cfg, pedantic = parse_stream_request(body, "S")
    assert pedantic is False
    assert validate_update(stored, cfg) == stored
