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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from headwater.server.connections.listen import WILDCARD_HOSTS, join_host_port
from headwater.server.meta.client import (
    MetaClient,
    MetaError,
    MetaEvent,
    MetaStatus,
)
from headwater.server.meta.etcdmember import EtcdError, EtcdMember
from headwater.server.meta.tls import EtcdTLS
from headwater.server.replicated import groupstore
from headwater.server.replicated.groupstore import GroupStore
from headwater.server.replicated.record import GroupRecord
from headwater.server.routing.subjects import SERVERS_ONLY
from headwater.server.subscription import Subscription

from . import errors, groupmembers
from .api import GATHERED, Request, Route
from .peers import peer_id
from .replicas import Replicas
from .streamconfig import StreamConfig, config_from_json, config_to_json
from .wire import ZERO_TIME, dumps

if TYPE_CHECKING:
    from .service import JetStreamService
    from .stream import Stream

log = logging.getLogger("headwater.server")

FORWARD_PREFIX = f"{SERVERS_ONLY}JSC"
"""``$HW.JSC.<server id>.<API subject>``: a request sent on to the server that handles it."""
GATHER_INBOX = f"{SERVERS_ONLY}JSR"
"""``$HW.JSR.<server id>.<n>.<peer>``: where the servers' parts of a gathered answer come
back."""
REGISTRATION_TTL = 5
"""Seconds a dead server stays listed (its lease)."""
GATHER_TIMEOUT = 1.0
"""Seconds to wait for the other servers' part of a gathered answer."""
RETRY_S = 1.0
STATUS_EVERY_S = 1.0
"""How often the etcd leader and members are read (``/jsz``'s ``meta_cluster``); each read
also proves contact with a quorum (:meth:`ClusteredJetStream.in_touch`)."""
API_ETCD_TIMEOUT = 2.0
"""Seconds an API request may wait on etcd (a placement read or claim) before 10008: the API
worker answers one request at a time, so this bounds what a failing etcd holds up."""
META_CHANGES = frozenset(
    {
        "stream_create",
        "stream_update",
        "stream_delete",
        "stream_restore",
        "consumer_create",
        "consumer_durable_create",
        "consumer_delete",
        "consumer_pause",
        "stream_remove_peer",
    }
)
"""Requests that change the cluster's metadata (nats-server sends them through its meta
leader): refused with 10008 at once while this server is out of touch with etcd's quorum."""
NO_META_LEADER = "JetStream has not established contact with a meta leader"
NOT_CURRENT = "JetStream is not current with the meta leader"
STREAMS = "streams/"
SERVERS = "servers/"


@dataclass(frozen=True)
class Placement:
    """Where a stream lives: its server (an R1 stream's), or for a replicated stream its
    peers (the first is the server that creates it) and, once created, its config."""

    server: str
    peers: tuple[str, ...] = ()
    config: StreamConfig | None = None
    created: int = 0
    """When it was written (ns): for a replicated stream, since when its peers are wanted."""
    origin: int = 0
    """The replica count a STREAM.UPDATE changed from, for the ``desired`` block while the
    peers change (0: not a change of the count)."""

    @property
    def replicated(self) -> bool:
        return bool(self.peers)


@dataclass
class Gathering:
    """One gathered answer in progress: the servers asked and not yet answered (by their
    index in the reply subject), and the answers so far by server name."""

    done: asyncio.Future[None]
    waiting: dict[str, str] = field(default_factory=dict)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def check(self) -> None:
        if not self.waiting and not self.done.done():
            self.done.set_result(None)


