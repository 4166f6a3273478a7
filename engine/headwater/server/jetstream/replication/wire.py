"""Pure pieces of mirrors and sources: names, subjects, headers and the consumer request.

Everything here is nats-server 2.15's wire format, found by watching its internal traffic
(a client subscribed to ``>`` sees the consumer create request, the origin's reply and the
deliveries to ``$JS.M.*`` / ``$JS.S.*``):

* the internal consumer is created with ``CONSUMER.CREATE.<origin>`` (or the extended
  ``CONSUMER.CREATE.<origin>.<name>.<filter>`` form when there is one filter), under the
  ``external.api`` prefix when the origin lives elsewhere; it is an ack-none push consumer
  with flow control, 1s idle heartbeats, a 10s inactivity threshold and ``direct`` set;
* each delivered message carries the origin's ack reply
  ``$JS.ACK.<stream>.<consumer>.<dc>.<stream seq>.<consumer seq>.<ts>.<pending>``;
* a sourced message gets ``Nats-Stream-Source: <name[:hash(api)]> <seq> <filter> <dest>
  <original subject> <origin identity>``; the first four fields name the source uniquely
  (its *index name*), which is how a restarted stream finds where each source stopped.
"""

from __future__ import annotations

import hashlib
import secrets
import string
from typing import Any, NamedTuple

from headwater.server.jetstream.streamconfig import StreamSource

__all__ = [
    "SOURCE_HEADER",
    "AckInfo",
    "api_prefix",
    "consumer_request",
    "create_subject",
    "delete_subject",
    "deliver_subject",
    "filters_of",
    "index_name",
    "is_control",
    "parse_ack_reply",
    "parse_source_header",
    "random_token",
    "short_hash",
    "source_header",
    "stream_identity",
    "strip_headers",
]

SOURCE_HEADER = "Nats-Stream-Source"
JS_API_PREFIX = "$JS.API"
FULL_WILDCARD = ">"
HEARTBEAT_NS = 1_000_000_000
"""Idle heartbeat of the internal consumer (nats-server's ``sourceHealthHB``)."""
INACTIVE_NS = 10_000_000_000
"""The origin drops an internal consumer nobody listens to after this long."""
ACK_WAIT_NS = 22 * 3600 * 1_000_000_000
"""Ack wait the reference puts in the request (irrelevant with ack none, kept for parity)."""

_ALPHABET = string.ascii_letters + string.digits
_HASH_DIGITS = string.digits + string.ascii_uppercase + string.ascii_lowercase
_CONTROL_PREFIX = b"NATS/1.0 100 "


def random_token(size: int = 8) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(size))


