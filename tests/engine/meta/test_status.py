"""``MetaClient.status`` (etcd's leader and members, read for ``/jsz``) and
``MetaClient.last_ok`` (read for ``/healthz`` and the API's refusals), against real etcd members."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from headwater.server.meta.client import MetaClient

from .test_etcd import start_all

pytestmark = pytest.mark.timeout(40)


async def test_status_names_the_leader_and_members(etcd: Any) -> None:
    ports = etcd.ports(3)
    routes = [etcd.route(p) for p in ports]
    members = [etcd.member(p, routes) for p in ports]
    await start_all(members)
    names = {m.name for m in members}
    async with MetaClient(members[1].client_urls[:1], "test") as meta:
        status = await meta.status()
        assert {m.name for m in status.members} == names
        assert status.leader in names and status.raft_term >= 1
        # Another member agrees on who leads.
        async with MetaClient(members[2].client_urls[:1], "test") as other:
            assert (await other.status()).leader == status.leader


async def test_contact_is_kept_by_a_registration_and_lost_with_the_quorum(etcd: Any) -> None:
    """``last_ok`` (what ``/healthz`` and the API's fast refusals read) moves with every
    answered call, the lease's renewals included, and stops once no quorum answers."""
    ports = etcd.ports(3)
    routes = [etcd.route(p) for p in ports]
    members = [etcd.member(p, routes) for p in ports]
    await start_all(members)
    async with MetaClient(members[0].client_urls[:1], "test", timeout=1.0) as meta:
        registration = await meta.register_server("s1", b"{}", ttl=2)
        await asyncio.sleep(2.5)  # renewed meanwhile (every ttl/3)
        assert time.monotonic() - meta.last_ok < 1.0
        for member in members[1:]:
            assert member.pid is not None
            os.kill(member.pid, signal.SIGKILL)
            await member.stop()
        await asyncio.sleep(3)
        assert time.monotonic() - meta.last_ok > 2.0
        # The quorum back: renewals are answered again.
        await start_all(members[1:])
        deadline = time.monotonic() + 15
        while time.monotonic() - meta.last_ok > 1.0 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert time.monotonic() - meta.last_ok <= 1.0
        await registration.stop()
