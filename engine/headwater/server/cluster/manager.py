"""The cluster: the route listener, the routes to dial, and the registry of routes.

Owns (docs/OWNERSHIP.md): the set of registered routes (one per remote server), the routes
being dialled, this server's announced interest (:class:`LocalInterest`) and the client URLs
learned from other servers (``connect_urls`` in client INFO).

Forming the mesh is nats-server's: each server dials its configured routes and retries them
for as long as it runs; when a route registers, the server tells its other routes about the
new server (an INFO carrying the new server's id and route URL), and each of them dials it
unless it already has a route to that server. So three servers started with ``--routes`` to
the first one form a full mesh. Two connections between one pair (both dialled at once) are
resolved the same way on both ends: the one dialled by the server with the smaller id stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
from typing import TYPE_CHECKING, Any

from headwater import __version__
from headwater.server.cluster import wire
from headwater.server.cluster.interest import LocalInterest
from headwater.server.cluster.route import RouteConnection
from headwater.server.cluster.urls import RouteURL, parse_route_url
from headwater.server.connections import auth
from headwater.server.connections.listen import WILDCARD_HOSTS, join_host_port, listen_socket
from headwater.server.connections.tls import route_client_context, server_context
from headwater.server.jetstream.versioning import ADVERTISED_SERVER_VERSION, PROTOCOL_VERSION
from headwater.server.protocol import encoder

if TYPE_CHECKING:
    from headwater.server.node import Server
    from headwater.server.subscription import Subscription

log = logging.getLogger("headwater.server")

#: Seconds between attempts at a configured route (nats-server's DEFAULT_ROUTE_RECONNECT).
RECONNECT_DELAY = 1.0
#: Seconds a dial may take before it counts as failed (nats-server's DEFAULT_ROUTE_DIAL).
DIAL_TIMEOUT = 1.0
#: Failed attempts at a configured route logged at error level before the log goes quiet;
#: after that one line every ``REPORT_EVERY`` attempts (nats-server reports the same way).
REPORT_FIRST = 3
REPORT_EVERY = 60


class Cluster:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.settings = server.settings.cluster
        self.dynamic = not self.settings.name
        self.name = self.settings.name or secrets.token_hex(11)
        self.routes: dict[str, RouteConnection] = {}
        """Registered routes by remote server id."""
        self.pending: set[RouteConnection] = set()
        """Routes whose handshake is not done."""
        self.interest = LocalInterest()
        self.port = 0
        self.host = ""
        self._listener: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._dialling: set[str] = set()
        """Remote server ids an implicit route is being dialled to."""
        self._url_ids: dict[RouteURL, str] = {}
        """Configured route URL -> the server id it reached (``self`` for this server)."""
        self.configured = [parse_route_url(url) for url in self.settings.routes]
        self._stopping = False
        self.tls_server = server_context(self.settings.tls)
        self.tls_client = route_client_context(self.settings.tls)

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        settings = self.settings
        loop = asyncio.get_running_loop()
        self.host = settings.host or self.server.settings.host or "0.0.0.0"
        port = 0 if settings.port < 0 else settings.port
        tls: dict[str, Any] = {}
        if self.tls_server is not None:
            # Routes start TLS at once, before any INFO (nats-server's routes do too).
            tls = {"ssl": self.tls_server, "ssl_handshake_timeout": self.settings.tls.timeout}
        self._listener = await loop.create_server(
            self._accepted, sock=listen_socket(self.host, port), backlog=256, **tls
        )
        sockets = self._listener.sockets or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        log.info("Cluster name is %s", self.name)
        if self.dynamic:
            log.warning("Cluster name was dynamically generated, consider setting one")
        log.info("Listening for route connections on %s", join_host_port(self.host, self.port))
        for url in self.configured:
            self._spawn(self._keep_dialling(url))

    async def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        for route in [*self.routes.values(), *self.pending]:
            route.close("Server Shutdown")

    def enter_lame_duck(self) -> None:
        """Tell the other servers, so they drop this one's URLs from their clients' lists."""
        info = wire.info({**self.route_info(), "ldm": True})
        for route in self.routes.values():
            route.send(info)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- dialling ------------------------------------------------------------------------

    def _accepted(self) -> RouteConnection:
        route = RouteConnection(self, self.server.next_cid())
        self.pending.add(route)
        return route

    async def _dial(self, url: RouteURL) -> RouteConnection | None:
        loop = asyncio.get_running_loop()
        route = RouteConnection(self, self.server.next_cid(), url)
        self.pending.add(route)
        tls: dict[str, Any] = {}
        if self.tls_client is not None:
            tls = {
                "ssl": self.tls_client,
                "server_hostname": url.host,
                "ssl_handshake_timeout": self.settings.tls.timeout,
            }
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: route, url.host, url.port, **tls),
                DIAL_TIMEOUT + (self.settings.tls.timeout if tls else 0.0),
            )
        except (OSError, TimeoutError) as exc:
            self.pending.discard(route)
            raise ConnectionError(str(exc) or type(exc).__name__) from None
        return route

    async def _keep_dialling(self, url: RouteURL) -> None:
        """A configured route: dialled until this server stops, again whenever it drops."""
        failures = 0
        while not self._stopping:
            remote = self._url_ids.get(url)
            if remote == "self":
                return  # a route to this very server (a shared routes list): nothing to do
            existing = self.routes.get(remote) if remote else None
            if existing is not None:
                await existing.closed_future  # reached already, maybe by the other side
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            try:
                route = await self._dial(url)
            except ConnectionError as exc:
                failures += 1
                if failures <= REPORT_FIRST or failures % REPORT_EVERY == 0:
                    log.error(
                        "Error trying to connect to route %s (attempt %d): %s", url, failures, exc
                    )
                await asyncio.sleep(RECONNECT_DELAY)
                continue
            failures = 0
            if route is not None:
                await route.closed_future
            await asyncio.sleep(RECONNECT_DELAY)

    async def _dial_implicit(self, url: RouteURL, remote_id: str) -> None:
        """A route learned by gossip: tried ``connect_retries`` + 1 times, then given up, as
        nats-server does (the other server dials us too, through its own gossip)."""
        try:
            for attempt in range(self.settings.connect_retries + 1):
                if self._stopping or remote_id in self.routes:
                    return
                try:
                    route = await self._dial(url)
                except ConnectionError as exc:
                    log.debug("implicit route %s attempt %d failed: %s", url, attempt + 1, exc)
                    await asyncio.sleep(RECONNECT_DELAY)
                    continue
                if route is not None:
                    await route.closed_future
                return
        finally:
            self._dialling.discard(remote_id)

    # --- handshake -----------------------------------------------------------------------

    def connect_fields(self, url: RouteURL) -> dict[str, Any]:
        """The CONNECT a dialling route sends."""
        user = url.user if url.user is not None else self.settings.user
        password = url.password if url.user is not None else self.settings.password
        fields: dict[str, Any] = {
            "echo": True,
            "verbose": False,
            "pedantic": False,
            "tls_required": self.tls_client is not None,
            "headers": True,
            "name": self.server.server_id,
            "cluster": self.name,
        }
        if self.dynamic:
            fields["cluster_dynamic"] = True
        if user:
            fields["user"] = user
            fields["pass"] = password or ""
        return fields

    def check_connect(self, fields: dict[str, Any]) -> tuple[str, str] | auth.SecretCheck | None:
        """None when an accepted route's CONNECT is good; else (error, log text), or the bcrypt
        check that decides (run off the loop by the route)."""
        settings = self.settings
        remote_cluster = fields.get("cluster")
        if (
            isinstance(remote_cluster, str)
            and remote_cluster
            and remote_cluster != self.name
            and not self._adopt_name(remote_cluster, bool(fields.get("cluster_dynamic")))
        ):
            return (
                "Cluster Name Conflict",
                f'Rejecting connection, cluster name "{remote_cluster}" does not match '
                f'"{self.name}"',
            )
        if not settings.auth_required:
            return None
        checked = auth.authenticate(
            auth.AuthSettings(user=settings.user, password=settings.password), fields
        )
        if checked is None:
            return ("Authorization Violation", "Authorization Violation")
        if isinstance(checked, auth.SecretCheck):
            return checked
        return None

    def _adopt_name(self, remote: str, remote_dynamic: bool) -> bool:
        """A server without a configured name takes a configured one, or the larger of two
        generated ones, as nats-server does; True if the names now match."""
        if not self.dynamic:
            return False
        if remote_dynamic and remote <= self.name:
            return False
        log.info("Cluster name updated to %s", remote)
        self.name = remote
        self.dynamic = remote_dynamic
        return True

    def handshake(self, route: RouteConnection, info: dict[str, Any]) -> None:
        """The remote's first INFO: check it, register the route or close it."""
        remote_id = str(info.get("server_id") or "")
        route.remote_id = remote_id
        route.remote_name = str(info.get("server_name") or "")
        if not remote_id:
            route.close("Parse Error")
            return
        if remote_id == self.server.server_id:
            if route.url is not None and route.url in self._url_ids.keys() | set(self.configured):
                self._url_ids[route.url] = "self"
            log.debug("Detected route to self, ignoring %s", route.url or route.describe())
            route.close("Duplicate Route")
            return
        if route.url is not None:
            self._url_ids[route.url] = remote_id
        remote_cluster = str(info.get("cluster") or "")
        if (
            remote_cluster
            and remote_cluster != self.name
            and not self._adopt_name(remote_cluster, bool(info.get("cluster_dynamic")))
        ):
            # Worded as the accepting side words it, from the dialling side's view.
            log.error(
                'Rejecting route to %s, cluster name "%s" does not match "%s"',
                route.describe(),
                self.name,
                remote_cluster,
            )
            route.close("Cluster Name Conflict")
            return
        if info.get("route_account"):
            # A per-account (pinned) route: nats-server gives up on it for a server that
            # does not pool, and keeps the account on the shared route.
            route.close("Duplicate Route")
            return
        if not route.solicited and route.remote_name and route.remote_name == self.server.name:
            log.error("Remote server has a duplicate name: %r", route.remote_name)
            route.close("Duplicate Server Name")
            return
        existing = self.routes.get(remote_id)
        if existing is not None:
            keep = self._keeper(existing, route)
            loser = route if keep is existing else existing
            log.debug("Detected duplicate remote route %s", remote_id)
            loser.close("Duplicate Route")
            if keep is existing:
                return
        self._register(route, info)

    def _keeper(self, a: RouteConnection, b: RouteConnection) -> RouteConnection:
        """Of two routes to one server, the one dialled by the smaller server id (both ends
        pick the same); between two dialled by one side, the older."""
        mine = self.server.server_id

        def dialler(route: RouteConnection) -> str:
            return mine if route.solicited else route.remote_id

        if dialler(a) == dialler(b):
            return a
        return a if dialler(a) < dialler(b) else b

    def _register(self, route: RouteConnection, info: dict[str, Any]) -> None:
        self.pending.discard(route)
        route.register(info, _strings(info.get("connect_urls")))
        self.routes[route.remote_id] = route
        log.info(
            "Route connection created with %s (%s)",
            route.describe(),
            "solicited" if route.solicited else "accepted",
        )
        announce = [
            wire.sub("$G", subject, queue, weight)
            for subject, queue, weight in self.interest.items()
        ]
        if announce:
            route.send(b"".join(announce))
        implicit = route.solicited and route.url not in self.configured
        if not implicit:
            self._gossip(route, info)
        self._clients_changed()

    def _gossip(self, route: RouteConnection, info: dict[str, Any]) -> None:
        """Tell the other routes about the new server, with a URL they can dial."""
        if not self.routes.keys() - {route.remote_id}:
            return
        told = dict(info)
        told.pop("nonce", None)
        if not told.get("ip"):
            port = int(told.get("port") or 0)
            told["ip"] = f"nats-route://{join_host_port(route.ip, port)}/"
        line = wire.info(told)
        for other in self.routes.values():
            if other is not route:
                other.send(line)

    def learned(self, info: dict[str, Any], via: RouteConnection) -> None:
        """Gossip about a server we may not have a route to yet."""
        remote_id = str(info.get("server_id") or "")
        if (
            not remote_id
            or remote_id == self.server.server_id
            or remote_id in self.routes
            or remote_id in self._dialling
            or self._stopping
        ):
            return
        try:
            url = parse_route_url(str(info.get("ip") or ""))
        except ValueError:
            log.debug("gossip from %s without a usable route URL", via.describe())
            return
        if url in self.configured:
            return  # dialled by its own loop
        if url.user is None and self.settings.user:
            url = RouteURL(url.host, url.port, self.settings.user, self.settings.password)
        self._dialling.add(remote_id)
        self._spawn(self._dial_implicit(url, remote_id))

    def updated(self, route: RouteConnection, info: dict[str, Any]) -> None:
        """An INFO from a registered route about itself: lame duck or new client URLs."""
        if info.get("ldm"):
            log.info("Route %s entered lame duck mode", route.describe())
            route.connect_urls = []
        else:
            route.connect_urls = _strings(info.get("connect_urls"))
        self._clients_changed()

    def route_closed(self, route: RouteConnection) -> None:
        self.pending.discard(route)
        log.info(
            "rid:%d Router connection to %s closed: %s",
            route.cid,
            route.describe(),
            route.close_reason,
        )
        if route.registered and self.routes.get(route.remote_id) is route:
            del self.routes[route.remote_id]
            self._clients_changed()

    # --- our side of the handshake -------------------------------------------------------

    def route_info(self) -> dict[str, Any]:
        server = self.server
        info: dict[str, Any] = {
            "server_id": server.server_id,
            "server_name": server.name,
            "version": ADVERTISED_SERVER_VERSION,
            "go": f"headwater {__version__}",
            "host": self.host,
            "port": self.port,
            "headers": True,
            "max_payload": server.settings.max_payload,
            "proto": PROTOCOL_VERSION,
            "cluster": self.name,
        }
        if self.dynamic:
            info["cluster_dynamic"] = True
        if self.settings.auth_required:
            info["auth_required"] = True
        if self.tls_server is not None:
            info["tls_required"] = True
            if self.settings.tls.verify:
                info["tls_verify"] = True
        if self.settings.advertise:
            info["ip"] = f"nats-route://{self.settings.advertise}/"
        urls = self.own_client_urls()
        if urls:
            info["connect_urls"] = urls
        if server.lame_duck:
            info["ldm"] = True
        return info

    def own_client_urls(self) -> list[str]:
        """This server's client address(es), as other servers pass them to their clients."""
        server = self.server
        if server.settings.client_advertise:
            return [server.settings.client_advertise]
        host = server.settings.host
        if host not in WILDCARD_HOSTS:
            return [join_host_port(host, server.port)]
        return [join_host_port(ip, server.port) for ip in _interface_addresses()]

    def client_connect_urls(self) -> list[str]:
        """``connect_urls`` for client INFO: this server and every server routed to."""
        if self.settings.no_advertise:
            return []
        urls = list(self.own_client_urls())
        for route in self.routes.values():
            for url in route.connect_urls:
                if url not in urls:
                    urls.append(url)
        return urls

    def _clients_changed(self) -> None:
        """Send the new INFO to clients that take async INFO (``protocol`` 1), as
        nats-server does when the cluster grows or shrinks."""
        if self.settings.no_advertise or self._stopping:
            return
        server = self.server
        for client in list(server.clients.values()):
            if client.protocol >= 1 and client.connected and not client.closed:
                client.send(encoder.info(server.client_info(client)))

    # --- interest ------------------------------------------------------------------------

    def local_added(self, sub: Subscription) -> None:
        weight = self.interest.add(sub.subject, sub.queue)
        if weight is not None:
            self._broadcast(wire.sub("$G", sub.subject, sub.queue, weight))

    def local_removed(self, sub: Subscription) -> None:
        weight = self.interest.remove(sub.subject, sub.queue)
        if weight is None:
            return
        if weight:
            self._broadcast(wire.sub("$G", sub.subject, sub.queue, weight))
        else:
            self._broadcast(wire.unsub("$G", sub.subject, sub.queue))

    def _broadcast(self, line: bytes) -> None:
        for route in self.routes.values():
            route.send(line)

    def __contains__(self, remote_id: str) -> bool:
        return remote_id in self.routes


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _interface_addresses() -> list[str]:
    """Non-loopback addresses of this host (what a wildcard listener is reachable on), or
    the loopback address when there is none, as nats-server lists them."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        for family, _, _, _, address in socket.getaddrinfo(socket.gethostname(), None):
            ip = str(address[0])
            usable = family in (socket.AF_INET, socket.AF_INET6) and "%" not in ip
            if usable and not ip.startswith(("127.", "::1")) and ip not in found:
                found.append(ip)
    return found or ["127.0.0.1"]


__all__ = ["Cluster"]
