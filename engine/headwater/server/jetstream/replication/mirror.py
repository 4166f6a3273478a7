"""A mirror: one stream following one origin stream, with the origin's sequence numbers.

The mirror's position is its own last sequence: a new internal consumer starts at
``last_seq + 1`` (the configured ``opt_start_seq`` / ``opt_start_time`` only count while the
mirror never stored anything), so a restart of either side resumes with no gap and no
duplicate. Each delivered message is stored at the origin sequence its ack reply names;
sequences the origin does not deliver (deleted, expired, filtered out) are skipped, so the
mirror's sequences stay the origin's, as nats-server's ``processInboundMirrorMsg`` keeps
them. A delivery whose consumer sequence is not the next one means one was lost on the way:
the consumer is recreated from the mirror's position.

Plain messages (no headers, kept with the origin's sequence and time) are not stored one by
one: they gather in a run that is stored with one ``store_raw_batch`` call at the end of the
event-loop turn that delivered them (or before anything else touches the mirror's store), which
roughly halves the cost of storing them. A crash loses at most that run, which the mirror then
asks its origin for again, since it resumes from what its store holds.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from headwater.server.jetstream import groupops
from headwater.server.jetstream.streamconfig import StreamSource
from headwater.server.store.base import StoredMsg, StoreError

from . import wire
from .catchup import LocalOrigin, copied_info
from .groupfeed import GroupFeed
from .link import OriginLink
from .storing import align, keeps_origin_times, store_replicated
from .transforms import SourceTransforms

if TYPE_CHECKING:
    from headwater.server.connections.internal import InternalClient
    from headwater.server.jetstream.stream import Stream

__all__ = ["Mirror"]

log = logging.getLogger("headwater.jetstream")

EXPECTED_PREFIX = "Nats-Expected-"


class Mirror:
    def __init__(
        self, stream: Stream, client: InternalClient, local: LocalOrigin | None = None
    ) -> None:
        source = stream.config.mirror
        assert source is not None
        self.stream = stream
        self.source: StreamSource = source
        self.transforms = SourceTransforms(source)
        self.sseq = 0
        """Last origin sequence stored (or skipped)."""
        self.dseq = 0
        self.lag = 0
        self.last_ts = 0
        """Time of the mirror's last message: an origin time older than it (the mirror was
        written with its own clock) cannot be kept."""
        self.link = OriginLink(client, source, "M", self, local)
        self.feed = GroupFeed(stream.group, self.link.retry) if stream.group is not None else None
        """A replicated mirror's leader proposes what it takes (:mod:`.groupfeed`)."""
        self._run: list[StoredMsg] = []
        """Plain messages taken but not stored yet (see the module's docstring)."""
        self._flush_handle: asyncio.Handle | None = None

    def start(self) -> None:
        self.link.start()

    def close(self) -> None:
        self.link.close()
        self._flush()

    # --- LinkOwner -----------------------------------------------------------------------

    def start_position(self) -> tuple[int, str | None]:
        self._flush()
        state = self.stream.store.state()
        if state.last_seq == 0 and state.msgs == 0:
            if self.source.opt_start_seq > 0:
                return self.source.opt_start_seq, None
            if self.source.opt_start_time is not None:
                return 0, self.source.opt_start_time
            return 0, None
        return state.last_seq + 1, None

    def reset_tracking(self) -> None:
        self._flush()
        state = self.stream.store.state()
        self.dseq = 0
        self.sseq = state.last_seq
        self.last_ts = state.last_ts

    def on_message(self, subject: str, hdr: bytes, payload: bytes, info: wire.AckInfo) -> bool:
        stream = self.stream
        if info.dc > 1 or not stream.active:
            return True
        if info.sseq <= self.sseq:
            return True
        if info.dseq != self.dseq + 1:
            return False
        self.dseq = info.dseq
        self.lag = info.pending - 1 if info.pending else 0
        if not hdr and info.ts >= self.last_ts and info.sseq > stream.lseq and self._plain():
            self._run.append(StoredMsg(subject, info.sseq, b"", payload, info.ts))
            self.sseq, self.last_ts = info.sseq, info.ts
            if self._flush_handle is None:
                self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
            return True
        self._flush()
        try:
            self.sseq = info.sseq
            if hdr:
                hdr = wire.strip_headers(hdr, (), EXPECTED_PREFIX)
            if self.transforms:
                subject = self.transforms.apply(subject)
            if self.feed is not None:
                assert stream.group is not None
                now = stream.group.stamp()
                self.feed.propose(groupops.Mirrored(subject, hdr, payload, info.sseq, info.ts, now))
                return True
            if info.sseq <= stream.lseq:
                return True  # already stored: the store would refuse it anyway
            if keeps_origin_times(stream) and info.ts >= self.last_ts:
                store_replicated(stream, subject, hdr, payload, info.sseq, info.ts)
                self.last_ts = info.ts
            else:
                align(stream, info.sseq)
                store_replicated(stream, subject, hdr, payload)
                self.last_ts = stream.store.state().last_ts
        except StoreError as exc:
            log.warning(
                "Error processing inbound mirror message for '$G' > '%s': %s", stream.name, exc
            )
        return True

    def on_copied(self, batch: list[StoredMsg], after: int) -> bool:
        """Plain messages join the run; everything else goes through :meth:`on_message`, in
        order; the run is stored before the batch returns."""
        stream = self.stream
        if not stream.active:
            return True
        plain = self._plain()
        left = len(batch)
        for msg in batch:
            left -= 1
            if plain and not msg.hdr and msg.seq > self.sseq and msg.ts >= self.last_ts:
                self._run.append(msg)  # not a local: on_message may flush and replace it
                self.sseq, self.last_ts = msg.seq, msg.ts
                self.dseq += 1
                continue
            info = copied_info(self, msg, after + left)
            if not self.on_message(msg.subject, msg.hdr, msg.data, info):
                self._flush()
                return False
        self._flush()
        self.lag = after
        return True

    def _plain(self) -> bool:
        """Whether plain messages can be stored as they are, in runs: the mirror keeps the
        origin's times and neither transforms nor republishes them (and is not replicated:
        a replicated mirror proposes each message)."""
        stream = self.stream
        return (
            self.feed is None
            and keeps_origin_times(stream)
            and not self.transforms
            and stream.republish_transform is None
        )

    def _flush(self) -> None:
        """Store the run of plain messages taken so far."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if not self._run:
            return
        run, self._run = self._run, []
        if self.stream.active:
            self._store_run(run)

    def _store_run(self, run: list[StoredMsg]) -> None:
        """Store ``run`` as :func:`store_replicated` stores each message: without headers
        there is no TTL, marker or rollup, and republishing streams never build runs, so
        what remains is the bookkeeping and waking consumers."""
        stream = self.stream
        try:
            stream.store.store_raw_batch(run)
        except StoreError as exc:
            log.warning(
                "Error processing inbound mirror message for '$G' > '%s': %s", stream.name, exc
            )
            return
        last = run[-1]
        stream.stored(last.seq, last.ts, "", 0)
        if stream.hungry:
            for subject in {m.subject for m in run}:
                stream.signal_consumers(subject)

    # --- reports -------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        return source_info(self.source, self.lag, self.link)


def source_info(source: StreamSource, lag: int, link: OriginLink, seq: int = 0) -> dict[str, Any]:
    """A ``StreamSourceInfo``: the reference's field names, order and omissions."""
    out: dict[str, Any] = {"name": source.name}
    if source.external is not None:
        out["external"] = {"api": source.external.api, "deliver": source.external.deliver}
    out["lag"] = lag
    if seq:
        out["seq"] = seq
    out["active"] = link.active_ns()
    if link.error is not None:
        out["error"] = link.error
    if source.filter_subject:
        out["filter_subject"] = source.filter_subject
    if source.subject_transforms:
        out["subject_transforms"] = [
            {"src": t.src, "dest": t.dest} for t in source.subject_transforms
        ]
    return out
