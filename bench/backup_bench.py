"""Backup and restore throughput: a file stream of 1 KiB messages, through nats-py.

Starts a Headwater server, fills a file stream with ``--messages`` random 1 KiB payloads,
then times ``headwater.control.backup.backup_stream`` (the snapshot flow into a directory) and
``restore_stream`` (the upload and the rebuild) end to end, and prints MB/s of stored stream
bytes. Figures only, no assertions (issue 9's target: 50 MB/s each way).

    python bench/backup_bench.py --messages 100000

``--migrate`` measures the migration path instead: the stream is filled on nats-server and
backed up there (a 2.15 ``NATSARC1`` archive), then the same backup is restored into a fresh
nats-server and into Headwater, and both restores are timed; the ratio is Headwater's speed
over nats-server's, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path

import nats

from headwater.control.backup import backup_stream, restore_stream
from headwater.testing import ServerProcess

STREAM = "BENCH"
PAYLOAD = 1024


WORDS = [os.urandom(4).hex() for _ in range(400)]


def text_payload(i: int) -> bytes:
    """About 1 KiB of JSON-like text, words drawn at random from a small vocabulary: what logs
    and events look like to a compressor."""
    rng = random.Random(i)
    words = " ".join(rng.choice(WORDS) for _ in range(90))
    return f'{{"order": {i}, "customer": "c{i % 1000}", "note": "{words}"}}'.encode()[:PAYLOAD]


async def fill(nc: nats.aio.client.Client, count: int, kind: str) -> int:
    """``kind``: ``random`` payloads, one ``repeated`` payload, or ``text``."""
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=["bench.>"], storage="file")
    body = os.urandom(PAYLOAD)
    for i in range(count):
        if kind == "text":
            payload = text_payload(i)
        else:
            payload = body if kind == "repeated" else os.urandom(PAYLOAD)
        await nc.publish(f"bench.{i % 16}", payload)
        if i % 5000 == 4999:
            await nc.flush()
    await nc.flush()
    while True:
        info = await js.stream_info(STREAM)
        if info.state.messages >= count:
            return int(info.state.bytes)
        await asyncio.sleep(0.1)


async def run(count: int, kind: str) -> None:
    with ServerProcess("headwater", jetstream=True) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            began = time.perf_counter()
            stored = await fill(nc, count, kind)
            print(f"filled {count:,} x {PAYLOAD} B messages in {time.perf_counter() - began:.1f}s")
            with tempfile.TemporaryDirectory() as tmp:
                directory = Path(tmp) / "backup"
                began = time.perf_counter()
                result = await backup_stream(nc, STREAM, directory)
                backup_s = time.perf_counter() - began
                await nc.jetstream().delete_stream(STREAM)
                began = time.perf_counter()
                await restore_stream(nc, directory, timeout=60)
                restore_s = time.perf_counter() - began
            mb = stored / 1e6
            print(f"stream bytes: {mb:.1f} MB, archive: {result.archive_bytes / 1e6:.1f} MB")
            print(f"backup:  {backup_s:.2f}s  {mb / backup_s:.1f} MB/s")
            print(f"restore: {restore_s:.2f}s  {mb / restore_s:.1f} MB/s")
        finally:
            await nc.close()


async def _restore_into(kind: str, directory: Path) -> float:
    """Seconds to restore ``directory`` into a fresh ``kind`` server."""
    with ServerProcess(kind, jetstream=True) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            began = time.perf_counter()
            await restore_stream(nc, directory, timeout=120)
            return time.perf_counter() - began
        finally:
            await nc.close()


async def migrate(count: int, kind: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "backup"
        with ServerProcess("nats", jetstream=True) as srv:
            nc = await nats.connect(srv.url, allow_reconnect=False)
            try:
                stored = await fill(nc, count, kind)
                result = await backup_stream(nc, STREAM, directory)
            finally:
                await nc.close()
        mb = stored / 1e6
        archive_mb = result.archive_bytes / 1e6
        print(f"nats-server backup: {mb:.1f} MB stored, {archive_mb:.1f} MB archive")
        nats_s = await _restore_into("nats", directory)
        ours_s = await _restore_into("headwater", directory)
        print(f"restore into nats-server: {nats_s:.2f}s  {mb / nats_s:.1f} MB/s")
        print(f"restore into headwater:   {ours_s:.2f}s  {mb / ours_s:.1f} MB/s")
        print(f"ratio (headwater / nats-server): {nats_s / ours_s:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument(
        "--payload",
        choices=("random", "repeated", "text"),
        default="random",
        help="random 1 KiB payloads, one payload repeated, or JSON-like text.",
    )
    parser.add_argument(
        "--migrate",
        action="store_true",
        help="Restore a nats-server backup into nats-server and into Headwater.",
    )
    args = parser.parse_args()
    asyncio.run((migrate if args.migrate else run)(args.messages, args.payload))


if __name__ == "__main__":
    main()
