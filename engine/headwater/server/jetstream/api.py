"""The ``$JS.API`` request router: which subject goes to which handler, and the reply envelope.

The routing table is data (:data:`ROUTES`): subject tokens after the API prefix, the handler's
name, the response type (``io.nats.jetstream.api.v1.<type>_response``) and the members an
*error* reply of that endpoint still carries (nats-server marshals the whole response struct,
so e.g. a failed STREAM.INFO still says ``"total":0,"offset":0,"limit":0``).

Requests are handled one at a time, in arrival order, by a single worker task: handlers may
await (disk writes when a stream is created) without a later request overtaking an earlier
one. A subject that matches no route gets no reply, as nats-server does. The router
subscribes to the API namespaces it serves rather than to ``$JS.API.>``, so that
``$JS.API.DIRECT.GET.<missing stream>`` has no subscriber and the requester gets the
no-responders status at once (see docs/DIFFERENCES.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from headwater.server.connections.internal import InternalClient
from headwater.server.protocol import headers
from headwater.server.subscription import Subscription

from . import errors
from .accountinfo import ApiStats
from .gojson import GoJSONError, GoType, decode_struct, loads
from .versioning import JS_API_LEVEL
from .wire import dumps

__all__ = [
    "CONSUMER_ROUTES",
    "DEFAULT_QUEUE_LIMIT",
    "ROUTES",
    "ApiRouter",
    "Request",
    "Route",
    "bind_routes",
    "decode_request",
    "response_type",
]

log = logging.getLogger("headwater.jetstream")

REQUIRED_API_LEVEL_HEADER = "Nats-Required-Api-Level"

_PAGED: Mapping[str, Any] = MappingProxyType({"total": 0, "offset": 0, "limit": 0})
_NO_EXTRA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Route:
    """One API endpoint. ``pattern`` tokens are literal, ``*`` (exactly one token) or a final
    ``>`` (one or more tokens: a consumer filter subject inside the create subject)."""

    pattern: tuple[str, ...]
    handler: str
    response: str
    error_extra: Mapping[str, Any] = field(default_factory=lambda: _NO_EXTRA)

    @property
    def type(self) -> str:
        return response_type(self.response)


def response_type(name: str) -> str:
    return f"io.nats.jetstream.api.v1.{name}_response"


ROUTES: tuple[Route, ...] = (
    Route(("INFO",), "account_info", "account_info"),
    Route(("STREAM", "CREATE", "*"), "stream_create", "stream_create"),
    Route(("STREAM", "UPDATE", "*"), "stream_update", "stream_update"),
    Route(("STREAM", "NAMES"), "stream_names", "stream_names", {**_PAGED, "streams": None}),
    Route(("STREAM", "LIST"), "stream_list", "stream_list", {**_PAGED, "streams": ()}),
    Route(("STREAM", "INFO", "*"), "stream_info", "stream_info", _PAGED),
    Route(("STREAM", "DELETE", "*"), "stream_delete", "stream_delete"),
    Route(("STREAM", "PURGE", "*"), "stream_purge", "stream_purge", {"purged": 0}),
    Route(("STREAM", "MSG", "GET", "*"), "msg_get", "stream_msg_get"),
    Route(("STREAM", "MSG", "DELETE", "*"), "msg_delete", "stream_msg_delete"),
    Route(
        ("STREAM", "LEADER", "STEPDOWN", "*"), "stream_leader_stepdown", "stream_leader_stepdown"
    ),
    Route(("STREAM", "PEER", "REMOVE", "*"), "stream_remove_peer", "stream_remove_peer"),
)

#: Consumer endpoints, served by :class:`headwater.server.consumers.api.ConsumerApi` (the
#: service hands the router ``ROUTES + CONSUMER_ROUTES``).
CONSUMER_ROUTES: tuple[Route, ...] = (
    Route(("CONSUMER", "CREATE", "*"), "consumer_create", "consumer_create"),
    Route(("CONSUMER", "CREATE", "*", "*"), "consumer_create", "consumer_create"),
    Route(("CONSUMER", "CREATE", "*", "*", ">"), "consumer_create", "consumer_create"),
    Route(
        ("CONSUMER", "DURABLE", "CREATE", "*", "*"), "consumer_durable_create", "consumer_create"
    ),
    Route(("CONSUMER", "INFO", "*", "*"), "consumer_info", "consumer_info"),
    Route(("CONSUMER", "DELETE", "*", "*"), "consumer_delete", "consumer_delete"),
    Route(
        ("CONSUMER", "NAMES", "*"),
        "consumer_names",
        "consumer_names",
        {**_PAGED, "consumers": ()},
    ),
    Route(
        ("CONSUMER", "LIST", "*"),
        "consumer_list",
        "consumer_list",
        {**_PAGED, "consumers": ()},
    ),
    Route(("CONSUMER", "PAUSE", "*", "*"), "consumer_pause", "consumer_pause"),
    Route(
        ("CONSUMER", "LEADER", "STEPDOWN", "*", "*"),
        "consumer_leader_stepdown",
        "consumer_leader_stepdown",
    ),
)

#: Handlers whose answer, in a cluster, gathers every server's (jetstream/clustered.py).
GATHERED = frozenset({"stream_names", "stream_list", "account_info"})

#: Second-level API namespaces we subscribe to (``DIRECT`` is left to the streams).
NAMESPACES = ("STREAM", "META", "SERVER", "ACCOUNT")
#: ``CONSUMER.<verb>`` namespaces we subscribe to. ``MSG`` is left out: each pull consumer
#: subscribes its own ``CONSUMER.MSG.NEXT`` subject, so a request for a consumer that does not
#: exist finds no subscriber and gets the no-responders status at once, as from nats-server.
CONSUMER_VERBS = ("CREATE", "DURABLE", "INFO", "DELETE", "NAMES", "LIST", "PAUSE", "LEADER")


@dataclass
class Request:
    """One API request; ``tokens`` are the subject's tokens after the API prefix."""

    subject: str
    reply: str
    hdr: bytes | None
    body: bytes
    tokens: list[str]
    forwarded: bool = False
    """Sent on by another server of the cluster, which already decided it is ours."""


