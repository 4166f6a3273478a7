"""The replication core's rules, one by one, on hand-built inputs (docs/REPLICATION.md)."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.server.replicated.core import (
    NOOP,
    Acknowledge,
    Apply,
    Config,
    Leadership,
    Persist,
    ProposeRecord,
    ReadReady,
    ReadRejected,
    Rebase,
    Rejected,
    Replica,
    SafetyError,
    Send,
    SendSnapshot,
    Truncate,
)
from headwater.server.replicated.messages import Append, AppendReply, Entry, TimeoutNow
from headwater.server.replicated.record import GroupRecord, quorum

CFG = Config(
    heartbeat_interval=50,
    election_timeout=300,
    election_stagger=100,
    sync_timeout=200,
    cas_timeout=300,
)
PEERS = ("a", "b", "c")


def rec(epoch: int, leader: str, in_sync: str = "abc", revision: int = 1) -> GroupRecord:
    return GroupRecord(PEERS, epoch, leader, frozenset(in_sync), revision)


def of(actions: list[Any], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def replies(actions: list[Any]) -> list[AppendReply]:
    return [a.msg for a in of(actions, Send) if isinstance(a.msg, AppendReply)]


def appends(actions: list[Any], to: str | None = None) -> list[Append]:
    return [
        a.msg for a in of(actions, Send) if isinstance(a.msg, Append) and (to is None or a.to == to)
    ]


def log(*epochs: int) -> list[Entry]:
    return [Entry(i, e, f"op{i}".encode()) for i, e in enumerate(epochs, 1)]


def follower(
    name: str = "b", recovered: list[Entry] | None = None, record: GroupRecord | None = None
) -> Replica:
    r = Replica(name, recovered or [], CFG)
    r.on_tick(0)
    r.on_record(record or rec(1, "a"))
    return r


def leader(
    name: str = "a", recovered: list[Entry] | None = None, in_sync: str = "abc", settle: bool = True
) -> Replica:
    """A replica that won epoch 2 (it campaigned from epoch 1, whose leader named it); with
    `settle`, its no-op entry is fsynced everywhere in `in_sync` and committed."""
    r = Replica(name, recovered or [], CFG)
    r.on_tick(0)
    out = r.on_record(rec(1, name, in_sync, revision=1))
    [proposal] = of(out, ProposeRecord)  # rule 5: named leader without having won: campaign
    assert proposal.new.epoch == 2 and proposal.expected_revision == 1
    r.on_cas_result(True, rec(2, name, in_sync, revision=2))
    assert r.is_leader and r.epoch == 2
    assert r.log[-1] == Entry(len(r.log), 2, NOOP)
    if settle:
        r.on_persisted(len(r.log))
        for member in sorted(set(in_sync) - {name}):
            r.on_message(ok(member, len(r.log)))
        assert r.commit == len(r.log)
    return r


def append(
    epoch: int, prev: int, prev_epoch: int, entries: list[Entry], commit: int = 0, sender: str = "a"
) -> Append:
    return Append(epoch, sender, prev, prev_epoch, tuple(entries), commit)


def ok(sender: str, durable: int, epoch: int = 2, hint: int | None = None) -> AppendReply:
    return AppendReply(epoch, sender, True, durable, durable if hint is None else hint)


# Rule 1: which Appends a follower accepts ----------------------------------------------------


def test_follower_rejects_an_older_epoch_and_names_its_own() -> None:
    r = follower(record=rec(3, "c", revision=4))
    out = r.on_message(append(2, 0, 0, log(2)))
    assert of(out, Persist) == []
    assert replies(out) == [AppendReply(3, "b", False, 0, 0)]


def test_follower_ignores_a_sender_that_is_not_the_epochs_leader() -> None:
    r = follower(record=rec(2, "a"))
    assert r.on_message(append(2, 0, 0, log(2), sender="c")) == []
    assert r.log == []


def test_follower_learns_a_later_epoch_from_its_leader() -> None:
    r = follower(record=rec(1, "a"))
    out = r.on_message(append(2, 0, 0, log(2), sender="c"))
    assert r.epoch == 2 and r.leader == "c"
    assert [m.to for m in of(out, Send)] == ["c"]


def test_a_restarted_replica_takes_no_append_before_a_record() -> None:
    r = Replica("b", log(1, 1), CFG)
    r.on_tick(0)
    assert r.on_message(append(1, 2, 1, [Entry(3, 1, b"x")])) == []
    assert len(r.log) == 2


def test_a_campaigner_fences_the_current_epoch_before_proposing() -> None:
    r = follower(recovered=log(1), record=rec(1, "a"))
    r.on_message(append(1, 1, 1, []))
    out = r.on_tick(1000)
    [proposal] = of(out, ProposeRecord)
    assert proposal.new == GroupRecord(PEERS, 2, "b", frozenset("abc"))
    assert proposal.expected_revision == 1
    assert r.fenced == 1
    # The old leader's entries are refused, silently: it can commit nothing more with us.
    assert r.on_message(append(1, 1, 1, [Entry(2, 1, b"x")])) == []
    assert len(r.log) == 1


def test_mismatch_past_the_end_hints_the_last_index() -> None:
    r = follower(recovered=log(1, 1))
    out = r.on_message(append(1, 5, 1, [Entry(6, 1, b"x")]))
    assert replies(out) == [AppendReply(1, "b", False, 0, 2)]


def test_mismatch_on_epoch_hints_before_the_conflicting_epoch() -> None:
    r = follower(recovered=log(1, 1, 2, 2), record=rec(3, "a"))
    out = r.on_message(append(3, 4, 3, [Entry(5, 3, b"x")]))
    assert replies(out) == [AppendReply(3, "b", False, 0, 2)]


def test_a_conflicting_suffix_is_truncated_before_appending() -> None:
    r = follower(recovered=log(1, 1, 2, 2), record=rec(3, "a"))
    new = [Entry(3, 3, b"n3"), Entry(4, 3, b"n4"), Entry(5, 3, b"n5")]
    out = r.on_message(append(3, 2, 1, new))
    assert [type(a) for a in out if not isinstance(a, Send)] == [Truncate, Persist]
    assert of(out, Truncate) == [Truncate(2)]
    assert of(out, Persist) == [Persist(tuple(new))]
    assert r.log == [*log(1, 1), *new]
    assert r.fsynced == 2  # what is fsynced and still agrees with the log


def test_a_stale_append_neither_truncates_nor_lowers_the_match() -> None:
    r = follower(record=rec(1, "a"))
    r.on_message(append(1, 0, 0, log(1, 1, 1)))
    out = r.on_message(append(1, 0, 0, log(1, 1)))
    assert of(out, Truncate) == [] and of(out, Persist) == []
    assert r.matched == 3 and len(r.log) == 3


def test_committed_entries_are_never_truncated() -> None:
    r = follower(record=rec(1, "a"))
    r.on_message(append(1, 0, 0, log(1, 1, 1), commit=3))
    r.on_persisted(3)
    assert r.commit == 3
    # A leader whose log differs inside the committed prefix is a bug: refuse loudly.
    with pytest.raises(SafetyError):
        r.on_message(append(2, 1, 1, [Entry(2, 2, b"other")], sender="c"))


# Rule 2: what a follower reports durable -----------------------------------------------------


def test_durable_is_fsynced_and_matched() -> None:
    r = follower(record=rec(1, "a"))
    out = r.on_message(append(1, 0, 0, log(1, 1, 1)))
    assert replies(out) == [AppendReply(1, "b", True, 0, 3)]  # held, not yet fsynced
    out = r.on_persisted(3)
    assert replies(out) == [AppendReply(1, "b", True, 3, 3)]


def test_one_sync_covering_several_persists_reports_once() -> None:
    # The runner hands the core every Persist one fsync covered at once: the state is the
    # same as one by one, with one durable report (and one apply) instead of one per Persist.
    entries = log(1, 1, 1, 1)
    r = follower(record=rec(1, "a"))
    r.on_message(append(1, 0, 0, entries[:1], commit=1))
    r.on_message(append(1, 1, 1, entries[1:3], commit=3))
    r.on_message(append(1, 3, 1, entries[3:], commit=4))
    out = r.on_persisted_many([1, 3, 4])
    assert replies(out) == [AppendReply(1, "b", True, 4, 4)]
    assert of(out, Apply) == [Apply(tuple(entries))]
    assert (r.fsynced, r.commit, r.applied) == (4, 4, 4)
    with pytest.raises(SafetyError):
        r.on_persisted_many([5])  # no Persist in flight
    b = follower(record=rec(1, "a"))
    b.on_message(append(1, 0, 0, entries[:2]))
    b.on_message(append(1, 2, 1, entries[2:]))
    with pytest.raises(SafetyError):
        b.on_persisted_many([2, 3])  # the second Persist ends at 4


def test_a_leader_commits_once_for_several_persists_of_one_sync() -> None:
    r = leader()
    r.propose(b"x", "t1")
    r.propose(b"y", "t2")
    for member in "bc":
        r.on_message(ok(member, 3))
    out = r.on_persisted_many([2, 3])
    assert of(out, Acknowledge) == [Acknowledge("t1", 2), Acknowledge("t2", 3)]
    assert len(of(out, Apply)) == 1 and r.commit == 3


def test_a_recovered_log_counts_only_once_matched_in_this_epoch() -> None:
    r = follower(recovered=log(1, 1, 1, 1), record=rec(2, "a"))
    assert r.fsynced == 4
    out = r.on_message(append(2, 2, 1, []))
    assert replies(out) == [AppendReply(2, "b", True, 2, 2)]


def test_the_match_restarts_at_a_new_epoch() -> None:
    r = follower(record=rec(1, "a"))
    r.on_message(append(1, 0, 0, log(1, 1)))
    r.on_persisted(2)
    assert r.matched == 2
    r.on_record(rec(2, "c", revision=2))
    assert r.matched == 0
    out = r.on_message(append(2, 1, 1, [], sender="c"))
    assert replies(out) == [AppendReply(2, "b", True, 1, 1)]


def test_a_leader_counts_only_replies_of_its_epoch() -> None:
    r = leader()
    r.propose(b"x", "t")
    r.on_persisted(2)
    out = r.on_message(ok("b", 2, epoch=1)) + r.on_message(ok("c", 2, epoch=1))
    assert of(out, Acknowledge) == [] and r.commit == 1


# Rule 3: commit, apply, acknowledge ----------------------------------------------------------


def test_commit_waits_for_every_in_sync_member() -> None:
    r = leader()
    out = r.propose(b"x", "t")
    assert of(out, Persist) == [Persist((Entry(2, 2, b"x"),))]
    assert [m.entries for m in appends(out)] == [(Entry(2, 2, b"x"),)] * 2
    assert of(r.on_persisted(2), Acknowledge) == []
    assert of(r.on_message(ok("b", 2)), Acknowledge) == []
    out = r.on_message(ok("c", 2))
    assert of(out, Apply) == [Apply((Entry(2, 2, b"x"),))]
    assert of(out, Acknowledge) == [Acknowledge("t", 2)]
    assert out.index(of(out, Apply)[0]) < out.index(of(out, Acknowledge)[0])


def test_the_leader_counts_its_own_fsync() -> None:
    r = leader()
    r.propose(b"x", "t")
    r.on_message(ok("b", 2))
    assert of(r.on_message(ok("c", 2)), Acknowledge) == []
    assert of(r.on_persisted(2), Acknowledge) == [Acknowledge("t", 2)]


def test_commit_uses_the_latest_in_sync() -> None:
    r = leader()
    r.propose(b"x", "t")
    r.on_persisted(2)
    r.on_message(ok("b", 2))
    out = r.on_record(rec(2, "a", "ab", revision=3))
    assert of(out, Acknowledge) == [Acknowledge("t", 2)]


def test_a_member_being_added_counts_from_the_proposal_on() -> None:
    """Design refinement: while the swap that adds c is in flight, c must hold what commits,
    or c could join in_sync (and later lead) without an entry committed meanwhile."""
    r = leader(in_sync="ab")
    r.on_message(ok("c", 1))
    out = r.on_tick(10)
    [proposal] = of(out, ProposeRecord)
    assert proposal.new.in_sync == frozenset("abc")
    r.propose(b"x", "t")
    r.on_persisted(2)
    assert of(r.on_message(ok("b", 2)), Acknowledge) == []  # c is counted already
    assert of(r.on_message(ok("c", 2)), Acknowledge) == [Acknowledge("t", 2)]


def test_a_new_leader_appends_a_no_op_and_commits_its_inherited_tail() -> None:
    r = leader(recovered=log(1, 1, 1), settle=False)
    assert r.epoch_start == 3 and r.commit == 0
    assert r.log == [*log(1, 1, 1), Entry(4, 2, NOOP)]
    r.on_message(ok("b", 3))
    out = r.on_message(ok("c", 3))
    # The inherited tail commits in the new epoch before (and without) the no-op.
    assert of(out, Apply) == [Apply(tuple(log(1, 1, 1)))]


def test_the_no_op_cuts_back_a_followers_stale_tail() -> None:
    """Regression (simulator seed 10719, R5): followers kept uncommitted entries of an older
    epoch past the new leader's log end, so their logs never equalled the committed log."""
    b = follower("b", recovered=log(1, 1, 1, 1, 1), record=rec(2, "a"))
    # What the leader of epoch 2, whose log ends at 3, sends first: its no-op.
    out = b.on_message(append(2, 3, 1, [Entry(4, 2, NOOP)]))
    assert of(out, Truncate) == [Truncate(3)]
    assert b.log == [*log(1, 1, 1), Entry(4, 2, NOOP)]


