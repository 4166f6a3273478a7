"""Route TLS and route authorization, Headwater to Headwater and to nats-server.

Routes start TLS at once (no plaintext INFO first) and, with ``verify``, demand the other
server's certificate; ``cluster { authorization }`` refuses a dialling server with the wrong
password ("Authorization Violation" on both sides' logs). Each pair is one Headwater server
accepting and the other kind dialling, so both directions of the handshake meet the reference.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster.helpers import connect, drain_for, inbox

from headwater.testing import ServerProcess, free_ports, monitor_json
from support.certs import TestPKI, make_pki
from support.certs import pki_fixture as pki_fixture  # registers the session fixture "pki"

pytestmark = pytest.mark.timeout(40)

DIALLERS = ["headwater", pytest.param("nats", marks=pytest.mark.differential)]


@pytest.fixture
def started() -> Iterator[list[ServerProcess]]:
    servers: list[ServerProcess] = []
    yield servers
    for srv in servers:
        srv.cleanup()


def _start(servers: list[ServerProcess], kind: str, conf: Path) -> ServerProcess:
    srv = ServerProcess(kind, ["-c", str(conf)])
    servers.append(srv)
    return srv.start()


def _conf(path: Path, name: str, port: int, cluster_extra: str) -> Path:
    path.write_text(
        f"""
        listen: 127.0.0.1:-1
        http: 127.0.0.1:-1
        server_name: {name}
        cluster {{
          name: sec
          listen: 127.0.0.1:{port}
          {cluster_extra}
        }}
        """
    )
    return path


def _route_names(srv: ServerProcess) -> set[str]:
    return {r["remote_name"] for r in monitor_json(srv.http_port, "/routez")["routes"]}


async def _wait_route(a: ServerProcess, b_name: str, timeout: float = 8) -> None:
    deadline = time.monotonic() + timeout
    while b_name not in _route_names(a):
        if time.monotonic() > deadline:
            raise AssertionError(f"no route to {b_name}:\n{a.log()}")
        await asyncio.sleep(0.1)


async def _carries_messages(a: ServerProcess, b: ServerProcess) -> None:
    sub, pub = await connect(a.url), await connect(b.url)
    try:
        box = await inbox(sub, "secure.x")
        await sub.flush()
        deadline = time.monotonic() + 5
        got: list = []
        while not got and time.monotonic() < deadline:
            await pub.publish("secure.x", b"over the route")
            await pub.flush()
            got = await drain_for(box, 0.2)
        assert got and got[0].data == b"over the route"
    finally:
        await sub.close()
        await pub.close()


@pytest.mark.parametrize("dialler", DIALLERS)
async def test_tls_routes_with_verification(
    dialler: str, pki: TestPKI, tmp_path: Path, started: list[ServerProcess]
) -> None:
    p1, p2 = free_ports(2)
    tls = (
        f'tls {{ cert_file: "{pki.route_cert}", key_file: "{pki.route_key}", '
        f'ca_file: "{pki.ca_cert}", verify: true }}'
    )
    a = _start(started, "headwater", _conf(tmp_path / "a.conf", "a", p1, tls))
    b = _start(
        started,
        dialler,
        _conf(tmp_path / "b.conf", "b", p2, f"{tls}\nroutes: [nats-route://127.0.0.1:{p1}]"),
    )
    await _wait_route(a, "b")
    await _carries_messages(a, b)


async def test_a_route_without_the_cas_trust_is_refused(
    pki: TestPKI, tmp_path: Path, started: list[ServerProcess]
) -> None:
    """The dialler trusts no CA that signed the accepting server: no route, logged, retried."""
    stranger = make_pki(tmp_path / "stranger")
    p1, p2 = free_ports(2)
    tls = (
        f'tls {{ cert_file: "{pki.route_cert}", key_file: "{pki.route_key}", '
        f'ca_file: "{pki.ca_cert}", verify: true }}'
    )
    other = (
        f'tls {{ cert_file: "{stranger.route_cert}", key_file: "{stranger.route_key}", '
        f'ca_file: "{stranger.ca_cert}", verify: true }}'
    )
    a = _start(started, "headwater", _conf(tmp_path / "a.conf", "a", p1, tls))
    b = _start(
        started,
        "headwater",
        _conf(tmp_path / "b.conf", "b", p2, f"{other}\nroutes: [nats-route://127.0.0.1:{p1}]"),
    )
    deadline = time.monotonic() + 5
    while "Error trying to connect to route" not in b.log():
        assert time.monotonic() < deadline, b.log()
        await asyncio.sleep(0.1)
    assert _route_names(a) == set() and _route_names(b) == set()


@pytest.mark.parametrize("dialler", DIALLERS)
async def test_route_authorization(
    dialler: str, tmp_path: Path, started: list[ServerProcess]
) -> None:
    p1, p2, p3 = free_ports(3)
    # The accepting side keeps a bcrypt hash (checked off the loop); "s3cret" is the password.
    hashed = "$2b$04$hFJDhtbQI7DAMZlr/j904eVvq33qfzoLf7cfWGXhEhO/IBjb3iACO"
    auth = f'authorization {{ user: route, password: "{hashed}", timeout: 2 }}'
    a = _start(started, "headwater", _conf(tmp_path / "a.conf", "a", p1, auth))
    good = _start(
        started,
        dialler,
        _conf(tmp_path / "g.conf", "g", p2, f"routes: [nats-route://route:s3cret@127.0.0.1:{p1}]"),
    )
    await _wait_route(a, "g")
    await _carries_messages(a, good)
    bad = _start(
        started,
        dialler,
        _conf(tmp_path / "x.conf", "x", p3, f"routes: [nats-route://route:wrong@127.0.0.1:{p1}]"),
    )
    deadline = time.monotonic() + 5
    while "Authorization Violation" not in a.log():
        assert time.monotonic() < deadline, a.log()
        await asyncio.sleep(0.1)
    assert "x" not in _route_names(a)
    assert bad.running
