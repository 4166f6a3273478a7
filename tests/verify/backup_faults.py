"""Real backups for the verification tests, and the faults injected into copies of them.

Backups are made the way users make them: ``headwater.control.backup`` (nats-py) against a
real headwater-server. Faults are then injected into a copy: byte-level ones (a flipped byte,
a truncated file, a record dropped from or reordered inside a frame) by rewriting the frames,
semantic ones (a consumer state, a stream state, a config) by re-writing the archive through
``headwater.archive.ArchiveWriter``, so only the intended fault is there.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamSource

from headwater.archive import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveWriter,
    read_archive,
)
from headwater.archive.format import (
    FILE_HEADER,
    FRAME_HEADER,
    RECORD_HEAD,
    RECORD_SUM,
    checksum,
    compress,
    decompress,
    unpack_file_header,
)
from headwater.control.backup import ARCHIVE_FILE, backup_stream, restore_stream
from headwater.testing import ServerProcess

FLEET_SIZE = 100


@dataclass
class Backups:
    """Clean backups made from one server, by name."""

    root: Path
    dirs: dict[str, Path] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Path:
        return self.dirs[name]


async def _fill_orders(nc: Client) -> None:
    """A file stream with headers, a deleted first message, interior and trailing deletes,
    and durables with delivered, acknowledged, redelivered and pending messages."""
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"], storage=StorageType.FILE)
    for i in range(1, 41):
        hdrs = {"Trace": f"t-{i}"} if i % 3 == 0 else None
        await js.publish(f"orders.{i % 4}", f"payload {i}".encode() * (i % 5), headers=hdrs)
    for seq in (1, 7, 8, 20, 39, 40):
        await js.delete_msg("ORDERS", seq)
    await js.add_consumer(
        "ORDERS",
        ConsumerConfig(durable_name="WORK", ack_policy=AckPolicy.EXPLICIT, ack_wait=5.0),
    )
    await js.add_consumer("ORDERS", ConsumerConfig(durable_name="IDLE"))
    sub = await js.pull_subscribe_bind("WORK", "ORDERS")
    batch = await sub.fetch(4, timeout=2)
    for msg in batch[:2]:
        await msg.ack_sync()
    await batch[2].nak()
    await sub.fetch(1, timeout=2)  # the nak'ed message again: a redelivery
    await sub.unsubscribe()


async def fill_orders_cache_empty(nc: Client) -> None:
    """ORDERS, a memory stream CACHE (a gap, headers, a durable) and an EMPTY stream: what
    the backups of both server kinds start from."""
    js = nc.jetstream()
    await _fill_orders(nc)
    await js.add_stream(name="CACHE", subjects=["cache.>"], storage=StorageType.MEMORY)
    for i in range(25):
        await js.publish(f"cache.{i % 5}", b"v" * i, headers={"K": str(i)} if i % 2 else None)
    await js.delete_msg("CACHE", 10)
    await js.add_consumer("CACHE", ConsumerConfig(durable_name="READER"))
    await js.add_stream(name="EMPTY", subjects=["empty.>"])


async def _make(url: str, root: Path) -> Backups:
    out = Backups(root)
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        await fill_orders_cache_empty(nc)
        await js.add_stream(name="ORIGIN", subjects=["origin.>"])
        for i in range(30):
            await js.publish(f"origin.{i % 3}", f"o{i}".encode(), headers={"N": str(i)})
        await js.add_stream(name="MIRROR", mirror=StreamSource(name="ORIGIN"))
        for _ in range(200):
            info = await js.stream_info("MIRROR")
            if info.state.messages == 30:
                break
            await asyncio.sleep(0.05)
        assert info.state.messages == 30, "the mirror did not catch up within 10 s"
        for name in ("ORDERS", "CACHE", "EMPTY", "ORIGIN", "MIRROR"):
            out.dirs[name] = (await backup_stream(nc, name, root / name.lower())).directory
        # "After": the same stream a little later, one message gone and two more.
        await js.delete_msg("ORDERS", 12)
        for i in range(2):
            await js.publish("orders.9", f"later {i}".encode())
        out.dirs["ORDERS-AFTER"] = (
            await backup_stream(nc, "ORDERS", root / "orders-after")
        ).directory
    finally:
        await nc.close()
    return out


async def _make_fleet(url: str, root: Path, count: int) -> Path:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        for n in range(count):
            name = f"F{n:03d}"
            await js.add_stream(name=name, subjects=[f"fleet.{n}.>"])
            for i in range(3):
                await js.publish(f"fleet.{n}.{i}", f"{name}-{i}".encode())
            await backup_stream(nc, name, root / name)
    finally:
        await nc.close()
    return root


def make_backups(server: ServerProcess, root: Path) -> Backups:
    return asyncio.run(_make(server.url, root))


def make_fleet(server: ServerProcess, root: Path, count: int = FLEET_SIZE) -> Path:
    return asyncio.run(_make_fleet(server.url, root, count))


# --------------------------------------------------------------------------- byte-level faults


def copy_backup(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def flip_byte(backup: Path, offset: int | None = None) -> None:
    """Invert one byte; by default one in the middle of the first frame's body."""
    path = backup / ARCHIVE_FILE
    data = bytearray(path.read_bytes())
    at = offset if offset is not None else FILE_HEADER.size + FRAME_HEADER.size + 40
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(backup: Path, drop: int = 7) -> None:
    path = backup / ARCHIVE_FILE
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - drop])


