"""What STREAM.UPDATE may and may not change, and the order of its errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.streamconfig import StreamConfig, StreamSource
from headwater.server.jetstream.streamconfig_update import update_stream_request, validate_update
from headwater.server.jetstream.streamconfig_validate import StreamLimits, apply_defaults

SEC = 1_000_000_000


def _stream(**fields: Any) -> StreamConfig:
    return apply_defaults(StreamConfig(**{"name": "S", "subjects": ("s.>",), **fields}))


def _error(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ApiErrorException) as caught:
        call(*args, **kwargs)
    return caught.value.error.err_code, caught.value.error.description


REFUSED = [
    ({}, {"storage": "memory"}, 10052, "stream configuration update can not change storage type"),
    (
        {},
        {"retention": "workqueue"},
        10052,
        "stream configuration update can not change retention policy to/from workqueue",
    ),
    (
        {"retention": "workqueue"},
        {},
        10052,
        "stream configuration update can not change retention policy to/from workqueue",
    ),
    (
        {"template_owner": "T"},
        {"template_owner": "T"},
        10052,
        "stream configuration update not allowed on template owned stream",
    ),
    (
        {},
        {"template_owner": "T"},
        10052,
        "stream configuration update can not be owned by a template",
    ),
    ({"sealed": True}, {}, 10052, "stream configuration update can not unseal a sealed stream"),
    (
        {"deny_delete": True},
        {},
        10052,
        "stream configuration update can not cancel deny message deletes",
    ),
    ({"deny_purge": True}, {}, 10052, "stream configuration update can not cancel deny purge"),
    ({"allow_msg_ttl": True}, {}, 10052, "message TTL status can not be disabled"),
    (
        {},
        {"allow_msg_counter": True},
        10052,
        "stream configuration update can not change message counter setting",
    ),
    (
        {"allow_msg_counter": True},
        {},
        10052,
        "stream configuration update can not change message counter setting",
    ),
    (
        {"allow_msg_schedules": True},
        {"allow_rollup_hdrs": True},
        10052,
        "message schedules can not be disabled",
    ),
    (
        {},
        {"persist_mode": "async"},
        10052,
        "stream configuration update can not change persist mode",
    ),
    ({}, {"num_replicas": 3}, 10074, "replicas > 1 not supported in non-clustered mode"),
    (
        {},
        {"subjects": (), "mirror": StreamSource(name="O")},
        10055,
        "stream mirror configuration can not be updated",
    ),
    ({}, {"mirror": StreamSource(name="O")}, 10034, "stream mirrors can not contain subjects"),
    ({}, {"max_age": -1}, 10052, "max age can not be negative"),
    (
        {},
        {"discard_new_per_subject": True},
        10052,
        "discard new per subject requires discard new policy to be set",
    ),
    ({}, {"allow_msg_schedules": True}, 10052, "message schedules are not supported yet"),
]


@pytest.mark.parametrize(("old", "new", "err_code", "description"), REFUSED)
def test_refused_updates(
    old: dict[str, Any], new: dict[str, Any], err_code: int, description: str
) -> None:
    current = _stream(**old)
    request = StreamConfig(**{"name": "S", "subjects": ("s.>",), **new})
    assert _error(validate_update, current, request) == (err_code, description)


ALLOWED = [
    ({}, {"retention": "interest"}),
    ({"retention": "interest"}, {"retention": "limits"}),
    ({}, {"max_msgs": 10, "max_bytes": 100, "max_age": 3600 * SEC, "max_consumers": 4}),
    ({}, {"subjects": ("s.>", "t")}),
    ({}, {"deny_delete": True, "deny_purge": True}),
    ({}, {"allow_msg_ttl": True}),
    ({}, {"subject_delete_marker_ttl": SEC}),
    ({}, {"first_seq": 10}),
    ({}, {"mirror_direct": True}),
    ({}, {"description": "new", "metadata": {"k": "v"}}),
    ({}, {"num_replicas": 1}),
]


@pytest.mark.parametrize(("old", "new"), ALLOWED)
def test_allowed_updates_store_the_new_config(old: dict[str, Any], new: dict[str, Any]) -> None:
    current = _stream(**old)
    request = StreamConfig(**{"name": "S", "subjects": ("s.>",), **new})
    assert validate_update(current, request) == apply_defaults(request)


def test_identical_update_is_a_no_op() -> None:
    current = _stream(max_age=60 * SEC, allow_direct=True, metadata={"k": "v"})
    assert validate_update(current, current) == current


def test_sealing_locks_the_stream_down() -> None:
    current = _stream(max_age=3600 * SEC, allow_rollup_hdrs=True)
    request = StreamConfig(
        name="S", subjects=("s.>",), sealed=True, max_age=3600 * SEC, allow_rollup_hdrs=True
    )
    sealed = validate_update(current, request)
    assert (sealed.max_age, sealed.discard, sealed.deny_delete, sealed.deny_purge) == (
        0,
        "new",
        True,
        True,
    )
    assert sealed.allow_rollup_hdrs is False
    assert sealed.sealed is True


def test_a_sealed_stream_accepts_an_update_that_keeps_it_sealed() -> None:
    sealed = validate_update(_stream(), StreamConfig(name="S", subjects=("s.>",), sealed=True))
    assert validate_update(sealed, sealed) == sealed
    # Sealing switched deny_delete on, so a request that leaves it out cancels it: refused.
    code, _ = _error(
        validate_update, sealed, StreamConfig(name="S", subjects=("s.>",), sealed=True)
    )
    assert code == 10052


def test_a_new_replica_count_is_valid_when_clustered() -> None:
    """The count itself is valid in a cluster: whether the stream can change it (a group
    can, a stream created with one replica cannot yet: 10052) is the API's to say, which
    knows which it is (jetstream/streamapi.py; tests/cluster/test_replicated_membership.py)."""
    request = StreamConfig(name="S", subjects=("s.>",), num_replicas=3)
    updated = validate_update(_stream(), request, limits=StreamLimits(clustered=True))
    assert updated.num_replicas == 3


def test_update_metadata_replaces_user_keys_and_keeps_level() -> None:
    current = _stream(metadata={"k": "v"}, allow_msg_ttl=True)
    updated = validate_update(
        current, StreamConfig(name="S", subjects=("s.>",), allow_msg_ttl=True)
    )
    assert updated.metadata == {"_nats.req.level": "1"}


def test_overlap_checks_other_streams_but_not_itself() -> None:
    other = apply_defaults(StreamConfig(name="T", subjects=("t.*",)))
    current = _stream()
    same_subjects = StreamConfig(name="S", subjects=("s.>",), max_msgs=5)
    assert validate_update(current, same_subjects, [current, other]).max_msgs == 5
    clash = StreamConfig(name="S", subjects=("s.>", "t.x"))
    assert _error(validate_update, current, clash, [current, other]) == (
        10065,
        "subjects overlap with an existing stream",
    )


def _body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


@pytest.mark.parametrize(
    ("body", "name", "streams", "err_code"),
    [
        (b"{", "S", {}, 10025),
        (_body(name="S", max_age=-1), "S", {}, 10052),  # validated before the lookup
        (_body(name="S"), "S", {}, 10059),
        (_body(name="T", max_age=-1), "S", {"S": _stream()}, 10052),  # before the name check
        (_body(name="T"), "S", {"S": _stream()}, 10056),
        (b"", "S", {"S": _stream()}, 10052),
        (
            _body(name="S", subjects=["s.>"], pedantic=True, max_msgs=-3),
            "S",
            {"S": _stream()},
            10157,
        ),
        (_body(name="S", storage="memory"), "S", {"S": _stream()}, 10052),
    ],
)
def test_update_request_error_order(
    body: bytes, name: str, streams: dict[str, StreamConfig], err_code: int
) -> None:
    assert _error(update_stream_request, body, name, streams)[0] == err_code


def test_update_request_success() -> None:
    streams = {"S": _stream()}
    updated = update_stream_request(_body(name="S", subjects=["s.>"], max_msgs=7), "S", streams)
    assert updated.max_msgs == 7
    assert streams["S"].max_msgs == -1, "the caller's stored config is untouched"
