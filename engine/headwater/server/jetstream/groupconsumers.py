"""The consumers of a replicated stream (docs/REPLICATION.md, "Consumers").

A consumer of a replicated stream lives in the stream's log, like its messages: its config
(:class:`groupops.ConsumerAdd`, a create or an update), its delivery state
(:class:`groupops.ConsumerState`) and its deletion (:class:`groupops.ConsumerDelete`). Every
replica keeps what the log says of each consumer (a :class:`Record`); only the leader runs
them, as live :class:`Consumer` objects made from the records.

- **Creating.** The leader checks the request as one server does, then proposes the config.
  Where a new consumer starts (its deliver policy against the stream) is decided when the
  entry is applied, by every replica alike: the stream is the same there on each, so the
  first state is the same everywhere, recorded before any delivery.
- **Running.** The live consumer delivers as on one server. Each state change (a batch of
  deliveries, acks) makes one ConsumerState entry holding the consumer's whole state, with at
  most one in flight per consumer (later changes coalesce into the next, as the single
  server's writer coalesces its writes). An ack sent as a request (``ack_sync``) is answered
  once an entry holding it is committed: a quorum has it, and no later leader redelivers
  the message. A plain ack or a delivery not yet committed may be lost with the leader: the
  message is delivered again (at least once).
- **Changing leader.** A new leader starts its live consumers only once it applied the
  no-op entry of its own epoch, so it runs them from every state the old leader had
  committed (an entry committed but not yet applied here could hold a confirmed ack). The
  old leader stops its consumers at once: waiting pull requests get ``409 Leadership
  Change``, as from nats-server, and unanswered ack requests stay unanswered.
- **Snapshots** carry the records (:meth:`GroupConsumers.capture`, :meth:`install`).
- **Interest and work-queue retention** are decided from the records, by every replica
  alike: the interest filters are the records' (an interest stream stores a publish only if
  one of them wants it); applying a consumer's ConsumerState removes what it is now done
  with (acked, or delivered with no ack policy) that no other record needs (a work queue:
  at once). Deleting a consumer of an interest stream makes its leader walk the stream and
  propose :class:`groupops.DropUnneeded` batches, which each replica decides at its entry.

Every consumer of a replicated stream is replicated with it, whatever its ``num_replicas``
(docs/DIFFERENCES.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from headwater.server.consumers import config as ccfg
from headwater.server.consumers import state as cstate
from headwater.server.consumers.config import cfg_get
from headwater.server.consumers.consumer import Consumer
from headwater.server.routing.subjects import subject_matches

from . import groupops

if TYPE_CHECKING:
    from headwater.server.consumers.manager import ConsumerManager

    from .stream import Stream

log = logging.getLogger("headwater.server.jetstream.groupconsumers")

Propose = Callable[[bytes, Callable[[groupops.Outcome | None], None]], None]
"""Propose an op (encoded) to the group; its callback gets the outcome once committed here, or
None when it was not (this replica stopped leading)."""
LEADERSHIP_CHANGE = "Leadership Change"


@dataclass
class Record:
    """What the log says of one consumer."""

    config: bytes
    """Its config as ``meta.inf`` keeps it (JSON)."""
    created: int
    state: bytes
    """Its delivery state as last recorded (the JSON of ``o.json``)."""
    progress: Progress | None = None
    """``state`` read, for retention (None until first needed)."""

    def read(self) -> Progress:
        if self.progress is None:
            self.progress = Progress.of(_config(self.config), self.state)
        return self.progress


@dataclass(frozen=True)
class Progress:
    """What a consumer's recorded state says it still needs (interest and work-queue
    retention): the messages it has pending, the per-subject lasts it has still to deliver,
    and everything from its cursor on, of the subjects its filters take."""

    filters: tuple[str, ...]
    pending: frozenset[int]
    lps: frozenset[int]
    cursor: int

    @classmethod
    def of(cls, cfg: Any, state: bytes) -> Progress:
        body = orjson.loads(state)
        lps = frozenset(int(s) for s in body.get("lps") or ())
        cursor = int(body.get("lps_end", 0)) if lps else int(body["sseq"])
        many = cfg_get(cfg, "filter_subjects", None)
        one = cfg_get(cfg, "filter_subject", "")
        filters = tuple(many) if many else ((one,) if one else ())
        pending = frozenset(int(row[0]) for row in body.get("pending") or ())
        return cls(filters, pending, lps, cursor)

    def wants(self, subject: str) -> bool:
        return not self.filters or any(subject_matches(f, subject) for f in self.filters)

    def needs(self, seq: int, subject: str) -> bool:
        if not self.wants(subject):
            return False
        return seq in self.pending or seq in self.lps or seq >= self.cursor

    def done_since(self, before: Progress) -> list[int]:
        """The sequences ``before`` still needed (of any subject) and this no longer does."""
        gone = (before.pending | before.lps) - self.pending - self.lps
        passed = range(before.cursor, self.cursor)
        return sorted(gone | {seq for seq in passed if seq not in self.pending})


class GroupConsumers:
    """The consumer records of one replica, and its live consumers while it leads."""

    def __init__(self, stream: Stream, manager: ConsumerManager | None) -> None:
        self.stream = stream
        self.manager = manager
        """Runs the live consumers; None: the records only (a replica without a service)."""
        self.records: dict[str, Record] = {}
        self.active = False
        """Live consumers run here (this replica leads and applied its epoch's no-op)."""

    # Applying -------------------------------------------------------------------------------

    def apply(self, op: groupops.ConsumerOp) -> groupops.Outcome:
        """Apply a consumer op (every replica alike); while active, the live consumers follow."""
        match op:
            case groupops.ConsumerAdd():
                cfg = _config(op.config)
                record = self.records.get(op.name)
                if record is None:
                    state = self._first_state(op.name, cfg, op.created)
                    self.records[op.name] = Record(op.config, op.created, state)
                    self._refresh_interest()
                    if self.active:
                        self._run(op.name, cfg, op.created, state, created=True)
                    return True
                record.config, record.progress = op.config, None
                self._refresh_interest()
                live = self.stream.consumers.get(op.name)
                if self.manager is not None and live is not None:
                    self.manager.reconfigure(live, cfg)
                return True
            case groupops.ConsumerState():
                record = self.records.get(op.name)
                if record is None:
                    return False
                before = record.read() if self._retaining() else None
                record.state, record.progress = op.state, None
                if before is not None:
                    self._drop_done(op.name, record.read().done_since(before))
                return True
            case groupops.ConsumerDelete():
                record = self.records.pop(op.name, None)
                self._refresh_interest()
                live = self.stream.consumers.get(op.name)
                if self.manager is not None and live is not None:
                    self.manager.stop_live(live, deleted=True)
                return record is not None
            case groupops.DropUnneeded():
                return self.drop_unneeded(op.seqs)

    def _first_state(self, name: str, cfg: Any, created: int) -> bytes:
        """The state of a new consumer placed on the stream as it is now (at this entry)."""
        probe = Consumer(self.stream, name, cfg, created)
        probe.position()
        return cstate.snapshot(probe)

    # Leadership -----------------------------------------------------------------------------

    def activate(self) -> None:
        """Run every recorded consumer here, from its recorded state."""
        if self.active or self.manager is None:
            return
        self.active = True
        for name in sorted(self.records):
            record = self.records[name]
            try:
                cfg = _config(record.config)
            except groupops.OpError as exc:
                log.error("stream %r: consumer %r not started: %s", self.stream.name, name, exc)
                continue
            self._run(name, cfg, record.created, record.state, created=False)

    def deactivate(self) -> None:
        """Stop the live consumers (the records stay)."""
        self.active = False
        if self.manager is None:
            return
        for consumer in list(self.stream.consumers.values()):
            self.manager.stop_live(consumer, deleted=False, reason=LEADERSHIP_CHANGE)

    def _run(self, name: str, cfg: Any, created_ns: int, state: bytes, *, created: bool) -> None:
        assert self.manager is not None
        self.manager.start_live(
            self.stream, name, cfg, created_ns, state, _StateEntries, created=created
        )

    # Snapshots ------------------------------------------------------------------------------

    def capture(self) -> list[list[Any]]:
        """The records, for a snapshot: ``[name, config, created, state]`` each (JSON)."""
        return [
            [name, orjson.loads(r.config), r.created, orjson.loads(r.state)]
            for name, r in sorted(self.records.items())
        ]

    def install(self, rows: list[Any]) -> None:
        """Replace the records by a snapshot's (a follower's: nothing runs here)."""
        records: dict[str, Record] = {}
        for row in rows:
            name, config, created, state = row
            records[str(name)] = Record(orjson.dumps(config), int(created), orjson.dumps(state))
        self.records = records
        self._refresh_interest()

    # Retention ------------------------------------------------------------------------------

    def _retaining(self) -> bool:
        return self.stream.config.retention != "limits"

    def _refresh_interest(self) -> None:
        """The consumers' filters, from the records on every replica alike: an interest
        stream stores a message only if one of them wants it (the live consumers, only on
        the leader, would make the replicas decide differently)."""
        filters: list[str] = []
        for record in self.records.values():
            try:
                filters.extend(record.read().filters or ("",))
            except Exception as exc:  # an unreadable record: stop as on any apply failure
                raise groupops.OpError(f"consumer record unreadable: {exc}") from None
        self.stream.interest_filters = filters

    def _drop_done(self, name: str, seqs: list[int]) -> None:
        """Consumer ``name`` is done with ``seqs`` (a ConsumerState applied): a work-queue
        stream drops them; an interest stream drops each no other consumer still needs.
        Applied by every replica alike (the leader's consumers remove nothing themselves)."""
        stream = self.stream
        workqueue = stream.config.retention == "workqueue"
        others = [r.read() for n, r in self.records.items() if n != name]
        for seq in seqs:
            msg = stream.store.load_msg(seq)
            if msg is None:
                continue
            if workqueue or not any(p.needs(seq, msg.subject) for p in others):
                stream.store.remove_msg(seq)

    def drop_unneeded(self, seqs: list[int]) -> int:
        """Of ``seqs``, remove the messages no consumer needs now (an interest stream's
        consumer was deleted: :class:`groupops.DropUnneeded`); how many went."""
        stream = self.stream
        progress = [r.read() for r in self.records.values()]
        removed = 0
        for seq in seqs:
            msg = stream.store.load_msg(seq)
            if msg is not None and not any(p.needs(seq, msg.subject) for p in progress):
                removed += int(stream.store.remove_msg(seq))
        return removed


def _config(data: bytes) -> Any:
    try:
        return ccfg.from_stored(orjson.loads(data))
    except Exception as exc:  # any decoding failure: a committed entry we cannot apply
        raise groupops.OpError(f"not a consumer config: {exc}") from None


class _StateEntries:
    """A live consumer's state writer (as :class:`.state.ConsumerState` is on one server):
    its changes go into the log as ConsumerState entries, one in flight at a time."""

    def __init__(self, consumer: Consumer, propose: Propose) -> None:
        self.consumer = consumer
        self._propose = propose
        self._dirty = False
        self._in_flight = False
        self._replies: list[str] = []
        """Ack requests waiting for an entry that holds their acks."""
        consumer.on_change = self.changed
        consumer.on_ack_reply = self.reply_after_write

    def changed(self, _consumer: Consumer) -> None:
        self._dirty = True
        if not self._in_flight:
            self._send()

    def reply_after_write(self, reply: str) -> None:
        self._replies.append(reply)
        self.changed(self.consumer)

    def _send(self) -> None:
        consumer = self.consumer
        if consumer.closed:
            return
        self._dirty = False
        replies, self._replies = self._replies, []
        op = groupops.ConsumerState(consumer.name, cstate.snapshot(consumer))
        self._in_flight = True
        self._propose(groupops.encode(op), lambda outcome: self._committed(outcome, replies))

    def _committed(self, outcome: groupops.Outcome | None, replies: list[str]) -> None:
        self._in_flight = False
        if outcome is None:
            return  # not committed here: not leading any more, the acks are not confirmed
        for reply in replies:
            self.consumer.client.publish(reply, b"")
        if self._dirty:
            self._send()

    async def flush(self) -> None:
        """Nothing to write at a close: what was committed is in the log."""
