"""Client authentication against the configured token, user/password, users list or nkeys.

A configured password or token may be a bcrypt hash (``$2a$``, ``$2b$``, ``$2x$`` or ``$2y$``,
then a two-digit cost), as in nats-server: the client sends the real secret, and the hash text
itself is no credential. A bcrypt check costs tens of milliseconds of CPU or more, so
:func:`authenticate` does not run it: it returns a :class:`SecretCheck` that the connection
runs with :func:`run_check` on :data:`EXECUTOR`, off the event loop (bcrypt releases the GIL).
Plain secrets are compared at once, in constant time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import os
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import bcrypt
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from headwater.server.config.nkey import PREFIX_BYTE_USER, decode_public
from headwater.server.config.settings import AuthSettings

NONCE_RAW_LEN = 11
"""Random bytes in an INFO nonce; nats-server's length (15 characters once encoded)."""

_RAW_URL_B64 = re.compile(r"[A-Za-z0-9_-]*")

_BCRYPT = re.compile(r"\$2[abxy]\$[0-9]{2}\$")
"""nats-server's test for a bcrypt hash: the version, then a two-digit cost."""

BCRYPT_MAX_BYTES = 72
"""bcrypt reads at most this many bytes of a password; Go's check ignores the rest."""

EXECUTOR = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="bcrypt")
"""Runs bcrypt checks. Their own pool, so that a burst of logins never queues in front of the
store's fsyncs in the loop's default executor; as wide as the machine, like nats-server, which
checks each connection on its own goroutine."""


class SecretCheck(NamedTuple):
    """A bcrypt comparison still to run; ``user`` is the identity it grants if it matches."""

    user: str
    hashed: str
    given: str


def is_bcrypt(secret: str) -> bool:
    return _BCRYPT.match(secret) is not None


def run_check(check: SecretCheck) -> str | None:
    """Run a bcrypt comparison (blocking: call it on :data:`EXECUTOR`)."""
    given = check.given.encode()[:BCRYPT_MAX_BYTES]
    try:
        ok = bcrypt.checkpw(given, check.hashed.encode())
    except ValueError:  # a malformed hash (bad salt or cost) matches nothing, as in Go
        return None
    return check.user if ok else None


def plaintext_passwords(settings: AuthSettings) -> bool:
    """Whether a configured password (not a token) is stored in clear rather than as a bcrypt
    hash: nats-server warns about it at start-up."""
    if settings.password and not is_bcrypt(settings.password):
        return True
    return any(u.password and not is_bcrypt(u.password) for u in settings.users)


def _compare(user: str, configured: str, given: str) -> str | SecretCheck | None:
    """Grant ``user`` if ``given`` is the ``configured`` secret (or a bcrypt check to run)."""
    if is_bcrypt(configured):
        return SecretCheck(user, configured, given)
    return user if _same(given, configured) else None


def _same(a: str, b: str) -> bool:
    # Constant-time comparison: a timing side channel must not reveal password prefixes.
    return hmac.compare_digest(a.encode(), b.encode())


def new_nonce() -> str:
    """A fresh challenge for one connection: random bytes, base64 raw URL encoded."""
    return base64.urlsafe_b64encode(secrets.token_bytes(NONCE_RAW_LEN)).rstrip(b"=").decode()


def _decode_sig(text: str) -> bytes | None:
    """base64 raw URL (what nats-server expects), else standard base64 with padding (what
    nats-py sends): nats-server accepts both."""
    if _RAW_URL_B64.fullmatch(text):
        with contextlib.suppress(binascii.Error, ValueError):
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def verify_nkey(public: str, sig: Any, nonce: str) -> bool:
    """Whether ``sig`` is the Ed25519 signature of ``nonce`` by the user nkey ``public``."""
    if not isinstance(sig, str) or not sig or not nonce:
        return False
    raw_sig = _decode_sig(sig)
    key = decode_public(public, PREFIX_BYTE_USER)
    if raw_sig is None or key is None:
        return False
    try:
        VerifyKey(key).verify(nonce.encode(), raw_sig)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


def authenticate(
    settings: AuthSettings, options: dict[str, Any], nonce: str = ""
) -> str | SecretCheck | None:
    """Return the authenticated user name ("" when anonymous), None when refused, or the
    bcrypt check that decides (its result, from :func:`run_check`, is one of the other two).

    An nkey user's name is its public key. ``nonce`` is the one this connection's INFO
    carried; the CONNECT's ``sig`` must sign it.
    """
    if not settings.required:
        return str(options.get("user") or "")
    if settings.token:
        token = options.get("auth_token")
        return _compare("", settings.token, token) if isinstance(token, str) else None
    nkey = options.get("nkey")
    if settings.nkeys and nkey:
        # As in nats-server, a CONNECT naming an nkey is judged by it alone. Public keys are
        # no secret, so the lookup need not be constant-time; the signature check is.
        if not isinstance(nkey, str) or all(entry.nkey != nkey for entry in settings.nkeys):
            return None
        return nkey if verify_nkey(nkey, options.get("sig"), nonce) else None
    user = options.get("user")
    password = options.get("pass")
    if not isinstance(user, str) or not isinstance(password, str):
        return None
    if settings.user is not None and _same(user, settings.user):
        return _compare(user, settings.password or "", password)
    for entry in settings.users:
        if _same(user, entry.user):
            return _compare(user, entry.password, password)
    return None
