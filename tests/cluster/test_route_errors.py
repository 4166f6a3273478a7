"""Misconfigured routes: logged, retried where nats-server retries, and never fatal.

The log lines checked are nats-server 2.15's (see each test); every server keeps serving its
clients throughout. Single servers here are started by hand because the point is a cluster
that cannot form.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import pytest
from cluster.helpers import KINDS, connect, drain_for, inbox

from headwater.testing import ServerProcess, free_ports, monitor_json

pytestmark = pytest.mark.timeout(30)


def route_server(name: str, cluster_name: str, port: int, *extra: str, http: int = -1) -> list[str]:
    """Arguments for a server named ``name`` listening for routes on ``port``."""
    return [
        "-m",
        str(http),
        "--server_name",
        name,
        "--cluster_name",
        cluster_name,
        "--cluster",
        f"nats://127.0.0.1:{port}",
        *extra,
    ]


@pytest.fixture
def started() -> Iterator[list[ServerProcess]]:
    """Servers a test starts; stopped and removed after it."""
    servers: list[ServerProcess] = []
    yield servers
    for srv in servers:
        srv.cleanup()


def start(servers: list[ServerProcess], kind: str, args: list[str]) -> ServerProcess:
    srv = ServerProcess(kind, args)
    servers.append(srv)
    return srv.start()


def log_count(srv: ServerProcess, pattern: str) -> int:
    return len(re.findall(pattern, srv.log()))


async def wait_log(srv: ServerProcess, pattern: str, count: int = 1, timeout: float = 5) -> int:
    """Wait until ``pattern`` occurs ``count`` times in ``srv``'s log; return how often."""
    deadline = time.monotonic() + timeout
    while (seen := log_count(srv, pattern)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{pattern!r} seen {seen}/{count} times:\n{srv.log()}")
        await asyncio.sleep(0.05)
    return seen


def num_routes(srv: ServerProcess) -> int:
    return int(monitor_json(srv.http_port, "/routez")["num_routes"])


async def assert_serves_clients(srv: ServerProcess) -> None:
    assert srv.running, srv.log()
    nc = await connect(srv.url)
    try:
        box = await inbox(nc, "still.here")
        await nc.publish("still.here", b"yes")
        await nc.flush()
        assert [m.data for m in await drain_for(box, 0.1)] == [b"yes"]
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_route_to_self_is_dropped(kind: str, started: list[ServerProcess]) -> None:
    """nats-server dials itself, sees its own id and closes: "... closed: Duplicate Route"."""
    (port,) = free_ports(1)
    url = f"nats://127.0.0.1:{port}"
    srv = start(started, kind, route_server("a", "c", port, "--routes", url))
    await wait_log(srv, r"Duplicate Route")
    deadline = time.monotonic() + 3
    while num_routes(srv) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert num_routes(srv) == 0
    await assert_serves_clients(srv)


@pytest.mark.parametrize("kind", KINDS)
async def test_cluster_name_mismatch_is_refused(kind: str, started: list[ServerProcess]) -> None:
    """The accepting side logs 'Rejecting connection, cluster name "two" does not match
    "one"' and closes; the dialling side logs the same text as a "Route Error" and retries.
    nats-server's b1 may also dial b2 back (it learns b2's route URL from its INFO), and b2
    then closes that one as a "Cluster Name Conflict" before its own dial's error is read:
    either says the names clash."""
    p1, p2 = free_ports(2)
    one = start(started, kind, route_server("b1", "one", p1))
    two = start(started, kind, route_server("b2", "two", p2, "--routes", f"nats://127.0.0.1:{p1}"))
    mismatch = r'cluster name "two" does not match "one"'
    await wait_log(one, mismatch)
    await wait_log(two, mismatch + "|Cluster Name Conflict")
    for _ in range(5):  # sampled while b2 keeps retrying: no route ever stands
        assert (num_routes(one), num_routes(two)) == (0, 0)
        await asyncio.sleep(0.05)
    await assert_serves_clients(one)
    await assert_serves_clients(two)

    # No interest crosses: a subscriber on b1 never sees b2's publish.
    nc1, nc2 = await connect(one.url), await connect(two.url)
    try:
        box = await inbox(nc1, "across")
        await nc1.flush()
        await nc2.publish("across", b"x")
        await nc2.flush()
        assert await drain_for(box, 0.3) == []
    finally:
        await nc1.close()
        await nc2.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_route_to_an_http_port_is_a_protocol_violation_retried(
    kind: str, started: list[ServerProcess]
) -> None:
    """Dialling a monitoring port gets an HTTP 400 back: nats-server logs "Router parser
    ERROR ..." and "Router connection closed: Protocol Violation", then tries again."""
    cluster_port, http_port = free_ports(2)
    # The route points at this server's own monitoring port.
    route = f"nats://127.0.0.1:{http_port}"
    srv = start(
        started, kind, route_server("h", "c", cluster_port, "--routes", route, http=http_port)
    )
    first = await wait_log(srv, r"Protocol Violation")
    await wait_log(srv, r"Protocol Violation", count=first + 1, timeout=5)
    assert num_routes(srv) == 0
    await assert_serves_clients(srv)


@pytest.mark.parametrize("kind", KINDS)
async def test_route_to_a_closed_port_is_retried_until_it_opens(
    kind: str, started: list[ServerProcess]
) -> None:
    """nats-server logs "Error trying to connect to route (attempt 1): ... connection refused"
    and keeps dialling (every second); once a server listens there, the route forms."""
    p1, p2 = free_ports(2)
    dialler = start(
        started, kind, route_server("d1", "c", p1, "--routes", f"nats://127.0.0.1:{p2}")
    )
    await wait_log(dialler, r"Error trying to connect to route")
    await asyncio.sleep(0.5)
    await assert_serves_clients(dialler)

    late = start(started, kind, route_server("d2", "c", p2))
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        names = {r["remote_name"] for r in monitor_json(dialler.http_port, "/routez")["routes"]}
        if "d2" in names:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"the route to d2 never formed:\n{dialler.log()}")
    await assert_serves_clients(late)


async def test_a_silent_peer_is_dropped_and_dialled_again(started: list[ServerProcess]) -> None:
    """A route to something that accepts and never speaks (a stuck process, a port forwarder
    with nothing behind it) is closed when the handshake time runs out (twice the route
    authorization timeout) and dialled again; the server serves clients all along.
    Headwater only: nats-server waits on its ping timers instead, much longer."""
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    silent_port = listener.sockets[0].getsockname()[1]
    try:
        (port,) = free_ports(1)
        route = f"nats://127.0.0.1:{silent_port}"
        srv = start(started, "headwater", route_server("q", "c", port, "--routes", route))
        await wait_log(srv, r"no INFO within the handshake time", count=2, timeout=12)
        assert num_routes(srv) == 0
        await assert_serves_clients(srv)
    finally:
        listener.close()
