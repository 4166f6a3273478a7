"""The backup directory: ``backup.json`` and one archive, named by its format.

``backup.json`` holds ``{"config": ..., "state": ...}`` as the server reported them when the
snapshot began (the layout ``nats stream backup`` writes). The archive is ``stream.hwarc`` in
Headwater's format or ``stream.tar.s2`` for a nats-server snapshot (the name ``nats stream
backup`` gives it). The control plane writes this layout and the offline verifiers read it;
both take the names from here, which imports nothing but the archive library.
"""

from __future__ import annotations

from pathlib import Path

from headwater.archive.detect import ArchiveFormat

__all__ = ["ARCHIVE_FILE", "ARCHIVE_FILES", "BACKUP_FILE", "NATS_ARCHIVE_FILE", "archive_files"]

BACKUP_FILE = "backup.json"
ARCHIVE_FILE = "stream.hwarc"
"""The archive of a Headwater server's snapshot."""
NATS_ARCHIVE_FILE = "stream.tar.s2"
"""The archive of a nats-server snapshot (S2, ``NATSARC1`` since 2.15)."""
ARCHIVE_FILES = {ArchiveFormat.HEADWATER: ARCHIVE_FILE, ArchiveFormat.NATS: NATS_ARCHIVE_FILE}


def archive_files(directory: str | Path) -> list[Path]:
    """The archives present in ``directory``: one in a sound backup, none when it is missing,
    two when the directory is ambiguous."""
    base = Path(directory)
    return [base / name for name in ARCHIVE_FILES.values() if (base / name).is_file()]
