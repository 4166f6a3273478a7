"""The replication core under the deterministic simulator: many seeds, and planted bugs.

Soak more on demand: `python -m headwater.server.replicated.simulator --seeds 100000`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from headwater.server.replicated.core import Action, ReadReady, Replica, Send, Truncate
from headwater.server.replicated.messages import Append, TimeoutNow
from headwater.server.replicated.record import GroupRecord
from headwater.server.replicated.simulator import Simulation, Violation, main, run_seed


def first_violation(cls: type[Replica], seeds: range, replicas: int) -> Violation | None:
    for seed in seeds:
        try:
            run_seed(seed, replicas, replica_cls=cls)
        except Violation as exc:
            return exc
    return None


def failures(seeds: range, replicas: int) -> list[str]:
    return soak(seeds, replicas)[0]


def soak(seeds: range, replicas: int) -> tuple[list[str], int]:
    return soak_counts(seeds, replicas)[:2]


def soak_counts(seeds: range, replicas: int) -> tuple[list[str], int, int]:
    """The violations found, in how many seeds a follower caught up from a snapshot, and in
    how many a step-down handed leadership over."""
    return soak_reads(seeds, replicas)[:3]


def soak_reads(seeds: range, replicas: int) -> tuple[list[str], int, int, int, int]:
    """As `soak_counts`, and how many reads were answered and rejected."""
    return soak_all(seeds, replicas)[:5]


def soak_all(seeds: range, replicas: int) -> tuple[list[str], int, int, int, int, int, int]:
    """As `soak_reads`, and how many changes of peers and replicas deleted."""
    found = []
    with_installs = with_transfers = ready = rejected = changes = removals = 0
    for seed in seeds:
        try:
            sim = run_seed(seed, replicas)
        except Violation as exc:
            found.append(str(exc))
            continue
        with_installs += sim.installs > 0
        with_transfers += sim.transfers > 0
        ready += sim.reads_ready
        rejected += sim.reads_rejected
        changes += sim.peer_changes
        removals += sim.removals
    return found, with_installs, with_transfers, ready, rejected, changes, removals


# Many seeds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [3, 5])
def test_a_few_seeds(replicas: int) -> None:
    found, with_installs, with_transfers, ready, rejected, changes, removals = soak_all(
        range(40), replicas
    )
    assert found == []
    # Peers change (rule 10) and removed replicas are deleted, then maybe added again.
    assert changes >= 40 and removals >= 20
    # Catch-up from a snapshot and leadership transfer are exercised, not only possible
    # (most seeds do both); reads are answered (linearizable, checked) and some rejected.
    assert with_installs >= 1
    assert with_transfers >= 20
    assert ready >= 40 * 50 and rejected >= 40


@pytest.mark.slow
@pytest.mark.parametrize(("replicas", "count"), [(3, 800), (5, 600)])
def test_many_seeds(replicas: int, count: int) -> None:
    # About 30-40 s each on one core of this 2-core machine (with snapshots, step-downs,
    # reads, cut-offs and membership changes: about 23 and 18 seeds/s). Longer soaks:
    # `python -m headwater.server.replicated.simulator` (docs/REPLICATION.md).
    assert failures(range(10_000, 10_000 + count), replicas) == []


def test_regression_seeds() -> None:
    # 10719 (R5): after the heal, followers kept an older epoch's uncommitted entries past
    # the new leader's log end (no convergence); fixed by the new leader's no-op entry.
    run_seed(10719, 5, membership=False)
    run_seed(10719, 5, stepdowns=False, reads=False, membership=False)  # the very run


def test_step_downs_leave_the_faults_of_a_seed_alone() -> None:
    # Drawn from their own generator: the first fault comes at the same time either way.
    with_, without = Simulation(7, 3, reads=False), Simulation(7, 3, stepdowns=False, reads=False)
    assert [e for e in with_._events if e[2] != "stepdown"] == without._events
    # So do reads (and the leader's isolations that go with them) at the start.
    reads = Simulation(7, 3, stepdowns=False)
    assert [e for e in reads._events if e[2] not in ("read", "isolate")] == without._events
    # Membership changes run an R3 group on five servers (two spares), so a seed's runs
    # differ with them; without them, three servers and no change (the runs from before).
    fixed = Simulation(7, 3, stepdowns=False, reads=False, membership=False)
    assert len(fixed.servers) == 3 and len(without.servers) == 5
    assert [e[2] for e in without._events].count("members") == 1
    assert "members" not in [e[2] for e in fixed._events]


def test_a_seed_replays_exactly() -> None:
    def fingerprint(sim: Simulation) -> tuple[Any, ...]:
        return (sim.step, sim.now, tuple(sim.history), tuple(sim.inv.committed))

    assert fingerprint(run_seed(7, 5)) == fingerprint(run_seed(7, 5))


def test_the_cli_runs_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "2", "--start", "3", "--replicas", "3", "--steps", "500"]) == 0
    out = capsys.readouterr().out
    assert "2 seeds, 0 failed" in out and "snapshot installs" in out


# Planted bugs: the checker can fail ----------------------------------------------------------


class AcknowledgesAlone(Replica):
    """Commits (and acknowledges) once its own fsync is done, ignoring the followers."""

    def _leader_advance(self) -> list[Action]:
        self.commit = max(self.commit, self.fsynced)
        return self._apply()


class AcceptsOlderEpochs(Replica):
    """A follower that takes (and answers) a deposed leader's entries, unfenced."""

    def _on_append(self, m: Append) -> list[Action]:
        if self.record is None or m.epoch >= self.epoch or self.is_leader:
            return super()._on_append(m)
        saved = (self.epoch, self.leader)
        self.epoch, self.leader, self.fenced = m.epoch, m.leader, 0
        try:
            return super()._on_append(m)
        finally:
            self.epoch, self.leader = saved

    def _truncate(self, after: int) -> list[Action]:
        # Without the core's own guard, so that the simulator's checks are what fails.
        del self.log[after:]
        self.fsynced = min(self.fsynced, after)
        self.matched = min(self.matched, after)
        for p in self._persists:
            p[1] = min(p[1], after)
        return [Truncate(after)]


