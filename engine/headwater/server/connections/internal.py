"""An in-process client: how server-side services (JetStream) publish and subscribe.

It goes through the same sublist and routing as socket clients, so a JetStream API request
from nats-py reaches a handler with no special path, and replies reach the client's inbox
the normal way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from headwater.server.subscription import Subscription

if TYPE_CHECKING:
    from headwater.server.node import Server
    from headwater.server.routing.sublist import SublistResult

Handler = Callable[[Subscription, str, str, "bytes | None", bytes], None]


class InternalClient:
    """Handlers run synchronously inside routing; they must not block (schedule tasks instead)."""

    echo = True
    headers = True
    kind = "internal"

    def __init__(self, server: Server, name: str) -> None:
        self.server = server
        self.name = name
        self.cid = server.next_cid()
        self.subs: dict[str, Subscription] = {}
        """sid -> subscription, as on socket clients: a stream with 20,000 subjects removes
        its subscriptions in O(1) each, not by a scan of a list."""
        self._next_sid = 0
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0

    def subscribe(
        self, subject: str, handler: Handler, queue: str | None = None, local: bool = False
    ) -> Subscription:
        """``local``: other servers of a cluster are not told of it (see Subscription.local)."""
        self._next_sid += 1  # never reused: a sid names one subscription for the client's life
        sub = Subscription(self, subject, queue, str(self._next_sid), callback=handler)
        sub.local = local
        self.subs[sub.sid] = sub
        self.server.subscribe(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
            self.server.unsubscribe(sub)

    def publish(
        self,
        subject: str,
        payload: bytes,
        reply: str = "",
        hdr: bytes | None = None,
        shown_subject: str | None = None,
        targets: SublistResult | None = None,
    ) -> int:
        """Route a message; ``shown_subject`` is what receivers see, if not ``subject``;
        ``targets`` a kept match for ``subject`` (see :meth:`Server.route`)."""
        size = len(payload) + (len(hdr) if hdr is not None else 0)
        self.out_msgs += 1
        self.out_bytes += size
        return self.server.route(self, subject, reply, hdr, payload, size, shown_subject, targets)

    def deliver(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        self.in_msgs += 1
        self.in_bytes += len(payload) + (len(hdr) if hdr is not None else 0)
        sub.delivered += 1
        assert sub.callback is not None
        sub.callback(sub, subject, reply, hdr, payload)

    def deliver_batch(
        self, sub: Subscription, subject: str, payloads: list[bytes], total: int
    ) -> None:
        for payload in payloads:
            self.deliver(sub, subject, "", None, payload)

    def close(self) -> None:
        for sub in self.subs.values():
            self.server.unsubscribe(sub)
        self.subs.clear()
