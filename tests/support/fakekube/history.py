"""The change log behind WATCH: a bounded history of events and the open watches.

Every change gets the next global resourceVersion and is appended here. A watch that starts
from resourceVersion N replays the retained events after N; once events after N have been
dropped (the bound, or :meth:`History.compact`), N is "too old" and the watch is answered with
410 Gone, which makes clients such as kopf list again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import errors

StorageKey = tuple[str, str]  # (group, plural): all served versions share one storage


@dataclass(frozen=True)
class Event:
    resource_version: int
    type: str  # ADDED, MODIFIED or DELETED
    storage: StorageKey
    namespace: str  # "" for cluster-scoped objects
    obj: dict[str, Any]  # a snapshot taken at commit time; never mutated afterwards


class Watch:
    """One open watch: receives matching events in commit order; ``None`` means "closed"."""

    def __init__(
        self,
        storage: StorageKey,
        namespace: str | None,
        predicate: Callable[[dict[str, Any]], bool],
    ) -> None:
        self.storage = storage
        self.namespace = namespace
        self.predicate = predicate
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue()

    def matches(self, event: Event) -> bool:
        return (
            event.storage == self.storage
            and (self.namespace is None or event.namespace == self.namespace)
            and self.predicate(event.obj)
        )


class History:
    def __init__(self, limit: int, start: int) -> None:
        self.limit = limit
        self.current = start
        # A watch may start from any resourceVersion >= floor: all events after it are kept.
        self.floor = start
        self._events: deque[Event] = deque()
        # How many watches were refused with 410 Gone: lets a test see that a client re-listed.
        self.expired = 0
        self._watches: set[Watch] = set()

    def next_version(self) -> int:
        self.current += 1
        return self.current

    def record(self, event: Event) -> None:
        self._events.append(event)
        while len(self._events) > self.limit:
            self.floor = self._events.popleft().resource_version
        for watch in self._watches:
            if watch.matches(event):
                watch.queue.put_nowait(event)

    def open(self, watch: Watch, since: int) -> list[Event]:
        """Register ``watch`` and return the retained events after ``since`` that it matches."""
        if since < self.floor:
            self.expired += 1
            raise errors.gone(f"too old resource version: {since} ({self.floor})")
        self._watches.add(watch)
        return [e for e in self._events if e.resource_version > since and watch.matches(e)]

    def register(self, watch: Watch) -> None:
        self._watches.add(watch)

    def close(self, watch: Watch) -> None:
        self._watches.discard(watch)

    def close_all(self, storage: StorageKey | None = None) -> None:
        """End open watches (all, or those of one storage) the way an API server restart does."""
        for watch in list(self._watches):
            if storage is None or watch.storage == storage:
                self._watches.discard(watch)
                watch.queue.put_nowait(None)

    def compact(self) -> None:
        """Forget all history and end every watch: reconnecting clients get 410 and re-list.

        The version moves on by one, as after an etcd compaction, so that the version every
        client last saw is now older than the floor.
        """
        self.floor = self.next_version()
        self._events.clear()
        self.close_all()
