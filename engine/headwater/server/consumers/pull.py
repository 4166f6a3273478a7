"""Pull requests (``CONSUMER.MSG.NEXT``): parsing, serving the waiting queue, status replies.

A request waits in the consumer's queue until its batch is filled, it expires, or (with
``no_wait``) the consumer has nothing more to give. The status messages sent to the
request's inbox carry nats-server's codes and texts, because clients branch on them. The
queue itself is :class:`.pullqueue.WaitQueue` (re-exported here with :class:`PullRequest`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson

from headwater.server.budget import PassBudget
from headwater.server.jetstream.streamconfig_validate import go_duration
from headwater.server.protocol import headers

from . import acks
from .config import cfg_get
from .pullqueue import PullRequest, WaitQueue

if TYPE_CHECKING:
    from .consumer import Consumer

__all__ = [
    "BadPullRequest",
    "PullRequest",
    "WaitQueue",
    "handle_request",
    "parse_pull_request",
    "pump",
    "status_hdr",
]

PENDING_MSGS = "Nats-Pending-Messages"
PENDING_BYTES = "Nats-Pending-Bytes"


class BadPullRequest(Exception):
    """A request the consumer refuses with a 4xx status (code, description)."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


def status_hdr(code: int, description: str, extra: dict[str, str] | None = None) -> bytes:
    return headers.status(code, description, extra)


def pending_status(code: int, description: str, req: PullRequest) -> bytes:
    """408/409 statuses that end a request tell what it still wanted (nats-server's headers)."""
    left_bytes = req.max_bytes - req.bytes if req.max_bytes else 0
    return status_hdr(
        code,
        description,
        {PENDING_MSGS: str(req.remaining), PENDING_BYTES: str(left_bytes)},
    )


def parse_pull_request(
    body: bytes,
    reply: str,
    *,
    max_batch: int,
    max_expires: int,
    max_bytes: int,
) -> PullRequest:
    """A request body is empty (batch 1), a plain number (the batch), or JSON."""
    text = bytes(body).strip()
    batch, expires, no_wait, req_bytes, heartbeat = 1, 0, False, 0, 0
    priority_problem = ""
    if text:
        if text[:1] == b"{":
            try:
                fields = orjson.loads(text)
            except orjson.JSONDecodeError:
                fields = {}
            if not isinstance(fields, dict):
                fields = {}
            batch = _int(fields.get("batch"), 1)
            expires = _int(fields.get("expires"), 0)
            no_wait = bool(fields.get("no_wait", False))
            req_bytes = _int(fields.get("max_bytes"), 0)
            heartbeat = _int(fields.get("idle_heartbeat"), 0)
            priority_problem = _priority_problem(fields)
        else:
            batch = _int(text.decode(errors="replace"), 1)
    batch = max(batch, 1)
    if max_batch > 0 and batch > max_batch:
        raise BadPullRequest(409, f"Exceeded MaxRequestBatch of {max_batch}")
    if max_expires > 0 and expires > max_expires:
        raise BadPullRequest(409, f"Exceeded MaxRequestExpires of {go_duration(max_expires)}")
    if max_bytes > 0 and req_bytes > max_bytes:
        raise BadPullRequest(409, f"Exceeded MaxRequestMaxBytes of {max_bytes}")
    if heartbeat > 0 and expires > 0 and heartbeat * 2 > expires:
        raise BadPullRequest(400, "Bad Request - heartbeat value too large")
    if priority_problem:
        raise BadPullRequest(400, priority_problem)
    now = time.monotonic()
    return PullRequest(
        reply=reply,
        batch=batch,
        max_bytes=req_bytes,
        expires_at=now + expires / 1e9 if expires > 0 else 0.0,
        no_wait=no_wait,
        heartbeat=heartbeat / 1e9,
    )


def _priority_problem(fields: dict[str, object]) -> str:
    """nats-server's 400 for priority-group fields sent to a consumer without that policy.

    Headwater refuses priority groups at creation, so every consumer is such a consumer;
    ``group`` and ``priority`` are ignored there by nats-server too.
    """
    if _int(fields.get("min_pending"), 0) > 0 or _int(fields.get("min_ack_pending"), 0) > 0:
        return "Bad Request - Not a Overflow Priority consumer"
    if isinstance(fields.get("id"), str) and fields["id"]:
        return "Bad Request - Not a Pinned Client Priority consumer"
    return ""


