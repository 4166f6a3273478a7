"""A subscription: what the sublist indexes and what routing delivers to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable


class Receiver(Protocol):
    """Anything that can receive routed messages: a socket client or an internal client."""

    cid: int
    echo: bool
    kind: str
    """``client`` (a socket client), ``internal`` (a service) or ``route`` (another server)."""

    def deliver(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None: ...

    def deliver_batch(
        self, sub: Subscription, subject: str, payloads: list[bytes], total: int
    ) -> None: ...


class Subscription:
    """One SUB. Hashes by identity, so the sublist can hold two equal-looking subscriptions."""

    __slots__ = (
        "callback",
        "client",
        "delivered",
        "local",
        "max_msgs",
        "msg_heads",
        "queue",
        "sid",
        "sid_b",
        "subject",
    )

    #: Cached ``MSG <subject> <sid> `` prefixes kept per subscription (see ``msg_heads``).
    MAX_MSG_HEADS = 64

    def __init__(
        self,
        client: Receiver,
        subject: str,
        queue: str | None,
        sid: str,
        callback: Callable[..., None] | None = None,
    ) -> None:
        self.client = client
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.sid_b = sid.encode()
        self.max_msgs = 0  # auto-unsubscribe after this many deliveries; 0 means never
        self.delivered = 0
        self.callback = callback
        self.local = False
        """Kept from other servers: a service's subscription that answers this server's
        clients only (the JetStream API; see cluster/interest.py)."""
        # Encoded "MSG <subject> <sid> " per delivered subject: a subscriber usually sees the
        # same few subjects, and formatting the line is a large part of a delivery's cost.
        self.msg_heads: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"Subscription(cid={self.client.cid}, subject={self.subject!r}, sid={self.sid!r})"
