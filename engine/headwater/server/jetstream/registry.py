"""The stream registry: the one owner of the account's stream names.

Streams come and go along four paths: the API (create, delete, template delete), template
auto-create (a task started by a message), restore (an upload that ends in a new stream) and
start-up recovery. Each of them awaits between deciding and doing (writing ``meta.inf``,
removing a directory, loading an archive), so "the name is free" must be *reserved* before the
first await, or two paths can both find it free: two ``Stream`` objects over one directory, or
a directory removed under a stream being created.

Everything reads the registry as a mapping (name → live :class:`Stream`); only a :class:`Claim`
changes it. A claim holds a name while its owner works; a name that is live or claimed cannot
be claimed again (:class:`NameTaken`). Claims are taken and released on the event loop thread,
without awaiting in between the check and the claim, so no lock is needed (docs/OWNERSHIP.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stream import Stream

__all__ = ["Claim", "NameTaken", "StreamRegistry"]


class NameTaken(Exception):
    """The name is live or claimed by another path; ``holder`` says which."""

    def __init__(self, name: str, holder: str) -> None:
        super().__init__(f"stream {name!r} is {holder}")
        self.name = name
        self.holder = holder


class Claim:
    """A reserved name: :meth:`install` makes a stream live under it, :meth:`release` ends
    the reservation (installed or not). Usable as a context manager that releases."""

    def __init__(self, registry: StreamRegistry, name: str, holder: str) -> None:
        self._registry = registry
        self.name = name
        self.holder = holder
        self._held = True

    def install(self, stream: Stream) -> None:
        assert self._held, f"claim on {self.name!r} already released"
        assert stream.name == self.name
        self._registry._live[self.name] = stream

    def release(self) -> None:
        if self._held:
            self._held = False
            del self._registry._claims[self.name]

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class StreamRegistry(Mapping[str, "Stream"]):
    def __init__(self) -> None:
        self._live: dict[str, Stream] = {}
        self._claims: dict[str, str] = {}

    # --- reading -------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Stream:
        return self._live[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._live)

    def __len__(self) -> int:
        return len(self._live)

    def holder(self, name: str) -> str | None:
        """Who holds ``name`` ("live", or the claim's holder), None when it is free."""
        if name in self._live:
            return "live"
        return self._claims.get(name)

    # --- changing ------------------------------------------------------------------------

    def claim(self, name: str, holder: str) -> Claim:
        """Reserve a free name (``holder`` describes the path, for errors and logs)."""
        taken = self.holder(name)
        if taken is not None:
            raise NameTaken(name, taken)
        self._claims[name] = holder
        return Claim(self, name, holder)

    def claim_live(self, name: str, holder: str) -> tuple[Claim, Stream]:
        """Take a live stream out of the registry, keeping its name reserved until the claim
        is released (a delete: no new stream may take the name while files are removed)."""
        if name in self._claims:
            raise NameTaken(name, self._claims[name])
        stream = self._live.pop(name)
        self._claims[name] = holder
        return Claim(self, name, holder), stream

    def clear(self) -> None:
        """At shutdown, after every stream was closed."""
        self._live.clear()
