"""Choosing a replicated stream's peers when its replica count changes or a peer is removed
(jetstream/groupmembers.py), with nats-server's errors."""

from __future__ import annotations

import pytest

from headwater.server.jetstream.errors import ApiErrorException
from headwater.server.jetstream.groupmembers import ranked, replaced, resized

SERVERS = ["s1", "s2", "s3", "s4", "s5"]


def _err(exc: pytest.ExceptionInfo[ApiErrorException]) -> tuple[int, str]:
    return exc.value.error.err_code, exc.value.error.description


def test_growing_adds_the_least_loaded_servers() -> None:
    load = {"s4": 3, "s5": 1}
    grown = resized(
        ("s1", "s2", "s3"), 5, leader="s1", in_sync=frozenset(), candidates=SERVERS, load=load
    )
    assert grown == ("s1", "s2", "s3", "s5", "s4")
    assert ranked(["s4", "s5", "s6"], load) == ["s6", "s5", "s4"]


def test_growing_past_the_servers_there_are_is_refused() -> None:
    with pytest.raises(ApiErrorException) as exc:
        resized(
            ("s1", "s2", "s3"), 5, leader="s1", in_sync=frozenset(), candidates=SERVERS[:4], load={}
        )
    assert _err(exc) == (10005, "no suitable peers for placement")


def test_shrinking_keeps_the_leader_and_the_replicas_in_sync() -> None:
    peers = ("s1", "s2", "s3", "s4", "s5")
    in_sync = frozenset({"s1", "s2", "s5"})
    kept = resized(peers, 3, leader="s5", in_sync=in_sync, candidates=SERVERS, load={})
    assert kept == ("s1", "s2", "s5")
    # Among equals the last named go first.
    everyone = frozenset(peers)
    assert resized(peers, 3, leader="s1", in_sync=everyone, candidates=(), load={}) == peers[:3]


def test_the_same_count_changes_nothing() -> None:
    peers = ("s1", "s2", "s3")
    assert resized(peers, 3, leader="s2", in_sync=frozenset(), candidates=(), load={}) == peers


def test_a_removed_peer_is_replaced_in_its_place() -> None:
    peers = ("s1", "s2", "s3")
    assert replaced(peers, "s2", candidates=SERVERS, load={"s4": 2}) == ("s1", "s5", "s3")


def test_removing_a_server_that_is_no_peer_or_with_no_spare() -> None:
    with pytest.raises(ApiErrorException) as exc:
        replaced(("s1", "s2", "s3"), "s9", candidates=SERVERS, load={})
    assert _err(exc) == (10040, "peer not a member")
    with pytest.raises(ApiErrorException) as exc:
        replaced(("s1", "s2", "s3"), "s2", candidates=SERVERS[:3], load={})
    assert _err(exc) == (10075, "peer remap failed")
