"""nats-py clients for the authentication and TLS tests: one connection attempt, a round
trip, and the refusal both servers must give."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client


async def connect_once(url: str, **options: Any) -> Client:
    """Connect without reconnects; on failure close the client so its socket is not leaked."""
    nc = Client()
    try:
        options = {"connect_timeout": 2, **options}
        await nc.connect(url, allow_reconnect=False, max_reconnect_attempts=0, **options)
    except BaseException:
        # After a failed TLS upgrade nats-py's close() waits forever on the plaintext stream
        # that start_tls took over; its socket is closed by then, so a bounded wait suffices.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(nc.close(), 0.5)
        raise
    return nc


async def roundtrip(nc: Client, subject: str) -> None:
    sub = await nc.subscribe(subject)
    await nc.publish(subject, b"ping")
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"ping"


async def refused(url: str, **options: Any) -> None:
    """nats-py must fail to connect with the server's authorization error."""
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        nc = await connect_once(url, **options)
        await nc.close()
