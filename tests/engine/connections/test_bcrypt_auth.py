"""bcrypt secrets in ``connections.auth``: which strings are hashes, and the deferred check."""

from __future__ import annotations

import bcrypt
import pytest

from headwater.server.config import AuthSettings, User
from headwater.server.connections import auth

HASH = bcrypt.hashpw(b"real", bcrypt.gensalt(4)).decode()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$2a$10$abc", True),
        ("$2b$04$abc", True),
        ("$2x$11$abc", True),
        ("$2y$12$abc", True),
        ("$2c$10$abc", False),  # not a version nats-server knows
        ("$2a$1$abc", False),  # the cost has two digits
        ("$2a$1a$abc", False),
        ("$2a$10", False),
        ("2a$10$abc", False),
        ("plain", False),
        ("", False),
    ],
)
def test_is_bcrypt_follows_nats_server(text: str, expected: bool) -> None:
    assert auth.is_bcrypt(text) is expected


def test_a_hashed_password_defers_to_a_check() -> None:
    settings = AuthSettings(users=(User("alice", HASH), User("bob", "plain")))
    check = auth.authenticate(settings, {"user": "alice", "pass": "real"})
    assert isinstance(check, auth.SecretCheck) and check.user == "alice"
    assert auth.run_check(check) == "alice"
    wrong = auth.authenticate(settings, {"user": "alice", "pass": HASH})
    assert isinstance(wrong, auth.SecretCheck) and auth.run_check(wrong) is None
    # Plain entries are decided at once; an unknown user needs no check either.
    assert auth.authenticate(settings, {"user": "bob", "pass": "plain"}) == "bob"
    assert auth.authenticate(settings, {"user": "carol", "pass": "real"}) is None


def test_a_hashed_token_defers_to_a_check() -> None:
    settings = AuthSettings(token=HASH)
    check = auth.authenticate(settings, {"auth_token": "real"})
    assert isinstance(check, auth.SecretCheck) and auth.run_check(check) == ""
    assert auth.authenticate(settings, {}) is None


def test_a_malformed_hash_matches_nothing() -> None:
    # It looks like bcrypt, so it is never compared as text, and bcrypt cannot use it.
    check = auth.SecretCheck("alice", "$2a$10$short", "$2a$10$short")
    assert auth.run_check(check) is None


def test_only_the_first_72_bytes_count() -> None:
    hashed = bcrypt.hashpw(b"y" * 72, bcrypt.gensalt(4)).decode()
    assert auth.run_check(auth.SecretCheck("u", hashed, "y" * 72 + "more")) == "u"
    assert auth.run_check(auth.SecretCheck("u", hashed, "y" * 71)) is None
