"""What verification reports: findings (one fault each) and a report per backup.

Both are plain dataclasses built from builtins, so Spark ships them between the executors
(which build them) and the driver (which writes the JSON reports and the Parquet table) as
ordinary pickles, and ``to_dict`` gives the JSON shape without a schema library.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "MAX_FINDINGS_PER_KIND",
    "BackupReport",
    "Finding",
    "FindingLog",
    "Kind",
]

MAX_FINDINGS_PER_KIND = 20
"""A backup with a million bad pending entries must not make a million-row report: past this
many findings of one kind, one more finding counts the rest."""


class Kind(enum.StrEnum):
    """The kinds of finding; the ``kind`` column of the Parquet table."""

    BACKUP_UNREADABLE = "backup_unreadable"
    """``backup.json`` or the archive is missing, unreadable or not the expected JSON, or the
    directory holds two archives (``stream.hwarc`` and ``stream.tar.s2``)."""
    ARCHIVE_MALFORMED = "archive_malformed"
    """Structure: record order (including reordered sequences), lengths, the END counts."""
    ARCHIVE_CHECKSUM = "archive_checksum"
    """A header, frame or record does not match its checksum (the bytes changed)."""
    ARCHIVE_TRUNCATED = "archive_truncated"
    ARCHIVE_VERSION = "archive_version"
    METADATA_MISMATCH = "metadata_mismatch"
    """``backup.json`` and the archive's stream record disagree."""
    SEQUENCE_RANGE = "sequence_range"
    """A message outside the state's ``[first_seq, last_seq]``."""
    DELETED_COUNT = "deleted_count"
    """The sequences missing from the archive differ from the state's ``num_deleted``."""
    MESSAGE_COUNT = "message_count"
    BYTE_COUNT = "byte_count"
    SUBJECT_COUNT = "subject_count"
    CONSUMER_STATE = "consumer_state"
    STREAM_CONFIG = "stream_config"
    CONSUMER_CONFIG = "consumer_config"
    COMPARE_MISSING = "compare_missing"
    """A sequence of the first backup (A) that the second (B) lacks."""
    COMPARE_EXTRA = "compare_extra"
    """A sequence of B that A lacks."""
    COMPARE_SUBJECT = "compare_subject"
    COMPARE_PAYLOAD = "compare_payload"
    COMPARE_HEADERS = "compare_headers"


@dataclass(frozen=True)
class Finding:
    backup: str
    """The backup directory, as given (or found under a parent directory)."""
    kind: str
    detail: str
    stream: str = ""
    seq: int | None = None
    """The stream sequence the finding is about, when there is one."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BackupReport:
    backup: str
    stream: str = ""
    archive_bytes: int = 0
    format: str = ""
    """The archive's format, from its content: ``headwater`` (``stream.hwarc``) or ``nats``
    (a nats-server 2.15 snapshot, ``stream.tar.s2``); empty when no archive could be read."""
    messages: int = 0
    """Message records read (when the archive is damaged: those before the fault, and
    those in the frames after a damaged frame)."""
    expected_messages: int | None = None
    """How many the archive should hold: its END record's count, else the recorded state's;
    None when neither could be read."""
    consumers: int = 0
    first_seq: int = 0
    last_seq: int = 0
    complete: bool = False
    """The whole archive was read, up to and including its END record, no frame skipped."""
    damaged: list[dict[str, Any]] = field(default_factory=list)
    """The frames skipped as unreadable (:class:`headwater.archive.DamagedFrame` as dicts:
    ``frame``, ``first_byte``, ``last_byte``, ``reason``, ``after_seq``, ``next_seq``)."""
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


class FindingLog:
    """Collects one backup's findings, capping each kind at ``MAX_FINDINGS_PER_KIND``."""

    def __init__(self, backup: str, limit: int = MAX_FINDINGS_PER_KIND) -> None:
        self.backup = backup
        self.stream = ""
        self._limit = limit
        self._counts: dict[str, int] = {}
        self.findings: list[Finding] = []

    def add(self, kind: Kind, detail: str, seq: int | None = None) -> None:
        seen = self._counts.get(kind, 0)
        self._counts[kind] = seen + 1
        if seen < self._limit:
            self.findings.append(Finding(self.backup, str(kind), detail, self.stream, seq))

    def close(self) -> list[Finding]:
        """The findings, plus one per kind that went over the cap saying how many were left
        out."""
        out = list(self.findings)
        for kind, seen in self._counts.items():
            if seen > self._limit:
                out.append(
                    Finding(
                        self.backup,
                        kind,
                        f"{seen - self._limit} more {kind} findings not listed",
                        self.stream,
                    )
                )
        return out
