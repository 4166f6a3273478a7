"""The test-side API: read and change the fake cluster's state without going through HTTP.

The store lives on the server's event loop; ``call`` runs a function there (directly when the
test shares the loop, via ``run_coroutine_threadsafe`` when the server runs in a thread).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, TypeVar

from . import errors, patches, selection
from .resources import ResourceType
from .store import Obj, Store

T = TypeVar("T")
Caller = Callable[[Callable[[], T]], T]


def _direct(fn: Callable[[], T]) -> T:
    return fn()


class Inspector:
    def __init__(self, store: Store, call: Caller[Any] = _direct) -> None:
        self._store = store
        self._call = call

    def _type(self, api_version: str, resource: str) -> ResourceType:
        return self._store.registry.find(api_version, resource)

    def _namespace(self, rtype: ResourceType, namespace: str | None) -> str | None:
        return (namespace or "default") if rtype.namespaced else None

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        return int(self._call(lambda: self._store.history.current))

    def get(
        self, api_version: str, resource: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """The object (``resource`` is a plural, kind or short name), or None if absent."""
        rtype = self._type(api_version, resource)

        def read() -> Obj | None:
            try:
                return self._store.get(rtype, self._namespace(rtype, namespace), name)
            except errors.ApiError as failure:
                if failure.code == 404:
                    return None
                raise

        result: Obj | None = self._call(read)
        return result

    def list(
        self,
        api_version: str,
        resource: str,
        namespace: str | None = None,
        label_selector: str = "",
    ) -> list[Obj]:
        """Objects of a type, in one namespace or (``namespace=None``) all of them."""
        rtype = self._type(api_version, resource)
        predicate = selection.label_selector(label_selector) if label_selector else None
        items, _, _ = self._call(
            lambda: self._store.list(rtype, namespace, predicate or (lambda obj: True))
        )
        return list(items)

    def create(self, obj: Obj) -> Obj:
        rtype = self._type(obj["apiVersion"], obj["kind"])
        namespace = self._namespace(rtype, obj.get("metadata", {}).get("namespace"))
        body = copy.deepcopy(obj)
        created: Obj = self._call(lambda: self._store.create(rtype, namespace, body))
        return created

    def patch(
        self,
        api_version: str,
        resource: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """A merge patch, as ``kubectl patch --type=merge`` (``subresource="status"`` too)."""
        rtype = self._type(api_version, resource)
        body = copy.deepcopy(patch)
        patched: Obj = self._call(
            lambda: self._store.patch(
                rtype,
                self._namespace(rtype, namespace),
                name,
                patches.MERGE_PATCH,
                body,
                subresource,
            )
        )
        return patched

    def delete(
        self, api_version: str, resource: str, name: str, namespace: str | None = None
    ) -> Obj:
        rtype = self._type(api_version, resource)
        deleted: Obj = self._call(
            lambda: self._store.delete(rtype, self._namespace(rtype, namespace), name)
        )
        return deleted

    def events(
        self,
        namespace: str | None = None,
        *,
        involved_name: str | None = None,
        reason: str | None = None,
    ) -> list[Obj]:
        """v1 Events (as posted by the operator), optionally for one object or one reason."""
        return [
            event
            for event in self.list("v1", "events", namespace)
            if (
                involved_name is None
                or event.get("involvedObject", {}).get("name") == involved_name
            )
            and (reason is None or event.get("reason") == reason)
        ]

    @property
    def expired_watches(self) -> int:
        """How many watches were answered 410 Gone so far (each makes a client re-list)."""
        return int(self._call(lambda: self._store.history.expired))

    def compact(self) -> None:
        """Drop the watch history and close every watch: clients get 410 Gone and re-list."""
        self._call(self._store.history.compact)

    def set_history_limit(self, limit: int) -> None:
        """Bound the watch history to ``limit`` events from now on."""

        def apply() -> None:
            self._store.history.limit = limit

        self._call(apply)
