"""A kill -9 loop: nothing headwater-server acknowledged is lost or reused, over 50 kills.

Each round connects, checks the stream against what the server has confirmed so far, then runs
four clients at once (publishes, deletes, subject purges, a pull consumer acking with
``ack_sync``) and kills the server at a random moment among them. Only replies that arrived
count: a publish ack, a delete's or a purge's success, an ack's confirmation. After every
restart:

* every acknowledged message that no acknowledged delete or purge removed is there, unchanged;
* every acknowledged delete and purge is still in force;
* ``last_seq`` is at least the highest acknowledged sequence (it never goes backwards), and a
  new publish never gets a sequence the server already acknowledged;
* a message whose ack was confirmed is never delivered again.

Headwater only: nats-server's default (fsync every 2 minutes) makes no such promise.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
from dataclasses import dataclass, field

import nats
import pytest
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig

from headwater.testing import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROUNDS = 50
DIED = (NatsError, OSError, asyncio.TimeoutError)
"""What a client sees when the server is killed under it."""
STREAM = "CRASH"
DURABLE = "W"


@dataclass
class Confirmed:
    """What the server has acknowledged, across every round."""

    messages: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    purged_below: dict[str, int] = field(default_factory=dict)
    """subject -> messages on it below this sequence are gone (a full subject purge: max)."""
    tried_delete: set[int] = field(default_factory=set)
    tried_purge: dict[str, int] = field(default_factory=dict)
    """Removals asked for whose reply never came: they may or may not have happened."""
    acked: set[int] = field(default_factory=set)
    """Stream sequences whose consumer ack was confirmed."""
    problems: list[str] = field(default_factory=list)

    def gone(self, seq: int) -> bool:
        subject = self.messages[seq][0]
        return seq in self.deleted or seq < self.purged_below.get(subject, 0)

    def may_be_gone(self, seq: int) -> bool:
        subject = self.messages[seq][0]
        return seq in self.tried_delete or seq < self.tried_purge.get(subject, 0)

    @property
    def top(self) -> int:
        return max(self.messages, default=0)


async def api(nc: Client, subject: str, body: dict[str, object] | None = None) -> dict:
    msg = await nc.request(f"$JS.API.{subject}", json.dumps(body or {}).encode(), timeout=2)
    return json.loads(msg.data)


async def publisher(nc: Client, rnd: int, seen: Confirmed, ready: asyncio.Event) -> None:
    """Publishes in small concurrent batches: first the subjects the purger empties, then the
    ones the deleter and the consumer work on, until the connection dies."""
    js = nc.jetstream()
    floor = seen.top

    async def one(subject: str, i: int) -> None:
        payload = b"%d/%d" % (rnd, i)
        ack = await js.publish(subject, payload, timeout=2)
        if ack.seq <= floor or ack.seq in seen.messages:
            seen.problems.append(f"round {rnd}: publish acknowledged with reused seq {ack.seq}")
        seen.messages[ack.seq] = (subject, payload)

    i = 0
    for subject in (f"crash.{rnd}.p", f"crash.{rnd}.q"):
        for _ in range(5):
            await one(subject, i)
            i += 1
    ready.set()
    while i < 100_000 and nc.is_connected:
        batch = [one(f"crash.{rnd}.{'ad'[k % 2]}", i + k) for k in range(8)]
        i += 8
        await asyncio.gather(*batch)


async def deleter(nc: Client, rnd: int, seen: Confirmed) -> None:
    """Deletes acknowledged messages, the newest one (the stream's tail) most of the time."""
    subject = f"crash.{rnd}.d"
    for _ in range(10_000):
        if not nc.is_connected:
            return
        mine = [s for s, (subj, _) in seen.messages.items() if subj == subject]
        candidates = sorted(set(mine) - seen.deleted)
        if not candidates:
            await asyncio.sleep(0.005)
            continue
        seq = candidates[-1] if random.random() < 0.7 else random.choice(candidates)
        seen.tried_delete.add(seq)
        reply = await api(nc, f"STREAM.MSG.DELETE.{STREAM}", {"seq": seq})
        if reply.get("success"):
            seen.deleted.add(seq)


async def purger(nc: Client, rnd: int, seen: Confirmed, ready: asyncio.Event) -> None:
    """Purges ``.p`` entirely and ``.q`` below its third message, once both are published."""
    await ready.wait()
    p, q = f"crash.{rnd}.p", f"crash.{rnd}.q"
    seen.tried_purge[p] = 1 << 62
    reply = await api(nc, f"STREAM.PURGE.{STREAM}", {"filter": p})
    if reply.get("success"):
        seen.purged_below[p] = 1 << 62
    q_seqs = sorted(s for s, (subj, _) in seen.messages.items() if subj == q)
    if len(q_seqs) < 3:  # killed before they were all published
        return
    seen.tried_purge[q] = q_seqs[2]
    reply = await api(nc, f"STREAM.PURGE.{STREAM}", {"filter": q, "seq": q_seqs[2]})
    if reply.get("success"):
        seen.purged_below[q] = q_seqs[2]


async def acker(nc: Client, rnd: int, seen: Confirmed) -> None:
    """Fetches from the durable and acks each message synchronously."""
    js = nc.jetstream()
    sub = await js.pull_subscribe_bind(DURABLE, STREAM)
    for _ in range(10_000):
        if not nc.is_connected:
            return
        try:
            msgs = await sub.fetch(10, timeout=0.2)
        except nats.errors.TimeoutError:
            continue
        for msg in msgs:
            seq = msg.metadata.sequence.stream
            if seq in seen.acked:
                seen.problems.append(f"round {rnd}: seq {seq} delivered after a confirmed ack")
            await msg.ack_sync(timeout=2)
            seen.acked.add(seq)


async def check(nc: Client, rnd: int, seen: Confirmed, seqs: list[int]) -> None:
    info = await api(nc, f"STREAM.INFO.{STREAM}")
    last = info["state"]["last_seq"]
    if last < seen.top:
        seen.problems.append(f"round {rnd}: last_seq {last} < acknowledged seq {seen.top}")
    for seq in seqs:
        reply = await api(nc, f"STREAM.MSG.GET.{STREAM}", {"seq": seq})
        if seen.gone(seq):
            if "error" not in reply:
                seen.problems.append(f"round {rnd}: seq {seq} came back after a confirmed removal")
            continue
        if "error" in reply:
            if not seen.may_be_gone(seq):
                seen.problems.append(f"round {rnd}: acknowledged seq {seq} lost: {reply['error']}")
            continue
        data = base64.b64decode(reply["message"].get("data", ""))
        if (reply["message"]["subject"], data) != seen.messages[seq]:
            seen.problems.append(f"round {rnd}: seq {seq} changed")


async def test_fifty_kills_lose_and_reuse_nothing_acknowledged() -> None:
    random.seed(15)
    seen = Confirmed()
    srv = ServerProcess("headwater", jetstream=True)
    srv.start()
    try:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name=STREAM, subjects=["crash.>"])
        await js.add_consumer(
            STREAM,
            ConsumerConfig(
                durable_name=DURABLE,
                filter_subject="crash.*.a",
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=60,
                max_ack_pending=100_000,
            ),
        )
        await nc.close()
        checked_upto = 0
        for rnd in range(ROUNDS):
            nc = await nats.connect(srv.url, allow_reconnect=False)
            # Everything since the last check, plus a sample of the older history.
            recent = [s for s in seen.messages if s > checked_upto]
            older = [s for s in seen.messages if s <= checked_upto]
            sample = random.sample(older, min(30, len(older)))
            await check(nc, rnd, seen, recent + sample)
            checked_upto = seen.top
            ready = asyncio.Event()
            tasks = [
                asyncio.create_task(publisher(nc, rnd, seen, ready)),
                asyncio.create_task(deleter(nc, rnd, seen)),
                asyncio.create_task(purger(nc, rnd, seen, ready)),
                asyncio.create_task(acker(nc, rnd, seen)),
            ]
            await asyncio.sleep(random.uniform(0.05, 0.5))
            srv.kill()
            ready.set()  # a purger still waiting for the publisher finds the connection dead
            done = await asyncio.wait(tasks, timeout=10)
            assert not done[1], "clients still running 10 s after the kill"
            for task in tasks:
                exc = task.exception()
                assert exc is None or isinstance(exc, NatsError | OSError | asyncio.TimeoutError), (
                    exc
                )
            with contextlib.suppress(Exception):
                await nc.close()
            srv.restart()
        nc = await nats.connect(srv.url, allow_reconnect=False)
        await check(nc, ROUNDS, seen, list(seen.messages))
        js = nc.jetstream()
        ack = await js.publish("crash.end.a", b"end", timeout=5)
        assert ack.seq > seen.top
        await nc.close()
    finally:
        srv.cleanup()
    assert len(seen.messages) > ROUNDS * 10, "too little work was done to mean anything"
    assert seen.deleted and seen.purged_below and seen.acked
    assert not seen.problems, "\n".join(seen.problems[:40])
