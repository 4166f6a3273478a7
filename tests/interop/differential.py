"""What the interop suites share: running a client's scenario program and reading the one JSON
object it prints, running a scenario against both servers (or both clusters) at once, and
comparing the two.

A cluster scenario may ask for the server its client is connected to to be killed: it prints
``KILL <url>`` on a line of its own and waits for ``killed`` on stdin, which
:func:`run_cluster_scenario` sends once that server (and, on Headwater, its etcd member) is
gone. The scenario's JSON is then the last line it prints.
"""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest
from cluster.helpers import crash

from headwater.testing import Cluster, ServerProcess

Observed = dict[str, Any]
Run = Callable[[str, str], Observed]
"""``run(url, scenario)``: what the client saw."""
ClusterRun = Callable[[Cluster, str], Observed]
"""``run(cluster, scenario)``: what the client saw of the cluster."""


def run_scenario(client: str, command: list[str], cwd: Path | None = None) -> Observed:
    """Run one scenario program; its observations, or a test failure naming where it stopped."""
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=90)
    return _observations(client, command, proc.returncode, proc.stdout, proc.stderr)


def _observations(
    client: str, command: list[str], returncode: int | None, stdout: str, stderr: str
) -> Observed:
    try:
        observed: Observed = json.loads(stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"{client} {command[-2:]} printed no JSON (exit {returncode}):\n"
            f"stdout: {stdout[-2000:]}\nstderr: {stderr[-2000:]}"
        )
    if returncode != 0 or "fatal" in observed:
        pytest.fail(
            f"{client} {command[-2:]} stopped at {observed.get('fatal')} "
            f"(exit {returncode}); observed so far: {json.dumps(observed)[:3000]}\n"
            f"stderr: {stderr[-2000:]}"
        )
    return observed


def server_index(cluster: Cluster, url: str) -> int:
    """The position in ``cluster`` of the server at ``url`` (with or without ``nats://``)."""
    hostport = url.strip().removeprefix("nats://")
    for i, known in enumerate(cluster.urls):
        if known.removeprefix("nats://") == hostport:
            return i
    raise AssertionError(f"{url!r} is none of the cluster's servers {cluster.urls}")


def run_cluster_scenario(
    client: str,
    command: list[str],
    cluster: Cluster,
    cwd: Path | None = None,
    timeout: float = 30.0,
) -> Observed:
    """Run one cluster scenario, killing the servers it asks for (``KILL <url>``); its
    observations, or a test failure naming where it stopped. Bounded by ``timeout`` seconds."""
    with (
        tempfile.TemporaryFile("w+") as err,
        subprocess.Popen(  # leaving the block closes its pipes
            command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
        ) as proc,
    ):
        assert proc.stdin is not None and proc.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        pump = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
        pump.start()
        printed: list[str] = []
        deadline = time.monotonic() + timeout
        try:
            while (line := lines.get(timeout=max(deadline - time.monotonic(), 0))) is not None:
                if line.startswith("KILL "):
                    crash(cluster, server_index(cluster, line[5:]))
                    proc.stdin.write("killed\n")
                    proc.stdin.flush()
                elif line.strip():
                    printed.append(line)
            returncode: int | None = proc.wait(5)
        except (queue.Empty, subprocess.TimeoutExpired):
            returncode = None  # still running: reported as the timeout below
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            pump.join(5)  # stdout ends with the process
        err.seek(0)
        stderr = err.read()
    if returncode is None:
        pytest.fail(
            f"{client} {command[-2:]} did not finish within {timeout}s; printed: "
            f"{''.join(printed)[-2000:]}\nstderr: {stderr[-2000:]}"
        )
    return _observations(client, command, returncode, printed[-1] if printed else "", stderr)


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)  # end of output


@contextmanager
def both_servers(
    run: Run, pair: tuple[ServerProcess, ServerProcess]
) -> Iterator[Callable[[str], tuple[Observed, Observed]]]:
    """``observed(scenario)``: (headwater, nats-server) observations, both runs concurrent.
    Scenarios use their own stream and bucket names, so one pair of servers serves them all."""
    hw, nats = pair
    with ThreadPoolExecutor(max_workers=2) as pool:

        def observed(scenario: str) -> tuple[Observed, Observed]:
            ours = pool.submit(run, hw.url, scenario)
            theirs = pool.submit(run, nats.url, scenario)
            return ours.result(), theirs.result()

        yield observed


def assert_same(client: str, scenario: str, ours: Observed, theirs: Observed) -> None:
    diffs = [
        f"  {key}:\n    headwater:   {json.dumps(ours.get(key), sort_keys=True)}\n"
        f"    nats-server: {json.dumps(theirs.get(key), sort_keys=True)}"
        for key in sorted(set(ours) | set(theirs))
        if ours.get(key) != theirs.get(key)
    ]
    assert not diffs, f"{client} sees headwater differ from nats-server in {scenario}:\n" + (
        "\n".join(diffs)
    )


@contextmanager
def both_clusters(
    run: ClusterRun, pair: tuple[Cluster, Cluster]
) -> Iterator[Callable[[str], tuple[Observed, Observed]]]:
    """``observed(scenario)``: (headwater, nats-server) observations of a cluster scenario,
    both runs concurrent."""
    hw, nats = pair
    with ThreadPoolExecutor(max_workers=2) as pool:

        def observed(scenario: str) -> tuple[Observed, Observed]:
            ours = pool.submit(run, hw, scenario)
            theirs = pool.submit(run, nats, scenario)
            return ours.result(), theirs.result()

        yield observed


def check_cluster_jetstream(o: Observed, domain: object) -> None:
    """What the nats.go and nats.js cluster-jetstream scenarios observe alike (``domain``:
    the empty domain as each client reports it); each test checks its client's own forms
    (errors, empty fetches) after this."""
    assert o["add_s1"]["cluster"] == {"name": "hwtest", "has_leader": True, "replicas": 0}
    assert [a["seq"] for a in o["pub_acks_s2"]] == [1, 2, 3, 4, 5]
    assert o["pub_duplicate_s3"] == {
        "stream": "IOP_CLUSTER",
        "seq": 3,
        "duplicate": True,
        "domain": domain,
    }
    assert o["pub_s3"]["seq"] == 6
    assert [i["state"]["msgs"] for i in o["info_via"]] == [6, 6, 6]
    fetched = o["fetch_s3"]
    assert isinstance(fetched, list), f"fetch through s3 failed: {fetched}"
    assert [m["data"] for m in fetched] == [*(f"js-{i}" for i in range(1, 6)), "js-b"]
    assert [m["subject"] for m in fetched] == ["iop.cl.js.a"] * 5 + ["iop.cl.js.b"]
    assert [m["pending"] for m in fetched] == [5, 4, 3, 2, 1, 0]
    info = o["consumer_info_s1"]
    assert (info["num_ack_pending"], info["ack_floor_stream"]) == (0, 6)
    assert o["consumer_names_s2"] == ["pull3"]
    assert o["kv_put_s1"] == 1
    assert o["kv_get_s3"]["value"] == "v1" and o["kv_get_s3"]["revision"] == 1
    assert o["kv_update_s2"] == 2
    assert o["kv_get_s3_after"]["value"] == "v2"
