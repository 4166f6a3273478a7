"""Moving a replica's snapshot from one server to another over the routes (docs/REPLICATION.md,
"Catching up"): the out-of-band transfer the runner leaves to its owner (`SendSnapshot`).

One `Transfers` per server and stream does both sides. The leader's owner, told
``on_send_snapshot(to, index, epoch)``, calls `send` with its state as of `index` as an async
iterator of byte chunks (of any size and number); the follower's owner gets it whole, written
to a `Sink` it opened, and only once the checksum matched: ``on_complete(index, epoch, sink)``.
It then checks `snapshot_wanted`, switches its state and calls `install_snapshot` itself.

**Subjects.** Every message for a server's side of a stream goes to
``$HW.SNAP.<stream>.<server id>`` (one subscription each; only servers may publish on
``$HW.``, the routes carry it), through the `Transport` the runner uses. Messages are msgpack
arrays (msgspec, tagged): ``[kind, id, src, ...]``, where `id` names the transfer (random, 63
bits) and `src` is the id of the server that sent the message (where an answer goes):

- ``BEGIN index epoch`` (sender): asks for a transfer. The receiver answers ``ACK 0``, or
  ``ABORT`` (busy with one at the same or a higher index; `accept` said no; the sink failed).
- ``CHUNK offset data`` (sender): the bytes at `offset`; at most `chunk_bytes` of them.
- ``END total digest`` (sender): the length and the xxh3-64 of the whole snapshot.
- ``ACK written`` (receiver): everything before `written` is in the sink (cumulative).
- ``NACK written received`` (receiver, on a chunk out of order): it holds everything before
  `received`, in the sink or on the way there; the sender resends its unacknowledged chunks
  from there.
- ``DONE`` (receiver): verified and handed to the owner. ``ABORT reason``: either side drops
  the transfer (the receiver its partial data).

**Flow control.** The sender keeps at most `window_bytes` sent and not yet acknowledged, and
keeps exactly those (to resend them): its memory is one window plus one piece of its source.
The receiver acknowledges a chunk only once its sink wrote it, so the chunks queued for the
sink are at most a window too (one past the window is dropped: it comes again). Chunks are
taken only in order: a duplicate or one after a gap is dropped and answered with a NACK (one
per gap, again after `resend_s`), on which the sender resends from there (go-back-N, at most
once per `resend_s` for one offset). When nothing was acknowledged for `resend_s` the sender
probes: BEGIN again before the ACK 0, else its last unacknowledged chunk (a duplicate draws a
NACK, a lost tail is taken), else END again before DONE. A lost message thus costs a round,
not the transfer.

**Which transfer.** A receiver has at most one transfer at a time, the current one; it ignores
the chunks of any other (answering ABORT unless it completed that one, so that a sender whose
transfer it dropped stops). A BEGIN at a higher index than the current one's supersedes it
(ABORT to its sender, its partial data dropped); one at the same or a lower index is refused.
A sender sends at most one transfer to a target: `send` returns None while one runs (the core
asks again every `snapshot_interval`, 1 s, while the follower still needs a snapshot;
superseding its own transfer at each ask would never finish a large one). A transfer that saw
no progress for `stall_s` (the receiver: no chunk and no write; the sender: no
acknowledgement, or its source gave nothing) is abandoned on that side, with an ABORT to the
other; the receiver's partial data is dropped (`Sink.discard`). The owner is asked again
later: the core repeats the SendSnapshot after its `snapshot_interval`. Recently finished
transfers are remembered (a duplicate END or BEGIN gets the same DONE or ABORT again).

**Completion.** Once END came and the sink holds `total` bytes, the receiver compares the
xxh3-64 of what it wrote with END's; only a match is finished (`Sink.finish`) and handed to
``on_complete``, after which the sink is the owner's. A mismatch is an ABORT ("checksum") and
the data is dropped.

Nothing blocks the event loop: handlers (run inside routing) only queue or answer; writes go
through the sink (`FileSink` writes in a thread); each transfer is one task (a sender's
awaits its source in a second one), cancelled by `close` (the receiver's partial data is
dropped then too). There is no unbounded queue.

Why not a library: NATS' object store needs a JetStream stream (the very thing being
replicated, and it would store the snapshot once more), and a file-transfer protocol (HTTP,
rsync) needs a connection of its own beside the routes, which already join the servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import tempfile
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Protocol

import msgspec
import xxhash

from headwater.server.replicated.runner import Resolve, Transport
from headwater.server.replicated.wire import Count, Name
from headwater.server.routing.subjects import SERVERS_ONLY

log = logging.getLogger("headwater.server.replicated.transfer")

SNAP_PREFIX = f"{SERVERS_ONLY}SNAP"
"""``$HW.SNAP.<stream>.<server id>``: snapshot transfers to and from one server."""

COMPLETE = "complete"
STALLED = "stalled"
CLOSED = "closed"
"""Outcomes of a transfer on the sender's side; a refusal or an abort by the receiver is
``"aborted: <its reason>"``."""

REMEMBERED = 64
"""Finished transfers remembered, to answer a late duplicate BEGIN or END again."""

# Wire ----------------------------------------------------------------------------------------

Digest = Annotated[bytes, msgspec.Meta(min_length=8, max_length=8)]  # xxh3-64, big-endian


class _Message(msgspec.Struct, array_like=True, frozen=True, forbid_unknown_fields=True):
    id: Count
    src: Name


class Begin(_Message, tag=1):
    index: Count
    epoch: Count


class Chunk(_Message, tag=2):
    offset: Count
    data: bytes


class End(_Message, tag=3):
    total: Count
    digest: Digest


class Ack(_Message, tag=4):
    written: Count


class Nack(_Message, tag=5):
    written: Count
    received: Count


class Done(_Message, tag=6):
    """The receiver verified the snapshot and handed it to its owner."""


class Abort(_Message, tag=7):
    reason: Annotated[str, msgspec.Meta(max_length=256)]


Message = Begin | Chunk | End | Ack | Nack | Done | Abort

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


class TransferWireError(ValueError):
    """Bytes that are not a well-formed transfer message."""


def encode(msg: Message) -> bytes:
    return _encoder.encode(msg)


def decode(data: bytes) -> Message:
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, ValueError) as exc:  # ValueError: a string not UTF-8
        raise TransferWireError(f"malformed snapshot transfer message: {exc}") from None


# Sinks ---------------------------------------------------------------------------------------


class Sink(Protocol):
    """Where the receiver writes a snapshot, chunk by chunk, in order."""

    async def write(self, chunk: bytes) -> None: ...

    async def finish(self) -> None:
        """Every chunk was written and verified: make it whole (flush, close)."""

    async def discard(self) -> None:
        """The transfer was dropped: let go of the partial data. Never raises."""


class FileSink:
    """A snapshot written to a new file in `directory` (`path`), by a thread: the event loop
    never waits on the disk (but for creating the file, one quick system call). `finish`
    flushes, fsyncs and closes it; `discard` deletes it. After `on_complete` the file is the
    owner's to read and delete."""

    def __init__(self, directory: str | Path, prefix: str = "snap-") -> None:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=".part", dir=directory)
        self.path = Path(name)
        self._file: BinaryIO | None = os.fdopen(fd, "wb")
        # A write cancelled on the loop's side goes on in its thread: discard waits for it.
        self._lock = threading.Lock()

    async def write(self, chunk: bytes) -> None:
        await asyncio.to_thread(self._write, chunk)

    async def finish(self) -> None:
        await asyncio.to_thread(self._finish)

    async def discard(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.to_thread(self._discard))

    def _write(self, chunk: bytes) -> None:
        with self._lock:
            if self._file is None:
                raise OSError("snapshot file closed")
            self._file.write(chunk)

    def _finish(self) -> None:
        with self._lock:
            if self._file is None:
                raise OSError("snapshot file closed")
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None

    def _discard(self) -> None:
        with self._lock:
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
                self._file = None
            with contextlib.suppress(OSError):
                self.path.unlink()


