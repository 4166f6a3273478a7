"""Replica catch-up of an R3 file stream (issue 18): prints the figures docs/BENCHMARKS.md
("Replicated streams: catch-up") quotes.

Run: ``python bench/catchup_bench.py [--messages 200000] [--kill] [--limit 60] [--only KIND]
[--profile DIR]``. No asserts; the figures are for reading (issue 18's target: a replica
catches up at 100,000 msgs/s of 16 B or more).

Per server kind (Headwater, then nats-server, in one session), a 3-server cluster of that kind
with clustered JetStream (``js_cluster_bench.js_cluster``: 127.0.0.1, ephemeral ports, temp
dirs, ``sync_interval: "2m"`` for both) and an R3 file stream GOBENCH created through s1.
Once both followers are current, one server that does not lead the stream (the last such)
is stopped with SIGTERM (``--kill``: SIGKILL, with Headwater's etcd member). One message is
published and acknowledged (see ``one_kind`` for why), then gobench ``js_pub_async
-existing-stream -window 4000`` publishes N 16-byte messages through the leader's server (it
purges the stream first), and the stopped server is started again with its ports and store.
From its launch, four observations run at once, each polled on its own:

- **INFO**: a TCP connect to its client port gets the ``INFO`` line (the restart alone, so
  that start-up is not counted as catch-up);
- **current**: the leader's STREAM.INFO ``cluster.replicas[]`` entry for it says
  ``current: true`` with no (or zero) ``lag``: the same fields on both servers;
- **holds all**: its own ``/jsz`` counts N messages (its store, not just its log, has them);
- **/healthz**: its health probe answers 200.

The rate is N / seconds to "current" (and to "holds all"). An observation not made within
``--limit`` seconds prints ``>limit`` with what was seen last. Also printed: how many
snapshots the restarted server installed (and, on Headwater, how many the leader sent), and
nats-server's own timing of its catch-up from its log. ``--profile DIR`` runs py-spy on
Headwater's restarted server and on the stream leader's from the launch until the end of the
observations (raw folded stacks in ``DIR/headwater``); a profiled run is slower, its figures
are not the measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loads_gobench
import nats
import nats.errors
from js_cluster_bench import STREAM, SUBJECT, js_api, js_cluster
from js_cluster_bench import _acked as acked
from js_cluster_bench import _publish as publish_async
from servers import KINDS, LABELS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cluster.helpers import crash

from headwater.testing import Cluster, ServerProcess

TARGET = 100_000  # msgs/s, issue 18
LIMIT_S = 60.0  # default bound on each observation after the launch (not a target)
INFO_POLL_S = 0.01
HTTP_POLL_S = 0.02
STREAM_INFO_POLL_S = 0.05
OBSERVATIONS = ("info", "current", "holds", "healthz")
RATED = ("current", "holds")
RESTART_ATTEMPTS = 3

# Snapshots installed by the restarted server (Headwater's streamgroup logs each; nats-server
# logs its stream catch-up at notice level), and those Headwater's leader sent it.
INSTALLED = {
    "headwater": re.compile(rb"snapshot at \d+ \(epoch \d+\) installed"),
    "nats": re.compile(rb"[Cc]atchup for stream '[^']*' complete \(took ([^)]*)\)"),
}
SENT = re.compile(rb"snapshot at \d+ to \S+: complete")


@dataclass
class Run:
    """One kind's catch-up: seconds from the launch to each observation made in time."""

    kind: str
    messages: int
    limit: float
    how_stopped: str = "SIGTERM"
    publish_rate: float = 0.0
    lag_before: Any = None  # the leader's view of the stopped replica before its restart
    seconds: dict[str, float] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)  # what each check saw last
    installed: int = 0  # see INSTALLED
    sent: int = 0  # see SENT (Headwater)
    restart_retries: int = 0  # restarts repeated because its cluster port was taken
    transfer: str = ""  # nats-server's "took" of each catch-up, from its log

    def rate(self, what: str) -> float | None:
        took = self.seconds.get(what)
        return self.messages / took if took else None

    def shown(self, what: str) -> str:
        took = self.seconds.get(what)
        return f"{took:.2f}" if took is not None else f">{self.limit:.0f}"


def replica_entry(info: dict[str, Any], name: str) -> dict[str, Any] | None:
    for entry in (info.get("cluster") or {}).get("replicas") or []:
        if entry.get("name") == name:
            return dict(entry)
    return None


def is_current(entry: dict[str, Any] | None) -> bool:
    return entry is not None and entry.get("current") is True and not entry.get("lag")


