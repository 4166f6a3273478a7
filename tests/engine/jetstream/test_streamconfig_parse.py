"""Decoding STREAM.CREATE/UPDATE bodies with the reference's Go JSON semantics."""

from __future__ import annotations

import json

import msgspec
import pytest

from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.gojson import Num, Obj, loads, syntax_error
from headwater.server.jetstream.streamconfig import (
    ExternalStream,
    Placement,
    StreamConfig,
    StreamSource,
    SubjectTransform,
    parse_stream_request,
)

# Each message below is what nats-server 2.15.1 answers (after "invalid JSON: ").
SYNTAX = [
    ("{", "unexpected end of JSON input"),
    ('{"name":"S",', "unexpected end of JSON input"),
    ('{"name":"S', "unexpected end of JSON input"),
    ('{"name":"\\u00', "unexpected end of JSON input"),
    ('{"name":"S" "x"', "invalid character '\"' after object key:value pair"),
    ('{"name":tru}', "invalid character '}' in literal true (expecting 'e')"),
    ('{"a":nul}', "invalid character '}' in literal null (expecting 'l')"),
    ('{"a":1.}', "invalid character '}' in numeric literal"),
    ('{"a":1e}', "invalid character '}' in numeric literal"),
    ('{"a":-}', "invalid character '}' in numeric literal"),
    ('{"a":01}', "invalid character '1' after object key:value pair"),
    ('{"a":+1}', "invalid character '+' looking for beginning of value"),
    ('{"n":"S\\q"}', "invalid escape sequence `\\q` in string"),
    ('{"n":"\\u12"}', 'invalid escape sequence `\\u12"}` in string'),
    ('{"d":"a\tb"}', "invalid character '\\t' in string"),
    ('{"x":[1 2]}', "invalid character '2' after array element"),
    ('{"x":[1,]}', "invalid character ']' looking for beginning of value"),
    ('{"name" "S"}', "invalid character '\"' after object key"),
    ('{"name":"S",}', "invalid character '}' looking for beginning of object key string"),
    ("{'a':1}", "invalid character '\\'' looking for beginning of object key string"),
    ('{"name":"S"}}', "invalid character '}' after top-level value"),
    ('{"name":"S"} x', "invalid character 'x' after top-level value"),
    ("x", "invalid character 'x' looking for beginning of value"),
    ('{"a":NaN}', "invalid character 'N' looking for beginning of value"),
]


@pytest.mark.parametrize(("text", "message"), SYNTAX)
def test_syntax_errors_use_go_wording(text: str, message: str) -> None:
    assert syntax_error(text) == message
    with pytest.raises(ApiErrorException) as caught:
        parse_stream_request(text.encode(), "S")
    assert caught.value.error.to_dict() == {
        "code": 400,
        "err_code": 10025,
        "description": f"invalid JSON: {message}",
    }


@pytest.mark.parametrize("text", ['{"a":[1,{"b":null}],"c":-0.5e+3}', "[]", '"x"', "true"])
def test_valid_json_has_no_syntax_error(text: str) -> None:
    assert syntax_error(text) is None


def test_loads_keeps_pairs_and_number_text() -> None:
    value = loads('{"a":1e3,"a":2,"b":[1.50]}')
    assert isinstance(value, Obj)
    assert value == [("a", "1e3"), ("a", "2"), ("b", ["1.50"])]
    assert all(isinstance(n, Num) for n in (value[0][1], value[2][1][0]))


# (request fields, JSON kind in the message, Go field path, Go type)
FIELD_TYPE_ERRORS = [
    ({"max_age": "1s"}, "string", "max_age", "time.Duration"),
    ({"max_msgs": 1.5}, "number 1.5", "max_msgs", "int64"),
    ({"max_msgs": True}, "bool", "max_msgs", "int64"),
    ({"max_msgs": [5]}, "array", "max_msgs", "int64"),
    ({"max_msgs": {"a": 5}}, "object", "max_msgs", "int64"),
    ({"max_msgs": 2**63}, "number 9223372036854775808", "max_msgs", "int64"),
    ({"max_msg_size": 3_000_000_000}, "number 3000000000", "max_msg_size", "int32"),
    ({"first_seq": -1}, "number -1", "first_seq", "uint64"),
    ({"num_replicas": 2**63}, "number 9223372036854775808", "num_replicas", "int"),
    ({"sealed": 1}, "number", "sealed", "bool"),
    ({"subjects": "s"}, "string", "subjects", "[]string"),
    ({"placement": {"cluster": 1}}, "number", "placement.cluster", "string"),
    ({"placement": "x"}, "string", "placement", "server.Placement"),
    ({"metadata": {"a": 1}}, "number", "metadata.a", "string"),
    ({"metadata": []}, "array", "metadata", "map[string]string"),
    ({"sources": [{"name": 1}]}, "number", "sources.0.name", "string"),
    (
        {"consumer_limits": {"max_ack_pending": "x"}},
        "string",
        "consumer_limits.max_ack_pending",
        "int",
    ),
]


