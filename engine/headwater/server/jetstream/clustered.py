"""JetStream for a whole cluster (R1): where each stream lives is kept in etcd, and any server
answers the ``$JS.API`` for every stream.

Owns (docs/OWNERSHIP.md): this server's etcd member and client, its registration, and the
cached view of the cluster's JetStream metadata, kept current by watches:

- ``servers/<name>``: every live JetStream server (id, tags), written under a lease, so a
  server that dies leaves the list a few seconds later;
- ``streams/<name>``: the server a stream is placed on (and the config it was created with).

What happens to a request (the API worker calls :meth:`ClusteredJetStream.intercept` first):

- a request about one stream goes to the server the stream is placed on: handled here if
  that is this server, else sent on over the routes to ``$HW.JSC.<server id>.<subject>``
  with the client's reply subject, so the answer goes straight back to the client;
- ``STREAM.CREATE`` for a new name picks a server (placement tags, then the fewest streams),
  claims the name in etcd (create-if-absent: two servers creating one name at once agree on
  one placement), then is handled by that server;
- names, lists and the account totals gather every live server's own answer.

Messages never pass through here: a stream's subscriptions (its subjects, pull requests,
direct gets, acks) are announced over the routes like any other, so publishing, fetching and
acknowledging work from every server already.

Until etcd has formed (a few seconds after start, longer when a member joins) and whenever
this server cannot reach a quorum, API requests get 10008 "JetStream system temporarily
unavailable"; core NATS is not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from headwater.server.connections.listen import WILDCARD_HOSTS, join_host_port
from headwater.server.meta.client import MetaClient, MetaError, MetaEvent
from headwater.server.meta.etcdmember import EtcdError, EtcdMember
from headwater.server.subscription import Subscription

from . import errors
from .api import GATHERED, Request, Route
from .wire import dumps

if TYPE_CHECKING:
    from .service import JetStreamService

log = logging.getLogger("headwater.server")

FORWARD_PREFIX = "$HW.JSC"
"""``$HW.JSC.<server id>.<API subject>``: a request sent on to the server that handles it."""
GATHER_INBOX = "$HW.JSR"
"""``$HW.JSR.<server id>.<n>``: where gathered answers come back."""
REGISTRATION_TTL = 5
"""Seconds a dead server stays listed (its lease)."""
GATHER_TIMEOUT = 1.0
"""Seconds to wait for the other servers' part of a gathered answer."""
RETRY_S = 1.0


@dataclass(frozen=True)
class Placement:
    """Where a stream lives."""

    server: str


@dataclass(frozen=True)
class Peer:
    """A live JetStream server of the cluster, as registered in etcd."""

    name: str
    server_id: str
    tags: tuple[str, ...]