def raw_records(backup: Path) -> tuple[bytes, list[bytes]]:
    """The file header and every record's bytes (head, body and checksum), frames undone."""
    data = (backup / ARCHIVE_FILE).read_bytes()
    header = data[: FILE_HEADER.size]
    _major, _minor, compression = unpack_file_header(header)
    records: list[bytes] = []
    off = FILE_HEADER.size
    while off < len(data):
        stored_len, raw_len, _digest = FRAME_HEADER.unpack_from(data, off)
        off += FRAME_HEADER.size
        raw = decompress(data[off : off + stored_len], raw_len, compression)
        off += stored_len
        pos = 0
        while pos < len(raw):
            _kind, body_len = RECORD_HEAD.unpack_from(raw, pos)
            end = pos + RECORD_HEAD.size + body_len + RECORD_SUM.size
            records.append(raw[pos:end])
            pos = end
    return header, records


def record_type(record: bytes) -> int:
    return int(record[0])


def rewrite_raw(backup: Path, edit: Callable[[list[bytes]], list[bytes]]) -> None:
    """Apply ``edit`` to the list of records and store them as one valid frame: every
    record keeps its own checksum, the frame gets a correct one, so only the reader's order
    and count checks can notice."""
    header, records = raw_records(backup)
    _major, _minor, compression = unpack_file_header(header)
    raw = b"".join(edit(records))
    stored = compress(raw, compression)
    frame = FRAME_HEADER.pack(len(stored), len(raw), checksum(stored)) + stored
    (backup / ARCHIVE_FILE).write_bytes(header + frame)


def drop_message_record(backup: Path, index: int = 3) -> None:
    """Remove the ``index``-th message record from inside the archive."""

    def edit(records: list[bytes]) -> list[bytes]:
        messages = [i for i, r in enumerate(records) if record_type(r) == 3]
        return [r for i, r in enumerate(records) if i != messages[index]]

    rewrite_raw(backup, edit)


def swap_message_records(backup: Path, index: int = 3) -> None:
    """Swap the ``index``-th message record with the next one."""

    def edit(records: list[bytes]) -> list[bytes]:
        messages = [i for i, r in enumerate(records) if record_type(r) == 3]
        a, b = messages[index], messages[index + 1]
        out = list(records)
        out[a], out[b] = out[b], out[a]
        return out

    rewrite_raw(backup, edit)


# --------------------------------------------------------------------------- semantic faults


@dataclass
class Contents:
    stream: ArchivedStream
    consumers: list[ArchivedConsumer]
    messages: list[ArchivedMessage]


def read_contents(backup: Path) -> Contents:
    stream: ArchivedStream | None = None
    consumers: list[ArchivedConsumer] = []
    messages: list[ArchivedMessage] = []
    for record in read_archive(backup / ARCHIVE_FILE):
        if isinstance(record, ArchivedStream):
            stream = record
        elif isinstance(record, ArchivedConsumer):
            consumers.append(record)
        elif isinstance(record, ArchivedMessage):
            messages.append(record)
    assert stream is not None
    return Contents(stream, consumers, messages)


def rewrite(backup: Path, edit: Callable[[Contents], Contents]) -> None:
    """Read the archive, ``edit`` its contents, write a new, well-formed archive."""
    contents = edit(read_contents(backup))
    path = backup / ARCHIVE_FILE
    with open(path, "wb") as out:
        writer = ArchiveWriter(out.write)
        writer.write_stream(contents.stream)
        for consumer in contents.consumers:
            writer.write_consumer(consumer)
        for m in contents.messages:
            writer.write_message(m.seq, m.subject, m.hdr, m.data, m.ts)
        writer.close()


def with_state(record: Any, **changes: Any) -> Any:
    """A copy of a stream or consumer record with its state's top-level keys changed."""
    return type(record)(record.name, record.created_ns, record.config, record.state | changes)


def ack_floor_beyond_last(backup: Path, consumer: str = "WORK", beyond: int = 5) -> int:
    """Move ``consumer``'s ack floor past the stream's last sequence; returns the new floor."""
    contents = read_contents(backup)
    floor = int(contents.stream.state["last_seq"]) + beyond

    def edit(c: Contents) -> Contents:
        c.consumers = [
            with_state(x, ack_floor={"consumer_seq": 3, "stream_seq": floor})
            if x.name == consumer
            else x
            for x in c.consumers
        ]
        return c

    rewrite(backup, edit)
    return floor


def drop_message(backup: Path, seq: int) -> None:
    """Leave message ``seq`` out of a rewritten archive (its END record agrees)."""

    def edit(c: Contents) -> Contents:
        c.messages = [m for m in c.messages if m.seq != seq]
        return c

    rewrite(backup, edit)


def change_payload(backup: Path, seq: int, data: bytes) -> None:
    def edit(c: Contents) -> Contents:
        c.messages = [
            ArchivedMessage(m.seq, m.subject, m.hdr, data, m.ts) if m.seq == seq else m
            for m in c.messages
        ]
        return c

    rewrite(backup, edit)


async def _restore_and_back_up(url: str, source: Path, target: Path) -> Path:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await restore_stream(nc, source)
        name = read_contents(source).stream.name
        return (await backup_stream(nc, name, target)).directory
    finally:
        await nc.close()


def restore_and_back_up(server: ServerProcess, source: Path, target: Path) -> Path:
    """Restore ``source`` into ``server`` and back the restored stream up to ``target``."""
    return asyncio.run(_restore_and_back_up(server.url, source, target))
