"""The Headwater backup archive: a documented, versioned, streamable file format.

A pure library (no engine, no control plane imports): the engine writes archives when a stream
is snapshotted and reads them on restore; the control plane and offline verifiers read them
without a server. The byte layout and the version rules are in docs/ARCHIVE.md.
"""

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
from headwater.archive.reader import ArchiveReader, ScanResult, read_archive, scan_archive
from headwater.archive.records import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveSummary,
    Record,
)
from headwater.archive.writer import ArchiveWriter

__all__ = [
    "ARCHIVE_SUFFIX",
    "FORMAT_MAJOR",
    "FORMAT_MINOR",
    "MAGIC",
    "ArchiveError",
    "ArchiveReader",
    "ArchiveSummary",
    "ArchiveWriter",
    "ArchivedConsumer",
    "ArchivedMessage",
    "ArchivedStream",
    "ChecksumMismatch",
    "Compression",
    "MalformedArchive",
    "Record",
    "ScanResult",
    "TruncatedArchive",
    "UnsupportedVersion",
    "read_archive",
    "scan_archive",
]