class ClusteredJetStream:
    def __init__(self, service: JetStreamService) -> None:
        self.service = service
        self.server = service.server
        cluster = self.server.cluster
        assert cluster is not None
        self.cluster = cluster
        self.name = self.server.name
        self.member: EtcdMember | None = None
        self.meta: MetaClient | None = None
        self.ready = False
        self.placements: dict[str, Placement] = {}
        self.peers: dict[str, Peer] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._subs: list[Subscription] = []
        self._gathers: dict[str, tuple[asyncio.Future[list[dict[str, Any]]], list, int]] = {}
        self._inbox_ids = itertools.count(1)
        self._stopping = False

    def _self_address(self) -> str:
        """This server's route address as the others list it (etcd derives its ports)."""
        settings = self.server.settings.cluster
        if settings.advertise:
            return settings.advertise
        host = self.cluster.host
        if host in WILDCARD_HOSTS:
            host = socket.gethostname()
        return join_host_port(host, self.cluster.port)

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        settings = self.server.settings.cluster
        self.member = EtcdMember(
            self_url=f"nats-route://{self._self_address()}",
            routes=list(settings.routes),
            cluster_name=self.cluster.name,
            store_dir=Path(self.service.root).parent / "cluster",
            listen_host=self.cluster.host,
            external=list(settings.etcd) or None,
        )
        client = self.service.client
        assert client is not None
        me = self.server.server_id
        self._subs.append(client.subscribe(f"{FORWARD_PREFIX}.{me}.>", self._forwarded))
        self._subs.append(client.subscribe(f"{GATHER_INBOX}.{me}.*", self._gathered))
        self._spawn(self._run())

    async def stop(self) -> None:
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        client = self.service.client
        for sub in self._subs:
            if client is not None:
                client.unsubscribe(sub)
        self._subs.clear()
        if self.meta is not None:
            await self.meta.close()
        if self.member is not None:
            await self.member.stop()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self) -> None:
        """Start (or join) etcd, register, load the metadata, then keep it current."""
        member = self.member
        assert member is not None
        began = time.monotonic()
        mode = None
        while not self._stopping:
            try:
                mode = await member.start()
                if not await member.wait_healthy(member.join_timeout):
                    raise MetaError("the etcd member did not become healthy")
                break
            except (MetaError, EtcdError, OSError, RuntimeError) as exc:
                # A peer's name that does not resolve yet (a pod still starting), a port in
                # use, a quorum not formed: all pass with time, so keep trying.
                log.error("JetStream cluster: etcd could not start: %s (retrying)", exc)
                with contextlib.suppress(Exception):
                    await member.stop()
                await asyncio.sleep(RETRY_S)
        if self._stopping:
            return
        self.meta = MetaClient(member.client_urls, self.cluster.name)
        while not self._stopping:
            try:
                await self._register()
                await self._load()
                break
            except MetaError as exc:
                log.error("JetStream cluster: etcd not ready: %s (retrying)", exc)
                await asyncio.sleep(RETRY_S)
        self._spawn(self._follow("streams/", self._on_stream_event))
        self._spawn(self._follow("servers/", self._on_server_event))
        self.ready = True
        log.info(
            "JetStream cluster %s: joined (etcd member %s, %s) in %.1fs; %d servers, %d streams",
            self.cluster.name,
            member.name or "external",
            getattr(mode, "value", "external"),
            time.monotonic() - began,
            len(self.peers),
            len(self.placements),
        )
        await self._claim_recovered()

    async def _register(self) -> None:
        assert self.meta is not None
        info = {
            "name": self.name,
            "id": self.server.server_id,
            "tags": list(self.server.settings.server_tags),
        }
        await self.meta.register_server(self.name, orjson.dumps(info), REGISTRATION_TTL)

    async def _load(self) -> None:
        assert self.meta is not None
        streams = await self.meta.range("streams/")
        servers = await self.meta.range("servers/")
        self.placements = {}
        for key, value in streams.items.items():
            self._on_stream_event(MetaEvent("put", key, value.value, value.mod_revision))
        self.peers = {}
        for key, value in servers.items.items():
            self._on_server_event(MetaEvent("put", key, value.value, value.mod_revision))

    async def _follow(self, prefix: str, apply: Any) -> None:
        """Watch ``prefix`` for as long as the server runs; after a lost watch, read the
        whole state again and watch from there."""
        assert self.meta is not None
        while not self._stopping:
            try:
                watch: AsyncIterator[MetaEvent] = await self.meta.watch(prefix)
                async for event in watch:
                    apply(event)
            except MetaError as exc:
                log.warning("JetStream cluster: watch on %s lost: %s", prefix, exc)
                await asyncio.sleep(RETRY_S)
                with contextlib.suppress(MetaError):
                    await self._load()

    def _on_stream_event(self, event: MetaEvent) -> None:
        name = event.key.removeprefix("streams/")
        if event.kind == "delete":
            self.placements.pop(name, None)
            return
        try:
            value = orjson.loads(event.value)
            self.placements[name] = Placement(str(value["server"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.error("JetStream cluster: unreadable placement of stream %r", name)

    def _on_server_event(self, event: MetaEvent) -> None:
        name = event.key.removeprefix("servers/")
        if event.kind == "delete":
            self.peers.pop(name, None)
            return
        try:
            value = orjson.loads(event.value)
            self.peers[name] = Peer(name, str(value["id"]), tuple(value.get("tags") or ()))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.error("JetStream cluster: unreadable registration of server %r", name)

    async def _claim_recovered(self) -> None:
        """Streams this server recovered from disk are placed here, unless etcd says
        otherwise (then both copies exist: said out loud, never merged)."""
        assert self.meta is not None
        for name in list(self.service.streams):
            placed = self.placements.get(name)
            if placed is None:
                with contextlib.suppress(MetaError):
                    await self.meta.create(f"streams/{name}", _placement(self.name))
                    self.placements.setdefault(name, Placement(self.name))
            elif placed.server != self.name:
                log.error(
                    "JetStream cluster: stream %r is placed on %s, yet a copy is here",
                    name,
                    placed.server,
                )

    # --- the API -------------------------------------------------------------------------

    async def intercept(self, route: Route, req: Request) -> bool:
        handler = route.handler
        if handler.startswith("template_"):
            return False  # templates stay per server (docs/CLUSTERING.md)
        if not self.ready:
            raise errors.CLUSTER_NOT_AVAIL.exc()
        if handler in GATHERED:
            await self._gather(route, req)
            return True
        stream = _stream_token(route, req)
        if stream is None:
            return False
        placed = self.placements.get(stream)
        if placed is None:
            if handler != "stream_create":
                return False  # unknown everywhere: answered here ("stream not found")
            placed = await self._place(stream, req)
        if placed.server == self.name:
            return False
        peer = self.peers.get(placed.server)
        # Its server is gone (its lease ran out, or no route reaches it any more): the
        # stream is offline until it returns.
        if peer is None or not self._send_on(peer, req):
            raise errors.CLUSTER_NOT_AVAIL.exc()
        return True

    async def handled(self, route: Route, req: Request, error: errors.ApiError | None) -> None:
        """Keep etcd in step with what this server did to its own streams."""
        if self.meta is None or route.handler not in ("stream_create", "stream_delete"):
            return
        stream = _stream_token(route, req)
        if stream is None or stream in self.service.streams:
            return
        placed = self.placements.get(stream)
        if placed is not None and placed.server == self.name:
            # Deleted here, or its creation here failed: the name is free again.
            try:
                await self.meta.delete(f"streams/{stream}")
            except MetaError as exc:
                log.error("JetStream cluster: stream %r left placed in etcd: %s", stream, exc)
            self.placements.pop(stream, None)

    async def _place(self, stream: str, req: Request) -> Placement:
        """Choose a server for a new stream and claim its name in etcd."""
        assert self.meta is not None
        try:
            config = orjson.loads(req.body) if req.body.strip() else {}
        except orjson.JSONDecodeError:
            return Placement(self.name)  # the handler here reports the bad JSON
        placement = (config.get("placement") or {}) if isinstance(config, dict) else {}
        wanted_cluster = placement.get("cluster") if isinstance(placement, dict) else None
        tags = set(placement.get("tags") or ()) if isinstance(placement, dict) else set()
        if wanted_cluster and wanted_cluster != self.cluster.name:
            raise errors.CLUSTER_NO_PEERS.exc(err="no suitable peers for placement")
        candidates = [p for p in self.peers.values() if tags <= set(p.tags)]
        if not candidates:
            raise errors.CLUSTER_NO_PEERS.exc(err="no suitable peers for placement")
        load: dict[str, int] = {}
        for placed in self.placements.values():
            load[placed.server] = load.get(placed.server, 0) + 1
        chosen = min(candidates, key=lambda p: (load.get(p.name, 0), p.name))
        try:
            won = await self.meta.create(f"streams/{stream}", _placement(chosen.name))
            if not won:
                current = await self.meta.get(f"streams/{stream}")
                if current is None:
                    raise errors.CLUSTER_NOT_AVAIL.exc()
                return Placement(str(orjson.loads(current.value)["server"]))
        except MetaError as exc:
            log.error("JetStream cluster: cannot place stream %r: %s", stream, exc)
            raise errors.CLUSTER_NOT_AVAIL.exc() from None
        placed = Placement(chosen.name)
        self.placements[stream] = placed
        return placed

    def _send_on(self, peer: Peer, req: Request, reply: str | None = None) -> bool:
        """Send ``req`` on to ``peer``; False when no route to it carries the message."""
        client = self.service.client
        assert client is not None
        subject = f"{FORWARD_PREFIX}.{peer.server_id}.{req.subject}"
        sent = client.publish(subject, req.body, req.reply if reply is None else reply, req.hdr)
        return sent > 0

    def _forwarded(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        router = self.service.router
        if router is None:
            return
        original = subject.split(".", 3)[3] if subject.count(".") >= 3 else ""
        router.submit(original, reply, hdr, payload)

    # --- gathered answers ----------------------------------------------------------------

    async def _gather(self, route: Route, req: Request) -> None:
        """Names, lists and account totals: every live server's own answer, merged."""
        router = self.service.router
        client = self.service.client
        assert router is not None and client is not None
        own = await router.local(route, _whole(req))
        others = [p for p in self.peers.values() if p.name != self.name]
        parts = [own]
        if others:
            inbox = f"{GATHER_INBOX}.{self.server.server_id}.{next(self._inbox_ids)}"
            loop = asyncio.get_running_loop()
            done: asyncio.Future[list[dict[str, Any]]] = loop.create_future()
            whole = _whole(req)
            reached = [p for p in others if self._send_on(p, whole, reply=inbox)]
            self._gathers[inbox] = (done, [], len(reached))
            if not reached:
                done.set_result([])
            try:
                parts += await asyncio.wait_for(done, GATHER_TIMEOUT)
            except TimeoutError:
                got = self._gathers[inbox][1]
                log.warning(
                    "JetStream cluster: %d of %d servers answered %s in time",
                    len(got),
                    len(others),
                    req.subject,
                )
                parts += got
            finally:
                self._gathers.pop(inbox, None)
        merged = _merge(route.handler, parts, req)
        if req.reply:
            client.publish(req.reply, dumps({"type": route.type, **merged}))

    def _gathered(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        entry = self._gathers.get(subject)
        if entry is None:
            return
        done, got, expected = entry
        try:
            answer = orjson.loads(payload)
        except orjson.JSONDecodeError:
            answer = {}
        if isinstance(answer, dict) and "error" not in answer:
            got.append(answer)
        else:
            expected -= 1
            self._gathers[subject] = (done, got, expected)
        if len(got) >= expected and not done.done():
            done.set_result(list(got))

    # --- what STREAM.INFO shows ----------------------------------------------------------

    def cluster_info(self) -> dict[str, Any]:
        return {"name": self.cluster.name, "leader": self.name}


def _placement(server: str) -> bytes:
    return orjson.dumps({"server": server, "created": time.time_ns()})


def _stream_token(route: Route, req: Request) -> str | None:
    """The stream a request is about: the first wildcard token of its route."""
    for index, token in enumerate(route.pattern):
        if token == "*":
            return req.tokens[index] if index < len(req.tokens) else None
        if token == ">":
            return None
    return None


def _whole(req: Request) -> Request:
    """The request as each server answers it for a gathering: from the first item (the
    gathering server pages the merged result itself)."""
    body: dict[str, Any] = {}
    if req.body.strip():
        try:
            loaded = orjson.loads(req.body)
            if isinstance(loaded, dict):
                body = loaded
        except orjson.JSONDecodeError:
            return req
    body.pop("offset", None)
    raw = orjson.dumps(body) if body else b""
    return Request(req.subject, req.reply, req.hdr, raw, req.tokens, forwarded=True)


def _offset(req: Request) -> int:
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        return max(int(orjson.loads(req.body).get("offset", 0)), 0)
    return 0


def _merge(handler: str, parts: list[dict[str, Any]], req: Request) -> dict[str, Any]:
    if handler == "account_info":
        merged = dict(parts[0])
        for key in (
            "memory",
            "storage",
            "reserved_memory",
            "reserved_storage",
            "streams",
            "consumers",
        ):
            if key in merged:
                merged[key] = sum(int(p.get(key, 0) or 0) for p in parts)
        return merged
    items: list[Any] = []
    for part in parts:
        items.extend(part.get("streams") or [])
    if handler == "stream_names":
        items = sorted(set(items))
    else:
        seen: dict[str, Any] = {}
        for info in items:
            seen.setdefault(info["config"]["name"], info)
        items = [seen[name] for name in sorted(seen)]
    limit = int(parts[0].get("limit", 256) or 256)
    offset = min(_offset(req), len(items))
    page = items[offset : offset + limit]
    body: dict[str, Any] = {"total": len(items), "offset": offset, "limit": limit}
    body["streams"] = page if (page or handler == "stream_list") else None
    return body


__all__ = ["ClusteredJetStream"]
