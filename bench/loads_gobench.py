"""gobench (nats.go) as the load: fast enough that the server, not the client, is measured.

Its source is bench/gobench/main.go. The binary is a cache outside the repository
(``$GOBENCH``, default /tmp/headwater-gobench/gobench), built on demand the way
tests/interop builds its nats.go program: offline, in GOPATH mode, against Debian's nats.go
(``golang-github-nats-io-go-nats-dev``). When Go or that package is missing (a fresh CI
machine), they are apt-get installed first. A stamp file beside the binary holds the hash of
the source and the Go version it was built from, so an edited source is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from results import Throughput

SOURCE = Path(__file__).resolve().parent / "gobench" / "main.go"
GOPATH = Path("/usr/share/gocode")
NATS_GO = GOPATH / "src" / "github.com" / "nats-io" / "nats.go"
APT_PACKAGES = ["golang-go", "golang-github-nats-io-go-nats-dev"]
DEFAULT_BINARY = Path(tempfile.gettempdir()) / "headwater-gobench" / "gobench"


class GobenchUnavailable(RuntimeError):
    """gobench could not be built (no Go or nats.go and no way to install them, or go failed)."""


def gobench_path() -> Path:
    return Path(os.environ.get("GOBENCH", str(DEFAULT_BINARY)))


def _toolchain_ready() -> bool:
    return shutil.which("go") is not None and (NATS_GO / "js.go").is_file()


def _run(
    cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, check=False, env=env, cwd=cwd
    )


def _install_toolchain() -> None:
    """apt-get install Go and nats.go (Debian packages only, as root)."""
    if os.geteuid() != 0:
        raise GobenchUnavailable(
            f"Go or nats.go is missing and not root: apt-get install {' '.join(APT_PACKAGES)}"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *APT_PACKAGES]):
        done = _run(cmd, env=env)
        if done.returncode != 0:
            raise GobenchUnavailable(f"{' '.join(cmd)} failed:\n{done.stderr.strip()[-2000:]}")
    if not _toolchain_ready():
        raise GobenchUnavailable(f"Go or nats.go still missing after installing {APT_PACKAGES}")


def _fingerprint() -> str:
    """What the binary is built from: the source and the Go toolchain."""
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(_run(["go", "version"]).stdout.encode())
    return h.hexdigest()


def ensure_gobench() -> Path:
    """The gobench binary, built first if it is missing or its source changed since."""
    binary = gobench_path()
    stamp = binary.with_name(binary.name + ".built-from")
    if not SOURCE.is_file():
        raise GobenchUnavailable(f"{SOURCE} is missing")
    if not _toolchain_ready():
        _install_toolchain()
    fingerprint = _fingerprint()
    if binary.is_file() and stamp.is_file() and stamp.read_text().strip() == fingerprint:
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.partial")
    # GOPATH mode: nats.go resolves from the Debian package, no module is downloaded.
    env = dict(os.environ, GO111MODULE="off", GOPATH=str(GOPATH), GOFLAGS="")
    env.setdefault("GOCACHE", str(Path(tempfile.gettempdir()) / "headwater-gocache"))
    done = _run(["go", "build", "-o", str(partial), SOURCE.name], cwd=SOURCE.parent, env=env)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        tail = (done.stdout + done.stderr).strip()[-2000:]
        raise GobenchUnavailable(f"building gobench failed (exit {done.returncode}):\n{tail}")
    os.replace(partial, binary)  # atomic: a concurrent run sees the old binary or the new one
    stamp.write_text(fingerprint + "\n")
    return binary


def gobench(
    binary: Path,
    url: str,
    scenario: str,
    msgs: int,
    size: int,
    extra: list[str] | None = None,
    timeout: float = 180,
    sub_url: str | None = None,
) -> tuple[Throughput, str]:
    """Run one gobench scenario; returns the run and the client library.

    ``extra`` carries scenario flags such as ``-storage memory`` or ``-window 256``;
    ``sub_url`` puts core_pubsub's subscriber on another server of a cluster (``-sub-url``).
    """
    where = ["-sub-url", sub_url] if sub_url is not None else []
    done = subprocess.run(
        [
            str(binary),
            "-url",
            url,
            *where,
            "-scenario",
            scenario,
            "-msgs",
            str(msgs),
            "-size",
            str(size),
            *(extra or []),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"gobench {scenario} failed: {done.stderr.strip() or done.stdout}")
    line = done.stdout.strip().splitlines()[-1]
    result = json.loads(line)
    run = Throughput(msgs=int(result["received"]), seconds=result["seconds"], ok=result["ok"])
    return run, str(result.get("client", "nats.go"))