@dataclass(frozen=True)
class Peer:
    """A live JetStream server of the cluster, as registered in etcd."""

    name: str
    server_id: str
    tags: tuple[str, ...]
    member: str | None = None
    """Its etcd member's name (None when the cluster uses an external etcd)."""


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
        self._gathers: dict[str, Gathering] = {}
        self._inbox_ids = itertools.count(1)
        self._stopping = False
        self.status: MetaStatus | None = None
        """etcd's leader and members as last read (every ``STATUS_EVERY_S``)."""
        self._last_seen: dict[str, float] = {}
        """Server name -> ``time.monotonic()`` when it was last registered, for ``active``."""
        self.replicas = Replicas(service, self)
        """This server's replicas of replicated streams."""

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
            tls=EtcdTLS.from_settings(settings.tls),  # etcd follows the routes' TLS
        )
        client = self.service.client
        assert client is not None
        me = self.server.server_id
        self._subs.append(client.subscribe(f"{FORWARD_PREFIX}.{me}.>", self._forwarded))
        self._subs.append(client.subscribe(f"{GATHER_INBOX}.{me}.*.*", self._gathered))
        self._spawn(self._run())

    async def stop(self) -> None:
        self._stopping = True
        await self.replicas.close()
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
        self.meta = MetaClient(member.client_urls, self.cluster.name, tls=member.tls)
        revisions: dict[str, int] = {}
        while not self._stopping:
            try:
                await self._register()
                revisions = {prefix: await self._load(prefix) for prefix in (STREAMS, SERVERS)}
                break
            except MetaError as exc:
                log.error("JetStream cluster: etcd not ready: %s (retrying)", exc)
                await asyncio.sleep(RETRY_S)
        if self._stopping:
            return
        for prefix, revision in revisions.items():
            self._spawn(self._follow(prefix, revision))
        self._spawn(self._poll_status())
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
        await self.replicas.settle_recovered()

    async def _register(self) -> None:
        assert self.meta is not None
        info = {
            "name": self.name,
            "id": self.server.server_id,
            "tags": list(self.server.settings.server_tags),
            "member": self.member.name if self.member is not None else None,
        }
        await self.meta.register_server(self.name, orjson.dumps(info), REGISTRATION_TTL)

    async def _poll_status(self) -> None:
        """Keep :attr:`status` (etcd's leader and members) fresh for ``/jsz``; monitoring
        handlers answer from memory and never wait on etcd."""
        assert self.meta is not None
        while not self._stopping:
            try:
                self.status = await self.meta.status(timeout=STATUS_EVERY_S)
            except MetaError as exc:
                log.debug("JetStream cluster: etcd status not read: %s", exc)
            now = time.monotonic()
            for name in self.peers:
                self._last_seen[name] = now
            await asyncio.sleep(STATUS_EVERY_S)

    def in_touch(self) -> bool:
        """Whether a member with a quorum answered this server within a registration's
        lease (the status read every second, the lease's renewals, any API call): while not,
        this server cannot change the metadata, and the others soon count it gone."""
        meta = self.meta
        return meta is not None and time.monotonic() - meta.last_ok < REGISTRATION_TTL

    def health_error(self) -> str | None:
        """Why ``/healthz`` fails for the cluster's metadata, as nats-server words it: not
        joined yet, or out of touch with etcd's quorum."""
        if not self.ready:
            return NO_META_LEADER
        if not self.in_touch():
            return NOT_CURRENT
        return None

    def leader_name(self) -> str:
        """The meta leader: the server whose etcd member leads etcd (that member's name when
        no server registered it, as with an external etcd); "" during an election."""
        status = self.status
        if status is None or status.leader is None:
            return ""
        for peer in self.peers.values():
            if peer.member == status.leader:
                return peer.name
        return status.leader

    def meta_cluster(self) -> dict[str, Any]:
        """``/jsz``'s ``meta_cluster`` in nats-server 2.15's shape: the metadata group is
        etcd, its members the servers.

        ``peer`` is the leader's peer id, nats-server's for the leader's name (so both servers
        show the same id for one name), left out with an empty ``leader`` or ``replicas`` as
        nats-server does, and when the leader is an external etcd member (no server). A
        replica is ``current`` while its registration lives in etcd, and ``active`` is how
        long ago this server last saw it registered (nanoseconds). nats-server's backlogs of
        routed requests and snapshots do not exist here (requests go to etcd directly): zero.
        """
        now = time.monotonic()
        names = set(self.peers) | set(self._last_seen)
        replicas = []
        for name in sorted(names - {self.name}):
            live = name in self.peers
            seen = self._last_seen.get(name, now)
            replica: dict[str, Any] = {
                "name": name,
                "current": live,
                "active": int(max(now - seen, 0) * 1e9),
                "peer": peer_id(name),
            }
            if not live:
                replica["offline"] = True
            replicas.append(replica)
        size = len(self.status.members) if self.status is not None else len(names | {self.name})
        leader = self.leader_name()
        out: dict[str, Any] = {"name": self.cluster.name}
        if leader:
            out["leader"] = leader
            if leader == self.name or leader in names:
                out["peer"] = peer_id(leader)
        if replicas:
            out["replicas"] = replicas
        out |= {
            "cluster_size": size,
            "quorum_needed": size // 2 + 1,
            "pending": 0,
            "pending_requests": 0,
            "pending_infos": 0,
            "snapshot": {"pending_entries": 0, "pending_size": 0, "last_time": ZERO_TIME},
        }
        return out

    async def _load(self, prefix: str) -> int:
        """Read everything under ``prefix`` into the cache; the revision it was read at."""
        assert self.meta is not None
        found = await self.meta.range(prefix)
        if prefix == STREAMS:
            self.placements = {}
            apply = self._on_stream_event
        else:
            self.peers = {}
            apply = self._on_server_event
        for key, value in found.items.items():
            apply(MetaEvent("put", key, value.value, value.mod_revision))
        return found.revision

    async def _follow(self, prefix: str, revision: int) -> None:
        """Keep the cache of ``prefix`` current from ``revision`` on (the one it was read at:
        nothing written in between is missed); after a lost watch, read it all again and
        watch from there."""
        assert self.meta is not None
        apply = self._on_stream_event if prefix == STREAMS else self._on_server_event
        while not self._stopping:
            try:
                watch: AsyncIterator[MetaEvent] = await self.meta.watch(prefix, revision + 1)
                async for event in watch:
                    revision = event.revision
                    apply(event)
            except MetaError as exc:
                log.warning("JetStream cluster: watch on %s lost: %s", prefix, exc)
                await asyncio.sleep(RETRY_S)
                with contextlib.suppress(MetaError):
                    revision = await self._load(prefix)

    def _on_stream_event(self, event: MetaEvent) -> None:
        name = event.key.removeprefix(STREAMS)
        if event.kind == "delete":
            self.placements.pop(name, None)
            self.replicas.forget(name)
            return
        placed = _parse_placement(event.value)
        if placed is None:
            log.error("JetStream cluster: unreadable placement of stream %r", name)
            return
        self.placements[name] = placed
        if placed.replicated:
            self.replicas.follow(name, placed)

    def _on_server_event(self, event: MetaEvent) -> None:
        name = event.key.removeprefix(SERVERS)
        if event.kind == "delete":
            self.peers.pop(name, None)
            return
        try:
            value = orjson.loads(event.value)
            member = value.get("member")
            self.peers[name] = Peer(
                name,
                str(value["id"]),
                tuple(value.get("tags") or ()),
                str(member) if member else None,
            )
            self._last_seen[name] = time.monotonic()
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.error("JetStream cluster: unreadable registration of server %r", name)

    async def _claim_recovered(self) -> None:
        """Streams this server recovered from disk are placed here, unless etcd says
        otherwise (then both copies exist: said out loud, never merged)."""
        for name in list(self.service.streams):
            placed = self.placements.get(name)
            if placed is None:
                self.created_here(name)
            elif placed.replicated:
                continue  # a replica, opened from its placement (jetstream.replicas)
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
        changes = handler in META_CHANGES
        if not self.ready or (changes and not self.in_touch()):
            # No quorum, no change: said at once rather than after etcd's timeouts.
            raise errors.CLUSTER_NOT_AVAIL.exc()
        if req.forwarded:
            # Another server placed it here; this server makes the change, so it is the one
            # that must still reach the quorum.
            if changes:
                await self._confirm_quorum()
            return False
        if handler in GATHERED:
            await self._gather(route, req)
            return True
        stream = _stream_token(route, req)
        if stream is None:
            return False
        placed = self.placements.get(stream)
        if placed is None and stream not in self.service.streams:
            # Not in the cache: a stream created a moment ago through another server may not
            # have reached it by the watch yet, so ask etcd itself (read-your-writes for a
            # client that creates through one server and asks through another).
            if not self.in_touch():
                raise errors.CLUSTER_NOT_AVAIL.exc()  # whether it exists is etcd's to say
            try:
                placed = await self.read_placement(stream)
            except MetaError:
                raise errors.CLUSTER_NOT_AVAIL.exc() from None
        if placed is None:
            if handler not in ("stream_create", "stream_restore"):
                return False  # unknown everywhere: answered here ("stream not found")
            placed = await self._place(stream, req, restore=handler == "stream_restore")
        target = placed.server
        if placed.replicated and placed.config is not None:
            target = await self._group_leader(stream)
        if target == self.name:
            if changes:
                await self._confirm_quorum()
            return False
        peer = self.peers.get(target)
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
        if placed is not None and self.name in (placed.server, *placed.peers):
            # Deleted here, or its creation here failed: the name is free again (every
            # other replica of a replicated stream goes when its server sees that).
            try:
                await self.meta.delete(f"streams/{stream}")
                if placed.replicated:
                    await self.meta.delete(f"groups/{stream}")
            except MetaError as exc:
                log.error("JetStream cluster: stream %r left placed in etcd: %s", stream, exc)
            self.placements.pop(stream, None)

    async def _group_leader(self, stream: str) -> str:
        """The server leading a replicated stream now: its replica here knows (the group
        record it follows); else the record in etcd says. 10008 while none leads."""
        group = self.replicas.groups.get(stream)
        record = group.runner.record if group is not None else None
        if record is None:
            try:
                record = await GroupStore(self.meta).read(stream) if self.meta else None
            except MetaError:
                raise errors.CLUSTER_NOT_AVAIL.exc() from None
        if record is None or not record.leader:
            raise errors.CLUSTER_NOT_AVAIL.exc()
        return record.leader

    def server_id(self, name: str) -> str | None:
        """A peer's server id (the subject its replicas listen on), while it is registered."""
        peer = self.peers.get(name)
        return peer.server_id if peer is not None else None

    async def create_replicated(self, cfg: StreamConfig) -> Any:
        """STREAM.CREATE of a replicated stream placed with this server first among its
        peers (the placing server sent it here): see :class:`Replicas`. The placement is
        read from etcd when the watch has not delivered it yet: the forwarded request can
        come first."""
        placed = self.placements.get(cfg.name)
        if placed is None:
            try:
                placed = await self.read_placement(cfg.name)
            except MetaError:
                raise errors.CLUSTER_NOT_AVAIL.exc() from None
        if placed is None or not placed.replicated or placed.peers[0] != self.name:
            raise errors.CLUSTER_NOT_AVAIL.exc()
        value = _encode(_placed(placed.server, placed.peers, cfg))
        return await self.replicas.create(cfg, placed.peers, value)

    # --- a replicated stream's peers ------------------------------------------------------

    async def resize_group(self, cfg: StreamConfig, leader: str, in_sync: frozenset[str]) -> None:
        """STREAM.UPDATE changing a replicated stream's ``num_replicas`` (here, where it
        leads): the wanted peers grown or shrunk (:func:`groupmembers.resized`) into its
        placement, with the new config."""
        placed = await self._placed_group(cfg.name)
        candidates, load = await self._candidates(cfg)
        peers = groupmembers.resized(
            placed.peers,
            max(cfg.num_replicas, 1),
            leader=leader,
            in_sync=in_sync,
            candidates=candidates,
            load=load,
        )
        origin = max(placed.config.num_replicas, 1) if placed.config is not None else 0
        await self._set_peers(cfg.name, placed, peers, cfg, origin)

    async def replicate(self, stream: Stream, cfg: StreamConfig) -> Stream:
        """STREAM.UPDATE raising ``num_replicas`` of a stream created with one replica (here,
        its server): the peers chosen as a group of one here grows (this server first), then
        the stream becomes that group (:meth:`Replicas.convert`)."""
        candidates, load = await self._candidates(cfg)
        peers = groupmembers.resized(
            (self.name,),
            max(cfg.num_replicas, 1),
            leader=self.name,
            in_sync=frozenset({self.name}),
            candidates=candidates,
            load=load,
        )
        return await self.replicas.convert(stream, cfg, peers)

    async def swap_to_group(
        self, stream: str, peers: tuple[str, ...], cfg: StreamConfig, record: GroupRecord
    ) -> bool | None:
        """The placement of ``stream``, placed here on its own, swapped for a replicated one
        wanting ``peers``, with its group's first ``record``, in one etcd transaction: True
        when made; False when not (the placement is no longer this server's alone, or etcd
        did not answer before it was tried); None when unknown (asked, and not answered)."""
        assert self.meta is not None
        key = f"{STREAMS}{stream}"
        try:
            found = await self.meta.get(key, timeout=API_ETCD_TIMEOUT)
        except MetaError:
            return False
        placed = _parse_placement(found.value) if found is not None else None
        if found is None or placed is None or placed.replicated or placed.server != self.name:
            return False
        grown = _placed(self.name, peers, cfg, origin=1)  # it had one replica
        value = _encode(grown)
        also = {groupstore.key(stream): groupstore.encode(record)}
        try:
            ok, _ = await self.meta.compare_and_swap(
                key, value, found.mod_revision, timeout=API_ETCD_TIMEOUT, also=also
            )
        except MetaError as exc:
            log.warning("JetStream cluster: replicating %r: %s (reading it back)", stream, exc)
            with contextlib.suppress(MetaError):
                now = await self.read_placement(stream, refresh=True)
                return now is not None and now.replicated
            return None
        if ok:
            self.placements[stream] = grown
        return ok

    async def remove_group_peer(self, cfg: StreamConfig, peer: str) -> None:
        """STREAM.PEER.REMOVE of a replicated stream (here, where it leads): ``peer``
        replaced in its wanted peers (:func:`groupmembers.replaced`)."""
        placed = await self._placed_group(cfg.name)
        candidates, load = await self._candidates(cfg)
        peers = groupmembers.replaced(placed.peers, peer, candidates=candidates, load=load)
        await self._set_peers(cfg.name, placed, peers, cfg)

    async def _placed_group(self, stream: str) -> Placement:
        try:
            placed = await self.read_placement(stream, refresh=True)
        except MetaError:
            raise errors.CLUSTER_NOT_AVAIL.exc() from None
        if placed is None or not placed.replicated:
            raise errors.CLUSTER_NOT_AVAIL.exc()
        return placed

    async def _candidates(self, cfg: StreamConfig) -> tuple[list[str], dict[str, int]]:
        """The registered servers a replica of ``cfg``'s stream may go to (its placement's
        tags), and how many streams each holds."""
        try:
            registered = await self._registered()
        except MetaError:
            raise errors.CLUSTER_NOT_AVAIL.exc() from None
        tags = set(cfg.placement.tags) if cfg.placement is not None else set()
        load: dict[str, int] = {}
        for placed in self.placements.values():
            for server in placed.peers or (placed.server,):
                load[server] = load.get(server, 0) + 1
        return [p.name for p in registered if tags <= set(p.tags)], load

    async def _set_peers(
        self,
        stream: str,
        placed: Placement,
        peers: tuple[str, ...],
        cfg: StreamConfig,
        origin: int = 0,
    ) -> None:
        """The placement of ``stream`` with ``peers`` wanted (``origin``: the count it had,
        when a STREAM.UPDATE changed it): every server's watch sees it (a new peer opens its
        replica, the leader changes the group's record toward it)."""
        assert self.meta is not None
        server = placed.server if placed.server in peers else peers[0]
        wanted = _placed(server, peers, cfg, origin)
        value = _encode(wanted)
        try:
            await asyncio.wait_for(self.meta.put(f"{STREAMS}{stream}", value), API_ETCD_TIMEOUT)
        except (MetaError, TimeoutError) as exc:  # a put timed out may still land: retried
            log.error("JetStream cluster: peers of %r not changed: %s", stream, exc)
            raise errors.CLUSTER_NOT_AVAIL.exc() from None
        self.placements[stream] = wanted
        self.replicas.follow(stream, wanted)

    async def _confirm_quorum(self) -> None:
        """10008 unless a member with a quorum answers now: a change made here while this
        server is cut off would be made on this server alone. etcd answers a plain read only
        through its leader's read index (and our requests carry the require-leader flag), so
        one read of our own registration proves the contact."""
        assert self.meta is not None
        try:
            await self.meta.get(f"{SERVERS}{self.name}", timeout=API_ETCD_TIMEOUT)
        except MetaError:
            raise errors.CLUSTER_NOT_AVAIL.exc() from None

    async def read_placement(self, stream: str, refresh: bool = False) -> Placement | None:
        """The stream's placement as etcd has it now (cached; ``refresh`` replaces what the
        cache held), or None; MetaError when etcd did not answer."""
        if self.meta is None:
            return None
        found = await self.meta.get(f"{STREAMS}{stream}", timeout=API_ETCD_TIMEOUT)
        if found is None:
            return None
        placed = _parse_placement(found.value)
        if placed is None:
            return None
        if refresh:
            self.placements[stream] = placed
        return self.placements.setdefault(stream, placed)

    def created_here(self, stream: str) -> None:
        """A stream this server made without a placement request (a template's): claim its
        name for this server, in the background."""
        if self.meta is not None and stream not in self.placements:
            self.placements[stream] = Placement(self.name)
            self._spawn(self._claim(stream))

    async def _claim(self, stream: str) -> None:
        assert self.meta is not None
        try:
            if await self.meta.create(f"{STREAMS}{stream}", _encode(_placed(self.name))):
                return
            # Another server claimed the name first: etcd's placement stands, and this copy
            # is said out loud, never merged.
            placed = await self.read_placement(stream, refresh=True)
            if placed is not None and placed.server != self.name:
                log.error(
                    "JetStream cluster: stream %r is placed on %s, yet a copy is here",
                    stream,
                    placed.server,
                )
        except MetaError as exc:
            log.error("JetStream cluster: stream %r not placed in etcd: %s", stream, exc)

    async def _place(self, stream: str, req: Request, restore: bool = False) -> Placement:
        """Choose a server for a new stream (created, or restored from a snapshot, whose
        request holds the config under ``config``) and claim its name in etcd."""
        assert self.meta is not None
        try:
            config = orjson.loads(req.body) if req.body.strip() else {}
        except orjson.JSONDecodeError:
            return Placement(self.name)  # the handler here reports the bad JSON
        if restore and isinstance(config, dict):
            config = config.get("config") or {}
        placement = (config.get("placement") or {}) if isinstance(config, dict) else {}
        wanted_cluster = placement.get("cluster") if isinstance(placement, dict) else None
        tags = set(placement.get("tags") or ()) if isinstance(placement, dict) else set()
        if wanted_cluster and wanted_cluster != self.cluster.name:
            raise errors.CLUSTER_NO_PEERS.exc(err="no suitable peers for placement")
        try:
            registered = await self._registered()
        except MetaError as exc:
            log.error("JetStream cluster: cannot place stream %r: %s", stream, exc)
            raise errors.CLUSTER_NOT_AVAIL.exc() from None
        candidates = [p for p in registered if tags <= set(p.tags)]
        replicas = _field_int(config, "num_replicas")
        if candidates and replicas > len(candidates):
            raise errors.CLUSTER_NO_PEERS.exc(err="no suitable peers for placement")
        if not candidates:
            known = {tag for peer in registered for tag in peer.tags}
            unmatched = sorted(tags - known) or sorted(tags)
            listed = ", ".join(f"'{tag}'" for tag in unmatched)
            raise errors.CLUSTER_NO_PEERS.exc(
                err=f"no suitable peers for placement, tags not matched [{listed}]"
            )
        load: dict[str, int] = {}
        for placed in self.placements.values():
            load[placed.server] = load.get(placed.server, 0) + 1
        ranked = sorted(candidates, key=lambda p: (load.get(p.name, 0), p.name))
        chosen = ranked[0]
        # A restore with replicas is built on one server, which then makes it a group from
        # its state (restore.RestoreSession._build): placed there alone first.
        peers = tuple(p.name for p in ranked[:replicas]) if replicas > 1 and not restore else ()
        try:
            placed = _placed(chosen.name, peers)
            won = await self.meta.create(
                f"streams/{stream}", _encode(placed), timeout=API_ETCD_TIMEOUT
            )
            if not won:
                current = await self.meta.get(f"streams/{stream}", timeout=API_ETCD_TIMEOUT)
                found = _parse_placement(current.value) if current is not None else None
                if found is None:
                    raise errors.CLUSTER_NOT_AVAIL.exc()
                return found
        except MetaError as exc:
            log.error("JetStream cluster: cannot place stream %r: %s", stream, exc)
            raise errors.CLUSTER_NOT_AVAIL.exc() from None
        self.placements[stream] = placed
        return placed

    async def _registered(self) -> list[Peer]:
        """The servers registered in etcd now, read from etcd rather than the watched cache
        (the watch may not have delivered a server that joined a moment ago, or the end of
        one whose lease ran out); what is read is merged into the cache, so forwarding to
        the chosen server finds it. The watch still delivers every change, in order, so the
        cache ends as etcd has it."""
        assert self.meta is not None
        found = await self.meta.range(SERVERS, timeout=API_ETCD_TIMEOUT)
        for key, value in found.items.items():
            self._on_server_event(MetaEvent("put", key, value.value, value.mod_revision))
        names = {key.removeprefix(SERVERS) for key in found.items}
        return [peer for name, peer in self.peers.items() if name in names]

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
        """Names, lists and account totals: every live server's own answer, merged. A
        stream placed on a server that did not answer is still named, and a list reports it
        ``missing``, as nats-server's does for a stream whose servers are down."""
        router = self.service.router
        client = self.service.client
        assert router is not None and client is not None
        whole = _whole(req)
        answers = {self.name: await router.local(route, whole)}
        others = [p for p in self.peers.values() if p.name != self.name]
        if others:
            base = f"{GATHER_INBOX}.{self.server.server_id}.{next(self._inbox_ids)}"
            gathering = Gathering(asyncio.get_running_loop().create_future())
            self._gathers[base] = gathering
            for index, peer in enumerate(others):
                if self._send_on(peer, whole, reply=f"{base}.{index}"):
                    gathering.waiting[str(index)] = peer.name
            gathering.check()
            try:
                await asyncio.wait_for(asyncio.shield(gathering.done), GATHER_TIMEOUT)
            except TimeoutError:
                log.warning(
                    "JetStream cluster: %s not answered in time by %s",
                    req.subject,
                    ", ".join(sorted(gathering.waiting.values())),
                )
            finally:
                self._gathers.pop(base, None)
            answers.update(gathering.answers)
        unanswered = sorted(
            name for name, placed in self.placements.items() if placed.server not in answers
        )
        merged = _merge(route.handler, list(answers.values()), req, unanswered)
        if req.reply:
            client.publish(req.reply, dumps({"type": route.type, **merged}))

    def _gathered(
        self, sub: Subscription, subject: str, reply: str, hdr: bytes | None, payload: bytes
    ) -> None:
        base, _, index = subject.rpartition(".")
        gathering = self._gathers.get(base)
        if gathering is None:
            return
        name = gathering.waiting.pop(index, None)
        if name is None:
            return
        try:
            answer = orjson.loads(payload)
        except orjson.JSONDecodeError:
            answer = None
        if isinstance(answer, dict) and "error" not in answer:
            gathering.answers[name] = answer
        gathering.check()


