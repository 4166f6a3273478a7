"""Named one-shot timers of a connection (auth, ping, write deadline, handshake), and the
PING keepalive that runs on the ``ping`` one.

Client connections and routes keep the same few timers, each re-armed by name and all
cancelled when the connection closes; this is that bookkeeping, once. Both also send a PING
every ``ping_interval`` and give up on a peer that leaves more than ``max_pings_out`` of them
unanswered (:class:`Keepalive`); what giving up means (log line, error text) stays with each.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from headwater.server.protocol import encoder


class Timers:
    __slots__ = ("_handles",)

    def __init__(self) -> None:
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def arm(self, name: str, delay: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` in ``delay`` seconds, replacing the timer of that name."""
        self.disarm(name)
        self._handles[name] = asyncio.get_running_loop().call_later(delay, callback)

    def disarm(self, name: str) -> None:
        handle = self._handles.pop(name, None)
        if handle is not None:
            handle.cancel()

    def fired(self, name: str) -> None:
        """Forget a timer whose callback is running (it is not armed any more)."""
        self._handles.pop(name, None)

    def clear(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


class Pinged(Protocol):
    """What a :class:`Keepalive` uses of its connection."""

    timers: Timers
    closed: bool
    rtt: float
    """Seconds the peer took to answer the last answered PING (/connz, /routez ``rtt``)."""

    def send(self, data: bytes) -> None: ...


class PingSettings(Protocol):
    """The two settings a keepalive reads: the server's for clients, ``cluster {}``'s for
    routes (both named as in nats-server's options)."""

    @property
    def ping_interval(self) -> float: ...

    @property
    def max_pings_out(self) -> int: ...


class Keepalive:
    """PINGs on the connection's ``ping`` timer, the count of unanswered ones, and the RTT
    (kept on the connection, where monitoring reads it).

    Read at each tick, ``settings`` decides the interval and how many PINGs may be unanswered;
    one more than that calls ``stale`` (instead of sending) and the keepalive stops.
    """

    __slots__ = ("_conn", "_sent_at", "_settings", "_stale", "pings_out")

    def __init__(self, conn: Pinged, settings: PingSettings, stale: Callable[[], None]) -> None:
        self._conn = conn
        self._settings = settings
        self._stale = stale
        self.pings_out = 0
        self._sent_at = 0.0

    def start(self, delay: float) -> None:
        """The first PING goes out in ``delay`` seconds, the next ones every interval."""
        self._conn.timers.arm("ping", delay, self._tick)

    def pong(self) -> None:
        """The peer answered: nothing is outstanding, and the last PING's RTT is known."""
        self.pings_out = 0
        if self._sent_at:
            self._conn.rtt = time.monotonic() - self._sent_at
            self._sent_at = 0.0

    def _tick(self) -> None:
        conn = self._conn
        conn.timers.fired("ping")
        if conn.closed:
            return
        if self.pings_out + 1 > self._settings.max_pings_out:
            self._stale()
            return
        self.pings_out += 1
        self._sent_at = time.monotonic()
        conn.send(encoder.PING)
        self.start(self._settings.ping_interval)


__all__ = ["Keepalive", "PingSettings", "Pinged", "Timers"]