class CountsOnlyTheRecord(Replica):
    """Commits over the record's in_sync alone, not yet counting a member it is adding."""

    def _commit_set(self) -> set[str]:
        assert self.record is not None
        return set(self.record.in_sync)


@pytest.mark.parametrize("replicas", [3, 5])
def test_acknowledging_before_the_followers_is_caught(replicas: int) -> None:
    found = first_violation(AcknowledgesAlone, range(20), replicas)
    assert found is not None
    assert "core refused" not in str(found)  # the simulator's own checks saw it


@pytest.mark.parametrize(("replicas", "seed"), [(3, 1), (5, 0)])
def test_accepting_older_epochs_is_caught(replicas: int, seed: int) -> None:
    # The first failing seeds of range(2000) (searched again when the simulator's draws
    # changed with snapshots; before, 623 and 268), in the runs from before reads.
    with pytest.raises(Violation, match=f"seed {seed} "):
        run_seed(seed, replicas, replica_cls=AcceptsOlderEpochs, reads=False, membership=False)
    run_seed(seed, replicas, reads=False, membership=False)
    run_seed(seed, replicas)


def test_adding_a_member_without_counting_it_at_once_is_caught() -> None:
    """The race the core closes by counting a member from the proposal that adds it (seed
    662 is the first of range(5000) where the simulator's own checks see it: an acknowledged
    entry ends up on fewer than a quorum of disks; in seed 34 the core's guard refuses
    first)."""
    with pytest.raises(Violation, match="seed 662 "):
        # From before reads and membership changes:
        run_seed(662, 3, replica_cls=CountsOnlyTheRecord, reads=False, membership=False)
    run_seed(662, 3, reads=False, membership=False)
    run_seed(662, 3)


class AddsBackAtTheCommitIndex(Replica):
    """Puts a follower back once it reaches the commit index alone, which for a new leader
    may lag what the previous leader committed."""

    def _maybe_change_in_sync(self) -> list[Action]:
        start, self.epoch_start = self.epoch_start, 0
        try:
            return super()._maybe_change_in_sync()
        finally:
            self.epoch_start = start


def test_adding_back_below_the_inherited_tail_is_caught() -> None:
    """A leader puts a follower back at its commit index, below entries it inherited; the
    follower then leads without them. Seed 7589 is the first of range(20_000) where the
    simulator sees it (committed entries differ between replicas; before snapshots, seed
    80: s2 led epoch 6 without an acknowledged entry)."""
    with pytest.raises(Violation, match="seed 7589 "):
        # From before reads and membership changes:
        run_seed(7589, 3, replica_cls=AddsBackAtTheCommitIndex, reads=False, membership=False)
    run_seed(7589, 3, reads=False, membership=False)
    run_seed(7589, 3)


class SnapshotsPastApplied(Replica):
    """A leader that sends a snapshot at its last index, past what it applied (committed)."""

    def _snapshot_index(self) -> int:
        return self.last_index


@pytest.mark.parametrize("replicas", [3, 5])
def test_a_snapshot_past_the_applied_index_is_caught(replicas: int) -> None:
    found = first_violation(SnapshotsPastApplied, range(20), replicas)
    assert found is not None
    assert "core refused" not in str(found)  # the simulator's own checks saw it
    assert "installs a snapshot" in str(found)