Handler = Callable[[Request], Awaitable["dict[str, Any] | None"]]


class Interceptor(Protocol):
    """Decides, before a request is handled here, whether another server of the cluster
    handles it (jetstream/clustered.py); told afterwards how a local handling went."""

    async def intercept(self, route: Route, req: Request) -> bool:
        """True when the request was answered or sent on: nothing more to do here. Asked for
        forwarded requests too (``req.forwarded``), which it may refuse but never sends on."""
        ...

    async def handled(self, route: Route, req: Request, error: errors.ApiError | None) -> None: ...


DEFAULT_QUEUE_LIMIT = 10_000
"""Requests that may wait for the API worker (nats-server's ``JSDefaultRequestQueueLimit``)."""


def bind_routes(routes: tuple[Route, ...], apis: tuple[object, ...]) -> dict[str, Handler]:
    """Each route's handler name -> the one bound method of that name among ``apis``."""
    bound: dict[str, Handler] = {}
    for route in routes:
        owners = [api for api in apis if callable(getattr(api, route.handler, None))]
        if len(owners) != 1:
            raise TypeError(f"route {route.pattern} needs one {route.handler!r}, found {owners}")
        bound[route.handler] = getattr(owners[0], route.handler)
    return bound


def match_route(tokens: list[str], routes: tuple[Route, ...] = ROUTES) -> Route | None:
    for route in routes:
        pattern = route.pattern
        if pattern[-1] == ">":
            if len(tokens) < len(pattern):
                continue
            pattern = pattern[:-1]
            if all(p == "*" or p == t for p, t in zip(pattern, tokens, strict=False)):
                return route
            continue
        if len(pattern) != len(tokens):
            continue
        if all(p == "*" or p == t for p, t in zip(pattern, tokens, strict=True)):
            return route
    return None


def decode_request(body: bytes, gotype: GoType, root: str) -> dict[str, Any]:
    """Decode a JSON request the Go way; 10025 "invalid JSON: ..." when it cannot be."""
    try:
        return decode_struct(loads(body.decode("utf-8", errors="replace")), gotype, root)
    except GoJSONError as exc:
        raise errors.INVALID_JSON.exc(err=exc.message) from None


