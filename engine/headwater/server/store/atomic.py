"""Crash-safe replacement of small metadata files.

A reader after a power failure sees either the old or the new content, never a mix or an empty
file: the data is fsynced before the rename, and the directory is fsynced after it so the
rename itself is durable (ext4/xfs may otherwise lose it).
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the directory's entries (creates, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``: write a temp file, fsync, rename over, fsync the dir."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    fsync_dir(target.parent)
