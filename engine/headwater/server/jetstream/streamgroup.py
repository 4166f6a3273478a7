"""A replicated stream on one server: its replica's state (a :class:`Stream`) bound to its
group's log (a :class:`GroupRunner`) (docs/REPLICATION.md, "Applying").

- **Publishes** reach the leader's replica only (:meth:`Stream.take` subscribes while it
  leads). The leader checks what only it can, its server's storage budget (10023 at once),
  and proposes the publish with its time (:class:`groupops.Publish`; strictly increasing, so
  that two publishes never share one), the answer to give as the proposal's token.
- **Every replica** applies the committed entries in order through :func:`groupops.apply`.
  While leading it keeps the outcomes of the batch it applies: the runner's Acknowledges for
  that batch come right after the Apply, in the same step, and each answers its publisher
  with its entry's outcome (:meth:`Stream.answer`: the ack once the store's group commit
  covers it, or the error).
- **A rejected proposal** (this replica stopped leading, its runner closed or is full) is not
  answered: the publisher's request times out and it publishes again, as when a nats-server
  stream leader changes. The first may still be committed by the new leader; a publisher
  that sets ``Nats-Msg-Id`` gets the retry acknowledged as a duplicate.
- **Expiry** follows the leader's clock: when the stream's expiry timer fires on the leader
  it proposes :class:`groupops.Expire` (one at a time), and the timer is armed again once an
  Expire is applied. Replicas remove nothing by their own clocks.
- **Leadership**: the runner's ``on_leadership`` makes the stream take its messages, or stop.

A failure to apply (``groupops.OpError``, this server's store failing) stops the runner as a
crash would (the runner's rule for its owner's callbacks).

Not yet here: a restart from a file store and the log (the stream must then apply the log
past its last snapshot only: docs/REPLICATION.md, "Status"), snapshots sent and installed,
consumers, and the API requests that change the stream (delete, purge, update).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from headwater.server.replicated.core import Config
from headwater.server.replicated.groupstore import GroupStore
from headwater.server.replicated.messages import Entry
from headwater.server.replicated.runner import GroupRunner, ReplicaLog, Resolve, Transport

from . import errors, groupops, publish
from .stream import Stream
from .wire import rfc3339

log = logging.getLogger("headwater.server.jetstream.streamgroup")

Answer = Callable[[groupops.Outcome | None], None]
"""What a proposal's outcome goes to once committed here (None: not committed here)."""


