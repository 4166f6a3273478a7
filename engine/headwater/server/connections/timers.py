"""Named one-shot timers of a connection (auth, ping, write deadline, handshake).

Client connections and routes keep the same few timers, each re-armed by name and all
cancelled when the connection closes; this is that bookkeeping, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


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


__all__ = ["Timers"]
