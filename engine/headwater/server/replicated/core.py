"""One replica of one stream's group: the sans-IO state machine (docs/REPLICATION.md).

A `Replica` is fed inputs, each a method returning the actions the caller must carry out, in
order: `on_record` (a group record from the etcd watch, or read after a CAS), `on_message`,
`on_persisted`, `on_tick` (a logical clock in ms), `propose`, `read`, `on_cas_result`,
`on_snapshot`, `step_down` and `change_peers`; `compact` returns nothing. It does no I/O and
reads no clock.
The caller builds it from what it recovered from disk: its snapshot's index and epoch
(`base`, (0, 0) without one) and the durable log after it; runs the disk actions (Persist,
Truncate, Rebase) in order and calls `on_persisted` once per Persist, in order, when its fsync
is done (or `on_persisted_many` with every Persist one fsync covered: the same state, with
one commit advance and at most one durable report for all of them).

The log in memory holds the entries after `base`; everything up to `base` is in the owner's
snapshot, committed and applied (commit and applied start there). Indexes are absolute:
`last_index`, `entry_at(i)` and `epoch_at(i)` (the base's epoch at the base) read it.

Rules implemented (the reasons are in docs/REPLICATION.md):

1. A follower accepts an Append only if its epoch is the highest it knows, its sender is that
   epoch's leader per the record (when the record of that epoch is known), the epoch is not
   fenced, and its log holds `prev_epoch` at `prev_index` (log matching; an Append whose
   `prev_index` is below the base, which it cannot check, is answered with its log's end).
   Otherwise it answers ok=False with a hint: its last index, or the index before the first
   entry of the conflicting epoch (never below what it knows is committed or matched). A
   conflicting suffix is truncated before appending; an entry at or below the known commit
   index never is (that would be a bug elsewhere: `SafetyError`).
2. A follower reports `durable` = min(fsynced index, index up to which its log is known to
   equal the current epoch's leader's log); the "matched" part restarts at every new epoch.
   A leader counts only replies of its own epoch.
3. The leader's commit index is the least durable index over `in_sync` (its own is its
   fsynced index), where `in_sync` is the union of the record's and of every `in_sync` it
   proposed whose outcome it does not know yet (an added member counts from the proposal on,
   so it cannot miss an entry committed while the swap was in flight). A new leader first
   appends a no-op entry (op `NOOP`, skipped by the application) in its epoch. Safety does
   not need it (durable indexes are counted per epoch, so the inherited tail commits once
   every `in_sync` member matched it in the new epoch); it is there so that a follower's
   uncommitted entries of an older epoch past the leader's log end meet a conflict and are
   cut back. Followers apply up to min(leader's commit, their durable index).
4. The leader takes a follower out of `in_sync` when for `sync_timeout` it made no durable
   progress while lacking entries, or gave no answer at all (caught up, it answers every
   heartbeat; a read round needs every member's echo, so a member that is down must go even
   while no entry waits, or reads of an idle stream stall), only if a quorum remains; it
   puts one back when its durable index in this epoch reaches both the commit index and the
   leader's last index at the start of its epoch (the commit index alone may lag what the
   previous leader committed). One record change in flight at a time. Heartbeats every
   `heartbeat_interval`.
5. A member of `in_sync` that heard nothing valid from the leader for `election_timeout`
   plus a stagger (its rank in the sorted peers; a record change the leader made counts as
   hearing from it) fences the current epoch, then proposes
   epoch + 1 with itself as leader and `in_sync` unchanged. A failed swap adopts the record
   returned (and lifts the fence once no campaign of its can still succeed). A fresh
   replica processes no Append before it has a record; one that finds itself the record's
   leader without having won that epoch in its lifetime campaigns for a new one.
6. A leader that learns of a higher epoch (record, Append or reply) steps down: its waiting
   proposals get `Rejected` and it never acknowledges them.
7. Compaction and snapshots. `compact(upto)` drops the entries up to `upto` (never past the
   applied index: `SafetyError`) once the owner's snapshot holds them. A leader that must
   send a follower an entry at or below its base emits `SendSnapshot(to, applied index,
   its epoch)`, at most once per `snapshot_interval` per follower; its heartbeats to that
   follower go on from the base, and a failed answer triggers no Append (no ping-pong). The
   follower's owner installs the state and calls `on_snapshot(index, epoch)`: the core moves
   its base there, sets commit and applied to `index`, keeps the entries after it if its log
   holds `index` with that `epoch` (else drops them all: `Rebase`), and answers ok=False with
   its last index, from which the leader goes on by log matching. Why each case is safe:
   - only committed state is sent (index <= the sender's applied index), and committed
     entries never differ between replicas, so a snapshot is the same prefix whoever sends
     it: one from a deposed leader, or arriving late, is as good as a fresh one;
   - `on_snapshot` ignores (returns nothing) one at or below the applied index (late, twice,
     or a follower that got past it meanwhile): the owner asks `snapshot_wanted` first and
     must not install such one, so the application never goes backwards; a leader ignores
     every snapshot (it holds every committed entry by completeness, and applies them), and
     so does a replica without a record (a fresh one learns the current epoch first);
   - entries kept after the snapshot keep their durability; when the log is dropped, its
     in-flight Persists no longer count past `index` (their entries are gone), so nothing
     dropped is ever reported durable. What a follower reported durable past `index` in an
     epoch that can still commit matched that epoch's leader, whose log holds the committed
     entry at `index`: its entry there is the same, so that log is kept, not dropped;
   - a leader only asks for a snapshot after an answer of its own epoch, so the follower is
     in an epoch at least the one `index` was committed in: every leader it accepts entries
     from later holds the snapshot's entries (completeness), and the base is a checkable
     `prev_index` for them.

8. Leadership transfer (`step_down(preferred)`, Raft's): the leader picks a member of the
   record's `in_sync` other than itself (`preferred` if it is one, else the one holding the
   most durably, by name on a tie) and from then on rejects every proposal (`Rejected`, the
   hint naming that member). Once that member's durable index in this epoch reaches the
   leader's last index, each of its ok replies is answered with `TimeoutNow(epoch, leader)`
   (a lost one is made good by the next heartbeat's reply). A follower that gets it for its
   current epoch, from that epoch's leader per its record, while in its record's `in_sync`
   and not already campaigning, campaigns at once: rule 5 without the election timeout and
   stagger, so still fenced first and by the compare-and-swap. If no newer epoch is known
   within `election_timeout` of the step-down, the leader takes proposals again. Why it is
   safe: rule 5's argument never uses the timeout (the timeout is only for liveness: not
   campaigning against a live leader), so a member of `in_sync` may campaign at any moment,
   and `TimeoutNow` only chooses the moment; a late or duplicated one costs at most an
   election. The leader resuming after the timeout is safe too: its proposals commit only
   with every `in_sync` member's durable answer, the fenced campaigner's included, so none
   commits in an epoch whose successor's swap succeeded (rule 5's fencing). The wait for
   the target's durable index is for liveness: it holds every entry the leader had, so the
   leader's uncommitted tail is committed in the new epoch instead of waiting for retries.

9. Reads (`read(token)`, Raft's ReadIndex adapted to rule 3): a leader notes the read with its
   commit index and answers `ReadReady(token)` once (a) it applied its own epoch's no-op entry,
   (b) every member of its commit set (rule 3's `in_sync`, proposals of unknown outcome
   included) other than itself echoed, in this epoch, a read round started after the read
   arrived, and (c) its applied index reached the noted commit index; the owner then answers
   from its state at once. A replica that does not lead, or steps down (rule 8), answers
   `ReadRejected(token, leader hint)` at once; a leader that stops leading rejects every read
   waiting, and a read waiting longer than `read_timeout` is rejected. Rounds: every Append
   carries the leader's current round number; a follower echoes in every reply the highest
   round it received from its current epoch's leader (reset at each epoch). A read needs the
   round after the current one; that round starts at once when no round is in flight (every
   member echoed the current one), else when the one in flight completes or at the next
   heartbeat (which also resends what was lost): the reads waiting share one round.
   Why a read sees every write acknowledged before it arrived (at t0), by any leader:
   - writes acknowledged in this epoch are committed at or below the noted commit index (c);
     those acknowledged in earlier epochs are in this leader's log (completeness) below its
     no-op, committed once the no-op is, so applied by (a). A leader's commit index may lag
     its predecessor's acknowledgements, which is why (c) alone is not enough;
   - no leader of a later epoch acknowledged anything before t0: nothing commits in an epoch
     before the swap that opened it, and the swap of epoch e+1 came after t0. It was made
     (rule 5) by a member C of the in_sync of the last record of epoch e, the one C's swap
     named. Only this leader changes that record in epoch e, each change naming the revision
     before it, so the last record is the one it knows or the outcome of one of its
     proposals pending: C is in the commit set, so C echoed (b) a round sent after t0, with a
     reply of epoch e. C fenced epoch e before its swap, and from its fence on it never
     answers in epoch e: the fence is lifted only on a record newer than the swapped one,
     whose epoch is higher, and a restarted C starts from the current record (rule 5: no
     Append before a record). So C's swap followed its echo, after t0. A swap to epoch e+2
     or later follows the one to e+1 (etcd orders them), and the in_sync swap that lets a
     later leader commit without this one happens in that later epoch, after its swap too;
   - the log is one sequence (a later epoch commits only after its swap, this leader no more
     after it: rule 5's fencing), so the state read (applied at the answer, <= committed by
     then) is the committed log's state at one moment between the read's arrival and its
     answer: linearizable. A deposed leader that has not heard of the new epoch yet never
     completes a read (no member of the new epoch's in_sync echoes its rounds any more): its
     reads time out, or are rejected once it learns of the epoch. No clock is trusted.

10. Membership (`change_peers(wanted)`, given to the leader; its owner gives it again to every
   new leader, from where the wanted peers are kept): the leader changes the record's
   `peers` toward `wanted`, one record change at a time, by the same compare-and-swap as
   rule 4, in this order: (a) it adds every wanted peer missing (to `peers` only: a new
   replica is out of `in_sync` and catches up by rule 7, then joins `in_sync` by rule 4);
   (b) when it is not wanted itself, it hands its leadership over (rule 8) to a wanted member
   of `in_sync`, and the next leader goes on; (c) it removes the unwanted peers out of
   `in_sync` first, then those in it, the latter only once every wanted peer is in `in_sync`,
   and only while what stays in `in_sync` is a quorum of the new `peers` (never itself). Why
   it is safe: a change of `peers` alone changes no commit set; a removal takes members out
   of `in_sync`, as rule 4 does, and rule 3 counts them until the swap's outcome is known; a
   removed replica is no longer in `in_sync`, so it never campaigns (rule 5), and its stale
   swaps name a revision gone. One hazard is new: a replica removed and added again within
   an epoch is a new replica (its owner deleted the old one), yet a reply of the old one can
   still be in flight, reporting entries durable that the new one lacks. So the leader starts
   a read round when it starts tracking an added peer and ignores that peer's replies
   echoing an older round: only a replica that received an Append sent after the addition
   echoes it. While new replicas catch up, the group is as durable as its `in_sync`.

`Apply` delivers committed entries in order, each once per replica lifetime, from the base
on. A restarted replica knows no commit index past its base, so it applies again from
base + 1: the caller rebuilds its state from its snapshot (or skips what that already holds).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from headwater.server.replicated.messages import Append, AppendReply, Entry, Message, TimeoutNow
from headwater.server.replicated.record import GroupRecord, quorum

NOOP = b""  # the op of the entry a new leader appends first; the application skips it


class SafetyError(AssertionError):
    """The core was asked to do something that breaks a safety rule: a bug upstream."""


@dataclass(frozen=True)
class Config:
    heartbeat_interval: int = 50
    election_timeout: int = 300
    election_stagger: int = 150  # per rank of the replica's name among the sorted peers
    sync_timeout: int = 250
    cas_timeout: int = 300  # a record proposal without an answer may be made again after
    # Entries per Append: a leader with a backlog (a pipelining publisher) sends it in a few
    # large Appends, so fewer replies and core steps per entry (docs/BENCHMARKS.md).
    max_batch: int = 256
    max_batch_bytes: int = 1 << 20  # op bytes per Append (one larger entry still goes alone)
    snapshot_interval: int = 1000  # at most one SendSnapshot per follower this often
    read_timeout: int = 2000  # a read not ready after this long is rejected (rule 9)


# Actions -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    to: str
    msg: Message


@dataclass(frozen=True)
class Persist:
    """Append these entries to the log (after any earlier Truncate), then fsync and call
    `on_persisted(entries[-1].index)`. Disk operations run in the order given."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Truncate:
    """Drop the entries after `after_index`; ordered with the Persists around it."""

    after_index: int


