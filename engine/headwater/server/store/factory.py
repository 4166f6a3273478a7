"""``open_store``: the one way the stream layer gets a store."""

from __future__ import annotations

from headwater.server.store.base import StoreConfig, StreamStore
from headwater.server.store.file.store import FileStore
from headwater.server.store.memory import MemoryStore


def open_store(config: StoreConfig) -> StreamStore:
    """Create or reopen the store ``config`` describes (file stores recover on open and report
    what they repaired in ``store.recovery_report``)."""
    if config.storage == "memory":
        return MemoryStore(config)
    if config.storage == "file":
        return FileStore(config)
    raise ValueError(f"unknown storage type {config.storage!r}")
