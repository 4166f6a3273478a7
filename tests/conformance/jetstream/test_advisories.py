"""Stream and consumer lifecycle advisories, seen by a nats-py subscriber on
``$JS.EVENT.ADVISORY.>`` on both servers: same subjects, types, actions and field names."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


async def _lifecycle_events(nc: Client, stream: str) -> list[tuple[str, dict[str, Any]]]:
    """Create, update and delete ``stream`` with one durable made and removed in between."""
    events: list[tuple[str, dict[str, Any]]] = []

    async def collect(msg: Msg) -> None:
        if msg.subject != "$JS.EVENT.ADVISORY.API":  # audit events: not lifecycle
            events.append((msg.subject, json.loads(msg.data)))

    sub = await nc.subscribe("$JS.EVENT.ADVISORY.>", cb=collect)
    await nc.flush()
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    await js.update_stream(name=stream, subjects=[f"{stream.lower()}.>"], max_msgs=10)
    await js.add_consumer(stream, durable_name="D")
    await js.delete_consumer(stream, "D")
    await js.delete_stream(stream)
    for _ in range(50):
        if len(events) >= 5:
            break
        await asyncio.sleep(0.02)
    await sub.unsubscribe()
    return events


async def test_lifecycle_advisories(nc: Client) -> None:
    events = await _lifecycle_events(nc, "ADVS1")
    subjects = [subject for subject, _ in events]
    assert subjects == [
        "$JS.EVENT.ADVISORY.STREAM.CREATED.ADVS1",
        "$JS.EVENT.ADVISORY.STREAM.UPDATED.ADVS1",
        "$JS.EVENT.ADVISORY.CONSUMER.CREATED.ADVS1.D",
        "$JS.EVENT.ADVISORY.CONSUMER.DELETED.ADVS1.D",
        "$JS.EVENT.ADVISORY.STREAM.DELETED.ADVS1",
    ]
    bodies = [body for _, body in events]
    kinds = [(b["type"].rsplit(".", 1)[-1], b["action"]) for b in bodies]
    assert kinds == [
        ("stream_action", "create"),
        ("stream_action", "modify"),
        ("consumer_action", "create"),
        ("consumer_action", "delete"),
        ("stream_action", "delete"),
    ]
    for body in bodies:
        assert body["type"].startswith("io.nats.jetstream.advisory.v1.")
        assert body["stream"] == "ADVS1"
        assert _RFC3339.match(body["timestamp"])
        assert isinstance(body["id"], str) and len(body["id"]) == 22
    stream_fields = {"type", "id", "timestamp", "stream", "action"}
    assert [set(b) for b in bodies] == [
        stream_fields,
        stream_fields,
        stream_fields | {"consumer"},
        stream_fields | {"consumer"},
        stream_fields,
    ]
    assert len({b["id"] for b in bodies}) == 5
