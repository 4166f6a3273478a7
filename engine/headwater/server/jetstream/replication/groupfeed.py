"""What a replicated stream's mirror or source takes from its origin goes into the stream's
log (docs/REPLICATION.md, "Mirrors and sources"): proposed by its leader, stored by every
replica when committed.

The origin's messages come in order and each is proposed once. A proposal that is not
committed (the runner is full, or this replica stopped leading) must not leave a gap: a
later one committed without it would move the position past a message the stream never
got. So at the first proposal rejected the feed proposes nothing more, waits until every
proposal still in flight is answered (committed or not), then calls ``restart``: the
mirror or source reads its position from what the stream holds now and asks its origin
again from there. Rejections come back in the call that proposed or in the runner's pass
that took the batch, so nothing proposed after a rejection was known reaches the log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from headwater.server.jetstream import groupops

if TYPE_CHECKING:
    from headwater.server.jetstream.streamgroup import StreamGroup

__all__ = ["GroupFeed"]


class GroupFeed:
    """Proposals of one mirror or source into ``group``'s log."""

    def __init__(self, group: StreamGroup, restart: Callable[[], None]) -> None:
        self.group = group
        self.restart = restart
        self.in_flight = 0
        self.broken = False
        """A proposal was not committed: nothing more until the feed restarts."""

    def propose(self, op: groupops.Op) -> bool:
        """Propose ``op``; False (nothing proposed) while the feed is broken."""
        if self.broken:
            return False
        self.in_flight += 1
        self.group.propose(groupops.encode(op), self._answered)
        return True

    def _answered(self, outcome: groupops.Outcome | None) -> None:
        self.in_flight -= 1
        if outcome is None:
            self.broken = True
        if self.broken and self.in_flight == 0:
            self.broken = False
            self.restart()
