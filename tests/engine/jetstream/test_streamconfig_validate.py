"""Every create-time validation rule, with the reference's codes and texts."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.streamconfig import (
    ExternalStream,
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
    create_stream_request,
    same_config,
    validate_create,
)

SEC = 1_000_000_000


def _error(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ApiErrorException) as caught:
        call(*args, **kwargs)
    return caught.value.error.err_code, caught.value.error.description


BAD_DEST = "stream transform: invalid mapping destination"
INVALID = [
    ({"name": ""}, 10052, "stream name is required and can not contain '.', '*', '>', '\\', '/'"),
    (
        {"name": "a.b"},
        10052,
        "stream name is required and can not contain '.', '*', '>', '\\', '/'",
    ),
    (
        {"name": "a b"},
        10052,
        "stream name is required and can not contain '.', '*', '>', '\\', '/'",
    ),
    ({"name": "*"}, 10052, "stream name is required and can not contain '.', '*', '>', '\\', '/'"),
    ({"name": "é" * 128}, 10052, "stream name is too long, maximum allowed is 255"),
    ({"description": "d" * 4097}, 10052, "stream description is too long, maximum allowed is 4096"),
    (
        {"metadata": {"k": "v" * 131072}},
        10052,
        "stream metadata exceeds maximum size of 131072 bytes",
    ),
    ({"num_replicas": 6}, 10052, "maximum replicas is 5"),
    ({"num_replicas": -1}, 10133, "replicas count cannot be negative"),
    ({"max_age": -1}, 10052, "max age can not be negative"),
    ({"max_age": 99_999_999}, 10052, "max age needs to be >= 100ms"),
    ({"duplicate_window": -1}, 10052, "duplicates window can not be negative"),
    ({"duplicate_window": 5}, 10052, "duplicates window needs to be >= 100ms"),
    (
        {"max_age": SEC, "duplicate_window": 2 * SEC},
        10052,
        "duplicates window can not be larger then max age",
    ),
    (
        {"deny_purge": True, "allow_rollup_hdrs": True},
        10052,
        "roll-ups require the purge permission",
    ),
    ({"allow_msg_counter": True, "discard": "new"}, 10052, "counter stream cannot use discard new"),
    (
        {"allow_msg_counter": True, "allow_msg_ttl": True},
        10052,
        "counter stream cannot use message TTLs",
    ),
    (
        {"allow_msg_counter": True, "allow_msg_schedules": True},
        10052,
        "counter stream cannot use message schedules",
    ),
    (
        {"allow_msg_counter": True, "retention": "interest"},
        10052,
        "counter stream can only use limits retention",
    ),
    (
        {"discard_new_per_subject": True},
        10052,
        "discard new per subject requires discard new policy to be set",
    ),
    (
        {"discard_new_per_subject": True, "discard": "new"},
        10052,
        "discard new per subject requires max msgs per subject > 0",
    ),
    (
        {"subject_delete_marker_ttl": SEC - 1},
        10052,
        "subject delete marker TTL must be at least 1 second",
    ),
    ({"subject_delete_marker_ttl": -1}, 10052, "subject delete marker TTL must not be negative"),
    (
        {"allow_msg_schedules": True, "discard": "new"},
        10052,
        "message scheduling cannot use discard new",
    ),
    (
        {"persist_mode": "async", "storage": "memory"},
        10052,
        "async persist mode is only supported on file storage",
    ),
    (
        {"persist_mode": "async", "num_replicas": 3},
        10052,
        "async persist mode is not supported on replicated streams",
    ),
    (
        {"persist_mode": "async", "allow_atomic": True},
        10052,
        "async persist mode is not supported with atomic batch publish",
    ),
    ({"subjects": ("a..b",)}, 10052, "invalid subject"),
    ({"subjects": ("a.>.b",)}, 10052, "invalid subject"),
    ({"subjects": ("a", "")}, 10052, "invalid subject"),
    ({"subjects": ("a b",)}, 10052, "invalid subject"),
    ({"subjects": ("a", "a")}, 10052, 'subject "a" overlaps with "a"'),
    ({"subjects": ("a.*", "a.b")}, 10052, 'subject "a.*" overlaps with "a.b"'),
    ({"subjects": ("x", "a.>", "*.b")}, 10052, 'subject "a.>" overlaps with "*.b"'),
    ({"subjects": (">",)}, 10052, "capturing all subjects requires no-ack to be true"),
    (
        {"subjects": (">",), "no_ack": True, "num_replicas": 3},
        10052,
        "capturing all subjects requires replicas of 1",
    ),
    (
        {"subjects": ("$JS.API.>",)},
        10052,
        "subjects that overlap with jetstream api require no-ack to be true",
    ),
    (
        {"subjects": ("$JSC.x",)},
        10052,
        "subjects that overlap with jetstream api require no-ack to be true",
    ),
    (
        {"subjects": ("$NRG.*",)},
        10052,
        "subjects that overlap with jetstream api require no-ack to be true",
    ),
    (
        {"subjects": ("*.API.>",)},
        10052,
        "subjects that overlap with jetstream api require no-ack to be true",
    ),
    (
        {"subjects": ("$SYS.>",)},
        10052,
        "subjects that overlap with system api require no-ack to be true",
    ),
    (
        {"subject_transform": SubjectTransform("a..", "b")},
        10155,
        "stream transform source: invalid subject a..",
    ),
    (
        {"subject_transform": SubjectTransform("a.*", "b.*")},
        10156,
        "stream transform: invalid subject",
    ),
    (
        {"subject_transform": SubjectTransform("a.*", "b.{{wildcard(2)}}")},
        10156,
        f"{BAD_DEST}: wildcard index out of range in {{{{wildcard(2)}}}}: [2]",
    ),
    (
        {"subject_transform": SubjectTransform("a", "b.$1")},
        10156,
        "stream transform: invalid mapping destination: wildcard index out of range in $1",
    ),
    (
        {"subject_transform": SubjectTransform("a.*", "b.{{nope(1)}}")},
        10156,
        "stream transform: invalid mapping destination: unknown function in {{nope(1)}}",
    ),
    (
        {"subject_transform": SubjectTransform("a.*", "b.{{wildcard()}}")},
        10156,
        f"{BAD_DEST}: not enough arguments passed to the function in {{{{wildcard()}}}}",
    ),
    (
        {"subject_transform": SubjectTransform("a.*", "b.{{split(x,-)}}")},
        10156,
        f"{BAD_DEST}: function argument is invalid or in the wrong format in {{{{split(x,-)}}}}",
    ),
    (
        {"subject_transform": SubjectTransform("a.*", "b..c")},
        10156,
        "stream transform: invalid mapping destination: invalid subject in ",
    ),
    (
        {"subjects": ("q.>",), "republish": RePublish(src="q.>", dest="q.x")},
        10052,
        "stream configuration for republish destination forms a cycle",
    ),
    (
        {"subjects": ("s",), "republish": RePublish(src="s", dest="r.*")},
        10052,
        "stream configuration for republish with transform from 's' to 'r.*' not valid",
    ),
    (
        {"placement": Placement(preferred="srv")},
        10052,
        "preferred server not permitted in placement",
    ),
    (
        {"mirror": StreamSource(name="O"), "first_seq": 5},
        10143,
        "stream mirrors can not have first sequence configured",
    ),
    (
        {"mirror": StreamSource(name="O"), "subjects": ("m",)},
        10034,
        "stream mirrors can not contain subjects",
    ),
    (
        {"mirror": StreamSource(name="O"), "sources": (StreamSource(name="P"),)},
        10031,
        "stream mirrors can not also contain other sources",
    ),
    (
        {"mirror": StreamSource(name="O"), "allow_msg_counter": True},
        10173,
        "stream mirrors can not also calculate counters",
    ),
    (
        {"mirror": StreamSource(name="O"), "allow_atomic": True},
        10198,
        "stream mirrors can not also use atomic publishing",
    ),
    (
        {"mirror": StreamSource(name="O"), "allow_msg_schedules": True, "allow_rollup_hdrs": True},
        10186,
        "stream mirrors can not also schedule messages",
    ),
    (
        {
            "mirror": StreamSource(
                name="O", filter_subject="a", subject_transforms=(SubjectTransform("b", "c"),)
            )
        },
        10150,
        "mirror with multiple subject transforms cannot also have a single subject filter",
    ),
    (
        {"mirror": StreamSource(name="O"), "subject_delete_marker_ttl": SEC},
        10052,
        "subject delete markers forbidden on mirrors",
    ),
    (
        {"mirror": StreamSource(name="O", subject_transforms=(SubjectTransform("a..", "b"),))},
        10151,
        "mirror transform source: invalid subject a..",
    ),
    (
        {"mirror": StreamSource(name="O", subject_transforms=(SubjectTransform("a.*", "b.*"),))},
        10154,
        "mirror transform: invalid subject",
    ),
    (
        {
            "mirror": StreamSource(
                name="O",
                subject_transforms=(SubjectTransform("a.*", "x"), SubjectTransform("*.b", "y")),
            )
        },
        10152,
        "mirror subject filters can not overlap",
    ),
    ({"mirror": StreamSource(name="a.b")}, 10142, "mirrored stream name is invalid"),
    ({"sources": (StreamSource(name=""),)}, 10141, "sourced stream name is invalid"),
    (
        {"sources": (StreamSource(name="O"), StreamSource(name="O", filter_subject=">"))},
        10140,
        "duplicate source configuration detected",
    ),
    (
        {
            "sources": (
                StreamSource(name="O", filter_subject="a"),
                StreamSource(name="O", filter_subject="b"),
            )
        },
        None,
        None,
    ),
    (
        {
            "sources": (
                StreamSource(
                    name="O", filter_subject="a", subject_transforms=(SubjectTransform("b", "c"),)
                ),
            )
        },
        10144,
        "source with multiple subject transforms cannot also have a single subject filter",
    ),
    (
        {"sources": (StreamSource(name="O", subject_transforms=(SubjectTransform("a..", "b"),)),)},
        10145,
        "source transform source: invalid subject a..",
    ),
    (
        {"sources": (StreamSource(name="O", subject_transforms=(SubjectTransform("a", "b.*"),)),)},
        10146,
        "source transform: invalid subject",
    ),
    (
        {
            "sources": (
                StreamSource(
                    name="O",
                    subject_transforms=(SubjectTransform("a.*", "x"), SubjectTransform("a.b", "y")),
                ),
            )
        },
        10147,
        "source filters can not overlap",
    ),
    (
        {
            "sources": (StreamSource(name="O"),),
            "allow_msg_schedules": True,
            "allow_rollup_hdrs": True,
        },
        10187,
        "stream source can not also schedule messages",
    ),
    (
        {"sources": (StreamSource(name="O", external=ExternalStream("$JS.x.API", "dl.*")),)},
        10024,
        "stream external delivery prefix dl.* must not contain wildcards",
    ),
    (
        {"sources": (StreamSource(name="O", external=ExternalStream("a.*", "")),)},
        10052,
        'stream external api prefix "a.*" must be a valid subject without wildcards',
    ),
    (
        {"sources": (StreamSource(name="O", external=ExternalStream("$JS.API", "")),)},
        10021,
        "stream external api prefix $JS.API must not overlap with $JS.API",
    ),
]


@pytest.mark.parametrize(("fields", "err_code", "description"), INVALID)
def test_check_stream_config(fields: dict[str, Any], err_code: int, description: str) -> None:
    cfg = StreamConfig(**{"name": "S", **fields})
    if err_code is None:
        check_stream_config(cfg)
        return
    assert _error(check_stream_config, cfg) == (err_code, description)


# Streams that mirrors and sources in the next tests refer to.
ORIGIN = apply_defaults(
    StreamConfig(name="O", subjects=("o.>",), max_msg_size=1024, allow_direct=True)
)
SOURCING = apply_defaults(
    StreamConfig(name="P", subjects=("p",), sources=(StreamSource(name="S"),))
)
OTHERS = {"O": ORIGIN, "P": SOURCING}


@pytest.mark.parametrize(
    ("fields", "err_code", "description"),
    [
        (
            {"mirror": StreamSource(name="O"), "max_msg_size": 10},
            10030,
            "stream mirror must have max message size >= source",
        ),
        (
            {"sources": (StreamSource(name="O"),), "max_msg_size": 10},
            10046,
            "stream source must have max message size >= target",
        ),
        ({"subjects": ("s",), "sources": (StreamSource(name="P"),)}, 10052, "detected cycle"),
        ({"mirror": StreamSource(name="P")}, 10052, "detected cycle"),
        (
            {
                "subjects": ("s",),
                "sources": (StreamSource(name="O", external=ExternalStream("", "o")),),
            },
            None,
            None,
        ),
        (
            {
                "subjects": ("s",),
                "sources": (
                    StreamSource(name="X", external=ExternalStream("", "o")),
                    StreamSource(name="O"),
                ),
            },
            10022,
            "stream external delivery prefix o overlaps with stream subject o.>",
        ),
    ],
)
def test_checks_that_look_at_other_streams(
    fields: dict[str, Any], err_code: int | None, description: str | None
) -> None:
    cfg = StreamConfig(**{"name": "S", **fields})
    if err_code is None:
        check_stream_config(cfg, streams=OTHERS)
    else:
        assert _error(check_stream_config, cfg, streams=OTHERS) == (err_code, description)
    # Without the named streams in view there is nothing to compare against.
    check_stream_config(cfg)


def test_mirror_inherits_direct_get_from_its_origin() -> None:
    cfg = StreamConfig(name="S", mirror=StreamSource(name="O"))
    assert check_stream_config(cfg, streams=OTHERS).mirror_direct is True
    code, text = _error(check_stream_config, cfg, streams=OTHERS, pedantic=True)
    assert (code, text) == (
        10157,
        "pedantic mode: origin stream has direct get set, mirror has it disabled",
    )


@pytest.mark.parametrize(
    ("limits", "fields", "err_code"),
    [
        (StreamLimits(max_bytes_required=True), {}, 10113),
        (StreamLimits(max_bytes_required=True), {"max_bytes": 10}, None),
        (StreamLimits(storage_max_stream_bytes=100), {"max_bytes": 101}, 10122),
        (StreamLimits(storage_max_stream_bytes=100), {"max_bytes": 101, "storage": "memory"}, None),
        (StreamLimits(memory_max_stream_bytes=100), {"max_bytes": 101, "storage": "memory"}, 10122),
        (StreamLimits(memory_max_stream_bytes=100), {"max_bytes": 100, "storage": "memory"}, None),
    ],
)
def test_account_byte_limits(
    limits: StreamLimits, fields: dict[str, Any], err_code: int | None
) -> None:
    cfg = StreamConfig(name="S", **fields)
    if err_code is None:
        assert check_stream_config(cfg, limits).max_bytes == fields["max_bytes"]
    else:
        assert _error(check_stream_config, cfg, limits)[0] == err_code


@pytest.mark.parametrize(
    ("fields", "err_code", "description"),
    [
        ({"name": "a/b"}, 10128, "Stream name can not contain path separators"),
        ({"name": "a\\b"}, 10128, "Stream name can not contain path separators"),
        (
            {"sealed": True, "max_age": -1},
            10052,
            "stream configuration for create can not be sealed",
        ),
        (
            {"mirror_direct": True, "max_age": -1},
            10052,
            "stream has no mirror but does have mirror direct",
        ),
        ({"num_replicas": 3, "max_age": -1}, 10052, "max age can not be negative"),
        ({"num_replicas": 3}, 10074, "replicas > 1 not supported in non-clustered mode"),
        ({"allow_msg_counter": True}, 10052, "message counters are not supported yet"),
        ({"allow_atomic": True}, 10052, "atomic batch publish is not supported yet"),
        ({"allow_msg_schedules": True}, 10052, "message schedules are not supported yet"),
        ({"persist_mode": "async"}, 10052, "async persist mode is not supported yet"),
        (
            {"allow_msg_counter": True, "num_replicas": 3},
            10052,
            "message counters are not supported yet",
        ),
    ],
)
def test_create_only_rules_in_order(
    fields: dict[str, Any], err_code: int, description: str
) -> None:
    cfg = StreamConfig(**{"name": "S", **fields})
    assert _error(validate_create, cfg, []) == (err_code, description)


@pytest.mark.parametrize(
    "fields",
    [{"sources": (StreamSource(name="O"),)}, {"mirror": StreamSource(name="O")}],
)
def test_a_replicated_mirror_or_sourcing_stream_is_valid_in_a_cluster(
    fields: dict[str, object],
) -> None:
    cfg = StreamConfig(name="S", num_replicas=3, storage="memory", **fields)  # type: ignore[arg-type]
    validate_create(cfg, [ORIGIN], StreamLimits(clustered=True))


@pytest.mark.parametrize("storage", ["memory", "file"])
def test_a_replicated_stream_is_valid_in_a_cluster(storage: str) -> None:
    cfg = StreamConfig(name="S", num_replicas=3, storage=storage)  # type: ignore[arg-type]
    outcome = validate_create(cfg, [], StreamLimits(clustered=True))
    assert outcome.config.num_replicas == 3


def test_create_new_stream_returns_defaulted_config() -> None:
    outcome = validate_create(StreamConfig(name="S", subjects=("s.*",)), [ORIGIN])
    assert outcome.existing is False
    assert outcome.config == apply_defaults(StreamConfig(name="S", subjects=("s.*",)))


def test_create_identical_is_idempotent() -> None:
    existing = validate_create(StreamConfig(name="S", metadata={"a": "b"}), []).config
    again = StreamConfig(name="S", metadata={"a": "b", "_nats.ver": "2.15.1", "_nats.level": "5"})
    outcome = validate_create(again, [existing, ORIGIN])
    assert outcome.existing is True
    assert outcome.config is existing


@pytest.mark.parametrize(
    "fields",
    [
        {"subjects": ("t",)},
        {"metadata": {}},
        {"max_msgs": 5},
        {"description": "x"},
        {"storage": "memory"},
    ],
)
def test_create_with_a_different_config_is_refused(fields: dict[str, Any]) -> None:
    existing = validate_create(StreamConfig(name="S", metadata={"a": "b"}), []).config
    changed = StreamConfig(**{"name": "S", "metadata": {"a": "b"}, **fields})
    assert _error(validate_create, changed, [existing]) == (
        10058,
        "stream name already in use with a different configuration",
    )


@pytest.mark.parametrize(
    ("mine", "theirs", "overlap"),
    [
        (("a.b",), ("a.>",), True),
        (("a.*",), ("*.b",), True),
        (("a.*",), ("a.b.c",), False),
        (("a.>",), ("b.>",), False),
        ((">",), ("x",), True),
        (("S",), ("s",), False),
    ],
)
def test_subjects_overlap_with_other_streams(
    mine: tuple[str, ...], theirs: tuple[str, ...], overlap: bool
) -> None:
    other = apply_defaults(StreamConfig(name="T", subjects=theirs))
    cfg = StreamConfig(name="S", subjects=mine, no_ack=True)
    if overlap:
        assert _error(validate_create, cfg, [other]) == (
            10065,
            "subjects overlap with an existing stream",
        )
    else:
        assert validate_create(cfg, [other]).config.subjects == mine


def test_create_request_pipeline() -> None:
    outcome = create_stream_request(b'{"name":"S","subjects":["s"]}', "S", [])
    assert outcome.config.subjects == ("s",)
    assert _error(create_stream_request, b'{"name":"S"}', "T", [])[0] == 10056
    assert (
        _error(create_stream_request, b'{"name":"S","pedantic":true,"max_msgs":-5}', "S", [])[0]
        == 10157
    )


def test_same_config_ignores_only_versioning_metadata() -> None:
    base = apply_defaults(StreamConfig(name="S", metadata={"a": "b"}))
    assert same_config(
        base, StreamConfig(**{**_fields(base), "metadata": {"a": "b", "_nats.req.level": "9"}})
    )
    assert not same_config(base, StreamConfig(**{**_fields(base), "metadata": {"a": "c"}}))


def _fields(cfg: StreamConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in cfg.__struct_fields__}
