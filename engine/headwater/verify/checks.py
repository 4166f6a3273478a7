"""Verify one backup directory in one streaming pass: what each Spark task runs.

The archive is read with :func:`headwater.archive.open_archive`: Headwater's own format
(:class:`~headwater.archive.ArchiveReader`, one frame at a time) or a nats-server 2.15 snapshot
(:class:`~headwater.archive.NatsArchiveReader`, ``NATSARC1`` in S2, one S2 block at a time),
both checking the structure and every checksum and yielding the same records. A Headwater
archive is read in salvage mode: a frame that fails its checksum is skipped and reported with its
byte range and the sequences around it (:mod:`headwater.verify.damage`), and the frames after it
are still read. This module adds
the semantic checks of issue 9 against the stream state recorded at snapshot time:

* every message sequence within ``[first_seq, last_seq]``, and the missing ones as many as
  ``num_deleted`` (ascending order is the reader's check);
* message count, stored bytes (the server's accounting) and per-subject counts;
* consumers: ``ack_floor <= delivered <= last_seq``, pending within ``(ack_floor, delivered]``;
* the stream and consumer configs valid under the control-plane models;
* ``backup.json`` agreeing with the archive's own stream record.

A nats-server archive records the stream state but neither the stream's name nor its config:
those come from ``backup.json``, so the checks of the archive's name and config against
``backup.json`` apply to Headwater archives only, and without ``backup.json`` a nats-server
archive's config checks (and the byte accounting, which depends on the storage type) are not
run.

Memory stays constant in the archive's size: per-subject counts are kept only when the state
recorded them (the server records at most 100,000 subjects).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from headwater.archive import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveError,
    ArchiveFormat,
    ArchiveReader,
    ChecksumMismatch,
    DamagedFrame,
    MalformedArchive,
    NatsArchiveReader,
    Record,
    TruncatedArchive,
    UnsupportedVersion,
    open_archive,
)
from headwater.control.models import Consumer, Stream
from headwater.verify.backupdir import (
    ARCHIVE_FILE,
    BACKUP_FILE,
    NATS_ARCHIVE_FILE,
    archive_files,
)
from headwater.verify.damage import report_damage
from headwater.verify.findings import BackupReport, FindingLog, Kind

__all__ = ["archive_error_kind", "stored_bytes_function", "verify_backup"]

# State fields backup.json (the snapshot reply) and the archive's stream record both carry.
_SHARED_STATE = ("messages", "bytes", "first_seq", "last_seq", "num_deleted")


def archive_error_kind(error: ArchiveError) -> Kind:
    if isinstance(error, ChecksumMismatch):
        return Kind.ARCHIVE_CHECKSUM
    if isinstance(error, TruncatedArchive):
        return Kind.ARCHIVE_TRUNCATED
    if isinstance(error, UnsupportedVersion):
        return Kind.ARCHIVE_VERSION
    return Kind.ARCHIVE_MALFORMED


def stored_bytes_function(storage: str) -> tuple[int, int]:
    """(fixed bytes per message, extra bytes when it has headers) of the server's accounting
    (docs/ARCHIVE.md): file stores count a 22-byte record head and an 8-byte checksum, plus a
    4-byte header length; memory stores a flat 16 bytes."""
    if storage == "memory":
        return 16, 0
    return 30, 4


def verify_backup(directory: str) -> BackupReport:
    """Check the backup in ``directory``; never raises for a damaged backup (that is a
    finding), so one bad backup cannot fail a Spark job over thousands."""
    began = time.perf_counter()
    report = BackupReport(backup=directory)
    log = FindingLog(directory)
    meta = _load_backup_json(Path(directory), log)
    if meta is not None:
        # Named already when the archive is too damaged to reach its stream record.
        log.stream = report.stream = str(meta["config"].get("name", ""))
    present = archive_files(directory)
    if len(present) > 1:
        # Which one is the backup? Restoring either could be wrong: report, read neither.
        log.add(
            Kind.BACKUP_UNREADABLE,
            f"two archives, {' and '.join(p.name for p in present)}: a backup holds one",
        )
        report.archive_bytes = sum(_size(p) for p in present)
        report.findings = log.close()
        report.seconds = time.perf_counter() - began
        return report
    archive = present[0] if present else Path(directory) / ARCHIVE_FILE
    try:
        report.archive_bytes = archive.stat().st_size
        with open(archive, "rb") as fh:
            _verify_archive(fh, meta, report, log)
    except FileNotFoundError:
        log.add(
            Kind.BACKUP_UNREADABLE,
            f"the archive is missing (neither {ARCHIVE_FILE} nor {NATS_ARCHIVE_FILE})",
        )
    except OSError as exc:
        log.add(Kind.BACKUP_UNREADABLE, f"{archive.name}: {exc.strerror or exc}")
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        # Well-formed records whose JSON holds the wrong types (a state field that is not a
        # number): a finding for this backup, not an exception that fails the whole job.
        log.add(Kind.ARCHIVE_MALFORMED, f"unusable stream or consumer record: {exc!r}")
    report.findings = log.close()
    report.seconds = time.perf_counter() - began
    return report


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _load_backup_json(directory: Path, log: FindingLog) -> dict[str, Any] | None:
    path = directory / BACKUP_FILE
    try:
        meta = json.loads(path.read_bytes())
    except FileNotFoundError:
        log.add(Kind.BACKUP_UNREADABLE, f"{BACKUP_FILE} is missing")
        return None
    except (OSError, ValueError) as exc:
        log.add(Kind.BACKUP_UNREADABLE, f"{BACKUP_FILE}: {exc}")
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        log.add(Kind.BACKUP_UNREADABLE, f"{BACKUP_FILE} has no stream config")
        return None
    return meta


def _verify_archive(
    fh: Any, meta: dict[str, Any] | None, report: BackupReport, log: FindingLog
) -> None:
    stream: ArchivedStream | None = None
    consumers: list[ArchivedConsumer] = []
    tally: _MessageTally | None = None
    config: dict[str, Any] = meta["config"] if meta is not None else {}
    name = config.get("name")
    nats = False
    damaged: list[DamagedFrame] = []
    fatal: ArchiveError | None = None
    reader: ArchiveReader | NatsArchiveReader | None = None
    try:
        # salvage: a damaged frame is recorded and skipped, so what follows it is still read
        # and the report can say which bytes and sequences were lost.
        reader = open_archive(fh, name if isinstance(name, str) else "", config, salvage=True)
        nats = isinstance(reader, NatsArchiveReader)
        damaged = [] if nats else reader.damaged  # type: ignore[union-attr]
        report.format = (ArchiveFormat.NATS if nats else ArchiveFormat.HEADWATER).value
        records = reader.records()
        # The reader guarantees the stream record comes first (or raises), unless it was in
        # a damaged frame: the records read after that are still counted.
        first = next(records, None)
        if isinstance(first, ArchivedStream):
            stream = first
            log.stream = report.stream = stream.name
        elif not damaged:
            raise MalformedArchive("the first record is not the stream record")
        elif first is not None:
            records = itertools.chain([first], records)
        # A nats-server archive without backup.json has no config, so no storage type.
        tally = _MessageTally(stream or _stand_in(meta), count_bytes=not (nats and meta is None))
        tally.consume(records, consumers)
        report.complete = reader.summary is not None and not damaged
    except ArchiveError as exc:
        fatal = exc
    finally:
        if tally is not None:
            report.messages = tally.count
            report.first_seq = tally.first
            report.last_seq = tally.last
        report.consumers = len(consumers)
    report.expected_messages = _expected_messages(reader, stream, meta)
    if damaged:
        report.damaged = [damage.to_dict() for damage in damaged]
        report_damage(log, damaged, stream is None, report.messages, report.expected_messages)
    if fatal is not None:
        log.add(archive_error_kind(fatal), str(fatal))
    if stream is None:
        return
    if meta is not None:
        _check_backup_json(meta, stream, log, check_name=not nats)
    if not nats:
        _check_stream_config(stream, log)
    elif meta is not None:  # the config is backup.json's; without it there is none to check
        _check_stream_model(stream, log)
    for consumer in consumers:
        _check_consumer(consumer, stream, log)
    if report.complete and tally is not None:
        tally.check(log)


def _stand_in(meta: dict[str, Any] | None) -> ArchivedStream:
    """The stream as ``backup.json`` describes it, for tallying the messages read after a
    damaged first frame took the archive's own stream record."""
    config = meta["config"] if meta is not None else {}
    state = meta.get("state") if meta is not None else None
    return ArchivedStream(
        str(config.get("name", "")), 0, config, state if isinstance(state, dict) else {}
    )


