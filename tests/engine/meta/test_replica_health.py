"""``/healthz`` of a server whose replica of a replicated stream is still opening.

Found by the catch-up benchmark: a restarted server answered 200 within 0.6 s while it held
none of 200,000 messages, because a replica being opened (its file store cut back to its
checkpoint, its log read) counted as healthy. A StatefulSet's rolling restart would then move
on before the replica caught up. Here the opening is made slow on purpose, on two in-process
servers with an R2 file stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats
import pytest

from headwater.server.jetstream import replicas as replicas_module
from headwater.server.monitoring.healthz import healthz
from headwater.server.node import Server

from .test_placement import pair  # noqa: F401  (the two-server fixture)

pytestmark = pytest.mark.timeout(60)


async def test_a_replica_still_opening_is_not_current(
    pair: list[Server],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s1, s2 = pair
    nc = await nats.connect(f"nats://127.0.0.1:{s1.port}", allow_reconnect=False)
    try:
        config = {"name": "R2", "subjects": ["r2"], "num_replicas": 2, "storage": "file"}
        msg = await nc.request("$JS.API.STREAM.CREATE.R2", json.dumps(config).encode(), 10)
        assert "error" not in json.loads(msg.data)
        for i in range(5):
            await nc.request("r2", f"m{i}".encode(), timeout=5)
    finally:
        await nc.close()
    replicas = s2.jetstream.clustered.replicas
    deadline = time.monotonic() + 10
    while healthz(s2)[0] != 200:  # its replica caught up
        assert time.monotonic() < deadline, healthz(s2)
        await asyncio.sleep(0.1)

    # s2's replica goes, and opens again slowly (as a large file store does at start), then
    # catches up from the leader.
    opening = asyncio.Event()
    real_open = replicas_module.open_file_replica

    def slow_open(*args: Any, **kwargs: Any) -> Any:
        opening.set()
        time.sleep(2.0)  # in the opening's worker thread
        return real_open(*args, **kwargs)

    await replicas.remove("R2", advise=False)  # as a removed peer's server deletes it
    monkeypatch.setattr(replicas_module, "open_file_replica", slow_open)
    placed = s2.jetstream.clustered.placements["R2"]
    replicas.follow("R2", placed)
    await asyncio.wait_for(opening.wait(), 5)
    status, body = healthz(s2)
    assert status == 503, body
    assert "JetStream stream '$G > R2' is not current" in json.dumps(body)
    deadline = time.monotonic() + 15
    while healthz(s2)[0] != 200:  # opened, and caught up again
        assert time.monotonic() < deadline, healthz(s2)
        await asyncio.sleep(0.1)
    assert "R2" in replicas.groups