def _placed(
    server: str, peers: tuple[str, ...] = (), config: StreamConfig | None = None, origin: int = 0
) -> Placement:
    """A placement written now."""
    return Placement(server, peers, config, time.time_ns(), origin)


def _encode(placed: Placement) -> bytes:
    value: dict[str, Any] = {"server": placed.server, "created": placed.created}
    if placed.peers:
        value["peers"] = list(placed.peers)
    if placed.config is not None:
        value["config"] = config_to_json(placed.config, dynamic_metadata=False)
    if placed.origin:
        value["origin_replicas"] = placed.origin
    return orjson.dumps(value)


def _parse_placement(raw: bytes) -> Placement | None:
    try:
        value = orjson.loads(raw)
        peers = tuple(str(p) for p in value.get("peers") or ())
        config = value.get("config")
        return Placement(
            str(value["server"]),
            peers,
            config_from_json(config) if isinstance(config, dict) else None,
            int(value.get("created") or 0),
            int(value.get("origin_replicas") or 0),
        )
    except (orjson.JSONDecodeError, msgspec.MsgspecError, KeyError, TypeError, AttributeError):
        return None


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


def _field_int(config: Any, name: str) -> int:
    """An integer member of a decoded config (0 when missing or not an integer)."""
    value = config.get(name) if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _field(req: Request, name: str) -> Any:
    """A member of the request's JSON body, or None."""
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
        return orjson.loads(req.body).get(name)
    return None