def create_r3(cluster: Cluster) -> int:
    """Create GOBENCH (R3, file) through s1; the index of its leader's server, once both
    followers are current (bounded)."""
    config = {"name": STREAM, "subjects": [SUBJECT], "storage": "file", "num_replicas": 3}
    created = js_api(cluster.urls[0], f"$JS.API.STREAM.CREATE.{STREAM}", config, timeout=10)
    if "error" in created:
        raise RuntimeError(f"creating {STREAM}: {created['error']}")
    deadline = time.monotonic() + 30
    while True:
        info = js_api(cluster.urls[0], f"$JS.API.STREAM.INFO.{STREAM}")
        leader = (info.get("cluster") or {}).get("leader")
        followers = [n for n in cluster.names if n != leader]
        if leader and all(is_current(replica_entry(info, n)) for n in followers):
            return cluster.names.index(leader)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{STREAM}'s replicas not current within 30 s: {info}")
        time.sleep(0.1)


def stream_answers(url: str, timeout: float = 30.0) -> dict[str, Any]:
    """STREAM.INFO through ``url`` until it answers without an error (bounded): right after
    a server stops, Headwater's etcd may re-elect, and reads wait for it (10008 meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = js_api(url, f"$JS.API.STREAM.INFO.{STREAM}", timeout=2)
            if "error" not in info:
                return dict(info)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            info = {"error": repr(exc)}
        if time.monotonic() > deadline:
            raise TimeoutError(f"STREAM.INFO {STREAM} not answered within {timeout} s: {info}")
        time.sleep(0.1)


def pin_monitor_port(server: ServerProcess) -> None:
    """Restart with the monitoring port it had (``-m -1`` would pick a new one), so /healthz
    and /jsz can be polled from the launch on."""
    args = server.extra_args
    at = args.index("-m") + 1
    args[at] = str(server.http_port)


def http_json(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


async def answers_info(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        line = await asyncio.wait_for(reader.readline(), 1)
        return line.startswith(b"INFO ")
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()


async def until(check: Callable[[], Awaitable[bool]], interval: float, began: float) -> float:
    """Seconds from ``began`` until ``check()`` holds (polled every ``interval``)."""
    while True:
        try:
            if await check():
                return time.monotonic() - began
        except (OSError, TimeoutError, nats.errors.Error):
            pass  # a port not listening yet, a request not answered in time
        await asyncio.sleep(interval)


@contextlib.contextmanager
def profiled(pids: dict[str, int], out: Path | None) -> Iterator[None]:
    """py-spy on each pid (raw folded stacks, ``out/<role>.txt``) while the block runs."""
    spies = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for role, pid in pids.items():
            cmd = ["py-spy", "record", "-r", "200", "-f", "raw", "-o", str(out / f"{role}.txt")]
            spies.append(subprocess.Popen([*cmd, "-p", str(pid)], stdout=subprocess.DEVNULL))
    try:
        yield
    finally:
        for spy in spies:  # SIGINT: py-spy writes what it sampled and exits
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            spy.wait(30)


async def observe(
    cluster: Cluster, leader: int, victim: int, run: Run, limit: float, profile: Path | None
) -> None:
    """Restart server ``victim`` and time the four observations (module docstring) into
    ``run``; one not made within ``limit`` seconds is left out (and ``run.last`` says what
    was seen instead)."""
    srv = cluster.servers[victim]
    name = cluster.names[victim]
    nc = await nats.connect(cluster.urls[leader], allow_reconnect=False, connect_timeout=2)
    last = run.last

    async def current() -> bool:
        msg = await nc.request(f"$JS.API.STREAM.INFO.{STREAM}", b"", timeout=2)
        info = json.loads(msg.data)
        entry = replica_entry(info, name)
        last["current"] = entry or info.get("error")
        return is_current(entry)

    async def holds() -> bool:
        status, jsz = await asyncio.to_thread(http_json, srv.http_port, "/jsz")
        last["holds"] = jsz.get("messages") if status == 200 else status
        return status == 200 and int(jsz.get("messages", 0)) == run.messages

    async def healthy() -> bool:
        status, body = await asyncio.to_thread(http_json, srv.http_port, "/healthz")
        last["healthz"] = body
        return status == 200

    async def info() -> bool:
        return await answers_info(srv.port)

    def restart() -> None:
        # Its cluster port (fixed, unlike the others) may have been taken meanwhile on a busy
        # machine: tried again after a pause, a few times, and counted (the times include it).
        for attempt in range(RESTART_ATTEMPTS):
            try:
                cluster.restart(victim)
                return
            except RuntimeError as exc:
                if "in use" not in str(exc) or attempt == RESTART_ATTEMPTS - 1:
                    raise
                run.restart_retries += 1
                time.sleep(0.5)

    began = time.monotonic()
    restarted = asyncio.ensure_future(asyncio.to_thread(restart))
    try:
        pids = {}
        if profile is not None and srv.kind == "headwater":
            deadline = time.monotonic() + 10
            # The new process, not the old one (bounded: the launch is immediate).
            while (srv.proc is None or srv.proc.poll() is not None) and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            leader_proc = cluster.servers[leader].proc
            assert srv.proc is not None and leader_proc is not None
            pids = {"catching_up": srv.proc.pid, "leader": leader_proc.pid}
        with profiled(pids, profile):
            checks = {"info": info, "current": current, "holds": holds, "healthz": healthy}
            polls = {"info": INFO_POLL_S, "current": STREAM_INFO_POLL_S}
            tasks = {
                what: asyncio.ensure_future(until(check, polls.get(what, HTTP_POLL_S), began))
                for what, check in checks.items()
            }
            await asyncio.wait(tasks.values(), timeout=limit)
        for what, task in tasks.items():
            if task.done():
                run.seconds[what] = task.result()
            else:
                task.cancel()
        await restarted
    finally:
        await nc.close()


def one_kind(kind: str, messages: int, kill: bool, limit: float, profile: Path | None) -> Run:
    binary = loads_gobench.ensure_gobench()
    run = Run(kind, messages, limit, how_stopped="SIGKILL" if kill else "SIGTERM")
    with js_cluster(kind, f"{kind}catchup") as cluster:
        leader = create_r3(cluster)
        # The last server that does not lead: on Headwater s1 usually leads etcd as well.
        victim = max(i for i in range(len(cluster.names)) if i != leader)
        if kill:
            crash(cluster, victim)
        else:
            cluster.stop(victim)
        pin_monitor_port(cluster.servers[victim])
        # A write first: Headwater's leader takes a stopped replica out of in_sync only once
        # it lacks entries; until then reads (STREAM.INFO, which gobench asks first) wait for
        # its echo and fail (10008). nats-server answers either way.
        asyncio.run(acked(cluster.urls[leader]))
        stream_answers(cluster.urls[leader])
        published, _ = publish_async(binary, cluster.urls[leader], messages, [0])
        if not published.ok:
            raise RuntimeError(f"{kind}: gobench lost messages: {published}")
        run.publish_rate = published.msgs_per_s
        run.lag_before = replica_entry(stream_answers(cluster.urls[leader]), cluster.names[victim])
        where = profile / kind if profile is not None else None
        asyncio.run(observe(cluster, leader, victim, run, limit, where))
        restarted = cluster.servers[victim].log_path.read_bytes()
        found = INSTALLED[kind].findall(restarted)
        run.installed = len(found)
        if kind == "nats":
            run.transfer = ", ".join(t.decode() for t in found)  # its own timing of the copy
        if kind == "headwater":
            run.sent = len(SENT.findall(cluster.servers[leader].log_path.read_bytes()))
    return run


def _rate(rate: float | None) -> str:
    return f"{rate:,.0f}" if rate is not None else "-"


def report(runs: dict[str, Run]) -> None:
    some = next(iter(runs.values()))
    print(
        f"\nR3 file stream, {some.messages:,} msgs of 16 B published while one follower was "
        f"down ({some.how_stopped}); seconds from its launch:"
    )
    head = f"{'':<12}{'INFO':>7}{'current':>9}{'holds all':>10}{'/healthz':>9}"
    print(head + f"{'msgs/s (current)':>18}{'msgs/s (holds all)':>20}")
    for kind, run in runs.items():
        widths = zip(OBSERVATIONS, (7, 9, 10, 9), strict=True)
        times = "".join(f"{run.shown(what):>{width}}" for what, width in widths)
        print(
            f"{LABELS[kind]:<12}{times}{_rate(run.rate('current')):>18}"
            f"{_rate(run.rate('holds')):>20}"
        )
    for kind, run in runs.items():
        sent = f", the leader sent {run.sent}" if kind == "headwater" else ""
        if run.transfer:
            sent += f" (its log: the copy took {run.transfer})"
        print(
            f"{LABELS[kind]}: published at {run.publish_rate:,.0f} msgs/s; before the restart "
            f"the leader reported {run.lag_before}; snapshots installed {run.installed}{sent}"
        )
        if run.restart_retries:
            print(f"  restarted {run.restart_retries} more times: its cluster port was in use")
        if set(OBSERVATIONS) - set(run.seconds):
            print(f"  not within {run.limit:.0f} s; last seen: {run.last}")
    if set(runs) == set(KINDS):
        hw, ns = runs["headwater"], runs["nats"]
        for what in RATED:
            hw_rate, ns_rate = hw.rate(what), ns.rate(what)
            ratio = f"{hw_rate / ns_rate:.3f}x" if hw_rate and ns_rate else "-"
            met = "met" if hw_rate and hw_rate >= TARGET else "not met"
            print(f"ratio ({what}) headwater/nats-server: {ratio}; target >= {TARGET:,}: {met}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000, help="published while down")
    parser.add_argument("--kill", action="store_true", help="SIGKILL the follower, not SIGTERM")
    parser.add_argument("--only", choices=KINDS, help="one server kind")
    parser.add_argument("--limit", type=float, default=LIMIT_S, help="seconds to wait at most")
    parser.add_argument("--profile", type=Path, help="py-spy Headwater's servers into this dir")
    args = parser.parse_args(argv)
    runs = {}
    for kind in [args.only] if args.only else KINDS:
        runs[kind] = one_kind(kind, args.messages, args.kill, args.limit, args.profile)
        print(f"{LABELS[kind]}: {runs[kind].seconds}", flush=True)
    report(runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
