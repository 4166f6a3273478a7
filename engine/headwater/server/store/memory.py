"""The memory store: the shared index with each ``StoredMsg`` kept in the index's ``loc`` slot.

Nothing reaches a disk, so ``durable()`` returns at once and the sync policy is ignored. Bytes
are accounted with nats-server's ``memStoreMsgSize`` (16 bytes of overhead per message).
"""

from __future__ import annotations

from typing import Any

from headwater.server.store.base import StoreConfig, StoredMsg, memory_msg_size
from headwater.server.store.engine import IndexedStore


class MemoryStore(IndexedStore):
    _replace_needs_strictly_more = False

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config, objects_in_index=True)

    def _msg_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        return memory_msg_size(subject, hdr, data)

    def _discard_new_size(self, subject: str, hdr: bytes, data: bytes) -> int:
        return memory_msg_size(subject, hdr, data)

    def _write(
        self, seq: int, subject: str, hdr: bytes, data: bytes, ts: int, ttl: int, size: int
    ) -> Any:
        return StoredMsg(subject, seq, bytes(hdr), bytes(data), ts)

    def _read(self, seq: int, loc: Any) -> StoredMsg | None:
        return loc  # type: ignore[no-any-return]

    def _removed(self, seq: int, size: int, loc: Any, erase: bool) -> None:
        """The index already dropped its reference to the message; nothing else holds it."""

    def _floor(self) -> None:
        """Sequence floors live only in the index."""

    def _after_write(self) -> None:
        """No sync policy applies to memory."""

    async def durable(self) -> None:
        """Nothing to wait for: memory streams are never durable."""

    def close(self) -> None:
        self._closed = True

    async def aclose(self) -> None:
        self.close()

    def delete(self) -> None:
        if self._budget is not None:
            self._budget.used -= self._idx.bytes
        self._idx.reset(self._idx.last + 1)
        self.close()

    async def adelete(self) -> None:
        self.delete()

    def check(self) -> None:
        super().check()
        idx = self._idx
        for i, live in enumerate(idx.live):
            msg = idx.loc[i]
            if live:
                assert msg is not None and msg.seq == idx.base + i, "payload slot misaligned"
                assert memory_msg_size(msg.subject, msg.hdr, msg.data) == idx.size[i]
            else:
                assert msg is None, "removed payload still referenced"
