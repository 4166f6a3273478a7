"""A mirror: one stream following one origin stream, with the origin's sequence numbers.

The mirror's position is its own last sequence: a new internal consumer starts at
``last_seq + 1`` (the configured ``opt_start_seq`` / ``opt_start_time`` only count while the
mirror never stored anything), so a restart of either side resumes with no gap and no
duplicate. Each delivered message is stored at the origin sequence its ack reply names;
sequences the origin does not deliver (deleted, expired, filtered out) are skipped, so the
mirror's sequences stay the origin's, as nats-server's ``processInboundMirrorMsg`` keeps
them. A delivery whose consumer sequence is not the next one means one was lost on the way:
the consumer is recreated from the mirror's position.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from headwater.server.jetstream.streamconfig import StreamSource
from headwater.server.store.base import StoredMsg, StoreError

from . import wire
from .catchup import LocalOrigin, copied_info
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

    def start(self) -> None:
        self.link.start()

    def close(self) -> None:
        self.link.close()

    # --- LinkOwner -----------------------------------------------------------------------

    def start_position(self) -> tuple[int, str | None]:
        state = self.stream.store.state()
        if state.last_seq == 0 and state.msgs == 0:
            if self.source.opt_start_seq > 0:
                return self.source.opt_start_seq, None
            if self.source.opt_start_time is not None:
                return 0, self.source.opt_start_time
            return 0, None
        return state.last_seq + 1, None

    def reset_tracking(self) -> None:
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
        try:
            self.sseq = info.sseq
            if hdr:
                hdr = wire.strip_headers(hdr, (), EXPECTED_PREFIX)
            if self.transforms:
                subject = self.transforms.apply(subject)
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
        """Plain messages (no headers, kept as the origin has them) are stored a run at a
        time; everything else goes through :meth:`on_message`, in order."""
        stream = self.stream
        if not stream.active:
            return True
        plain = (
            keeps_origin_times(stream)
            and not self.transforms
            and stream.republish_transform is None
        )
        run: list[StoredMsg] = []
        left = len(batch)
        for msg in batch:
            left -= 1
            if plain and not msg.hdr and msg.seq > self.sseq and msg.ts >= self.last_ts:
                run.append(msg)
                self.sseq, self.last_ts = msg.seq, msg.ts
                self.dseq += 1
                continue
            self._store_run(run)
            run = []
            if not self.on_message(
                msg.subject, msg.hdr, msg.data, copied_info(self, msg, after + left)
            ):
                return False
        self._store_run(run)
        self.lag = after
        return True

    def _store_run(self, run: list[StoredMsg]) -> None:
        """Store ``run`` as :func:`store_replicated` stores each message: without headers
        there is no TTL, marker or rollup, and :meth:`on_copied` sends republishing
        streams one by one, so what remains is the bookkeeping and waking consumers."""
        if not run:
            return
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