def test_a_follower_applies_up_to_its_durable_match() -> None:
    r = follower(record=rec(1, "a"))
    out = r.on_message(append(1, 0, 0, log(1, 1, 1), commit=3))
    assert of(out, Apply) == []  # not fsynced yet
    out = r.on_persisted(3)
    assert of(out, Apply) == [Apply(tuple(log(1, 1, 1)))]
    out = r.on_message(append(1, 3, 1, [Entry(4, 1, b"y")], commit=3))
    assert of(out, Apply) == []


# Rule 4: in_sync changes and heartbeats ------------------------------------------------------


def test_heartbeats_every_interval() -> None:
    r = leader()
    assert appends(r.on_tick(20)) == []
    beats = appends(r.on_tick(50))
    assert [(m.prev_index, m.entries) for m in beats] == [(1, ()), (1, ())]


def test_a_silent_follower_is_taken_out_while_entries_wait() -> None:
    r = leader()
    r.on_tick(0)
    for now in (100, 200, 300, 400):  # both answer the heartbeats, caught up: kept
        assert of(r.on_tick(now), ProposeRecord) == []
        r.on_message(ok("b", 1))
        r.on_message(ok("c", 1))
    r.propose(b"x", "t")
    r.on_persisted(2)
    r.on_tick(500)
    r.on_message(ok("b", 2))
    assert of(r.on_tick(600), ProposeRecord) == []  # c silent for 200 ms: not yet
    [proposal] = of(r.on_tick(601), ProposeRecord)
    assert proposal.new.in_sync == frozenset("ab")
    assert proposal.expected_revision == 2
    out = r.on_cas_result(True, rec(2, "a", "ab", revision=3))
    assert of(out, Acknowledge) == [Acknowledge("t", 2)]


