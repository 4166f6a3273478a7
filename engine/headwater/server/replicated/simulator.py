"""A deterministic simulation of one replicated stream's group, from one seed.

It drives N `core.Replica`s (3 or 5), a model of etcd (one group record, compare-and-swap on
its revision, linearizable; each server's watch delivers every revision in order, late), a
network (loss, delay, duplication, reordering, partitions), disks (operations run in order;
an fsync completes after a random delay; a crash keeps a random prefix of what was queued and
may tear the last append) and crashes/restarts (a restart is a new Replica built from the
durable disk). A client proposes operations with unique ids to whoever it believes leads and
retries with the same id; the application state deduplicates by id (as Nats-Msg-Id does). It
also proposes consumer acks (`ack:<msg id>`) for acknowledged messages.

Snapshots: each server snapshots its application state every `snap_every` applied entries
(4, 8 or 16, by seed), durably at once, then calls `Replica.compact` and compacts its disk
log as the WAL does (up to a little below the snapshot index, as by whole segments; queued
with its writes, so a truncate queued before runs first). A restarted replica
recovers its snapshot and the log after it (the log's entries past the snapshot are kept only
if the log holds the snapshot's entry; otherwise it restarts empty after it, as the owner
rebases the WAL). A `SendSnapshot` becomes a message carrying a copy of the sender's
application state (delayed, lost, duplicated like the others); the receiver installs it if
`snapshot_wanted`, then calls `on_snapshot`. Installs are counted (`installs`).

Step-downs (`stepdowns`, on by default): every 200-1500 ms the replica leading calls
`Replica.step_down`, naming a random server as preferred half of the time (itself or one out
of `in_sync` included, which the core must pass over). They are drawn from a second random
generator, seeded from the seed, so that the faults of a seed are the same with and without
them. A transfer that completes (the target of a `TimeoutNow` leads the next epoch) is
counted (`transfers`); the invariants are the same as for any change of leader.

Reads (`reads`, on by default): every 5-60 ms a read goes to the replica leading (a deposed
one that has not noticed yet included) most of the time, else to any server, through
`Replica.read`; and every 1-4 s the leader is isolated from the other servers and from etcd
for 0.5-2.5 s, so that a deposed leader keeps being sent reads. Each read is answered
(`ReadReady`) from an application state that must hold every operation acknowledged, by any
leader, before the read was issued (linearizable reads), or rejected. Their times and
targets, and the isolations, come from a third generator, seeded from the seed; the network
faults of their rounds draw from the main one, so a seed runs differently without reads
(`reads=False` replays the runs from before reads existed).

Membership (`membership`, on by default): the group runs on five servers whatever its size
(an R3 group has two spares), and every 0.3-2 s the wanted peers change to a random set of
1, 3 or 5 of them, given to the replica leading (`Replica.change_peers`) and, as the server
side does, to every replica that starts leading. A replica that etcd's record no longer
lists, and that is not wanted, is deleted (its disk, snapshot and state wiped, as the server
deletes a removed replica's store) and starts empty: added again later, it is a new replica
that catches up from nothing. The checks follow the record: every acknowledged entry is
durable on every member of the current record's `in_sync`, and the run converges only once
the record's peers are the wanted ones and each of them holds the committed log. The
changes draw from a fourth generator; `membership=False` replays the runs from before it.

Only `random.Random(seed)` decides anything, and every walk over servers is in sorted order,
so a seed replays exactly. The invariants (`Invariants`) are checked as each step's actions
are carried out; a breach raises `Violation` with the seed and the step. After the fault
phase everything heals and the run must converge: every log equal to the committed log, every
acknowledged operation applied exactly once.

    python -m headwater.server.replicated.simulator --seeds 100000 [--start S] [--replicas 3|5]
        [--steps N] [--no-membership]
    python -m headwater.server.replicated.simulator --seed S --trace
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

from headwater.server.replicated.core import (
    NOOP,
    Acknowledge,
    Action,
    Apply,
    Config,
    Leadership,
    Persist,
    ProposeRecord,
    ReadReady,
    ReadRejected,
    Rebase,
    Rejected,
    Replica,
    SafetyError,
    Send,
    SendSnapshot,
    Truncate,
)
from headwater.server.replicated.messages import Entry, Message, TimeoutNow
from headwater.server.replicated.record import GroupRecord, quorum


class Violation(Exception):
    def __init__(self, seed: int, step: int, message: str) -> None:
        super().__init__(f"seed {seed} step {step}: {message}")
        self.seed = seed
        self.step = step


@dataclass
class App:
    """The application state one replica lifetime builds from what it applied."""

    applied: int = 0
    messages: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    acks: set[str] = field(default_factory=set)

    def apply(self, op: bytes) -> None:
        if op == NOOP:
            return
        kind, _, ident = op.decode().partition(":")
        if kind == "msg" and ident not in self.seen:
            self.seen.add(ident)
            self.messages.append(ident)
        elif kind == "ack":
            self.acks.add(ident)

    def copy(self) -> App:
        return App(self.applied, list(self.messages), set(self.seen), set(self.acks))


@dataclass
class Snapshot:
    """A server's durable snapshot: its application state as of `index` (entry of `epoch`)."""

    index: int
    epoch: int
    app: App


