"""An etcd member's name, ports and start mode, derived from the cluster's route URLs.

Nothing here talks to anything: these are pure functions, so every server computes every other
server's member name, peer URL and client URL from the same routes list, and the start mode can
be unit-tested. The layout (docs/CLUSTERING.md, "etcd"):

* a server whose cluster port is P runs its etcd member with the **client** port P + 1 and the
  **peer** port P + 2, on the same host;
* the member's **name** is ``<host>-<P>``, lowercased, every other character than a letter or a
  digit turned into ``-`` (``nats-route://Host1:6222`` -> ``host1-6222``);
* the initial-cluster **token** is derived from the cluster name, so two Headwater clusters that
  happen to list the same addresses never merge;
* the URLs are ``https://`` when the cluster has TLS (``tls=True``; ``meta.tls`` has the files),
  ``http://`` otherwise: every server of a cluster has the same TLS settings.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from headwater.server.cluster.urls import parse_route_url
from headwater.server.connections.listen import join_host_port

CLIENT_PORT_OFFSET = 1
"""etcd's client port is the cluster port plus this."""

PEER_PORT_OFFSET = 2
"""etcd's peer port is the cluster port plus this."""

_NOT_NAME = re.compile(r"[^a-z0-9]+")


def member_name(host: str, cluster_port: int) -> str:
    """``<host>-<port>``, sanitised to ``[a-z0-9-]`` (an IPv6 host's colons become dashes)."""
    cleaned = _NOT_NAME.sub("-", host.lower()).strip("-") or "host"
    return f"{cleaned}-{cluster_port}"


def cluster_token(cluster_name: str) -> str:
    """The ``--initial-cluster-token`` every server of the cluster derives alike."""
    return f"headwater-{cluster_name}"


@dataclass(frozen=True)
class MemberAddress:
    """Where the etcd member of the server whose route URL is ``host:cluster_port`` listens."""

    host: str
    cluster_port: int
    tls: bool = False
    """Whether the member serves its client and peer URLs over TLS (``https://``)."""

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def name(self) -> str:
        return member_name(self.host, self.cluster_port)

    @property
    def client_port(self) -> int:
        return self.cluster_port + CLIENT_PORT_OFFSET

    @property
    def peer_port(self) -> int:
        return self.cluster_port + PEER_PORT_OFFSET

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://{join_host_port(self.host, self.client_port)}"

    @property
    def peer_url(self) -> str:
        return f"{self.scheme}://{join_host_port(self.host, self.peer_port)}"


def member_address(route_url: str, tls: bool = False) -> MemberAddress:
    """The member of the server reached at ``route_url``; ValueError when it is unusable.

    Credentials and the scheme are ignored, and the host is compared without case, so the same
    server listed as ``nats-route://u:p@Host:6222`` and ``nats://host:6222`` is one member.
    ``tls`` is the cluster's: whether the member's URLs are https.
    """
    url = parse_route_url(route_url)
    return MemberAddress(url.host.lower(), url.port, tls)


def member_of_peer_url(peer_url: str) -> MemberAddress:
    """The inverse of :attr:`MemberAddress.peer_url`: names a member etcd lists without one."""
    url = parse_route_url(peer_url)
    tls = peer_url.lower().startswith("https://")
    return MemberAddress(url.host.lower(), url.port - PEER_PORT_OFFSET, tls)


class Mode(enum.Enum):
    RESTART = "restart"
    """The data directory holds a member already: start it as it is (etcd ignores the rest)."""
    STATIC = "static"
    """Every server lists every server: bootstrap together, state ``new``, all routes."""
    SINGLE = "single"
    """No routes: a cluster of one member, state ``new``."""
    JOIN = "join"
    """Routes that do not list this server: ``member add`` through one of them, then start
    with state ``existing``."""


@dataclass(frozen=True)
class BootstrapPlan:
    mode: Mode
    initial_cluster: tuple[MemberAddress, ...] = ()
    """STATIC and SINGLE: the members of ``--initial-cluster``, sorted by name."""
    seeds: tuple[MemberAddress, ...] = ()
    """JOIN: the members to reach for ``member add``, in the routes' order."""


def plan_bootstrap(
    self_url: str, routes: Sequence[str], data_dir_exists: bool, tls: bool = False
) -> BootstrapPlan:
    """How the member of the server at ``self_url`` starts, given its routes and data dir.

    ``self_url`` is this server's route URL as the other servers list it (it carries the
    cluster port the member's ports derive from). Duplicate routes count once. ``tls``: the
    members' URLs are https.
    """
    me = member_address(self_url, tls)
    if data_dir_exists:
        return BootstrapPlan(Mode.RESTART)
    listed: dict[MemberAddress, None] = {}
    for route in routes:
        listed.setdefault(member_address(route, tls))
    if not listed:
        return BootstrapPlan(Mode.SINGLE, initial_cluster=(me,))
    if me in listed:
        return BootstrapPlan(Mode.STATIC, initial_cluster=tuple(sorted(listed, key=_by_name)))
    return BootstrapPlan(Mode.JOIN, seeds=tuple(listed))


def initial_cluster_flag(members: Sequence[MemberAddress]) -> str:
    """``name=peer_url,...``: etcd's ``--initial-cluster`` value."""
    return ",".join(f"{m.name}={m.peer_url}" for m in members)


def _by_name(member: MemberAddress) -> str:
    return member.name


__all__ = [
    "CLIENT_PORT_OFFSET",
    "PEER_PORT_OFFSET",
    "BootstrapPlan",
    "MemberAddress",
    "Mode",
    "cluster_token",
    "initial_cluster_flag",
    "member_address",
    "member_name",
    "member_of_peer_url",
    "plan_bootstrap",
]