def test_a_follower_not_heard_is_taken_out_of_an_idle_stream_too() -> None:
    """A read needs a round echoed by every member of in_sync (rule 9): a member that is
    down must go even when no entry waits, or reads of an idle stream stall until the next
    write (found by the catch-up benchmark: STREAM.INFO refused for 100 s)."""
    r = leader()
    r.on_tick(0)
    for now in (100, 200):
        assert of(r.on_tick(now), ProposeRecord) == []
        r.on_message(ok("b", 1))  # b answers every heartbeat; c is down
    [proposal] = of(r.on_tick(201), ProposeRecord)
    assert proposal.new.in_sync == frozenset("ab")


def test_in_sync_never_shrinks_below_a_quorum() -> None:
    assert quorum(3) == 2 and quorum(5) == 3
    r = leader(in_sync="ab")
    r.propose(b"x", "t")
    r.on_persisted(2)
    for now in (100, 500, 1000):
        assert of(r.on_tick(now), ProposeRecord) == []


def test_a_follower_goes_back_once_it_holds_the_commit_and_the_inherited_tail() -> None:
    """Design refinement: a new leader's commit index may lag what the previous leader
    committed, so a returning follower must also reach the leader's log at the epoch start."""
    r = leader(recovered=log(1, 1, 1), in_sync="ab", settle=False)
    assert r.epoch_start == 3 and r.commit == 0
    r.on_message(ok("c", 0))
    assert of(r.on_tick(5), ProposeRecord) == []  # 0 >= commit, but c lacks the tail
    r.on_message(ok("c", 2))
    assert of(r.on_tick(10), ProposeRecord) == []  # c lacks entry 3 of the inherited tail
    r.on_message(ok("c", 3))
    [proposal] = of(r.on_tick(20), ProposeRecord)
    assert proposal.new.in_sync == frozenset("abc")


