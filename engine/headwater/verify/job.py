"""The verification Spark job, and its command line for ``spark-submit`` and ``python -m``.

The driver finds the backup directories, packs them into tasks of about equal archive bytes
(largest first, each to the lightest task: a few huge backups do not end up in one task),
and each task runs :func:`headwater.verify.checks.verify_backup` on its directories, one
streaming pass per archive. Only the per-backup reports come back to the driver; the
optional comparison is a Spark join (:mod:`headwater.verify.compare`). Progress for a person
(what is read, tasks done) goes to an optional callback (:mod:`headwater.verify.progress`);
the command line here prints it on stderr.

    spark-submit --master spark://HOST:7077 "$(python -c 'import headwater.verify.job as j;
    print(j.__file__)')" /mnt/backups --report /mnt/reports

Executors need ``headwater`` installed and the backup paths mounted at the same place as on
the driver (docs/VERIFY.md).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.verify.backupdir import VerifyError, archive_path, find_backups, is_backup_dir
from headwater.verify.checks import verify_backup
from headwater.verify.compare import Comparison, compare_backups
from headwater.verify.findings import BackupReport, Finding
from headwater.verify.progress import announce, count, watch_tasks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "VerificationResult",
    "main",
    "plan_tasks",
    "run_verification",
    "summary_lines",
    "verify_backups",
]

TASKS_PER_CORE = 4
"""Tasks per core of the cluster: enough that a slow task does not leave cores idle, few
enough that scheduling a task (milliseconds) stays small next to verifying it."""


@dataclass
class VerificationResult:
    reports: list[BackupReport]
    comparison: Comparison | None = None

    @property
    def findings(self) -> list[Finding]:
        out = [f for report in self.reports for f in report.findings]
        if self.comparison is not None:
            out += self.comparison.findings
        return out

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def archive_bytes(self) -> int:
        return sum(report.archive_bytes for report in self.reports)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "backups": len(self.reports),
            "findings": len(self.findings),
            "archive_bytes": self.archive_bytes,
            "reports": [report.to_dict() for report in self.reports],
            "comparison": None if self.comparison is None else self.comparison.to_dict(),
        }


def plan_tasks(backups: Sequence[str], slots: int) -> list[list[str]]:
    """Backups grouped into at most ``slots * TASKS_PER_CORE`` tasks of about equal archive
    bytes (longest-processing-time first)."""
    count = max(1, min(len(backups), slots * TASKS_PER_CORE))
    sized = sorted(((_size(b), i, b) for i, b in enumerate(backups)), reverse=True)
    heap: list[tuple[int, int]] = [(0, task) for task in range(count)]
    groups: list[list[str]] = [[] for _ in range(count)]
    for size, _index, backup in sized:
        load, task = heapq.heappop(heap)
        groups[task].append(backup)
        heapq.heappush(heap, (load + size, task))
    return [group for group in groups if group]


def _size(backup: str) -> int:
    try:
        return archive_path(backup).stat().st_size
    except OSError:
        return 0


def _verify_group(group: list[str]) -> list[BackupReport]:
    return [verify_backup(directory) for directory in group]


def verify_backups(
    spark: SparkSession,
    backups: Sequence[str],
    progress: Callable[[str], None] | None = None,
) -> list[BackupReport]:
    """One report per backup directory, in the order given, verified across the executors.
    ``progress`` receives what is read and how far the job is (lines for a person)."""
    if not backups:
        return []
    groups = plan_tasks(backups, spark.sparkContext.defaultParallelism)
    if progress is not None:
        announce(backups, len(groups), progress)
    rdd = spark.sparkContext.parallelize(groups, len(groups)).flatMap(_verify_group)
    began = time.perf_counter()
    with watch_tasks(spark, progress):
        reports = rdd.collect()
    if progress is not None:
        progress(f"  read {count(len(reports), 'backup')} in {time.perf_counter() - began:.1f}s")
    order = {backup: i for i, backup in enumerate(backups)}
    return sorted(reports, key=lambda report: order[report.backup])


def resolve_targets(
    paths: Sequence[str | Path],
    compare: tuple[str | Path, str | Path] | None = None,
) -> tuple[list[str], tuple[str, str] | None]:
    """The backup directories to verify and the pair to compare, checked without Spark:
    a wrong path is reported at once, not after the seconds a Spark session takes to start.
    Raises :class:`VerifyError`."""
    given = list(paths)
    pair: tuple[str, str] | None = None
    if compare is not None:
        pair = (os.path.abspath(compare[0]), os.path.abspath(compare[1]))
        for side in pair:
            if not is_backup_dir(Path(side)):
                raise VerifyError(f"--compare needs two backup directories; {side} is not one")
        given += list(pair)
    if not given:
        raise VerifyError("no backup to verify: give one or more paths")
    return find_backups(given), pair


def run_verification(
    spark: SparkSession,
    paths: Sequence[str | Path],
    compare: tuple[str | Path, str | Path] | None = None,
    progress: Callable[[str], None] | None = None,
) -> VerificationResult:
    """Verify every backup under ``paths`` (and both ``compare`` sides), then compare.
    ``progress``: called with one line at a time saying what is being read."""
    backups, pair = resolve_targets(paths, compare)
    result = VerificationResult(verify_backups(spark, backups, progress))
    if pair is not None:
        if progress is not None:
            progress(f"comparing {pair[0]} with {pair[1]}")
        result.comparison = compare_backups(spark, pair[0], pair[1])
    return result


_FORMAT_NOTE = {"headwater": "", "nats": " (nats-server archive)"}


def _contents(report: BackupReport) -> str:
    """What the archive holds, or, when it could not be read whole, what was read of it: a
    damaged archive must not look like an empty stream."""
    if report.complete:
        return f"{report.messages} messages, {report.consumers} consumers"
    if not report.format:
        return "archive not read"
    of = "" if report.expected_messages is None else f" of {report.expected_messages}"
    seqs = f" (seq {report.first_seq}-{report.last_seq})" if report.messages else ""
    return f"read {report.messages}{of} messages{seqs} and {report.consumers} consumers"


def summary_lines(result: VerificationResult) -> list[str]:
    """The human-readable report: one line per backup, its findings indented below."""
    lines: list[str] = []
    for report in result.reports:
        status = "ok  " if report.ok else "FAIL"
        lines.append(
            f"{status} {report.backup}  stream {report.stream or '?'}, {_contents(report)}, "
            f"{report.archive_bytes} archive bytes" + _FORMAT_NOTE.get(report.format, "")
        )
        lines += [f"       {f.kind}: {f.detail}" for f in report.findings]
    if result.comparison is not None:
        cmp = result.comparison
        verdict = "identical" if cmp.identical else "DIFFERENT"
        counts = ", ".join(f"{k} {v}" for k, v in cmp.differences.items())
        lines.append(f"compare {cmp.a} -> {cmp.b}: {verdict}" + (f" ({counts})" if counts else ""))
        lines += [f"       {f.kind}: {f.detail}" for f in cmp.findings]
    failed = sum(1 for report in result.reports if not report.ok)
    lines.append(
        f"{len(result.reports)} backups verified, {failed} with findings, "
        f"{len(result.findings)} findings"
    )
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m headwater.verify.job",
        description="Verify Headwater backups with Spark (also the spark-submit application).",
    )
    parser.add_argument("paths", nargs="*", help="backup directories, or parents of them")
    parser.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's, or local[*])"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--report", metavar="DIR", help="write JSON reports and Parquet here")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two backups")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show Spark's own log lines on stderr"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 when every backup is clean, 1 on any finding or error."""
    from headwater.verify.report import write_report
    from headwater.verify.session import verification_session

    args = _parser().parse_args(argv)
    compare = tuple(args.compare) if args.compare else None

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        with verification_session(args.master, args.verbose) as spark:
            result = run_verification(
                spark,
                args.paths,
                compare,  # type: ignore[arg-type]
                progress,
            )
            if args.report:
                write_report(spark, result, args.report)
    except VerifyError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(os.linesep.join(summary_lines(result)))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
