"""Converting a stream archive between Headwater's format and nats-server 2.15's.

Both readers yield the same records and both writers take them, so a conversion is one pass
in constant memory. A Headwater archive converted for nats-server loses what NATSARC1 cannot
hold: per-message pending and redelivery records (consumers with unacknowledged messages
restart from their ack floor, as after a nats-server backup) and the stream's creation time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from headwater.archive.detect import ArchiveFormat, open_archive
from headwater.archive.natsarc import NatsArchiveWriter
from headwater.archive.records import (
    ArchivedConsumer,
    ArchivedMessage,
    ArchivedStream,
    ArchiveSummary,
)
from headwater.archive.writer import ArchiveWriter

__all__ = ["convert_archive"]


def convert_archive(
    source: str | Path,
    target: str | Path,
    to: ArchiveFormat,
    name: str,
    config: dict[str, Any],
) -> ArchiveSummary:
    """Write the archive at ``source`` (either format; ``name`` and ``config`` are the stream's,
    which a nats-server archive does not hold) to ``target`` in format ``to``.

    Everything read is checked as usual, so a damaged source fails the conversion; ``target``
    appears only once the whole archive was converted."""
    partial = Path(f"{target}.partial")
    try:
        with open(source, "rb") as src, open(partial, "wb") as out:
            writer: ArchiveWriter | NatsArchiveWriter = (
                NatsArchiveWriter(out.write)
                if to is ArchiveFormat.NATS
                else ArchiveWriter(out.write)
            )
            summary = None
            for record in open_archive(src, name, config):
                if type(record) is ArchivedMessage:
                    writer.write_message(
                        record.seq, record.subject, record.hdr, record.data, record.ts
                    )
                elif type(record) is ArchivedConsumer:
                    writer.write_consumer(record)
                elif type(record) is ArchivedStream:
                    writer.write_stream(record)
                else:
                    summary = writer.close()
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    assert summary is not None  # both readers end with their summary or raise
    return summary
