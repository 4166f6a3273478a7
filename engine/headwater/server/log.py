"""Logging in nats-server's format, so launchers that wait for its log lines work unchanged.

``[pid] 2026/11/24 01:41:11.123456 [INF] Server is ready``
"""

from __future__ import annotations

import logging
import os
import sys
import time

from headwater.server.config.settings import LogSettings

TRACE = 5
logging.addLevelName(TRACE, "TRACE")

_LEVELS = {
    TRACE: "TRC",
    logging.DEBUG: "DBG",
    logging.INFO: "INF",
    logging.WARNING: "WRN",
    logging.ERROR: "ERR",
    logging.CRITICAL: "FTL",
}


class NatsFormatter(logging.Formatter):
    def __init__(self, with_time: bool) -> None:
        super().__init__()
        self.with_time = with_time
        self.pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        level = _LEVELS.get(record.levelno, "INF")
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if not self.with_time:
            return f"[{self.pid}] [{level}] {text}"
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        return f"[{self.pid}] {stamp}.{micros:06d} [{level}] {text}"


def setup(settings: LogSettings) -> None:
    handler: logging.Handler
    if settings.log_file:
        handler = logging.FileHandler(settings.log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NatsFormatter(settings.log_time))
    root = logging.getLogger("headwater")
    root.handlers[:] = [handler]
    root.propagate = False
    root.setLevel(TRACE if settings.trace else logging.DEBUG if settings.debug else logging.INFO)
