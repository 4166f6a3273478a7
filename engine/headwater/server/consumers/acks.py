"""Ack reply subjects and ack bodies.

Every message a consumer delivers carries the reply subject
``$JS.ACK.<stream>.<consumer>.<delivery count>.<stream seq>.<consumer seq>.<ts ns>.<pending>``
(the 9-token v1 form nats-server sends to the global account), which clients parse into
message metadata; the consumer subscribes ``$JS.ACK.<stream>.<consumer>.>`` and reads the
sequences back from the subject an ack arrives on, so no lookup table is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

__all__ = ["AckKind", "AckMsg", "ack_prefix", "ack_reply", "parse_ack", "parse_ack_subject"]

ACK_PREFIX = "$JS.ACK."


def ack_prefix(stream: str, consumer: str) -> str:
    """The subject prefix (with a trailing dot) of every ack reply of one consumer."""
    return f"{ACK_PREFIX}{stream}.{consumer}."


def ack_reply(prefix: str, dc: int, sseq: int, cseq: int, ts: int, pending: int) -> str:
    return f"{prefix}{dc}.{sseq}.{cseq}.{ts}.{pending}"


def parse_ack_subject(subject: str, prefix_tokens: int) -> tuple[int, int, int] | None:
    """(delivery count, stream seq, consumer seq) from an ack subject, None when malformed."""
    tokens = subject.split(".")
    rest = tokens[prefix_tokens:]
    if len(rest) < 5:
        return None
    try:
        return int(rest[0]), int(rest[1]), int(rest[2])
    except ValueError:
        return None


class AckKind:
    ACK = "+ACK"
    NAK = "-NAK"
    WPI = "+WPI"
    NXT = "+NXT"
    TERM = "+TERM"


@dataclass(frozen=True)
class AckMsg:
    """One parsed ack body: the kind plus its argument (NAK delay ns, TERM reason, NXT body)."""

    kind: str
    delay: int = 0
    reason: str = ""
    next_body: bytes = b""


PLAIN_ACK = AckMsg(AckKind.ACK)
"""The one plain ack (``AckMsg`` is immutable, so every ``+ACK`` can share it)."""


def parse_ack(body: bytes) -> AckMsg:
    """Read an ack body the way nats-server does: an empty body (or ``+ACK``) is an ack.

    ``-NAK`` may carry ``{"delay": ns}`` (or a Go duration string as the value), ``+TERM`` a
    free-text reason, ``+NXT`` a pull request body; unknown bodies count as a plain ack, as
    the reference treats them.
    """
    if not body or body == b"+ACK":
        return PLAIN_ACK  # what nearly every ack is: no copy, no strip, no new object
    text = bytes(body).strip()
    if not text or text.startswith(b"+ACK"):
        return PLAIN_ACK
    if text.startswith(b"-NAK"):
        return AckMsg(AckKind.NAK, delay=_nak_delay(text[4:].strip()))
    if text.startswith(b"+WPI"):
        return AckMsg(AckKind.WPI)
    if text.startswith(b"+NXT"):
        return AckMsg(AckKind.NXT, next_body=text[4:].strip())
    if text.startswith(b"+TERM"):
        return AckMsg(AckKind.TERM, reason=text[5:].strip().decode(errors="replace"))
    return PLAIN_ACK


def _nak_delay(arg: bytes) -> int:
    if not arg.startswith(b"{"):
        return 0
    try:
        value = orjson.loads(arg)
    except orjson.JSONDecodeError:
        return 0
    if isinstance(value, dict):
        delay = value.get("delay")
        if isinstance(delay, int) and delay > 0:
            return delay
    return 0
