"""bcrypt-hashed passwords and tokens, both servers alike.

nats-server treats a configured password or token of the form ``$2<a|b|x|y>$<cost>$...`` as a
bcrypt hash: the client sends the real secret, and the hash text itself is no credential.
Hashes are made here with the ``bcrypt`` package (``$2a$`` as nats-server's ``mkpasswd``
writes them, and the ``$2b$``/``$2y$`` variants other tools write).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from nats.aio.client import Client

from conftest import BOTH
from headwater.testing import ServerProcess
from support.authclients import connect_once, refused, roundtrip
from support.wire import WireClient

PASSWORD = "correct horse"
TOKEN = "battery staple"
BOB_PASSWORD = "plain bob"
LONG_PASSWORD = "x" * 72
"""bcrypt reads 72 bytes; nats-server ignores what a client sends past them."""


def _hash(secret: str, prefix: str = "2a", cost: int = 10) -> str:
    hashed = bcrypt.hashpw(secret.encode(), bcrypt.gensalt(cost, b"2b")).decode()
    # $2a$, $2b$ and $2y$ name the same algorithm; the package writes only the first two.
    return f"${prefix}{hashed[3:]}"


PASSWORD_HASH = _hash(PASSWORD)
TOKEN_HASH = _hash(TOKEN, "2b")
ALICE_HASH = _hash(PASSWORD, "2y")
LONG_HASH = _hash(LONG_PASSWORD, "2a", 4)
# Cost 12: about 0.25 s of CPU per check, a window long enough to see round trips go by.
SLOW_HASH = _hash(PASSWORD, "2a", 12)


def _serve(kind: str, args: list[str]) -> Iterator[ServerProcess]:
    srv = ServerProcess(kind, args=args)
    srv.start()
    try:
        yield srv
    finally:
        srv.cleanup()


def _conf(tmp: Path, body: str) -> str:
    path = tmp / "server.conf"
    path.write_text(f"listen: 127.0.0.1:-1\n{body}\n")
    return str(path)


@pytest.fixture(params=BOTH, scope="module")
def password_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    body = f'authorization {{ user: alice, password: "{PASSWORD_HASH}" }}'
    yield from _serve(request.param, ["-c", _conf(tmp_path_factory.mktemp("pw"), body)])


@pytest.fixture(params=BOTH, scope="module")
def token_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    body = f'authorization {{ token: "{TOKEN_HASH}" }}'
    yield from _serve(request.param, ["-c", _conf(tmp_path_factory.mktemp("tok"), body)])


@pytest.fixture(params=BOTH, scope="module")
def users_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    body = f"""authorization {{
    users: [
        {{user: alice, password: "{ALICE_HASH}"}}
        {{user: bob, password: "{BOB_PASSWORD}"}}
        {{user: carol, password: "{LONG_HASH}"}}
    ]
}}"""
    yield from _serve(request.param, ["-c", _conf(tmp_path_factory.mktemp("users"), body)])


@pytest.fixture(params=BOTH, scope="module")
def flags_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    yield from _serve(request.param, ["--user", "derek", "--pass", PASSWORD_HASH])


@pytest.fixture(params=BOTH, scope="module")
def token_flag_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    yield from _serve(request.param, ["--auth", TOKEN_HASH])


# --- authorization { user, password } -------------------------------------------------------


async def test_password_hash_accepts_the_real_password(password_server: ServerProcess) -> None:
    nc = await connect_once(password_server.url, user="alice", password=PASSWORD)
    try:
        await roundtrip(nc, "bcrypt.password")
    finally:
        await nc.close()


@pytest.mark.parametrize(
    "password", [PASSWORD_HASH, "wrong", ""], ids=["the-hash-itself", "wrong", "empty"]
)
async def test_password_hash_refuses(password_server: ServerProcess, password: str) -> None:
    await refused(password_server.url, user="alice", password=password)


async def test_password_hash_refuses_on_the_wire(password_server: ServerProcess) -> None:
    """The refusal is nats-server's: -ERR 'Authorization Violation', then the close."""
    client = await WireClient.connect(
        password_server.port, {"user": "alice", "pass": PASSWORD_HASH}
    )
    await client.send("PING\r\n")
    assert await client.expect("-ERR") == "-ERR 'Authorization Violation'"
    assert await client.closed()


