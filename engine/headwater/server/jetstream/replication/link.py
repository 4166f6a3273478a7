"""One internal consumer on an origin stream, kept alive: the transport of mirrors and sources.

An :class:`OriginLink` does what nats-server's ``setupMirrorConsumer`` /
``trySetupSourceConsumer`` and their message loops do, minus the storing (its owner, a
mirror or a source, does that):

* when the origin is a limits stream of this server, it first copies what the origin holds
  straight from its store (:mod:`.catchup`), then goes on as below from where that ended;
* it creates an ack-none, flow-controlled push consumer on the origin **through the JetStream
  API subject** (under ``external.api`` when set), so an origin behind another prefix is
  reached the same way as a local one;
* it answers flow control requests (deferred by one loop turn, so a long catch-up yields to
  other work every two flow-control windows instead of running in one go) and reads idle
  heartbeats: a heartbeat naming another last consumer sequence than the owner saw means a
  message was lost, and the consumer is recreated from the owner's position;
* with neither messages nor heartbeats for :data:`STALL_S`, the consumer (or the origin) is
  gone: recreate it;
* failed creations (origin missing, no responders, timeout) are retried with the
  reference's backoff: at least :data:`RETRY_THRESHOLD_S` between requests, plus 10s per
  consecutive failure up to 2 minutes, plus 100-200ms of jitter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from headwater.server.jetstream.streamconfig import StreamSource
from headwater.server.jetstream.wire import dumps
from headwater.server.protocol import headers
from headwater.server.subscription import Subscription

from . import wire
from .catchup import LocalOrigin, copy_in_place, readable_in_place

if TYPE_CHECKING:
    from headwater.server.connections.internal import InternalClient
    from headwater.server.jetstream.stream import Stream
    from headwater.server.store.base import StoredMsg

__all__ = ["LinkOwner", "OriginLink"]

log = logging.getLogger("headwater.jetstream")

RETRY_THRESHOLD_S = 2.0
RETRY_BASE_S = 5.0
RETRY_MAX_S = 120.0
STALL_S = 10.0
"""No delivery and no heartbeat for this long: the internal consumer is gone."""
HEALTH_CHECK_S = 2.0
"""How often the stall is looked for (the reference's ticker runs every 10s, so it notices
a stall after 10 to 20s; checking more often bounds that to 10 to 12s)."""
RESPONSE_TIMEOUT_S = 30.0
LAST_CONSUMER = "Nats-Last-Consumer"
CONSUMER_STALLED = "Nats-Consumer-Stalled"


def retry_backoff(fails: int) -> float:
    """nats-server's ``calculateRetryBackoff``: 10s per failure, at most 2 minutes."""
    return min(RETRY_BASE_S * fails * 2, RETRY_MAX_S)


class LinkOwner(Protocol):
    """What a mirror or a source gives its link."""

    dseq: int
    """Last consumer sequence processed (idle heartbeats are checked against it)."""

    def start_position(self) -> tuple[int, str | None]:
        """(start sequence, start time) for a new consumer; (0, None) means from the start."""
        ...

    def reset_tracking(self) -> None:
        """A new consumer is being created: its consumer sequences start again at 1."""
        ...

    def on_message(self, subject: str, hdr: bytes, payload: bytes, info: wire.AckInfo) -> bool:
        """Process one delivery; False asks the link to recreate the consumer."""
        ...

    def on_copied(self, batch: list[StoredMsg], after: int) -> bool:
        """Process messages read from a local origin's store (see :mod:`.catchup`), as
        deliveries of them would be; ``after`` origin messages follow. False stops the copy."""
        ...


