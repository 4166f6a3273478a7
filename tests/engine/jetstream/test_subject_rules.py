"""Subject validity, overlap and transform rules used by stream config validation."""

from __future__ import annotations

import pytest

from headwater.server.jetstream.subject_rules import (
    is_subset_match,
    is_valid_publish_subject,
    is_valid_subject,
    subjects_collide,
    transform_error,
    validate_mapping,
)


@pytest.mark.parametrize(
    ("subject", "valid", "literal"),
    [
        ("foo", True, True),
        ("foo.bar", True, True),
        ("foo.*", True, False),
        ("foo.>", True, False),
        (">", True, False),
        ("*.*", True, False),
        ("foo*.bar", True, True),
        ("", False, False),
        ("foo..bar", False, False),
        (".foo", False, False),
        ("foo.", False, False),
        ("foo.>.bar", False, False),
        ("foo bar", False, False),
        ("foo\tbar", False, False),
    ],
)
def test_validity(subject: str, valid: bool, literal: bool) -> None:
    assert is_valid_subject(subject) is valid
    assert is_valid_publish_subject(subject) is literal


@pytest.mark.parametrize(
    ("a", "b", "collide"),
    [
        ("foo", "foo", True),
        ("foo", "bar", False),
        ("foo.bar", "foo.*", True),
        ("foo.bar", "foo.>", True),
        ("foo", "foo.>", False),
        ("foo.*", "*.bar", True),
        ("foo.*", "foo.*.baz", False),
        ("foo.>", "*.bar.baz", True),
        ("foo.*", "bar.>", False),
        (">", "anything.at.all", True),
        ("a.*.c", "a.b.*", True),
        ("a.*.c", "a.b.d", False),
    ],
)
def test_collide_is_symmetric(a: str, b: str, collide: bool) -> None:
    assert subjects_collide(a, b) is collide
    assert subjects_collide(b, a) is collide


@pytest.mark.parametrize(
    ("subject", "test", "subset"),
    [
        ("foo.bar", "foo.*", True),
        ("foo.*", "foo.*", True),
        ("foo.*", ">", True),
        ("foo.*", "*.*", True),
        ("foo.*", "foo.bar", False),
        ("foo.>", "foo.*", False),
        ("foo.bar.baz", "foo.>", True),
        ("foo", "foo.>", False),
        ("$JS.EVENT.x", "$JS.EVENT.>", True),
    ],
)
def test_subset(subject: str, test: str, subset: bool) -> None:
    assert is_subset_match(subject, test) is subset


BAD = "invalid mapping destination"


@pytest.mark.parametrize(
    ("src", "dest", "error"),
    [
        ("foo.*", "bar.$1", None),
        ("foo.*.*", "bar.{{wildcard(2)}}.{{ Wildcard( 1 ) }}", None),
        ("foo.*", "bar.{{partition(10,1)}}", None),
        ("foo.*", "bar.{{SplitFromLeft(1,2)}}.{{slicefromright(1,3)}}", None),
        ("foo.*", "bar.{{split(1,-)}}", None),
        ("", ">", None),
        ("foo.>", "bar.>", None),
        ("foo", "bar", None),
        ("foo.*", "bar.*", "invalid subject"),
        ("foo.>", "bar", "invalid subject"),
        ("foo", "bar.>", "invalid subject"),
        ("foo..x", "bar", "invalid subject"),
        ("foo.*", "bar.$2", f"{BAD}: wildcard index out of range in $2: [2]"),
        (
            "foo",
            "bar.{{wildcard(1)}}",
            f"{BAD}: wildcard index out of range in {{{{wildcard(1)}}}}",
        ),
        (
            "foo.*",
            "{{wildcard(1,2)}}",
            f"{BAD}: too many arguments passed to the function in {{{{wildcard(1,2)}}}}",
        ),
        (
            "foo.*",
            "{{partition(3)}}",
            f"{BAD}: not enough arguments passed to the function in {{{{partition(3)}}}}",
        ),
        (
            "foo.*",
            "{{partition(x,1)}}",
            f"{BAD}: function argument is invalid or in the wrong format in {{{{partition(x,1)}}}}",
        ),
        (
            "foo.*",
            "{{splitfromleft(1)}}",
            f"{BAD}: not enough arguments passed to the function in {{{{splitfromleft(1)}}}}",
        ),
        ("foo.*", "{{split(1, )}}", None),
        ("foo.*", "{{unknown(1)}}", f"{BAD}: unknown function in {{{{unknown(1)}}}}"),
    ],
)
def test_transform_rules(src: str, dest: str, error: str | None) -> None:
    assert validate_mapping(src, dest) == error


@pytest.mark.parametrize(
    ("dest", "error"),
    [
        ("", None),
        ("a..b", f"{BAD}: invalid subject in "),
        ("a.>.b", f"{BAD}: invalid subject in b"),
        ("a.b c", f"{BAD}: invalid subject"),
        ("a.{{nope()}}", f"{BAD}: unknown function in {{{{nope()}}}}"),
    ],
)
def test_mapping_destination_shape(dest: str, error: str | None) -> None:
    assert validate_mapping("a.*", dest) == error


def test_transform_error_defaults_empty_source_to_everything() -> None:
    assert transform_error("", "x.>") is None
    assert transform_error("", "x") == "invalid subject"
