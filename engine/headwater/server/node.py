"""The server: listener, client registry, routing, lifecycle (start, lame duck, stop).

Routing never awaits: a publish is matched and delivered to every receiver inside one
``data_received`` call, so ordering per publisher is the order of its bytes on the wire.
Services (JetStream, monitoring) are attached with :meth:`Server.add_service` and started
and stopped with the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from headwater import __version__
from headwater.server.cluster.manager import Cluster
from headwater.server.cluster.route import RouteConnection
from headwater.server.config.settings import RANDOM_PORT, Settings
from headwater.server.connections.client import ClientConnection
from headwater.server.connections.listen import join_host_port, listen_socket
from headwater.server.connections.tls import server_context
from headwater.server.jetstream.versioning import ADVERTISED_SERVER_VERSION, PROTOCOL_VERSION
from headwater.server.monitoring.connz import closed_record
from headwater.server.protocol import encoder
from headwater.server.routing.subjects import subject_matches
from headwater.server.routing.sublist import Sublist, SublistResult
from headwater.server.subscription import Receiver, Subscription

log = logging.getLogger("headwater.server")

#: Subjects by convention used for one message each (request inboxes, JetStream acks): not
#: worth a place in the match cache, where they would evict the subjects publishers reuse.
ONE_SHOT_PREFIXES = ("_INBOX.", "$JS.ACK.")

#: Most one-shot subjects differ from their neighbours only after a fixed prefix: nats clients
#: answer on ``_INBOX.<connection id>.<n>`` (one ``_INBOX.<id>.*`` subscription), JetStream acks
#: arrive on ``$JS.ACK.<stream>.<consumer>.<5 numbers>`` (one ``...<consumer>.>``). While the
#: subscriptions below such a prefix are wildcards only, every subject under it with the same
#: number of tokens has the same match, so :class:`ReplyMemo` keeps one result per prefix.
REPLY_MEMO_MAX = 4096

#: Closed connections remembered for /connz?state=closed (nats-server keeps 10,000).
CLOSED_HISTORY = 1000

#: The nats-server version we advertise. Clients choose API forms by it (nats-py picks the
#: consumer-create subject form for minor ≥ 9); see docs/DIFFERENCES.md.
ADVERTISED_VERSION = ADVERTISED_SERVER_VERSION

_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def new_server_id() -> str:
    """A 56-character id shaped like nats-server's (an 'N' then base32)."""
    return "N" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(55))


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Server:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server_id = new_server_id()
        self.name = settings.server_name or self.server_id
        self.sublist = Sublist()
        self.clients: dict[int, ClientConnection] = {}
        self.closed_clients: list[dict[str, Any]] = []
        self.jetstream: Any = None  # the JetStreamService once started (monitoring reads it)
        self.services: list[Service] = []
        self.tls_context = server_context(settings.tls)
        self.port = 0
        self.http_port = 0
        self.start_time = time.time()
        self.lame_duck = False
        self.ready = False
        self._cid = 0
        self._listener: asyncio.AbstractServer | None = None
        self._stopped = asyncio.Event()
        self._stopping = False
        self.reply_memo = ReplyMemo(self.sublist)
        self.interest_epoch = 0
        """Bumped by every subscribe and unsubscribe: a kept :meth:`match` result is current
        while it is unchanged."""
        self._interest_watchers: dict[str, list[Callable[[], None]]] = {}
        """Literal subject -> callbacks run when a subscription that matches it appears."""
        # Totals for /varz.
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.slow_consumers = 0
        self.auth_errors = 0
        self.total_connections = 0
        self.cluster = Cluster(self) if settings.cluster.enabled else None
        self.remote_subs = 0
        """Subscriptions of other servers (through routes) in the sublist: while there are
        any, routing takes the cluster-aware path (:meth:`_route_clustered`)."""

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        settings = self.settings
        loop = asyncio.get_running_loop()
        port = 0 if settings.port == RANDOM_PORT else settings.port
        tls_first: dict[str, object] = {}
        if self.tls_context is not None and settings.tls.handshake_first:
            # TLS-first: the listener completes the handshake before the connection is
            # handed over. Starting it later from the protocol loses the race with uvloop,
            # which reads an accepted socket straight after connection_made (ignoring a
            # pause_reading there) and so can swallow the client's ClientHello.
            tls_first = {"ssl": self.tls_context, "ssl_handshake_timeout": settings.tls.timeout}
        # Bound like nats-server: the default (wildcard) address takes IPv4 and IPv6 on one
        # port; a literal address is that address only.
        self._listener = await loop.create_server(
            self._new_connection,
            sock=listen_socket(settings.host, port),
            backlog=4096,
            **tls_first,  # type: ignore[arg-type]
        )
        sockets = self._listener.sockets or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        log.info("Starting headwater-server")
        log.info("  Version:  %s (nats-server %s compatible)", __version__, ADVERTISED_VERSION)
        log.info("  ID:       %s", self.server_id)
        if settings.pid_file:
            with open(settings.pid_file, "w") as fh:
                fh.write(str(os.getpid()))
        if self.cluster is not None:
            # Before the services: clustered JetStream derives its etcd ports from the
            # route port, which may be picked at random.
            await self.cluster.start()
        for service in self.services:
            await service.start()
        host = settings.host or "0.0.0.0"
        log.info("Listening for client connections on %s", join_host_port(host, self.port))
        if self.tls_context is not None:
            log.info("TLS required for client connections")
        self.ready = True
        log.info("Server is ready")

    def add_service(self, service: Service) -> None:
        self.services.append(service)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def shutdown(self) -> None:
        if self._stopped.is_set() or self._stopping:
            return
        self._stopping = True  # a second signal while the services stop changes nothing
        self.ready = False
        log.info("Initiating Shutdown...")
        if self._listener is not None:
            self._listener.close()
        # Services stop first, while the clients are still connected, as in nats-server:
        # JetStream answers waiting pull requests (409 Server Shutdown), sends the publish
        # acks of its last group commit and the ack replies that waited on consumer state
        # writes. Closed first, the clients missed those acks and publishers retried
        # messages already stored (duplicates without Msg-Id).
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:  # a failing service must not keep the others from stopping
                log.exception("error stopping %s", type(service).__name__)
        if self.cluster is not None:
            await self.cluster.stop()
        for client in list(self.clients.values()):
            client.close("Server Shutdown")  # flushes what is queued for it first
        if self.settings.pid_file:
            with contextlib.suppress(OSError):
                os.unlink(self.settings.pid_file)
        log.info("Server Exiting..")
        self._stopped.set()

    async def enter_lame_duck(self) -> None:
        """Stop accepting, tell clients (INFO ldm), then close them over the lame-duck window.

        First, as nats-server moves its Raft leaders, every replicated stream led here hands
        its leadership to an in-sync replica (bounded: ``Replicas.hand_over``).
        As in nats-server: the INFO goes only to clients that said ``protocol: 1`` (async INFO);
        with no clients the server stops at once; otherwise it waits the grace period, then
        spreads the closes over the rest of the duration (at most 1 s apart) and stops right
        after the last one.
        """
        if self.lame_duck:
            return
        self.lame_duck = True
        log.info("Entering lame duck mode, stop accepting new clients")
        if self._listener is not None:
            self._listener.close()
        if self.cluster is not None:
            self.cluster.enter_lame_duck()
        clustered = getattr(self.jetstream, "clustered", None)
        if clustered is not None:
            # The streams this server leads hand their leadership over while it is still up
            # (routes and etcd included), so none waits an election timeout once it exits.
            await clustered.replicas.hand_over()
        if not self.clients:
            await self.shutdown()
            return
        for client in list(self.clients.values()):
            if client.protocol >= 1:
                client.send(self._ldm_info(client))
        settings = self.settings
        await asyncio.sleep(settings.lame_duck_grace_period)
        log.info("Closing existing clients")
        clients = list(self.clients.values())  # may be empty: all left during the grace
        window = settings.lame_duck_duration - settings.lame_duck_grace_period
        pause = min((window if window > 0 else 1.0) / max(len(clients), 1), 1.0)
        for i, client in enumerate(clients):
            client.close("Server Shutdown")
            if i + 1 < len(clients) and pause > 0.001:
                await asyncio.sleep(pause)
        await self.shutdown()

    def _ldm_info(self, client: ClientConnection) -> bytes:
        return encoder.info(self.client_info(client))

    # --- connections ---------------------------------------------------------------------

    def _new_connection(self) -> ClientConnection:
        return ClientConnection(self, self.next_cid(), self.tls_context)

    def next_cid(self) -> int:
        self._cid += 1
        return self._cid

    def has_room(self) -> bool:
        """Whether one more client fits under max_connections."""
        return len(self.clients) < self.settings.max_connections

    def client_opened(self, client: ClientConnection) -> None:
        self.total_connections += 1
        if not self.has_room():
            client.send_err("maximum connections exceeded")
            client.close("Max Connections")
            return
        self.clients[client.cid] = client
        transport = client.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def client_closed(self, client: ClientConnection) -> None:
        if self.clients.pop(client.cid, None) is not None:
            # Keep a short history for /connz?state=closed, as nats-server does.
            self.closed_clients.append(closed_record(client))
            del self.closed_clients[:-CLOSED_HISTORY]

    def client_info(self, client: ClientConnection) -> dict[str, Any]:
        settings = self.settings
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.name,
            "version": ADVERTISED_VERSION,
            "proto": PROTOCOL_VERSION,
            "go": "headwater",
            "host": settings.host,
            "port": self.port,
            "headers": True,
            "max_payload": settings.max_payload,
            "jetstream": settings.jetstream.enabled,
            "client_id": client.cid,
            "client_ip": client.ip,
        }
        if settings.auth.required:
            info["auth_required"] = True
        if self.tls_context is not None:
            # nats-server omits false flags; tls_available would mean TLS is optional
            # (allow_non_tls), which it never is here.
            info["tls_required"] = True
            if settings.tls.verify:
                info["tls_verify"] = True
        if self.cluster is not None:
            info["cluster"] = self.cluster.name
            urls = self.cluster.client_connect_urls()
            if urls:
                info["connect_urls"] = urls
        if self.lame_duck:
            info["ldm"] = True
        return info

    # --- routing -------------------------------------------------------------------------

    def match(self, subject: str) -> SublistResult:
        """The subscriptions a message on ``subject`` goes to."""
        if subject.startswith(ONE_SHOT_PREFIXES):
            return self.reply_memo.match(subject)
        return self.sublist.match(subject)

    def subscribe(self, sub: Subscription) -> None:
        self.interest_epoch += 1
        self.sublist.insert(sub)
        self.reply_memo.clear()
        if self.cluster is not None:
            if sub.client.kind == "route":
                self.remote_subs += 1
            elif not sub.local:
                self.cluster.local_added(sub)
        if self._interest_watchers:
            self._notify_interest(sub.subject)

    def watch_interest(self, subject: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a subscription matching ``subject`` (a literal) is made:
        how a push consumer created before its client subscribes learns it can deliver."""
        self._interest_watchers.setdefault(subject, []).append(callback)

    def unwatch_interest(self, subject: str, callback: Callable[[], None]) -> None:
        callbacks = self._interest_watchers.get(subject)
        if callbacks and callback in callbacks:
            callbacks.remove(callback)
            if not callbacks:
                del self._interest_watchers[subject]

    def _notify_interest(self, sub_subject: str) -> None:
        watchers = self._interest_watchers
        if sub_subject in watchers:
            fired = list(watchers[sub_subject])
        else:
            fired = [
                callback
                for subject, callbacks in watchers.items()
                if subject_matches(sub_subject, subject)
                for callback in callbacks
            ]
        for callback in fired:
            callback()

    def unsubscribe(self, sub: Subscription) -> None:
        self.interest_epoch += 1
        if not self.sublist.remove(sub):
            return
        self.reply_memo.clear()
        if self.cluster is not None:
            if sub.client.kind == "route":
                self.remote_subs -= 1
            elif not sub.local:
                self.cluster.local_removed(sub)

    def own_subs_matching(self, client: Receiver, subject: str) -> Iterator[Subscription]:
        result = self.sublist.match(subject)
        for sub in result.psubs:
            if sub.client is client:
                yield sub
        for group in result.qsubs:
            for sub in group:
                if sub.client is client:
                    yield sub

    def route(
        self,
        sender: Receiver,
        subject: str,
        reply: str,
        hdr: bytes | None,
        payload: bytes,
        size: int,
        shown_subject: str | None = None,
        targets: SublistResult | None = None,
    ) -> int:
        """Deliver one message to every matching subscription; returns how many got it.

        ``targets`` is a :meth:`match` result the caller kept for ``subject`` (valid while
        :attr:`interest_epoch` is unchanged): a consumer delivering a run of messages to one
        subject matches it once.

        ``shown_subject`` is the subject receivers see when it differs from the one routed
        on: a consumer's message goes to its deliver subject or pull inbox but carries the
        subject it was stored under, as nats-server does (nats-py's KV watchers read keys
        from it).
        """
        self.in_msgs += 1
        self.in_bytes += size
        result = self.match(subject) if targets is None else targets
        shown = subject if shown_subject is None else shown_subject
        if self.remote_subs:
            return self._route_clustered(sender, result, subject, shown, reply, hdr, payload, size)
        delivered = 0
        no_echo = not sender.echo
        for sub in result.psubs:
            if no_echo and sub.client is sender:
                continue
            sub.client.deliver(sub, shown, reply, hdr, payload)
            delivered += 1
        for group in result.qsubs:
            sub = _pick(group, sender, no_echo)
            if sub is not None:
                sub.client.deliver(sub, shown, reply, hdr, payload)
                delivered += 1
        if delivered:
            self.out_msgs += delivered
            self.out_bytes += delivered * size
        return delivered

    def route_batch(
        self, sender: Receiver, subject: str, payloads: list[bytes], total: int
    ) -> None:
        """Route plain messages (no reply, no headers) published back to back to one subject.

        Same result as calling :meth:`route` for each, with one match and one write per
        subscriber instead of one per message (queue groups still pick a member per message).
        ``sender`` may be a route: its plain messages (no queue groups named) come here too.
        """
        count = len(payloads)
        result = self.sublist.match(subject)
        from_route = sender.kind == "route"
        if self.remote_subs and result.qsubs and not from_route:
            # Queue groups choose a member (local first) per message: the general path.
            for payload in payloads:
                self.route(sender, subject, "", None, payload, len(payload))
            return
        self.in_msgs += count
        self.in_bytes += total
        no_echo = not sender.echo
        out_msgs = out_bytes = 0
        routes: set[Receiver] = set()
        for sub in result.psubs:
            client = sub.client
            if client.kind == "route":
                # One RMSG per message and route, however many of its subscriptions match;
                # nothing that came from a route goes to another (one hop).
                if not from_route:
                    routes.add(client)
                continue
            if no_echo and client is sender:
                continue
            client.deliver_batch(sub, subject, payloads, total)
            out_msgs += count
            out_bytes += total
        for route in routes:
            route.deliver_batch(None, subject, payloads, total)  # type: ignore[arg-type]
            out_msgs += count
            out_bytes += total
        # A route names the queue groups a message is for; plain RMSGs name none.
        for group in () if from_route else result.qsubs:
            for payload in payloads:
                sub = _pick(group, sender, no_echo)
                if sub is not None:
                    sub.client.deliver(sub, subject, "", None, payload)
                    out_msgs += 1
                    out_bytes += len(payload)
        self.out_msgs += out_msgs
        self.out_bytes += out_bytes

    def route_from_route(
        self,
        route: RouteConnection,
        subject: str,
        reply: str,
        queues: tuple[str, ...],
        hdr: bytes | None,
        payload: bytes,
        size: int,
        shown: str | None = None,
    ) -> int:
        """A message another server sent: to this server's subscribers only (one hop), and
        to a member of each queue group the sender named. ``shown`` is the subject receivers
        see when it is not the one routed on (see :meth:`_route_clustered`)."""
        self.in_msgs += 1
        self.in_bytes += size
        return self._route_clustered(
            route,
            self.match(subject),
            subject,
            subject if shown is None else shown,
            reply,
            hdr,
            payload,
            size,
            queues,
        )

    def _route_clustered(
        self,
        sender: Receiver,
        result: SublistResult,
        subject: str,
        shown: str,
        reply: str,
        hdr: bytes | None,
        payload: bytes,
        size: int,
        queues: tuple[str, ...] | None = None,
    ) -> int:
        """Routing while other servers have interest here, as nats-server does it:

        - a route gets one RMSG per message whatever number of its subscriptions match,
          naming the queue groups it is to pick a member of;
        - a queue group's member is picked among all its members in the cluster, a server's
          chance being its number of members (its weight), as nats-server picks;
        - a message that came from a route goes to local subscribers only, and to the queue
          groups it names (``queues``), falling back to another server's member when no
          local one is left.
        """
        from_route = sender.kind == "route"
        no_echo = not sender.echo
        targets: dict[RouteConnection, list[str]] = {}
        delivered = 0
        for sub in result.psubs:
            client = sub.client
            if client.kind == "route":
                if not from_route and client not in targets:
                    targets[client] = []  # type: ignore[index]
                continue
            if no_echo and client is sender:
                continue
            client.deliver(sub, shown, reply, hdr, payload)
            delivered += 1
        for group in result.qsubs:
            queue = group[0].queue
            if queues is not None and queue not in queues:
                continue
            chosen = _pick_member(group, sender, no_echo, from_route)
            if chosen is None:
                continue
            if chosen.client.kind == "route":
                targets.setdefault(chosen.client, []).append(queue)  # type: ignore[arg-type]
            else:
                chosen.client.deliver(chosen, shown, reply, hdr, payload)
                delivered += 1
        for route, names in targets.items():
            if shown == subject:
                route.send_msg(subject, reply, names, hdr, payload)
            else:
                # A consumer's delivery: it is routed on its deliver subject (an inbox) but
                # shows the subject it was stored under. Both cross the route as nats-server
                # sends them: the shown subject, and the deliver subject after '@' in the reply.
                route.send_msg(shown, f"{reply}@{subject}", names, hdr, payload)
            delivered += 1
        if delivered:
            self.out_msgs += delivered
            self.out_bytes += delivered * size
        return delivered

    def num_subscriptions(self) -> int:
        return self.sublist.count


class ReplyMemo:
    """Match results of one-shot subjects, one per prefix (see :data:`REPLY_MEMO_MAX`).

    Emptied on every subscribe and unsubscribe (all sublist changes go through the
    :class:`Server`), so an entry never outlives the subscriptions it was computed from. A
    prefix is remembered only when no subscription has a literal token after it (checked on
    the trie), which is what makes the rest of the subject irrelevant to the match.
    """

    __slots__ = ("_entries", "_sublist")

    def __init__(self, sublist: Sublist) -> None:
        self._sublist = sublist
        self._entries: dict[str, tuple[int, SublistResult]] = {}

    def clear(self) -> None:
        if self._entries:
            self._entries = {}

    def match(self, subject: str) -> SublistResult:
        """The sublist's match for ``subject`` (an ``_INBOX.`` or ``$JS.ACK.`` subject)."""
        if subject[0] == "_":
            cut = subject.find(".", 7)  # the end of _INBOX.<id>
        else:
            cut = subject.find(".", 8)  # $JS.ACK.<stream>, then .<consumer>
            if cut > 0:
                cut = subject.find(".", cut + 1)
        if cut <= 0 or ".." in subject or subject[-1] == ".":
            return self._sublist.match(subject, False)
        prefix = subject[:cut]
        ntoks = subject.count(".")
        entry = self._entries.get(prefix)
        if entry is not None and entry[0] == ntoks:
            return entry[1]
        result = self._sublist.match(subject, False)
        if self._sublist.only_wildcards_after(prefix):
            if len(self._entries) >= REPLY_MEMO_MAX:
                self._entries = {}
            self._entries[prefix] = (ntoks, result)
        return result


def _pick_member(
    group: tuple[Subscription, ...], sender: Receiver, no_echo: bool, from_route: bool
) -> Subscription | None:
    """A queue group's member for one message while routes have interest. For a message
    from a client: any member, local or another server's (each server weighing its number of
    members). For a message from a route: a local member, another server's only if none is
    left here."""
    local: list[Subscription] = []
    remote: list[Subscription] = []
    for sub in group:
        if sub.client.kind == "route":
            if sub.client is not sender:
                remote.append(sub)
        elif not (no_echo and sub.client is sender):
            local.append(sub)
    if from_route:
        if local:
            return random.choice(local)
        return random.choice(remote) if remote else None
    if not local and not remote:
        return None
    weights = [1] * len(local) + [getattr(s, "weight", 1) for s in remote]
    return random.choices(local + remote, weights=weights)[0]


def _pick(group: tuple[Subscription, ...], sender: Receiver, no_echo: bool) -> Subscription | None:
    """One member of a queue group, at random; never the sender itself when echo is off."""
    sub = random.choice(group)
    if no_echo and sub.client is sender:
        others = [s for s in group if s.client is not sender]
        return random.choice(others) if others else None
    return sub


__all__ = ["ADVERTISED_VERSION", "Server"]
