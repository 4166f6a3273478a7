"""The ack state on its own: floors, pending, redelivery counts and queue, and its invariants
under random delivery / ack sequences (the consumer-level rules are also checked end to end
in test_consumer_state.py and differentially in the conformance suite)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.server.consumers.ackstate import AckState


def deliver(a: AckState, seqs: list[int], deadline: float = 10.0) -> None:
    for seq in seqs:
        a.delivered(seq, 1, deadline, 0)


def test_explicit_floor_moves_only_over_contiguous_acks() -> None:
    a = AckState()
    deliver(a, [1, 2, 3, 4])
    assert a.ack(2, 5) is not None
    assert (a.adflr, a.asflr, list(a.pending)) == (0, 0, [1, 3, 4])
    a.ack(1, 5)
    assert (a.adflr, a.asflr) == (2, 2)  # up to just below the oldest still pending
    a.ack(4, 5)
    a.ack(3, 5)
    assert (a.adflr, a.asflr, a.pending) == (4, 4, {})
    a.check()


def test_floor_follows_the_cursor_when_nothing_is_pending() -> None:
    a = AckState()
    deliver(a, [3])
    a.ack(3, 10)  # the cursor moved past unwanted messages up to 9
    assert (a.adflr, a.asflr) == (1, 9)


def test_ack_all_acks_everything_below_and_ignores_old_acks() -> None:
    a = AckState()
    deliver(a, [1, 2, 3])
    assert a.ack_all(2, 2, 4) == [1, 2]
    assert (list(a.pending), a.adflr, a.asflr) == ([3], 2, 2)
    assert a.ack_all(1, 1, 4) is None
    a.check()


def test_redelivery_keeps_first_consumer_seq_and_counts() -> None:
    a = AckState()
    deliver(a, [1, 2])
    a.redeliver(1)
    a.redeliver(9)  # not pending: not queued
    assert list(a.rdq) == [1]
    assert a.next_redelivery() == (1, 2)
    assert a.next_redelivery() is None
    assert a.delivered(1, 2, 5.0, 7) == 3
    assert (a.pending[1].cseq, a.pending[1].deadline, a.rdc) == (1, 5.0, {1: 2})
    a.check()


def test_exhausted_leaves_pending_but_keeps_its_count_until_a_late_ack() -> None:
    a = AckState()
    deliver(a, [1])
    a.redeliver(1)
    seq, dc = a.next_redelivery() or (0, 0)
    a.delivered(seq, dc, 1.0, 0)
    a.exhausted(1)
    assert (a.pending, a.rdc) == ({}, {1: 2})
    assert a.ack(1, 2) is None  # late ack: clears the count only
    assert a.rdc == {}


def test_due_deadlines_are_queued_and_the_next_one_returned() -> None:
    a = AckState()
    a.delivered(1, 1, 1.0, 0)
    a.delivered(2, 1, 3.0, 0)
    a.delivered(3, 1, 2.0, 0)
    assert a.next_deadline() == 1.0
    assert a.queue_due(1.5) == 2.0
    assert list(a.rdq) == [1]
    assert a.next_deadline() == 2.0  # queued ones no longer count
    assert a.postpone(3, 9.0) and not a.postpone(7, 9.0)
    assert a.queue_due(5.0) == 9.0 and list(a.rdq) == [1, 2]


def test_purge_drops_gone_messages_and_lifts_the_floor() -> None:
    a = AckState()
    deliver(a, [1, 2, 3, 4])
    a.redeliver(2)
    a.purged(3, lambda s: s != 4, 5)
    assert (list(a.pending), list(a.rdq)) == ([3], [])
    assert (a.adflr, a.asflr) == (4, 2)
    a.check()


# Deliveries and acks weighted up: the floor rules need runs of them to show.
KINDS = ["new", "new", "new", "ack", "ack", "ack", "nak", "redeliver", "expire", "exhaust", "purge"]
actions = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(min_value=0, max_value=50)),
    min_size=5,
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(actions)
def test_random_explicit_sequences_keep_the_invariants(steps: list[tuple[str, int]]) -> None:
    """A consumer-shaped driver: first deliveries in stream order, acks / naks / expiries /
    exhaustion / purges of what is pending. After every step the invariants hold, and with
    explicit acks the consumer floor stays below every pending message's first delivery."""
    a = AckState()
    next_seq = 1
    stored_from = 1
    purged = False
    exact = True
    for action, n in steps:
        pending = list(a.pending)
        pick = pending[n % len(pending)] if pending else 0
        if action == "new":
            next_seq += n % 3  # the cursor skips messages the filter does not want
            a.delivered(next_seq, 1, float(n), 0)
            next_seq += 1
        elif action == "ack" and pick:
            a.ack(pick, next_seq)
        elif action == "nak" and pick:
            a.redeliver(pick)
        elif action == "redeliver":
            item = a.next_redelivery()
            if item is not None:
                a.delivered(item[0], item[1], float(n), 0)
        elif action == "expire":
            a.queue_due(float(n))
        elif action == "exhaust" and pick:
            a.exhausted(pick)
            exact = False
        elif action == "purge":
            stored_from = min(stored_from + n % 5, next_seq)
            purged, exact = True, False
            a.purged(stored_from, lambda s: True, next_seq)
        a.check()
        assert set(a.pending) <= set(range(1, next_seq)), "pending a seq never delivered"
        if a.pending and not purged:
            # (a purge lifts the consumer floor to what was delivered, as nats-server does)
            assert a.adflr < min(p.cseq for p in a.pending.values())
        if exact:
            # Acks, naks and redeliveries alone keep the consumer floor exactly below the
            # oldest first delivery still pending (or on the last delivery with none).
            oldest = min((p.cseq for p in a.pending.values()), default=a.dseq + 1)
            assert a.adflr == oldest - 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=30), max_size=40))
def test_random_ack_all_keeps_the_invariants(acks: list[int]) -> None:
    a = AckState()
    deliver(a, list(range(1, 31)))
    for sseq in acks:
        before = set(a.pending)
        done = a.ack_all(sseq, sseq, 31)
        if done is not None:
            assert set(done) == {s for s in before if s <= sseq}
        a.check()
        assert all(s > a.asflr for s in a.pending)
