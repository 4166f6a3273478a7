"""Unit tests of the JetStream service's building blocks (no server, no sockets)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from headwater.server.jetstream import api, layout
from headwater.server.jetstream.accountinfo import Resources, friendly_bytes
from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.publish import Dedupe, parse_ttl
from headwater.server.jetstream.streamconfig import StreamConfig
from headwater.server.jetstream.streamconfig_validate import apply_defaults
from headwater.server.jetstream.streaminfo import state_json
from headwater.server.jetstream.transform import SubjectTransform
from headwater.server.jetstream.wire import (
    ZERO_TIME,
    dumps,
    go_int,
    is_empty_request,
    parse_go_duration,
    rfc3339,
    with_headers,
)
from headwater.server.store.base import StreamState

# --- wire --------------------------------------------------------------------------------


def test_dumps_escapes_html_characters_like_go() -> None:
    assert dumps({"s": "a.>", "t": "<&>"}) == b'{"s":"a.\\u003e","t":"\\u003c\\u0026\\u003e"}'
    assert orjson.loads(dumps({"s": "a.>"})) == {"s": "a.>"}


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, ZERO_TIME),
        (1_795_485_288_929_871_100, "2026-11-24T01:54:48.9298711Z"),
        (1_795_485_288_000_000_000, "2026-11-24T01:54:48Z"),
        (1_795_485_288_000_000_001, "2026-11-24T01:54:48.000000001Z"),
    ],
)
def test_rfc3339_trims_trailing_zeros_and_round_trips(ns: int, text: str) -> None:
    assert rfc3339(ns) == text
    assert layout.parse_time(text) == ns


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("5s", 5_000_000_000),
        ("1h30m", 5_400_000_000_000),
        ("1.5s", 1_500_000_000),
        ("0", 0),
        ("-2ms", -2_000_000),
        (".5s", 500_000_000),
        ("2µs", 2_000),
        ("5", None),
        ("", None),
        ("s", None),
        ("1x", None),
    ],
)
def test_go_durations(text: str, ns: int | None) -> None:
    assert parse_go_duration(text) == ns


def test_go_int_only_accepts_ascii_digits() -> None:
    assert go_int("42") == 42
    assert go_int("-1") == -1
    assert go_int("4x") == -1
    assert go_int("") == -1
    assert go_int(None) == -1


def test_empty_request_is_nothing_or_an_empty_object() -> None:
    assert is_empty_request(b"")
    assert is_empty_request(b"{}")
    assert is_empty_request(b" { } ")
    assert not is_empty_request(b" ")
    assert not is_empty_request(b'{"a":1}')
    assert not is_empty_request(b"[]")


def test_with_headers_appends_to_an_existing_block() -> None:
    assert with_headers(None, [("A", "1")]) == b"NATS/1.0\r\nA: 1\r\n\r\n"
    block = b"NATS/1.0\r\nX: y\r\n\r\n"
    assert (
        with_headers(block, [("A", "1"), ("B", "2")]) == b"NATS/1.0\r\nX: y\r\nA: 1\r\nB: 2\r\n\r\n"
    )


# --- transforms --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "dest", "subject", "out"),
    [
        ("orders.*.*", "new.$2.$1", "orders.eu.42", "new.42.eu"),
        ("orders.*.*", "new.{{wildcard(2)}}.{{ wildcard(1) }}", "orders.eu.42", "new.42.eu"),
        ("a.>", "b.>", "a.x.y", "b.x.y"),
        ("a.*.>", "b.$1.>", "a.x.y.z", "b.x.y.z"),
        ("", "all.>", "x.y", "all.x.y"),
        ("lit", "other", "lit", "other"),
        ("a.*", "b.{{splitfromleft(1,2)}}", "a.abcdef", "b.ab.cdef"),
        ("a.*", "b.{{splitfromright(1,2)}}", "a.abcdef", "b.abcd.ef"),
        ("a.*", "b.{{slicefromleft(1,2)}}", "a.abcde", "b.ab.cd.e"),
        ("a.*", "b.{{slicefromright(1,2)}}", "a.abcde", "b.a.bc.de"),
        ("a.*", "b.{{split(1,-)}}", "a.x-y--z", "b.x.y.z"),
    ],
)
def test_transform_maps_matching_subjects(src: str, dest: str, subject: str, out: str) -> None:
    assert SubjectTransform(src, dest).match(subject) == out


def test_transform_leaves_non_matching_subjects_alone() -> None:
    tr = SubjectTransform("orders.*", "new.$1")
    assert tr.match("orders.a.b") is None
    assert tr.match("other.a") is None
    assert tr.apply("other.a") == "other.a"
    assert SubjectTransform("a.>", "b.>").match("a") is None


def test_partition_is_stable_and_in_range() -> None:
    tr = SubjectTransform("p.*", "part.{{partition(4,1)}}")
    seen = {tr.match(f"p.key{i}") for i in range(50)}
    assert seen <= {"part.0", "part.1", "part.2", "part.3"}
    assert len(seen) > 1
    assert tr.match("p.same") == tr.match("p.same")


# --- publish helpers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, (0, True)),
        ("5s", (5, True)),
        ("1m", (60, True)),
        ("30", (30, True)),
        ("never", (-1, True)),
        ("NEVER", (-1, True)),
        ("500ms", (0, False)),
        ("0", (0, False)),
        ("bad", (0, False)),
        ("-5", (0, False)),
    ],
)
def test_ttl_header_parsing(value: str | None, expected: tuple[int, bool]) -> None:
    assert parse_ttl(value) == expected


def test_dedupe_forgets_ids_outside_the_window() -> None:
    d = Dedupe(window_ns=1_000)
    d.record("a", 1, ts=100)
    d.record("b", 2, ts=600)
    assert d.lookup("a", now=900) == 1
    assert d.lookup("a", now=1_100) is None  # 100 + 1000 <= 1100: expired
    assert d.lookup("b", now=1_100) == 2
    assert len(d) == 1
    d.record("b", 7, ts=1_200)
    assert d.lookup("b", now=1_300) == 7


# --- routing table -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "handler"),
    [
        ("INFO", "account_info"),
        ("STREAM.CREATE.X", "stream_create"),
        ("STREAM.MSG.GET.X", "msg_get"),
        ("STREAM.MSG.DELETE.X", "msg_delete"),
        ("STREAM.NAMES", "stream_names"),
        ("STREAM.LEADER.STEPDOWN.X", "stream_leader_stepdown"),
        ("STREAM.PEER.REMOVE.X", "stream_remove_peer"),
    ],
)
def test_routes_match_whole_token_patterns(subject: str, handler: str) -> None:
    route = api.match_route(subject.split("."))
    assert route is not None and route.handler == handler


@pytest.mark.parametrize("subject", ["FOO", "STREAM.CREATE", "STREAM.INFO.A.B", "STREAM.MSG.GET"])
def test_unknown_api_subjects_have_no_route(subject: str) -> None:
    assert api.match_route(subject.split(".")) is None


def test_every_route_has_a_response_type_and_a_handler() -> None:
    from headwater.server.jetstream.streamapi import StreamApi

    for route in api.ROUTES:
        assert route.type.startswith("io.nats.jetstream.api.v1.")
        assert route.type.endswith("_response")
        assert callable(getattr(StreamApi, route.handler))


def test_decode_request_words_type_errors_like_go() -> None:
    gotype = api.GoType("server.X", "struct", {"seq": api.GoType("uint64", "int")})
    with pytest.raises(ApiErrorException) as info:
        api.decode_request(b'{"seq":"x"}', gotype, "JSApiMsgGetRequest")
    assert info.value.error.err_code == 10025
    assert "JSApiMsgGetRequest.seq of type uint64" in info.value.error.description
    assert api.decode_request(b'{"seq":3,"other":1}', gotype, "X") == {"seq": 3}


# --- state and resources -----------------------------------------------------------------


def _state(**kw: int) -> StreamState:
    base = dict(
        msgs=0,
        bytes=0,
        first_seq=1,
        first_ts=0,
        last_seq=0,
        last_ts=0,
        num_deleted=0,
        num_subjects=0,
    )
    base.update(kw)
    return StreamState(**base)  # type: ignore[arg-type]


def test_state_json_of_a_stream_that_never_had_messages() -> None:
    assert state_json(_state()) == {
        "messages": 0,
        "bytes": 0,
        "first_seq": 0,
        "first_ts": ZERO_TIME,
        "last_seq": 0,
        "last_ts": ZERO_TIME,
        "consumer_count": 0,
    }


def test_state_json_after_a_purge_keeps_the_sequence_floor() -> None:
    out = state_json(_state(first_seq=7, last_seq=6, last_ts=1_000_000_000))
    assert out["first_seq"] == 7 and out["last_seq"] == 6
    assert out["first_ts"] == ZERO_TIME and out["last_ts"] == "1970-01-01T00:00:01Z"


def test_state_json_member_order_matches_go() -> None:
    out = state_json(
        _state(msgs=2, bytes=10, last_seq=4, num_deleted=2, num_subjects=1),
        subjects={"a": 2},
        deleted=[2, 3],
    )
    assert list(out) == [
        "messages", "bytes", "first_seq", "first_ts", "last_seq", "last_ts",
        "num_subjects", "subjects", "num_deleted", "deleted", "consumer_count",
    ]  # fmt: skip


def test_friendly_bytes() -> None:
    assert friendly_bytes(512) == "512 B"
    assert friendly_bytes(2000) == "1.95 KB"
    assert friendly_bytes(18_957_047_808) == "17.66 GB"


def test_reservations_refuse_what_does_not_fit() -> None:
    res = Resources(max_memory=3000, max_store=2000)
    a = apply_defaults(StreamConfig(name="A", max_bytes=1500))
    res.check_reservation(a, [])
    b = apply_defaults(StreamConfig(name="B", max_bytes=1500))
    with pytest.raises(ApiErrorException) as info:
        res.check_reservation(b, [a])
    assert info.value.error.err_code == 10047
    # Unlimited streams reserve one byte; updating A may keep its own reservation.
    res.check_reservation(apply_defaults(StreamConfig(name="C")), [a])
    res.check_reservation(apply_defaults(StreamConfig(name="A", max_bytes=2000)), [a], "A")
    m = apply_defaults(StreamConfig(name="M", storage="memory", max_bytes=5000))
    with pytest.raises(ApiErrorException) as info:
        res.check_reservation(m, [a])
    assert info.value.error.err_code == 10028


def test_publish_budget_is_checked_before_the_append() -> None:
    res = Resources(max_memory=-1, max_store=100)
    res.storage.used = 100
    assert not res.limits_exceeded("file")
    res.storage.used = 101
    assert res.limits_exceeded("file")
    assert not res.limits_exceeded("memory")


# --- layout ------------------------------------------------------------------------------


def test_meta_round_trip(tmp_path: Path) -> None:
    root = layout.jetstream_root(str(tmp_path))
    cfg = apply_defaults(StreamConfig(name="S", subjects=("s.>",), max_msgs=10))
    created = time.time_ns()
    layout.write_meta(layout.stream_dir(root, "S"), cfg, created)
    meta = layout.stream_dir(root, "S") / layout.META_FILE
    raw = orjson.loads(meta.read_bytes())
    assert next(iter(raw)) == "Created"
    assert raw["subjects"] == ["s.>"]
    (found,) = layout.load_streams(root)
    assert found.config == cfg
    assert found.created_ns == created
    assert root == tmp_path / "jetstream"
    assert (tmp_path / "jetstream" / "$G" / "streams" / "S" / "meta.inf").is_file()


def test_unreadable_meta_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = layout.jetstream_root(str(tmp_path))
    bad = layout.stream_dir(root, "BAD")
    bad.mkdir(parents=True)
    (bad / layout.META_FILE).write_text("{not json")
    assert layout.load_streams(root) == []
    assert "Error recovering stream 'BAD'" in caplog.text


def test_default_store_dir_is_under_the_temp_dir() -> None:
    import tempfile

    assert layout.jetstream_root("") == Path(tempfile.gettempdir()) / "nats" / "jetstream"
