"""``$JS.API.STREAM.SNAPSHOT.<stream>``: stream a stream's archive to a client.

The flow is nats-server's (``jsStreamSnapshotRequest`` / ``streamSnapshot``), so ``nats stream
backup``-style clients work unchanged:

1. the client subscribes a deliver subject and sends ``{deliver_subject, no_consumers,
   chunk_size, window_size, jsck}``; with ``jsck`` the stream's store is checked first;
2. the reply is ``{config, state}`` and a SNAPSHOT_CREATE advisory goes out;
3. the archive (docs/ARCHIVE.md, not nats-server's tar) follows in chunks, each with the reply
   subject ``$JS.SNAPSHOT.ACK.<stream>.<id>.<chunk length>.<index>``. The client answers each
   chunk with an empty message; at most ``window_size`` bytes are unacknowledged at a time;
4. an empty message with a status header ends it: ``204`` when complete, ``408 No Interest``
   when nobody receives the chunks, ``408 No Flow Response`` when no ack came for 5 s,
   ``500 <error>`` when the archive could not be produced; then SNAPSHOT_COMPLETE.

The archive is produced while the stream stays live. Its stream record holds the state when
the snapshot began, and messages stop at that state's ``last_seq``; a message removed while the
snapshot runs may be missing from it (the END record counts what was written).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import time
from typing import TYPE_CHECKING, Any

import orjson

from headwater.archive import ArchivedConsumer, ArchivedStream, ArchiveWriter, NatsArchiveWriter
from headwater.server.consumers import state as consumer_state
from headwater.server.consumers.config import cfg_get, stored_json
from headwater.server.routing.subjects import valid_literal_subject

from . import errors, layout
from .advisories import publish_stream_event
from .api import Request, Route, decode_request
from .gojson import GoType
from .restore import start_restore
from .streamconfig import config_to_json
from .streaminfo import MAX_SUBJECT_DETAILS, state_json
from .wire import is_empty_request, rfc3339

if TYPE_CHECKING:
    from .service import JetStreamService
    from .stream import Stream

__all__ = [
    "SNAPSHOT_ACK_PREFIX",
    "SNAPSHOT_ROUTES",
    "SnapshotApi",
    "archived_consumer",
    "archived_stream",
]

log = logging.getLogger("headwater.jetstream")

SNAPSHOT_ACK_PREFIX = "$JS.SNAPSHOT.ACK"

DEFAULT_CHUNK = 128 * 1024
MIN_CHUNK, MAX_CHUNK = 1024, 1024 * 1024
DEFAULT_WINDOW = 8 * 1024 * 1024
MIN_WINDOW, MAX_WINDOW = 1024, 32 * 1024 * 1024
FLOW_TIMEOUT = 5.0
"""Seconds without an ack, while the window is full, before the snapshot gives up (408)."""
YIELD_EVERY = 2048
"""Messages read from the store between two yields to the event loop."""

#: Served by :class:`SnapshotApi` (the service hands the router these after the others).
SNAPSHOT_ROUTES: tuple[Route, ...] = (
    Route(("STREAM", "SNAPSHOT", "*"), "stream_snapshot", "stream_snapshot"),
    Route(("STREAM", "RESTORE", "*"), "stream_restore", "stream_restore", {"deliver_subject": ""}),
)

_STR = GoType("string", "str")
_INT = GoType("int", "int")
_BOOL = GoType("bool", "bool")
_REQUEST = GoType(
    "server.JSApiStreamSnapshotRequest",
    "struct",
    {
        "deliver_subject": _STR,
        "no_consumers": _BOOL,
        "chunk_size": _INT,
        "window_size": _INT,
        "jsck": _BOOL,
    },
)


def _clamp(value: int, default: int, low: int, high: int) -> int:
    if value <= 0:
        return default
    return min(max(value, low), high)


# --------------------------------------------------------------------------- archive records


def archived_stream(stream: Stream) -> ArchivedStream:
    """The stream record: config as the API shows it, integer state at this moment."""
    st = stream.store.state()
    state: dict[str, Any] = {
        "messages": st.msgs,
        "bytes": st.bytes,
        "first_seq": st.first_seq,
        "first_ts": st.first_ts,
        "last_seq": st.last_seq,
        "last_ts": st.last_ts,
        "num_deleted": st.num_deleted,
        "num_subjects": st.num_subjects,
    }
    if st.num_subjects <= MAX_SUBJECT_DETAILS:
        state["subjects"] = stream.store.subject_state(">")
    return ArchivedStream(
        name=stream.name,
        created_ns=stream.created_ns,
        config=config_to_json(stream.config, dynamic_metadata=False),
        state=state,
    )


def archived_consumer(consumer: Any) -> ArchivedConsumer:
    """A consumer record: stored config, and the runtime state in the archive's terms."""
    raw = orjson.loads(consumer_state.snapshot(consumer))
    state: dict[str, Any] = {
        "delivered": {"consumer_seq": raw["dseq"], "stream_seq": max(raw["sseq"] - 1, 0)},
        "ack_floor": {"consumer_seq": raw["adflr"], "stream_seq": raw["asflr"]},
        "pending": raw["pending"],
        "redelivered": raw["rdc"],
    }
    if raw.get("lps") or raw.get("lps_end"):
        state["last_per_subject"] = raw["lps"]
        state["last_per_subject_end"] = raw["lps_end"]
    return ArchivedConsumer(
        name=consumer.name,
        created_ns=consumer.created_ns,
        config=stored_json(consumer.config),
        state=state,
    )