# Rule 5: campaigns ---------------------------------------------------------------------------


def test_campaign_timeout_is_staggered_by_name() -> None:
    b = follower("b", record=rec(1, "a"))
    c = follower("c", record=rec(1, "a"))
    # ranks: a 0, b 1, c 2 -> b after 300 + 100, c after 300 + 200
    assert of(b.on_tick(400), ProposeRecord) == []
    assert of(b.on_tick(401), ProposeRecord) != []
    assert of(c.on_tick(401), ProposeRecord) == []
    assert of(c.on_tick(501), ProposeRecord) != []


def test_only_in_sync_members_campaign() -> None:
    r = follower("c", record=rec(1, "a", "ab"))
    assert of(r.on_tick(5000), ProposeRecord) == []


def test_a_failed_swap_adopts_the_record_returned() -> None:
    r = follower("b", record=rec(1, "a"))
    r.on_tick(1000)
    assert r.fenced == 1
    r.on_cas_result(False, rec(2, "c", revision=2))
    assert (r.epoch, r.leader, r.is_leader) == (2, "c", False)
    out = r.on_message(append(2, 0, 0, log(2), sender="c"))
    assert of(out, Persist) != []


def test_a_failed_swap_in_the_same_epoch_lifts_the_fence() -> None:
    r = follower("b", record=rec(1, "a"))
    r.on_tick(1000)
    # The leader took c out first: our swap named a revision that is gone.
    r.on_cas_result(False, rec(1, "a", "ab", revision=2))
    assert r.fenced == 0
    assert of(r.on_message(append(1, 0, 0, log(1))), Persist) != []


def test_an_unanswered_swap_keeps_the_fence() -> None:
    r = follower("b", record=rec(1, "a"))
    r.on_tick(1000)
    r.on_tick(1100)
    assert r.fenced == 1
    assert r.on_message(append(1, 0, 0, log(1))) == []


def test_a_restarted_leader_campaigns_for_a_new_epoch() -> None:
    r = Replica("a", log(3, 3), CFG)
    r.on_tick(0)
    out = r.on_record(rec(3, "a", revision=7))
    assert not r.is_leader
    assert of(out, ProposeRecord) == [
        ProposeRecord(GroupRecord(PEERS, 4, "a", frozenset("abc")), 7)
    ]
    assert of(r.propose(b"x", "t"), Rejected) == [Rejected("t", None)]


def test_a_won_swap_makes_a_leader_that_probes_from_its_log_end() -> None:
    r = follower("b", recovered=log(1, 1), record=rec(1, "a"))
    assert of(r.on_tick(1000), ProposeRecord) != []
    out = r.on_cas_result(True, rec(2, "b", revision=2))
    assert r.is_leader
    assert [(m.epoch, m.prev_index, m.prev_epoch) for m in appends(out)] == [(2, 2, 1)] * 2
    assert [m.entries for m in appends(out)] == [(Entry(3, 2, NOOP),)] * 2


