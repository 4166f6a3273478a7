"""Public nkeys: the base32 text form of an Ed25519 public key that NATS uses for identities.

A public nkey is base32 (RFC 4648 alphabet, no padding) of one prefix byte, the 32-byte key and
a CRC-16/XMODEM of those 33 bytes, little-endian. The prefix byte picks the first letter:
``U`` for users, ``A`` accounts, ``O`` operators, ``N`` servers, ``C`` clusters. Seeds (``S...``)
and private keys (``P...``) are not public keys.
"""

from __future__ import annotations

import base64
import binascii

PREFIX_BYTE_USER = 20 << 3
"""Encodes to a leading ``U``."""

_KEY_LEN = 32
_ENCODED_LEN = 56  # base32 of 1 + 32 + 2 bytes, no padding


def decode_public(text: str, prefix: int) -> bytes | None:
    """The raw 32-byte key of ``text`` if it is a well-formed public nkey with ``prefix``."""
    if len(text) != _ENCODED_LEN or not text.isascii():
        return None
    try:
        raw = base64.b32decode(text, casefold=False)
    except (binascii.Error, ValueError):
        return None
    body, crc = raw[:-2], raw[-2:]
    if len(body) != 1 + _KEY_LEN or body[0] != prefix:
        return None
    if binascii.crc_hqx(body, 0) != int.from_bytes(crc, "little"):
        return None
    return body[1:]


def is_public_user_key(text: str) -> bool:
    """nats-server's ``IsValidPublicUserKey``: a checksummed ``U...`` public key."""
    return decode_public(text, PREFIX_BYTE_USER) is not None
