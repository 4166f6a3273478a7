"""Client authentication against the configured token, user/password or users list."""

from __future__ import annotations

import hmac
from typing import Any

from headwater.server.config.settings import AuthSettings


def _same(a: str, b: str) -> bool:
    # Constant-time comparison: a timing side channel must not reveal password prefixes.
    return hmac.compare_digest(a.encode(), b.encode())


def authenticate(settings: AuthSettings, options: dict[str, Any]) -> str | None:
    """Return the authenticated user name ("" when anonymous), or None when refused."""
    if not settings.required:
        return str(options.get("user") or "")
    if settings.token:
        token = options.get("auth_token")
        return "" if isinstance(token, str) and _same(token, settings.token) else None
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