@dataclass(frozen=True)
class Rebase:
    """Drop every entry of the log: it goes on after `index` (whose entry has `epoch`), which
    the owner's snapshot now holds; the next Persist starts at `index + 1`. Ordered with the
    other disk operations. Emitted only by `on_snapshot`."""

    index: int
    epoch: int


@dataclass(frozen=True)
class SendSnapshot:
    """Transfer the owner's state as of `index` (whose entry has `epoch`; committed, and
    exactly what every Apply before this action delivered) to `to`, out of band. The receiving
    owner installs it and calls `on_snapshot(index, epoch)` there."""

    to: str
    index: int
    epoch: int


@dataclass(frozen=True)
class Apply:
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Acknowledge:
    token: Any
    index: int


@dataclass(frozen=True)
class Rejected:
    token: Any
    leader: str | None


@dataclass(frozen=True)
class ReadReady:
    """The read `token` may be answered now from the owner's state: it holds every write
    acknowledged before the read arrived (rule 9). Emitted after the Apply it depends on."""

    token: Any


@dataclass(frozen=True)
class ReadRejected:
    """The read `token` may not be answered here (not leading, stepping down or stepped
    down, or not ready within `read_timeout`); `leader` is a hint of who leads, if known."""

    token: Any
    leader: str | None


