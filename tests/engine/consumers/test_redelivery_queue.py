"""The redelivery queue: lowest sequence first, no duplicates, cheap discards."""

from __future__ import annotations

import pytest

from headwater.server.consumers.redelivery import RedeliveryQueue


def test_lowest_first_once_each() -> None:
    q = RedeliveryQueue()
    for seq in (5, 2, 9, 2, 5):
        q.add(seq)
    assert len(q) == 3 and 9 in q and 3 not in q
    assert [q.pop(), q.pop(), q.pop()] == [2, 5, 9]
    assert not q
    with pytest.raises(IndexError):
        q.pop()


def test_discard_and_requeue() -> None:
    q = RedeliveryQueue()
    for seq in (1, 2, 3):
        q.add(seq)
    q.discard(1)
    q.discard(7)
    q.add(1)  # queued again after a discard: served once
    assert [q.pop(), q.pop(), q.pop()] == [1, 2, 3]
    assert not q


def test_retain_keeps_order() -> None:
    q = RedeliveryQueue()
    for seq in range(10, 0, -1):
        q.add(seq)
    q.retain(lambda s: s % 2 == 0)
    assert list(q) == [2, 4, 6, 8, 10]
    assert q.pop() == 2


def test_large_queue_is_fast() -> None:
    q = RedeliveryQueue()
    for seq in range(200_000, 0, -1):
        q.add(seq)
    for seq in range(1, 200_001, 2):
        q.discard(seq)
    assert q.pop() == 2 and len(q) == 99_999
