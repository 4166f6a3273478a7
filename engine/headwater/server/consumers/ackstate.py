"""A consumer's ack state: what it delivered, what awaits an ack, and its ack floor.

:class:`AckState` is the one owner of these numbers; the :class:`.consumer.Consumer` holds
one and calls its methods (what the consumer decides — policies, callbacks, timers, retention
— stays there). State follows nats-server's model so CONSUMER.INFO numbers match it:

* ``dseq`` — the last consumer sequence delivered;
* ``pending`` — stream seq -> :class:`Pending` (the consumer seq of its first delivery and
  its ack deadline), in stream order (dict insertion order: first deliveries go out in
  ascending stream order, redeliveries keep their slot);
* ``rdc`` — delivery counts of messages delivered more than once (kept for a message that
  ran out of deliveries, until it is acked late or forgotten);
* ``rdq`` — stream sequences due for redelivery, all of them pending;
* the ack floor ``(adflr, asflr)``: everything at or below it is acknowledged.

The floor rules are nats-server's, checked differentially (see
``tests/conformance/jetstream/test_consumers_pull.py``); :meth:`AckState.check` states the
invariants (``tests/engine/consumers/test_ackstate.py`` drives random ack sequences).
Every method is O(1) per message touched except the ack-all and purge scans, which walk
``pending`` once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .redelivery import RedeliveryQueue

__all__ = ["AckState", "Pending"]


@dataclass(slots=True)
class Pending:
    cseq: int
    """Consumer sequence of its first delivery (kept across redeliveries)."""
    deadline: float
    """Monotonic time (s) after which the message is due for redelivery."""
    ts: int
    """Wall-clock time (ns) of its latest delivery."""


class AckState:
    """Delivered / pending / redelivery / ack-floor bookkeeping of one consumer.

    ``next_seq`` arguments are the consumer's cursor (the next stream sequence it would look
    at): with nothing pending, everything below it counts as acknowledged.
    """

    __slots__ = ("adflr", "asflr", "dseq", "pending", "rdc", "rdq")

    def __init__(self) -> None:
        self.dseq = 0
        self.adflr = 0
        self.asflr = 0
        self.pending: dict[int, Pending] = {}
        self.rdc: dict[int, int] = {}
        self.rdq = RedeliveryQueue()

    def restore(
        self, dseq: int, adflr: int, asflr: int, pending: dict[int, Pending], rdc: dict[int, int]
    ) -> None:
        """Load saved state (nothing is queued for redelivery: the timer finds what is due)."""
        self.dseq, self.adflr, self.asflr = dseq, adflr, asflr
        self.pending, self.rdc = pending, rdc
        self.rdq.clear()

    def acked_below(self, next_seq: int) -> None:
        """A fresh consumer starts at ``next_seq``: everything below counts as acknowledged
        (nats-server's floor)."""
        self.asflr = next_seq - 1

    # --- deliveries ----------------------------------------------------------------------

    def delivered(self, seq: int, dc: int, deadline: float, now_ns: int) -> int:
        """Record a delivery of ``seq`` that awaits an ack; returns its consumer sequence."""
        self.dseq += 1
        previous = self.pending.get(seq)
        if previous is not None:
            # A redelivery keeps the original consumer sequence (the ack floor is built on
            # it, as nats-server's is); the reply subject carries the new one.
            previous.deadline, previous.ts = deadline, now_ns
        else:
            self.pending[seq] = Pending(self.dseq, deadline, now_ns)
        if dc > 1:
            self.rdc[seq] = dc
        return self.dseq

    def delivered_acked(self, seq: int) -> int:
        """Record a delivery that needs no ack (``ack_policy: none``): the floor follows it."""
        self.dseq += 1
        self.adflr, self.asflr = self.dseq, seq
        return self.dseq

    def next_redelivery(self) -> tuple[int, int] | None:
        """The lowest queued redelivery still pending and the delivery count it would go out
        with, taken off the queue; None when nothing is queued."""
        rdq, pending = self.rdq, self.pending
        while rdq:
            seq = rdq.pop()
            if seq in pending:
                return seq, self.rdc.get(seq, 1) + 1
        return None

    def redeliver(self, seq: int) -> None:
        """Queue pending ``seq`` for redelivery now (a nak, or a redelivery put back)."""
        if seq in self.pending:
            self.rdq.add(seq)

    def exhausted(self, seq: int) -> None:
        """``seq`` was delivered as often as allowed: it leaves pending for good, its count
        stays (nats-server's behaviour, noticed when it would go out again)."""
        self.pending.pop(seq, None)
        self.rdq.discard(seq)

    def postpone(self, seq: int, deadline: float) -> bool:
        """Move pending ``seq``'s ack deadline (progress, delayed nak); False if not pending."""
        pend = self.pending.get(seq)
        if pend is None:
            return False
        pend.deadline = deadline
        return True

    def queue_due(self, now: float) -> float:
        """Queue every pending message whose deadline passed; returns the earliest deadline
        still ahead (0.0 when none)."""
        rdq = self.rdq
        next_at = 0.0
        for seq, pend in self.pending.items():
            if seq in rdq:
                continue
            if pend.deadline <= now:
                rdq.add(seq)
            elif not next_at or pend.deadline < next_at:
                next_at = pend.deadline
        return next_at

    def next_deadline(self) -> float:
        """The earliest deadline of a pending message not already queued (0.0 when none)."""
        rdq = self.rdq
        deadlines = [p.deadline for s, p in self.pending.items() if s not in rdq]
        return min(deadlines) if deadlines else 0.0

    # --- acks ----------------------------------------------------------------------------

    def ack_all(self, sseq: int, cseq: int, next_seq: int) -> list[int] | None:
        """AckAll: everything pending up to ``sseq`` is acknowledged. Returns those stream
        sequences, or None when ``cseq`` is at or below the floor (nothing changes)."""
        if cseq <= self.adflr:
            return None
        done = [s for s in self.pending if s <= sseq]
        for seq in done:
            self.forget(seq)
        self.adflr, self.asflr = max(self.adflr, cseq), max(self.asflr, sseq)
        self.settle(next_seq)
        return done

    def ack(self, sseq: int, next_seq: int) -> Pending | None:
        """Explicit ack of ``sseq``; returns what was pending, None when it was not (a late
        ack of a message that ran out of deliveries still clears its count).

        The floor moves only when the acked message's first consumer sequence sits right on
        it, then up to just below the oldest message still pending; with nothing pending it
        is what was delivered."""
        pend = self.pending.get(sseq)
        if pend is None:
            self.rdc.pop(sseq, None)
            return None
        self.forget(sseq)
        if pend.cseq == self.adflr + 1:
            self.adflr, self.asflr = pend.cseq, sseq
            if self.pending:
                first_seq, first = next(iter(self.pending.items()))
                self.adflr, self.asflr = first.cseq - 1, first_seq - 1
        self.settle(next_seq)
        return pend

    def purged(self, first: int, exists: Callable[[int], bool], next_seq: int) -> None:
        """The stream's first sequence is now ``first``: drop pending messages below it or no
        longer stored, and lift the floor to just below it (nats-server's rules)."""
        if self.asflr < first - 1:
            self.asflr = first - 1
            self.adflr = self.dseq
        for seq in [s for s in self.pending if s < first or not exists(s)]:
            self.forget(seq)
        self.settle(next_seq)

    def forget(self, seq: int) -> None:
        """``seq`` is done with: not pending, not counted, not queued."""
        self.pending.pop(seq, None)
        self.rdc.pop(seq, None)
        self.rdq.discard(seq)

    def settle(self, next_seq: int) -> None:
        """With nothing pending, the floor is what was delivered and everything the cursor
        moved past."""
        if not self.pending:
            self.adflr, self.asflr = self.dseq, max(next_seq - 1, self.asflr)

    # --- invariants ----------------------------------------------------------------------

    def check(self) -> None:
        """Raise AssertionError if an invariant does not hold (for tests and debugging)."""
        assert 0 <= self.adflr <= self.dseq, (self.adflr, self.dseq)
        seqs = list(self.pending)
        assert seqs == sorted(seqs), "pending out of stream order"
        if seqs:
            assert self.asflr < seqs[0], ("stream floor not below pending", self.asflr, seqs[0])
        for seq, pend in self.pending.items():
            assert 0 < pend.cseq <= self.dseq, ("pending beyond delivered", seq, pend.cseq)
        for seq in self.rdq:
            assert seq in self.pending, ("queued redelivery not pending", seq)
        for seq, n in self.rdc.items():
            assert n >= 2, ("redelivery count below 2", seq, n)
