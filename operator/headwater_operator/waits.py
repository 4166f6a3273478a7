"""Expected waits, logged as what they are: INFO, not ERROR.

A handler that must wait (a Consumer whose stream does not exist yet, a Stream whose Consumer
resources are still being deleted) raises ``kopf.TemporaryError`` so that kopf calls it again
after a delay: kopf has no other way to re-run an unfinished handler. But kopf logs every
TemporaryError at ERROR ("Handler 'create' failed temporarily: ...") and, as the object logger
posts its records, also as an Event of type ``Error``. Ordering waits are what
``kubectl apply -f dir/`` produces every day; the operator's own Event (``Waiting``,
``DeleteWaiting``) already says what is going on.

``ExpectedWaits`` is a filter on kopf's object logger: before raising, the handler says which
message it expects for which object (by uid); the one record kopf logs for it is rewritten to
INFO with the operator's wording, and not posted as an Event. Every other record, including a
TemporaryError the operator did not announce, passes unchanged.
"""

from __future__ import annotations

import logging
import threading

KOPF_OBJECTS_LOGGER = "kopf.objects"
_KOPF_TEMPORARY = "failed temporarily: "
"""What kopf logs for a TemporaryError, before its message (kopf's execution.py)."""


class ExpectedWaits(logging.Filter):
    """Downgrades kopf's log record of an announced wait to INFO (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self._expected: dict[str, str] = {}
        # Records are filtered on kopf's threads; announcements come from the event loop.
        self._lock = threading.Lock()

    def expect(self, uid: str, message: str) -> None:
        """The next "failed temporarily" record for ``uid`` with ``message`` is a wait."""
        with self._lock:
            self._expected[uid] = message

    def install(self) -> None:
        logging.getLogger(KOPF_OBJECTS_LOGGER).addFilter(self)

    def uninstall(self) -> None:
        logging.getLogger(KOPF_OBJECTS_LOGGER).removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.ERROR:
            return True
        uid = str((getattr(record, "k8s_ref", None) or {}).get("uid"))
        text = record.getMessage()
        with self._lock:
            message = self._expected.get(uid)
            if message is None or not text.endswith(_KOPF_TEMPORARY + message):
                return True
            del self._expected[uid]
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        record.msg, record.args = f"{message}; retrying", ()
        record.k8s_skip = True  # the operator posted its own Event for this wait
        return True
