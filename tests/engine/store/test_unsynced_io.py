"""``UnsyncedIO`` (``HEADWATER_FAULT_IO=lose-unsynced``): writes stay in memory until fsync.

The mode turns a SIGKILL into a power cut for the fault suite (tests/faults/test_power_loss.py),
so what it must get right is checked here: nothing written reaches the disk before an fsync,
everything does after it, and every read path (``pread``, ``read_file``, ``size``) sees the
pending writes as the page cache would: across renames, closes and reopens, truncates and
reservations. The last tests run real processes: a store in a child with the variable set,
killed with SIGKILL, keeps exactly what it fsynced.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from headwater.server.store.file.fileio import FileIO, UnsyncedIO, default_io


def on_disk(path: Path) -> bytes:
    return path.read_bytes()


def test_writes_reach_the_disk_only_at_fsync(tmp_path: Path) -> None:
    io, path = UnsyncedIO(), tmp_path / "f"
    fd = io.open_rw(str(path))
    io.pwrite(fd, b"hello ", 0)
    io.pwrite(fd, b"world", 6)
    assert on_disk(path) == b""
    assert io.read_file(str(path)) == b"hello world"
    assert io.pread(fd, 100, 0) == b"hello world"
    assert io.size(str(path)) == 11
    io.fsync(fd)
    assert on_disk(path) == b"hello world"
    io.pwrite(fd, b"WORLD", 6)  # an overwrite of synced bytes is pending again
    assert on_disk(path) == b"hello world"
    assert io.read_file(str(path)) == b"hello WORLD"
    io.fsync(fd)
    io.close(fd)
    assert on_disk(path) == b"hello WORLD"


def test_pread_overlays_pending_extents(tmp_path: Path) -> None:
    io, path = UnsyncedIO(), tmp_path / "f"
    path.write_bytes(b"0123456789")
    fd = io.open_rw(str(path))
    io.pwrite(fd, b"ab", 2)  # inside the disk's bytes
    io.pwrite(fd, b"XY", 14)  # past the disk's end: a hole of zeros between
    assert io.pread(fd, 4, 0) == b"01ab"
    assert io.pread(fd, 100, 8) == b"89\0\0\0\0XY"
    assert io.pread(fd, 3, 12) == b"\0\0X"
    assert io.pread(fd, 5, 20) == b""
    assert io.size(str(path)) == 16
    io.pwrite(fd, b"----------", 5)  # bridges both: one extent
    assert io.read_file(str(path)) == b"01ab4----------Y"
    io.close(fd)


def test_random_writes_read_like_a_plain_file(tmp_path: Path) -> None:
    """Against a plain file written alike, reads agree after every step, fsyncs included."""
    rng = random.Random(7)
    io, plain = UnsyncedIO(), FileIO()
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    fa, fb = io.open_rw(a), plain.open_rw(b)
    for step in range(400):
        roll = rng.random()
        if roll < 0.6:
            off, data = rng.randrange(3000), rng.randbytes(rng.randrange(1, 300))
            io.pwrite(fa, data, off)
            plain.pwrite(fb, data, off)
        elif roll < 0.7:
            size = rng.randrange(3000)
            io.truncate(a, size)
            plain.truncate(b, size)
        elif roll < 0.75:
            off, length = rng.randrange(3000), rng.randrange(1, 2000)
            io.allocate(fa, off, length)
            plain.allocate(fb, off, length)
        elif roll < 0.85:
            io.fsync(fa)
            assert on_disk(Path(a)) == on_disk(Path(b)), step
        off, n = rng.randrange(3500), rng.randrange(1, 4000)
        assert io.pread(fa, n, off) == plain.pread(fb, n, off), step
        assert io.read_file(a) == plain.read_file(b), step
        assert io.size(a) == plain.size(b), step
    io.fsync(fa)
    assert on_disk(Path(a)) == on_disk(Path(b))
    io.close(fa)
    plain.close(fb)


def test_pending_writes_belong_to_the_file(tmp_path: Path) -> None:
    """Like the page cache: they survive a close and a reopen, follow a rename, and an fsync
    through another descriptor (a read-only one too) writes them out."""
    io = UnsyncedIO()
    tmp, final = str(tmp_path / "x.tmp"), str(tmp_path / "x")
    fd = io.open_rw(tmp)
    io.pwrite(fd, b"pending", 0)
    io.close(fd)
    io.replace(tmp, final)
    assert on_disk(Path(final)) == b""
    assert io.read_file(final) == b"pending"
    ro = io.open_ro(final)
    assert io.pread(ro, 7, 0) == b"pending"
    io.fsync(ro)
    io.close(ro)
    assert on_disk(Path(final)) == b"pending"


def test_truncate_and_reopen_drop_pending_bytes(tmp_path: Path) -> None:
    io, path = UnsyncedIO(), str(tmp_path / "f")
    fd = io.open_rw(path)
    io.pwrite(fd, b"abcdefgh", 0)
    io.truncate(path, 3)
    assert io.read_file(path) == b"abc"
    io.close(fd)
    fd = io.open_rw(path, truncate=True)
    assert io.read_file(path) == b""
    io.fsync(fd)
    io.close(fd)
    assert on_disk(Path(path)) == b""


def test_a_removed_file_leaves_nothing_behind(tmp_path: Path) -> None:
    """A file removed (through the layer, or behind its back) and made again under the same
    name, maybe on the same inode number, starts empty."""
    io = UnsyncedIO()
    sub = tmp_path / "d"
    for remove in ("unlink", "rmtree", "replaced"):
        sub.mkdir()
        path = str(sub / "f")
        fd = io.open_rw(path)
        io.pwrite(fd, b"stale bytes", 0)
        io.close(fd)
        if remove == "unlink":
            io.unlink(path)
        elif remove == "rmtree":
            shutil.rmtree(sub)
            sub.mkdir()
        else:
            fd = io.open_rw(path + ".new")
            io.close(fd)
            io.replace(path + ".new", path)
        fd = io.open_rw(path)
        assert io.read_file(path) == b"", remove
        assert io.pread(fd, 20, 0) == b"", remove
        io.close(fd)
        shutil.rmtree(sub)
    # Kept for files nobody can reach: only the one removed behind the layer's back (its
    # inode number, if reused, is recognized as a new file).
    assert len(io._files) <= 1


def test_fsync_in_a_thread_while_writes_go_on(tmp_path: Path) -> None:
    """The group commit fsyncs in a worker thread while the loop appends and reads: every
    byte is seen exactly once, pending or on disk, and all of it is on disk at the end."""
    io, path = UnsyncedIO(), str(tmp_path / "f")
    fd = io.open_rw(path)
    stop = threading.Event()

    def syncer() -> None:
        for _ in range(10_000):
            if stop.is_set():
                return
            io.fsync(fd)

    worker = threading.Thread(target=syncer)
    worker.start()
    expect = bytearray()
    try:
        for i in range(2000):
            chunk = b"%06d," % i
            io.pwrite(fd, chunk, len(expect))
            expect += chunk
            assert io.pread(fd, 7, len(expect) - 7) == chunk, i
    finally:
        stop.set()
        worker.join(10)
    io.fsync(fd)
    io.close(fd)
    assert on_disk(Path(path)) == bytes(expect)


def run_child(code: str, env_value: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("HEADWATER_FAULT_IO", None)
    if env_value is not None:
        env["HEADWATER_FAULT_IO"] = env_value
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_default_io_follows_the_environment() -> None:
    code = """
        from headwater.server.store.file.fileio import default_io
        print(type(default_io()).__name__, default_io() is default_io())
    """
    assert run_child(code, None).stdout.split() == ["FileIO", "True"]
    assert run_child(code, "lose-unsynced").stdout.split() == ["UnsyncedIO", "True"]
    bad = run_child(code, "lose-everything")
    assert bad.returncode != 0 and "HEADWATER_FAULT_IO='lose-everything'" in bad.stderr
    if not os.environ.get("HEADWATER_FAULT_IO"):
        assert type(default_io()) is FileIO


STORE_CHILD = """
    import asyncio, os, signal, sys
    from pathlib import Path
    from headwater.server.store import StoreConfig
    from headwater.server.store.file.store import FileStore

    async def main() -> None:
        store = FileStore(StoreConfig(name="P", directory=Path(sys.argv[1]), block_size=1 << 20))
        for i in range(5):
            store.store_msg("s", b"", b"synced %d" % i)
        await store.durable()
        for i in range(5):
            store.store_msg("s", b"", b"unsynced %d" % i)
        await asyncio.sleep(0.2)  # flushed to the I/O layer on the next loop pass
        print(store.state().last_seq, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
"""


@pytest.mark.parametrize(("mode", "kept"), [("lose-unsynced", 5), (None, 10)])
def test_sigkill_of_a_store_keeps_what_it_fsynced(
    tmp_path: Path, mode: str | None, kept: int
) -> None:
    """A store killed -9 in a child: with the mode, the five messages never fsynced are gone
    (a power cut); without it the kernel kept them (kill -9 is no power cut)."""
    from headwater.server.store import StoreConfig
    from headwater.server.store.file.store import FileStore

    code = STORE_CHILD.replace("sys.argv[1]", repr(str(tmp_path / "store")))
    child = run_child(code, mode)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.split() == ["10"]
    store = FileStore(StoreConfig(name="P", directory=tmp_path / "store"), io=FileIO())
    try:
        state = store.state()
        assert (state.msgs, state.last_seq) == (kept, kept)
        loaded = [store.load_msg(seq) for seq in range(1, 6)]
        assert [m.data if m else None for m in loaded] == [b"synced %d" % i for i in range(5)]
    finally:
        store.close()
