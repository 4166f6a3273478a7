"""Catching up from an origin on this server by reading its store in place.

A mirror or source whose origin is a stream of the same server (no ``external`` prefix) and
whose origin keeps messages by limits first copies what the origin already holds straight
from the origin's store, in batches, and only then creates the internal consumer that
follows new messages. Each batch goes to the owner's ``on_copied``, which stores it as the
same messages delivered one by one would be (:func:`one_by_one` does exactly that, with the
sequence, time and pending count the consumer's ack reply would carry); a mirror stores
plain messages of a batch with one store call. What gets stored is the same either way;
only the transport differs.

Why: a new mirror of a large stream spends nearly all its time on the consumer path
(reading, building a delivery, routing it, parsing the ack reply) for messages that sit in
the same process. Once the copy is done the consumer starts from the owner's position, so
messages the origin took during the copy follow with no gap and no duplicate.

Interest and work-queue origins always go through the consumer: there the internal
consumer's deliveries are what releases the origin's messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from headwater.server.jetstream.layout import parse_time
from headwater.server.jetstream.streamconfig import StreamSource
from headwater.server.store.base import StoredMsg, StoreError
from headwater.server.store.subjects import compile_filter

from . import wire

if TYPE_CHECKING:
    from headwater.server.jetstream.stream import Stream

    from .link import LinkOwner

__all__ = [
    "BATCH_BYTES",
    "BATCH_MSGS",
    "LocalOrigin",
    "copy_in_place",
    "one_by_one",
    "readable_in_place",
]

BATCH_MSGS = 2048
BATCH_BYTES = 4 * 1024 * 1024
"""One batch is read and stored between two yields to the event loop: a few milliseconds."""

LocalOrigin = Callable[[str], "Stream | None"]
"""Origin stream name -> the stream, when it is one of this server's."""


def readable_in_place(source: StreamSource, origin: Stream | None) -> bool:
    """Whether the origin's store can be read directly instead of through a consumer."""
    return (
        origin is not None
        and origin.active
        and source.external is None
        and origin.config.retention == "limits"
    )


async def copy_in_place(
    origin: Stream, source: StreamSource, owner: LinkOwner, on_batch: Callable[[], None]
) -> bool:
    """Copy the origin's messages from the owner's position on; True once caught up.

    False means the copy stopped early (the origin went away or the owner refused a
    message): the caller goes on through a consumer, which starts from wherever the owner
    got to. ``on_batch`` is called after every stored batch (activity reporting).
    """
    owner.reset_tracking()
    seq, start_time = owner.start_position()
    store = origin.store
    if start_time is not None:
        seq = max(seq, store.seq_from_time(parse_time(start_time)))
    filters = wire.filters_of(source)
    single = filters[0] if len(filters) == 1 else ""
    matchers = [compile_filter(f) for f in filters] if len(filters) > 1 else []
    seq = max(seq, 1)
    while True:
        if not origin.active:
            return False
        try:
            batch = store.load_next_batch(single, seq, BATCH_MSGS, BATCH_BYTES)
            if not batch:
                return True
            seq = batch[-1].seq + 1
            after = store.num_pending(single, seq)
        except StoreError:
            return False
        if matchers:
            batch = [m for m in batch if any(match(m.subject) for match in matchers)]
        if batch and not owner.on_copied(batch, after):
            return False
        on_batch()
        await asyncio.sleep(0)


def one_by_one(owner: LinkOwner, batch: list[StoredMsg], after: int) -> bool:
    """Give ``batch`` to ``owner.on_message`` as consecutive deliveries; False when the
    owner refuses one. ``after`` is how many origin messages follow the batch."""
    left = len(batch)
    for msg in batch:
        left -= 1
        if not owner.on_message(
            msg.subject, msg.hdr, msg.data, copied_info(owner, msg, after + left)
        ):
            return False
    return True


def copied_info(owner: LinkOwner, msg: StoredMsg, pending: int) -> wire.AckInfo:
    """What the consumer's ack reply would say: delivered once, the owner's next consumer
    sequence, and ``pending`` messages still to come."""
    return wire.AckInfo("", 1, msg.seq, owner.dseq + 1, msg.ts, pending)
