"""Push delivery: messages go to ``deliver_subject`` while somebody listens there.

* **Binding.** nats-py creates a push consumer before it subscribes to the deliver subject,
  so an unbound consumer asks the server to tell it when a matching subscription appears
  (:meth:`Server.watch_interest`) and starts delivering at once (``push_bound`` in
  CONSUMER.INFO). Losing interest is noticed on the next delivery pass.
* **Flow control.** With ``flow_control``, delivery is limited by a window of bytes sent but
  not yet confirmed, as nats-server's is: it starts at :data:`FC_WINDOW_LIMIT` / 16, a
  ``100 FlowControl Request`` (reply ``$JS.FC.<stream>.<consumer>.<n>``) goes out once half
  the window is used, delivery stalls when the window is full, and each answer releases the
  bytes sent before its request and doubles the window up to :data:`FC_WINDOW_LIMIT`. A
  window counted in bytes keeps a fast client busy (a message-count window of a few hundred
  left nats-py idle between answers) while a client that stops answering gets at most the
  window.
* **Idle heartbeats.** Every ``idle_heartbeat`` without a delivery: ``100 Idle Heartbeat``
  with ``Nats-Last-Consumer`` / ``Nats-Last-Stream`` (and ``Nats-Consumer-Stalled`` naming the
  flow-control reply a stalled consumer waits for), which ordered consumers use to spot gaps.
* **Replay original** keeps the stored time gaps between messages; ``rate_limit_bps`` spaces
  messages so the bits sent (subject, headers, payload) stay under the rate.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from headwater.server.protocol import headers
from headwater.server.subscription import Subscription

from .config import cfg_get

if TYPE_CHECKING:
    from .consumer import Consumer

__all__ = ["PushDelivery"]

FC_WINDOW_LIMIT = 32 * 1024 * 1024
"""The largest flow-control window in bytes (nats-server's ``JsFlowControlMaxPending``)."""
PASS_BUDGET = 4096
"""Messages one delivery pass sends before it yields to the event loop (the next pass is
scheduled at once): a full window of small messages is some 300,000 of them, seconds of work
that would otherwise hold up API requests and every other client (a mirror catching up)."""


class PushDelivery:
    def __init__(self, consumer: Consumer) -> None:
        self.c = consumer
        cfg = consumer.config
        self.subject: str = cfg_get(cfg, "deliver_subject", "")
        self.flow_control = bool(cfg_get(cfg, "flow_control", False))
        self.heartbeat = int(cfg_get(cfg, "idle_heartbeat", 0)) / 1e9
        self.replay_original = cfg_get(cfg, "replay_policy", "instant") == "original"
        self.rate_bps = int(cfg_get(cfg, "rate_limit_bps", 0))
        max_size = consumer.stream.config.max_msg_size
        self._burst = float(
            max_size if max_size > 0 else consumer.client.server.settings.max_payload
        )
        self._tokens = self._burst
        self._rate_at = time.monotonic()
        self.bound = False
        self.last_sent = time.monotonic()
        self._fc_prefix = f"$JS.FC.{consumer.stream.name}.{consumer.name}."
        self._fc_n = 0
        self._fc_reply = ""
        """The unanswered flow-control request's reply subject, "" when none."""
        self._fc_size = 0
        """Bytes the unanswered request releases when answered."""
        self._window = FC_WINDOW_LIMIT // 16
        self._in_flight = 0
        """Bytes delivered and not yet released by a flow-control answer."""
        self._fc_sub: Subscription | None = None
        self._watching = False
        self._hb: asyncio.TimerHandle | None = None
        self._replay: asyncio.TimerHandle | None = None
        self._last_ts = 0
        self._last_at = 0.0
        self.stopped = False

    def start(self) -> None:
        if self.flow_control:
            self._fc_sub = self.c.client.subscribe(self._fc_prefix + "*", self._on_fc)
        if self.heartbeat > 0:
            self._arm_heartbeat()
        self.pump()

    def stop(self) -> None:
        self.stopped = True
        self._unwatch()
        for handle in (self._hb, self._replay):
            if handle is not None:
                handle.cancel()
        if self._fc_sub is not None:
            self.c.client.unsubscribe(self._fc_sub)
            self._fc_sub = None

    def has_interest(self) -> bool:
        return bool(self.c.client.server.sublist.match(self.subject))

    def _watch(self) -> None:
        if not self._watching and not self.stopped:
            self._watching = True
            self.c.client.server.watch_interest(self.subject, self._on_interest)

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            self.c.client.server.unwatch_interest(self.subject, self._on_interest)

    def _on_interest(self) -> None:
        # Through the consumer's pass, not :meth:`pump` directly: that pass is what puts a
        # newly bound consumer among the stream's ``hungry`` ones, woken by new messages. An
        # ack-none consumer (ordered consumers, KV watchers) has no acks to wake it otherwise.
        self.c.kick()

    def pump(self) -> None:
        """Deliver what is available while bound, within max_ack_pending and flow control."""
        c = self.c
        if self.stopped:
            return
        self.bound = self.has_interest()
        if not self.bound:
            self._watch()
            return
        self._unwatch()
        c.last_active = time.time_ns()
        if self._replay is not None:
            return
        sent = False
        budget = PASS_BUDGET
        flow_control = self.flow_control
        while c.can_send() and not (flow_control and self._in_flight > self._window):
            if c.paused() and not c.redelivery_due():
                break
            item = c.next_message()
            if item is None:
                break
            msg, dc = item
            if self.replay_original and self._last_ts and dc == 1:
                wait = (msg.ts - self._last_ts) / 1e9 - (time.monotonic() - self._last_at)
                if wait > 0:
                    c.put_back(msg.seq, dc)
                    self._replay = asyncio.get_running_loop().call_later(wait, self._on_replay)
                    break
            if self.rate_bps:
                wait = self._rate_wait(len(msg.subject) + len(msg.hdr) + len(msg.data))
                if wait > 0:
                    c.put_back(msg.seq, dc)
                    loop = asyncio.get_running_loop()
                    self._replay = loop.call_later(wait, self._on_rate)
                    break
            c.deliver(self.subject, msg, dc)
            sent = True
            self._last_ts, self._last_at = msg.ts, time.monotonic()
            if flow_control:
                self._count_in_flight(len(msg.subject) + len(msg.hdr) + len(msg.data) + 64)
            budget -= 1
            if not budget:
                c.kick()
                break
        if sent:
            self.last_sent = time.monotonic()
            if c.on_change is not None:
                c.on_change(c)

    def _rate_wait(self, size: int) -> float:
        """Token bucket in bytes (``rate_limit_bps`` / 8 per second). The bucket holds the
        stream's ``max_msg_size`` (else the server's max payload), as nats-server's limiter
        bursts; returns how long to wait before ``size`` bytes may go, 0 to send now."""
        now = time.monotonic()
        per_second = self.rate_bps / 8
        self._tokens = min(self._burst, self._tokens + (now - self._rate_at) * per_second)
        self._rate_at = now
        need = min(size, self._burst)
        if self._tokens >= need:
            self._tokens -= need
            return 0.0
        return (need - self._tokens) / per_second

    def _on_rate(self) -> None:
        self._replay = None
        self.pump()

    def _on_replay(self) -> None:
        self._replay = None
        self._last_at = 0.0
        self._last_ts = 0
        self.pump()

    def _count_in_flight(self, size: int) -> None:
        """Account ``size`` more bytes (the 64 stand for the ack reply subject); ask for an
        answer once half the window is used."""
        self._in_flight += size
        if not self._fc_reply:
            if self._in_flight > self._window // 2:
                self._send_fc()
        elif self._in_flight - self._fc_size >= self._window:
            # Past a full window beyond the request: its answer releases these bytes too.
            self._fc_size += size

    def _send_fc(self) -> None:
        self._fc_n += 1
        self._fc_reply = f"{self._fc_prefix}{self._fc_n}"
        self._fc_size = self._in_flight
        self.c.client.publish(
            self.subject,
            b"",
            reply=self._fc_reply,
            hdr=headers.status(100, "FlowControl Request"),
        )

    def _on_fc(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        if not self._fc_reply or subject != self._fc_reply:
            return  # a stale or duplicate answer
        self._window = min(self._window * 2, FC_WINDOW_LIMIT)
        self._in_flight = max(self._in_flight - self._fc_size, 0)
        self._fc_reply, self._fc_size = "", 0
        self.c.kick()

    def _arm_heartbeat(self) -> None:
        if not self.stopped:
            self._hb = asyncio.get_running_loop().call_later(self.heartbeat, self._on_heartbeat)

    def _on_heartbeat(self) -> None:
        self._hb = None
        if self.stopped:
            return
        if time.monotonic() - self.last_sent >= self.heartbeat * 0.95 and self.has_interest():
            extra = self.c.last_delivered_headers()
            if self._fc_reply:
                extra["Nats-Consumer-Stalled"] = self._fc_reply
            self.c.client.publish(
                self.subject, b"", hdr=headers.status(100, "Idle Heartbeat", extra)
            )
            self.last_sent = time.monotonic()
        self._arm_heartbeat()
