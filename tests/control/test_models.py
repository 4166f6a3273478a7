"""Specs: both spellings, human units, server defaults, errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from headwater.control.models import (
    KINDS,
    MANAGED_BY_KEY,
    Consumer,
    KeyValue,
    ObjectStore,
    Stream,
    StreamTemplate,
    json_schema,
)
from headwater.control.models.common import ConsumerLimits

DAY = 24 * 3600 * 10**9


def error_fields(failure: ValidationError) -> list[str]:
    return [".".join(str(part) for part in e["loc"]) for e in failure.errors()]


def test_stream_snake_and_camel_are_the_same() -> None:
    snake = Stream(
        name="ORDERS",
        subjects=["ORDERS.*"],
        max_age="1y",
        max_msgs_per_subject="10K",
        duplicate_window="1m",
        num_replicas=1,
        deny_delete=True,
        allow_rollup_hdrs=True,
        discard="new",
        discard_new_per_subject=True,
        first_seq=5,
        allow_atomic=True,
        max_bytes="10GiB",
    )
    camel = Stream.model_validate(
        {
            "name": "ORDERS",
            "subjects": ["ORDERS.*"],
            "maxAge": "1y",
            "maxMsgsPerSubject": "10K",
            "duplicateWindow": "1m",
            "replicas": 1,
            "denyDelete": True,
            "allowRollup": True,
            "discard": "new",
            "discardPerSubject": True,
            "firstSequence": 5,
            "allowAtomicPublish": True,
            "maxBytes": "10GiB",
        }
    )
    assert snake == camel
    config = camel.to_server_config(control=False)
    assert config["max_age"] == 365 * DAY
    assert config["max_msgs_per_subject"] == 10_000
    assert config["max_bytes"] == 10 * 1024**3
    assert config["duplicate_window"] == 60 * 10**9
    assert config["allow_atomic"] is True


def test_consumer_snake_and_nack_names() -> None:
    nack = Consumer.model_validate(
        {
            "streamName": "ORDERS",
            "durableName": "NEW",
            "deliverPolicy": "byStartSequence",
            "optStartSeq": 10,
            "ackWait": "1m",
            "filterSubject": "ORDERS.received",
            "maxRequestBatch": 10,
            "maxRequestExpires": "30s",
            "maxRequestMaxBytes": "1MiB",
            "replicas": 1,
            "memStorage": True,
            "sampleFreq": "100",
            "maxDeliver": 20,
            "inactiveThreshold": "1h",
        }
    )
    snake = Consumer(
        stream_name="ORDERS",
        durable_name="NEW",
        deliver_policy="by_start_sequence",
        opt_start_seq=10,
        ack_wait=60 * 10**9,
        filter_subject="ORDERS.received",
        max_batch=10,
        max_expires="30s",
        max_bytes=1024**2,
        num_replicas=1,
        mem_storage=True,
        sample_freq=100,
        max_deliver=20,
        inactive_threshold="1h",
    )
    assert nack == snake
    assert nack.key.stream == "ORDERS" and nack.server_name == "NEW"


def test_nack_heartbeat_and_pinned_names() -> None:
    push = Consumer.model_validate(
        {
            "streamName": "S",
            "durableName": "P",
            "deliverSubject": "out",
            "heartbeatInterval": "5s",
            "flowControl": True,
        }
    )
    assert push.idle_heartbeat == 5 * 10**9
    pull = Consumer.model_validate(
        {
            "streamName": "S",
            "durableName": "Q",
            "priorityPolicy": "pinned_client",
            "priorityGroups": ["g"],
            "pinnedTtl": "1m",
        }
    )
    assert pull.priority_timeout == 60 * 10**9


def test_stream_defaults_are_the_servers() -> None:
    config = Stream(name="S").to_server_config(control=False)
    assert config == {
        "name": "S",
        "subjects": ["S"],
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
        "duplicate_window": 120 * 10**9,
        "compression": "none",
        "allow_direct": False,
        "mirror_direct": False,
        "sealed": False,
        "deny_delete": False,
        "deny_purge": False,
        "allow_rollup_hdrs": False,
        "consumer_limits": {},
        "allow_msg_ttl": False,
    }
    # The duplicate window follows a shorter max_age, as the server sets it.
    assert Stream(name="S", max_age="30s").to_server_config()["duplicate_window"] == 30 * 10**9
    assert "duplicate_window" not in Stream(name="S").request_config()


def test_consumer_defaults_are_the_servers() -> None:
    pull = Consumer(stream_name="S", durable_name="C").to_server_config(control=False)
    assert pull == {
        "durable_name": "C",
        "name": "C",
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "max_deliver": -1,
        "replay_policy": "instant",
        "num_replicas": 0,
        "ack_wait": 30 * 10**9,
        "max_waiting": 512,
        "max_ack_pending": 1000,
    }
    push = Consumer(stream_name="S", durable_name="C", deliver_subject="out", ack_policy="none")
    config = push.to_server_config(control=False)
    assert "max_waiting" not in config and "ack_wait" not in config
    assert "max_ack_pending" not in config
    limited = Consumer(stream_name="S", durable_name="C").to_server_config(
        limits=ConsumerLimits(max_ack_pending=50, inactive_threshold=10**9)
    )
    assert limited["max_ack_pending"] == 50 and limited["inactive_threshold"] == 10**9
    backoff = Consumer(stream_name="S", durable_name="C", backoff=["1s", "10s"], max_deliver=3)
    assert backoff.to_server_config()["ack_wait"] == 10**9
    # What the server derives is not sent, so the server's own rules decide it.
    request = Consumer(stream_name="S", durable_name="C").request_config()
    assert "max_ack_pending" not in request and "ack_wait" not in request


def test_ownership_marker() -> None:
    """The marker names the owner a spec is written for; a spec nobody owns writes none."""
    assert not Stream(name="S").to_server_config().get("metadata")
    owned = Stream(name="S").owned_by("terraform:prod")
    assert owned.to_server_config()["metadata"] == {MANAGED_BY_KEY: "terraform:prod"}
    assert owned.request_config()["metadata"] == {MANAGED_BY_KEY: "terraform:prod"}
    guarded = Stream(name="S", preventDelete=True).owned_by("cli").to_server_config()["metadata"]
    assert guarded == {MANAGED_BY_KEY: "cli", "headwater.io/prevent-delete": "true"}


def test_server_config_round_trip() -> None:
    live = {
        "name": "S",
        "subjects": ["a.>"],
        "retention": "workqueue",
        "max_consumers": 0,
        "max_msgs": 100,
        "max_bytes": -1,
        "max_age": DAY,
        "storage": "memory",
        "num_replicas": 1,
        "duplicate_window": 60 * 10**9,
        "future_field": True,
        "metadata": {"_nats.ver": "2.15.1", "team": "a"},
    }
    spec = Stream.from_server_config(live)
    assert spec.max_consumers == -1 and spec.metadata == {"team": "a"}
    again = Stream.from_server_config(spec.to_server_config(control=False))
    assert again == spec


@pytest.mark.parametrize(
    ("kind", "spec", "field", "text"),
    [
        (Stream, {"name": "S", "maxAge": "soon"}, "max_age", "invalid duration"),
        (Stream, {"name": "S", "maxBytes": "lots"}, "max_bytes", "invalid size"),
        (Stream, {"name": "S", "storage": "disk"}, "storage", "'file' or 'memory'"),
        (Stream, {"name": "S.x"}, "name", "must not contain '.'"),
        (Stream, {"name": "S", "subjects": ["a..b"]}, "subjects", "empty token"),
        (Stream, {"name": "S", "maxAge": 1, "max_age": 2}, "", "same field"),
        (Stream, {"name": "S", "unknownThing": 1}, "unknownThing", "Extra inputs"),
        (Stream, {"name": "S", "replicas": 7}, "num_replicas", "less than or equal to 5"),
        (
            Consumer,
            {"streamName": "S", "durableName": "C", "ackPolicy": "maybe"},
            "ack_policy",
            "Input should be",
        ),
        (
            Consumer,
            {"streamName": "S", "durableName": "C", "filterSubject": "a", "filterSubjects": ["b"]},
            "",
            "filter_subject and filter_subjects",
        ),
        (Consumer, {"streamName": "S"}, "", "durable_name is required"),
        (
            Consumer,
            {"streamName": "S", "durableName": "C", "deliverPolicy": "byStartSequence"},
            "",
            "needs opt_start_seq",
        ),
        (
            Consumer,
            {"streamName": "S", "durableName": "C", "deliverSubject": "x", "maxWaiting": 3},
            "",
            "max_waiting is for pull consumers",
        ),
        (
            Consumer,
            {"streamName": "S", "durableName": "C", "flowControl": True},
            "",
            "flow_control is for push consumers",
        ),
        (
            Consumer,
            {"streamName": "S", "durableName": "C", "pauseUntil": "tomorrow"},
            "pause_until",
            "RFC 3339",
        ),
        (KeyValue, {"bucket": "b", "history": 100}, "history", "less than or equal to 64"),
        (KeyValue, {"bucket": "b.c"}, "bucket", "should match pattern"),
        (
            StreamTemplate,
            {"name": "T", "maxStreams": 1, "config": {"name": "X", "subjects": ["a.*"]}},
            "config.name",
            "must not name a stream",
        ),
    ],
)
def test_errors_name_the_field(
    kind: type[Any], spec: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(ValidationError) as failure:
        kind.model_validate(spec)
    assert field in error_fields(failure.value)
    assert text in str(failure.value)


def test_kv_and_object_store_stream_layout() -> None:
    kv = KeyValue(name="cfg", history=5, ttl="1h", maxValueSize="1KiB", compression=True)
    config = kv.to_server_config(control=False)
    assert config["name"] == "KV_cfg" and config["subjects"] == ["$KV.cfg.>"]
    assert config["max_msgs_per_subject"] == 5 and config["max_msg_size"] == 1024
    assert (config["allow_rollup_hdrs"], config["deny_delete"], config["discard"]) == (
        True,
        True,
        "new",
    )
    assert config["compression"] == "s2" and config["allow_direct"] is True
    assert KeyValue.from_server_config(config) == kv
    obj = ObjectStore(bucket="files", maxBytes="1GiB")
    config = obj.to_server_config(control=False)
    assert config["subjects"] == ["$O.files.C.>", "$O.files.M.>"]
    assert ObjectStore.from_server_config(config) == obj


def test_kv_mirror_and_sources_use_stream_names() -> None:
    mirror = KeyValue(bucket="copy", mirror={"name": "origin"})
    config = mirror.to_server_config()
    assert config["mirror"] == {"name": "KV_origin"} and "subjects" not in config
    sourced = KeyValue(bucket="all", sources=[{"name": "a"}])
    (source,) = sourced.to_server_config()["sources"]
    assert source == {
        "name": "KV_a",
        "subject_transforms": [{"src": "$KV.a.>", "dest": "$KV.all.>"}],
    }


def test_nack_source_and_republish_spelling() -> None:
    stream = Stream.model_validate(
        {
            "name": "S",
            "sources": [
                {
                    "name": "O",
                    "externalApiPrefix": "$JS.hub.API",
                    "externalDeliverPrefix": "deliver.hub",
                    "subjectTransforms": [{"source": "a.>", "dest": "b.>"}],
                    "optStartTime": "2026-01-02T03:04:05+01:00",
                }
            ],
            "republish": {"source": "S.>", "destination": "re.>"},
            "subjectTransform": {"source": "x.>", "dest": "y.>"},
        }
    )
    config = stream.to_server_config()
    assert config["sources"] == [
        {
            "name": "O",
            "opt_start_time": "2026-01-02T02:04:05Z",
            "subject_transforms": [{"src": "a.>", "dest": "b.>"}],
            "external": {"api": "$JS.hub.API", "deliver": "deliver.hub"},
        }
    ]
    assert config["republish"] == {"src": "S.>", "dest": "re.>"}
    assert config["subject_transform"] == {"src": "x.>", "dest": "y.>"}


def test_replace_rules() -> None:
    stream = Stream(name="S")
    before = stream.comparable()
    assert stream.replace_reasons(before, before | {"storage": "memory"}) == [
        "storage type can not change in place"
    ]
    assert stream.replace_reasons(
        before | {"retention": "interest"}, before | {"retention": "workqueue"}
    ) == ["retention can not change to or from workqueue"]
    # limits <-> interest is an update.
    assert stream.replace_reasons(before, before | {"retention": "interest"}) == []
    assert stream.replace_reasons(before | {"deny_delete": True}, before) == [
        "deny_delete can not be switched off"
    ]
    assert stream.replace_reasons(before, before | {"deny_delete": True}) == []
    consumer = Consumer(stream_name="S", durable_name="C")
    pull = consumer.comparable()
    assert consumer.replace_reasons(pull, pull | {"ack_policy": "all"}) == [
        "ack policy can not be updated"
    ]
    assert "a pull consumer can not become push based" in consumer.replace_reasons(
        pull, pull | {"deliver_subject": "x"}
    )
    assert consumer.replace_reasons(pull, pull | {"max_deliver": 3}) == []


def test_json_schema_has_both_spellings() -> None:
    for kind in KINDS:
        schema = json_schema(kind)
        assert schema["type"] == "object"
    stream = json_schema("Stream")["properties"]
    assert "max_age" in stream and "maxAge" in stream and "replicas" in stream
    assert stream["maxAge"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    source = json_schema("Stream")["$defs"]["StreamSource"]["properties"]
    assert {"optStartSeq", "opt_start_seq", "externalApiPrefix"} <= set(source)
    template = json_schema("StreamTemplate")
    assert "maxAge" in template["$defs"]["TemplateStreamConfig"]["properties"]
    assert "max_streams" in template["properties"] and "maxStreams" in template["properties"]
    # Either spelling may carry a required field, so only unaliased ones stay required.
    assert json_schema("Consumer").get("required") is None
    assert json_schema("Stream").get("required") is None
    assert json_schema("StreamTemplate")["required"] == ["config"]
    consumer = json_schema("Consumer")["properties"]
    assert {"durableName", "durable_name", "heartbeatInterval", "preventDelete"} <= set(consumer)


def test_display_in_human_units() -> None:
    stream = Stream(name="S")
    assert stream.display("max_age", 365 * DAY) == "1y"
    assert stream.display("max_bytes", 10 * 1024**3) == "10GiB"
    assert stream.display("max_msgs", -1) == -1
    assert stream.display("consumer_limits.inactive_threshold", 3600 * 10**9) == "1h"
