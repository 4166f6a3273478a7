"""Template requests and the template meta files, without a server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.streamconfig import StreamConfig
from headwater.server.jetstream.templateapi import parse_template_request
from headwater.server.jetstream.templates import (
    canonical_name,
    check_not_template_owned,
    load_templates,
    remove_template_dir,
    template_dir,
    template_to_json,
    write_template,
)


def body(**fields: object) -> bytes:
    base: dict[str, object] = {"name": "T", "config": {"subjects": ["C.*"]}, "max_streams": 4}
    return json.dumps(base | fields).encode()


def err_code(raw: bytes, name: str = "T") -> tuple[int, str]:
    with pytest.raises(ApiErrorException) as caught:
        parse_template_request(raw, name)
    return caught.value.error.err_code, caught.value.error.description


def test_canonical_name_replaces_token_separators() -> None:
    assert canonical_name("CLIENT.acme") == "CLIENT_acme"
    assert canonical_name("a.b.c") == "a_b_c"
    assert canonical_name("plain") == "plain"


def test_parse_applies_stream_defaults_under_placeholder_name() -> None:
    tc = parse_template_request(body(), "T")
    assert (tc.name, tc.max_streams) == ("T", 4)
    assert tc.config.name == "_"
    assert tc.config.subjects == ("C.*",)
    assert tc.config.max_msgs == -1, "server defaults are applied"
    assert tc.config.duplicate_window == 120 * 1_000_000_000


def test_parse_errors_in_reference_order() -> None:
    # Invalid JSON comes before the name check.
    assert err_code(b"{", "OTHER")[0] == 10025
    assert err_code(body(), "OTHER") == (10073, "template name in subject does not match request")
    assert err_code(body(config={"name": "S"})) == (10066, "template config name should be empty")
    assert err_code(body(config=None))[0] == 10066
    long = "x" * 256
    assert err_code(body(name=long), long) == (
        10066,
        "template name is too long, maximum allowed is 255",
    )
    assert err_code(body(config={"subjects": ["C.*"], "max_age": -5}))[0] == 10052
    assert err_code(body(config={"subjects": ["C.*"], "retention": "bogus"}))[0] == 10025
    assert err_code(body(max_streams=2**32))[0] == 10025
    assert err_code(body(max_streams=-1))[0] == 10025
    # The name becomes a directory: a path separator is refused (a Headwater check).
    assert err_code(body(name="a/b"), "a/b")[0] == 10066


def test_meta_round_trip_and_removal(tmp_path: Path) -> None:
    tc = parse_template_request(body(), "T")
    write_template(tmp_path, tc)
    meta = template_dir(tmp_path, "T") / "meta.inf"
    assert json.loads(meta.read_bytes()) == template_to_json(tc)
    (loaded,) = load_templates(tmp_path)
    assert loaded == tc
    remove_template_dir(tmp_path, "T")
    assert load_templates(tmp_path) == []


def test_unreadable_meta_is_skipped(tmp_path: Path) -> None:
    write_template(tmp_path, parse_template_request(body(), "T"))
    broken = template_dir(tmp_path, "BROKEN")
    broken.mkdir()
    (broken / "meta.inf").write_text("{not json")
    assert [t.name for t in load_templates(tmp_path)] == ["T"]


def test_plain_create_may_not_claim_a_template_owner() -> None:
    check_not_template_owned(StreamConfig(name="S"))
    with pytest.raises(ApiErrorException) as caught:
        check_not_template_owned(StreamConfig(name="S", template_owner="T"))
    error = caught.value.error
    assert (error.code, error.err_code, error.description) == (
        500,
        10049,
        "stream not owned by template",
    )
