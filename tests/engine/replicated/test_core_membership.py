"""Rule 10 of the replication core: changing a group's peers (docs/REPLICATION.md)."""

from __future__ import annotations

from headwater.server.replicated.core import ProposeRecord, Replica, Send
from headwater.server.replicated.messages import AppendReply, Entry, TimeoutNow
from headwater.server.replicated.record import GroupRecord

from .test_core import appends, leader, of, ok


def _adopt(r: Replica, peers: str, in_sync: str, revision: int) -> list[object]:
    """The leader's own proposal succeeded: etcd now holds it at `revision`."""
    record = GroupRecord(tuple(peers), r.epoch, r.name, frozenset(in_sync), revision)
    return r.on_cas_result(True, record)


def _proposed(actions: list[object]) -> GroupRecord:
    [proposal] = of(actions, ProposeRecord)
    return proposal.new


def _caught_up(r: Replica, f: str, at: int) -> list[object]:
    """`f` answers the Append of the round it was added in, durable up to `at`; then the
    leader's next tick (where it changes its record)."""
    out = r.on_message(AppendReply(r.epoch, f, True, at, at, r._round))
    assert r.now is not None
    return out + r.on_tick(r.now + 1)


def test_growing_adds_peers_outside_in_sync_then_each_joins_once_caught_up() -> None:
    r = leader()  # a leads epoch 2 of a, b, c; its no-op committed everywhere
    new = _proposed(r.change_peers("abcde"))
    assert new.peers == tuple("abcde") and new.in_sync == frozenset("abc")
    out = _adopt(r, "abcde", "abc", revision=3)
    assert appends(out, "d") and appends(out, "e")  # the new peers hear from it at once
    last = r.last_index
    proposed = _proposed(_caught_up(r, "d", last))
    assert proposed.in_sync == frozenset("abcd") and proposed.peers == tuple("abcde")


def test_a_reply_sent_before_the_peer_was_added_is_ignored() -> None:
    r = leader()
    r.change_peers("abcd")
    _adopt(r, "abcd", "abc", revision=3)
    # A reply of an earlier incarnation of d (deleted since), from before its addition:
    # it claims entries durable that the new replica does not hold.
    stale = AppendReply(r.epoch, "d", True, r.last_index, r.last_index, 0)
    assert r.on_message(stale) == []
    assert r._match["d"] == 0
    assert of(r.on_tick(10), ProposeRecord) == []  # not put into in_sync on its word


def test_shrinking_takes_the_unwanted_out_of_peers_and_in_sync_at_once() -> None:
    r = leader(in_sync="abc")
    r.change_peers("abcde")
    _adopt(r, "abcde", "abc", revision=3)
    for revision, f, in_sync in ((4, "d", "abcd"), (5, "e", "abcde")):
        assert _proposed(_caught_up(r, f, r.last_index)).in_sync == frozenset(in_sync)
        _adopt(r, "abcde", in_sync, revision)
    assert r.record is not None and r.record.in_sync == frozenset("abcde")
    new = _proposed(r.change_peers("abc"))
    assert new.peers == tuple("abc") and new.in_sync == frozenset("abc")
    _adopt(r, "abc", "abc", revision=6)
    assert sorted(r._next) == ["b", "c"]  # d and e are no longer tracked


def test_a_replaced_member_stays_until_its_replacement_is_in_sync() -> None:
    r = leader()
    added = _proposed(r.change_peers("abd"))
    assert added.peers == tuple("abcd") and added.in_sync == frozenset("abc")
    _adopt(r, "abcd", "abc", revision=3)
    assert of(r.on_tick(10), ProposeRecord) == []  # c stays: d is not in sync yet
    joined = _proposed(_caught_up(r, "d", r.last_index))
    assert joined.in_sync == frozenset("abcd")
    _adopt(r, "abcd", "abcd", revision=4)
    assert r.now is not None
    removed = _proposed(r.on_tick(r.now + 1))  # record changes are made on ticks
    assert removed.peers == tuple("abd") and removed.in_sync == frozenset("abd")


def test_an_unwanted_member_out_of_in_sync_goes_at_once() -> None:
    r = leader(in_sync="ab")  # c fell out of in_sync (it is down)
    new = _proposed(r.change_peers("ab"))
    assert new.peers == tuple("ab") and new.in_sync == frozenset("ab")


def test_no_removal_leaves_in_sync_below_a_quorum_of_the_new_peers() -> None:
    r = leader(in_sync="ab")  # c is down, out of in_sync
    r.change_peers("abcde")
    _adopt(r, "abcde", "ab", revision=3)
    # Now shrink to a, c, d: b must go (it is in in_sync) but c and d are not in sync, and a
    # alone is no quorum of three.
    r.change_peers("acd")
    assert of(r.on_tick(10), ProposeRecord) == []


def test_a_leader_that_is_not_wanted_hands_over_to_a_wanted_member_of_in_sync() -> None:
    r = leader()
    assert of(r.change_peers("bc"), ProposeRecord) == []
    assert r.transferring_to in ("b", "c")
    target = r.transferring_to
    assert target is not None
    out = r.on_message(ok(target, r.last_index))
    assert [a.to for a in of(out, Send) if isinstance(a.msg, TimeoutNow)] == [target]


def test_only_a_leader_changes_peers() -> None:
    r = Replica("b", [Entry(1, 1, b"x")])
    assert r.change_peers("abc") == []
    assert r.wanted_peers is None
