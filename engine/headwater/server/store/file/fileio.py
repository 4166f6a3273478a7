"""The file store's only door to the file system.

Every write, fsync, space reservation, rename, truncate and unlink goes through a ``FileIO`` so
tests can swap in a fault-injecting one (``PowerCutIO`` in tests/engine/store/conftest.py
models a power failure: whatever was not fsynced is lost or torn). Reads of whole files and
``pread`` are routed here too, for symmetry.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


class FileIO:
    """Plain POSIX calls. Methods take paths as ``str`` and raw file descriptors."""

    def open_rw(self, path: str, truncate: bool = False) -> int:
        """Open (creating if needed) for writes at explicit offsets and reads."""
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if truncate else 0)
        return os.open(path, flags, 0o644)

    def open_ro(self, path: str) -> int:
        return os.open(path, os.O_RDONLY)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            offset += n
            view = view[n:]

    def allocate(self, fd: int, offset: int, length: int) -> None:
        """Reserve disk space for ``[offset, offset + length)`` (the file grows, zero-filled),
        so later writes there cannot fail for lack of space. Raises ``OSError`` with ENOSPC,
        EDQUOT or EFBIG when the space is not there; a file system that cannot reserve
        (EOPNOTSUPP, EINVAL) is left as it was, and its writes may still fail later."""
        try:
            os.posix_fallocate(fd, offset, length)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        return os.pread(fd, n, offset)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, path: str, size: int) -> None:
        os.truncate(path, size)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def read_file(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write_atomic(self, path: str, data: bytes) -> None:
        """Temp file, fsync, rename over ``path``, fsync the directory."""
        tmp = path + ".tmp"
        fd = self.open_rw(tmp, truncate=True)
        try:
            self.pwrite(fd, data, 0)
            self.fsync(fd)
        finally:
            self.close(fd)
        self.replace(tmp, path)
        self.fsync_dir(os.path.dirname(path))
