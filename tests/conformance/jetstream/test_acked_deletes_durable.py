"""Acknowledged deletes and purges survive SIGKILL, and sequences are never reused.

A MSG.DELETE or STREAM.PURGE reply means the change is as durable as a publish ack. After a
kill -9 and a restart on the same store, ``last_seq`` is what it was, the next publish gets
``last_seq + 1``, and a durable pull consumer whose pointer was past the removed messages
receives it. Headwater only: these kill the server process (nats-server's defaults fsync
every 2 minutes and make no promise after a kill).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig

from headwater.testing import ServerProcess
from tests.conformance.jetstream.conftest import Connect


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(body).encode() if body else b"", timeout=5)
    return json.loads(msg.data)  # type: ignore[no-any-return]


def delete_tail(stream: str) -> list[tuple[str, dict[str, Any] | None]]:
    return [(f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": s}) for s in range(46, 51)]


def purge(stream: str, body: dict[str, Any] | None) -> list[tuple[str, dict[str, Any] | None]]:
    return [(f"$JS.API.STREAM.PURGE.{stream}", body)]


CASES = {
    "delete_tail": delete_tail,
    "purge_all": lambda s: purge(s, None),
    "purge_filter": lambda s: purge(s, {"filter": "d.b"}),
    "purge_seq": lambda s: purge(s, {"seq": 48}),
    "purge_keep": lambda s: purge(s, {"keep": 3}),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_acked_removal_survives_sigkill(
    headwater: ServerProcess, clients: Connect, case: str
) -> None:
    nc = await clients(headwater)
    js = nc.jetstream()
    await js.add_stream(name="D", subjects=["d.*"])
    for i in range(50):
        # The tail (46..50) is all on d.b, so a filtered purge removes the last messages.
        await js.publish("d.b" if i % 2 or i >= 45 else "d.a", b"m%d" % (i + 1))
    await js.add_consumer("D", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT))
    sub = await js.pull_subscribe_bind("C", "D")
    got = []
    for _ in range(10):
        if len(got) >= 50:
            break
        for m in await sub.fetch(50 - len(got), timeout=5):
            await m.ack_sync()
            got.append(m.metadata.sequence.stream)
    assert got == list(range(1, 51))

    for subject, body in CASES[case]("D"):
        reply = await api(nc, subject, body)
        assert "error" not in reply, reply
    before = (await api(nc, "$JS.API.STREAM.INFO.D"))["state"]
    assert before["last_seq"] == 50
    await nc.close()

    headwater.kill()
    headwater.restart()
    nc = await clients(headwater)
    js = nc.jetstream()
    after = (await api(nc, "$JS.API.STREAM.INFO.D"))["state"]
    for key in ("last_seq", "first_seq", "messages", "bytes"):
        assert after[key] == before[key], (key, before, after)
    ack = await js.publish("d.a", b"next")
    assert ack.seq == 51
    sub = await js.pull_subscribe_bind("C", "D")
    msgs = await sub.fetch(1, timeout=5)
    assert [m.metadata.sequence.stream for m in msgs] == [51]
    assert msgs[0].data == b"next"
