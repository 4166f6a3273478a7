"""nats-server 2.15 backups for the verification tests, and faults injected into copies.

Backups are made with ``headwater.control.backup.backup_stream`` (nats-py) against a real
nats-server, which names their archives ``stream.tar.s2``.

Faults come in two kinds. Byte-level ones (a flipped byte, a truncated file) edit the file
nats-server wrote. Semantic ones (reordered messages, a consumer state, the stream state) decode
the archive into its ``NATSARC1`` entries, edit them, and write a new, valid S2 stream of
uncompressed chunks with support.s2frames (what S2 writers emit for incompressible data), so
only the intended fault is there.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig
from verify.backup_faults import Backups, fill_orders_cache_empty

from headwater.archive.s2 import S2_MAGIC, S2Reader, read_uvarint
from headwater.control.backup import backup_stream
from headwater.testing import ServerProcess
from headwater.verify.backupdir import NATS_ARCHIVE_FILE, archive_files
from support import s2frames

NATSARC_MAGIC = b"NATSARC1"
BIG_PAYLOAD = 900 * 1024
"""Under nats-server's default max_payload (1 MiB); a few of them span S2's 4 MiB blocks."""


def settle_archive_name(directory: Path) -> Path:
    """The backup's archive, which ``backup_stream`` names ``stream.tar.s2`` for nats-server."""
    assert archive_files(directory) == [directory / NATS_ARCHIVE_FILE]
    target = directory / NATS_ARCHIVE_FILE
    assert target.read_bytes()[: len(S2_MAGIC)] == S2_MAGIC, "not a nats-server archive"
    return target