# Rule 6: a deposed leader --------------------------------------------------------------------


def test_a_deposed_leader_rejects_and_never_acknowledges() -> None:
    r = leader()
    r.propose(b"x", "t1")
    r.on_persisted(2)
    out = r.on_record(rec(3, "b", revision=3))
    assert of(out, Rejected) == [Rejected("t1", "b")]
    assert not r.is_leader
    out = r.on_message(ok("b", 2)) + r.on_message(ok("c", 2))
    assert of(out, Acknowledge) == []
    assert r.propose(b"y", "t2") == [Rejected("t2", "b")]


def test_a_reply_of_a_later_epoch_deposes_the_leader() -> None:
    r = leader()
    r.propose(b"x", "t1")
    out = r.on_message(AppendReply(3, "b", False, 0, 0))
    assert of(out, Rejected) == [Rejected("t1", None)]
    assert not r.is_leader and r.epoch == 3


# What the owner needs: leadership notices, bounded Append sizes ----------------------------


def test_leadership_is_announced_when_won_and_when_lost() -> None:
    r = follower("b", recovered=log(1, 1), record=rec(1, "a"))
    r.on_tick(1000)
    out = r.on_cas_result(True, rec(2, "b", revision=2))
    assert of(out, Leadership) == [Leadership(True, 2)]
    out = r.on_record(rec(3, "c", revision=3))
    assert of(out, Leadership) == [Leadership(False, 3)]
    # A follower learning of a new leader was not leading: nothing to announce.
    assert of(follower("c").on_record(rec(2, "b", revision=2)), Leadership) == []


def test_an_append_carries_at_most_max_batch_bytes_of_ops() -> None:
    r = Replica("a", [], Config(max_batch_bytes=100))
    r.on_tick(0)
    r.on_record(rec(1, "a", revision=1))
    r.on_cas_result(True, rec(2, "a", revision=2))
    r.on_persisted(1)
    for member in "bc":
        r.on_message(ok(member, 1))
    r.propose(b"x" * 60, "t1")
    r.propose(b"y" * 60, "t2")
    big = b"z" * 500  # larger than the limit alone: still sent, on its own
    r.propose(big, "t3")
    r.on_message(ok("b", 1))  # b lost what was sent: resend from 2
    sent = [m.entries for m in appends(r.on_tick(1000), to="b")]
    assert [[e.index for e in batch] for batch in sent] == [[2]]
    out = r.on_message(ok("b", 2))
    assert [[e.index for e in m.entries] for m in appends(out, to="b")] == [[3]]
    out = r.on_message(ok("b", 3))
    assert [[e.op for e in m.entries] for m in appends(out, to="b")] == [[big]]


# A base: logs that start past index 1, compaction and catch-up from a snapshot ---------------


def based(
    name: str = "b", base: tuple[int, int] = (5, 1), epochs: tuple[int, ...] = (1, 1)
) -> Replica:
    """A follower whose owner's snapshot holds 1..base and whose log holds what follows."""
    entries = [Entry(base[0] + i, e, f"op{base[0] + i}".encode()) for i, e in enumerate(epochs, 1)]
    r = Replica(name, entries, CFG, base=base)
    r.on_tick(0)
    r.on_record(rec(1, "a"))
    return r


def snapshots(actions: list[Any]) -> list[SendSnapshot]:
    return of(actions, SendSnapshot)


def test_a_replica_starts_from_its_base() -> None:
    r = based()
    assert (r.base, r.base_epoch, r.last_index) == (5, 1, 7)
    assert (r.commit, r.applied, r.fsynced) == (5, 5, 7)
    assert r.epoch_at(5) == 1 and r.epoch_at(7) == 1 and r.entry_at(6).index == 6
    # It applies from base + 1, never what the snapshot holds.
    out = r.on_message(append(1, 7, 1, [], commit=7))
    assert [e.index for a in of(out, Apply) for e in a.entries] == [6, 7]


def test_a_recovered_log_must_start_right_after_the_base() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        Replica("b", log(1, 1), CFG, base=(5, 1))


def test_an_append_at_the_base_is_checked_against_the_base_epoch() -> None:
    r = based(epochs=())
    [reply] = replies(r.on_message(append(1, 5, 1, [Entry(6, 1, b"x")], commit=5)))
    assert reply.ok and r.last_index == 6
    with pytest.raises(SafetyError, match="committed"):
        based(epochs=()).on_message(append(1, 5, 9, [Entry(6, 9, b"x")]))


def test_an_append_from_below_the_base_is_answered_with_the_log_end() -> None:
    r = based()
    [reply] = replies(r.on_message(append(1, 2, 1, log(1, 1, 1)[2:], commit=3)))
    assert (reply.ok, reply.hint) == (False, 7)
    assert r.last_index == 7 and of(r.on_message(append(1, 2, 1, [])), Truncate) == []


