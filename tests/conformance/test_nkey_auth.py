"""nkey users (``authorization { users: [{nkey: U...}] }``), both servers alike.

The server puts a fresh ``nonce`` in each connection's INFO; the client answers with its public
key in CONNECT's ``nkey`` and its Ed25519 signature of the nonce in ``sig``. nats-py does this
from a seed file (``nkeys_seed``); raw peers check the wire contract.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nkeys
import pytest

from conftest import BOTH, start_server
from headwater.testing import ServerProcess
from support.authclients import connect_once, refused, roundtrip
from support.wire import WireClient


def _new_user(prefix: int = nkeys.PREFIX_BYTE_USER) -> nkeys.KeyPair:
    return nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), prefix)))


def _seed_file(directory: Path, name: str, kp: nkeys.KeyPair) -> str:
    path = directory / f"{name}.nk"
    path.write_bytes(bytes(kp.seed) + b"\n")
    return str(path)


ALICE = _new_user()
BOB = _new_user()
STRANGER = _new_user()


def _conf(users: str) -> str:
    return f"listen: 127.0.0.1:-1\nauthorization {{\n    users: [\n{users}\n    ]\n}}\n"


NKEY_CONF = _conf(
    f"        {{nkey: {ALICE.public_key.decode()}}}\n        {{nkey: {BOB.public_key.decode()}}}"
)
MIXED_CONF = _conf(
    f"        {{nkey: {ALICE.public_key.decode()}}}\n        {{user: carol, password: secret}}"
)


def _serve(kind: str, directory: Path, text: str) -> Iterator[ServerProcess]:
    conf = directory / "auth.conf"
    conf.write_text(text)
    yield from start_server(kind, args=["-c", str(conf)])


@pytest.fixture(params=BOTH, scope="module")
def nkey_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from _serve(request.param, tmp_path_factory.mktemp("nkey"), NKEY_CONF)


@pytest.fixture(params=BOTH, scope="module")
def mixed_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from _serve(request.param, tmp_path_factory.mktemp("mixed"), MIXED_CONF)


def _sign(kp: nkeys.KeyPair, nonce: str) -> str:
    """The signature of ``nonce`` in base64 raw URL encoding."""
    return base64.urlsafe_b64encode(kp.sign(nonce.encode())).decode().rstrip("=")


def _std_sig(kp: nkeys.KeyPair, nonce: str) -> str:
    return base64.b64encode(kp.sign(nonce.encode())).decode()


async def _wire(port: int) -> WireClient:
    return await WireClient.connect(port)


async def _violation(client: WireClient, connect: dict[str, Any]) -> None:
    opts = {"verbose": False, "pedantic": False, **connect}
    await client.send(f"CONNECT {json.dumps(opts)}\r\nPING\r\n")
    assert await client.expect("-ERR") == "-ERR 'Authorization Violation'"
    assert await client.closed()


# --- nats-py ---------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["alice", "bob"])
async def test_each_nkey_user_connects(nkey_server: ServerProcess, tmp_path: Path, who: str):
    kp = ALICE if who == "alice" else BOB
    nc = await connect_once(nkey_server.url, nkeys_seed=_seed_file(tmp_path, who, kp))
    try:
        await roundtrip(nc, f"nkey.{who}")
    finally:
        await nc.close()


async def test_unknown_seed_is_refused(nkey_server: ServerProcess, tmp_path: Path) -> None:
    await refused(nkey_server.url, nkeys_seed=_seed_file(tmp_path, "stranger", STRANGER))


async def test_no_seed_is_refused(nkey_server: ServerProcess) -> None:
    await refused(nkey_server.url)
    await refused(nkey_server.url, user="alice", password="x")


async def test_mixed_list_lets_both_kinds_in(mixed_server: ServerProcess, tmp_path: Path) -> None:
    nc = await connect_once(mixed_server.url, nkeys_seed=_seed_file(tmp_path, "alice", ALICE))
    try:
        await roundtrip(nc, "mixed.nkey")
    finally:
        await nc.close()
    nc = await connect_once(mixed_server.url, user="carol", password="secret")
    try:
        await roundtrip(nc, "mixed.user")
    finally:
        await nc.close()
    await refused(mixed_server.url, user="carol", password="wrong")
    await refused(mixed_server.url, nkeys_seed=_seed_file(tmp_path, "stranger", STRANGER))


# --- the wire --------------------------------------------------------------------------------


async def test_info_carries_a_fresh_nonce(nkey_server: ServerProcess) -> None:
    first, second = await _wire(nkey_server.port), await _wire(nkey_server.port)
    try:
        for client in (first, second):
            assert client.info.get("auth_required") is True
            nonce = client.info["nonce"]
            # 11 random bytes, base64 raw URL: 15 characters.
            assert len(nonce) == 15
            assert len(base64.urlsafe_b64decode(nonce + "=")) == 11
        assert first.info["nonce"] != second.info["nonce"]
    finally:
        await first.close()
        await second.close()


async def test_no_nonce_without_nkey_users(any_server: ServerProcess) -> None:
    client = await _wire(any_server.port)
    try:
        assert "nonce" not in client.info
    finally:
        await client.close()


@pytest.mark.parametrize("padded", [False, True], ids=["raw-url", "std-padded"])
async def test_signed_nonce_on_the_wire(nkey_server: ServerProcess, padded: bool) -> None:
    """nats-server takes base64 raw URL, and standard padded base64 (what nats-py sends)."""
    client = await _wire(nkey_server.port)
    nonce = client.info["nonce"]
    sig = _std_sig(ALICE, nonce) if padded else _sign(ALICE, nonce)
    connect = {"verbose": False, "pedantic": False, "nkey": ALICE.public_key.decode(), "sig": sig}
    await client.send(f"CONNECT {json.dumps(connect)}\r\nPING\r\n")
    assert await client.expect("PONG") == "PONG"
    await client.close()


@pytest.mark.parametrize(
    "case", ["missing-sig", "other-nonce", "other-key", "garbage-sig", "unknown-key", "account-key"]
)
async def test_bad_nkey_connects_are_violations(nkey_server: ServerProcess, case: str) -> None:
    client = await _wire(nkey_server.port)
    nonce = client.info["nonce"]
    alice = ALICE.public_key.decode()
    connect: dict[str, Any] = {"nkey": alice, "sig": _sign(ALICE, nonce)}
    if case == "missing-sig":
        del connect["sig"]
    elif case == "other-nonce":
        connect["sig"] = _sign(ALICE, nonce[::-1])
    elif case == "other-key":
        connect["sig"] = _sign(BOB, nonce)
    elif case == "garbage-sig":
        connect["sig"] = "not base64!"
    elif case == "unknown-key":
        connect = {"nkey": STRANGER.public_key.decode(), "sig": _sign(STRANGER, nonce)}
    else:
        account = _new_user(nkeys.PREFIX_BYTE_ACCOUNT)
        connect = {"nkey": account.public_key.decode(), "sig": _sign(account, nonce)}
    await _violation(client, connect)
