"""A full disk: a refused publish leaves no trace, and a purge gives the space back.

The store directory lives on a 2 MiB tmpfs (skipped when it cannot be mounted: that needs
root). Publishes fill it until one is refused with 10077; that message is nowhere (not in
the state, not readable, not there after a restart), a purge frees the disk, and publishing
works again. Headwater only: nats-server disables JetStream altogether when it runs out of
space (see docs/DIFFERENCES.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.errors import APIError

from headwater.testing import ServerProcess


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 2 MiB tmpfs, always unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = Path(tempfile.mkdtemp(prefix="hw-full-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
        capture_output=True,
        timeout=10,
        check=False,
    )
    if mounted.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode(errors='replace')}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True, timeout=10, check=False)
        where.rmdir()


async def api(nc: nats.NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(body).encode() if body else b"", timeout=5)
    return json.loads(msg.data)  # type: ignore[no-any-return]


async def test_full_disk_refuses_without_trace_and_purge_frees(small_disk: Path) -> None:
    srv = ServerProcess("headwater", jetstream=True, store_dir=small_disk / "js")
    srv.start()
    try:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name="FULL", subjects=["full.>"])
        payload = b"x" * 4096
        acked: list[int] = []
        refused: APIError | None = None
        for i in range(1000):  # 2 MiB holds fewer than 500 of these
            try:
                acked.append((await js.publish(f"full.{i % 3}", payload)).seq)
            except APIError as exc:
                refused = exc
                break
        assert refused is not None, "the disk never filled"
        assert refused.err_code == 10077, refused
        assert acked == list(range(1, len(acked) + 1))
        state = (await api(nc, "$JS.API.STREAM.INFO.FULL"))["state"]
        assert (state["messages"], state["last_seq"]) == (len(acked), len(acked))
        got = await api(nc, "$JS.API.STREAM.MSG.GET.FULL", {"seq": len(acked) + 1})
        assert got["error"]["err_code"] == 10037, got

        purged = await api(nc, "$JS.API.STREAM.PURGE.FULL")
        assert purged.get("purged") == len(acked), purged
        ack = await js.publish("full.0", b"after the purge")
        assert ack.seq == len(acked) + 1
        for _ in range(20):  # the space is really back, not just one message's worth
            await js.publish("full.1", payload)
        await nc.close()

        srv.kill()
        srv.restart()
        nc = await nats.connect(srv.url, allow_reconnect=False)
        state = (await api(nc, "$JS.API.STREAM.INFO.FULL"))["state"]
        assert (state["first_seq"], state["last_seq"], state["messages"]) == (
            len(acked) + 1,
            len(acked) + 21,
            21,
        )
        await nc.close()
    finally:
        srv.cleanup()