async def test_ops_after_a_bcrypt_connect_keep_their_order(password_server: ServerProcess) -> None:
    """CONNECT, SUB, PUB and PING in one write: the SUB and PUB wait for the check and run
    after it, in order, so the message comes back before the PONG."""
    client = await WireClient.connect(password_server.port)
    await client.send(
        f'CONNECT {{"verbose":false,"pedantic":false,"user":"alice","pass":"{PASSWORD}"}}\r\n'
        "SUB bcrypt.order 1\r\nPUB bcrypt.order 2\r\nhi\r\nPING\r\n"
    )
    line, payload = await client.msg()
    assert line.startswith("MSG bcrypt.order 1 2") and payload == b"hi"
    await client.expect("PONG")
    await client.close()


# --- authorization { token } ----------------------------------------------------------------


async def test_token_hash_accepts_the_real_token(token_server: ServerProcess) -> None:
    nc = await connect_once(token_server.url, token=TOKEN)
    try:
        await roundtrip(nc, "bcrypt.token")
    finally:
        await nc.close()


@pytest.mark.parametrize("token", [TOKEN_HASH, "wrong"], ids=["the-hash-itself", "wrong"])
async def test_token_hash_refuses(token_server: ServerProcess, token: str) -> None:
    await refused(token_server.url, token=token)


# --- authorization { users: [...] }, bcrypt and plain side by side --------------------------


async def test_users_list_mixes_bcrypt_and_plain(users_server: ServerProcess) -> None:
    for user, password in (("alice", PASSWORD), ("bob", BOB_PASSWORD)):
        nc = await connect_once(users_server.url, user=user, password=password)
        try:
            await roundtrip(nc, f"bcrypt.users.{user}")
        finally:
            await nc.close()


@pytest.mark.parametrize(
    ("user", "password"),
    [("alice", ALICE_HASH), ("alice", "wrong"), ("alice", BOB_PASSWORD), ("bob", PASSWORD)],
    ids=["alice-hash-itself", "alice-wrong", "alice-with-bobs", "bob-with-alices"],
)
async def test_users_list_refuses(users_server: ServerProcess, user: str, password: str) -> None:
    await refused(users_server.url, user=user, password=password)


async def test_password_past_72_bytes_is_ignored(users_server: ServerProcess) -> None:
    nc = await connect_once(users_server.url, user="carol", password=LONG_PASSWORD + "tail")
    await nc.close()
    await refused(users_server.url, user="carol", password=LONG_PASSWORD[:-1])


# --- --user/--pass and --auth flags ---------------------------------------------------------


async def test_pass_flag_takes_a_hash(flags_server: ServerProcess) -> None:
    nc = await connect_once(flags_server.url, user="derek", password=PASSWORD)
    await nc.close()
    await refused(flags_server.url, user="derek", password=PASSWORD_HASH)


async def test_auth_flag_takes_a_hash(token_flag_server: ServerProcess) -> None:
    nc = await connect_once(token_flag_server.url, token=TOKEN)
    await nc.close()
    await refused(token_flag_server.url, token=TOKEN_HASH)


# --- the checks run beside other clients, not in front of them -------------------------------

AUTHENTICATING = 5
ROUND_TRIPS = 400


