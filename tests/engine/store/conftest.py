"""Fixtures for the store suite: every ``store`` test body runs against memory and file stores.

Also home of ``PowerCutIO``, a ``FileIO`` that can simulate a power failure: it keeps a model of
what is durable (each file's content as of its last ``fsync``, each directory's entries as of
its last directory fsync), and ``crash()`` stops all I/O and rewrites the directory to that
state, optionally keeping a random prefix of each file's unsynced appended bytes (a torn write).
A created or renamed file whose directory was never synced disappears; an unsynced unlink is
undone.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.server.store import StoreConfig, StoreLimits, StreamStore, open_store
from headwater.server.store.file.fileio import FileIO

MakeStore = Callable[..., StreamStore]


@pytest.fixture(params=["memory", "file"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(kind: str, tmp_path: Path) -> Iterator[MakeStore]:
    """``make_store(limits=..., **config)`` opens a store of the parametrized kind. File stores
    use small blocks so tests cross block boundaries; reopening the same name reuses its dir."""
    opened: list[StreamStore] = []

    def make(name: str = "S", limits: StoreLimits | None = None, **kw: Any) -> StreamStore:
        kw.setdefault("block_size", 2048)
        cfg = StoreConfig(
            name=name,
            storage=kind,  # type: ignore[arg-type]
            directory=tmp_path / name if kind == "file" else None,
            limits=limits or StoreLimits(),
            **kw,
        )
        store = open_store(cfg)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: MakeStore) -> StreamStore:
    return make_store()


class PowerCutIO(FileIO):
    """``FileIO`` with a durability model and a ``crash()`` (see the module docstring)."""

    def __init__(self, root: Path, rng: random.Random | None = None) -> None:
        self.root = root
        self.rng = rng or random.Random(0)
        self.lock = threading.Lock()
        self.dead = False
        self._next_inode = 0
        self.names: dict[str, int] = {}
        """Current path → inode."""
        self.durable_names: dict[str, int] = {}
        """Path → inode as of the last fsync of the path's directory."""
        self.durable_data: dict[int, bytes] = {}
        self.fd_inode: dict[int, int] = {}
        self.fsync_calls = 0
        for path in root.rglob("*"):
            if path.is_file():
                ino = self._new_inode(str(path))
                self.durable_names[str(path)] = ino
                self.durable_data[ino] = path.read_bytes()

    def _new_inode(self, path: str) -> int:
        self._next_inode += 1
        self.names[path] = self._next_inode
        return self._next_inode

    def _path_of(self, ino: int) -> str | None:
        for path, i in self.names.items():
            if i == ino:
                return path
        return None

    # ------------------------------------------------------------------ intercepted calls

    def open_rw(self, path: str, truncate: bool = False) -> int:
        with self.lock:
            fd = super().open_rw(path, truncate)
            ino = self.names.get(path)
            if ino is None:
                ino = self._new_inode(path)
            self.fd_inode[fd] = ino
            return fd

    def close(self, fd: int) -> None:
        with self.lock:
            self.fd_inode.pop(fd, None)
            super().close(fd)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        with self.lock:
            if not self.dead:
                super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        with self.lock:
            self.fsync_calls += 1
            if self.dead:
                return
            ino = self.fd_inode.get(fd)
            path = self._path_of(ino) if ino is not None else None
            if path is not None:
                self.durable_data[ino] = Path(path).read_bytes()  # type: ignore[index]
            super().fsync(fd)

    def fsync_dir(self, path: str) -> None:
        with self.lock:
            if self.dead:
                return
            prefix = os.path.join(path, "")
            for name in [n for n in self.durable_names if os.path.dirname(n) == path.rstrip("/")]:
                del self.durable_names[name]
            for name, ino in self.names.items():
                if name.startswith(prefix) and os.path.dirname(name) == path.rstrip("/"):
                    self.durable_names[name] = ino

    def truncate(self, path: str, size: int) -> None:
        with self.lock:
            if not self.dead:
                super().truncate(path, size)

    def allocate(self, fd: int, offset: int, length: int) -> None:
        # Reserved space is zeros until written; the model keeps it like any other write.
        with self.lock:
            if not self.dead:
                super().allocate(fd, offset, length)

    def replace(self, src: str, dst: str) -> None:
        with self.lock:
            if self.dead:
                return
            super().replace(src, dst)
            self.names[dst] = self.names.pop(src)

    def unlink(self, path: str) -> None:
        with self.lock:
            if self.dead:
                return
            super().unlink(path)
            self.names.pop(path, None)

    # ------------------------------------------------------------------ the power cut

    def crash(self, torn: bool = True) -> None:
        """Cut the power: stop I/O and leave only what was durable (plus torn tails)."""
        with self.lock:
            self.dead = True
            current = {}
            for path, ino in self.names.items():
                if os.path.exists(path):
                    current[ino] = Path(path).read_bytes()
                    os.unlink(path)
            for path, ino in self.durable_names.items():
                data = self.durable_data.get(ino, b"")
                now = current.get(ino, b"")
                if torn and len(now) > len(data) and now.startswith(data):
                    data = now[: len(data) + self.rng.randint(0, len(now) - len(data))]
                os.makedirs(os.path.dirname(path), exist_ok=True)
                Path(path).write_bytes(data)


@pytest.fixture
def power_cut() -> type[PowerCutIO]:
    return PowerCutIO
