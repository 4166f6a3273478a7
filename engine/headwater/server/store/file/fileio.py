"""The file store's only door to the file system.

Every write, fsync, space reservation, rename, truncate and unlink of the file store, the
replication log (``replicated/wal.py``) and the checkpoints goes through a ``FileIO`` so tests
can swap in a fault-injecting one (``PowerCutIO`` in tests/engine/store/conftest.py models a
power failure in-process: whatever was not fsynced is lost or torn). Reads of whole files,
``pread`` and file sizes are routed here too, so a layer that holds writes back answers reads
consistently. Code that has no ``FileIO`` handed to it takes :func:`default_io`.

Test hook: ``HEADWATER_FAULT_IO=lose-unsynced`` in a server's environment (read once, at the
first :func:`default_io`) makes :func:`default_io` return an :class:`UnsyncedIO`: each file's
writes since its last fsync stay in the process's memory (reads see them) and reach the kernel
only at ``fsync``, so a SIGKILL of the process loses exactly what was not fsynced, as a power
cut does, instead of leaving it to the kernel's page cache. Directory operations (create,
rename, unlink, truncate, space reservation) stay synchronous: the mode loses file contents,
never names. The first use logs a warning saying so. Any other value is refused
(``ValueError``) rather than ignored. Not for production: pending writes cost memory until the
next fsync.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("headwater.store")

FAULT_IO_ENV = "HEADWATER_FAULT_IO"
LOSE_UNSYNCED = "lose-unsynced"


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

    def size(self, path: str) -> int:
        """The file's length in bytes."""
        return os.path.getsize(path)

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


@dataclass
class _Pending:
    """One file's (inode's) writes not yet handed to the kernel: sorted, disjoint,
    non-adjacent extents ``starts[i]`` → ``bufs[i]``, and how many of our fds are open on it."""

    starts: list[int] = field(default_factory=list)
    bufs: list[bytearray] = field(default_factory=list)
    opens: int = 0

    def end(self) -> int:
        return self.starts[-1] + len(self.bufs[-1]) if self.starts else 0

    def write(self, offset: int, data: bytes) -> None:
        end = offset + len(data)
        # Extents touching [offset, end] (adjacent ones too, so appends keep one extent).
        lo = bisect.bisect_left(self.starts, offset)
        if lo > 0 and self.starts[lo - 1] + len(self.bufs[lo - 1]) >= offset:
            lo -= 1
        hi = bisect.bisect_right(self.starts, end)
        if lo == hi:
            self.starts.insert(lo, offset)
            self.bufs.insert(lo, bytearray(data))
            return
        start = min(offset, self.starts[lo])
        if hi - lo == 1 and start == self.starts[lo]:  # the common case: append or overwrite
            buf = self.bufs[lo]
            buf[offset - start : offset - start + len(data)] = data
            return
        stop = max(end, self.starts[hi - 1] + len(self.bufs[hi - 1]))
        merged = bytearray(stop - start)
        for s, b in zip(self.starts[lo:hi], self.bufs[lo:hi], strict=True):
            merged[s - start : s - start + len(b)] = b
        merged[offset - start : end - start] = data
        self.starts[lo:hi] = [start]
        self.bufs[lo:hi] = [merged]

    def overlay(self, disk: bytes, offset: int, n: int) -> bytes:
        """What a read of ``n`` bytes at ``offset`` returns, given the disk returned ``disk``
        (short only at the disk's end of file); a gap before a pending extent reads as zeros."""
        length = n if len(disk) == n else min(n, max(len(disk), self.end() - offset))
        out = bytearray(disk)
        out.extend(bytes(length - len(out)))
        stop = offset + length
        for s, b in zip(self.starts, self.bufs, strict=True):
            if s >= stop:
                break
            e = s + len(b)
            if e <= offset:
                continue
            lo, hi = max(s, offset), min(e, stop)
            out[lo - offset : hi - offset] = b[lo - s : hi - s]
        return bytes(out)

    def clip(self, size: int) -> None:
        """Drop pending bytes at or past ``size`` (the file was truncated)."""
        while self.starts and self.starts[-1] >= size:
            self.starts.pop()
            self.bufs.pop()
        if self.starts and self.starts[-1] + len(self.bufs[-1]) > size:
            del self.bufs[-1][size - self.starts[-1] :]


