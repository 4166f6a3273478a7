"""Backup directories: finding them under the paths a user gives, and their two files.

A backup directory holds ``backup.json`` and one archive: ``stream.hwarc`` (Headwater's format,
docs/ARCHIVE.md) or ``stream.tar.s2`` (a nats-server snapshot, as ``nats stream backup`` and
``headwater.control.backup`` name it); ``headwater account backup`` writes one per stream
under a parent directory. Verification accepts either, and any tree of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from headwater.archive.layout import (
    ARCHIVE_FILE,
    ARCHIVE_FILES,
    BACKUP_FILE,
    NATS_ARCHIVE_FILE,
    archive_files,
)

__all__ = [
    "ARCHIVE_FILE",
    "ARCHIVE_FILES",
    "BACKUP_FILE",
    "NATS_ARCHIVE_FILE",
    "VerifyError",
    "archive_files",
    "archive_path",
    "find_backups",
    "is_backup_dir",
]


class VerifyError(Exception):
    """Verification could not start: a path that is missing or holds no backup."""


def is_backup_dir(path: Path) -> bool:
    """A directory holding ``backup.json`` or an archive: one with only one of them is a
    damaged backup, which verification must report rather than skip."""
    return (path / BACKUP_FILE).is_file() or bool(archive_files(path))


def find_backups(paths: Iterable[str | Path]) -> list[str]:
    """Every backup directory named by ``paths`` or found beneath them, each once, in a stable
    order (the order given, then sorted within a parent), as absolute paths: executors on
    other machines do not share the driver's working directory."""
    found: list[str] = []
    seen: set[str] = set()
    for given in paths:
        path = Path(os.path.abspath(given))
        if not path.exists():
            raise VerifyError(f"{path} does not exist")
        if not path.is_dir():
            raise VerifyError(f"{path} is not a directory (give a backup directory)")
        below = [path] if is_backup_dir(path) else _backups_below(path)
        if not below:
            raise VerifyError(
                f"{path} holds no backup ({BACKUP_FILE} and {ARCHIVE_FILE} or {NATS_ARCHIVE_FILE})"
            )
        for directory in below:
            key = os.path.normpath(directory)
            if key not in seen:
                seen.add(key)
                found.append(str(directory))
    return found


def _backups_below(root: Path) -> list[Path]:
    out: list[Path] = []
    for current, dirs, _files in os.walk(root):
        dirs.sort()
        here = Path(current)
        if here != root and is_backup_dir(here):
            out.append(here)
            dirs.clear()  # a backup directory holds no further backups
    return out


def archive_path(directory: str | Path) -> Path:
    """The backup's archive: the one present (``stream.hwarc`` if both are,
    ``stream.hwarc`` if neither is; the checks report both cases)."""
    present = archive_files(directory)
    return present[0] if present else Path(directory) / ARCHIVE_FILE
