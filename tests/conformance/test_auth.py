"""Client authentication (token, user/password, users list, auth timeout), both servers alike.

Each scenario runs against Headwater and nats-server with the same flags or config file; the
observable contract is what nats-py raises and what a raw peer reads on the wire.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import BOTH
from headwater.testing import ServerProcess
from support.authclients import connect_once, refused, roundtrip
from support.wire import WireClient

TOKEN = "s3cret-token"
USERS_CONF = """\
listen: 127.0.0.1:-1
authorization {
    timeout: 0.5
    users: [
        {user: alice, password: wonderland}
        {user: bob, password: "builder pass"}
    ]
}
"""


def _serve(kind: str, args: list[str]) -> Iterator[ServerProcess]:
    srv = ServerProcess(kind, args=args)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture(params=BOTH, scope="module")
def token_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    yield from _serve(request.param, ["--auth", TOKEN])


@pytest.fixture(params=BOTH, scope="module")
def userpass_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    yield from _serve(request.param, ["--user", "derek", "--pass", "T0pS3cr3t"])


@pytest.fixture(params=BOTH, scope="module")
def users_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    conf = tmp_path_factory.mktemp("auth") / "users.conf"
    conf.write_text(USERS_CONF)
    yield from _serve(request.param, ["-c", str(conf)])


async def _wire_violation(port: int, connect: dict[str, Any]) -> None:
    client = await WireClient.connect(port, connect)
    assert client.info.get("auth_required") is True
    await client.send("PING\r\n")
    assert await client.expect("-ERR") == "-ERR 'Authorization Violation'"
    assert await client.closed()


# --- token ---------------------------------------------------------------------------------


async def test_token_good_connects(token_server: ServerProcess) -> None:
    nc = await connect_once(token_server.url, token=TOKEN)
    try:
        await roundtrip(nc, "auth.token")
    finally:
        await nc.close()


@pytest.mark.parametrize("token", [None, "wrong"], ids=["missing", "wrong"])
async def test_token_bad_is_refused(token_server: ServerProcess, token: str | None) -> None:
    await refused(token_server.url, **({"token": token} if token else {}))


async def test_token_violation_on_the_wire(token_server: ServerProcess) -> None:
    await _wire_violation(token_server.port, {"auth_token": "wrong"})
    await _wire_violation(token_server.port, {})


async def test_operation_before_connect_is_a_violation(token_server: ServerProcess) -> None:
    client = await WireClient.connect(token_server.port)
    await client.send("SUB early 1\r\n")
    assert await client.expect("-ERR") == "-ERR 'Authorization Violation'"
    assert await client.closed()


async def test_second_connect_is_authenticated_again(token_server: ServerProcess) -> None:
    """A later CONNECT with bad credentials closes an authenticated connection."""
    client = await WireClient.connect(token_server.port, {"auth_token": TOKEN})
    await client.send("PING\r\n")
    await client.expect("PONG")
    await client.send('CONNECT {"verbose":false,"auth_token":"wrong"}\r\nPING\r\n')
    assert await client.expect("-ERR") == "-ERR 'Authorization Violation'"
    assert await client.closed()


async def test_second_connect_without_credentials_keeps_identity(
    token_server: ServerProcess,
) -> None:
    client = await WireClient.connect(token_server.port, {"auth_token": TOKEN})
    await client.send('CONNECT {"verbose":false}\r\nPING\r\n')
    await client.expect("PONG")
    await client.close()


# --- --user / --pass -----------------------------------------------------------------------


async def test_user_pass_flags(userpass_server: ServerProcess) -> None:
    nc = await connect_once(userpass_server.url, user="derek", password="T0pS3cr3t")
    try:
        await roundtrip(nc, "auth.userpass")
    finally:
        await nc.close()
    # Credentials in the URL work the same.
    nc = await connect_once(f"nats://derek:T0pS3cr3t@127.0.0.1:{userpass_server.port}")
    await nc.close()


@pytest.mark.parametrize(
    "creds",
    [{}, {"user": "derek", "password": "nope"}, {"user": "nobody", "password": "T0pS3cr3t"}],
    ids=["missing", "bad-password", "bad-user"],
)
async def test_user_pass_refused(userpass_server: ServerProcess, creds: dict[str, str]) -> None:
    await refused(userpass_server.url, **creds)


async def test_user_pass_violation_on_the_wire(userpass_server: ServerProcess) -> None:
    await _wire_violation(userpass_server.port, {"user": "derek", "pass": "nope"})


# --- authorization { users: [...] } --------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "wonderland"), ("bob", "builder pass")], ids=["a", "b"]
)
async def test_users_list_each_user_connects(
    users_server: ServerProcess, user: str, password: str
) -> None:
    nc = await connect_once(users_server.url, user=user, password=password)
    try:
        await roundtrip(nc, f"auth.users.{user}")
    finally:
        await nc.close()


async def test_users_list_refuses_mixed_credentials(users_server: ServerProcess) -> None:
    # alice's name with bob's password must not pass.
    await refused(users_server.url, user="alice", password="builder pass")
    await _wire_violation(users_server.port, {"user": "carol", "pass": "wonderland"})


async def test_auth_timeout(users_server: ServerProcess) -> None:
    """A peer that never sends CONNECT is told and dropped after authorization.timeout."""
    client = await WireClient.connect(users_server.port)
    assert client.info.get("auth_required") is True
    started = time.monotonic()
    line = await client.line(timeout=5)
    elapsed = time.monotonic() - started
    assert line == "-ERR 'Authentication Timeout'"
    assert 0.3 <= elapsed <= 2.0, elapsed
    assert await client.closed()


async def test_connect_in_time_disarms_the_auth_timer(users_server: ServerProcess) -> None:
    client = await WireClient.connect(users_server.port, {"user": "alice", "pass": "wonderland"})
    await client.send("PING\r\n")
    await client.expect("PONG")
    # Well past the 0.5 s timeout the connection still answers.
    await asyncio.sleep(0.8)
    await client.send("PING\r\n")
    await client.expect("PONG")
    await client.close()
