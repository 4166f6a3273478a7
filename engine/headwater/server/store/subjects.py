"""Interned subjects with per-subject counts, and subject-filter matching.

Each distinct subject gets a small integer id; the sequence index stores that id (4 bytes) per
message instead of a string. Per subject we keep the message count and the first and last
sequence. First/last may be *stale bounds* after removals (a lower bound for first, an upper
bound for last); ``SeqIndex`` resolves them on demand, the way nats-server's memstore defers
``firstNeedsUpdate``/``lastNeedsUpdate``, so removing from the front of a busy subject never
scans.

Wildcard filters are compiled to regular expressions (C-speed matching) and their matching id
sets are cached; new and dropped subjects update the cached sets incrementally.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable
from functools import lru_cache

from headwater.server.routing.subjects import is_literal

FIRST_STALE = 1
LAST_STALE = 2

_FILTER_CACHE_SIZE = 32
"""Wildcard filters whose id sets are kept. Each new subject is tested against every cached
filter, so this bounds the cost of a new subject (~0.3 µs per filter)."""


def is_all(filter: str) -> bool:
    return filter == "" or filter == ">"


@lru_cache(maxsize=1024)
def compile_filter(filter: str) -> Callable[[str], object]:
    """A predicate for subjects matching ``filter`` (``*`` one token, ``>`` one or more)."""
    tokens = filter.split(".")
    parts = []
    for i, tok in enumerate(tokens):
        if tok == "*":
            parts.append(r"[^.]+")
        elif tok == ">" and i == len(tokens) - 1:
            parts.append(r".+")
        else:
            parts.append(re.escape(tok))
    return re.compile(r"\.".join(parts), re.DOTALL).fullmatch


class SubjectTable:
    """Subject ↔ id interning plus count/first/last per id (parallel arrays, not objects)."""

    __slots__ = ("_cache", "count", "first", "flags", "free", "ids", "last", "names")

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str | None] = []
        self.count = array("Q")
        self.first = array("Q")
        self.last = array("Q")
        self.flags = bytearray()
        self.free: list[int] = []
        self._cache: dict[str, set[int]] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def intern(self, subject: str, seq: int) -> int:
        """Id for ``subject``, creating it (count 0, first = last = seq) when new."""
        x = self.ids.get(subject)
        if x is not None:
            return x
        if self.free:
            x = self.free.pop()
            self.names[x] = subject
            self.count[x] = 0
            self.first[x] = seq
            self.last[x] = seq
            self.flags[x] = 0
        else:
            x = len(self.names)
            self.names.append(subject)
            self.count.append(0)
            self.first.append(seq)
            self.last.append(seq)
            self.flags.append(0)
        self.ids[subject] = x
        for filter, members in self._cache.items():
            if compile_filter(filter)(subject) is not None:
                members.add(x)
        return x

    def drop(self, x: int) -> None:
        """Forget subject ``x`` (its count reached zero); the id is reused later."""
        name = self.names[x]
        assert name is not None
        del self.ids[name]
        self.names[x] = None
        self.count[x] = 0
        self.flags[x] = 0
        self.free.append(x)
        for members in self._cache.values():
            members.discard(x)

    def match(self, filter: str) -> set[int] | None:
        """Ids of subjects matching ``filter``; ``None`` means every subject."""
        if is_all(filter):
            return None
        if is_literal(filter):
            x = self.ids.get(filter)
            return set() if x is None else {x}
        members = self._cache.pop(filter, None)
        if members is None:
            pred = compile_filter(filter)
            members = {x for name, x in self.ids.items() if pred(name) is not None}
            if len(self._cache) >= _FILTER_CACHE_SIZE:
                del self._cache[next(iter(self._cache))]
        self._cache[filter] = members  # re-insert: most recently used last
        return members

    def check(self) -> None:
        live = 0
        for x, name in enumerate(self.names):
            if name is None:
                assert x in self.free, f"dropped id {x} not on the free list"
                continue
            live += 1
            assert self.ids[name] == x, f"id table disagrees for {name!r}"
            assert self.count[x] > 0, f"subject {name!r} kept with count 0"
        assert live == len(self.ids)
        for filter, members in self._cache.items():
            pred = compile_filter(filter)
            want = {x for name, x in self.ids.items() if pred(name) is not None}
            assert members == want, f"cached filter {filter!r} is out of date"
