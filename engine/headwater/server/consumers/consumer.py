"""One consumer's runtime: what it has delivered, what awaits an ack, and when to redeliver.

Who owns what:

* ``ack_state`` (:class:`.ackstate.AckState`) — delivered count ``dseq``, the ``pending``
  messages awaiting an ack, redelivery counts and queue, the ack floor; read-only views of
  them are properties here (CONSUMER.INFO, the state file, retention). Due redeliveries are served
  before new messages and regardless of ``max_ack_pending`` (they are pending already: the
  limit holds back new deliveries only);
* ``waiting`` (:class:`.pullqueue.WaitQueue`) — a pull consumer's waiting requests;
* the consumer itself — the cursor ``sseq`` (the next stream sequence to look at), the
  ``last_per_subject`` list, the pending-count cache, its one timer, the ack policy and
  callbacks. :mod:`.pull`, :mod:`.push` and :mod:`.timers` use its public methods only.

Delivery runs in :meth:`_pump`, scheduled with ``call_soon`` whenever something may have
become deliverable (a new message, a pull request, an ack freeing ``max_ack_pending``, a
redelivery deadline), so a burst of events costs one pass and nothing is delivered from inside
the publisher's routing call.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from headwater.server.routing.subjects import subject_matches
from headwater.server.routing.sublist import SublistResult
from headwater.server.store.base import StoredMsg
from headwater.server.subscription import Subscription

from . import acks, pull, timers
from .acks import AckKind
from .ackstate import AckState, Pending
from .config import add_header, cfg_get, pause_ns, time_ns
from .pull import pending_status
from .pullqueue import WaitQueue

if TYPE_CHECKING:
    from headwater.server.jetstream.stream import Stream

    from .redelivery import RedeliveryQueue

__all__ = ["Consumer", "Pending"]

log = logging.getLogger("headwater.jetstream")

DEFAULT_ACK_WAIT = 30_000_000_000

READ_AHEAD_MSGS = 64
READ_AHEAD_BYTES = 256 * 1024
"""How much a consumer with at most one filter reads from the store at once. One batched
lookup instead of one per message is most of what a fast consumer spends reading; the bytes
bound keeps a thousand consumers of large messages from holding much memory."""


class Consumer:
    """A consumer bound to its stream. ``config`` is the defaulted, validated config."""

    def __init__(self, stream: Stream, name: str, config: Any, created_ns: int) -> None:
        self.stream = stream
        self.name = name
        self.config = config
        self.created_ns = created_ns
        self.client = stream.client
        self.sseq = 0
        self.ack_state = AckState()
        self.lps: list[int] = []
        """Sequences still to deliver under ``last_per_subject`` before going on from sseq."""
        self.lps_end = 0
        """With ``last_per_subject``: the first sequence after the per-subject lasts."""
        self._from_lps = False
        self._npc: int | None = None
        """Cached :meth:`num_pending`; None = recount."""
        self._npc_last = 0
        """The stream's last sequence when ``_npc`` was brought up to date."""
        self.waiting = WaitQueue(self.max_waiting)
        self.last_active = 0
        self.last_ack = 0
        self.closed = False
        self.paused_until = 0
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._sub: Subscription | None = None
        self.ack_prefix = acks.ack_prefix(stream.name, name)
        """The subject prefix of this consumer's ack replies."""
        self._prefix_tokens = self.ack_prefix.count(".")
        self.on_change: Callable[[Consumer], None] | None = None
        """Called after state changes that must be persisted (set by the state store)."""
        self.on_ack_reply: Callable[[str], None] | None = None
        """Sends the empty reply to an ack that came as a request (deferred when durable)."""
        self.push: Any = None
        """The push delivery helper (:class:`.push.PushDelivery`) of a push consumer."""
        self.filters: list[str] = self._filters()
        self._ahead: collections.deque[StoredMsg] = collections.deque()
        """Messages read ahead of the cursor (see :meth:`_peek`)."""
        self._targets: SublistResult | None = None
        self._targets_key: tuple[str, int] = ("", -1)
        """The kept match of the last delivery subject, and (subject, interest epoch)."""

    # --- config views --------------------------------------------------------------------

    def _filters(self) -> list[str]:
        many = cfg_get(self.config, "filter_subjects", None)
        if many:
            return list(many)
        one = cfg_get(self.config, "filter_subject", "")
        return [one] if one else []

    @property
    def config(self) -> Any:
        return self._config

    @config.setter
    def config(self, cfg: Any) -> None:
        # The fields read per delivered message, kept as plain attributes.
        self._config = cfg
        if hasattr(self, "_ahead"):
            self._ahead.clear()  # read under the old filters
        self.ack_policy = str(cfg_get(cfg, "ack_policy", "none"))
        self.max_ack_pending = int(cfg_get(cfg, "max_ack_pending", 0))
        self.max_deliver = int(cfg_get(cfg, "max_deliver", -1))
        self.headers_only = bool(cfg_get(cfg, "headers_only", False))
        # Redelivery waits in seconds, by delivery count: ``backoff`` steps, else ack_wait.
        backoff = cfg_get(cfg, "backoff", None)
        self._backoff_s = [int(step) / 1e9 for step in backoff] if backoff else []
        wait = int(cfg_get(cfg, "ack_wait", 0))
        self._ack_wait_s = (wait if wait > 0 else DEFAULT_ACK_WAIT) / 1e9

    def reconfigure(self, cfg: Any) -> None:
        """Take an updated config: the per-message fields, the filters and ``max_waiting``
        follow it."""
        self.config = cfg
        self.filters = self._filters()
        self.waiting.limit = self.max_waiting

    @property
    def ack_wait(self) -> int:
        wait = int(cfg_get(self.config, "ack_wait", 0))
        return wait if wait > 0 else DEFAULT_ACK_WAIT

    @property
    def max_waiting(self) -> int:
        return int(cfg_get(self.config, "max_waiting", 0))

    @property
    def is_pull(self) -> bool:
        return not cfg_get(self.config, "deliver_subject", "")

    def wants(self, subject: str) -> bool:
        return not self.filters or any(subject_matches(f, subject) for f in self.filters)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self, *, fresh: bool) -> None:
        """Subscribe the ack subject; on a fresh consumer, place ``sseq`` by deliver policy."""
        if fresh:
            self.position()
        self._sub = self.client.subscribe(self.ack_prefix + ">", self._on_ack)
        self.paused_until = pause_ns(cfg_get(self.config, "pause_until", 0))
        if self.ack_state.pending:
            self.arm_timer()
        self.kick()

    def position(self) -> None:
        """Place ``sseq`` by the deliver policy, against the stream as it is now."""
        store = self.stream.store
        state = store.state()
        policy = cfg_get(self.config, "deliver_policy", "all")
        filters = self.filters or [">"]
        if policy == "new":
            self.sseq = state.last_seq + 1
        elif policy == "last":
            lasts = [m.seq for f in filters if (m := store.load_last(f)) is not None]
            self.sseq = max(lasts) if lasts else state.last_seq + 1
        elif policy == "by_start_sequence":
            self.sseq = max(int(cfg_get(self.config, "opt_start_seq", 0)), 1)
        elif policy == "by_start_time":
            start = time_ns(cfg_get(self.config, "opt_start_time", 0))
            self.sseq = store.seq_from_time(start) if state.msgs else state.last_seq + 1
        elif policy == "last_per_subject":
            seqs: set[int] = set()
            for f in filters:
                seqs.update(store.subjects_last(f).values())
            # Deliver each subject's last message, then everything stored after creation;
            # the cursor sits on the next of them, as nats-server's does.
            self.lps = sorted(seqs)
            self.lps_end = state.last_seq + 1
            self.sseq = self.lps[0] if self.lps else self.lps_end
        else:
            self.sseq = state.first_seq if state.msgs else state.last_seq + 1
        self.sseq = max(self.sseq, 1)
        # Everything below the starting point counts as acknowledged (nats-server's floor).
        self.ack_state.acked_below(self.sseq)

    def position_after_loss(self) -> None:
        """No delivery state survived on disk: start over from the config, so whatever may
        not have been acknowledged is delivered again (at least once, never lost). With
        ``deliver_policy: new`` that is everything stored since the consumer was created,
        not only what comes after the restart."""
        self.position()
        if cfg_get(self.config, "deliver_policy", "all") == "new" and self.created_ns:
            store = self.stream.store
            if store.state().msgs:
                self.sseq = max(store.seq_from_time(self.created_ns), 1)
                self.ack_state.acked_below(self.sseq)

    def stop(self, *, deleted: bool, reason: str | None = None) -> None:
        """Stop delivering. Waiting pull requests are told why: the consumer was deleted, or
        (not deleted) ``reason``, by default ``409 Server Shutdown``, with what each request
        still wanted, as nats-server tells them before it stops."""
        self.closed = True
        self.stream.hungry.discard(self)
        if self._sub is not None:
            self.client.unsubscribe(self._sub)
            self._sub = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self.waiting:
            req = self.waiting.pop()
            why = "Consumer Deleted" if deleted else reason or "Server Shutdown"
            self.send_status(req.reply, pending_status(409, why, req))
        if self.push is not None:
            self.push.stop()

    # --- notifications -------------------------------------------------------------------

    def kick(self) -> None:
        """Something may be deliverable: run one delivery pass soon."""
        if self._scheduled or self.closed:
            return
        self._scheduled = True
        asyncio.get_running_loop().call_soon(self._pump)

    def on_stored(self, subject: str) -> None:
        if self.wants(subject):
            self.kick()

    # --- pull requests -------------------------------------------------------------------

    def request_next(self, reply: str, body: bytes) -> None:
        """A ``CONSUMER.MSG.NEXT`` request (or ``+NXT``): see :func:`.pull.handle_request`."""
        pull.handle_request(self, reply, body)

    def has_next(self) -> bool:
        """Whether a message could be delivered now (a redelivery is due, or a new one)."""
        if self.ack_state.rdq or self.lps:
            return True
        if self.paused():
            return False
        return self._peek() is not None

    def delivered_stream_seq(self) -> int:
        """``delivered.stream_seq``: the stream sequence the cursor last moved past."""
        return max(self.sseq - 1, 0)

    def last_delivered_headers(self) -> dict[str, str]:
        """What idle heartbeats say was delivered last (ordered consumers check it)."""
        return {
            "Nats-Last-Consumer": str(self.ack_state.dseq),
            "Nats-Last-Stream": str(self.delivered_stream_seq()),
        }

    def send_status(self, reply: str, hdr: bytes) -> None:
        """Send a status message (headers only) to ``reply``: a pull request's inbox."""
        self.client.publish(reply, b"", hdr=hdr)

    # --- delivery ------------------------------------------------------------------------

    def paused(self) -> bool:
        """Whether the consumer is paused now (``pause_until`` still ahead)."""
        return self.paused_until > 0 and time.time_ns() < self.paused_until

    def can_send(self) -> bool:
        """Whether a delivery pass may go on: a redelivery is due, or a new message fits."""
        return bool(self.ack_state.rdq) or self._room_for_new()

    def redelivery_due(self) -> bool:
        """Whether redeliveries are queued (they go out even while paused)."""
        return bool(self.ack_state.rdq)

    def _room_for_new(self) -> bool:
        """``max_ack_pending`` holds back new deliveries only, as in nats-server: due
        redeliveries still go out at the limit, or a consumer whose pending messages are
        never acked would stall for good instead of running them out of deliveries."""
        limit = self.max_ack_pending
        if self.ack_policy == "none" or limit <= 0:
            return True
        return len(self.ack_state.pending) < limit

    def _peek(self) -> StoredMsg | None:
        """The next message at or after the cursor that this consumer wants.

        With at most one filter, messages come from a read-ahead buffer refilled in batches.
        A buffered message is used only while it is still stored and not behind the cursor:
        sequences only grow, so nothing can appear between buffered messages, and anything
        removed meanwhile (purge, expiry, limits) is skipped."""
        store = self.stream.store
        filters = self.filters
        if len(filters) <= 1:
            ahead = self._ahead
            sseq = self.sseq
            while ahead:
                msg = ahead[0]
                if msg.seq >= sseq and store.is_live(msg.seq):
                    return msg
                ahead.popleft()
            batch = store.load_next_batch(
                filters[0] if filters else ">", sseq, READ_AHEAD_MSGS, READ_AHEAD_BYTES
            )
            if not batch:
                return None
            ahead.extend(batch)
            return batch[0]
        best: StoredMsg | None = None
        for f in self.filters:
            msg = store.load_next(f, self.sseq)
            if msg is not None and (best is None or msg.seq < best.seq):
                best = msg
        return best

    def next_message(self) -> tuple[StoredMsg, int] | None:
        """The next message to deliver and its delivery count, advancing the cursors."""
        store = self.stream.store
        max_deliver = self.max_deliver
        ack_state = self.ack_state
        while ack_state.rdq:
            item = ack_state.next_redelivery()
            if item is None:
                break
            seq, dc = item
            if 0 < max_deliver < dc:
                # Delivered as often as allowed. Like nats-server, this is noticed when the
                # message would go out again: it leaves pending (its count stays) for good.
                ack_state.exhausted(seq)
                if self.on_max_deliveries is not None:
                    self.on_max_deliveries(self, seq, dc - 1)
                continue
            msg = store.load_msg(seq)
            if msg is None:
                ack_state.forget(seq)
                continue
            return msg, dc
        self._from_lps = False
        if not self._room_for_new():
            return None
        while self.lps:
            seq = self.lps.pop(0)
            msg = store.load_msg(seq)
            self.sseq = self.lps[0] if self.lps else max(seq + 1, self.lps_end)
            if msg is not None:
                self._from_lps = True
                self._took_one()
                return msg, 1
        found = self._peek()
        if found is None:
            last = store.state().last_seq
            if last >= self.sseq:
                self.sseq = last + 1
            return None
        self._took_one()
        self.sseq = found.seq + 1
        return found, 1

    def _took_one(self) -> None:
        """The cursor is about to move past one counted message (call before moving it)."""
        if self._npc is not None and self.num_pending():
            self._npc -= 1

    def _pump(self) -> None:
        self._scheduled = False
        if self.closed:
            return
        try:
            if self.is_pull:
                pull.pump(self)
            elif self.push is not None:
                self.push.pump()
        except Exception:
            log.exception("consumer '%s > %s' delivery failed", self.stream.name, self.name)
        # Only consumers with somewhere to deliver are woken by new messages, so a stored
        # message costs nothing for the idle ones however many there are.
        if len(self.waiting) > 0 if self.is_pull else bool(self.push and self.push.bound):
            self.stream.hungry.add(self)
        else:
            self.stream.hungry.discard(self)

    def has_listener(self, subject: str) -> bool:
        """Whether anybody listens on ``subject`` (a pull requester that went away does not)."""
        return bool(self.client.server.sublist.match(subject))

    def put_back(self, seq: int, dc: int) -> None:
        """Put back the message :meth:`next_message` just returned, unsent (it did not fit)."""
        if dc > 1:
            self.ack_state.redeliver(seq)
        elif self._from_lps:
            self.lps.insert(0, seq)
            self.sseq = seq
        else:
            self.sseq = seq
        if dc == 1 and self._npc is not None:
            self._npc += 1

    def num_pending(self, fresh: bool = False) -> int:
        """Messages not yet delivered. Counted by the store once, then kept up to date as
        messages are stored and delivered (every delivery reports it in its ack subject);
        ``fresh`` recounts, for CONSUMER.INFO, since removals elsewhere are not tracked."""
        store = self.stream.store
        last = self.stream.lseq
        filters = self.filters or [">"]
        if self._npc is None or fresh:
            count = len(self.lps)
            start = self.lps_end if self.lps else self.sseq
            if start <= store.state().last_seq:
                count += sum(store.num_pending(f, start) for f in filters)
            self._npc, self._npc_last = count, last
        elif last > self._npc_last:
            # Messages stored since the count: add the ones this consumer wants.
            start = max(self._npc_last + 1, self.lps_end if self.lps else self.sseq)
            if start <= last:
                self._npc += sum(store.num_pending(f, start) for f in filters)
            self._npc_last = last
        return self._npc

    def deliver(self, subject: str, msg: StoredMsg, dc: int) -> None:
        """Send one message to ``subject`` and record the delivery."""
        now_ns = time.time_ns()
        policy = self.ack_policy
        if policy == "none":
            cseq = self.ack_state.delivered_acked(msg.seq)
        else:
            deadline = time.monotonic() + self._wait_for(dc)
            cseq = self.ack_state.delivered(msg.seq, dc, deadline, now_ns)
            self.arm_timer(deadline)
        self.last_active = now_ns
        pending = self.num_pending()
        reply = acks.ack_reply(self.ack_prefix, dc, msg.seq, cseq, msg.ts, pending)
        hdr: bytes | None = msg.hdr or None
        data = msg.data
        if self.headers_only:
            hdr = add_header(hdr, "Nats-Msg-Size", str(len(data)))
            data = b""
        # Routed to ``subject``, shown under the stored subject as nats-server does. The
        # subject's subscribers are matched once per run of deliveries, not per message.
        server = self.client.server
        targets = self._targets
        if targets is None or self._targets_key != (subject, server.interest_epoch):
            targets = self._targets = server.match(subject)
            self._targets_key = (subject, server.interest_epoch)
        self.client.publish(subject, data, reply, hdr, shown_subject=msg.subject, targets=targets)
        if policy == "none":
            self.stream_acked(msg.seq)

    def _wait_for(self, dc: int) -> float:
        backoff = self._backoff_s
        if backoff:
            return backoff[min(dc - 1, len(backoff) - 1)]
        return self._ack_wait_s

    # --- acks ----------------------------------------------------------------------------

    def _on_ack(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        parsed = acks.parse_ack_subject(subject, self._prefix_tokens)
        if parsed is None or self.closed:
            return
        dc, sseq, cseq = parsed
        ack = acks.parse_ack(payload)
        self.last_active = time.time_ns()
        kind = ack.kind
        if kind in (AckKind.ACK, AckKind.TERM, AckKind.NXT):
            if sseq >= self.sseq and not self._ackable_ahead():
                # Never delivered (a forged or stale subject): ignored and left unanswered,
                # as nats-server does, so an ack_sync is not confirmed and the message is
                # delivered as usual. ``+NXT`` still serves its pull request.
                self._ignored_ack(sseq)
                if kind == AckKind.NXT and reply:
                    self.request_next(reply, ack.next_body)
                return
            self.last_ack = self.last_active
        if kind == AckKind.ACK:
            self.process_ack(sseq, cseq)
        elif kind == AckKind.NAK:
            self.process_nak(sseq, dc, ack.delay)
        elif kind == AckKind.WPI:
            self.process_progress(sseq)
        elif kind == AckKind.TERM:
            self.process_term(sseq, cseq, dc, ack.reason)
        elif kind == AckKind.NXT:
            self.process_ack(sseq, cseq)
            if reply:
                self.request_next(reply, ack.next_body)
            reply = ""
        if self.on_change is not None:
            self.on_change(self)
        if reply and kind != AckKind.NXT:
            if self.on_ack_reply is not None:
                self.on_ack_reply(reply)
            else:
                self.client.publish(reply, b"")

    def _ackable_ahead(self) -> bool:
        """nats-server skips the pointer check for flow-controlled consumers (their state may
        run ahead of what it replicated); we keep its behaviour for them."""
        return bool(cfg_get(self.config, "flow_control", False))

    def _ignored_ack(self, sseq: int) -> None:
        last = self.stream.store.state().last_seq
        if sseq > last:
            log.warning(
                "JetStream consumer '%s > %s' ACK sequence %d past last stream sequence of %d",
                self.stream.name,
                self.name,
                sseq,
                last,
            )

    def process_ack(self, sseq: int, cseq: int) -> None:
        """+ACK: with ``all``, everything up to ``sseq`` goes; with ``explicit``, ``sseq``
        (floors as :class:`.ackstate.AckState` moves them); ``none`` has nothing to ack."""
        policy = self.ack_policy
        ack_state = self.ack_state
        if policy == "all":
            done = ack_state.ack_all(sseq, cseq, self.sseq)
            if done is None:
                return
            for seq in done:
                self.stream_acked(seq)
            self.kick()
            return
        if policy != "explicit":
            return
        if self.on_acked is not None:
            pend = ack_state.pending.get(sseq)
            if pend is not None:
                self.on_acked(self, sseq, pend, ack_state.rdc.get(sseq, 1))
        if ack_state.ack(sseq, self.sseq) is None:
            return
        self.stream_acked(sseq)
        self.kick()

    def process_nak(self, sseq: int, dc: int, delay: int) -> None:
        """-NAK: redeliver now, or after ``delay`` ns (else the backoff step) if given."""
        pend = self.ack_state.pending.get(sseq)
        if pend is None:
            return
        if delay <= 0:
            backoff = cfg_get(self.config, "backoff", None)
            if backoff:
                delay = int(backoff[min(dc - 1, len(backoff) - 1)])
        if self.on_naked is not None:
            self.on_naked(self, sseq, pend.cseq, dc)
        if delay > 0:
            deadline = time.monotonic() + delay / 1e9
            self.ack_state.postpone(sseq, deadline)
            self.arm_timer(deadline)
            return
        self.ack_state.redeliver(sseq)
        self.kick()

    def process_progress(self, sseq: int) -> None:
        """+WPI: the message is being worked on; its ack wait starts again."""
        deadline = time.monotonic() + self.ack_wait / 1e9
        if self.ack_state.postpone(sseq, deadline):
            self.arm_timer(deadline)

    def process_term(self, sseq: int, cseq: int, dc: int, reason: str) -> None:
        """+TERM: never redeliver; acknowledged for floors and retention, with an advisory."""
        if sseq not in self.ack_state.pending:
            return
        self.process_ack(sseq, cseq)
        if self.on_terminated is not None:
            self.on_terminated(self, sseq, cseq, dc, reason)

    def purged(self) -> None:
        """The stream was purged: skip what is gone, drop pending messages that no longer
        exist, and lift the ack floor to below the new first message (nats-server's rules)."""
        store = self.stream.store
        state = store.state()
        first = state.first_seq if state.msgs else state.last_seq + 1
        if self.sseq < first:
            self.sseq = first
        self.ack_state.purged(first, lambda s: store.load_msg(s) is not None, self.sseq)
        self.lps = [s for s in self.lps if s >= first]
        self._npc = None
        if self.on_change is not None:
            self.on_change(self)
        self.kick()

    # Read-only views of the ack state (CONSUMER.INFO, the state file, retention, tests).

    @property
    def dseq(self) -> int:
        return self.ack_state.dseq

    @property
    def adflr(self) -> int:
        return self.ack_state.adflr

    @property
    def asflr(self) -> int:
        return self.ack_state.asflr

    @property
    def pending(self) -> dict[int, Pending]:
        return self.ack_state.pending

    @property
    def rdc(self) -> dict[int, int]:
        return self.ack_state.rdc

    @property
    def rdq(self) -> RedeliveryQueue:
        return self.ack_state.rdq

    on_terminated: Callable[[Consumer, int, int, int, str], None] | None = None
    on_max_deliveries: Callable[[Consumer, int, int], None] | None = None
    on_naked: Callable[[Consumer, int, int, int], None] | None = None
    on_acked: Callable[[Consumer, int, Pending, int], None] | None = None
    """Set by the manager when ``sample_freq`` asks for ack metrics."""

    def stream_acked(self, seq: int) -> None:
        """Retention hook: the stream may drop ``seq`` now that this consumer is done with it."""
        retention = self.stream.config.retention
        if retention == "limits":
            return
        self.stream.consumer_done(seq, self)

    def needs(self, seq: int, subject: str) -> bool:
        """Whether this consumer still has to see (or ack) ``seq`` — for interest retention."""
        if not self.wants(subject):
            return False
        if seq in self.ack_state.pending or seq in self.lps:
            return True
        return seq >= (self.lps_end if self.lps else self.sseq)

    # --- redelivery timer ----------------------------------------------------------------

    def arm_timer(self, at: float | None = None) -> None:
        """Make the consumer's one timer fire by ``at`` (monotonic s); None = by the earliest
        ack deadline not yet due."""
        if self.closed:
            return
        if at is None:
            at = self.ack_state.next_deadline()
        if not at:
            return
        if self._timer is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        delay = max(at - time.monotonic(), 0.0)
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = 0.0
        if not self.closed:
            timers.on_timer(self)

    def set_pause(self, until_ns: int) -> None:
        self.paused_until = until_ns
        if until_ns:
            self.arm_timer(time.monotonic() + max(until_ns - time.time_ns(), 0) / 1e9)
        self.kick()
