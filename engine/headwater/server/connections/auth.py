"""Client authentication against the configured token, user/password, users list or nkeys."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import re
import secrets
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from headwater.server.config.nkey import PREFIX_BYTE_USER, decode_public
from headwater.server.config.settings import AuthSettings

NONCE_RAW_LEN = 11
"""Random bytes in an INFO nonce; nats-server's length (15 characters once encoded)."""

_RAW_URL_B64 = re.compile(r"[A-Za-z0-9_-]*")


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


def authenticate(settings: AuthSettings, options: dict[str, Any], nonce: str = "") -> str | None:
    """Return the authenticated user name ("" when anonymous), or None when refused.

    An nkey user's name is its public key. ``nonce`` is the one this connection's INFO
    carried; the CONNECT's ``sig`` must sign it.
    """
    if not settings.required:
        return str(options.get("user") or "")
    if settings.token:
        token = options.get("auth_token")
        return "" if isinstance(token, str) and _same(token, settings.token) else None
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
        return user if _same(password, settings.password or "") else None
    for entry in settings.users:
        if _same(user, entry.user):
            return user if _same(password, entry.password) else None
    return None
