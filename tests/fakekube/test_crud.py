"""Create, read, list, replace, patch and delete through plain HTTP, and the Status errors."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import aiohttp

WIDGETS = "/apis/example.headwater.io/v1/namespaces/default/widgets"
ALL_WIDGETS = "/apis/example.headwater.io/v1/widgets"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


def widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.headwater.io/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"color": "red", **spec},
    }


async def call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None, **kwargs: Any
) -> tuple[int, Any]:
    async with http.request(method, path, json=body, **kwargs) as response:
        return response.status, await response.json()


async def test_create_assigns_identity_and_get_returns_it(http: aiohttp.ClientSession) -> None:
    status, created = await call(http, "POST", WIDGETS, widget("w1"))
    assert status == 201
    meta = created["metadata"]
    assert uuid.UUID(meta["uid"])
    assert meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1
    assert meta["namespace"] == "default"
    assert int(meta["resourceVersion"]) > 0
    status, fetched = await call(http, "GET", f"{WIDGETS}/w1")
    assert status == 200 and fetched == created


async def test_generate_name(http: aiohttp.ClientSession) -> None:
    body = widget("")
    body["metadata"] = {"generateName": "gen-"}
    first = (await call(http, "POST", WIDGETS, body))[1]["metadata"]["name"]
    second = (await call(http, "POST", WIDGETS, body))[1]["metadata"]["name"]
    assert first.startswith("gen-") and second.startswith("gen-") and first != second
    body["metadata"] = {}
    status, failure = await call(http, "POST", WIDGETS, body)
    assert status == 422 and failure["details"]["causes"][0]["field"] == "metadata.name"


async def test_errors_are_status_objects(http: aiohttp.ClientSession) -> None:
    status, missing = await call(http, "GET", f"{WIDGETS}/nope")
    assert status == 404
    assert missing["kind"] == "Status" and missing["status"] == "Failure"
    assert missing["reason"] == "NotFound" and missing["code"] == 404
    assert missing["details"] == {
        "group": "example.headwater.io",
        "kind": "widgets",
        "name": "nope",
    }
    await call(http, "POST", WIDGETS, widget("w1"))
    status, duplicate = await call(http, "POST", WIDGETS, widget("w1"))
    assert status == 409 and duplicate["reason"] == "AlreadyExists"


async def test_create_checks_namespace_and_kind(http: aiohttp.ClientSession) -> None:
    elsewhere = "/apis/example.headwater.io/v1/namespaces/missing/widgets"
    status, failure = await call(http, "POST", elsewhere, widget("w1"))
    assert status == 404 and failure["details"]["kind"] == "namespaces"
    mismatched = widget("w1")
    mismatched["metadata"]["namespace"] = "kube-system"
    assert (await call(http, "POST", WIDGETS, mismatched))[0] == 400
    wrong_kind = {**widget("w1"), "kind": "Gadget"}
    assert (await call(http, "POST", WIDGETS, wrong_kind))[0] == 400
    assert (await call(http, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}}))[
        0
    ] == 201
    team = "/apis/example.headwater.io/v1/namespaces/team/widgets"
    assert (await call(http, "POST", team, widget("w1")))[0] == 201


async def test_list_namespaced_and_across_namespaces(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    await call(http, "POST", WIDGETS, widget("b"))
    await call(http, "POST", WIDGETS, widget("a"))
    await call(http, "POST", "/apis/example.headwater.io/v1/namespaces/team/widgets", widget("c"))
    status, listed = await call(http, "GET", WIDGETS)
    assert status == 200
    assert listed["kind"] == "WidgetList" and listed["apiVersion"] == "example.headwater.io/v1"
    assert [item["metadata"]["name"] for item in listed["items"]] == ["a", "b"]
    assert int(listed["metadata"]["resourceVersion"]) >= max(
        int(item["metadata"]["resourceVersion"]) for item in listed["items"]
    )
    everywhere = (await call(http, "GET", ALL_WIDGETS))[1]["items"]
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere] == [
        ("default", "a"),
        ("default", "b"),
        ("team", "c"),
    ]


async def test_list_pages_with_limit_and_continue(http: aiohttp.ClientSession) -> None:
    for index in range(5):
        await call(http, "POST", WIDGETS, widget(f"w{index}"))
    names: list[str] = []
    token = ""
    pages = 0
    while True:
        params = {"limit": "2", **({"continue": token} if token else {})}
        listed = (await call(http, "GET", WIDGETS, params=params))[1]
        names += [item["metadata"]["name"] for item in listed["items"]]
        pages += 1
        token = listed["metadata"].get("continue", "")
        if not token:
            break
    assert names == ["w0", "w1", "w2", "w3", "w4"] and pages == 3
    assert (await call(http, "GET", WIDGETS, params={"continue": "garbage"}))[0] == 400


async def test_list_with_label_and_field_selectors(http: aiohttp.ClientSession) -> None:
    for name, labels in (("a", {"tier": "db"}), ("b", {"tier": "web"}), ("c", {})):
        body = widget(name)
        body["metadata"]["labels"] = labels
        await call(http, "POST", WIDGETS, body)

    async def names(**params: str) -> list[str]:
        items = (await call(http, "GET", WIDGETS, params=params))[1]["items"]
        return [item["metadata"]["name"] for item in items]

    assert await names(labelSelector="tier=db") == ["a"]
    assert await names(labelSelector="tier!=db") == ["b", "c"]
    assert await names(labelSelector="tier in (db,web)") == ["a", "b"]
    assert await names(labelSelector="tier notin (db)") == ["b", "c"]
    assert await names(labelSelector="tier") == ["a", "b"]
    assert await names(labelSelector="!tier") == ["c"]
    assert await names(fieldSelector="metadata.name=b") == ["b"]
    assert await names(fieldSelector="metadata.namespace=default,metadata.name!=a") == ["b", "c"]
    assert (await call(http, "GET", WIDGETS, params={"fieldSelector": "spec.color=red"}))[0] == 400


async def test_put_replaces_and_checks_the_resource_version(http: aiohttp.ClientSession) -> None:
    created = (await call(http, "POST", WIDGETS, widget("w1")))[1]
    changed = {**created, "spec": {"color": "blue"}}
    status, replaced = await call(http, "PUT", f"{WIDGETS}/w1", changed)
    assert status == 200 and replaced["spec"]["color"] == "blue"
    assert int(replaced["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )
    # The old version is now stale: a conflict, not a lost update.
    status, failure = await call(http, "PUT", f"{WIDGETS}/w1", {**created, "spec": {"color": "x"}})
    assert status == 409 and failure["reason"] == "Conflict"
    # Custom resources refuse unconditional updates.
    unconditional = widget("w1")
    assert (await call(http, "PUT", f"{WIDGETS}/w1", unconditional))[0] == 422
    renamed = {**replaced, "metadata": {**replaced["metadata"], "name": "other"}}
    assert (await call(http, "PUT", f"{WIDGETS}/w1", renamed))[0] == 400


async def test_server_owned_metadata_cannot_be_overwritten(http: aiohttp.ClientSession) -> None:
    created = (await call(http, "POST", WIDGETS, widget("w1")))[1]
    forged = {"metadata": {"uid": "forged", "creationTimestamp": "1999-01-01T00:00:00Z"}}
    patched = (await call(http, "PATCH", f"{WIDGETS}/w1", forged, headers=MERGE))[1]
    assert patched["metadata"]["uid"] == created["metadata"]["uid"]
    assert patched["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]


async def test_merge_patch(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", WIDGETS, widget("w1", note="hi", labels={"a": "1", "b": "2"}))
    patch = {"spec": {"note": None, "labels": {"a": None, "c": "3"}}}
    status, patched = await call(http, "PATCH", f"{WIDGETS}/w1", patch, headers=MERGE)
    assert status == 200
    assert "note" not in patched["spec"]
    assert patched["spec"]["labels"] == {"b": "2", "c": "3"}
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"color": "blue"}}
    status, failure = await call(http, "PATCH", f"{WIDGETS}/w1", stale, headers=MERGE)
    assert status == 409 and failure["reason"] == "Conflict"


async def test_json_patch_and_a_failed_test_is_422(http: aiohttp.ClientSession) -> None:
    created = (await call(http, "POST", WIDGETS, widget("w1")))[1]
    version = created["metadata"]["resourceVersion"]
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example/f"]},
    ]
    status, patched = await call(http, "PATCH", f"{WIDGETS}/w1", ops, headers=JSON_PATCH)
    assert status == 200 and patched["metadata"]["finalizers"] == ["example/f"]
    # The same guard again: the version moved on, so kopf must be told 422, not 409 or 500.
    status, failure = await call(http, "PATCH", f"{WIDGETS}/w1", ops, headers=JSON_PATCH)
    assert status == 422 and failure["kind"] == "Status" and failure["code"] == 422
    bad_path = [{"op": "replace", "path": "/spec/nothing/deep", "value": 1}]
    assert (await call(http, "PATCH", f"{WIDGETS}/w1", bad_path, headers=JSON_PATCH))[0] == 422
    other = {"Content-Type": "application/strategic-merge-patch+json"}
    assert (await call(http, "PATCH", f"{WIDGETS}/w1", {"spec": {}}, headers=other))[0] == 415


async def test_no_op_write_keeps_the_resource_version(http: aiohttp.ClientSession) -> None:
    created = (await call(http, "POST", WIDGETS, widget("w1")))[1]
    same = {"spec": {"color": "red"}}
    patched = (await call(http, "PATCH", f"{WIDGETS}/w1", same, headers=MERGE))[1]
    assert patched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_resource_version_is_global_and_monotonic(http: aiohttp.ClientSession) -> None:
    versions = []
    for name in ("a", "b"):
        versions.append((await call(http, "POST", WIDGETS, widget(name)))[1])
    config_map = {"metadata": {"name": "cm"}, "data": {"k": "v"}}
    versions.append(
        (await call(http, "POST", "/api/v1/namespaces/default/configmaps", config_map))[1]
    )
    patch = {"spec": {"color": "blue"}}
    versions.append((await call(http, "PATCH", f"{WIDGETS}/a", patch, headers=MERGE))[1])
    numbers = [int(obj["metadata"]["resourceVersion"]) for obj in versions]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


async def test_delete_without_finalizers_removes(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", WIDGETS, widget("w1"))
    status, deleted = await call(http, "DELETE", f"{WIDGETS}/w1")
    assert status == 200 and deleted["metadata"]["name"] == "w1"
    assert (await call(http, "GET", f"{WIDGETS}/w1"))[0] == 404
    assert (await call(http, "DELETE", f"{WIDGETS}/w1"))[0] == 404


async def test_delete_preconditions(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", WIDGETS, widget("w1"))
    options = {"kind": "DeleteOptions", "preconditions": {"uid": "not-the-uid"}}
    assert (await call(http, "DELETE", f"{WIDGETS}/w1", options))[0] == 409
    assert (await call(http, "GET", f"{WIDGETS}/w1"))[0] == 200


async def test_secrets_and_configmaps(http: aiohttp.ClientSession) -> None:
    secrets = "/api/v1/namespaces/default/secrets"
    body = {"metadata": {"name": "conn"}, "stringData": {"token": "s3cret"}}
    status, secret = await call(http, "POST", secrets, body)
    assert status == 201 and "stringData" not in secret
    assert base64.b64decode(secret["data"]["token"]) == b"s3cret"
    assert "generation" not in secret["metadata"]
    config_maps = "/api/v1/namespaces/default/configmaps"
    await call(http, "POST", config_maps, {"metadata": {"name": "cm"}, "data": {"url": "nats://x"}})
    assert (await call(http, "GET", f"{config_maps}/cm"))[1]["data"] == {"url": "nats://x"}
    names = [
        ns["metadata"]["name"] for ns in (await call(http, "GET", "/api/v1/namespaces"))[1]["items"]
    ]
    assert names == ["default", "kube-system"]


async def test_events_can_be_posted_with_generate_name(http: aiohttp.ClientSession) -> None:
    event = {
        "metadata": {"generateName": "kopf-event-", "namespace": "default"},
        "type": "Normal",
        "reason": "Created",
        "message": "hello",
        "involvedObject": {"kind": "Widget", "name": "w1", "namespace": "default"},
    }
    status, posted = await call(http, "POST", "/api/v1/namespaces/default/events", event)
    assert status == 201 and posted["metadata"]["name"].startswith("kopf-event-")


async def test_unsupported_methods_are_405(http: aiohttp.ClientSession) -> None:
    assert (await call(http, "DELETE", WIDGETS))[0] == 405
    assert (await call(http, "POST", f"{WIDGETS}/w1"))[0] == 405


async def test_malformed_requests_are_400(http: aiohttp.ClientSession) -> None:
    async with http.post(WIDGETS, data=b"{not json") as response:
        assert response.status == 400
        assert (await response.json())["reason"] == "BadRequest"
    params = {"watch": "true", "timeoutSeconds": "soon"}
    assert (await call(http, "GET", WIDGETS, params=params))[0] == 400
    assert (await call(http, "GET", WIDGETS, params={"limit": "many"}))[0] == 400
    assert (await call(http, "POST", WIDGETS, ["not", "an", "object"]))[0] == 400
