"""Server resource limits for JetStream and the ``$JS.API.INFO`` account report.

Two budgets, as in nats-server: ``max_memory_store`` for memory streams and
``max_file_store`` for file streams. They are enforced at two points, with the reference's
errors:

* creating or growing a stream *reserves* its ``max_bytes`` (1 byte when unlimited); a stream
  whose reservation would push the server's reserved total past the budget is refused with
  10047 "insufficient storage resources available" (file) or 10028 "insufficient memory
  resources available" (memory);
* a publish is refused with 10023 "insufficient resources" while the bytes already stored in
  that storage type exceed the budget (the check is before the append, so the last accepted
  message may overshoot, as in nats-server).

Stored bytes are counted by the stores into shared ``ByteBudget`` objects (unlimited, used as
counters), so the publish-time check is one comparison.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headwater.server.store.base import ByteBudget

from . import errors
from .streamconfig import StreamConfig
from .versioning import JS_API_LEVEL

if TYPE_CHECKING:
    from .stream import Stream

__all__ = ["ApiStats", "Resources", "account_info", "friendly_bytes"]


def _system_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def friendly_bytes(n: int) -> str:
    """nats-server's ``friendlyBytes``: ``17.66 GB``, ``1.95 KB``, ``512 B``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in "KMGTPE":
        value /= 1024
        if value < 1024 or unit == "E":
            return f"{value:.2f} {unit}B"
    return f"{n} B"


@dataclass
class ApiStats:
    """``api`` of the account info: requests answered and how many were errors."""

    total: int = 0
    errors: int = 0


class Resources:
    """The server's JetStream budgets and the byte counters the stores feed."""

    def __init__(self, max_memory: int, max_store: int) -> None:
        # -1 for memory means nats-server's default: three quarters of the machine's memory.
        if max_memory < 0:
            physical = _system_memory()
            max_memory = physical * 3 // 4 if physical > 0 else -1
        self.max_memory = max_memory
        """Bytes for memory streams; -1 unlimited."""
        self.max_store = max_store
        """Bytes for file streams; -1 unlimited (bounded only by the disk)."""
        self.memory = ByteBudget(-1)
        self.storage = ByteBudget(-1)

    def budget(self, storage: str) -> ByteBudget:
        return self.memory if storage == "memory" else self.storage

    def describe_storage(self, root: str) -> str:
        """What the start-up banner says about the file budget."""
        if self.max_store >= 0:
            return friendly_bytes(self.max_store)
        try:
            free = shutil.disk_usage(root).free
        except OSError:
            return "unlimited"
        return f"unlimited ({friendly_bytes(free)} free on disk)"

    def describe_memory(self) -> str:
        return friendly_bytes(self.max_memory) if self.max_memory >= 0 else "unlimited"

    # --- checks --------------------------------------------------------------------------

    def limits_exceeded(self, storage: str) -> bool:
        """True while stored bytes of this type are past the budget (publishes get 10023)."""
        if storage == "memory":
            return 0 <= self.max_memory < self.memory.used
        return 0 <= self.max_store < self.storage.used

    def check_reservation(
        self, cfg: StreamConfig, streams: Iterable[StreamConfig], replacing: str | None = None
    ) -> None:
        """Raise 10028/10047 when ``cfg``'s ``max_bytes`` does not fit the reserved total.

        ``replacing`` names a stream being updated: its old reservation is given back first.
        """
        limit = self.max_memory if cfg.storage == "memory" else self.max_store
        if limit < 0:
            return
        reserved = sum(
            s.max_bytes
            for s in streams
            if s.storage == cfg.storage and s.max_bytes > 0 and s.name != replacing
        )
        wanted = cfg.max_bytes if cfg.max_bytes > 0 else 1
        if reserved + wanted > limit:
            if cfg.storage == "memory":
                raise errors.MEMORY_RESOURCES_EXCEEDED.exc()
            raise errors.STORAGE_RESOURCES_EXCEEDED.exc()


def account_info(streams: Iterable[Stream], stats: ApiStats, domain: str | None) -> dict[str, Any]:
    """The body of ``$JS.API.INFO`` (after ``type``), keys in nats-server's order."""
    memory = storage = reserved_memory = reserved_storage = count = consumers = 0
    for stream in streams:
        # A replicated stream has a replica on several servers, whose answers a cluster adds
        # up: it counts once, where it leads; its bytes count on every replica (as nats-server
        # counts an R3 stream's bytes three times).
        if stream.group is None or stream.group.leading:
            count += 1
            consumers += len(stream.public_consumers())
        cfg = stream.config
        used = stream.stored_bytes()
        if cfg.storage == "memory":
            memory += used
            reserved_memory += max(cfg.max_bytes, 0)
        else:
            storage += used
            reserved_storage += max(cfg.max_bytes, 0)
    body: dict[str, Any] = {
        "memory": memory,
        "storage": storage,
        "reserved_memory": reserved_memory,
        "reserved_storage": reserved_storage,
        "streams": count,
        "consumers": consumers,
        "limits": {
            "max_memory": -1,
            "max_storage": -1,
            "max_streams": -1,
            "max_consumers": -1,
            "max_ack_pending": -1,
            "memory_max_stream_bytes": -1,
            "storage_max_stream_bytes": -1,
            "max_bytes_required": False,
        },
    }
    if domain:
        body["domain"] = domain
    body["api"] = {"level": JS_API_LEVEL, "total": stats.total, "errors": stats.errors}
    return body
