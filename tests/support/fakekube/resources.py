"""Resource types the fake server knows: the built-ins kopf needs, plus those defined by CRDs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import errors

VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")
SUBRESOURCE_VERBS = ("get", "patch", "update")
CRD_GROUP = "apiextensions.k8s.io"


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core ("legacy") API
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    # openAPIV3Schema; None means no validation, no defaulting and no pruning (the built-ins).
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    # Custom resources (and CRDs) carry metadata.generation; ConfigMaps and friends do not.
    generational: bool = False
    custom: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> tuple[str, str]:
        return (self.group, self.version)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.plural)

    def matches(self, name: str) -> bool:
        """Whether ``name`` is this type's plural, singular, kind or a short name."""
        lowered = name.lower()
        return lowered in {self.plural, self.singular, self.kind.lower(), *self.short_names}


BUILTINS: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", "namespace", False, ("ns",)),
    ResourceType("", "v1", "events", "Event", "event", True, ("ev",)),
    ResourceType("", "v1", "secrets", "Secret", "secret", True),
    ResourceType("", "v1", "configmaps", "ConfigMap", "configmap", True, ("cm",)),
    ResourceType(
        CRD_GROUP,
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        "customresourcedefinition",
        False,
        ("crd", "crds"),
        status_subresource=True,
        generational=True,
    ),
)
# kopf's peering objects, so that an operator can also be tested without --standalone. A real
# cluster serves them only once their CRDs are applied: ``Registry(kopf_peerings=False)``.
KOPF_PEERINGS: tuple[ResourceType, ...] = (
    ResourceType("kopf.dev", "v1", "kopfpeerings", "KopfPeering", "kopfpeering", True),
    ResourceType(
        "kopf.dev", "v1", "clusterkopfpeerings", "ClusterKopfPeering", "clusterkopfpeering", False
    ),
)


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key in Kubernetes' version priority: GA before beta before alpha, newer first.

    v1 < v1beta2 < v1beta1 < v1alpha1 < (anything that is not a Kubernetes version).
    """
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if match is None:
        return (3, 0, 0, version)
    stability = {None: 0, "beta": 1, "alpha": 2}[match[2]]
    return (stability, -int(match[1]), -int(match[3] or 0), version)


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """One ResourceType per served version of an apiextensions.k8s.io/v1 CRD."""
    if crd.get("apiVersion") != f"{CRD_GROUP}/v1" or crd.get("kind") != "CustomResourceDefinition":
        raise errors.bad_request(
            "only apiextensions.k8s.io/v1 CustomResourceDefinitions are served"
        )
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    try:
        group, plural, kind = spec["group"], names["plural"], names["kind"]
        scope = spec["scope"]
    except KeyError as missing:
        raise errors.invalid(
            "CustomResourceDefinition",
            CRD_GROUP,
            crd.get("metadata", {}).get("name", ""),
            [("FieldValueRequired", f"spec.{missing.args[0]}", "Required value")],
        ) from None
    result = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        result.append(
            ResourceType(
                group=group,
                version=version["name"],
                plural=plural,
                kind=kind,
                singular=names.get("singular") or kind.lower(),
                namespaced=scope == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                status_subresource="status" in (version.get("subresources") or {}),
                schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                generational=True,
                custom=True,
            )
        )
    return result


class Registry:
    """The served resource types, by group/version and plural."""

    def __init__(self, *, kopf_peerings: bool = True) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        # Which CRD (by name) brought which types, so deleting the CRD removes exactly those.
        self._by_crd: dict[str, list[ResourceType]] = {}
        for builtin in BUILTINS + (KOPF_PEERINGS if kopf_peerings else ()):
            self._types[builtin.key] = builtin

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._types.values()))

    def add_crd(self, crd_name: str, types: list[ResourceType]) -> None:
        self.remove_crd(crd_name)
        self._by_crd[crd_name] = types
        for rtype in types:
            self._types[rtype.key] = rtype

    def remove_crd(self, crd_name: str) -> list[ResourceType]:
        removed = self._by_crd.pop(crd_name, [])
        for rtype in removed:
            self._types.pop(rtype.key, None)
        return removed

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def find(self, api_version: str, name: str) -> ResourceType:
        """Look a type up by apiVersion and any of its names (plural, kind, short name)."""
        group, _, version = api_version.rpartition("/")
        for rtype in self._types.values():
            if rtype.group == group and rtype.version == version and rtype.matches(name):
                return rtype
        raise errors.not_found(group, name, api_version)

    def group_versions(self) -> dict[str, list[str]]:
        """Group name -> its versions, most preferred first ("" is the core group)."""
        found: dict[str, list[str]] = {}
        for rtype in self._types.values():
            versions = found.setdefault(rtype.group, [])
            if rtype.version not in versions:
                versions.append(rtype.version)
        return {group: sorted(versions, key=version_priority) for group, versions in found.items()}

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for t in self._types.values() if t.group_version == (group, version)]