class TransfersToAnyone(Replica):
    """Hands leadership to whoever is preferred, and a follower told to campaign by
    TimeoutNow does so even out of `in_sync`, putting itself back in: a stale replica can then
    lead without entries that were acknowledged."""

    def step_down(self, preferred: str | None = None) -> list[Action]:
        rec = self.record
        if not self.is_leader or rec is None or self.now is None:
            return []
        target = preferred or sorted(set(rec.peers) - {self.name})[-1]
        if target == self.name:
            return []
        self._transfer = (target, self.now)
        return [Send(target, TimeoutNow(self.epoch, self.name))]

    def _on_timeout_now(self, m: TimeoutNow) -> list[Action]:
        rec = self.record
        if rec is None or self.is_leader or self._in_flight() or rec.epoch != m.epoch:
            return []
        self.fenced = max(self.fenced, self.epoch)
        new = GroupRecord(rec.peers, rec.epoch + 1, self.name, rec.in_sync | {self.name})
        return self._propose(new, rec.revision, campaign=True)


@pytest.mark.parametrize("replicas", [3, 5])
def test_a_transfer_to_a_member_out_of_sync_is_caught(replicas: int) -> None:
    found = first_violation(TransfersToAnyone, range(40), replicas)
    assert found is not None, "the simulator did not see a stale replica lead"


class AnswersReadsAtOnce(Replica):
    """Answers every read while it believes it leads, with no barrier: stale reads from a new
    leader whose commit index lags its predecessor's acknowledgements, and from a deposed
    leader that has not heard of the new epoch."""

    def read_many(self, tokens: Sequence[Any]) -> list[Action]:
        if self.is_leader:
            return [ReadReady(token) for token in tokens]
        return super().read_many(tokens)


class ReadsWithoutARound(Replica):
    """Waits for its epoch's no-op, but asks no member to echo a round: only a deposed
    leader, cut off, answers stale reads."""

    def _read_members(self) -> set[str]:
        return set()


class ReadsBeforeItsNoOp(Replica):
    """Takes the round, but does not wait for its own epoch's no-op to be applied: a new
    leader answers before it applied what its predecessor acknowledged."""

    def _ready_reads(self) -> list[Action]:
        start, self.epoch_start = self.epoch_start, -1
        try:
            return super()._ready_reads()
        finally:
            self.epoch_start = start


@pytest.mark.parametrize("replicas", [3, 5])
def test_answering_reads_at_once_is_caught(replicas: int) -> None:
    found = first_violation(AnswersReadsAtOnce, range(20), replicas)
    assert found is not None
    assert "stale read" in str(found)


@pytest.mark.parametrize("replicas", [3, 5])
def test_reading_before_the_no_op_is_applied_is_caught(replicas: int) -> None:
    found = first_violation(ReadsBeforeItsNoOp, range(40), replicas)
    assert found is not None
    assert "stale read" in str(found)


@pytest.mark.parametrize(("replicas", "seed"), [(3, 6), (5, 8)])
def test_a_deposed_leader_reading_without_a_round_is_caught(replicas: int, seed: int) -> None:
    # The first failing seeds of range(40): the leader isolated, another elected and
    # acknowledging while the old one still answers reads from its state.
    with pytest.raises(Violation, match=f"seed {seed} .*stale read"):
        run_seed(seed, replicas, replica_cls=ReadsWithoutARound, membership=False)
    run_seed(seed, replicas)


# Membership (rule 10) ------------------------------------------------------------------------


class AddsStraightIntoInSync(Replica):
    """Adds new peers to `in_sync` with the same swap that adds them to `peers`, before they
    caught up: the group then counts an empty replica as holding what is committed."""

    def _change_membership(self, rec: GroupRecord, wanted: frozenset[str]) -> list[Action] | None:
        added = [p for p in sorted(wanted) if p not in rec.peers]
        if not added:
            return super()._change_membership(rec, wanted)
        peers, in_sync = (*rec.peers, *added), rec.in_sync | set(added)
        new = replace(rec, peers=peers, in_sync=in_sync, revision=0)
        return self._propose(new, rec.revision, campaign=False)


class RemovesBelowQuorum(Replica):
    """Removes unwanted peers at once, whatever stays in `in_sync`."""

    def _change_membership(self, rec: GroupRecord, wanted: frozenset[str]) -> list[Action] | None:
        unwanted = set(rec.peers) - wanted
        if any(p not in rec.peers for p in wanted) or self.name not in wanted or not unwanted:
            return super()._change_membership(rec, wanted)
        peers = tuple(p for p in rec.peers if p not in unwanted)
        in_sync = (rec.in_sync - unwanted) or frozenset({self.name})
        new = replace(rec, peers=peers, in_sync=in_sync, revision=0)
        return self._propose(new, rec.revision, campaign=False)


@pytest.mark.parametrize("replicas", [3, 5])
def test_adding_a_peer_straight_into_in_sync_is_caught(replicas: int) -> None:
    found = first_violation(AddsStraightIntoInSync, range(20), replicas)
    assert found is not None and "in in_sync" in str(found)


@pytest.mark.parametrize("replicas", [3, 5])
def test_removing_peers_below_a_quorum_is_caught(replicas: int) -> None:
    found = first_violation(RemovesBelowQuorum, range(60), replicas)
    assert found is not None and "fewer than" in str(found)
