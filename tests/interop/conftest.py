"""Builds ``gojs`` (tests/interop/gojs/main.go), a nats.go program that runs one JetStream
scenario and prints what the client saw as one JSON object; and prepares the same for nats.js
(tests/interop/js/scenario.mjs, see ``natsjs_dir`` below).

nats.go comes from Debian (``golang-github-nats-io-go-nats-dev``, nats.go 1.22.1) and is built
offline in GOPATH mode, so no Go module is downloaded. When Go or the package is missing (a
fresh CI machine), the session installs them with apt-get. The binary is cached in the temp
directory under a name keyed by the hash of its source, the nats.go sources and the Go
version, so later runs skip the build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from interop.differential import Run, run_scenario

SOURCE = Path(__file__).parent / "gojs" / "main.go"
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
    h = hashlib.sha256(SOURCE.read_bytes())
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
        ["go", "build", "-o", str(partial), SOURCE.name],
        cwd=SOURCE.parent,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        pytest.fail(f"building {SOURCE} failed:\n{proc.stdout}{proc.stderr}")
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


# ---------------------------------------------------------------------------------------
# nats.js: tests/interop/js/scenario.mjs with the npm packages pinned in package-lock.json

JS_DIR = Path(__file__).parent / "js"
JS_SCRIPT = JS_DIR / "scenario.mjs"
JS_MANIFESTS = ("package.json", "package-lock.json")


def prepare_natsjs() -> Path:
    """``npm ci`` the pinned packages into a temp directory keyed by the manifests' hash.

    The directory lives outside the repository and is reused while the lock file is
    unchanged. The scenario script is copied next to its ``node_modules`` (under a name keyed
    by its own hash) so that Node resolves the packages from there. pytest.fail (never skip)
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
    source = JS_SCRIPT.read_bytes()
    script = target / f"scenario-{hashlib.sha256(source).hexdigest()[:16]}.mjs"
    if not script.is_file():
        tmp = script.with_name(f"{script.name}.{os.getpid()}.partial")
        tmp.write_bytes(source)
        os.replace(tmp, script)
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
