"""The overlap tries against the pairwise rules they replace, on random small inputs.

``subject_overlap`` must answer exactly as ``subjects_collide``/``is_subset_match`` applied to
every pair (the reference's loops), quirks of invalid stored subjects included; and the config
checks built on it must report the same error as the pairwise loops did.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.server.jetstream import errors
from headwater.server.jetstream.consumerconfig import ConsumerConfig
from headwater.server.jetstream.consumerconfig_validate import validate_consumer
from headwater.server.jetstream.streamconfig import StreamConfig
from headwater.server.jetstream.streamconfig_validate import check_stream_config
from headwater.server.jetstream.subject_overlap import CollisionIndex, SubsetIndex
from headwater.server.jetstream.subject_rules import (
    is_subset_match,
    is_valid_subject,
    subjects_collide,
)

_TOKENS = st.sampled_from(["a", "b", "*", ">", "*x", ">x", "", "c d"])
_ANY = st.lists(_TOKENS, min_size=1, max_size=4).map(".".join)
_VALID = _ANY.filter(is_valid_subject)


@settings(max_examples=600, deadline=None)
@given(query=_VALID, stored=st.lists(_ANY, max_size=6))
def test_collides_matches_pairwise(query: str, stored: list[str]) -> None:
    expected = any(subjects_collide(query, s) for s in stored)
    assert CollisionIndex(stored).collides(query) == expected
    # The rule is symmetric, so the trie may hold either side.
    assert any(subjects_collide(s, query) for s in stored) == expected


@settings(max_examples=600, deadline=None)
@given(query=_VALID, stored=st.lists(_ANY, max_size=6))
def test_is_subset_matches_pairwise(query: str, stored: list[str]) -> None:
    expected = any(is_subset_match(query, s) for s in stored)
    index = SubsetIndex([*stored, query])
    index.remove(query)
    assert index.is_subset(query) == expected


def _pairwise_stream_error(subjects: list[str]) -> str | None:
    """The old loop's verdict on the subjects alone (validity and overlap, in order)."""
    for index, subject in enumerate(subjects):
        if not is_valid_subject(subject):
            return "invalid subject"
        for other in subjects[index + 1 :]:
            if subjects_collide(other, subject):
                return f'subject "{subject}" overlaps with "{other}"'
    return None


def _stream_error(subjects: list[str]) -> str | None:
    cfg = StreamConfig(name="S", subjects=tuple(subjects), no_ack=True)
    try:
        check_stream_config(cfg)
    except errors.ApiErrorException as exc:
        return exc.error.description
    return None


@settings(max_examples=400, deadline=None)
@given(st.lists(_ANY.filter(lambda s: s != ">"), min_size=1, max_size=6))
def test_stream_subject_checks_report_what_pairwise_did(subjects: list[str]) -> None:
    assert _stream_error(subjects) == _pairwise_stream_error(subjects)


def _pairwise_filter_error(filters: list[str]) -> int | None:
    for outer, subject in enumerate(filters):
        if not is_valid_subject(subject):
            return 10052
        for inner, other in enumerate(filters):
            if inner != outer and is_subset_match(subject, other):
                return 10138
    return None


def _filter_error(filters: list[str]) -> int | None:
    stream = StreamConfig(name="S", subjects=(">",), no_ack=True)
    cfg = ConsumerConfig(durable_name="C", ack_policy="explicit", filter_subjects=tuple(filters))
    try:
        validate_consumer(cfg, stream, is_pull=True, existing=None, action="")
    except errors.ApiErrorException as exc:
        if exc.error.err_code in (10052, 10138):
            return exc.error.err_code
        raise
    return None


@settings(max_examples=400, deadline=None)
@given(st.lists(_ANY.filter(bool), min_size=2, max_size=6))
def test_filter_checks_report_what_pairwise_did(filters: list[str]) -> None:
    assert "" not in filters
    assert _filter_error(filters) == _pairwise_filter_error(filters)


@pytest.mark.parametrize("count", [20_000])
def test_large_configs_are_checked_quickly(count: int) -> None:
    subjects = tuple(f"big.{i}.*" for i in range(count))
    start = time.monotonic()
    checked = check_stream_config(StreamConfig(name="S", subjects=subjects))
    assert len(checked.subjects) == count
    assert time.monotonic() - start < 3.0
    stream = StreamConfig(name="S", subjects=("big.>",))
    filters = tuple(f"big.{i}.*" for i in range(5_000))
    cfg = ConsumerConfig(durable_name="C", ack_policy="explicit", filter_subjects=filters)
    start = time.monotonic()
    validate_consumer(cfg, stream, is_pull=True, existing=None, action="")
    assert time.monotonic() - start < 3.0
