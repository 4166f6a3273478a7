"""CONSUMER.CREATE request decoding, the handler's checks, and the config's JSON shape."""

from __future__ import annotations

import json
from typing import Any

import pytest

from headwater.server.jetstream.consumerconfig import (
    ConsumerConfig,
    consumer_api_level,
    consumer_config_from_json,
    consumer_config_to_json,
    is_durable,
    parse_consumer_request,
)
from headwater.server.jetstream.errors import ApiErrorException

SEC = 1_000_000_000


def _body(config: dict[str, Any] | None = None, **request: Any) -> bytes:
    return json.dumps({"stream_name": "S", "config": config or {}} | request).encode()


def _error(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiErrorException) as info:
        call()
    return info.value.error.err_code, info.value.error.description


def test_decodes_every_field() -> None:
    config = {
        "durable_name": "D",
        "name": "D",
        "description": "d",
        "deliver_policy": "by_start_time",
        "opt_start_time": "2024-01-01T00:00:00Z",
        "ack_policy": "explicit",
        "ack_wait": 5 * SEC,
        "max_deliver": 3,
        "backoff": [SEC, 2 * SEC],
        "filter_subjects": ["a", "b"],
        "replay_policy": "original",
        "rate_limit_bps": 8,
        "sample_freq": "10%",
        "max_waiting": 7,
        "max_ack_pending": 9,
        "flow_control": True,
        "headers_only": True,
        "max_batch": 4,
        "max_expires": SEC,
        "max_bytes": 100,
        "deliver_subject": "out",
        "deliver_group": "g",
        "idle_heartbeat": SEC,
        "inactive_threshold": 2 * SEC,
        "num_replicas": 1,
        "mem_storage": True,
        "direct": True,
        "metadata": {"k": "v"},
        "pause_until": "2099-01-01T00:00:00Z",
        "priority_groups": ["A"],
        "priority_policy": "pinned_client",
        "priority_timeout": SEC,
    }
    request = parse_consumer_request(_body(config, action="update", pedantic=True), "S", "D", None)
    assert request.stream_name == "S"
    assert request.action == "update"
    assert request.pedantic is True
    cfg = request.config
    assert cfg.backoff == (SEC, 2 * SEC)
    assert cfg.filter_subjects == ("a", "b")
    assert cfg.priority_policy == "pinned_client"
    assert cfg.opt_start_time == "2024-01-01T00:00:00Z"
    assert consumer_config_to_json(cfg, dynamic_metadata=False) == config


@pytest.mark.parametrize(
    ("body", "description"),
    [
        ('{"stream_name":"S",', "invalid JSON: unexpected end of JSON input"),
        (
            '{"stream_name":"S","config":{"ack_policy":"bad"}}',
            'invalid JSON: can not unmarshal "\\"bad\\""',
        ),
        (
            '{"stream_name":"S","config":{"replay_policy":null}}',
            'invalid JSON: can not unmarshal "null"',
        ),
        (
            '{"stream_name":"S","config":{"priority_policy":"x"}}',
            'invalid JSON: unknown priority policy: "x"',
        ),
        ('{"stream_name":"S","action":"x"}', 'invalid JSON: unknown consumer action: "x"'),
        (
            '{"stream_name":"S","config":{"backoff":["x"]}}',
            "invalid JSON: json: cannot unmarshal string into "
            "CreateConsumerRequest.config.backoff.0 of type time.Duration",
        ),
        (
            '{"stream_name":"S","config":{"max_deliver":"1"}}',
            "invalid JSON: json: cannot unmarshal string into Go struct field "
            "CreateConsumerRequest.config.max_deliver of type int",
        ),
        (
            '{"stream_name":"S","config":{"ack_policy":"flow_control"}}',
            'invalid JSON: can not unmarshal "\\"flow_control\\""',
        ),
    ],
)
def test_decode_errors(body: str, description: str) -> None:
    code, text = _error(lambda: parse_consumer_request(body.encode(), "S", "C", None))
    assert (code, text) == (10025, description)


def test_deliver_policy_undefined_reads_as_all() -> None:
    body = _body({"deliver_policy": "undefined"})
    assert parse_consumer_request(body, "S", None, None).config.deliver_policy == "all"


@pytest.mark.parametrize("body", [b"", b"  ", b"null"])
def test_empty_request_fails_on_stream_name(body: bytes) -> None:
    assert _error(lambda: parse_consumer_request(body, "S", None, None))[0] == 10056


def test_unknown_fields_and_case_insensitive_keys() -> None:
    body = b'{"STREAM_NAME":"S","foo":1,"Config":{"ACK_POLICY":"all","bar":2}}'
    request = parse_consumer_request(body, "S", "C", None)
    assert request.config.ack_policy == "all"


