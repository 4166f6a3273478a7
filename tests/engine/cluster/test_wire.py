"""The route protocol's sans-IO parser and encoders, on nats-server's wire forms."""

from __future__ import annotations

import pytest

from headwater.server.cluster import wire
from headwater.server.cluster.interest import LocalInterest
from headwater.server.protocol.parser import ProtocolError


def feed_all(data: bytes) -> list[tuple]:
    return wire.RouteParser().feed(data)


def test_interest_lines() -> None:
    ops = feed_all(
        b"RS+ $G foo\r\nRS+ $G bar.* workers 3\r\nRS- $G foo\r\nRS- $G bar.* workers\r\n"
    )
    assert ops == [
        (wire.SUB, "$G", "foo", None, 1),
        (wire.SUB, "$G", "bar.*", "workers", 3),
        (wire.UNSUB, "$G", "foo", None),
        (wire.UNSUB, "$G", "bar.*", "workers"),
    ]


@pytest.mark.parametrize(
    ("line", "reply", "queues"),
    [
        (b"RMSG $G foo 5", "", ()),
        (b"RMSG $G foo _INBOX.a 5", "_INBOX.a", ()),
        (b"RMSG $G foo + _INBOX.a q1 q2 5", "_INBOX.a", ("q1", "q2")),
        (b"RMSG $G foo | q1 5", "", ("q1",)),
    ],
)
def test_routed_messages(line: bytes, reply: str, queues: tuple[str, ...]) -> None:
    (op,) = feed_all(line + b"\r\nhello\r\n")
    if not reply and not queues:
        assert op == (wire.BATCH, "$G", "foo", [b"hello"])
    else:
        assert op == (wire.MSG, "$G", "foo", reply, queues, None, b"hello")


def test_plain_messages_in_a_row_to_one_subject_are_one_batch() -> None:
    data = b"RMSG $G a 1\r\nx\r\nRMSG $G a 2\r\nyy\r\nRMSG $G b 1\r\nz\r\nRMSG $G a 1\r\nw\r\n"
    assert feed_all(data) == [
        (wire.BATCH, "$G", "a", [b"x", b"yy"]),
        (wire.BATCH, "$G", "b", [b"z"]),
        (wire.BATCH, "$G", "a", [b"w"]),
    ]


def test_routed_message_with_headers_and_queues() -> None:
    hdr = b"NATS/1.0\r\nX: 1\r\n\r\n"
    line = b"HMSG $G foo + r q %d %d\r\n" % (len(hdr), len(hdr) + 2)
    (op,) = feed_all(line + hdr + b"hi\r\n")
    assert op == (wire.MSG, "$G", "foo", "r", ("q",), hdr, b"hi")


def test_a_message_split_across_reads_at_every_byte() -> None:
    data = b"PING\r\nRMSG $G foo r 11\r\nhello world\r\nRS+ $G x\r\n"
    for cut in range(1, len(data)):
        parser = wire.RouteParser()
        ops = parser.feed(data[:cut]) + parser.feed(data[cut:])
        assert ops == [
            (wire.PING,),
            (wire.MSG, "$G", "foo", "r", (), None, b"hello world"),
            (wire.SUB, "$G", "x", None, 1),
        ], cut


def test_encoders_round_trip() -> None:
    hdr = b"NATS/1.0\r\n\r\n"
    cases = [
        ("s", "", (), None, b"x"),
        ("s", "r", (), None, b""),
        ("s", "r", ("a", "b"), hdr, b"payload"),
        ("s", "", ("a",), hdr, b"p"),
    ]
    for subject, reply, queues, h, payload in cases:
        (op,) = feed_all(wire.routed_msg("$G", subject, reply, queues, h, payload))
        if not reply and not queues and h is None:
            assert op == (wire.BATCH, "$G", subject, [payload])
        else:
            assert op == (wire.MSG, "$G", subject, reply, queues, h, payload)
    assert feed_all(wire.sub("$G", "a.>", "q", 2) + wire.unsub("$G", "a.>", "q")) == [
        (wire.SUB, "$G", "a.>", "q", 2),
        (wire.UNSUB, "$G", "a.>", "q"),
    ]


@pytest.mark.parametrize(
    "data",
    [
        b"RMSG $G foo 3\r\nhello\r\n",  # longer than declared
        b"RMSG $G foo x\r\n",  # size not a number
        b"RMSG $G foo ? r q 3\r\nabc\r\n",  # bad reply indicator
        b"HMSG $G foo 9 3\r\n",  # header larger than total
        b"RS+ $G\r\n",
        b"RS+ $G foo q\r\n",  # a queue without a weight
        b"BOGUS\r\n",
        b"INFO nope\r\n",
    ],
)
def test_malformed_input_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        feed_all(data)


def test_leaf_and_gateway_interest_is_recognised_and_ignored() -> None:
    assert feed_all(b"LS+ c $G foo\r\nA+ $G\r\n") == [(wire.IGNORED, "LS+"), (wire.IGNORED, "A+")]


def test_local_interest_announces_first_and_last_and_queue_weights() -> None:
    interest = LocalInterest()
    assert interest.add("foo", None) == 1
    assert interest.add("foo", None) is None
    assert interest.add("foo", "q") == 1
    assert interest.add("foo", "q") == 2
    assert interest.remove("foo", None) is None
    assert interest.remove("foo", None) == 0
    assert interest.remove("foo", None) is None  # never counted below zero
    assert interest.remove("foo", "q") == 1
    assert sorted(interest.items()) == [("foo", "q", 1)]


def test_a_long_run_of_one_line_split_anywhere_keeps_every_payload_in_order() -> None:
    """The fast path for repeated lines must stop cleanly at a partial message."""
    payloads = [b"%05d" % n for n in range(60)]
    data = b"".join(b"RMSG $G run 5\r\n" + p + b"\r\n" for p in payloads) + b"PING\r\n"
    for cut in range(1, len(data), 7):
        parser = wire.RouteParser()
        ops = parser.feed(data[:cut]) + parser.feed(data[cut:])
        got = [p for op in ops if op[0] == wire.BATCH for p in op[3]]
        assert got == payloads, cut
        assert ops[-1] == (wire.PING,)
