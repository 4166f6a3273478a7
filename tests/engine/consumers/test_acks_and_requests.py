"""Ack subjects/bodies and pull request parsing: the pure parts of the consumer runtime."""

from __future__ import annotations

import pytest

from headwater.server.consumers import acks
from headwater.server.consumers.acks import AckKind
from headwater.server.consumers.pull import (
    BadPullRequest,
    PullRequest,
    WaitQueue,
    parse_pull_request,
    pending_status,
)
from headwater.server.protocol import headers


def test_ack_reply_round_trip() -> None:
    prefix = acks.ack_prefix("ORDERS", "NEW")
    reply = acks.ack_reply(prefix, 2, 17, 30, 1_700_000_000_000_000_000, 4)
    assert reply == "$JS.ACK.ORDERS.NEW.2.17.30.1700000000000000000.4"
    assert acks.parse_ack_subject(reply, prefix.count(".")) == (2, 17, 30)


@pytest.mark.parametrize(
    "subject",
    ["$JS.ACK.S.C.1.2", "$JS.ACK.S.C.x.2.3.4.5", "$JS.ACK.S.C.1.2.three.4.5"],
)
def test_malformed_ack_subjects_are_ignored(subject: str) -> None:
    assert acks.parse_ack_subject(subject, 4) is None


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"", AckKind.ACK),
        (b"+ACK", AckKind.ACK),
        (b"-NAK", AckKind.NAK),
        (b"+WPI", AckKind.WPI),
        (b"+NXT", AckKind.NXT),
        (b"+TERM", AckKind.TERM),
        (b"whatever", AckKind.ACK),
    ],
)
def test_ack_kinds(body: bytes, kind: str) -> None:
    assert acks.parse_ack(body).kind == kind


def test_nak_delay_and_term_reason() -> None:
    assert acks.parse_ack(b'-NAK {"delay": 2000000000}').delay == 2_000_000_000
    assert acks.parse_ack(b"-NAK {bad json").delay == 0
    assert acks.parse_ack(b'-NAK {"delay": -5}').delay == 0
    assert acks.parse_ack(b"+TERM poison message").reason == "poison message"
    assert acks.parse_ack(b'+NXT {"batch":3}').next_body == b'{"batch":3}'


def parse(body: bytes, **caps: int) -> PullRequest:
    limits = {"max_batch": 0, "max_expires": 0, "max_bytes": 0} | caps
    return parse_pull_request(body, "_INBOX.x", **limits)


def test_request_forms() -> None:
    assert parse(b"").batch == 1
    assert parse(b"7").batch == 7
    req = parse(b'{"batch": 3, "expires": 1000000000, "no_wait": true, "max_bytes": 64}')
    assert (req.batch, req.no_wait, req.max_bytes, req.remaining) == (3, True, 64, 3)
    assert req.expires_at > 0
    assert parse(b'{"batch": 0}').batch == 1


@pytest.mark.parametrize(
    ("body", "caps", "code", "text"),
    [
        (b'{"batch": 11}', {"max_batch": 10}, 409, "Exceeded MaxRequestBatch of 10"),
        (
            b'{"batch": 1, "expires": 5000000000}',
            {"max_expires": 2_000_000_000},
            409,
            "Exceeded MaxRequestExpires of 2s",
        ),
        (b'{"max_bytes": 100}', {"max_bytes": 50}, 409, "Exceeded MaxRequestMaxBytes of 50"),
        (
            b'{"expires": 1000000000, "idle_heartbeat": 600000000}',
            {},
            400,
            "Bad Request - heartbeat value too large",
        ),
    ],
)
def test_request_caps(body: bytes, caps: dict[str, int], code: int, text: str) -> None:
    with pytest.raises(BadPullRequest) as info:
        parse(body, **caps)
    assert (info.value.code, info.value.description) == (code, text)


def test_timeout_status_reports_what_was_left() -> None:
    req = parse(b'{"batch": 5, "max_bytes": 100}')
    req.delivered, req.bytes = 2, 30
    block = pending_status(408, "Request Timeout", req)
    assert headers.status_of(block) == 408
    assert headers.parse(block) == {"Nats-Pending-Messages": "3", "Nats-Pending-Bytes": "70"}


def test_wait_queue_is_bounded_and_fifo() -> None:
    queue = WaitQueue(2)
    first, second = parse(b"1"), parse(b"2")
    queue.add(first)
    assert not queue.full()
    queue.add(second)
    assert queue.full() and len(queue) == 2
    assert queue.pop() is first
    queue.remove(first)  # already gone: no error
    assert queue.peek() is second
