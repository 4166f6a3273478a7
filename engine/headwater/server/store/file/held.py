"""Held work of a replica's block set: writes that cannot be undone, waiting for a checkpoint.

In replica mode (docs/FILESTORE.md, "Replica mode") a crash is followed by a cut back to the
newest durable checkpoint, which only removes what lies *past* its positions. The in-place
overwrite of an erasure, the unlink of a block and the packing of a block destroy or move data
*inside* them, so each waits here until a durable checkpoint captured after it was queued
covers its cause (the removal, or the block's records); a cut can then never need what they
destroyed. Items are numbered in queue order; a checkpoint's ``Positions.mark`` is the number
queued when it was captured, and ``take(mark)`` hands back the items it covers, oldest first.
(Compaction is held differently: it is computed at a capture and renamed once that capture is
durable, see ``BlockSet.capture``.)
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Literal

from headwater.server.store.file.blocks import Block

Kind = Literal["erase", "unlink", "pack"]


@dataclass(slots=True)
class Held:
    serial: int
    kind: Kind
    block: Block
    offset: int = 0
    """Raw offset of the record to erase (``erase``)."""


class HeldWork:
    def __init__(self) -> None:
        self.serial = 0
        """Items queued so far by this store instance (what ``Positions.mark`` counts)."""
        self._items: deque[Held] = deque()
        self._erasures: Counter[int] = Counter()

    def hold(self, kind: Kind, block: Block, offset: int = 0) -> None:
        self.serial += 1
        self._items.append(Held(self.serial, kind, block, offset))
        if kind == "erase":
            self._erasures[block.index] += 1

    def take(self, mark: int) -> list[Held]:
        """The items a durable checkpoint with ``mark`` covers, oldest first."""
        out = []
        items = self._items
        while items and items[0].serial <= mark:
            item = items.popleft()
            if item.kind == "erase":
                self._erasures[item.block.index] -= 1
                if not self._erasures[item.block.index]:
                    del self._erasures[item.block.index]
            out.append(item)
        return out

    def erasing(self, block: Block) -> bool:
        """An erasure in ``block`` is waiting (its compaction must wait too: it would move
        the record the erasure will overwrite)."""
        return block.index in self._erasures

    def __len__(self) -> int:
        return len(self._items)
