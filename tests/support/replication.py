"""Helpers shared by the mirror, source and replication restart tests."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig

Stored = tuple[int, str, bytes, dict[str, str]]
"""(sequence, subject, payload, headers) of one stored message."""


async def info(nc: Client, stream: str) -> dict[str, Any]:
    """The raw STREAM.INFO reply, so field presence can be compared."""
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
    return json.loads(msg.data)


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    msg = await nc.request(f"$JS.API.{subject}", payload, timeout=5)
    return json.loads(msg.data)


async def stored(nc: Client, stream: str) -> list[Stored]:
    """Every message of ``stream`` in sequence order (gaps left out)."""
    state = (await info(nc, stream))["state"]
    out: list[Stored] = []
    if not state["messages"]:
        return out
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        reply = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
        if "error" in reply:
            continue
        msg = reply["message"]
        out.append((seq, msg["subject"], _b64(msg.get("data")), _headers(msg.get("hdrs"))))
    return out


async def fetched(nc: Client, stream: str) -> list[tuple[int, str, bytes, dict[str, str], int]]:
    """Every message of ``stream`` read through a pull consumer, in batches: (sequence,
    subject, payload, headers, stored time in ns). For streams too long for :func:`stored`."""
    js = nc.jetstream()
    name = "dump_" + str(time.monotonic_ns())
    await js.add_consumer(stream, ConsumerConfig(durable_name=name, ack_policy=AckPolicy.NONE))
    pending = (await js.consumer_info(stream, name)).num_pending
    sub = await js.pull_subscribe_bind(name, stream)
    out = []
    try:
        while len(out) < pending:
            for msg in await sub.fetch(1000, timeout=5):
                meta = msg.metadata
                stamp = meta.timestamp
                out.append(
                    (
                        meta.sequence.stream,
                        msg.subject,
                        msg.data,
                        dict(msg.headers or {}),
                        int(stamp.timestamp() * 1_000_000) if stamp else 0,
                    )
                )
    finally:
        await sub.unsubscribe()
        await js.delete_consumer(stream, name)
    return out


def _b64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _headers(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    raw = _b64(text).decode()
    out: dict[str, str] = {}
    for line in raw.split("\r\n")[1:]:
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``check`` until it holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def wait_last_seq(nc: Client, stream: str, seq: int, timeout: float = 10.0) -> None:
    async def reached() -> bool:
        return (await info(nc, stream))["state"]["last_seq"] >= seq

    await eventually(reached, timeout, f"{stream} to reach sequence {seq}")


async def wait_messages(nc: Client, stream: str, count: int, timeout: float = 10.0) -> None:
    async def reached() -> bool:
        return (await info(nc, stream))["state"]["messages"] >= count

    await eventually(reached, timeout, f"{stream} to hold {count} messages")


async def times(nc: Client, stream: str) -> dict[int, str]:
    """Sequence -> stored time (RFC 3339, as STREAM.MSG.GET reports it) of every message."""
    state = (await info(nc, stream))["state"]
    out: dict[int, str] = {}
    if not state["messages"]:
        return out
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        reply = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
        if "error" not in reply:
            out[seq] = reply["message"]["time"]
    return out