def _expected_messages(
    reader: ArchiveReader | NatsArchiveReader | None,
    stream: ArchivedStream | None,
    meta: dict[str, Any] | None,
) -> int | None:
    """How many messages the archive should hold: its END record's count, else the state
    recorded in its stream record, else ``backup.json``'s; None when none of them was read."""
    if reader is not None and reader.summary is not None:
        return int(reader.summary.messages)
    state = stream.state if stream is not None else (meta or {}).get("state")
    if isinstance(state, dict) and isinstance(state.get("messages"), int):
        return int(state["messages"])
    return None


class _MessageTally:
    """Running totals over the message records, compared with the state at the end."""

    def __init__(self, stream: ArchivedStream, count_bytes: bool = True) -> None:
        state = stream.state
        self.first_allowed = int(state.get("first_seq", 0))
        self.last_allowed = int(state.get("last_seq", 0))
        self.per_message, self.with_headers = stored_bytes_function(
            str(stream.config.get("storage", "file"))
        )
        recorded = state.get("subjects")
        self.expected_subjects: Mapping[str, int] | None = (
            recorded if isinstance(recorded, dict) else None
        )
        self.subjects: dict[str, int] = {}
        self.state = state
        self.count_bytes = count_bytes
        self.count = 0
        self.in_range = 0
        self.stored_bytes = 0
        self.first = 0
        self.last = 0
        self.out_of_range: list[int] = []

    def consume(self, records: Iterator[Record], consumers: list[ArchivedConsumer]) -> None:
        """Tally every message record (consumer records go to ``consumers``). The loop is
        the per-message cost of verification, so it keeps its running totals in locals and
        stores them when it ends, also when the reader raises."""
        first_allowed, last_allowed = self.first_allowed, self.last_allowed
        subjects = self.subjects if self.expected_subjects is not None else None
        out_of_range = self.out_of_range
        count = in_range = sized = headed = first = last = 0
        try:
            for record in records:
                if type(record) is not ArchivedMessage:
                    if type(record) is ArchivedConsumer:
                        consumers.append(record)
                    continue
                seq = last = record.seq
                if not first:
                    first = seq
                count += 1
                hdr = len(record.hdr)
                sized += len(record.subject) + hdr + len(record.data)
                if hdr:
                    headed += 1
                if first_allowed <= seq <= last_allowed:
                    in_range += 1
                elif len(out_of_range) < 64:
                    out_of_range.append(seq)
                if subjects is not None:
                    subjects[record.subject] = subjects.get(record.subject, 0) + 1
        finally:
            self.count, self.in_range, self.first, self.last = count, in_range, first, last
            self.stored_bytes = count * self.per_message + sized + headed * self.with_headers

    def check(self, log: FindingLog) -> None:
        state = self.state
        for seq in self.out_of_range:
            log.add(
                Kind.SEQUENCE_RANGE,
                f"message {seq} is outside the state's sequences "
                f"[{self.first_allowed}, {self.last_allowed}]",
                seq,
            )
        expected = int(state.get("messages", 0))
        if self.count != expected:
            log.add(
                Kind.MESSAGE_COUNT,
                f"archive holds {self.count} messages, the state says {expected}",
            )
        # Sequences start at 1: a new stream's state (nats-server's) says first_seq 0.
        span = max(0, self.last_allowed - max(self.first_allowed, 1) + 1)
        missing = span - self.in_range
        deleted = int(state.get("num_deleted", 0))
        if missing != deleted:
            log.add(
                Kind.DELETED_COUNT,
                f"{missing} sequences of [{self.first_allowed}, {self.last_allowed}] are "
                f"missing from the archive, the state says {deleted} deleted",
            )
        expected_bytes = int(state.get("bytes", 0))
        if self.count_bytes and self.stored_bytes != expected_bytes:
            log.add(
                Kind.BYTE_COUNT,
                f"archive messages account for {self.stored_bytes} bytes, "
                f"the state says {expected_bytes}",
            )
        if self.expected_subjects is not None:
            self._check_subjects(log)

    def _check_subjects(self, log: FindingLog) -> None:
        expected = self.expected_subjects or {}
        for subject in sorted(set(expected) | set(self.subjects)):
            want = int(expected.get(subject, 0))
            got = self.subjects.get(subject, 0)
            if want != got:
                log.add(
                    Kind.SUBJECT_COUNT,
                    f"subject {subject}: archive holds {got} messages, the state says {want}",
                )


