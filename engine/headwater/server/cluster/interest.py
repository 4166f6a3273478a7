"""This server's own interest, as routes are told of it (RS+/RS-).

A route learns a subject once, not once per subscription: the first local subscription on a
subject sends ``RS+``, the last one's removal ``RS-``. A queue group is announced with its
weight (its number of local members), sent again whenever it changes, so the remote side can
weigh its choice between servers as nats-server does.

Subscriptions from routes never count here (a route forwards one hop only), nor do the ones
a service marks local (the JetStream API, which each server answers for its own clients
until the cluster-wide API of docs/CLUSTERING.md).
"""

from __future__ import annotations

from collections.abc import Iterator

Key = tuple[str, str | None]


class LocalInterest:
    """Counts of local subscriptions per (subject, queue)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[Key, int] = {}

    def add(self, subject: str, queue: str | None) -> int | None:
        """Count one more; returns the weight to announce, or None when nothing changes for
        the routes (a plain subject already announced)."""
        key = (subject, queue)
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        if queue is None and count > 1:
            return None
        return count

    def remove(self, subject: str, queue: str | None) -> int | None:
        """Count one less; returns the new weight (0: interest gone, send RS-), or None when
        nothing changes for the routes."""
        key = (subject, queue)
        count = self._counts.get(key, 0)
        if count == 0:
            return None
        count -= 1
        if count:
            self._counts[key] = count
            return None if queue is None else count
        del self._counts[key]
        return 0

    def items(self) -> Iterator[tuple[str, str | None, int]]:
        """Every announced (subject, queue, weight): what a new route is told at once."""
        for (subject, queue), count in self._counts.items():
            yield subject, queue, count

    def __len__(self) -> int:
        return len(self._counts)


__all__ = ["LocalInterest"]
