"""What the replicas of one group send each other (docs/REPLICATION.md, "Writing").

Only the leader of an epoch sends `Append`; every other replica answers with `AppendReply`.
A leader handing its leadership over sends `TimeoutNow` to the follower it chose. All are
plain values: the server side encodes them on the routes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One log entry: its position, the epoch it was written in, and the operation."""

    index: int
    epoch: int
    op: bytes


@dataclass(frozen=True)
class Append:
    """Entries after `prev_index` (whose entry has `prev_epoch`); empty = a heartbeat.

    `commit` is the leader's commit index: a follower applies up to it, within what it knows
    to equal the leader's log. `read` is the leader's current read round (0: none yet), which
    the follower echoes in its replies (the core's rule 9).
    """

    epoch: int
    leader: str
    prev_index: int
    prev_epoch: int
    entries: tuple[Entry, ...]
    commit: int
    read: int = 0


@dataclass(frozen=True)
class AppendReply:
    """A follower's answer, sent in the highest epoch the follower knows.

    `durable`: the follower's log is fsynced and equal to this epoch's leader's log up to
    there. `hint`: with ok, how far the log is known to equal the leader's (fsynced or not),
    so the leader sends from there; without ok, where the log might still match. `read`: the
    highest read round the follower received from this epoch's leader (rule 9 of the core).
    """

    epoch: int
    sender: str
    ok: bool
    durable: int
    hint: int
    read: int = 0


@dataclass(frozen=True)
class TimeoutNow:
    """From the leader of `epoch`, stepping down: the receiver, a member of `in_sync` whose log
    durably holds everything the leader had, campaigns at once instead of after the election
    timeout (by the normal fenced compare-and-swap: this changes when, never how)."""

    epoch: int
    leader: str


Message = Append | AppendReply | TimeoutNow
