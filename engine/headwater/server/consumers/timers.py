"""What a consumer's single timer does when it fires.

One timer per consumer, armed at the earliest of: a pending message's ack deadline, a pull
request's expiry or heartbeat, the end of a pause. When it fires, everything due is handled
in one pass and the timer is re-armed at the next deadline.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .pull import pending_status, status_hdr

if TYPE_CHECKING:
    from .consumer import Consumer

__all__ = ["on_timer"]


def on_timer(c: Consumer) -> None:
    """Queue due redeliveries (``max_deliver`` is checked when they would go out), expire
    and heartbeat pull requests, end a pause; then re-arm and run a delivery pass."""
    now = time.monotonic()
    next_at = c.ack_state.queue_due(now)
    waiting = c.waiting
    for req in waiting.expire(now):
        c.send_status(req.reply, pending_status(408, "Request Timeout", req))
    for req in waiting.heartbeats_due(now):
        c.send_status(req.reply, status_hdr(100, "Idle Heartbeat", c.last_delivered_headers()))
    due = waiting.next_deadline()
    if due and (not next_at or due < next_at):
        next_at = due
    if c.paused_until and not c.paused():
        c.paused_until = 0
    elif c.paused_until:
        resume = time.monotonic() + (c.paused_until - time.time_ns()) / 1e9
        next_at = min(next_at, resume) if next_at else resume
    if next_at and next_at != float("inf"):
        c.arm_timer(next_at)
    c.kick()
