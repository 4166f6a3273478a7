"""Offline verification of backups as a Spark job (issue 9; docs/VERIFY.md).

``headwater verify`` and ``python -m headwater.verify.job`` (the spark-submit application)
read backup directories with :mod:`headwater.archive`'s streaming reader on the executors and
report findings per backup. Importing this package does not import pyspark: the per-backup
checks (:func:`verify_backup`) run without Spark too.
"""

from headwater.verify.backupdir import VerifyError, find_backups
from headwater.verify.checks import verify_backup
from headwater.verify.findings import BackupReport, Finding, Kind

__all__ = ["BackupReport", "Finding", "Kind", "VerifyError", "find_backups", "verify_backup"]