class OriginLink:
    def __init__(
        self,
        client: InternalClient,
        source: StreamSource,
        kind: str,
        owner: LinkOwner,
        local: LocalOrigin | None = None,
    ) -> None:
        self.client = client
        self.local = local
        """Finds an origin on this server, for the in-place catch-up."""
        self.source = source
        self.kind = kind
        """``M`` (mirror) or ``S`` (source): the deliver subject's token."""
        self.owner = owner
        self.cname = ""
        """Name of the current consumer (the requested one until the origin answers)."""
        self.error: dict[str, Any] | None = None
        """The API error of the last failed creation (STREAM.INFO reports it)."""
        self.last_ns = 0
        """Wall-clock time of the last delivery or heartbeat; 0 when never."""
        self.fails = 0
        self.closed = False
        self._alive_ns = 0
        """Last delivery, heartbeat or creation request: what stall detection measures."""
        self._requested = 0.0
        self._deliver_sub: Subscription | None = None
        self._reply_sub: Subscription | None = None
        self._setup: asyncio.TimerHandle | None = None
        self._timeout: asyncio.TimerHandle | None = None
        self._health: asyncio.TimerHandle | None = None
        self._created = False
        self._catchup: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Create the consumer shortly (the API may not be listening yet at start-up)."""
        self._schedule(0.0)

    def close(self) -> None:
        self.closed = True
        self._cancel_consumer()
        for handle in (self._setup, self._health):
            if handle is not None:
                handle.cancel()
        self._setup = self._health = None

    def retry(self) -> None:
        """Recreate the consumer from the owner's position, throttled like the reference."""
        if self.closed:
            return
        self._cancel_consumer()
        since = time.monotonic() - self._requested
        self._schedule(max(RETRY_THRESHOLD_S - since, 0.0) + retry_backoff(self.fails))

    def _schedule(self, delay: float) -> None:
        if self._setup is not None or self.closed:
            return
        jitter = 0.1 + random.random() * 0.1
        self._setup = asyncio.get_running_loop().call_later(delay + jitter, self._create)

    def _fail(self) -> None:
        self.fails += 1
        self.retry()

    # --- consumer creation ---------------------------------------------------------------

    def _create(self) -> None:
        self._setup = None
        if self.closed:
            return
        self._cancel_consumer()
        origin = self.local(self.source.name) if self.local is not None else None
        if origin is not None and readable_in_place(self.source, origin):
            self._catchup = asyncio.get_running_loop().create_task(self._copy(origin))
            return
        self._create_consumer()

    async def _copy(self, origin: Stream) -> None:
        """Catch up in place, then follow the origin through a consumer from there."""
        try:
            await copy_in_place(origin, self.source, self.owner, self._copied)
        except Exception:
            # The consumer path is always correct: fall back to it on anything unexpected.
            log.exception("in-place catch-up from '%s' failed", self.source.name)
        self._catchup = None
        if not self.closed:
            self._create_consumer()

    def _copied(self) -> None:
        self.error = None
        self.last_ns = self._alive_ns = time.time_ns()

    def _create_consumer(self) -> None:
        self._requested = time.monotonic()
        self._alive_ns = time.time_ns()
        self.owner.reset_tracking()
        seq, start_time = self.owner.start_position()
        prefix = "JS_MIRROR_" if self.kind == "M" else "JS_SRC_"
        self.cname = prefix + wire.random_token()
        deliver = wire.deliver_subject(self.source, self.kind)
        filters = wire.filters_of(self.source)
        body = wire.consumer_request(
            self.source.name, self.cname, deliver, filters, start_seq=seq, start_time=start_time
        )
        # Listen before asking: the origin starts delivering as it creates the consumer,
        # before its reply to the request goes out.
        self._deliver_sub = self.client.subscribe(deliver, self._on_delivery)
        inbox = f"$JSC.R.{wire.random_token()}"
        self._reply_sub = self.client.subscribe(inbox, self._on_response)
        loop = asyncio.get_running_loop()
        self._timeout = loop.call_later(RESPONSE_TIMEOUT_S, self._on_timeout)
        subject = wire.create_subject(self.source, self.cname, filters)
        if not self.client.publish(subject, dumps(body), reply=inbox):
            # Nobody serves that API (yet): like a timeout, without waiting for one.
            self._fail()
            return
        self._arm_health()

    def _on_response(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        self._drop_request()
        try:
            body = orjson.loads(payload)
        except orjson.JSONDecodeError:
            body = {}
        error = body.get("error") if isinstance(body, dict) else None
        if error or not isinstance(body, dict) or "name" not in body:
            self.error = error if isinstance(error, dict) else None
            log.warning(
                "JetStream error response for create %s consumer on '%s': %s",
                "mirror" if self.kind == "M" else "source",
                self.source.name,
                error,
            )
            self._fail()
            return
        self.error = None
        self.fails = 0
        self.cname = str(body["name"])
        self._created = True
        self.last_ns = time.time_ns()

    def _on_timeout(self) -> None:
        self._timeout = None
        self._drop_request()
        self._fail()

    def _drop_request(self) -> None:
        if self._reply_sub is not None:
            self.client.unsubscribe(self._reply_sub)
            self._reply_sub = None
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None

    def _cancel_consumer(self) -> None:
        """Stop listening to the current consumer and ask the origin to drop it.

        The reference only stops listening and lets the inactivity threshold remove the
        consumer; deleting it at once frees the origin sooner and costs one message.
        """
        self._drop_request()
        if self._catchup is not None:
            self._catchup.cancel()
            self._catchup = None
        if self._deliver_sub is not None:
            self.client.unsubscribe(self._deliver_sub)
            self._deliver_sub = None
            if self.cname:
                self.client.publish(wire.delete_subject(self.source, self.cname), b"")
        self._created = False

    # --- health --------------------------------------------------------------------------

    def _arm_health(self) -> None:
        if self._health is not None:
            self._health.cancel()
        self._health = asyncio.get_running_loop().call_later(HEALTH_CHECK_S, self._check_health)

    def _check_health(self) -> None:
        self._health = None
        if self.closed or self._setup is not None:
            return
        idle = (time.time_ns() - self._alive_ns) / 1e9
        if self._deliver_sub is None or idle > STALL_S:
            self.retry()
            return
        self._arm_health()

    # --- deliveries ----------------------------------------------------------------------

    def _on_delivery(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        if sub is not self._deliver_sub:
            return
        self.last_ns = self._alive_ns = time.time_ns()
        if wire.is_control(hdr, payload):
            self._on_control(reply, hdr)
            return
        info = wire.parse_ack_reply(reply)
        if info is None or info.consumer != self.cname:
            return
        if not self.owner.on_message(subject, hdr or b"", bytes(payload), info):
            self.retry()

    def _on_control(self, reply: str, hdr: bytes | None) -> None:
        if reply:
            self._answer_later(reply)
            return
        last = headers.get(hdr, LAST_CONSUMER)
        if last and last.isdigit() and int(last) > 0 and int(last) != self.owner.dseq:
            # The origin delivered something we never processed: start again from our
            # position rather than leave a hole.
            self.retry()
            return
        stalled = headers.get(hdr, CONSUMER_STALLED)
        if stalled:
            self._answer_later(stalled)

    def _answer_later(self, reply: str) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(RuntimeError):
            loop.call_soon(self._answer, reply)

    def _answer(self, reply: str) -> None:
        if not self.closed:
            self.client.publish(reply, b"")

    # --- reports -------------------------------------------------------------------------

    def active_ns(self) -> int:
        """Nanoseconds since the last sign of life of the consumer; -1 when there is none."""
        if not (self._created or self._catchup is not None) or not self.last_ns:
            return -1
        return max(time.time_ns() - self.last_ns, 0)
