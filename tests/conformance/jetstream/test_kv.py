"""A KV-shaped stream driven by nats-py's key-value API (no watchers: consumers come later).

``create_key_value`` makes the stream KV buckets use (per-subject history, rollups, discard
new, deny delete; direct gets when asked): reads are gets by subject or by sequence.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError


async def test_put_get_history_update_delete(nc: Client) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="conf", history=3, direct=True)
    info = await js.stream_info("KV_conf")
    cfg = info.config
    assert cfg.subjects == ["$KV.conf.>"]
    assert (cfg.max_msgs_per_subject, cfg.allow_direct, cfg.deny_delete) == (3, True, True)
    assert (cfg.allow_rollup_hdrs, cfg.discard) == (True, "new")

    revisions = [await kv.put("a", b"v%d" % i) for i in range(1, 5)]
    assert revisions == [1, 2, 3, 4]
    entry = await kv.get("a")
    assert (entry.value, entry.revision) == (b"v4", 4)
    with pytest.raises(KeyNotFoundError):
        await kv.get("a", revision=1)  # history 3 keeps revisions 2..4
    assert (await kv.get("a", revision=2)).value == b"v2"

    with pytest.raises(KeyWrongLastSequenceError):
        await kv.create("a", b"again")
    assert await kv.update("a", b"v5", last=4) == 5
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.update("a", b"stale", last=4)

    await kv.delete("a")
    with pytest.raises(KeyNotFoundError):
        await kv.get("a")
    assert await kv.create("a", b"reborn") == 7
    with pytest.raises(KeyNotFoundError):
        await kv.get("missing")


async def test_purge_rolls_a_key_up(nc: Client) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="roll", history=5)
    for i in range(3):
        await kv.put("k", b"%d" % i)
    await kv.put("other", b"x")
    await kv.purge("k")
    info = await js.stream_info("KV_roll", subjects_filter=">")
    assert info.state.subjects == {"$KV.roll.k": 1, "$KV.roll.other": 1}
    with pytest.raises(KeyNotFoundError):
        await kv.get("k")
    status = await kv.status()
    assert (status.bucket, status.values, status.history) == ("roll", 2, 5)


async def test_limit_markers_replace_expired_keys(nc: Client) -> None:
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="lm", ttl=1, limit_marker_ttl=1, direct=True)
    cfg = (await js.stream_info("KV_lm")).config
    assert (cfg.allow_msg_ttl, cfg.subject_delete_marker_ttl) == (True, 1.0)
    await kv.put("k", b"short-lived")
    deadline = time.monotonic() + 5
    marker = None
    while time.monotonic() < deadline:
        msg = await js.get_last_msg("KV_lm", "$KV.lm.k", direct=True)
        if msg.headers and "Nats-Marker-Reason" in msg.headers:
            marker = msg
            break
        await asyncio.sleep(0.05)
    assert marker is not None, "no subject delete marker after the key expired"
    assert marker.seq == 2 and not marker.data
    assert marker.headers is not None
    assert (marker.headers["Nats-Marker-Reason"], marker.headers["Nats-TTL"]) == ("MaxAge", "1s")
    assert marker.headers["Nats-Rollup"] == "sub"
