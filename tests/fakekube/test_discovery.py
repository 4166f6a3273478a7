"""Discovery, authentication and CRDs served (and unserved) as they are written."""

from __future__ import annotations

from typing import Any

import aiohttp

from support.fakekube import FakeKube


async def get(http: aiohttp.ClientSession, path: str) -> tuple[int, Any]:
    async with http.get(path) as response:
        return response.status, await response.json()


def by_name(resource_list: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in resource_list["resources"]}


async def test_core_api_lists_what_kopf_needs(http: aiohttp.ClientSession) -> None:
    status, versions = await get(http, "/api")
    assert (status, versions["versions"]) == (200, ["v1"])
    status, core = await get(http, "/api/v1")
    assert status == 200 and core["groupVersion"] == "v1"
    resources = by_name(core)
    assert {"namespaces", "events", "secrets", "configmaps"} <= set(resources)
    assert resources["namespaces"]["namespaced"] is False
    assert resources["configmaps"]["namespaced"] is True
    assert resources["events"]["singularName"] == "event"
    assert {"list", "watch", "patch", "create"} <= set(resources["secrets"]["verbs"])


async def test_groups_include_crds_and_custom_resources(http: aiohttp.ClientSession) -> None:
    status, groups = await get(http, "/apis")
    assert status == 200
    names = {group["name"]: group for group in groups["groups"]}
    assert {"apiextensions.k8s.io", "example.headwater.io"} <= set(names)
    assert "" not in names
    assert names["example.headwater.io"]["preferredVersion"]["version"] == "v1"
    status, group = await get(http, "/apis/example.headwater.io")
    assert status == 200 and group["kind"] == "APIGroup"
    status, crds = await get(http, "/apis/apiextensions.k8s.io/v1")
    assert by_name(crds)["customresourcedefinitions"]["namespaced"] is False


async def test_custom_resource_entry_and_status_subresource(http: aiohttp.ClientSession) -> None:
    status, widgets = await get(http, "/apis/example.headwater.io/v1")
    assert status == 200
    resources = by_name(widgets)
    main = resources["widgets"]
    assert main["kind"] == "Widget" and main["singularName"] == "widget"
    assert main["namespaced"] is True and main["shortNames"] == ["wd"]
    assert {"get", "list", "watch", "create", "update", "patch", "delete"} <= set(main["verbs"])
    assert set(resources["widgets/status"]["verbs"]) == {"get", "patch", "update"}


async def test_unknown_group_and_version_are_404(http: aiohttp.ClientSession) -> None:
    assert (await get(http, "/apis/nothing.example.com"))[0] == 404
    assert (await get(http, "/apis/example.headwater.io/v9"))[0] == 404
    status, body = await get(http, "/apis/example.headwater.io/v1/namespaces/default/gadgets")
    assert status == 404 and body["kind"] == "Status" and body["code"] == 404


async def test_requests_without_the_token_are_401(fake_kube: FakeKube) -> None:
    async with aiohttp.ClientSession(fake_kube.url) as anonymous:
        status, body = await get(anonymous, "/api/v1")
    assert status == 401 and body["reason"] == "Unauthorized"
    headers = {"Authorization": "Bearer wrong"}
    async with aiohttp.ClientSession(fake_kube.url, headers=headers) as wrong:
        assert (await get(wrong, "/apis"))[0] == 401


async def test_version_endpoint(http: aiohttp.ClientSession) -> None:
    status, version = await get(http, "/version")
    assert status == 200 and version["major"] == "1"


GADGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.headwater.io"},
    "spec": {
        "group": "example.headwater.io",
        "scope": "Cluster",
        "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"n": {"type": "integer"}}}
                        },
                    }
                },
            }
        ],
    },
}


async def test_a_crd_posted_through_the_api_is_served_until_deleted(
    http: aiohttp.ClientSession,
) -> None:
    async with http.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=GADGET_CRD
    ) as response:
        assert response.status == 201
        crd = await response.json()
    established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert established["Established"] == "True"
    assert "gadgets" in by_name((await get(http, "/apis/example.headwater.io/v1"))[1])

    gadgets = "/apis/example.headwater.io/v1/gadgets"
    async with http.post(gadgets, json={"metadata": {"name": "g1"}, "spec": {"n": 1}}) as response:
        assert response.status == 201
        assert "namespace" not in (await response.json())["metadata"]  # cluster-scoped
    async with http.post(
        gadgets, json={"metadata": {"name": "g2"}, "spec": {"n": "x"}}
    ) as response:
        assert response.status == 422

    name = GADGET_CRD["metadata"]["name"]  # type: ignore[index]
    crd_url = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    async with http.delete(crd_url) as response:
        assert response.status == 200
    assert "gadgets" not in by_name((await get(http, "/apis/example.headwater.io/v1"))[1])
    assert (await get(http, gadgets))[0] == 404


THING_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "things.example.headwater.io"},
    "spec": {
        "group": "example.headwater.io",
        "scope": "Namespaced",
        "names": {"kind": "Thing", "plural": "things"},
        "versions": [
            {
                "name": name,
                "served": True,
                "storage": name == "v1",
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
            for name in ("v1alpha1", "v2beta1", "v2")
        ]
        + [{"name": "v0", "served": False, "storage": False}],
    },
}


async def test_served_versions_share_one_storage(
    fake_kube: FakeKube, http: aiohttp.ClientSession
) -> None:
    fake_kube.api.create(THING_CRD)
    groups = {g["name"]: g for g in (await get(http, "/apis"))[1]["groups"]}
    group = groups["example.headwater.io"]
    assert [v["version"] for v in group["versions"]] == ["v2", "v1", "v2beta1", "v1alpha1"]
    assert group["preferredVersion"]["version"] == "v2"
    assert (await get(http, "/apis/example.headwater.io/v0"))[0] == 404

    alpha = "/apis/example.headwater.io/v1alpha1/namespaces/default/things"
    async with http.post(alpha, json={"metadata": {"name": "t1"}, "anything": 1}) as response:
        assert response.status == 201
    status, thing = await get(http, "/apis/example.headwater.io/v2/namespaces/default/things/t1")
    assert status == 200 and thing["apiVersion"] == "example.headwater.io/v2"
    assert thing["anything"] == 1
    listed = (await get(http, "/apis/example.headwater.io/v2beta1/things"))[1]
    assert [i["apiVersion"] for i in listed["items"]] == ["example.headwater.io/v2beta1"]
