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
    next_at = 0.0
    for seq, pend in list(c.pending.items()):
        if seq in c.rdq:
            continue
        if pend.deadline <= now:
            c.rdq.add(seq)
        elif not next_at or pend.deadline < next_at:
            next_at = pend.deadline
    for req in list(c.waiting.requests):
        if req.expires_at and req.expires_at <= now:
            c.waiting.remove(req)
            c._status(req.reply, pending_status(408, "Request Timeout", req))
        else:
            if req.expires_at and (not next_at or req.expires_at < next_at):
                next_at = req.expires_at
            if req.heartbeat:
                due = req.last_sent + req.heartbeat
                if due <= now:
                    c._status(
                        req.reply, status_hdr(100, "Idle Heartbeat", c.last_delivered_headers())
                    )
                    req.last_sent = now
                    due = now + req.heartbeat
                if not next_at or due < next_at:
                    next_at = due
    if c.paused_until and not c._paused():
        c.paused_until = 0
    elif c.paused_until:
        resume = time.monotonic() + (c.paused_until - time.time_ns()) / 1e9
        next_at = min(next_at, resume) if next_at else resume
    if next_at and next_at != float("inf"):
        c._arm_timer(next_at)
    c.kick()
