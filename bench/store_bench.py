"""File-store benchmark: prints the figures docs/FILESTORE.md quotes.

Run: ``python bench/store_bench.py [--msgs 2000000] [--dir /path/on/the/disk/to/test]``.
No asserts; the figures are for reading. It measures, on uvloop:

* append rate with the default ``ack`` policy: many concurrent publishers, each storing a
  message and awaiting ``durable()`` (group commit), so every counted message was fsynced;
* append rate with the ``interval`` policy (no waiting for the disk);
* resident memory per stored message with ``--msgs`` messages, in a fresh process that opened
  the store (so write-path garbage does not count) and right after writing them;
* restart time with ``--msgs`` messages, from the index snapshot and by a full scan.

Targets (store brief): ≤ 64 bytes of RSS per message and a restart within 5 s at 2M messages.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from headwater.server.store import StoreConfig, SyncPolicy
from headwater.server.store.file.store import FileStore


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


COMPRESSION = "none"


def config(path: Path, policy: SyncPolicy) -> StoreConfig:
    return StoreConfig(name="bench", directory=path, sync=policy, compression=COMPRESSION)  # type: ignore[arg-type]


def payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


async def durable_rate(path: Path, msgs: int, publishers: int, size: int) -> dict[str, float]:
    store = FileStore(config(path, SyncPolicy("ack")))
    data = payload(size)
    per = msgs // publishers

    async def publisher(p: int) -> None:
        subject = f"orders.{p}"
        for _ in range(per):
            store.store_msg(subject, b"", data)
            await store.durable()

    t0 = time.perf_counter()
    await asyncio.gather(*(publisher(p) for p in range(publishers)))
    elapsed = time.perf_counter() - t0
    rounds = store.fsync_rounds
    await store.aclose()
    done = per * publishers
    return {"msgs_per_s": done / elapsed, "fsync_rounds": rounds, "msgs_per_fsync": done / rounds}


async def interval_rate(path: Path, msgs: int, subjects: int, size: int) -> dict[str, float]:
    store = FileStore(config(path, SyncPolicy("interval", 1.0)))
    data = payload(size)
    names = [f"orders.{i}" for i in range(subjects)]
    before = rss()
    t0 = time.perf_counter()
    for i in range(msgs):
        store.store_msg(names[i % subjects], b"", data)
        if i % 4096 == 0:
            await asyncio.sleep(0)  # let the loop flush buffers to the OS, as a server would
    elapsed = time.perf_counter() - t0
    gc.collect()
    grown = rss() - before
    reads = min(msgs, 200_000)
    t2 = time.perf_counter()
    seq = 0
    for _ in range(reads):  # a consumer walking the stream
        msg = store.load_next(">", seq + 1)
        assert msg is not None
        seq = msg.seq
    read_s = time.perf_counter() - t2
    t3 = time.perf_counter()
    for _ in range(reads):  # a consumer filtered to one subject in a thousand
        msg = store.load_next(names[7], seq + 1)
        if msg is None:
            break
        seq = msg.seq
    filtered_s = time.perf_counter() - t3
    t1 = time.perf_counter()
    await store.aclose()
    close_s = time.perf_counter() - t1
    return {
        "msgs_per_s": msgs / elapsed,
        "rss_bytes_per_msg_while_writing": grown / msgs,
        "close_s": close_s,
        "reads_per_s": reads / read_s,
        "filtered_reads_per_s": min(reads, msgs // subjects) / filtered_s,
    }


def reopen_in_child(path: Path, drop_index: bool) -> dict[str, float]:
    """Open the store in a fresh interpreter: restart time and RSS per message."""
    if drop_index:
        (path / "msgs" / "index.snap").unlink(missing_ok=True)
    code = (
        "import json, os, time, gc\n"
        "from pathlib import Path\n"
        "from headwater.server.store import StoreConfig\n"
        "from headwater.server.store.file.store import FileStore\n"
        "def rss():\n"
        "    with open('/proc/self/statm') as f:\n"
        "        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')\n"
        "gc.collect(); before = rss()\n"
        "t0 = time.perf_counter()\n"
        f"s = FileStore(StoreConfig(name='bench', directory=Path({str(path)!r}),"
        f" compression={COMPRESSION!r}))\n"
        "took = time.perf_counter() - t0\n"
        "gc.collect(); st = s.state()\n"
        "print(json.dumps({'open_s': took, 'msgs': st.msgs,\n"
        "    'rss_bytes_per_msg': (rss() - before) / max(1, st.msgs),\n"
        "    'used_index': s.recovery_report.used_index}))\n"
        "s.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--msgs", type=int, default=2_000_000)
    ap.add_argument("--durable-msgs", type=int, default=100_000)
    ap.add_argument("--publishers", type=int, default=500)
    ap.add_argument("--subjects", type=int, default=1000)
    ap.add_argument("--payload", type=int, default=100)
    ap.add_argument("--dir", type=Path, default=None, help="where to put the stores (a real disk)")
    ap.add_argument("--compression", choices=["none", "s2"], default="none")
    args = ap.parse_args()
    global COMPRESSION
    COMPRESSION = args.compression
    root = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir))
    uvloop.install()
    try:
        print(
            f"payload {args.payload} B, subjects {args.subjects}, "
            f"compression {args.compression}, dir {root}"
        )
        r = asyncio.run(
            durable_rate(root / "ack", args.durable_msgs, args.publishers, args.payload)
        )
        print(
            f"append, ack (fsync before returning), {args.publishers} publishers: "
            f"{r['msgs_per_s']:,.0f} msgs/s, {r['fsync_rounds']:.0f} fsync rounds, "
            f"{r['msgs_per_fsync']:.0f} msgs per fsync"
        )
        w = asyncio.run(interval_rate(root / "big", args.msgs, args.subjects, args.payload))
        print(
            f"append, interval: {w['msgs_per_s']:,.0f} msgs/s over {args.msgs:,} msgs; "
            f"RSS while writing {w['rss_bytes_per_msg_while_writing']:.1f} B/msg; "
            f"close (fsync + snapshot) {w['close_s']:.2f} s"
        )
        print(
            f"read, load_next('>') walking the stream: {w['reads_per_s']:,.0f} msgs/s; "
            f"load_next(one subject of {args.subjects}): {w['filtered_reads_per_s']:,.0f} msgs/s"
        )
        size = sum(p.stat().st_size for p in (root / "big" / "msgs").iterdir())
        print(f"disk: {size / args.msgs:.1f} B/msg ({size / 2**20:,.0f} MiB)")
        for drop in (False, True):
            o = reopen_in_child(root / "big", drop_index=drop)
            how = "full scan" if drop else "index snapshot"
            print(
                f"restart ({how}, used_index={o['used_index']}): {o['open_s']:.2f} s for "
                f"{o['msgs']:,} msgs; RSS {o['rss_bytes_per_msg']:.1f} B/msg"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