def test_compact_drops_applied_entries_and_moves_the_base() -> None:
    r = follower(recovered=log(1, 1, 1, 1))
    r.on_message(append(1, 4, 1, [], commit=3))
    assert r.applied == 3
    r.compact(2)
    assert (r.base, r.base_epoch, r.last_index, [e.index for e in r.log]) == (2, 1, 4, [3, 4])
    r.compact(1)  # below the base: nothing to do
    assert r.base == 2
    with pytest.raises(SafetyError, match="applied"):
        r.compact(4)
    r.compact(3)
    assert (r.base, r.log[0].index) == (3, 4)


def test_a_leader_sends_a_snapshot_to_a_follower_below_its_base() -> None:
    r = leader(recovered=log(1, 1, 1))  # no-op at 4, committed everywhere
    r.compact(4)
    assert r.log == [] and r.base == 4
    # b lost its disk: its log ends at 0, which the leader no longer has.
    out = r.on_message(AppendReply(2, "b", False, 0, 0))
    assert snapshots(out) == [SendSnapshot("b", 4, 2)]
    assert appends(out) == []  # nothing below the base can be sent
    # At most one snapshot per follower every snapshot_interval; heartbeats go on, at the base.
    out = r.on_message(AppendReply(2, "b", False, 0, 0))
    assert out == []
    out = r.on_tick(CFG.heartbeat_interval)
    assert snapshots(out) == []
    assert [(m.prev_index, m.prev_epoch) for m in appends(out, "b")] == [(4, 2)]
    out = r.on_tick(CFG.snapshot_interval)
    assert snapshots(out) == [SendSnapshot("b", 4, 2)]


def test_a_snapshot_is_never_past_the_applied_index() -> None:
    r = leader(recovered=log(1, 1, 1))
    r.compact(3)
    r.propose(b"x", "t")  # index 5, not committed
    out = r.on_message(AppendReply(2, "b", False, 0, 0))
    assert snapshots(out) == [SendSnapshot("b", 4, 2)]  # the applied index, not the last


def test_a_follower_installs_a_snapshot_past_its_log() -> None:
    r = follower(recovered=log(1, 1))
    r.on_message(append(1, 2, 1, []))
    assert r.snapshot_wanted(9) and not r.snapshot_wanted(0)
    out = r.on_snapshot(9, 1)
    assert of(out, Rebase) == [Rebase(9, 1)]
    assert (r.base, r.base_epoch, r.log, r.commit, r.applied) == (9, 1, [], 9, 9)
    assert of(out, Apply) == []  # the owner installed the state
    [reply] = replies(out)
    assert (reply.ok, reply.hint) == (False, 9)  # the leader goes on after 9
    [reply] = replies(r.on_message(append(1, 9, 1, [Entry(10, 1, b"x")], commit=10)))
    assert reply.ok and r.last_index == 10
    out = r.on_persisted(10)
    assert [e.index for a in of(out, Apply) for e in a.entries] == [10]


def test_a_follower_keeps_the_entries_after_a_snapshot_it_holds() -> None:
    r = follower(recovered=log(1, 1, 1, 1))
    r.on_message(append(1, 4, 1, []))
    out = r.on_snapshot(2, 1)
    assert of(out, Rebase) == [] and of(out, Truncate) == []
    assert (r.base, [e.index for e in r.log], r.applied, r.fsynced) == (2, [3, 4], 2, 4)


def test_a_snapshot_over_a_conflicting_entry_drops_the_log() -> None:
    r = follower(recovered=log(1, 1, 1))
    out = r.on_snapshot(2, 3)  # the committed entry 2 is of epoch 3: our 2 and 3 were not
    assert of(out, Rebase) == [Rebase(2, 3)]
    assert (r.base, r.base_epoch, r.log, r.fsynced) == (2, 3, [], 2)


def test_a_late_duplicate_or_misplaced_snapshot_is_ignored() -> None:
    r = follower(recovered=log(1, 1, 1))
    r.on_message(append(1, 3, 1, [], commit=3))
    assert r.applied == 3
    for index in (2, 3):  # at or below what it applied: late, twice, or already past it
        assert not r.snapshot_wanted(index)
        assert r.on_snapshot(index, 1) == []
    assert r.base == 0 and len(r.log) == 3
    fresh = Replica("b", [], CFG)  # no record yet: nothing is known of the group
    assert not fresh.snapshot_wanted(5) and fresh.on_snapshot(5, 1) == []
    lead = leader()
    assert not lead.snapshot_wanted(9) and lead.on_snapshot(9, 2) == []


# Rule 8: leadership transfer ------------------------------------------------------------------


def timeouts(actions: list[Any]) -> list[tuple[str, TimeoutNow]]:
    return [(a.to, a.msg) for a in of(actions, Send) if isinstance(a.msg, TimeoutNow)]


def test_step_down_sends_timeout_now_to_a_caught_up_preferred_member() -> None:
    r = leader()
    out = r.step_down("c")
    assert timeouts(out) == [("c", TimeoutNow(2, "a"))]
    assert r.transferring_to == "c"


def test_step_down_rejects_new_proposals_with_the_target_as_hint() -> None:
    r = leader()
    r.step_down("b")
    out = r.propose(b"x", "t1")
    assert out == [Rejected("t1", "b")]
    assert r.last_index == 1  # nothing appended


