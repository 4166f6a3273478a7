"""Clusters whose servers each run in a network namespace of their own, for fault tests.

:class:`NetnsCluster` is a :class:`headwater.testing.Cluster` whose server ``i`` runs in its
own namespace (``hw<pid>-<run>-s<i+1>``), listening on ``10.<x>.0.<i+1>`` (on the
namespace's ``lo``) with fixed ports: 4222 for clients, 6222 for routes (6223 and 6224 for a
Headwater server's etcd member), 8222 for monitoring. The namespaces are separate network
stacks, so the ports never clash. The links:

- one veth pair per pair of servers (``p<j+1>`` in server i's namespace), with a /32 route
  to the peer's address over it, so any pair can be cut and healed on its own;
- one veth per server to the test's own namespace (``c0`` inside,
  ``hw<pid>-<run>c<i+1>`` outside, holding ``10.<x>.0.254``), so the test's clients reach
  every server at its address, and a server can be cut from them too.

A cut sets both ends of a link down. The kernel then drops the routes over it: a connect
fails at once (network unreachable), and an established TCP connection (a route, an etcd
peer stream) sees nothing until its keepalive gives up or the link comes back, when TCP's
retransmissions carry on. Healing sets the ends up and puts the routes back. ``tc netem``
is not available here (no delay or loss), nor a firewall: faults are links, down or up.

Everything it makes carries the prefix ``hw<pid>-``: :meth:`NetnsCluster.cleanup` removes
its own (servers first, then every process left in its namespaces, then the namespaces,
which takes their veths with them, then its routes), and :func:`sweep_leftovers` removes
those of processes that are gone (a test run killed before its cleanup). Needs root and
``ip`` (iproute2); :func:`netns_unavailable` says why not, for the suite to fail loudly.

``headwater.testing`` does not import this module, so it stays importable without root.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

from headwater.testing import Cluster, ServerProcess

CLIENT_PORT = 4222
CLUSTER_PORT = 6222
HTTP_PORT = 8222
ROOT_HOST = 254
"""The last octet of the test process's own address in the cluster's subnet."""
ROUTE_PROTO = 201
"""``proto`` of the routes made in the test's namespace (a number no routing daemon in
iproute2's list uses), their ``metric`` the owner's pid, so a sweep finds them."""

_NS = re.compile(r"^hw(\d+)-(\d+)-s\d+$")
_ROOT_LINK = re.compile(r"^hw(\d+)-\d+c\d+$")
_runs = itertools.count(1)


class NetnsError(RuntimeError):
    """An ``ip`` command failed."""


def ip(*args: str, ns: str | None = None, check: bool = True) -> str:
    """Run ``ip [-n ns] args...``; its output, or :class:`NetnsError` with its stderr."""
    cmd = ["ip", *(("-n", ns) if ns else ()), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


def netns_unavailable() -> str:
    """Why network namespaces cannot be used here ("" when they can)."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"hw{os.getpid()}-0-s0"
    try:
        ip("netns", "add", probe)
    except (NetnsError, OSError, subprocess.TimeoutExpired) as exc:
        return f"ip netns add failed: {exc}"
    ip("netns", "del", probe, check=False)
    return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_all_in(ns: str) -> None:
    """SIGKILL every process in namespace ``ns`` (a server's etcd member included)."""
    for pid in ip("netns", "pids", ns, check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _namespaces() -> list[str]:
    # "name (id: 3)" per line
    return [line.split()[0] for line in ip("netns", "list", check=False).splitlines() if line]


def sweep_leftovers() -> list[str]:
    """Remove the namespaces, links and routes left by test processes that are gone; the
    names removed. A running process's (another test run beside this one) are kept."""
    removed = []
    for ns in _namespaces():
        m = _NS.match(ns)
        if m and not _alive(int(m.group(1))):
            _kill_all_in(ns)
            ip("netns", "del", ns, check=False)
            removed.append(ns)
    for line in ip("-o", "link", "show", check=False).splitlines():
        name = line.split(":")[1].strip().split("@")[0] if line.count(":") >= 2 else ""
        m = _ROOT_LINK.match(name)
        if m and not _alive(int(m.group(1))):
            ip("link", "del", name, check=False)
            removed.append(name)
    for line in ip("route", "show", "proto", str(ROUTE_PROTO), check=False).splitlines():
        m = re.search(r"metric (\d+)", line)
        if m and not _alive(int(m.group(1))):
            ip("route", "del", *line.split(), check=False)
            removed.append(line.strip())
    return removed


def _free_subnet(tries: int = 50) -> int:
    """A second octet ``x`` whose 10.x.0.0/24 no address or route here mentions yet."""
    used = ip("-4", "addr", check=False) + ip("-4", "route", check=False)
    for _ in range(tries):
        x = random.randrange(16, 250)
        if f"10.{x}.0." not in used:
            return x
    raise NetnsError("no free 10.x.0.0/24 found")


class NetnsCluster(Cluster):
    """N servers (``kinds`` as for :class:`Cluster`), each in its own network namespace.

    Every server lists every server in ``--routes``, with or without JetStream. ``config``
    is text for a config file every server reads (``cluster { ping_interval: ... }``, say);
    the flags still set the listen addresses. ``with NetnsCluster(...) as c:`` builds the
    network, starts the servers, waits until the mesh is complete, and removes it all after.
    """

    def __init__(
        self,
        kinds: str | Sequence[str] = "headwater",
        n: int = 3,
        *,
        name: str = "hwfault",
        jetstream: bool = False,
        env: dict[str, str] | None = None,
        config: str = "",
    ) -> None:
        super().__init__(kinds, n, name=name, jetstream=jetstream, env=env, config=config)
        if len(self.kinds) > 9:
            raise ValueError("at most 9 servers (interface names have 15 characters)")
        self.run = f"hw{os.getpid()}-{next(_runs)}"
        self.subnet = 0
        self.namespaces: list[str] = []
        self.cut_pairs: set[frozenset[int]] = set()
        self.cut_from_clients: set[int] = set()
        self._root_links: list[str] = []
        self._unreachable = ""

    # --- addresses -------------------------------------------------------------------------

    def address(self, i: int) -> str:
        return f"10.{self.subnet}.0.{i + 1}"

    @property
    def root_address(self) -> str:
        return f"10.{self.subnet}.0.{ROOT_HOST}"

    def route_url(self, i: int) -> str:
        return f"nats://{self.address(i)}:{CLUSTER_PORT}"

    def _server_args(self, i: int) -> list[str]:
        args = ["-a", self.address(i), "-p", str(CLIENT_PORT), "-m", str(HTTP_PORT)]
        args += ["--server_name", self.names[i], "--cluster_name", self.name]
        args += ["--cluster", self.route_url(i)]
        args += ["--routes", ",".join(self.route_url(j) for j in range(len(self.kinds)))]
        if self.config:
            args += ["-c", str(self._config_file(i))]
        return args

    def _config_file(self, i: int) -> Path:
        path = super()._config_file(i)
        text = path.read_text().replace('host: "127.0.0.1"', f'host: "{self.address(i)}"')
        path.write_text(text)
        return path

    # --- the network -----------------------------------------------------------------------

    def _pair_link(self, j: int) -> str:
        """The name, in any server's namespace, of its link to server ``j``."""
        return f"p{j + 1}"

    def _root_link(self, i: int) -> str:
        return f"{self.run}c{i + 1}"

    def build_network(self) -> None:
        """Make the namespaces, the links and the routes (see the module docstring)."""
        n = len(self.kinds)
        self.subnet = _free_subnet()
        self.namespaces = [f"{self.run}-s{i + 1}" for i in range(n)]
        if len(self._root_link(n - 1)) > 15:
            raise NetnsError(f"{self._root_link(n - 1)!r} is too long for an interface name")
        for i, ns in enumerate(self.namespaces):
            ip("netns", "add", ns)
            ip("addr", "add", f"{self.address(i)}/32", "dev", "lo", ns=ns)
            ip("link", "set", "lo", "up", ns=ns)
        for i, j in itertools.combinations(range(n), 2):
            a, b = self.namespaces[i], self.namespaces[j]
            ip("link", "add", self._pair_link(j), "netns", a, "type", "veth",
               "peer", "name", self._pair_link(i), "netns", b)  # fmt: skip
            self._link_up(i, j)
        # Anything to the subnet that no live link carries is refused here, rather than sent
        # out of the default route.
        self._unreachable = f"10.{self.subnet}.0.0/24"
        ip("route", "add", "unreachable", self._unreachable, "proto", str(ROUTE_PROTO),
           "metric", str(os.getpid()))  # fmt: skip
        for i, ns in enumerate(self.namespaces):
            outside = self._root_link(i)
            ip("link", "add", outside, "type", "veth", "peer", "name", "c0", "netns", ns)
            self._root_links.append(outside)
            ip("addr", "add", f"{self.root_address}/32", "dev", outside)
            self._clients_up(i)

    def _link_up(self, i: int, j: int) -> None:
        for me, peer in ((i, j), (j, i)):
            ns, link = self.namespaces[me], self._pair_link(peer)
            ip("link", "set", link, "up", ns=ns)
            # A link going down takes its routes with it: put them back every time.
            ip("route", "replace", f"{self.address(peer)}/32", "dev", link,
               "src", self.address(me), ns=ns)  # fmt: skip

    def _link_down(self, i: int, j: int) -> None:
        ip("link", "set", self._pair_link(j), "down", ns=self.namespaces[i])
        ip("link", "set", self._pair_link(i), "down", ns=self.namespaces[j])

    def _clients_up(self, i: int) -> None:
        ns, outside = self.namespaces[i], self._root_link(i)
        ip("link", "set", "c0", "up", ns=ns)
        ip("link", "set", outside, "up")
        ip("route", "replace", f"{self.root_address}/32", "dev", "c0", "src", self.address(i),
           ns=ns)  # fmt: skip
        ip("route", "replace", f"{self.address(i)}/32", "dev", outside, "src", self.root_address)

    # --- faults ----------------------------------------------------------------------------

    def cut(self, i: int, j: int) -> None:
        """Cut the link between servers ``i`` and ``j`` (both ways)."""
        if i == j:
            raise ValueError("a server has no link to itself")
        self._link_down(i, j)
        self.cut_pairs.add(frozenset((i, j)))

    def mend(self, i: int, j: int) -> None:
        """Bring the link between ``i`` and ``j`` back."""
        self._link_up(i, j)
        self.cut_pairs.discard(frozenset((i, j)))

    def isolate(self, i: int) -> None:
        """Cut server ``i`` from every other server; its clients still reach it."""
        for j in range(len(self.kinds)):
            if j != i and frozenset((i, j)) not in self.cut_pairs:
                self.cut(i, j)

    def partition(self, groups: Iterable[Iterable[int]]) -> None:
        """Cut every link between servers of different groups (a server in no group is
        cut from all); links inside a group stay as they are."""
        group_of = {i: g for g, members in enumerate(groups) for i in members}
        for i, j in itertools.combinations(range(len(self.kinds)), 2):
            gi, gj = group_of.get(i, -1 - i), group_of.get(j, -1 - j)
            if gi != gj and frozenset((i, j)) not in self.cut_pairs:
                self.cut(i, j)

    def cut_clients(self, i: int) -> None:
        """Cut server ``i`` from the test's clients (its links to servers stay)."""
        ip("link", "set", "c0", "down", ns=self.namespaces[i])
        ip("link", "set", self._root_link(i), "down")
        self.cut_from_clients.add(i)

    def heal(self) -> None:
        """Bring every cut link back."""
        for pair in list(self.cut_pairs):
            self.mend(*sorted(pair))
        for i in list(self.cut_from_clients):
            self._clients_up(i)
            self.cut_from_clients.discard(i)

    def kill(self, i: int) -> None:
        """SIGKILL server ``i`` and every process in its namespace (Headwater's etcd
        member), as when its machine dies."""
        srv = self.servers[i]
        srv.kill()
        _kill_all_in(self.namespaces[i])
        deadline = time.monotonic() + 5
        while ip("netns", "pids", self.namespaces[i], check=False).split():
            if time.monotonic() > deadline:
                raise NetnsError(f"processes outlive SIGKILL in {self.namespaces[i]}")
            time.sleep(0.05)

    # --- reachability and monitoring -------------------------------------------------------

    def reachable(self, j: int, port: int = CLIENT_PORT, timeout: float = 0.5) -> bool:
        """Whether a TCP connect from the test's namespace to server ``j`` succeeds."""
        try:
            with socket.create_connection((self.address(j), port), timeout=timeout):
                return True
        except OSError:
            return False

    def reachable_from(self, i: int, j: int, port: int = CLIENT_PORT) -> bool:
        """Whether a TCP connect from server ``i``'s namespace to server ``j`` succeeds."""
        code = (
            "import socket,sys\n"
            "try:\n"
            f"    socket.create_connection(({self.address(j)!r}, {port}), timeout=0.5).close()\n"
            "except OSError:\n"
            "    sys.exit(1)\n"
        )
        cmd = ["ip", "netns", "exec", self.namespaces[i], "python3", "-c", code]
        return subprocess.run(cmd, capture_output=True, timeout=10, check=False).returncode == 0

    def healthz(self, i: int, query: str = "") -> tuple[int, str]:
        """Server ``i``'s ``/healthz``: its HTTP status and body."""
        url = f"http://{self.address(i)}:{HTTP_PORT}/healthz{query}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 20.0, attempts: int = 1) -> NetnsCluster:
        """Build the network, then start every server in its namespace (fixed ports: no
        retries on another port, nobody else binds in these namespaces)."""
        try:
            self.build_network()
            for i, kind in enumerate(self.kinds):
                srv = ServerProcess(
                    kind,
                    self._server_args(i),
                    jetstream=self._jetstream,
                    env=self._env,
                    prefix=["ip", "netns", "exec", self.namespaces[i]],
                    host=self.address(i),
                )
                self.servers.append(srv)
                if not self._start_one(srv, timeout):
                    raise NetnsError(f"{self.names[i]}: port in use in its own namespace")
        except BaseException:
            self.cleanup()
            raise
        return self

    def cleanup(self) -> None:
        """Stop the servers, then remove everything this cluster made; never raises for
        what is already gone, so a failed test's finalizer always gets to the end."""
        try:
            # Servers stop faster when they can say goodbye (Headwater's etcd member leaves).
            with contextlib.suppress(NetnsError, subprocess.TimeoutExpired):
                if self.namespaces:
                    self.heal()
            super().cleanup()
        finally:
            for ns in self.namespaces:
                _kill_all_in(ns)
                ip("netns", "del", ns, check=False)
            for link in self._root_links:  # gone with their peers' namespaces, normally
                ip("link", "del", link, check=False)
            if self._unreachable:
                ip("route", "del", "unreachable", self._unreachable, "proto", str(ROUTE_PROTO),
                   "metric", str(os.getpid()), check=False)  # fmt: skip
            self.namespaces, self._root_links, self._unreachable = [], [], ""

    def __enter__(self) -> NetnsCluster:
        super().__enter__()
        return self
