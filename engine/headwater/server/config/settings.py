"""Frozen settings for one headwater-server process.

Every field documents its unit, its default and why the default was chosen. The defaults are
nats-server's, so a config written for nats-server behaves the same here. Settings are built
once (from flags and/or a config file, see ``config.load``) and never changed in place; a
reload builds a new object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MiB = 1024 * 1024

#: Port value meaning "pick a free ephemeral port" (nats-server's ``-p -1``).
RANDOM_PORT = -1


@dataclass(frozen=True)
class User:
    """One entry of an ``authorization { users: [...] }`` list."""

    user: str
    password: str


@dataclass(frozen=True)
class NkeyUser:
    """An ``authorization { users: [...] }`` entry naming an nkey instead of a user.

    The client proves it holds the key's seed by signing the nonce in its INFO."""

    nkey: str
    """Public user nkey (``U...``), checked when the config is read."""


@dataclass(frozen=True)
class AuthSettings:
    """Client authentication. With nothing set, every client is let in (nats-server's default)."""

    token: str | None = None
    """Shared secret clients send as ``auth_token`` in CONNECT."""
    user: str | None = None
    """Single user name (``--user``); pairs with ``password``."""
    password: str | None = None
    """Single user password (``--pass``)."""
    users: tuple[User, ...] = ()
    """Users from the config file's ``authorization.users`` list."""
    nkeys: tuple[NkeyUser, ...] = ()
    """nkey users from the same list (entries with ``nkey`` instead of ``user``)."""
    timeout: float = 2.0
    """Seconds a client has to send CONNECT before it is closed (nats-server: 2 s)."""

    @property
    def required(self) -> bool:
        return bool(self.token or self.user or self.users or self.nkeys)


@dataclass(frozen=True)
class TLSSettings:
    """Server TLS; ``verify`` also demands and checks a client certificate."""

    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    """CA bundle used to check client certificates when ``verify`` is on."""
    verify: bool = False
    timeout: float = 2.0
    """Seconds for the TLS handshake (nats-server: 2 s)."""
    handshake_first: bool = False
    """TLS-first (``handshake_first``): the handshake starts right after accept and INFO is
    sent only inside TLS, instead of a plaintext INFO followed by the upgrade."""

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file and self.key_file)


@dataclass(frozen=True)
class JetStreamSettings:
    enabled: bool = False
    store_dir: str = ""
    """Directory for file-stored streams. Empty means ``<tempdir>/nats/jetstream`` like
    nats-server."""
    max_memory_store: int = -1
    """Bytes for memory streams; -1 means 75% of system memory, as nats-server decides."""
    max_file_store: int = -1
    """Bytes for file streams; -1 means unlimited (bounded by the disk)."""
    sync_interval: float = 0.0
    """Seconds between fsyncs. 0 (our default) fsyncs before every publish ack, with group commit,
    so acknowledged data survives a power failure; nats-server defaults to 120 s. ``always``
    in the config maps to -1: fsync on every write, without batching."""
    domain: str | None = None
    request_queue_limit: int = 10_000
    """API requests that may wait for the JetStream API worker; the one that reaches it drops
    them all, as in nats-server (``request_queue_limit``; 0 or less means the default)."""
    snapshot_format: str = "headwater"
    """The archive STREAM.SNAPSHOT sends: ``headwater`` (docs/ARCHIVE.md: a checksum on every
    record, the stream's config inside) or ``nats`` (nats-server 2.15's NATSARC1 in S2, which
    nats-server and the nats CLI's backup tools read). RESTORE reads both either way."""


SNAPSHOT_FORMATS = ("headwater", "nats")


@dataclass(frozen=True)
class LogSettings:
    debug: bool = False
    trace: bool = False
    log_file: str | None = None
    """Write the log here instead of stderr (``-l``)."""
    log_time: bool = True
    """Prefix lines with a timestamp (``-T``); on by default as in nats-server."""


