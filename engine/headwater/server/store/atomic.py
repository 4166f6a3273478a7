"""Crash-safe replacement of small metadata and state files, and reading them back.

A reader after a power failure sees either the old or the new content, never a mix or an empty
file: the data is fsynced before the rename, and the directory is fsynced after it so the
rename itself is durable (ext4/xfs may otherwise lose it).

A file can still be found empty or torn: a write that skipped the fsync on purpose (the
periodic sync mode), a disk that lost sectors, a hand edit. So every such file has a backup
copy beside it, ``.<name>.bak``, and :func:`read_with_fallback` reads the backup when the file
itself is missing or does not parse. :func:`write_atomic` keeps it one of two ways:
``backup="previous"`` renames the current file to the backup before renaming the new one into
place (one extra rename, no extra fsync: for state rewritten on every ack), and
``backup="copy"`` writes the same content to the backup too (twice the fsyncs: for configs,
rewritten only on create and update).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, TypeVar

__all__ = [
    "Recovered",
    "UnreadableFile",
    "backup_path",
    "fsync_dir",
    "parsed_copies",
    "read_with_fallback",
    "write_atomic",
]

T = TypeVar("T")

Backup = Literal["none", "previous", "copy"]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the directory's entries (creates, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup_path(path: str | os.PathLike[str]) -> Path:
    """Where the backup copy of ``path`` lives: ``.<name>.bak`` in the same directory."""
    target = Path(path)
    return target.with_name(f".{target.name}.bak")


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, backup: Backup = "none") -> None:
    """Replace ``path`` with ``data``: write a temp file, fsync, rename over, fsync the dir.

    With ``backup="previous"`` the replaced content becomes the backup (renamed, so the
    backup is always a complete, synced earlier version); with ``backup="copy"`` the backup
    is rewritten with ``data`` as well, after the file itself is in place.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    _write_synced(tmp, data)
    if backup == "previous" and target.exists():
        # A crash between the renames leaves no file but a complete backup (read back by
        # read_with_fallback), never a torn one.
        os.replace(target, backup_path(target))
    os.replace(tmp, target)
    if backup == "copy":
        spare = backup_path(target)
        spare_tmp = spare.with_name(f"{spare.name}.tmp")
        _write_synced(spare_tmp, data)
        os.replace(spare_tmp, spare)
    fsync_dir(target.parent)


class UnreadableFile(OSError):
    """Neither a file nor its backup could be read; ``errors`` says what went wrong where."""

    def __init__(self, path: Path, errors: list[str]) -> None:
        super().__init__(f"{path}: " + ("; ".join(errors) or "missing"))
        self.errors = errors


@dataclass
class Recovered(Generic[T]):
    """What :func:`read_with_fallback` read, from where, and which copies it had to skip."""

    value: T
    path: Path
    skipped: list[str] = field(default_factory=list)
    """One ``"<file>: <why>"`` per copy that exists but could not be read or parsed."""

    @property
    def from_backup(self) -> bool:
        return self.path.name.endswith(".bak")


def parsed_copies(
    paths: Iterable[Path], parse: Callable[[bytes], T], skipped: list[str]
) -> Iterator[tuple[Path, bytes, T]]:
    """Each of ``paths`` that exists and parses, in order, with its bytes and value. Why a copy
    that exists could not be used (unreadable, empty, torn) goes to ``skipped``."""
    for candidate in paths:
        try:
            data = candidate.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            skipped.append(f"{candidate.name}: {exc}")
            continue
        if not data:
            skipped.append(f"{candidate.name}: empty file")
            continue
        try:
            value = parse(data)
        except (ValueError, TypeError, KeyError) as exc:
            skipped.append(f"{candidate.name}: {exc}")
            continue
        yield candidate, data, value


def read_with_fallback(path: str | os.PathLike[str], parse: Callable[[bytes], T]) -> Recovered[T]:
    """Parse ``path``, or its backup when the file is missing, empty, torn or invalid.

    ``parse`` raises ValueError (or TypeError/KeyError) on content it cannot use. Raises
    :class:`UnreadableFile` when neither copy gives a value.
    """
    target = Path(path)
    skipped: list[str] = []
    for candidate, _, value in parsed_copies((target, backup_path(target)), parse, skipped):
        return Recovered(value, candidate, skipped)
    raise UnreadableFile(target, skipped)
