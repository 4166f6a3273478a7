"""Keep Spark's start-up chatter off a verification's stderr (unless ``--verbose``).

Two sources: Spark's log4j2 logging, which a configuration file at ERROR silences (passed to
the driver JVM as ``-Dlog4j2.configurationFile``), and the JVM itself, which prints
"WARNING: Using incubator modules" before any logging starts (Spark's launcher adds that
module; no JVM option silences the notice). For the second, the JVM is launched while file
descriptor 2 is a pipe: it, and the Python workers it starts, inherit the pipe, and a thread
forwards every other line to the real stderr, so Spark's errors still show.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["JVM_NOISE", "LOG4J2_ERROR_ONLY", "filtered_stderr", "quiet_log4j_config"]

LOG4J2_ERROR_ONLY = """\
rootLogger.level = error
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# Spark prints "Setting default log level" when the shell's logger differs from the root's.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""

JVM_NOISE = (b"WARNING: Using incubator modules",)
"""Start-up lines the JVM writes straight to stderr, dropped unless verbose."""


@contextmanager
def quiet_log4j_config(enabled: bool) -> Iterator[str | None]:
    """A log4j2 configuration file at ERROR for the JVM about to start (its path), removed on
    exit: log4j reads it once, at start-up. None when not ``enabled``."""
    if not enabled:
        yield None
        return
    fd, path = tempfile.mkstemp(prefix="headwater-verify-log4j2-", suffix=".properties")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(LOG4J2_ERROR_ONLY)
        yield path
    finally:
        os.unlink(path)


@contextmanager
def filtered_stderr(enabled: bool) -> Iterator[None]:
    """While inside, processes started inherit a stderr that drops :data:`JVM_NOISE`; this
    process's own stderr is restored on exit (what it wrote meanwhile is forwarded)."""
    if not enabled:
        yield
        return
    real = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(
        target=_forward, args=(read_end, real), name="spark-stderr", daemon=True
    ).start()
    try:
        yield
    finally:
        # The pipe's write end stays open in the JVM (and its workers) only; ``real`` stays
        # open for the forwarding thread, which ends when they close the pipe.
        os.dup2(real, 2)


def _forward(read_end: int, real: int) -> None:
    with os.fdopen(read_end, "rb", buffering=0) as pipe, os.fdopen(real, "wb", 0) as out:
        for line in iter(pipe.readline, b""):
            if not line.startswith(JVM_NOISE):
                out.write(line)
