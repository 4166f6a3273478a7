"""Sources: several streams merged into one, each through its own internal consumer.

Every sourced message is stored through the normal publish path (so the sourcing stream's
own limits, dedupe window and input transform apply) with a ``Nats-Stream-Source`` header
naming the source's index name and the origin sequence. That header is the only state: on
start each source's position is recovered by reading the stream backwards until every
source's last message is found, and its consumer starts right after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from headwater.server.jetstream import groupops, publish
from headwater.server.jetstream.layout import parse_time
from headwater.server.jetstream.streamconfig import StreamSource
from headwater.server.jetstream.wire import rfc3339, with_headers
from headwater.server.protocol import headers

from . import wire
from .catchup import LocalOrigin, one_by_one
from .groupfeed import GroupFeed
from .link import OriginLink
from .mirror import EXPECTED_PREFIX, source_info
from .transforms import SourceTransforms

if TYPE_CHECKING:
    from headwater.server.connections.internal import InternalClient
    from headwater.server.jetstream.stream import Stream
    from headwater.server.store.base import StoredMsg

__all__ = ["Source", "Sources", "recover_positions"]

log = logging.getLogger("headwater.jetstream")

Identity = Callable[[str], str]
"""Origin stream name -> its identity ("" when unknown), for the source header."""


class Source:
    """One configured source of a stream."""

    def __init__(
        self,
        stream: Stream,
        client: InternalClient,
        source: StreamSource,
        identity: Identity,
        local: LocalOrigin | None = None,
    ) -> None:
        self.stream = stream
        self.source = source
        self.iname = wire.index_name(source)
        self.transforms = SourceTransforms(source)
        self._identity = identity
        self.ident = ""
        self.sseq = 0
        """Origin sequence of the last message taken from this source."""
        self.dseq = 0
        self.lag = 0
        self.link = OriginLink(client, source, "S", self, local)
        self.feed = GroupFeed(stream.group, self._restart) if stream.group is not None else None
        """A replicated stream's leader proposes what it takes (:mod:`.groupfeed`)."""

    # --- LinkOwner -----------------------------------------------------------------------

    def start_position(self) -> tuple[int, str | None]:
        """The reference's choice: after the last sourced message, else the configured start,
        else (a stream that already holds messages) from its last message's time."""
        if self.sseq > 0:
            return self.sseq + 1, None
        if self.source.opt_start_seq > 0:
            return self.source.opt_start_seq, None
        state = self.stream.store.state()
        last_time = rfc3339(state.last_ts) if state.last_ts else None
        if self.source.opt_start_time is not None:
            start = self.source.opt_start_time
            if state.last_ts and _before(start, state.last_ts):
                return 0, last_time
            return 0, start
        if state.first_seq > 1 and last_time is not None:
            return 0, last_time
        return 0, None

    def reset_tracking(self) -> None:
        self.dseq = 0
        self.ident = self._identity(self.source.name)

    def on_message(self, subject: str, hdr: bytes, payload: bytes, info: wire.AckInfo) -> bool:
        if info.dc > 1 or not self.stream.active:
            return True
        if info.dseq != self.dseq + 1:
            # Older deliveries are ignored; a skipped one means a lost message: recreate.
            return info.dseq <= self.dseq
        self.dseq = info.dseq
        self.sseq = info.sseq
        self.lag = info.pending - 1 if info.pending else 0
        if hdr:
            hdr = wire.strip_headers(hdr, (wire.SOURCE_HEADER,), EXPECTED_PREFIX)
        value = wire.source_header(self.iname, info.sseq, subject, self.ident)
        hdr = with_headers(hdr, [(wire.SOURCE_HEADER, value)])
        subject = self.transforms.apply(subject)
        group = self.stream.group
        if self.feed is not None and group is not None:
            self.feed.propose(groupops.Publish(subject, hdr, payload, group.stamp()))
            return True
        publish.process(self.stream, subject, "", hdr, payload)
        return True

    def _restart(self) -> None:
        """A proposal was lost: from the position the stream holds now (all answered)."""
        self.sseq = 0
        recover_positions(self.stream, [self])
        self.link.retry()

    def on_copied(self, batch: list[StoredMsg], after: int) -> bool:
        return one_by_one(self, batch, after)

    def info(self) -> dict[str, Any]:
        return source_info(self.source, self.lag, self.link, self.sseq)


def _before(text: str, ts_ns: int) -> bool:
    return parse_time(text) < ts_ns


def recover_positions(stream: Stream, sources: list[Source]) -> None:
    """Set each source's ``sseq`` from the newest stored message that came from it."""
    pending = {s.iname: s for s in sources}
    store = stream.store
    state = store.state()
    if not state.msgs:
        return
    seq = state.last_seq
    while pending and seq >= state.first_seq:
        msg = store.load_prev(">", seq)
        if msg is None:
            break
        seq = msg.seq - 1
        value = headers.get(msg.hdr, wire.SOURCE_HEADER) if msg.hdr else None
        parsed = wire.parse_source_header(value) if value else None
        if parsed is None:
            continue
        name, iname, sseq = parsed
        found = pending.pop(iname, None)
        if found is not None:
            found.sseq = sseq
            continue
        if iname:
            continue
        # A pre-2.10 header names the stream only: it counts for every source of it.
        for key, src in list(pending.items()):
            if name in (src.source.name, src.iname.split(" ", 1)[0]):
                src.sseq = sseq
                del pending[key]


class Sources:
    """All sources of one stream."""

    def __init__(
        self,
        stream: Stream,
        client: InternalClient,
        identity: Identity,
        local: LocalOrigin | None = None,
    ) -> None:
        self.stream = stream
        self.items = [Source(stream, client, s, identity, local) for s in stream.config.sources]

    def start(self) -> None:
        recover_positions(self.stream, self.items)
        for item in self.items:
            item.link.start()

    def close(self) -> None:
        for item in self.items:
            item.link.close()

    def info(self) -> list[dict[str, Any]]:
        return [item.info() for item in self.items]