@dataclass(frozen=True)
class Leadership:
    """This replica started (`leading`) or stopped leading, in `epoch`: the owner serves the
    stream's clients only while leading."""

    leading: bool
    epoch: int


@dataclass(frozen=True)
class ProposeRecord:
    """Compare-and-swap the group record to `new` if its revision is `expected_revision`;
    the caller reports the outcome with `on_cas_result` (or not at all, if unknown)."""

    new: GroupRecord
    expected_revision: int


Action = (
    Send
    | Persist
    | Truncate
    | Rebase
    | Apply
    | Acknowledge
    | Rejected
    | ReadReady
    | ReadRejected
    | ProposeRecord
    | Leadership
    | SendSnapshot
)


@dataclass(frozen=True)
class _Read:
    token: Any
    commit: int  # the leader's commit index when the read arrived
    round: int  # the read round it needs echoed by every member of the commit set
    since: int  # when it arrived (the core's clock)


@dataclass
class _Proposal:
    new: GroupRecord
    expected_revision: int
    campaign: bool


class Replica:
    def __init__(
        self,
        name: str,
        recovered: tuple[Entry, ...] | list[Entry] = (),
        config: Config | None = None,
        base: tuple[int, int] = (0, 0),
    ) -> None:
        self.name = name
        self.config = config or Config()
        # The log holds the entries after `base`; everything up to it is in the owner's
        # snapshot (committed, applied), and `base_epoch` is the epoch of the entry at `base`.
        self.base, self.base_epoch = base
        self.log: list[Entry] = list(recovered)
        for i, entry in enumerate(self.log, self.base + 1):
            if entry.index != i:
                raise ValueError(f"recovered log is not contiguous at {i}")
        self.record: GroupRecord | None = None
        self.epoch = 0  # the highest epoch known, from records and messages
        self.leader: str | None = None  # the leader of self.epoch, when known
        self.fenced = 0  # Appends of epochs <= fenced are refused (rule 5)
        self.is_leader = False
        self.now: int | None = None
        self.last_heard: int | None = None
        # Durability. Each Persist in flight is [last index, index up to which what it leaves
        # on disk still agrees with self.log]: a later Truncate lowers the second.
        self.fsynced = self.last_index
        self._persists: list[list[int]] = []
        # Follower side.
        self.matched = 0  # log known equal to this epoch's leader's log up to here
        self.leader_commit = 0
        self.told_commit = 0
        self._sent_durable = -1
        self._round_seen = 0  # the highest read round of this epoch's leader received (rule 9)
        # Both sides.
        self.commit = self.base  # highest index known committed and held (durably matched) here
        self.applied = self.base
        self._proposals: list[_Proposal] = []
        self._proposed_at: int | None = None
        # Leader side.
        self.epoch_start = 0
        self._next: dict[str, int] = {}
        self._recv: dict[str, int] = {}  # -1: no ok reply yet in this epoch
        self._match: dict[str, int] = {}
        self._progress: dict[str, int] = {}
        self._tokens: deque[tuple[int, Any]] = deque()
        """(index, token) of this leader's proposals not yet acknowledged, in index order."""
        self._last_heartbeat = 0
        self._snapshot_sent: dict[str, int] = {}  # follower -> when it was last sent one
        self._transfer: tuple[str, int] | None = None  # (target, since) while stepping down
        self._round = 0  # the last read round started in this leadership (rule 9)
        self._echo: dict[str, int] = {}  # follower -> highest round it echoed in this epoch
        self._reads: deque[_Read] = deque()  # waiting, in arrival order
        self._wanted: frozenset[str] | None = None  # the peers to change to (rule 10)
        self._joined: dict[str, int] = {}  # peer added in this epoch -> its first read round

    # The log, past its base ------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        return self.base + len(self.log)

    def entry_at(self, index: int) -> Entry:
        """The entry at `index` (base < index <= last_index)."""
        if not self.base < index <= self.last_index:
            raise IndexError(f"{self.name}: no entry {index} in ({self.base}, {self.last_index}]")
        return self.log[index - self.base - 1]

    def epoch_at(self, index: int) -> int:
        """The epoch of the entry at `index` (base <= index <= last_index; 0 at index 0)."""
        if index == self.base:
            return self.base_epoch
        return self.entry_at(index).epoch

    def _entries(self, after: int, upto: int) -> list[Entry]:
        """The entries in (after, upto]; `after` >= base."""
        return self.log[after - self.base : upto - self.base]

    # Inputs ----------------------------------------------------------------------------------

    def on_tick(self, now: int) -> list[Action]:
        self.now = now
        if self.last_heard is None:
            self.last_heard = now
        if self.record is None:
            return []
        if self.is_leader:
            out: list[Action] = []
            transfer = self._transfer
            if transfer is not None and now - transfer[1] >= self.config.election_timeout:
                self._transfer = None  # the transfer did not complete: lead on (rule 8)
            reads = self._reads
            while reads and now - reads[0].since >= self.config.read_timeout:
                out.append(ReadRejected(reads.popleft().token, None))
            if now - self._last_heartbeat >= self.config.heartbeat_interval:
                self._last_heartbeat = now
                if reads and reads[-1].round > self._round:
                    self._round += 1  # the round the reads waiting need goes with the beat
                for f in self._followers():
                    if self._recv[f] >= 0:
                        # Go back to what the follower confirmed: resends what was lost.
                        self._next[f] = self._recv[f] + 1
                    out += self._send_to(f, beat=True)
            return out + self._maybe_change_in_sync()
        return self._maybe_campaign()

    def on_record(self, record: GroupRecord) -> list[Action]:
        if self.record is not None and record.revision <= self.record.revision:
            return []
        self.record = record
        campaigns = [p for p in self._proposals if p.campaign]
        self._resolve(record.revision)
        out: list[Action] = []
        if record.epoch > self.epoch:
            out += self._enter_epoch(record.epoch, record.leader)
        elif record.epoch == self.epoch:
            self.leader = self.leader or record.leader
            # A change the leader made to its record is a sign of life, like a heartbeat.
            self.last_heard = self.now
        if record.epoch < self.epoch:
            return out  # stale: a message already told of a later epoch
        if record.leader == self.name:
            if self.is_leader:
                return out + self._track_peers() + self._leader_advance()
            if any(p.new.same_config(record) for p in campaigns):
                return out + self._become_leader()
        return out + self._maybe_campaign()

    def on_cas_result(self, ok: bool, record: GroupRecord) -> list[Action]:
        """The outcome of a ProposeRecord, with the record etcd holds now (ours if ok)."""
        return self.on_record(record)

    def on_message(self, msg: Message) -> list[Action]:
        if isinstance(msg, Append):
            return self._on_append(msg)
        if isinstance(msg, TimeoutNow):
            return self._on_timeout_now(msg)
        return self._on_reply(msg)

    def step_down(self, preferred: str | None = None) -> list[Action]:
        """Hand leadership over to a member of `in_sync` (rule 8): `preferred` if it is one,
        else the most caught up. Nothing when not leading or no other member is in sync."""
        rec = self.record
        if not self.is_leader or rec is None:
            return []
        return self._hand_over(rec.in_sync - {self.name}, preferred)

    def _hand_over(self, candidates: frozenset[str], preferred: str | None) -> list[Action]:
        """Rule 8 toward one of `candidates` (members of `in_sync`, not this leader)."""
        if self.now is None or not candidates:
            return []
        others = sorted(candidates)
        if preferred in others:
            target = preferred
        else:
            target = max(others, key=lambda f: self._match.get(f, 0))  # first of the best
        self._transfer = (target, self.now)
        return self._timeout_now(target)

    def change_peers(self, wanted: Sequence[str]) -> list[Action]:
        """Change the group's peers to `wanted` (rule 10), as a leader; nothing otherwise.
        The owner gives it again to each new leader until the record's peers are `wanted`."""
        if not wanted:
            raise ValueError("a group needs at least one peer")
        if not self.is_leader:
            return []
        self._wanted = frozenset(wanted)
        return self._maybe_change_in_sync()

    @property
    def wanted_peers(self) -> frozenset[str] | None:
        """The peers this leader is changing the group to (rule 10), if it was told any."""
        return self._wanted if self.is_leader else None

    @property
    def transferring_to(self) -> str | None:
        """The member this leader is handing its leadership to, while it does (rule 8)."""
        return self._transfer[0] if self._transfer is not None and self.is_leader else None

    def on_persisted(self, index: int) -> list[Action]:
        """The oldest Persist in flight is fsynced (called once per Persist, in order)."""
        return self.on_persisted_many((index,))

    def on_persisted_many(self, indexes: Sequence[int]) -> list[Action]:
        """The oldest ``len(indexes)`` Persists in flight are fsynced (one sync covered them):
        the same as `on_persisted` for each in order, but one advance and at most one durable
        report for all of them (the reports in between would only be outdated by the last)."""
        persists = self._persists
        for index in indexes:
            if not persists:
                raise SafetyError("on_persisted without a Persist in flight")
            end, valid = persists.pop(0)
            if index != end:
                raise SafetyError(f"on_persisted({index}) for a Persist ending at {end}")
            self.fsynced = max(self.fsynced, valid)
        if not indexes:
            return []
        if self.is_leader:
            return self._leader_advance()
        out = self._follower_advance()
        return out + self._report()

    def propose(self, op: bytes, token: Any) -> list[Action]:
        return self.propose_many(((op, token),))

    def propose_many(self, items: Sequence[tuple[bytes, Any]]) -> list[Action]:
        """Several proposals at once (what arrived in one pass of the owner's loop): their
        entries in order, one Persist, and one Append to each follower that was caught up."""
        if not items:
            return []
        if not self.is_leader:
            hint = self.leader if self.leader != self.name else None
            return [Rejected(token, hint) for _, token in items]
        if self._transfer is not None:
            # Stepping down: nothing new, so the target can hold all we have (rule 8).
            return [Rejected(token, self._transfer[0]) for _, token in items]
        first = self.last_index + 1
        entries = [Entry(first + i, self.epoch, op) for i, (op, _) in enumerate(items)]
        self.log.extend(entries)
        self._tokens.extend(
            (entry.index, token) for entry, (_, token) in zip(entries, items, strict=True)
        )
        out: list[Action] = [self._persist(entries)]
        for f in self._followers():
            if self._next[f] == first:
                out += self._send_to(f)
        return out

    def read(self, token: Any) -> list[Action]:
        """A read to answer from the owner's state, once that is safe (rule 9)."""
        return self.read_many((token,))

    def read_many(self, tokens: Sequence[Any]) -> list[Action]:
        """Several reads at once (what arrived in one pass of the owner's loop): one round."""
        if not tokens:
            return []
        if not self.is_leader or self.now is None:
            hint = self.leader if self.leader != self.name else None
            return [ReadRejected(token, hint) for token in tokens]
        if self._transfer is not None:
            return [ReadRejected(token, self._transfer[0]) for token in tokens]
        need = self._round + 1
        self._reads.extend(_Read(token, self.commit, need, self.now) for token in tokens)
        out: list[Action] = self._start_round() if self._round_done() else []
        return out + self._ready_reads()

    def compact(self, upto: int) -> None:
        """The owner's snapshot holds everything up to `upto`: drop those entries from memory
        and move the base there. Never past the applied index (the snapshot could not hold
        it); at or below the base it does nothing."""
        if upto > self.applied:
            raise SafetyError(f"{self.name}: compacting up to {upto}, applied {self.applied}")
        if upto <= self.base:
            return
        self.base_epoch = self.epoch_at(upto)
        del self.log[: upto - self.base]
        self.base = upto

    def followers(self) -> list[tuple[str, bool, int, int]]:
        """The leader's view of each other peer, for reports (STREAM.INFO's replicas): its
        name, whether the record has it in sync, the index it holds durably, and when (this
        core's clock, ms) it last made progress or answered caught up; empty unless leading."""
        if not self.is_leader or self.record is None:
            return []
        return [
            (f, f in self.record.in_sync, self._match.get(f, 0), self._progress.get(f, 0))
            for f in sorted(set(self.record.peers) - {self.name})
        ]

    def snapshot_wanted(self, index: int) -> bool:
        """Would `on_snapshot(index, ...)` install it? The owner asks before it replaces its
        state, and installs and calls `on_snapshot` in one step (no other input between)."""
        return self.record is not None and not self.is_leader and index > self.applied

    def on_snapshot(self, index: int, epoch: int) -> list[Action]:
        """The owner installed (durably) a snapshot of the stream as of `index`, whose entry
        has `epoch` (rule 7)."""
        if not self.snapshot_wanted(index):
            return []  # late, twice, already past it, leading, or no record yet: ignored
        out: list[Action] = []
        if index <= self.last_index and self.epoch_at(index) == epoch:
            # Our entry at `index` is the committed one (same index and epoch, same entry):
            # what follows it stays, durable or not, as it was.
            del self.log[: index - self.base]
        else:
            # Our log ends before `index` or holds another entry there: nothing of it past
            # what we applied is committed, and nothing past `index` can follow the snapshot.
            self.log = []
            self.fsynced = index  # the snapshot is durable, the log empty past it
            for p in self._persists:
                p[1] = min(p[1], index)
            self.matched = min(self.matched, index)
            out.append(Rebase(index, epoch))
        self.base, self.base_epoch = index, epoch
        self.fsynced = max(self.fsynced, index)
        self.commit = self.applied = index
        self.leader_commit = max(self.leader_commit, index)
        out += self._follower_advance()
        if self.leader is not None and self.leader != self.name and self.epoch > self.fenced:
            # Where our log ends: the leader goes on after it (by log matching, as ever).
            out.append(self._reply(False, self.last_index))
        return out

    # Follower side ---------------------------------------------------------------------------

    def _on_append(self, m: Append) -> list[Action]:
        if self.record is None:
            return []  # restarted: no Append before a record (rule 5)
        if m.epoch < self.epoch:
            # Tell the sender of the later epoch: a deposed leader learns it here.
            return [Send(m.leader, AppendReply(self.epoch, self.name, False, 0, 0))]
        if m.epoch <= self.fenced:
            return []  # we campaign: silence to the leader of the fenced epoch
        if m.epoch == self.record.epoch and m.leader != self.record.leader:
            return []  # not that epoch's leader
        out: list[Action] = []
        if m.epoch > self.epoch:
            out += self._enter_epoch(m.epoch, m.leader)
        elif self.leader is None:
            self.leader = m.leader
        if m.leader != self.leader or m.leader == self.name:
            return out
        self.last_heard = self.now
        # Echoed in every reply from here on: we answer in this epoch, unfenced (rule 9).
        self._round_seen = max(self._round_seen, m.read)
        # What the leader says is committed, matched or not: only reports read it (a replica
        # is current once it applied that much); applying goes by leader_commit.
        self.told_commit = max(self.told_commit, m.commit)
        last = self.last_index
        if m.prev_index > last or m.prev_index < self.base:
            # Past our end; or inside our snapshot, where we cannot check its epoch: from
            # where our log ends, the leader's next Append is checkable (or it snapshots).
            return [*out, self._reply(False, last)]
        if self.epoch_at(m.prev_index) != m.prev_epoch:
            if m.prev_index <= self.commit:
                raise SafetyError(f"{self.name}: leader's log differs at committed {m.prev_index}")
            conflict = self.epoch_at(m.prev_index)
            first = m.prev_index
            while first > self.base + 1 and self.epoch_at(first - 1) == conflict:
                first -= 1
            # Never below what is known to equal this leader's log (matched, committed).
            hint = min(max(first - 1, self.commit, self.matched), m.prev_index - 1)
            return [*out, self._reply(False, hint)]
        new: list[Entry] = []
        if m.prev_index == last:
            # The usual case, a follower that keeps up: every entry is past our end (they
            # follow prev_index one by one), so nothing to compare or truncate.
            new = list(m.entries)
            self.log.extend(new)
        for entry in () if new else m.entries:
            if entry.index <= self.last_index:
                if self.epoch_at(entry.index) == entry.epoch:
                    continue  # already held (log matching: same index and epoch, same entry)
                out += self._truncate(entry.index - 1)
            self.log.append(entry)
            new.append(entry)
        if new:
            out.append(self._persist(new))
        self.matched = max(self.matched, m.prev_index + len(m.entries))
        self.leader_commit = max(self.leader_commit, m.commit)
        out += self._follower_advance()
        self._sent_durable = self._durable()
        return [*out, self._reply(True, self.matched)]

    def _durable(self) -> int:
        return min(self.fsynced, self.matched)

    def _reply(self, ok: bool, hint: int) -> Send:
        assert self.leader is not None
        durable = self._durable() if ok else 0
        reply = AppendReply(self.epoch, self.name, ok, durable, hint, self._round_seen)
        return Send(self.leader, reply)

    def _report(self) -> list[Action]:
        """Tell the leader of a durable index that grew (after an fsync)."""
        if self.leader is None or self.leader == self.name or self.epoch <= self.fenced:
            return []
        if self._durable() <= self._sent_durable:
            return []
        self._sent_durable = self._durable()
        return [self._reply(True, self.matched)]

    def _follower_advance(self) -> list[Action]:
        self.commit = max(self.commit, min(self.leader_commit, self._durable()))
        return self._apply()

    def _truncate(self, after: int) -> list[Action]:
        if after < self.commit:
            raise SafetyError(f"{self.name}: truncating after {after}, commit is {self.commit}")
        if self.matched > after:
            raise SafetyError(f"{self.name}: truncating matched entries after {after}")
        del self.log[after - self.base :]
        self.fsynced = min(self.fsynced, after)
        for p in self._persists:
            p[1] = min(p[1], after)
        return [Truncate(after)]

    def _persist(self, entries: list[Entry]) -> Persist:
        end = entries[-1].index
        self._persists.append([end, end])
        return Persist(tuple(entries))

    # Epochs and campaigns --------------------------------------------------------------------

    def _enter_epoch(self, epoch: int, leader: str | None) -> list[Action]:
        out = [*self._step_down(leader), Leadership(False, epoch)] if self.is_leader else []
        self.epoch = epoch
        self.leader = leader
        self.matched = 0
        self._sent_durable = -1
        self._round_seen = 0
        self.last_heard = self.now
        return out

    def _step_down(self, leader: str | None) -> list[Action]:
        self.is_leader = False
        self._transfer = None
        self._wanted = None
        self._joined = {}
        out: list[Action] = [Rejected(token, leader) for _, token in self._tokens]
        out += [ReadRejected(read.token, leader) for read in self._reads]
        self._tokens = deque()
        self._reads = deque()
        self._echo = {}
        self._next, self._recv, self._match, self._progress = {}, {}, {}, {}
        return out

    def _resolve(self, revision: int) -> None:
        """A record at `revision` is known: proposals expecting an older one are decided."""
        self._proposals = [p for p in self._proposals if p.expected_revision >= revision]
        if not self._proposals:
            self._proposed_at = None
        if not any(p.campaign for p in self._proposals):
            # No campaign of ours can still succeed: lift the fence so the current leader
            # can catch us up (the fence exists only for our own leadership).
            self.fenced = 0

    def _in_flight(self) -> bool:
        return (
            self._proposed_at is not None
            and self.now is not None
            and self.now - self._proposed_at < self.config.cas_timeout
        )

    def _propose(self, new: GroupRecord, expected: int, campaign: bool) -> list[Action]:
        self._proposals.append(_Proposal(new, expected, campaign))
        self._proposed_at = self.now
        return [ProposeRecord(new, expected)]

    def _maybe_campaign(self, at_once: bool = False) -> list[Action]:
        rec = self.record
        if rec is None or self.now is None or self.is_leader or self._in_flight():
            return []
        if self.name not in rec.in_sync or rec.epoch != self.epoch:
            return []
        if rec.leader != self.name and not at_once:
            rank = sorted(rec.peers).index(self.name) if self.name in rec.peers else 0
            timeout = self.config.election_timeout + rank * self.config.election_stagger
            assert self.last_heard is not None
            if self.now - self.last_heard <= timeout:
                return []
        # Fence first: from here on we acknowledge nothing of the current epoch, so once our
        # swap succeeds its leader can commit nothing more.
        self.fenced = max(self.fenced, self.epoch)
        new = GroupRecord(rec.peers, rec.epoch + 1, self.name, rec.in_sync)
        return self._propose(new, rec.revision, campaign=True)

    def _on_timeout_now(self, m: TimeoutNow) -> list[Action]:
        """The leader of our epoch hands its leadership to us (rule 8): campaign now."""
        rec = self.record
        if rec is None or self.is_leader or m.leader == self.name:
            return []
        if m.epoch != self.epoch or rec.epoch != m.epoch or rec.leader != m.leader:
            return []  # another epoch, or not its leader: ignored
        return self._maybe_campaign(at_once=True)

    # Leader side -----------------------------------------------------------------------------

    def _followers(self) -> list[str]:
        return sorted(self._next)

    def _become_leader(self) -> list[Action]:
        rec = self.record
        assert rec is not None and self.now is not None
        self.is_leader = True
        self.epoch = rec.epoch
        self.leader = self.name
        self.epoch_start = self.last_index
        self._tokens = deque()
        self._last_heartbeat = self.now
        self._snapshot_sent = {}
        self._transfer = None
        self._round = 0
        self._echo = {}
        self._reads = deque()
        self._wanted = None
        self._joined = {}
        # A no-op entry in the new epoch, as Raft's: followers holding an older epoch's
        # uncommitted entries past our log's end must find a conflicting entry to cut them
        # back at; without one they would keep them for as long as nothing is proposed.
        noop = Entry(self.last_index + 1, self.epoch, NOOP)
        self.log.append(noop)
        out: list[Action] = [Leadership(True, self.epoch), self._persist([noop])]
        for f in sorted(p for p in rec.peers if p != self.name):
            self._track(f, self.epoch_start + 1)
            out += self._send_to(f)
        return out + self._leader_advance()

    def _track(self, f: str, next_index: int) -> None:
        assert self.now is not None
        self._next[f] = next_index
        self._recv[f] = -1
        self._match[f] = 0
        self._progress[f] = self.now

    def _track_peers(self) -> list[Action]:
        """Follow the record's peers after a membership change (rule 10): peers added are
        tracked from a new read round on, removed ones forgotten."""
        rec = self.record
        assert rec is not None
        peers = set(rec.peers) - {self.name}
        for f in set(self._next) - peers:
            for table in (self._next, self._recv, self._match, self._progress, self._echo):
                table.pop(f, None)
            self._snapshot_sent.pop(f, None)
            self._joined.pop(f, None)
        added = sorted(peers - set(self._next))
        if not added:
            return []
        for f in added:
            self._track(f, self.last_index + 1)
            self._joined[f] = self._round + 1
        return self._start_round()  # sends the added peers their first Append, of that round

    def _send_to(self, f: str, beat: bool = False) -> list[Action]:
        prev = self._next[f] - 1
        if prev < self.base:
            # What `f` needs next is only in our snapshot. A heartbeat still goes (from the
            # base: `f` answers where its log ends); an answer triggers no Append, so no
            # ping-pong while the snapshot travels.
            out = self._snapshot_to(f)
            if beat:
                base = (self.base, self.base_epoch)
                beat_msg = Append(self.epoch, self.name, *base, (), self.commit, self._round)
                out.append(Send(f, beat_msg))
            return out
        prev_epoch = self.epoch_at(prev)
        entries = self._batch(prev)
        self._next[f] = prev + len(entries) + 1
        msg = Append(self.epoch, self.name, prev, prev_epoch, entries, self.commit, self._round)
        return [Send(f, msg)]

    def _snapshot_to(self, f: str) -> list[Action]:
        """A snapshot for `f`, at most once per `snapshot_interval`."""
        assert self.now is not None
        sent = self._snapshot_sent.get(f)
        if sent is not None and self.now - sent < self.config.snapshot_interval:
            return []
        self._snapshot_sent[f] = self.now
        index = self._snapshot_index()
        return [SendSnapshot(f, index, self.epoch_at(index))]

    def _snapshot_index(self) -> int:
        # Only committed state leaves: what the owner applied, exactly (it is >= the base).
        return self.applied

    def _batch(self, prev: int) -> tuple[Entry, ...]:
        """The entries after `prev` for one Append: `max_batch` of them at most, and no more
        op bytes than `max_batch_bytes` (an entry larger than that alone still goes), so an
        Append always fits what the routes carry."""
        entries = self._entries(prev, prev + self.config.max_batch)
        size = 0
        for count, entry in enumerate(entries):
            size += len(entry.op)
            if count and size > self.config.max_batch_bytes:
                return tuple(entries[:count])
        return tuple(entries)

    def _on_reply(self, m: AppendReply) -> list[Action]:
        if m.epoch > self.epoch:
            return self._enter_epoch(m.epoch, None)
        if not self.is_leader or m.epoch != self.epoch or m.sender not in self._next:
            return []
        f = m.sender
        if m.read < self._joined.get(f, 0):
            return []  # sent before it was added: maybe by a replica since deleted (rule 10)
        last = self.last_index
        out: list[Action] = []
        if m.read > self._echo.get(f, 0):
            # A reply of our epoch: `f` had not fenced it when it sent this (rule 9).
            self._echo[f] = m.read
            out += self._ready_reads()
        if m.ok:
            if m.durable > self._match[f]:
                self._match[f] = m.durable
                self._progress[f] = self.now or 0
            if self._match[f] >= last:
                self._progress[f] = self.now or 0
            self._recv[f] = max(self._recv[f], min(m.hint, last))
            if self._next[f] <= self._recv[f]:
                self._next[f] = self._recv[f] + 1
            out += self._leader_advance()
            if self._next[f] <= self.last_index:
                out += self._send_to(f)
            if self._transfer is not None and self._transfer[0] == f:
                out += self._timeout_now(f)
            return out
        hint = max(0, min(m.hint, last))
        self._recv[f] = min(self._recv[f], hint)
        self._next[f] = hint + 1
        return out + self._send_to(f)

    def _timeout_now(self, target: str) -> list[Action]:
        """TimeoutNow to the transfer's target once it durably holds our whole log."""
        if self._match.get(target, 0) < self.last_index:
            return []
        return [Send(target, TimeoutNow(self.epoch, self.name))]

    def quorum_heard(self, within: int) -> bool:
        """Whether this leader heard from a quorum of its peers (itself included) within
        `within` ms: each counted follower made durable progress or answered caught up. The
        owner reports a stream whose leader cannot commit ("quorum lost") when it did not."""
        if not self.is_leader or self.record is None or self.now is None:
            return True
        now = self.now
        heard = 1 + sum(1 for t in self._progress.values() if now - t <= within)
        return heard >= quorum(len(self.record.peers))

    def _commit_set(self) -> set[str]:
        assert self.record is not None
        members = set(self.record.in_sync)
        for p in self._proposals:
            members |= p.new.in_sync
        return members

    def _leader_advance(self) -> list[Action]:
        durables = [
            self.fsynced if m == self.name else self._match.get(m, 0) for m in self._commit_set()
        ]
        self.commit = max(self.commit, min([self.last_index, *durables]))
        return self._apply()

    def _apply(self) -> list[Action]:
        out: list[Action] = []
        if self.commit > self.applied:
            out.append(Apply(tuple(self._entries(self.applied, self.commit))))
            self.applied = self.commit
        if self.is_leader:
            # Proposals are appended in index order: the committed ones are a prefix.
            tokens = self._tokens
            while tokens and tokens[0][0] <= self.commit:
                index, token = tokens.popleft()
                out.append(Acknowledge(token, index))
            out += self._ready_reads()
        return out

    # Reads (rule 9) --------------------------------------------------------------------------

    def _read_members(self) -> set[str]:
        """Who must echo a round for a read: the commit set (rule 3) but this leader."""
        return self._commit_set() - {self.name}

    def _round_done(self) -> bool:
        """No round in flight: every member echoed the current one."""
        return all(self._echo.get(m, 0) >= self._round for m in self._read_members())

    def _start_round(self) -> list[Action]:
        """A new read round, sent at once to every follower: an empty Append from where it
        confirmed our log (so that it matches, with no entries resent), or the usual one."""
        self._round += 1
        out: list[Action] = []
        for f in self._followers():
            confirmed = self._recv[f]
            if confirmed < self.base:
                out += self._send_to(f, beat=True)
                continue
            prev = (confirmed, self.epoch_at(confirmed))
            beat = Append(self.epoch, self.name, *prev, (), self.commit, self._round)
            out.append(Send(f, beat))
        return out

    def _ready_reads(self) -> list[Action]:
        """ReadReady for the reads that passed their barrier; the next round when reads wait
        for it and none is in flight."""
        reads = self._reads
        if not reads or not self.is_leader:
            return []
        out: list[Action] = []
        if self.applied > self.epoch_start:  # our epoch's no-op is applied: (a)
            members = self._read_members()
            echoed = min((self._echo.get(m, 0) for m in members), default=self._round)
            # Rounds and commit indexes grow along the queue: the ready reads are a prefix.
            while reads and reads[0].round <= echoed and reads[0].commit <= self.applied:
                out.append(ReadReady(reads.popleft().token))
        if reads and reads[-1].round > self._round and self._round_done():
            out += self._start_round()
        return out

    def _maybe_change_in_sync(self) -> list[Action]:
        rec = self.record
        if rec is None or self._in_flight() or self.now is None:
            return []
        for f in self._followers():
            if f in rec.in_sync or self._recv[f] < 0:
                continue  # a member already, or not heard from in this epoch
            caught_up = self._match[f] >= max(self.commit, self.epoch_start)
            if caught_up and self.now - self._progress[f] <= self.config.sync_timeout:
                new = replace(rec, in_sync=rec.in_sync | {f}, revision=0)
                return self._propose(new, rec.revision, campaign=False)
        if self._wanted is not None and self._transfer is None:
            changed = self._change_membership(rec, self._wanted)
            if changed is not None:
                return changed
        if len(rec.in_sync) - 1 < quorum(len(rec.peers)):
            return []
        for f in sorted(rec.in_sync - {self.name}):
            # Progress: durable growth, or an ok answer caught up (every heartbeat gets one).
            if self.now - self._progress.get(f, self.now) > self.config.sync_timeout:
                new = replace(rec, in_sync=rec.in_sync - {f}, revision=0)
                return self._propose(new, rec.revision, campaign=False)
        return []

    def _change_membership(self, rec: GroupRecord, wanted: frozenset[str]) -> list[Action] | None:
        """The next step toward `wanted` peers (rule 10), or None when there is none now."""
        added = [p for p in sorted(wanted) if p not in rec.peers]
        if added:
            new = replace(rec, peers=(*rec.peers, *added), revision=0)
            return self._propose(new, rec.revision, campaign=False)
        if self.name not in wanted:
            return self._hand_over(rec.in_sync & wanted, None) or None
        unwanted = set(rec.peers) - wanted
        if not unwanted:
            return None
        if not wanted <= rec.in_sync:
            unwanted -= rec.in_sync  # members of in_sync go once every wanted peer joined it
        if not unwanted:
            return None
        peers = tuple(p for p in rec.peers if p not in unwanted)
        in_sync = rec.in_sync - unwanted
        if len(in_sync) < quorum(len(peers)):
            return None
        new = replace(rec, peers=peers, in_sync=in_sync, revision=0)
        return self._propose(new, rec.revision, campaign=False)
