"""Client TLS, from flags and from a ``tls {}`` block, against Headwater and nats-server.

The server sends a plaintext INFO with ``tls_required`` and then expects a TLS handshake. A
client trusting the test CA connects and exchanges messages; one that does not trust it, or
that keeps talking plaintext, gets nowhere; with ``verify`` a client certificate is required.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client

from conftest import BOTH
from headwater.testing import ServerProcess
from support.authclients import connect_once
from support.certs import TestPKI, make_pki
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"


def _serve(kind: str, args: list[str]) -> Iterator[ServerProcess]:
    srv = ServerProcess(kind, args=args)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


def _flag_args(pki: TestPKI, verify: bool) -> list[str]:
    args = ["--tls", "--tlscert", str(pki.server_cert), "--tlskey", str(pki.server_key)]
    if verify:
        args += ["--tlsverify", "--tlscacert", str(pki.ca_cert)]
    return args


def _config_args(pki: TestPKI, directory: Path, verify: bool) -> list[str]:
    conf = directory / ("verify.conf" if verify else "tls.conf")
    conf.write_text(
        "listen: 127.0.0.1:-1\n"
        "tls {\n"
        f'    cert_file: "{pki.server_cert}"\n'
        f'    key_file: "{pki.server_key}"\n'
        f'    ca_file: "{pki.ca_cert}"\n'
        f"    verify: {'true' if verify else 'false'}\n"
        "    timeout: 2\n"
        "}\n"
    )
    return ["-c", str(conf)]


# One server per kind and source of settings (flags or config file), shared by the module.
SERVERS = [
    pytest.param((kind.values[0], source), id=f"{kind.id}-{source}", marks=kind.marks)
    for kind in BOTH
    for source in ("flags", "config")
]


@pytest.fixture(params=SERVERS, scope="module")
def tls_server(
    request: pytest.FixtureRequest, pki: TestPKI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from _start(request.param, pki, tmp_path_factory, verify=False)


@pytest.fixture(params=SERVERS, scope="module")
def verify_server(
    request: pytest.FixtureRequest, pki: TestPKI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from _start(request.param, pki, tmp_path_factory, verify=True)


def _start(
    which: tuple[str, str],
    pki: TestPKI,
    tmp_path_factory: pytest.TempPathFactory,
    verify: bool,
) -> Iterator[ServerProcess]:
    kind, source = which
    if source == "flags":
        args = _flag_args(pki, verify)
    else:
        args = _config_args(pki, tmp_path_factory.mktemp(f"tls-{kind}"), verify)
    yield from _serve(kind, args)


async def _pub_sub(nc: Client) -> None:
    sub = await nc.subscribe("tls.>")
    await nc.publish("tls.hello", b"encrypted")
    msg = await sub.next_msg(timeout=2)
    assert (msg.subject, msg.data) == ("tls.hello", b"encrypted")


async def _refused(url: str, **options: Any) -> BaseException:
    """The connect fails fast with a TLS or connection error; a hang is not a refusal."""
    with pytest.raises((OSError, nats.errors.Error)) as excinfo:
        nc = await connect_once(url, **options)
        await nc.close()
    assert not isinstance(excinfo.value, TimeoutError), excinfo.value
    return excinfo.value


async def _plaintext_info(port: int) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        line = await asyncio.wait_for(reader.readline(), 5)
    finally:
        writer.close()
        await writer.wait_closed()
    assert line.startswith(b"INFO "), line
    return json.loads(line[5:])


# --- TLS without client certificates ----------------------------------------------------


async def test_info_says_tls_required(tls_server: ServerProcess) -> None:
    info = await _plaintext_info(tls_server.port)
    assert info["tls_required"] is True
    # Without verify the flag is left out, and TLS is not optional (no tls_available).
    assert "tls_verify" not in info
    assert "tls_available" not in info


async def test_client_trusting_the_ca_connects(tls_server: ServerProcess, pki: TestPKI) -> None:
    nc = await connect_once(f"tls://127.0.0.1:{tls_server.port}", tls=pki.client_context())
    try:
        await _pub_sub(nc)
    finally:
        await nc.close()


async def test_client_by_hostname_connects(tls_server: ServerProcess, pki: TestPKI) -> None:
    # The server certificate names localhost too; hostname checking stays on.
    nc = await connect_once(f"tls://localhost:{tls_server.port}", tls=pki.client_context())
    await nc.close()


async def test_nats_url_upgrades_when_the_server_requires_tls(
    tls_server: ServerProcess, pki: TestPKI
) -> None:
    # nats-py reads tls_required from INFO and upgrades a nats:// URL with the given context.
    nc = await connect_once(f"nats://127.0.0.1:{tls_server.port}", tls=pki.client_context())
    try:
        await _pub_sub(nc)
    finally:
        await nc.close()


async def test_client_not_trusting_the_ca_fails(tls_server: ServerProcess) -> None:
    exc = await _refused(f"nats://127.0.0.1:{tls_server.port}")
    assert isinstance(exc, ssl.SSLCertVerificationError), repr(exc)


async def test_plaintext_client_is_dropped(tls_server: ServerProcess) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", tls_server.port)
    await reader.readline()  # the plaintext INFO
    writer.write(b'CONNECT {"verbose":false}\r\nPING\r\n')
    await writer.drain()
    started = time.monotonic()
    # The bytes are no TLS handshake: the server closes at once, without a PONG (not after
    # the 2 s handshake timeout, which would mean the bytes never reached the TLS layer).
    rest = b""
    try:
        with contextlib.suppress(ConnectionError):
            while chunk := await asyncio.wait_for(reader.read(4096), 5):
                rest += chunk
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    assert b"PONG" not in rest
    assert time.monotonic() - started < 1.5


async def test_many_tls_clients_at_once(tls_server: ServerProcess, pki: TestPKI) -> None:
    """Handshakes racing with the first CONNECT+PING: every reply must come back encrypted."""
    ctx = pki.client_context()
    url = f"tls://127.0.0.1:{tls_server.port}"
    clients = await asyncio.gather(*(connect_once(url, tls=ctx) for _ in range(24)))
    try:
        for nc in clients:
            await nc.flush(timeout=2)
    finally:
        for nc in clients:
            await nc.close()


# --- verify: client certificates required -----------------------------------------------


async def test_verify_info_flags(verify_server: ServerProcess) -> None:
    info = await _plaintext_info(verify_server.port)
    assert info["tls_required"] is True
    assert info["tls_verify"] is True


async def test_verify_with_client_cert_connects(verify_server: ServerProcess, pki: TestPKI) -> None:
    nc = await connect_once(
        f"tls://127.0.0.1:{verify_server.port}", tls=pki.client_context(with_cert=True)
    )
    try:
        await _pub_sub(nc)
    finally:
        await nc.close()


async def test_verify_without_client_cert_is_refused(
    verify_server: ServerProcess, pki: TestPKI
) -> None:
    await _refused(f"tls://127.0.0.1:{verify_server.port}", tls=pki.client_context())


async def test_verify_rejects_a_cert_from_another_ca(
    verify_server: ServerProcess, pki: TestPKI, tmp_path: Path
) -> None:
    stranger = make_pki(tmp_path / "other")
    ctx = pki.client_context()
    ctx.load_cert_chain(str(stranger.client_cert), str(stranger.client_key))
    await _refused(f"tls://127.0.0.1:{verify_server.port}", tls=ctx)


# --- max_connections on a TLS server ---------------------------------------------------


@pytest.mark.parametrize("kind", BOTH)
async def test_refusal_at_max_connections_is_plaintext(
    kind: str, pki: TestPKI, tmp_path: Path
) -> None:
    """The refused client is told before any handshake: INFO, then -ERR, then the close."""
    args = _config_args(pki, tmp_path, verify=False)
    conf = Path(args[1])
    conf.write_text(conf.read_text() + "max_connections: 1\n")
    with ServerProcess(kind, args=args) as srv:
        holder = await connect_once(f"tls://127.0.0.1:{srv.port}", tls=pki.client_context())
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
            try:
                assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"INFO ")
                err = await asyncio.wait_for(reader.readline(), 5)
                assert err == b"-ERR 'maximum connections exceeded'\r\n"
                assert await asyncio.wait_for(reader.read(), 5) == b""
            finally:
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()
        finally:
            await holder.close()