@dataclass
class Server:
    name: str
    replica: Replica | None = None
    life: int = 0
    durable: list[Entry] = field(default_factory=list)  # the disk log, after disk_base
    disk_base: int = 0  # compacted up to here (the epoch of that entry: disk_base_epoch)
    disk_base_epoch: int = 0
    snap: Snapshot | None = None
    queue: list[tuple[str, Any]] = field(default_factory=list)
    disk_free_at: int = 0
    disk_latency: int = 15  # the most an fsync takes, drawn at each start: some disks are slow
    app: App = field(default_factory=App)
    etcd_ok: bool = True
    watch_rev: int = 0  # the last revision its watch delivered
    watch_pending: bool = False

    @property
    def disk_last(self) -> int:
        return self.disk_base + len(self.durable)

    def disk_entry(self, index: int) -> Entry | None:
        if self.disk_base < index <= self.disk_last:
            return self.durable[index - self.disk_base - 1]
        return None

    def holds(self, index: int, entry: Entry) -> bool:
        """Is the committed `entry` at `index` durable here (in the snapshot or the log)?"""
        if self.snap is not None and self.snap.index >= index:
            return True
        return self.disk_entry(index) == entry


@dataclass
class ClientOp:
    op: bytes
    attempt: int = 0
    target: str | None = None