def _offset(req: Request) -> int:
    with contextlib.suppress(TypeError, ValueError):
        return max(int(_field(req, "offset") or 0), 0)
    return 0


def _merge(
    handler: str, parts: list[dict[str, Any]], req: Request, unanswered: list[str]
) -> dict[str, Any]:
    """One answer from every server's part; ``unanswered``: streams placed on servers that
    did not answer (named by NAMES, ``missing`` in a LIST)."""
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
    filtered = bool(_field(req, "subject"))
    if handler == "stream_names":
        # Without a subject filter, a placed stream is named even when its server is down.
        items = sorted(set(items) | (set() if filtered else set(unanswered)))
    else:
        seen: dict[str, Any] = {}
        for info in items:
            seen.setdefault(info["config"]["name"], info)
        items = [seen[name] for name in sorted(seen)]
    limit = int(parts[0].get("limit", 256) or 256)
    offset = min(_offset(req), len(items))
    page = items[offset : offset + limit]
    missing = [] if handler != "stream_list" or filtered else unanswered
    total = len(items) + len(missing)
    body: dict[str, Any] = {"total": total, "offset": offset, "limit": limit}
    body["streams"] = page if (page or handler == "stream_list") else None
    if missing:
        body["missing"] = missing
    return body


__all__ = ["ClusteredJetStream"]
