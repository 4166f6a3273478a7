"""Object storage with the API server's write semantics.

Everything here is synchronous and runs on the server's event loop (tests reach it through
:class:`support.fakekube.inspector.Inspector`, which hops onto that loop when needed), so a
change, its resourceVersion and its watch event happen atomically.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

from . import errors, patches
from .history import Event, History, StorageKey, Watch
from .resources import CRD_GROUP, Registry, ResourceType, types_from_crd
from .schema import ObjectSchema

Obj = dict[str, Any]
Predicate = Callable[[Obj], bool]

# Fields of metadata that only the server sets; a client's values for them are ignored.
_SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
)
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of generateName suffixes
INITIAL_NAMESPACES = ("default", "kube-system")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _storage(rtype: ResourceType) -> StorageKey:
    return (rtype.group, rtype.plural)


def _spec_part(rtype: ResourceType, obj: Obj) -> Obj:
    """What metadata.generation tracks: everything but metadata (and status if split off)."""
    ignored = {"metadata", "status"} if rtype.status_subresource else {"metadata"}
    return {key: value for key, value in obj.items() if key not in ignored}


def as_version(rtype: ResourceType, obj: Obj) -> Obj:
    """A view of a stored object as ``rtype``'s version (conversion strategy "None")."""
    if obj.get("apiVersion") == rtype.api_version:
        return obj
    return {**obj, "apiVersion": rtype.api_version}