@pytest.fixture(params=BOTH)
def slow_hash_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    # Plain bob does the request/reply; the generous auth timeout keeps a loaded machine from
    # dropping the bcrypt clients while they queue for a check.
    body = f"""authorization {{
    timeout: 10
    users: [
        {{user: alice, password: "{SLOW_HASH}"}}
        {{user: bob, password: "{BOB_PASSWORD}"}}
    ]
}}"""
    yield from _serve(request.param, ["-c", _conf(tmp_path, body)])


async def test_bcrypt_checks_do_not_stall_other_clients(slow_hash_server: ServerProcess) -> None:
    """While five clients authenticate against a cost-11 hash (each check ~0.1 s of CPU), a
    connected client's request/reply keeps going.

    Asserted through ordering, so a loaded machine cannot make it flaky: a server that ran the
    checks on its event loop would answer no request until the first check is done, so at
    most a round trip or two could finish before the first bcrypt client's PONG; here dozens
    do.
    """
    url = slow_hash_server.url
    responder = await connect_once(url, user="bob", password=BOB_PASSWORD)
    requester = await connect_once(url, user="bob", password=BOB_PASSWORD)
    waiting: list[WireClient] = []
    pongs: list[asyncio.Future[str]] = []
    try:

        async def echo(msg: object) -> None:
            await msg.respond(b"pong")  # type: ignore[attr-defined]

        await responder.subscribe("bcrypt.echo", cb=echo)
        await responder.flush()
        await requester.request("bcrypt.echo", b"warm", timeout=2)
        for _ in range(AUTHENTICATING):
            waiting.append(await WireClient.connect(slow_hash_server.port))
        connect = f'{{"verbose":false,"pedantic":false,"user":"alice","pass":"{PASSWORD}"}}'
        for client in waiting:
            await client.send(f"CONNECT {connect}\r\nPING\r\n")
        pongs = [asyncio.ensure_future(c.expect("PONG", timeout=15)) for c in waiting]
        first_pong = asyncio.ensure_future(asyncio.wait(pongs, return_when=asyncio.FIRST_COMPLETED))
        done_before, slowest = await _round_trips_until(requester, first_pong)
        # Every bcrypt client gets in.
        await asyncio.gather(*pongs)
        assert done_before >= 3, (
            f"only {done_before} round trips finished before the first bcrypt client was "
            f"authenticated (slowest {slowest * 1000:.0f} ms)"
        )
    finally:
        for pong in pongs:
            pong.cancel()
        for client in waiting:
            await client.close()
        await requester.close()
        await responder.close()


async def _round_trips_until(nc: Client, stop: asyncio.Future[object]) -> tuple[int, float]:
    """Sequential requests until ``stop`` is done (bounded in count and time)."""
    done = 0
    slowest = 0.0
    deadline = time.monotonic() + 15
    while not stop.done() and done < ROUND_TRIPS and time.monotonic() < deadline:
        started = time.monotonic()
        reply = await nc.request("bcrypt.echo", b"ping", timeout=5)
        slowest = max(slowest, time.monotonic() - started)
        assert reply.data == b"pong"
        if not stop.done():
            done += 1
    return done, slowest


PLAINTEXT_WARNING = "Plaintext passwords detected, use nkeys or bcrypt"
MIXED_BOB = '{user: b, password: "x"}'


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize(
    ("body", "warned"),
    [
        ('authorization { user: a, password: "plain" }', True),
        (f'authorization {{ user: a, password: "{PASSWORD_HASH}" }}', False),
        (f'authorization {{ users: [{{user: a, password: "{ALICE_HASH}"}}, {MIXED_BOB}] }}', True),
        (f'authorization {{ token: "{TOKEN}" }}', False),
    ],
    ids=["plain", "bcrypt", "users-mixed", "token"],
)
def test_plaintext_passwords_are_warned_about_at_start_up(
    kind: str, body: str, warned: bool, tmp_path: Path
) -> None:
    for srv in _serve(kind, ["-c", _conf(tmp_path, body)]):
        assert (PLAINTEXT_WARNING in srv.log()) is warned, srv.log()
