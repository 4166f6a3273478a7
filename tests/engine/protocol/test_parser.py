"""The parser at every split point, its limits and its errors (nats-server's TestParse* style)."""

from __future__ import annotations

import pytest

from headwater.server.protocol.parser import (
    CONNECT,
    ERR_MAX_CONTROL_LINE,
    ERR_MAX_PAYLOAD,
    ERR_UNKNOWN_OP,
    PING,
    PONG,
    PUB,
    SUB,
    UNSUB,
    Parser,
    ProtocolError,
)

STREAM = (
    b'CONNECT {"verbose":false,"headers":true}\r\n'
    b"PING\r\n"
    b"PONG\r\n"
    b"SUB foo.* 1\r\n"
    b"SUB bar q 2\r\n"
    b"PUB foo.x 5\r\nhello\r\n"
    b"PUB foo.y _INBOX.1 0\r\n\r\n"
    b"HPUB foo.z 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
    b"UNSUB 1 10\r\n"
    b"UNSUB 2\r\n"
)

EXPECTED = [
    (CONNECT, {"verbose": False, "headers": True}),
    (PING,),
    (PONG,),
    (SUB, "foo.*", None, "1"),
    (SUB, "bar", "q", "2"),
    (PUB, "foo.x", "", None, b"hello"),
    (PUB, "foo.y", "_INBOX.1", None, b""),
    (PUB, "foo.z", "", b"NATS/1.0\r\n\r\n", b"hi"),
    (UNSUB, "1", 10),
    (UNSUB, "2", 0),
]


def test_whole_stream_in_one_feed() -> None:
    assert Parser().feed(STREAM) == EXPECTED


@pytest.mark.parametrize("split", range(1, len(STREAM)))
def test_every_split_point(split: int) -> None:
    parser = Parser()
    ops = parser.feed(STREAM[:split]) + parser.feed(STREAM[split:])
    assert ops == EXPECTED
    assert parser.buffered == 0


def test_one_byte_at_a_time() -> None:
    parser = Parser()
    ops = []
    for i in range(len(STREAM)):
        ops += parser.feed(STREAM[i : i + 1])
    assert ops == EXPECTED


def test_verbs_are_case_insensitive_and_lf_alone_ends_a_line() -> None:
    assert Parser().feed(b"ping\npub a 1\r\nx\r\n") == [(PING,), (PUB, "a", "", None, b"x")]


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"FOO\r\n", ERR_UNKNOWN_OP),
        (b"PUB foo 2000000\r\n", ERR_MAX_PAYLOAD),
        (b"PUB foo 3\r\nabcdef\r\n", ERR_UNKNOWN_OP),
        (b"PUB " + b"x" * 5000 + b" 1\r\n", ERR_MAX_CONTROL_LINE),
        (b"SUB " + b"x" * 5000, ERR_MAX_CONTROL_LINE),
        (b"PUB foo\r\n", None),
        (b"PUB foo -1\r\n", None),
        (b"PUB foo bar baz 1\r\n", None),
        (b"HPUB foo 10 5\r\n", None),
        (b"SUB\r\n", None),
        (b"UNSUB 1 x\r\n", None),
        (b"CONNECT {\r\n", None),
        (b"CONNECT []\r\n", None),
    ],
)
def test_errors_carry_nats_server_texts(data: bytes, text: str | None) -> None:
    with pytest.raises(ProtocolError) as info:
        Parser(max_control_line=4096, max_payload=1024 * 1024).feed(data)
    assert info.value.text == text


def test_ops_before_an_error_are_not_returned_and_state_resets() -> None:
    parser = Parser()
    with pytest.raises(ProtocolError):
        parser.feed(b"PING\r\nBAD\r\n")
    assert parser.buffered == 0


def test_partial_control_line_is_bounded() -> None:
    parser = Parser(max_control_line=64)
    parser.feed(b"SUB " + b"a" * 50)
    with pytest.raises(ProtocolError):
        parser.feed(b"a" * 20)


def test_large_payload_across_many_feeds() -> None:
    payload = bytes(range(256)) * 4096
    data = b"PUB big %d\r\n" % len(payload) + payload + b"\r\n"
    parser = Parser()
    ops = []
    for i in range(0, len(data), 7919):
        ops += parser.feed(data[i : i + 7919])
    assert ops == [(PUB, "big", "", None, payload)]
