"""Replication log benchmark: prints the figures docs/BENCHMARKS.md ("Replication log") quotes.

Run: ``python bench/wal_bench.py [--entries 200000] [--dir /path/on/the/disk/to/test]``.
No asserts; the figures are for reading. On uvloop, entries with 16-byte ops:

* group commit: ``--writers`` concurrent writers, each appending one entry (or a batch, as a
  core's ``Persist`` of up to 32 entries) and awaiting ``sync()`` before the next, so every
  counted entry was fsynced; concurrent syncs share rounds;
* appends alone (no sync): the cost of encoding and writing to the OS;
* recovery: ``ReplicationLog.open`` of the log just written.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import uvloop

from headwater.server.replicated.messages import Entry
from headwater.server.replicated.wal import ReplicationLog

OP = b"0123456789abcdef"


async def synced_rate(path: Path, entries: int, writers: int, batch: int) -> dict[str, float]:
    log, _ = ReplicationLog.open(path)
    per = entries // (writers * batch)

    async def writer() -> None:
        for _ in range(per):
            first = log.last_index + 1
            log.append([Entry(first + k, 1, OP) for k in range(batch)])
            await log.sync()

    t0 = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    elapsed = time.perf_counter() - t0
    rounds = log.fsync_rounds
    await log.aclose()
    done = per * writers * batch
    return {"entries_per_s": done / elapsed, "fsyncs": rounds, "entries_per_fsync": done / rounds}


async def append_rate(path: Path, entries: int) -> dict[str, float]:
    log, _ = ReplicationLog.open(path)
    t0 = time.perf_counter()
    for i in range(1, entries + 1, 32):
        log.append([Entry(i + k, 1, OP) for k in range(min(32, entries + 1 - i))])
    elapsed = time.perf_counter() - t0
    await log.sync()
    await log.aclose()
    t0 = time.perf_counter()
    again, got = ReplicationLog.open(path)
    reopen = time.perf_counter() - t0
    again.close()
    assert len(got) == entries
    return {"entries_per_s": entries / elapsed, "open_s": reopen}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wal-bench-", dir=args.dir))
    try:
        for writers, batch in [(1, 1), (64, 1), (256, 1), (8, 32)]:
            path = root / f"w{writers}b{batch}"
            n = args.entries if writers > 1 or batch > 1 else min(args.entries, 5_000)
            r = await synced_rate(path, n, writers, batch)
            print(
                f"synced, {writers:>3} writers x {batch:>2}-entry appends: "
                f"{r['entries_per_s']:>10,.0f} entries/s  ({r['fsyncs']:,.0f} fsyncs, "
                f"{r['entries_per_fsync']:,.1f} entries per fsync)"
            )
            shutil.rmtree(path)
        r = await append_rate(root / "append", args.entries * 5)
        print(
            f"appends alone (32-entry batches, no sync): {r['entries_per_s']:>10,.0f} entries/s; "
            f"open of {args.entries * 5:,} entries: {r['open_s']:.2f} s"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    uvloop.run(main())
