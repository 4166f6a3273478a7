"""What the interop suites share: running a client's scenario program and reading the one JSON
object it prints, running a scenario against both servers at once, and comparing the two."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from headwater.testing import ServerProcess

Observed = dict[str, Any]
Run = Callable[[str, str], Observed]
"""``run(url, scenario)``: what the client saw."""


def run_scenario(client: str, command: list[str], cwd: Path | None = None) -> Observed:
    """Run one scenario program; its observations, or a test failure naming where it stopped."""
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=90)
    try:
        observed: Observed = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"{client} {command[-2:]} printed no JSON (exit {proc.returncode}):\n"
            f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
        )
    if proc.returncode != 0 or "fatal" in observed:
        pytest.fail(
            f"{client} {command[-2:]} stopped at {observed.get('fatal')} "
            f"(exit {proc.returncode}); observed so far: {json.dumps(observed)[:3000]}\n"
            f"stderr: {proc.stderr[-2000:]}"
        )
    return observed


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