class Store:
    def __init__(self, registry: Registry, *, history_limit: int = 1000) -> None:
        self.registry = registry
        self.history = History(history_limit, start=1000)
        self._objects: dict[StorageKey, dict[tuple[str, str], Obj]] = {}
        self._schemas: dict[tuple[str, str, str], tuple[int, ObjectSchema]] = {}
        for namespace in INITIAL_NAMESPACES:
            self.create(
                self.registry.find("v1", "namespaces"), None, {"metadata": {"name": namespace}}
            )

    # --- reads -------------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        return copy.deepcopy(as_version(rtype, self._existing(rtype, namespace, name)))

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None,
        predicate: Predicate = lambda obj: True,
        *,
        limit: int = 0,
        continue_token: str = "",
    ) -> tuple[list[Obj], int, str]:
        """Matching objects ordered by namespace and name, the list's version, the next token."""
        after: tuple[str, str] = ("", "")
        if continue_token:
            after = self._decode_continue(continue_token)
        bucket = self._objects.get(_storage(rtype), {})
        items = [
            as_version(rtype, bucket[key])
            for key in sorted(bucket)
            if key > after and (namespace is None or key[0] == namespace) and predicate(bucket[key])
        ]
        token = ""
        if limit and len(items) > limit:
            items = items[:limit]
            last = items[-1]["metadata"]
            token = self._encode_continue(last.get("namespace", ""), last["name"])
        return copy.deepcopy(items), self.history.current, token

    def _encode_continue(self, namespace: str, name: str) -> str:
        raw = json.dumps({"rv": self.history.current, "start": [namespace, name]})
        return base64.urlsafe_b64encode(raw.encode()).decode()

    def _decode_continue(self, token: str) -> tuple[str, str]:
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
            version, (namespace, name) = int(decoded["rv"]), decoded["start"]
        except (ValueError, KeyError, TypeError):
            raise errors.bad_request(f"invalid continue token {token!r}") from None
        if version < self.history.floor:
            raise errors.gone(
                "The provided continue parameter is too old to display a consistent "
                "list result. You can start a new list without the continue parameter."
            )
        return (namespace, name)

    def open_watch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        predicate: Predicate,
        since: str | None,
    ) -> tuple[list[Event], Watch]:
        """Start a watch: the events to replay first, and the watch that gets the rest.

        Without a resourceVersion (or with "0") the watch starts with a synthetic ADDED for
        every existing object, as the real server does.
        """
        watch = Watch(_storage(rtype), namespace, predicate)
        if since in (None, "", "0"):
            items, _, _ = self.list(rtype, namespace, predicate)
            self.history.register(watch)
            initial = [
                Event(
                    int(obj["metadata"]["resourceVersion"]),
                    "ADDED",
                    watch.storage,
                    obj["metadata"].get("namespace", ""),
                    obj,
                )
                for obj in items
            ]
            return initial, watch
        try:
            version = int(since)  # type: ignore[arg-type]
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion {since!r}") from None
        return self.history.open(watch, version), watch

    # --- writes ------------------------------------------------------------------------------

    def create(self, rtype: ResourceType, namespace: str | None, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        self._check_kind(rtype, obj)
        meta = obj.setdefault("metadata", {})
        namespace = self._check_namespace(rtype, namespace, meta)
        for field in _SERVER_METADATA:
            meta.pop(field, None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(
                    rtype.kind,
                    rtype.group,
                    "",
                    [("FieldValueRequired", "metadata.name", "name or generateName is required")],
                )
            meta["name"] = self._generate_name(rtype, namespace or "", meta["generateName"])
        if (namespace or "", meta["name"]) in self._objects.get(_storage(rtype), {}):
            raise errors.already_exists(rtype.group, rtype.plural, meta["name"])
        if rtype.status_subresource:
            obj.pop("status", None)  # status is only ever written through /status
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        if rtype.generational:
            meta["generation"] = 1
        self._prepare(rtype, obj)
        return copy.deepcopy(self._commit(rtype, "ADDED", obj))

    def replace(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Obj,
        subresource: str | None = None,
    ) -> Obj:
        obj = copy.deepcopy(body)
        self._check_kind(rtype, obj)
        meta = obj.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name "
                f"on the URL ({name})"
            )
        if rtype.custom and not meta.get("resourceVersion"):
            # Custom resources do not allow unconditional updates.
            raise errors.invalid(
                rtype.kind,
                rtype.group,
                name,
                [
                    (
                        "FieldValueInvalid",
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )
                ],
            )
        return self._update(rtype, namespace, name, obj, subresource)

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        body: Any,
        subresource: str | None = None,
    ) -> Obj:
        old = as_version(rtype, self._existing(rtype, namespace, name))
        patched = patches.apply_patch(copy.deepcopy(old), content_type, body, custom=rtype.custom)
        return self._update(rtype, namespace, name, patched, subresource)

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        preconditions: dict[str, Any] | None = None,
    ) -> Obj:
        old = as_version(rtype, self._existing(rtype, namespace, name))
        for field in ("uid", "resourceVersion"):
            wanted = (preconditions or {}).get(field)
            if wanted is not None and wanted != old["metadata"].get(field):
                raise errors.conflict(rtype.group, rtype.plural, name)
        meta = old["metadata"]
        if not meta.get("finalizers"):
            return copy.deepcopy(self._commit(rtype, "DELETED", copy.deepcopy(old)))
        if meta.get("deletionTimestamp"):
            return copy.deepcopy(old)  # already being deleted: nothing changes
        obj = copy.deepcopy(old)
        obj["metadata"]["deletionTimestamp"] = now()
        obj["metadata"]["deletionGracePeriodSeconds"] = 0
        if obj["metadata"].get("generation"):
            # Controllers must notice that the object is going away: the server bumps it.
            obj["metadata"]["generation"] += 1
        return copy.deepcopy(self._commit(rtype, "MODIFIED", obj))

    # --- internals ---------------------------------------------------------------------------

    def _existing(self, rtype: ResourceType, namespace: str | None, name: str) -> Obj:
        found = self._objects.get(_storage(rtype), {}).get((namespace or "", name))
        if found is None:
            raise errors.not_found(rtype.group, rtype.plural, name)
        return found

    def _check_kind(self, rtype: ResourceType, obj: Obj) -> None:
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
            raise errors.bad_request("the body must be a JSON object with object metadata")
        for field, expected in (("apiVersion", rtype.api_version), ("kind", rtype.kind)):
            if obj.setdefault(field, expected) != expected:
                raise errors.bad_request(
                    f"the {field} of the object ({obj[field]}) does not match the URL ({expected})"
                )

    def _check_namespace(self, rtype: ResourceType, namespace: str | None, meta: Obj) -> str | None:
        if not rtype.namespaced:
            meta.pop("namespace", None)
            return None
        if namespace is None:
            raise errors.bad_request("the namespace of a namespaced object must be in the URL")
        if meta.setdefault("namespace", namespace) != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        found = self._objects.get(("", "namespaces"), {}).get(("", namespace))
        if found is None:
            raise errors.not_found("", "namespaces", namespace)
        if found["metadata"].get("deletionTimestamp"):
            raise errors.ApiError(403, "Forbidden", f"namespace {namespace} is being terminated")
        return namespace

    def _generate_name(self, rtype: ResourceType, namespace: str, prefix: str) -> str:
        bucket = self._objects.get(_storage(rtype), {})
        while True:
            name = prefix + "".join(random.choices(_NAME_CHARS, k=5))
            if (namespace, name) not in bucket:
                return name

    def _schema(self, rtype: ResourceType) -> ObjectSchema | None:
        if rtype.schema is None:
            return None
        cached = self._schemas.get(rtype.key)
        if cached is None or cached[0] != id(rtype.schema):
            cached = (id(rtype.schema), ObjectSchema(rtype.schema))
            self._schemas[rtype.key] = cached
        return cached[1]

    def _prepare(self, rtype: ResourceType, obj: Obj) -> None:
        """Type-specific normalisation, then schema pruning, defaulting and validation."""
        meta = obj["metadata"]
        name = meta.get("name", "")
        if not name or "/" in name or "%" in name or len(name) > 253:
            raise errors.invalid(
                rtype.kind,
                rtype.group,
                name,
                [("FieldValueInvalid", "metadata.name", f"Invalid value: {json.dumps(name)}")],
            )
        if rtype.key == ("", "v1", "secrets") and "stringData" in obj:
            data = obj.setdefault("data", {})
            for key, value in obj.pop("stringData").items():
                data[key] = base64.b64encode(str(value).encode()).decode()
        if rtype.key == ("", "v1", "namespaces"):
            obj.setdefault("status", {})["phase"] = (
                "Terminating" if meta.get("deletionTimestamp") else "Active"
            )
        if rtype.key == (CRD_GROUP, "v1", "customresourcedefinitions"):
            types_from_crd(obj)  # refuse a CRD we could not serve, before storing it
            obj["status"] = {
                "acceptedNames": obj["spec"]["names"],
                "storedVersions": [
                    v["name"] for v in obj["spec"].get("versions", []) if v.get("storage")
                ],
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
                ],
            }
        schema = self._schema(rtype)
        if schema is not None:
            schema.normalize(obj)
            causes = schema.validate(obj)
            if causes:
                raise errors.invalid(rtype.kind, rtype.group, name, causes)

    def _update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        new: Obj,
        subresource: str | None,
    ) -> Obj:
        if subresource not in (None, "status") or (subresource and not rtype.status_subresource):
            raise errors.not_found(rtype.group, f"{rtype.plural}/{subresource}", name)
        old = self._existing(rtype, namespace, name)
        self._check_kind(rtype, new)
        old_meta, new_meta = old["metadata"], new.setdefault("metadata", {})
        wanted = new_meta.get("resourceVersion")
        if wanted and wanted != old_meta["resourceVersion"]:
            raise errors.conflict(rtype.group, rtype.plural, name)
        if subresource == "status":
            # /status changes the status and nothing else.
            obj = copy.deepcopy(old)
            if "status" in new:
                obj["status"] = new["status"]
            else:
                obj.pop("status", None)
        else:
            obj = new
            if rtype.status_subresource:
                # The main endpoint ignores status changes when status is a subresource.
                obj.pop("status", None)
                if "status" in old:
                    obj["status"] = copy.deepcopy(old["status"])
            for field in (*_SERVER_METADATA, "name", "namespace"):
                new_meta.pop(field, None)
                if field in old_meta:
                    new_meta[field] = old_meta[field]
            added = set(new_meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
            if old_meta.get("deletionTimestamp") and added:
                raise errors.invalid(
                    rtype.kind,
                    rtype.group,
                    name,
                    [
                        (
                            "FieldValueForbidden",
                            "metadata.finalizers",
                            f"Forbidden: no new finalizers can be added if the object is being "
                            f"deleted, found new finalizers {sorted(added)}",
                        )
                    ],
                )
        self._prepare(rtype, obj)
        if obj == old:
            return copy.deepcopy(as_version(rtype, old))  # a no-op write changes nothing
        if rtype.generational and _spec_part(rtype, obj) != _spec_part(rtype, old):
            obj["metadata"]["generation"] = old_meta.get("generation", 0) + 1
        gone = obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers")
        return copy.deepcopy(self._commit(rtype, "DELETED" if gone else "MODIFIED", obj))

    def _commit(self, rtype: ResourceType, event_type: str, obj: Obj) -> Obj:
        """Give ``obj`` the next resourceVersion, store or remove it, and tell the watches."""
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.history.next_version())
        key = (meta.get("namespace", ""), meta["name"])
        bucket = self._objects.setdefault(_storage(rtype), {})
        if event_type == "DELETED":
            bucket.pop(key, None)
        else:
            bucket[key] = obj
        snapshot = copy.deepcopy(obj)
        self.history.record(
            Event(int(meta["resourceVersion"]), event_type, _storage(rtype), key[0], snapshot)
        )
        if rtype.key == (CRD_GROUP, "v1", "customresourcedefinitions"):
            self._sync_crd(obj, deleted=event_type == "DELETED")
        return obj

    def _sync_crd(self, crd: Obj, *, deleted: bool) -> None:
        """Serve (or stop serving) the types a CRD defines, as its writes happen."""
        name = crd["metadata"]["name"]
        if not deleted:
            self.registry.add_crd(name, types_from_crd(crd))
            return
        for rtype in self.registry.remove_crd(name):
            # The real server deletes every custom resource first; the fake drops them and
            # ends their watches, which is what a client observes once the CRD is gone.
            self._objects.pop(_storage(rtype), None)
            self.history.close_all(_storage(rtype))
