"""Flag values in human units and the server's enum spellings, with errors naming the flag.

Units come from :mod:`headwater.control.units`, the parser every way in shares, so
``--max-age 1y`` here means what ``max_age: 1y`` means in a YAML document.
"""

from __future__ import annotations

from enum import StrEnum

from headwater.cli.errors import CliError
from headwater.control import units


def duration(flag: str, value: str | None, *, unlimited_ok: bool = False) -> int | None:
    """Nanoseconds; ``-1`` means "no limit" (0 on the wire) where ``unlimited_ok``."""
    if value is None:
        return None
    if unlimited_ok and value.strip() in ("-1", "0", "unlimited"):
        return 0
    try:
        return units.parse_duration(value)
    except ValueError as error:
        raise CliError(f"invalid value for {flag}: {error}") from None


def size(flag: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return units.parse_size(value)
    except ValueError as error:
        raise CliError(f"invalid value for {flag}: {error}") from None


def count(flag: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return units.parse_count(value)
    except ValueError as error:
        raise CliError(f"invalid value for {flag}: {error}") from None


class Storage(StrEnum):
    file = "file"
    memory = "memory"


class Retention(StrEnum):
    limits = "limits"
    interest = "interest"
    work = "work"
    workqueue = "workqueue"

    @property
    def wire(self) -> str:
        """The server's spelling: the nats CLI's ``work`` is ``workqueue`` on the wire."""
        return "workqueue" if self is Retention.work else self.value


class Discard(StrEnum):
    old = "old"
    new = "new"


class AckPolicy(StrEnum):
    explicit = "explicit"
    all = "all"
    none = "none"


class ReplayPolicy(StrEnum):
    instant = "instant"
    original = "original"
