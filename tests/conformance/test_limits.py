"""Per-connection limits, Headwater and nats-server with the same config file.

max_payload (client-side check from INFO, server-side -ERR), max_pending (slow consumer),
ping_interval/ping_max (stale connection) and max_connections.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import nats.errors
import pytest

from conftest import BOTH
from headwater.testing import ServerProcess, wait_for
from support.authclients import connect_once
from support.wire import WireClient

PAYLOAD_CONF = "max_payload: 1KB\n"
SLOW_CONF = "max_pending: 64KB\nmax_payload: 8KB\n"  # max_payload may not exceed max_pending
PING_CONF = 'ping_interval: "200ms"\nping_max: 2\n'
CONN_CONF = "max_connections: 2\n"


def _serve(kind: str, conf: str, directory: Path) -> Iterator[ServerProcess]:
    path = directory / "server.conf"
    path.write_text("listen: 127.0.0.1:-1\n" + conf)
    srv = ServerProcess(kind, args=["-c", str(path)])
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture(params=BOTH, scope="module")
def payload_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from _serve(request.param, PAYLOAD_CONF, tmp_path_factory.mktemp("payload"))


@pytest.fixture(params=BOTH, scope="module")
def ping_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from _serve(request.param, PING_CONF, tmp_path_factory.mktemp("ping"))


@pytest.fixture(params=BOTH)
def slow_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    yield from _serve(request.param, SLOW_CONF, tmp_path)


@pytest.fixture(params=BOTH)
def conn_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    yield from _serve(request.param, CONN_CONF, tmp_path)


async def _healthy(port: int) -> None:
    """A fresh client can still connect, subscribe and receive."""
    client = await WireClient.connect(port, {})
    await client.send("SUB health 1\r\nPUB health 2\r\nok\r\n")
    line, data = await client.msg()
    assert (line, data) == ("MSG health 1 2", b"ok")
    await client.close()


# --- max_payload ---------------------------------------------------------------------------


async def test_max_payload_in_info(payload_server: ServerProcess) -> None:
    client = await WireClient.connect(payload_server.port)
    assert client.info["max_payload"] == 1024
    await client.close()


async def test_nats_py_refuses_oversized_publish(payload_server: ServerProcess) -> None:
    nc = await connect_once(payload_server.url)
    try:
        assert nc.max_payload == 1024
        sub = await nc.subscribe("limits.payload")
        with pytest.raises(nats.errors.MaxPayloadError):
            await nc.publish("limits.payload", b"x" * 1025)
        # Exactly the limit is fine, and the connection is unharmed.
        await nc.publish("limits.payload", b"y" * 1024)
        msg = await sub.next_msg(timeout=2)
        assert msg.data == b"y" * 1024
    finally:
        await nc.close()


@pytest.mark.parametrize(
    "command",
    [
        "PUB big 1025\r\n",
        # HPUB counts headers and payload together.
        "HPUB big 100 1025\r\n",
    ],
    ids=["pub", "hpub"],
)
async def test_oversized_pub_on_the_wire(payload_server: ServerProcess, command: str) -> None:
    client = await WireClient.connect(payload_server.port, {})
    await client.send(command)
    assert await client.expect("-ERR") == "-ERR 'Maximum Payload Violation'"
    assert await client.closed()
    await _healthy(payload_server.port)


# --- max_pending: slow consumer ------------------------------------------------------------


def _stuck_subscriber(port: int) -> socket.socket:
    """A subscriber with a tiny receive window that never reads after subscribing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    sock.recv(4096)  # INFO
    sock.sendall(b'CONNECT {"verbose":false}\r\nSUB slow 1\r\nPING\r\n')
    seen = b""
    while b"PONG\r\n" not in seen:
        seen += sock.recv(4096)
    return sock


def _drained_to_eof(sock: socket.socket, timeout: float) -> bool:
    """Read whatever the kernel holds; True once the server has closed the connection."""
    deadline = time.monotonic() + timeout
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            if not sock.recv(1 << 20):
                return True
        except TimeoutError:
            continue
        except ConnectionError:
            return True
    return False