def _check_backup_json(
    meta: dict[str, Any], stream: ArchivedStream, log: FindingLog, check_name: bool = True
) -> None:
    """``check_name``: the archive records its own name (a nats-server archive does not; its
    stream record is named from ``backup.json``)."""
    name = meta["config"].get("name")
    if check_name and name != stream.name:
        log.add(
            Kind.METADATA_MISMATCH,
            f"{BACKUP_FILE} names stream {name!r}, the archive {stream.name!r}",
        )
    state = meta.get("state")
    if not isinstance(state, dict):
        log.add(Kind.METADATA_MISMATCH, f"{BACKUP_FILE} has no stream state")
        return
    empty = state.get("messages") == 0 and stream.state.get("messages") == 0
    for key in _SHARED_STATE:
        if key == "first_seq" and empty:
            # An empty stream has no first message: STREAM.INFO says 0 for a new stream
            # where the store (and so the archive) says the next sequence, 1.
            continue
        if key in state and state[key] != stream.state.get(key):
            log.add(
                Kind.METADATA_MISMATCH,
                f"state {key}: {BACKUP_FILE} says {state[key]}, "
                f"the archive says {stream.state.get(key)}",
            )


def _check_stream_config(stream: ArchivedStream, log: FindingLog) -> None:
    if stream.config.get("name") != stream.name:
        log.add(
            Kind.STREAM_CONFIG,
            f"config names stream {stream.config.get('name')!r}, the record {stream.name!r}",
        )
    _check_stream_model(stream, log)


