"""Appending a replicated message to a mirror: the tail of the publish path, no checks.

The message keeps the origin's sequence and timestamp, as in the reference, unless the
mirror has count or size limits of its own (see :func:`keeps_origin_times`).

A mirror must hold exactly what its origin holds, so none of the publish checks apply
(expected-sequence headers were stripped, message ids were deduplicated by the origin, TTL
headers were accepted there). What a stored message sets in motion still happens: the
stream's bookkeeping and expiry timer, roll-ups (when the mirror allows them, so a mirrored
KV bucket drops what its origin dropped), republish and waking the mirror's own consumers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.server.jetstream import publish
from headwater.server.protocol import headers

if TYPE_CHECKING:
    from headwater.server.jetstream.stream import Stream

__all__ = ["align", "keeps_origin_times", "store_mirrored", "store_replicated"]


def align(stream: Stream, seq: int) -> None:
    """Make ``seq`` the stream's next sequence by skipping what lies between.

    The caller knows the origin has nothing for the mirror in between (deleted, expired or
    filtered out); an empty stream jumps there directly, as the reference's compact does.
    """
    last = stream.lseq
    if seq <= last + 1:
        return
    store = stream.store
    if store.state().msgs == 0:
        store.compact(seq)
    else:
        store.skip_msgs(last + 1, seq - 1 - last)
    stream.lseq = seq - 1


def keeps_origin_times(stream: Stream) -> bool:
    """Whether messages can be stored with the origin's sequence and time as they are.

    The store's raw append (the one restores use) applies no count or size limit, so a mirror
    with limits of its own stores through the normal append (its own clock) and
    :func:`align`s the sequences first.
    """
    cfg = stream.config
    return cfg.max_msgs <= 0 and cfg.max_bytes <= 0 and cfg.max_msgs_per_subject <= 0


def store_replicated(
    stream: Stream, subject: str, hdr: bytes, payload: bytes, seq: int = 0, ts: int = 0
) -> int:
    """Store one message as the mirror's next sequence; returns it.

    With ``seq`` and ``ts`` (the origin's), the message keeps them: sequences in between
    become deleted ones, as the reference's ``StoreRawMsg`` leaves them.
    """
    cfg = stream.config
    ttl = 0
    rollup = ""
    if hdr:
        ttl, ok = publish.parse_ttl(headers.get(hdr, publish.MSG_TTL))
        if not ok:
            ttl = 0
        if cfg.allow_rollup_hdrs:
            rollup = (headers.get(hdr, publish.ROLLUP) or "").lower()
    last_on_subject = 0
    if stream.republish_transform is not None:
        previous = stream.store.load_last(subject)
        last_on_subject = previous.seq if previous is not None else 0
    ttl_ns = ttl * publish.SECOND if ttl > 0 else ttl
    if seq:
        stream.store.store_raw_msg(subject, hdr, payload, seq, ts, ttl_ns)
    else:
        # The stream's clock: a replicated mirror's replicas store at its leader's time.
        seq, ts = stream.store.store_msg(subject, hdr, payload, ttl_ns, ts_ns=stream.clock())
    # No message id is recorded: the origin deduplicated already, and a mirror never looks
    # ids up, so they would pile up in its window for nothing.
    publish.after_store(stream, seq, ts, subject, hdr, payload, "", ttl, rollup, last_on_subject)
    return seq


def store_mirrored(
    stream: Stream, subject: str, hdr: bytes, payload: bytes, seq: int, ts: int
) -> int:
    """Store origin message ``seq`` (of time ``ts``) in the mirror ``stream``, as a
    replicated mirror's replicas apply it (:class:`..groupops.Mirrored`, at the leader's
    time): nothing when the mirror holds it already (0); with the origin's sequence and
    time when they can be kept, else at the stream's own time after :func:`align`."""
    if seq <= stream.lseq:
        return 0
    if keeps_origin_times(stream) and ts >= stream.store.state().last_ts:
        return store_replicated(stream, subject, hdr, payload, seq, ts)
    align(stream, seq)
    return store_replicated(stream, subject, hdr, payload)