@pytest.mark.parametrize(("fields", "what", "path", "go_type"), FIELD_TYPE_ERRORS)
def test_type_errors_use_go_wording(
    fields: dict[str, object], what: str, path: str, go_type: str
) -> None:
    expected = (
        f"invalid JSON: json: cannot unmarshal {what} into Go struct field "
        f"StreamConfigRequest.{path} of type {go_type}"
    )
    assert _decode_error(fields) == expected


def _decode_error(fields: dict[str, object]) -> str:
    body = json.dumps({"name": "S", **fields}).encode()
    with pytest.raises(ApiErrorException) as caught:
        parse_stream_request(body, "S")
    assert caught.value.error.err_code == 10025
    return caught.value.error.description


def test_array_element_errors_name_no_struct_field() -> None:
    assert _decode_error({"subjects": [1]}) == (
        "invalid JSON: json: cannot unmarshal number into StreamConfigRequest.subjects.0 "
        "of type string"
    )


@pytest.mark.parametrize(
    ("fields", "description"),
    [
        ({"retention": "Limits"}, 'can not unmarshal "\\"Limits\\""'),
        ({"storage": None}, 'can not unmarshal "null"'),
        ({"discard": 5}, 'can not unmarshal "5"'),
        ({"persist_mode": "foo"}, 'can not unmarshal "\\"foo\\""'),
        ({"compression": ""}, "unknown compression algorithm"),
        ({"compression": None}, "unknown compression algorithm"),
        ({"compression": 5}, "json: cannot unmarshal number into Go value of type string"),
        (
            {"mirror": {"name": "O", "opt_start_time": "bad"}},
            'parsing time "bad" as "2006-01-02T15:04:05Z07:00": cannot parse "bad" as "2006"',
        ),
    ],
)
def test_unmarshaler_errors_use_go_wording(fields: dict[str, object], description: str) -> None:
    assert _decode_error(fields) == f"invalid JSON: {description}"


def test_top_level_non_object() -> None:
    with pytest.raises(ApiErrorException) as caught:
        parse_stream_request(b"[1]", "S")
    assert caught.value.error.description == (
        "invalid JSON: json: cannot unmarshal array into Go value of type "
        "server.StreamConfigRequest"
    )


def test_enum_error_wins_over_an_earlier_type_error() -> None:
    # Go remembers type errors and goes on, but an unmarshaler's error stops it at once.
    with pytest.raises(ApiErrorException) as caught:
        parse_stream_request(b'{"name":"S","max_msgs":"x","storage":"disk"}', "S")
    assert caught.value.error.description == 'invalid JSON: can not unmarshal "\\"disk\\""'


def test_first_type_error_is_reported() -> None:
    with pytest.raises(ApiErrorException) as caught:
        parse_stream_request(b'{"name":"S","max_msgs":"x","max_bytes":"y"}', "S")
    assert "max_msgs" in caught.value.error.description


