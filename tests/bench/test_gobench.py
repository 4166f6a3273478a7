"""gobench, the nats.go load generator of the benchmarks, is built from this repository alone.

A user's clone has nothing beside it, so the source (bench/gobench/main.go) and the build
(bench/loads_gobench.py) must not reach outside the repository. Each scenario the benchmarks
use runs once, with small counts, against both servers and must print the JSON line that
loads_gobench reads; core_pubsub also across a route (``-sub-url``, issue 17), on a 2-server
cluster of each kind, and js_pub_async into a stream the caller placed (``-existing-stream``)
through the server holding it and through another one, on a 3-server JetStream cluster.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.testing import ServerProcess

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import js_cluster_bench  # noqa: E402  (bench/ is a directory of scripts, not a package)
import loads_gobench  # noqa: E402
import servers  # noqa: E402

MSGS = 2_000


def test_source_and_build_stay_inside_the_repo() -> None:
    assert loads_gobench.SOURCE == REPO / "bench" / "gobench" / "main.go"
    assert loads_gobench.SOURCE.is_file()
    # The build names no path outside the repository (no sibling checkout beside it).
    text = (REPO / "bench" / "loads_gobench.py").read_text()
    assert "shared" not in text
    # The built binary lives outside the working tree (a cache, never a repo file).
    assert REPO not in loads_gobench.gobench_path().resolve().parents


@pytest.fixture(scope="module")
def gobench() -> Path:
    return loads_gobench.ensure_gobench()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("scenario", "extra"),
    [
        ("core_pub", []),
        ("core_pubsub", []),
        ("js_pub_async", ["-storage", "memory", "-window", "256"]),
        ("js_pub_async", ["-storage", "file", "-window", "4000"]),
        ("js_fetch", ["-storage", "file", "-batch", "500"]),
    ],
)
def test_every_scenario_runs(
    gobench: Path, js_server: ServerProcess, scenario: str, extra: list[str]
) -> None:
    run, client = loads_gobench.gobench(gobench, js_server.url, scenario, MSGS, 16, extra, 120)
    assert run.ok and run.msgs == MSGS and run.seconds > 0, (scenario, run)
    assert re.fullmatch(r"nats\.go \d+\.\d+\.\d+", client), client


@pytest.fixture(params=servers.KINDS)
def pair(request: pytest.FixtureRequest) -> Iterator[list[ServerProcess]]:
    """Two meshed servers of one kind (headwater, then nats-server)."""
    with servers.cluster_starting(request.param, 2) as started:
        servers.wait_meshed(started.servers)
        yield started.servers


@pytest.mark.timeout(120)
def test_core_pubsub_across_a_route(gobench: Path, pair: list[ServerProcess]) -> None:
    # Publisher on the first server, subscriber on the second: every message crosses the route,
    # including the first ones (gobench waits for the interest to arrive before timing).
    pub_url, sub_url = pair[0].url, pair[1].url
    run, _ = loads_gobench.gobench(gobench, pub_url, "core_pubsub", MSGS, 16, sub_url=sub_url)
    assert run.ok and run.msgs == MSGS and run.seconds > 0, run


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", servers.KINDS)
def test_js_pub_async_into_an_existing_stream_through_either_server(
    gobench: Path, kind: str
) -> None:
    # The stream is created once, through the first server; gobench publishes into it through
    # the server holding it and through one that does not (every publish and ack then crosses
    # a route), purging it first each time: each run must store exactly its own messages.
    with js_cluster_bench.js_cluster(kind, f"gb{kind}") as cluster:
        leader = js_cluster_bench.create_stream(cluster.urls[0], cluster.urls)
        host, other = js_cluster_bench.host_and_other(cluster, leader)
        assert host != other and cluster.names[host] == leader
        flags = ["-existing-stream", "-window", "256"]
        for url in (cluster.urls[other], cluster.urls[host], cluster.urls[other]):
            run, _ = loads_gobench.gobench(gobench, url, "js_pub_async", MSGS, 16, flags, 120)
            assert run.ok and run.msgs == MSGS and run.seconds > 0, (url, run)
        # The stream is the caller's: it is still there, in the place it was created.
        info = js_cluster_bench.js_api(cluster.urls[other], "$JS.API.STREAM.INFO.GOBENCH")
        assert info["cluster"]["leader"] == leader and info["state"]["messages"] == MSGS, info


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["-scenario", "nope"], "nope"),
        # Only core_pubsub has a subscriber to place; elsewhere the flag is refused, not ignored.
        (["-scenario", "core_pub", "-sub-url", "nats://127.0.0.1:1"], "core_pubsub only"),
        # The caller's stream: only js_pub_async uses one, and its config is not gobench's.
        (["-scenario", "js_fetch", "-existing-stream"], "js_pub_async only"),
        (["-scenario", "js_pub_async", "-existing-stream", "-storage", "memory"], "-storage"),
    ],
)
def test_bad_flags_fail_with_the_reason(gobench: Path, args: list[str], reason: str) -> None:
    done = subprocess.run([str(gobench), *args], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and reason in done.stderr, done.stderr