async def test_slow_consumer_is_disconnected(slow_server: ServerProcess) -> None:
    sub = _stuck_subscriber(slow_server.port)
    try:
        pub = await WireClient.connect(slow_server.port, {})
        payload = b"z" * 8192
        frame = b"PUB slow 8192\r\n" + payload + b"\r\n"
        # 16 MiB: far more than the kernel buffers on both ends plus max_pending can hold.
        for _ in range(64):
            pub.writer.write(frame * 32)
            await pub.writer.drain()
        await pub.send("PING\r\n")
        await pub.expect("PONG", timeout=15)
        await pub.close()
        log_says_so = await asyncio.to_thread(
            wait_for, lambda: "Slow Consumer Detected" in slow_server.log(), 5.0
        )
        assert log_says_so, slow_server.log()[-2000:]
        assert await asyncio.to_thread(_drained_to_eof, sub, 10.0)
    finally:
        sub.close()
    assert slow_server.proc is not None and slow_server.proc.poll() is None
    await _healthy(slow_server.port)


async def test_burst_the_socket_absorbs_is_not_a_slow_consumer(slow_server: ServerProcess) -> None:
    """max_pending counts what the kernel would not take, not one burst of deliveries.

    512 KiB published in one write is eight times max_pending, but fits the loopback socket
    buffers: a subscriber that reads afterwards gets every message.
    """
    sub = await WireClient.connect(slow_server.port, {})
    await sub.send("SUB burst 1\r\nPING\r\n")
    await sub.expect("PONG")
    pub = await WireClient.connect(slow_server.port, {})
    try:
        frame = b"PUB burst 8192\r\n" + b"b" * 8192 + b"\r\n"
        await pub.send(frame * 64 + b"PING\r\n")
        await pub.expect("PONG")
        for _ in range(64):
            line, data = await sub.msg()
            assert line == "MSG burst 1 8192"
            assert len(data) == 8192
        await sub.send("PING\r\n")
        await sub.expect("PONG")
    finally:
        await sub.close()
        await pub.close()
    assert "Slow Consumer" not in slow_server.log()


# --- ping_interval / ping_max: stale connection --------------------------------------------


async def test_stale_connection(ping_server: ServerProcess) -> None:
    """PINGs every 200 ms; after ping_max unanswered ones the server gives up."""
    client = await WireClient.connect(ping_server.port, {})
    started = time.monotonic()
    lines = [await client.line(timeout=3) for _ in range(3)]
    elapsed = time.monotonic() - started
    assert lines == ["PING", "PING", "-ERR 'Stale Connection'"]
    assert 0.4 <= elapsed <= 2.5, elapsed
    assert await client.closed()


async def test_nats_py_answers_pings_and_stays(ping_server: ServerProcess) -> None:
    disconnects: list[str] = []

    async def on_disconnect() -> None:
        disconnects.append("disconnected")

    nc = await connect_once(ping_server.url, disconnected_cb=on_disconnect)
    try:
        # Seven ping intervals: well beyond ping_max (2) unanswered ones.
        await asyncio.sleep(1.5)
        assert nc.is_connected
        assert disconnects == []
        sub = await nc.subscribe("limits.alive")
        await nc.publish("limits.alive", b"still here")
        assert (await sub.next_msg(timeout=2)).data == b"still here"
    finally:
        await nc.close()


# --- max_connections -----------------------------------------------------------------------


async def test_max_connections(conn_server: ServerProcess) -> None:
    first = await WireClient.connect(conn_server.port, {})
    second = await connect_once(conn_server.url)
    try:
        third = await WireClient.connect(conn_server.port)  # the INFO comes first
        assert await third.line() == "-ERR 'maximum connections exceeded'"
        assert await third.closed()
        with pytest.raises((OSError, nats.errors.Error)):
            extra = await connect_once(conn_server.url)
            await extra.close()
        # A freed slot can be taken again.
        await first.close()
        await asyncio.sleep(0.2)
        again = await WireClient.connect(conn_server.port, {})
        await again.send("PING\r\n")
        await again.expect("PONG")
        await again.close()
    finally:
        await second.close()