def test_full_request_decodes_every_field() -> None:
    body = {
        "name": "ORDERS",
        "description": "orders",
        "subjects": ["ORDERS.*"],
        "retention": "workqueue",
        "max_consumers": 3,
        "max_msgs": 10,
        "max_bytes": 1024,
        "max_age": 3_600_000_000_000,
        "max_msgs_per_subject": 2,
        "max_msg_size": 512,
        "discard": "new",
        "storage": "memory",
        "num_replicas": 1,
        "no_ack": True,
        "template_owner": "T",
        "duplicate_window": 1_000_000_000,
        "placement": {"cluster": "c", "tags": ["a", "b"]},
        "mirror": {
            "name": "O",
            "opt_start_seq": 5,
            "opt_start_time": "2024-01-02T03:04:05.123Z",
            "subject_transforms": [{"src": "a.>", "dest": "b.>"}],
            "external": {"api": "$JS.x.API", "deliver": "dlv"},
        },
        "sources": [{"name": "P", "filter_subject": "p.*"}],
        "compression": "s2",
        "first_seq": 7,
        "subject_transform": {"src": "ORDERS.*", "dest": "O.$1"},
        "republish": {"src": ">", "dest": "rp.>", "headers_only": True},
        "allow_direct": True,
        "mirror_direct": True,
        "discard_new_per_subject": True,
        "sealed": True,
        "deny_delete": True,
        "deny_purge": True,
        "allow_rollup_hdrs": True,
        "consumer_limits": {"inactive_threshold": 5, "max_ack_pending": 6},
        "allow_msg_ttl": True,
        "subject_delete_marker_ttl": 2_000_000_000,
        "allow_msg_counter": True,
        "allow_atomic": True,
        "allow_msg_schedules": True,
        "persist_mode": "async",
        "metadata": {"k": "v"},
        "pedantic": True,
    }
    cfg, pedantic = parse_stream_request(json.dumps(body).encode(), "ORDERS")
    assert pedantic is True
    assert cfg.subjects == ("ORDERS.*",)
    assert cfg.placement == Placement(cluster="c", tags=("a", "b"))
    assert cfg.mirror == StreamSource(
        name="O",
        opt_start_seq=5,
        opt_start_time="2024-01-02T03:04:05.123Z",
        subject_transforms=(SubjectTransform("a.>", "b.>"),),
        external=ExternalStream("$JS.x.API", "dlv"),
    )
    assert cfg.sources == (StreamSource(name="P", filter_subject="p.*"),)
    assert cfg.consumer_limits.max_ack_pending == 6
    for name, value in body.items():
        if name not in (
            "pedantic",
            "placement",
            "mirror",
            "sources",
            "subjects",
            "consumer_limits",
        ):
            assert msgspec.to_builtins(getattr(cfg, name)) == value, name


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", StreamConfig()),
        (b"  \n ", StreamConfig()),
        (b"null", StreamConfig()),
        (b'{"name":"S","foo":1,"bar":{"x":[]}}', StreamConfig(name="S")),
        (b'{"NAME":"S","Max_Msgs":5}', StreamConfig(name="S", max_msgs=5)),
        (b'{"name":"S","max_msgs":5,"max_msgs":null}', StreamConfig(name="S", max_msgs=5)),
        (b'{"name":"S","subjects":["a"],"subjects":null}', StreamConfig(name="S")),
        (b'{"name":"S","metadata":null,"placement":null}', StreamConfig(name="S")),
        (b'{"name":"S","sources":[null]}', StreamConfig(name="S", sources=(StreamSource(),))),
        (b'{"name":"S","max_msgs":-0}', StreamConfig(name="S")),
        (b'{"name":"S","description":"\\u00e9"}', StreamConfig(name="S", description="é")),
        (b'{"name":"S","description":"\\ud800"}', StreamConfig(name="S", description="\ud800")),
    ],
)
def test_lenient_decoding(body: bytes, expected: StreamConfig) -> None:
    cfg, pedantic = parse_stream_request(body, "S", check_name=False)
    assert cfg == expected
    assert pedantic is False


def test_name_must_match_subject() -> None:
    with pytest.raises(ApiErrorException) as caught:
        parse_stream_request(b'{"name":"T"}', "S")
    assert caught.value.error.err_code == 10056
    with pytest.raises(ApiErrorException) as caught:
        parse_stream_request(b"", "S")
    assert caught.value.error.err_code == 10056


def test_last_duplicate_key_wins_even_across_case() -> None:
    with pytest.raises(ApiErrorException) as caught:
        parse_stream_request(b'{"name":"S","NAME":"T"}', "S")
    assert caught.value.error.err_code == 10056


def test_invalid_utf8_is_replaced_not_refused() -> None:
    cfg, _ = parse_stream_request(b'{"name":"S","description":"a\xffb"}', "S")
    assert cfg.description == "a\ufffdb"
