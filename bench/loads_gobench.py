"""gobench (nats.go) as the load: fast enough that the server, not the client, is measured.

The binary lives outside the repo (default /tmp/gobench, or $GOBENCH) and is built on demand
with shared/bench/build-gobench.sh, which installs Go and nats.go from Debian packages when
they are missing: CI machines and new sessions start without the binary.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from results import Throughput

REPO = Path(__file__).resolve().parent.parent
SHARED_BENCH = REPO.parent / "shared" / "bench"
BUILD_SCRIPT = SHARED_BENCH / "build-gobench.sh"
SOURCE = SHARED_BENCH / "gobench" / "main.go"


class GobenchUnavailable(RuntimeError):
    """gobench could not be built (no build script, or apt/go failed)."""


def gobench_path() -> Path:
    return Path(os.environ.get("GOBENCH", "/tmp/gobench"))


def ensure_gobench() -> Path:
    """The gobench binary, built first if it is missing or older than its source."""
    binary = gobench_path()
    fresh = binary.exists() and (
        not SOURCE.exists() or binary.stat().st_mtime >= SOURCE.stat().st_mtime
    )
    if fresh:
        return binary
    if not BUILD_SCRIPT.exists():
        raise GobenchUnavailable(f"{binary} is missing and {BUILD_SCRIPT} does not exist")
    # The script apt-installs golang-go and nats.go when absent (root on these machines).
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), str(binary)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 or not binary.exists():
        tail = (done.stdout + done.stderr).strip()[-2000:]
        raise GobenchUnavailable(f"building gobench failed (exit {done.returncode}):\n{tail}")
    return binary


def gobench(
    binary: Path,
    url: str,
    scenario: str,
    msgs: int,
    size: int,
    extra: list[str] | None = None,
    timeout: float = 180,
) -> tuple[Throughput, str]:
    """Run one gobench scenario; returns the run and the client library.

    ``extra`` carries scenario flags such as ``-storage memory`` or ``-window 256``.
    """
    done = subprocess.run(
        [
            str(binary),
            "-url",
            url,
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