async def _fill(nc: Client) -> None:
    js = nc.jetstream()
    await fill_orders_cache_empty(nc)  # the same streams the headwater-server backups hold
    await js.add_stream(name="PURGED", subjects=["purged.>"])
    for i in range(5):
        await js.publish(f"purged.{i}", b"gone")
    await js.purge_stream("PURGED")
    # Large payloads: random ones (S2 stores them uncompressed), compressible ones, headers,
    # and gaps, so entries straddle S2 blocks of both chunk types.
    await js.add_stream(name="BIG", subjects=["big.>"], max_msg_size=-1)
    rnd = os.urandom(BIG_PAYLOAD)
    for i in range(1, 13):
        body = rnd[i:] + rnd[:i] if i % 3 else (b"%06d" % i) * (BIG_PAYLOAD // 6)
        await js.publish(f"big.{i % 2}", body, headers={"Part": str(i)} if i % 4 == 0 else None)
    for seq in (2, 7, 12):
        await js.delete_msg("BIG", seq)
    await js.add_consumer(
        "BIG", ConsumerConfig(durable_name="BULK", ack_policy=AckPolicy.EXPLICIT, ack_wait=30.0)
    )
    sub = await js.pull_subscribe_bind("BULK", "BIG")
    got = await sub.fetch(3, timeout=5)
    await got[0].ack_sync()
    await sub.unsubscribe()


NAMES = ("ORDERS", "CACHE", "EMPTY", "PURGED", "BIG")


async def _make(url: str, root: Path) -> Backups:
    out = Backups(root)
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        await _fill(nc)
        for name in NAMES:
            directory = (await backup_stream(nc, name, root / name.lower())).directory
            settle_archive_name(directory)
            out.dirs[name] = directory
    finally:
        await nc.close()
    return out


def make_nats_backups(server: ServerProcess, root: Path) -> Backups:
    assert server.kind == "nats"
    return asyncio.run(_make(server.url, root))


async def _fill_bulk(url: str, root: Path, total: int, payload: int) -> Path:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        await js.add_stream(name="BULK", subjects=["bulk.>"])
        rnd = os.urandom(payload + 256)
        for i in range(total // payload):
            await js.publish(f"bulk.{i % 16}", rnd[i % 256 : i % 256 + payload])
        directory = (await backup_stream(nc, "BULK", root, timeout=60.0)).directory
        settle_archive_name(directory)
        return directory
    finally:
        await nc.close()


def make_bulk_backup(server: ServerProcess, root: Path, total: int, payload: int) -> Path:
    """One stream of ``total`` bytes of incompressible ``payload``-byte messages, backed up."""
    return asyncio.run(_fill_bulk(server.url, root, total, payload))


def archive(backup: Path) -> Path:
    return backup / NATS_ARCHIVE_FILE


# --------------------------------------------------------------------------- S2 chunks


@dataclass(frozen=True)
class Chunk:
    offset: int
    """Of the chunk header in the file."""
    kind: int
    length: int
    """Of the body (after the 4-byte header)."""

    @property
    def body(self) -> int:
        return self.offset + 4

    @property
    def end(self) -> int:
        return self.body + self.length


def s2_chunks(raw: bytes) -> list[Chunk]:
    chunks = []
    off = 0
    while off < len(raw):
        length = int.from_bytes(raw[off + 1 : off + 4], "little")
        chunks.append(Chunk(off, raw[off], length))
        off += 4 + length
    assert off == len(raw)
    return chunks


def data_chunks(backup: Path, kind: int | None = None) -> list[Chunk]:
    """The data chunks (0x00 compressed, 0x01 uncompressed) of the backup's archive."""
    wanted = (kind,) if kind is not None else (0x00, 0x01)
    return [c for c in s2_chunks(archive(backup).read_bytes()) if c.kind in wanted]


# --------------------------------------------------------------------------- NATSARC1 entries


@dataclass(frozen=True)
class Entry:
    name: str
    ts: int
    seq: int
    hdr: bytes
    data: bytes

    def json(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.data)
        return value

    def with_json(self, value: dict[str, Any]) -> Entry:
        return replace(self, data=json.dumps(value).encode())


def encode_entry(e: Entry) -> bytes:
    return s2frames.entry(e.name, ts=e.ts, seq=e.seq, hdr=e.hdr, body=e.data)


def decode_entries(content: bytes) -> list[Entry]:
    """Every entry of a ``NATSARC1`` archive's content, up to (not including) the sentinel."""
    assert content.startswith(NATSARC_MAGIC)
    pos = len(NATSARC_MAGIC)
    entries = []
    while True:
        name_len, pos = read_uvarint(content, pos)
        zigzag, pos = read_uvarint(content, pos)
        seq, pos = read_uvarint(content, pos)
        hdr_size, pos = read_uvarint(content, pos)
        size, pos = read_uvarint(content, pos)
        if not name_len:
            assert pos == len(content), "data after the sentinel"
            return entries
        name = content[pos : pos + name_len].decode()
        pos += name_len
        hdr = content[pos : pos + hdr_size]
        pos += hdr_size
        data = content[pos : pos + size]
        pos += size
        entries.append(Entry(name, (zigzag >> 1) ^ -(zigzag & 1), seq, hdr, data))


def encode_entries(entries: list[Entry], sentinel: bool = True) -> bytes:
    body = b"".join(encode_entry(e) for e in entries)
    return NATSARC_MAGIC + body + (s2frames.SENTINEL if sentinel else b"")


def read_entries(backup: Path) -> list[Entry]:
    with open(archive(backup), "rb") as fh:
        return decode_entries(S2Reader(fh).read(1 << 40))


def write_content(backup: Path, content: bytes) -> None:
    archive(backup).write_bytes(s2frames.stored(content))


def rewrite(backup: Path, edit: Callable[[list[Entry]], list[Entry]]) -> None:
    """Decode the archive's entries, ``edit`` them, store them as a new valid S2 stream."""
    write_content(backup, encode_entries(edit(read_entries(backup))))


def is_message(entry: Entry) -> bool:
    return entry.seq != 0


# --------------------------------------------------------------------------- faults


def copy_backup(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def flip_crc(backup: Path, index: int = 0) -> None:
    """Invert a byte of the ``index``-th data chunk's stored CRC: the data decodes, its
    checksum does not match."""
    chunk = data_chunks(backup)[index]
    _flip(backup, chunk.body + 1)


def flip_data(backup: Path) -> None:
    """Invert a byte in the middle of an uncompressed chunk's data (random payload bytes)."""
    chunks = data_chunks(backup, 0x01)
    assert chunks, "no uncompressed chunk: the large payloads should make some"
    chunk = chunks[0]
    _flip(backup, chunk.body + 4 + (chunk.length - 4) // 2)


def _flip(backup: Path, at: int) -> None:
    path = archive(backup)
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate_at_chunk(backup: Path) -> None:
    """Drop the last data chunk whole: the stream ends cleanly at a chunk boundary, before
    the NATSARC1 sentinel."""
    last = data_chunks(backup)[-1]
    path = archive(backup)
    path.write_bytes(path.read_bytes()[: last.offset])


def truncate_inside_chunk(backup: Path, drop: int = 7) -> None:
    path = archive(backup)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - drop])


def drop_sentinel(backup: Path) -> None:
    """A valid S2 stream whose NATSARC1 content ends after the last message."""
    write_content(backup, encode_entries(read_entries(backup), sentinel=False))


def swap_messages(backup: Path, index: int = 3) -> tuple[int, int]:
    """Swap the ``index``-th message entry with the next; returns their sequences."""
    entries = read_entries(backup)
    at = [i for i, e in enumerate(entries) if is_message(e)]
    a, b = at[index], at[index + 1]
    entries[a], entries[b] = entries[b], entries[a]
    write_content(backup, encode_entries(entries))
    return entries[b].seq, entries[a].seq


def drop_message(backup: Path, seq: int) -> None:
    rewrite(backup, lambda entries: [e for e in entries if e.seq != seq])


def edit_json(backup: Path, name: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit the JSON of entry ``name`` (``state.json``, ``consumers/<name>``) in place."""

    def apply(entries: list[Entry]) -> list[Entry]:
        out = []
        for entry in entries:
            if entry.name == name:
                value = entry.json()
                edit(value)
                entry = entry.with_json(value)
            out.append(entry)
        return out

    rewrite(backup, apply)


def ack_floor_beyond_last(backup: Path, consumer: str = "WORK", beyond: int = 5) -> int:
    """Move ``consumer``'s ack floor past the stream's last sequence; returns the new floor."""
    state = json.loads((backup / "backup.json").read_text())["state"]
    floor = int(state["last_seq"]) + beyond

    def edit(value: dict[str, Any]) -> None:
        value["state"]["ack_floor"] = {"consumer_seq": 3, "stream_seq": floor}

    edit_json(backup, f"consumers/{consumer}", edit)
    return floor


def tar_backup(backup: Path) -> None:
    """Replace the archive with what nats-server 2.14 and older wrote: a tar in S2."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        meta = json.dumps({"config": {"name": "X"}}).encode()
        info = tarfile.TarInfo("meta.inf")
        info.size = len(meta)
        tar.addfile(info, io.BytesIO(meta))
    write_content(backup, buf.getvalue())