class ApiRouter:
    """Subscribes the API subjects and runs matching requests through their handlers.

    ``apis`` are the objects whose methods handle the routes: each route's ``handler`` names
    exactly one method among them, bound once here, so a route without a handler (or with
    two) fails at start-up rather than on the first request.

    At most ``queue_limit`` requests wait (nats-server's ``request_queue_limit``). A request
    that fills the queue drops every waiting one, unanswered, as nats-server does: their
    clients time out and retry, a warning is logged and ``$JS.EVENT.ADVISORY.API.
    LIMIT_REACHED`` says how many (``on_dropped``).
    """

    def __init__(
        self,
        client: InternalClient,
        apis: tuple[object, ...],
        stats: ApiStats,
        prefixes: tuple[str, ...],
        routes: tuple[Route, ...] = ROUTES,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.client = client
        self.routes = routes
        self.handlers = bind_routes(routes, apis)
        self.stats = stats
        self.prefixes = prefixes
        self.queue_limit = queue_limit if queue_limit > 0 else DEFAULT_QUEUE_LIMIT
        self._on_dropped = on_dropped
        self.interceptor: Interceptor | None = None
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._subs: list[Subscription] = []
        self._queue: collections.deque[tuple[Route, Request]] = collections.deque()
        self._ready = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None

    def start(self) -> None:
        for prefix in self.prefixes:
            depth = prefix.count(".") + 1
            handler = self._make_callback(depth)
            # Local: each server answers its own clients' API requests until the API is
            # cluster-wide (docs/CLUSTERING.md), so a request is never answered twice.
            self._subs.append(self.client.subscribe(f"{prefix}.*", handler, local=True))
            for namespace in NAMESPACES:
                subject = f"{prefix}.{namespace}.>"
                self._subs.append(self.client.subscribe(subject, handler, local=True))
            for verb in CONSUMER_VERBS:
                subject = f"{prefix}.CONSUMER.{verb}.>"
                self._subs.append(self.client.subscribe(subject, handler, local=True))
        self._worker = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        for sub in self._subs:
            self.client.unsubscribe(sub)
        self._subs.clear()
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None

    def submit(self, subject: str, reply: str, hdr: bytes | None, payload: bytes) -> None:
        """A request another server sent on (its subject as the client sent it). Read-only
        requests that servers ask each other for (names, lists, account totals) run at once
        beside the queue: a server waiting on the others' answers in its worker must never
        wait on a worker that waits on it."""
        for prefix in self.prefixes:
            if subject.startswith(prefix + "."):
                tokens = subject.split(".")[prefix.count(".") + 1 :]
                break
        else:
            return
        route = match_route(tokens, self.routes)
        if route is None:
            return
        req = Request(subject, reply, hdr, bytes(payload), tokens, forwarded=True)
        if route.handler in GATHERED:
            task = asyncio.get_running_loop().create_task(self._handle(route, req))
            self._side_tasks.add(task)
            task.add_done_callback(self._side_tasks.discard)
        else:
            self._enqueue(route, req)

    async def local(self, route: Route, req: Request) -> dict[str, Any]:
        """This server's own answer to ``req``, as its handler gives it (errors raised)."""
        body = await self.handlers[route.handler](req)
        return body or {}

    def _make_callback(self, depth: int) -> Callable[..., None]:
        def on_request(
            sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
        ) -> None:
            tokens = subject.split(".")[depth:]
            route = match_route(tokens, self.routes)
            if route is None:
                return
            self._enqueue(route, Request(subject, reply, hdr, bytes(payload), tokens))

        return on_request

    def _enqueue(self, route: Route, req: Request) -> None:
        queue = self._queue
        queue.append((route, req))
        self._ready.set()
        if len(queue) >= self.queue_limit:
            dropped = len(queue)
            queue.clear()
            log.warning("JetStream API queue limit reached, dropping %d requests", dropped)
            if self._on_dropped is not None:
                self._on_dropped(dropped)

    async def _run(self) -> None:
        queue = self._queue
        while True:
            if not queue:
                self._ready.clear()
                await self._ready.wait()
                continue
            route, req = queue.popleft()
            try:
                await self._handle(route, req)
            except Exception:
                log.exception("JetStream API request on %r failed", req.subject)

    async def _handle(self, route: Route, req: Request) -> None:
        error: errors.ApiError | None = None
        body: dict[str, Any] | None = None
        interceptor = self.interceptor
        try:
            _check_api_level(req.hdr)
            if interceptor is not None and await interceptor.intercept(route, req):
                return
            body = await self.handlers[route.handler](req)
            if interceptor is not None:
                await interceptor.handled(route, req, None)
            if body is None:
                return
        except errors.ApiErrorException as exc:
            error = exc.error
            if interceptor is not None:
                await interceptor.handled(route, req, error)
        except Exception as exc:
            # A bug or an I/O failure we did not foresee: log it, and still answer the way
            # nats-server answers a failure of that operation, so no client waits for nothing.
            log.exception("JetStream API request on %r failed", req.subject)
            error = unexpected_error(route.handler, exc)
        if error is not None:
            reply: dict[str, Any] = {"type": route.type, "error": error.to_dict()}
            reply.update(route.error_extra)
        else:
            assert body is not None
            reply = {"type": route.type, **body}
        self.stats.total += 1
        if error is not None:
            self.stats.errors += 1
        if req.reply:
            self.client.publish(req.reply, dumps(reply))


#: The error family nats-server uses when an operation fails for a reason of its own (the
#: ``{err}`` errors); anything else gets the general stream error.
_FAILURE_ERRORS: Mapping[str, errors.ApiError] = MappingProxyType(
    {
        "stream_create": errors.STREAM_CREATE,
        "stream_update": errors.STREAM_UPDATE,
        "stream_delete": errors.STREAM_DELETE,
        "stream_purge": errors.STREAM_PURGE_FAILED,
        "msg_delete": errors.STREAM_MSG_DELETE_FAILED,
        "consumer_create": errors.CONSUMER_CREATE,
        "consumer_durable_create": errors.CONSUMER_CREATE,
        "consumer_pause": errors.CONSUMER_CREATE,
    }
)


def unexpected_error(handler: str, exc: Exception) -> errors.ApiError:
    """The 500 reply for an exception no handler turned into an API error."""
    family = _FAILURE_ERRORS.get(handler, errors.STREAM_GENERAL)
    return family.format(err=str(exc) or type(exc).__name__)


def _check_api_level(hdr: bytes | None) -> None:
    """ADR-44: a request may demand a minimum API level (412, 10185 when we are below it)."""
    if not hdr:
        return
    wanted = headers.get(hdr, REQUIRED_API_LEVEL_HEADER)
    if wanted is None or wanted == "":
        return
    try:
        level = int(wanted)
    except ValueError:
        raise errors.REQUIRED_API_LEVEL.exc() from None
    if level > JS_API_LEVEL:
        raise errors.REQUIRED_API_LEVEL.exc()
