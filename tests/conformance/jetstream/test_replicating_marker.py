"""A stream's directory left marked "becoming replicated" (jetstream/groupseed.py) on a server
started without its cluster: no placement will ever say which the stream is, so the server
opens it as it was (its messages and consumer), drops the marker, and says so; it never
keeps the stream out of sight. Headwater only: the marker is Headwater's."""

from __future__ import annotations

import nats
import pytest

from headwater.server.jetstream import groupseed, layout
from headwater.testing import ServerProcess

pytestmark = pytest.mark.timeout(60)


async def test_a_marked_stream_opens_as_it_was_without_a_cluster(
    headwater: ServerProcess,
) -> None:
    nc = await nats.connect(headwater.url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="HALF", subjects=["half.>"])
    for i in range(5):
        await js.publish("half.x", b"%d" % i)
    sub = await js.pull_subscribe("half.>", durable="W", stream="HALF")
    for msg in await sub.fetch(2, timeout=2):
        await msg.ack_sync()
    await nc.close()
    headwater.stop()
    directory = layout.stream_dir(layout.jetstream_root(str(headwater.store_dir)), "HALF")
    (directory / groupseed.MARKER).write_bytes(b"")

    headwater.restart()
    nc = await nats.connect(headwater.url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        info = await js.stream_info("HALF")
        assert info.state.messages == 5
        consumer = await js.consumer_info("HALF", "W")
        assert consumer.ack_floor.stream_seq == 2
    finally:
        await nc.close()
    assert not (directory / groupseed.MARKER).exists()
    assert "was becoming replicated: opened as it was" in headwater.log()