@pytest.mark.parametrize(
    ("body", "name", "filt", "legacy", "err_code"),
    [
        (_body(stream_name="T"), "C", None, False, 10056),
        (_body(), "a/b", None, False, 10127),
        (_body({"durable_name": "x"}), "a\\b", None, False, 10127),
        (_body({"durable_name": "D"}), None, None, False, 10020),
        (_body({"durable_name": "X"}), "C", None, False, 10017),
        (_body({"durable_name": "X", "filter_subject": "y"}), "C", "z", False, 10017),
        (_body({"filter_subject": "s.y"}), "C", "s.x", False, 10131),
        (_body(), "C", "s.x", False, 10131),
        (_body({"filter_subjects": ["s.x"]}), "C", "s.x", False, 10137),
        (_body({"name": "a/b"}), None, None, False, 10127),
        (_body({"num_replicas": 3, "name": "a.b"}), "C", None, False, 10074),
        (_body({"num_replicas": 3}), "C", "s.x", False, 10131),
        (_body(), None, None, True, 10016),
        (_body(), "D", None, True, 10018),
        (_body({"durable_name": "E"}), "D", None, True, 10017),
    ],
)
def test_handler_checks(
    body: bytes, name: str | None, filt: str | None, legacy: bool, err_code: int
) -> None:
    call = lambda: parse_consumer_request(body, "S", name, filt, legacy_durable=legacy)  # noqa: E731
    assert _error(call)[0] == err_code


def test_subject_name_replaces_body_name() -> None:
    cfg = parse_consumer_request(_body({"name": "X"}), "S", "C", None).config
    assert cfg.name == "C"
    cfg = parse_consumer_request(_body({"durable_name": "C", "name": "a/b"}), "S", "C", None).config
    assert (cfg.durable_name, cfg.name) == ("C", "C")


def test_legacy_durable_names_the_consumer() -> None:
    body = _body({"durable_name": "D", "name": "X"})
    cfg = parse_consumer_request(body, "S", "D", None, legacy_durable=True).config
    assert (cfg.durable_name, cfg.name) == ("D", "D")


def test_filter_in_subject_matching_config() -> None:
    body = _body({"filter_subject": "s.*.x"})
    assert parse_consumer_request(body, "S", "C", "s.*.x").config.filter_subject == "s.*.x"


def test_to_json_omits_empty_fields_in_reference_order() -> None:
    cfg = ConsumerConfig(name="C", max_deliver=-1, max_waiting=512)
    out = consumer_config_to_json(cfg)
    assert list(out) == [
        "name",
        "deliver_policy",
        "ack_policy",
        "max_deliver",
        "replay_policy",
        "max_waiting",
        "num_replicas",
        "metadata",
    ]
    assert out["num_replicas"] == 0
    assert out["metadata"]["_nats.ver"]
    assert "metadata" not in consumer_config_to_json(cfg, dynamic_metadata=False)


def test_to_json_priority_policy_none_is_omitted() -> None:
    cfg = ConsumerConfig(priority_policy="overflow", priority_groups=("A",))
    assert consumer_config_to_json(cfg)["priority_policy"] == "overflow"
    assert "priority_policy" not in consumer_config_to_json(ConsumerConfig())


def test_from_json_round_trip() -> None:
    cfg = ConsumerConfig(
        durable_name="D",
        backoff=(SEC,),
        opt_start_time="2024-01-01T00:00:00Z",
        deliver_policy="by_start_time",
        metadata={"a": "b"},
    )
    data = consumer_config_to_json(cfg, dynamic_metadata=False)
    assert consumer_config_from_json(data) == cfg


def test_nats_py_from_response_round_trips() -> None:
    from nats.js.api import ConsumerConfig as ClientConfig

    cfg = ConsumerConfig(
        durable_name="D",
        name="D",
        ack_policy="explicit",
        ack_wait=30 * SEC,
        max_deliver=-1,
        backoff=(30 * SEC,),
        filter_subjects=("a", "b"),
        max_ack_pending=1000,
        max_waiting=512,
        metadata={"a": "b"},
    )
    data = consumer_config_to_json(cfg, dynamic_metadata=False)
    echoed = ClientConfig.from_response(json.loads(json.dumps(data))).as_dict()
    body = json.dumps({"stream_name": "S", "config": echoed}).encode()
    assert parse_consumer_request(body, "S", "D", None).config == cfg


@pytest.mark.parametrize(
    ("fields", "level"),
    [
        ({}, 0),
        ({"pause_until": "2099-01-01T00:00:00Z"}, 1),
        ({"priority_policy": "overflow"}, 1),
        ({"priority_groups": ("A",)}, 1),
        ({"priority_timeout": -1}, 1),
    ],
)
def test_api_level(fields: dict[str, Any], level: int) -> None:
    assert consumer_api_level(ConsumerConfig(**fields)) == level


def test_is_durable() -> None:
    assert is_durable(ConsumerConfig(durable_name="D"))
    assert not is_durable(ConsumerConfig(name="N"))
