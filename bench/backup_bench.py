"""Backup and restore throughput: a file stream of 1 KiB messages, through nats-py.

Starts a Headwater server, fills a file stream with ``--messages`` random 1 KiB payloads,
then times ``headwater.control.backup.backup_stream`` (the snapshot flow into a directory) and
``restore_stream`` (the upload and the rebuild) end to end, and prints MB/s of stored stream
bytes. Figures only, no assertions (issue 9's target: 50 MB/s each way).

    python bench/backup_bench.py --messages 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import nats

from headwater.control.backup import backup_stream, restore_stream
from headwater.testing import ServerProcess

STREAM = "BENCH"
PAYLOAD = 1024


async def fill(nc: nats.aio.client.Client, count: int, compressible: bool) -> int:
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=["bench.>"], storage="file")
    body = os.urandom(PAYLOAD)
    for i in range(count):
        payload = body if compressible else os.urandom(PAYLOAD)
        await nc.publish(f"bench.{i % 16}", payload)
        if i % 5000 == 4999:
            await nc.flush()
    await nc.flush()
    while True:
        info = await js.stream_info(STREAM)
        if info.state.messages >= count:
            return int(info.state.bytes)
        await asyncio.sleep(0.1)


async def run(count: int, compressible: bool) -> None:
    with ServerProcess("headwater", jetstream=True) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        try:
            began = time.perf_counter()
            stored = await fill(nc, count, compressible)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument(
        "--compressible", action="store_true", help="One payload repeated (zstd shrinks it)."
    )
    args = parser.parse_args()
    asyncio.run(run(args.messages, args.compressible))


if __name__ == "__main__":
    main()