def durable_consumers(stream: Stream) -> list[Any]:
    """Consumers a backup keeps: the durable ones (ephemerals die with their client)."""
    return [
        c
        for name, c in sorted(stream.consumers.items())
        if cfg_get(c.config, "durable_name", "") and not c.closed
    ]


# --------------------------------------------------------------------------- health check


async def check_health(stream: Stream) -> None:
    """``jsck``: the store's invariants hold and every message reads back with its checksum.

    Reads in batches with yields, so a large stream does not stall the server. Raises the
    snapshot error (10064) naming what is wrong.
    """
    store = stream.store
    report = store.recovery_report
    if not report.clean:
        raise errors.STREAM_SNAPSHOT.exc(err=f"stream store was recovered with damage: {report}")
    try:
        store.check()
    except AssertionError as exc:
        raise errors.STREAM_SNAPSHOT.exc(err=f"stream store is inconsistent: {exc}") from None
    expected = store.state()
    seq, seen = 0, 0
    while True:
        msg = store.load_next(">", seq)
        if msg is None or msg.seq > expected.last_seq:
            break
        seen += 1
        seq = msg.seq + 1
        if seen % YIELD_EVERY == 0:
            await asyncio.sleep(0)
    if report.corrupt_seqs:
        bad = ", ".join(str(s) for s in report.corrupt_seqs[:10])
        raise errors.STREAM_SNAPSHOT.exc(err=f"corrupt messages in the store: {bad}")
    if seen < expected.msgs:
        raise errors.STREAM_SNAPSHOT.exc(err=f"read {seen} of {expected.msgs} messages")


# --------------------------------------------------------------------------- the sender


