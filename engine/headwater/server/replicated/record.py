"""A stream's replica-group record, as etcd holds it (docs/REPLICATION.md, "The group record").

The record is changed only by compare-and-swap on its etcd revision, so etcd orders every
change of leader and of `in_sync`. `revision` is etcd's mod revision: the store sets it, a
proposal carries whatever value (0) and names the revision it expects instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


def quorum(n: int) -> int:
    """The least number of replicas `in_sync` may hold for a group of `n` peers."""
    return n // 2 + 1


@dataclass(frozen=True)
class GroupRecord:
    peers: tuple[str, ...]
    epoch: int
    leader: str
    in_sync: frozenset[str]
    revision: int = 0

    def same_config(self, other: GroupRecord) -> bool:
        """Equal but for the revision: is `other` the record a proposal asked for?"""
        return replace(self, revision=0) == replace(other, revision=0)
