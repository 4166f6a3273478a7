"""The stream runtime: one stream's config, store, subscriptions, acks and timers.

A :class:`Stream` owns

* its subscriptions through the service's internal client: the config's subjects (messages go
  to :func:`.publish.process` inside routing) and, with ``allow_direct``, the direct-get
  subjects (queue group ``_sys_``, answered inline by :mod:`.direct`);
* the publish-ack **group commit**: success acks wait for ``store.durable()``; one durable
  call is in flight per stream and every ack queued behind it goes out when it returns, so a
  burst of publishes shares one fsync. MSG.DELETE and PURGE replies wait in the same queue
  (:meth:`Stream.durable`);
* the **fail-stop** of a store whose write or fsync failed: an error log and a
  ``$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE`` advisory (the store itself refuses writes);
* the **expiry timer**, armed at ``store.next_expiry()`` (``max_age`` and per-message TTLs);
* **subject delete markers**: when ``max_age``/TTL removes the last message of a subject and
  ``subject_delete_marker_ttl`` is set, a marker (``Nats-Marker-Reason: MaxAge``) is stored on
  that subject through the normal publish path; the markers already stored are found by a
  walk over the stream at start (expiry waits for it);
* the lazy load of the **duplicate window** after a restart, while new messages wait;
* **republish** of stored messages and the input **subject transform**.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.server.budget import PassBudget
from headwater.server.connections.internal import InternalClient
from headwater.server.protocol import headers
from headwater.server.routing.subjects import subject_matches
from headwater.server.store.base import (
    StoredMsg,
    StoreError,
    StoreFailed,
    StoreLimits,
    StreamState,
    StreamStore,
)
from headwater.server.subscription import Subscription

from . import direct, errors, groupops, publish
from .advisories import advisory_body
from .errors import ApiError
from .streamconfig import StreamConfig
from .streamconfig_validate import go_duration
from .transform import SubjectTransform
from .wire import dumps, rfc3339, with_headers

if TYPE_CHECKING:
    from .accountinfo import Resources

__all__ = ["DIRECT_GROUP", "Stream", "store_limits"]

log = logging.getLogger("headwater.jetstream")

DROP_BATCH = 1024
"""Sequences per :class:`groupops.DropUnneeded` entry a replicated interest stream's leader
proposes after a consumer was deleted."""

DIRECT_GROUP = "_sys_"
"""Queue group of direct-get subscriptions, so mirrors could share the load (nats-server's)."""
WALK_BATCH = 256
"""Messages one store read returns during a walk over the whole stream (:meth:`Stream._walk`)."""
WALK_BYTES = 1 << 20


def store_limits(cfg: StreamConfig) -> StoreLimits:
    """The limits the store enforces, from a defaulted config (-1 / 0 mean unlimited)."""
    return StoreLimits(
        max_msgs=cfg.max_msgs,
        max_bytes=cfg.max_bytes,
        max_age=cfg.max_age,
        max_msgs_per_subject=cfg.max_msgs_per_subject,
        max_msg_size=cfg.max_msg_size,
        discard=cfg.discard,
        discard_new_per_subject=cfg.discard_new_per_subject,
    )


class Stream:
    """A live stream. Create it with its store already open, then call :meth:`start`."""

    def __init__(
        self,
        *,
        config: StreamConfig,
        created_ns: int,
        store: StreamStore,
        client: InternalClient,
        resources: Resources,
        directory: Path | None,
        domain: str | None,
        api_prefixes: tuple[str, ...],
        durable_acks: bool,
    ) -> None:
        self.config = config
        self.created_ns = created_ns
        self.store = store
        self.client = client
        self.resources = resources
        self.directory = directory
        self.domain = domain
        self._api_prefixes = api_prefixes
        self._durable_acks = durable_acks
        self.active = False
        self._stopped = False
        self._subs: dict[str, Subscription] = {}
        self._direct_subs: list[Subscription] = []
        self.dedupe = publish.Dedupe(config.duplicate_window)
        self.ids_recorded: list[tuple[str, int, int]] | None = None
        """A replica on a file store: (id, seq, ts) of each id recorded into the window since
        its last checkpoint, which writes them to its duplicate log (:mod:`.groupcheckpoint`);
        None otherwise."""
        self.markers: set[int] = set()
        self.consumers: dict[str, Any] = {}
        """name -> :class:`headwater.server.consumers.consumer.Consumer` (managed by
        :class:`headwater.server.consumers.manager.ConsumerManager`)."""
        self.hungry: set[Any] = set()
        """Consumers with somewhere to deliver right now (pull requests waiting, push bound):
        the only ones a stored message wakes."""
        self.interest_filters: list[str] = []
        """Subject filters of the consumers that hold interest ("" = everything); an interest
        retention stream stores only what one of them wants."""
        self.replication: Any = None
        """The stream's mirror or sources runner (:mod:`.replication`), None when neither."""
        self.group: Any = None
        """A replicated stream's binding to its replica group (:mod:`.streamgroup`), set
        before :meth:`start`; None for one replica. With it, publishes go to the group's log
        (only while this replica leads: :meth:`take`), the state changes only by applying the
        log, and expiry is the leader's to propose."""
        self.input_transform: SubjectTransform | None = None
        self.republish_transform: SubjectTransform | None = None
        self._ack_prefix = b""
        self._pending: list[tuple[str, bytes] | asyncio.Future[None]] = []
        """Acks to send, and :meth:`durable` callers to wake, after the next durable()."""
        self._flusher: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_at = 0
        state = store.state()
        self.lseq = state.last_seq
        self.lmsgid = ""
        self._dedupe_loaded = state.msgs == 0
        self._held: deque[tuple[str, str, bytes | None, bytes]] | None = None
        """Messages that arrived while the dedupe window loads, in arrival order; None when
        nothing is held (see :meth:`hold`)."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Background walks (dedupe load, marker scan), cancelled when the stream closes."""
        self._scanning = False
        """A marker scan is running: expiry waits for it (:meth:`_scan_markers`)."""
        self._now: int | None = None
        """The time :meth:`at` set, None: the system clock's."""
        store.on_remove = self._removed
        store.on_failure = self._store_failed
        self._configure(config)

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.config.name

    def public_consumers(self) -> list[Any]:
        """The consumers users see: all but the ``direct`` ones other streams' mirrors and
        sources run here, which nats-server leaves out of listings, counts and limits."""
        return [c for c in self.consumers.values() if not getattr(c.config, "direct", False)]

    def consumer_count(self) -> int:
        """``state.consumer_count``: the public consumers, and on interest and work-queue
        streams also the direct ones, whose deliveries release messages there (nats-server
        counts what its store tracks, and it tracks those)."""
        if self.config.retention != "limits":
            return len(self.consumers)
        return len(self.public_consumers())

    async def start(self) -> None:
        """Take messages (stored from the first subscription on, as nats-server does while a
        create is answered), expire what is already too old, arm the expiry timer (after the
        marker scan when subject delete markers are on)."""
        self.active = True
        if self.group is not None:
            return  # the group applies its log; it subscribes while leading (take)
        await self._subscribe(self.config.subjects, self.config.allow_direct)
        if self._stopped:
            return
        if self.config.subject_delete_marker_ttl > 0:
            self._scan_markers()
            return
        self.store.expire()
        self._arm_expiry(force=True)

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _stop_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._held = None

    async def close(self) -> None:
        """Stop taking messages, send the acks still queued, close the store."""
        await self._stop_taking()
        self._cancel_expiry()
        await self._stop_tasks()
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        await self.store.aclose()

    async def delete(self) -> None:
        """Stop and remove every trace of the stream (store files included)."""
        await self._stop_taking()
        self._cancel_expiry()
        await self._stop_tasks()
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        await self.store.adelete()

    def _configure(self, cfg: StreamConfig) -> None:
        st = cfg.subject_transform
        self.input_transform = SubjectTransform(st.src, st.dest) if st and st.dest else None
        rp = cfg.republish
        self.republish_transform = SubjectTransform(rp.src, rp.dest) if rp else None
        self.dedupe.window = cfg.duplicate_window
        name = dumps(cfg.name).decode()
        if self.domain:
            prefix = f'{{"stream":{name},"domain":{dumps(self.domain).decode()},"seq":'
        else:
            prefix = f'{{"stream":{name},"seq":'
        self._ack_prefix = prefix.encode()

    async def update(self, cfg: StreamConfig) -> None:
        """Apply a validated new config: limits, subscriptions, transforms, timers."""
        self.reconfigure(cfg)
        await self._subscribe(cfg.subjects, cfg.allow_direct)

    def reconfigure(self, cfg: StreamConfig) -> None:
        """Take a validated new config, all but the subscriptions (limits, transforms,
        timers), in one synchronous step: a replicated stream's replicas apply it where its
        log has it, and its leader then takes the new subjects (:meth:`take`)."""
        old = self.config
        self.config = cfg
        self._configure(cfg)
        self.store.update_limits(store_limits(cfg))
        if cfg.subject_delete_marker_ttl > 0 and old.subject_delete_marker_ttl <= 0:
            self._scan_markers()
        self._arm_expiry(force=True)

    # --- subscriptions -------------------------------------------------------------------

    async def _subscribe(self, subjects: list[str], direct: bool) -> None:
        """Hold subscriptions to exactly ``subjects`` (plus the direct get subjects when
        ``direct``): drop the ones no longer listed, then add the new ones.

        A stream may list tens of thousands of subjects, and each takes a sublist insert, so
        the work yields to the loop after each :class:`PassBudget` slice. A subject kept across
        an update keeps its subscription throughout; removals go first, so a message never
        matches an old and a new subscription at once (it would be stored twice)."""
        budget = PassBudget()
        wanted = set(subjects)
        for subject in [s for s in self._subs if s not in wanted]:
            self.client.unsubscribe(self._subs.pop(subject))
            await budget.tick()
        for subject in subjects:
            if self._stopped:
                return  # closed while subscribing: take nothing more
            if subject not in self._subs:
                self._subs[subject] = self.client.subscribe(subject, self._on_message)
                await budget.tick()
        if direct and not self._direct_subs:
            for prefix in self._api_prefixes:
                base = f"{prefix}.DIRECT.GET.{self.name}"
                self._direct_subs.append(self.client.subscribe(base, self._on_direct, DIRECT_GROUP))
                self._direct_subs.append(
                    self.client.subscribe(base + ".>", self._on_direct_last, DIRECT_GROUP)
                )
        elif not direct:
            for sub in self._direct_subs:
                self.client.unsubscribe(sub)
            self._direct_subs.clear()

    async def take(self, leading: bool) -> None:
        """A replicated stream's replica takes the stream's messages and direct gets while it
        leads, and none otherwise; leading, it arms the expiry its group proposes."""
        if self._stopped:
            return
        if leading:
            await self._subscribe(self.config.subjects, self.config.allow_direct)
            self._arm_expiry(force=True)
        else:
            await self._subscribe([], direct=False)

    async def _stop_taking(self) -> None:
        """Close and delete begin here: store nothing more, drop every subscription."""
        self._stopped = True
        self.active = False
        await self._subscribe([], direct=False)

    def _on_message(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        if self.group is not None:
            self.group.publish(subject, reply, hdr, payload)
            return
        publish.process(self, subject, reply, hdr, payload)

    def _on_direct(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        if reply:
            direct.handle_request(self, reply, payload)

    def _on_direct_last(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        if reply:
            key = subject[len(sub.subject) - 1 :]
            direct.handle_last_by_subject(self, reply, key, payload)

    # --- state ---------------------------------------------------------------------------

    def clock(self) -> int:
        """Now, in ns: what the publish checks and the store go by (see :meth:`at`)."""
        return time.time_ns() if self._now is None else self._now

    @contextlib.contextmanager
    def at(self, ts: int) -> Iterator[None]:
        """Run what follows at time ``ts``: a replicated stream applies each entry at the time
        its leader gave it, so that every replica decides and stores alike
        (docs/REPLICATION.md, "Applying")."""
        self._now = ts
        try:
            yield
        finally:
            self._now = None

    def state(self, deleted_details: bool = False) -> StreamState:
        return self.store.state(deleted_details)

    def replace_state(
        self,
        store: StreamStore,
        dedupe: Iterable[tuple[str, int, int]],
        lseq: int,
        lmsgid: str,
        markers: Iterable[int],
    ) -> StreamStore:
        """Make ``store`` this stream's, with the duplicate window ``dedupe`` ((id, seq, ts
        ns) in arrival order), ``lseq``/``lmsgid`` and the subject delete ``markers``, in one
        synchronous step (a replica installing a snapshot, docs/REPLICATION.md, "Catching
        up"). Returns the old store, unhooked, for the caller to close or delete.

        The window comes whole, so no load from the store is pending after this: a load or a
        marker scan still walking the old store is cancelled, and messages held for the load
        are dropped (their publishers get no answer and publish again, as when a leader
        changes). Expiry is armed again from the new store (a replica's timer only proposes,
        and only while it leads)."""
        old = self.store
        for task in list(self._tasks):
            task.cancel()  # walks over the old store: what they would find came with the state
        self._held = None
        self._scanning = False
        store.on_remove = self._removed
        store.on_failure = self._store_failed
        self.store = store
        self.lseq = lseq
        self.lmsgid = lmsgid
        window = publish.Dedupe(self.config.duplicate_window)
        window.load_older(OrderedDict((k, (seq, ts)) for k, seq, ts in dedupe))
        self.dedupe = window
        self._dedupe_loaded = True
        self.markers = set(markers)
        old.on_remove = None
        old.on_failure = None
        self._cancel_expiry()
        self._arm_expiry(force=True)
        return old

    def restore_state(
        self, dedupe: Iterable[tuple[str, int, int]], lseq: int, lmsgid: str, markers: Iterable[int]
    ) -> None:
        """A file replica restarted from its checkpoint (:mod:`.groupcheckpoint`), before
        :meth:`start`: the duplicate window as its duplicate log has it ((id, seq, ts) in the
        order recorded, each recorded as the publish did, so the window drops what the
        others' drop), ``lseq``/``lmsgid`` and the markers. The window is then whole: nothing
        is loaded from the store by this server's clock."""
        window = publish.Dedupe(self.config.duplicate_window)
        for msg_id, seq, ts in dedupe:
            window.record(msg_id, seq, ts)
        self.dedupe = window
        self._dedupe_loaded = True
        self.lseq = lseq
        self.lmsgid = lmsgid
        self.markers = set(markers)

    def purge(self, subject: str = "", seq: int = 0, keep: int = 0) -> int:
        """STREAM.PURGE (see :meth:`_purge`), then let the consumers catch up with it."""
        purged = self._purge(subject, seq, keep)
        for consumer in self.consumers.values():
            consumer.purged()
        return purged

    def _purge(self, subject: str = "", seq: int = 0, keep: int = 0) -> int:
        """STREAM.PURGE: everything, a subject, below ``seq``, or all but the newest ``keep``.

        "Keep the newest N of the whole stream" is resolved here to a sequence floor that
        counts live messages, as nats-server's file store does: the store's own shortcut
        (``last - keep + 1``) would count deleted sequences in the gaps too.
        """
        store = self.store
        if keep > 0 and seq == 0 and subject in ("", ">"):
            state = store.state()
            if keep >= state.msgs:
                return 0
            if state.num_deleted:
                lo, hi = state.first_seq, state.last_seq
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if store.num_pending(">", mid) >= keep:
                        lo = mid
                    else:
                        hi = mid - 1
                return store.purge("", lo, 0)
        return store.purge(subject, seq, keep)

    def stored_bytes(self) -> int:
        return self.store.state().bytes

    def has_interest(self, subject: str) -> bool:
        return any(not f or subject_matches(f, subject) for f in self.interest_filters)

    def skip(self, msg_id: str) -> int:
        """Consume a sequence without storing (interest retention, nobody interested)."""
        seq = self.lseq + 1
        ts = self.clock()
        self.store.skip_msgs(seq, 1, ts)
        self.lseq = seq
        self.lmsgid = msg_id
        if msg_id:
            self.dedupe.record(msg_id, seq, ts)
            if self.ids_recorded is not None:
                self.ids_recorded.append((msg_id, seq, ts))
        return seq

    def stored(self, seq: int, ts: int, msg_id: str, ttl: int) -> None:
        """Bookkeeping after a successful append (called by the publish path)."""
        self.lseq = seq
        self.lmsgid = msg_id
        if msg_id:
            self.dedupe.record(msg_id, seq, ts)
            if self.ids_recorded is not None:
                self.ids_recorded.append((msg_id, seq, ts))
        if ttl > 0 or (self._expiry is None and self.config.max_age > 0):
            self._arm_expiry()

    async def _walk(self, start: int) -> AsyncIterator[list[StoredMsg]]:
        """The stored messages from ``start`` on, in batches, yielding to the loop once a pass
        has used its slice: a walk over a stream of a million messages takes seconds.

        Messages stored or removed meanwhile are seen or not as the walk reaches them. Ends
        quietly when the store closes under it (the stream went away)."""
        budget = PassBudget()
        seq = start
        while True:
            try:
                batch = self.store.load_next_batch(">", seq, WALK_BATCH, WALK_BYTES)
            except StoreError:
                return
            if not batch:
                return
            yield batch
            seq = batch[-1].seq + 1
            await budget.tick()

    def dedupe_loaded(self) -> bool:
        """Whether the message ids of the duplicate window are loaded."""
        return self._dedupe_loaded

    def holding(self) -> bool:
        """Whether messages wait for the dedupe window (every new one must wait behind them)."""
        return self._held is not None

    def hold(self, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        """Keep a message (and every one after it) until the dedupe window is loaded.

        The window is loaded on the first message that needs it (one with ``Nats-Msg-Id`` or
        ``Nats-Expected-Last-Msg-Id``), not at start-up, because it reads every message of the
        window back from the store: seconds for a large window, so it runs in slices
        (:meth:`_walk`). The stream's later messages wait behind the first one, so they are
        stored in the order they arrived, then all are processed as if they had just come in.
        """
        if self._held is None:
            self._held = deque()
            self._spawn(self._load_then_release())
        self._held.append((subject, reply, hdr, payload))

    async def _load_then_release(self) -> None:
        try:
            await self._load_dedupe()
        except Exception:
            log.exception("JetStream failed to load the duplicate window of '%s'", self.name)
        self._dedupe_loaded = True
        budget = PassBudget()
        held = self._held
        while held:
            subject, reply, hdr, payload = held.popleft()
            publish.process_now(self, subject, reply, hdr, payload)
            await budget.tick()
        self._held = None

    async def _load_dedupe(self) -> None:
        """Recover message ids inside the duplicate window, and the last message's id."""
        store = self.store
        last = store.load_last(">")
        if last is not None and last.seq == self.lseq and last.hdr:
            self.lmsgid = headers.get(last.hdr, publish.MSG_ID) or ""
        window = self.config.duplicate_window
        if window <= 0 or last is None:
            return
        loaded: OrderedDict[str, tuple[int, int]] = OrderedDict()
        async for batch in self._walk(store.seq_from_time(time.time_ns() - window)):
            for msg in batch:
                if msg.hdr:
                    msg_id = headers.get(msg.hdr, publish.MSG_ID)
                    if msg_id:
                        loaded[msg_id] = (msg.seq, msg.ts)
                        loaded.move_to_end(msg_id)
        # Ids recorded meanwhile (a mirror or source storing) are newer: they stay last.
        self.dedupe.load_older(loaded)

    def _scan_markers(self) -> None:
        """Find stored delete markers, so their own expiry does not mint new markers.

        A walk over the whole stream in slices; expiry (what would mint markers) waits for it.
        """
        self._cancel_expiry()
        if not self._scanning:
            self._scanning = True
            self._spawn(self._scan_then_expire())

    async def _scan_then_expire(self) -> None:
        try:
            async for batch in self._walk(0):
                for msg in batch:
                    if msg.hdr and publish.MARKER_REASON.encode() in msg.hdr:
                        self.markers.add(msg.seq)
        finally:
            self._scanning = False
        if self.active:
            self._expire()

    # --- consumers -----------------------------------------------------------------------

    def signal_consumers(self, subject: str) -> None:
        """A message was stored on ``subject``: wake the waiting consumers that want it."""
        for consumer in self.hungry:
            consumer.on_stored(subject)

    def consumer_done(self, seq: int, consumer: Any) -> None:
        """Interest/workqueue retention: ``consumer`` acked ``seq``; drop it once nobody needs it.

        Workqueue streams drop it on the ack; interest streams once no other consumer whose
        filter matches still has it ahead of it or awaiting an ack.
        """
        if self.group is not None:
            return  # a replicated stream's replicas decide it as they apply the consumer's state
        if self.config.retention == "workqueue":
            self.store.remove_msg(seq)
            return
        msg = self.store.load_msg(seq)
        if msg is None:
            return
        for other in self.consumers.values():
            if other is not consumer and other.needs(seq, msg.subject):
                return
        self.store.remove_msg(seq)

    async def consumer_removed(self, consumer: Any) -> None:
        """Interest retention: messages only the removed consumer still needed go away.

        Those are the ones it had pending and everything from its cursor on: a walk in slices
        (:meth:`_walk`), each message checked against the consumers there are at that moment.
        """
        if self.config.retention != "interest":
            return
        if self.group is not None:
            await self._drop_unneeded_replicated(consumer)
            return
        budget = PassBudget()
        try:
            for seq in list(consumer.pending):
                msg = self.store.load_msg(seq)
                if msg is not None:
                    self._drop_unwanted(msg, consumer)
                await budget.tick()
            async for batch in self._walk(consumer.sseq):
                for msg in batch:
                    self._drop_unwanted(msg, consumer)
        except StoreError:
            return  # the stream closed or its store failed meanwhile: nothing left to free

    async def _drop_unneeded_replicated(self, consumer: Any) -> None:
        """:meth:`consumer_removed` of a replicated stream, on its leader: the candidates go
        into the log in batches (:class:`groupops.DropUnneeded`), where every replica removes
        those no consumer needs at that entry. Stops when this replica stops leading: the
        messages not yet put to the log stay stored (until limits or a purge remove them)."""
        group = self.group
        batch: list[int] = sorted(consumer.pending)
        try:
            async for msgs in self._walk(consumer.sseq):
                batch.extend(msg.seq for msg in msgs)
                if len(batch) >= DROP_BATCH:
                    await group.submit(groupops.DropUnneeded(batch))
                    batch = []
            if batch:
                await group.submit(groupops.DropUnneeded(batch))
        except (StoreError, errors.ApiErrorException) as exc:
            log.info("stream %r: messages no consumer needs left stored: %s", self.name, exc)

    def _drop_unwanted(self, msg: StoredMsg, removed: Any) -> None:
        if not removed.wants(msg.subject):
            return
        if not any(c.needs(msg.seq, msg.subject) for c in self.consumers.values()):
            self.store.remove_msg(msg.seq)

    # --- replies -------------------------------------------------------------------------

    def answer(self, reply: str, outcome: publish.Stored | ApiError) -> None:
        """Answer a publish with what :func:`.publish.admit` decided: the ack (after the group
        commit when acks wait for it), the duplicate's original sequence, or the error."""
        if not reply:
            return
        if type(outcome) is publish.Stored:
            if outcome.duplicate:
                self.reply_duplicate(reply, outcome.seq)
            else:
                self.reply_ok(reply, outcome.seq)
        else:
            assert isinstance(outcome, ApiError)
            self.reply_error(reply, outcome)

    def reply_error(self, reply: str, error: ApiError) -> None:
        if reply:
            body = dumps({"error": error.to_dict(), "stream": self.name, "seq": 0})
            self.client.publish(reply, body)

    def reply_ok(self, reply: str, seq: int) -> None:
        if reply:
            self._queue_ack(reply, self._ack_prefix + str(seq).encode() + b"}")

    def reply_duplicate(self, reply: str, seq: int) -> None:
        if reply:
            self._queue_ack(reply, self._ack_prefix + str(seq).encode() + b',"duplicate": true}')

    def _queue_ack(self, reply: str, body: bytes) -> None:
        # A replica's change is durable in its group's log before it is applied: no store sync.
        if not self._durable_acks or self.group is not None:
            self.client.publish(reply, body)
            return
        self._wait_for_commit((reply, body))

    async def durable(self) -> None:
        """Return once every change made to the store so far (a delete, a purge) is as
        durable as a publish ack: it shares the acks' group commit. Raises ``StoreError``."""
        if self.group is not None:
            return  # a replica's changes are durable in its group's log (a quorum's disks)
        if not self._durable_acks:
            await self.store.durable()  # interval: reaches the OS at least; memory: nothing
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._wait_for_commit(waiter)
        await waiter

    def _wait_for_commit(self, item: tuple[str, bytes] | asyncio.Future[None]) -> None:
        """Queue an ack (or a :meth:`durable` waiter) behind the next group commit."""
        self._pending.append(item)
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_acks())

    async def _flush_acks(self) -> None:
        """Group commit: one ``durable()`` at a time; acks queued meanwhile share the next."""
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                failure: Exception | None = None
                try:
                    await self.store.durable()
                except Exception as exc:
                    failure = exc
                    log.error("JetStream failed to sync stream '%s': %s", self.name, exc)
                failed = b""
                if failure is not None:
                    error = errors.STREAM_STORE_FAILED.format(err=str(failure))
                    failed = dumps({"error": error.to_dict(), "stream": self.name, "seq": 0})
                for item in batch:
                    if isinstance(item, asyncio.Future):
                        if item.done():
                            continue
                        if failure is None:
                            item.set_result(None)
                        else:
                            item.set_exception(failure)
                    else:
                        self.client.publish(item[0], failed or item[1])
        finally:
            self._flusher = None

    def _store_failed(self, exc: StoreFailed) -> None:
        """The store stopped after a failed write or fsync: say so, loudly. It refuses every
        write until the stream is reopened from disk (a server restart)."""
        log.error("JetStream stream '%s' is read-only: %s", self.name, exc)
        server = self.client.server
        body = advisory_body(
            "server_out_of_space",
            self.domain or "",
            server=server.name,
            server_id=server.server_id,
            stream=self.name,
        )
        self.client.publish("$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE", body)

    # --- republish -----------------------------------------------------------------------

    def republish(
        self, subject: str, hdr: bytes, payload: bytes, seq: int, ts: int, last_seq: int
    ) -> None:
        assert self.republish_transform is not None and self.config.republish is not None
        dest = self.republish_transform.match(subject)
        if dest is None:
            return
        pairs = [
            ("Nats-Stream", self.name),
            ("Nats-Subject", subject),
            ("Nats-Sequence", str(seq)),
            ("Nats-Time-Stamp", rfc3339(ts)),
            ("Nats-Last-Sequence", str(last_seq)),
        ]
        body = payload
        if self.config.republish.headers_only:
            pairs.append(("Nats-Msg-Size", str(len(payload))))
            body = b""
        self.client.publish(dest, body, hdr=with_headers(hdr, pairs))

    # --- expiry and markers --------------------------------------------------------------

    def _arm_expiry(self, force: bool = False) -> None:
        if not self.active or self._scanning:
            return
        deadline = self.store.next_expiry()
        if deadline is None:
            self._cancel_expiry()
            return
        if self._expiry is not None and not force and deadline >= self._expiry_at:
            return
        self._cancel_expiry()
        delay = max((deadline - time.time_ns()) / 1e9, 0.0)
        self._expiry_at = deadline
        self._expiry = asyncio.get_running_loop().call_later(delay, self._expire)

    def _cancel_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
            self._expiry_at = 0

    def _expire(self) -> None:
        self._expiry = None
        self._expiry_at = 0
        if self.group is not None:
            # Proposed by the leader; the timer is armed again once the expiry is applied
            # (or this replica leads again).
            self.group.expire_due()
            return
        try:
            self.store.expire()
        except Exception:
            log.exception("JetStream expiry failed on stream '%s'", self.name)
        self._arm_expiry(force=True)

    def _removed(self, seq: int, subject: str) -> None:
        """Store hook after a limit removal: maybe leave a subject delete marker."""
        was_marker = seq in self.markers
        self.markers.discard(seq)
        ttl = self.config.subject_delete_marker_ttl
        if ttl <= 0 or was_marker or not self.active:
            return
        if self.store.removal_reason not in ("max_age", "ttl"):
            return
        if self.store.load_last(subject) is not None:
            return
        marker = with_headers(
            None,
            [
                (publish.MARKER_REASON, "MaxAge"),
                (publish.MSG_TTL, go_duration(ttl // publish.SECOND * publish.SECOND)),
                (publish.ROLLUP, "sub"),
            ],
        )
        publish.process(self, subject, "", marker, b"")
