"""``--report DIR``: a JSON report per backup, a summary, and a Parquet table of findings.

    DIR/summary.json              totals, every report, the comparison
    DIR/backups/<name>.json       one backup's report (``name``: directory name + path hash)
    DIR/findings.parquet/         backup, stream, kind, detail, seq: one row per finding

The Parquet table is written by Spark (so a cluster writes it to shared storage the same
way); it has its columns even when there are no findings.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from headwater.verify.findings import BackupReport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from headwater.verify.job import VerificationResult

__all__ = ["FINDINGS_SCHEMA", "report_name", "write_report"]

FINDINGS_SCHEMA = "backup string, stream string, kind string, detail string, seq long"


def report_name(report: BackupReport) -> str:
    """A file name unique per backup path and still readable: ``<dir>-<8 hex>.json``."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(report.backup).name) or "backup"
    digest = hashlib.sha256(report.backup.encode()).hexdigest()[:8]
    return f"{base}-{digest}.json"


def write_report(spark: SparkSession, result: VerificationResult, directory: str | Path) -> Path:
    root = Path(directory)
    per_backup = root / "backups"
    per_backup.mkdir(parents=True, exist_ok=True)
    for report in result.reports:
        (per_backup / report_name(report)).write_text(json.dumps(report.to_dict(), indent=2))
    (root / "summary.json").write_text(json.dumps(result.to_dict(), indent=2))
    rows = [(f.backup, f.stream, f.kind, f.detail, f.seq) for f in result.findings]
    table = spark.createDataFrame(rows, FINDINGS_SCHEMA)
    table.repartition(1).write.mode("overwrite").parquet(str((root / "findings.parquet").resolve()))
    return root
