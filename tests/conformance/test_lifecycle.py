"""Process lifecycle: SIGTERM/SIGINT stop, SIGUSR2 lame duck, the pid file; both servers.

Signals go to the real child process, and what clients see is observed through nats-py's
callbacks and a raw peer's bytes.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from conftest import BOTH
from headwater.testing import ServerProcess
from support.wire import WireClient

# nats-server refuses a lame_duck_duration under 30 s; the grace period is free.
LAME_DUCK_CONF = """\
listen: 127.0.0.1:-1
lame_duck_duration: "30s"
lame_duck_grace_period: "200ms"
"""


def _serve(kind: str, args: list[str]) -> Iterator[ServerProcess]:
    srv = ServerProcess(kind, args=args)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture(params=BOTH)
def lame_duck_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    conf = tmp_path / "ldm.conf"
    conf.write_text(LAME_DUCK_CONF)
    yield from _serve(request.param, ["-c", str(conf)])


async def _exit_code(srv: ServerProcess, timeout: float) -> int:
    assert srv.proc is not None
    return await asyncio.to_thread(srv.proc.wait, timeout)


async def _connect(url: str, **options: Any) -> Client:
    nc = Client()
    await nc.connect(
        url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2, **options
    )
    return nc


# --- SIGTERM / SIGINT ----------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_stops_gracefully(any_server: ServerProcess, sig: signal.Signals) -> None:
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    nc = await _connect(any_server.url, closed_cb=on_closed)
    try:
        await nc.flush(timeout=2)
        started = time.monotonic()
        any_server.signal(sig)
        assert await _exit_code(any_server, 5.0) == 0
        assert time.monotonic() - started < 3.0
        # The client notices the server going away.
        await asyncio.wait_for(closed.wait(), 5)
        assert not nc.is_connected
    finally:
        await nc.close()


# --- SIGUSR2: lame duck mode ---------------------------------------------------------------


async def test_lame_duck_informs_then_closes_and_exits(lame_duck_server: ServerProcess) -> None:
    client = await WireClient.connect(lame_duck_server.port, {"protocol": 1})
    await client.send("PING\r\n")
    await client.expect("PONG")
    # nats-server 2.15 sends an extra INFO after the first PONG; any INFO without ldm is
    # skipped.
    started = time.monotonic()
    lame_duck_server.signal(signal.SIGUSR2)
    while True:
        line = await client.expect("INFO ")
        info = json.loads(line[5:])
        if info.get("ldm"):
            break
    assert time.monotonic() - started < 0.2 + 1.0  # announced before the grace period ends
    # New clients are turned away while the existing one still waits out the grace period.
    with pytest.raises(OSError):
        _, writer = await asyncio.open_connection("127.0.0.1", lame_duck_server.port)
        writer.close()
    assert await client.closed(timeout=5)
    closed_after = time.monotonic() - started
    assert closed_after >= 0.15, closed_after  # the 200 ms grace period was honoured
    assert await _exit_code(lame_duck_server, 5.0) == 0
    assert time.monotonic() - started < 4.0


async def test_lame_duck_info_only_for_async_info_clients(
    lame_duck_server: ServerProcess,
) -> None:
    """A CONNECT without ``protocol: 1`` gets no INFO, only the close."""
    client = await WireClient.connect(lame_duck_server.port, {})
    await client.send("PING\r\n")
    await client.expect("PONG")
    lame_duck_server.signal(signal.SIGUSR2)
    rest = await asyncio.wait_for(client.reader.read(), 5)
    assert b"INFO" not in rest
    await client.close()
    assert await _exit_code(lame_duck_server, 5.0) == 0


async def test_lame_duck_through_nats_py(lame_duck_server: ServerProcess) -> None:
    lame_duck = asyncio.Event()
    closed = asyncio.Event()

    async def on_lame_duck() -> None:
        lame_duck.set()

    async def on_closed() -> None:
        closed.set()

    nc = await _connect(lame_duck_server.url, lame_duck_mode_cb=on_lame_duck, closed_cb=on_closed)
    try:
        await nc.flush(timeout=2)
        lame_duck_server.signal(signal.SIGUSR2)
        await asyncio.wait_for(lame_duck.wait(), 5)
        await asyncio.wait_for(closed.wait(), 5)
    finally:
        await nc.close()
    assert await _exit_code(lame_duck_server, 5.0) == 0


async def test_lame_duck_clients_leaving_during_grace(lame_duck_server: ServerProcess) -> None:
    """Clients that migrate away on the INFO leave nothing to close; the server still stops."""
    client = await WireClient.connect(lame_duck_server.port, {"protocol": 1})
    await client.send("PING\r\n")
    await client.expect("PONG")
    started = time.monotonic()
    lame_duck_server.signal(signal.SIGUSR2)
    while not json.loads((await client.expect("INFO "))[5:]).get("ldm"):
        continue  # earlier INFOs (without ldm) are skipped
    await client.close()
    assert await _exit_code(lame_duck_server, 5.0) == 0
    assert time.monotonic() - started < 2.0


async def test_lame_duck_without_clients_exits_at_once(lame_duck_server: ServerProcess) -> None:
    started = time.monotonic()
    lame_duck_server.signal(signal.SIGUSR2)
    assert await _exit_code(lame_duck_server, 5.0) == 0
    # Neither the 200 ms grace period nor the 30 s duration applies to an empty server.
    assert time.monotonic() - started < 1.5


# --- pid file ------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["-P", "--pid"])
@pytest.mark.parametrize("kind", BOTH)
async def test_pid_file(kind: str, flag: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "server.pid"
    with ServerProcess(kind, args=[flag, str(pid_file)]) as srv:
        assert srv.proc is not None
        assert pid_file.read_text().strip() == str(srv.proc.pid)