@dataclass(frozen=True)
class ClusterSettings:
    """Routes to the other servers of a cluster (docs/CLUSTERING.md). Off unless a cluster
    port is set (``--cluster``, ``cluster { listen }``)."""

    name: str | None = None
    """Cluster name; servers of different names refuse each other's routes. None: the first
    route's name is taken, or a random one is made (nats-server's dynamic name)."""
    host: str | None = None
    """Route listen address; the client listen address when unset."""
    port: int = 0
    """Route port; 0 turns clustering off, -1 picks a free one."""
    routes: tuple[str, ...] = ()
    """Route URLs to dial (``nats-route://[user:pass@]host:port``); the others are learned."""
    advertise: str | None = None
    """``host:port`` other servers dial for this one (``--cluster_advertise``), when the
    listen address is not reachable from them (NAT, containers)."""
    no_advertise: bool = False
    """Leave the other servers' client URLs out of client INFO (``--no_advertise``)."""
    connect_retries: int = 0
    """Attempts at an implicit route (one learned by gossip) before giving up; 0, nats-server's
    default, means one attempt. Configured routes are retried for as long as the server runs."""
    user: str | None = None
    """``cluster { authorization { user } }``: what a dialling server must send in CONNECT."""
    password: str | None = None
    """Its password, in clear or as a bcrypt hash (compared as nats-server does)."""
    auth_timeout: float = 2.0
    """Seconds an accepted route has to send its CONNECT."""
    ping_interval: float = 30.0
    """Seconds between PINGs on a route (nats-server caps routes at 30 s)."""
    max_pings_out: int = 2
    """Unanswered PINGs after which a route is stale and closed."""
    etcd: tuple[str, ...] = ()
    """An existing etcd for the cluster's metadata (``cluster { etcd: [...] }``); empty, the
    default, means each server runs its own member (docs/CLUSTERING.md)."""
    tls: TLSSettings = field(default_factory=TLSSettings)
    """Route TLS (``cluster { tls {} }``): the handshake starts as soon as a route connects,
    as nats-server's routes do; ``verify`` demands the other server's certificate too. The
    certificate is presented both ways, so it needs the server and client key usages."""

    @property
    def enabled(self) -> bool:
        return self.port != 0

    @property
    def auth_required(self) -> bool:
        return bool(self.user)


@dataclass(frozen=True)
class Settings:
    host: str = "0.0.0.0"
    """Client listen address (``-a``). A wildcard (this default, or ``::``) listens on all
    interfaces over IPv4 and IPv6, as nats-server (Go) does; ``127.0.0.1`` is IPv4 only and
    ``::1`` IPv6 only (``connections.listen``)."""
    port: int = 4222
    """Client port (``-p``); -1 picks a free port, printed in the 'Listening' log line."""
    http_host: str = "0.0.0.0"
    """Monitoring listen address; the client address unless set, bound the same way."""
    http_port: int = 0
    """Monitoring port (``-m``); 0 turns monitoring off, -1 picks a free port."""
    server_name: str = ""
    """Server name in INFO; empty means the server id, as in nats-server."""
    server_tags: tuple[str, ...] = ()
    """Tags stream placement (``placement { tags }``) matches, e.g. ``az:1``."""
    client_advertise: str | None = None
    """``host:port`` the other servers of a cluster give their clients for this one
    (``connect_urls``), instead of the listen address."""
    max_payload: int = 1 * MiB
    """Largest message body a client may publish (nats-server: 1 MiB)."""
    max_control_line: int = 4096
    """Longest protocol line, in bytes (nats-server: 4 KiB)."""
    max_pending: int = 64 * MiB
    """Bytes queued for one client before it is cut off as a slow consumer (nats-server: 64 MiB)."""
    max_connections: int = 64 * 1024
    ping_interval: float = 120.0
    """Seconds between server PINGs (nats-server: 2 min)."""
    max_pings_out: int = 2
    """Unanswered PINGs before 'Stale Connection' (nats-server: 2)."""
    write_deadline: float = 10.0
    """Seconds a blocked write may last before the client is a slow consumer (nats-server: 10 s)."""
    lame_duck_duration: float = 120.0
    """Seconds to spread client closes over in lame-duck mode (nats-server: 2 min)."""
    lame_duck_grace_period: float = 10.0
    """Seconds between announcing lame-duck mode and the first close (nats-server: 10 s)."""
    pid_file: str | None = None
    auth: AuthSettings = field(default_factory=AuthSettings)
    tls: TLSSettings = field(default_factory=TLSSettings)
    jetstream: JetStreamSettings = field(default_factory=JetStreamSettings)
    log: LogSettings = field(default_factory=LogSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