class _SnapshotFailed(Exception):
    """Ends the chunk stream with ``status`` (``408 No Interest``, ``500 <why>``...)."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


class SnapshotSender:
    """Produces the archive of one stream and streams it to ``deliver`` under flow control."""

    def __init__(
        self,
        service: JetStreamService,
        stream: Stream,
        deliver: str,
        chunk: int,
        window: int,
        consumers: bool,
    ) -> None:
        self.service = service
        self.stream = stream
        self.deliver = deliver
        self.chunk = chunk
        self.window = window
        self.header = archived_stream(stream)
        self.consumers = (
            [archived_consumer(c) for c in durable_consumers(stream)] if consumers else []
        )
        self._ack_subject = f"{SNAPSHOT_ACK_PREFIX}.{stream.name}.{secrets.token_hex(11)}"
        self._outstanding = 0
        self._acked = asyncio.Event()
        self._pending = bytearray()
        self.sent_bytes = 0

    async def run(self) -> str:
        """Send everything; returns the status line the end-of-stream message carried."""
        client = self.service.client
        assert client is not None
        sub = client.subscribe(self._ack_subject + ".>", self._on_ack)
        status = "204"
        try:
            await self._stream_archive()
        except _SnapshotFailed as exc:
            status = exc.status
        except Exception as exc:
            log.exception("snapshot of stream %r failed", self.stream.name)
            status = "500 " + " ".join(str(exc).split())
        finally:
            client.unsubscribe(sub)
        client.publish(self.deliver, b"", hdr=f"NATS/1.0 {status}\r\n\r\n".encode())
        return status

    def _on_ack(
        self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        # The chunk length is the second-to-last token of the reply subject we gave it.
        try:
            size = int(subject.rsplit(".", 2)[-2])
        except (ValueError, IndexError):
            return
        self._outstanding = max(self._outstanding - size, 0)
        self._acked.set()

    async def _stream_archive(self) -> None:
        writer: ArchiveWriter | NatsArchiveWriter
        if self.service.settings.snapshot_format == "nats":
            writer = NatsArchiveWriter(self._pending.extend)
        else:
            writer = ArchiveWriter(self._pending.extend)
        writer.write_stream(self.header)
        for consumer in self.consumers:
            writer.write_consumer(consumer)
        store = self.stream.store
        last = int(self.header.state["last_seq"])
        seq, index, done = 0, 0, False
        while True:
            read = 0
            while len(self._pending) < self.chunk and not done:
                if not self.stream.active:
                    raise _SnapshotFailed("500 stream was deleted during the snapshot")
                msg = store.load_next(">", seq)
                if msg is None or msg.seq > last:
                    writer.close()
                    done = True
                    break
                writer.write_message(msg.seq, msg.subject, msg.hdr, msg.data, msg.ts)
                seq = msg.seq + 1
                read += 1
                if read >= YIELD_EVERY:
                    break
            while len(self._pending) >= self.chunk or (done and self._pending):
                piece = bytes(self._pending[: self.chunk])
                del self._pending[: self.chunk]
                index += 1
                await self._send(piece, index)
            if done and not self._pending:
                return
            await asyncio.sleep(0)

    async def _send(self, piece: bytes, index: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FLOW_TIMEOUT
        while self._outstanding > 0 and self._outstanding + len(piece) > self.window:
            self._acked.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _SnapshotFailed("408 No Flow Response")
            try:
                await asyncio.wait_for(self._acked.wait(), remaining)
            except TimeoutError:
                raise _SnapshotFailed("408 No Flow Response") from None
            deadline = loop.time() + FLOW_TIMEOUT
        client = self.service.client
        assert client is not None
        reply = f"{self._ack_subject}.{len(piece)}.{index}"
        if client.publish(self.deliver, piece, reply=reply) == 0:
            raise _SnapshotFailed("408 No Interest")
        self._outstanding += len(piece)
        self.sent_bytes += len(piece)


# --------------------------------------------------------------------------- the API handlers


class SnapshotApi:
    """The router's handlers for STREAM.SNAPSHOT and STREAM.RESTORE."""

    def __init__(self, service: JetStreamService) -> None:
        self.service = service
        # Uploads and staging directories of restores cut short by a stop or a crash: no
        # restore runs yet, so whatever is there is garbage.
        shutil.rmtree(service.root / layout.RESTORE_STAGING, ignore_errors=True)
        """Names with a restore in progress: a second restore of one is refused (10130)."""
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stream_snapshot(self, req: Request) -> dict[str, Any]:
        if is_empty_request(req.body):
            raise errors.BAD_REQUEST.exc()
        stream = self.service.streams.get(req.tokens[-1])
        if stream is None:
            raise errors.STREAM_NOT_FOUND.exc()
        fields = decode_request(req.body, _REQUEST, "JSApiStreamSnapshotRequest")
        deliver = fields.get("deliver_subject", "")
        if not deliver or not valid_literal_subject(deliver):
            raise errors.SNAPSHOT_DELIVER_SUBJECT_INVALID.exc()
        if fields.get("jsck", False):
            await check_health(stream)
        sender = SnapshotSender(
            self.service,
            stream,
            deliver,
            _clamp(fields.get("chunk_size", 0), DEFAULT_CHUNK, MIN_CHUNK, MAX_CHUNK),
            _clamp(fields.get("window_size", 0), DEFAULT_WINDOW, MIN_WINDOW, MAX_WINDOW),
            consumers=not fields.get("no_consumers", False),
        )
        state = stream.state()
        self.spawn(self._run(sender))
        return {
            "config": config_to_json(stream.config),
            "state": state_json(state, consumer_count=stream.consumer_count()),
        }

    async def _run(self, sender: SnapshotSender) -> None:
        # Let the API reply go out before the first chunk, as the client expects.
        await asyncio.sleep(0)
        name = sender.stream.name
        state = state_json(sender.stream.state(), consumer_count=sender.stream.consumer_count())
        publish_stream_event(
            self.service.client, self.service.domain, "SNAPSHOT_CREATE", name, state=state
        )
        began = time.time_ns()
        log.info("Starting snapshot for stream '$G > %s'", name)
        status = await sender.run()
        ended = time.time_ns()
        publish_stream_event(
            self.service.client,
            self.service.domain,
            "SNAPSHOT_COMPLETE",
            name,
            start=rfc3339(began),
            end=rfc3339(ended),
        )
        log.info(
            "Completed snapshot of %d bytes for stream '$G > %s' in %.2fs (status %s)",
            sender.sent_bytes,
            name,
            (ended - began) / 1e9,
            status,
        )

    async def stream_restore(self, req: Request) -> dict[str, Any]:
        return await start_restore(self, req)
