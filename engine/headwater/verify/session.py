"""The SparkSession verification runs in: local by default, a cluster under spark-submit.

Spark's start-up chatter (log4j's profile notice, "Setting default log level", WARN lines such
as NativeCodeLoader's, the JVM's incubator-module warning) is not the report: unless
``verbose``, the driver JVM is started with a log4j2 configuration at ERROR and its stderr
passes through :mod:`headwater.verify.quiet`, which drops the JVM's own start-up warning.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from headwater.verify.backupdir import VerifyError
from headwater.verify.quiet import filtered_stderr, quiet_log4j_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "build_session", "verification_session"]

DEFAULT_MASTER = "local[*]"
APP_NAME = "headwater-verify"


def _launched_by_spark_submit() -> bool:
    # spark-submit starts the Python driver with the gateway of the JVM it already runs, and
    # that JVM got --master from the command line: do not override it.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(master: str | None = None, verbose: bool = False) -> SparkSession:
    """A new (or spark-submit's) session. ``master`` None means spark-submit's master, or
    ``local[*]`` when run directly. ``verbose``: keep Spark's own logging (WARN and up, its
    start-up lines) on stderr; otherwise only its errors."""
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    if master is None and not _launched_by_spark_submit():
        master = DEFAULT_MASTER
    builder = SparkSession.builder.appName(APP_NAME)
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        # Stay on the loopback interface, and run Python workers with this interpreter (the
        # one that has headwater installed), not whatever "python3" is first on PATH.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            # The comparison's join is small per core on one machine; 200 shuffle
            # partitions would be mostly scheduling.
            .config("spark.sql.shuffle.partitions", "8")
        )
    builder = builder.config("spark.ui.enabled", "false").config(
        "spark.ui.showConsoleProgress", "false"
    )
    # Under spark-submit the JVM runs already: its logging is the submitter's choice, and
    # only the level can still be lowered (below).
    launching = not verbose and not _launched_by_spark_submit()
    with quiet_log4j_config(launching) as log4j_file, filtered_stderr(launching):
        if log4j_file is not None:
            builder = builder.config(
                "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j_file}"
            )
        try:
            spark = builder.getOrCreate()
        except PySparkException as exc:
            # Typically no Java: say so in one line rather than a Py4J traceback.
            raise VerifyError(
                f"Spark did not start (Spark needs Java 17 or later): {exc}"
            ) from None
    if not verbose:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def verification_session(
    master: str | None = None, verbose: bool = False
) -> Iterator[SparkSession]:
    """The active session if there is one (a notebook's, a test module's), else a new one
    that is stopped on exit."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    spark = build_session(master, verbose)
    try:
        yield spark
    finally:
        spark.stop()
