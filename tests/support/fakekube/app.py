"""The aiohttp application: URL routing, verbs, and the WATCH stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import discovery, errors, selection
from .history import Event
from .resources import ResourceType
from .store import Store, as_version

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Config:
    token: str | None
    # How long an idle watch waits before it sends a BOOKMARK with the current version.
    bookmark_interval: float


@dataclass(frozen=True)
class Target:
    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


logger = logging.getLogger(__name__)
STORE = web.AppKey("fakekube.store", Store)
CONFIG = web.AppKey("fakekube.config", Config)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


def build_app(store: Store, config: Config, request_log: deque[str]) -> web.Application:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        line = f"{request.method} {request.path_qs}"
        if request.method == "PATCH":
            line += f" [{request.headers.get('Content-Type', '')}]"
        request_log.append(line)
        try:
            wanted = f"Bearer {config.token}"
            if config.token is not None and request.headers.get("Authorization") != wanted:
                raise errors.unauthorized()
            return await handler(request)
        except errors.ApiError as failure:
            return _json(failure.status(), failure.code)
        except web.HTTPException:
            raise
        except Exception as bug:
            # A bug in the fake: answer like the real server's 500, and leave a traceback.
            logger.exception("fakekube failed on %s", line)
            internal = errors.ApiError(500, "InternalError", f"fakekube: {bug!r}")
            return _json(internal.status(), 500)

    app = web.Application(middlewares=[middleware])
    app[STORE] = store
    app[CONFIG] = config
    app.router.add_get("/version", _version)
    app.router.add_get("/api", _core_versions)
    app.router.add_get("/apis", _group_list)
    app.router.add_get("/apis/{group}", _group)
    app.router.add_get("/api/{version}", _resource_list)
    app.router.add_get("/apis/{group}/{version}", _resource_list)
    app.router.add_route("*", "/api/{version}/{tail:.+}", _resource)
    app.router.add_route("*", "/apis/{group}/{version}/{tail:.+}", _resource)
    return app


def _store(request: web.Request) -> Store:
    return request.app[STORE]


async def _version(request: web.Request) -> web.Response:
    return _json(discovery.SERVER_VERSION)


async def _core_versions(request: web.Request) -> web.Response:
    return _json(discovery.core_versions(request.host))


async def _group_list(request: web.Request) -> web.Response:
    return _json(discovery.group_list(_store(request).registry))


async def _group(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    body = discovery.group(_store(request).registry, name)
    if body is None:
        raise errors.ApiError(404, "NotFound", f"the server could not find the group {name}")
    return _json(body)


async def _resource_list(request: web.Request) -> web.Response:
    group, version = request.match_info.get("group", ""), request.match_info["version"]
    body = discovery.resource_list(_store(request).registry, group, version)
    if body is None:
        raise errors.ApiError(404, "NotFound", f"the server could not find {request.path}")
    return _json(body)


def _target(request: web.Request) -> Target:
    """Split ``[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]`` after the group/version."""
    registry = _store(request).registry
    group, version = request.match_info.get("group", ""), request.match_info["version"]
    parts = request.match_info["tail"].strip("/").split("/")
    namespace: str | None = None
    if len(parts) >= 3 and parts[0] == "namespaces":
        # "namespaces/x/configmaps" is a collection in namespace x, unless "configmaps" is not a
        # namespaced resource, in which case it is the subresource of namespace x.
        candidate = registry.get(group, version, parts[2])
        if candidate is not None and candidate.namespaced:
            namespace, parts = parts[1], parts[2:]
    rtype = registry.get(group, version, parts[0])
    if (
        rtype is None
        or len(parts) > 3
        or (rtype.namespaced and namespace is None and len(parts) > 1)
    ):
        raise errors.ApiError(404, "NotFound", f"the server could not find {request.path}")
    name = parts[1] if len(parts) > 1 else None
    subresource = parts[2] if len(parts) > 2 else None
    if subresource is not None and not (subresource == "status" and rtype.status_subresource):
        raise errors.not_found(group, f"{rtype.plural}/{subresource}", name or "")
    return Target(rtype, namespace, name, subresource)


async def _body(request: web.Request) -> Any:
    text = await request.text()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise errors.bad_request("the request body is not valid JSON") from None


def _predicate(request: web.Request) -> selection.Predicate:
    checks = []
    if request.query.get("labelSelector"):
        checks.append(selection.label_selector(request.query["labelSelector"]))
    if request.query.get("fieldSelector"):
        checks.append(selection.field_selector(request.query["fieldSelector"]))
    return lambda obj: all(check(obj) for check in checks)


async def _resource(request: web.Request) -> web.StreamResponse:
    target = _target(request)
    store, rtype, method = _store(request), target.rtype, request.method
    if target.name is None:
        if method == "GET" and request.query.get("watch") in ("true", "1"):
            return await _watch(request, target)
        if method == "GET":
            return _list(request, target)
        if method == "POST":
            body = await _body(request)
            return _json(store.create(rtype, target.namespace, body or {}), 201)
    else:
        if method == "GET":
            return _json(store.get(rtype, target.namespace, target.name))
        if method == "PUT":
            body = await _body(request)
            return _json(
                store.replace(rtype, target.namespace, target.name, body or {}, target.subresource)
            )
        if method == "PATCH":
            content_type = request.headers.get("Content-Type", "")
            return _json(
                store.patch(
                    rtype,
                    target.namespace,
                    target.name,
                    content_type,
                    await _body(request),
                    target.subresource,
                )
            )
        if method == "DELETE" and target.subresource is None:
            options = await _body(request) or {}
            return _json(
                store.delete(rtype, target.namespace, target.name, options.get("preconditions"))
            )
    raise errors.method_not_allowed(f"{method} is not supported on {request.path}")


def _list(request: web.Request, target: Target) -> web.Response:
    try:
        limit = int(request.query.get("limit") or 0)
    except ValueError:
        raise errors.bad_request("limit must be an integer") from None
    items, version, token = _store(request).list(
        target.rtype,
        target.namespace,
        _predicate(request),
        limit=limit,
        continue_token=request.query.get("continue", ""),
    )
    metadata: dict[str, Any] = {"resourceVersion": str(version)}
    if token:
        metadata["continue"] = token
    return _json(
        {
            "kind": f"{target.rtype.kind}List",
            "apiVersion": target.rtype.api_version,
            "metadata": metadata,
            "items": items,
        }
    )


async def _watch(request: web.Request, target: Target) -> web.StreamResponse:
    store, rtype = _store(request), target.rtype
    config = request.app[CONFIG]
    bookmarks = request.query.get("allowWatchBookmarks") in ("true", "1")
    initial_end = request.query.get("sendInitialEvents") == "true"
    since = request.query.get("resourceVersion")
    try:
        timeout = float(request.query.get("timeoutSeconds") or 0) or None
    except ValueError:
        raise errors.bad_request("timeoutSeconds must be a number") from None
    response = web.StreamResponse(headers={"Content-Type": "application/json"})

    async def send(kind: str, obj: dict[str, Any]) -> None:
        line = json.dumps({"type": kind, "object": obj}) + "\n"
        await response.write(line.encode())

    def bookmark(**annotations: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(store.history.current)}
        if annotations:
            meta["annotations"] = annotations
        return {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": meta}

    try:
        replay, watch = store.open_watch(rtype, target.namespace, _predicate(request), since)
    except errors.ApiError as failure:
        if failure.code != 410:
            raise
        # Like the real server: a 200 stream that carries one ERROR event, then ends.
        await response.prepare(request)
        await send("ERROR", failure.status())
        return response

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout if timeout else None
    try:
        await response.prepare(request)
        for event in replay:
            await send(event.type, as_version(rtype, event.obj))
        if initial_end and since in (None, "", "0"):
            await send("BOOKMARK", bookmark(**{"k8s.io/initial-events-end": "true"}))
        while True:
            wait = config.bookmark_interval if bookmarks else None
            if deadline is not None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                wait = remaining if wait is None else min(wait, remaining)
            try:
                next_event: Event | None = await asyncio.wait_for(watch.queue.get(), wait)
            except TimeoutError:
                if bookmarks and watch.queue.empty():
                    # Every event up to the current version has been sent on this stream.
                    await send("BOOKMARK", bookmark())
                continue
            if next_event is None:
                break  # the server is stopping, or the history was compacted
            await send(next_event.type, as_version(rtype, next_event.obj))
    except ConnectionResetError:
        return response  # the client went away; nothing more to send
    finally:
        store.history.close(watch)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response
