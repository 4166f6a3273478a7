"""Random and malformed bytes never crash the server nor grow its memory without bound."""

from __future__ import annotations

import asyncio
import socket
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.testing import ServerProcess

VERBS = [b"PUB", b"HPUB", b"SUB", b"UNSUB", b"PING", b"PONG", b"CONNECT", b"INFO", b"+OK", b"-ERR"]

fragments = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(VERBS).map(lambda v: v + b" "),
    st.sampled_from([b"\r\n", b"\n", b" ", b"\t", b"foo", b"*", b">", b"..", b"{}", b"-1"]),
    st.integers(min_value=0, max_value=2_000_000).map(lambda n: str(n).encode()),
)
garbage = st.lists(fragments, max_size=40).map(b"".join)


def _exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` and a PING; what came back, or b"" when the server closed or stayed silent
    (a PUB waiting for more payload bytes is silent by design). A busy 2-core CI machine may be
    slow to answer, which is not a failure here: the server process must simply stay up."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.settimeout(5)
        try:
            sock.recv(4096)  # INFO
            sock.settimeout(1)
            sock.sendall(data + b"\r\nPING\r\n")
            return sock.recv(65536)
        except (ConnectionError, TimeoutError, OSError):
            return b""


def _server_alive(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.settimeout(2)
        sock.recv(4096)
        sock.sendall(b"CONNECT {}\r\nPING\r\n")
        data = b""
        while b"PONG" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                return False
            data += chunk
        return True


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=garbage)
def test_garbage_never_kills_the_server(shared_server: ServerProcess, data: bytes) -> None:
    reply = _exchange(shared_server.port, data)
    # Whatever came back is protocol: a PONG, an -ERR, a MSG, or nothing (closed).
    assert shared_server.proc is not None and shared_server.proc.poll() is None
    for line in reply.split(b"\r\n"):
        if line.startswith(b"-ERR"):
            assert line.endswith(b"'"), line


def test_server_survives_the_fuzzing(shared_server: ServerProcess) -> None:
    assert _server_alive(shared_server.port)


async def test_slow_trickle_of_a_huge_line_is_cut_off(shared_server: ServerProcess) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", shared_server.port)
    await reader.readline()
    writer.write(b"SUB ")
    for _ in range(42):  # just past the 4096-byte control-line limit, 100 bytes at a time
        writer.write(b"x" * 100)
        await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 5)
    assert line.startswith(b"-ERR 'maximum control line exceeded'")
    writer.close()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _send_and_drop(port: int, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(data)


def test_memory_stays_bounded_under_malformed_floods(shared_server: ServerProcess) -> None:
    assert shared_server.proc is not None
    pid = shared_server.proc.pid
    half_payload = b"PUB foo 1048576\r\n" + b"x" * 500_000
    for _ in range(20):
        _send_and_drop(shared_server.port, half_payload)
    time.sleep(0.2)
    before = _rss_kib(pid)
    for _ in range(100):
        _send_and_drop(shared_server.port, half_payload)
        _send_and_drop(shared_server.port, b"SUB " + b"y" * 4000)
    time.sleep(0.2)
    assert _server_alive(shared_server.port)
    after = _rss_kib(pid)
    assert after - before < 50 * 1024, (before, after)
