"""What each kind of ack does to a consumer's pending list, ack floor and redelivery queue.

Functions over :class:`.consumer.Consumer` state (the consumer's ``process_*`` methods call
them); the floor rules are nats-server's, checked differentially (see
``tests/conformance/jetstream/test_consumers_pull.py``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .config import cfg_get

if TYPE_CHECKING:
    from .consumer import Consumer

__all__ = ["ack", "nak", "progress", "purged", "term"]


def ack(c: Consumer, sseq: int, cseq: int) -> None:
    """+ACK: drop the message from pending, move the ack floor as nats-server does.

    With ``all``, everything up to ``sseq`` goes. With ``explicit``, the floor moves only
    when the acked message's first consumer sequence sits right on it, then up to just
    below the oldest message still pending; with nothing pending it is what was delivered.
    """
    policy = c.ack_policy
    if policy == "all":
        if cseq <= c.adflr:
            return
        for seq in [s for s in c.pending if s <= sseq]:
            c._forget(seq)
            c.stream_acked(seq)
        c.adflr, c.asflr = max(c.adflr, cseq), max(c.asflr, sseq)
        c._settle_floor()
        c.kick()
        return
    if policy != "explicit":
        return
    pend = c.pending.get(sseq)
    if pend is None:
        # A late ack of a message that ran out of deliveries still clears its count.
        c.rdc.pop(sseq, None)
        return
    if c.on_acked is not None:
        c.on_acked(c, sseq, pend, c.rdc.get(sseq, 1))
    c._forget(sseq)
    c.stream_acked(sseq)
    if pend.cseq == c.adflr + 1:
        c.adflr, c.asflr = pend.cseq, sseq
        if c.pending:
            first_seq, first = next(iter(c.pending.items()))
            c.adflr, c.asflr = first.cseq - 1, first_seq - 1
    c._settle_floor()
    c.kick()


def nak(c: Consumer, sseq: int, dc: int, delay: int) -> None:
    """-NAK: redeliver now, or after ``delay`` ns (else the backoff step) if given."""
    pend = c.pending.get(sseq)
    if pend is None:
        return
    if delay <= 0:
        backoff = cfg_get(c.config, "backoff", None)
        if backoff:
            delay = int(backoff[min(dc - 1, len(backoff) - 1)])
    if c.on_naked is not None:
        c.on_naked(c, sseq, pend.cseq, dc)
    if delay > 0:
        pend.deadline = time.monotonic() + delay / 1e9
        c._arm_timer(pend.deadline)
        return
    c.rdq.add(sseq)
    c.kick()


def progress(c: Consumer, sseq: int) -> None:
    """+WPI: the message is being worked on; its ack wait starts again."""
    pend = c.pending.get(sseq)
    if pend is None:
        return
    pend.deadline = time.monotonic() + c.ack_wait / 1e9
    c._arm_timer(pend.deadline)


def term(c: Consumer, sseq: int, cseq: int, dc: int, reason: str) -> None:
    """+TERM: never redeliver; acknowledged for floors and retention, with an advisory."""
    if sseq not in c.pending:
        return
    ack(c, sseq, cseq)
    if c.on_terminated is not None:
        c.on_terminated(c, sseq, cseq, dc, reason)


def purged(c: Consumer) -> None:
    """The stream was purged: skip what is gone, drop pending messages that no longer
    exist, and lift the ack floor to below the new first message (nats-server's rules)."""
    store = c.stream.store
    state = store.state()
    first = state.first_seq if state.msgs else state.last_seq + 1
    if c.sseq < first:
        c.sseq = first
    if c.asflr < first - 1:
        c.asflr = first - 1
        c.adflr = c.dseq
    for seq in [s for s in c.pending if s < first or store.load_msg(s) is None]:
        c._forget(seq)
    c.rdq.retain(c.pending.__contains__)
    c.lps = [s for s in c.lps if s >= first]
    c._npc = None
    c._settle_floor()
    if c.on_change is not None:
        c.on_change(c)
    c.kick()
