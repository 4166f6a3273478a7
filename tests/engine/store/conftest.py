"""Fixtures for the store suite: every ``store`` test body runs against memory and file stores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.server.store import StoreConfig, StoreLimits, StreamStore, open_store

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
