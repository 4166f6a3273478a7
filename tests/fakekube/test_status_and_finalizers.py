"""The status subresource, metadata.generation, and deletion with finalizers."""

from __future__ import annotations

from typing import Any

import aiohttp

from support.fakekube import FakeKube

WIDGETS = "/apis/example.headwater.io/v1/namespaces/default/widgets"
MERGE = {"Content-Type": "application/merge-patch+json"}


async def call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None, **kwargs: Any
) -> tuple[int, Any]:
    async with http.request(method, path, json=body, **kwargs) as response:
        return response.status, await response.json()


async def make(http: aiohttp.ClientSession, name: str = "w1", **meta: Any) -> dict[str, Any]:
    body = {"metadata": {"name": name, **meta}, "spec": {"color": "red"}, "status": {"phase": "x"}}
    status, created = await call(http, "POST", WIDGETS, body)
    assert status == 201
    return dict(created)


async def test_status_is_dropped_on_create(http: aiohttp.ClientSession) -> None:
    assert "status" not in await make(http)


async def test_main_endpoint_ignores_status(http: aiohttp.ClientSession) -> None:
    await make(http)
    ready = {"status": {"phase": "Ready"}}
    assert (await call(http, "PATCH", f"{WIDGETS}/w1/status", ready, headers=MERGE))[0] == 200
    patch = {"spec": {"color": "blue"}, "status": {"phase": "Hacked"}}
    patched = (await call(http, "PATCH", f"{WIDGETS}/w1", patch, headers=MERGE))[1]
    assert patched["spec"]["color"] == "blue" and patched["status"] == {"phase": "Ready"}
    removed = {**patched, "status": None}
    replaced = (await call(http, "PUT", f"{WIDGETS}/w1", removed))[1]
    assert replaced["status"] == {"phase": "Ready"}


async def test_status_endpoint_changes_only_status(http: aiohttp.ClientSession) -> None:
    created = await make(http)
    patch = {
        "spec": {"color": "blue"},
        "status": {"phase": "Ready"},
        "metadata": {"labels": {"a": "b"}},
    }
    status, patched = await call(http, "PATCH", f"{WIDGETS}/w1/status", patch, headers=MERGE)
    assert status == 200
    assert patched["status"] == {"phase": "Ready"}
    assert patched["spec"]["color"] == "red"
    assert "labels" not in patched["metadata"]
    assert patched["metadata"]["generation"] == 1  # a status change is not a spec change
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    fetched = (await call(http, "GET", f"{WIDGETS}/w1/status"))[1]
    assert fetched["status"] == {"phase": "Ready"}
    # PUT /status: same isolation, same optimistic concurrency.
    replaced = {**fetched, "status": {"phase": "Done"}, "spec": {"color": "green"}}
    assert (await call(http, "PUT", f"{WIDGETS}/w1/status", replaced))[1]["spec"]["color"] == "red"
    assert (await call(http, "PUT", f"{WIDGETS}/w1/status", replaced))[0] == 409


async def test_unknown_subresource_is_404(http: aiohttp.ClientSession) -> None:
    await make(http)
    assert (await call(http, "GET", f"{WIDGETS}/w1/scale"))[0] == 404
    config_maps = "/api/v1/namespaces/default/configmaps"
    await call(http, "POST", config_maps, {"metadata": {"name": "cm"}})
    assert (await call(http, "GET", f"{config_maps}/cm/status"))[0] == 404


async def test_generation_moves_only_with_the_spec(http: aiohttp.ClientSession) -> None:
    await make(http)

    async def patch(body: dict[str, Any]) -> int:
        patched = (await call(http, "PATCH", f"{WIDGETS}/w1", body, headers=MERGE))[1]
        return int(patched["metadata"]["generation"])

    assert await patch({"metadata": {"labels": {"a": "b"}}}) == 1
    assert await patch({"metadata": {"annotations": {"kopf": "x"}}}) == 1
    assert await patch({"spec": {"color": "blue"}}) == 2
    assert await patch({"spec": {"color": "blue"}}) == 2  # no change at all
    assert await patch({"spec": {"replicas": 3}}) == 3


async def test_finalizers_hold_the_object_until_removed(http: aiohttp.ClientSession) -> None:
    created = await make(http, finalizers=["example/one", "example/two"])
    status, deleting = await call(http, "DELETE", f"{WIDGETS}/w1")
    assert status == 200
    meta = deleting["metadata"]
    assert meta["deletionTimestamp"] and meta["deletionGracePeriodSeconds"] == 0
    assert meta["generation"] == created["metadata"]["generation"] + 1
    # Deleting again changes nothing; the object is still there.
    again = (await call(http, "DELETE", f"{WIDGETS}/w1"))[1]
    assert again["metadata"]["resourceVersion"] == meta["resourceVersion"]
    assert (await call(http, "GET", f"{WIDGETS}/w1"))[0] == 200
    # No new finalizers while being deleted.
    more = {"metadata": {"finalizers": ["example/one", "example/two", "example/three"]}}
    assert (await call(http, "PATCH", f"{WIDGETS}/w1", more, headers=MERGE))[0] == 422
    # A name that is being deleted cannot be created again.
    assert (
        await call(http, "POST", WIDGETS, {"metadata": {"name": "w1"}, "spec": {"color": "r"}})
    )[0] == 409

    fewer = {"metadata": {"finalizers": ["example/two"]}}
    assert (await call(http, "PATCH", f"{WIDGETS}/w1", fewer, headers=MERGE))[0] == 200
    assert (await call(http, "GET", f"{WIDGETS}/w1"))[0] == 200
    none = {"metadata": {"finalizers": None}}
    status, last = await call(http, "PATCH", f"{WIDGETS}/w1", none, headers=MERGE)
    assert status == 200 and last["metadata"].get("finalizers") is None
    assert (await call(http, "GET", f"{WIDGETS}/w1"))[0] == 404


async def test_inspector_sees_and_changes_the_same_state(
    fake_kube: FakeKube, http: aiohttp.ClientSession
) -> None:
    await make(http)
    seen = fake_kube.api.get("example.headwater.io/v1", "Widget", "w1", "default")
    assert seen is not None and seen["spec"]["color"] == "red"
    fake_kube.api.patch(
        "example.headwater.io/v1", "wd", "w1", {"status": {"phase": "Set"}}, subresource="status"
    )
    assert (await call(http, "GET", f"{WIDGETS}/w1"))[1]["status"] == {"phase": "Set"}
    assert [
        w["metadata"]["name"] for w in fake_kube.api.list("example.headwater.io/v1", "widgets")
    ] == ["w1"]
    fake_kube.api.delete("example.headwater.io/v1", "widgets", "w1")
    assert fake_kube.api.get("example.headwater.io/v1", "widgets", "w1") is None