class Invariants:
    """The checks, fed by the simulation as it carries out actions."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.committed: list[Entry] = []  # the longest applied sequence seen
        self.acked: dict[int, bytes] = {}  # index -> op acknowledged there
        self.ack_epoch: dict[int, str] = {}  # epoch -> the replica that acknowledged in it
        self.leading: dict[int, str] = {}  # epoch -> the replica that announced leading it
        self.confirmed: dict[str, int] = {}  # consumer ack of msg id -> index
        self.reads: dict[int, tuple[str, int, int]] = {}  # read -> (server, life, index)
        """Each read waiting: where it went and the highest index acknowledged when it was
        issued."""

    def on_read(self, server: Server, token: int) -> None:
        """A read is issued to `server`: it must see what was acknowledged up to now."""
        self.reads[token] = (server.name, server.life, max(self.acked, default=0))

    def on_read_ready(self, server: Server, token: int) -> None:
        """The read is answered from `server`'s application state as it is now: linearizable
        only if it holds every operation acknowledged before the read was issued."""
        name, life, index = self.reads.pop(token)
        if (name, life) != (server.name, server.life):
            self.fail(f"read {token} answered by {server.name}, sent to {name}")
        if server.app.applied < index:
            self.fail(
                f"{server.name} answered read {token} at applied {server.app.applied}, missing "
                f"{index}, acknowledged before the read was issued (a stale read)"
            )

    def fail(self, message: str) -> None:
        raise Violation(self.sim.seed, self.sim.step, message)

    def on_apply(self, server: Server, entries: tuple[Entry, ...]) -> None:
        app = server.app
        for entry in entries:
            if entry.index != app.applied + 1:
                self.fail(f"{server.name} applied {entry.index} after {app.applied}")
            if entry.index <= len(self.committed):
                if self.committed[entry.index - 1] != entry:
                    self.fail(
                        f"{server.name} applied {entry} at {entry.index}, "
                        f"another replica applied {self.committed[entry.index - 1]}"
                    )
            else:
                self.committed.append(entry)
            app.applied = entry.index
            app.apply(entry.op)

    def on_leadership(self, server: Server, action: Leadership) -> None:
        if not action.leading:
            return
        other = self.leading.setdefault(action.epoch, server.name)
        if other != server.name:
            self.fail(f"{server.name} and {other} both started leading epoch {action.epoch}")
        if (action.epoch - 1, server.name) in self.sim.timeouts_sent:
            self.sim.transfers += 1

    def on_acknowledge(self, server: Server, replica: Replica, index: int, op: bytes) -> None:
        if index > len(self.committed) or self.committed[index - 1].op != op:
            self.fail(f"{server.name} acknowledged {op!r} at {index}, not the committed entry")
        if server.app.applied < index:
            self.fail(f"{server.name} acknowledged {index} before applying it")
        other = self.ack_epoch.setdefault(replica.epoch, server.name)
        if other != server.name:
            self.fail(f"{server.name} and {other} both acknowledged in epoch {replica.epoch}")
        self.acked[index] = op
        self.check_durable(index)
        kind, _, ident = op.decode().partition(":")
        if kind == "ack":
            self.confirmed.setdefault(ident, index)

    def check_durable(self, only: int | None = None) -> None:
        """Every acknowledged entry (or the one at `only`) is on the fsynced disks of every
        member of the current record's `in_sync`, and of a quorum of its peers (peers added
        and not yet in `in_sync` left out: a group growing is as durable as before): checked
        when one is acknowledged, when a disk loses entries, and when the record changes."""
        sim = self.sim
        record = sim.history[-1]
        members = [sim.by_name[name] for name in sorted(record.in_sync)]
        peers = [sim.by_name[name] for name in record.peers]
        # A quorum of the peers, those added and not yet once in in_sync left out.
        need = quorum(len(set(record.peers) - sim.fresh))
        for index in sorted(self.acked) if only is None else [only]:
            entry = self.committed[index - 1]
            holders = sum(1 for s in peers if s.holds(index, entry))
            if holders < need:
                self.fail(f"acknowledged {entry} is on {holders} disks, fewer than {need}")
            for s in members:
                if not s.holds(index, entry):
                    self.fail(f"acknowledged {entry} is not on {s.name}'s disk, in in_sync")

    def check_final(self) -> None:
        self.check_durable()
        committed = self.committed
        peers = set(self.sim.history[-1].peers)
        for s in self.sim.servers:
            if s.name not in peers:
                continue  # not a replica of the group (any more): nothing is asked of it
            replica = s.replica
            assert replica is not None
            if replica.last_index != len(committed) or replica.log != committed[replica.base :]:
                self.fail(
                    f"{s.name}'s log ({replica.base}, {replica.last_index}] is not the committed "
                    f"log ({len(committed)})"
                )
            if s.app.applied != len(committed):
                self.fail(f"{s.name} applied {s.app.applied} of {len(committed)}")
            if len(s.app.messages) != len(s.app.seen):
                self.fail(f"{s.name} holds a message twice")
            for op in self.acked.values():
                kind, _, ident = op.decode().partition(":")
                if kind == "msg" and ident not in s.app.seen:
                    self.fail(f"{s.name} lost acknowledged message {ident}")
            for ident in self.confirmed:
                if ident not in s.app.acks:
                    self.fail(f"{s.name} undid confirmed ack of {ident}")

    def on_install(self, server: Server, index: int, app: App) -> None:
        """A snapshot installed at `index` is the application state of the committed log up
        to `index` (whoever sent it), and takes the application forward only."""
        if index <= server.app.applied:
            self.fail(f"{server.name} installs a snapshot at {index}, applied {server.app.applied}")
        if index > len(self.committed):
            self.fail(f"{server.name} installs a snapshot at {index}, past the committed log")
        expected = App()
        for entry in self.committed[:index]:
            expected.applied = entry.index
            expected.apply(entry.op)
        if app != expected:
            self.fail(
                f"{server.name} installs a snapshot at {index} that is not the committed state "
                f"there (it holds {app.applied} applied)"
            )

    def check_confirmed(self, server: Server) -> None:
        """A confirmed consumer ack stays in every application state applied that far."""
        for ident, index in self.confirmed.items():
            if server.app.applied >= index and ident not in server.app.acks:
                self.fail(f"{server.name} applied past {index} without the ack of {ident}")


class Simulation:
    tick_ms = 10
    client_timeout = 500
    heal_limit_ms = 60_000

    def __init__(
        self,
        seed: int,
        replicas: int = 3,
        steps: int = 4000,
        ops: int = 50,
        replica_cls: type[Replica] = Replica,
        config: Config | None = None,
        trace: bool = False,
        stepdowns: bool = True,
        reads: bool = True,
        membership: bool = True,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        # Step-downs draw from their own generator: the faults of a seed stay the same.
        self.stepdown_rng = random.Random(seed * 7919 + 1)
        self.transfers = 0  # leaderships handed over by TimeoutNow (step_down)
        self.read_rng = random.Random(seed * 104_729 + 2)  # reads: their own generator too
        self.reads_issued = self.reads_ready = self.reads_rejected = 0
        self.timeouts_sent: set[tuple[int, str]] = set()  # (epoch, target) of TimeoutNows
        self.steps = steps
        self.n_ops = ops
        self.replica_cls = replica_cls
        self.config = config or Config()
        self.trace = trace
        self.snap_every = (4, 8, 16)[seed % 3]
        self.installs = 0  # snapshots installed by a follower (catch-up from a snapshot)
        self.now = 0
        self.step = 0
        self._seq = 0
        self._events: list[tuple[int, int, str, tuple[Any, ...]]] = []
        self.membership = membership
        self.member_rng = random.Random(seed * 15_485_863 + 3)  # membership's own generator
        self.removals = 0  # replicas deleted after leaving the group
        count = max(replicas, 5) if membership else replicas
        self.servers = [Server(f"s{i}") for i in range(1, count + 1)]
        self.by_name = {s.name: s for s in self.servers}
        names = tuple(s.name for s in self.servers)[:replicas]
        first = self.rng.choice(names)
        self.history = [GroupRecord(names, 1, first, frozenset(names), revision=1)]
        self.desired: tuple[str, ...] = names  # the peers wanted (the placement's, for real)
        self.fresh: set[str] = set()  # peers added and never in in_sync since
        # Network faults.
        self.loss = 0.05
        self.dup = 0.03
        self.max_delay = 30
        self.group: dict[str, int] = {s.name: 0 for s in self.servers}
        self.healing = False
        # The client.
        self.issued = 0
        self.pending: dict[bytes, ClientOp] = {}
        self.believed: str | None = None
        self.inv = Invariants(self)
        for s in self.servers:
            self._start(s)
        self._at(self.rng.randint(0, 50), "client_new", ())
        self._at(self.rng.randint(50, 300), "chaos", ())
        if membership:
            self._at(self.member_rng.randint(300, 2000), "members", ())
        if stepdowns:
            self._at(self.stepdown_rng.randint(200, 1500), "stepdown", ())
        if reads:
            self._at(self.read_rng.randint(5, 60), "read", ())
            self._at(self.read_rng.randint(500, 3000), "isolate", ())

    # The event queue -------------------------------------------------------------------------

    def _at(self, when: int, kind: str, data: tuple[Any, ...]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, data))

    def run(self) -> None:
        try:
            while self.step < self.steps and self._events:
                self._one()
            self._heal()
            deadline = self.now + self.heal_limit_ms
            self._at(self.now + 100, "converged?", ())
            while self._events and self.now < deadline:
                if self._one() == "converged":
                    self.inv.check_final()
                    return
            self.inv.fail("no convergence after the heal")
        except SafetyError as exc:
            self.inv.fail(f"core refused: {exc}")

    def _one(self) -> str | None:
        when, _, kind, data = heapq.heappop(self._events)
        self.now = max(self.now, when)
        self.step += 1
        if self.trace:
            print(f"{self.now:>7} #{self.step} {kind} {data}")
        return getattr(self, f"_ev_{kind.rstrip('?')}")(*data)

    # Servers, disks and crashes --------------------------------------------------------------

    def _start(self, s: Server) -> None:
        s.life += 1
        snap = s.snap
        if snap is None:
            if s.disk_base:
                self.inv.fail(f"{s.name}'s log is compacted without a snapshot")
            s.replica = self.replica_cls(s.name, tuple(s.durable), self.config)
            s.app = App()
        else:
            if s.disk_base > snap.index:
                self.inv.fail(f"{s.name}'s log is compacted past its snapshot")
            at = s.disk_entry(snap.index)
            holds = (s.disk_base, s.disk_base_epoch) == (snap.index, snap.epoch) or (
                at is not None and at.epoch == snap.epoch
            )
            if not holds:
                # The log ends before the snapshot or differs there (an install whose Rebase
                # did not reach the disk): the owner rebases it before starting the core.
                s.durable, s.disk_base, s.disk_base_epoch = [], snap.index, snap.epoch
            recovered = tuple(s.durable[snap.index - s.disk_base :])
            base = (snap.index, snap.epoch)
            s.replica = self.replica_cls(s.name, recovered, self.config, base=base)
            s.app = snap.app.copy()
        s.queue = []
        s.disk_free_at = self.now
        s.disk_latency = self.rng.choice((5, 15, 15, 60))
        # A restart reads the current record, then watches from there.
        s.watch_rev = len(self.history) - 1
        s.watch_pending = False
        self._watch_soon(s)
        self._at(self.now + self.rng.randint(1, self.tick_ms), "tick", (s.name, s.life))

    def _crash(self, s: Server) -> None:
        if s.replica is None:
            return
        # The disk keeps a random prefix of what was queued; the last append may be torn.
        keep = self.rng.randint(0, len(s.queue))
        for i, (kind, arg) in enumerate(s.queue[:keep]):
            if kind == "persist" and i == keep - 1 and self.rng.random() < 0.3:
                arg = arg[: self.rng.randint(0, len(arg) - 1)]
            self._disk_write(s, kind, arg)
        s.queue = []
        s.replica = None
        s.life += 1
        # Its reads waiting die with it (their clients time out).
        for token, (name, _, _) in list(self.inv.reads.items()):
            if name == s.name:
                del self.inv.reads[token]
        if self.trace:
            print(f"        crash {s.name}, disk holds {len(s.durable)}")
        self.inv.check_durable()

    def _disk_write(self, s: Server, kind: str, arg: Any) -> None:
        if kind == "truncate":
            if arg < s.disk_base:
                self.inv.fail(f"{s.name} truncates after {arg}, compacted up to {s.disk_base}")
            del s.durable[arg - s.disk_base :]
            return
        if kind == "rebase":
            s.durable, (s.disk_base, s.disk_base_epoch) = [], arg
            return
        if kind == "compact":
            self._disk_compact(s, arg)
            return
        if arg and arg[0].index != s.disk_last + 1:
            self.inv.fail(f"{s.name} appends {arg[0].index} to a log ending at {s.disk_last}")
        s.durable.extend(arg)

    def _queue(self, s: Server, kind: str, arg: Any) -> None:
        """A disk operation, run in order with the others after a random delay."""
        s.queue.append((kind, arg))
        s.disk_free_at = max(s.disk_free_at, self.now) + self.rng.randint(1, s.disk_latency)
        self._at(s.disk_free_at, "disk", (s.name, s.life))

    def _disk_compact(self, s: Server, upto: int) -> None:
        """As the WAL compacts by whole segments: up to a little below `upto`, never past what
        the disk holds. Queued with the writes (a truncate queued before it runs first)."""
        cut = min(upto - self.rng.randint(0, 3), s.disk_last)
        if cut <= s.disk_base:
            return
        s.disk_base_epoch = s.durable[cut - s.disk_base - 1].epoch
        del s.durable[: cut - s.disk_base]
        s.disk_base = cut

    def _snapshot(self, s: Server) -> None:
        """Every `snap_every` applied entries: a durable snapshot, then compaction."""
        replica = s.replica
        assert replica is not None
        applied = s.app.applied
        if applied - (s.snap.index if s.snap else 0) < self.snap_every:
            return
        s.snap = Snapshot(applied, replica.epoch_at(applied), s.app.copy())
        replica.compact(applied)
        self._queue(s, "compact", applied)

    def _ev_disk(self, name: str, life: int) -> None:
        s = self.by_name[name]
        if s.life != life or s.replica is None:
            return
        kind, arg = s.queue.pop(0)
        self._disk_write(s, kind, arg)
        if kind == "persist":
            self._do(s, s.replica.on_persisted(arg[-1].index))
        else:
            self.inv.check_durable()  # a truncate or rebase never loses an acknowledged entry

    def _ev_tick(self, name: str, life: int) -> None:
        s = self.by_name[name]
        if s.life != life or s.replica is None:
            return
        self._do(s, s.replica.on_tick(self.now))
        self._at(self.now + self.tick_ms, "tick", (name, life))

    # etcd ----------------------------------------------------------------------------------

    def _watch_soon(self, s: Server) -> None:
        if not s.watch_pending and s.replica is not None:
            s.watch_pending = True
            self._at(self.now + self.rng.randint(1, 40), "watch", (s.name, s.life))

    def _ev_watch(self, name: str, life: int) -> None:
        s = self.by_name[name]
        if s.life != life or s.replica is None:
            return
        s.watch_pending = False
        if not s.etcd_ok:
            s.watch_pending = True
            self._at(self.now + 50, "watch", (name, life))
            return
        if s.watch_rev < len(self.history):
            record = self.history[s.watch_rev]
            s.watch_rev += 1
            self._do(s, s.replica.on_record(record))
            if s.replica is not None and self._removed(s):
                return
            if s.watch_rev < len(self.history):
                self._watch_soon(s)

    def _removed(self, s: Server) -> bool:
        """Delete `s`'s replica when etcd's record (read now, as the server side confirms
        before it deletes) does not list it and it is not wanted: it starts again empty."""
        if not self.membership or s.name in self.history[-1].peers or s.name in self.desired:
            return False
        if not (s.durable or s.disk_base or s.snap is not None or s.app.applied):
            return False  # nothing to delete
        self.removals += 1
        if self.trace:
            print(f"        {s.name} is deleted (not a peer any more)")
        self._crash(s)
        s.durable, s.disk_base, s.disk_base_epoch, s.snap = [], 0, 0, None
        self._start(s)
        return True

    def _ev_cas(self, name: str, life: int, new: GroupRecord, expected: int) -> None:
        current = self.history[-1]
        ok = current.revision == expected
        if ok:
            before = current
            current = replace(new, revision=current.revision + 1)
            self.history.append(current)
            self.fresh |= set(current.peers) - set(before.peers)
            self.fresh &= set(current.peers) - current.in_sync
            self.inv.check_durable()
            if self.trace:
                print(f"        etcd: {current}")
            for s in self.servers:
                self._watch_soon(s)
        s = self.by_name[name]
        if s.etcd_ok and self.rng.random() > 0.1:  # else the answer is lost: outcome unknown
            self._at(self.now + self.rng.randint(1, 20), "cas_reply", (name, life, ok, current))

    def _ev_cas_reply(self, name: str, life: int, ok: bool, record: GroupRecord) -> None:
        s = self.by_name[name]
        if s.life == life and s.replica is not None:
            self._do(s, s.replica.on_cas_result(ok, record))

    # The network ---------------------------------------------------------------------------

    def _send(self, src: str, dst: str, msg: Message, kind: str = "msg", *extra: Any) -> None:
        copies = 2 if self.rng.random() < self.dup else 1
        for _ in range(copies):
            if self.rng.random() < self.loss or self.group[src] != self.group[dst]:
                continue
            delay = self.rng.randint(1, self.max_delay)
            if self.membership and not self.healing and self.member_rng.random() < 0.01:
                # Now and then a message is held up for seconds (a route's queue behind a
                # stalled connection): long enough to outlive a replica removed and added.
                delay = self.member_rng.randint(500, 3000)
            self._at(self.now + delay, kind, (src, dst, msg, *extra))

    def _ev_snap(self, src: str, dst: str, msg: SendSnapshot, app: App) -> None:
        s = self.by_name[dst]
        replica = s.replica
        if replica is None or self.group[src] != self.group[dst]:
            return
        if not replica.snapshot_wanted(msg.index):
            return  # the owner leaves its state alone: late, twice, or already past it
        self.inv.on_install(s, msg.index, app)
        s.app = app.copy()
        s.snap = Snapshot(msg.index, msg.epoch, app.copy())
        self.installs += 1
        if self.trace:
            print(f"        {s.name} installs the snapshot at {msg.index}")
        self.inv.check_confirmed(s)
        self._do(s, replica.on_snapshot(msg.index, msg.epoch))
        self._queue(s, "compact", msg.index)

    def _ev_msg(self, src: str, dst: str, msg: Message) -> None:
        s = self.by_name[dst]
        if s.replica is not None and self.group[src] == self.group[dst]:
            self._do(s, s.replica.on_message(msg))

    # Carrying out actions --------------------------------------------------------------------

    def _do(self, s: Server, actions: list[Action]) -> None:
        replica = s.replica
        assert replica is not None
        for action in actions:
            if self.trace:
                print(f"        {s.name}: {action}")
            if isinstance(action, Send):
                if isinstance(action.msg, TimeoutNow):
                    self.timeouts_sent.add((action.msg.epoch, action.to))
                self._send(s.name, action.to, action.msg)
            elif isinstance(action, Persist):
                self._queue(s, "persist", action.entries)
            elif isinstance(action, Truncate):
                self._queue(s, "truncate", action.after_index)
            elif isinstance(action, Rebase):
                self._queue(s, "rebase", (action.index, action.epoch))
            elif isinstance(action, Apply):
                self.inv.on_apply(s, action.entries)
                self.inv.check_confirmed(s)
                self._snapshot(s)
            elif isinstance(action, SendSnapshot):
                # The owner's state as it is now: every Apply before this action is in it.
                self._send(s.name, action.to, action, "snap", s.app.copy())
            elif isinstance(action, Acknowledge):
                op, _attempt = action.token
                self.inv.on_acknowledge(s, replica, action.index, op)
                if self.rng.random() < 0.9:  # else the answer to the client is lost
                    self._client_done(op)
            elif isinstance(action, Rejected):
                self._client_rejected(action.token, action.leader)
            elif isinstance(action, ReadReady):
                self.inv.on_read_ready(s, action.token)
                self.reads_ready += 1
            elif isinstance(action, ReadRejected):
                self.inv.reads.pop(action.token)
                self.reads_rejected += 1
            elif isinstance(action, Leadership):
                # The client finds the leader by its rejections' hints; the announcement is
                # checked: one epoch, one leader.
                self.inv.on_leadership(s, action)
                if action.leading and self.membership:
                    # As the server side: a new leader is told the peers wanted.
                    self._do(s, replica.change_peers(self.desired))
            elif isinstance(action, ProposeRecord):
                if s.etcd_ok:
                    delay = self.rng.randint(1, 60)
                    data = (s.name, s.life, action.new, action.expected_revision)
                    self._at(self.now + delay, "cas", data)
            else:  # pragma: no cover
                raise TypeError(action)

    # The client ------------------------------------------------------------------------------

    def _ev_client_new(self) -> None:
        if self.issued < self.n_ops and len(self.pending) < 5:
            self.issued += 1
            self._submit(ClientOp(f"msg:m{self.issued}".encode()))
        if self.issued < self.n_ops:
            self._at(self.now + self.rng.randint(10, 150), "client_new", ())

    def _submit(self, cop: ClientOp) -> None:
        self.pending[cop.op] = cop
        cop.attempt += 1
        names = sorted(self.by_name)
        if self.believed is None:
            self.believed = self.rng.choice(names)
        cop.target = self.believed
        self._at(self.now + self.client_timeout, "client_timeout", (cop.op, cop.attempt))
        s = self.by_name[cop.target]
        if s.replica is not None:
            self._do(s, s.replica.propose(cop.op, (cop.op, cop.attempt)))

    def _client_done(self, op: bytes) -> None:
        if self.pending.pop(op, None) is None:
            return
        kind, _, ident = op.decode().partition(":")
        if kind == "msg" and self.rng.random() < 0.5:
            self._submit(ClientOp(f"ack:{ident}".encode()))

    def _retry(self, op: bytes, attempt: int, leader: str | None) -> None:
        cop = self.pending.get(op)
        if cop is None or cop.attempt != attempt:
            return
        names = sorted(self.by_name)
        if leader is not None:
            self.believed = leader
        elif self.believed == cop.target:
            self.believed = names[(names.index(cop.target) + 1) % len(names)]
        self._at(self.now + self.rng.randint(5, 40), "client_resubmit", (op, attempt))

    def _client_rejected(self, token: tuple[bytes, int], leader: str | None) -> None:
        self._retry(token[0], token[1], leader)

    def _ev_client_timeout(self, op: bytes, attempt: int) -> None:
        self._retry(op, attempt, None)

    def _ev_client_resubmit(self, op: bytes, attempt: int) -> None:
        cop = self.pending.get(op)
        if cop is not None and cop.attempt == attempt:
            self._submit(cop)

    # Faults ----------------------------------------------------------------------------------

    def _ev_chaos(self) -> None:
        if self.healing:
            return
        rng = self.rng
        roll = rng.random()
        up = [s for s in self.servers if s.replica is not None]
        if roll < 0.25 and up:
            s = rng.choice(up)
            self._crash(s)
            self._at(self.now + rng.randint(50, 1500), "restart", (s.name, s.life))
        elif roll < 0.4:
            for s in self.servers:
                self.group[s.name] = rng.randint(0, 1)
            self._at(self.now + rng.randint(100, 2000), "unpartition", ())
        elif roll < 0.55:
            s = rng.choice(self.servers)
            s.etcd_ok = False
            self._at(self.now + rng.randint(100, 1500), "etcd_back", (s.name,))
        elif roll < 0.58:
            # Power failure of every server at once.
            for s in up:
                self._crash(s)
                self._at(self.now + rng.randint(50, 800), "restart", (s.name, s.life))
        self._at(self.now + rng.randint(50, 400), "chaos", ())

    def _ev_stepdown(self) -> None:
        """The leader (if any, and up) is asked to hand its leadership over."""
        if self.healing:
            return
        rng = self.stepdown_rng
        leaders = [s for s in self.servers if s.replica is not None and s.replica.is_leader]
        if leaders:
            s = rng.choice(leaders)  # two while a deposed one has not noticed yet
            preferred = rng.choice(sorted(self.by_name)) if rng.random() < 0.5 else None
            if self.trace:
                print(f"        {s.name} steps down (preferred {preferred})")
            assert s.replica is not None
            self._do(s, s.replica.step_down(preferred))
        self._at(self.now + rng.randint(200, 1500), "stepdown", ())

    def _ev_read(self) -> None:
        """A read, to the replica leading most of the time (a deposed one included)."""
        rng = self.read_rng
        up = [s for s in self.servers if s.replica is not None]
        leaders = [s for s in up if s.replica is not None and s.replica.is_leader]
        targets = leaders if leaders and rng.random() < 0.8 else up
        if targets:
            s = rng.choice(targets)
            assert s.replica is not None
            self.reads_issued += 1
            token = self.reads_issued
            self.inv.on_read(s, token)
            self._do(s, s.replica.read(token))
        self._at(self.now + rng.randint(5, 60), "read", ())

    def _ev_isolate(self) -> None:
        """The stale read's fault: the leader is cut off from the other servers and from etcd
        for a while (a network namespace isolated), so it learns late that another leads, and
        the reads it is sent meanwhile must not be answered from its state."""
        rng = self.read_rng
        if self.healing:
            return
        leaders = [s for s in self.servers if s.replica is not None and s.replica.is_leader]
        if leaders:
            s = rng.choice(leaders)
            self.group[s.name] = 2  # a group of its own, until the chaos or this event heals it
            s.etcd_ok = False
            back = self.now + rng.randint(500, 2500)
            self._at(back, "etcd_back", (s.name,))
            self._at(back, "rejoin", (s.name,))
        self._at(self.now + rng.randint(1000, 4000), "isolate", ())

    @property
    def peer_changes(self) -> int:
        """How many times etcd's record changed the group's peers."""
        pairs = zip(self.history, self.history[1:], strict=False)
        return sum(1 for a, b in pairs if a.peers != b.peers)

    def _ev_members(self) -> None:
        """The wanted peers change (STREAM.UPDATE of num_replicas, or a peer removed)."""
        rng = self.member_rng
        if self.healing:
            return
        size = rng.choice((1, 3, 3, 5, 5))
        self.desired = tuple(sorted(rng.sample(sorted(self.by_name), size)))
        if self.trace:
            print(f"        peers wanted: {self.desired}")
        for s in self.servers:
            if s.replica is not None and s.replica.is_leader:
                self._do(s, s.replica.change_peers(self.desired))
        self._at(self.now + rng.randint(300, 2000), "members", ())

    def _ev_rejoin(self, name: str) -> None:
        if self.group[name] == 2:
            self.group[name] = 0

    def _ev_restart(self, name: str, life: int) -> None:
        s = self.by_name[name]
        if s.life == life and s.replica is None:
            self._start(s)

    def _ev_unpartition(self) -> None:
        for name in self.group:
            self.group[name] = 0

    def _ev_etcd_back(self, name: str) -> None:
        self.by_name[name].etcd_ok = True

    def _heal(self) -> None:
        self.healing = True
        self.loss = 0.0
        self.dup = 0.0
        self._ev_unpartition()
        for s in self.servers:
            s.etcd_ok = True
            if s.replica is None:
                self._start(s)
        if self.trace:
            print(f"{self.now:>7} heal")

    def _ev_converged(self) -> str | None:
        record = self.history[-1]
        members = [s for s in self.servers if s.name in record.peers]
        leaders = [s.replica for s in self.servers if s.replica is not None and s.replica.is_leader]
        done = set(record.peers) == set(self.desired)
        if self.issued >= self.n_ops and not self.pending and len(leaders) == 1 and done:
            lead = leaders[0]
            assert lead is not None
            if all(
                s.replica is not None
                and _same_log(s.replica, lead)
                and s.app.applied == lead.last_index
                for s in members
            ):
                return "converged"
        self._at(self.now + 100, "converged?", ())
        return None


def _same_log(a: Replica, b: Replica) -> bool:
    """Same last index, and the same entries where both logs reach (past both bases)."""
    start = max(a.base, b.base)
    return a.last_index == b.last_index and a.log[start - a.base :] == b.log[start - b.base :]


def run_seed(seed: int, replicas: int = 3, steps: int = 4000, **kwargs: Any) -> Simulation:
    sim = Simulation(seed, replicas=replicas, steps=steps, **kwargs)
    sim.run()
    return sim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--replicas", type=int, choices=(3, 5), default=3)
    parser.add_argument("--steps", type=int, default=4000, help="events in the fault phase")
    parser.add_argument("--trace", action="store_true", help="print every event and action")
    parser.add_argument(
        "--no-membership", action="store_true", help="a fixed group (the runs from before)"
    )
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    failures = installs = with_installs = transfers = reads = changes = removals = 0
    started = time.monotonic()
    for seed in seeds:
        try:
            membership = not args.no_membership
            sim = run_seed(seed, args.replicas, args.steps, trace=args.trace, membership=membership)
        except Violation as exc:
            failures += 1
            print(f"FAIL {exc}", flush=True)
            continue
        installs += sim.installs
        with_installs += sim.installs > 0
        transfers += sim.transfers
        reads += sim.reads_ready
        changes += sim.peer_changes
        removals += sim.removals
    elapsed = time.monotonic() - started
    count = len(seeds)
    print(
        f"{count} seeds, {failures} failed, {count / max(elapsed, 1e-9):.1f} seeds/s; "
        f"{installs} snapshot installs (catch-up from a snapshot) in {with_installs} seeds; "
        f"{transfers} leaderships handed over by step-down; {reads} linearizable reads; "
        f"{changes} changes of peers, {removals} replicas deleted"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
