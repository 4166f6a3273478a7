"""Process lifecycle: SIGTERM/SIGINT stop, SIGUSR2 lame duck, the pid file; both servers.

Signals go to the real child process, and what clients see is observed through nats-py's
callbacks and a raw peer's bytes.
"""

from __future__ import annotations

import asyncio
import json
import re
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


# --- JetStream at shutdown -----------------------------------------------------------------


@pytest.fixture(params=BOTH)
def js_any(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    """A JetStream server of each kind that a test may stop and restart itself."""
    conf = tmp_path / "ldm.conf"
    conf.write_text(LAME_DUCK_CONF)
    srv = ServerProcess(request.param, args=["-c", str(conf)], jetstream=True)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


async def _stream_and_pull_consumer(srv: ServerProcess, messages: int) -> None:
    nc = await _connect(srv.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="SD", subjects=["sd.>"])
        for i in range(messages):
            await js.publish("sd.x", b"%d" % (i + 1))
        await js.add_consumer("SD", durable_name="W")
    finally:
        await nc.close()


async def _read_to_eof(client: WireClient, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection (bounded by ``timeout``)."""
    chunks: list[bytes] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for _ in range(100_000):
        left = deadline - loop.time()
        if left <= 0:
            break
        try:
            data = await asyncio.wait_for(client.reader.read(65536), left)
        except (TimeoutError, ConnectionError, OSError):
            break
        if not data:
            break
        chunks.append(data)
    await client.close()
    return b"".join(chunks)


async def _waiting_pull(srv: ServerProcess) -> WireClient:
    """A raw client with a pull request for 5 messages (1,000 bytes) of which 1 is served."""
    client = await WireClient.connect(srv.port, {"protocol": 1})
    # A first PONG makes it a client nats-server tells about lame duck (INFO ldm).
    await client.send("PING\r\n")
    await client.expect("PONG")
    body = '{"batch":5,"expires":20000000000,"max_bytes":1000}'
    await client.send("SUB _INBOX.pull 1\r\n")
    await client.send(f"PUB $JS.API.CONSUMER.MSG.NEXT.SD.W _INBOX.pull {len(body)}\r\n{body}\r\n")
    for _ in range(10):  # nats-server 2.15 sends a second INFO after the first PONG
        line = await client.line()
        if line.startswith("MSG "):
            break
    assert line.startswith("MSG sd.x 1 $JS.ACK.SD.W.1.1.1."), line
    assert await client.read_exactly(3) == b"1\r\n"
    return client


async def test_sigterm_answers_waiting_pull_requests(js_any: ServerProcess) -> None:
    """``409 Server Shutdown`` with what the request still wanted, before the close."""
    await _stream_and_pull_consumer(js_any, 1)
    client = await _waiting_pull(js_any)
    js_any.signal(signal.SIGTERM)
    rest = await _read_to_eof(client, 5.0)
    # 1,000 bytes asked, 45 served: subject (4), payload (1) and the 40-byte ack subject.
    status = (
        b"NATS/1.0 409 Server Shutdown\r\nNats-Pending-Messages: 4\r\n"
        b"Nats-Pending-Bytes: 955\r\n\r\n"
    )
    assert b"HMSG _INBOX.pull 1 %d %d\r\n" % (len(status), len(status)) + status in rest, rest
    assert await _exit_code(js_any, 5.0) == 0


async def test_lame_duck_closes_waiting_pull_requests_without_status(
    js_any: ServerProcess,
) -> None:
    """In lame duck mode nats-server 2.15 tells waiting pulls nothing: the INFO, the close."""
    await _stream_and_pull_consumer(js_any, 1)
    client = await _waiting_pull(js_any)
    js_any.signal(signal.SIGUSR2)
    rest = await _read_to_eof(client, 5.0)
    assert b'"ldm":true' in rest
    assert b"409" not in rest and b"HMSG" not in rest, rest
    assert await _exit_code(js_any, 5.0) == 0


async def test_sigterm_acks_every_stored_publish(tmp_path: Path) -> None:
    """Publishes in flight at SIGTERM: every message that was stored had its ack sent (the
    acks of the last group commit used to go to connections already closed, so publishers
    retried them: duplicates without Msg-Id). Headwater only: nats-server 2.15 stores
    publishes it no longer acknowledges while it shuts down (seen: 2,584 acks, 4,000 stored).
    """
    with ServerProcess("headwater", jetstream=True) as srv:
        await _acks_every_stored_publish(srv)


async def _acks_every_stored_publish(js_any: ServerProcess) -> None:
    nc = await _connect(js_any.url)
    try:
        await nc.jetstream().add_stream(name="SA", subjects=["sa.>"])
    finally:
        await nc.close()
    client = await WireClient.connect(js_any.port, {"protocol": 1})
    await client.send("SUB _INBOX.acks 1\r\nPING\r\n")
    await client.expect("PONG")
    burst = b"".join(b"PUB sa.x _INBOX.acks 2\r\nhi\r\n" for _ in range(4000))
    client.writer.write(burst)
    await asyncio.sleep(0.01)  # some stored and acked, many in the middle
    js_any.signal(signal.SIGTERM)
    rest = await _read_to_eof(client, 10.0)
    assert await _exit_code(js_any, 10.0) == 0
    acked = {int(seq) for seq in re.findall(rb'"seq":(\d+)', rest)}
    await asyncio.to_thread(js_any.restart)
    nc = await _connect(js_any.url)
    try:
        stored = (await nc.jetstream().stream_info("SA")).state.messages
    finally:
        await nc.close()
    assert stored > 0
    assert acked == set(range(1, stored + 1)), (len(acked), stored)