class StreamGroup:
    """Replica ``name`` of ``stream``: ``start()`` starts the stream and the runner;
    ``close()`` stops the runner (the stream is its owner's to close)."""

    def __init__(
        self,
        stream: Stream,
        name: str,
        my_id: str,
        *,
        log: ReplicaLog,
        transport: Transport,
        store: GroupStore,
        resolve: Resolve,
        recovered: Sequence[Entry] = (),
        base: tuple[int, int] = (0, 0),
        config: Config | None = None,
    ) -> None:
        self.stream = stream
        self.runner = GroupRunner(
            stream.name,
            name,
            my_id,
            log=log,
            transport=transport,
            store=store,
            resolve=resolve,
            recovered=recovered,
            base=base,
            config=config,
            on_apply=self._on_apply,
            on_acknowledge=self._on_answer,
            on_rejected=self._on_rejected,
            on_leadership=self._on_leadership,
        )
        self.leading = False
        self._taken = False
        self._taking: asyncio.Task[None] | None = None
        self._outcomes: dict[int, groupops.Outcome] = {}
        """Index -> outcome of the entries of the batch applied last (while leading)."""
        self._last_ts = 0
        self._expiring = False
        self.leader_since = 0
        """When this replica last started leading (ns), for STREAM.INFO."""

    async def start(self) -> None:
        self.stream.group = self
        await self.stream.start()
        await self.runner.start()

    async def close(self) -> None:
        await self.runner.close()
        if self._taking is not None:
            self._taking.cancel()

    # The leader's side ----------------------------------------------------------------------

    def publish(self, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        """A message published to the stream's subjects, here while this replica leads."""
        stream = self.stream
        if not stream.active:
            return
        reply = reply if reply and not stream.config.no_ack else ""
        if stream.resources.limits_exceeded(stream.config.storage):
            stream.answer(reply, errors.INSUFFICIENT_RESOURCES)
            return
        op = groupops.Publish(subject, hdr or b"", payload, self._now())
        self.runner.propose(groupops.encode(op), _answer_publish(stream, reply))

    async def submit(self, op: groupops.Op) -> groupops.Outcome:
        """Propose ``op`` (a request that changes the stream: delete, purge) and wait for its
        outcome once committed; 10008 when it was not committed here (this replica does not
        lead, or stopped)."""
        done: asyncio.Future[groupops.Outcome | None] = asyncio.get_running_loop().create_future()

        def answer(outcome: groupops.Outcome | None) -> None:
            if not done.done():
                done.set_result(outcome)

        self.runner.propose(groupops.encode(op), answer)
        outcome = await done
        if outcome is None:
            raise errors.CLUSTER_NOT_AVAIL.exc()
        return outcome

    def cluster_block(self, cluster_name: str | None, peer_id: Callable[[str], str]) -> dict:
        """STREAM.INFO's ``cluster`` as nats-server 2.15 words it: the leader, since when, and
        each other replica: ``current`` (in sync), ``active`` (ns since it last made progress
        or answered caught up), ``lag`` (entries it lacks, when any) and its ``peer`` id. Only
        the leader knows the replicas; a follower names the leader."""
        block: dict[str, Any] = {"name": cluster_name} if cluster_name else {}
        runner = self.runner
        record = runner.record
        if runner.is_leader:
            block["leader"] = runner.name
            block["leader_since"] = rfc3339(self.leader_since)
        elif record is not None and record.leader:
            block["leader"] = record.leader
        core = runner.replica
        now = core.now or 0
        replicas = []
        for name, in_sync, match, seen in core.followers():
            lag = max(core.last_index - match, 0)
            replica: dict[str, Any] = {
                "name": name,
                "current": in_sync and lag == 0,
                "active": max(now - seen, 0) * 1_000_000,
            }
            if lag:
                replica["lag"] = lag
            replica["peer"] = peer_id(name)
            replicas.append(replica)
        if replicas:
            block["replicas"] = replicas
        return block

    def expire_due(self) -> None:
        """The stream's expiry timer fired: the leader proposes an expiry at its time."""
        if not self.runner.is_leader or self._expiring:
            return
        self._expiring = True
        self.runner.propose(groupops.encode(groupops.Expire(self._now())), self._expired)

    def _expired(self, outcome: groupops.Outcome | None) -> None:
        self._expiring = False

    def _now(self) -> int:
        self._last_ts = max(time.time_ns(), self._last_ts + 1)
        return self._last_ts

    # The runner's callbacks ------------------------------------------------------------------

    def _on_apply(self, entries: tuple[Entry, ...]) -> None:
        outcomes: dict[int, groupops.Outcome] = {}
        for entry in entries:
            op = groupops.decode(entry.op)
            if op is None:
                continue
            outcome = groupops.apply(self.stream, op)
            if self.runner.is_leader:
                outcomes[entry.index] = outcome
            if isinstance(op, groupops.Expire):
                self.stream._arm_expiry(force=True)
        self._outcomes = outcomes

    def _on_answer(self, answer: Answer, index: int) -> None:
        outcome = self._outcomes.pop(index, None)
        if outcome is None:
            # Acknowledged right after its Apply (the runner's order): never missing.
            log.error("stream %r: no outcome for entry %d", self.stream.name, index)
        answer(outcome)

    def _on_rejected(self, answer: Answer, leader: str | None) -> None:
        answer(None)

    def _on_leadership(self, leading: bool, epoch: int) -> None:
        self.leading = leading
        if leading:
            self.leader_since = time.time_ns()
            # Times never go back across leaders, whatever this server's clock says: a
            # message's time is at least its predecessor's (what the store would do anyway).
            self._last_ts = max(self._last_ts, self.stream.state().last_ts)
        if self._taking is None or self._taking.done():
            loop = asyncio.get_running_loop()
            self._taking = loop.create_task(self._follow_leadership())

    async def _follow_leadership(self) -> None:
        """Subscribe or unsubscribe until the stream takes messages exactly while leading
        (leadership may change again while a change is under way)."""
        while self._taken != self.leading:
            leading = self.leading
            await self.stream.take(leading)
            self._taken = leading


def _answer_publish(stream: Stream, reply: str) -> Answer:
    def answer(outcome: groupops.Outcome | None) -> None:
        # None: not committed here; the publisher times out and publishes again.
        if isinstance(outcome, publish.Stored | errors.ApiError):
            stream.answer(reply, outcome)

    return answer
