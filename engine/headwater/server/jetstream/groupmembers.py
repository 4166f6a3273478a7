"""Which servers a replicated stream should be on after STREAM.UPDATE changes its
``num_replicas`` or STREAM.PEER.REMOVE takes a server out (docs/REPLICATION.md, "Changing the
peers"). Pure choices over names; :mod:`.clustered` reads what they need from etcd and writes
the outcome into the stream's placement, the wanted peers that each new leader is given.

The errors are nats-server's: too few servers to grow onto is 10005 "no suitable peers for
placement"; a peer that is not one is 10040; no server to take a removed peer's place is
10075 "peer remap failed" (nats-server keeps a stream's replica count through a removal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import errors


def ranked(candidates: Sequence[str], load: Mapping[str, int]) -> list[str]:
    """Candidates by how many streams they hold already, then by name (as placement ranks)."""
    return sorted(candidates, key=lambda name: (load.get(name, 0), name))


def resized(
    peers: Sequence[str],
    count: int,
    *,
    leader: str,
    in_sync: frozenset[str],
    candidates: Sequence[str],
    load: Mapping[str, int],
) -> tuple[str, ...]:
    """``peers`` grown or shrunk to ``count``. Growing adds the least loaded ``candidates``
    (registered servers that match the stream's placement, none of them a peer already);
    shrinking keeps the leader, then the replicas in sync, in their order."""
    if count >= len(peers):
        spare = ranked([c for c in candidates if c not in peers], load)
        need = count - len(peers)
        if len(spare) < need:
            raise errors.CLUSTER_NO_PEERS.exc(err="no suitable peers for placement")
        return (*peers, *spare[:need])
    # Leaving: those out of sync first (they hold least), the last named first among equals.
    order = sorted(
        (p for p in peers if p != leader),
        key=lambda p: (p in in_sync, -list(peers).index(p)),
    )
    leaving = set(order[: len(peers) - count])
    return tuple(p for p in peers if p not in leaving)


def replaced(
    peers: Sequence[str], peer: str, *, candidates: Sequence[str], load: Mapping[str, int]
) -> tuple[str, ...]:
    """``peers`` with ``peer`` swapped for the least loaded candidate, in its place."""
    if peer not in peers:
        raise errors.CLUSTER_PEER_NOT_MEMBER.exc()
    spare = ranked([c for c in candidates if c not in peers], load)
    if not spare:
        raise errors.PEER_REMAP.exc()
    return tuple(spare[0] if p == peer else p for p in peers)