def _int(value: object, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return default
    return default


def handle_request(c: Consumer, reply: str, body: bytes) -> None:
    """Queue a pull request on consumer ``c``, or refuse it at once with a status."""
    if not reply or c.closed:
        return
    if not c.is_pull:
        c.send_status(reply, status_hdr(409, "Consumer is push based"))
        return
    cfg = c.config
    try:
        req = parse_pull_request(
            body,
            reply,
            max_batch=int(cfg_get(cfg, "max_batch", 0)),
            max_expires=int(cfg_get(cfg, "max_expires", 0)),
            max_bytes=int(cfg_get(cfg, "max_bytes", 0)),
        )
    except BadPullRequest as exc:
        c.send_status(reply, status_hdr(exc.code, exc.description))
        return
    c.last_active = time.time_ns()
    # With ``expires`` nats-server lets a no_wait request linger until something arrives.
    if req.no_wait and not req.expires_at and not c.has_next():
        c.send_status(reply, status_hdr(404, "No Messages"))
        return
    if c.waiting.full():
        c.send_status(reply, status_hdr(409, "Exceeded MaxWaiting"))
        return
    c.waiting.add(req)
    c.arm_timer(req.expires_at)
    if req.heartbeat:
        c.arm_timer(time.monotonic() + req.heartbeat)
    c.kick()


def pump(c: Consumer) -> None:
    """Serve waiting requests in arrival order while ``c`` has messages to give.

    One pass delivers for at most a :class:`PassBudget` slice (a batch of a million
    ``ack_policy: none`` messages would otherwise hold the loop for seconds); then it schedules
    the next pass and returns, leaving the requests queued as they are, so order, batch,
    max_bytes, expires and no_wait work across passes exactly as within one.
    """
    waiting = c.waiting
    now = time.monotonic()
    changed = False
    checked: PullRequest | None = None
    budget = PassBudget()
    while waiting and c.can_send() and not (c.paused() and not c.redelivery_due()):
        if changed and budget.spent():
            # More to give: the next pass goes on; no_wait requests are not done yet.
            c.kick()
            if c.on_change is not None:
                c.on_change(c)
            return
        req = waiting.peek()
        assert req is not None
        if req.expires_at and req.expires_at <= now:
            waiting.pop()
            c.send_status(req.reply, pending_status(408, "Request Timeout", req))
            continue
        if req is not checked:
            # Once per request per pass: a requester that went away gets nothing.
            if not c.has_listener(req.reply):
                waiting.pop()
                continue
            checked = req
        item = c.next_message()
        if item is None:
            break
        msg, dc = item
        size = len(msg.subject) + len(msg.hdr) + len(msg.data)
        if req.max_bytes:
            # nats-server counts the ack reply subject too (the one deliver() will build).
            cseq = c.ack_state.dseq + 1
            ack = acks.ack_reply(c.ack_prefix, dc, msg.seq, cseq, msg.ts, c.num_pending())
            size += len(ack)
        if req.max_bytes and req.bytes + size > req.max_bytes:
            c.put_back(msg.seq, dc)
            waiting.pop()
            c.send_status(req.reply, pending_status(409, "Message Size Exceeds MaxBytes", req))
            continue
        c.deliver(req.reply, msg, dc)
        changed = True
        req.delivered += 1
        req.bytes += size
        req.last_sent = now
        if req.remaining <= 0 or (req.max_bytes and req.bytes >= req.max_bytes):
            waiting.pop()  # done; one filled to the byte ends quietly, as a full batch does
    # no_wait requests end once nothing more is available.
    while waiting:
        req = waiting.peek()
        assert req is not None
        if not req.no_wait or (req.expires_at and not req.delivered):
            break
        waiting.pop()
        # nats-server says 404 here even after a partial batch.
        c.send_status(req.reply, status_hdr(404, "No Messages"))
    if changed and c.on_change is not None:
        c.on_change(c)
