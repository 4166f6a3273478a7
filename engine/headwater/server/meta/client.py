"""The server's handle on cluster metadata in etcd: a thin wrapper over ``aetcd``.

What it adds to aetcd, and why:

* **One key space per cluster.** Every key lives under ``/headwater/<cluster>/``; callers name
  keys relative to it, so two Headwater clusters can share one external etcd.
* **Several endpoints.** aetcd talks to one address; this client keeps one aetcd client per
  member and moves to the next member when one is unreachable or has no leader, so losing the
  local member does not lose the metadata while the others hold a quorum.
* **Bounded time and one clear error.** Every call is bounded by ``timeout`` (all endpoints and
  retries included) and fails with :class:`MetaUnavailable` when no member with a quorum
  answered in time. Requests carry etcd's "require leader" flag, so a member cut off from its
  quorum refuses at once instead of holding the request until etcd's own timeout; the caller
  (the JetStream API) turns that into a clear refusal, never a hang.
* **Leases kept alive** for server liveness (:meth:`MetaClient.register_server`), and a
  **watch** that resumes on another member from the last revision it delivered.
* **TLS** when the cluster has it (``tls``, see ``meta.tls``): https endpoints, dialled with the
  cluster's certificate; an endpoint whose scheme disagrees with that is refused up front.

A write that timed out may or may not have been applied (the request may have reached the
leader): only "unreachable" and "no leader" answers, which etcd gives before proposing, are
retried on another member; a timeout is reported as :class:`MetaUnavailable` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import aetcd

from headwater.server.meta.tls import EtcdTLS, make_client

log = logging.getLogger("headwater.server.meta")

T = TypeVar("T")

REQUIRE_LEADER = (("hasleader", "true"),)
"""gRPC metadata (etcd's ``rpctypes.MetadataRequireLeaderKey``): fail fast without a leader."""

CHANNEL_OPTIONS = {
    # gRPC backs off reconnecting up to two minutes by default: a member that restarts would
    # stay unusable long after it is back.
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    # Notice a dead connection under a long-lived watch (etcd accepts pings every 5 s).
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
}

RETRY_PAUSE_S = 0.1
"""Pause after every member refused once, doubled up to ``MAX_RETRY_PAUSE_S``."""
MAX_RETRY_PAUSE_S = 1.0


class MetaError(Exception):
    """A metadata request etcd refused for another reason than availability (a bug)."""


class MetaUnavailable(MetaError):
    """No etcd member with a quorum answered within the timeout: the metadata cannot change."""


class WatchCompacted(MetaError):
    """The watch's start revision was compacted away: re-read the state, then watch again."""


@dataclass(frozen=True)
class MetaValue:
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int = 0


@dataclass(frozen=True)
class MetaRange:
    items: dict[str, MetaValue]
    """Relative key -> value, in key order."""
    revision: int
    """The store revision the range was read at: watch from ``revision + 1`` to miss nothing."""


@dataclass(frozen=True)
class MetaEvent:
    kind: Literal["put", "delete"]
    key: str
    value: bytes
    revision: int


@dataclass(frozen=True)
class MetaMember:
    """One etcd member, as the member list names it."""

    id: int
    name: str
    client_urls: tuple[str, ...]


@dataclass(frozen=True)
class MetaStatus:
    """The etcd cluster as one member with a quorum sees it."""

    leader: str | None
    """The leader member's name (None while an election runs)."""
    members: tuple[MetaMember, ...]
    raft_term: int


MetaWatch = AsyncGenerator[MetaEvent, None]
"""What :meth:`MetaClient.watch` returns: iterate it, ``aclose()`` it when done."""


def parse_endpoint(url: str) -> tuple[str, int]:
    """``http(s)://host:port`` (or bare ``host:port``) -> (host, port); ValueError otherwise."""
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise ValueError(f"etcd endpoint {url!r} is not http(s)://host:port")
    return parts.hostname, parts.port


def check_schemes(urls: Sequence[str], tls: EtcdTLS | None) -> None:
    """ValueError unless every URL parses and its scheme fits ``tls``: https needs the TLS
    files, and a cluster with TLS dials no plaintext etcd (a bare ``host:port`` takes the
    cluster's scheme)."""
    for url in urls:
        parse_endpoint(url)
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme == "https" and tls is None:
            raise ValueError(
                f"https etcd URL {url!r} needs the cluster's TLS files (cluster {{ tls {{}} }})"
            )
        if scheme == "http" and tls is not None:
            raise ValueError(f"http etcd URL {url!r}: the cluster has TLS, use https://")


class MetaClient:
    """Keys under ``/headwater/<cluster>/`` on the etcd members at ``endpoints``, over TLS
    with the cluster's files when ``tls`` is given."""

    def __init__(
        self,
        endpoints: Sequence[str],
        cluster: str,
        *,
        timeout: float = 5.0,
        tls: EtcdTLS | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoints")
        check_schemes(endpoints, tls)
        self.tls = tls
        self.endpoints = [parse_endpoint(url) for url in endpoints]
        self.root = f"/headwater/{cluster}/"
        self.timeout = timeout
        self._clients: list[aetcd.Client | None] = [None] * len(self.endpoints)
        self._current = 0
        self._registrations: set[Registration] = set()
        self.last_ok = 0.0
        """``time.monotonic()`` of the last call a member with a quorum answered: how long
        this client has been out of touch (a partition, a lost quorum) when it stops moving."""

    async def __aenter__(self) -> MetaClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stops keep-alives (leases left to expire) and closes every channel."""
        for registration in list(self._registrations):
            await registration.stop(revoke=False)
        for i, client in enumerate(self._clients):
            self._clients[i] = None
            if client is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self.timeout):
                        await client.close()

    def key(self, name: str) -> bytes:
        return (self.root + name).encode()

    # -- the key space ------------------------------------------------------------------------

    async def put(self, name: str, value: bytes, *, lease: int = 0) -> int:
        """Sets ``name``; returns the store revision of the write."""
        reply = await self._call("put", lambda c: c.put(self.key(name), value, lease=lease))
        return int(reply.header.revision)

    async def get(self, name: str, *, timeout: float | None = None) -> MetaValue | None:
        reply = await self._call("get", lambda c: c.get(self.key(name)), timeout)
        return None if reply is None else _value(reply)

    async def delete(self, name: str) -> bool:
        """Removes ``name``; False when it did not exist."""
        reply = await self._call("delete", lambda c: c.delete(self.key(name)))
        return reply is not None

    async def range(self, prefix: str = "", *, timeout: float | None = None) -> MetaRange:
        """Every key starting with ``prefix`` (relative), and the revision they were read at."""
        reply = await self._call("range", lambda c: c.get_prefix(self.key(prefix)), timeout)
        cut = len(self.root)
        items = {kv.key.decode()[cut:]: _value(kv) for kv in reply}
        return MetaRange(items, int(reply.header.revision))

    async def create(
        self, name: str, value: bytes, *, lease: int = 0, timeout: float | None = None
    ) -> bool:
        """Sets ``name`` only if it does not exist (one transaction); True when this call won.

        The comparison is on the key's create revision (0 = absent), so of any number of
        concurrent creators exactly one succeeds.
        """
        key = self.key(name)

        async def txn(client: aetcd.Client) -> bool:
            ok, _ = await client.transaction(
                compare=[client.transactions.create(key) == 0],
                success=[client.transactions.put(key, value, lease=lease)],
                failure=[],
            )
            return bool(ok)

        return await self._call("create", txn, timeout)

    async def compare_and_swap(
        self,
        name: str,
        value: bytes,
        expected_mod_revision: int,
        *,
        timeout: float | None = None,
        also: Mapping[str, bytes] | None = None,
    ) -> tuple[bool, MetaValue | None]:
        """Sets ``name`` only if its mod revision is ``expected_mod_revision`` (0: absent), in
        one transaction; returns whether it did and the key as etcd holds it after the call.
        ``also``: more keys set in the same transaction when (and only when) it succeeds.

        Of any number of swaps naming one revision exactly one succeeds. The key is read back
        in the same transaction (a read after a write in one etcd transaction sees it), so the
        answer carries the new mod revision on success and the one that won on failure. A
        :class:`MetaUnavailable` here leaves the outcome unknown: the swap may have happened.
        """
        key = self.key(name)
        more = [(self.key(k), v) for k, v in (also or {}).items()]

        async def txn(client: aetcd.Client) -> tuple[bool, MetaValue | None]:
            read = client.transactions.get(key)
            puts = [client.transactions.put(k, v) for k, v in more]
            ok, responses = await client.transaction(
                compare=[client.transactions.mod(key) == expected_mod_revision],
                success=[client.transactions.put(key, value), *puts, read],
                failure=[read],
            )
            found = responses[-1]  # the read: a list of (value, kv) pairs
            return bool(ok), (_value(found[0][1]) if found else None)

        return await self._call("compare-and-swap", txn, timeout)

    async def status(self, *, timeout: float | None = None) -> MetaStatus:
        """Which member leads, and the members, as the member answering sees them."""

        async def read(client: aetcd.Client) -> MetaStatus:
            status = await client.status()
            found = tuple(
                [
                    MetaMember(int(m.id), str(m.name), tuple(m.client_urls))
                    async for m in client.members()
                ]
            )
            leader = status.leader.name if status.leader is not None else None
            return MetaStatus(leader or None, found, int(status.raft_term))

        return await self._call("status", read, timeout)

    # -- leases -------------------------------------------------------------------------------

    async def grant_lease(self, ttl: int) -> int:
        lease = await self._call("lease", lambda c: c.lease(ttl))
        return int(lease.id)

    async def refresh_lease(self, lease_id: int) -> int:
        """Renews ``lease_id``; returns its new TTL, 0 when it expired already."""
        reply = await self._call("keep-alive", lambda c: c.refresh_lease(lease_id))
        return int(reply.TTL) if reply is not None else 0

    async def revoke_lease(self, lease_id: int) -> None:
        await self._call("revoke", lambda c: c.revoke_lease(lease_id))

    async def register_server(self, name: str, info: bytes, ttl: int) -> Registration:
        """Puts ``servers/<name>`` under a lease of ``ttl`` seconds, kept alive until stopped.

        The key disappears ``ttl`` seconds after the keep-alive stops (the server died, or lost
        every etcd member): that is how the others learn a server is gone.
        """
        registration = Registration(self, f"servers/{name}", info, ttl)
        await registration.start()
        self._registrations.add(registration)
        return registration

    # -- watch --------------------------------------------------------------------------------

    async def watch(self, prefix: str = "", start_revision: int | None = None) -> MetaWatch:
        """Changes to keys starting with ``prefix``, from ``start_revision`` (else from now).

        "Now" is fixed when this returns, before the first event is awaited: a change made
        after this call is delivered. Iterate the result and ``aclose()`` it (or use
        ``contextlib.aclosing``). When the member serving the watch goes away the watch
        resumes on another from the revision after the last event, so no change is missed or
        repeated; :class:`MetaUnavailable` when no member took it back within ``timeout``.
        """
        if start_revision is None:
            start_revision = (await self.range(prefix)).revision + 1
        return self._watch(self.key(prefix), start_revision)

    async def _watch(self, key: bytes, next_revision: int) -> MetaWatch:
        cut = len(self.root)
        failing_since: float | None = None
        pause = RETRY_PAUSE_S
        loop = asyncio.get_running_loop()
        while True:
            index = self._current
            # A channel of its own per watch: aetcd's watcher multiplexes a client's watches
            # on one stream and binds a late "created" answer to whichever watch asked next,
            # so after a timeout one watch could get another's events (seen after a
            # partition healed: a ``servers/`` key on the ``streams/`` watch).
            client = await self._new_client(index)
            watch = None
            try:
                cancels = _cancels()
                async with asyncio.timeout(self.timeout):
                    watch = await client.watch_prefix(key, start_revision=next_revision)
                if _cancels() > cancels:
                    # aetcd waits for the watch's creation with Python 3.11's wait_for, which
                    # loses a cancellation that comes as the creation completes: the task is
                    # still marked cancelled, so end as it asked (else the watch lived on and
                    # the close of whoever watched waited on it).
                    raise asyncio.CancelledError
                failing_since, pause = None, RETRY_PAUSE_S
                async for event in watch:
                    kv = event.kv
                    if not kv.key.startswith(key):
                        log.error("etcd watch on %r got a key outside it: %r", key, kv.key)
                        continue
                    next_revision = kv.mod_revision + 1
                    kind: Literal["put", "delete"] = "put" if event.kind == "PUT" else "delete"
                    yield MetaEvent(kind, kv.key.decode()[cut:], kv.value, kv.mod_revision)
                return  # cancelled: the client was closed
            except aetcd.RevisionCompactedError as exc:
                raise WatchCompacted(str(exc)) from exc
            except (aetcd.ClientError, TimeoutError) as exc:
                now = loop.time()
                failing_since = failing_since if failing_since is not None else now
                if now - failing_since >= self.timeout:
                    raise MetaUnavailable(f"etcd watch: {self._describe(exc)}") from exc
                log.debug("etcd watch lost on %s: %s", self.endpoints[index], exc)
                self._advance(index)
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_RETRY_PAUSE_S)
            finally:
                if watch is not None:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(1.0):
                            await watch.cancel()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1.0):
                        await client.close()

    # -- plumbing -----------------------------------------------------------------------------

    async def _client(self, index: int) -> aetcd.Client:
        """The shared client of member ``index`` (made on first use)."""
        client = self._clients[index]
        if client is None:
            client = self._clients[index] = await self._new_client(index)
        return client

    async def _new_client(self, index: int) -> aetcd.Client:
        host, port = self.endpoints[index]
        client = make_client(host, port, self.tls, timeout=self.timeout, options=CHANNEL_OPTIONS)
        await client.connect()  # opens a channel object only: no network round trip
        # aetcd sends ``metadata`` with every call and hands it to its watcher at connect:
        # both get etcd's require-leader flag (see REQUIRE_LEADER).
        client.metadata = REQUIRE_LEADER
        watcher = getattr(client, "_watcher", None)
        if watcher is not None and hasattr(watcher, "_metadata"):
            watcher._metadata = REQUIRE_LEADER
        return client

    def _advance(self, failed: int) -> None:
        if self._current == failed:
            self._current = (failed + 1) % len(self.endpoints)

    async def _call(self, what: str, op: Any, timeout: float | None = None) -> Any:
        """``op(client)`` on the current member, moving on while members refuse, within
        ``timeout`` (the client's own by default)."""
        loop = asyncio.get_running_loop()
        limit = self.timeout if timeout is None else timeout
        deadline = loop.time() + limit
        pause = RETRY_PAUSE_S
        refused = 0
        while True:
            remaining = deadline - loop.time()
            index = self._current
            try:
                if remaining <= 0:
                    raise TimeoutError
                client = await self._client(index)
                async with asyncio.timeout(remaining):
                    result = await op(client)
                self.last_ok = time.monotonic()
                return result
            except aetcd.ConnectionFailedError as exc:
                # Unreachable, no leader, leader changed: refused before anything was proposed.
                self._advance(index)
                refused += 1
                if deadline - loop.time() <= pause:
                    raise MetaUnavailable(f"etcd {what}: {self._describe(exc)}") from exc
                if refused % len(self.endpoints) == 0:
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, MAX_RETRY_PAUSE_S)
            except (aetcd.ConnectionTimeoutError, TimeoutError) as exc:
                raise MetaUnavailable(
                    f"etcd {what}: no answer within {limit:g} s ({self._describe(exc)})"
                ) from exc
            except aetcd.ClientError as exc:
                raise MetaError(f"etcd {what}: {exc}") from exc

    def _describe(self, exc: BaseException) -> str:
        members = ", ".join(f"{host}:{port}" for host, port in self.endpoints)
        detail = str(exc) or type(exc).__name__
        return f"{detail} (members {members})"


class Registration:
    """A key held under a lease that a background task keeps alive."""

    def __init__(self, meta: MetaClient, name: str, value: bytes, ttl: int) -> None:
        self.meta = meta
        self.name = name
        self.value = value
        self.ttl = ttl
        self.lease_id = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._grant()
        self._task = asyncio.get_running_loop().create_task(
            self._keep_alive(), name=f"etcd-lease:{self.name}"
        )

    async def _grant(self) -> None:
        lease_id = await self.meta.grant_lease(self.ttl)
        await self.meta.put(self.name, self.value, lease=lease_id)
        self.lease_id = lease_id

    async def _keep_alive(self) -> None:
        # A third of the TTL: two renewals can fail (a leader election) before the key goes.
        interval = max(self.ttl / 3, 0.2)
        while True:
            await asyncio.sleep(interval)
            try:
                if await self.meta.refresh_lease(self.lease_id) <= 0:
                    # Expired while etcd was out of reach: the key is gone, so write it again.
                    log.warning("etcd lease of %s expired; registering again", self.name)
                    await self._grant()
            except MetaError as exc:
                log.warning("etcd keep-alive of %s failed: %s", self.name, exc)

    async def stop(self, *, revoke: bool = True) -> None:
        """Stops the keep-alive; ``revoke`` deletes the key now, else it goes after the TTL."""
        self.meta._registrations.discard(self)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if revoke and self.lease_id:
            with contextlib.suppress(MetaError):
                await self.meta.revoke_lease(self.lease_id)


def _value(kv: Any) -> MetaValue:
    return MetaValue(kv.value, kv.create_revision, kv.mod_revision, kv.lease)


def _cancels() -> int:
    """How many cancellations of the running task are pending (``Task.cancelling``)."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


__all__ = [
    "MetaClient",
    "MetaError",
    "MetaEvent",
    "MetaMember",
    "MetaRange",
    "MetaStatus",
    "MetaUnavailable",
    "MetaValue",
    "MetaWatch",
    "Registration",
    "WatchCompacted",
    "check_schemes",
    "parse_endpoint",
]
