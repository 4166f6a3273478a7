"""The publish path: one inbound message to a stream, checked, stored and acknowledged.

:func:`process` runs synchronously inside routing (no awaits): the message is appended to the
store before the publisher's next message is read, so per-publisher order is the stream order.
The exception: after a restart, the first message that needs the duplicate window waits while
it is read back from the store in slices (:meth:`Stream.hold`), and every later message of the
stream waits behind it, so the order holds there too.
The success ack goes out through the stream's group commit (only after the store says the
message is durable); error acks go out at once.

The checks are nats-server 2.15's, in its order (found by sending messages that break two
rules at once to both servers), because such a message must get the same error: sealed
(10109), ``max_msg_size`` (10054), header size (10097), ``Nats-Expected-Stream`` (10060),
``Nats-TTL`` on a stream without TTLs (10166), ``Nats-Expected-Last-Subject-Sequence`` (10071),
``Nats-Expected-Last-Sequence`` (10071), duplicate ``Nats-Msg-Id`` (the original sequence with
``duplicate: true``), ``Nats-Expected-Last-Msg-Id`` (10070), ``Nats-Rollup`` (10111), server
budget (10023), bad ``Nats-TTL`` (10165), then the store's own limits (10077 with the store's
text, e.g. "maximum messages exceeded").
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Final, NamedTuple

from headwater.server.protocol import headers
from headwater.server.store.base import LimitExceeded, StoreError

from . import errors
from .wire import go_int, parse_go_duration

if TYPE_CHECKING:
    from .stream import Stream

__all__ = ["HOLD", "Dedupe", "Outcome", "Stored", "admit", "parse_ttl", "process", "process_now"]

MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"
MSG_TTL = "Nats-TTL"
MARKER_REASON = "Nats-Marker-Reason"


class Stored(NamedTuple):
    """The message has its sequence: stored now, or earlier (a duplicate ``Nats-Msg-Id``),
    or used up without storing (an interest stream nobody wants it from)."""

    seq: int
    duplicate: bool = False


class _Hold:
    """The message must wait until the duplicate window is loaded (:meth:`Stream.hold`)."""


HOLD: Final = _Hold()

Outcome = Stored | errors.ApiError | _Hold
"""What :func:`admit` decided; the stream answers it (:meth:`Stream.answer`)."""

MAX_HEADER_SIZE = 65535
SECOND = 1_000_000_000


class Dedupe:
    """Message ids seen within the stream's duplicate window: id -> (seq, ts ns).

    Entries are kept in arrival order, so expired ones are dropped from the front on each use
    instead of by a timer.
    """

    __slots__ = ("_ids", "window")

    def __init__(self, window_ns: int) -> None:
        self.window = window_ns
        self._ids: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def _trim(self, now: int) -> None:
        ids = self._ids
        cutoff = now - self.window
        while ids:
            first = next(iter(ids.values()))
            if first[1] > cutoff:
                break
            ids.popitem(last=False)

    def lookup(self, msg_id: str, now: int) -> int | None:
        """The sequence stored under ``msg_id`` if it is still inside the window."""
        if not self._ids:
            return None
        self._trim(now)
        found = self._ids.get(msg_id)
        return found[0] if found is not None else None

    def record(self, msg_id: str, seq: int, ts: int) -> None:
        self._ids[msg_id] = (seq, ts)
        self._ids.move_to_end(msg_id)

    def load_older(self, older: OrderedDict[str, tuple[int, int]]) -> None:
        """Take ``older`` (ids read back from the store, in order) as the entries before the
        ones recorded since, which stay last and win for an id in both. Costs what was
        recorded since, not the window, so it fits in one pass of the loop."""
        for msg_id, entry in self._ids.items():
            older.pop(msg_id, None)
            older[msg_id] = entry
        self._ids = older

    def entries(self) -> list[tuple[str, int, int]]:
        """The window as (id, seq, ts ns) in arrival order, oldest first (a replica's
        snapshot carries it; expired ones may still be there: each use drops them)."""
        return [(msg_id, seq, ts) for msg_id, (seq, ts) in self._ids.items()]

    def __len__(self) -> int:
        return len(self._ids)


def parse_ttl(value: str | None) -> tuple[int, bool]:
    """``Nats-TTL`` as nats-server reads it: (seconds, ok). -1 means never; 0 means none.

    A Go duration must be at least 1s; otherwise the value must be a plain number of
    seconds. ``never`` is case-insensitive.
    """
    if not value:
        return 0, True
    if value.lower() == "never":
        return -1, True
    ns = parse_go_duration(value)
    if ns is not None:
        if ns < SECOND:
            return 0, False
        return ns // SECOND, True
    seconds = go_int(value)
    if seconds < 0:
        return 0, False
    return seconds, True


def _expected_seq_mismatch(stream: Stream, hdr: bytes, subject: str) -> int | None:
    """The sequence to report when ``Nats-Expected-Last-Subject-Sequence`` does not hold."""
    raw = headers.get(hdr, EXPECTED_LAST_SUBJ_SEQ)
    if not raw:
        return None
    expected = go_int(raw)
    check_subject = headers.get(hdr, EXPECTED_LAST_SUBJ_SEQ_SUBJ) or subject
    last = stream.store.load_last(check_subject)
    found = last.seq if last is not None else 0
    if last is None and expected == 0:
        return None
    return found if found != expected else None


def process(stream: Stream, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
    """Check, store and acknowledge one message published to ``stream``, or queue it behind
    the messages that wait for the dedupe window (:meth:`Stream.hold`)."""
    if stream.holding():
        stream.hold(subject, reply, hdr, payload)
        return
    process_now(stream, subject, reply, hdr, payload)


def process_now(
    stream: Stream, subject: str, reply: str, hdr: bytes | None, payload: bytes
) -> None:
    """:func:`process` for a message nothing is held before: admit it, answer the outcome."""
    if not stream.active:
        return
    outcome = admit(stream, subject, hdr, payload)
    if outcome is HOLD:
        stream.hold(subject, reply, hdr, payload)
        return
    stream.answer(reply if reply and not stream.config.no_ack else "", outcome)


def admit(
    stream: Stream, subject: str, hdr: bytes | None, payload: bytes, applying: bool = False
) -> Outcome:
    """Check one message against the stream's rules, in nats-server's order, and store it if
    they allow: what happened, for the stream to answer (it does no replying itself).

    The message's time is the stream's clock (a replicated stream's leader's, see
    :meth:`Stream.at`). ``applying``: a replica applies a replicated publish, and must decide
    as every other replica does: the server's storage budget (its own) is left out, the
    leader checked it before proposing; a failure of this server's store (no room, a failed
    write) is raised, not answered, since the others did not fail (the replica stops)."""
    cfg = stream.config
    now = stream.clock()
    if stream.input_transform is not None:
        subject = stream.input_transform.apply(subject)
    if cfg.sealed:
        return errors.STREAM_SEALED
    hdr = hdr or b""
    if cfg.max_msg_size >= 0 and len(hdr) + len(payload) > cfg.max_msg_size:
        return errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM
    if len(hdr) > MAX_HEADER_SIZE:
        return errors.STREAM_HEADER_EXCEEDS_MAXIMUM
    msg_id = ""
    rollup = ""
    ttl = 0
    ttl_ok = True
    if hdr:
        name = headers.get(hdr, EXPECTED_STREAM)
        if name and name != cfg.name:
            return errors.STREAM_NOT_MATCH
        ttl, ttl_ok = parse_ttl(headers.get(hdr, MSG_TTL))
        if ttl != 0 and not cfg.allow_msg_ttl:
            return errors.MESSAGE_TTL_DISABLED
        found = _expected_seq_mismatch(stream, hdr, subject)
        if found is not None:
            return errors.STREAM_WRONG_LAST_SEQUENCE.format(seq=found)
        raw_last = headers.get(hdr, EXPECTED_LAST_SEQ)
        if raw_last and go_int(raw_last) != stream.lseq:
            return errors.STREAM_WRONG_LAST_SEQUENCE.format(seq=stream.lseq)
        msg_id = headers.get(hdr, MSG_ID) or ""
        expected_id = headers.get(hdr, EXPECTED_LAST_MSG_ID)
        if (msg_id or expected_id) and not stream.dedupe_loaded():
            # The window's ids are read back from the store in slices first; this message
            # (and the stream's next ones) are then processed from the start.
            return HOLD
        if msg_id:
            original = stream.dedupe.lookup(msg_id, now)
            if original is not None:
                return Stored(original, duplicate=True)
        if expected_id and expected_id != stream.lmsgid:
            return errors.STREAM_WRONG_LAST_MSG_ID.format(id=stream.lmsgid)
        rollup = (headers.get(hdr, ROLLUP) or "").lower()
        if rollup:
            if not cfg.allow_rollup_hdrs or cfg.deny_purge:
                return errors.STREAM_ROLLUP_FAILED.format(err="rollup not permitted")
            if rollup not in ("sub", "all"):
                problem = f'rollup value invalid: "{rollup}"'
                return errors.STREAM_ROLLUP_FAILED.format(err=problem)
    if not applying and stream.resources.limits_exceeded(cfg.storage):
        return errors.INSUFFICIENT_RESOURCES
    if not ttl_ok:
        return errors.MESSAGE_TTL_INVALID
    if cfg.retention == "interest" and not stream.has_interest(subject):
        # Nobody would ever consume it: the sequence is used up but nothing is stored.
        return Stored(stream.skip(msg_id))
    marker_ttl = cfg.subject_delete_marker_ttl // SECOND
    if ttl > 0 and marker_ttl > 0 and cfg.max_msgs_per_subject != 1:
        # nats-server's rule: a message may not expire before the markers of its subject do,
        # or it could vanish while an older marker still stands and leave no marker itself.
        ttl = max(ttl, marker_ttl)
    last_on_subject = 0
    if stream.republish_transform is not None:
        previous = stream.store.load_last(subject)
        last_on_subject = previous.seq if previous is not None else 0
    try:
        seq, ts = stream.store.store_msg(
            subject, hdr, payload, ttl * SECOND if ttl > 0 else ttl, ts_ns=now
        )
    except StoreError as exc:
        if applying and not isinstance(exc, LimitExceeded):
            raise
        return errors.STREAM_STORE_FAILED.format(err=str(exc))
    after_store(stream, seq, ts, subject, hdr, payload, msg_id, ttl, rollup, last_on_subject)
    return Stored(seq)


def after_store(
    stream: Stream,
    seq: int,
    ts: int,
    subject: str,
    hdr: bytes | None,
    payload: bytes,
    msg_id: str,
    ttl: int,
    rollup: str,
    last_on_subject: int,
) -> None:
    """What follows every stored message, published or replicated: bookkeeping, marker
    tracking, the rollup, republish, and waking the consumers that wait for it."""
    stream.stored(seq, ts, msg_id, ttl)
    if hdr and headers.get(hdr, MARKER_REASON):
        stream.markers.add(seq)
    if rollup == "sub":
        stream.store.purge(subject, 0, 1)
    elif rollup == "all":
        stream.store.purge("", 0, 1)
    if stream.republish_transform is not None:
        stream.republish(subject, hdr, payload, seq, ts, last_on_subject)
    if stream.hungry:
        stream.signal_consumers(subject)