class UnsyncedIO(FileIO):
    """``FileIO`` that keeps each file's writes since its last fsync in memory (see the module
    docstring). Pending writes belong to the inode, as the page cache's do: they follow a
    rename, survive a close and a reopen, and ``fsync`` on any fd of the file writes them out.
    Thread-safe (the group-commit worker fsyncs while the loop writes and reads): one lock
    covers the tables, the reads that overlay them and the hand-over at fsync, never the
    ``os.fsync`` itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[tuple[int, int], _Pending] = {}
        self._fds: dict[int, tuple[int, int]] = {}
        self._writable: set[int] = set()

    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, int]:
        return (st.st_dev, st.st_ino)

    def _register(self, fd: int, fresh: bool, writable: bool) -> None:
        key = self._key(os.fstat(fd))
        with self._lock:
            rec = self._files.setdefault(key, _Pending())
            if fresh:
                # A new or truncated file: anything kept under its inode is stale (an inode
                # number reused after a file removed behind our back, by rmtree say).
                rec.starts.clear()
                rec.bufs.clear()
            rec.opens += 1
            self._fds[fd] = key
            if writable:
                self._writable.add(fd)

    def open_rw(self, path: str, truncate: bool = False) -> int:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fresh = True
        except FileExistsError:
            fd = super().open_rw(path, truncate)
            fresh = truncate
        self._register(fd, fresh, True)
        return fd

    def open_ro(self, path: str) -> int:
        fd = super().open_ro(path)
        self._register(fd, False, False)
        return fd

    def close(self, fd: int) -> None:
        with self._lock:
            self._writable.discard(fd)
            key = self._fds.pop(fd, None)
            if key is not None and (rec := self._files.get(key)) is not None:
                rec.opens -= 1
                # Nothing pending, or removed and now unreachable: nothing worth keeping.
                if rec.opens <= 0 and (not rec.starts or os.fstat(fd).st_nlink == 0):
                    del self._files[key]
        os.close(fd)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        with self._lock:
            key = self._fds.get(fd)
            if key is not None:
                self._files[key].write(offset, bytes(data))
                return
        super().pwrite(fd, data, offset)  # not opened through us: nothing to hold back

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        with self._lock:
            disk = os.pread(fd, n, offset)
            key = self._fds.get(fd)
            rec = self._files.get(key) if key is not None else None
            if rec is None or not rec.starts:
                return disk
            return rec.overlay(disk, offset, n)

    def read_file(self, path: str) -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            with self._lock:
                rec = self._files.get(self._key(os.fstat(fd)))
                chunks = []
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
                disk = b"".join(chunks)
                if rec is None or not rec.starts:
                    return disk
                n = max(len(disk), rec.end())
                return rec.overlay(disk, 0, n)
        finally:
            os.close(fd)

    def size(self, path: str) -> int:
        with self._lock:
            st = os.stat(path)
            rec = self._files.get(self._key(st))
            return max(st.st_size, rec.end() if rec is not None else 0)

    def fsync(self, fd: int) -> None:
        with self._lock:
            key = self._fds.get(fd)
            rec = self._files.get(key) if key is not None else None
            if rec is not None and rec.starts:
                # Hand the pending bytes to the kernel under the lock (a reader must see them
                # either pending or on disk), through a writable fd even if ``fd`` is not.
                own = fd in self._writable
                wfd = fd if own else os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
                try:
                    for start, buf in zip(rec.starts, rec.bufs, strict=True):
                        super().pwrite(wfd, buf, start)
                finally:
                    if not own:
                        os.close(wfd)
                rec.starts.clear()
                rec.bufs.clear()
        os.fsync(fd)

    def truncate(self, path: str, size: int) -> None:
        with self._lock:
            rec = self._files.get(self._key(os.stat(path)))
            if rec is not None:
                rec.clip(size)
            os.truncate(path, size)

    def _forget(self, path: str) -> None:
        """``path`` is about to be removed: drop its pending writes if none of our fds can
        reach the file any more (the caller holds the lock)."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        key = self._key(st)
        rec = self._files.get(key)
        if rec is not None and rec.opens <= 0 and st.st_nlink <= 1:
            del self._files[key]

    def replace(self, src: str, dst: str) -> None:
        with self._lock:
            self._forget(dst)
            os.replace(src, dst)

    def unlink(self, path: str) -> None:
        with self._lock:
            self._forget(path)
            os.unlink(path)


_default: FileIO | None = None
_default_lock = threading.Lock()


def default_io() -> FileIO:
    """The process's shared ``FileIO``: plain, or the one ``HEADWATER_FAULT_IO`` asks for
    (read at the first call). Shared, so every store, log and checkpoint of the process sees
    the same pending writes."""
    global _default
    with _default_lock:
        if _default is None:
            mode = os.environ.get(FAULT_IO_ENV, "")
            if mode == "":
                _default = FileIO()
            elif mode == LOSE_UNSYNCED:
                # Loud on purpose: a server left in this mode loses data a SIGKILL would not.
                log.warning("%s=%s: writes are held in memory until fsync", FAULT_IO_ENV, mode)
                _default = UnsyncedIO()
            else:
                raise ValueError(f"{FAULT_IO_ENV}={mode!r}: the only mode is {LOSE_UNSYNCED!r}")
        return _default
