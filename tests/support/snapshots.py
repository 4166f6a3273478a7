"""Helpers for snapshot and restore tests: what a failed restore left in a Headwater store, and
the messages a subject receives while a test runs."""

from __future__ import annotations

from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from headwater.testing import ServerProcess


def store_leftovers(hw: ServerProcess, name: str) -> list[str]:
    """Stream ``name``'s directories and any restore staging left in ``hw``'s store."""
    root = Path(hw.store_dir) / "jetstream"
    found = [str(p) for p in (root / "$G" / "streams").glob(name)]
    restore_dir = root / ".restore"
    if restore_dir.exists():
        found += [str(p) for p in restore_dir.iterdir()]
    return found


async def collecting(nc: Client, subject: str) -> tuple[list[Msg], Subscription]:
    """Every message ``subject`` receives from now on (flushed, so none is missed); the list
    fills as they arrive. Unsubscribe when done."""
    seen: list[Msg] = []

    async def note(msg: Msg) -> None:
        seen.append(msg)

    sub = await nc.subscribe(subject, cb=note)
    await nc.flush()
    return seen, sub
