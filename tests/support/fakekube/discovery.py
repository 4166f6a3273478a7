"""Discovery documents: what ``GET /api``, ``/apis`` and ``/apis/{group}/{version}`` return.

kopf builds its resource list from these: it needs ``verbs``, ``namespaced`` and
``singularName`` per resource and learns about subresources from ``{plural}/status`` entries.
"""

from __future__ import annotations

from typing import Any

from .resources import SUBRESOURCE_VERBS, VERBS, Registry, ResourceType

SERVER_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-fakekube",
    "platform": "linux/amd64",
}


def core_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def group_list(registry: Registry) -> dict[str, Any]:
    groups = [
        _group(name, versions)
        for name, versions in registry.group_versions().items()
        if name  # the core group is served under /api, not /apis
    ]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group(registry: Registry, name: str) -> dict[str, Any] | None:
    versions = registry.group_versions().get(name)
    if not name or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _entries(rtype: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rtype.plural,
        "singularName": rtype.singular,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": list(VERBS),
    }
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        main["categories"] = list(rtype.categories)
    entries = [main]
    if rtype.status_subresource:
        entries.append(
            {
                "name": f"{rtype.plural}/status",
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": list(SUBRESOURCE_VERBS),
            }
        )
    return entries


def resource_list(registry: Registry, group_name: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group_name, version)
    if not types:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group_name}/{version}" if group_name else version,
        "resources": [entry for rtype in types for entry in _entries(rtype)],
    }