def _check_stream_model(stream: ArchivedStream, log: FindingLog) -> None:
    try:
        Stream.from_server_config(stream.config)
    except (ValidationError, ValueError) as exc:
        log.add(Kind.STREAM_CONFIG, f"stream config rejected: {_one_line(exc)}")


def _check_consumer(consumer: ArchivedConsumer, stream: ArchivedStream, log: FindingLog) -> None:
    name = consumer.name
    try:
        # A nats-server archive without backup.json has no stream name; the consumer's own
        # config does not depend on it, so a stand-in lets the rest be validated.
        Consumer.from_server_config(consumer.config, stream=stream.name or "UNNAMED")
    except (ValidationError, ValueError) as exc:
        log.add(Kind.CONSUMER_CONFIG, f"consumer {name}: config rejected: {_one_line(exc)}")
    state = consumer.state
    try:
        delivered = int(state["delivered"]["stream_seq"])
        floor = int(state["ack_floor"]["stream_seq"])
        delivered_c = int(state["delivered"]["consumer_seq"])
        floor_c = int(state["ack_floor"]["consumer_seq"])
        pending = [(int(entry[0]), int(entry[1])) for entry in state.get("pending") or []]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        log.add(Kind.CONSUMER_STATE, f"consumer {name}: state is not readable ({exc!r})")
        return
    last = int(stream.state.get("last_seq", 0))
    if floor > last:
        log.add(
            Kind.CONSUMER_STATE,
            f"consumer {name}: ack floor {floor} is beyond the stream's last sequence {last}",
            floor,
        )
    if floor > delivered:
        log.add(
            Kind.CONSUMER_STATE,
            f"consumer {name}: ack floor {floor} is beyond its delivered sequence {delivered}",
            floor,
        )
    if floor_c > delivered_c:
        log.add(
            Kind.CONSUMER_STATE,
            f"consumer {name}: ack floor consumer sequence {floor_c} is beyond delivered "
            f"{delivered_c}",
        )
    if delivered > last:
        log.add(
            Kind.CONSUMER_STATE,
            f"consumer {name}: delivered sequence {delivered} is beyond the stream's last "
            f"sequence {last}",
            delivered,
        )
    for seq, _consumer_seq in pending:
        if not floor < seq <= delivered:
            log.add(
                Kind.CONSUMER_STATE,
                f"consumer {name}: pending sequence {seq} is outside "
                f"(ack floor {floor}, delivered {delivered}]",
                seq,
            )


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 500 else text[:497] + "..."
