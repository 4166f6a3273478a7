"""The Headwater backup archive: a documented, versioned, streamable file format.

A pure library (no engine, no control plane imports): the engine writes archives when a stream
is snapshotted and reads them on restore; the control plane and offline verifiers read them
without a server. The byte layout and the version rules are in docs/ARCHIVE.md. It also reads
nats-server 2.15's snapshots (``NATSARC1`` in S2), yielding the same records, and rebuilds a
damaged Headwater archive from its readable frames (``salvage_archive``).
"""

from headwater.archive.convert import convert_archive
from headwater.archive.damage import DamagedFrame
from headwater.archive.detect import ArchiveFormat, archive_format, open_archive
from headwater.archive.format import (
    ARCHIVE_SUFFIX,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    MAGIC,
    ArchiveError,
    ChecksumMismatch,
    Compression,
    MalformedArchive,
    TruncatedArchive,
    UnsupportedVersion,
)
from headwater.archive.natsarc import NatsArchiveReader, NatsArchiveWriter
from headwater.archive.reader import ArchiveReader, ScanResult, read_archive, scan_archive
from headwater.archive.records import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveSummary,
    Record,
)
from headwater.archive.salvage import SalvageResult, salvage_archive
from headwater.archive.writer import ArchiveWriter

__all__ = [
    "ARCHIVE_SUFFIX",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "MAGIC",
    "ArchiveError",
    "ArchiveFormat",
    "ArchiveReader",
    "ArchiveSummary",
    "ArchiveWriter",
    "ArchivedConsumer",
    "ArchivedMessage",
    "ArchivedStream",
    "ChecksumMismatch",
    "Compression",
    "DamagedFrame",
    "MalformedArchive",
    "NatsArchiveReader",
    "NatsArchiveWriter",
    "Record",
    "SalvageResult",
    "ScanResult",
    "TruncatedArchive",
    "UnsupportedVersion",
    "archive_format",
    "convert_archive",
    "open_archive",
    "read_archive",
    "salvage_archive",
    "scan_archive",
]
