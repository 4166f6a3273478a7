"""Which format an archive file is in, and a reader for either.

Headwater reads two stream backup formats: its own (docs/ARCHIVE.md, magic ``\\x89HWARC``) and
nats-server 2.15's ``NATSARC1`` inside an S2 stream (:mod:`headwater.archive.natsarc`). Both
readers yield the same records, so callers (restore, the verifiers) pick one here and never
look at the format again.
"""

from __future__ import annotations

import enum
from typing import Any, BinaryIO

from headwater.archive.format import MAGIC, MalformedArchive, TruncatedArchive
from headwater.archive.natsarc import NatsArchiveReader
from headwater.archive.reader import ArchiveReader
from headwater.archive.s2 import S2_MAGIC, is_s2_stream

__all__ = ["ArchiveFormat", "archive_format", "open_archive"]

_PEEK = 10


class ArchiveFormat(enum.Enum):
    HEADWATER = "headwater"
    """Headwater's own archive (``stream.hwarc``)."""
    NATS = "nats"
    """A nats-server snapshot: an S2 stream (``stream.tar.s2``)."""


def archive_format(head: bytes) -> ArchiveFormat | None:
    """The format whose first bytes are ``head`` (at least 10 of them), None if neither."""
    if head.startswith(MAGIC):
        return ArchiveFormat.HEADWATER
    if is_s2_stream(head):
        return ArchiveFormat.NATS
    return None


def open_archive(
    source: BinaryIO, name: str, config: dict[str, Any], salvage: bool = False
) -> ArchiveReader | NatsArchiveReader:
    """A reader for the archive in the seekable ``source``, whichever format it is in.

    ``name`` and ``config`` are the stream's (from ``backup.json`` or a restore request): a
    nats-server archive does not record them. A Headwater archive records its own, which its
    callers check against theirs.

    ``salvage``: a Headwater archive's damaged frames are skipped and recorded
    (:attr:`ArchiveReader.damaged`) rather than raised; a nats-server archive cannot be
    resumed past a bad S2 chunk (its entries span chunks), so it raises as before."""
    head = source.read(_PEEK)
    source.seek(-len(head), 1)
    kind = archive_format(head)
    if kind is ArchiveFormat.HEADWATER:
        return ArchiveReader(source, salvage=salvage)
    if kind is ArchiveFormat.NATS:
        return NatsArchiveReader(source, name, config)
    if any(magic.startswith(head) for magic in (MAGIC, S2_MAGIC)):
        raise TruncatedArchive(f"the archive ends after {len(head)} bytes, inside its magic")
    raise MalformedArchive(
        "not a stream archive: neither Headwater's format nor a nats-server snapshot"
    )
