"""Spark verification throughput: MB of archive verified per second on ``local[2]``.

Writes ``--backups`` backup directories of ``--mb`` MiB of archive each (1 KiB random
payloads, so zstd cannot shrink them: the archive is as large as the stream), with the
``ArchiveWriter`` the server's snapshot uses and a ``backup.json`` whose state matches, then
runs the verification job (``headwater.verify.job.verify_backups``) on ``local[2]``. Start-up
is excluded: a first run over small backups starts the session and its Python workers,
then the whole set is timed (``--rounds`` times, best and median printed). A single-process
pass over one archive with the bare reader is printed for reference (the ceiling per core).
Every backup must come out clean, so the figure is for complete verification. Figures only,
no assertions (issue 9's target: at least 100 MB/s).

    python bench/verify_bench.py [--backups 8] [--mb 32] [--rounds 5] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from headwater.archive import ArchivedStream, ArchiveWriter, scan_archive
from headwater.verify.backupdir import ARCHIVE_FILE, BACKUP_FILE
from headwater.verify.job import verify_backups
from headwater.verify.session import build_session

PAYLOAD = 1024
MIB = 1 << 20


def write_backup(directory: Path, name: str, target_bytes: int) -> int:
    """A clean file-stream backup of about ``target_bytes`` of archive; returns its size."""
    directory.mkdir(parents=True)
    subjects = [f"{name.lower()}.{i}" for i in range(8)]
    count = max(1, target_bytes // (PAYLOAD + 70))
    stored = sum(30 + len(subjects[seq % 8]) + PAYLOAD for seq in range(1, count + 1))
    per_subject = {s: 0 for s in subjects}
    for seq in range(1, count + 1):
        per_subject[subjects[seq % 8]] += 1
    base_ts = time.time_ns()
    state = {
        "messages": count,
        "bytes": stored,
        "first_seq": 1,
        "first_ts": base_ts,
        "last_seq": count,
        "last_ts": base_ts + count,
        "num_deleted": 0,
        "num_subjects": len(subjects),
        "subjects": per_subject,
    }
    config = {"name": name, "subjects": [f"{name.lower()}.>"], "storage": "file"}
    with open(directory / ARCHIVE_FILE, "wb") as out:
        writer = ArchiveWriter(out.write)
        writer.write_stream(ArchivedStream(name, base_ts, config, state))
        for seq in range(1, count + 1):
            writer.write_message(seq, subjects[seq % 8], b"", os.urandom(PAYLOAD), base_ts + seq)
        writer.close()
    json_state = {k: v for k, v in state.items() if k != "subjects"}
    (directory / BACKUP_FILE).write_text(json.dumps({"config": config, "state": json_state}))
    return (directory / ARCHIVE_FILE).stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backups", type=int, default=8)
    parser.add_argument("--mb", type=int, default=32, help="MiB of archive per backup")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="verify-bench-") as tmp:
        root = Path(tmp)
        began = time.perf_counter()
        dirs = [str(root / f"b{i:03d}") for i in range(args.backups)]
        total = sum(write_backup(Path(d), f"B{i:03d}", args.mb * MIB) for i, d in enumerate(dirs))
        # Enough small backups for a task per core, so every Python worker is started.
        warm = [str(root / f"warm{i}") for i in range(4)]
        for i, directory in enumerate(warm):
            write_backup(Path(directory), f"WARM{i}", MIB)
        print(
            f"wrote {args.backups} backups, {total / MIB:.0f} MiB of archive "
            f"in {time.perf_counter() - began:.1f}s"
        )

        began = time.perf_counter()
        scan_archive(Path(dirs[0]) / ARCHIVE_FILE)
        one = (Path(dirs[0]) / ARCHIVE_FILE).stat().st_size
        print(f"reader alone, one process: {one / MIB / (time.perf_counter() - began):.0f} MiB/s")

        began = time.perf_counter()
        spark = build_session(args.master)
        try:
            assert all(r.ok for r in verify_backups(spark, warm))
            print(f"Spark start-up and first job: {time.perf_counter() - began:.1f}s")
            rates = []
            for _ in range(args.rounds):
                began = time.perf_counter()
                reports = verify_backups(spark, dirs)
                seconds = time.perf_counter() - began
                bad = [r for r in reports if not r.ok]
                if bad:
                    raise SystemExit(f"benchmark backups have findings: {bad[0].findings[:3]}")
                rates.append(total / MIB / seconds)
                print(f"  {total / MIB:.0f} MiB in {seconds:.2f}s: {rates[-1]:.0f} MiB/s")
        finally:
            spark.stop()
    print(
        f"verification on {args.master}: best {max(rates):.0f} MiB/s, "
        f"median {statistics.median(rates):.0f} MiB/s of archive (target >= 100 MB/s)"
    )


if __name__ == "__main__":
    main()
