"""The JetStream API error table: completeness, reference texts, templates."""

from __future__ import annotations

import dataclasses

import pytest

from headwater.server.jetstream import errors
from headwater.server.jetstream.errors import BY_ERR_CODE, ApiError, ApiErrorException, lookup


def test_table_covers_every_reference_code_once() -> None:
    assert sorted(BY_ERR_CODE) == list(range(10002, 10227))
    assert all(error.err_code == code for code, error in BY_ERR_CODE.items())


def test_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        BY_ERR_CODE[1] = errors.BAD_REQUEST  # type: ignore[index]


@pytest.mark.parametrize(
    ("error", "code", "err_code", "description"),
    [
        (errors.ACCOUNT_RESOURCES_EXCEEDED, 400, 10002, "resource limits exceeded for account"),
        (errors.BAD_REQUEST, 400, 10003, "bad request"),
        (errors.CLUSTER_NOT_AVAIL, 503, 10008, "JetStream system temporarily unavailable"),
        (errors.CONSUMER_NAME_EXIST, 400, 10013, "consumer name already in use"),
        (errors.CONSUMER_NOT_FOUND, 404, 10014, "consumer not found"),
        (errors.INSUFFICIENT_RESOURCES, 503, 10023, "insufficient resources"),
        (errors.INVALID_JSON, 400, 10025, "invalid JSON: {err}"),
        (errors.MAXIMUM_CONSUMERS_LIMIT, 400, 10026, "maximum consumers limit reached"),
        (errors.MAXIMUM_STREAMS_LIMIT, 400, 10027, "maximum number of streams reached"),
        (errors.NO_MESSAGE_FOUND, 404, 10037, "no message found"),
        (errors.NOT_ENABLED_FOR_ACCOUNT, 503, 10039, "JetStream not enabled for account"),
        (errors.STORAGE_RESOURCES_EXCEEDED, 500, 10047, "insufficient storage resources available"),
        (errors.STREAM_INVALID_CONFIG, 500, 10052, "{err}"),
        (
            errors.STREAM_MIRROR_NOT_UPDATABLE,
            400,
            10055,
            "stream mirror configuration can not be updated",
        ),
        (errors.STREAM_MISMATCH, 400, 10056, "stream name in subject does not match request"),
        (errors.STREAM_MSG_DELETE_FAILED, 500, 10057, "{err}"),
        (
            errors.STREAM_NAME_EXIST,
            400,
            10058,
            "stream name already in use with a different configuration",
        ),
        (errors.STREAM_NOT_FOUND, 404, 10059, "stream not found"),
        (errors.STREAM_NOT_MATCH, 400, 10060, "expected stream does not match"),
        (
            errors.STREAM_REPLICAS_NOT_UPDATABLE,
            400,
            10061,
            "Replicas configuration can not be updated",
        ),
        (errors.STREAM_RESTORE, 500, 10062, "restore failed: {err}"),
        (errors.STREAM_SNAPSHOT, 500, 10064, "snapshot failed: {err}"),
        (errors.STREAM_SUBJECT_OVERLAP, 400, 10065, "subjects overlap with an existing stream"),
        (errors.STREAM_TEMPLATE_CREATE, 500, 10066, "{err}"),
        (errors.STREAM_TEMPLATE_DELETE, 500, 10067, "{err}"),
        (errors.STREAM_TEMPLATE_NOT_FOUND, 404, 10068, "template not found"),
        (errors.STREAM_WRONG_LAST_MSG_ID, 400, 10070, "wrong last msg ID: {id}"),
        (errors.STREAM_WRONG_LAST_SEQUENCE, 400, 10071, "wrong last sequence: {seq}"),
        (
            errors.TEMPLATE_NAME_NOT_MATCH_SUBJECT,
            400,
            10073,
            "template name in subject does not match request",
        ),
        (
            errors.STREAM_REPLICAS_NOT_SUPPORTED,
            500,
            10074,
            "replicas > 1 not supported in non-clustered mode",
        ),
        (errors.NOT_ENABLED, 503, 10076, "JetStream not enabled"),
        (errors.STREAM_STORE_FAILED, 503, 10077, "{err}"),
        (
            errors.CONSUMER_FILTER_NOT_SUBSET,
            400,
            10093,
            "consumer filter subject is not a valid subset of the interest subjects",
        ),
        (
            errors.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK,
            400,
            10098,
            "workqueue stream requires explicit ack",
        ),
        (
            errors.CONSUMER_EXISTING_ACTIVE,
            400,
            10105,
            "consumer already exists and is still active",
        ),
        (errors.STREAM_SEALED, 400, 10109, "invalid operation on sealed stream"),
        (
            errors.STREAM_MAX_STREAM_BYTES_EXCEEDED,
            400,
            10122,
            "stream max bytes exceeds account limit max stream bytes",
        ),
        (
            errors.STREAM_MOVE_AND_SCALE,
            400,
            10123,
            "can not move and scale a stream in a single update",
        ),
        (
            errors.STREAM_NAME_EXIST_RESTORE_FAILED,
            400,
            10130,
            "stream name already in use, cannot restore",
        ),
        (
            errors.CONSUMER_DUPLICATE_FILTER_SUBJECTS,
            400,
            10136,
            "consumer cannot have both FilterSubject and FilterSubjects specified",
        ),
        (errors.CONSUMER_ALREADY_EXISTS, 400, 10148, "consumer already exists"),
        (errors.CONSUMER_DOES_NOT_EXIST, 400, 10149, "consumer does not exist"),
        (errors.PEDANTIC, 400, 10157, "pedantic mode: {err}"),
        (
            errors.STREAM_DUPLICATE_MESSAGE_CONFLICT,
            409,
            10158,
            "duplicate message id is in process",
        ),
        (errors.STREAM_WRONG_LAST_SEQUENCE_CONSTANT, 400, 10164, "wrong last sequence"),
        (errors.MESSAGE_TTL_INVALID, 400, 10165, "invalid per-message TTL"),
        (errors.MESSAGE_TTL_DISABLED, 400, 10166, "per-message TTL is disabled"),
        (errors.STREAM_TOO_MANY_REQUESTS, 429, 10167, "too many requests"),
        (errors.REQUIRED_API_LEVEL, 412, 10185, "JetStream minimum api level required"),
        (
            errors.STREAM_RECONFIGURE_IN_PROGRESS,
            400,
            10226,
            "stream reconfiguration already in progress",
        ),
    ],
)
def test_reference_codes_and_texts(
    error: ApiError, code: int, err_code: int, description: str
) -> None:
    assert (error.code, error.err_code, error.description) == (code, err_code, description)
    assert lookup(err_code) is error