def short_hash(text: str, size: int = 8) -> str:
    """nats-server's ``getHash``: the first ``size`` bytes of SHA-256, each mapped to one of
    62 digits (byte mod 62)."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_HASH_DIGITS[b % 62] for b in digest[:size])


def stream_identity(name: str, created_ns: int) -> str:
    """An 8-character identity of one incarnation of a stream.

    nats-server 2.15 gives every stream a random identity, returns it in a
    ``Nats-Stream-Identity`` header on consumer creation and appends it to the source header.
    Ours is derived from the name and creation time instead: as stable across restarts and
    as different for a deleted-then-recreated stream, without storing another value.
    """
    return short_hash(f"{name}\n{created_ns}")


def index_name(src: StreamSource) -> str:
    """The source's unique index name: ``<name>[:<hash(api)>] <filters> <destinations>``.

    Filters and destinations are joined with form feeds when there are several transforms;
    an empty one stands for ``>`` (nats-server's ``composeIName``).
    """
    name = src.name
    if src.external is not None:
        name = f"{name}:{short_hash(src.external.api)}"
    if src.subject_transforms:
        srcs = "\f".join(t.src or FULL_WILDCARD for t in src.subject_transforms)
        dests = "\f".join(t.dest or FULL_WILDCARD for t in src.subject_transforms)
    else:
        srcs, dests = src.filter_subject or FULL_WILDCARD, FULL_WILDCARD
    return f"{name} {srcs} {dests}"


def source_header(iname: str, seq: int, subject: str, identity: str = "") -> str:
    """The ``Nats-Stream-Source`` value for origin sequence ``seq`` of ``subject``."""
    name, srcs, dests = iname.split(" ", 2)
    value = f"{name} {seq} {srcs} {dests} {subject}"
    return f"{value} {identity}" if identity else value


def parse_source_header(value: str) -> tuple[str, str, int] | None:
    """(stream name, index name, origin seq) from a header value; None when unreadable.

    Reads the three layouts the reference has written: the 2.15 one above, the 2.10 one
    without subject and identity, and the pre-2.10 ``<name> <seq>`` (no index name: "").
    """
    fields = value.split(" ")
    if len(fields) < 2 or len(fields) == 3:
        return None
    try:
        seq = int(fields[1])
    except ValueError:
        return None
    if len(fields) == 2:
        return fields[0], "", seq
    return fields[0], f"{fields[0]} {fields[2]} {fields[3]}", seq


class AckInfo(NamedTuple):
    """What the origin's ack reply says about one delivered message (a tuple: one is built
    per replicated message)."""

    consumer: str
    dc: int
    sseq: int
    dseq: int
    ts: int
    pending: int


def parse_ack_reply(reply: str) -> AckInfo | None:
    """Parse the 9-token ack reply (or the 12-token domain/account form); None otherwise."""
    tokens = reply.split(".")
    if len(tokens) == 12:
        tokens = tokens[:2] + tokens[4:11]
    if len(tokens) != 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    try:
        return AckInfo(
            tokens[3],
            int(tokens[4]),
            int(tokens[5]),
            int(tokens[6]),
            int(tokens[7]),
            int(tokens[8]),
        )
    except ValueError:
        return None


def is_control(hdr: bytes | None, payload: bytes) -> bool:
    """Flow control requests and idle heartbeats: an empty body with a ``100`` status."""
    return not payload and bool(hdr) and hdr.startswith(_CONTROL_PREFIX)  # type: ignore[union-attr]


def strip_headers(hdr: bytes, drop_exact: tuple[str, ...], drop_prefix: str = "") -> bytes:
    """``hdr`` without the lines whose key is in ``drop_exact`` or starts with ``drop_prefix``.

    Returns ``b""`` when nothing but the version line would remain, so a message that only
    carried dropped headers is stored without a header block.
    """
    if not hdr:
        return hdr
    lines = hdr.split(b"\r\n")
    kept = [lines[0]]
    changed = False
    for line in lines[1:]:
        if not line:
            continue
        key = line.partition(b":")[0].decode(errors="replace").strip()
        if key in drop_exact or (drop_prefix and key.startswith(drop_prefix)):
            changed = True
            continue
        kept.append(line)
    if not changed:
        return hdr
    if len(kept) == 1 and kept[0] == b"NATS/1.0":
        return b""
    return b"\r\n".join(kept) + b"\r\n\r\n"


def api_prefix(src: StreamSource) -> str:
    if src.external is not None and src.external.api:
        return src.external.api
    return JS_API_PREFIX


def deliver_subject(src: StreamSource, kind: str) -> str:
    """``$JS.M.<token>`` (mirror) or ``$JS.S.<token>`` (source), or ``<deliver>.M.<token>``."""
    if src.external is not None and src.external.deliver:
        return f"{src.external.deliver}.{kind}.{random_token()}".replace("..", ".")
    return f"$JS.{kind}.{random_token()}"


def create_subject(src: StreamSource, name: str, filters: list[str]) -> str:
    """The consumer create subject: the extended form when exactly one filter is set."""
    prefix = api_prefix(src)
    if len(filters) == 1:
        subject = f"{prefix}.CONSUMER.CREATE.{src.name}.{name}.{filters[0]}"
    else:
        subject = f"{prefix}.CONSUMER.CREATE.{src.name}"
    return subject.replace("..", ".")


def delete_subject(src: StreamSource, name: str) -> str:
    return f"{api_prefix(src)}.CONSUMER.DELETE.{src.name}.{name}".replace("..", ".")


def filters_of(src: StreamSource) -> list[str]:
    """The consumer filters of a mirror or source: its filter, or its transforms' sources."""
    if src.filter_subject:
        return [src.filter_subject]
    return [t.src or FULL_WILDCARD for t in src.subject_transforms]


def consumer_request(
    origin: str,
    name: str,
    deliver: str,
    filters: list[str],
    *,
    start_seq: int = 0,
    start_time: str | None = None,
) -> dict[str, Any]:
    """The CreateConsumerRequest body of an internal mirror/source consumer."""
    config: dict[str, Any] = {"name": name}
    if start_time is not None:
        config |= {"deliver_policy": "by_start_time", "opt_start_time": start_time}
    elif start_seq > 0:
        config |= {"deliver_policy": "by_start_sequence", "opt_start_seq": start_seq}
    else:
        config["deliver_policy"] = "all"
    config |= {
        "ack_policy": "none",
        "ack_wait": ACK_WAIT_NS,
        "max_deliver": 1,
        "replay_policy": "instant",
        "flow_control": True,
        "deliver_subject": deliver,
        "idle_heartbeat": HEARTBEAT_NS,
        "inactive_threshold": INACTIVE_NS,
        "direct": True,
    }
    if len(filters) == 1:
        config["filter_subject"] = filters[0]
    elif filters:
        config["filter_subjects"] = filters
    return {"stream_name": origin, "config": config}
