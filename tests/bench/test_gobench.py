"""gobench, the nats.go load generator of the benchmarks, is built from this repository alone.

A user's clone has nothing beside it, so the source (bench/gobench/main.go) and the build
(bench/loads_gobench.py) must not reach outside the repository. Each scenario the benchmarks
use runs once, with small counts, against both servers and must print the JSON line that
loads_gobench reads.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.testing import ServerProcess

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import loads_gobench  # noqa: E402  (bench/ is a directory of scripts, not a package)

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


def test_bad_flags_fail_with_the_reason(gobench: Path) -> None:
    done = subprocess.run(
        [str(gobench), "-scenario", "nope"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode != 0 and "nope" in done.stderr