@pytest.mark.parametrize(
    ("error", "values", "expected"),
    [
        (
            errors.INVALID_JSON,
            {"err": "unexpected end of JSON input"},
            "invalid JSON: unexpected end of JSON input",
        ),
        (
            errors.STREAM_INVALID_CONFIG,
            {"err": "max age can not be negative"},
            "max age can not be negative",
        ),
        (errors.PEDANTIC, {"err": ValueError("x must be -1")}, "pedantic mode: x must be -1"),
        (
            errors.RESTORE_SUBSCRIBE_FAILED,
            {"subject": "a.b", "err": "boom"},
            "JetStream unable to subscribe to restore snapshot a.b: boom",
        ),
        (
            errors.STREAM_EXTERNAL_API_OVERLAP,
            {"prefix": "$JS.API.x", "subject": "$JS.API"},
            "stream external api prefix $JS.API.x must not overlap with $JS.API",
        ),
        (errors.SEQUENCE_NOT_FOUND, {"seq": 7}, "sequence 7 not found"),
        (errors.STREAM_WRONG_LAST_MSG_ID, {"id": "{seq}"}, "wrong last msg ID: {seq}"),
    ],
)
def test_format_fills_templates(error: ApiError, values: dict[str, object], expected: str) -> None:
    filled = error.format(**values)
    assert filled.description == expected
    assert (filled.code, filled.err_code) == (error.code, error.err_code)
    assert error.description != expected, "the table entry itself must stay a template"


def test_format_refuses_missing_and_unknown_names() -> None:
    with pytest.raises(ValueError, match="10042"):
        errors.RESTORE_SUBSCRIBE_FAILED.format(err="boom")
    with pytest.raises(ValueError, match="10059"):
        errors.STREAM_NOT_FOUND.format(err="boom")


def test_templates_are_exactly_the_braced_descriptions() -> None:
    templates = {e.err_code for e in BY_ERR_CODE.values() if e.placeholders}
    assert {10005, 10025, 10052, 10066, 10067, 10157, 10199, 10225} <= templates
    assert all("{" in BY_ERR_CODE[c].description for c in templates)
    assert errors.RESTORE_SUBSCRIBE_FAILED.placeholders == ("subject", "err")


def test_to_dict_is_the_response_error_object() -> None:
    assert errors.STREAM_NOT_FOUND.to_dict() == {
        "code": 404,
        "err_code": 10059,
        "description": "stream not found",
    }


def test_exception_carries_filled_error() -> None:
    exc = errors.STREAM_INVALID_CONFIG.exc(err="invalid subject")
    assert isinstance(exc, ApiErrorException)
    assert exc.error == ApiError(500, 10052, "invalid subject")
    assert str(exc) == "10052: invalid subject"
    assert errors.STREAM_NOT_FOUND.exc().error is errors.STREAM_NOT_FOUND


def test_errors_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        errors.BAD_REQUEST.description = "x"  # type: ignore[misc]
