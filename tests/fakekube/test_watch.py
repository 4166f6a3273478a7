"""WATCH: event streams, history replay, bookmarks, timeouts and 410 Gone."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from support.fakekube import FakeKube

WIDGETS = "/apis/example.headwater.io/v1/namespaces/default/widgets"
MERGE = {"Content-Type": "application/merge-patch+json"}


async def call(http: aiohttp.ClientSession, method: str, path: str, body: Any = None) -> Any:
    headers = MERGE if method == "PATCH" else None
    async with http.request(method, path, json=body, headers=headers) as response:
        assert response.status < 300, await response.text()
        return await response.json()


def widget(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"color": "red"}}


async def current_version(http: aiohttp.ClientSession) -> str:
    return str((await call(http, "GET", WIDGETS))["metadata"]["resourceVersion"])


async def next_events(
    response: aiohttp.ClientResponse, count: int, timeout: float = 5.0
) -> list[dict[str, Any]]:
    """Read ``count`` events; fewer if the stream ends first."""
    events: list[dict[str, Any]] = []
    while len(events) < count:
        line = await asyncio.wait_for(response.content.readline(), timeout)
        if not line:
            break
        events.append(json.loads(line))
    return events


async def test_changes_stream_as_added_modified_deleted(http: aiohttp.ClientSession) -> None:
    since = await current_version(http)
    params = {"watch": "true", "resourceVersion": since}
    async with http.get(WIDGETS, params=params) as stream:
        assert stream.status == 200
        await call(http, "POST", WIDGETS, widget("w1"))
        await call(http, "PATCH", f"{WIDGETS}/w1", {"spec": {"color": "blue"}})
        await call(http, "DELETE", f"{WIDGETS}/w1")
        events = await next_events(stream, 3)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(since)
    assert events[1]["object"]["spec"]["color"] == "blue"
    assert events[2]["object"]["metadata"]["name"] == "w1"
    assert events[0]["object"]["apiVersion"] == "example.headwater.io/v1"


async def test_finalized_deletion_streams_modified_then_deleted(
    http: aiohttp.ClientSession,
) -> None:
    body = widget("w1")
    body["metadata"]["finalizers"] = ["example/f"]
    created = await call(http, "POST", WIDGETS, body)
    params = {"watch": "true", "resourceVersion": created["metadata"]["resourceVersion"]}
    async with http.get(WIDGETS, params=params) as stream:
        await call(http, "DELETE", f"{WIDGETS}/w1")
        await call(http, "PATCH", f"{WIDGETS}/w1", {"metadata": {"finalizers": None}})
        events = await next_events(stream, 2)
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]
    assert events[0]["object"]["metadata"]["deletionTimestamp"]


async def test_history_after_the_version_is_replayed(http: aiohttp.ClientSession) -> None:
    created = await call(http, "POST", WIDGETS, widget("w1"))
    await call(http, "PATCH", f"{WIDGETS}/w1", {"spec": {"color": "blue"}})
    await call(http, "POST", WIDGETS, widget("w2"))
    params = {"watch": "true", "resourceVersion": created["metadata"]["resourceVersion"]}
    async with http.get(WIDGETS, params=params) as stream:
        events = await next_events(stream, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "w1"),
        ("ADDED", "w2"),
    ]


async def test_without_a_version_existing_objects_come_first(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", WIDGETS, widget("w1"))
    await call(http, "PATCH", f"{WIDGETS}/w1", {"spec": {"color": "blue"}})
    async with http.get(WIDGETS, params={"watch": "true"}) as stream:
        events = await next_events(stream, 1)
    assert [e["type"] for e in events] == ["ADDED"]
    assert events[0]["object"]["spec"]["color"] == "blue"


async def test_initial_events_end_with_a_bookmark(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", WIDGETS, widget("w1"))
    params = {"watch": "true", "sendInitialEvents": "true", "allowWatchBookmarks": "true"}
    async with http.get(WIDGETS, params=params) as stream:
        events = await next_events(stream, 2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_namespace_and_selectors_filter_the_stream(http: aiohttp.ClientSession) -> None:
    await call(http, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    since = await current_version(http)
    params = {"watch": "true", "resourceVersion": since, "labelSelector": "tier=db"}
    async with http.get(WIDGETS, params=params) as stream:
        team = "/apis/example.headwater.io/v1/namespaces/team/widgets"
        await call(http, "POST", team, widget("other-namespace", tier="db"))
        await call(http, "POST", WIDGETS, widget("other-label", tier="web"))
        await call(http, "POST", WIDGETS, widget("wanted", tier="db"))
        events = await next_events(stream, 1)
    assert [e["object"]["metadata"]["name"] for e in events] == ["wanted"]
    all_namespaces = "/apis/example.headwater.io/v1/widgets"
    params = {"watch": "true", "resourceVersion": since, "fieldSelector": "metadata.name!=wanted"}
    async with http.get(all_namespaces, params=params) as stream:
        events = await next_events(stream, 2)
    assert [e["object"]["metadata"]["name"] for e in events] == ["other-namespace", "other-label"]


async def test_idle_watches_get_bookmarks(fake_kube: FakeKube, http: aiohttp.ClientSession) -> None:
    since = await current_version(http)
    params = {"watch": "true", "resourceVersion": since, "allowWatchBookmarks": "true"}
    async with http.get(WIDGETS, params=params) as stream:
        await call(
            http, "POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "c"}}
        )
        events = await next_events(stream, 1)
    assert events[0]["type"] == "BOOKMARK"
    assert events[0]["object"]["kind"] == "Widget"
    # The bookmark carries the newest version, though that change was to another type.
    assert int(events[0]["object"]["metadata"]["resourceVersion"]) == fake_kube.api.resource_version


async def test_timeout_seconds_ends_the_stream(http: aiohttp.ClientSession) -> None:
    params = {
        "watch": "true",
        "resourceVersion": await current_version(http),
        "timeoutSeconds": "1",
    }
    started = time.monotonic()
    async with http.get(WIDGETS, params=params) as stream:
        events = await next_events(stream, 1)
    assert events == []  # no bookmarks were asked for, and nothing changed
    assert 0.9 < time.monotonic() - started < 3


async def test_a_version_older_than_the_history_is_410(
    fake_kube: FakeKube, http: aiohttp.ClientSession
) -> None:
    fake_kube.api.set_history_limit(2)
    old = await current_version(http)
    for name in ("a", "b", "c"):
        await call(http, "POST", WIDGETS, widget(name))
    async with http.get(WIDGETS, params={"watch": "true", "resourceVersion": old}) as stream:
        assert stream.status == 200
        events = await next_events(stream, 2)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    gone = events[0]["object"]
    assert gone["kind"] == "Status" and gone["code"] == 410 and gone["reason"] == "Expired"
    # The last two changes are still there.
    recent = str(int(await current_version(http)) - 2)
    async with http.get(WIDGETS, params={"watch": "true", "resourceVersion": recent}) as stream:
        events = await next_events(stream, 2)
    assert [e["object"]["metadata"]["name"] for e in events] == ["b", "c"]


async def test_compaction_ends_watches_and_expires_versions(
    fake_kube: FakeKube, http: aiohttp.ClientSession
) -> None:
    await call(http, "POST", WIDGETS, widget("w0"))
    await call(http, "POST", WIDGETS, widget("w1"))
    first_page = await call(http, "GET", f"{WIDGETS}?limit=1")
    seen = first_page["metadata"]["resourceVersion"]
    async with http.get(WIDGETS, params={"watch": "true", "resourceVersion": seen}) as stream:
        fake_kube.api.compact()
        assert await next_events(stream, 1) == []  # the stream ended
    async with http.get(WIDGETS, params={"watch": "true", "resourceVersion": seen}) as stream:
        assert (await next_events(stream, 1))[0]["object"]["code"] == 410
    assert fake_kube.api.expired_watches == 1
    # Listing again gives a version that can be watched from.
    relisted = await current_version(http)
    async with http.get(WIDGETS, params={"watch": "true", "resourceVersion": relisted}) as stream:
        await call(http, "POST", WIDGETS, widget("w2"))
        assert (await next_events(stream, 1))[0]["type"] == "ADDED"
    # A continue token from before the compaction has expired too.
    params = {"limit": "1", "continue": first_page["metadata"]["continue"]}
    async with http.get(WIDGETS, params=params) as response:
        assert response.status == 410


async def test_stopping_the_server_ends_open_watches(fakekube_crds: list[Any]) -> None:
    kube = FakeKube(fakekube_crds)
    await kube.start()
    headers = {"Authorization": f"Bearer {kube.token}"}
    async with (
        aiohttp.ClientSession(kube.url, headers=headers) as http,
        http.get(WIDGETS, params={"watch": "true"}) as stream,
    ):
        started = time.monotonic()
        await kube.stop()
        assert await next_events(stream, 1) == []
    assert time.monotonic() - started < 2
