"""TLS-first (``tls { handshake_first: true }``), both servers alike.

The server waits for the client's TLS handshake right after accept and sends its INFO only
inside TLS. nats-py with ``tls_handshake_first`` connects; a client expecting the usual
plaintext INFO gets nothing and is dropped once the TLS timeout passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import ssl
import time
from collections.abc import Iterator

import pytest

from conftest import BOTH, start_server
from headwater.testing import ServerProcess
from support.authclients import connect_once
from support.certs import TestPKI
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"

TLS_TIMEOUT = 1.0


@pytest.fixture(params=BOTH, scope="module")
def first_server(
    request: pytest.FixtureRequest, pki: TestPKI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    conf = tmp_path_factory.mktemp("tls-first") / "tls-first.conf"
    conf.write_text(
        "listen: 127.0.0.1:-1\n"
        "tls {\n"
        f'    cert_file: "{pki.server_cert}"\n'
        f'    key_file: "{pki.server_key}"\n'
        f"    timeout: {TLS_TIMEOUT}\n"
        "    handshake_first: true\n"
        "}\n"
    )
    yield from start_server(request.param, args=["-c", str(conf)])


async def test_tls_first_client_connects(first_server: ServerProcess, pki: TestPKI) -> None:
    nc = await connect_once(first_server.url, tls=pki.client_context(), tls_handshake_first=True)
    try:
        assert nc.connected_server_version is not None
        sub = await nc.subscribe("first.>")
        await nc.publish("first.hello", b"encrypted")
        msg = await sub.next_msg(timeout=2)
        assert (msg.subject, msg.data) == ("first.hello", b"encrypted")
    finally:
        await nc.close()


async def test_client_hello_waiting_at_accept(first_server: ServerProcess, pki: TestPKI) -> None:
    """Clients whose ClientHello is already queued when the server accepts them still connect.

    The server is stopped while they connect: the kernel completes their TCP handshakes and
    queues their ClientHellos, so each connection is handed to the server with data waiting.
    (This raced before: uvloop read that data as plaintext before the TLS layer was in place.)
    """
    assert first_server.proc is not None
    os.kill(first_server.proc.pid, signal.SIGSTOP)
    try:
        pending = [
            asyncio.create_task(
                connect_once(
                    first_server.url,
                    tls=pki.client_context(),
                    tls_handshake_first=True,
                    connect_timeout=10,
                )
            )
            for _ in range(4)
        ]
        await asyncio.sleep(0.5)
    finally:
        os.kill(first_server.proc.pid, signal.SIGCONT)
    clients = await asyncio.gather(*pending)
    for nc in clients:
        await nc.flush(timeout=5)
        await nc.close()


async def test_info_comes_inside_tls(first_server: ServerProcess, pki: TestPKI) -> None:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", first_server.port, ssl=pki.client_context(), server_hostname="localhost"
    )
    try:
        line = await asyncio.wait_for(reader.readline(), 5)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError, ssl.SSLError):
            await writer.wait_closed()
    assert line.startswith(b"INFO "), line
    assert json.loads(line[5:]).get("tls_required") is True


async def test_client_without_tls_first_fails(first_server: ServerProcess, pki: TestPKI) -> None:
    with pytest.raises(Exception):  # noqa: B017 - nats-py reports a timeout or a dropped socket
        nc = await connect_once(first_server.url, tls=pki.client_context())
        await nc.close()


async def test_plaintext_peer_gets_nothing_and_is_dropped(first_server: ServerProcess) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", first_server.port)
    started = time.monotonic()
    received = b""
    try:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await asyncio.wait_for(reader.read(4096), TLS_TIMEOUT + 4):
                received += chunk
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
    elapsed = time.monotonic() - started
    assert b"INFO" not in received
    assert TLS_TIMEOUT * 0.8 <= elapsed < TLS_TIMEOUT + 3, elapsed
