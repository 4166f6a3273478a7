"""Progress of a verification for the person running it: what is read, and how far the job is.

Lines go to a callback (the command line prints them on stderr, never in ``--json``'s stdout).
Before the job, one line per backup names its directory, stream, archive format and size;
while the Spark job runs, a driver thread polls Spark's status tracker and reports the tasks
done whenever the count changes. Executors report nothing: their output does not reach the
driver's terminal on a cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from headwater.archive import ArchiveFormat, archive_format
from headwater.verify.backupdir import BACKUP_FILE, archive_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["POLL_SECONDS", "announce", "count", "describe_backup", "watch_tasks"]

POLL_SECONDS = 0.5
"""How often the driver asks Spark how many tasks are done."""

_FORMAT_NAMES = {
    ArchiveFormat.HEADWATER: "headwater archive",
    ArchiveFormat.NATS: "nats-server archive",
}


def describe_backup(directory: str) -> str:
    """``DIR: stream NAME, FORMAT, SIZE`` from ``backup.json`` and the archive's first bytes:
    a few bytes read on the driver, nothing verified."""
    try:
        config = json.loads((Path(directory) / BACKUP_FILE).read_bytes()).get("config") or {}
        stream = str(config.get("name") or "?")
    except (OSError, ValueError, AttributeError):
        stream = "?"
    archive = archive_path(directory)
    try:
        with open(archive, "rb") as fh:
            kind = archive_format(fh.read(16))
        what = _FORMAT_NAMES.get(kind, "unknown archive") if kind else "unknown archive"
        what += f", {_size(archive.stat().st_size)}"
    except OSError:
        what = "no archive"
    return f"{directory}: stream {stream}, {what}"


def announce(backups: Sequence[str], tasks: int, progress: Callable[[str], None]) -> None:
    total = sum(_archive_bytes(b) for b in backups)
    progress(
        f"verifying {count(len(backups), 'backup')} ({_size(total)} of archives) "
        f"in {count(tasks, 'task')}"
    )
    for backup in backups:
        progress(f"  reading {describe_backup(backup)}")


@contextmanager
def watch_tasks(spark: SparkSession, progress: Callable[[str], None] | None) -> Iterator[None]:
    """While inside, report ``N/M tasks done`` each time the count of the running job's tasks
    changes. Nothing when ``progress`` is None."""
    if progress is None:
        yield
        return
    stop = threading.Event()
    tracker = spark.sparkContext.statusTracker()

    def poll() -> None:
        last = (-1, -1)
        while not stop.wait(POLL_SECONDS):
            done = total = 0
            for stage in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total and (done, total) != last:
                last = (done, total)
                progress(f"  {done}/{total} tasks done")

    thread = threading.Thread(target=poll, name="verify-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _archive_bytes(directory: str) -> int:
    try:
        return archive_path(directory).stat().st_size
    except OSError:
        return 0


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"