def file_sinks(directory: str | Path) -> Callable[[int, int], FileSink]:
    """An `open_sink` for `Transfers`: each transfer to a new file in `directory`."""
    return lambda index, epoch: FileSink(directory, prefix=f"snap-{index}-{epoch}-")


OpenSink = Callable[[int, int], Sink]
"""(index, epoch) -> a new sink for a transfer the receiver takes."""
OnComplete = Callable[[int, int, Any], None]
"""(index, epoch, sink): a verified snapshot; the sink is the owner's from then on."""
Accept = Callable[[int, int], bool]
"""(index, epoch) -> take a transfer of that snapshot? (the owner: `snapshot_wanted`)"""


def _always(index: int, epoch: int) -> bool:
    return True


def _dropped(index: int, epoch: int, sink: Any) -> None:
    log.warning("snapshot %d received with no owner to install it: dropped", index)


# State ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Outgoing:
    id: int
    to: str
    to_id: str
    index: int
    epoch: int
    source: AsyncIterable[bytes]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    unacked: deque[tuple[int, bytes]] = field(default_factory=deque)  # (offset, chunk)
    unacked_bytes: int = 0
    acked: int = 0
    sent: int = 0
    accepted: bool = False
    outcome: str | None = None
    end: End | None = None  # once sent: sent again while DONE does not come
    progress: float = 0.0  # monotonic time of the last acknowledgement (or of the start)
    resend_from: int | None = None  # asked by a NACK, carried out by the task
    nacked: tuple[int, float] = (-1, 0.0)  # the last NACK resent for: (offset, when)
    task: asyncio.Task[str] | None = None


