"""A pull consumer's waiting requests: arrival order, ``max_waiting``, expiry and heartbeats.

:class:`WaitQueue` owns the requests; :mod:`.pull` serves them in arrival order (peek / pop)
and :mod:`.timers` asks it which have expired, which owe an idle heartbeat and when the next
of those is due. Each :class:`PullRequest` counts what it was given so far.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["PullRequest", "WaitQueue"]


@dataclass(slots=True)
class PullRequest:
    reply: str
    batch: int
    max_bytes: int
    expires_at: float
    """Monotonic deadline in seconds; 0 = never."""
    no_wait: bool
    heartbeat: float
    delivered: int = 0
    bytes: int = 0
    last_sent: float = field(default_factory=time.monotonic)

    @property
    def remaining(self) -> int:
        return self.batch - self.delivered

    def expired(self, now: float) -> bool:
        return bool(self.expires_at) and self.expires_at <= now


class WaitQueue:
    """Waiting pull requests in arrival order, bounded by ``limit`` (``max_waiting``; 0 =
    unbounded)."""

    __slots__ = ("limit", "requests")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.requests: deque[PullRequest] = deque()

    def __len__(self) -> int:
        return len(self.requests)

    def __bool__(self) -> bool:
        return bool(self.requests)

    def __iter__(self) -> Iterator[PullRequest]:
        return iter(self.requests)

    def full(self) -> bool:
        return self.limit > 0 and len(self.requests) >= self.limit

    def add(self, req: PullRequest) -> None:
        self.requests.append(req)

    def peek(self) -> PullRequest | None:
        return self.requests[0] if self.requests else None

    def pop(self) -> PullRequest:
        return self.requests.popleft()

    def remove(self, req: PullRequest) -> None:
        try:
            self.requests.remove(req)
        except ValueError:
            return

    def expire(self, now: float) -> list[PullRequest]:
        """Take out every request whose expiry has passed, in arrival order (one pass, not a
        deque removal per request)."""
        expired = [r for r in self.requests if r.expired(now)]
        if expired:
            self.requests = deque(r for r in self.requests if not r.expired(now))
        return expired

    def heartbeats_due(self, now: float) -> list[PullRequest]:
        """The requests that owe their requester an idle heartbeat at ``now``, each counted as
        sent now (the caller sends them)."""
        due = [r for r in self.requests if r.heartbeat and r.last_sent + r.heartbeat <= now]
        for req in due:
            req.last_sent = now
        return due

    def next_deadline(self) -> float:
        """The earliest expiry or heartbeat still ahead among the requests; 0.0 when none."""
        next_at = 0.0
        for req in self.requests:
            if req.expires_at and (not next_at or req.expires_at < next_at):
                next_at = req.expires_at
            if req.heartbeat:
                due = req.last_sent + req.heartbeat
                if not next_at or due < next_at:
                    next_at = due
        return next_at