def test_step_down_waits_until_the_target_durably_holds_the_log() -> None:
    r = leader()
    r.on_tick(10)
    r.propose(b"x", "t1")  # index 2, not yet on any follower
    out = r.step_down("b")
    assert timeouts(out) == []
    assert timeouts(r.on_message(ok("b", 1))) == []  # not there yet
    out = r.on_message(ok("b", 2))
    assert timeouts(out) == [("b", TimeoutNow(2, "a"))]


def test_step_down_prefers_the_most_caught_up_when_preferred_is_not_in_sync() -> None:
    r = leader()
    r.on_tick(10)
    r.propose(b"x", "t1")
    r.on_message(ok("c", 2))
    r.on_message(ok("b", 1))
    for preferred in (None, "a", "zzz"):
        r._transfer = None
        assert timeouts(r.step_down(preferred)) == [("c", TimeoutNow(2, "a"))]
    r2 = leader(in_sync="ab")
    assert timeouts(r2.step_down("c")) == [("b", TimeoutNow(2, "a"))]  # c is out of sync


def test_a_transfer_that_does_not_complete_in_an_election_timeout_resumes() -> None:
    r = leader()
    r.on_tick(100)
    r.step_down("b")
    r.on_tick(100 + CFG.election_timeout - 10)
    assert of(r.propose(b"x", "t1"), Rejected)
    r.on_tick(100 + CFG.election_timeout)
    assert r.transferring_to is None
    assert of(r.propose(b"y", "t2"), Persist)


def test_step_down_does_nothing_on_a_follower() -> None:
    assert follower().step_down("c") == []


def test_a_follower_campaigns_at_once_on_timeout_now_from_its_leader() -> None:
    r = follower()
    r.on_tick(10)  # well within the election timeout
    out = r.on_message(TimeoutNow(1, "a"))
    [proposal] = of(out, ProposeRecord)
    assert proposal.new == GroupRecord(PEERS, 2, "b", frozenset("abc"))
    assert r.fenced == 1  # fenced first, as any campaign


@pytest.mark.parametrize(
    ("msg", "record"),
    [
        (TimeoutNow(1, "c"), rec(1, "a")),  # not the epoch's leader
        (TimeoutNow(2, "a"), rec(1, "a")),  # another epoch
        (TimeoutNow(1, "a"), rec(1, "a", in_sync="ac")),  # not in sync
        (TimeoutNow(1, "b"), rec(1, "a")),  # from itself
    ],
)
def test_a_timeout_now_that_does_not_fit_is_ignored(msg: TimeoutNow, record: GroupRecord) -> None:
    r = follower(record=record)
    r.on_tick(10)
    assert r.on_message(msg) == []
    assert r.fenced == 0


def test_a_deposed_leader_stops_transferring() -> None:
    r = leader()
    r.step_down("b")
    r.on_record(rec(3, "b", revision=3))
    assert not r.is_leader and r.transferring_to is None


def test_quorum_heard_counts_recent_progress() -> None:
    r = leader()
    r.on_tick(50)
    assert r.quorum_heard(1000)
    r.propose(b"x", "t1")
    r.on_tick(5000)
    assert not r.quorum_heard(1000)  # nobody made progress for 5 s
    r.on_message(ok("b", 2))
    assert r.quorum_heard(1000)  # itself and b: 2 of 3


# Rule 9: reads ------------------------------------------------------------------------------


def echo(sender: str, durable: int, read: int, ok_: bool = True) -> AppendReply:
    return AppendReply(2, sender, ok_, durable if ok_ else 0, durable, read)


def test_a_read_on_a_follower_is_rejected_at_once_with_the_leader() -> None:
    r = follower(recovered=log(1), record=rec(1, "a"))
    assert r.read("t") == [ReadRejected("t", "a")]
    assert Replica("b", [], CFG).read("t") == [ReadRejected("t", None)]


def test_a_read_waits_for_a_round_echoed_by_every_in_sync_member() -> None:
    r = leader()
    last = r.last_index
    out = r.read("t")
    assert of(out, ReadReady) == []
    # A round goes at once (no heartbeat wait), from where each follower confirmed our log.
    sent = appends(out)
    assert [(m.read, m.prev_index, m.entries) for m in sent] == [(1, last, ()), (1, last, ())]
    assert of(r.on_message(echo("b", last, 1)), ReadReady) == []
    assert of(r.on_message(echo("c", last, 1)), ReadReady) == [ReadReady("t")]


def test_an_echo_of_a_round_before_the_read_does_not_count() -> None:
    r = leader()
    last = r.last_index
    r.read("t1")
    r.on_message(echo("b", last, 1))
    assert of(r.on_message(echo("c", last, 1)), ReadReady) == [ReadReady("t1")]
    out = r.read("t2")
    assert {m.read for m in appends(out)} == {2}
    # Late or duplicated answers to round 1 (sent before t2 arrived) prove nothing for t2.
    assert r.on_message(echo("b", last, 1)) == []
    assert of(r.on_message(echo("c", last, 1)), ReadReady) == []
    r.on_message(echo("b", last, 2))
    assert of(r.on_message(echo("c", last, 2)), ReadReady) == [ReadReady("t2")]


