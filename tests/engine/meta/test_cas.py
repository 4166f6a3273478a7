"""``MetaClient.compare_and_swap`` against a real etcd member: the swap on a key's mod
revision that replica-group records are changed with (docs/REPLICATION.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.server.meta.client import MetaClient, MetaUnavailable

pytestmark = pytest.mark.timeout(30)


async def started(etcd: Any) -> list[str]:
    (port,) = etcd.ports(1)
    member = etcd.member(port)
    await member.start()
    assert await member.wait_healthy(15.0), member.log_path.read_text()[-800:]
    return member.client_urls


async def test_swap_on_mod_revision(etcd: Any) -> None:
    urls = await started(etcd)
    async with MetaClient(urls, "test") as meta:
        # Revision 0 means absent: a create.
        ok, current = await meta.compare_and_swap("groups/S", b"v1", 0)
        assert ok and current is not None and current.value == b"v1"
        first = current.mod_revision
        stored = await meta.get("groups/S")
        assert stored is not None and stored.mod_revision == first
        # Absent again is refused now, with the key as it is.
        ok, current = await meta.compare_and_swap("groups/S", b"again", 0)
        assert not ok and current is not None
        assert (current.value, current.mod_revision) == (b"v1", first)
        # The right revision wins and answers with the new one.
        ok, current = await meta.compare_and_swap("groups/S", b"v2", first)
        assert ok and current is not None and current.value == b"v2"
        assert current.mod_revision > first
        # A revision that no longer exists is refused.
        ok, after = await meta.compare_and_swap("groups/S", b"v3", first)
        assert not ok and after == current
        # On a key that does not exist, a non-zero revision fails and says it is absent.
        assert await meta.compare_and_swap("groups/none", b"x", first) == (False, None)


async def test_a_swap_sets_more_keys_only_when_it_succeeds(etcd: Any) -> None:
    """A plain stream becoming a group swaps its placement and writes its group's first
    record in one transaction: both or neither."""
    urls = await started(etcd)
    async with MetaClient(urls, "test") as meta:
        ok, placed = await meta.compare_and_swap("streams/S", b"r1", 0)
        assert ok and placed is not None
        ok, _ = await meta.compare_and_swap(
            "streams/S", b"late", placed.mod_revision - 1, also={"groups/S": b"record"}
        )
        assert not ok and await meta.get("groups/S") is None
        ok, now = await meta.compare_and_swap(
            "streams/S", b"r3", placed.mod_revision, also={"groups/S": b"record"}
        )
        assert ok and now is not None and now.value == b"r3"
        record = await meta.get("groups/S")
        assert record is not None and record.value == b"record"
        assert record.mod_revision == now.mod_revision  # one transaction, one revision


async def test_concurrent_swaps_from_one_revision_one_wins(etcd: Any) -> None:
    urls = await started(etcd)
    async with MetaClient(urls, "test") as one, MetaClient(urls, "test") as two:
        ok, current = await one.compare_and_swap("groups/R", b"start", 0)
        assert ok and current is not None
        for i in range(20):
            results = await asyncio.gather(
                one.compare_and_swap("groups/R", f"one{i}".encode(), current.mod_revision),
                two.compare_and_swap("groups/R", f"two{i}".encode(), current.mod_revision),
            )
            assert sorted(ok for ok, _ in results) == [False, True], results
            winner = next(cur for ok, cur in results if ok)
            loser = next(cur for ok, cur in results if not ok)
            assert winner is not None and loser == winner  # the loser sees who won
            current = winner


async def test_unreachable_etcd_is_unavailable(etcd: Any) -> None:
    (port,) = etcd.ports(1)
    async with MetaClient([f"http://127.0.0.1:{port + 1}"], "test", timeout=0.5) as meta:
        with pytest.raises(MetaUnavailable):
            await meta.compare_and_swap("groups/S", b"x", 0)
