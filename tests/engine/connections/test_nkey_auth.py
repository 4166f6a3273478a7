"""nkey checks in ``connections.auth`` and the public-key codec in ``config.nkey``."""

from __future__ import annotations

import base64
import os

import nkeys
import pytest

from headwater.server.config import AuthSettings, NkeyUser, User
from headwater.server.config.nkey import PREFIX_BYTE_USER, decode_public, is_public_user_key
from headwater.server.connections import auth


def _pair(prefix: int = nkeys.PREFIX_BYTE_USER) -> nkeys.KeyPair:
    return nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), prefix)))


def _sig(kp: nkeys.KeyPair, nonce: str) -> str:
    return base64.urlsafe_b64encode(kp.sign(nonce.encode())).decode().rstrip("=")


ALICE = _pair()
BOB = _pair()
ALICE_KEY = ALICE.public_key.decode()
SETTINGS = AuthSettings(nkeys=(NkeyUser(ALICE_KEY),), users=(User("carol", "secret"),))


def test_nonce_is_eleven_random_bytes_in_raw_url_base64() -> None:
    nonces = {auth.new_nonce() for _ in range(50)}
    assert len(nonces) == 50
    for nonce in nonces:
        assert len(nonce) == 15
        assert "=" not in nonce and "+" not in nonce and "/" not in nonce
        assert len(base64.urlsafe_b64decode(nonce + "=")) == 11


def test_public_key_codec() -> None:
    raw = decode_public(ALICE_KEY, PREFIX_BYTE_USER)
    assert raw is not None and len(raw) == 32
    assert is_public_user_key(ALICE_KEY)
    # A changed character breaks the checksum.
    flipped = ALICE_KEY[:10] + ("A" if ALICE_KEY[10] != "A" else "B") + ALICE_KEY[11:]
    assert not is_public_user_key(flipped)
    assert not is_public_user_key(ALICE_KEY[:-1])
    assert not is_public_user_key(ALICE_KEY.lower())
    assert not is_public_user_key(bytes(ALICE.seed).decode())  # a seed is not a public key
    assert not is_public_user_key(_pair(nkeys.PREFIX_BYTE_ACCOUNT).public_key.decode())
    assert not is_public_user_key("")
    assert not is_public_user_key("U" + "é" * 55)


def test_good_signature_authenticates_as_the_public_key() -> None:
    nonce = auth.new_nonce()
    options = {"nkey": ALICE_KEY, "sig": _sig(ALICE, nonce)}
    assert auth.authenticate(SETTINGS, options, nonce) == ALICE_KEY


def test_standard_padded_base64_signature_is_accepted() -> None:
    nonce = auth.new_nonce()
    sig = base64.b64encode(ALICE.sign(nonce.encode())).decode()
    assert auth.authenticate(SETTINGS, {"nkey": ALICE_KEY, "sig": sig}, nonce) == ALICE_KEY


@pytest.mark.parametrize(
    "case",
    [
        "bad-sig",
        "other-nonce",
        "other-signer",
        "unknown-key",
        "non-user-key",
        "missing-sig",
        "empty-sig",
        "sig-not-base64",
        "sig-not-a-string",
        "nkey-not-a-string",
        "no-nonce-sent",
    ],
)
def test_refused(case: str) -> None:
    nonce = auth.new_nonce()
    options: dict[str, object] = {"nkey": ALICE_KEY, "sig": _sig(ALICE, nonce)}
    settings = SETTINGS
    sent_nonce = nonce
    if case == "bad-sig":
        raw = bytearray(ALICE.sign(nonce.encode()))
        raw[0] ^= 1
        options["sig"] = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    elif case == "other-nonce":
        options["sig"] = _sig(ALICE, auth.new_nonce())
    elif case == "other-signer":
        options["sig"] = _sig(BOB, nonce)
    elif case == "unknown-key":
        options = {"nkey": BOB.public_key.decode(), "sig": _sig(BOB, nonce)}
    elif case == "non-user-key":
        account = _pair(nkeys.PREFIX_BYTE_ACCOUNT)
        key = account.public_key.decode()
        # Even if such a key were listed, it is not a user key.
        settings = AuthSettings(nkeys=(NkeyUser(key),))
        options = {"nkey": key, "sig": _sig(account, nonce)}
    elif case == "missing-sig":
        del options["sig"]
    elif case == "empty-sig":
        options["sig"] = ""
    elif case == "sig-not-base64":
        options["sig"] = "!!not base64!!"
    elif case == "sig-not-a-string":
        options["sig"] = 12
    elif case == "nkey-not-a-string":
        options["nkey"] = [ALICE_KEY]
    else:
        sent_nonce = ""  # a signature of the nonce does not pass a connection that had none
    assert auth.authenticate(settings, options, sent_nonce) is None


def test_nkey_in_connect_is_judged_alone() -> None:
    """As in nats-server: with an nkey named, a valid password does not rescue a bad sig."""
    nonce = auth.new_nonce()
    options = {"nkey": ALICE_KEY, "sig": _sig(BOB, nonce), "user": "carol", "pass": "secret"}
    assert auth.authenticate(SETTINGS, options, nonce) is None


def test_password_users_still_work_beside_nkeys() -> None:
    nonce = auth.new_nonce()
    assert auth.authenticate(SETTINGS, {"user": "carol", "pass": "secret"}, nonce) == "carol"
    assert auth.authenticate(SETTINGS, {"user": "carol", "pass": "nope"}, nonce) is None
    assert auth.authenticate(SETTINGS, {}, nonce) is None


def test_nkeys_make_auth_required() -> None:
    assert AuthSettings(nkeys=(NkeyUser(ALICE_KEY),)).required
    assert not AuthSettings().required