def test_reads_arriving_while_a_round_is_in_flight_share_the_next() -> None:
    r = leader()
    last = r.last_index
    r.read("t1")
    assert appends(r.read_many(["t2", "t3"])) == []  # round 1 is in flight
    r.on_message(echo("b", last, 1))
    out = r.on_message(echo("c", last, 1))
    assert of(out, ReadReady) == [ReadReady("t1")]
    assert {m.read for m in appends(out)} == {2}  # the next round, at once
    r.on_message(echo("b", last, 2))
    out = r.on_message(echo("c", last, 2))
    assert of(out, ReadReady) == [ReadReady("t2"), ReadReady("t3")]
    assert appends(out) == []


def test_a_reply_of_the_epoch_that_is_not_ok_still_echoes() -> None:
    # The follower answered in our epoch, unfenced: that is what the round must show.
    r = leader()
    r.read("t")
    r.on_message(echo("b", r.last_index, 1))
    assert of(r.on_message(echo("c", 0, 1, ok_=False)), ReadReady) == [ReadReady("t")]


def test_a_lost_round_is_sent_again_with_the_heartbeat() -> None:
    r = leader()
    r.read("t")
    r.read("u")  # needs round 2, which waits for round 1
    out = r.on_tick(CFG.heartbeat_interval)
    assert {m.read for m in appends(out)} == {2}
    last = r.last_index
    r.on_message(echo("b", last, 2))
    assert of(r.on_message(echo("c", last, 2)), ReadReady) == [ReadReady("t"), ReadReady("u")]


def test_a_new_leader_answers_reads_once_its_no_op_is_applied() -> None:
    r = leader(settle=False)
    noop = r.last_index
    r.read("t")
    r.on_message(echo("b", noop - 1, 1))
    assert of(r.on_message(echo("c", noop - 1, 1)), ReadReady) == []  # echoed, not applied
    r.on_persisted(noop)
    r.on_message(ok("b", noop))
    out = r.on_message(ok("c", noop))
    assert of(out, Apply) and out.index(of(out, Apply)[0]) < out.index(ReadReady("t"))


def test_a_member_being_added_must_echo_too() -> None:
    r = leader(in_sync="ab")
    last = r.last_index
    out = r.on_message(ok("c", last))
    out += r.on_tick(10)
    assert of(out, ProposeRecord)  # adding c: counted from the proposal on (rule 3)
    r.read("t")
    assert of(r.on_message(echo("b", last, 1)), ReadReady) == []
    assert of(r.on_message(echo("c", last, 1)), ReadReady) == [ReadReady("t")]


def test_a_follower_echoes_its_leaders_round_until_it_fences() -> None:
    b = follower(recovered=log(1), record=rec(1, "a"))
    [reply] = replies(b.on_message(Append(1, "a", 1, 1, (), 1, 4)))
    assert reply.read == 4
    b.on_tick(1000)  # campaigns: fenced
    assert b.fenced == 1
    assert b.on_message(Append(1, "a", 1, 1, (), 1, 5)) == []  # no echo of a fenced epoch
    # A new epoch starts from no round.
    b.on_record(rec(2, "c", revision=2))
    [reply] = replies(b.on_message(Append(2, "c", 1, 1, (), 1)))
    assert (reply.epoch, reply.read) == (2, 0)


def test_a_deposed_leader_never_completes_a_read() -> None:
    """The stale read: a leader cut off while another member took the next epoch."""
    a = leader()
    b = follower(recovered=list(a.log), record=rec(2, "a", revision=2))
    b.on_message(Append(2, "a", a.last_index, 2, (), a.commit))
    b.on_tick(1000)  # b heard nothing for an election timeout: fences epoch 2, swaps to 3
    out = a.read("t")
    for m in appends(out, "b"):
        assert b.on_message(m) == []  # fenced: silent
    a.on_message(echo("c", a.last_index, 1))
    assert of(a.on_tick(100), ReadReady) == []
    # It learns of epoch 3 (the record, or a reply): the read is rejected, naming b.
    assert of(a.on_record(rec(3, "b", revision=3)), ReadRejected) == [ReadRejected("t", "b")]


def test_a_read_not_ready_within_the_timeout_is_rejected() -> None:
    r = leader()
    r.read("t")
    assert of(r.on_tick(CFG.read_timeout - 1), ReadRejected) == []
    assert of(r.on_tick(CFG.read_timeout), ReadRejected) == [ReadRejected("t", None)]


def test_a_leader_stepping_down_rejects_reads() -> None:
    r = leader()
    r.read("waiting")
    r.step_down("b")
    assert r.read("t") == [ReadRejected("t", "b")]  # handing over: rejected at once
    out = r.on_message(AppendReply(3, "b", False, 0, 0))  # a later epoch: stopped leading
    assert of(out, ReadRejected) == [ReadRejected("waiting", None)]
    assert r.read("u") == [ReadRejected("u", None)]
