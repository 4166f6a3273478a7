"""nats-server's peer ids of servers, which cluster reports and advisories carry.

A module of its own because both the cluster's metadata (:mod:`.clustered`) and the replica
groups (:mod:`.streamgroup`, which :mod:`.clustered` imports) name peers by them.
"""

from __future__ import annotations

import hashlib
import string

_PEER_DIGITS = string.digits + string.ascii_uppercase + string.ascii_lowercase


def peer_id(server_name: str) -> str:
    """nats-server's 8-character peer id of a server name: the first bytes of its sha-256,
    each taken modulo 62 into ``0-9A-Za-z`` (the same name gets the same id on both)."""
    digest = hashlib.sha256(server_name.encode()).digest()
    return "".join(_PEER_DIGITS[byte % len(_PEER_DIGITS)] for byte in digest[:8])