@dataclass(eq=False)
class _Incoming:
    id: int
    src: str
    index: int
    epoch: int
    sink: Sink
    seen: float
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    queue: deque[bytes] = field(default_factory=deque)  # in order, for the sink
    queued: int = 0
    received: int = 0  # bytes taken in order (queued or written)
    written: int = 0
    end: tuple[int, bytes] | None = None  # (total, digest) once END came
    nacked: tuple[int, float] = (-1, 0.0)  # the last NACK: (its `received`, when)
    task: asyncio.Task[None] | None = None


class Transfers:
    """The snapshot transfers of `stream` to and from this server (`my_id`): `start()`, then
    `send` (the leader's owner), and the callbacks for what arrives (the follower's owner);
    `close()` cancels everything. See the module docstring for the protocol."""

    def __init__(
        self,
        stream: str,
        my_id: str,
        *,
        transport: Transport,
        resolve: Resolve,
        open_sink: OpenSink,
        on_complete: OnComplete = _dropped,
        accept: Accept = _always,
        chunk_bytes: int = 64 * 1024,
        window_bytes: int = 1024 * 1024,
        stall_s: float = 10.0,
        resend_s: float = 0.5,
        max_outgoing: int = 4,
        prefix: str = SNAP_PREFIX,
    ) -> None:
        if not 0 < chunk_bytes <= window_bytes:
            raise ValueError("chunk_bytes must be positive and at most window_bytes")
        if not 0 < resend_s < stall_s:
            raise ValueError("resend_s must be positive and below stall_s")
        self.stream = stream
        self.my_id = my_id
        self.transport = transport
        self.resolve = resolve
        self.open_sink = open_sink
        self.on_complete = on_complete
        self.accept = accept
        self.chunk_bytes = chunk_bytes
        self.window_bytes = window_bytes
        self.stall_s = stall_s
        self.resend_s = resend_s
        self.max_outgoing = max_outgoing
        self.prefix = prefix
        self._outgoing: dict[int, _Outgoing] = {}
        self._to: dict[str, _Outgoing] = {}  # target name -> its transfer in progress
        self._incoming: _Incoming | None = None
        self._finished: OrderedDict[int, bool] = OrderedDict()  # id -> verified and handed over
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sub: Any = None
        self._closed = False
        self.resent = 0  # chunks sent again (tests and logs)
        self.peak_unacked = 0  # the most bytes a sender had unacknowledged
        self.peak_queued = 0  # the most bytes a receiver had queued for its sink

    @property
    def subject(self) -> str:
        return self._subject(self.my_id)

    def _subject(self, server_id: str) -> str:
        return f"{self.prefix}.{self.stream}.{server_id}"

    async def start(self) -> None:
        self._sub = self.transport.subscribe(self.subject, self._on_delivery)

    async def close(self) -> None:
        """Cancels every transfer (telling the other sides) and waits for their tasks; the
        partial data being received is dropped."""
        if self._closed:
            return
        self._closed = True
        if self._sub is not None:
            self.transport.unsubscribe(self._sub)
            self._sub = None
        for out in list(self._outgoing.values()):
            self._publish(out.to_id, Abort(out.id, self.my_id, CLOSED))
        if self._incoming is not None:
            self._publish(self._incoming.src, Abort(self._incoming.id, self.my_id, CLOSED))
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._incoming = None

    # Sending -----------------------------------------------------------------------------------

    def send(
        self, to: str, index: int, epoch: int, source: AsyncIterable[bytes]
    ) -> asyncio.Task[str] | None:
        """Sends the snapshot as of `index` (entry of `epoch`) that `source` yields to the
        server named `to`. Returns the transfer's task (its result: `COMPLETE`, `STALLED`,
        ``"aborted: <the receiver's reason>"`` or ``"failed: <the source's error>"``), or
        None when it does not start: closed, `to` unknown, a transfer to `to` still running,
        or `max_outgoing` running (the source is not touched then). A started one closes the
        source (``aclose``) when it ends; `close` cancels the task."""
        to_id = self.resolve(to)
        if self._closed or to_id is None or to in self._to:
            return None
        if len(self._outgoing) >= self.max_outgoing:
            return None
        out = _Outgoing(secrets.randbits(63), to, to_id, index, epoch, source)
        out.progress = time.monotonic()
        self._outgoing[out.id] = out
        self._to[to] = out
        task = asyncio.get_running_loop().create_task(
            self._send(out), name=f"snap:{self.stream}:send:{to}"
        )
        out.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _send(self, out: _Outgoing) -> str:
        pieces = aiter(out.source)
        loop = asyncio.get_running_loop()
        digest = xxhash.xxh3_64()
        rest = memoryview(b"")  # what is left of the source's last piece
        piece: asyncio.Task[bytes | None] | None = None  # the source's next piece, awaited
        asked = 0.0  # when it was asked for
        exhausted = False
        try:
            self._publish(out.to_id, Begin(out.id, self.my_id, out.index, out.epoch))
            while out.outcome is None:
                out.wake.clear()  # before looking: whatever comes from here on wakes the wait
                if out.resend_from is not None:
                    self._resend(out, out.resend_from)
                    out.resend_from = None
                while out.accepted and out.outcome is None and not exhausted:
                    if not rest:
                        if piece is None:
                            piece = loop.create_task(
                                _next(pieces), name=f"snap:{self.stream}:source:{out.to}"
                            )
                            asked = time.monotonic()
                        if not piece.done():
                            break  # wait for it, and for answers meanwhile
                        done, piece = piece, None
                        try:
                            got = done.result()
                        except Exception as exc:  # the owner's source failed: no snapshot
                            self._abandon(out, f"failed: {exc}", "its source failed")
                            break
                        if got is None:
                            exhausted = True
                        else:
                            rest = memoryview(got).cast("B")
                        continue
                    size = min(self.chunk_bytes, len(rest))
                    if out.unacked_bytes + size > self.window_bytes:
                        break  # the window is full: wait for acknowledgements
                    chunk, rest = bytes(rest[:size]), rest[size:]
                    digest.update(chunk)
                    if not out.unacked:
                        out.progress = time.monotonic()  # an ack is owed from now on
                    out.unacked.append((out.sent, chunk))
                    out.unacked_bytes += size
                    self.peak_unacked = max(self.peak_unacked, out.unacked_bytes)
                    offset, out.sent = out.sent, out.sent + size
                    self._publish(out.to_id, Chunk(out.id, self.my_id, offset, chunk))
                if exhausted and out.end is None and out.outcome is None:
                    out.end = End(out.id, self.my_id, out.sent, digest.digest())
                    out.progress = time.monotonic()
                    self._publish(out.to_id, out.end)
                if out.outcome is not None:
                    break
                waiting = loop.create_task(out.wake.wait())
                try:
                    woken, _ = await asyncio.wait(
                        {waiting} if piece is None else {waiting, piece},
                        timeout=self.resend_s,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    waiting.cancel()
                if woken:
                    continue
                now = time.monotonic()
                owed = bool(out.unacked) or not out.accepted or out.end is not None
                if piece is not None and now - asked >= self.stall_s:
                    self._abandon(out, STALLED, "its source gave nothing")
                elif owed and now - out.progress >= self.stall_s:
                    self._abandon(out, STALLED, "no acknowledgement")
                elif owed:
                    self._probe(out)
            return out.outcome or CLOSED
        except asyncio.CancelledError:
            out.outcome = out.outcome or CLOSED
            raise
        finally:
            self._outgoing.pop(out.id, None)
            if self._to.get(out.to) is out:
                del self._to[out.to]
            out.unacked.clear()
            if piece is not None:
                piece.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await piece
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    def _abandon(self, out: _Outgoing, outcome: str, why: str) -> None:
        log.warning("snapshot %d of %s to %s abandoned: %s", out.index, self.stream, out.to, why)
        out.outcome = outcome
        self._publish(out.to_id, Abort(out.id, self.my_id, outcome))

    def _probe(self, out: _Outgoing) -> None:
        """Nothing acknowledged for `resend_s`: send what shows the receiver where we are."""
        if not out.accepted:
            self._publish(out.to_id, Begin(out.id, self.my_id, out.index, out.epoch))
        elif out.unacked:
            offset, chunk = out.unacked[-1]
            self.resent += 1
            self._publish(out.to_id, Chunk(out.id, self.my_id, offset, chunk))
        elif out.end is not None:
            self._publish(out.to_id, out.end)

    def _resend(self, out: _Outgoing, start: int) -> None:
        for offset, chunk in list(out.unacked):
            if offset >= start and out.outcome is None:
                self.resent += 1
                self._publish(out.to_id, Chunk(out.id, self.my_id, offset, chunk))

    def _release(self, out: _Outgoing, written: int) -> None:
        """The receiver wrote everything before `written`: those chunks leave the window."""
        if written <= out.acked or written > out.sent:
            return
        while out.unacked and out.unacked[0][0] + len(out.unacked[0][1]) <= written:
            out.unacked_bytes -= len(out.unacked.popleft()[1])
        out.acked = written
        out.progress = time.monotonic()
        out.wake.set()

    # Receiving ---------------------------------------------------------------------------------

    def _on_delivery(
        self, sub: Any, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        try:
            msg = decode(payload)
        except TransferWireError as exc:
            log.warning("snapshot transfer of %s: dropped a message: %s", self.stream, exc)
            return
        if self._closed:
            return
        if isinstance(msg, Chunk):
            self._on_chunk(msg)
        elif isinstance(msg, Ack | Nack | Done):
            self._on_answer(msg)
        elif isinstance(msg, Abort):
            self._on_abort(msg)
        elif isinstance(msg, Begin):
            self._on_begin(msg)
        else:
            self._on_end(msg)

    def _on_answer(self, msg: Ack | Nack | Done) -> None:
        out = self._outgoing.get(msg.id)
        if out is None or out.outcome is not None:
            return
        if isinstance(msg, Done):
            if out.end is not None:  # verified whole, even if its last ACK was lost
                out.outcome = COMPLETE
                out.wake.set()
            return
        if not out.accepted:
            out.accepted = True
            out.progress = time.monotonic()
            out.wake.set()
        self._release(out, msg.written)
        if isinstance(msg, Nack) and msg.received < out.sent:
            now = time.monotonic()
            last, when = out.nacked
            if msg.received != last or now - when >= self.resend_s:
                out.nacked = (msg.received, now)
                out.resend_from = msg.received  # the task resends: a handler never publishes
                out.wake.set()

    def _on_abort(self, msg: Abort) -> None:
        out = self._outgoing.get(msg.id)
        if out is not None:
            if out.outcome is None:
                out.outcome = f"aborted: {msg.reason}"
                out.wake.set()
            return
        inc = self._incoming
        if inc is not None and inc.id == msg.id:
            self._drop(inc, None)

    def _on_begin(self, msg: Begin) -> None:
        inc = self._incoming
        if inc is not None and inc.id == msg.id:
            inc.seen = time.monotonic()
            self._publish(inc.src, Ack(inc.id, self.my_id, inc.written))  # BEGIN again
            return
        if msg.id in self._finished:
            self._answer_finished(msg.id, msg.src)
            return
        if inc is not None:
            if msg.index <= inc.index:
                self._publish(msg.src, Abort(msg.id, self.my_id, f"busy with {inc.index}"))
                return
            self._drop(inc, "superseded")
        try:
            wanted = self.accept(msg.index, msg.epoch)
            sink = self.open_sink(msg.index, msg.epoch) if wanted else None
        except Exception as exc:
            log.warning("snapshot %d of %s: no sink: %s", msg.index, self.stream, exc)
            self._publish(msg.src, Abort(msg.id, self.my_id, "no sink"))
            return
        if sink is None:
            self._publish(msg.src, Abort(msg.id, self.my_id, "not wanted"))
            return
        inc = _Incoming(msg.id, msg.src, msg.index, msg.epoch, sink, time.monotonic())
        self._incoming = inc
        task = asyncio.get_running_loop().create_task(
            self._receive(inc), name=f"snap:{self.stream}:receive:{msg.index}"
        )
        inc.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._publish(inc.src, Ack(inc.id, self.my_id, 0))

    def _on_chunk(self, msg: Chunk) -> None:
        inc = self._incoming
        if inc is None or inc.id != msg.id:
            # Unknown, or dropped here (its ABORT may have been lost): its sender stops. The
            # chunks of a transfer completed here are late duplicates: nothing to say.
            if not self._finished.get(msg.id, False):
                self._publish(msg.src, Abort(msg.id, self.my_id, "unknown transfer"))
            return
        inc.seen = time.monotonic()
        size = len(msg.data)
        if msg.offset == inc.received and size:
            if inc.end is not None and inc.received + size > inc.end[0]:
                self._drop(inc, "longer than its END")
                return
            if inc.queued + size > self.window_bytes:
                return  # past the window the sender may have out: dropped, it comes again
            inc.queue.append(msg.data)
            inc.queued += size
            inc.received += size
            self.peak_queued = max(self.peak_queued, inc.queued)
            inc.wake.set()
        elif inc.nacked[0] != inc.received or inc.seen - inc.nacked[1] >= self.resend_s:
            # A duplicate, or one after a gap: one NACK per gap (and per `resend_s`, should
            # it be lost) says where to go on from.
            inc.nacked = (inc.received, inc.seen)
            self._publish(inc.src, Nack(inc.id, self.my_id, inc.written, inc.received))

    def _on_end(self, msg: End) -> None:
        inc = self._incoming
        if inc is None or inc.id != msg.id:
            if msg.id in self._finished:
                self._answer_finished(msg.id, msg.src)
            else:
                self._publish(msg.src, Abort(msg.id, self.my_id, "unknown transfer"))
            return
        inc.seen = time.monotonic()
        if msg.total < inc.received:
            self._drop(inc, "shorter than what came")
            return
        inc.end = (msg.total, msg.digest)
        inc.wake.set()

    async def _receive(self, inc: _Incoming) -> None:
        """Writes `inc`'s chunks to its sink in order, then verifies and hands it over."""
        handed = False
        digest = xxhash.xxh3_64()
        try:
            while True:
                inc.wake.clear()
                if inc.queue:
                    chunk = inc.queue[0]
                    await inc.sink.write(chunk)
                    inc.queue.popleft()
                    inc.queued -= len(chunk)
                    inc.written += len(chunk)
                    inc.seen = time.monotonic()
                    digest.update(chunk)
                    self._publish(inc.src, Ack(inc.id, self.my_id, inc.written))
                    continue
                if inc.end is not None and inc.written == inc.end[0]:
                    break
                wait = inc.seen + self.stall_s - time.monotonic()
                if wait <= 0:
                    log.warning(
                        "snapshot %d of %s from %s abandoned: nothing for %.1f s",
                        inc.index,
                        self.stream,
                        inc.src,
                        self.stall_s,
                    )
                    self._drop(inc, STALLED, cancel=False)
                    return
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await inc.wake.wait()
            if digest.digest() != inc.end[1]:
                log.warning(
                    "snapshot %d of %s from %s: checksum mismatch, dropped",
                    inc.index,
                    self.stream,
                    inc.src,
                )
                self._drop(inc, "checksum", cancel=False)
                return
            await inc.sink.finish()
            self._forget(inc, True)
            self._publish(inc.src, Done(inc.id, self.my_id))
            handed = True
            try:
                self.on_complete(inc.index, inc.epoch, inc.sink)
            except Exception:
                log.exception("snapshot %d of %s: on_complete failed", inc.index, self.stream)
        except Exception as exc:  # the sink failed: the transfer is lost, the core asks again
            log.warning("snapshot %d of %s: sink failed: %s", inc.index, self.stream, exc)
            self._drop(inc, "sink failed", cancel=False)
        finally:
            if self._incoming is inc:
                self._incoming = None
            inc.queue.clear()
            if not handed:
                await inc.sink.discard()

    def _drop(self, inc: _Incoming, reason: str | None, cancel: bool = True) -> None:
        """Drops the transfer being received; `reason` goes to its sender in an ABORT (None:
        the sender aborted it). Its task discards the partial data as it ends."""
        self._forget(inc, False)
        if reason is not None:
            self._publish(inc.src, Abort(inc.id, self.my_id, reason))
        if cancel and inc.task is not None:
            inc.task.cancel()

    def _forget(self, inc: _Incoming, ok: bool) -> None:
        if self._incoming is inc:
            self._incoming = None
        self._finished[inc.id] = ok
        while len(self._finished) > REMEMBERED:
            self._finished.popitem(last=False)

    def _answer_finished(self, id: int, src: str) -> None:
        ok = self._finished[id]
        self._publish(src, Done(id, self.my_id) if ok else Abort(id, self.my_id, "dropped"))

    # Transport ---------------------------------------------------------------------------------

    def _publish(self, server_id: str, msg: Message) -> None:
        try:
            self.transport.publish(self._subject(server_id), encode(msg))
        except Exception as exc:  # a route going away: lost, as on the network
            log.warning("snapshot transfer of %s: send failed: %s", self.stream, exc)


async def _next(pieces: AsyncIterator[bytes]) -> bytes | None:
    """The source's next piece; None at its end."""
    try:
        return await anext(pieces)  # not copied: it is cut into chunks as it is
    except StopAsyncIteration:
        return None


async def chunks_of(data: bytes, size: int = 256 * 1024) -> AsyncIterator[bytes]:
    """`data` as a source for `Transfers.send` (small snapshots, tests)."""
    view = memoryview(data)
    for start in range(0, len(data), size):
        yield bytes(view[start : start + size])
